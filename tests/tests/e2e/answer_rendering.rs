//! How answers and tool calls look: Markdown rendered on a terminal (tmux),
//! tool calls folded with their exit code; pipes and `--json` get the text
//! exactly as the model wrote it.

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, stdout};

const ANSWER: &str = "Here is **bold news** and `cargo test`.\n\n\
                      ```rust\nfn main() { let x = \"hi\"; }\n```\n\n\
                      - [a link](https://example.com/x)\n";

#[test]
fn a_markdown_answer_on_a_terminal_is_styled_not_marked_up() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &[]) else {
        return;
    };
    pane.wait_for("›");
    model.push(Reply::text(ANSWER));
    pane.line("show me");
    let screen = pane.wait_for("a link (https://example.com/x)");
    assert!(
        screen.contains("Here is bold news and cargo test."),
        "{screen}"
    );
    assert!(!screen.contains("**"), "no literal bold marks: {screen}");
    assert!(!screen.contains("```"), "no fences: {screen}");
    assert!(screen.contains("fn main() { let x = \"hi\"; }"), "{screen}");
    assert!(screen.contains("• a link"), "{screen}");
    // Styled by agentx: bold text, a coloured keyword.
    let styled = pane.styled_screen();
    assert!(styled.contains("\x1b[1mbold news"), "{styled:?}");
    assert!(styled.contains("\x1b[35mfn"), "{styled:?}");
}

#[test]
fn a_finished_command_on_a_terminal_is_folded_with_its_exit_code() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    pane.line("CALL seq 1 20");
    pane.wait_for("$ seq 1 20  ✓ exit 0 · 20 lines");
    let screen = pane.wait_for("  │ 20\n");
    assert!(screen.contains("… 16 earlier lines"), "{screen}");
    assert!(
        screen.contains("  │ 17\n") && screen.contains("  │ 20\n"),
        "{screen}"
    );
    assert!(
        !screen.contains("  │ 16\n"),
        "only the last lines: {screen}"
    );
    assert!(!screen.contains("» shell"), "one block per call: {screen}");
}

#[test]
fn piped_and_json_answers_are_the_model_s_text_exactly() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::text(ANSWER));
    let out = env.chat(&model, Vec::<&str>::new(), "show me\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), ANSWER, "piped: as written");
    model.push(Reply::text(ANSWER));
    let out = env.chat(&model, ["exec", "--json", "show me"], "");
    assert_code(&out, 0);
    let said = stdout(&out);
    let result: serde_json::Value = serde_json::from_str(said.lines().last().unwrap()).unwrap();
    assert_eq!(result["text"], ANSWER, "{said}");
}

#[test]
fn a_one_shot_on_a_terminal_renders_markdown_too() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::text(ANSWER));
    let Some(pane) = Pane::start(&env, &model, &["exec", "show me"]) else {
        return;
    };
    let screen = pane.wait_for("a link (https://example.com/x)");
    assert!(
        screen.contains("Here is bold news and cargo test."),
        "{screen}"
    );
    assert!(
        !screen.contains("**") && !screen.contains("```"),
        "{screen}"
    );
}
