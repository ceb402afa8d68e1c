//! Long conversations end to end: a fake server that enforces a token window
//! (characters / 4) and answers overflows in each server's words; compaction
//! by hand, before a turn and on overflow; the meter; AGENTS.md; /model.

use std::time::Duration;

use serde_json::Value;

use agentx_tests::fake_model::{FakeModel, OverflowShape, Reply};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

/// An env talking to `model` for every command (status included).
fn env_for(model: &FakeModel, chat: bool, extra: &[(&str, &str)]) -> TestEnv {
    let mut env = TestEnv::new();
    let mut vars = vec![
        ("AGENTX_BASE_URL", model.base_url()),
        ("AGENTX_MODEL", "fake-model".to_owned()),
        ("OPENAI_API_KEY", agentx_tests::TEST_KEY.to_owned()),
    ];
    if chat {
        vars.push(("AGENTX_PROVIDER", "chat".to_owned()));
    }
    for (k, v) in vars {
        env.extra_env.push((k.into(), v));
    }
    for (k, v) in extra {
        env.extra_env.push(((*k).into(), (*v).into()));
    }
    env
}

/// The profile directory made before agentx does (0700, as it requires).
fn private_dir(path: &std::path::Path) {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().mode(0o700).create(path).unwrap();
}

/// `agentx` fed `stdin` (one message or command per line).
fn say(env: &TestEnv, stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = env
        .agentx(Vec::<&str>::new())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_owned();
    std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    child.wait_with_output().unwrap()
}

/// Model calls that were summary requests (sent without tools).
fn summaries(model: &FakeModel) -> usize {
    model
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.body.get("tools").is_none())
        .count()
}

/// Every text a request carries, as one string (to look for messages).
fn request_text(body: &Value) -> String {
    let mut out = body["instructions"].as_str().unwrap_or_default().to_owned();
    for list in [&body["input"], &body["messages"]] {
        for item in list.as_array().into_iter().flatten() {
            out.push('\n');
            out.push_str(&item.to_string());
        }
    }
    out
}

/// `n` characters of filler after `tag`.
fn big(tag: &str, n: usize) -> String {
    format!("{tag} {}", "lorem ipsum dolor sit amet ".repeat(n / 27 + 1))
}

fn export_markdown(env: &TestEnv) -> String {
    let out = env.run(["export", "--format", "markdown"]);
    assert_code(&out, 0);
    stdout(&out)
}

#[test]
fn a_200_turn_conversation_in_a_small_window_never_fails_a_turn_on_either_provider() {
    for chat in [false, true] {
        let model = FakeModel::start();
        model.set_token_window(2000, OverflowShape::OpenAi);
        let env = env_for(&model, chat, &[("AGENTX_CONTEXT_WINDOW", "2000")]);
        let lines: String = (0..200)
            .map(|i| format!("{}\n", big(&format!("message {i}:"), 150)))
            .collect();
        let out = say(&env, &lines);
        assert_code(&out, 0);
        let answers = stdout(&out);
        for i in [0, 57, 199] {
            assert!(
                answers.contains(&format!("echo: message {i}:")),
                "chat={chat}: no answer to message {i}\n{}",
                stderr(&out)
            );
        }
        assert!(!stderr(&out).contains("failed"), "{}", stderr(&out));
        // Compacted along the way, and no request ever passed the window:
        // the fake refuses those, so every turn answering proves it.
        assert!(summaries(&model) >= 3, "chat={chat}: {}", summaries(&model));
        let s = env.status();
        assert_eq!(s["turns"], 200, "chat={chat}");
        assert!(s["context"]["used_tokens"].as_u64().unwrap() < 2000);
        // The transcript keeps everything the model no longer sees.
        let md = export_markdown(&env);
        assert!(md.contains("message 0:") && md.contains("message 199:"));
        assert!(md.contains("— compacted: "), "chat={chat}");
    }
}

#[test]
fn an_overflow_in_each_servers_words_is_learned_compacted_and_sent_again_once() {
    let shapes = [
        (OverflowShape::OpenAi, Some(3000)),
        (OverflowShape::LlamaCpp, Some(3000)),
        (OverflowShape::Vllm, Some(3000)),
        (OverflowShape::LiteLlm, Some(3000)),
        (OverflowShape::Ollama, None),
    ];
    for (shape, learned) in shapes {
        let model = FakeModel::start();
        model.set_token_window(3000, shape);
        // No window configured: agentd assumes the default until told.
        let env = env_for(&model, true, &[]);
        let lines = format!(
            "{}\n{}\n{}\n",
            big("first", 5000),
            big("second", 5000),
            big("third", 5000)
        );
        let out = say(&env, &lines);
        assert_code(&out, 0);
        let err = stderr(&out);
        assert!(stdout(&out).contains("echo: third"), "{shape:?}: {err}");
        assert!(err.contains("did not fit"), "{shape:?}: {err}");
        assert!(err.contains("— compacted: "), "{shape:?}: {err}");
        let s = env.status();
        assert_eq!(s["failed"], Value::Null, "{shape:?}");
        assert_eq!(s["context"]["window_source"], "overflow", "{shape:?}");
        let window = s["context"]["window_tokens"].as_u64().unwrap();
        match learned {
            Some(w) => assert_eq!(window, w, "{shape:?}"),
            None => assert!(window < 5000, "{shape:?}: {window}"),
        }
        // One overflow: once learned, the window is compacted for before
        // any request can pass it again.
        let recoveries = err.matches("compacting and sending it again").count();
        assert_eq!(recoveries, 1, "{shape:?}: {err}");
    }
}

#[test]
fn with_auto_compaction_off_an_overflow_says_what_to_do_and_resends_nothing() {
    let model = FakeModel::start();
    model.set_token_window(3000, OverflowShape::OpenAi);
    let env = env_for(&model, true, &[("AGENTX_AUTO_COMPACT", "off")]);
    let out = say(
        &env,
        &format!("{}\n{}\n", big("first", 2000), big("second", 2000)),
    );
    assert_code(&out, 0);
    let out = say(&env, &format!("{}\n", big("third", 5000)));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("automatic compaction is off"), "{err}");
    assert!(err.contains("/compact") && err.contains("/rollback") && err.contains("/new"));
    assert_eq!(summaries(&model), 0, "it compacted although told not to");
    let s = env.status();
    assert_eq!(s["failed"]["retryable"], false);
    assert_eq!(s["turns"], 2);
    // A retry would only overflow again: refused, naming why.
    let retry = env.run(["retry"]);
    assert_code(&retry, 1);
    assert!(stderr(&retry).contains("cannot be sent again"));
    // Compacting by hand, then going on: the dropped message is not resent.
    let out = env.run(["compact", "--focus", "the second message"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("— compacted: "), "{}", stderr(&out));
    let compaction = model.requests().last().unwrap().body.clone();
    assert!(request_text(&compaction).contains("focus on: the second message"));
    let before = model.requests().len();
    let out = say(&env, "fourth\n");
    assert_code(&out, 0);
    let sent: Vec<String> = model.requests()[before..]
        .iter()
        .map(|r| request_text(&r.body))
        .collect();
    assert!(
        sent.iter().all(|t| !t.contains("third lorem")),
        "resent: {sent:?}"
    );
    assert!(sent.iter().any(|t| t.contains("[agentx handoff]")));
}

#[test]
fn a_message_bigger_than_the_whole_window_is_refused_not_sent_and_not_kept() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[("AGENTX_CONTEXT_WINDOW", "1000")]);
    let out = say(&env, "hello\n");
    assert_code(&out, 0);
    let sent = model.requests().len();
    let out = say(&env, &format!("{}\n", big("huge", 8000)));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("more than the model's whole context window"),
        "{err}"
    );
    assert_eq!(
        model.requests().len(),
        sent,
        "the message reached the model"
    );
    let s = env.status();
    assert_eq!(s["turns"], 1);
    assert_eq!(s["failed"], Value::Null, "a refusal is not a failed turn");
    assert!(!export_markdown(&env).contains("huge lorem"));
    // The conversation goes on as if nothing happened.
    let out = say(&env, "after\n");
    assert_code(&out, 0);
    assert!(!request_text(&model.requests().last().unwrap().body).contains("huge lorem"));
}

#[test]
fn agents_md_reaches_the_model_on_every_request_and_after_a_compaction() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[]);
    private_dir(&env.home);
    std::fs::write(env.home.join("AGENTS.md"), "PROFILE-RULE: answer briefly").unwrap();
    std::fs::write(env.work.join("AGENTS.md"), "FOLDER-RULE: use tabs").unwrap();
    let out = say(&env, "one\ntwo\n");
    assert_code(&out, 0);
    let out = env.run(["compact"]);
    assert_code(&out, 0);
    let out = say(&env, "three\n");
    assert_code(&out, 0);
    let requests = model.requests();
    for r in &requests {
        let instructions = r.body["instructions"].as_str().unwrap_or_default();
        if r.body.get("tools").is_some() {
            assert!(instructions.contains("PROFILE-RULE") && instructions.contains("FOLDER-RULE"));
        }
    }
    let last = &requests.last().unwrap().body;
    assert!(
        last.get("previous_response_id").is_none(),
        "a compaction starts a new chain"
    );
    assert!(
        last["input"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("[agentx handoff]")
    );
    let s = env.status();
    let files = s["instruction_files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files[1].as_str().unwrap().ends_with("work/AGENTS.md"));
}

#[test]
fn a_summary_that_does_not_shrink_is_trimmed_well_under_the_threshold() {
    let model = FakeModel::start();
    let env = env_for(&model, true, &[("AGENTX_CONTEXT_WINDOW", "4000")]);
    let out = say(&env, &format!("{}\n{}\n", big("a", 3000), big("b", 3000)));
    assert_code(&out, 0);
    // The model answers the summary request with far more than it read.
    model.push(Reply::text(big("SUMMARY", 200_000)));
    let out = env.run(["compact"]);
    assert_code(&out, 0);
    let s = env.status();
    let used = s["context"]["used_tokens"].as_u64().unwrap();
    assert!(used <= 4000 * 85 / 100 / 2, "{used}");
    assert_eq!(summaries(&model), 1, "compacted more than once");
}

#[test]
fn kill_9_during_a_compaction_leaves_the_conversation_whole() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[]);
    let out = say(&env, "one\ntwo\n");
    assert_code(&out, 0);
    model.push(Reply::Stall(Duration::from_secs(60)));
    let mut compact = env
        .agentx(["compact"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The summary request is in flight: kill agentd under it.
    let asked = |m: &FakeModel| summaries(m) == 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !asked(&model) {
        assert!(std::time::Instant::now() < deadline, "no summary request");
        std::thread::sleep(Duration::from_millis(10));
    }
    for pid in env.daemon_pids() {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
    }
    let _ = compact.wait();
    // Not compacted (nothing half-written); every turn still there.
    let md = export_markdown(&env);
    assert!(!md.contains("— compacted: "));
    assert!(md.contains("one") && md.contains("two"));
    let out = say(&env, "three\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: three [turns seen: 3]"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn rollback_to_before_a_compaction_undoes_it_and_resume_never_compacts_again() {
    let model = FakeModel::start();
    let env = env_for(&model, true, &[]);
    let out = say(&env, "alpha\nbeta\n");
    assert_code(&out, 0);
    assert_code(&env.run(["compact"]), 0);
    // Resumed in a new process: the compacted context, no new compaction.
    let out = say(&env, "gamma\n");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("— compacted: "),
        "replay: {}",
        stderr(&out)
    );
    let gamma = request_text(&model.requests().last().unwrap().body);
    assert!(gamma.contains("[agentx handoff]") && gamma.contains("gamma"));
    assert!(!gamma.contains("\"content\":\"alpha\""), "{gamma}");
    assert_eq!(summaries(&model), 1);
    // Checkpoints, newest first: gamma, the compaction, beta, alpha.
    let cps = json_out(&env.run(["checkpoints", "--json"]));
    assert_eq!(cps.as_array().unwrap().len(), 4, "{cps}");
    assert_code(&env.run(["rollback", "3"]), 0);
    let out = say(&env, "delta\n");
    assert_code(&out, 0);
    let delta = request_text(&model.requests().last().unwrap().body);
    assert!(delta.contains("\"content\":\"alpha\"") && !delta.contains("[agentx handoff]"));
    assert!(stdout(&out).contains("[turns seen: 3]"), "{}", stdout(&out));
}

#[test]
fn the_meter_is_in_status_json_reported_or_estimated() {
    let model = FakeModel::start();
    model.set_token_window(50_000, OverflowShape::OpenAi);
    let env = env_for(&model, false, &[("AGENTX_CONTEXT_WINDOW", "50000")]);
    assert_code(&say(&env, "hello there\n"), 0);
    let s = env.status();
    let c = &s["context"];
    assert_eq!(c["window_tokens"], 50_000);
    assert_eq!(c["window_source"], "config");
    assert_eq!(c["estimated"], false);
    assert_eq!(c["auto_compact_at"], 85.0);
    let used = c["used_tokens"].as_u64().unwrap();
    // What the fake reported: the request (instructions and all) and the answer.
    let last = &model.requests()[0].body;
    assert!(
        used > 20 && used as usize >= request_text(last).len() / 8,
        "{used}"
    );
    assert_eq!(s["model"], "fake-model");
    assert_eq!(s["provider"], "responses");
    // A server that reports no usage: counted, and marked so.
    let model = FakeModel::start();
    model.set_chat_no_usage(true);
    let env = env_for(&model, true, &[("AGENTX_AUTO_COMPACT", "off")]);
    assert_code(&say(&env, "hello there\n"), 0);
    let c = env.status()["context"].clone();
    assert_eq!(c["estimated"], true);
    assert!(c["used_tokens"].as_u64().unwrap() > 0);
    assert_eq!(c["auto_compact_at"], Value::Null);
}

/// A conversation with no measured fill (an import) is
/// counted from its transcript; the count is kept for the next status and
/// counted again once the transcript changed (here: a rollback).
#[test]
fn an_unmeasured_conversation_is_counted_again_when_its_transcript_changes() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[("AGENTX_CONTEXT_WINDOW", "50000")]);
    let lines = format!(
        "{}\n{}\n{}\n",
        big("one", 4000),
        big("two", 4000),
        big("three", 4000)
    );
    assert_code(&say(&env, &lines), 0);
    let file = env.root().join("conv.json");
    assert_code(&env.run(["export", "-o", file.to_str().unwrap()]), 0);
    // An export carries no measured fill: the import's is counted.
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(doc["conversation"].get("context").is_none());
    let env2 = env_for(&model, false, &[("AGENTX_CONTEXT_WINDOW", "50000")]);
    assert_code(&env2.run(["import", file.to_str().unwrap()]), 0);
    let used = |env: &TestEnv| {
        let c = env.status()["context"].clone();
        assert_eq!(c["estimated"], true, "{c}");
        c["used_tokens"].as_u64().unwrap()
    };
    let three = used(&env2);
    assert!(three > 3000, "{three}");
    assert_eq!(used(&env2), three);
    assert_code(&env2.run(["rollback", "2"]), 0);
    let one = used(&env2);
    assert!(
        one + 1500 < three,
        "{one} after the rollback, {three} before"
    );
}

#[test]
fn a_server_whose_overflow_names_no_window_is_asked_for_it_once() {
    let model = FakeModel::start();
    model.advertise_window(3000);
    model.set_token_window(3000, OverflowShape::Ollama);
    let env = env_for(&model, true, &[]);
    let lines = format!(
        "{}\n{}\n{}\n",
        big("one", 5000),
        big("two", 5000),
        big("three", 5000)
    );
    assert_code(&say(&env, &lines), 0);
    let s = env.status();
    assert_eq!(s["context"]["window_tokens"], 3000);
    assert_eq!(s["context"]["window_source"], "server");
    assert_eq!(model.probes(), ["/v1/models"]);
    // Remembered across a restart of agentd.
    assert_code(&env.run(["daemon", "restart"]), 0);
    assert_code(&say(&env, &format!("{}\n", big("four", 5000))), 0);
    assert_eq!(model.probes(), ["/v1/models"]);
}

/// Summarizing from a message keeps what came before it word for word,
/// never trimmed: when that alone keeps the context over what compaction
/// aims for, the user is told, with what happens next.
#[test]
fn a_large_part_kept_by_compact_from_is_said_not_trimmed() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[]);
    private_dir(&env.home);
    std::fs::write(
        env.home.join("config.toml"),
        "[models.fake-model]\ncontext_window = 4000\n",
    )
    .unwrap();
    let alpha = big("alpha", 5000);
    assert_code(&say(&env, &format!("{alpha}\nbravo\ncharlie\n")), 0);
    let out = env.run(["compact", "--from", "2"]);
    assert_code(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains("the messages kept before the summary take")
            && err.contains("over the 1700 a compaction aims for"),
        "{err}"
    );
    // Kept word for word all the same: the compacted context starts with it.
    let exported = json_out(&env.run(["export"]));
    let compaction = exported["conversation"]["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|e| e["type"] == "compaction")
        .unwrap()
        .to_string();
    assert!(compaction.contains(alpha.trim_end()), "{compaction}");
    // Summarizing all of it says nothing of the kind.
    let out = env.run(["compact"]);
    assert_code(&out, 0);
    assert!(
        !stderr(&out).contains("kept before the summary"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn model_switches_per_run_and_per_conversation_compact_for_a_smaller_window() {
    let model = FakeModel::start();
    model.set_token_window(100_000, OverflowShape::OpenAi);
    let env = env_for(&model, true, &[]);
    private_dir(&env.home);
    std::fs::write(
        env.home.join("config.toml"),
        "[models.tiny]\ncontext_window = 2000\n",
    )
    .unwrap();
    let out = say(&env, &format!("{}\n{}\n", big("a", 2500), big("b", 2500)));
    assert_code(&out, 0);
    let out = say(&env, "/model tiny\nafter the switch\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("model tiny"), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("the new model's window is smaller"), "{err}");
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(last["model"], "tiny");
    let s = env.status();
    assert_eq!(s["model"], "tiny");
    assert_eq!(s["conversation_model"], "tiny");
    assert_eq!(s["context"]["window_tokens"], 2000);
    // -m wins for one run.
    let out = env.run(["-m", "other", "exec", "hi"]);
    assert_code(&out, 0);
    assert_eq!(model.requests().last().unwrap().body["model"], "other");
    assert_eq!(env.status()["model"], "tiny");
    // The banner names the conversation's model.
    let out = say(&env, "");
    assert!(
        stderr(&out).contains("model tiny (this conversation's /model)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn one_shots_branch_from_a_compacted_checkpoint_and_search_sees_what_came_before() {
    let model = FakeModel::start();
    let env = env_for(&model, false, &[]);
    assert_code(&say(&env, "zebra crossing\nsecond\n"), 0);
    assert_code(&env.run(["compact"]), 0);
    let out = env.run(["exec", "--json", "from a one-shot"]);
    assert_code(&out, 0);
    let body = &model.requests().last().unwrap().body.clone();
    assert!(request_text(body).contains("[agentx handoff]"), "{body}");
    assert!(!request_text(body).contains("zebra crossing\""));
    let hits = json_out(&env.run(["search", "zebra", "--json"]));
    assert!(
        hits.to_string().contains("zebra"),
        "search lost what came before the compaction: {hits}"
    );
    let exported = json_out(&env.run(["export"]));
    let kinds: Vec<&str> = exported["conversation"]["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"compaction"), "{kinds:?}");
}

#[test]
fn another_machine_continues_from_the_same_compacted_context() {
    use agentx_tests::postgres::{machine, shared};
    let Some(pg) = shared() else { return };
    pg.create_db("c_compacted");
    let url = pg.url("c_compacted");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "https://github.com/acme/app", &url);
    let (model_a, model_b) = (FakeModel::start(), FakeModel::start());
    assert_code(
        &a.chat(&model_a, ["--approval", "never"], "kiwi one\nkiwi two\n"),
        0,
    );
    assert_code(&a.chat(&model_a, ["compact"], ""), 0);
    assert_eq!(a.sync()["reached"], true);
    let out = b.chat(&model_b, ["resume", "1", "--approval", "never"], "on b\n");
    assert_code(&out, 0);
    let last = request_text(&model_b.requests().last().unwrap().body);
    assert!(last.contains("[agentx handoff]"), "{last}");
    assert!(!last.contains("\"content\":\"kiwi one\""), "{last}");
    assert_eq!(summaries(&model_b), 0, "B compacted again");
}

#[test]
fn an_overflow_naming_an_absurd_window_is_not_learned_and_one_naming_zero_asks_the_server() {
    // 10^12: not learned, not kept; the turn still compacts and answers.
    let model = FakeModel::start();
    let env = env_for(&model, true, &[]);
    assert_code(&say(&env, "hello\n"), 0);
    model.push(Reply::http_error(
        400,
        Some("context_length_exceeded"),
        "This model's maximum context length is 1000000000000 tokens. However, your messages \
         resulted in 9000 tokens.",
    ));
    let out = say(&env, "second\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: second"), "{}", stderr(&out));
    let s = env.status();
    assert_ne!(s["context"]["window_tokens"], 1_000_000_000_000u64);
    assert!(
        env.profile_files_containing("1000000000000").is_empty(),
        "an absurd window was kept"
    );
    // 0 (llama.cpp's shape): the server is asked where it says its window.
    let model = FakeModel::start();
    model.advertise_window(3000);
    let env = env_for(&model, true, &[]);
    assert_code(&say(&env, "hello\n"), 0);
    model.push(Reply::HttpError {
        status: 400,
        body: serde_json::json!({"error": {"code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 0}}),
        headers: Vec::new(),
    });
    let out = say(&env, "second\n");
    assert_code(&out, 0);
    assert_eq!(model.probes(), ["/v1/models"], "{}", stderr(&out));
    let s = env.status();
    assert_eq!(s["context"]["window_tokens"], 3000);
}

#[test]
fn a_turn_dropped_for_the_window_is_never_offered_to_retry_which_would_refuse_it() {
    let model = FakeModel::start();
    model.set_token_window(3000, OverflowShape::OpenAi);
    let env = env_for(&model, true, &[("AGENTX_AUTO_COMPACT", "off")]);
    assert_code(
        &say(
            &env,
            &format!("{}\n{}\n", big("first", 2000), big("second", 2000)),
        ),
        0,
    );
    assert_code(&say(&env, &format!("{}\n", big("third", 5000))), 1);
    let s = env.status();
    assert_eq!(s["failed"]["resendable"], false, "{s}");
    // Opening the conversation again, and status, say what works.
    let reopened = stderr(&say(&env, ""));
    assert!(reopened.contains("the last turn failed"), "{reopened}");
    assert!(!reopened.contains("/retry"), "{reopened}");
    let human = stdout(&env.run(["status"]));
    assert!(human.contains("failed "), "{human}");
    assert!(!human.contains("agentx retry"), "{human}");
    // … and retry does refuse it.
    let retry = env.run(["retry"]);
    assert_code(&retry, 1);
    assert!(stderr(&retry).contains("cannot be sent again"));
    // A turn that failed otherwise is offered, and retry sends it.
    let model = FakeModel::start();
    let env = env_for(&model, true, &[("AGENTX_RETRY_BASE_MS", "1")]);
    assert_code(&say(&env, "hello\n"), 0);
    for _ in 0..4 {
        model.push(Reply::http_error(500, None, "boom"));
    }
    say(&env, "second\n");
    let s = env.status();
    assert_eq!(s["failed"]["resendable"], true, "{s}");
    assert!(stdout(&env.run(["status"])).contains("agentx retry"));
    assert!(stderr(&say(&env, "")).contains("/retry"));
    assert_code(&env.run(["retry"]), 0);
}

#[test]
fn a_tiny_window_never_bricks_the_conversation_on_either_provider() {
    for chat in [false, true] {
        let model = FakeModel::start();
        model.set_token_window(300, OverflowShape::OpenAi);
        let env = env_for(&model, chat, &[]);
        let turns = 30;
        let lines: String = (0..turns)
            .map(|i| format!("{}\n", big(&format!("message {i}:"), 60)))
            .collect();
        let out = say(&env, &lines);
        let err = stderr(&out);
        let answers = stdout(&out);
        let answered = (0..turns)
            .filter(|i| answers.contains(&format!("echo: message {i}:")))
            .count();
        assert_eq!(answered, turns, "chat={chat}: {err}");
        assert_code(&out, 0);
        // One overflow teaches the window; none after it.
        let resends = err.matches("compacting and sending it again").count();
        assert!(resends <= 1, "chat={chat}: {err}");
        // Compacting never made the context bigger, and no summary request
        // was sent that could not fit.
        let mut written = 0;
        for line in err.lines().filter(|l| l.contains("— compacted: ")) {
            let numbers: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect();
            assert!(numbers.len() >= 2 && numbers[1] < numbers[0], "{line}");
            if !line.contains("no summary could be written") {
                written += 1;
            }
        }
        assert!(
            summaries(&model) <= written + 2,
            "chat={chat}: {} summary requests for {written} summaries\n{err}",
            summaries(&model)
        );
        let s = env.status();
        assert_eq!(s["failed"], Value::Null, "chat={chat}");
        assert!(s["context"]["window_tokens"].as_u64().unwrap() <= 300);
    }
}

#[test]
fn instructions_over_the_window_are_named_with_their_sizes_not_blamed_on_the_message() {
    let model = FakeModel::start();
    let env = env_for(&model, true, &[("AGENTX_CONTEXT_WINDOW", "20000")]);
    env.write_config("instruction_files = [\"AGENTS.md\", \"CLAUDE.md\"]\n");
    let rules = "Always keep the rule that came before this one in mind. ".repeat(1100);
    assert!(rules.len() > 60_000 && rules.len() < 64 << 10);
    std::fs::write(env.home.join("AGENTS.md"), &rules).unwrap();
    std::fs::write(env.work.join("AGENTS.md"), &rules).unwrap();
    std::fs::write(env.work.join("CLAUDE.md"), &rules).unwrap();
    let out = say(&env, "hi\n");
    let err = stderr(&out);
    assert!(!err.contains("send a shorter message"), "{err}");
    assert!(err.contains("the instructions alone"), "{err}");
    for file in [
        "AGENTS.md (61 KiB)",
        "work/AGENTS.md (61 KiB)",
        "CLAUDE.md (61 KiB)",
    ] {
        assert!(err.contains(file), "{file}: {err}");
    }
    assert!(err.contains("instruction_files"), "{err}");
    assert!(
        model.requests().iter().all(|r| r.method != "POST"),
        "sent anyway"
    );
}

#[test]
fn a_turn_that_outgrows_the_window_in_its_own_tool_calls_compacts_again_and_finishes() {
    for chat in [false, true] {
        let model = FakeModel::start();
        model.set_token_window(4000, OverflowShape::OpenAi);
        let env = env_for(&model, chat, &[("AGENTX_CONTEXT_WINDOW", "4000")]);
        for i in 0..30 {
            model.push(Reply::tool_call(
                "shell",
                serde_json::json!({"command": format!("yes 'result {i} line' | head -c 2000")}),
            ));
        }
        let out = env.chat_auto(&model, "run the thirty commands\n");
        let err = stderr(&out);
        assert_code(&out, 0);
        assert!(
            stdout(&out).contains("echo: run the thirty commands"),
            "chat={chat}: {err}"
        );
        assert!(
            err.matches("— compacted: ").count() >= 2,
            "chat={chat}: {err}"
        );
        let s = env.status();
        assert_eq!(s["failed"], Value::Null, "chat={chat}");
        assert_eq!(model.pending_replies(), 0);
    }
}

#[test]
fn a_server_that_ends_the_stream_on_overflow_is_compacted_for_and_its_window_learned() {
    for chat in [true, false] {
        let model = FakeModel::start();
        model.set_token_window(1024, OverflowShape::SilentEnd);
        let env = env_for(&model, chat, &[("AGENTX_RETRY_BASE_MS", "1")]);
        let turns = 25;
        let lines: String = (0..turns)
            .map(|i| format!("{}\n", big(&format!("message {i}:"), 600)))
            .collect();
        let out = say(&env, &lines);
        let err = stderr(&out);
        let answers = stdout(&out);
        let answered = (0..turns)
            .filter(|i| answers.contains(&format!("echo: message {i}:")))
            .count();
        assert_eq!(answered, turns, "chat={chat}: {err}");
        assert!(err.contains("probably more than"), "chat={chat}: {err}");
        let s = env.status();
        assert_eq!(s["failed"], Value::Null, "chat={chat}");
        let window = s["context"]["window_tokens"].as_u64().unwrap();
        // Near the real 1,024 (a guess below the request it refused), far
        // from the 128k assumed before.
        assert!(window < 1500, "chat={chat}: {window}");
    }
}

#[test]
fn a_server_that_ends_the_stream_on_overflow_and_answers_props_teaches_its_window() {
    let model = FakeModel::start();
    model.set_token_window(1024, OverflowShape::SilentEnd);
    model.advertise_window_at_props(1024);
    let env = env_for(&model, true, &[("AGENTX_RETRY_BASE_MS", "1")]);
    let lines: String = (0..8)
        .map(|i| format!("{}\n", big(&format!("message {i}:"), 600)))
        .collect();
    let out = say(&env, &lines);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: message 7:"),
        "{}",
        stderr(&out)
    );
    let s = env.status();
    assert_eq!(s["context"]["window_tokens"], 1024);
    assert_eq!(s["context"]["window_source"], "server");
    assert_eq!(model.probes(), ["/v1/models", "/props"]);
}

#[test]
fn a_turn_dropped_after_its_tool_calls_outgrew_the_window_says_so() {
    let model = FakeModel::start();
    model.set_token_window(1500, OverflowShape::OpenAi);
    let env = env_for(&model, true, &[("AGENTX_CONTEXT_WINDOW", "1500")]);
    // Every result alone is bigger than the window: each step compacts,
    // until the turn's bound on compactions.
    for i in 0..30 {
        model.push(Reply::tool_call(
            "shell",
            serde_json::json!({"command": format!("yes 'result {i} line' | head -c 8000")}),
        ));
    }
    let out = env.chat_auto(&model, "run them all\n");
    let err = stderr(&out);
    assert!(
        err.contains("this turn's own tool calls and their results outgrew"),
        "{err}"
    );
    assert!(err.contains("compactions is a turn's limit"), "{err}");
    assert!(!err.contains("even compacted"), "{err}");
    assert!(err.contains("tool results are not kept"), "{err}");
}

/// A profile holding, imported, a never-compacted conversation of 150
/// exchanges of about 165 tokens each (`old message N:` and `old answer
/// N:`); its id.
fn import_long(model: &FakeModel, chat: bool, extra: &[(&str, &str)]) -> (TestEnv, String) {
    let env = env_for(model, chat, extra);
    assert_code(&say(&env, "hello\n"), 0);
    let mut doc = json_out(&env.run(["export", "--format", "json"]));
    let template = doc["conversation"]["transcript"][0].clone();
    let mut transcript = Vec::new();
    for i in 0..150 {
        for (kind, text) in [
            ("user", big(&format!("old message {i}:"), 300)),
            ("assistant", big(&format!("old answer {i}:"), 300)),
        ] {
            let mut entry = template.clone();
            entry["type"] = kind.into();
            entry["text"] = text.into();
            transcript.push(entry);
        }
    }
    doc["conversation"]["transcript"] = transcript.into();
    let file = env.root().join("long.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let env2 = env_for(model, chat, extra);
    assert_code(&env2.run(["import", file.to_str().unwrap()]), 0);
    (env2, doc["conversation"]["id"].as_str().unwrap().to_owned())
}

/// A never-compacted conversation of 12 windows (an import): the first
/// turn counts, compacts and sends only from its end, so a damaged line at
/// its start — which reading it whole would fail on — does not stop it, and
/// the compaction says its size is a floor.
#[test]
fn the_first_turn_in_a_long_never_compacted_conversation_reads_only_its_end() {
    let model = FakeModel::start();
    model.set_token_window(2000, OverflowShape::OpenAi);
    let (env, id) = import_long(&model, false, &[("AGENTX_CONTEXT_WINDOW", "2000")]);
    let journal = env
        .profile_files()
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy() == format!("{id}.jsonl"))
        .unwrap();
    let mut bytes = std::fs::read(&journal).unwrap();
    assert_eq!(bytes[0], b'{');
    bytes[0] = b'#';
    std::fs::write(&journal, bytes).unwrap();

    let before = model.requests().len();
    let out = env.chat(&model, ["resume", &id], "newest message\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: newest message"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("compacting the conversation (more than "),
        "{}",
        stderr(&out)
    );
    let requests: Vec<Value> = model.requests()[before..]
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.body.clone())
        .collect();
    let summary = request_text(
        requests
            .iter()
            .find(|b| b.get("tools").is_none())
            .expect("a summary request"),
    );
    assert!(summary.contains("old answer 149:"), "{summary}");
    assert!(summary.contains("oldest entries are left out"), "{summary}");
    assert!(!summary.contains("old message 0:"), "{summary}");
    let last = request_text(requests.last().unwrap());
    assert!(last.contains("newest message"), "{last}");
    assert!(!last.contains("old message 0:"), "{last}");
    // The damage is real: what needs the whole transcript says so.
    let out = env.run(["export", &id, "--format", "json"]);
    assert!(
        stderr(&out).contains("is corrupt: line 1"),
        "{}",
        stderr(&out)
    );
}

/// With automatic compaction off, a conversation far over the window is
/// sent whole, so it is counted whole before it is sent (the meter's count
/// from its end is only a floor): the meter after the turn says its size.
#[test]
fn with_compaction_off_a_long_conversation_sent_whole_is_counted_whole() {
    let model = FakeModel::start();
    model.set_chat_no_usage(true);
    let extra = [
        ("AGENTX_CONTEXT_WINDOW", "2000"),
        ("AGENTX_AUTO_COMPACT", "off"),
    ];
    let (env, id) = import_long(&model, true, &extra);
    let out = env.chat(&model, ["resume", &id], "newest message\n");
    assert_code(&out, 0);
    let sent = request_text(&model.requests().last().unwrap().body);
    assert!(sent.contains("old message 0:"), "sent whole: {sent}");
    let c = env.status()["context"].clone();
    assert_eq!(c["estimated"], true, "{c}");
    // Its 300 texts alone are about 99,000 bytes (24,750 tokens at bytes
    // / 4); read from the end only, it counts about 15,000.
    let used = c["used_tokens"].as_u64().unwrap();
    assert!(used > 24_000, "{c}");
}

/// A compaction that read only the end of a long conversation loses
/// nothing of it: the transcript keeps every message, before and after.
#[test]
fn a_compaction_that_read_only_the_end_keeps_every_message_in_the_transcript() {
    let model = FakeModel::start();
    model.set_token_window(2000, OverflowShape::OpenAi);
    let (env, id) = import_long(&model, false, &[("AGENTX_CONTEXT_WINDOW", "2000")]);
    let out = env.chat(&model, ["resume", &id], "newest message\n");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("compacting the conversation (more than "),
        "{}",
        stderr(&out)
    );
    let md = stdout(&env.run(["export", &id, "--format", "markdown"]));
    for i in 0..150 {
        for want in [format!("old message {i}:"), format!("old answer {i}:")] {
            assert!(md.contains(&want), "{want} missing");
        }
    }
    assert!(md.contains("— compacted: "), "{md}");
    assert!(md.contains("newest message"), "{md}");
}
