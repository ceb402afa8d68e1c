//! Tests of the fake OpenAI Responses server itself (test support, not the product):
//! its SSE stream, its stateful chain checks and scripted failures, over real HTTP on 127.0.0.1.

use std::io::BufRead as _;
use std::time::{Duration, Instant};

use crate::fake_model::{FakeModel, HttpReply, Reply, post_and_hold, post_json, post_raw};
use crate::schema::{RESPONSE_STREAM_EVENT, validate_against};
use serde_json::{Value, json};

fn body(input: Value) -> Value {
    json!({"model": "gpt-test", "input": input, "stream": true, "store": true})
}

fn chained(input: Value, previous: &str) -> Value {
    let mut b = body(input);
    b["previous_response_id"] = json!(previous);
    b
}

/// Checks the stream's framing and returns the `response.completed` response.
#[track_caller]
fn completed(reply: &HttpReply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let events = reply.events();
    let last = events.last().expect("some events");
    assert_eq!(last.event, "response.completed", "{events:#?}");
    last.data["response"].clone()
}

/// The concatenated text deltas of a stream.
fn streamed_text(reply: &HttpReply) -> String {
    reply
        .events()
        .iter()
        .filter(|e| e.event == "response.output_text.delta")
        .map(|e| e.data["delta"].as_str().unwrap().to_owned())
        .collect()
}

#[track_caller]
fn assert_error(reply: &HttpReply, status: u16, param: Value, code: Value, message: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["type"], "invalid_request_error", "{error}");
    assert_eq!(error["param"], param, "{error}");
    assert_eq!(error["code"], code, "{error}");
    assert_eq!(error["message"], message, "{error}");
}

#[test]
fn text_stream_has_the_events_of_the_real_api() {
    let fake = FakeModel::start();
    assert!(fake.base_url().starts_with("http://127.0.0.1:"));
    assert!(fake.base_url().ends_with("/v1"));
    let reply = post_json(&fake.responses_url(), &body(json!("hello there")));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));

    let events = reply.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.data["type"], event.event.as_str());
        assert_eq!(event.data["sequence_number"], n);
        // Every event the fake sends is valid under the official schema.
        if let Err(errors) = validate_against(RESPONSE_STREAM_EVENT, &event.data) {
            panic!("{} does not match the schema: {errors:#?}", event.data);
        }
    }

    let id = events[0].data["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(id.starts_with("resp_"), "{id}");
    let text = "echo: hello there [turns seen: 1]";
    assert_eq!(streamed_text(&reply), text);
    let delta = &events[4].data;
    let item_id = delta["item_id"].as_str().unwrap();
    assert!(item_id.starts_with("msg_"), "{delta}");
    assert_eq!(delta["output_index"], 0);
    assert_eq!(delta["content_index"], 0);
    assert_eq!(events[7].data["text"], text);

    let item = &events[9].data["item"];
    assert_eq!(item["type"], "message");
    assert_eq!(item["id"], item_id);
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["status"], "completed");
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["text"], text);
    assert_eq!(item["content"][0]["annotations"], json!([]));

    let response = completed(&reply);
    assert_eq!(response["id"], id.as_str());
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"], json!([item]));
    assert_eq!(response["usage"]["input_tokens"], 10);
    assert_eq!(
        response["usage"]["input_tokens_details"]["cached_tokens"],
        2
    );
    assert_eq!(response["usage"]["output_tokens"], 5);
    assert_eq!(
        response["usage"]["output_tokens_details"]["reasoning_tokens"],
        1
    );
    assert_eq!(response["usage"]["total_tokens"], 15);

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.header("Authorization"), Some("Bearer test-key"));
    assert!(
        request
            .headers
            .iter()
            .all(|(n, _)| *n == n.to_ascii_lowercase())
    );
    assert_eq!(request.body["input"], "hello there");
    assert!(
        request.schema_errors.is_empty(),
        "{:?}",
        request.schema_errors
    );
    assert_eq!(fake.stored_response_ids(), [id]);
    assert_eq!(fake.completed_responses(), 1);
}

#[test]
fn previous_response_id_carries_the_conversation() {
    let fake = FakeModel::start();
    let first = completed(&post_json(&fake.responses_url(), &body(json!("one"))));
    let first_id = first["id"].as_str().unwrap();

    let second = post_json(&fake.responses_url(), &chained(json!("two"), first_id));
    assert_eq!(streamed_text(&second), "echo: two [turns seen: 2]");
    let second_id = completed(&second)["id"].as_str().unwrap().to_owned();
    assert_ne!(second_id, first_id);

    let third = post_json(
        &fake.responses_url(),
        &chained(json!([{"role": "user", "content": "three"}]), &second_id),
    );
    assert_eq!(streamed_text(&third), "echo: three [turns seen: 3]");

    // Branching from the first response again sees only that history.
    let branch = post_json(&fake.responses_url(), &chained(json!("branch"), first_id));
    assert_eq!(streamed_text(&branch), "echo: branch [turns seen: 2]");

    // Resending the whole context works without a chain as well.
    let full = post_json(
        &fake.responses_url(),
        &body(json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "echo: one"},
            {"role": "user", "content": [{"type": "input_text", "text": "ignored by oneOf"}]},
        ])),
    );
    // The literal schema rejects content parts in a user message (see
    // schema.rs); the fake answers like it would to any invalid body.
    assert_eq!(full.status, 400, "{}", full.body);
    let full = post_json(
        &fake.responses_url(),
        &body(json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "echo: one"},
            {"role": "user", "content": "two"},
        ])),
    );
    assert_eq!(streamed_text(&full), "echo: two [turns seen: 2]");
}

#[test]
fn unknown_previous_response_id_is_the_real_400() {
    let fake = FakeModel::start();
    fake.push(Reply::text("kept for later"));
    let reply = post_json(&fake.responses_url(), &chained(json!("hi"), "resp_nope"));
    assert_error(
        &reply,
        400,
        json!("previous_response_id"),
        json!("previous_response_not_found"),
        "Previous response with id 'resp_nope' not found.",
    );
    // The rejected request did not use up the script.
    assert_eq!(fake.pending_replies(), 1);
    let reply = post_json(&fake.responses_url(), &body(json!("hi")));
    assert_eq!(streamed_text(&reply), "kept for later");
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn function_calls_need_their_outputs() {
    let fake = FakeModel::start();
    fake.push(Reply::tool_call("shell", json!({"cmd": "ls"})));
    fake.push(Reply::text("listed"));
    let url = fake.responses_url();

    let reply = post_json(&url, &body(json!("run ls")));
    let response = completed(&reply);
    for event in reply.events() {
        if let Err(errors) = validate_against(RESPONSE_STREAM_EVENT, &event.data) {
            panic!("{} does not match the schema: {errors:#?}", event.data);
        }
    }
    let kinds: Vec<String> = reply.events().into_iter().map(|e| e.event).collect();
    assert!(kinds.contains(&"response.function_call_arguments.done".to_owned()));
    let call = reply
        .events()
        .into_iter()
        .find(|e| e.event == "response.output_item.done")
        .unwrap()
        .data["item"]
        .clone();
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "shell");
    assert_eq!(call["status"], "completed");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_owned();
    assert!(call_id.starts_with("call_"), "{call}");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"cmd": "ls"}));
    assert_eq!(response["output"], json!([call]));
    let id = response["id"].as_str().unwrap().to_owned();

    // The next turn without the output is refused, and consumes nothing.
    let missing = post_json(&url, &chained(json!("and now?"), &id));
    assert_error(
        &missing,
        400,
        json!("input"),
        Value::Null,
        &format!("No tool output found for function call {call_id}."),
    );
    // An output for a call nobody made is refused too.
    let orphan = post_json(
        &url,
        &chained(
            json!([
                {"type": "function_call_output", "call_id": call_id, "output": "a.txt"},
                {"type": "function_call_output", "call_id": "call_999", "output": "?"},
            ]),
            &id,
        ),
    );
    assert_error(
        &orphan,
        400,
        json!("input"),
        Value::Null,
        "No tool call found for function call output with call_id call_999.",
    );
    assert_eq!(fake.pending_replies(), 1);

    let answered = post_json(
        &url,
        &chained(
            json!([{"type": "function_call_output", "call_id": call_id, "output": "a.txt"}]),
            &id,
        ),
    );
    assert_eq!(streamed_text(&answered), "listed");

    // Replaying the call and its output without a chain is fine; the call
    // alone is not.
    let replayed_call = json!({"type": "function_call", "call_id": call_id, "name": "shell",
                               "arguments": "{\"cmd\":\"ls\"}"});
    let ok = post_json(
        &url,
        &body(json!([
            {"role": "user", "content": "run ls"},
            replayed_call,
            {"type": "function_call_output", "call_id": call_id, "output": "a.txt"},
        ])),
    );
    assert_eq!(streamed_text(&ok), "echo: run ls [turns seen: 1]");
    let bad = post_json(
        &url,
        &body(json!([{"role": "user", "content": "run ls"}, replayed_call])),
    );
    assert_error(
        &bad,
        400,
        json!("input"),
        Value::Null,
        &format!("No tool output found for function call {call_id}."),
    );
}

#[test]
fn parallel_tool_calls_each_need_an_output() {
    let fake = FakeModel::start();
    fake.push(Reply::ToolCalls(vec![
        ("shell".to_owned(), json!({"cmd": "a"})),
        ("shell".to_owned(), json!("{not json")),
    ]));
    let url = fake.responses_url();
    let response = completed(&post_json(&url, &body(json!("two things"))));
    let output = response["output"].as_array().unwrap();
    assert_eq!(output.len(), 2);
    assert_eq!(
        output[1]["arguments"], "{not json",
        "strings are sent verbatim"
    );
    let (a, b) = (
        output[0]["call_id"].as_str().unwrap(),
        output[1]["call_id"].as_str().unwrap(),
    );
    assert_ne!(a, b);
    let id = response["id"].as_str().unwrap();
    let half = post_json(
        &url,
        &chained(
            json!([{"type": "function_call_output", "call_id": a, "output": "ok"}]),
            id,
        ),
    );
    assert_error(
        &half,
        400,
        json!("input"),
        Value::Null,
        &format!("No tool output found for function call {b}."),
    );
    let both = post_json(
        &url,
        &chained(
            json!([
                {"type": "function_call_output", "call_id": a, "output": "ok"},
                {"type": "function_call_output", "call_id": b, "output": "aborted"},
            ]),
            id,
        ),
    );
    // No user message in this input: the last one of the chain is echoed.
    assert_eq!(streamed_text(&both), "echo: two things [turns seen: 1]");
}

#[test]
fn forget_response_ids_loses_the_chain() {
    let fake = FakeModel::start();
    let url = fake.responses_url();
    let id = completed(&post_json(&url, &body(json!("remember me"))))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(fake.stored_response_ids(), std::slice::from_ref(&id));
    fake.forget_response_ids();
    assert!(fake.stored_response_ids().is_empty());
    let reply = post_json(&url, &chained(json!("still there?"), &id));
    assert_error(
        &reply,
        400,
        json!("previous_response_id"),
        json!("previous_response_not_found"),
        &format!("Previous response with id '{id}' not found."),
    );
    // New responses are stored again and get fresh ids.
    let again = completed(&post_json(&url, &body(json!("fresh"))));
    assert_ne!(again["id"], id.as_str());
    completed(&post_json(
        &url,
        &chained(json!("x"), again["id"].as_str().unwrap()),
    ));
}

#[test]
fn store_false_is_not_chainable() {
    let fake = FakeModel::start();
    let url = fake.responses_url();
    let mut b = body(json!("ephemeral"));
    b["store"] = json!(false);
    let response = completed(&post_json(&url, &b));
    let id = response["id"].as_str().unwrap();
    let reply = post_json(&url, &chained(json!("again"), id));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "previous_response_not_found");
}

#[test]
fn invalid_bodies_are_400_and_recorded() {
    let fake = FakeModel::start();
    let url = fake.responses_url();

    let reply = post_json(&url, &json!({"model": "m", "input": 5, "stream": true}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["code"], Value::Null);
    assert_eq!(error["param"], Value::Null);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("schema: /input: "), "{message}");

    let tool = json!({"type": "function", "name": "shell", "parameters": {"type": "object"}});
    let reply = post_json(
        &url,
        &json!({"model": "m", "input": "hi", "stream": true, "tools": [tool]}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("\"strict\" is a required property"),
        "{message}"
    );

    let reply = post_raw(&url, b"{\"model\": ");
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");

    let reply = post_json(&url, &json!({"model": "m", "input": "hi"}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["param"], "stream");

    let reply = post_json(&format!("{}/embeddings", fake.base_url()), &json!({}));
    assert_eq!(reply.status, 404, "{}", reply.body);

    let requests = fake.requests();
    assert_eq!(requests.len(), 5);
    assert!(
        requests[0].schema_errors[0].starts_with("/input: "),
        "{:?}",
        requests[0]
    );
    assert_eq!(requests[0].body["input"], 5);
    assert!(!requests[1].schema_errors.is_empty());
    assert_eq!(requests[2].body, json!("{\"model\": "));
    assert!(
        requests[2].schema_errors[0].starts_with("invalid JSON"),
        "{:?}",
        requests[2]
    );
    assert!(
        requests[3].schema_errors.is_empty(),
        "valid, only not streaming"
    );
    assert_eq!(requests[4].path, "/v1/embeddings");
    assert_eq!(fake.completed_responses(), 0);
}

#[test]
fn scripted_http_errors_come_first() {
    let fake = FakeModel::start();
    fake.push(Reply::HttpError {
        status: 429,
        body: json!({"error": {"type": "rate_limit_exceeded", "code": "rate_limit_exceeded",
                               "param": null, "message": "slow down"}}),
        headers: vec![
            ("Retry-After".to_owned(), "1".to_owned()),
            ("retry-after-ms".to_owned(), "20".to_owned()),
        ],
    });
    fake.push(Reply::http_error(500, None, "boom"));
    let url = fake.responses_url();
    // Even a request with a dangling chain gets the scripted error first.
    let reply = post_json(&url, &chained(json!("hi"), "resp_404"));
    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(reply.header("retry-after-ms"), Some("20"));
    assert_eq!(reply.json()["error"]["message"], "slow down");
    let reply = post_json(&url, &body(json!("hi")));
    assert_eq!(reply.status, 500);
    assert_eq!(reply.json()["error"]["message"], "boom");
    assert_eq!(
        streamed_text(&post_json(&url, &body(json!("hi")))),
        "echo: hi [turns seen: 1]"
    );
}

#[test]
fn stream_error_and_truncation_end_without_completed() {
    let fake = FakeModel::start();
    let url = fake.responses_url();
    fake.push(Reply::StreamError(
        json!({"code": "server_error", "message": "oops", "param": null}),
    ));
    fake.push(Reply::StreamError(
        json!({"type": "error", "error": {"code": "x", "message": "nested"}}),
    ));
    fake.push(Reply::Truncated);

    let reply = post_json(&url, &body(json!("hi")));
    assert_eq!(reply.status, 200);
    let events = reply.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["response.created", "response.in_progress", "error"]);
    assert_eq!(
        events[2].data,
        json!({"type": "error", "code": "server_error", "message": "oops", "param": null})
    );

    let events = post_json(&url, &body(json!("hi"))).events();
    assert_eq!(events.last().unwrap().data["error"]["message"], "nested");

    let reply = post_json(&url, &body(json!("hi")));
    let events = reply.events();
    assert!(
        events.iter().all(|e| e.event != "response.completed"),
        "{events:#?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.event == "response.output_text.delta")
            .count(),
        2
    );
    assert!("echo: hi [turns seen: 1]".starts_with(&streamed_text(&reply)));
    let id = events[0].data["response"]["id"].as_str().unwrap();

    // None of those responses can be chained from.
    assert!(fake.stored_response_ids().is_empty());
    let reply = post_json(&url, &chained(json!("hi"), id));
    assert_eq!(reply.json()["error"]["code"], "previous_response_not_found");
}

#[test]
fn stall_then_default_reply_and_hang_up_during_stall() {
    let fake = FakeModel::start();
    let url = fake.responses_url();
    fake.push(Reply::Stall(Duration::from_millis(300)));
    let started = Instant::now();
    let reply = post_json(&url, &body(json!("slow")));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(streamed_text(&reply), "echo: slow [turns seen: 1]");
    completed(&reply);

    // A client that gives up during a long stall: the fake notices, keeps
    // serving and stores nothing.
    fake.push(Reply::Stall(Duration::from_secs(600)));
    let (status, mut reader) = post_and_hold(&url, &body(json!("gone")));
    assert_eq!(status, 200);
    let mut line = String::new();
    while !line.contains("response.created") {
        line.clear();
        assert_ne!(
            reader.read_line(&mut line).unwrap(),
            0,
            "stream ended early"
        );
    }
    assert_eq!(fake.open_streams(), 1);
    drop(reader);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.open_streams() > 0 {
        assert!(
            Instant::now() < deadline,
            "the fake did not notice the hang-up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fake.stored_response_ids().len(), 1);
    completed(&post_json(&url, &body(json!("next"))));
}

#[test]
fn event_delay_slows_the_stream() {
    let fake = FakeModel::start();
    fake.set_event_delay(Duration::from_millis(100));
    let started = Instant::now();
    let reply = post_json(&fake.responses_url(), &body(json!("hi")));
    let events = reply.events().len();
    assert_eq!(events, 11);
    assert!(
        started.elapsed() >= Duration::from_millis(100 * (events as u64 - 1)),
        "{:?}",
        started.elapsed()
    );
    fake.set_event_delay(Duration::ZERO);
    let started = Instant::now();
    completed(&post_json(&fake.responses_url(), &body(json!("hi"))));
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[test]
fn concurrent_requests_are_all_served_and_counted() {
    let fake = FakeModel::start();
    let url = fake.responses_url();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let url = &url;
                s.spawn(move || post_json(url, &body(json!(format!("n{i}")))))
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let reply = h.join().unwrap();
            assert_eq!(streamed_text(&reply), format!("echo: n{i} [turns seen: 1]"));
        }
    });
    assert_eq!(fake.requests().len(), 8);
    assert!(fake.wait_for_requests(8, Duration::ZERO));
    assert!(!fake.wait_for_requests(9, Duration::from_millis(20)));
    let mut ids = fake.stored_response_ids();
    ids.dedup();
    assert_eq!(ids.len(), 8);
}

#[test]
fn drop_stops_the_server() {
    let fake = FakeModel::start();
    let addr = fake.addr();
    completed(&post_json(&fake.responses_url(), &body(json!("hi"))));
    // A stream left open must not keep the server alive.
    fake.push(Reply::Stall(Duration::from_secs(600)));
    let (_, held) = post_and_hold(&fake.responses_url(), &body(json!("hold")));
    let started = Instant::now();
    drop(fake);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(std::net::TcpStream::connect(addr).is_err());
    drop(held);
}
