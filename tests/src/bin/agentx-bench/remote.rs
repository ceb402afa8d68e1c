//! `agentx-bench remote`: what the remote store costs, against a
//! throwaway PostgreSQL cluster on loopback started for the run: turn latency
//! with the remote on vs off, interleaved; push throughput; listing 1,000 rows.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::{ProviderSettings, Scope, turn_event};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{Cluster, git_repo};

use crate::{median_ms, open_message, time_command};

/// `AGENTX_BENCH_<name>` as a count, else `default`.
fn count(name: &str, default: usize) -> usize {
    std::env::var(format!("AGENTX_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A profile whose folder is a clone of acme/bench; remote on when `url`.
fn profile(url: Option<&str>) -> TestEnv {
    let mut env = TestEnv::new();
    git_repo(&env.work, "git@github.com:acme/bench.git");
    env.extra_env
        .push(("AGENTX_MACHINE".into(), "bench-machine".into()));
    if let Some(url) = url {
        env.extra_env
            .push(("AGENTX_REMOTE_URL".into(), url.to_owned()));
    }
    env
}

/// `agentx sync --json` (bounded by `wait_ms`), checked to have reached the server.
fn sync(env: &TestEnv, wait_ms: u32) -> anyhow::Result<serde_json::Value> {
    let out = env.run(["sync", "--json", "--wait-ms", &wait_ms.to_string()]);
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("sync: {}", String::from_utf8_lossy(&out.stderr)))?;
    if reply["reached"] != true {
        bail!("sync did not reach the server: {reply}");
    }
    Ok(reply)
}

pub fn bench_remote() -> anyhow::Result<()> {
    let pg = Cluster::start().context("PostgreSQL server binaries are not installed")?;
    pg.create_db("bench");
    let url = pg.url("bench");
    let model = FakeModel::start();
    model.set_lean(true);
    let turns = count("REMOTE_TURNS", 300);
    let push_turns = count("PUSH_TURNS", 5000);
    let listed = count("REMOTE_CONVERSATIONS", 1000);

    let on = profile(Some(&url));
    let off = profile(None);
    let (with, without) = turn_latency(&on, &off, &model, turns)?;
    let (repl_on, repl_off) = repl_runs(&on, &off, &model)?;
    let (records, push_time, pushed) = push_throughput(&pg, &url, &model, push_turns)?;
    let (list_on, list_off, remote_rows) = listing(&pg, &on, &off, listed)?;

    report(&with, &without, turns);
    let (r_on, r_off) = (median_ms(repl_on), median_ms(repl_off));
    println!(
        "{:<58} {:>8.2} ms",
        format!("REPL of {REPL_TURNS} turns, remote on (median of {REPL_RUNS})"),
        r_on
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("REPL of {REPL_TURNS} turns, remote off (median of {REPL_RUNS})"),
        r_off
    );
    println!(
        "{:<58} {:>8.2} ms a turn (on/off = {:.2})",
        "added by the remote in the REPL",
        (r_on - r_off) / REPL_TURNS as f64,
        r_on / r_off
    );
    println!(
        "{:<58} {:>8} records in {:.2} s = {:.0} records/s (sync pushed {pushed})",
        format!("push of a {push_turns}-turn conversation"),
        records,
        push_time.as_secs_f64(),
        records as f64 / push_time.as_secs_f64(),
    );
    let list_median = median_ms(list_on);
    println!(
        "{:<58} {:>8.2} ms ({remote_rows} remote rows listed; goal <= 50 ms: {})",
        format!("agentx sessions, {listed} remote conversations (median)"),
        list_median,
        if list_median <= 50.0 { "met" } else { "MISSED" }
    );
    println!(
        "{:<58} {:>8.2} ms",
        "agentx sessions, remote off (median)",
        median_ms(list_off)
    );
    Ok(())
}

/// The pause after each turn of the turn-time comparison.
const PAUSE: Duration = Duration::from_millis(40);

/// Turn times with the remote on and off, interleaved in one run.
fn turn_latency(
    on: &TestEnv,
    off: &TestEnv,
    model: &FakeModel,
    turns: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    crate::start_daemon(on)?;
    crate::start_daemon(off)?;
    let times = runtime()?.block_on(async {
        let mut on_turns = Turns::open(on, model).await?;
        let mut off_turns = Turns::open(off, model).await?;
        let (mut with, mut without) = (Vec::new(), Vec::new());
        // Interleaved, and which goes first alternates, so that the
        // machine's load drifts the same way for both. A pause after each
        // turn, as between a user's messages, lets the background push of
        // the last one end: it is not the next turn's cost (on 2 cores it
        // would land on whichever turn comes next, usually the off one).
        for i in 0..turns {
            tokio::time::sleep(PAUSE).await;
            if i % 2 == 0 {
                with.push(on_turns.turn(i).await?);
                tokio::time::sleep(PAUSE).await;
                without.push(off_turns.turn(i).await?);
            } else {
                without.push(off_turns.turn(i).await?);
                tokio::time::sleep(PAUSE).await;
                with.push(on_turns.turn(i).await?);
            }
        }
        Ok::<_, anyhow::Error>((with, without))
    })?;
    sync(on, 60_000)?;
    Ok(times)
}

/// Messages per REPL run, and runs per profile.
const REPL_TURNS: usize = 30;
const REPL_RUNS: usize = 9;

/// `agentx` REPLs of [`REPL_TURNS`] messages each (process start to exit,
/// as an earlier version measured), remote on and off alternating: (on, off).
fn repl_runs(
    on: &TestEnv,
    off: &TestEnv,
    model: &FakeModel,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let input: String = (0..REPL_TURNS).map(|i| format!("message {i}\n")).collect();
    let run = |env: &TestEnv| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let out = env.chat(model, ["--approval", "never"], &input);
        if !out.status.success() {
            bail!("REPL failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(started.elapsed())
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..REPL_RUNS {
        if i % 2 == 0 {
            with.push(run(on)?);
            without.push(run(off)?);
        } else {
            without.push(run(off)?);
            with.push(run(on)?);
        }
    }
    Ok((with, without))
}

/// A conversation made while the server was unreachable, then agentd
/// started with it reachable, timed until `sync` returns: (records on the
/// server, time, what `sync` itself reported pushing).
fn push_throughput(
    pg: &Cluster,
    url: &str,
    model: &FakeModel,
    turns: usize,
) -> anyhow::Result<(i64, Duration, serde_json::Value)> {
    let mut push = profile(Some(&format!(
        "postgresql://agentx@127.0.0.1:{}/nowhere",
        pg.port
    )));
    crate::start_daemon(&push)?;
    runtime()?.block_on(async {
        let mut t = Turns::open(&push, model).await?;
        for i in 0..turns {
            t.turn(i).await?;
            if (i + 1) % 1000 == 0 {
                eprintln!("  {} turns done", i + 1);
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    push.kill_daemons();
    push.extra_env.retain(|(k, _)| k != "AGENTX_REMOTE_URL");
    push.extra_env
        .push(("AGENTX_REMOTE_URL".into(), url.to_owned()));
    let started = Instant::now();
    crate::start_daemon(&push)?;
    let pushed = sync(&push, 600_000)?;
    let took = started.elapsed();
    // The whole conversation is there (some may have gone before `sync`
    // asked: agentd pushes from its start).
    let records = pg.count(
        "bench",
        "SELECT count(*) FROM records WHERE conversation_id = \
         (SELECT id FROM conversations ORDER BY records DESC LIMIT 1)",
    );
    Ok((records, took, pushed["pushed_records"].clone()))
}

/// `agentx sessions --json` with `listed` remote conversations in the
/// project, and with the remote off: (times on, times off, remote rows).
fn listing(
    pg: &Cluster,
    on: &TestEnv,
    off: &TestEnv,
    listed: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, usize)> {
    pg.execute(
        "bench",
        &format!(
            "INSERT INTO conversations (id, project, agent, title, machine, folder,
                 created_at, updated_at, turns, records)
             SELECT lpad(to_hex(g), 12, '0') || '-abcdef', 'github.com/acme/bench', 'default',
                    'remote conversation ' || g, 'elsewhere', '/srv/bench',
                    now() - g * interval '1 minute', now() - g * interval '1 minute', 3, 6
               FROM generate_series(1, {listed}) g"
        ),
    );
    let check = on.run(["sessions", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&check.stdout)?;
    let remote_rows = rows
        .as_array()
        .map_or(0, |a| a.iter().filter(|s| s["where"] != "local").count());
    // The remote also holds the conversation of the turns above.
    if remote_rows != (listed + 1).min(1000) {
        bail!("agentx sessions listed {remote_rows} remote conversations, not {listed}");
    }
    let (mut list_on, mut list_off) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        list_on.extend(time_command(|| on.agentx(["sessions", "--json"]), 1)?);
        list_off.extend(time_command(|| off.agentx(["sessions", "--json"]), 1)?);
    }
    Ok((list_on, list_off, remote_rows))
}

fn report(with: &[Duration], without: &[Duration], turns: usize) {
    let (on, off) = (median_ms(with.to_vec()), median_ms(without.to_vec()));
    // Each on turn against the off turn next to it: robust to load drift.
    let mut paired: Vec<f64> = with
        .iter()
        .zip(without)
        .map(|(a, b)| (a.as_secs_f64() - b.as_secs_f64()) * 1000.0)
        .collect();
    paired.sort_by(f64::total_cmp);
    let paired = paired.get(paired.len() / 2).copied().unwrap_or(0.0);
    println!("== remote: PostgreSQL on loopback, fake provider answering at once");
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, remote on (median of {turns})"),
        on
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, remote off (median of {turns})"),
        off
    );
    println!(
        "{:<58} {:>8.2} ms (on/off = {:.2}; goal <= 2 ms: {})",
        "added by the remote (difference of medians)",
        on - off,
        on / off,
        if on - off <= 2.0 { "met" } else { "MISSED" }
    );
    println!(
        "{:<58} {:>8.2} ms",
        "added by the remote (median of paired differences)", paired
    );
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// One conversation driven turn by turn over gRPC.
struct Turns {
    channel: tonic::transport::Channel,
    scope: Scope,
    session: String,
    provider: ProviderSettings,
}

impl Turns {
    async fn open(env: &TestEnv, model: &FakeModel) -> anyhow::Result<Self> {
        let channel = agentx_shared::transport::connect(&env.socket()).await?;
        let scope = Scope {
            folder: env.work.display().to_string(),
            agent: "default".into(),
        };
        let session = crate::new_session(&channel, &scope).await?;
        let provider = crate::fake_provider(model);
        Ok(Self {
            channel,
            scope,
            session,
            provider,
        })
    }

    /// One turn, start to finish.
    async fn turn(&mut self, i: usize) -> anyhow::Result<Duration> {
        let (tx, t0, mut events) =
            open_message(&self.channel, &self.scope, &self.session, &self.provider, i).await?;
        while let Some(event) = events.message().await? {
            if let Some(turn_event::Event::Finished(f)) = event.event {
                if f.status != agentx_shared::proto::TurnStatus::Completed as i32 {
                    bail!("turn {i} failed: {}", f.error);
                }
                break;
            }
        }
        drop(tx);
        Ok(t0.elapsed())
    }
}
