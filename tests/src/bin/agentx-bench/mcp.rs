//! `agentx-bench mcp`: MCP servers owned by agentd. 20 conversations and
//! 100 one-shots calling one server at once (server processes started,
//! beside one per session as the anchors do), agentd's time per call beside
//! a direct rmcp client on the same server, and the first call cold
//! against warm.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{ApprovalPolicy, Scope, TurnInput, TurnStart, turn_event, turn_input};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;

use crate::median_ms;

const CONVERSATIONS: usize = 20;
const ONESHOTS: usize = 100;
const CALLS: usize = 50;
/// How often a turn through agentd calls the tool in this benchmark, about.
const PACE: Duration = Duration::from_millis(10);

/// server-everything's entry point, as `.ci/run` installs it.
fn everything() -> anyhow::Result<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !bin.exists() {
        bail!(
            "server-everything is not installed: npm install --prefix .mcp-servers \
             @modelcontextprotocol/server-everything"
        );
    }
    Ok(bin)
}

pub fn bench_mcp() -> anyhow::Result<()> {
    let server = everything()?;
    let env = TestEnv::new();
    let starts = env.root().join("starts");
    // Each start of the server appends a line: the processes started.
    env.write_config(&format!(
        "[mcp_servers.everything]\ncommand = \"sh\"\n\
         args = [\"-c\", \"echo $$ >> {} && exec node {}\"]\n",
        starts.display(),
        server.display()
    ));
    let model = FakeModel::start();
    model.set_lean(true);
    println!("== mcp: server-everything's echo called through agentd");
    concurrent(&env, &model, &starts)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (cold, warm) = runtime.block_on(through_agentd(&env, &model, Call::Echo))?;
    let (_, shell) = runtime.block_on(through_agentd(&env, &model, Call::ShellTrue))?;
    let direct = runtime.block_on(direct_calls(&server, Duration::ZERO))?;
    // Through agentd a call comes once per turn (two model requests and
    // the journal's writes between two calls): the server idles between
    // calls, and waking it costs time a back-to-back loop never sees.
    let paced = runtime.block_on(direct_calls(&server, PACE))?;
    let (agentd_ms, direct_ms) = (median_ms(warm.clone()), median_ms(paced));
    println!(
        "{:<62} {:>8.2} ms",
        format!("direct rmcp client, echo calls back to back (median of {CALLS})"),
        median_ms(direct)
    );
    println!(
        "{:<62} {:>8.2} ms",
        format!(
            "direct rmcp client, one echo call every {} ms (median)",
            PACE.as_millis()
        ),
        direct_ms
    );
    println!(
        "{:<62} {:>8.2} ms",
        format!("through agentd, tool call to tool result (median of {CALLS})"),
        agentd_ms
    );
    println!(
        "{:<62} {:>8.2} ms",
        "added by agentd per call (difference of medians, paced)",
        agentd_ms - direct_ms
    );
    println!(
        "{:<62} {:>8.2} ms",
        format!("a shell `true` call through agentd, same journaling (median of {CALLS})"),
        median_ms(shell)
    );
    println!(
        "{:<62} {:>8.2} ms",
        "first call, server cold (started by the call)",
        cold.as_secs_f64() * 1000.0
    );
    println!(
        "{:<62} {:>8.2} ms",
        "later calls, server warm (median)", agentd_ms
    );
    Ok(())
}

/// 20 conversations and 100 one-shots at once, each calling echo once.
fn concurrent(env: &TestEnv, model: &FakeModel, starts: &std::path::Path) -> anyhow::Result<()> {
    let _ = env.run(["daemon", "restart"]);
    let _ = std::fs::remove_file(starts);
    let message = "TOOL mcp__everything__echo {\"message\":\"hi\"}";
    let mut children = Vec::new();
    let begin = Instant::now();
    for i in 0..CONVERSATIONS + ONESHOTS {
        let mut cmd = if i < CONVERSATIONS {
            let mut cmd = env.agentx(["-C", &format!("c{i}"), "--approval", "auto"]);
            std::fs::create_dir_all(env.work.join(format!("c{i}")))?;
            cmd.stdin(Stdio::piped());
            cmd
        } else {
            env.agentx(["exec", "--auto", message])
        };
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(format!("{message}\n").as_bytes())?;
        }
        children.push(child);
    }
    let mut failures = 0;
    for mut c in children {
        if !c.wait()?.success() {
            failures += 1;
        }
    }
    let wall = begin.elapsed();
    let started = std::fs::read_to_string(starts)
        .unwrap_or_default()
        .lines()
        .count();
    println!(
        "{CONVERSATIONS} conversations + {ONESHOTS} one-shots at once: {:.2} s, {failures} failed",
        wall.as_secs_f64()
    );
    println!(
        "{:<62} {:>8}",
        "server processes started by agentd", started
    );
    println!(
        "{:<62} {:>8}",
        "started by a client that runs one per session",
        CONVERSATIONS + ONESHOTS
    );
    Ok(())
}

/// What a benchmark turn calls.
#[derive(Clone, Copy, PartialEq)]
enum Call {
    Echo,
    ShellTrue,
}

/// One conversation calling `call` `CALLS + 1` times after a restart of
/// agentd: the first call (cold) and the others (warm), each from its tool
/// call event to its tool result event.
async fn through_agentd(
    env: &TestEnv,
    model: &FakeModel,
    call: Call,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let _ = env.run(["daemon", "restart"]);
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let scope = Scope {
        folder: env.work.display().to_string(),
        agent: "default".into(),
    };
    let session = crate::new_session(&channel, &scope).await?;
    let provider = crate::fake_provider(model);
    let mut times = Vec::with_capacity(CALLS + 1);
    for i in 0..=CALLS {
        let start = TurnStart {
            scope: Some(scope.clone()),
            session_id: session.clone(),
            message: match call {
                Call::Echo => format!("TOOL mcp__everything__echo {{\"message\":\"m{i}\"}}"),
                Call::ShellTrue => format!("CALL true # m{i}"),
            },
            approval: ApprovalPolicy::Auto as i32,
            provider: Some(provider.clone()),
            ..TurnStart::default()
        };
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tx.send(TurnInput {
            input: Some(turn_input::Input::Start(start)),
        })
        .await?;
        let mut events = TurnsClient::new(channel.clone())
            .run_turn(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let mut called = None;
        let mut took = None;
        while let Some(event) = events.message().await? {
            match event.event {
                Some(turn_event::Event::ToolCall(_)) => called = Some(Instant::now()),
                Some(turn_event::Event::ToolResult(r)) => {
                    if call == Call::Echo && !r.output.contains(&format!("m{i}")) {
                        bail!("the echo call failed: {}", r.output);
                    }
                    took = called.map(|c| c.elapsed());
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
        times.push(took.context("no tool result")?);
    }
    let cold = times.remove(0);
    Ok((cold, times))
}

/// The same echo calls from a direct rmcp client over the server's stdio,
/// `pace` apart.
async fn direct_calls(server: &std::path::Path, pace: Duration) -> anyhow::Result<Vec<Duration>> {
    let mut child = tokio::process::Command::new("node")
        .arg(server)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        bail!("no pipes to the server");
    };
    let client = ().serve((stdout, stdin)).await?;
    let mut times = Vec::with_capacity(CALLS);
    for i in 0..=CALLS {
        let mut args = serde_json::Map::new();
        args.insert("message".into(), json!(format!("m{i}")));
        tokio::time::sleep(pace).await;
        let begin = Instant::now();
        client
            .peer()
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await?;
        if i > 0 {
            times.push(begin.elapsed());
        }
    }
    drop(client);
    let _ = child.kill().await;
    Ok(times)
}
