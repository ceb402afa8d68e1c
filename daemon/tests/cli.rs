//! The `agentd` binary's own checks, run before it serves anything.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

#[test]
fn refuses_a_profile_readable_by_others() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("profile");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["--log", "stderr"])
        .env("AGENTX_HOME", &home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 700"), "{err}");
    assert!(!home.join("agentd.sock").exists());
}

#[test]
fn version_flag_prints_the_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}
