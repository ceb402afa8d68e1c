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
