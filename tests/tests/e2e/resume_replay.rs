//! What resuming shows of the last exchanges: long messages cut to their first lines,
//! and a turn that did not finish marked as such, not shown with its answer missing.

use std::time::Duration;

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code, stderr};

#[test]
fn long_messages_are_cut_and_an_unfinished_turn_is_marked() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let long: Vec<String> = (1..=20).map(|n| format!("answer line {n}")).collect();
    model.push(Reply::text(long.join("\n")));
    assert_code(
        &env.chat(&model, ["--approval", "never"], "tell me a lot\n"),
        0,
    );
    let out = env.chat(&model, ["--approval", "never"], "");
    assert_code(&out, 0);
    let shown = stderr(&out);
    assert!(shown.contains("answer line 6"), "{shown}");
    assert!(!shown.contains("answer line 7"), "{shown}");
    assert!(shown.contains("… 14 more lines"), "{shown}");

    // A turn agentd died in: marked interrupted on resume.
    let running = env.chat_command(&model, ["--auto"], "CALL sleep 30\n");
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while !model
        .requests()
        .iter()
        .any(|r| r.body.to_string().contains("CALL sleep 30"))
    {
        assert!(
            std::time::Instant::now() < give_up,
            "the turn never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The message is committed (the turn marked open) before it is sent.
    env.kill_daemons();
    let _ = running.wait_with_output();
    let out = env.chat(&model, ["--on-pending", "new"], "");
    let shown = stderr(&out);
    assert!(shown.contains("› CALL sleep 30"), "{shown}");
    assert!(shown.contains("(interrupted: "), "{shown}");
}

#[test]
fn at_a_terminal_the_replay_shows_answers_as_markdown_and_pipes_get_them_as_written() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(
            &model,
            ["--approval", "never"],
            "**bold words** and `code`\n",
        ),
        0,
    );
    // Without a terminal: as written.
    let out = env.chat(&model, ["--approval", "never"], "");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("echo: **bold words** and `code`"),
        "{}",
        stderr(&out)
    );
    let Some(pane) = agentx_tests::tmux::Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    let screen = pane.wait_for("›");
    let screen = if screen.contains("echo:") {
        screen
    } else {
        pane.wait_for("echo:")
    };
    assert!(screen.contains("echo: bold words and code"), "{screen}");
    assert!(!screen.contains("echo: **bold"), "{screen}");
}
