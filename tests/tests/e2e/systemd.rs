//! systemd integration: socket activation through LISTEN_FDS (driven by
//! `systemd-socket-activate`, no running systemd needed) and the installed
//! unit files passing `systemd-analyze verify --user`.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentx_tests::{TestEnv, agentd_bin, assert_code, stderr, stdout};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn socket_activation_serves_on_the_inherited_socket_and_never_unlinks_it() {
    assert!(
        have("systemd-socket-activate"),
        "systemd-socket-activate is required (package systemd)"
    );
    let env = TestEnv::new();
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let socket = env.socket();
    let mut activator = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(format!("--setenv=AGENTX_HOME={}", env.home.display()))
        .arg("--setenv=AGENTX_LOG=info")
        .arg(agentd_bin())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "systemd-socket-activate never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        env.daemon_pids().is_empty(),
        "nothing should run before the first connection"
    );

    // The first connection starts agentd on the inherited socket.
    let out = env.run(["daemon", "status", "--json"]);
    assert_code(&out, 0);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["socket_inherited"], true, "{status}");
    assert_eq!(
        status["pid"],
        activator.id(),
        "agentd should be exec'd in place"
    );
    // Auto-start must not spawn a second daemon beside the activated one.
    assert_code(&env.run(["daemon", "start"]), 0);
    assert_eq!(env.daemon_pids(), vec![activator.id() as i32]);

    kill(Pid::from_raw(activator.id() as i32), Signal::SIGTERM).unwrap();
    let exit = activator.wait().unwrap();
    assert!(exit.success(), "{exit}");
    assert!(
        socket.exists(),
        "agentd unlinked a socket that systemd owns"
    );
    let mut log = String::new();
    activator
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(
        log.contains("inherited from systemd") && log.contains("agentd ready"),
        "{log}"
    );
}

#[test]
fn installed_units_pass_systemd_analyze_verify() {
    assert!(
        have("systemd-analyze"),
        "systemd-analyze is required (package systemd)"
    );
    let env = TestEnv::new();
    let units = env.root().join("units");
    let out = env
        .agentx(["daemon", "install-systemd", "--dir"])
        .arg(&units)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("systemctl --user enable --now agentd.socket"),
        "{text}"
    );

    let service = std::fs::read_to_string(units.join("agentd.service")).unwrap();
    let real = std::fs::canonicalize(agentd_bin()).unwrap();
    assert!(
        service.contains(&format!("ExecStart={} --log stderr", real.display())),
        "{service}"
    );
    assert!(service.contains("Type=notify"));
    let socket = std::fs::read_to_string(units.join("agentd.socket")).unwrap();
    assert!(
        socket.contains(&format!("ListenStream={}", env.socket().display())),
        "{socket}"
    );

    let runtime = env.root().join("xdg-runtime");
    std::fs::create_dir(&runtime).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--user"])
        .arg(units.join("agentd.socket"))
        .arg(units.join("agentd.service"))
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("HOME", env.root())
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert_eq!(stderr(&out), "", "systemd-analyze verify warned");
}

#[test]
fn install_systemd_defaults_to_the_user_unit_dir() {
    let env = TestEnv::new();
    let config = env.root().join("config");
    let out = env
        .agentx(["daemon", "install-systemd"])
        .env("XDG_CONFIG_HOME", &config)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(config.join("systemd/user/agentd.service").is_file());
    assert!(config.join("systemd/user/agentd.socket").is_file());
}

#[test]
fn readiness_is_reported_through_notify_socket() {
    let env = TestEnv::new();
    let notify = env.root().join("notify.sock");
    let listener = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut daemon = env
        .agentd(["--log", "stderr"])
        .env("NOTIFY_SOCKET", &notify)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = listener
        .recv(&mut buf)
        .expect("no sd_notify message within 5 s");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.contains("READY=1"), "{message}");
    // Ready means serving: the socket answers right away.
    assert_code(&env.run(["daemon", "status"]), 0);
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
    let n = listener.recv(&mut buf).expect("no STOPPING message");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
}
