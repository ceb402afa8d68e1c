//! Clients that never read their turn's events cost agentd bounded memory:
//! live output past the bounds is dropped (and said so), never queued.

use std::time::{Duration, Instant};

use agentx_tests::at_server::run_at;
use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code};

/// Streams opened and never read.
const STREAMS: usize = 20;
/// Output of each stream's command.
const OUTPUT: usize = 20_000_000;

fn rss_mib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib >> 10
}

#[test]
fn streams_nobody_reads_hold_bounded_memory() {
    use agentx_shared::proto::{ApprovalPolicy, TurnStart};
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Warm up: agentd up, one turn with a command run.
    let out = run_at(
        &env,
        &model.base_url(),
        &["exec", "--auto", "CALL echo warm"],
    );
    assert_code(&out, 0);
    let pid = env.daemon_pids()[0];
    let before = rss_mib(pid, "VmHWM:");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let held = runtime.block_on(async {
        let mut held = Vec::new();
        for i in 0..STREAMS {
            let start = TurnStart {
                oneshot: true,
                ..env.turn_start(
                    &model,
                    &format!("CALL head -c {OUTPUT} /dev/zero | tr '\\0' x; touch done-{i}"),
                    ApprovalPolicy::Auto,
                )
            };
            held.push(agentx_tests::open_turn(&env.socket(), start).await);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while (0..STREAMS).any(|i| !env.work.join(format!("done-{i}")).exists()) {
            assert!(Instant::now() < deadline, "the commands did not all run");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every command's output read by agentd and handed on (or not).
        tokio::time::sleep(Duration::from_secs(2)).await;
        held
    });
    let peak = rss_mib(pid, "VmHWM:");
    let grew = peak.saturating_sub(before);
    eprintln!("GREW {grew} MiB (from {before} to {peak})");
    // 400 MB of output went to clients that read none of it; at most
    // 128 KiB each (16 MiB in all) may wait for them. (Unbounded, agentd
    // grew by 183 MiB here; bounded, by 18.)
    assert!(
        grew < 80,
        "agentd grew by {grew} MiB (from {before} to {peak}) for {STREAMS} streams nobody read"
    );
    drop(held);
    drop(runtime);
}

/// One HTTP/2 frame: type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK header field as a literal never indexed (no table needed).
fn literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x10);
    for s in [name, value] {
        assert!(s.len() < 127);
        out.push(u8::try_from(s.len()).unwrap());
        out.extend_from_slice(s.as_bytes());
    }
}

/// The bytes of a client that opens `RunTurn` with `start` on stream 1 and
/// lets agentd send as much as it likes (the largest windows) — whose
/// socket is then never read.
fn unread_turn(start: agentx_shared::proto::TurnStart) -> Vec<u8> {
    use agentx_shared::proto::{TurnInput, turn_input};
    use prost::Message as _;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 2^31 - 1; the connection's window too.
    let mut settings = vec![0, 4];
    settings.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    out.extend(frame(0x4, 0, 0, &settings));
    out.extend(frame(0x8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    let mut headers = Vec::new();
    literal(&mut headers, ":method", "POST");
    literal(&mut headers, ":scheme", "http");
    literal(&mut headers, ":path", "/agentx.v1.Turns/RunTurn");
    literal(&mut headers, ":authority", "localhost");
    literal(&mut headers, "content-type", "application/grpc");
    literal(&mut headers, "te", "trailers");
    out.extend(frame(0x1, 0x4, 1, &headers));
    let input = TurnInput {
        input: Some(turn_input::Input::Start(start)),
    }
    .encode_to_vec();
    let mut message = vec![0];
    message.extend_from_slice(&u32::try_from(input.len()).unwrap().to_be_bytes());
    message.extend_from_slice(&input);
    out.extend(frame(0x0, 0, 1, &message));
    out
}

/// The bytes of live output (not counting "not shown" lines) in the gRPC
/// messages of stream 1 among HTTP/2 `frames`, and whether `finished`
/// came.
fn live_bytes_in(frames: &[u8]) -> (usize, bool) {
    use agentx_shared::proto::TurnEvent;
    use agentx_shared::proto::turn_event::Event;
    use prost::Message as _;
    let mut grpc = Vec::new();
    let mut at = 0;
    while at + 9 <= frames.len() {
        let len = usize::from(frames[at]) << 16
            | usize::from(frames[at + 1]) << 8
            | usize::from(frames[at + 2]);
        let (kind, stream) = (
            frames[at + 3],
            u32::from_be_bytes(frames[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff,
        );
        let end = (at + 9 + len).min(frames.len());
        if kind == 0x0 && stream == 1 {
            grpc.extend_from_slice(&frames[at + 9..end]);
        }
        at = end;
    }
    let (mut live, mut finished, mut at) = (0, false, 0);
    while at + 5 <= grpc.len() {
        let len = u32::from_be_bytes(grpc[at + 1..at + 5].try_into().unwrap()) as usize;
        let Some(body) = grpc.get(at + 5..at + 5 + len) else {
            break;
        };
        match TurnEvent::decode(body).unwrap().event {
            Some(Event::ToolOutput(o)) if !o.text.contains("bytes of output not shown") => {
                live += o.text.len();
            }
            Some(Event::Finished(_)) => finished = true,
            _ => {}
        }
        at += 5 + len;
    }
    (live, finished)
}

#[test]
fn what_waits_in_agentd_for_a_client_that_does_not_read_its_socket_is_small() {
    use agentx_shared::proto::{ApprovalPolicy, TurnStart};
    use std::io::{Read as _, Write as _};
    const PRINTED: usize = 3_000_000;
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &run_at(
            &env,
            &model.base_url(),
            &["exec", "--auto", "CALL echo warm"],
        ),
        0,
    );
    let start = TurnStart {
        oneshot: true,
        ..env.turn_start(
            &model,
            &format!("CALL head -c {PRINTED} /dev/zero | tr '\\0' x; touch done"),
            ApprovalPolicy::Auto,
        )
    };
    let mut socket = std::os::unix::net::UnixStream::connect(env.socket()).unwrap();
    socket.write_all(&unread_turn(start)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !env.work.join("done").exists() {
        assert!(Instant::now() < deadline, "the command did not run");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The command has ended and its output was read by agentd: what it
    // kept for this client waits in agentd and in the socket. Read it all.
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let (live, finished) = loop {
        let n = socket.read(&mut buf).unwrap();
        assert!(n > 0, "agentd closed the connection");
        got.extend_from_slice(&buf[..n]);
        let (live, finished) = live_bytes_in(&got);
        if finished {
            break (live, finished);
        }
    };
    assert!(finished);
    // The socket's buffers (about 200 KiB here) plus what agentd held: the
    // live-output bound (128 KiB), a piece being encoded and the stream's
    // HTTP/2 send buffer; about 350 KiB arrived. (With h2's default send
    // buffer, 400 KiB, about 700 KiB arrived.)
    assert!(
        live < 512 << 10,
        "{live} bytes of live output waited for a client that read nothing"
    );
}
