//! Every command that prints, into a pipe whose reader is already gone
//! (`agentx … | head -1`): a quiet exit 0, never a panic or "Broken pipe".

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, stderr};

#[test]
fn every_printing_command_exits_0_quietly_into_a_closed_pipe() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Something to list, show and export, and a snapshot to list.
    assert_code(&env.chat(&model, ["--approval", "never"], "hello\n"), 0);
    let commands: &[&[&str]] = &[
        &["--help"],
        &["help"],
        &["exec", "--help"],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["completions", "fish"],
        &["man"],
        &["sessions"],
        &["sessions", "--json"],
        &["status"],
        &["status", "--json"],
        &["checkpoints"],
        &["checkpoints", "--json"],
        &["snapshots"],
        &["snapshots", "--json"],
        &["search", "hello"],
        &["search", "hello", "--json"],
        &["export"],
        &["export", "--format", "markdown"],
        &["oneshots"],
        &["daemon", "status"],
        &["daemon", "status", "--json"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = env
            .agentx(*args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "agentx {} into a closed pipe: {err}",
            args.join(" ")
        );
        assert!(
            !err.contains("panicked") && !err.to_lowercase().contains("broken pipe"),
            "agentx {}: {err}",
            args.join(" ")
        );
    }
}
