//! `agentx-bench daemon`: a status round trip and ping rates, beside a bare process spawn,
//! and how often an idle agentd wakes up.

use std::process::Command;
use std::time::{Duration, Instant};

use agentx_shared::proto::PingRequest;
use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_tests::TestEnv;

use crate::{summary, time_command, which};

pub fn bench_daemon() -> anyhow::Result<()> {
    const RUNS: usize = 200;
    let env = TestEnv::new();
    crate::start_daemon(&env)?;
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
    drop(runtime);
    let pid = env.daemon_pids().first().copied();
    let idle = pid.map(idle_wakeups).transpose()?;

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
    if let Some(per_second) = idle {
        println!(
            "{:<44} {:>10.1}   (context switches of all its threads over {} s, no client; \
             its pid-file and socket guard alone wakes it twice a second)",
            "idle agentd: wake-ups per second",
            per_second,
            IDLE_WINDOW.as_secs()
        );
    }
    Ok(())
}

/// How long an idle agentd is watched.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// Wake-ups per second of agentd `pid` with no client: the context
/// switches of all its threads (each wake-up is at least one) over
/// [`IDLE_WINDOW`], after a second to settle.
fn idle_wakeups(pid: i32) -> anyhow::Result<f64> {
    fn switches(pid: i32) -> anyhow::Result<u64> {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
            total += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
        Ok(total)
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = switches(pid)?;
    std::thread::sleep(IDLE_WINDOW);
    let after = switches(pid)?;
    Ok(after.saturating_sub(before) as f64 / IDLE_WINDOW.as_secs_f64())
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
