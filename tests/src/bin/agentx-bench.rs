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

#[path = "../bench_search.rs"]
mod bench_search;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if args.is_empty() {
        vec!["daemon", "turns", "oneshots", "snapshots", "search"]
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        match name {
            "daemon" => bench_daemon()?,
            "turns" => bench_turns(turn_count())?,
            "oneshots" => bench_oneshots()?,
            "snapshots" => bench_snapshots()?,
            "search" => bench_search::bench_search()?,
            other => {
                bail!(
                    "unknown benchmark {other:?}; known: daemon, turns, oneshots, snapshots, search"
                )
            }
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
            let (tx, t0, mut events) =
                open_message(&channel, &scope, &session.id, &provider, i).await?;
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
            } else if name.ends_with(".json") && name != "current.json" && name != "shared.json" {
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
        "n", "wall", "failures", "agentd peak RSS", "max client RSS"
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

/// A seeded generated tree: `dirs` × `per_dir` files of 1–8 KiB.
fn generate_tree(root: &std::path::Path, dirs: usize, per_dir: usize) -> anyhow::Result<()> {
    let mut state: u64 = 0x5EED_1234_ABCD_0001;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for d in 0..dirs {
        let dir = root.join(format!("dir{d:04}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..per_dir {
            let len = 1024 + (next() % (7 * 1024)) as usize;
            let mut data = Vec::with_capacity(len);
            while data.len() < len {
                // Text-like content: compressible like source code.
                data.extend_from_slice(
                    format!("line {} of file {d}/{f}: {:x}\n", data.len(), next() % 4096)
                        .as_bytes(),
                );
            }
            data.truncate(len);
            std::fs::write(dir.join(format!("file{f:03}.txt")), data)?;
        }
    }
    Ok(())
}

/// Shadow git: a repository whose GIT_DIR lives outside the folder.
struct ShadowGit {
    git_dir: std::path::PathBuf,
    work: std::path::PathBuf,
}

impl ShadowGit {
    fn git(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("git")
            .args(args)
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work)
            .env("GIT_INDEX_FILE", self.git_dir.join("index"))
            .current_dir(&self.work)
            .output()?;
        if !out.status.success() {
            bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
    /// `git add -A && git write-tree`: what shadow-git agents do per snapshot.
    fn snapshot(&self) -> anyhow::Result<String> {
        self.git(&["add", "-A"])?;
        self.git(&["write-tree"])
    }
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

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Edits `n` files of the tree (different ones each round).
fn touch_files(files: &[std::path::PathBuf], round: usize, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let f = &files[(round * n + i * 7919) % files.len()];
        let mut data = std::fs::read(f)?;
        data.extend_from_slice(format!("edit {round}.{i}\n").as_bytes());
        std::fs::write(f, data)?;
    }
    Ok(())
}

fn list_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() && e.file_name() != ".git" => stack.push(p),
                Ok(t) if t.is_file() && e.metadata().is_ok_and(|m| m.len() < 10 << 20) => {
                    out.push(p)
                }
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Repetitions of the steady-state snapshot measurements
/// (`AGENTX_BENCH_SNAP_RUNS`, default 7).
fn snap_runs() -> usize {
    std::env::var("AGENTX_BENCH_SNAP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(7)
}

/// Directories of the generated tree whose files the large restore changes
/// (100 files each).
const RESTORE_DIRS: usize = 250;

/// Folder snapshots: agentx with the watcher, agentx with full scans
/// (`AGENTX_WATCH=off`) and a shadow git repository, on the same tree in
/// one run; medians.
fn bench_snapshots() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let scratch = tempfile::Builder::new()
        .prefix("agentx-bench-snap-")
        .tempdir()?;
    let generated = scratch.path().join("generated");
    // AGENTX_BENCH_SNAP_DIRS: a smaller tree for a quick check of the
    // harness (the reported numbers are for the default 1,000).
    let dirs = std::env::var("AGENTX_BENCH_SNAP_DIRS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1000)
        .max(RESTORE_DIRS);
    eprintln!("generating {} files…", dirs * 100);
    let t = Instant::now();
    generate_tree(&generated, dirs, 100)?;
    eprintln!("  generated in {:.1} s", secs(t.elapsed()));
    let tree = std::fs::canonicalize(&generated)?;
    let files = list_files(&tree);
    let bytes: u64 = files
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    let runs = snap_runs();
    println!(
        "== snapshots: agentx (watcher / full scans) vs a shadow git repository (GIT_DIR outside the folder), medians"
    );
    println!(
        "-- generated tree: {} files, {:.0} MiB ({dirs} dirs x 100 files, 1-8 KiB of text); {runs} runs per row, first snapshot 3",
        files.len(),
        bytes as f64 / 1048576.0
    );
    eprintln!("shadow git…");
    let git = bench_git(&tree, &files, scratch.path(), runs)?;
    let model = FakeModel::start();
    model.set_lean(true);
    eprintln!("agentx with the watcher…");
    let watch = runtime.block_on(bench_agentx(&tree, &files, true, runs, &model))?;
    eprintln!("agentx with full scans…");
    let scan = runtime.block_on(bench_agentx(&tree, &files, false, runs, &model))?;
    eprintln!("cp -a…");
    let copy = bench_copy(&tree, scratch.path())?;

    println!("agentd with the watcher: {}", watch.watch_status);
    println!("agentd with AGENTX_WATCH=off: {}", scan.watch_status);
    println!(
        "{:<48} {:>10} {:>10} {:>10} {:>8}  target",
        "", "watcher", "full scan", "git", "w/git"
    );
    let ms = |d: f64| format!("{d:.1} ms");
    let row = |what: &str, w: f64, f: f64, g: f64, target: &str| {
        println!(
            "{what:<48} {:>10} {:>10} {:>10} {:>7.3}x  {target}",
            ms(w),
            ms(f),
            ms(g),
            w / g
        );
    };
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    row(
        "first snapshot (fresh store)",
        watch.first,
        scan.first,
        git.first,
        &format!(
            "<= 0.12x git: {} / {} (both full scans)",
            met(watch.first <= 0.12 * git.first),
            met(scan.first <= 0.12 * git.first)
        ),
    );
    row(
        "unchanged re-snapshot",
        watch.same,
        scan.same,
        git.same,
        &format!("<= 10 ms: {}", met(watch.same <= 10.0)),
    );
    row(
        "snapshot after 10 files changed",
        watch.ten,
        scan.ten,
        git.ten,
        &format!("<= 20 ms: {}", met(watch.ten <= 20.0)),
    );
    row(
        "undo of 10 files (incl. pre-restore snapshot)",
        watch.undo,
        scan.undo,
        git.undo,
        &format!(
            "<= 50 ms and <= 0.1x git: {}",
            met(watch.undo <= 50.0 && watch.undo <= 0.1 * git.undo)
        ),
    );
    row(
        "message overhead over an empty folder",
        watch.message_overhead,
        scan.message_overhead,
        2.0 * git.same,
        &format!(
            "<= 15 ms: {} (git: 2 unchanged re-adds)",
            met(watch.message_overhead <= 15.0)
        ),
    );
    println!(
        "{:<48} {:>10} {:>10}            (message in the 100k folder / in an empty one)",
        "  message, 100k folder / empty folder",
        format!("{:.1}/{:.1}", watch.message_tree, watch.message_empty),
        format!("{:.1}/{:.1}", scan.message_tree, scan.message_empty),
    );
    let files_25k = RESTORE_DIRS * 100;
    row(
        &format!("restore of {files_25k} changed files (rewind)"),
        watch.restore,
        scan.restore,
        git.restore,
        &format!(
            "<= 1.2x cp -a: {} ({:.2}x)",
            met(watch.restore <= 1.2 * copy.same_files),
            watch.restore / copy.same_files
        ),
    );
    println!(
        "{:<48} {:>10} {:>10}",
        format!("  cp -a of the same {files_25k} files / + syncfs"),
        ms(copy.same_files),
        ms(copy.same_files_synced),
    );
    println!(
        "{:<48} {:>10}",
        format!("  cp -a of the whole tree ({} files)", files.len()),
        ms(copy.whole_tree),
    );
    println!(
        "{:<48} {:>7.1} MiB {:>7.1} MiB {:>7.1} MiB {:>7.3}x",
        "store at the end (same history of edits)",
        watch.store as f64 / 1048576.0,
        scan.store as f64 / 1048576.0,
        git.store as f64 / 1048576.0,
        watch.store as f64 / git.store as f64
    );
    Ok(())
}

/// Medians in milliseconds (store: bytes).
#[derive(Default)]
struct SnapResults {
    first: f64,
    same: f64,
    ten: f64,
    undo: f64,
    restore: f64,
    store: u64,
    message_tree: f64,
    message_empty: f64,
    message_overhead: f64,
    watch_status: String,
}

/// Makes every file of the first [`RESTORE_DIRS`] directories differ.
fn change_restore_dirs(tree: &std::path::Path, tag: &str) -> anyhow::Result<()> {
    for d in 0..RESTORE_DIRS {
        let dir = tree.join(format!("dir{d:04}"));
        for f in 0..100 {
            let p = dir.join(format!("file{f:03}.txt"));
            let mut data = std::fs::read(&p)?;
            data.extend_from_slice(format!("changed {tag}\n").as_bytes());
            std::fs::write(&p, data)?;
        }
    }
    Ok(())
}

fn bench_git(
    tree: &std::path::Path,
    files: &[std::path::PathBuf],
    scratch: &std::path::Path,
    runs: usize,
) -> anyhow::Result<SnapResults> {
    let mut first = Vec::new();
    for run in 0..3 {
        let git = ShadowGit {
            git_dir: scratch.join(format!("first-{run}.git")),
            work: tree.to_path_buf(),
        };
        git.git(&["init", "-q"])?;
        let t = Instant::now();
        git.snapshot()?;
        first.push(t.elapsed());
        let _ = std::fs::remove_dir_all(&git.git_dir);
    }
    let git = ShadowGit {
        git_dir: scratch.join("steady.git"),
        work: tree.to_path_buf(),
    };
    git.git(&["init", "-q"])?;
    git.snapshot()?;
    // Let the racy window pass so the index's stat data is trusted.
    std::thread::sleep(Duration::from_millis(2500));
    git.snapshot()?;
    let mut same = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        git.snapshot()?;
        same.push(t.elapsed());
    }
    let (mut ten, mut undo) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let before = git.snapshot()?;
        touch_files(files, 2000 + round, 10)?;
        let t = Instant::now();
        git.snapshot()?;
        ten.push(t.elapsed());
        let t = Instant::now();
        git.git(&["read-tree", "-u", "--reset", &before])?;
        undo.push(t.elapsed());
        git.snapshot()?;
    }
    let mut restore = Vec::new();
    for rep in 0..3 {
        let before = git.snapshot()?;
        change_restore_dirs(tree, &format!("git {rep}"))?;
        git.snapshot()?;
        std::thread::sleep(Duration::from_millis(2500));
        let t = Instant::now();
        git.git(&["read-tree", "-u", "--reset", &before])?;
        restore.push(t.elapsed());
        git.snapshot()?;
    }
    for round in 0..50 {
        touch_files(files, 3000 + round, 10)?;
        git.snapshot()?;
    }
    let store = dir_bytes(&git.git_dir);
    let _ = std::fs::remove_dir_all(&git.git_dir);
    Ok(SnapResults {
        first: median_ms(first),
        same: median_ms(same),
        ten: median_ms(ten),
        undo: median_ms(undo),
        restore: median_ms(restore),
        store,
        ..SnapResults::default()
    })
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

/// One message through agentd with a fake provider that answers with text
/// at once (no tool call): the time until the turn is finished.
async fn timed_message(
    channel: &tonic::transport::Channel,
    scope: &Scope,
    session: &str,
    provider: &ProviderSettings,
    i: usize,
) -> anyhow::Result<Duration> {
    let (tx, t0, mut events) = open_message(channel, scope, session, provider, i).await?;
    while let Some(event) = events.message().await? {
        if let Some(turn_event::Event::Finished(f)) = event.event {
            if f.status != agentx_shared::proto::TurnStatus::Completed as i32 {
                bail!("message {i} failed: {}", f.error);
            }
            drop(tx);
            return Ok(t0.elapsed());
        }
    }
    bail!("message {i}: the stream ended without a finish")
}

async fn bench_agentx(
    tree: &std::path::Path,
    files: &[std::path::PathBuf],
    watch: bool,
    runs: usize,
    model: &FakeModel,
) -> anyhow::Result<SnapResults> {
    use agentx_shared::proto::snapshots_client::SnapshotsClient;
    use agentx_shared::proto::{RestoreRequest, TakeSnapshotRequest, restore_request};
    let scope = Scope {
        folder: tree.display().to_string(),
        agent: "default".into(),
    };
    let start_env = || -> anyhow::Result<TestEnv> {
        let mut env = TestEnv::new();
        if !watch {
            env.extra_env.push(("AGENTX_WATCH".into(), "off".into()));
        }
        if !env.run(["daemon", "start"]).status.success() {
            bail!("agentd did not start");
        }
        Ok(env)
    };
    let take = |client: &SnapshotsClient<tonic::transport::Channel>| {
        let mut c = client.clone();
        let scope = scope.clone();
        async move {
            let t = Instant::now();
            c.take_snapshot(TakeSnapshotRequest {
                scope: Some(scope),
                label: String::new(),
            })
            .await?;
            Ok::<Duration, anyhow::Error>(t.elapsed())
        }
    };
    let rewind = |client: &SnapshotsClient<tonic::transport::Channel>, expect: usize| {
        let mut c = client.clone();
        let scope = scope.clone();
        async move {
            let t = Instant::now();
            let reply = c
                .restore(RestoreRequest {
                    scope: Some(scope),
                    target: Some(restore_request::Target::RewindIndex(2)),
                    force: true,
                })
                .await?
                .into_inner();
            let took = t.elapsed();
            if reply.applied.len() != expect || !reply.errors.is_empty() {
                bail!(
                    "the rewind restored {} paths, expected {expect} ({:?})",
                    reply.applied.len(),
                    reply.errors.first()
                );
            }
            Ok::<Duration, anyhow::Error>(took)
        }
    };
    // Rounds of edits distinct from the other configuration's.
    let base = if watch { 0 } else { 1000 };

    let mut first = Vec::new();
    for _ in 0..3 {
        let env = start_env()?;
        let client = SnapshotsClient::new(agentx_shared::transport::connect(&env.socket()).await?);
        first.push(take(&client).await?);
    }

    let env = start_env()?;
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let client = SnapshotsClient::new(channel.clone());
    take(&client).await?;
    // Let the racy window pass so the stat cache is trusted.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    take(&client).await?;
    let status = env
        .agentx(["status", "--json"])
        .current_dir(tree)
        .output()?;
    let watch_status = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v["snapshot_watch"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "(status did not say)".into());
    let mut same = Vec::new();
    for _ in 0..runs {
        same.push(take(&client).await?);
    }
    let (mut ten, mut undo) = (Vec::new(), Vec::new());
    for round in 0..runs {
        touch_files(files, base + round, 10)?;
        ten.push(take(&client).await?);
        // Undo those 10 files: rewind to the snapshot before them (2 = the
        // one before the newest), pre-restore snapshot included.
        undo.push(rewind(&client, 10).await?);
        take(&client).await?;
    }

    // Whole messages, no tool call: in the tree and in an empty folder.
    let provider = ProviderSettings {
        provider: "responses".into(),
        base_url: model.base_url(),
        model: "fake-model".into(),
        api_key: "bench".into(),
    };
    let empty = Scope {
        folder: std::fs::canonicalize(&env.work)?.display().to_string(),
        agent: "default".into(),
    };
    let mut sessions = Vec::new();
    for s in [&scope, &empty] {
        let session = SessionsClient::new(channel.clone())
            .open_session(OpenSessionRequest {
                scope: Some(s.clone()),
                target: Some(open_session_request::Target::New(true)),
            })
            .await?
            .into_inner()
            .session
            .context("no session")?;
        sessions.push(session.id);
    }
    let (mut in_tree, mut in_empty) = (Vec::new(), Vec::new());
    for i in 0..3 + 2 * runs {
        let t = timed_message(&channel, &scope, &sessions[0], &provider, i).await?;
        let e = timed_message(&channel, &empty, &sessions[1], &provider, i).await?;
        if i >= 3 {
            in_tree.push(t);
            in_empty.push(e);
        }
    }
    let (message_tree, message_empty) = (median_ms(in_tree), median_ms(in_empty));

    // A large restore: every file of RESTORE_DIRS directories changed, then
    // put back by a rewind (after the racy window, as an undo read after
    // the result is).
    let mut restore = Vec::new();
    for rep in 0..3 {
        take(&client).await?;
        change_restore_dirs(tree, &format!("agentx {watch} {rep}"))?;
        take(&client).await?;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        restore.push(rewind(&client, RESTORE_DIRS * 100).await?);
    }
    take(&client).await?;

    // Store size after 50 snapshots with 10 files changed each.
    for round in 0..50 {
        touch_files(files, base + 3000 + round, 10)?;
        take(&client).await?;
    }
    let store = dir_bytes(&env.home.join("checkpoints"));
    let _ = env.run(["daemon", "stop"]);
    Ok(SnapResults {
        first: median_ms(first),
        same: median_ms(same),
        ten: median_ms(ten),
        undo: median_ms(undo),
        restore: median_ms(restore),
        store,
        message_tree,
        message_empty,
        message_overhead: message_tree - message_empty,
        watch_status,
    })
}

/// `cp -a` baselines in milliseconds.
struct CopyResults {
    same_files: f64,
    same_files_synced: f64,
    whole_tree: f64,
}

fn bench_copy(tree: &std::path::Path, scratch: &std::path::Path) -> anyhow::Result<CopyResults> {
    let sources: Vec<std::path::PathBuf> = (0..RESTORE_DIRS)
        .map(|d| tree.join(format!("dir{d:04}")))
        .collect();
    let dest = scratch.join("copy");
    let copy = |sync: bool| -> anyhow::Result<Duration> {
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir(&dest)?;
        let t = Instant::now();
        if !Command::new("cp")
            .arg("-a")
            .args(&sources)
            .arg(&dest)
            .status()?
            .success()
        {
            bail!("cp -a failed");
        }
        if sync
            && !Command::new("sync")
                .arg("-f")
                .arg(&dest)
                .status()?
                .success()
        {
            bail!("sync -f failed");
        }
        Ok(t.elapsed())
    };
    let (mut plain, mut synced) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.push(copy(false)?);
        synced.push(copy(true)?);
    }
    let _ = std::fs::remove_dir_all(&dest);
    let t = Instant::now();
    if !Command::new("cp")
        .arg("-a")
        .arg(tree)
        .arg(&dest)
        .status()?
        .success()
    {
        bail!("cp -a failed");
    }
    let whole = t.elapsed();
    let _ = std::fs::remove_dir_all(&dest);
    Ok(CopyResults {
        same_files: median_ms(plain),
        same_files_synced: median_ms(synced),
        whole_tree: whole.as_secs_f64() * 1000.0,
    })
}
