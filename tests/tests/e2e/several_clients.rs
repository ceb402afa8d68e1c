//! Several clients in one folder: rollbacks that race,
//! `clear` under one-shots and other REPLs, and what each client is told.

use serde_json::Value;

use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::{ListCheckpointsRequest, RollbackRequest, Scope, rollback_request};
use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, channel, json_out, stderr};

/// Five `agentx rollback 2` at once: each one that goes through rolls back
/// one turn from what it listed, the others are refused because the
/// conversation moved since, and every one that went through can be undone.
/// (They once stacked: 6 turns became 1, and only one could be undone.)
#[test]
fn rollbacks_at_once_never_stack_and_each_can_be_undone() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "t1\nt2\nt3\nt4\nt5\nt6\n"), 0);
    let before = env.status();
    assert_eq!(before["turns"], 6);
    let children: Vec<_> = (0..5)
        .map(|_| {
            env.agentx(["rollback", "2"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut done = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => done += 1,
            _ => {
                assert_code(&out, 1);
                assert!(
                    stderr(&out).contains("moved since") && stderr(&out).contains("checkpoints"),
                    "{}",
                    stderr(&out)
                );
            }
        }
    }
    assert!(done >= 1);
    let after = env.status();
    assert_eq!(after["turns"], 6 - done, "{done} rollback(s) went through");
    for n in 0..done {
        let out = env.run(["rollback", "--undo"]);
        assert_code(&out, 0);
        assert_eq!(env.status()["turns"], 6 - done + n + 1);
    }
    let undone = env.status();
    for field in [
        "response_id",
        "turns",
        "usage",
        "checkpoints",
        "transcript_items",
    ] {
        assert_eq!(undone[field], before[field], "{field}");
    }
    let out = env.run(["rollback", "--undo"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no rollback to undo"),
        "{}",
        stderr(&out)
    );
}

/// The race made certain: a rollback chosen from a listing is refused once
/// another client rolled back after that listing, and changes nothing.
#[tokio::test]
async fn a_rollback_chosen_before_the_conversation_moved_is_refused() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "t1\nt2\nt3\nt4\n"), 0);
    let scope = Some(Scope {
        folder: std::fs::canonicalize(&env.work)
            .unwrap()
            .display()
            .to_string(),
        agent: String::new(),
    });
    let mut sessions = SessionsClient::new(channel(&env.socket()).await);
    let listed = sessions
        .list_checkpoints(ListCheckpointsRequest {
            scope: scope.clone(),
            session_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.checkpoints.len(), 4);
    assert!(!listed.head.is_empty());
    // Another client rolls back in between.
    assert_code(&env.run(["rollback", "2"]), 0);
    let moved = env.status();
    let refused = sessions
        .rollback(RollbackRequest {
            scope: scope.clone(),
            session_id: String::new(),
            target: Some(rollback_request::Target::CheckpointId(
                listed.checkpoints[1].id.clone(),
            )),
            expect_head: listed.head.clone(),
            ..RollbackRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("moved since"),
        "{}",
        refused.message()
    );
    // So is an undo chosen from the old listing.
    let refused = sessions
        .rollback(RollbackRequest {
            scope,
            session_id: String::new(),
            target: Some(rollback_request::Target::Undo(true)),
            expect_head: listed.head,
            ..RollbackRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let now = env.status();
    for field in [
        "response_id",
        "turns",
        "checkpoints",
        "transcript_items",
        "rollback_backup",
    ] {
        assert_eq!(now[field], moved[field], "{field}");
    }
}

/// The folder+agent's shared checkpoint (its branch point for one-shots),
/// as the file holds it.
fn shared_file(env: &TestEnv) -> std::path::PathBuf {
    env.profile_files()
        .into_iter()
        .find(|p| p.ends_with("shared.json"))
        .expect("no shared.json")
}

/// The one-shot request at `n` neither continues a chain nor carries `text`.
fn starts_fresh(model: &FakeModel, n: usize, text: &str) {
    let body = &model.requests()[n].body;
    assert!(
        body.get("previous_response_id").is_none_or(Value::is_null),
        "the one-shot continued the cleared chain: {body}"
    );
    assert!(!body.to_string().contains(text), "{body}");
}

/// `clear` resets the folder's branch point: one-shots no longer continue
/// the cleared conversation (by response id: its turns would reach the
/// model again), and still work once the server forgot every chain.
#[test]
fn clear_resets_the_branch_point_of_one_shots() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "my secret is PLUM-4471\n"), 0);
    assert_code(&env.run(["clear", "--yes"]), 0);
    let n = model.requests().len();
    let out = env.chat(&model, ["exec", "what do you know?"], "");
    assert_code(&out, 0);
    starts_fresh(&model, n, "PLUM-4471");
    model.forget_response_ids();
    let out = env.chat(&model, ["exec", "and now?"], "");
    assert_code(&out, 0);
    assert!(!stderr(&out).contains("corrupt"), "{}", stderr(&out));
}

/// A branch point naming a conversation that is gone (as an agentd before
/// this fix left it after `clear`) is not used, and is never "corrupt".
#[test]
fn a_branch_point_naming_a_cleared_conversation_is_not_used() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "my secret is PLUM-4471\n"), 0);
    let old = std::fs::read(shared_file(&env)).unwrap();
    assert_code(&env.run(["clear", "--yes"]), 0);
    std::fs::write(env.root().join("shared.json.tmp"), &old).unwrap();
    std::fs::rename(env.root().join("shared.json.tmp"), shared_file(&env)).unwrap();
    model.forget_response_ids();
    let n = model.requests().len();
    let out = env.chat(&model, ["exec", "what do you know?"], "");
    assert_code(&out, 0);
    assert!(!stderr(&out).contains("corrupt"), "{}", stderr(&out));
    starts_fresh(&model, n, "PLUM-4471");
}

/// A one-shot whose conversation is cleared while it runs, once the server
/// forgot the chain, fails naming its branch point as unusable and what to
/// do, not as corrupt storage.
#[test]
fn a_one_shot_whose_branch_point_was_cleared_meanwhile_says_so() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat_auto(&model, "remember PLUM-4471\n"), 0);
    let gate = tempfile::tempdir().unwrap();
    let (started, go) = (gate.path().join("started"), gate.path().join("go"));
    model.push(agentx_tests::fake_model::Reply::ToolCall {
        name: "shell".into(),
        arguments: serde_json::json!({"command": format!(
            "touch {s}; while [ ! -e {g} ]; do sleep 0.05; done",
            s = started.display(), g = go.display())}),
    });
    // The gate lives outside the folder: the command may write there.
    let child = env.chat_command(
        &model,
        ["--sandbox", "danger-full-access", "exec", "--auto", "wait"],
        "",
    );
    while !started.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_code(&env.run(["clear", "--yes"]), 0);
    model.forget_response_ids();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("branch point is unusable") && err.contains("was cleared"),
        "{err}"
    );
    assert!(!err.contains("corrupt"), "{err}");
}

/// After `rollback 2` and `clear --yes`, no file of the profile holds the
/// conversation's text: not its transcript, not a rollback's cut tail, and
/// soon after not the search index either.
#[test]
fn clear_leaves_none_of_the_conversations_text_in_the_profile() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let marker = "zebramarker9931";
    assert_code(
        &env.chat_auto(
            &model,
            &format!("one {marker}\ntwo {marker}\nthree {marker}\n"),
        ),
        0,
    );
    assert_code(&env.run(["rollback", "2"]), 0);
    // Wait until the index holds it, so the check below means something.
    loop {
        let hits = json_out(&env.run(["search", "--json", marker]));
        if !hits.as_array().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_code(&env.run(["clear", "--yes"]), 0);
    // No search finds it once `clear` returned.
    let hits = json_out(&env.run(["search", "--json", marker]));
    assert_eq!(hits, serde_json::json!([]));
    let holding = || -> Vec<_> {
        env.profile_files()
            .into_iter()
            .filter(|p| {
                std::fs::read(p)
                    .unwrap_or_default()
                    .windows(marker.len())
                    .any(|w| w == marker.as_bytes())
            })
            .collect()
    };
    let index = env.home.join("search");
    let outside: Vec<_> = holding()
        .into_iter()
        .filter(|p| !p.starts_with(&index))
        .collect();
    assert!(outside.is_empty(), "still holding the text: {outside:?}");
    // The index's files are rewritten without it soon after (agentd does
    // not make `clear` wait for that).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let held = holding();
        if held.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still holding the text: {held:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A piped REPL talking to `model`, whose stdin the test writes as it goes.
fn live_repl(env: &TestEnv, model: &FakeModel, args: &[&str]) -> std::process::Child {
    env.agentx(args)
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A REPL whose conversation another client cleared says so (once per
/// message, naming /new and /resume) instead of "no conversation … in this
/// folder", sends nothing, and goes on: /new then works. Piped, it exits 1
/// because a message was not sent.
#[test]
fn a_repl_whose_conversation_was_cleared_elsewhere_says_so_and_offers_new() {
    use std::io::Write as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    let mut repl = live_repl(&env, &model, &["--approval", "auto"]);
    let mut input = repl.stdin.take().unwrap();
    writeln!(input, "first").unwrap();
    agentx_tests::wait_status(&env, |s| s["turns"] == 1);
    let cleared = env.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(&env.run(["clear", "--yes"]), 0);
    let sent = model.requests().len();
    writeln!(input, "second\n!echo local\n/new\nthird").unwrap();
    drop(input);
    let out = repl.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("no conversation"), "{err}");
    assert_eq!(
        err.matches("was cleared elsewhere").count(),
        2,
        "the message and the !command: {err}"
    );
    assert!(
        err.contains(&cleared) && err.contains("/new") && err.contains("/resume"),
        "{err}"
    );
    let text = agentx_tests::stdout(&out);
    assert!(!text.contains("echo: second"), "{text}");
    assert!(text.contains("echo: third [turns seen: 1]"), "{text}");
    assert_eq!(model.requests().len(), sent + 1, "only `third` was sent");
    assert_code(&out, 1);
}

/// `!cmd` output belongs to the REPL that ran it: it travels with that
/// REPL's next message, not with another REPL's on the same conversation.
#[test]
fn a_local_command_goes_with_the_message_of_the_repl_that_ran_it() {
    use std::io::Write as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    let mut a = live_repl(&env, &model, &["--approval", "auto"]);
    let mut a_in = a.stdin.take().unwrap();
    writeln!(a_in, "first").unwrap();
    agentx_tests::wait_status(&env, |s| s["turns"] == 1);
    let mut b = live_repl(&env, &model, &["--approval", "auto"]);
    let mut b_in = b.stdin.take().unwrap();
    writeln!(b_in, "!echo FROM-B-7731").unwrap();
    agentx_tests::wait_status(&env, |s| s["pending_shell_transcript"] == true);
    writeln!(a_in, "second from a").unwrap();
    agentx_tests::wait_status(&env, |s| s["turns"] == 2);
    writeln!(b_in, "third from b").unwrap();
    agentx_tests::wait_status(&env, |s| s["turns"] == 3);
    drop((a_in, b_in));
    assert_code(&a.wait_with_output().unwrap(), 0);
    assert_code(&b.wait_with_output().unwrap(), 0);
    let bodies: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body["input"].to_string())
        .collect();
    let of = |text: &str| {
        bodies
            .iter()
            .find(|b| b.contains(text))
            .unwrap_or_else(|| panic!("no request with {text}: {bodies:?}"))
            .clone()
    };
    assert!(
        !of("second from a").contains("FROM-B-7731"),
        "A's message carried B's !command"
    );
    assert!(
        of("third from b").contains("FROM-B-7731"),
        "B's message lost its !command"
    );
}

/// A client killed with SIGKILL while its tool runs: the call is recorded
/// as cut short because the client went away, not "cancelled by the user".
#[test]
fn a_killed_client_is_recorded_as_gone_not_as_cancelled_by_the_user() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let gate = tempfile::tempdir().unwrap();
    let started = gate.path().join("started");
    model.push(agentx_tests::fake_model::Reply::ToolCall {
        name: "shell".into(),
        arguments: serde_json::json!({"command": format!(
            "touch {s}; sleep 600", s = started.display())}),
    });
    // The gate lives outside the folder: the command may write there.
    let child = env.chat_command(
        &model,
        ["--approval", "auto", "--sandbox", "danger-full-access"],
        "run it\n",
    );
    while !started.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait_with_output();
    let st = agentx_tests::wait_status(&env, |s| s["interrupted"].is_object());
    let call = &st["pending_tool_calls"][0];
    let output = call["output"].as_str().unwrap_or_default();
    assert!(output.contains("went away"), "{call}");
    assert!(!output.contains("cancelled by the user"), "{call}");
    let why = st["interrupted"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("went away"), "{st}");
}

/// Ctrl-C on a terminal during a turn shows `^C` once: the terminal echoes
/// it (ECHOCTL), so agentx does not print another. Runs the REPL on a
/// pseudo-terminal through util-linux `script`.
#[test]
fn ctrl_c_on_a_terminal_shows_one_caret_c() {
    use std::io::{Read as _, Write as _};
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        return agentx_tests::skip("util-linux `script` is not installed");
    }
    let env = TestEnv::new();
    let model = FakeModel::start();
    let gate = tempfile::tempdir().unwrap();
    let started = gate.path().join("started");
    model.push(agentx_tests::fake_model::Reply::ToolCall {
        name: "shell".into(),
        arguments: serde_json::json!({"command": format!(
            "touch {s}; sleep 600", s = started.display())}),
    });
    let line = format!(
        "stty cols 200; exec {} --approval auto --sandbox danger-full-access",
        agentx_tests::agentx_bin().display()
    );
    let mut script = {
        let mut cmd = env.agentx::<[&str; 0], &str>([]);
        let envs: Vec<_> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
            .collect();
        cmd = std::process::Command::new("script");
        for (k, v) in envs {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.args(["-qfec", &line, "/dev/null"])
            .current_dir(&env.work)
            .env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
            .env("TERM", "dumb")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut input = script.stdin.take().unwrap();
    // The prompt comes once the conversation is open.
    let mut out = script.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = out.read_to_end(&mut all);
        all
    });
    agentx_tests::wait_status(&env, |s| !s["session_id"].as_str().unwrap_or("").is_empty());
    input.write_all(b"run it\r").unwrap();
    while !started.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    input.write_all(b"\x03").unwrap();
    agentx_tests::wait_status(&env, |s| s["interrupted"].is_object());
    input.write_all(b"\x04").unwrap();
    let status = script.wait().unwrap();
    let shown = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    assert!(status.success(), "{shown}");
    assert!(shown.contains("cancelling the turn"), "{shown}");
    assert_eq!(shown.matches("^C").count(), 1, "{shown}");
}

/// Two REPLs each started with `agentx new` in one folder: both keep their
/// own conversation, and each one's message goes to its own. (The second
/// `new` once removed the first one's conversation, still empty, as left
/// behind: its message was refused as "cleared elsewhere".)
#[test]
fn two_repls_started_with_new_in_one_folder_both_work() {
    use std::io::Write as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    // A: open, waiting for its message.
    let mut a = env.agentx(["new"]);
    a.env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let before = env.status()["session_id"].clone();
    let mut a = a.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.status()["session_id"] == before {
        assert!(std::time::Instant::now() < deadline, "A never opened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // B: another `new`, a message, done.
    let out = env.chat(&model, ["new"], "from B\n");
    assert_code(&out, 0);
    // A's message goes to A's conversation.
    let mut input = a.stdin.take().unwrap();
    input.write_all(b"from A\n").unwrap();
    drop(input);
    let out = a.wait_with_output().unwrap();
    assert_code(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("echo: from A [turns seen: 1]"),
        "{}",
        stderr(&out)
    );
    let listed = json_out(&env.run(["sessions", "--json"]));
    let titles: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["from A", "from B"], "{listed}");
}

/// Over gRPC: `OpenSession{new}` twice, then a turn on the first id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_opened_new_survives_another_new_while_its_client_runs() {
    use agentx_shared::proto::{
        ApprovalPolicy, OpenSessionRequest, TurnStart, open_session_request, turn_event,
    };
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Start agentd.
    assert_code(&env.run(["daemon", "start"]), 0);
    let scope = Some(Scope {
        folder: std::fs::canonicalize(&env.work)
            .unwrap()
            .display()
            .to_string(),
        agent: String::new(),
    });
    let channel = channel(&env.socket()).await;
    let mut sessions = SessionsClient::new(channel.clone());
    let mut open_new = async || {
        sessions
            .open_session(OpenSessionRequest {
                scope: scope.clone(),
                target: Some(open_session_request::Target::New(true)),
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap()
            .id
    };
    let first = open_new().await;
    let second = open_new().await;
    assert_ne!(first, second);
    let start = TurnStart {
        session_id: first.clone(),
        ..env.turn_start(&model, "to the first", ApprovalPolicy::Never)
    };
    let (_tx, mut events) = agentx_tests::open_turn(&env.socket(), start).await;
    let mut finished = None;
    while let Some(event) = events.message().await.unwrap() {
        if let Some(turn_event::Event::Finished(f)) = event.event {
            finished = Some(f);
        }
    }
    let finished = finished.expect("no end of turn");
    assert!(finished.error.is_empty(), "{finished:?}");
    assert!(finished.text.contains("to the first"), "{finished:?}");
}

/// Three `agentx rollback 2` started together: exactly one rolls back,
/// the others say the conversation moved (they never stack).
#[test]
fn rollbacks_started_together_never_stack() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for round in 0..3 {
        if round > 0 {
            assert_code(&env.run(["clear", "--yes"]), 0);
        }
        assert_code(
            &env.chat(
                &model,
                ["--approval", "never"],
                "one\ntwo\nthree\nfour\nfive\nsix\n",
            ),
            0,
        );
        assert_eq!(env.status()["checkpoints"], 6);
        // "Together": all three commands are running before any rollback
        // is served (agentd is held until each has connected), as three
        // typed at once are; else a slow start after another's rollback
        // would rightly see the new state.
        let daemon = nix::unistd::Pid::from_raw(env.daemon_pids()[0]);
        nix::sys::signal::kill(daemon, nix::sys::signal::Signal::SIGSTOP).unwrap();
        let children: Vec<_> = (0..3)
            .map(|_| {
                env.agentx(["rollback", "2"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in &children {
            let fds = format!("/proc/{}/fd", child.id());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !std::fs::read_dir(&fds).unwrap().flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            }) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a rollback never connected"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        nix::sys::signal::kill(daemon, nix::sys::signal::Signal::SIGCONT).unwrap();
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let ok = outs.iter().filter(|o| o.status.success()).count();
        assert_eq!(
            ok,
            1,
            "round {round}: {:?}",
            outs.iter().map(agentx_tests::stderr).collect::<Vec<_>>()
        );
        for refused in outs.iter().filter(|o| !o.status.success()) {
            assert!(
                agentx_tests::stderr(refused).contains("moved"),
                "{}",
                agentx_tests::stderr(refused)
            );
        }
        // One rollback to checkpoint 2 of 6: five remain.
        assert_eq!(env.status()["checkpoints"], 5, "round {round}");
    }
}
