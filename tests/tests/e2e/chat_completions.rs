//! The Chat Completions provider end to end against the fake server's
//! `/v1/chat/completions`: conversations with tool calls rebuilt from the
//! local transcript, resume, rollback, one-shots, odd servers and errors.

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::json_out;
use agentx_tests::{TestEnv, assert_code, stderr, stdout};

fn chat_env() -> TestEnv {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_PROVIDER".into(), "chat".into()));
    env
}

fn bodies(model: &FakeModel) -> Vec<Value> {
    let requests = model.requests();
    for r in &requests {
        assert_eq!(r.path, "/v1/chat/completions");
        assert!(
            r.schema_errors.is_empty(),
            "{}: {:?}",
            r.body,
            r.schema_errors
        );
    }
    requests.into_iter().map(|r| r.body).collect()
}

#[test]
fn a_conversation_with_a_tool_call_is_rebuilt_every_turn_and_resumes() {
    let env = chat_env();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo from-tool"}),
    });
    let out = env.chat(&model, ["--auto"], "first\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: first [turns seen: 1]\n");
    let out = env.chat(&model, Vec::<&str>::new(), "second\n");
    assert_eq!(stdout(&out), "echo: second [turns seen: 2]\n");

    let bodies = bodies(&model);
    assert_eq!(bodies.len(), 3);
    let last = &bodies[2];
    assert_eq!(last["stream"], true);
    assert_eq!(last["stream_options"]["include_usage"], true);
    assert!(last.get("previous_response_id").is_none());
    assert_eq!(last["tools"][0]["function"]["name"], "shell");
    let roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        vec!["system", "user", "assistant", "tool", "assistant", "user"]
    );
    let tool_call = &last["messages"][2]["tool_calls"][0];
    assert_eq!(last["messages"][3]["tool_call_id"], tool_call["id"]);
    assert!(
        last["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("from-tool")
    );
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["usage"]["total_tokens"], 45);
    assert_eq!(status["turns"], 2);
}

#[test]
fn rollback_and_one_shots_work_on_transcript_positions() {
    let env = chat_env();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, Vec::<&str>::new(), "one\ntwo\nthree\n"),
        0,
    );
    assert_code(&env.run(["rollback", "2"]), 0);
    let out = env.chat(&model, Vec::<&str>::new(), "four\n");
    assert_eq!(stdout(&out), "echo: four [turns seen: 3]\n");
    let out = env.chat(&model, ["exec", "side question"], "");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: side question [turns seen: 4]\n");
    // The one-shot left the conversation as it was.
    let out = env.chat(&model, Vec::<&str>::new(), "five\n");
    assert_eq!(stdout(&out), "echo: five [turns seen: 4]\n");
}

#[test]
fn servers_without_usage_or_that_send_one_big_chunk_are_handled() {
    let env = chat_env();
    let model = FakeModel::start();
    model.set_chat_no_usage(true);
    model.set_chat_one_chunk(true);
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo hi > made.txt"}),
    });
    let out = env.chat(&model, ["--auto"], "go\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: go [turns seen: 1]\n");
    assert!(env.work.join("made.txt").exists());
    // Never a false 0: the counts are unknown, and say why.
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["usage"]["total_tokens"], Value::Null, "{status}");
    assert_eq!(status["usage"]["reported"], false);
    assert_eq!(status["usage"]["unreported_responses"], 2);
    assert_eq!(status["turns"], 1);
    let human = stdout(&env.run(["status"]));
    assert!(
        human.contains("usage         not reported by the model server"),
        "{human}"
    );
    // A server that reports it again: counted, the gap still said.
    model.set_chat_no_usage(false);
    assert_code(&env.chat(&model, ["--auto"], "again\n"), 0);
    let status = json_out(&env.run(["status", "--json"]));
    assert!(
        status["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{status}"
    );
    assert_eq!(status["usage"]["unreported_responses"], 2);
}

#[test]
fn no_api_key_is_needed_and_failures_are_retried() {
    let env = chat_env();
    let model = FakeModel::start();
    model.push(Reply::http_error(503, None, "loading"));
    model.push(Reply::Truncated);
    let out = env
        .agentx(Vec::<&str>::new())
        .env("AGENTX_BASE_URL", model.base_url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"hello\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: hello [turns seen: 1]\n");
    assert!(stderr(&out).contains("retrying"), "{}", stderr(&out));
    assert!(model.requests()[0].header("authorization").is_none());
}

#[test]
fn local_server_errors_are_one_line_naming_the_base_url() {
    let env = chat_env();
    let model = FakeModel::start();
    // Model not loaded (Ollama's shape).
    model.push(Reply::HttpError {
        status: 404,
        body: json!({"error": "model \"qwen\" not found, try pulling it first"}),
        headers: vec![],
    });
    let out = env.chat(&model, Vec::<&str>::new(), "hi\n");
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("not found, try pulling it first") && err.contains(&model.base_url()),
        "{err}"
    );

    // A wrong path on the server: 404.
    let wrong = format!("{}/nowhere", model.base_url());
    let out = env
        .agentx(["exec", "hi"])
        .env("AGENTX_BASE_URL", &wrong)
        .output()
        .unwrap();
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains(&wrong) && stderr(&out).contains("404"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));

    // Nothing listening.
    let out = env
        .agentx(["exec", "hi"])
        .env("AGENTX_BASE_URL", "http://127.0.0.1:9/v1")
        .output()
        .unwrap();
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("http://127.0.0.1:9/v1"),
        "{}",
        stderr(&out)
    );
}
