//! A real llama.cpp-style server: llama-cpp-python's OpenAI-compatible server
//! (Chat Completions, streaming, `n_ctx` 1024) on a tiny random model with
//! Llama 3's tokenizer (`tests/llama/make_tiny_model.py`). Past its context
//! it has already said `200 OK` and the stream just ends; it reports no usage
//! and answers none of the window probes. Installed by `.ci/run`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentx_tests::{TEST_KEY, TestEnv, json_out, skip, stderr};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's Python with llama-cpp-python and gguf, and the tokenizer
/// file `.ci/run` unpacked; `None` (and a printed skip) when missing.
fn installed() -> Option<(PathBuf, PathBuf)> {
    let python = repo().join(".venv-tests/bin/python");
    let vocab = repo().join(".llama/ggml-vocab-llama-bpe.gguf");
    let importable = python.exists()
        && Command::new(&python)
            .args(["-c", "import llama_cpp, gguf"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if importable && vocab.exists() {
        Some((python, vocab))
    } else {
        skip("llama-cpp-python or .llama/ is missing: run the llama step of .ci/run");
        None
    }
}

/// `python -m llama_cpp.server` on 127.0.0.1, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(python: &Path, model: &Path, n_ctx: u32, dir: &Path) -> Server {
        // A port another process takes between our probe and the server's
        // bind is tried again with another one.
        for attempt in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let log = dir.join(format!("llama-server-{attempt}.log"));
            let child = Command::new(python)
                .args(["-m", "llama_cpp.server", "--model"])
                .arg(model)
                .args(["--n_ctx", &n_ctx.to_string()])
                .args(["--chat_format", "llama-3", "--model_alias", "tiny"])
                .args(["--seed", "7", "--n_threads", "1"])
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(std::fs::File::create(dir.join("llama-server.err")).unwrap())
                .spawn()
                .unwrap();
            let mut server = Server { child, port, log };
            if server.ready() {
                return server;
            }
        }
        panic!(
            "llama-cpp-python's server did not start (logs in {})",
            dir.display()
        );
    }

    /// Waits until `/v1/models` answers (false: the server exited).
    fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.write_all(b"GET /v1/models HTTP/1.0\r\n\r\n");
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("llama-cpp-python's server did not answer in 60 s");
    }

    /// What the server wrote to its stderr (uvicorn's log and tracebacks).
    fn log(&self) -> String {
        let dir = self.log.parent().unwrap();
        std::fs::read_to_string(dir.join("llama-server.err")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` messages of about 600 characters of plain English, each different.
fn messages(n: usize) -> String {
    let words: Vec<&str> = "the daemon keeps every conversation in the profile and writes its \
        journal with care so that nothing is lost when a client dies or the machine restarts \
        while a command runs in the folder we measure latency and memory on two shared cores \
        and compare each change with a baseline in the same run before we call it done"
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect();
    let mut seed = 3u64;
    let mut out = String::new();
    for i in 0..n {
        let mut line = format!("Message {i}:");
        while line.len() < 600 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            line.push(' ');
            line.push_str(words[(seed >> 33) as usize % words.len()]);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The scenario: against such a server with a 1,024-token context,
/// 25 turns of about 600 characters failed 21 times (the same oversized
/// request retried until the turn failed). Every turn now succeeds: the
/// empty stream after a larger request than the last answered is taken as
/// an overflow, the window is learned, the conversation compacted.
#[test]
fn twenty_five_turns_against_llama_cpp_python_with_a_1024_token_context_all_succeed() {
    let Some((python, vocab)) = installed() else {
        return;
    };
    let mut env = TestEnv::new();
    let model = env.root().join("tiny.gguf");
    let made = Command::new(&python)
        .arg(repo().join("tests/llama/make_tiny_model.py"))
        .arg(&vocab)
        .arg(&model)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let server = Server::start(&python, &model, 1024, env.root());
    for (k, v) in [
        // A CPU-bound server on shared cores: the tests' 2 s idle bound
        // would retry requests the server is still evaluating.
        ("AGENTX_STREAM_IDLE_MS", "120000".to_owned()),
        ("AGENTX_PROVIDER", "chat".to_owned()),
        (
            "AGENTX_BASE_URL",
            format!("http://127.0.0.1:{}/v1", server.port),
        ),
        ("AGENTX_MODEL", "tiny".to_owned()),
        ("OPENAI_API_KEY", TEST_KEY.to_owned()),
    ] {
        env.extra_env.push((k.into(), v));
    }
    let mut child = env
        .agentx(Vec::<&str>::new())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let text = messages(25);
    let feeder = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    let said = stderr(&out);
    let log = server.log();
    assert!(out.status.success(), "{said}\n--- server:\n{log}");
    // The overflow really happened, in the server's own words, and was
    // recognised as one.
    assert!(
        log.contains("exceed context window of 1024"),
        "the conversation never reached the server's window:\n{log}"
    );
    assert!(
        said.contains("probably more than the model's context window"),
        "{said}"
    );
    let sessions = json_out(&env.run(["sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(sessions[0]["turns"], 25, "{sessions}\n{said}");
    let status = json_out(&env.run(["status", "--json"]));
    let context = &status["context"];
    assert_eq!(context["window_source"], "overflow", "{status}");
    let window = context["window_tokens"].as_u64().unwrap();
    assert!(
        window < 4096,
        "learned a window of {window} tokens: {status}"
    );
    drop(server);
}
