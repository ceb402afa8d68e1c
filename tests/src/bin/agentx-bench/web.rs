//! `agentx-bench web`: the web view in headless Chromium. Fixtures are
//! imported over gRPC (3,000 conversations; one of 3,000 turns); the
//! medians are from navigation start until the page is interactive.

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::{ImportRequest, Scope};
use agentx_tests::TestEnv;

const CONVERSATIONS: usize = 3_000;
const LONG_TURNS: usize = 3_000;
const RUNS: usize = 9;
/// The web view's speed targets, in ms.
const LIST_TARGET: f64 = 200.0;
const LONG_TARGET: f64 = 300.0;

fn time(ms: i64) -> String {
    agentx_shared::export::time_of(ms)
}

/// Checkpoints a conversation keeps.
const MAX_CHECKPOINTS: usize = 20;

/// An export document: `turns` exchanges, every fifth with a tool call.
fn document(id: &str, title: &str, folder: &str, turns: usize, start_ms: i64) -> String {
    let mut transcript = Vec::with_capacity(turns * 3);
    let mut checkpoints = Vec::with_capacity(turns);
    for t in 0..turns {
        let at = time(start_ms + t as i64 * 1000);
        transcript.push(json!({"at": at, "type": "user", "text": format!("question {t}: how does part {t} work?")}));
        if t % 5 == 0 {
            let call = format!("call_{t}");
            transcript.push(
                json!({"at": at, "type": "function_call", "call_id": call, "name": "shell",
                "arguments": json!({"command": format!("grep -n part{t} src/*.rs")}).to_string()}),
            );
            transcript.push(json!({"at": at, "type": "function_output", "call_id": call,
                "output": format!("src/lib.rs:{t}: fn part{t}() {{}}\n")}));
        }
        transcript.push(json!({"at": at, "type": "assistant", "text": format!("Part {t} reads its input, checks it and writes the result; see src/lib.rs line {t}.")}));
        checkpoints
            .push(json!({"turns": t + 1, "transcript_items": transcript.len(), "created_at": at}));
    }
    // A conversation keeps its newest checkpoints only (import refuses more).
    let dropped = checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
    let checkpoints = checkpoints.split_off(dropped);
    let last = time(start_ms + turns as i64 * 1000);
    json!({
        "format": "agentx-conversation", "version": 1, "exported_at": last, "exported_by": "bench",
        "conversation": {"id": id, "title": title, "folder": folder, "agent": "default",
            "created_at": time(start_ms), "updated_at": last, "turns": turns,
            "checkpoints": checkpoints, "transcript": transcript}
    })
    .to_string()
}

async fn import_all(env: &TestEnv, folder: &str) -> anyhow::Result<String> {
    let channel = agentx_shared::transport::connect(&env.socket())
        .await
        .context("connect to agentd")?;
    let mut client = LibraryClient::new(channel);
    let scope = Scope {
        folder: folder.to_owned(),
        agent: String::new(),
    };
    let base: i64 = 1_780_000_000_000;
    let mut long_id = String::new();
    for i in 0..CONVERSATIONS {
        let turns = if i == 0 { LONG_TURNS } else { 4 };
        let id = format!("{:x}-{:06x}", base + i as i64 * 60_000, i);
        let title = if i == 0 {
            "The long one".to_owned()
        } else {
            format!("Conversation {i}")
        };
        let doc = document(&id, &title, folder, turns, base + i as i64 * 60_000);
        let reply = client
            .import(tokio_stream::iter([ImportRequest {
                scope: Some(scope.clone()),
                chunk: doc.into_bytes(),
            }]))
            .await
            .with_context(|| format!("import {i}"))?
            .into_inner();
        if i == 0 {
            long_id = reply.session.map(|s| s.id).unwrap_or_default();
        }
    }
    Ok(long_id)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn bench_web() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv-tests/bin/python");
    if !python.exists() || !PathBuf::from("/usr/bin/chromium").exists() {
        bail!("the web bench needs /usr/bin/chromium, chromedriver and .venv-tests (see .ci/run)");
    }
    let env = TestEnv::new();
    let folder = std::fs::canonicalize(&env.work)?
        .to_str()
        .context("utf-8 folder")?
        .to_owned();
    if !env.run(["daemon", "start"]).status.success() {
        bail!("agentd did not start");
    }
    eprintln!("importing {CONVERSATIONS} conversations (one of {LONG_TURNS} turns)…");
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let long_id = runtime.block_on(import_all(&env, &folder))?;
    eprintln!("imported in {:.1} s", started.elapsed().as_secs_f64());

    let mut web = env
        .agentx(["web", "--no-open"])
        .env("OPENAI_API_KEY", "bench")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut url = String::new();
    std::io::BufReader::new(web.stdout.take().context("stdout")?).read_line(&mut url)?;
    let pages = json!({
        "list": ["#/", "list"],
        "long": [format!("#/c?id={long_id}"), "conversation"],
    });
    let out = Command::new(&python)
        .arg(root.join("tests/web/bench.py"))
        .args([url.trim(), &pages.to_string(), &RUNS.to_string()])
        // Chromium's own temporary directories go with the env.
        .env("TMPDIR", env.root().join("tmp"))
        .env("SE_AVOID_STATS", "true")
        .output()?;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(web.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = web.wait();
    let _ = env.run(["daemon", "stop"]);
    if !out.status.success() {
        bail!("bench.py failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let times: Value = serde_json::from_slice(&out.stdout)?;
    let get = |name: &str| -> Vec<f64> {
        times[name]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let (list, long) = (median(get("list")), median(get("long")));
    println!("web (headless Chromium, {RUNS} fresh loads each, navigation start → interactive):");
    println!(
        "  list of {CONVERSATIONS} conversations: median {list:.0} ms (target ≤ {LIST_TARGET:.0} ms) {}",
        if list <= LIST_TARGET { "ok" } else { "OVER" }
    );
    println!(
        "  … all {CONVERSATIONS} rows in the page: median {:.0} ms",
        median(get("list_complete"))
    );
    println!(
        "  page of a {LONG_TURNS}-turn conversation: median {long:.0} ms (target ≤ {LONG_TARGET:.0} ms) {}",
        if long <= LONG_TARGET { "ok" } else { "OVER" }
    );
    Ok(())
}
