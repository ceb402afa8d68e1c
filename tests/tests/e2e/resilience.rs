//! Conversation resilience end to end: checkpoints and rollback (with undo
//! and the 20-checkpoint cap), the shared checkpoint, retries and failure
//! markers, lost response ids, and turns cut short by a dead client or daemon.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::json_out;
use agentx_tests::{TestEnv, assert_code, stderr, stdout, wait_pid_gone, wait_status};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The shared checkpoint recorded for this env's work folder.
fn shared_response_id(env: &TestEnv) -> Value {
    let file = env
        .profile_files()
        .into_iter()
        .find(|p| p.ends_with("shared.json"))
        .expect("no shared.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let folder = std::fs::canonicalize(&env.work)
        .unwrap()
        .display()
        .to_string();
    doc["shared"][folder]["response_id"].clone()
}

#[test]
fn rollback_restores_a_checkpoint_and_can_be_undone() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "one\ntwo\nthree\n"), 0);
    let ids = model.stored_response_ids();
    let cps = json_out(&env.run(["checkpoints", "--json"]));
    let cps = cps.as_array().unwrap();
    assert_eq!(cps.len(), 3);
    assert_eq!(cps[0]["index"], 1);
    assert_eq!(cps[0]["last_user_message"], "three");
    assert_eq!(cps[0]["response_id"], json!(ids[2]));
    assert_eq!(cps[2]["last_user_message"], "one");
    for field in ["index", "response_id", "created_at", "last_user_message"] {
        assert!(cps[0].get(field).is_some(), "{field}");
    }
    assert_eq!(shared_response_id(&env), json!(ids[2]));

    let before = env.status();
    assert_code(&env.run(["rollback", "2"]), 0);
    let after = env.status();
    assert_eq!(after["response_id"], json!(ids[1]));
    assert_eq!(after["turns"], 2);
    assert_eq!(after["usage"]["total_tokens"], 30);
    assert!(after["rollback_backup"].is_object());
    assert_eq!(after["checkpoints"], 2);
    assert_eq!(
        shared_response_id(&env),
        json!(ids[1]),
        "a rollback moves the shared checkpoint"
    );

    // Undo puts everything back as it was.
    assert_code(&env.run(["rollback", "--undo"]), 0);
    let undone = env.status();
    for field in [
        "response_id",
        "turns",
        "usage",
        "checkpoints",
        "transcript_items",
    ] {
        assert_eq!(undone[field], before[field], "{field}");
    }
    assert_eq!(undone["rollback_backup"], Value::Null);

    // Roll back again and go on: the model continues from turn two.
    assert_code(&env.run(["rollback", "2"]), 0);
    let out = env.chat_auto(&model, "four\n");
    assert_eq!(stdout(&out).trim(), "echo: four [turns seen: 3]");
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(last["previous_response_id"], json!(ids[1]));
    // After new turns the old backup cannot be undone without losing them.
    let out = env.run(["rollback", "--undo"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("went on after the rollback"),
        "{}",
        stderr(&out)
    );
    model.assert_schema_clean();
}

#[test]
fn only_the_last_20_checkpoints_are_kept() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let lines: String = (1..=22).map(|i| format!("m{i}\n")).collect();
    assert_code(&env.chat_auto(&model, &lines), 0);
    let cps = json_out(&env.run(["checkpoints", "--json"]));
    let cps = cps.as_array().unwrap();
    assert_eq!(cps.len(), 20);
    assert_eq!(cps[0]["last_user_message"], "m22");
    assert_eq!(cps[19]["last_user_message"], "m3");
    let out = env.run(["rollback", "21"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no checkpoint 21"),
        "{}",
        stderr(&out)
    );
}

/// The server's wait is honoured in each of its three forms: each retry
/// comes no sooner than asked (retries otherwise wait 10 ms in tests).
#[test]
fn retry_after_is_honoured_in_milliseconds_seconds_and_as_a_date() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for form in ["milliseconds", "seconds", "date"] {
        // A date names a moment, not a delay: whenever the 429 is sent, the
        // retry may not come before it (the date is in whole seconds).
        let date = httpdate::parse_http_date(&httpdate::fmt_http_date(
            std::time::SystemTime::now() + Duration::from_secs(3),
        ))
        .unwrap();
        let not_before = Instant::now()
            + date
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
        let (name, value, at_least) = match form {
            "milliseconds" => (
                "retry-after-ms",
                "900".to_owned(),
                Duration::from_millis(900),
            ),
            "seconds" => ("retry-after", "1".to_owned(), Duration::from_secs(1)),
            _ => ("retry-after", httpdate::fmt_http_date(date), Duration::ZERO),
        };
        model.push(Reply::HttpError {
            status: 429,
            body: json!({"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}}),
            headers: vec![(name.into(), value.clone())],
        });
        let before = model.requests().len();
        let out = env.chat_auto(&model, "hello\n");
        assert_code(&out, 0);
        // Exactly one retry, sent no sooner than the server asked.
        let requests = model.requests();
        assert_eq!(requests.len(), before + 2, "{name}: not one retry");
        let (first, retry) = (requests[before].received, requests[before + 1].received);
        let waited = retry.duration_since(first);
        assert!(
            waited >= at_least,
            "{name}: {value} not honoured: retried after {waited:?}"
        );
        if form == "date" {
            // Clocks are read separately here and in agentd: 50 ms slack.
            assert!(
                retry + Duration::from_millis(50) >= not_before,
                "{name}: {value} not honoured: retried {:?} before it",
                not_before.saturating_duration_since(retry)
            );
        }
        // And the user was told when, as the server said.
        let said = stderr(&out);
        let announced = said
            .lines()
            .find_map(|l| l.split("retrying 2/").nth(1))
            .and_then(|rest| rest.split(" in ").nth(1))
            .and_then(|d| d.split('s').next())
            .and_then(|d| d.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name}: no retry line: {said}"));
        assert!(
            announced >= at_least.as_secs_f64() - 0.05 && announced <= 3.05,
            "{name}: announced {announced} s: {said}"
        );
    }
}

#[test]
fn retryable_failures_are_retried_a_bounded_number_of_times() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Two 5xx, a 429 with retry-after-ms, a broken stream: then success.
    model.push(Reply::http_error(500, Some("server_error"), "boom"));
    model.push(Reply::http_error(503, None, "overloaded"));
    model.push(Reply::Truncated);
    let out = env.chat_auto(&model, "hello\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: hello [turns seen: 1]");
    assert!(stderr(&out).contains("retrying 2/4"), "{}", stderr(&out));
    assert!(stderr(&out).contains("retrying 4/4"), "{}", stderr(&out));
    assert_eq!(model.requests().len(), 4);

    model.push(Reply::HttpError {
        status: 429,
        body: json!({"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}}),
        headers: vec![("retry-after-ms".into(), "30".into())],
    });
    assert_code(&env.chat_auto(&model, "again\n"), 0);
    assert_eq!(model.requests().len(), 6);

    // Exhausted: four attempts, then a failed turn with the marker set.
    let checkpoints_before = env.status()["checkpoints"].clone();
    for _ in 0..4 {
        model.push(Reply::http_error(502, None, "bad gateway"));
    }
    let out = env.chat_auto(&model, "doomed\n");
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("after 4 attempts"),
        "{}",
        stderr(&out)
    );
    assert_eq!(model.requests().len(), 10);
    let st = env.status();
    assert!(
        st["failed"]["message"].as_str().unwrap().contains("502"),
        "{st}"
    );
    assert_eq!(
        st["checkpoints"], checkpoints_before,
        "a failed response became a checkpoint"
    );
    model.assert_schema_clean();
}

#[test]
fn final_errors_are_not_retried() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let cases = [
        Reply::http_error(400, None, "bad request"),
        // (An overflow is recovered once by compacting: tests/tests/e2e/long_conversations.rs.)
        Reply::http_error(429, Some("insufficient_quota"), "no money"),
        Reply::http_error(401, None, "bad key"),
        Reply::http_error(403, None, "forbidden"),
    ];
    let mut expected = 0;
    for reply in cases {
        model.push(reply);
        let out = env.chat_auto(&model, "try\n");
        expected += 1;
        assert_code(&out, 1);
        assert_eq!(
            model.requests().len(),
            expected,
            "retried: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("retrying"), "{}", stderr(&out));
        // Settle the failure before the next case.
        assert_code(
            &env.run(["rollback", "1"]),
            if env.status()["checkpoints"] == 0 {
                1
            } else {
                0
            },
        );
        let _ = env.run(["clear", "--yes"]);
    }
    let out = {
        model.push(Reply::http_error(401, None, "bad key"));
        env.chat_auto(&model, "x\n")
    };
    assert!(stderr(&out).contains("OPENAI_API_KEY"), "{}", stderr(&out));
}

#[test]
fn a_stalled_stream_hits_the_idle_timeout_and_is_retried() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::Stall(Duration::from_secs(6)));
    let out = env.chat_auto(&model, "are you there\n");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("no data from the model"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out).trim(), "echo: are you there [turns seen: 1]");
}

#[test]
fn retry_and_new_chain_settle_a_failed_turn() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "first\n"), 0);
    model.push(Reply::http_error(400, None, "rejected once"));
    assert_code(&env.chat_auto(&model, "second\n"), 1);
    assert!(env.status()["failed"].is_object());

    let out = env.chat(&model, ["retry"], "");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: second [turns seen: 2]");
    let st = env.status();
    assert_eq!(st["failed"], Value::Null);
    assert_eq!(st["checkpoints"], 2);
    let bodies: Vec<Value> = model.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies[2]["input"], bodies[1]["input"],
        "retry must resend the same request"
    );

    // New chain: no previous_response_id, the whole conversation resent.
    model.push(Reply::http_error(500, None, "x"));
    model.push(Reply::http_error(500, None, "x"));
    model.push(Reply::http_error(500, None, "x"));
    model.push(Reply::http_error(500, None, "x"));
    assert_code(&env.chat_auto(&model, "third\n"), 1);
    let out = env.chat(&model, ["retry", "--new-chain"], "");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: third [turns seen: 3]");
    let last = model.requests().last().unwrap().body.clone();
    assert!(last.get("previous_response_id").is_none());
    let roles: Vec<&str> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        vec!["user", "assistant", "user", "assistant", "user"]
    );
    model.assert_schema_clean();
}

#[test]
fn a_lost_response_id_starts_a_new_chain_from_the_saved_conversation() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo tool-ran"}),
    });
    assert_code(&env.chat_auto(&model, "one\ntwo\n"), 0);
    model.forget_response_ids();
    let out = env.chat_auto(&model, "three\n");
    assert_code(&out, 0);
    assert!(stderr(&out).contains("new chain"), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "echo: three [turns seen: 3]");

    let requests = model.requests();
    let n = requests.len();
    // The rejected chained request, then exactly one resend: no loop.
    assert!(requests[n - 2].body["previous_response_id"].is_string());
    let resent = &requests[n - 1].body;
    assert!(resent.get("previous_response_id").is_none());
    assert!(resent["instructions"].is_string());
    assert_eq!(resent["tools"][0]["name"], "shell");
    let input = resent["input"].as_array().unwrap();
    // Every call paired with its output, no server ids or reasoning items.
    let calls: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    let outputs: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(outputs.len(), 1);
    assert_eq!(calls[0]["call_id"], outputs[0]["call_id"]);
    assert!(outputs[0]["output"].as_str().unwrap().contains("tool-ran"));
    for item in input {
        assert!(item.get("id").is_none(), "server item id resent: {item}");
        assert_ne!(item["type"], "reasoning");
    }
    model.assert_schema_clean();

    // A server that rejects the resend too: one resend per turn, then the
    // turn fails — no loop.
    for _ in 0..2 {
        model.push(Reply::HttpError {
            status: 400,
            body: json!({"error": {"type": "invalid_request_error", "param": "previous_response_id",
                "code": "previous_response_not_found", "message": "Previous response with id 'x' not found."}}),
            headers: vec![],
        });
    }
    let before = model.requests().len();
    let out = env.chat_auto(&model, "four\n");
    assert_code(&out, 1);
    assert_eq!(model.requests().len(), before + 2);
}

fn pid_of(child: &std::process::Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

#[test]
fn killing_the_client_mid_turn_leaves_an_interrupted_turn_to_settle() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "warm up\n"), 0);
    model.push(Reply::Stall(Duration::from_secs(1)));
    let child = env.chat_command(&model, ["--approval", "auto"], "cut me off\n");
    assert!(model.wait_for_requests(2, Duration::from_secs(10)));
    kill(pid_of(&child), Signal::SIGKILL).unwrap();
    let _ = child.wait_with_output();
    let st = wait_status(&env, |s| s["interrupted"].is_object());
    assert_eq!(st["turns"], 1);

    // A new chat must settle it first; `new` leaves it as it is.
    let out = env.chat_auto(&model, "hello\n");
    assert_code(&out, 1);
    let out = env.chat(&model, ["--on-pending", "new"], "fresh start\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: fresh start [turns seen: 1]");
    let sessions = json_out(&env.run(["sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 2);
}

#[test]
fn killing_agentd_during_a_tool_then_continue_never_reruns_it() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "warm up\n"), 0);
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo started >> log.txt; sleep 30; echo finished >> log.txt"}),
    });
    let child = env.chat_command(&model, ["--approval", "auto"], "run the slow thing\n");
    let st = wait_status(&env, |s| s["pending_tool_calls"][0]["state"] == "running");
    assert_eq!(st["pending_tool_calls"][0]["name"], "shell");
    // "running" is recorded before the command starts: wait until it has.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !env.work.join("log.txt").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let daemon = env.daemon_pids()[0];
    kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
    assert!(wait_pid_gone(daemon, Duration::from_secs(5)));
    let _ = child.wait_with_output();

    // A fresh agentd finds the call exactly as it was: running, interrupted.
    let st = env.status();
    assert_eq!(
        st["pending_tool_calls"].as_array().unwrap().len(),
        1,
        "{st}"
    );
    assert_eq!(st["pending_tool_calls"][0]["state"], "running");
    assert!(
        st["interrupted"]["message"]
            .as_str()
            .unwrap()
            .contains("agentd stopped")
    );
    // The command died with its daemon.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::read_to_string(env.work.join("log.txt")).unwrap(),
        "started\n"
    );

    let out = env.chat(
        &model,
        ["--approval", "auto", "--on-pending", "continue"],
        "",
    );
    assert_code(&out, 0);
    assert_eq!(
        std::fs::read_to_string(env.work.join("log.txt")).unwrap(),
        "started\n",
        "re-ran"
    );
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(last["input"][0]["type"], "function_call_output");
    assert!(
        last["input"][0]["output"]
            .as_str()
            .unwrap()
            .contains("not run again")
    );
    let st = env.status();
    assert_eq!(st["pending_tool_calls"], json!([]));
    assert_eq!(st["interrupted"], Value::Null);
    assert_eq!(st["turns"], 2);
    model.assert_schema_clean();
}

#[test]
fn killing_agentd_while_streaming_then_retry_resends_the_message() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "warm up\n"), 0);
    model.push(Reply::Stall(Duration::from_secs(1)));
    let child = env.chat_command(&model, ["--approval", "auto"], "lost in flight\n");
    assert!(model.wait_for_requests(2, Duration::from_secs(10)));
    let daemon = env.daemon_pids()[0];
    kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
    let _ = child.wait_with_output();
    assert!(wait_pid_gone(daemon, Duration::from_secs(5)));

    let st = env.status();
    assert!(st["interrupted"].is_object(), "{st}");
    assert_eq!(st["pending_tool_calls"], json!([]));
    let out = env.chat(&model, ["--on-pending", "retry"], "");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: lost in flight [turns seen: 2]");
    let st = env.status();
    assert_eq!(st["turns"], 2);
    assert_eq!(st["checkpoints"], 2);
    // Rolled back to the checkpoint, then resent once: no duplicate message.
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(
        last["input"],
        json!([{"role": "user", "content": "lost in flight"}])
    );
}

#[test]
fn killing_agentd_between_a_tool_and_the_next_request_then_continue() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo once >> ran.txt"}),
    });
    model.push(Reply::Stall(Duration::from_secs(1)));
    let child = env.chat_command(&model, ["--approval", "auto"], "do it\n");
    assert!(model.wait_for_requests(2, Duration::from_secs(10)));
    let daemon = env.daemon_pids()[0];
    kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
    let _ = child.wait_with_output();
    assert!(wait_pid_gone(daemon, Duration::from_secs(5)));

    let out = env.chat(
        &model,
        ["--approval", "auto", "--on-pending", "continue"],
        "",
    );
    assert_code(&out, 0);
    assert_eq!(
        std::fs::read_to_string(env.work.join("ran.txt")).unwrap(),
        "once\n"
    );
    // The outputs were resent, paired with the call of the stored response.
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(last["input"][0]["type"], "function_call_output");
    assert!(
        last["input"][0]["output"]
            .as_str()
            .unwrap()
            .contains("exit code 0")
    );
    assert_eq!(env.status()["turns"], 1);
    model.assert_schema_clean();
}

/// agentd killed right after a tool step's outputs were committed (a debug
/// build's fault point): the outputs are still what the next request sends,
/// so continuing gives the model the calls' results and the conversation
/// goes on. They were committed apart from that list once, and a kill in
/// between left them unsent: "nothing left to run or send", then every
/// later request refused ("No tool output found for function call").
#[test]
fn a_kill_right_after_a_tool_step_leaves_its_outputs_to_send() {
    let mut env = TestEnv::new();
    let fake = FakeModel::start();
    assert_code(&env.chat(&fake, ["--auto"], "hello\n"), 0);
    assert_code(&env.run(["daemon", "stop"]), 0);
    // The next agentd (started by the next agentx) dies at the point.
    env.extra_env
        .push(("AGENTD_FAULT".into(), "tool-step-committed".into()));
    let out = env.chat(&fake, ["--auto"], "CALL echo ran > ran.txt\n");
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(env.work.join("ran.txt").exists(), "the command did not run");
    env.extra_env.clear();

    let status = env.status();
    assert!(status["interrupted"].is_object(), "{status}");
    let out = env.chat(&fake, ["--auto", "--on-pending", "continue"], "");
    assert_code(&out, 0);
    let status = env.status();
    assert!(
        stdout(&out)
            .trim_end()
            .ends_with(&format!("[turns seen: {}]", status["turns"])),
        "the model did not answer the tool's output: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let out = env.chat(&fake, ["--auto"], "and then\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: and then"), "{}", stderr(&out));
}

/// A conversation an older agentd left with a tool step's outputs in its
/// transcript but not among what the next request sends (the crash above,
/// before its fix): the server refuses the chained request, and agentd
/// starts a new chain from the saved transcript once, which has them.
#[test]
fn a_chain_missing_a_tool_output_is_started_again_from_the_transcript() {
    let env = TestEnv::new();
    let fake = FakeModel::start();
    assert_code(&env.chat(&fake, ["--auto"], "hello\n"), 0);
    let id = env.status()["session_id"].as_str().unwrap().to_owned();
    // Killed after the tool step, before the model's next request.
    let mut env = env;
    assert_code(&env.run(["daemon", "stop"]), 0);
    env.extra_env
        .push(("AGENTD_FAULT".into(), "tool-step-committed".into()));
    let out = env.chat(&fake, ["--auto"], "CALL echo ran\n");
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    env.extra_env.clear();
    // What the old agentd left: nothing to send.
    let doc_path = env
        .profile_files()
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == format!("{id}.json").as_str())
        })
        .expect("no conversation document");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&doc_path).unwrap()).unwrap();
    assert!(
        doc["unsent"].as_array().is_some_and(|u| !u.is_empty()),
        "the outputs are not among what is sent next: {}",
        doc["unsent"]
    );
    doc["unsent"] = json!([]);
    doc["interrupted"] = Value::Null;
    doc["turn_open"] = json!(false);
    std::fs::write(&doc_path, serde_json::to_vec(&doc).unwrap()).unwrap();

    let out = env.chat(&fake, ["--auto"], "and then\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: and then"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("missing a tool output"),
        "{}",
        stderr(&out)
    );
}
