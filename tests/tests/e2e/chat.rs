//! Chat end to end: the real agentx and agentd against the fake Responses
//! server — resumed conversations, tools, /new and /resume, JSON listings,
//! quarantine, concurrency, folder-key collisions and secrecy.

use std::time::Duration;

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::json_out;
use agentx_tests::{TEST_KEY, TestEnv, assert_code, stderr, stdout};

/// Bodies the fake received, in order.
fn bodies(model: &FakeModel) -> Vec<Value> {
    model.requests().into_iter().map(|r| r.body).collect()
}

#[test]
fn a_conversation_resumes_in_a_new_process_and_chains_response_ids() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["--approval", "never"], "hello there\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: hello there [turns seen: 1]");

    let out = env.chat(&model, Vec::<&str>::new(), "and again\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: and again [turns seen: 2]");
    // Resuming shows the earlier exchange (on stderr when scripted).
    assert!(stderr(&out).contains("hello there"), "{}", stderr(&out));

    let bodies = bodies(&model);
    assert_eq!(bodies.len(), 2);
    assert!(bodies[0].get("previous_response_id").is_none());
    let first_id = model.stored_response_ids()[0].clone();
    assert_eq!(bodies[1]["previous_response_id"], json!(first_id));
    for body in &bodies {
        assert_eq!(body["stream"], true);
        assert_eq!(body["store"], true);
        assert!(body["instructions"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(body["tools"][0]["name"], "shell");
        assert_eq!(body["model"], "fake-model");
    }
    // The chained request sends only the new message.
    assert_eq!(
        bodies[1]["input"],
        json!([{"role": "user", "content": "and again"}])
    );
    let auth = model.requests()[0]
        .header("authorization")
        .map(str::to_owned);
    assert_eq!(auth.as_deref(), Some(format!("Bearer {TEST_KEY}").as_str()));
    model.assert_schema_clean();
}

#[test]
fn the_api_key_is_never_written_and_nothing_lands_in_the_chat_folder() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    std::fs::write(env.work.join("mine.txt"), "user file").unwrap();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "cat mine.txt"}),
    });
    let out = env.chat(
        &model,
        ["--approval", "auto"],
        "read my file\n!echo local\nthanks\n",
    );
    assert_code(&out, 0);
    // agentd writes in the background (search indexing) after a turn: stop
    // it, so the files listed are the files read.
    assert_code(&env.run(["daemon", "stop"]), 0);
    for file in env.profile_files() {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(TEST_KEY),
            "API key written to {}",
            file.display()
        );
    }
    let names: Vec<String> = std::fs::read_dir(&env.work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["mine.txt".to_owned()],
        "agentx wrote into the chat folder"
    );
    // Conversations live under the profile, private.
    let docs: Vec<_> = env
        .profile_files()
        .into_iter()
        .filter(|p| p.starts_with(env.home.join("sessions")))
        .collect();
    assert!(!docs.is_empty());
    for doc in docs {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&doc).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", doc.display());
    }
}

#[test]
fn an_approved_tool_call_runs_and_its_output_goes_back_to_the_model() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo made > made.txt; echo done; exit 4"}),
    });
    let out = env.chat(&model, Vec::<&str>::new(), "make a file\ny\n");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("echo made > made.txt"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(env.work.join("made.txt")).unwrap(),
        "made\n"
    );

    let bodies = bodies(&model);
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    let output = &bodies[1]["input"][0];
    assert_eq!(output["type"], "function_call_output");
    let out_text = output["output"].as_str().unwrap();
    assert!(
        out_text.contains("exit code 4") && out_text.contains("done"),
        "{out_text}"
    );
    assert_eq!(
        bodies[1]["previous_response_id"],
        json!(model.stored_response_ids()[0])
    );
    model.assert_schema_clean();
}

#[test]
fn a_declined_tool_call_does_not_run_but_is_still_answered() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch never.txt"}),
    });
    let out = env.chat(&model, Vec::<&str>::new(), "try it\nn\n");
    assert_code(&out, 0);
    assert!(!env.work.join("never.txt").exists());
    let bodies = bodies(&model);
    assert_eq!(bodies[1]["input"][0]["type"], "function_call_output");
    assert!(
        bodies[1]["input"][0]["output"]
            .as_str()
            .unwrap()
            .contains("declined")
    );

    // --approval never declines without asking.
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch never.txt"}),
    });
    let out = env.chat(&model, ["--approval", "never"], "again\n");
    assert_code(&out, 0);
    assert!(!env.work.join("never.txt").exists());
    model.assert_schema_clean();
}

#[test]
fn always_approves_the_rest_of_the_conversation() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch one"}),
    });
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch two"}),
    });
    let out = env.chat(&model, Vec::<&str>::new(), "go\na\n");
    assert_code(&out, 0);
    assert!(env.work.join("one").exists() && env.work.join("two").exists());
}

#[test]
fn new_and_resume_switch_conversations() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(
        &model,
        Vec::<&str>::new(),
        "first\n/new\nsecond\n/resume 2\nthird\n",
    );
    assert_code(&out, 0);
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        vec![
            "echo: first [turns seen: 1]",
            "echo: second [turns seen: 1]",
            "echo: third [turns seen: 2]",
        ]
    );
    let sessions = json_out(&env.run(["sessions", "--json"]));
    let sessions = sessions.as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    // Newest first: the first conversation was updated last.
    assert_eq!(sessions[0]["title"], "first");
    assert_eq!(sessions[0]["turns"], 2);
    assert_eq!(sessions[1]["title"], "second");
    for s in sessions {
        for field in [
            "id",
            "title",
            "folder",
            "agent",
            "created_at",
            "updated_at",
            "turns",
        ] {
            assert!(s.get(field).is_some(), "{field} missing in {s}");
        }
        assert_eq!(s["agent"], "default");
        assert_eq!(
            s["folder"],
            std::fs::canonicalize(&env.work)
                .unwrap()
                .display()
                .to_string()
        );
    }
    // `agentx resume 2` opens the older one again.
    let out = env.chat(&model, ["resume", "2"], "fourth\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: fourth [turns seen: 2]");
}

#[test]
fn status_json_reports_usage_totals_and_the_contract_fields() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "true"}),
    });
    let out = env.chat(&model, ["--auto"], "one\ntwo\n");
    assert_code(&out, 0);
    let status = json_out(&env.run(["status", "--json"]));
    // Three responses: the tool call, its follow-up, and the second message.
    assert_eq!(status["usage"]["input_tokens"], 30);
    assert_eq!(status["usage"]["cached_tokens"], 6);
    assert_eq!(status["usage"]["output_tokens"], 15);
    assert_eq!(status["usage"]["reasoning_tokens"], 3);
    assert_eq!(status["usage"]["total_tokens"], 45);
    assert_eq!(
        status["response_id"],
        json!(model.stored_response_ids().last().unwrap())
    );
    assert_eq!(status["pending_tool_calls"], json!([]));
    assert_eq!(status["failed"], Value::Null);
    assert!(status["checkpoints"].is_u64());
    assert!(status["snapshots"].is_u64());
    assert!(status["daemon"]["pid"].is_u64());
    assert_eq!(status["daemon"]["version"], env!("CARGO_PKG_VERSION"));
    let sessions = json_out(&env.run(["sessions", "--json"]));
    assert_eq!(status["session_id"], sessions[0]["id"]);
}

#[test]
fn clear_deletes_the_conversation_and_starts_fresh() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "remember this\n"), 0);
    let before = json_out(&env.run(["status", "--json"]));
    let out = env.run(["clear"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--yes"));
    assert_code(&env.run(["clear", "--yes"]), 0);
    let after = json_out(&env.run(["status", "--json"]));
    assert_ne!(after["session_id"], before["session_id"]);
    assert_eq!(after["usage"]["total_tokens"], 0);
    let out = env.chat(&model, Vec::<&str>::new(), "fresh\n");
    assert_eq!(stdout(&out).trim(), "echo: fresh [turns seen: 1]");
}

#[test]
fn a_corrupt_conversation_is_quarantined_and_a_fresh_one_continues() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "before\n"), 0);
    assert_code(&env.run(["daemon", "stop"]), 0);
    let doc = env
        .profile_files()
        .into_iter()
        .find(|p| {
            p.starts_with(env.home.join("sessions"))
                && p.extension().is_some_and(|e| e == "json")
                && !p.ends_with("current.json")
                && !p.ends_with("shared.json")
        })
        .unwrap();
    std::fs::write(&doc, b"{\"format\": 1, \"id\": \"trunc").unwrap();
    // The transcript is unreadable too (a readable one would rebuild the
    // conversation: see tests/tests/e2e/recovery.rs).
    std::fs::write(doc.with_extension("jsonl"), b"not a record\n").unwrap();

    let out = env.chat(&model, Vec::<&str>::new(), "after\n");
    assert_code(&out, 0);
    assert!(stderr(&out).contains("moved aside"), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "echo: after [turns seen: 1]");
    // Nothing deleted: the bad bytes are kept beside it.
    let kept: Vec<_> = env
        .profile_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}"); // the document and its transcript
    assert!(
        kept.iter()
            .any(|p| std::fs::read(p).unwrap() == b"{\"format\": 1, \"id\": \"trunc")
    );
}

#[test]
fn folders_whose_keys_collide_never_share_conversations() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let a = env.work.join("a");
    std::fs::create_dir_all(a.join("b-c")).unwrap();
    std::fs::create_dir_all(a.join("b").join("c")).unwrap();
    let one = a.join("b-c");
    let two = a.join("b").join("c");
    assert_code(
        &env.chat(&model, ["-C", one.to_str().unwrap()], "in b-c\n"),
        0,
    );
    let out = env.chat(&model, ["-C", two.to_str().unwrap()], "in b/c\n");
    assert_eq!(stdout(&out).trim(), "echo: in b/c [turns seen: 1]");
    let s1 = json_out(&env.run(["-C", one.to_str().unwrap(), "sessions", "--json"]));
    let s2 = json_out(&env.run(["-C", two.to_str().unwrap(), "sessions", "--json"]));
    assert_eq!(s1.as_array().unwrap().len(), 1);
    assert_eq!(s2.as_array().unwrap().len(), 1);
    assert_eq!(s1[0]["title"], "in b-c");
    assert_eq!(s2[0]["title"], "in b/c");
    let out = env.chat(&model, ["-C", one.to_str().unwrap()], "again\n");
    assert_eq!(stdout(&out).trim(), "echo: again [turns seen: 2]");
}

#[test]
fn two_clients_on_one_conversation_are_serialized() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "setup\n"), 0);
    model.set_event_delay(Duration::from_millis(15));
    let a_input: String = (0..5).map(|i| format!("from a {i}\n")).collect();
    let b_input: String = (0..5).map(|i| format!("from b {i}\n")).collect();
    let a = env.chat_command(&model, Vec::<&str>::new(), &a_input);
    let b = env.chat_command(&model, Vec::<&str>::new(), &b_input);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_code(&a, 0);
    assert_code(&b, 0);
    assert_eq!(stdout(&a).lines().count(), 5);
    assert_eq!(stdout(&b).lines().count(), 5);

    // One linear chain: each request continues the response before it.
    let ids = model.stored_response_ids();
    assert_eq!(ids.len(), 11);
    let bodies = bodies(&model);
    for (i, body) in bodies.iter().enumerate().skip(1) {
        assert_eq!(
            body["previous_response_id"],
            json!(ids[i - 1]),
            "request {i} forked the chain"
        );
    }
    // The model saw every turn: the last answer counts all 11 messages.
    let all = format!("{}{}", stdout(&a), stdout(&b));
    assert!(all.contains("[turns seen: 11]"), "{all}");
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 11);
    assert_eq!(status["transcript_items"], 22);
}

#[test]
fn missing_key_and_unreachable_server_are_one_clear_line() {
    let env = TestEnv::new();
    let out = env.agentx(Vec::<&str>::new()).output().unwrap();
    assert_code(&out, 1);
    assert!(stderr(&out).contains("OPENAI_API_KEY"), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1);

    let out = env
        .agentx(Vec::<&str>::new())
        .env("AGENTX_BASE_URL", "http://127.0.0.1:9/v1")
        .env("OPENAI_API_KEY", TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"hi\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("http://127.0.0.1:9/v1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sigint_cancels_the_turn_not_the_repl() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::Stall(Duration::from_secs(5)));
    let child = env.chat_command(&model, Vec::<&str>::new(), "slow one\n");
    assert!(model.wait_for_requests(1, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    // Interrupted, reported, and the REPL went on to the end of its input.
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(1));
    // The next start must settle the interrupted turn first.
    let out = env.chat(&model, Vec::<&str>::new(), "next\n");
    assert_code(&out, 1);
    assert!(stderr(&out).contains("--on-pending"), "{}", stderr(&out));
    let out = env.chat(&model, ["--on-pending", "retry"], "next\n");
    assert_code(&out, 0);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        vec![
            "echo: slow one [turns seen: 1]",
            "echo: next [turns seen: 2]"
        ]
    );
}

/// A folder whose path is not UTF-8 gets the real reason, not "does not exist".
#[test]
fn a_folder_whose_path_is_not_utf8_is_refused_with_the_reason() {
    use std::os::unix::ffi::OsStrExt as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    let weird = env
        .root()
        .join(std::ffi::OsStr::from_bytes(b"weird\xff dir"));
    std::fs::create_dir(&weird).unwrap();
    let out = env.chat(
        &model,
        [std::ffi::OsStr::new("-C"), weird.as_os_str()],
        "hi\n",
    );
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("valid UTF-8"), "{err}");
    // One sentence, said once: no "agentx: agentx", no run of spaces.
    assert!(
        !err.contains("agentx: agentx") && !err.contains("  "),
        "{err}"
    );
    assert!(!err.contains("does not exist"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(model.requests().is_empty());
}
