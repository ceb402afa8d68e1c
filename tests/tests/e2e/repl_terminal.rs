//! The REPL in a real terminal (tmux: send-keys, capture-pane), as a person uses it:
//! /clear after a failed turn never deletes a conversation on one key.

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, json_out};

#[test]
fn clear_after_a_failed_turn_asks_naming_what_goes_and_no_keeps_it() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "keep me\n"), 0);
    let id = env.status()["session_id"].as_str().unwrap().to_owned();
    model.push(Reply::http_error(
        400,
        Some("invalid_request_error"),
        "scripted bad request",
    ));
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("keep me");
    pane.line("this one fails");
    let screen = pane.wait_for("scripted bad request");
    assert!(screen.contains("/clear deletes this one"), "{screen}");
    pane.line("/clear");
    // It asks, naming the conversation and what it holds.
    let screen = pane.wait_for("[y/N]");
    assert!(
        screen.contains(&format!("delete conversation \"keep me\" ({id}, 1 turn)?")),
        "{screen}"
    );
    pane.line("n");
    pane.wait_for("nothing changed");
    let st = env.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    assert_eq!(st["turns"], 1, "{st}");
    let hits = json_out(&env.run(["search", "keep", "--json"]));
    assert!(
        hits.to_string().contains(&id),
        "search no longer finds it: {hits}"
    );

    // Asked again and answered yes, it goes.
    pane.line("/clear");
    pane.wait_for_n("[y/N]", 2);
    pane.line("y");
    pane.wait_for("cleared");
    assert_ne!(env.status()["session_id"], id.as_str());
}

#[test]
fn prompt_history_is_kept_privately_across_sessions_without_space_led_lines() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.line("remember this line");
    pane.wait_for("echo: remember this line");
    pane.line(" sk-pasted-secret");
    pane.wait_for("echo: sk-pasted-secret");
    pane.key("C-d");
    drop(pane);
    let path = env.home.join("history");
    let kept = std::fs::read_to_string(&path).unwrap();
    assert_eq!(kept, "remember this line\n");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The next REPL has it: Up brings the line back to the prompt.
    let pane = Pane::start(&env, &model, &["--approval", "never"]).unwrap();
    // The prompt itself, after the two exchanges shown on resume: keys sent
    // before it are read as typed ahead, not by the line editor.
    pane.wait_for_n("›", 3);
    let before = pane.screen().matches("remember this line").count();
    pane.key("Up");
    pane.wait_for_n("remember this line", before + 1);
    pane.key("C-u");
    pane.key("C-d");
    drop(pane);

    // Turned off, nothing more is written.
    let mut off = env;
    off.extra_env.push(("AGENTX_HISTORY".into(), "off".into()));
    let pane = Pane::start(&off, &model, &["--approval", "never"]).unwrap();
    pane.line("not kept");
    pane.wait_for("echo: not kept");
    pane.key("C-d");
    drop(pane);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), kept);
}

#[test]
fn resume_takes_ids_where_they_are_printed_and_opens_the_picker_without_one() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "first talk\n"),
        0,
    );
    let first = env.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(
        &env.chat(&model, ["new", "--approval", "never"], "second talk\n"),
        0,
    );
    // `/resume ID` in the REPL, the id as /search prints it.
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("second talk");
    pane.line(&format!("/resume {first}"));
    pane.wait_for("first talk");
    let screen = pane.screen();
    assert!(!screen.contains("takes a number"), "{screen}");
    pane.wait_for("›");
    assert_eq!(env.status()["session_id"], first.as_str());
    pane.key("C-d");
    drop(pane);

    // `agentx resume` with no argument at a terminal: the picker; Enter
    // on the newest opens it.
    let pane = Pane::start(&env, &model, &["resume", "--approval", "never"]).unwrap();
    // The picker draws its heading, then its rows: wait for the newest row.
    pane.wait_for("resume (arrows or a number");
    pane.wait_for("second talk");
    pane.key("Enter");
    pane.wait_for("resuming");
    pane.line("after picking");
    pane.wait_for("echo: after picking");
    let st = env.status();
    assert_ne!(st["session_id"], first.as_str(), "{st}");
    assert_eq!(st["turns"], 2, "{st}");
}

#[test]
fn hints_inside_the_repl_name_slash_commands() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "make a snapshot\n"),
        0,
    );
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("make a snapshot");
    // `/rewind` opens the rewind menu; leaving it names the commands.
    pane.line("/rewind");
    pane.wait_for("rewind to before which message");
    pane.key("Escape");
    let screen = pane.wait_for("puts the folder back");
    assert!(screen.contains("`/rewind N` (or `/rewind ID`)"), "{screen}");
    assert!(!screen.contains("agentx rewind"), "{screen}");
    // The same listing at the shell names the shell command.
    let out = env.run(["rewind"]);
    assert!(
        agentx_tests::stdout(&out).contains("`agentx rewind N`"),
        "{}",
        agentx_tests::stdout(&out)
    );
}

#[test]
fn tab_completes_slash_commands_and_conversation_ids() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "older talk\n"),
        0,
    );
    let older = env.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(
        &env.chat(&model, ["new", "--approval", "never"], "newer talk\n"),
        0,
    );
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.wait_for("newer talk");
    pane.wait_for("›");
    pane.type_text("/resu");
    pane.key("Tab");
    pane.wait_for("/resume ");
    // The id's first characters it shares with no other, then Tab.
    let unique = (1..older.len())
        .map(|n| &older[..n])
        .find(|p| !env.status()["session_id"].as_str().unwrap().starts_with(p))
        .unwrap();
    pane.type_text(unique);
    pane.key("Tab");
    pane.wait_for(&format!("/resume {older}"));
    pane.key("Enter");
    pane.wait_for("older talk");
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while env.status()["session_id"] != older.as_str() {
        assert!(std::time::Instant::now() < give_up, "not resumed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn undo_offers_the_diff_before_asking() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(
            &model,
            ["--auto"],
            "CALL printf 'made by the agent\\n' > f.txt\n",
        ),
        0,
    );
    let Some(pane) = Pane::start(&env, &model, &["undo"]) else {
        return;
    };
    pane.wait_for("[y/N, d = show the diff]");
    pane.line("d");
    pane.wait_for("+made by the agent");
    pane.wait_for_n("[y/N, d = show the diff]", 2);
    pane.line("n");
    pane.wait_for("nothing changed");
    assert!(env.work.join("f.txt").exists());
}

#[test]
fn a_running_command_shows_a_timer_and_its_output_as_it_comes() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&format!(
        "CALL echo first-$((0+1)); while [ ! -e {} ]; do sleep 0.05; done; echo second-$((1+1))",
        gate.display()
    ));
    // Seen while the command still runs (it waits for the gate).
    let screen = pane.wait_for("│ first-1");
    assert!(screen.contains("running "), "{screen}");
    assert!(screen.contains("s) running"), "no timer: {screen}");
    assert!(!screen.contains("second-2"), "{screen}");
    std::fs::write(&gate, "").unwrap();
    pane.wait_for("✓ exit 0 · 2 lines");
    let screen = pane.screen();
    assert!(screen.contains("  │ second-2"), "{screen}");
}

#[test]
fn a_long_diff_on_a_terminal_is_colored_and_paged() {
    let mut env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--auto"], "CALL seq 1 200 > many.txt\n"),
        0,
    );
    let paged = env.root().join("paged");
    env.extra_env
        .push(("PAGER".into(), format!("cat > {}", paged.display())));
    let Some(pane) = Pane::start(&env, &model, &["diff"]) else {
        return;
    };
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&paged).is_ok_and(|t| t.contains("+200")) {
        assert!(
            std::time::Instant::now() < give_up,
            "never paged:\n{}",
            pane.screen()
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let text = std::fs::read_to_string(&paged).unwrap();
    assert!(text.contains("\x1b[32m+1\x1b[0m"), "not colored: {text:?}");
}
