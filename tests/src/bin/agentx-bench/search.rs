//! `agentx-bench search`: 10,000 conversations x 50 turns written into a
//! profile in the store's on-disk format; agentd indexes them; median query
//! latency, build time and index size, beside `rg` over the same files.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::json;

use agentx_shared::proto::SearchRequest;
use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::rng::Rng;
use agentx_tests::TestEnv;

const CONVERSATIONS: usize = 10_000;
const TURNS: usize = 50;
const FOLDERS: usize = 100;

/// Pronounceable words; index 0 is the most frequent (a Zipf-like pick).
fn vocabulary(n: usize) -> Vec<String> {
    const ON: [&str; 16] = [
        "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "sh",
    ];
    const NU: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
    (0..n)
        .map(|i| {
            let mut w = String::new();
            let mut k = i + 7;
            for _ in 0..3 {
                w.push_str(ON[k % ON.len()]);
                k /= ON.len();
                w.push_str(NU[k % NU.len()]);
                k /= NU.len();
            }
            format!("{w}{}", i % 97)
        })
        .collect()
}

fn sentence(rng: &mut Rng, vocab: &[String], words: usize) -> String {
    let mut out = Vec::with_capacity(words);
    for _ in 0..words {
        // Squaring skews toward the front: common words are common.
        let r = rng.index(1 << 16) as f64 / f64::from(1 << 16);
        out.push(vocab[((r * r) * vocab.len() as f64) as usize].as_str());
    }
    out.join(" ")
}

/// Writes the profile; returns (transcript bytes, folders).
fn generate(home: &Path, root: &Path) -> anyhow::Result<(u64, Vec<PathBuf>)> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(home)?;
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700))?;
    let vocab = vocabulary(20_000);
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut bytes = 0u64;
    let mut folders = Vec::new();
    for f in 0..FOLDERS {
        let folder = root.join(format!("project-{f:03}"));
        std::fs::create_dir_all(&folder)?;
        let folder = std::fs::canonicalize(&folder)?;
        let key = agentx_shared::folder::folder_key(&folder);
        let dir = home.join("sessions").join(key).join("default");
        std::fs::create_dir_all(&dir)?;
        for c in 0..CONVERSATIONS / FOLDERS {
            let id = format!(
                "{:011x}-{:06x}",
                1_700_000_000_000u64 + (f * 1000 + c) as u64,
                c
            );
            let mut journal = String::new();
            let mut items = 0u64;
            let t0 = 1_700_000_000_000i64 + (f * 1000 + c) as i64 * 60_000;
            let mut title = String::new();
            for t in 0..TURNS {
                let at = t0 + t as i64 * 1000;
                let n = 12 + rng.index(20);
                let user = sentence(&mut rng, &vocab, n);
                if t == 0 {
                    title = user.chars().take(60).collect();
                }
                let mut lines = vec![json!({"at": at, "type": "user", "text": user})];
                if t % 5 == 4 {
                    let call = format!("call_{c}_{t}");
                    lines.push(json!({"at": at, "type": "function_call", "call_id": call, "name": "shell",
                        "arguments": json!({"command": format!("grep -rn {} src", vocab[rng.index(vocab.len())])}).to_string()}));
                    let output: Vec<String> = (0..8)
                        .map(|l| {
                            format!(
                                "src/{}.rs:{l}: {}",
                                vocab[rng.index(500)],
                                sentence(&mut rng, &vocab, 8)
                            )
                        })
                        .collect();
                    lines.push(json!({"at": at, "type": "function_output", "call_id": call, "output": output.join("\n")}));
                }
                let n = 40 + rng.index(60);
                let assistant = sentence(&mut rng, &vocab, n);
                lines.push(json!({"at": at, "type": "assistant", "text": assistant}));
                for line in lines {
                    journal.push_str(&line.to_string());
                    journal.push('\n');
                    items += 1;
                }
            }
            bytes += journal.len() as u64;
            std::fs::write(dir.join(format!("{id}.jsonl")), &journal)?;
            let doc = json!({
                "format": 1, "id": id, "folder": folder.to_string_lossy(), "agent": "default",
                "title": title, "created_at": t0, "updated_at": t0 + 50_000, "response_id": null,
                "usage": {"input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "total_tokens": 0},
                "last_user": "", "last_assistant": "", "pending_shell": "", "pending_calls": [],
                "turns": TURNS, "approve_all": false, "journal_items": items,
                "journal_bytes": journal.len(),
            });
            std::fs::write(dir.join(format!("{id}.json")), doc.to_string())?;
        }
        folders.push(folder);
    }
    Ok((bytes, folders))
}

pub fn bench_search() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let env = TestEnv::new();
    eprintln!("generating {CONVERSATIONS} conversations x {TURNS} turns…");
    let started = Instant::now();
    let (transcript_bytes, folders) = generate(&env.home, &env.root().join("projects"))?;
    eprintln!("generated in {:.1} s", started.elapsed().as_secs_f64());

    let started = Instant::now();
    if !env.run(["daemon", "start"]).status.success() {
        bail!("agentd did not start");
    }
    let queries = queries(&vocabulary(20_000));
    let timings = runtime.block_on(measure(&env, &folders, &queries, started))?;
    let index_bytes = crate::dir_bytes(&env.home.join("search"));
    let scan = scan_baseline(&env.home.join("sessions"), &queries)?;
    print_report(&queries, transcript_bytes, index_bytes, timings, scan);
    let _ = env.run(["daemon", "stop"]);
    Ok(())
}

/// Common, mid and rare words, and two-word queries.
fn queries(vocab: &[String]) -> Vec<String> {
    let mut queries: Vec<String> = Vec::new();
    for i in [0usize, 3, 40, 150, 600, 2000, 5000, 9000, 14000, 19000] {
        queries.push(vocab[i].clone());
    }
    for (a, b) in [(1, 7), (30, 300), (800, 12000), (5, 18000), (100, 101)] {
        queries.push(format!("{} {}", vocab[a], vocab[b]));
    }
    queries
}

/// What agentd's search was timed at.
struct Timings {
    /// From agentd's start until its index covered every conversation.
    build: Duration,
    /// Queries over every folder (gRPC).
    all: Vec<Duration>,
    /// Queries in one folder (gRPC).
    scoped: Vec<Duration>,
    /// `agentx search --all` processes.
    cli: Vec<Duration>,
}

/// Waits for the index, then times the queries through gRPC (five
/// rounds) and through the CLI.
async fn measure(
    env: &TestEnv,
    folders: &[PathBuf],
    queries: &[String],
    started: Instant,
) -> anyhow::Result<Timings> {
    let channel = agentx_shared::transport::connect(&env.socket())
        .await
        .context("connect to agentd")?;
    let mut client = LibraryClient::new(channel);
    loop {
        let reply = client
            .search(request("zzz", &folders[0], None))
            .await?
            .into_inner();
        if !reply.indexing && reply.indexed_sessions as usize >= CONVERSATIONS {
            break;
        }
        if started.elapsed() > Duration::from_secs(3600) {
            bail!("the index was not built within an hour");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let build = started.elapsed();
    let (all, scoped) = grpc_queries(&mut client, folders, queries).await?;
    let cli = cli_queries(env, queries)?;
    Ok(Timings {
        build,
        all,
        scoped,
        cli,
    })
}

/// A search for `q` in `scope`, or over every folder (scoped to `first`,
/// as the CLI sends it) when `scope` is `None`.
fn request(q: &str, first: &Path, scope: Option<&Path>) -> SearchRequest {
    SearchRequest {
        scope: Some(agentx_shared::proto::Scope {
            folder: scope.unwrap_or(first).to_string_lossy().into_owned(),
            agent: "default".into(),
        }),
        query: q.to_owned(),
        all: scope.is_none(),
        limit: 20,
    }
}

/// Five rounds of every query, over every folder and in one folder each.
async fn grpc_queries(
    client: &mut LibraryClient<tonic::transport::Channel>,
    folders: &[PathBuf],
    queries: &[String],
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut all = Vec::new();
    let mut scoped = Vec::new();
    for round in 0..5 {
        for (i, q) in queries.iter().enumerate() {
            let t = Instant::now();
            let reply = client
                .search(request(q, &folders[0], None))
                .await?
                .into_inner();
            all.push(t.elapsed());
            if round == 0 && reply.hits.is_empty() {
                eprintln!("note: no hits for {q:?}");
            }
            let t = Instant::now();
            client
                .search(request(q, &folders[0], Some(&folders[i % folders.len()])))
                .await?;
            scoped.push(t.elapsed());
        }
    }
    Ok((all, scoped))
}

/// Every query once as an `agentx search --all --json` process.
fn cli_queries(env: &TestEnv, queries: &[String]) -> anyhow::Result<Vec<Duration>> {
    let mut cli = Vec::new();
    for q in queries {
        let t = Instant::now();
        let out = env
            .agentx(["search", "--all", "--json", q])
            .stdout(Stdio::null())
            .status()?;
        cli.push(t.elapsed());
        if !out.success() {
            bail!("agentx search {q} failed");
        }
    }
    Ok(cli)
}

/// The baseline's timings: a plain scan of the transcript files.
struct Scan {
    tool: &'static str,
    args: &'static [&'static str],
    samples: Vec<Duration>,
}

/// The baseline: `rg` (or `grep -r` without it) for each query's first
/// word over the same transcript files.
fn scan_baseline(sessions: &Path, queries: &[String]) -> anyhow::Result<Scan> {
    let (tool, args): (&str, &[&str]) = if Command::new("rg").arg("--version").output().is_ok() {
        ("rg", &["-i", "-l", "--no-messages"])
    } else {
        eprintln!(
            "note: rg is not installed; the baseline is grep -r (install ripgrep to compare with rg)"
        );
        ("grep", &["-r", "-i", "-l"])
    };
    let mut samples = Vec::new();
    for q in queries {
        // Scanners match the first word (they have no AND of words).
        let word = q.split(' ').next().unwrap_or(q);
        let t = Instant::now();
        Command::new(tool)
            .args(args)
            .arg(word)
            .arg(sessions)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        samples.push(t.elapsed());
    }
    Ok(Scan {
        tool,
        args,
        samples,
    })
}

fn print_report(
    queries: &[String],
    transcript_bytes: u64,
    index_bytes: u64,
    timings: Timings,
    scan: Scan,
) {
    let mib = |b: u64| b as f64 / 1048576.0;
    println!(
        "== search: {CONVERSATIONS} conversations x {TURNS} turns, {} queries",
        queries.len()
    );
    println!(
        "transcripts            {:>9.1} MiB (.jsonl journals)",
        mib(transcript_bytes)
    );
    println!(
        "index                  {:>9.1} MiB ({:.0}% of the transcripts)",
        mib(index_bytes),
        100.0 * index_bytes as f64 / transcript_bytes as f64
    );
    println!(
        "index build (agentd start to up to date) {:>7.1} s",
        timings.build.as_secs_f64()
    );
    println!(
        "query, every folder (gRPC)     median {:>8.2} ms",
        crate::median_ms(timings.all)
    );
    println!(
        "query, one folder (gRPC)       median {:>8.2} ms",
        crate::median_ms(timings.scoped)
    );
    println!(
        "agentx search --all (process)  median {:>8.2} ms",
        crate::median_ms(timings.cli)
    );
    println!(
        "{} {} (same files)       median {:>8.2} ms",
        scan.tool,
        scan.args.join(" "),
        crate::median_ms(scan.samples)
    );
}
