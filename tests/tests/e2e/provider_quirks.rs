//! Hostile but realistic model servers: servers that never send
//! headers, answers and prompts past gRPC's 4 MiB message limit, answers
//! past the answer limit, proxies taken from each turn's environment,
//! answers cut short, tool calls that never ran, JSON instead of a stream,
//! redirects, gzip, connection resets, proxies refusing CONNECT, and slow
//! streams.

use std::io::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use agentx_tests::at_server::{agentx_at, bounded, run_at};
use agentx_tests::fake_model::{self, FakeModel, RawServer, Reply};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

fn writes(stream: &mut TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes);
    let _ = stream.flush();
}

/// A server that answers every request with `text` as a Responses stream.
fn canned(text: &'static str) -> RawServer {
    RawServer::start(move |stream, _| {
        let body = fake_model::responses_sse("resp_canned", text);
        writes(
            stream,
            fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
        );
        writes(stream, body.as_bytes());
    })
}

// 1 -------------------------------------------------------------------------

#[test]
fn a_server_that_never_sends_headers_is_retried_then_fails() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_HEADERS_TIMEOUT_MS".into(), "300".into()));
    let server = RawServer::start(|stream, _| fake_model::hold_silent(stream));
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hello"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("sent no response headers within 0.3s"),
        "{err}"
    );
    assert_eq!(server.heads().len(), 4, "retried: {err}");
}

// 2 -------------------------------------------------------------------------

/// `n` bytes of varied text (lines, multi-byte characters).
/// A test env for multi-megabyte payloads: the stream-idle timer is long.
/// Megabyte-sized events from a debug-built fake model on a loaded 2-core
/// machine can leave seconds between bytes; stall detection has its own
/// tests (11), and these test size, not timing.
fn big_env() -> TestEnv {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "120000".into()));
    env
}

fn big_text(n: usize) -> String {
    let line = "the quick brown fox — jumps over the lazy dog 0123456789\n";
    let mut text = line.repeat(n / line.len() + 1);
    let mut end = n;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

#[test]
fn a_5_mb_answer_arrives_whole_in_text_and_json() {
    let env = big_env();
    let model = FakeModel::start();
    let answer = big_text(5_000_000);
    model.push(Reply::text(answer.clone()));
    let out = env.chat(&model, ["exec", "big please"], "");
    assert_code(&out, 0);
    let printed = stdout(&out);
    assert_eq!(printed.len(), answer.len() + 1, "{}", stderr(&out));
    assert!(printed == format!("{answer}\n"));

    model.push(Reply::text(answer.clone()));
    let out = env.chat(&model, ["exec", "--json", "again"], "");
    assert_code(&out, 0);
    let text = stdout(&out);
    let result: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(result["status"], "completed");
    assert!(result["text"].as_str() == Some(answer.as_str()));
    let deltas: String = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["delta"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(deltas == answer, "the deltas add up to the answer");
}

#[test]
fn two_3_mb_answers_leave_the_conversation_openable() {
    let env = big_env();
    let model = FakeModel::start();
    let answer = big_text(3_000_000);
    model.push(Reply::text(answer.clone()));
    model.push(Reply::text(answer.clone()));
    let out = env.chat(&model, ["--approval", "auto"], "one\ntwo\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).len(), 2 * (answer.len() + 1));

    let s = env.status();
    assert_eq!(s["turns"], 2);
    assert_eq!(s["failed"], Value::Null);
    let cps = json_out(&env.run(["checkpoints", "--json"]));
    assert_eq!(cps.as_array().map(Vec::len), Some(2));
    // Resumed (the last exchanges are shown) and it goes on.
    let out = env.chat(&model, ["--approval", "auto"], "three\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: three [turns seen: 3]");
    let out = env.chat(&model, ["resume", "1"], "four\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: four [turns seen: 4]");
}

#[test]
fn a_5_mb_prompt_fails_cleanly_and_a_normal_one_works() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let prompt = big_text(5_000_000);
    let mut cmd = agentx_at(&env, &model.base_url(), &["exec", "-"]);
    cmd.env("AGENTX_BASE_URL", model.base_url());
    let out = bounded(cmd, prompt.as_bytes(), Duration::from_secs(60));
    assert_code(&out, 2);
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("at most 1024 KiB"), "{err}");
    assert!(model.requests().is_empty());
    let out = bounded(
        agentx_at(&env, &model.base_url(), &["exec", "-"]),
        b"small",
        Duration::from_secs(60),
    );
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: small [turns seen: 1]");
}

// 3 -------------------------------------------------------------------------

#[test]
fn an_answer_past_the_limit_fails_once_and_the_conversation_goes_on() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_MAX_ANSWER_BYTES".into(), "100000".into()));
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "auto"], "one\n"), 0);
    model.push(Reply::text(big_text(200_000)));
    let out = env.chat(&model, ["--approval", "auto"], "two\n");
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("AGENTX_MAX_ANSWER_BYTES"), "{err}");
    assert_eq!(model.requests().len(), 2, "not retried: {err}");
    let s = env.status();
    assert!(
        s["failed"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("past"))
    );
    assert_eq!(s["turns"], 1);
    let out = env.chat(&model, ["--approval", "auto"], "three\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: three"), "{}", stdout(&out));
}

// 7 -------------------------------------------------------------------------

#[test]
fn proxy_variables_come_with_each_turn() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proxy = canned("via the proxy");
    // agentd starts without any proxy.
    let out = run_at(&env, &model.base_url(), &["exec", "one"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: one [turns seen: 1]");

    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY"] {
        let mut cmd = agentx_at(&env, &model.base_url(), &["exec", "two"]);
        cmd.env(var, proxy.url());
        let out = bounded(cmd, b"", Duration::from_secs(60));
        assert_code(&out, 0);
        assert_eq!(stdout(&out).trim(), "via the proxy", "{var}");
    }
    let heads = proxy.heads();
    assert_eq!(heads.len(), 3);
    assert!(
        heads[0].starts_with(&format!("POST {}/responses ", model.base_url())),
        "{}",
        heads[0]
    );
    // NO_PROXY of that turn sends it direct.
    let mut cmd = agentx_at(&env, &model.base_url(), &["exec", "three"]);
    cmd.env("HTTP_PROXY", proxy.url())
        .env("NO_PROXY", "localhost,127.0.0.1");
    let out = bounded(cmd, b"", Duration::from_secs(60));
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: three [turns seen: 1]");
    assert_eq!(proxy.heads().len(), 3);
}

// 8 -------------------------------------------------------------------------

fn cut_short_is_kept_marked_and_continued(env: &TestEnv) {
    let model = FakeModel::start();
    model.push(Reply::Incomplete("the first half of".into()));
    let out = env.chat(&model, ["--approval", "auto"], "write it\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "the first half of");
    let err = stderr(&out);
    assert!(
        err.contains("cut short by the model server (max_output_tokens)"),
        "{err}"
    );
    let s = env.status();
    assert!(
        s["cut_short"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_output_tokens")),
        "{s}"
    );
    assert_eq!(s["failed"], Value::Null);
    let out = env.chat(&model, ["--approval", "auto"], "continue\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: continue [turns seen: 2]");
    assert_eq!(env.status()["cut_short"], Value::Null);

    model.push(Reply::Incomplete("partial".into()));
    let out = env.chat(&model, ["exec", "--json", "x"], "");
    assert_code(&out, 0);
    let text = stdout(&out);
    let result: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(result["text"], "partial");
    assert_eq!(result["cut_short"], "max_output_tokens");
}

#[test]
fn a_responses_answer_cut_short_is_kept_marked_and_can_go_on() {
    cut_short_is_kept_marked_and_continued(&TestEnv::new());
}

#[test]
fn a_chat_answer_cut_short_is_kept_marked_and_can_go_on() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_PROVIDER".into(), "chat".into()));
    cut_short_is_kept_marked_and_continued(&env);
}

// 9 -------------------------------------------------------------------------

#[test]
fn tool_calls_that_never_ran_say_why_and_huge_commands_show_their_head() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let huge = format!("echo {}", "a".repeat(1_000_000));
    model.push(Reply::ToolCalls(vec![
        ("shell".into(), Value::String("{not json".into())),
        ("shell".into(), json!({"cmd": "ls"})),
        ("python".into(), json!({"command": "print(1)"})),
        ("shell".into(), json!({ "command": huge })),
    ]));
    let out = env.chat(&model, ["exec", "--auto", "go"], "");
    assert_code(&out, 0);
    let err = stderr(&out);
    for want in [
        "↳ not run: arguments were not valid JSON",
        "↳ not run: no `command` in the arguments",
        "↳ not run: unknown tool \"python\"",
        "↳ not run: could not start it: Argument list too long",
        "(1000005 bytes)",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    assert!(!err.contains("killed"), "{err}");
    assert!(err.len() < 5_000, "the command is shown by its head: {err}");
}

// 10 ------------------------------------------------------------------------

#[test]
fn a_json_body_instead_of_a_stream_is_named_and_not_retried() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, _| {
        let body = r#"{"error":{"message":"streaming is disabled here"}}"#;
        writes(
            stream,
            fake_model::ok_head("application/json", body.len(), "").as_bytes(),
        );
        writes(stream, body.as_bytes());
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("application/json instead of an event stream")
            && err.contains("streaming is disabled here"),
        "{err}"
    );
    assert_eq!(server.heads().len(), 1, "{err}");
}

#[test]
fn a_redirect_that_would_make_the_post_a_get_is_named() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, _| {
        writes(
            stream,
            b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://127.0.0.1:9/elsewhere/responses\r\n\
              Content-Length: 0\r\nConnection: close\r\n\r\n",
        );
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("redirected POST") && err.contains("301") && err.contains("/elsewhere"),
        "{err}"
    );
    assert_eq!(server.heads().len(), 1, "{err}");
}

#[test]
fn identity_is_asked_for_and_a_gzip_stream_is_decoded_anyway() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, head| {
        let asked = head
            .to_ascii_lowercase()
            .contains("accept-encoding: identity");
        let text = if asked {
            "zipped answer"
        } else {
            "no identity"
        };
        let body = fake_model::responses_sse("resp_z", text);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(body.as_bytes()).unwrap();
        let zipped = gz.finish().unwrap();
        writes(
            stream,
            fake_model::ok_head(
                "text/event-stream",
                zipped.len(),
                "Content-Encoding: gzip\r\n",
            )
            .as_bytes(),
        );
        writes(stream, &zipped);
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "zipped answer", "{}", stderr(&out));
}

#[test]
fn a_connection_reset_says_so() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, _| {
        let body = fake_model::responses_sse("resp_r", "never finished");
        writes(
            stream,
            fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
        );
        writes(stream, &body.as_bytes()[..100]);
        std::thread::sleep(Duration::from_millis(100));
        // SO_LINGER 0: closing sends a reset.
        let _ = nix::sys::socket::setsockopt(
            &*stream,
            nix::sys::socket::sockopt::Linger,
            &nix::libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        );
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("reset the connection"), "{err}");
}

#[test]
fn a_proxy_refusing_connect_is_named() {
    let env = TestEnv::new();
    let proxy = RawServer::start(|stream, _| {
        writes(
            stream,
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    });
    let mut cmd = agentx_at(&env, "https://model.example.invalid/v1", &["exec", "hi"]);
    cmd.env("HTTPS_PROXY", proxy.url());
    let out = bounded(cmd, b"", Duration::from_secs(60));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("through the proxy {}", proxy.url())),
        "{err}"
    );
    assert!(proxy.heads()[0].starts_with("CONNECT model.example.invalid:443"));
}

// 11 ------------------------------------------------------------------------

#[test]
fn a_slow_stream_that_keeps_sending_bytes_is_not_idle() {
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "500".into()));
    let server = RawServer::start(|stream, _| {
        let _ = stream.set_nodelay(true);
        let body = fake_model::responses_sse("resp_s", "slow answer");
        writes(
            stream,
            fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
        );
        // Well over the idle timeout per event, never silent for long.
        for piece in body.as_bytes().chunks(16) {
            writes(stream, piece);
            std::thread::sleep(Duration::from_millis(60));
        }
    });
    let started = Instant::now();
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "slow answer", "{}", stderr(&out));
    assert!(started.elapsed() > Duration::from_secs(1));
    assert_eq!(server.heads().len(), 1);
}

// 4 -------------------------------------------------------------------------

#[test]
fn a_line_that_never_ends_fails_clearly_once() {
    let mut env = TestEnv::new();
    // A small answer limit keeps the event cap at its 16 MiB floor.
    env.extra_env
        .push(("AGENTX_MAX_ANSWER_BYTES".into(), "1000000".into()));
    let server = RawServer::start(|stream, _| {
        writes(
            stream,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: ",
        );
        let block = vec![b'x'; 1 << 20];
        for _ in 0..17 {
            writes(stream, &block);
        }
        fake_model::hold_silent(stream);
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("an event or a line over 16 MiB"), "{err}");
    assert_eq!(server.heads().len(), 1, "not retried: {err}");
}
