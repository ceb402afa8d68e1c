//! The chat's terminal UI as a Codex or Claude Code user meets it, in a real
//! terminal (tmux): approvals, interrupting, typing ahead, history, failures.

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, stderr};

/// A command that prints `first-1`, waits for the file `gate`, then prints
/// `second-2` (the arithmetic keeps the echoed command line from matching).
pub(crate) fn gated_call(gate: &std::path::Path) -> String {
    format!(
        "CALL echo first-$((0+1)); while [ ! -e {} ]; do sleep 0.05; done; echo second-$((1+1))",
        gate.display()
    )
}

/// Whether the model was sent `message` whole, as one JSON string.
pub(crate) fn sent(model: &FakeModel, message: &str) -> bool {
    let quoted = serde_json::Value::from(message).to_string();
    model
        .requests()
        .iter()
        .any(|r| r.body.to_string().contains(&quoted))
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
    pane.wait_for("✓ exit 0 · 2 lines");
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
    pane.wait_for("✓ exit 0 · 1 line");
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
    // The status line after the turn: meter, model, approval mode, title.
    pane.wait_for("· fake-model · approval never · sandbox workspace-write · an earlier talk");
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

#[test]
fn esc_interrupts_a_running_turn_and_the_next_message_arrives_whole() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&gated_call(&gate));
    pane.wait_for("│ first-1");
    pane.key("Escape");
    pane.wait_for("cancelling the turn");
    pane.wait_for_n("›", 2);
    pane.line("CALL echo after-$((1+2))");
    pane.wait_for("│ after-3");
    let screen = pane.screen();
    assert!(!screen.contains("^["), "{screen}");
    assert!(sent(&model, "CALL echo after-$((1+2))"), "{screen}");
    // The interrupted command never got its gate.
    assert!(!screen.contains("second-2"), "{screen}");
}

#[test]
fn typing_during_a_turn_is_kept_out_of_it_queued_and_sent_after() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&gated_call(&gate));
    pane.wait_for("│ first-1");
    pane.line("typed ahead");
    pane.type_text("half a thought");
    pane.wait_for("queued, sent when this turn ends: typed ahead");
    // What is being typed shows under the running command, which goes on.
    let screen = pane.wait_for("› half a thought");
    assert!(screen.contains("│ first-1"), "{screen}");
    assert!(screen.contains("s) running"), "{screen}");
    // Not echoed where the turn writes: only the note shows the queued line.
    assert_eq!(screen.matches("typed ahead").count(), 1, "{screen}");
    assert_eq!(screen.matches("half a thought").count(), 1, "{screen}");
    std::fs::write(&gate, "").unwrap();
    pane.wait_for("› typed ahead  (queued)");
    pane.wait_for("echo: typed ahead");
    // What was typed without Enter waits in the prompt, to edit or send.
    pane.wait_for_n("› half a thought", 1);
    pane.wait_for("echo: typed ahead");
    pane.type_text("!");
    pane.key("Enter");
    pane.wait_for("echo: half a thought!");
}

#[test]
fn alt_enter_ctrl_j_and_a_trailing_backslash_insert_newlines() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("›");
    pane.type_text("one");
    pane.key("M-Enter");
    pane.type_text("two");
    pane.key("C-j");
    pane.type_text("three\\");
    pane.key("Enter");
    pane.type_text("four");
    pane.key("Enter");
    pane.wait_for("four");
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.status()["turns"] != 1 {
        assert!(std::time::Instant::now() < give_up, "{}", pane.screen());
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    assert!(sent(&model, "one\ntwo\nthree\nfour"), "{}", pane.screen());
}

#[test]
fn approval_is_one_key_and_esc_there_interrupts() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "ask"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("CALL echo one-$((0+1))");
    pane.wait_for("run it?");
    // One key, no Enter.
    pane.type_text("y");
    pane.wait_for("│ one-1");
    pane.wait_for_n("›", 2);
    pane.line("CALL echo two-$((1+1))");
    pane.wait_for_n("run it?", 2);
    pane.key("Escape");
    pane.wait_for("interrupted");
    let screen = pane.screen();
    assert!(!screen.contains("│ two-2"), "{screen}");
}

#[test]
fn always_shows_in_status_and_approvals_takes_it_back_or_changes_the_mode() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "ask"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("CALL echo one-$((0+1))");
    pane.wait_for("run it?");
    pane.type_text("a");
    pane.wait_for("│ one-1");
    pane.wait_for("· fake-model · approval auto (always, this conversation)");
    pane.wait_for_n("›", 2);
    pane.line("/status");
    let screen = pane.wait_for("tool env");
    assert!(
        screen.contains("approval auto (always, this conversation)"),
        "{screen}"
    );
    pane.line("/approvals");
    pane.wait_for("— /approvals ask, auto or never changes it");
    // Taken back: the next command is asked again.
    pane.line("/approvals ask");
    pane.wait_for("[a]lways is taken back");
    pane.line("CALL echo two-$((1+1))");
    pane.wait_for_n("run it?", 2);
    pane.type_text("n");
    pane.wait_for("declined");
    // auto for this chat: no question.
    pane.line("/approvals auto");
    pane.wait_for("approval auto for this chat");
    pane.line("CALL echo three-$((1+2))");
    let screen = pane.wait_for("│ three-3");
    assert_eq!(screen.matches("run it?").count(), 2, "{screen}");
}

#[test]
fn export_to_a_md_file_writes_markdown_and_undo_refuses_extra_words() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "keep this\n"), 0);
    let md = env.work.join("conv.md");
    assert_code(&env.run(["export", "-o", md.to_str().unwrap()]), 0);
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(!text.trim_start().starts_with('{'), "{text}");
    assert!(text.contains("keep this"), "{text}");
    // --format still wins.
    let json = env.work.join("conv2.md");
    assert_code(
        &env.run(["export", "--format", "json", "-o", json.to_str().unwrap()]),
        0,
    );
    assert!(std::fs::read_to_string(&json).unwrap().starts_with('{'));

    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("keep this");
    pane.line("/undo extra");
    pane.wait_for("/undo takes nothing or `force`, not \"extra\"");
    // The /resume picker numbers its rows as `/resume N` takes them.
    pane.line("/resume");
    pane.wait_for("resume (arrows or a number");
    pane.wait_for("> 1  ");
    pane.key("Escape");
}

#[test]
fn esc_esc_opens_one_rewind_menu_for_code_and_conversation_and_gives_the_message_back() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for name in ["one", "two", "three"] {
        let out = env.chat(
            &model,
            ["--auto"],
            &format!("CALL echo {name} > {name}.txt\n"),
        );
        agentx_tests::assert_code(&out, 0);
    }
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    // The prompt itself, after the three exchanges shown on resume (keys
    // sent before it are read as typed ahead, not by the editor).
    pane.wait_for_n("›", 4);
    open_rewind_menu(&pane);
    // The newest first: message 2 is `two`.
    pane.key("Down");
    pane.key("Enter");
    pane.wait_for("what to put back");
    pane.key("Enter");
    pane.wait_for("rewind these changes?");
    pane.line("y");
    pane.wait_for("code restored, conversation rolled back");
    // The message is back in the prompt, to edit and send again.
    pane.wait_for("› CALL echo two > two.txt");
    assert!(env.work.join("one.txt").exists());
    assert!(!env.work.join("two.txt").exists() && !env.work.join("three.txt").exists());
    assert_eq!(env.status()["turns"], 1);
    pane.key("Enter");
    // The history shown at start holds the first answer to it.
    let screen = pane.wait_for_n("echo: CALL echo two > two.txt [turns seen: 2]", 2);
    assert!(env.work.join("two.txt").exists(), "{screen}");
}

/// Opens the rewind menu with Esc Esc: two presses, as a person makes them
/// (not one escape sequence).
fn open_rewind_menu(pane: &Pane) {
    pane.key("Escape");
    std::thread::sleep(std::time::Duration::from_millis(300));
    pane.key("Escape");
    pane.wait_for("rewind to before which message");
}

/// The text a request carried: instructions and every input item.
fn request_text(body: &serde_json::Value) -> String {
    let mut out = body["instructions"].as_str().unwrap_or_default().to_owned();
    for item in body["input"].as_array().into_iter().flatten() {
        out.push('\n');
        out.push_str(&item.to_string());
    }
    out
}

#[test]
fn summarize_from_here_in_the_rewind_menu_compacts_only_what_follows_the_message() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for name in ["alpha", "bravo", "charlie"] {
        let out = env.chat(&model, ["--auto"], &format!("message {name}\n"));
        agentx_tests::assert_code(&out, 0);
    }
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for_n("›", 4);
    open_rewind_menu(&pane);
    // Message 2 is `bravo`: it and `charlie` are summarized.
    pane.key("Down");
    pane.key("Enter");
    pane.wait_for("what to put back");
    for _ in 0..3 {
        pane.key("Down");
    }
    pane.key("Enter");
    pane.wait_for("— compacted: ");
    // The summary request (no tools) saw bravo and charlie, not alpha.
    let summary = model
        .requests()
        .iter()
        .rev()
        .find(|r| r.body.get("tools").is_none())
        .map(|r| request_text(&r.body))
        .expect("no summary request");
    assert!(summary.contains("message charlie"), "{summary}");
    assert!(summary.contains("message bravo"), "{summary}");
    assert!(!summary.contains("message alpha"), "{summary}");
    // Nothing was rolled back: three turns, the files and transcript kept.
    assert_eq!(env.status()["turns"], 3);
    // The chosen message is back in the prompt, to edit or clear.
    pane.wait_for_n("›", 5);
    pane.type_text(" (edited)");
    pane.wait_for("› message bravo (edited)");
    pane.key("C-u");
    pane.line("message delta");
    pane.wait_for("echo: message delta");
    // The next request carries alpha as it was, then the handoff.
    let next = request_text(&model.requests().last().unwrap().body);
    assert!(next.contains("\"message alpha\""), "{next}");
    assert!(next.contains("[agentx handoff]"), "{next}");
    assert!(!next.contains("\"message bravo\""), "{next}");
}
