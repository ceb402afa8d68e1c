//! `agentx-bench noisy`: folder B's latency beside heavy work in other
//! folders of the same agentd. In B, p50 and p99 of the status RPC (what
//! `agentx status` calls) and of the first token of a turn, first with
//! nothing else going on (the idle baseline, same agentd, same run), then
//! while other folders (a) import two 100 MB conversations, (b) take the
//! first snapshot of 40,000 files, (c) run 200 one-shots whose streams
//! nobody reads, each printing 3 MB. Also agentd's memory under (c), the
//! wall time of (d) 1,000 concurrent one-shots in one folder, and (e)
//! agentd's idle memory before and after importing, resuming and leaving a
//! 120 MB conversation. Each goal is printed beside its number.
//!
//! `AGENTX_BENCH_NOISY_SCALE` (default 1) scales every load down for a
//! quick check of the harness (e.g. 0.1); the goals are for scale 1.
//! `AGENTX_BENCH_NOISY_ONLY` (e.g. `c,d`) runs only the named scenarios
//! (the idle baseline always runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tonic::transport::Channel;

use agentx_shared::conversation::Item;
use agentx_shared::export::{Conversation, Document, Entry, FORMAT_NAME, VERSION, time_of};
use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{
    ApprovalPolicy, GetStatusRequest, ImportRequest, OpenSessionRequest, ProviderSettings, Scope,
    TakeSnapshotRequest, TurnEvent, TurnInput, TurnStart, TurnStatus, open_session_request,
    turn_event, turn_input,
};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;

/// Status calls per scenario, one every [`STATUS_EVERY`].
const STATUS_SAMPLES: usize = 200;
const STATUS_EVERY: Duration = Duration::from_millis(10);
/// Turns per scenario whose first token is timed, one every [`TURN_EVERY`]
/// at most.
const TURN_SAMPLES: usize = 40;
const TURN_EVERY: Duration = Duration::from_millis(50);
/// Pieces an import travels in (as `agentx import` sends them).
const CHUNK: usize = 1 << 20;
/// Goals: p99 under load at most `3 × idle p99 + 10 ms`; agentd's RSS with
/// (c) at most 150 MB; (d) at most 2 s; (e) within 50 MB.
const P99_FACTOR: f64 = 3.0;
const P99_SLACK_MS: f64 = 10.0;
const RSS_GOAL_MB: f64 = 150.0;
const MANY_GOAL_S: f64 = 2.0;
const LEAK_GOAL_MB: f64 = 50.0;

/// How much of each load runs (`AGENTX_BENCH_NOISY_SCALE`, default 1).
fn scale() -> f64 {
    std::env::var("AGENTX_BENCH_NOISY_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= 1.0)
        .unwrap_or(1.0)
}

/// Whether scenario `letter` runs (`AGENTX_BENCH_NOISY_ONLY`, default all).
fn selected(letter: &str) -> bool {
    std::env::var("AGENTX_BENCH_NOISY_ONLY")
        .map(|only| only.split(',').any(|l| l.trim() == letter))
        .unwrap_or(true)
}

/// `n` scaled, at least 1.
fn scaled(n: usize) -> usize {
    ((n as f64 * scale()).round() as usize).max(1)
}

/// The sizes of every load at this scale.
struct Loads {
    import_bytes: usize,
    snapshot_files: usize,
    /// Fresh folders of `snapshot_files` made ready for (b): each first
    /// snapshot needs a folder agentd has never seen.
    snapshot_folders: usize,
    streams: usize,
    stream_output: usize,
    many: usize,
    resume_bytes: usize,
}

impl Loads {
    fn new() -> Self {
        Self {
            import_bytes: scaled(100_000_000),
            snapshot_files: scaled(40_000),
            snapshot_folders: 4,
            streams: scaled(200),
            stream_output: 3_000_000,
            many: scaled(1000),
            resume_bytes: scaled(120_000_000),
        }
    }
}

/// Latency samples of one scenario, and what the load did meanwhile.
struct Sampled {
    status: Vec<Duration>,
    first_token: Vec<Duration>,
    window: Duration,
    note: String,
}

/// Everything folder B needs to be measured. Its clients run on a runtime
/// of their own (`probe`), as `agentx` processes would, so the samples do
/// not wait behind the bench's own load (sending the imports, receiving the
/// unread streams) on the runtime that drives it.
#[derive(Clone)]
struct FolderB {
    probe: tokio::runtime::Handle,
    status_channel: Channel,
    turn_channel: Channel,
    scope: Scope,
    session: String,
    provider: ProviderSettings,
}

pub fn bench_noisy() -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let loads = Loads::new();
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.set_lean(true);
    crate::start_daemon(&env)?;
    let pid = env.daemon_pids().first().copied().context("no agentd")?;
    let root = std::fs::canonicalize(env.root())?;
    let folder = |name: &str| -> anyhow::Result<PathBuf> {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    };
    let provider = crate::fake_provider(&model);
    let scope_of = |dir: &Path| Scope {
        folder: dir.display().to_string(),
        agent: "default".into(),
    };

    let started = Instant::now();
    eprintln!(
        "noisy: making {} folders of {} files",
        loads.snapshot_folders, loads.snapshot_files
    );
    let mut snapshot_dirs = Vec::new();
    for k in 0..loads.snapshot_folders * usize::from(selected("b")) {
        let dir = folder(&format!("tree-{k}"))?;
        crate::write_tree(&dir, loads.snapshot_files, "first")?;
        snapshot_dirs.push(dir);
    }
    eprintln!("noisy: making export documents");
    let import_doc = Arc::new(export_document(
        &folder("imports")?.display().to_string(),
        if selected("a") { loads.import_bytes } else { 0 },
    )?);
    let resume_dir = folder("resume")?;
    let resume_doc = export_document(
        &resume_dir.display().to_string(),
        if selected("e") { loads.resume_bytes } else { 0 },
    )?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let probe = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("probe")
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let b_dir = folder("b")?;
        let b = {
            // Connected from the probe runtime: a channel's connection
            // runs where it was made.
            let socket = env.socket();
            let (status_channel, turn_channel) = probe
                .spawn(async move {
                    let status = agentx_shared::transport::connect(&socket).await?;
                    let turn = agentx_shared::transport::connect(&socket).await?;
                    anyhow::Ok((status, turn))
                })
                .await??;
            let scope = scope_of(&b_dir);
            let session = crate::new_session(&turn_channel, &scope).await?;
            FolderB {
                probe: probe.handle().clone(),
                status_channel,
                turn_channel,
                scope,
                session,
                provider: provider.clone(),
            }
        };
        // Warm up: B's first turns and snapshot, and a one-shot in each
        // one-shot folder (a one-shot branches from the shared checkpoint).
        for i in 0..5 {
            first_token(&b, i).await?;
        }
        let streams_dir = folder("streams")?;
        let many_dir = folder("many")?;
        for dir in [&streams_dir, &many_dir] {
            let ch = agentx_shared::transport::connect(&env.socket()).await?;
            let start = oneshot_start(&scope_of(dir), &provider, "CALL echo warm");
            let (_tx, mut events) = open_stream(&ch, start).await?;
            finish(&mut events).await?;
        }
        settle().await;

        eprintln!(
            "noisy: written back and agentd quiet after {:.1} s",
            quiesce(pid).await.as_secs_f64()
        );
        eprintln!("noisy: idle baseline");
        let idle = measure(&b, 0, || None::<std::future::Ready<anyhow::Result<()>>>).await?;

        let mut scenarios = Vec::new();
        let mut resume = None;
        if selected("e") {
            eprintln!(
                "noisy: written back and agentd quiet after {:.1} s",
                quiesce(pid).await.as_secs_f64()
            );
            eprintln!(
                "noisy: (e) a {} MB conversation",
                loads.resume_bytes / 1_000_000
            );
            resume =
                Some(resume_big(&env, pid, &scope_of(&resume_dir), &provider, resume_doc).await?);
        }
        if selected("a") {
            eprintln!(
                "noisy: written back and agentd quiet after {:.1} s",
                quiesce(pid).await.as_secs_f64()
            );
            eprintln!("noisy: (a) imports");
            let imports =
                under_imports(&env, &b, &scope_of(&folder("imports")?), import_doc).await?;
            scenarios.push((
                format!("(a) 2 imports of {} MB", loads.import_bytes / 1_000_000),
                imports,
            ));
        }
        if selected("b") {
            eprintln!(
                "noisy: written back and agentd quiet after {:.1} s",
                quiesce(pid).await.as_secs_f64()
            );
            eprintln!("noisy: (b) first snapshots");
            let snapshots = under_snapshots(&env, &b, snapshot_dirs, &scope_of).await?;
            scenarios.push((
                format!("(b) first snapshot, {} files", loads.snapshot_files),
                snapshots,
            ));
        }
        let mut memory = None;
        if selected("c") {
            eprintln!(
                "noisy: written back and agentd quiet after {:.1} s",
                quiesce(pid).await.as_secs_f64()
            );
            eprintln!("noisy: (c) unread one-shot streams");
            let (streams, held) =
                under_streams(&env, pid, &b, &scope_of(&streams_dir), &provider, &loads).await?;
            scenarios.push((
                format!(
                    "(c) {} unread one-shots, {} MB out each",
                    loads.streams,
                    loads.stream_output / 1_000_000
                ),
                streams,
            ));
            memory = Some(held);
        }
        let mut many = None;
        if selected("d") {
            eprintln!(
                "noisy: written back and agentd quiet after {:.1} s",
                quiesce(pid).await.as_secs_f64()
            );
            eprintln!("noisy: (d) concurrent one-shots");
            many = Some(many_oneshots(&env, pid, &model, &many_dir, loads.many)?);
        }

        anyhow::Ok(Report {
            idle,
            scenarios,
            memory,
            many,
            resume,
        })
    })?;
    report.print(&loads, started.elapsed());
    Ok(())
}

/// A moment for agentd's background work (flushes, trims) to end.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Waits until the file systems have written what the previous step left
/// dirty (`sync`: the setup's 160,000 files, an import's documents) and
/// agentd is quiet — under 5% of a core over half a second, at most 90 s —
/// so the previous scenario's background work (indexing an import, the
/// kernel writing its files back) does not count toward the next one: how
/// long it took.
async fn quiesce(pid: i32) -> Duration {
    let cpu_ticks = || cpu_ticks(pid);
    let start = Instant::now();
    let _ = tokio::task::spawn_blocking(nix::unistd::sync).await;
    let mut last = cpu_ticks();
    while start.elapsed() < Duration::from_secs(90) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_ticks();
        // Ticks are 10 ms: at most 2 of the 50 in half a second.
        if now.saturating_sub(last) <= 2 {
            break;
        }
        last = now;
    }
    start.elapsed()
}

/// CPU time process `pid` used so far, in 10 ms ticks (0 when unreadable).
fn cpu_ticks(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised name: utime and stime are
            // the 12th and 13th.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum::<u64>())
        })
        .unwrap_or(0)
}

/// Folder B measured while `noise` makes (and remakes, while the window
/// lasts and it returns some) the load of other folders: 200 status calls
/// paced 10 ms apart, and 40 turns beside them.
async fn measure<F, Fut>(b: &FolderB, offset: usize, mut noise: F) -> anyhow::Result<Sampled>
where
    F: FnMut() -> Option<Fut>,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut rounds = 0usize;
    // When the load ran out (no round running, none to start).
    let mut ran_out = None;
    // The noise: its first round starts now, the next as each ends.
    let mut noise_tasks = tokio::task::JoinSet::new();
    let mut starts = 0usize;
    if let Some(f) = noise() {
        starts += 1;
        noise_tasks.spawn(f);
    }
    let start = Instant::now();
    let mut status = {
        let b = b.clone();
        b.probe
            .clone()
            .spawn(async move { status_samples(&b).await })
    };
    let mut turns = {
        let b = b.clone();
        b.probe
            .clone()
            .spawn(async move { first_token_samples(&b, offset).await })
    };
    let mut status_out = None;
    let mut turns_out = None;
    while status_out.is_none() || turns_out.is_none() {
        tokio::select! {
            r = &mut status, if status_out.is_none() => status_out = Some(r??),
            r = &mut turns, if turns_out.is_none() => turns_out = Some(r??),
            Some(r) = noise_tasks.join_next(), if !noise_tasks.is_empty() => {
                r??;
                rounds += 1;
                if let Some(f) = noise() {
                    starts += 1;
                    noise_tasks.spawn(f);
                } else if noise_tasks.is_empty() {
                    ran_out = Some(start.elapsed());
                }
            }
        }
    }
    let window = start.elapsed();
    let in_flight = noise_tasks.len();
    while let Some(r) = noise_tasks.join_next().await {
        r??;
    }
    let mut note = String::new();
    if starts > 0 {
        note = format!(
            "{rounds} load round(s) ended in the window, {in_flight} still running at its end"
        );
        if let Some(at) = ran_out {
            note.push_str(&format!(
                "; the load ran out {:.1} s into the window",
                at.as_secs_f64()
            ));
        }
    }
    Ok(Sampled {
        status: status_out.unwrap_or_default(),
        first_token: turns_out.unwrap_or_default(),
        window,
        note,
    })
}

/// [`STATUS_SAMPLES`] status RPCs for B's current conversation, one every
/// [`STATUS_EVERY`] (or as soon as the last returns, when later).
async fn status_samples(b: &FolderB) -> anyhow::Result<Vec<Duration>> {
    let mut client = SessionsClient::new(b.status_channel.clone());
    let mut tick = tokio::time::interval(STATUS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::with_capacity(STATUS_SAMPLES);
    for _ in 0..STATUS_SAMPLES {
        tick.tick().await;
        let t0 = Instant::now();
        client
            .get_status(GetStatusRequest {
                scope: Some(b.scope.clone()),
                session_id: String::new(),
                provider: Some(b.provider.clone()),
            })
            .await?;
        samples.push(t0.elapsed());
    }
    Ok(samples)
}

/// [`TURN_SAMPLES`] turns in B, one after the other, at most one every
/// [`TURN_EVERY`]: each one's time to its first text delta.
async fn first_token_samples(b: &FolderB, offset: usize) -> anyhow::Result<Vec<Duration>> {
    let mut tick = tokio::time::interval(TURN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::with_capacity(TURN_SAMPLES);
    for i in 0..TURN_SAMPLES {
        tick.tick().await;
        samples.push(first_token(b, offset + i).await?);
    }
    Ok(samples)
}

/// One short turn in B: the time from sending its start to the first text
/// delta (the turn is then read to its end).
async fn first_token(b: &FolderB, i: usize) -> anyhow::Result<Duration> {
    let (tx, t0, mut events) =
        crate::open_message(&b.turn_channel, &b.scope, &b.session, &b.provider, i).await?;
    let mut first = None;
    while let Some(event) = events.message().await? {
        match event.event {
            Some(turn_event::Event::TextDelta(_)) if first.is_none() => first = Some(t0.elapsed()),
            Some(turn_event::Event::Finished(f)) => {
                if f.status != TurnStatus::Completed as i32 {
                    bail!("turn {i} in B failed: {}", f.error);
                }
                break;
            }
            _ => {}
        }
    }
    drop(tx);
    first.context("a turn in B sent no text")
}

/// A one-shot turn start in `scope`, tools approved automatically.
fn oneshot_start(scope: &Scope, provider: &ProviderSettings, message: &str) -> TurnStart {
    TurnStart {
        scope: Some(scope.clone()),
        message: message.to_owned(),
        approval: ApprovalPolicy::Auto as i32,
        provider: Some(provider.clone()),
        oneshot: true,
        ..TurnStart::default()
    }
}

/// Opens a turn's stream: the input sender (keep it to keep the turn) and
/// its events.
async fn open_stream(
    channel: &Channel,
    start: TurnStart,
) -> anyhow::Result<(
    tokio::sync::mpsc::Sender<TurnInput>,
    tonic::Streaming<TurnEvent>,
)> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(TurnInput {
        input: Some(turn_input::Input::Start(start)),
    })
    .await?;
    let events = TurnsClient::new(channel.clone())
        .run_turn(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, events))
}

/// Reads a turn to its end; an error unless it completed.
async fn finish(events: &mut tonic::Streaming<TurnEvent>) -> anyhow::Result<()> {
    while let Some(event) = events.message().await? {
        if let Some(turn_event::Event::Finished(f)) = event.event {
            if f.status != TurnStatus::Completed as i32 {
                bail!("a turn failed: {}", f.error);
            }
            return Ok(());
        }
    }
    bail!("a turn's stream ended without `finished`")
}

/// A conversation id of the shape agentd gives, distinct per call.
fn conversation_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms:013x}-{:06x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// An export document of about `bytes` bytes for `folder`: turns whose
/// tool call printed 256 KiB each.
fn export_document(folder: &str, bytes: usize) -> anyhow::Result<Vec<u8>> {
    const OUTPUT: usize = 256 * 1024;
    let now = time_of(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    );
    let mut transcript = Vec::new();
    let turns = bytes.div_ceil(OUTPUT);
    for t in 0..turns {
        let mut output = String::with_capacity(OUTPUT + 100);
        let mut line = 0;
        while output.len() < OUTPUT {
            output.push_str(&format!(
                "turn {t} line {line}: the quick brown fox jumps over the lazy dog\n"
            ));
            line += 1;
        }
        let call_id = format!("call_{t}");
        let at = now.clone();
        let entry = |item| Entry {
            at: at.clone(),
            item,
        };
        transcript.push(entry(Item::User {
            text: format!("show me part {t}"),
        }));
        transcript.push(entry(Item::FunctionCall {
            call_id: call_id.clone(),
            name: "shell".into(),
            arguments: format!("{{\"command\":\"cat part-{t}.log\"}}"),
        }));
        transcript.push(entry(Item::FunctionOutput {
            call_id,
            output,
            images: Vec::new(),
        }));
        transcript.push(entry(Item::Assistant {
            text: format!("Part {t} is shown above."),
        }));
    }
    let doc = Document {
        format: FORMAT_NAME.into(),
        version: VERSION,
        exported_at: now.clone(),
        exported_by: "agentx-bench".into(),
        conversation: Conversation {
            id: conversation_id(),
            title: "a long conversation".into(),
            folder: folder.to_owned(),
            agent: "default".into(),
            created_at: now.clone(),
            updated_at: now,
            response_id: None,
            usage: Default::default(),
            turns: turns as u32,
            forked_from: None,
            checkpoints: Vec::new(),
            transcript,
        },
    };
    Ok(serde_json::to_vec(&doc)?)
}

/// `doc` with a fresh conversation id (same length, so a byte patch).
fn with_fresh_id(doc: &[u8]) -> anyhow::Result<Vec<u8>> {
    let head = String::from_utf8_lossy(&doc[..doc.len().min(4096)]).into_owned();
    let at = head
        .find("\"conversation\":{\"id\":\"")
        .context("no conversation id in the document")?
        + "\"conversation\":{\"id\":\"".len();
    let id = conversation_id();
    let mut out = doc.to_vec();
    out[at..at + id.len()].copy_from_slice(id.as_bytes());
    Ok(out)
}

/// Imports `doc` into `scope` over a connection of its own, in 1 MiB
/// pieces as `agentx import` sends them: the new conversation's id.
async fn import(socket: &Path, scope: &Scope, doc: Vec<u8>) -> anyhow::Result<String> {
    let channel = agentx_shared::transport::connect(socket).await?;
    let doc = Arc::new(doc);
    let pieces = doc.len().div_ceil(CHUNK);
    let scope = scope.clone();
    let stream =
        tokio_stream::StreamExt::map(tokio_stream::iter(0..pieces), move |i| ImportRequest {
            scope: (i == 0).then(|| scope.clone()),
            chunk: doc[i * CHUNK..((i + 1) * CHUNK).min(doc.len())].to_vec(),
        });
    let reply = LibraryClient::new(channel)
        .import(stream)
        .await?
        .into_inner();
    Ok(reply.session.context("import returned no conversation")?.id)
}

/// (a): B measured while two imports run at a time, started again as each
/// ends, until the window is over.
async fn under_imports(
    env: &TestEnv,
    b: &FolderB,
    scope: &Scope,
    doc: Arc<Vec<u8>>,
) -> anyhow::Result<Sampled> {
    let socket = env.socket();
    let took = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&took);
    let one = move || {
        let (socket, scope, doc, took) = (
            socket.clone(),
            scope.clone(),
            Arc::clone(&doc),
            Arc::clone(&log),
        );
        async move {
            let copy = with_fresh_id(&doc)?;
            let t0 = Instant::now();
            import(&socket, &scope, copy).await?;
            if let Ok(mut t) = took.lock() {
                t.push(t0.elapsed());
            }
            anyhow::Ok(())
        }
    };
    // A round: two imports at once.
    let mut sampled = measure(b, 1000, || {
        let (x, y) = (one(), one());
        Some(async move {
            let (x, y) = tokio::join!(x, y);
            x.and(y)
        })
    })
    .await?;
    let took = took.lock().map(|t| t.clone()).unwrap_or_default();
    sampled.note = format!(
        "{} imports, each {:.1} s (median); {}",
        took.len(),
        crate::median_ms(took.clone()) / 1000.0,
        sampled.note
    );
    Ok(sampled)
}

/// (b): B measured while a fresh folder's first snapshot is taken (the
/// next fresh folder's as each ends, while there are any).
async fn under_snapshots(
    env: &TestEnv,
    b: &FolderB,
    dirs: Vec<PathBuf>,
    scope_of: &dyn Fn(&Path) -> Scope,
) -> anyhow::Result<Sampled> {
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let took = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut left = dirs.into_iter();
    let mut sampled = measure(b, 2000, || {
        let dir = left.next()?;
        let (scope, channel, took) = (scope_of(&dir), channel.clone(), Arc::clone(&took));
        Some(async move {
            let t0 = Instant::now();
            let info = SnapshotsClient::new(channel)
                .take_snapshot(TakeSnapshotRequest {
                    scope: Some(scope),
                    label: "bench".into(),
                })
                .await?
                .into_inner();
            if let Ok(mut t) = took.lock() {
                t.push((t0.elapsed(), info.files));
            }
            anyhow::Ok(())
        })
    })
    .await?;
    let took = took.lock().map(|t| t.clone()).unwrap_or_default();
    let times: Vec<String> = took
        .iter()
        .map(|(d, files)| format!("{:.1} s ({files} files)", d.as_secs_f64()))
        .collect();
    sampled.note = format!(
        "first snapshots took {}; {}",
        times.join(", "),
        sampled.note
    );
    Ok(sampled)
}

/// agentd's memory around (c).
struct StreamMemory {
    held_rss_mb: f64,
    held_hwm_mb: f64,
    /// Of `held_rss_mb`: agentd's own memory, and pages of files it maps
    /// (the search index's segments, read by a merge).
    held_anon_mb: f64,
    held_file_mb: f64,
    before_mb: f64,
    dropped_rss_mb: f64,
    ran: Duration,
    hwm_reset: bool,
}

/// (c): B measured while `streams` one-shots, opened at once on
/// connections of their own and never read, each run a command printing
/// `stream_output` bytes; agentd's memory while they are held and after
/// they are dropped.
async fn under_streams(
    env: &TestEnv,
    pid: i32,
    b: &FolderB,
    scope: &Scope,
    provider: &ProviderSettings,
    loads: &Loads,
) -> anyhow::Result<(Sampled, StreamMemory)> {
    let folder = PathBuf::from(&scope.folder);
    let before_mb = mb(status_kib(pid, "VmRSS:"));
    // Peak RSS from here on (Linux: 5 > clear_refs resets VmHWM).
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let t0 = Instant::now();
    // Opened all at once, by the load itself (opening is part of it).
    let held = Arc::new(tokio::sync::Mutex::new(Vec::with_capacity(loads.streams)));
    let (streams, output, socket) = (loads.streams, loads.stream_output, env.socket());
    let (scope, provider) = (scope.clone(), provider.clone());
    let holder = Arc::clone(&held);
    let mut once = Some(async move {
        let mut opening = tokio::task::JoinSet::new();
        for i in 0..streams {
            let (socket, holder) = (socket.clone(), Arc::clone(&holder));
            let start = oneshot_start(
                &scope,
                &provider,
                &format!("CALL head -c {output} /dev/zero | tr '\\0' x; touch done-{i}"),
            );
            opening.spawn(async move {
                let channel = agentx_shared::transport::connect(&socket).await?;
                let stream = open_stream(&channel, start).await?;
                holder.lock().await.push((channel, stream));
                anyhow::Ok(())
            });
        }
        while let Some(r) = opening.join_next().await {
            r??;
        }
        let deadline = Instant::now() + Duration::from_secs(240);
        while !(0..streams).all(|i| folder.join(format!("done-{i}")).exists()) {
            if Instant::now() > deadline {
                bail!("the one-shots' commands did not all run in 240 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    });
    let mut sampled = measure(b, 3000, || once.take()).await?;
    let ran = t0.elapsed();
    // Every command's output read by agentd and handed on (or dropped).
    settle().await;
    let held_rss_mb = mb(status_kib(pid, "VmRSS:"));
    let held_hwm_mb = mb(status_kib(pid, "VmHWM:"));
    let held_anon_mb = mb(status_kib(pid, "RssAnon:"));
    let held_file_mb = mb(status_kib(pid, "RssFile:"));
    held.lock().await.clear();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dropped_rss_mb = mb(status_kib(pid, "VmRSS:"));
    sampled.note = format!(
        "all streams opened and all commands done {:.1} s after the window began; {}",
        ran.as_secs_f64(),
        sampled.note
    );
    Ok((
        sampled,
        StreamMemory {
            held_rss_mb,
            held_hwm_mb,
            held_anon_mb,
            held_file_mb,
            before_mb,
            dropped_rss_mb,
            ran,
            hwm_reset,
        },
    ))
}

/// (d)'s numbers: wall time, failures, and the CPU time agentd and the
/// `agentx` processes used.
struct Many {
    wall: Duration,
    failures: usize,
    agentd_cpu: Duration,
    clients_cpu: Duration,
    /// The floor, in the same run: as many `agentx --version` at once (a
    /// process that starts and exits, no agentd).
    floor: Duration,
    floor_cpu: Duration,
}

/// CPU time (user and system) of this process's waited-for children so far.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |u| {
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
        };
        tv(u.user_time()) + tv(u.system_time())
    })
}

/// `n` processes made by `command` started at once: the wall time until
/// all have exited and how many failed.
fn all_at_once(n: usize, command: impl Fn(usize) -> Command) -> anyhow::Result<(Duration, usize)> {
    let start = Instant::now();
    let mut children = Vec::with_capacity(n);
    for i in 0..n {
        let mut cmd = command(i);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        children.push(cmd.spawn()?);
    }
    let mut failures = 0;
    for mut c in children {
        if !c.wait()?.success() {
            failures += 1;
        }
    }
    Ok((start.elapsed(), failures))
}

/// (d): `n` `agentx exec` processes started at once in `dir`: the wall
/// time until all have exited, how many failed, and the CPU time used;
/// beside it the floor, `n` `agentx --version` at once.
fn many_oneshots(
    env: &TestEnv,
    pid: i32,
    model: &FakeModel,
    dir: &Path,
    n: usize,
) -> anyhow::Result<Many> {
    let floor0 = children_cpu();
    let (floor, _) = all_at_once(n, |_| env.agentx(["--version"]))?;
    let floor_cpu = children_cpu().saturating_sub(floor0);
    let (agentd0, clients0) = (cpu_ticks(pid), children_cpu());
    let (wall, failures) = all_at_once(n, |i| {
        let mut cmd = env.agentx(["exec", &format!("prompt {i}")]);
        cmd.current_dir(dir)
            .env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench");
        cmd
    })?;
    Ok(Many {
        wall,
        failures,
        agentd_cpu: Duration::from_millis(10 * cpu_ticks(pid).saturating_sub(agentd0)),
        clients_cpu: children_cpu().saturating_sub(clients0),
        floor,
        floor_cpu,
    })
}

/// (e)'s numbers.
struct Resume {
    before_mb: f64,
    after_mb: f64,
    /// Once agentd was quiet too, and when that was.
    quiet_mb: f64,
    quiet: Duration,
    import: Duration,
    /// agentd's peak RSS during the import (its high-water mark, reset
    /// just before).
    import_peak_mb: f64,
    turn: Duration,
    turn_ok: Result<(), String>,
}

/// (e): idle RSS, then import a big conversation, resume it with a turn,
/// leave it (a new conversation becomes current, the client goes), wait,
/// idle RSS again.
async fn resume_big(
    env: &TestEnv,
    pid: i32,
    scope: &Scope,
    provider: &ProviderSettings,
    doc: Vec<u8>,
) -> anyhow::Result<Resume> {
    settle().await;
    let before_mb = mb(status_kib(pid, "VmRSS:"));
    // "5" resets the peak RSS the kernel reports as VmHWM.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let t0 = Instant::now();
    let id = import(&env.socket(), scope, doc).await?;
    let import = t0.elapsed();
    let import_peak_mb = mb(status_kib(pid, "VmHWM:"));
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let mut sessions = SessionsClient::new(channel.clone());
    sessions
        .open_session(OpenSessionRequest {
            scope: Some(scope.clone()),
            target: Some(open_session_request::Target::Id(id.clone())),
        })
        .await?;
    let t0 = Instant::now();
    let start = TurnStart {
        scope: Some(scope.clone()),
        session_id: id,
        message: "go on".into(),
        approval: ApprovalPolicy::Never as i32,
        provider: Some(provider.clone()),
        ..TurnStart::default()
    };
    let (tx, mut events) = open_stream(&channel, start).await?;
    let turn_ok = finish(&mut events).await.map_err(|e| e.to_string());
    let turn = t0.elapsed();
    drop((tx, events));
    sessions
        .open_session(OpenSessionRequest {
            scope: Some(scope.clone()),
            target: Some(open_session_request::Target::New(true)),
        })
        .await?;
    drop(sessions);
    drop(channel);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_mb = mb(status_kib(pid, "VmRSS:"));
    let quiet = quiesce(pid).await + Duration::from_secs(5);
    Ok(Resume {
        before_mb,
        after_mb,
        quiet_mb: mb(status_kib(pid, "VmRSS:")),
        quiet,
        import,
        import_peak_mb,
        turn,
        turn_ok,
    })
}

/// A `/proc/PID/status` field in KiB (0 when unreadable).
fn status_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// KiB in MB (10^6 bytes).
fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

/// The `q` quantile (nearest rank) in ms.
fn quantile_ms(samples: &[Duration], q: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1].as_secs_f64() * 1000.0
}

struct Report {
    idle: Sampled,
    scenarios: Vec<(String, Sampled)>,
    memory: Option<StreamMemory>,
    many: Option<Many>,
    resume: Option<Resume>,
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

impl Report {
    fn print(&self, loads: &Loads, took: Duration) {
        let s = scale();
        println!(
            "== noisy: folder B's status RPC and first token while other folders work (one agentd, fake provider answering at once)"
        );
        if s < 1.0 {
            println!("   LOADS SCALED DOWN by AGENTX_BENCH_NOISY_SCALE={s}: the goals are for 1");
        }
        println!(
            "   {STATUS_SAMPLES} status calls ({} ms apart) and {TURN_SAMPLES} turns per scenario; ms; goal: p99 <= {P99_FACTOR}x idle p99 + {P99_SLACK_MS} ms",
            STATUS_EVERY.as_millis()
        );
        println!(
            "{:<40} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}  {:<22}",
            "scenario",
            "st p50",
            "st p99",
            "ft p50",
            "ft p99",
            "st x",
            "ft x",
            "goal (status, first)"
        );
        let idle_st = quantile_ms(&self.idle.status, 0.99);
        let idle_ft = quantile_ms(&self.idle.first_token, 0.99);
        let row = |name: &str, x: &Sampled, goal: &str| {
            let st = quantile_ms(&x.status, 0.99);
            let ft = quantile_ms(&x.first_token, 0.99);
            println!(
                "{:<40} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6.1}x {:>6.1}x  {goal}",
                name,
                quantile_ms(&x.status, 0.5),
                st,
                quantile_ms(&x.first_token, 0.5),
                ft,
                st / idle_st,
                ft / idle_ft,
            );
        };
        row("idle baseline", &self.idle, "");
        let st_limit = P99_FACTOR * idle_st + P99_SLACK_MS;
        let ft_limit = P99_FACTOR * idle_ft + P99_SLACK_MS;
        for (name, x) in &self.scenarios {
            let st = quantile_ms(&x.status, 0.99);
            let ft = quantile_ms(&x.first_token, 0.99);
            row(
                name,
                x,
                &format!(
                    "{} (<= {st_limit:.1}), {} (<= {ft_limit:.1})",
                    met(st <= st_limit),
                    met(ft <= ft_limit)
                ),
            );
        }
        println!("   windows:");
        println!("     idle: {:.1} s", self.idle.window.as_secs_f64());
        for (name, x) in &self.scenarios {
            println!("     {name}: {:.1} s; {}", x.window.as_secs_f64(), x.note);
        }
        if let Some(m) = &self.memory {
            Self::print_memory(m, loads);
        }
        if let Some(m) = &self.many {
            println!(
                "(d) {} concurrent `agentx exec` in one folder: {:.2} s wall, {} failed   goal <= {MANY_GOAL_S} s: {}",
                loads.many,
                m.wall.as_secs_f64(),
                m.failures,
                met(m.wall.as_secs_f64() <= MANY_GOAL_S && m.failures == 0)
            );
            println!(
                "    CPU meanwhile: agentd {:.2} s, the agentx processes {:.2} s ({:.2} ms each)",
                m.agentd_cpu.as_secs_f64(),
                m.clients_cpu.as_secs_f64(),
                m.clients_cpu.as_secs_f64() * 1000.0 / loads.many as f64
            );
            println!(
                "    floor, same run: {} `agentx --version` at once {:.2} s wall, {:.2} ms CPU each",
                loads.many,
                m.floor.as_secs_f64(),
                m.floor_cpu.as_secs_f64() * 1000.0 / loads.many as f64
            );
        }
        if let Some(r) = &self.resume {
            Self::print_resume(r, loads);
        }
        println!("   bench took {:.0} s", took.as_secs_f64());
    }

    fn print_memory(m: &StreamMemory, loads: &Loads) {
        let peak = m.held_hwm_mb.max(m.held_rss_mb);
        println!(
            "(c) agentd RSS: {:.0} MB before; while held VmRSS {:.0} MB ({:.0} anonymous, {:.0} of mapped files), VmHWM {:.0} MB{}; {:.0} MB 3 s after dropped   goal peak <= {RSS_GOAL_MB:.0} MB: {}",
            m.before_mb,
            m.held_rss_mb,
            m.held_anon_mb,
            m.held_file_mb,
            m.held_hwm_mb,
            if m.hwm_reset {
                " (peak since (c) began)"
            } else {
                " (lifetime peak: could not reset it)"
            },
            m.dropped_rss_mb,
            met(peak <= RSS_GOAL_MB)
        );
        println!(
            "    ({} streams of {} MB each; all commands done after {:.1} s)",
            loads.streams,
            loads.stream_output / 1_000_000,
            m.ran.as_secs_f64()
        );
    }

    fn print_resume(r: &Resume, loads: &Loads) {
        println!(
            "(e) agentd idle RSS {:.0} MB before, {:.0} MB after a {} MB conversation was imported ({:.1} s), resumed (turn {:.1} s{}) and left (+5 s): {:+.0} MB   goal within {LEAK_GOAL_MB:.0} MB: {}",
            r.before_mb,
            r.after_mb,
            loads.resume_bytes / 1_000_000,
            r.import.as_secs_f64(),
            r.turn.as_secs_f64(),
            match &r.turn_ok {
                Ok(()) => String::new(),
                Err(e) => format!(", FAILED: {e}"),
            },
            r.after_mb - r.before_mb,
            met((r.after_mb - r.before_mb).abs() <= LEAK_GOAL_MB)
        );
        println!(
            "    agentd's peak RSS during the import: {:.0} MB ({:.1}x the document over the RSS before)",
            r.import_peak_mb,
            (r.import_peak_mb - r.before_mb) / (loads.resume_bytes as f64 / 1e6)
        );
        println!(
            "    once agentd was quiet ({:.1} s after leaving): {:.0} MB ({:+.0} MB)",
            r.quiet.as_secs_f64(),
            r.quiet_mb,
            r.quiet_mb - r.before_mb
        );
    }
}
