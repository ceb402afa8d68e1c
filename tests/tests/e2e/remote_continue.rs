//! Continuing conversations across machines through the remote store
//! against a real PostgreSQL cluster (tests/src/postgres.rs):
//! started on A, continued on B (the model sees everything), back on A;
//! agentd killed mid-push; two machines going on from one point (one
//! fork, nothing interleaved); 50 one-shots; /clear deleting both copies.

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{lock_records, machine, records, shared, texts};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

/// Points `env`'s agentd at another server (it reads the URL at start).
fn set_url(env: &mut TestEnv, url: &str) {
    env.kill_daemons();
    for (k, v) in &mut env.extra_env {
        if k == "AGENTX_REMOTE_URL" {
            *v = url.to_owned();
        }
    }
}

#[test]
fn a_conversation_started_on_a_continues_on_b_with_its_whole_context_and_back_on_a() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_continue");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "https://github.com/acme/app", &url);
    let model_a = FakeModel::start();
    let model_b = FakeModel::start();
    assert_code(
        &a.chat(&model_a, ["--approval", "never"], "first on a\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    let st = a.status();
    let id = st["session_id"].as_str().unwrap().to_owned();
    let a_response = st["response_id"].as_str().unwrap().to_owned();

    // B lists it as remote only, and continues it by its number.
    let listed = json_out(&b.run(["sessions", "--json"]));
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["where"], "remote", "{listed}");
    let out = b.chat(
        &model_b,
        ["resume", "1", "--approval", "never"],
        "then on b\n",
    );
    assert_code(&out, 0);
    // B's model server does not know A's chain: the saved id was tried
    // first, then the whole transcript was sent.
    assert!(
        stdout(&out).contains("echo: then on b [turns seen: 2]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let requests = model_b.requests();
    assert_eq!(
        requests[0].body["previous_response_id"],
        a_response.as_str()
    );
    let last = &requests.last().unwrap().body;
    assert!(last["previous_response_id"].is_null(), "{last}");
    let input = last["input"].to_string();
    assert!(input.contains("first on a"), "{input}");
    assert!(input.contains("echo: first on a"), "{input}");
    let st = b.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    assert_eq!(st["turns"], 2, "{st}");
    assert_eq!(st["title"], "first on a", "{st}");
    assert!(st["checkpoints"].as_u64() >= Some(2), "{st}");
    assert_eq!(b.sync()["reached"], true);
    let listed = json_out(&b.run(["sessions", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["where"], "both", "{listed}");

    // Back on A: B's turn is pulled before A's next one.
    model_a.forget_response_ids();
    let out = a.chat(&model_a, ["--approval", "never"], "back on a\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: back on a [turns seen: 3]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let b_response = st["response_id"].as_str().unwrap();
    let requests = model_a.requests();
    let first_back = &requests[requests.len() - 2].body;
    assert_eq!(first_back["previous_response_id"], b_response);
    let input = requests.last().unwrap().body["input"].to_string();
    assert!(input.contains("then on b"), "{input}");
    assert_eq!(a.sync()["reached"], true);
    let st = a.status();
    assert_eq!(st["turns"], 3, "{st}");
    let items = st["transcript_items"].as_i64().unwrap();
    assert_eq!(records(pg, "c_continue", &id), (items, items, items));
    let said: Vec<String> = texts(pg, "c_continue", &id);
    let users: Vec<&str> = said
        .iter()
        .map(String::as_str)
        .filter(|t| !t.starts_with("echo"))
        .collect();
    assert_eq!(users, ["first on a", "then on b", "back on a"]);
    let machines = pg.query(
        "c_continue",
        &format!(
            "SELECT DISTINCT machine FROM records WHERE conversation_id = '{id}' ORDER BY machine"
        ),
    );
    let machines: Vec<String> = machines.iter().map(|r| r.get(0)).collect();
    assert_eq!(machines, ["machine-a", "machine-b"]);
}

#[test]
fn two_machines_going_on_from_one_point_make_exactly_one_fork() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_fork");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let mut b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(
        &a.chat(&model, ["--approval", "never"], "common start\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    // B takes the conversation (opening it pulls it; no message).
    let out = b.chat(&model, ["resume", id.as_str()], "");
    assert_code(&out, 0);
    assert_eq!(b.status()["session_id"], id.as_str());

    // B goes on without reaching the server: one line says so.
    set_url(&mut b, "postgresql://agentx@127.0.0.1:1/nowhere");
    let out = b.chat(&model, ["--approval", "never"], "b's own turn\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("echo: b's own turn [turns seen: 2]"));
    let said = stderr(&out);
    let notes: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("remote store was not reached"))
        .collect();
    assert_eq!(notes.len(), 1, "{said}");
    // Meanwhile A goes on from the same point, and pushes first.
    assert_code(
        &a.chat(&model, ["--approval", "never"], "a's second turn\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    let a_items = a.status()["transcript_items"].as_i64().unwrap();

    // B is back: its push fails the sequence check and its turns become
    // a fork; the user sees one line.
    set_url(&mut b, &url);
    let out = b.run(["sync", "--json"]);
    assert_code(&out, 0);
    let synced = json_out(&out);
    let forks = synced["forks"].as_array().unwrap();
    assert_eq!(forks.len(), 1, "{synced}");
    assert_eq!(forks[0]["id"], id.as_str());
    assert_eq!(forks[0]["machine"], "machine-a");
    let fork_id = forks[0]["fork_id"].as_str().unwrap().to_owned();
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("kept as a fork"), "{said}");

    let check = || {
        let rows = pg.query(
            "c_fork",
            "SELECT id, title, forked_from->>'id' FROM conversations ORDER BY id",
        );
        assert_eq!(rows.len(), 2, "exactly the conversation and one fork");
        let fork = rows
            .iter()
            .find(|r| r.get::<_, String>(0) == fork_id)
            .unwrap();
        assert_eq!(fork.get::<_, String>(1), "common start (fork on machine-b)");
        assert_eq!(
            fork.get::<_, Option<String>>(2).as_deref(),
            Some(id.as_str())
        );
        // Never interleaved: each line holds its own turns only.
        let theirs = texts(pg, "c_fork", &id);
        assert!(theirs.iter().any(|t| t == "a's second turn"), "{theirs:?}");
        assert!(!theirs.iter().any(|t| t.contains("b's own")), "{theirs:?}");
        assert_eq!(records(pg, "c_fork", &id), (a_items, a_items, a_items));
        let ours: Vec<String> = texts(pg, "c_fork", &fork_id)
            .into_iter()
            .filter(|t| !t.starts_with("echo"))
            .collect();
        assert!(
            ours.starts_with(&["common start".into(), "b's own turn".into()]),
            "{ours:?}"
        );
        assert!(!ours.iter().any(|t| t.starts_with("a's")), "{ours:?}");
        let (n, distinct, end) = records(pg, "c_fork", &fork_id);
        assert_eq!((n, distinct), (end, end));
    };
    check();
    // B keeps both: the conversation with A's turns, and its own line,
    // which this folder continues.
    let st = b.status();
    assert_eq!(st["session_id"], fork_id.as_str(), "{st}");
    let out = b.chat(&model, ["--approval", "never"], "b goes on\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: b goes on [turns seen: 3]"),
        "{}",
        stdout(&out)
    );
    // The turn that landed in the fork says so, once.
    let said = stderr(&out);
    let told: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("kept as a fork"))
        .collect();
    assert_eq!(told.len(), 1, "{said}");
    assert!(told[0].contains(&fork_id), "{said}");
    let out = b.chat(&model, ["--approval", "never"], "b again\n");
    assert!(!stderr(&out).contains("kept as a fork"), "{}", stderr(&out));
    let out = b.chat(&model, ["resume", id.as_str()], "");
    assert_code(&out, 0);
    let st = b.status();
    assert_eq!(st["session_id"], id.as_str());
    assert_eq!(st["transcript_items"], a_items, "{st}");
    // Nothing more comes of it on either machine.
    assert_eq!(b.sync()["forks"], Value::Array(Vec::new()));
    assert_eq!(a.sync()["forks"], Value::Array(Vec::new()));
    check();
    // A lists B's fork as remote, under its marked title.
    let listed = json_out(&a.run(["sessions", "--json"]));
    let fork = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == fork_id.as_str())
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(fork["where"], "remote", "{listed}");
    assert_eq!(fork["machine"], "machine-b", "{listed}");
    assert_eq!(fork["title"], "common start (fork on machine-b)");
}

#[test]
fn agentd_killed_mid_push_loses_nothing_and_duplicates_nothing() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_kill");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "one\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();

    // The next push blocks inside its transaction; agentd is killed there.
    let (release, holder) = lock_records(url.clone());
    assert_code(&a.chat(&model, ["--approval", "never"], "two\n"), 0);
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pg.count(
        "c_kill",
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         WHERE NOT l.granted AND c.relname = 'records'",
    ) == 0
    {
        assert!(
            std::time::Instant::now() < give_up,
            "agentd's push never reached the locked records table"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    a.kill_daemons();
    release.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(a.sync()["reached"], true);
    let items = a.status()["transcript_items"].as_i64().unwrap();
    assert_eq!(items, 4);
    assert_eq!(records(pg, "c_kill", &id), (items, items, items));

    // Killed after a push committed but before agentd recorded it: the
    // outbox still says the older position, and the push is repeated.
    let pushed = a.home.join(format!("remote/pushed/{id}.json"));
    let before = std::fs::read(&pushed).unwrap();
    assert_code(&a.chat(&model, ["--approval", "never"], "three\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let after = std::fs::read(&pushed).unwrap();
    assert_ne!(after, before);
    a.kill_daemons();
    std::fs::write(&pushed, &before).unwrap();
    let again = a.sync();
    assert_eq!(again["reached"], true, "{again}");
    assert_eq!(again["forks"], Value::Array(Vec::new()), "{again}");
    // The line check saw its own records on the server (the same chain)
    // and let the push through: no conflict was settled on the way.
    let log = std::fs::read_to_string(a.home.join("log").join("agentd.log")).unwrap();
    assert!(
        !log.contains("changed elsewhere since the last push"),
        "the repeated push was taken for another machine's: {log}"
    );
    // The push was repeated and recorded: by agentd's first pass at start
    // or by the one `sync` asked for (sync counts only its own pass's).
    let pushes = again["pushed_records"].as_i64().unwrap();
    assert!(pushes == 0 || pushes == 2, "{again}");
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read(&pushed).unwrap() != after {
        assert!(
            std::time::Instant::now() < give_up,
            "the repeated push was never recorded"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let items = a.status()["transcript_items"].as_i64().unwrap();
    assert_eq!(items, 6);
    assert_eq!(records(pg, "c_kill", &id), (items, items, items));
    let users: Vec<String> = texts(pg, "c_kill", &id)
        .into_iter()
        .filter(|t| !t.starts_with("echo"))
        .collect();
    assert_eq!(users, ["one", "two", "three"]);
    assert_eq!(pg.count("c_kill", "SELECT count(*) FROM conversations"), 1);
}

#[test]
fn fifty_one_shots_with_the_remote_on_behave_as_before_and_stay_local() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_oneshots");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "interactive\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let children: Vec<_> = (0..50)
        .map(|i| a.chat_command(&model, ["exec".to_owned(), format!("prompt {i}")], ""))
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
        assert_eq!(
            stdout(&out),
            format!("echo: prompt {i} [turns seen: 2]\n"),
            "{}",
            stderr(&out)
        );
    }
    let left = json_out(&a.run(["oneshots", "--json"]));
    assert_eq!(left, Value::Array(Vec::new()));
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(
        pg.count("c_oneshots", "SELECT count(*) FROM conversations"),
        1
    );
    assert_eq!(pg.count("c_oneshots", "SELECT count(*) FROM records"), 2);
    let st = a.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    assert_eq!(st["turns"], 1, "{st}");
}

#[test]
fn clear_deletes_the_remote_copy_too_and_says_so() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_clear");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "doomed\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    assert_eq!(a.status()["remote_copy"], true);
    let out = a.chat(&model, Vec::<&str>::new(), "/clear\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!("cleared {id} here and on the remote store")),
        "{}",
        stdout(&out)
    );
    assert_eq!(pg.count("c_clear", "SELECT count(*) FROM conversations"), 0);
    assert_eq!(pg.count("c_clear", "SELECT count(*) FROM records"), 0);

    // With the server out of reach the copy goes once it is back.
    assert_code(&a.chat(&model, ["--approval", "never"], "doomed too\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let second = a.status()["session_id"].as_str().unwrap().to_owned();
    let mut a = a;
    set_url(&mut a, "postgresql://agentx@127.0.0.1:1/nowhere");
    let out = a.run(["clear", "--yes"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("its copy is deleted once it is back"),
        "{}",
        stdout(&out)
    );
    assert_eq!(pg.count("c_clear", "SELECT count(*) FROM conversations"), 1);
    set_url(&mut a, &url);
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(
        pg.count(
            "c_clear",
            &format!("SELECT count(*) FROM conversations WHERE id = '{second}'")
        ),
        0
    );
    // A conversation never kept remotely is cleared as before.
    let out = a.run(["clear", "--yes"]);
    assert_code(&out, 0);
    assert!(!stdout(&out).contains("remote"), "{}", stdout(&out));
}

#[test]
fn a_repl_still_on_the_conversation_continues_the_fork_and_says_so_once() {
    use std::io::{BufRead as _, Write as _};
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_redirect");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let mut b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(
        &a.chat(&model, ["--approval", "never"], "common start\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(&b.chat(&model, ["resume", id.as_str()], ""), 0);

    // B's REPL stays open on the conversation; its first turn is offline.
    set_url(&mut b, "postgresql://agentx@127.0.0.1:1/nowhere");
    let mut repl = b
        .agentx(["--approval", "never"])
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = repl.stdin.take().unwrap();
    let mut answers = std::io::BufReader::new(repl.stdout.take().unwrap()).lines();
    writeln!(input, "b one").unwrap();
    let answer = answers.next().unwrap().unwrap();
    assert_eq!(answer, "echo: b one [turns seen: 2]");
    // A goes on meanwhile; B's agentd comes back online and forks.
    assert_code(&a.chat(&model, ["--approval", "never"], "a two\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    set_url(&mut b, &url);
    let synced = b.sync();
    let fork_id = synced["forks"][0]["fork_id"].as_str().unwrap().to_owned();

    // The REPL's next message goes on with B's own line, the fork.
    writeln!(input, "b two").unwrap();
    drop(input);
    let answer = answers.next().unwrap().unwrap();
    assert_eq!(answer, "echo: b two [turns seen: 3]");
    let out = repl.wait_with_output().unwrap();
    assert_code(&out, 0);
    let said = stderr(&out);
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("kept as a fork"))
        .collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].contains(&fork_id), "{said}");
    assert_eq!(b.sync()["reached"], true);
    let ours: Vec<String> = texts(pg, "c_redirect", &fork_id);
    assert!(ours.iter().any(|t| t == "b two"), "{ours:?}");
    let theirs = texts(pg, "c_redirect", &id);
    assert!(!theirs.iter().any(|t| t.starts_with("b ")), "{theirs:?}");
    assert_eq!(
        pg.count("c_redirect", "SELECT count(*) FROM conversations"),
        2
    );
}

#[test]
fn a_turn_on_a_remote_conversation_goes_on_locally_when_the_server_is_silent() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_silent");
    let mut a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "kept\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    // A server that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    set_url(&mut a, &format!("postgresql://agentx@127.0.0.1:{port}/x"));
    let out = a.chat(&model, ["--approval", "never"], "still here\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: still here [turns seen: 2]\n");
    let said = stderr(&out);
    let notes: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("remote store was not reached"))
        .collect();
    assert_eq!(notes.len(), 1, "{said}");
    assert!(notes[0].contains("within 1500 ms"), "{said}");
    assert_eq!(a.status()["turns"], 2);
}

/// A remote store that fails while a remote-only conversation is pulled
/// fails the resume (exit 1) naming the remote store; agentd is fine and
/// is not blamed (exit 3, "lost the connection to agentd").
#[test]
fn a_remote_failure_while_resuming_exits_1_and_names_the_remote_store() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("c_resume_fails");
    let a = machine("machine-a", "git@github.com:acme/fails.git", &url);
    let b = machine("machine-b", "https://github.com/acme/fails", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "only on a\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    let listed = json_out(&b.run(["sessions", "--json"]));
    assert_eq!(listed[0]["where"], "remote", "{listed}");

    pg.execute(
        "c_resume_fails",
        "ALTER TABLE records RENAME TO records_away",
    );
    let out = b.chat(&model, ["resume", id.as_str()], "then on b\n");
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("remote store"), "{said}");
    assert!(!said.contains("lost the connection to agentd"), "{said}");
    // agentd is fine: it still answers.
    assert_code(&b.run(["status", "--json"]), 0);
    pg.execute(
        "c_resume_fails",
        "ALTER TABLE records_away RENAME TO records",
    );
}

#[test]
fn a_clear_the_server_missed_is_retried_until_its_copy_is_gone_even_unrecorded() {
    let Some(pg) = shared() else { return };
    pg.new_db("c_clear_retry");
    let hole = agentx_tests::blackhole::Blackhole::start(
        format!("127.0.0.1:{}", pg.port).parse().unwrap(),
    );
    let url = format!("postgresql://agentx@127.0.0.1:{}/c_clear_retry", hole.port);
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "doomed\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    // The tombstone cannot be written: its directory's name is taken.
    let stones = a.home.join("remote").join("deleted");
    let _ = std::fs::remove_dir(&stones);
    std::fs::write(&stones, "not a directory").unwrap();

    hole.swallow();
    let out = a.run(["clear", "--yes"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("its copy is deleted once it is back"),
        "{}",
        stdout(&out)
    );
    let st = json_out(&a.run(["daemon", "status", "--json"]));
    assert!(st["remote"]["pending"].as_u64() >= Some(1), "{st}");
    hole.heal();
    // Nothing else happens here: no turn, no sync. The pusher alone
    // deletes the copy once the server answers again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
    let gone = format!("SELECT count(*) FROM conversations WHERE id = '{id}'");
    while pg.count("c_clear_retry", &gone) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the server still keeps the cleared conversation"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let st = json_out(&a.run(["daemon", "status", "--json"]));
    assert_eq!(st["remote"]["pending"], 0, "{st}");
}
