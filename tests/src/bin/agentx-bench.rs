//! agentx-bench: the project's benchmarks, each comparing agentx with a
//! baseline in the same run. `scripts/bench [NAME...]` builds and runs them.

use std::process::{Command, Stdio};

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{
    ApprovalPolicy, OpenSessionRequest, PingRequest, ProviderSettings, Scope, TurnInput, TurnStart,
    open_session_request, turn_event, turn_input,
};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::{FakeModel, post_and_hold};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if args.is_empty() {
        vec!["daemon", "turns", "oneshots"]
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        match name {
            "daemon" => bench_daemon()?,
            "turns" => bench_turns(turn_count())?,
            "oneshots" => bench_oneshots()?,
            other => bail!("unknown benchmark {other:?}; known: daemon, turns, oneshots"),
        }
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

fn bench_daemon() -> anyhow::Result<()> {
    const RUNS: usize = 200;
    let env = TestEnv::new();
    let started = env.run(["daemon", "start"]);
    if !started.status.success() {
        bail!(
            "agentd did not start: {}",
            String::from_utf8_lossy(&started.stderr)
        );
    }
    let truth = which("true")?;
    // Interleave the two so machine noise hits both alike.
    let mut floor = Vec::new();
    let mut status = Vec::new();
    for _ in 0..RUNS / 10 {
        floor.extend(time_command(|| Command::new(&truth), 10)?);
        status.extend(time_command(|| env.agentx(["daemon", "status"]), 10)?);
    }
    let (floor_med, floor_p90) = summary(floor);
    let (status_med, status_p90) = summary(status);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (sequential, pipelined) = runtime.block_on(ping_rates(&env))?;

    println!("== daemon: client round trip and RPC throughput ({RUNS} runs each, interleaved)");
    println!("{:<44} {:>10} {:>10}", "", "median", "p90");
    println!(
        "{:<44} {:>7.2} ms {:>7.2} ms",
        format!("exec {} (floor)", truth.display()),
        floor_med,
        floor_p90
    );
    println!(
        "{:<44} {:>7.2} ms {:>7.2} ms",
        "agentx daemon status".to_owned(),
        status_med,
        status_p90
    );
    println!(
        "{:<44} {:>9.1}x",
        "status / floor (median)",
        status_med / floor_med
    );
    println!(
        "{:<44} {:>7.2} ms",
        "status - floor (median)",
        status_med - floor_med
    );
    println!(
        "{:<44} {:>10.0}",
        "Ping RPC/s, one connection, sequential", sequential
    );
    println!(
        "{:<44} {:>10.0}",
        "Ping RPC/s, one connection, 32 in flight", pipelined
    );
    Ok(())
}

/// Median over 5 one-second windows of Ping RPCs per second on a single
/// connection, one at a time and with 32 in flight.
async fn ping_rates(env: &TestEnv) -> anyhow::Result<(f64, f64)> {
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let client = DaemonClient::new(channel);
    let window = Duration::from_secs(1);
    let mut seq = Vec::new();
    let mut par = Vec::new();
    for _ in 0..5 {
        let mut c = client.clone();
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < window {
            c.ping(PingRequest::default()).await?;
            n += 1;
        }
        seq.push(n as f64 / start.elapsed().as_secs_f64());

        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..32 {
            let mut c = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < window {
                    c.ping(PingRequest::default()).await?;
                    n += 1;
                }
                Ok::<u64, tonic::Status>(n)
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await??;
        }
        par.push(total as f64 / start.elapsed().as_secs_f64());
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(seq), median(par)))
}

fn which(tool: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .with_context(|| format!("{tool} not on PATH"))
}

/// Turns for the long-conversation benchmark (AGENTX_BENCH_TURNS, default 5000).
fn turn_count() -> usize {
    std::env::var("AGENTX_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

/// Persistence cost early vs late in one long conversation, and the
/// latency agentx adds before the first streamed token.
fn bench_turns(turns: usize) -> anyhow::Result<()> {
    const WINDOW: usize = 100;
    if turns < 2 * WINDOW {
        bail!("need at least {} turns", 2 * WINDOW);
    }
    let env = TestEnv::new();
    let started = env.run(["daemon", "start"]);
    if !started.status.success() {
        bail!(
            "agentd did not start: {}",
            String::from_utf8_lossy(&started.stderr)
        );
    }
    let model = FakeModel::start();
    model.set_lean(true);

    // Baseline: the fake server's own time to its first text delta.
    let mut direct = Vec::new();
    let body = serde_json::json!({"model": "m", "input": "hi", "stream": true, "store": false});
    for _ in 0..WINDOW {
        let start = Instant::now();
        let (status, mut reader) = post_and_hold(&model.responses_url(), &body);
        if status != 200 {
            bail!("fake server answered {status}");
        }
        let mut line = String::new();
        loop {
            line.clear();
            if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 {
                bail!("stream ended before a text delta");
            }
            if line.contains("response.output_text.delta") {
                break;
            }
        }
        direct.push(start.elapsed());
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (first_token, totals) = runtime.block_on(async {
        let channel = agentx_shared::transport::connect(&env.socket()).await?;
        let scope = Scope {
            folder: env.work.display().to_string(),
            agent: "default".into(),
        };
        let session = SessionsClient::new(channel.clone())
            .open_session(OpenSessionRequest {
                scope: Some(scope.clone()),
                target: Some(open_session_request::Target::New(true)),
            })
            .await?
            .into_inner()
            .session
            .context("no session")?;
        let provider = ProviderSettings {
            provider: "responses".into(),
            base_url: model.base_url(),
            model: "fake-model".into(),
            api_key: "bench".into(),
        };
        let mut first_token = Vec::with_capacity(turns);
        let mut totals = Vec::with_capacity(turns);
        for i in 0..turns {
            let start = TurnStart {
                scope: Some(scope.clone()),
                session_id: session.id.clone(),
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
            let mut events = TurnsClient::new(channel.clone())
                .run_turn(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await?
                .into_inner();
            let mut first = None;
            while let Some(event) = events.message().await? {
                match event.event {
                    Some(turn_event::Event::TextDelta(_)) if first.is_none() => {
                        first = Some(t0.elapsed())
                    }
                    Some(turn_event::Event::Finished(f)) => {
                        if f.status != agentx_shared::proto::TurnStatus::Completed as i32 {
                            bail!("turn {i} failed: {}", f.error);
                        }
                        break;
                    }
                    _ => {}
                }
            }
            drop(tx);
            first_token.push(first.context("no text delta")?);
            totals.push(t0.elapsed());
            if (i + 1) % 1000 == 0 {
                eprintln!("  {} turns done", i + 1);
            }
        }
        Ok::<_, anyhow::Error>((first_token, totals))
    })?;

    let early = median_ms(totals[..WINDOW].to_vec());
    let late = median_ms(totals[turns - WINDOW..].to_vec());
    let sizes = session_file_sizes(&env.home.join("sessions"));
    println!("== turns: one conversation of {turns} turns, fake provider answering at once");
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, median of turns 1-{WINDOW}"),
        early
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, median of turns {}-{turns}", turns - WINDOW + 1),
        late
    );
    println!("{:<58} {:>9.2}x", "late / early", late / early);
    let via = median_ms(first_token[..WINDOW].to_vec());
    let floor = median_ms(direct);
    println!(
        "{:<58} {:>8.2} ms",
        "first token straight from the fake server (median)", floor
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("first token through agentd (median of turns 1-{WINDOW})"),
        via
    );
    println!(
        "{:<58} {:>8.2} ms",
        "added by agentd (difference of medians)",
        via - floor
    );
    println!(
        "{:<58} {:>8} B",
        "state document after the last turn", sizes.0
    );
    println!(
        "{:<58} {:>8} B",
        "transcript journal after the last turn", sizes.1
    );
    Ok(())
}

/// Sizes of the (single) conversation's state document and journal.
fn session_file_sizes(dir: &std::path::Path) -> (u64, u64) {
    let mut doc = 0;
    let mut journal = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".jsonl") {
                journal = entry.metadata().map(|m| m.len()).unwrap_or(0);
            } else if name.ends_with(".json") && name != "current.json" {
                doc = entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    (doc, journal)
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

/// Concurrent one-shots against a fake provider that answers at once.
fn bench_oneshots() -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.set_lean(true);
    let chat = |args: &[&str]| {
        let mut cmd = env.agentx(args);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    // A branch point: two interactive turns.
    let mut base = chat(&[]);
    base.stdin(Stdio::piped());
    let mut child = base.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(b"one\ntwo\n")?;
    }
    if !child.wait()?.success() {
        bail!("the base conversation failed");
    }

    // A single one-shot, process start to exit, against the provider alone.
    let body = serde_json::json!({"model": "m", "input": "hi", "stream": true, "store": false});
    let mut direct = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let (status, mut reader) = post_and_hold(&model.responses_url(), &body);
        if status != 200 {
            bail!("fake server answered {status}");
        }
        let mut sink = String::new();
        std::io::Read::read_to_string(&mut reader, &mut sink)?;
        direct.push(start.elapsed());
    }
    let single = time_command(|| chat(&["exec", "hello"]), 50)?;
    let floor = median_ms(direct);
    let one = median_ms(single);

    println!(
        "== oneshots: concurrent `agentx exec` in one folder, fake provider answering at once"
    );
    println!(
        "{:<58} {:>8.2} ms",
        "provider alone: request to end of stream (median of 50)", floor
    );
    println!(
        "{:<58} {:>8.2} ms",
        "one `agentx exec`, process start to exit (median of 50)", one
    );
    println!(
        "{:<58} {:>8.2} ms",
        "added by agentx (difference of medians)",
        one - floor
    );
    println!(
        "{:>6} {:>10} {:>9} {:>16} {:>16}",
        "n", "wall", "failures", "agentd peak RSS", "client peak RSS"
    );
    for n in [1usize, 50, 200, 1000] {
        // A fresh daemon per row, so its peak RSS belongs to this row.
        let _ = env.run(["daemon", "restart"]);
        let daemon = env.daemon_pids().first().copied().context("no agentd")?;
        let start = Instant::now();
        let mut children = Vec::with_capacity(n);
        for i in 0..n {
            children.push(chat(&["exec", &format!("prompt {i}")]).spawn()?);
        }
        let mut failures = 0;
        for mut c in children {
            if !c.wait()?.success() {
                failures += 1;
            }
        }
        let wall = start.elapsed();
        println!(
            "{:>6} {:>8.2} s {:>9} {:>12} MiB {:>12} MiB",
            n,
            wall.as_secs_f64(),
            failures,
            peak_rss_kib(daemon) / 1024,
            children_peak_rss_kib() / 1024
        );
    }
    Ok(())
}
