//! MCP servers owned by agentd: a real server nobody here wrote
//! (`@modelcontextprotocol/server-everything`, installed by `.ci/run`) and a
//! misbehaving one of ours (tests/fixtures/mcp_misbehaving.py) called from
//! turns; one process shared by one-shots and chats, stopped when idle, and
//! never outliving agentd.

use std::path::PathBuf;
use std::time::Duration;

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code, json_out, skip, stderr, stdout, wait_pid_gone};
use serde_json::{Value, json};

/// The repository's root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// server-everything as `.ci/run` installs it, if it is there.
fn everything() -> Option<PathBuf> {
    let bin = repo().join(".mcp-servers/node_modules/.bin/mcp-server-everything");
    if bin.exists() {
        Some(bin)
    } else {
        skip(
            "server-everything is not installed (npm install --prefix .mcp-servers @modelcontextprotocol/server-everything)",
        );
        None
    }
}

/// A profile whose server `bad` is the misbehaving fixture, with `extra`
/// lines in its table; markers go to `<root>/markers`.
fn misbehaving(extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let markers = env.root().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let script = repo().join("tests/fixtures/mcp_misbehaving.py");
    env.write_config(&format!(
        "[mcp_servers.bad]\ncommand = \"python3\"\nargs = [{script:?}]\n\
         env = {{ MARKER_DIR = {markers:?} }}\n{extra}\n",
        script = script.display().to_string(),
        markers = markers.display().to_string(),
    ));
    env
}

/// The pids of the fixture's processes that ever started (by marker).
fn started(env: &TestEnv) -> Vec<i32> {
    marked(env, "started-")
}

fn marked(env: &TestEnv, prefix: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir(env.root().join("markers"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// Every live process whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// The output the model was sent for the first call answered in a request.
fn outputs(model: &FakeModel) -> Vec<String> {
    model
        .requests()
        .iter()
        .flat_map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Runs `exec --auto TOOL name args` to completion.
fn call(env: &TestEnv, model: &FakeModel, name: &str, args: Value) -> std::process::Output {
    env.chat(
        model,
        ["exec", "--auto", &format!("TOOL {name} {args}")],
        "",
    )
}

/// The pid a `pid` call answered.
fn pid_from(output: &str) -> i32 {
    output
        .split("pid ")
        .nth(1)
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {output:?}"))
}

#[test]
fn the_model_calls_server_everythings_echo_and_sees_its_answer() {
    let Some(bin) = everything() else { return };
    let env = TestEnv::new();
    env.write_config(&format!(
        "[mcp_servers.everything]\ncommand = {:?}\n",
        bin.display().to_string()
    ));
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "mcp__everything__echo",
        json!({"message": "hello from the model"}),
    ));
    let out = env.chat(&model, ["exec", "--auto", "echo something"], "");
    assert_code(&out, 0);
    let requests = model.requests();
    // The first request offers the tool with its schema.
    let tools = requests[0].body["tools"].as_array().unwrap().clone();
    let echo = tools
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .unwrap_or_else(|| panic!("no echo tool in {tools:#?}"));
    assert_eq!(
        echo["parameters"]["properties"]["message"]["type"],
        "string"
    );
    // The server's answer reaches the next request.
    let told = outputs(&model);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("hello from the model"), "{told:?}");
    model.assert_schema_clean();
    // The terminal shows the call and how it went.
    let err = stderr(&out);
    assert!(err.contains("mcp__everything__echo"), "{err}");
    assert!(err.contains("exit 0"), "{err}");

    let list = json_out(&env.run(["mcp", "list", "--json"]));
    assert_eq!(list[0]["name"], "everything");
    assert_eq!(list[0]["state"], "running", "{list}");
    assert!(list[0]["tools"].as_u64().unwrap() > 3, "{list}");
}

/// A profile whose server `everything` is server-everything over stdio.
fn with_everything(bin: &std::path::Path) -> TestEnv {
    let env = TestEnv::new();
    env.write_config(&format!(
        "[mcp_servers.everything]\ncommand = {:?}\n",
        bin.display().to_string()
    ));
    env
}

#[test]
fn an_image_a_tool_returns_reaches_the_model_as_an_image() {
    let Some(bin) = everything() else { return };
    let env = with_everything(&bin);
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "mcp__everything__get-tiny-image",
        json!({}),
    ));
    let out = env.chat(&model, ["--auto"], "show me the logo\n");
    assert_code(&out, 0);
    model.assert_schema_clean();
    let requests = model.requests();
    let output = requests
        .iter()
        .flat_map(|r| r.body["input"].as_array().cloned().unwrap_or_default())
        .find(|i| i["type"] == "function_call_output")
        .expect("the call's output was sent");
    // Responses: the output is a list of its text and the image.
    let parts = output["output"]
        .as_array()
        .unwrap_or_else(|| panic!("{output}"));
    assert_eq!(parts[0]["type"], "input_text", "{output}");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(text.contains("Here's the image you requested"), "{text}");
    assert!(text.contains("passed on to the model"), "{text}");
    assert_eq!(parts[1]["type"], "input_image", "{output}");
    assert!(
        parts[1]["image_url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{output}"
    );
    // The image is kept with the conversation: when the server forgot it,
    // the whole transcript is sent again, image included.
    model.forget_response_ids();
    model.push(Reply::text("it is round"));
    assert_code(&env.chat(&model, [] as [&str; 0], "and its shape?\n"), 0);
    model.assert_schema_clean();
    let resent = model.requests().pop().unwrap().body["input"].to_string();
    assert!(resent.contains("and its shape?"), "{resent}");
    assert!(
        resent.contains("\"input_image\"") && resent.contains("data:image/png;base64,iVBOR"),
        "{resent}"
    );
}

#[test]
fn an_image_reaches_a_chat_completions_server_after_the_tool_message() {
    let Some(bin) = everything() else { return };
    let mut env = with_everything(&bin);
    env.extra_env
        .push(("AGENTX_PROVIDER".into(), "chat".into()));
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "mcp__everything__get-tiny-image",
        json!({}),
    ));
    let out = env.chat(&model, ["exec", "--auto", "show me the logo"], "");
    assert_code(&out, 0);
    let requests = model.requests();
    let last = requests.last().unwrap();
    assert!(last.schema_errors.is_empty(), "{:?}", last.schema_errors);
    let messages = last.body["messages"].as_array().unwrap();
    let tool = messages
        .iter()
        .position(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("{messages:#?}"));
    // A tool message takes text; the image follows as the user's.
    assert!(
        messages[tool]["content"].is_string(),
        "{:?}",
        messages[tool]
    );
    let image = &messages[tool + 1];
    assert_eq!(image["role"], "user", "{messages:#?}");
    assert_eq!(image["content"][1]["type"], "image_url", "{image}");
    assert!(
        image["content"][1]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{image}"
    );
}

#[test]
fn the_model_calls_echo_of_server_everything_over_streamable_http() {
    let Some(bin) = everything() else { return };
    // server-everything's own HTTP mode, on a free port of 127.0.0.1.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP server never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let env = TestEnv::new();
    env.write_config(&format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    ));
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "mcp__web__echo",
        json!({"message": "over http"}),
    ));
    let out = env.chat(&model, ["exec", "--auto", "echo it"], "");
    let _ = server.kill();
    let _ = server.wait();
    assert_code(&out, 0);
    let told = outputs(&model);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("over http"), "{told:?}");
}

#[test]
fn one_shots_and_a_chat_share_one_server_process() {
    let env = misbehaving("");
    let model = FakeModel::start();
    // Two one-shots at once, then a chat, each calling the server.
    let a = env.chat_command(&model, ["exec", "--auto", "TOOL mcp__bad__pid {}"], "");
    let b = env.chat_command(&model, ["exec", "--auto", "TOOL mcp__bad__pid {}"], "");
    assert_code(&a.wait_with_output().unwrap(), 0);
    assert_code(&b.wait_with_output().unwrap(), 0);
    let out = env.chat(&model, ["--approval", "auto"], "TOOL mcp__bad__pid {}\n");
    assert_code(&out, 0);
    let told = outputs(&model);
    assert_eq!(told.len(), 3, "{told:?}");
    let pids: Vec<i32> = told.iter().map(|o| pid_from(o)).collect();
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
    assert_eq!(started(&env), vec![pids[0]], "more than one server started");
    let script = "mcp_misbehaving.py";
    let live: Vec<i32> = processes_with(script)
        .into_iter()
        .filter(|p| *p == pids[0])
        .collect();
    assert_eq!(live, vec![pids[0]]);
    // Status shows it running with its pid.
    let status = json_out(&env.run(["daemon", "status", "--json"]));
    assert_eq!(status["mcp_servers"][0]["state"], "running", "{status}");
    assert_eq!(status["mcp_servers"][0]["pid"], pids[0]);
}

#[test]
fn a_hung_call_is_bounded_by_tool_timeout_and_the_turn_goes_on() {
    let env = misbehaving("tool_timeout_sec = 1");
    let model = FakeModel::start();
    model.push(Reply::tool_call("mcp__bad__hang", json!({})));
    model.push(Reply::tool_call("mcp__bad__pid", json!({})));
    let out = env.chat(&model, ["exec", "--auto", "go"], "");
    assert_code(&out, 0);
    let told = outputs(&model);
    assert!(told[0].contains("timed out after 1 s"), "{told:?}");
    // The same server answers the next call, and was told to cancel the hung one.
    let pid = started(&env)[0];
    assert_eq!(pid_from(&told[1]), pid, "{told:?}");
    assert_eq!(marked(&env, "cancelled-"), vec![pid]);
}

#[test]
fn a_crash_mid_call_is_an_error_and_the_next_call_starts_it_again() {
    let env = misbehaving("");
    let model = FakeModel::start();
    let out = call(&env, &model, "mcp__bad__pid", json!({}));
    assert_code(&out, 0);
    let first = pid_from(&outputs(&model)[0]);
    let out = call(&env, &model, "mcp__bad__crash", json!({}));
    assert_code(&out, 0);
    let told = outputs(&model);
    assert!(told[1].contains("the call failed"), "{told:?}");
    let out = call(&env, &model, "mcp__bad__pid", json!({}));
    assert_code(&out, 0);
    let second = pid_from(&outputs(&model)[2]);
    assert_ne!(first, second, "the crashed server was not started again");
    assert_eq!(started(&env), {
        let mut v = vec![first, second];
        v.sort_unstable();
        v
    });
}

#[test]
fn a_server_that_never_starts_ends_failed_not_in_a_loop() {
    let env = TestEnv::new();
    env.write_config(
        "[mcp_servers.dead]\ncommand = \"python3\"\nargs = [\"-c\", \"import sys; sys.exit(3)\"]\n",
    );
    // Its tools were never listed: the turn goes on without them.
    let model = FakeModel::start();
    let out = env.chat(&model, ["exec", "--auto", "hello"], "");
    assert_code(&out, 0);
    assert!(stderr(&out).contains("MCP server dead"), "{}", stderr(&out));
    for _ in 0..6 {
        let _ = env.chat(&model, ["exec", "--auto", "hello"], "");
    }
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    assert_eq!(list[0]["state"], "failed", "{list}");
    assert!(
        list[0]["error"]
            .as_str()
            .unwrap()
            .contains("crashes in a row"),
        "{list}"
    );
}

#[test]
fn a_failed_server_is_tried_again_once_its_failure_is_old() {
    let env = misbehaving("");
    let fixed = env.root().join("fixed");
    // `bad` exits at once until the file `fixed` exists, as a server
    // missing a package does until it is installed.
    let script = repo().join("tests/fixtures/mcp_misbehaving.py");
    let markers = env.root().join("markers");
    env.write_config(&format!(
        "[mcp_servers.bad]\ncommand = \"sh\"\nargs = [\"-c\", {line:?}]\n\
         env = {{ MARKER_DIR = {markers:?} }}\n",
        line = format!(
            "test -e '{}' || exit 3; exec python3 '{}'",
            fixed.display(),
            script.display()
        ),
        markers = markers.display().to_string(),
    ));
    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_MCP_RETRY_FAILED_SEC", "6")
        .output()
        .unwrap();
    assert_code(&out, 0);
    let model = FakeModel::start();
    let failed = |env: &TestEnv| {
        let list = json_out(&env.run(["mcp", "list", "--json"]));
        list[0]["state"] == "failed"
    };
    for _ in 0..8 {
        if failed(&env) {
            break;
        }
        let _ = call(&env, &model, "mcp__bad__pid", json!({}));
    }
    assert!(failed(&env), "never failed");
    // Fixed, but failed moments ago: still refused, with when it is tried.
    std::fs::write(&fixed, "").unwrap();
    let out = call(&env, &model, "mcp__bad__pid", json!({}));
    let err = stderr(&out);
    assert!(
        err.contains("tried again 6 s after its last failure"),
        "{err}"
    );
    assert!(started(&env).is_empty());
    // Once the failure is old, the next call starts it and is answered.
    std::thread::sleep(Duration::from_millis(6200));
    call(&env, &model, "mcp__bad__pid", json!({}));
    let told = outputs(&model).pop().unwrap_or_default();
    assert_eq!(pid_from(&told), started(&env)[0], "{told}");
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    assert_eq!(list[0]["state"], "running", "{list}");
}

#[test]
fn ctrl_c_on_a_running_mcp_call_ends_the_turn_and_tells_the_server() {
    let env = misbehaving("tool_timeout_sec = 600");
    let model = FakeModel::start();
    let mut child = env.chat_command(&model, ["--auto"], "TOOL mcp__bad__hang {}\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while marked(&env, "call-hang-").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never reached the server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // Bounded: a Ctrl-C that is not seen would leave the call hanging for
    // its 600 s timeout.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("Ctrl-C did not end the turn within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    // The server was told, and lives on for the next call.
    let pid = started(&env)[0];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while marked(&env, "cancelled-").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server was never told to cancel"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(marked(&env, "cancelled-"), vec![pid]);
    // The call is recorded as cancelled by the user, not left running:
    // continuing the turn tells the model so.
    let out = env.chat(&model, ["--on-pending", "continue", "--auto"], "");
    assert_code(&out, 0);
    let told = outputs(&model);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("cancelled by the user"), "{told:?}");
    // The same process answers the next call.
    call(&env, &model, "mcp__bad__pid", json!({}));
    assert_eq!(pid_from(outputs(&model).last().unwrap()), pid);
}

#[test]
fn garbage_on_stdout_is_skipped_and_huge_output_is_cut() {
    let env = misbehaving("");
    let model = FakeModel::start();
    model.push(Reply::tool_call("mcp__bad__garbage", json!({})));
    model.push(Reply::tool_call("mcp__bad__huge", json!({})));
    let out = env.chat(&model, ["exec", "--auto", "go"], "");
    assert_code(&out, 0);
    let told = outputs(&model);
    assert!(told[0].ends_with("\nafter the garbage"), "{told:?}");
    assert!(told[1].len() < 40_000, "{}", told[1].len());
    assert!(told[1].contains("bytes left out"), "{}", &told[1][..100]);
    // What the tool printed reaches the terminal without its escapes.
    assert!(!stdout(&out).contains('\x1b'));
}

/// The server adds a tool and says so; the model calls it at once. The
/// notification's own refresh is held up (the server lists slowly) so it
/// loses the race to the model's answer: the call still reaches the tool,
/// because a name no cached list has makes agentd ask the running servers
/// again before calling it unknown.
#[test]
fn a_changed_tool_list_reaches_the_next_request() {
    let env = misbehaving("");
    std::fs::write(env.root().join("markers/slow-relist"), "").unwrap();
    let model = FakeModel::start();
    model.push(Reply::tool_call("mcp__bad__grow", json!({})));
    model.push(Reply::tool_call("mcp__bad__extra", json!({})));
    let out = env.chat(&model, ["exec", "--auto", "go"], "");
    assert_code(&out, 0);
    let requests = model.requests();
    let names = |i: usize| -> Vec<String> {
        requests[i].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(!names(0).contains(&"mcp__bad__extra".to_owned()));
    let told = outputs(&model);
    assert!(told[1].contains("\npid "), "{told:?}");
    assert!(
        names(2).contains(&"mcp__bad__extra".to_owned()),
        "{:?}",
        names(2)
    );
}

/// `exec --auto TOOL name {}` run in `folder`; the output the model was sent.
fn call_in(env: &TestEnv, model: &FakeModel, folder: &std::path::Path, name: &str) -> String {
    let out = env
        .agentx(["exec", "--auto", &format!("TOOL {name} {{}}")])
        .current_dir(folder)
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .output()
        .unwrap();
    assert_code(&out, 0);
    outputs(model).pop().unwrap_or_default()
}

#[test]
fn a_folder_scoped_server_runs_once_per_folder_in_that_folder() {
    let env = misbehaving("scope = \"folder\"");
    let other = env.root().join("other project");
    std::fs::create_dir_all(&other).unwrap();
    let model = FakeModel::start();
    let work = env.work.canonicalize().unwrap();
    let other = other.canonicalize().unwrap();
    // Each folder's calls reach a process of its own, running in it.
    let here = call_in(&env, &model, &work, "mcp__bad__cwd");
    assert!(here.ends_with(&format!("cwd {}", work.display())), "{here}");
    let there = call_in(&env, &model, &other, "mcp__bad__cwd");
    assert!(
        there.ends_with(&format!("cwd {}", other.display())),
        "{there}"
    );
    let first = pid_from(&call_in(&env, &model, &work, "mcp__bad__pid"));
    let second = pid_from(&call_in(&env, &model, &other, "mcp__bad__pid"));
    assert_ne!(first, second, "one process served both folders");
    // The same folder again: the same process.
    assert_eq!(
        pid_from(&call_in(&env, &model, &work, "mcp__bad__pid")),
        first
    );
    assert_eq!(started(&env).len(), 2, "{:?}", started(&env));
    // The listing names each folder's process.
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    let text = list.to_string();
    assert!(text.contains(&other.display().to_string()), "{list}");
    assert!(text.contains(&work.display().to_string()), "{list}");
}

#[test]
fn an_idle_server_is_stopped_and_started_again_on_the_next_call() {
    let env = misbehaving("idle_timeout_sec = 1");
    let model = FakeModel::start();
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let first = started(&env)[0];
    assert!(
        wait_pid_gone(first, Duration::from_secs(20)),
        "never stopped"
    );
    // Stopped gracefully: its stdin was closed.
    assert_eq!(marked(&env, "stdin-closed-"), vec![first]);
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    assert_eq!(list[0]["state"], "idle", "{list}");
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    assert_eq!(started(&env).len(), 2);
}

#[test]
fn killing_agentd_leaves_no_server_behind() {
    // A server that would outlive the end of its stdin: only the death
    // signal agentd's spawner thread gave it ends it.
    let env = misbehaving("");
    let config = std::fs::read_to_string(env.root().join("profile/config.toml")).unwrap();
    env.write_config(&config.replace("env = { ", "env = { STUBBORN = \"1\", "));
    let model = FakeModel::start();
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let pid = started(&env)[0];
    env.kill_daemons();
    assert!(
        wait_pid_gone(pid, Duration::from_secs(10)),
        "the server outlived a killed agentd"
    );
}

#[test]
fn killing_agentd_leaves_no_process_a_server_started_behind() {
    // As `npx pkg` runs node: the server proper is a grandchild of agentd
    // (here `sh` forks python and waits), and outlives the end of its stdin.
    let env = TestEnv::new();
    let markers = env.root().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let script = repo().join("tests/fixtures/mcp_misbehaving.py");
    env.write_config(&format!(
        "[mcp_servers.bad]\ncommand = \"sh\"\nargs = [\"-c\", {line:?}]\n\
         env = {{ MARKER_DIR = {markers:?}, STUBBORN = \"1\" }}\n",
        line = format!("python3 '{}'; exit 0", script.display()),
        markers = markers.display().to_string(),
    ));
    let model = FakeModel::start();
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let pid = started(&env)[0];
    // `mcp list` names the process agentd started (here `sh`), not a
    // supervisor of agentd's.
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    let shown = list[0]["pid"].as_i64().unwrap_or_default();
    let parent = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ppid: i64 = parent
        .rsplit(") ")
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(shown, ppid, "{list}");
    env.kill_daemons();
    assert!(
        wait_pid_gone(pid, Duration::from_secs(10)),
        "the server's own child outlived a killed agentd"
    );
}

#[test]
fn daemon_stop_ends_each_server() {
    let env = misbehaving("");
    let model = FakeModel::start();
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let pid = started(&env)[0];
    assert_code(&env.run(["daemon", "stop"]), 0);
    assert!(wait_pid_gone(pid, Duration::from_secs(10)));
    assert_eq!(marked(&env, "stdin-closed-"), vec![pid]);
}

#[test]
fn a_server_ignoring_stdin_close_and_sigterm_is_killed_on_stop() {
    let env = TestEnv::new();
    let markers = env.root().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let script = repo().join("tests/fixtures/mcp_misbehaving.py");
    env.write_config(&format!(
        "[mcp_servers.bad]\ncommand = \"python3\"\nargs = [{:?}]\n\
         env = {{ MARKER_DIR = {:?}, STUBBORN = \"1\" }}\n",
        script.display().to_string(),
        markers.display().to_string(),
    ));
    let model = FakeModel::start();
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let pid = started(&env)[0];
    assert_code(&env.run(["daemon", "stop"]), 0);
    assert!(wait_pid_gone(pid, Duration::from_secs(10)), "still running");
    // It was asked first (its stdin closed), then sent SIGTERM, then killed:
    // agentd's stop did it, not the death signal of agentd's exit.
    assert_eq!(marked(&env, "stdin-closed-"), vec![pid]);
    assert_eq!(marked(&env, "sigterm-"), vec![pid]);
}

#[test]
fn an_mcp_call_running_when_agentd_dies_is_a_pending_call() {
    let env = misbehaving("");
    let model = FakeModel::start();
    let client = env.chat_command(&model, ["--approval", "auto"], "TOOL mcp__bad__hang {}\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while marked(&env, "call-hang-").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    env.kill_daemons();
    let _ = client.wait_with_output();
    let status = json_out(&env.run(["status", "--json"]));
    let pending = &status["pending_tool_calls"];
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(pending[0]["name"], "mcp__bad__hang");
    assert_eq!(pending[0]["state"], "running", "{status}");
}

#[test]
fn at_the_process_bound_the_least_recently_used_idle_server_makes_room() {
    let env = misbehaving("");
    let config = std::fs::read_to_string(env.root().join("profile/config.toml")).unwrap();
    env.write_config(&format!(
        "{config}\n{}",
        config.replace("[mcp_servers.bad]", "[mcp_servers.other]")
    ));
    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_MCP_MAX_PROCESSES", "1")
        .output()
        .unwrap();
    assert_code(&out, 0);
    let model = FakeModel::start();
    // The first turn lists both servers' tools (one process at a time).
    assert_code(&env.chat(&model, ["exec", "hi"], ""), 0);
    assert_code(&call(&env, &model, "mcp__bad__pid", json!({})), 0);
    let bad = pid_from(&outputs(&model)[0]);
    assert_code(&call(&env, &model, "mcp__other__pid", json!({})), 0);
    assert!(
        wait_pid_gone(bad, Duration::from_secs(10)),
        "no room was made"
    );
    let live = processes_with("mcp_misbehaving.py");
    assert_eq!(
        started(&env).iter().filter(|p| live.contains(p)).count(),
        1,
        "more than one server process at the bound of 1"
    );
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    let state = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["state"].clone())
    };
    assert_eq!(state("bad"), Some(json!("idle")), "{list}");
    assert_eq!(state("other"), Some(json!("running")), "{list}");
}

#[test]
fn per_server_and_per_tool_approval_settings_override_the_turns_policy() {
    let env = misbehaving("approval = \"never\"\ntool_approval = { pid = \"auto\" }");
    let model = FakeModel::start();
    // A one-shot without --auto: `pid` runs (its own setting), `garbage`
    // does not even with --auto (the server's).
    let out = env.chat(&model, ["exec", "TOOL mcp__bad__pid {}"], "");
    assert_code(&out, 0);
    let out = call(&env, &model, "mcp__bad__garbage", json!({}));
    assert_code(&out, 1);
    let told = outputs(&model);
    assert!(told[0].contains("\npid "), "{told:?}");
    assert!(told[1].contains("approval policy is never"), "{told:?}");
    assert!(marked(&env, "call-garbage-").is_empty());
}

#[test]
fn mcp_add_get_and_remove_edit_config_toml_and_keep_the_rest() {
    let env = TestEnv::new();
    env.write_config("# my settings\nmodel = \"m\"  # keep me\n");
    let out = env.run([
        "mcp", "add", "docs", "--env", "A=1", "--", "npx", "-y", "pkg",
    ]);
    assert_code(&out, 0);
    let text = std::fs::read_to_string(env.root().join("profile/config.toml")).unwrap();
    assert!(
        text.starts_with("# my settings\nmodel = \"m\"  # keep me\n"),
        "{text}"
    );
    let got = json_out(&env.run(["mcp", "get", "docs", "--json"]));
    assert_eq!(got["command"], "npx");
    assert_eq!(got["args"], json!(["-y", "pkg"]));
    assert_eq!(got["env"], json!(["A"]));
    assert_eq!(got["processes"][0]["state"], "configured");
    // A name taken, a bad name, no command: refused with a usage error.
    assert_code(&env.run(["mcp", "add", "docs", "--", "x"]), 2);
    assert_code(&env.run(["mcp", "add", "a b", "--", "x"]), 2);
    let out = env.run(["mcp", "remove", "docs", "--json"]);
    assert_eq!(json_out(&out)["removed"], "docs");
    let text = std::fs::read_to_string(env.root().join("profile/config.toml")).unwrap();
    assert!(!text.contains("docs"), "{text}");
    assert!(text.contains("# keep me"), "{text}");
    assert_code(&env.run(["mcp", "remove", "docs"]), 2);
    let list = json_out(&env.run(["mcp", "list", "--json"]));
    assert_eq!(list, json!([]));
}

#[test]
fn slash_status_in_the_repl_shows_each_server_and_its_state() {
    let env = misbehaving("");
    let model = FakeModel::start();
    let Some(pane) = agentx_tests::tmux::Pane::start(&env, &model, &["--auto"]) else {
        return;
    };
    pane.wait_for("›");
    // Configured, never started: no process yet.
    pane.line("/status");
    pane.wait_for("mcp:      bad  configured");
    pane.line("TOOL mcp__bad__pid {}");
    // Folded as the server's tool, not as a shell command.
    let screen = pane.wait_for("⚙ bad pid {}  ✓ exit 0");
    let pid = started(&env);
    assert_eq!(pid.len(), 1, "{screen}");
    pane.wait_for_n("›", 3);
    pane.line("/status");
    let screen = pane.wait_for(&format!("bad  running (pid {}, up ", pid[0]));
    assert!(screen.contains("0 calls in flight"), "{screen}");
}
