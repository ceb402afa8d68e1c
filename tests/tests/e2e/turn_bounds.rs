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
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        "max_tool_calls_per_reply = 2\n",
    )
    .unwrap();
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
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(env.home.join("config.toml"), "max_tool_steps = 2\n").unwrap();
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
