//! agentx-bench: the project's benchmarks, each comparing agentx with a
//! baseline in the same run. `scripts/bench [NAME...]` builds and runs them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::PingRequest;
use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_tests::TestEnv;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if args.is_empty() {
        vec!["daemon"]
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        match name {
            "daemon" => bench_daemon()?,
            other => bail!("unknown benchmark {other:?}; known: daemon"),
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
