//! Lines identified by content against a real PostgreSQL
//! cluster: a rollback on one machine and a turn on another make a fork,
//! never an interleaved line; a turn still running elsewhere is not pulled;
//! a pull reads one snapshot; after a pull the model sees what was pulled,
//! with either provider.

use std::time::{Duration, Instant};

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{machine, records, said, shared, transaction_in_two_steps};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

/// What the user said in the current conversation of `env`, as its own
/// copy holds it (`agentx export` of the conversation).
fn local_said(env: &TestEnv, id: &str) -> Vec<String> {
    let out = env.run(["export", id, "--format", "json"]);
    assert_code(&out, 0);
    let doc = json_out(&out);
    doc["conversation"]["transcript"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc}"))
        .iter()
        .filter(|i| i["type"] == "user")
        .filter_map(|i| i["text"].as_str().map(str::to_owned))
        .collect()
}

/// One turn; what it printed, stdout then stderr.
fn say(env: &TestEnv, model: &FakeModel, text: &str) -> String {
    let out = env.chat(model, ["--approval", "never"], &format!("{text}\n"));
    assert_code(&out, 0);
    format!("{}{}", stdout(&out), stderr(&out))
}

#[test]
fn a_rollback_on_one_machine_and_a_turn_on_another_make_a_fork_never_an_interleaved_line() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("l_rollback");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    say(&a, &model, "one");
    say(&a, &model, "two");
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    // B takes the conversation: both share its 4 records.
    assert_code(&b.chat(&model, ["resume", id.as_str()], ""), 0);
    assert_eq!(b.status()["transcript_items"], 4);

    // A goes back to the first turn and says something else: the server
    // again holds 4 records, with other content.
    // (Checkpoints are numbered newest first: 2 is the first turn's.)
    assert_code(&a.run(["rollback", "2"]), 0);
    say(&a, &model, "two-prime");
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(said(pg, "l_rollback", &id), ["one", "two-prime"]);

    // B goes on from its old line: its turn must not land after A's.
    let out = say(&b, &model, "three");
    assert!(out.contains("kept as a fork"), "{out}");
    assert!(out.contains("echo: three [turns seen: 3]"), "{out}");
    let synced = b.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(synced["remote"]["pending"], 0, "{synced}");
    assert_eq!(said(pg, "l_rollback", &id), ["one", "two-prime"]);
    let fork = b.status()["session_id"].as_str().unwrap().to_owned();
    assert_ne!(fork, id);
    assert_eq!(said(pg, "l_rollback", &fork), ["one", "two", "three"]);
    let (n, distinct, end) = records(pg, "l_rollback", &fork);
    assert_eq!((n, distinct, end), (6, 6, 6));
    // B's copy of the conversation is the server's, not its old line.
    assert_eq!(local_said(&b, &id), ["one", "two-prime"]);

    // A's next turn goes on its own line, with nothing of B's in it.
    let out = say(&a, &model, "four");
    assert!(out.contains("echo: four [turns seen: 3]"), "{out}");
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(said(pg, "l_rollback", &id), ["one", "two-prime", "four"]);
    assert_eq!(local_said(&a, &id), ["one", "two-prime", "four"]);
}

#[test]
fn a_turn_still_running_on_another_machine_is_not_pulled_as_if_finished() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("l_running");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    say(&a, &model, "one");
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();

    // A's next turn runs a 6 s tool: its user message and the call are
    // committed on A long before the answer.
    let running = a.chat_command(&model, ["--auto"], "CALL sleep 6\n");
    let give_up = Instant::now() + Duration::from_secs(20);
    while a.status()["transcript_items"].as_i64().unwrap_or(0) < 4 {
        assert!(
            Instant::now() < give_up,
            "A's turn never committed its call"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Everything A has is pushed now; the unfinished turn stays on A.
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(said(pg, "l_running", &id), ["one"]);
    assert_eq!(
        pg.count(
            "l_running",
            &format!("SELECT turns::int8 FROM conversations WHERE id = '{id}'")
        ),
        1
    );
    // B opening it meanwhile gets the finished turn only.
    assert_code(&b.chat(&model, ["resume", id.as_str()], ""), 0);
    assert_eq!(local_said(&b, &id), ["one"]);
    assert_eq!(b.status()["transcript_items"], 2);

    // Once A's turn is over it goes out whole, and B's next turn has it.
    assert_code(&running.wait_with_output().unwrap(), 0);
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(said(pg, "l_running", &id), ["one", "CALL sleep 6"]);
    let out = say(&b, &model, "after");
    assert!(!out.contains("fork"), "{out}");
    assert_eq!(local_said(&b, &id), ["one", "CALL sleep 6", "after"]);
    let st = b.status();
    assert_eq!(st["turns"], 3, "{st}");
}

/// A: "hello from A"; B resumes it and says "hello from B"; A: "again A".
/// A's request must carry B's turn: the model sees three turns.
fn the_model_sees_the_pulled_turn(db: &str, provider: Option<&str>) {
    let Some(pg) = shared() else { return };
    let url = pg.new_db(db);
    let mut a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let mut b = machine("machine-b", "git@github.com:acme/app.git", &url);
    if let Some(provider) = provider {
        for env in [&mut a, &mut b] {
            env.extra_env
                .push(("AGENTX_PROVIDER".into(), provider.into()));
        }
    }
    let model = FakeModel::start();
    say(&a, &model, "hello from A");
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    let out = b.chat(
        &model,
        ["resume", id.as_str(), "--approval", "never"],
        "hello from B\n",
    );
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: hello from B [turns seen: 2]"),
        "{}",
        stdout(&out)
    );
    assert_eq!(b.sync()["reached"], true);
    let out = say(&a, &model, "again A");
    assert!(out.contains("echo: again A [turns seen: 3]"), "{out}");
    assert_eq!(
        local_said(&a, &id),
        ["hello from A", "hello from B", "again A"]
    );
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(
        said(pg, db, &id),
        ["hello from A", "hello from B", "again A"]
    );
}

#[test]
fn after_a_pull_the_model_sees_what_was_pulled_responses() {
    the_model_sees_the_pulled_turn("l_sees_responses", None);
}

#[test]
fn after_a_pull_the_model_sees_what_was_pulled_chat_completions() {
    the_model_sees_the_pulled_turn("l_sees_chat", Some("chat"));
}

#[test]
fn a_pull_reads_the_row_and_its_records_as_one_snapshot() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("l_torn");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    say(&a, &model, "one");
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(&b.chat(&model, ["resume", id.as_str()], ""), 0);
    say(&a, &model, "two");
    assert_eq!(a.sync()["reached"], true);

    // Another machine's push of a third turn is under way: it holds the
    // records table while it writes, and commits the row and its records
    // together once B's pull is reading.
    let third = format!(
        "INSERT INTO records (conversation_id, seq, at, item, machine, chain) VALUES
           ('{id}', 4, now(), '{{\"type\":\"user\",\"text\":\"three\"}}', 'machine-c', 'c4'),
           ('{id}', 5, now(), '{{\"type\":\"assistant\",\"text\":\"echo: three\"}}', 'machine-c', 'c5');
         UPDATE conversations SET records = 6, turns = 3, head = 'c5', machine = 'machine-c',
                checkpoints = checkpoints || jsonb_build_array(jsonb_build_object(
                    'seq', 6, 'turns', 3, 'created_at', 0, 'usage', '{{}}'::jsonb,
                    'last_user', 'three', 'last_assistant', 'echo: three'))
          WHERE id = '{id}';
         COMMIT;"
    );
    let (go, holder) = transaction_in_two_steps(
        url.clone(),
        "BEGIN; LOCK TABLE records IN ACCESS EXCLUSIVE MODE",
        third,
    );
    let turn = b.chat_command(&model, ["--approval", "never"], "four\n");
    let give_up = Instant::now() + Duration::from_secs(30);
    while pg.count(
        "l_torn",
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         WHERE NOT l.granted AND c.relname = 'records'",
    ) == 0
    {
        assert!(Instant::now() < give_up, "B's pull never read the records");
        std::thread::sleep(Duration::from_millis(10));
    }
    go.send(()).unwrap();
    holder.join().unwrap();
    let out = turn.wait_with_output().unwrap();
    assert_code(&out, 0);
    // B took the third turn with its own row: every user message of its
    // copy is a turn with its checkpoint, so each can be rolled back to.
    assert_eq!(local_said(&b, &id), ["one", "two", "three", "four"]);
    let st = b.status();
    assert_eq!(st["turns"], 4, "{st}");
    let out = b.run(["checkpoints", "--json"]);
    assert_code(&out, 0);
    let checkpoints = json_out(&out);
    let ends: Vec<i64> = checkpoints
        .as_array()
        .unwrap_or_else(|| panic!("{checkpoints}"))
        .iter()
        .filter_map(|c| c["transcript_len"].as_i64())
        .collect();
    assert_eq!(ends, [8, 6, 4, 2], "{checkpoints}");
}
