//! Hostile streams cost nothing: a gzip bomb is inflated under the
//! stream's caps, a redirect never takes the prompt to another origin, and
//! a broken multibyte character does not fail the answer.

use std::io::Write as _;
use std::net::TcpStream;

use agentx_tests::at_server::run_at;
use agentx_tests::fake_model::{self, RawServer};
use agentx_tests::{TestEnv, assert_code, stderr, stdout};

fn writes(stream: &mut TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes);
    let _ = stream.flush();
}

#[test]
fn a_gzip_bomb_is_inflated_under_the_streams_caps() {
    let env = TestEnv::new();
    // 400 MB of event-stream comments, about 400 KB zipped: what agentd
    // holds at once must not grow with what it inflates to.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let comments = b": padding padding padding padding padding padding padding\n".repeat(1 << 14);
    for _ in 0..400 {
        gz.write_all(&comments).unwrap();
    }
    gz.write_all(fake_model::responses_sse("resp_bomb", "defused").as_bytes())
        .unwrap();
    let zipped = gz.finish().unwrap();
    assert!(zipped.len() < 2 << 20, "{}", zipped.len());
    let server = RawServer::start(move |stream, _| {
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
    assert_eq!(stdout(&out).trim(), "defused", "{}", stderr(&out));
    let peak = env.agentd_peak_mib();
    assert!(peak < 150, "agentd peaked at {peak} MiB");
}

#[test]
fn a_redirect_to_another_origin_is_not_followed() {
    let env = TestEnv::new();
    let elsewhere = RawServer::start(|stream, _| {
        let body = fake_model::responses_sse("resp_x", "the prompt went elsewhere");
        writes(
            stream,
            fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
        );
        writes(stream, body.as_bytes());
    });
    let target = format!("{}/v1/responses", elsewhere.url());
    let server = RawServer::start(move |stream, _| {
        writes(
            stream,
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("another origin") && err.contains(&elsewhere.url()),
        "{err}"
    );
    assert!(elsewhere.heads().is_empty(), "the prompt reached {err}");
}

#[test]
fn a_redirect_within_the_same_origin_is_followed() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, head| {
        if head.starts_with("POST /v1/responses") {
            writes(
                stream,
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2/responses\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        } else {
            let body = fake_model::responses_sse("resp_y", "moved along");
            writes(
                stream,
                fake_model::ok_head("text/event-stream", body.len(), "").as_bytes(),
            );
            writes(stream, body.as_bytes());
        }
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "moved along", "{}", stderr(&out));
}

#[test]
fn a_broken_multibyte_character_is_replaced_and_the_answer_kept() {
    let env = TestEnv::new();
    let server = RawServer::start(|stream, _| {
        // The delta carries a cut character (C3 then a stray byte), as
        // some local servers send between tokens.
        let body = fake_model::responses_sse("resp_u", "cafe au lait");
        let bytes = body
            .into_bytes()
            .split_inclusive(|b| *b == b'\n')
            .flat_map(|line| {
                if line.starts_with(b"data: ") && line.windows(5).any(|w| w == b"delta") {
                    let text = String::from_utf8_lossy(line).replacen("cafe", "caf\u{1}", 1);
                    text.into_bytes()
                        .into_iter()
                        .map(|b| if b == 1 { 0xc3 } else { b })
                        .collect::<Vec<u8>>()
                } else {
                    line.to_vec()
                }
            })
            .collect::<Vec<u8>>();
        writes(
            stream,
            fake_model::ok_head("text/event-stream", bytes.len(), "").as_bytes(),
        );
        writes(stream, &bytes);
    });
    let out = run_at(&env, &format!("{}/v1", server.url()), &["exec", "hi"]);
    assert_code(&out, 0);
    assert!(stdout(&out).contains("au lait"), "{}", stderr(&out));
}

#[test]
fn an_untrusted_certificate_is_named_once_and_not_retried() {
    let env = TestEnv::new();
    let dir = env.root().join("tls");
    std::fs::create_dir(&dir).unwrap();
    let openssl = |args: &[&str]| {
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(args)
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    };
    let made = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "cert.pem",
    ])
    .status()
    .expect("openssl is installed");
    assert!(made.success());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let accept = format!("127.0.0.1:{port}");
    let mut server = openssl(&[
        "s_server", "-quiet", "-accept", &accept, "-cert", "cert.pem", "-key", "key.pem",
    ])
    .spawn()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while TcpStream::connect(&accept).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "s_server never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = run_at(&env, &format!("https://{accept}/v1"), &["exec", "hi"]);
    let _ = server.kill();
    let _ = server.wait();
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("does not trust") && err.contains("SSL_CERT_FILE"),
        "{err}"
    );
    assert!(!err.to_lowercase().contains("retry"), "{err}");
}
