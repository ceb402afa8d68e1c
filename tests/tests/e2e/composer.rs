//! The composer that lives through a turn, in a real terminal (tmux): the
//! pane at the bottom, queued messages edited or dropped, Shift-Enter.

use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;
use agentx_tests::tmux::Pane;

use crate::terminal_ui::{gated_call, sent};

/// Waits until the screen no longer shows `needle` (the screen then);
/// panics with the screen after 20 s.
fn wait_gone(pane: &Pane, needle: &str) -> String {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let screen = pane.screen();
        if !screen.contains(needle) {
            return screen;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the screen still shows {needle:?}:\n{screen}"
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
}

#[test]
fn queued_messages_are_shown_edited_with_up_and_dropped_with_ctrl_x() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&gated_call(&gate));
    pane.wait_for("│ first-1");
    // The status line stays at the bottom while the turn runs.
    let screen = pane.wait_for("fake-model · approval auto · sandbox workspace-write");
    assert!(screen.contains("s) running"), "{screen}");
    pane.line("keep me");
    pane.line("drop me");
    pane.wait_for("queued, sent when this turn ends: keep me");
    pane.wait_for("queued, sent when this turn ends: drop me");
    // Ctrl-X drops the newest queued message.
    pane.key("C-x");
    wait_gone(&pane, "drop me");
    // Up on an empty composer takes the newest back to edit.
    pane.key("Up");
    pane.wait_for("› keep me");
    let screen = wait_gone(&pane, "queued, sent when this turn ends: keep me");
    assert!(screen.contains("│ first-1"), "{screen}");
    pane.type_text(" edited");
    pane.key("Enter");
    pane.wait_for("queued, sent when this turn ends: keep me edited");
    std::fs::write(&gate, "").unwrap();
    pane.wait_for("› keep me edited  (queued)");
    pane.wait_for("echo: keep me edited");
    assert!(!sent(&model, "drop me"), "{}", pane.screen());
    assert!(!sent(&model, "keep me"), "{}", pane.screen());
}

#[test]
fn shift_enter_inserts_a_newline_in_the_composer() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    let gate = env.root().join("gate");
    pane.line(&gated_call(&gate));
    pane.wait_for("│ first-1");
    pane.type_text("one");
    // Shift-Enter as a terminal speaking the kitty keyboard protocol sends it.
    pane.type_text("\x1b[13;2u");
    pane.type_text("two");
    let screen = pane.wait_for("  two");
    assert!(screen.contains("› one"), "{screen}");
    pane.key("Enter");
    pane.wait_for("queued, sent when this turn ends: one");
    std::fs::write(&gate, "").unwrap();
    pane.wait_for("echo: one");
    assert!(sent(&model, "one\ntwo"), "{}", pane.screen());
}
