//! `agentx rewind --to N`: one rewind for code and conversation — the
//! folder before message N, the conversation before it, or both.

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, json_out, stderr};

/// Three messages, each a command writing one file.
fn three_messages(env: &TestEnv, model: &FakeModel) {
    for (i, name) in ["one", "two", "three"].iter().enumerate() {
        let out = env.chat(
            model,
            ["--auto"],
            &format!("CALL echo {name} > {name}.txt\n"),
        );
        assert_code(&out, 0);
        assert_eq!(env.status()["turns"], i as u64 + 1);
    }
}

fn exists(env: &TestEnv, name: &str) -> bool {
    env.work.join(name).exists()
}

#[test]
fn both_halves_go_back_to_before_the_message_and_give_back_its_prompt() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    three_messages(&env, &model);
    let out = env.run(["rewind", "--to", "2", "--json"]);
    assert_code(&out, 0);
    let done = json_out(&out);
    assert_eq!(done["prompt"], "CALL echo two > two.txt", "{done}");
    assert_eq!(done["code"], "restored", "{done}");
    assert_eq!(done["conversation"], "rolled back", "{done}");
    assert!(exists(&env, "one.txt"));
    assert!(!exists(&env, "two.txt") && !exists(&env, "three.txt"));
    let st = env.status();
    assert_eq!(st["turns"], 1, "{st}");
    // The conversation goes on from there: the model sees one turn before.
    let out = env.chat(&model, ["--auto"], "again\n");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[turns seen: 2]"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn code_only_and_conversation_only_leave_the_other_half_alone() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    three_messages(&env, &model);
    let out = env.run(["rewind", "--to", "1", "--code", "--yes"]);
    assert_code(&out, 0);
    assert!(!exists(&env, "three.txt") && exists(&env, "two.txt"));
    assert_eq!(env.status()["turns"], 3);

    let out = env.run(["rewind", "--to", "1", "--conversation"]);
    assert_code(&out, 0);
    assert!(exists(&env, "two.txt"), "files untouched");
    assert_eq!(env.status()["turns"], 2);
}

#[test]
fn a_message_that_is_not_there_is_a_clear_error_and_changes_nothing() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    three_messages(&env, &model);
    let out = env.run(["rewind", "--to", "9", "--both"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("no message 9"), "{}", stderr(&out));
    assert!(exists(&env, "three.txt"));
    assert_eq!(env.status()["turns"], 3);
    // The first message has no checkpoint before it: the conversation
    // cannot go back before it (the files are not touched either).
    let out = env.run(["rewind", "--to", "3", "--conversation"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("this conversation's first"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.status()["turns"], 3);
    assert!(exists(&env, "one.txt"));
    // Flags that make no sense together are a usage error.
    let out = env.run(["rewind", "--to", "1", "--code", "--conversation"]);
    assert_code(&out, 2);
    let out = env.run(["rewind", "3", "--to", "1"]);
    assert_code(&out, 2);
}

#[test]
fn compact_from_n_summarizes_that_message_and_what_follows_and_keeps_the_rest() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for name in ["alpha", "bravo", "charlie"] {
        let out = env.chat(&model, ["--auto"], &format!("message {name}\n"));
        assert_code(&out, 0);
    }
    let out = env.chat(&model, ["compact", "--from", "9"], "");
    assert_code(&out, 1);
    assert!(stderr(&out).contains("no message 9"), "{}", stderr(&out));
    let out = env.chat(&model, ["compact", "--from", "2"], "");
    assert_code(&out, 0);
    let summary = model.requests().last().unwrap().body.to_string();
    assert!(summary.contains("message bravo"), "{summary}");
    assert!(!summary.contains("message alpha"), "{summary}");
    assert_eq!(env.status()["turns"], 3);
}

/// Where undo is off (the root folder here) there are no snapshots to
/// number messages by: the conversation's answers number them.
#[test]
fn compact_from_n_works_where_undo_is_off() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for name in ["alpha", "bravo", "charlie"] {
        let out = env.chat(&model, ["-C", "/", "--auto"], &format!("message {name}\n"));
        assert_code(&out, 0);
    }
    let out = env.chat(&model, ["-C", "/", "compact", "--from", "4"], "");
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no message 4 of this conversation"),
        "{}",
        stderr(&out)
    );
    let out = env.chat(&model, ["-C", "/", "compact", "--from", "2"], "");
    assert_code(&out, 0);
    let summary = model.requests().last().unwrap().body.to_string();
    assert!(summary.contains("message bravo"), "{summary}");
    assert!(summary.contains("message charlie"), "{summary}");
    assert!(!summary.contains("message alpha"), "{summary}");
    // The next message carries alpha word for word, and the summary.
    let out = env.chat(&model, ["-C", "/", "--auto"], "message delta\n");
    assert_code(&out, 0);
    let next = model.requests().last().unwrap().body.to_string();
    assert!(next.contains(r#""content":"message alpha""#), "{next}");
    assert!(next.contains("[agentx handoff]"), "{next}");
    assert!(
        !next.contains(r#""content":"message bravo""#),
        "bravo was sent as it was, not summarized: {next}"
    );
}

/// agentd itself refuses to summarize from past the transcript or from
/// inside a turn (any gRPC client can ask), and changes nothing.
#[test]
fn summarizing_from_past_the_transcript_or_inside_a_turn_is_refused() {
    use agentx_shared::proto::{ApprovalPolicy, Resolve, TurnStart, turn_event};
    let env = TestEnv::new();
    let model = FakeModel::start();
    for name in ["alpha", "bravo"] {
        let out = env.chat(&model, ["--auto"], &format!("message {name}\n"));
        assert_code(&out, 0);
    }
    let before = model.requests().len();
    let session = env.status()["session_id"].as_str().unwrap().to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (keep, says) in [
        (1000, "the conversation has"),
        (1, "not where a turn ended"),
    ] {
        let start = TurnStart {
            session_id: session.clone(),
            resolve: Resolve::Compact as i32,
            compact_after_items: keep,
            ..env.turn_start(&model, "", ApprovalPolicy::Never)
        };
        let error = runtime.block_on(async {
            let (_tx, mut events) = agentx_tests::open_turn(&env.socket(), start).await;
            loop {
                match events.message().await {
                    Ok(Some(event)) => {
                        if let Some(turn_event::Event::Finished(f)) = event.event {
                            break f.error;
                        }
                    }
                    Ok(None) => break "the turn ended without a finish".to_owned(),
                    Err(status) => break status.message().to_owned(),
                }
            }
        });
        assert!(error.contains(says), "{keep}: {error}");
    }
    assert_eq!(model.requests().len(), before);
    assert_eq!(env.status()["turns"], 2);
}
