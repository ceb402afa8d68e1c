//! Hostile model servers, second round: stalled and huge
//! bodies that are not event streams, tool-call names and ids that bypass
//! the answer limit or gRPC's message limit, credentials in URLs, and
//! agentd stopping or freezing under a running turn.

use std::io::Write as _;
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use agentx_tests::at_server::{agentx_at, bounded, run_at};
use agentx_tests::fake_model::{self, FakeModel, RawServer, Reply};
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

fn writes(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    stream.write_all(bytes).is_ok() && stream.flush().is_ok()
}

/// A Responses event stream from `events`, ending in a completed response.
fn responses_stream(id: &str, events: &[Value]) -> String {
    let mut all = vec![json!({"type": "response.created", "response": {"id": id}})];
    all.extend(events.iter().cloned());
    all.push(
        json!({"type": "response.completed", "response": {"id": id, "usage": fake_model::usage()}}),
    );
    all.iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

fn function_call(call_id: &str, name: &str, command: &str) -> Value {
    json!({"type": "response.output_item.done", "item": {"type": "function_call",
        "call_id": call_id, "name": name, "arguments": json!({"command": command}).to_string()}})
}

/// A server answering its n-th request with the n-th event-stream body
/// (the last one over and over).
fn scripted(bodies: Vec<String>) -> RawServer {
    let seen = Arc::new(AtomicUsize::new(0));
    RawServer::start(move |stream, _| {
        let n = seen.fetch_add(1, Ordering::SeqCst).min(bodies.len() - 1);
        let body = &bodies[n];
        writes(
            stream,
            fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
        );
        writes(stream, body.as_bytes());
    })
}

// 1 -------------------------------------------------------------------------

#[test]
fn stalled_error_and_json_bodies_are_retried_then_named() {
    for head in [
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json",
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json",
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
        "HTTP/1.1 200 OK\r\nContent-Type: application/json",
    ] {
        let mut env = TestEnv::new();
        env.extra_env
            .push(("AGENTX_STREAM_IDLE_MS".into(), "300".into()));
        let server = RawServer::start(move |stream, _| {
            writes(
                stream,
                format!("{head}\r\nContent-Length: 1000\r\n\r\n{{\"error\":").as_bytes(),
            );
            fake_model::hold_silent(stream);
        });
        let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
        assert_code(&out, 1);
        let err = stderr(&out);
        let status = &head[9..12];
        assert!(
            err.contains(&format!("answered {status}")) && err.contains("body stalled: 9 bytes"),
            "{head}: {err}"
        );
        assert_eq!(server.heads().len(), 4, "retried as a broken stream: {err}");
    }
}

// 2 -------------------------------------------------------------------------

#[test]
fn a_huge_body_that_is_not_an_event_stream_is_not_buffered() {
    for head in [
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json",
        "HTTP/1.1 200 OK\r\nContent-Type: application/json",
    ] {
        let env = TestEnv::new();
        let server = RawServer::start(move |stream, _| {
            let len = 1000usize << 20;
            writes(
                stream,
                format!("{head}\r\nContent-Length: {len}\r\n\r\n{{\"error\": \"").as_bytes(),
            );
            let block = vec![b'x'; 1 << 20];
            for _ in 0..1000 {
                if !writes(stream, &block) {
                    break;
                }
            }
        });
        let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
        assert_code(&out, 1);
        let err = stderr(&out);
        let status = &head[9..12];
        assert!(err.contains(&format!("answered {status}")), "{err}");
        assert!(err.len() < 2_000, "the body is shown by its head: {err}");
        let peak = env.agentd_peak_mib();
        eprintln!("agentd peak RSS after a 1000 MiB {status} body: {peak} MiB");
        assert!(peak < 200, "agentd peaked at {peak} MiB on a {status} body");
    }
}

// 3 -------------------------------------------------------------------------

/// A Chat Completions chunk with one tool-call piece.
fn chat_call_chunk(piece: Value) -> String {
    let chunk =
        json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]});
    format!("data: {chunk}\n\n")
}

#[test]
fn chat_tool_call_names_count_toward_the_answer_limit() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_PROVIDER".into(), "chat".into()));
    env.extra_env
        .push(("AGENTX_MAX_ANSWER_BYTES".into(), "1000000".into()));
    let server = RawServer::start(|stream, _| {
        writes(
            stream,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        );
        writes(
            stream,
            chat_call_chunk(json!({"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "sh", "arguments": ""}}))
            .as_bytes(),
        );
        // 4 MB of name pieces: four times the answer limit.
        let piece = chat_call_chunk(json!({"index": 0, "function": {"name": "x".repeat(1000)}}));
        for _ in 0..4000 {
            if !writes(stream, piece.as_bytes()) {
                return;
            }
        }
        writes(stream, b"data: [DONE]\n\n");
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("AGENTX_MAX_ANSWER_BYTES"), "{err}");
    assert_eq!(server.heads().len(), 1, "not retried: {err}");
}

#[test]
fn chat_calls_with_a_name_or_id_past_its_cap_are_answered_as_invalid() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_PROVIDER".into(), "chat".into()));
    let seen = Arc::new(AtomicUsize::new(0));
    let server = RawServer::start(move |stream, _| {
        writes(
            stream,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        );
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            let command = json!({"command": "touch ran"}).to_string();
            // The name in pieces, 300 bytes in all.
            writes(
                stream,
                chat_call_chunk(json!({"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "shell", "arguments": command}}))
                .as_bytes(),
            );
            writes(
                stream,
                chat_call_chunk(json!({"index": 0, "function": {"name": "y".repeat(295)}}))
                    .as_bytes(),
            );
            writes(
                stream,
                chat_call_chunk(
                    json!({"index": 1, "id": "z".repeat(2000), "type": "function",
                    "function": {"name": "shell", "arguments": command}}),
                )
                .as_bytes(),
            );
            writes(
                stream,
                b"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            );
        } else {
            writes(
                stream,
                b"data: {\"id\":\"chatcmpl-2\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"went on\"},\"finish_reason\":\"stop\"}]}\n\n",
            );
        }
        writes(stream, b"data: [DONE]\n\n");
    });
    let out = run_at(
        &env,
        &format!("{}/v1", server.url()),
        &["exec", "--auto", "hi"],
    );
    assert_code(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains("↳ not run: the tool name is over 256 bytes"),
        "{err}"
    );
    assert!(
        err.contains("↳ not run: the call id is over 1024 bytes"),
        "{err}"
    );
    assert_eq!(stdout(&out).trim(), "went on");
    assert!(!env.work.join("ran").exists(), "an invalid call ran");
    assert_eq!(server.heads().len(), 2);
}

#[test]
fn responses_call_names_and_ids_count_toward_the_answer_limit() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_MAX_ANSWER_BYTES".into(), "1000000".into()));
    let server = scripted(vec![responses_stream(
        "resp_1",
        &[
            function_call("call_1", &"n".repeat(600_000), "ls"),
            function_call(&"i".repeat(600_000), "shell", "ls"),
        ],
    )]);
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("AGENTX_MAX_ANSWER_BYTES"), "{err}");
    assert_eq!(server.heads().len(), 1, "not retried: {err}");
}

// 4 -------------------------------------------------------------------------

#[test]
fn a_huge_call_id_and_a_huge_tool_output_reach_the_repl() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "120000".into()));
    let huge_id = "c".repeat(5 << 20);
    let server = scripted(vec![
        responses_stream("resp_1", &[function_call(&huge_id, "shell", "touch ran")]),
        responses_stream(
            "resp_2",
            &[json!({"type": "response.output_text.delta", "delta": "first done"})],
        ),
        responses_stream(
            "resp_3",
            &[function_call(
                "call_big",
                "shell",
                "head -c 6000000 /dev/zero | tr '\\0' 'a'; echo; echo last",
            )],
        ),
        responses_stream(
            "resp_4",
            &[json!({"type": "response.output_text.delta", "delta": "second done"})],
        ),
    ]);
    let out = bounded(
        agentx_at(
            &env,
            &format!("{}/v1", server.url()),
            &["--approval", "auto"],
        ),
        b"one\ntwo\n",
        Duration::from_secs(60),
    );
    let (said, err) = (stdout(&out), stderr(&out));
    // What is shown of stderr when this fails: its lines, each cut short.
    let shown: String = err
        .lines()
        .map(|l| format!("{}\n", l.chars().take(200).collect::<String>()))
        .collect();
    assert_code(&out, 0);
    assert_eq!(said, "first done\nsecond done\n", "{shown}");
    assert!(
        shown.contains("↳ not run: the call id is over 1024 bytes"),
        "{shown}"
    );
    assert!(
        shown.contains("│ last\n") && shown.contains("↳ exit 0,"),
        "{shown}"
    );
    assert!(!shown.contains("message length too large"), "{shown}");
    assert!(!env.work.join("ran").exists());
    assert_eq!(env.status()["turns"], 2);
}

// 5 -------------------------------------------------------------------------

/// A local port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Runs a failing chat turn and a failing one-shot with `set` applied, and
/// checks `secret` is on no surface: the terminal, `status --json`,
/// `oneshots --json` and `oneshots show`, and no file of the profile (the
/// conversation, the retained one-shot, agentd's log).
fn secret_is_never_shown(set: impl Fn(&mut Command), secret: &str, shown: &str) {
    let env = TestEnv::new();
    let base = "http://model.example.invalid/v1";
    let mut chat = agentx_at(&env, base, &["--approval", "never"]);
    set(&mut chat);
    let out = bounded(chat, b"hello\n", Duration::from_secs(60));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(!err.contains(secret), "{err}");
    assert!(err.contains(shown), "the URL is still named: {err}");
    let failed = env.status()["failed"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        failed.contains(shown) && !failed.contains(secret),
        "{failed}"
    );

    let mut oneshot = agentx_at(&env, base, &["exec", "hi"]);
    set(&mut oneshot);
    let out = bounded(oneshot, b"", Duration::from_secs(60));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains(shown) && !err.contains(secret), "{err}");
    let list = env.run(["oneshots", "--json"]);
    assert_code(&list, 0);
    let listed = stdout(&list);
    assert!(!listed.contains(secret), "{listed}");
    let id = json_out(&list)
        .as_array()
        .and_then(|a| a.first().cloned())
        .and_then(|o| o["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no one-shot kept: {listed}"));
    let show = env.run(["oneshots", "show", &id]);
    assert!(
        stdout(&show).contains(shown) && !stdout(&show).contains(secret),
        "{}",
        stdout(&show)
    );
    assert!(env.home.join("log").is_dir());
    let leaked = env.profile_files_containing(secret);
    assert!(leaked.is_empty(), "{secret} written to {leaked:?}");
}

#[test]
fn a_proxy_password_is_never_printed_nor_stored() {
    let port = closed_port();
    secret_is_never_shown(
        |cmd| {
            cmd.env(
                "HTTP_PROXY",
                format!("http://user:pr0xy-pa55@127.0.0.1:{port}"),
            );
        },
        "pr0xy-pa55",
        &format!("http://***@127.0.0.1:{port}"),
    );
}

#[test]
fn a_key_in_the_base_url_is_never_printed_nor_stored() {
    let port = closed_port();
    secret_is_never_shown(
        |cmd| {
            cmd.env(
                "AGENTX_BASE_URL",
                format!("http://u:KEY-in-url-77@127.0.0.1:{port}/v1"),
            );
        },
        "KEY-in-url-77",
        &format!("http://***@127.0.0.1:{port}/v1"),
    );
}

// 6 -------------------------------------------------------------------------

#[test]
fn the_repl_carries_on_when_agentd_stops_or_dies_during_a_turn() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let Some(pane) = Pane::start(&env, &model, &["--approval", "never"]) else {
        return;
    };
    pane.line("before");
    pane.wait_for("echo: before");

    // A graceful stop while the model is answering.
    model.push(Reply::Stall(Duration::from_secs(120)));
    pane.line("cut by a stop");
    assert!(model.wait_for_requests(2, Duration::from_secs(20)));
    let first = env.daemon_pids();
    // SIGTERM: a graceful stop, as `agentx daemon stop` or systemd asks
    // (the REPL starting the next agentd does not race a stop command).
    kill(Pid::from_raw(first[0]), Signal::SIGTERM).unwrap();
    pane.wait_for("the turn was cut short by agentd stopping");
    pane.wait_for("reconnected to agentd");
    pane.line("after the stop");
    pane.wait_for("echo: after the stop");
    let second = env.daemon_pids();
    assert_eq!(second.len(), 1);
    assert_ne!(second, first);

    // agentd killed outright while the model is answering.
    model.push(Reply::Stall(Duration::from_secs(120)));
    pane.line("cut by a kill");
    assert!(model.wait_for_requests(4, Duration::from_secs(20)));
    kill(Pid::from_raw(second[0]), Signal::SIGKILL).unwrap();
    pane.wait_for_n("the turn was cut short by agentd stopping", 2);
    pane.wait_for_n("reconnected to agentd", 2);
    pane.line("after the kill");
    let screen = pane.wait_for("echo: after the kill");
    assert!(!screen.contains("Pane is dead"), "{screen}");
    assert_eq!(env.daemon_pids().len(), 1);
}

// 7 -------------------------------------------------------------------------

/// Sends SIGCONT to `pid` when dropped, so a failed test leaves no
/// stopped process.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

#[test]
fn a_one_shot_in_flight_names_a_frozen_agentd() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::Stall(Duration::from_secs(120)));
    let oneshot = env.chat_command(&model, ["exec", "wait for me"], "");
    assert!(model.wait_for_requests(1, Duration::from_secs(20)));
    let pid = env.daemon_pids()[0];
    kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    let _resume = Resume(pid);
    let out = oneshot.wait_with_output().unwrap();
    assert_code(&out, 3);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("agentd (pid {pid}) does not answer"))
            && err.contains(&format!("`kill -CONT {pid}`")),
        "{err}"
    );
}
