//! Nothing from outside drives the user's terminal: escape sequences in the
//! model's answer, a tool's output, a command line and a server's error
//! reach stdout and stderr as visible text, never as raw control bytes.

use serde_json::json;

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code};

/// Every class of sequence a terminal obeys: OSC 52 (clipboard), OSC 0
/// (title), OSC 8 (link), CSI (clear, cursor), DCS (a query whose reply
/// arrives as keyboard input), C1 CSI, BEL, NUL, a bare CR.
const HOSTILE: &str = "A\u{1b}]52;c;aGFja2Vk\u{7}B\u{1b}]0;pwned\u{1b}\\C\u{1b}]8;;http://x\u{1b}\\D\
\u{1b}[2J\u{1b}[HE\u{1b}P+q544e\u{1b}\\F\u{9b}31mG\u{0}H\rI";

/// No raw control byte but line breaks and tabs in `bytes`.
fn assert_inert(bytes: &[u8], surface: &str) {
    let text = String::from_utf8_lossy(bytes);
    let raw: Vec<char> = text
        .chars()
        .filter(|c| (*c < ' ' && *c != '\n' && *c != '\t') || ('\u{7f}'..='\u{9f}').contains(c))
        .collect();
    assert!(
        raw.is_empty(),
        "{surface} wrote raw control characters {raw:?}:\n{text}"
    );
}

#[test]
fn answers_tool_output_commands_and_errors_reach_the_terminal_inert() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // The answer, in the REPL (piped) and in a one-shot.
    model.push(Reply::text(HOSTILE));
    let out = env.chat(&model, [] as [&str; 0], "hello\n");
    assert_code(&out, 0);
    assert_inert(&out.stdout, "the REPL's answer");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\\x1b]52;"));
    model.push(Reply::text(HOSTILE));
    let out = env.chat(&model, ["exec", "hello"], "");
    assert_code(&out, 0);
    assert_inert(&out.stdout, "exec's answer");
    // A command line and its output, in both.
    let printf = "printf 'X\\033]52;c;aGk=\\007Y\\033[2JZ\\n'";
    for args in [vec!["--auto"], vec!["exec", "--auto", "go"]] {
        model.push(Reply::tool_call(
            "shell",
            json!({ "command": format!("{printf} # \u{1b}]0;title\u{7}") }),
        ));
        model.push(Reply::text("done"));
        let out = env.chat(&model, &args, "go\n");
        assert_code(&out, 0);
        assert_inert(&out.stdout, "stdout around a tool call");
        assert_inert(&out.stderr, "a tool call and its output");
    }
    // A server's error message.
    model.push(Reply::http_error(400, None, HOSTILE));
    let out = env.chat(&model, ["exec", "hello"], "");
    assert_code(&out, 1);
    assert_inert(&out.stderr, "an error message");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\\x1b"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
