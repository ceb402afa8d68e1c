//! A turn's work is bounded: calls taken from one reply, and tool steps in
//! one turn; each limit is named when it is hit, and the turn can go on.

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code, stderr, stdout};

/// The JSON events of an `exec --json` run.
fn events(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[test]
fn a_reply_with_a_thousand_calls_runs_the_first_fifty_and_answers_the_rest() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let calls = (0..1000)
        .map(|i| {
            (
                "shell".to_owned(),
                json!({ "command": format!("echo ran {i}") }),
            )
        })
        .collect();
    model.push(Reply::ToolCalls(calls));
    let out = env.chat(&model, ["exec", "--auto", "--json", "go"], "");
    assert_code(&out, 0);
    let events = events(&out);
    let ran: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(ran.len(), 50, "{}", stdout(&out));
    assert!(ran.iter().all(|r| r["exit_code"] == 0), "{}", stdout(&out));
    assert!(
        ran[49]["output"]
            .as_str()
            .is_some_and(|o| o.ends_with("ran 49\n")),
        "{}",
        ran[49]
    );
    assert!(
        events.iter().any(|e| e["type"] == "notice"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("1000 tool calls")
                    && m.contains("max_tool_calls_per_reply = 50"))),
        "{}",
        stdout(&out)
    );
    // Every call was answered in the next request: 50 with their output,
    // 950 as not run, with a reason the model can read.
    let requests = model.requests();
    let outputs: Vec<&str> = requests[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs.len(), 1000);
    let refused = outputs.iter().filter(|o| o.starts_with("not run:")).count();
    assert_eq!(refused, 950, "{outputs:?}");
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("at most 50 run per reply"))
    );
    model.assert_schema_clean();
}

#[test]
fn the_limit_of_calls_per_reply_is_configurable() {
    let env = TestEnv::new();
    env.write_config("max_tool_calls_per_reply = 2\n");
    let model = FakeModel::start();
    let calls = (0..5)
        .map(|i| {
            (
                "shell".to_owned(),
                json!({ "command": format!("echo {i}") }),
            )
        })
        .collect();
    model.push(Reply::ToolCalls(calls));
    let out = env.chat(&model, ["exec", "--auto", "--json", "go"], "");
    assert_code(&out, 0);
    let ran = events(&out)
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .count();
    assert_eq!(ran, 2, "{}", stdout(&out));
}

#[test]
fn a_model_that_never_stops_calling_is_stopped_at_the_step_limit() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for i in 0..10 {
        model.push(Reply::tool_call(
            "shell",
            json!({ "command": format!("echo step {i}") }),
        ));
    }
    let out = env.chat(&model, ["exec", "--auto", "--max-steps", "3", "loop"], "");
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("stopped after 3 tool steps"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--max-steps"), "{}", stderr(&out));
    // Three steps ran; no fourth request went out.
    assert_eq!(model.requests().len(), 3);
    assert_eq!(model.pending_replies(), 7);
}

#[test]
fn a_chat_at_the_step_limit_goes_on_with_retry() {
    let env = TestEnv::new();
    env.write_config("max_tool_steps = 2\n");
    let model = FakeModel::start();
    for i in 0..3 {
        model.push(Reply::tool_call(
            "shell",
            json!({ "command": format!("echo step {i}") }),
        ));
    }
    let out = env.chat_auto(&model, "loop\n");
    assert!(
        stdout(&out).contains("stopped after 2 tool steps")
            || stderr(&out).contains("stopped after 2 tool steps"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(model.requests().len(), 2);
    // `retry` sends the last step's output and lets it run on.
    let out = env.chat_auto(&model, "retry\n");
    assert_code(&out, 0);
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "{}", stderr(&out));
    let sent = requests[2].body["input"].to_string();
    assert!(sent.contains("step 1"), "{sent}");
    model.assert_schema_clean();
}

/// The one-shots' states as `oneshots --json` lists them.
fn oneshot_statuses(env: &TestEnv) -> Vec<String> {
    let out = env.run(["oneshots", "--json"]);
    assert_code(&out, 0);
    agentx_tests::json_out(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_one_shot_whose_client_is_killed_stops_between_calls_that_do_not_run() {
    let mut env = TestEnv::new();
    env.write_config("max_tool_calls_per_reply = 100000\n");
    // A 100,000-call reply takes the fake server a while to stream on a
    // loaded machine: not a stall.
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "120000".into()));
    let model = FakeModel::start();
    // Calls that never run (no such tool): nothing to kill, only a list
    // to work through.
    let calls = (0..100_000)
        .map(|i| ("no_such_tool".to_owned(), json!({ "n": i })))
        .collect();
    model.push(Reply::ToolCalls(calls));
    let mut client = env.chat_command(&model, ["exec", "--json", "go"], "");
    // Killed once the list is being worked through.
    let mut stdout = std::io::BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("tool_result") {
        line.clear();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() == 0 {
            let out = client.wait_with_output().unwrap();
            panic!("no tool result: {}", agentx_tests::stderr(&out));
        }
    }
    client.kill().unwrap();
    let _ = client.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    loop {
        let statuses = oneshot_statuses(&env);
        if statuses.iter().all(|s| s != "running") {
            assert_eq!(statuses, ["interrupted"]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the one-shot ran on without its client: {statuses:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_turn_cancelled_while_it_waits_for_another_leaves_the_conversation_as_it_was() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // A's turn holds the conversation until the test releases it.
    let first = env.chat_command(
        &model,
        ["--auto"],
        "CALL touch started; while [ ! -e release ]; do sleep 0.05; done; echo done\n",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !env.work.join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "A's tool never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // B's turn on the same conversation (over gRPC, as any client may)
    // waits for it; B goes away while it waits.
    let session = env.status()["session_id"].as_str().unwrap().to_owned();
    send_and_leave(&env, &model, &session, "hello from B");
    // A is released once agentd has seen B go (its log says so): B's turn
    // is still queued then, whatever the machine's load.
    let log = env.home.join("log/agentd.log");
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("a turn's client went away")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "agentd never saw B go"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(env.work.join("release"), "").unwrap();
    let out = first.wait_with_output().unwrap();
    assert_code(&out, 0);
    let snapshots = agentx_tests::json_out(&env.run(["snapshots", "--json"]));
    let status = env.status();
    assert!(status["interrupted"].is_null(), "{status}");
    assert!(status["failed"].is_null(), "{status}");
    assert_eq!(status["pending_tool_calls"], json!([]), "{status}");
    // Only A's message went to the model; only A's snapshot pair was taken.
    let sent: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body["input"].to_string())
        .collect();
    assert!(!sent.iter().any(|s| s.contains("hello from B")), "{sent:?}");
    assert_eq!(snapshots.as_array().unwrap().len(), 2, "{snapshots}");
    // The next message goes through as if B had never been.
    let out = env.chat(&model, [] as [&str; 0], "next\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: next"), "{}", stdout(&out));
}

/// Starts a turn with `message` on conversation `session` and goes away
/// 700 ms later, before it could have begun.
fn send_and_leave(env: &TestEnv, model: &FakeModel, session: &str, message: &str) {
    use agentx_shared::proto::{ApprovalPolicy, TurnStart};
    let start = TurnStart {
        session_id: session.to_owned(),
        ..env.turn_start(model, message, ApprovalPolicy::Never)
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (tx, events) = agentx_tests::open_turn(&env.socket(), start).await;
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        drop((events, tx));
    });
}

/// Answers nobody asked for (a web view, any gRPC client) never hold up a
/// cancel: 40 stray approvals during a long command, then Cancel, and the
/// turn ends at once.
#[test]
fn stray_approvals_never_hold_up_a_cancel() {
    use agentx_shared::proto::{
        ApprovalDecision, ApprovalPolicy, TurnInput, approval_decision, turn_event, turn_input,
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.run(["daemon", "start"]), 0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let finished = runtime.block_on(async {
        let start = env.turn_start(&model, "CALL touch started; sleep 60", ApprovalPolicy::Auto);
        let (tx, mut events) = agentx_tests::open_turn(&env.socket(), start).await;
        while !env.work.join("started").exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        for i in 0..40 {
            tx.send(TurnInput {
                input: Some(turn_input::Input::Approval(ApprovalDecision {
                    call_id: format!("nobody_asked_{i}"),
                    decision: approval_decision::Decision::Yes as i32,
                })),
            })
            .await
            .unwrap();
        }
        tx.send(TurnInput {
            input: Some(turn_input::Input::Cancel(true)),
        })
        .await
        .unwrap();
        let cancelled = std::time::Instant::now();
        loop {
            let event = tokio::time::timeout(std::time::Duration::from_secs(15), events.message())
                .await
                .expect("the cancel was not seen within 15 s")
                .unwrap()
                .expect("no end of turn");
            if let Some(turn_event::Event::Finished(f)) = event.event {
                break (f, cancelled.elapsed());
            }
        }
    });
    let (finished, took) = finished;
    assert!(
        took < std::time::Duration::from_secs(10),
        "the turn ended {took:?} after the cancel"
    );
    assert!(!finished.error.is_empty(), "{finished:?}");
}
