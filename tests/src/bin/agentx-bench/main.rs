//! agentx-bench: the project's benchmarks, each comparing agentx with a
//! baseline in the same run. `scripts/bench [NAME...]` builds and runs them.

use std::process::{Command, Stdio};

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{
    ApprovalPolicy, ProviderSettings, Scope, TurnInput, TurnStart, turn_input,
};

mod context;
mod daemon;
mod mcp;
mod noisy;
mod oneshots;
mod remote;
mod restores;
mod sandbox;
mod search;
mod snapshots;
mod terminal;
mod tools;
mod turns;
mod web;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if args.is_empty() {
        vec![
            "daemon",
            "turns",
            "oneshots",
            "snapshots",
            "search",
            "remote",
            "context",
            "web",
            "tools",
            "noisy",
            "terminal",
            "sandbox",
            "mcp",
            "restores",
        ]
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        match name {
            "daemon" => daemon::bench_daemon()?,
            "turns" => turns::bench_turns(turns::turn_count())?,
            "oneshots" => oneshots::bench_oneshots()?,
            "snapshots" => snapshots::bench_snapshots()?,
            "search" => search::bench_search()?,
            "remote" => remote::bench_remote()?,
            "context" => {
                context::bench_context()?;
                context_accounting()?;
            }
            "web" => web::bench_web()?,
            "tools" => tools::bench_tools()?,
            "noisy" => noisy::bench_noisy()?,
            "terminal" => terminal::bench_terminal()?,
            "sandbox" => sandbox::bench_sandbox()?,
            "mcp" => mcp::bench_mcp()?,
            "restores" => restores::bench_restores()?,
            other => {
                bail!(
                    "unknown benchmark {other:?}; known: daemon, turns, oneshots, snapshots, search, remote, context, web, tools, noisy, terminal, sandbox, mcp, restores"
                )
            }
        }
    }
    Ok(())
}

/// Starts `env`'s agentd (`agentx daemon start`), or says why it did not.
fn start_daemon(env: &agentx_tests::TestEnv) -> anyhow::Result<()> {
    let started = env.run(["daemon", "start"]);
    if !started.status.success() {
        bail!(
            "agentd did not start: {}",
            String::from_utf8_lossy(&started.stderr)
        );
    }
    Ok(())
}

/// Writes `files` small files under `dir`, 200 per directory, each
/// naming `version`.
fn write_tree(dir: &std::path::Path, files: usize, version: &str) -> anyhow::Result<()> {
    for d in 0..files.div_ceil(200) {
        let sub = dir.join(format!("d{d:04}"));
        std::fs::create_dir_all(&sub)?;
        for f in 0..200.min(files - d * 200) {
            std::fs::write(
                sub.join(format!("f{f:03}.txt")),
                format!("{version} version of file {f} in directory {d}\n"),
            )?;
        }
    }
    Ok(())
}

/// The in-process half of `context`: token accounting per turn (agentd's
/// `benches/context.rs`, built by `scripts/bench`).
fn context_accounting() -> anyhow::Result<()> {
    let status = Command::new("cargo")
        .args(["bench", "--quiet", "-p", "agentd", "--bench", "context"])
        .status()
        .context("cargo bench")?;
    if !status.success() {
        bail!("the accounting benchmark failed: {status}");
    }
    Ok(())
}

/// Median and 90th percentile of a sample, in milliseconds.
fn summary(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.9))
}

fn time_command(mut make: impl FnMut() -> Command, runs: usize) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut cmd = make();
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let start = Instant::now();
        let status = cmd.status().context("spawn")?;
        samples.push(start.elapsed());
        if !status.success() {
            bail!("{cmd:?} failed: {status}");
        }
    }
    Ok(samples)
}

fn which(tool: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .with_context(|| format!("{tool} not on PATH"))
}

/// Median of a sample, in milliseconds.
fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

/// Peak resident set (VmHWM) of a live process, in KiB.
fn peak_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Largest peak RSS of any child waited for so far, in KiB.
fn children_peak_rss_kib() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss() as u64)
        .unwrap_or(0)
}

/// A duration in seconds.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A new conversation in `scope`: its id.
async fn new_session(channel: &tonic::transport::Channel, scope: &Scope) -> anyhow::Result<String> {
    use agentx_shared::proto::sessions_client::SessionsClient;
    use agentx_shared::proto::{OpenSessionRequest, open_session_request};
    let session = SessionsClient::new(channel.clone())
        .open_session(OpenSessionRequest {
            scope: Some(scope.clone()),
            target: Some(open_session_request::Target::New(true)),
        })
        .await?
        .into_inner()
        .session
        .context("no session")?;
    Ok(session.id)
}

/// The fake model as a turn's provider (Responses API, a test key).
fn fake_provider(model: &agentx_tests::fake_model::FakeModel) -> ProviderSettings {
    ProviderSettings {
        provider: "responses".into(),
        base_url: model.base_url(),
        model: "fake-model".into(),
        api_key: "bench".into(),
        ..ProviderSettings::default()
    }
}

/// Starts `message {i}` as a turn: the input sender (kept open until the
/// turn ends), the instant the stream was requested, and its events.
async fn open_message(
    channel: &tonic::transport::Channel,
    scope: &Scope,
    session: &str,
    provider: &ProviderSettings,
    i: usize,
) -> anyhow::Result<(
    tokio::sync::mpsc::Sender<TurnInput>,
    Instant,
    tonic::Streaming<agentx_shared::proto::TurnEvent>,
)> {
    let start = TurnStart {
        scope: Some(scope.clone()),
        session_id: session.to_owned(),
        message: format!("message {i}"),
        approval: ApprovalPolicy::Never as i32,
        provider: Some(provider.clone()),
        ..TurnStart::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tx.send(TurnInput {
        input: Some(turn_input::Input::Start(start)),
    })
    .await?;
    let t0 = Instant::now();
    let events = TurnsClient::new(channel.clone())
        .run_turn(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, t0, events))
}

fn dir_bytes(path: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
            }
        }
    }
    total
}
