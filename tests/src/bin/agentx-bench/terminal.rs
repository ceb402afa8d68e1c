//! The chat's start in a terminal: from starting `agentx` on a pseudo-terminal
//! to its prompt, and `agentx --version`, each beside a floor measured alike.

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;

use crate::{summary, time_command, which};

/// Runs of each measurement.
const RUNS: usize = 30;

pub fn bench_terminal() -> anyhow::Result<()> {
    let env = TestEnv::new();
    let model = FakeModel::start();
    crate::start_daemon(&env)?;
    // The folder's conversation exists, as when a user comes back to it.
    let _ = env.run(["status"]);
    let sh = which("sh")?;
    let truth = which("true")?;
    let mut floor = Vec::new();
    let mut prompt = Vec::new();
    let mut version_floor = Vec::new();
    let mut version = Vec::new();
    // Interleaved so machine noise hits both alike.
    for _ in 0..RUNS {
        floor.push(to_prompt(|| {
            let mut cmd = Command::new(&sh);
            cmd.args(["-c", "printf '› '; read x"]);
            cmd
        })?);
        prompt.push(to_prompt(|| {
            let mut cmd = env.agentx::<[&str; 0], &str>([]);
            cmd.env("TERM", "xterm-256color")
                .env("AGENTX_BASE_URL", model.base_url())
                .env("AGENTX_MODEL", "fake-model")
                .env("OPENAI_API_KEY", agentx_tests::TEST_KEY);
            cmd
        })?);
        version_floor.extend(time_command(|| Command::new(&truth), 1)?);
        version.extend(time_command(|| env.agentx(["--version"]), 1)?);
    }
    println!("== terminal: start to prompt on a pseudo-terminal ({RUNS} runs each, interleaved)");
    println!("{:<44} {:>10} {:>10}", "", "median", "p90");
    for (name, samples) in [
        ("sh printing a prompt (floor)", floor),
        ("agentx to its prompt (agentd running)", prompt),
        ("exec true (floor)", version_floor),
        ("agentx --version", version),
    ] {
        let (med, p90) = summary(samples);
        println!("{name:<44} {med:>7.2} ms {p90:>7.2} ms");
    }
    Ok(())
}

/// The time from starting `make()`'s command on a new pseudo-terminal to
/// the prompt `› ` on its screen; the command is then ended with Ctrl-D.
fn to_prompt(make: impl FnOnce() -> Command) -> anyhow::Result<Duration> {
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let leader: OwnedFd = pty.master;
    let follower: OwnedFd = pty.slave;
    let mut cmd = make();
    cmd.stdin(Stdio::from(follower.try_clone()?))
        .stdout(Stdio::from(follower.try_clone()?))
        .stderr(Stdio::from(follower));
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting the command")?;
    let mut screen = Vec::new();
    let mut file = std::fs::File::from(leader);
    let mut buf = [0u8; 4096];
    let elapsed = loop {
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(&file),
            PollFlags::POLLIN,
        )];
        if poll(&mut fds, PollTimeout::from(10_000u16))? == 0 {
            let _ = child.kill();
            bail!("no prompt after 10 s: {}", String::from_utf8_lossy(&screen));
        }
        let n = file.read(&mut buf)?;
        if n == 0 {
            bail!("the command ended: {}", String::from_utf8_lossy(&screen));
        }
        screen.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&screen).contains("› ") {
            break start.elapsed();
        }
    };
    let _ = file.write_all(b"\x04");
    // Drain what it prints while leaving, so it never blocks on a full pty.
    let give_up = Instant::now() + Duration::from_secs(10);
    while child.try_wait()?.is_none() {
        if Instant::now() > give_up {
            let _ = child.kill();
            break;
        }
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(&file),
            PollFlags::POLLIN,
        )];
        if poll(&mut fds, PollTimeout::from(20u16))? > 0 && file.read(&mut buf).unwrap_or(0) == 0 {
            break;
        }
    }
    let _ = child.wait();
    Ok(elapsed)
}
