//! Running `agentx` against a scripted model server: bounded in time (a
//! hang fails the test), with no proxy of the test runner's leaking in.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{TestEnv, stderr};

const PROXY_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Runs `cmd` fed `stdin`, killing it (and failing) after `limit`.
pub fn bounded(mut cmd: Command, stdin: &[u8], limit: Duration) -> Output {
    for var in PROXY_VARS {
        if cmd.get_envs().all(|(k, _)| k != var) {
            cmd.env_remove(var);
        }
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "agentx did not finish within {limit:?}; stderr: {}",
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `agentx ARGS` against the server at `base` (`…/v1`).
pub fn agentx_at(env: &TestEnv, base: &str, args: &[&str]) -> Command {
    let mut cmd = env.agentx(args);
    cmd.env("AGENTX_BASE_URL", base)
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", "test-key");
    cmd
}

pub fn run_at(env: &TestEnv, base: &str, args: &[&str]) -> Output {
    bounded(agentx_at(env, base, args), b"", Duration::from_secs(60))
}
