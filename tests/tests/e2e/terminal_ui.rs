//! The chat's terminal UI as a Codex or Claude Code user meets it, in a real
//! terminal (tmux): approvals, interrupting, typing ahead, history, failures.

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, stderr};

/// A command that prints `first-1`, waits for the file `gate`, then prints
/// `second-2` (the arithmetic keeps the echoed command line from matching).
fn gated_call(gate: &std::path::Path) -> String {
    format!(
        "CALL echo first-$((0+1)); while [ ! -e {} ]; do sleep 0.05; done; echo second-$((1+1))",
        gate.display()
    )
}

#[test]
fn an_approved_command_shows_its_timer_and_live_output_as_with_auto() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "ask"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&gated_call(&gate));
    pane.wait_for("run it?");
    pane.line("y");
    // Seen while the command still runs (it waits for the gate).
    let screen = pane.wait_for("│ first-1");
    assert!(screen.contains("s) running"), "no timer: {screen}");
    assert!(!screen.contains("second-2"), "{screen}");
    std::fs::write(&gate, "").unwrap();
    pane.wait_for("exit 0, 2 lines of output");
}

#[test]
fn prompt_history_keeps_messages_not_answers_to_questions() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "ask"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("CALL echo asked-$((2+2))");
    pane.wait_for("run it?");
    pane.line("y");
    pane.wait_for("exit 0, 1 line of output");
    pane.wait_for_n("›", 2);
    // Up brings back the message, not the `y`.
    let before = pane.screen().matches("CALL echo asked").count();
    pane.key("Up");
    pane.wait_for_n("CALL echo asked", before + 1);
    pane.key("C-u");
    pane.key("C-d");
    drop(pane);
    let kept = std::fs::read_to_string(env.home.join("history")).unwrap();
    assert_eq!(kept, "CALL echo asked-$((2+2))\n");
}

#[test]
fn a_failed_turn_ends_with_one_line_and_the_next_message_is_sent() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::http_error(
        400,
        Some("invalid_request_error"),
        "scripted bad request",
    ));
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("this one fails");
    let screen = pane.wait_for("scripted bad request");
    let line = screen
        .lines()
        .find(|l| l.contains("scripted bad request"))
        .unwrap();
    for hint in ["/retry", "/rollback", "/new", "/clear"] {
        assert!(line.contains(hint), "{line}");
    }
    // No menu: the next thing typed is a message, and it is answered.
    pane.line("next question");
    let screen = pane.wait_for("echo: next question");
    assert!(!screen.contains("please answer"), "{screen}");
    assert!(!screen.contains("or Enter to go on"), "{screen}");
}

#[test]
fn each_retry_of_a_failing_model_server_is_one_line() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let long = format!("upstream overloaded: {}", "busy ".repeat(60));
    for _ in 0..8 {
        model.push(Reply::http_error(503, None, &long));
    }
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("hello");
    let screen = pane.wait_for("agentx: the turn failed");
    let retries: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("agentx: retrying"))
        .collect();
    assert!(!retries.is_empty(), "{screen}");
    // capture-pane -J joins wrapped lines: a wrapped one is wider than the pane.
    for line in retries {
        assert!(line.chars().count() <= 160, "wrapped: {line}");
    }
    // The whole cause is said once, with the failure.
    assert!(screen.contains(long.trim_end()), "{screen}");
}

#[test]
fn undo_being_off_in_the_home_folder_or_root_is_said_at_start() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never", "-C", "/"]) else {
        return;
    };
    let screen = pane.wait_for("›");
    assert!(screen.contains("undo is off here"), "{screen}");
    drop(pane);
    // In a project folder it is not said.
    let pane = Pane::start(&env, &model, &["--approval", "never"]).unwrap();
    let screen = pane.wait_for("›");
    assert!(!screen.contains("undo is off"), "{screen}");
}

#[test]
fn a_prompt_on_the_command_line_starts_the_chat_with_it() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "an earlier talk\n"),
        0,
    );
    let id = env.status()["session_id"].as_str().unwrap().to_owned();
    let Some(pane) = Pane::start(
        &env,
        &model,
        &["--approval", "never", "fix the failing test"],
    ) else {
        return;
    };
    pane.wait_for("echo: fix the failing test");
    pane.line("and then more");
    pane.wait_for("echo: and then more");
    // It continued the folder's conversation.
    let st = env.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    assert_eq!(st["turns"], 3, "{st}");

    // Without a terminal: the prompt, then the lines of stdin.
    let out = env.chat(&model, ["--approval", "never", "a scripted prompt"], "");
    assert_code(&out, 0);
    assert!(
        agentx_tests::stdout(&out).contains("echo: a scripted prompt"),
        "{}",
        agentx_tests::stdout(&out)
    );

    // One word is a mistyped command, not a prompt: nothing is sent.
    let out = env.run(["statsu"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("unknown command"), "{}", stderr(&out));
    assert_eq!(env.status()["turns"], 4);
}

#[test]
fn usage_errors_are_one_line_and_exit_2() {
    let env = TestEnv::new();
    for args in [
        vec!["--profile", "a/b", "status"],
        vec!["status", "--no-such-flag"],
        vec!["rollback", "not-a-number"],
    ] {
        let out = env.run(&args);
        assert_code(&out, 2);
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("agentx: "), "{args:?}: {err}");
    }
}
