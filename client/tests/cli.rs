//! The `agentx` binary's command-line surface: help, usage errors (exit 2)
//! and errors that need no daemon. Daemon behaviour is tested in `tests/`.

use std::process::Command;

fn agentx() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentx"));
    let home = std::env::temp_dir().join(format!("agentx-cli-{}", std::process::id()));
    cmd.env("AGENTX_HOME", home);
    cmd
}

#[test]
fn help_lists_the_commands_of_the_contract() {
    let out = agentx().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "exec",
        "sessions",
        "resume",
        "new",
        "status",
        "checkpoints",
        "rollback",
        "clear",
        "snapshots",
        "snapshot",
        "undo",
        "rewind",
        "oneshots",
        "daemon",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from --help:\n{text}");
    }
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    for args in [
        &["--no-such-flag"][..],
        &["rollback", "notanumber"],
        &["--approval", "sometimes", "status"],
        &["daemon", "fly"],
    ] {
        let out = agentx().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}

#[test]
fn a_hostile_agent_name_is_a_usage_error() {
    let out = agentx()
        .args(["--agent", "../etc", "sessions"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agent name"), "{err}");
}

#[test]
fn a_missing_folder_is_a_usage_error() {
    let out = agentx()
        .args(["-C", "/no/such/folder/anywhere", "sessions"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/no/such/folder/anywhere"), "{err}");
}
