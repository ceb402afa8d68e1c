//! `agentx web`: the browser client. The security rules are plain HTTP
//! requests; the flows run in headless Chromium through Selenium
//! (tests/web/flows.py) against the URL `agentx web --no-open` prints.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TEST_KEY, TestEnv, assert_code, json_out, skip};
use serde_json::{Value, json};

/// A running `agentx web --no-open`, stopped with Ctrl-C on drop.
struct WebView {
    child: Child,
    url: String,
    port: u16,
    token: String,
}

impl WebView {
    fn start(env: &TestEnv, model: &FakeModel, extra: &[&str]) -> Self {
        let mut cmd = env.agentx(["web", "--no-open"]);
        cmd.args(extra)
            .env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", TEST_KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_owned();
        let rest = url.strip_prefix("http://127.0.0.1:").expect(&url);
        let (port, query) = rest.split_once('/').unwrap();
        let token = query.strip_prefix("?token=").unwrap().to_owned();
        Self {
            child,
            port: port.parse().unwrap(),
            url,
            token,
        }
    }

    /// Logs in with the printed URL (once) and returns the API key the
    /// page would keep.
    fn login(&self) -> String {
        let (status, head, body) = http(
            self.port,
            &format!("GET /?token={}", self.token),
            &[("Host", &self.host())],
            "",
        );
        assert_eq!(status, 303, "{head}{body}");
        head.lines()
            .find_map(|l| l.strip_prefix("location: /#key="))
            .unwrap_or_else(|| panic!("no key in {head}"))
            .trim()
            .to_owned()
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for WebView {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange with exactly these headers: (status, head, body).
fn http(
    port: u16,
    request_line: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!("{request_line} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// A conversation titled `title` with one message that ran a command.
fn conversation(env: &TestEnv, model: &FakeModel, title: &str, command: &str) -> String {
    let out = env.chat(model, ["--auto"], &format!("CALL {command}\n"));
    assert_code(&out, 0);
    assert_code(&env.run(["rename", title]), 0);
    json_out(&env.run(["status", "--json"]))["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_request_without_the_key_gets_nothing() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Secret plans", "true");
    let web = WebView::start(&env, &model, &[]);
    let host = web.host();
    for path in ["/api/sessions", "/?token=0000", "/api/search?q=Secret"] {
        let (status, _, body) = http(web.port, &format!("GET {path}"), &[("Host", &host)], "");
        assert_eq!(status, 401, "{path}: {body}");
        assert!(!body.contains("Secret"), "{path}: {body}");
    }
    // The page and its script hold no data.
    for path in ["/", "/app.js"] {
        let (status, _, body) = http(web.port, &format!("GET {path}"), &[("Host", &host)], "");
        assert_eq!(status, 200, "{path}");
        assert!(!body.contains("Secret"), "{path}: {body}");
    }
    // The printed URL trades the token for a key in the fragment, and sets
    // no cookie (cookies reach every 127.0.0.1 port)…
    let login = format!("GET /?token={}", web.token);
    let (status, head, _) = http(web.port, &login, &[("Host", &host)], "");
    assert_eq!(status, 303, "{head}");
    assert!(!head.contains("set-cookie"), "{head}");
    let key = head
        .lines()
        .find_map(|l| l.strip_prefix("location: /#key="))
        .unwrap()
        .trim()
        .to_owned();
    assert_ne!(key, web.token);
    // …and works once.
    let (status, _, body) = http(web.port, &login, &[("Host", &host)], "");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("used already"), "{body}");
    // Every API call needs the key; with it the data is there.
    let (status, head, body) = http(
        web.port,
        "GET /api/sessions",
        &[("Host", &host), ("X-Agentx-Key", &key)],
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Secret plans"), "{body}");
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(!head.contains("access-control-allow"), "no CORS: {head}");
    // A wrong key is no key, and neither is the login token.
    let first = if key.starts_with('0') { '1' } else { '0' };
    let wrong = format!("{first}{}", &key[1..]);
    for bad in [wrong.as_str(), web.token.as_str()] {
        let (status, _, body) = http(
            web.port,
            "GET /api/sessions",
            &[("Host", &host), ("X-Agentx-Key", bad)],
            "",
        );
        assert_eq!(status, 401, "{body}");
    }
}

#[test]
fn a_foreign_host_is_refused_even_with_the_key() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Rebinding target", "true");
    let web = WebView::start(&env, &model, &[]);
    let key = web.login();
    let foreign = format!("attacker.example:{}", web.port);
    let localhost = format!("localhost:{}", web.port);
    let other_port = format!("127.0.0.1:{}", web.port.wrapping_add(1));
    for host in [
        foreign.as_str(),
        localhost.as_str(),
        other_port.as_str(),
        "127.0.0.1",
    ] {
        let (status, _, body) = http(
            web.port,
            "GET /api/sessions",
            &[("Host", host), ("X-Agentx-Key", &key)],
            "",
        );
        assert_eq!(status, 421, "Host {host}: {body}");
        assert!(!body.contains("Rebinding"), "{body}");
    }
}

#[test]
fn a_cross_origin_post_is_refused() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let id = conversation(&env, &model, "Fork me", "true");
    let web = WebView::start(&env, &model, &[]);
    let (host, key, origin) = (web.host(), web.login(), web.origin());
    let body = json!({"id": id, "checkpoint": 1}).to_string();
    let count = || {
        json_out(&env.run(["sessions", "--json"]))
            .as_array()
            .unwrap()
            .len()
    };
    let before = count();
    for bad in [Some("http://attacker.example"), Some("null"), None] {
        let mut headers = vec![
            ("Host", host.as_str()),
            ("X-Agentx-Key", key.as_str()),
            ("Content-Type", "application/json"),
        ];
        if let Some(bad) = bad {
            headers.push(("Origin", bad));
        }
        let (status, _, answer) = http(web.port, "POST /api/fork", &headers, &body);
        assert_eq!(status, 403, "Origin {bad:?}: {answer}");
    }
    assert_eq!(count(), before, "a refused fork forked nothing");
    // The same request from the page's own origin goes through.
    let (status, _, answer) = http(
        web.port,
        "POST /api/fork",
        &[
            ("Host", &host),
            ("X-Agentx-Key", &key),
            ("Origin", &origin),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(count(), before + 1);
}

// ---- in Chromium ----------------------------------------------------------

/// The venv's Python, when Chromium, its driver and Selenium are here.
fn browser_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv-tests/bin/python");
    let missing = [
        ("/usr/bin/chromium", PathBuf::from("/usr/bin/chromium")),
        (
            "/usr/bin/chromedriver",
            PathBuf::from("/usr/bin/chromedriver"),
        ),
        (".venv-tests (run .ci/run)", python.clone()),
    ]
    .into_iter()
    .find(|(_, p)| !p.exists());
    if let Some((what, _)) = missing {
        skip(&format!("no {what}"));
        return None;
    }
    let has_selenium = Command::new(&python)
        .args(["-c", "import selenium"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_selenium {
        skip("no selenium in .venv-tests (run .ci/run)");
        return None;
    }
    Some(python)
}

/// Runs one flow of tests/web/flows.py against the web view.
fn flow(python: &PathBuf, web: &WebView, name: &str, arg: Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web/flows.py");
    // chromedriver and Chromium put their profile and singleton
    // directories here, gone with the flow instead of left in /tmp.
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(python)
        .arg(&script)
        .args([name, &web.url, &arg.to_string()])
        .env("TMPDIR", tmp.path())
        .env("SE_AVOID_STATS", "true")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "flow {name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    // Logged in by the printed URL; neither the token nor the key stays in
    // the address bar, and no cookie was set.
    let url = result["url_after_login"].as_str().unwrap();
    assert!(url.starts_with(&format!("{}/", web.origin())), "{url}");
    assert!(!url.contains("token") && !url.contains("key"), "{url}");
    assert_eq!(result["cookie_visible_to_script"], "", "no cookie");
    result
}

#[test]
fn the_page_lists_opens_and_reads_with_tool_calls_folded() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Older one", "echo first-output");
    let out = env.chat(
        &model,
        ["--auto", "new"],
        "CALL echo tool-said-hello\nplain question\n",
    );
    assert_code(&out, 0);
    assert_code(&env.run(["rename", "Newer one"]), 0);
    let web = WebView::start(&env, &model, &[]);
    let got = flow(&python, &web, "read", json!({"title": "Newer one"}));
    let titles: Vec<&str> = got["titles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let newer = titles.iter().position(|t| *t == "Newer one").unwrap();
    let older = titles.iter().position(|t| *t == "Older one").unwrap();
    assert!(newer < older, "newest first: {titles:?}");
    let messages = got["messages"].to_string();
    assert!(messages.contains("CALL echo tool-said-hello"), "{messages}");
    assert!(messages.contains("echo: plain question"), "{messages}");
    assert_eq!(got["tools_folded"], json!([true]), "{got}");
    assert_eq!(got["tool_text_hidden"], json!([true]), "{got}");
    let opened = got["first_tool_opened"].as_str().unwrap();
    assert!(
        opened.contains("tool-said-hello\n"),
        "the output, once unfolded: {opened}"
    );
    assert!(got["checkpoints"].as_u64().unwrap() >= 2, "{got}");
}

#[test]
fn an_item_kind_the_page_does_not_know_is_shown_as_stored() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Compacted", "true");
    let web = WebView::start(&env, &model, &[]);
    let got = flow(&python, &web, "unknown", json!({"title": "Compacted"}));
    let summary = got["summary"].as_str().unwrap();
    assert!(summary.contains("hologram"), "{got}");
    assert!(summary.contains("Earlier turns, summed up"), "{got}");
    assert!(
        got["body"]
            .as_str()
            .unwrap()
            .contains("\"tokens_after\": 8000"),
        "{got}"
    );
    assert!(
        got["messages"].to_string().contains("CALL true"),
        "the rest still renders: {got}"
    );
}

#[test]
fn searching_in_the_page_finds_and_opens_the_conversation() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Needle holder", "echo zebracorn-42");
    assert_code(&env.chat(&model, ["new"], "nothing to see\n"), 0);
    assert_code(&env.run(["rename", "Haystack"]), 0);
    let web = WebView::start(&env, &model, &[]);
    let got = flow(&python, &web, "search", json!({"query": "zebracorn"}));
    assert_eq!(got["hits"][0], "Needle holder", "{got}");
    assert!(!got["hits"].to_string().contains("Haystack"), "{got}");
    assert!(
        got["marks"]
            .to_string()
            .to_lowercase()
            .contains("zebracorn"),
        "{got}"
    );
    assert_eq!(got["opened"], "Needle holder");
}

#[test]
fn a_message_s_diff_shows_in_the_page() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    std::fs::write(env.work.join("notes.txt"), "alpha\nbeta\n").unwrap();
    conversation(
        &env,
        &model,
        "Edits",
        "printf 'alpha\\ngamma\\n' > notes.txt; printf 'x\\n' > new.txt",
    );
    let web = WebView::start(&env, &model, &[]);
    let got = flow(&python, &web, "diff", json!({"title": "Edits"}));
    assert_eq!(got["files"], json!(["new.txt", "notes.txt"]), "{got}");
    assert!(got["added"].to_string().contains("+gamma"), "{got}");
    assert!(got["removed"].to_string().contains("-beta"), "{got}");
}

#[test]
fn undo_in_the_page_shows_the_plan_and_restores_after_confirmation() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    let marker = env.work.join("marker.txt");
    std::fs::write(&marker, "original\n").unwrap();
    conversation(&env, &model, "Oops", "printf 'clobbered\\n' > marker.txt");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "clobbered\n");
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "undo",
        json!({"title": "Oops", "marker": marker}),
    );
    assert!(
        got["plan"].as_str().unwrap().contains("marker.txt"),
        "{got}"
    );
    assert_eq!(
        got["before_confirm"], "clobbered\n",
        "the plan changes nothing"
    );
    assert!(
        got["done"].as_str().unwrap().contains("1 path(s) restored"),
        "{got}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "original\n");
}

#[test]
fn a_message_sent_from_the_page_streams_and_the_cli_sees_the_turn() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    let id = conversation(&env, &model, "Chat", "true");
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "send",
        json!({"title": "Chat", "message": "hello from the page"}),
    );
    assert_eq!(got["finished"], "completed", "{got}");
    assert_eq!(
        got["answer"], "echo: hello from the page [turns seen: 2]",
        "{got}"
    );
    assert!(
        got["deltas"].as_u64().unwrap() > 1,
        "streamed in pieces: {got}"
    );
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["session_id"], id.as_str());
    assert_eq!(status["turns"], 2, "{status}");
    let doc = agentx_tests::stdout(&env.run(["export", "--format", "markdown"]));
    assert!(doc.contains("hello from the page"), "{doc}");
    // And the terminal goes on from there.
    let out = env.chat(&model, Vec::<&str>::new(), "and from the terminal\n");
    assert!(
        agentx_tests::stdout(&out).contains("echo: and from the terminal [turns seen: 3]"),
        "{}",
        agentx_tests::stdout(&out)
    );
}

#[test]
fn stop_in_the_page_cancels_the_turn() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Long answer", "true");
    model.stall_when_prompt_contains("TAKE-YOUR-TIME", std::time::Duration::from_secs(120));
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "stop",
        json!({"title": "Long answer", "message": "TAKE-YOUR-TIME please"}),
    );
    assert_eq!(got["finished"], "interrupted", "{got}");
    let status = json_out(&env.run(["status", "--json"]));
    assert!(
        status["interrupted"].is_object(),
        "the CLI sees it interrupted: {status}"
    );
}

#[test]
fn a_tool_call_is_approved_in_the_page() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Ask me", "true");
    let web = WebView::start(&env, &model, &["--approval", "ask"]);
    let got = flow(
        &python,
        &web,
        "approve",
        json!({"title": "Ask me", "message": "CALL touch approved.txt"}),
    );
    assert!(
        got["prompt"]
            .as_str()
            .unwrap()
            .contains("touch approved.txt"),
        "{got}"
    );
    assert_eq!(
        got["focused"], "approve",
        "the decision has the keyboard focus"
    );
    assert_eq!(got["finished"], "completed", "{got}");
    assert!(env.work.join("approved.txt").exists(), "{got}");
    assert!(got["tool"].to_string().contains("exit 0"), "{got}");
}

#[test]
fn the_suite_takes_the_readme_screenshot() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    std::fs::write(env.work.join("README.md"), "# demo\n").unwrap();
    conversation(
        &env,
        &model,
        "Tidy the README",
        "printf '# demo\\n\\nUsage: run it.\\n' > README.md",
    );
    model.push(Reply::text(
        "Glad it helps. What changed:\n\n- a **Usage** section under the title\n- `# demo` \
         stays the first line\n\n```sh\ncat README.md  # to read it\n```\n",
    ));
    let out = env.chat(&model, Vec::<&str>::new(), "thanks, that reads well\n");
    assert_code(&out, 0);
    let web = WebView::start(&env, &model, &[]);
    let shot = env.root().join("web.png");
    flow(
        &python,
        &web,
        "screenshot",
        json!({"title": "Tidy the README", "path": shot, "width": 900, "height": 760}),
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(png.len() > 10_000, "a real page, not a blank one");
    // The README's picture (docs/web.png) is this one, refreshed on demand.
    if std::env::var_os("AGENTX_UPDATE_SCREENSHOT").is_some() {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("web.png"), png).unwrap();
    }
}

/// A server on another loopback port (reached as 127.0.0.1 and as
/// localhost) gets nothing from the browser that grants access: whatever
/// it received, replayed with forged Host and Origin against every API
/// route, gets 401; and the login URL it might have seen works no more.
#[test]
fn another_local_port_gets_nothing_that_grants_access() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    let id = conversation(&env, &model, "Private work", "true");
    let other = agentx_tests::fake_model::RawServer::start(|stream, _| {
        let page = "<!doctype html><title>other</title><p>another local server";
        let _ = stream.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{page}",
                page.len()
            )
            .as_bytes(),
        );
    });
    let web = WebView::start(&env, &model, &[]);
    let other_port = other.url().rsplit(':').next().unwrap().to_owned();
    let urls = [
        format!("{}/steal", other.url()),
        format!("http://localhost:{other_port}/steal"),
    ];
    flow(&python, &web, "visit", json!({ "urls": urls }));
    let heads = other.heads();
    assert!(
        heads.len() >= 2,
        "the browser never reached the other server: {heads:?}"
    );
    // Everything the browser sent there, as headers to replay.
    let mut sent: Vec<(String, String)> = Vec::new();
    for head in &heads {
        assert!(!head.contains(&web.token), "the login token leaked: {head}");
        for line in head.lines().skip(1) {
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                if !matches!(
                    name.as_str(),
                    "host" | "origin" | "content-length" | "connection"
                ) {
                    sent.push((name, value.trim().to_owned()));
                }
            }
        }
    }
    let host = web.host();
    let origin = web.origin();
    let body = json!({"id": id, "checkpoint": 1, "message": "run id", "turn": "x",
                      "call_id": "c", "decision": "yes"})
    .to_string();
    for (method, path) in [
        ("GET", "/api/info"),
        ("GET", "/api/sessions"),
        ("GET", "/api/search?q=Private"),
        ("GET", &format!("/api/transcript?id={id}") as &str),
        ("GET", "/api/snapshots"),
        ("GET", "/api/diff"),
        ("POST", "/api/fork"),
        ("POST", "/api/rollback"),
        ("POST", "/api/restore/plan"),
        ("POST", "/api/restore"),
        ("POST", "/api/turn"),
        ("POST", "/api/turn/approve"),
        ("POST", "/api/turn/stop"),
    ] {
        let mut headers: Vec<(&str, &str)> = vec![
            ("Host", &host),
            ("Origin", &origin),
            ("Content-Type", "application/json"),
        ];
        headers.extend(sent.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let (status, _, answer) = http(web.port, &format!("{method} {path}"), &headers, &body);
        assert_eq!(
            status, 401,
            "{method} {path} with what the other port got: {answer}"
        );
        assert!(!answer.contains("Private work"), "{answer}");
    }
    // The printed URL was used by the browser: it works no more.
    let (status, _, _) = http(
        web.port,
        &format!("GET /?token={}", web.token),
        &[("Host", &host)],
        "",
    );
    assert_eq!(status, 401);
}

/// An answer in Markdown: what the model wrote as HTML (a script, an image
/// with a handler, a `javascript:` link) is shown as text and never runs.
const MARKDOWN_ANSWER: &str = "Here is **the plan** and `cargo test`.\n\n\
     1. read [the docs](https://example.com/docs)\n2. run it\n\n\
     ```rust\nfn main() { let x = 1; }\n```\n\n\
     <script>window.__pwned = true</script>\n\n\
     <img src=x onerror=\"window.__pwned = true\"> [click me](javascript:window.__pwned=true)\n";

#[test]
fn answers_are_markdown_rendered_and_nothing_the_model_wrote_runs() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::text(MARKDOWN_ANSWER));
    assert_code(&env.chat(&model, Vec::<&str>::new(), "plan it\n"), 0);
    assert_code(&env.run(["rename", "Plans"]), 0);
    model.push(Reply::text("A **live** answer"));
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "markdown",
        json!({"title": "Plans", "message": "again"}),
    );
    assert_eq!(got["strong"], json!(["the plan"]), "{got}");
    assert_eq!(got["code"], json!(["cargo test"]), "{got}");
    assert_eq!(got["keywords"], json!(["fn", "let"]), "highlighted: {got}");
    assert_eq!(got["items"], json!(["read the docs", "run it"]), "{got}");
    assert_eq!(
        got["links"],
        json!([{"href": "https://example.com/docs", "rel": "noopener noreferrer", "target": "_blank"}]),
        "{got}"
    );
    assert_eq!(got["inert"], json!(["click me"]), "{got}");
    let text = got["text"].as_str().unwrap();
    assert!(!text.contains("**"), "{text}");
    assert!(
        text.contains("<script>window.__pwned = true</script>"),
        "raw HTML shown as text: {text}"
    );
    assert_eq!(got["scripts"], 0, "{got}");
    assert_eq!(got["pwned"], false, "{got}");
    assert_eq!(got["live_strong"], json!(["live"]), "{got}");
    assert_eq!(got["live_text"], "A live answer", "{got}");
}

#[test]
fn a_compaction_shows_as_its_boundary_line_and_note() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, Vec::<&str>::new(), "first thing\nsecond thing\n"),
        0,
    );
    model.push(Reply::text("Earlier turns, summed up"));
    assert_code(&env.chat(&model, ["compact"], ""), 0);
    assert_code(&env.chat(&model, Vec::<&str>::new(), "after it\n"), 0);
    assert_code(&env.run(["rename", "Compacted"]), 0);
    let web = WebView::start(&env, &model, &[]);
    let got = flow(&python, &web, "compaction", json!({"title": "Compacted"}));
    let line = got["lines"][0].as_str().unwrap();
    assert!(
        line.starts_with("— compacted: ") && line.ends_with(" tokens —"),
        "{got}"
    );
    assert_eq!(
        got["notes"][0], "asked; summarised; the transcript keeps everything",
        "{got}"
    );
    assert_eq!(got["unknown"], 0, "no raw record: {got}");
    let messages = got["messages"].to_string();
    assert!(
        messages.contains("first thing") && messages.contains("after it"),
        "{messages}"
    );
}

#[test]
fn a_long_page_keeps_the_composer_in_reach_shows_times_and_one_pager() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    let lines: String = (1..=30).map(|i| format!("message number {i}\n")).collect();
    assert_code(&env.chat(&model, Vec::<&str>::new(), &lines), 0);
    assert_code(&env.run(["rename", "Long one"]), 0);
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "layout",
        json!({"title": "Long one", "message": "one more"}),
    );
    assert_eq!(got["taller_than_window"], true, "{got}");
    assert_eq!(got["composer_at_top"], true, "{got}");
    assert_eq!(got["composer_in_middle"], true, "{got}");
    assert_eq!(got["pagers_before"], 1, "{got}");
    assert_eq!(got["pagers_after"], 1, "{got}");
    assert_eq!(got["stray_null"], false, "{got}");
    // The focus went to the content the link led to.
    assert_eq!(got["focused"]["in_main"], true, "{got}");
    // Relative times, the absolute one on hover.
    let time = &got["times"][0];
    let iso = time["datetime"].as_str().unwrap();
    let year = &iso[..4];
    assert!(iso.ends_with('Z') && iso.len() >= 20, "{got}");
    assert!(time["title"].as_str().unwrap().contains(year), "{got}");
    assert_eq!(time["text"], "just now", "{got}");
    assert!(
        got["checkpoint_times"][0].as_str().unwrap().contains(year),
        "{got}"
    );
}

#[test]
fn the_page_starts_agentd_again_when_it_is_gone() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Still here", "true");
    let web = WebView::start(&env, &model, &[]);
    assert_code(&env.run(["daemon", "stop"]), 0);
    assert_eq!(env.daemon_pids(), Vec::<i32>::new(), "agentd is stopped");
    let got = flow(&python, &web, "titles", json!({}));
    assert_eq!(got["titles"], json!(["Still here"]), "{got}");
    assert_eq!(got["errors"], json!([]), "{got}");
    assert_eq!(env.daemon_pids().len(), 1, "agentd runs again");
}

#[test]
fn an_error_never_leaves_thinking_on_screen() {
    let Some(python) = browser_python() else {
        return;
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    conversation(&env, &model, "Too much", "true");
    let web = WebView::start(&env, &model, &[]);
    let got = flow(
        &python,
        &web,
        "failing_send",
        json!({"title": "Too much", "size": (1 << 20) + 1}),
    );
    assert_eq!(got["finished"], "error", "{got}");
    assert_eq!(got["state"], "failed", "{got}");
    assert!(
        got["errors"].to_string().contains("accepts at most"),
        "{got}"
    );
}
