//! The remote store against a real PostgreSQL cluster started by
//! the harness (tests/src/postgres.rs): pushes after turns, no duplicate
//! records on a re-push, the server down during turns and back, listings
//! merged across two "machines" (profiles) sharing a git origin, a silent
//! server never making listing hang, and the password kept out of files.

use std::time::{Duration, Instant};

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{Cluster, machine, records, shared};
use agentx_tests::{TEST_KEY, TestEnv, assert_code, json_out, stderr, stdout, wait_status};

#[test]
fn turns_are_pushed_with_their_metadata_and_a_repush_adds_no_duplicate() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_push");
    let env = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    let out = env.chat(
        &model,
        ["--approval", "never"],
        "first question\nsecond question\n",
    );
    assert_code(&out, 0);
    assert!(stdout(&out).contains("[turns seen: 2]"), "{}", stdout(&out));

    let synced = env.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    let st = env.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    assert_eq!(st["remote"]["pending"], 0, "{st}");
    let id = st["session_id"].as_str().unwrap().to_owned();
    let items = st["transcript_items"].as_i64().unwrap();
    assert!(items >= 4, "{st}");
    assert_eq!(records(pg, "t_push", &id), (items, items, items));

    let rows = pg.query(
        "t_push",
        "SELECT project, agent, machine, title, turns, records, response_id FROM conversations",
    );
    assert_eq!(rows.len(), 1);
    let project: String = rows[0].get(0);
    assert_eq!(project, "github.com/acme/app");
    assert_eq!(rows[0].get::<_, String>(1), "default");
    assert_eq!(rows[0].get::<_, String>(2), "machine-a");
    assert_eq!(rows[0].get::<_, String>(3), "first question");
    assert_eq!(rows[0].get::<_, i32>(4), 2);
    assert_eq!(rows[0].get::<_, i64>(5), items);
    assert_eq!(
        rows[0].get::<_, Option<String>>(6).as_deref(),
        st["response_id"].as_str()
    );
    // What the user said is there, in order; the API key is not.
    let texts: Vec<String> = pg
        .query(
            "t_push",
            &format!("SELECT item::text FROM records WHERE conversation_id = '{id}' ORDER BY seq"),
        )
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(texts[0].contains("first question"), "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains(TEST_KEY)));

    // Forget what was pushed and restart agentd: everything is pushed
    // again, and the server keeps exactly one copy of each record.
    env.kill_daemons();
    std::fs::remove_dir_all(env.home.join("remote/pushed")).unwrap();
    let again = env.sync();
    assert_eq!(again["reached"], true, "{again}");
    // Pushed again by agentd's first pass at start or by the pass `sync`
    // asked for (sync counts only its own pass's): which one is timing.
    let pushes = again["pushed_records"].as_i64().unwrap();
    assert!(pushes == 0 || pushes == items, "{again}");
    let pushed = env.home.join(format!("remote/pushed/{id}.json"));
    let recorded: Value = serde_json::from_slice(&std::fs::read(&pushed).unwrap()).unwrap();
    assert_eq!(recorded["items"].as_i64(), Some(items), "{recorded}");
    assert_eq!(records(pg, "t_push", &id), (items, items, items));
    assert_eq!(pg.count("t_push", "SELECT count(*) FROM conversations"), 1);
    // The schema is versioned.
    assert!(pg.count("t_push", "SELECT max(version)::int8 FROM schema_version") >= 2);
    assert_eq!(
        pg.count("t_push", "SELECT max(version)::int8 FROM schema_version"),
        pg.count("t_push", "SELECT count(*) FROM schema_version")
    );
}

#[test]
fn turns_succeed_while_the_server_is_down_and_are_pushed_once_it_is_back() {
    let Some(pg) = Cluster::start() else { return };
    let url = pg.new_db("t_down");
    let env = machine("machine-a", "https://github.com/acme/app", &url);
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "before the outage\n"),
        0,
    );
    assert_eq!(env.sync()["reached"], true);

    pg.stop();
    let started = Instant::now();
    let out = env.chat(&model, Vec::<&str>::new(), "during the outage\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("during the outage"),
        "{}",
        stdout(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let st = wait_status(&env, |s| {
        s["remote"]["pending"].as_u64() >= Some(1) && !s["remote"]["last_error"].is_null()
    });
    // The server is down: nothing reaches it, and the state says so.
    assert_eq!(st["remote"]["state"], "unreachable", "{st}");
    let out = env.run(["sync", "--wait-ms", "3000"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("unreachable"), "{}", stderr(&out));
    // `agentx daemon status` shows the remote too.
    let daemon = json_out(&env.run(["daemon", "status", "--json"]));
    assert_eq!(daemon["remote"]["state"], "unreachable", "{daemon}");
    assert!(daemon["remote"]["pending"].as_u64() >= Some(1), "{daemon}");
    let error = daemon["remote"]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("127.0.0.1:{}", pg.port)),
        "{daemon}"
    );
    let human = env.run(["daemon", "status"]);
    assert_code(&human, 0);
    let text = stdout(&human);
    assert!(text.contains("remote:   unreachable ("), "{text}");
    assert!(text.contains("last error: "), "{text}");

    // agentd dies too; the outbox survives it.
    env.kill_daemons();
    pg.restart();
    let synced = env.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    let st = env.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    let daemon = json_out(&env.run(["daemon", "status", "--json"]));
    assert_eq!(daemon["remote"]["state"], "synced", "{daemon}");
    assert_eq!(daemon["remote"]["pending"], 0, "{daemon}");
    assert!(daemon["remote"]["last_error"].is_null(), "{daemon}");
    let text = stdout(&env.run(["daemon", "status"]));
    assert!(
        text.contains("remote:   synced (0 pending) postgresql://agentx@127.0.0.1"),
        "{text}"
    );
    assert!(!text.contains("last error"), "{text}");
    let id = st["session_id"].as_str().unwrap();
    let items = st["transcript_items"].as_i64().unwrap();
    assert_eq!(records(&pg, "t_down", id), (items, items, items));
    let turns = pg.count("t_down", "SELECT turns::int8 FROM conversations");
    assert_eq!(turns, 2);
}

#[test]
fn a_second_machine_lists_the_first_machines_conversation_as_remote() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_list");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "https://github.com/acme/app.git", &url);
    // Another project on the same server stays out of the listing.
    let other = machine("machine-c", "git@github.com:acme/other.git", &url);
    let model = FakeModel::start();
    assert_code(
        &a.chat(&model, ["--approval", "never"], "started on a\n"),
        0,
    );
    assert_code(
        &other.chat(&model, ["--approval", "never"], "elsewhere\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    assert_eq!(other.sync()["reached"], true);
    let a_id = a.status()["session_id"].as_str().unwrap().to_owned();

    let listed = json_out(&b.run(["sessions", "--json"]));
    let list = listed.as_array().unwrap();
    assert_eq!(list.len(), 1, "{listed}");
    assert_eq!(list[0]["id"], a_id.as_str());
    assert_eq!(list[0]["where"], "remote");
    assert_eq!(list[0]["machine"], "machine-a");
    assert_eq!(list[0]["title"], "started on a");
    assert_eq!(list[0]["turns"], 1);
    let human = b.run(["sessions"]);
    assert_code(&human, 0);
    assert!(stdout(&human).contains("remote:"), "{}", stdout(&human));

    // B's own conversation, once pushed, is listed on both machines.
    assert_code(
        &b.chat(&model, ["--approval", "never"], "started on b\n"),
        0,
    );
    assert_eq!(b.sync()["reached"], true);
    let b_id = b.status()["session_id"].as_str().unwrap().to_owned();
    let listed = json_out(&b.run(["sessions", "--json"]));
    let list = listed.as_array().unwrap();
    assert_eq!(list.len(), 2, "{listed}");
    assert_eq!(list[0]["id"], b_id.as_str(), "newest first: {listed}");
    assert_eq!(list[0]["where"], "both");
    assert_eq!(list[0]["machine"], "machine-b");
    assert_eq!(list[1]["where"], "remote");
    let listed = json_out(&a.run(["sessions", "--json"]));
    let wheres: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["where"].as_str().unwrap()))
        .collect();
    assert_eq!(wheres, [(b_id.as_str(), "remote"), (a_id.as_str(), "both")]);
}

#[test]
fn listing_with_a_silent_remote_answers_within_its_bound() {
    // A server that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let env = machine(
        "machine-a",
        "git@github.com:acme/app.git",
        &format!("postgresql://agentx@127.0.0.1:{port}/x"),
    );
    let model = FakeModel::start();
    let started = Instant::now();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "local first\n"),
        0,
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let started = Instant::now();
    let out = env.run(["sessions", "--json"]);
    let took = started.elapsed();
    let list = json_out(&out);
    assert!(took < Duration::from_millis(2500), "listing took {took:?}");
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["where"], "local");
    let note = stderr(&out);
    assert_eq!(note.lines().count(), 1, "{note}");
    assert!(note.contains("remote store was not reached"), "{note}");

    // Search too: this machine's hits, and one line saying the remote
    // was not reached within its bound (it never answers).
    let out = env.search_until(&["local"], |hits| hits.len() == 1);
    let hits = json_out(&out);
    assert_eq!(hits[0]["where"], "local");
    let note = stderr(&out);
    let note: Vec<&str> = note.lines().filter(|l| l.contains("remote")).collect();
    assert_eq!(note.len(), 1, "{note:?}");
    let note = note[0];
    assert!(
        note.contains("remote store was not reached within"),
        "{note}"
    );

    // Once the pusher's connection attempt runs out (it never answers).
    let st = wait_status(&env, |s| s["remote"]["state"] == "unreachable");
    assert_eq!(st["remote"]["state"], "unreachable", "{st}");
    assert!(st["remote"]["pending"].as_u64() >= Some(1), "{st}");
    let out = env.run(["sync", "--json", "--wait-ms", "500"]);
    assert_code(&out, 1);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["reached"],
        false
    );
}

#[test]
fn the_password_stays_out_of_the_profile_logs_and_messages() {
    let Some(pg) = shared() else { return };
    pg.create_db("t_secret");
    const PASSWORD: &str = "pw-Secret-8d1f2c";
    // Trust authentication accepts any password: this one is sent.
    let url = format!(
        "postgresql://agentx:{PASSWORD}@127.0.0.1:{}/t_secret",
        pg.port
    );
    let env = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "keep it secret\n"),
        0,
    );
    let synced = env.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    let st = env.status();
    assert!(!st.to_string().contains(PASSWORD), "{st}");
    assert_eq!(
        st["remote"]["url"],
        format!("postgresql://agentx@127.0.0.1:{}/t_secret", pg.port)
    );

    // A server that is not there: the error names it, not the password.
    let mut down = machine(
        "machine-a",
        "git@github.com:acme/app.git",
        &format!("postgresql://agentx:{PASSWORD}@127.0.0.1:1/nowhere"),
    );
    down.extra_env.push(("RUST_LOG".into(), "debug".into()));
    assert_code(&down.chat(&model, ["--approval", "never"], "hello\n"), 0);
    let out = down.run(["sync"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("127.0.0.1:1"), "{}", stderr(&out));
    let st = down.status();
    assert!(!st.to_string().contains(PASSWORD), "{st}");

    // A server that does not speak the TLS asked for: the error says so,
    // redacted.
    let far = machine(
        "far",
        "git@github.com:acme/app.git",
        &format!(
            "postgresql://u:{PASSWORD}@127.0.0.1:{}/t_secret?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            pg.port
        ),
    );
    assert_code(&far.chat(&model, ["--approval", "never"], "hi\n"), 0);
    let st = wait_status(&far, |s| s["remote"]["last_error"].as_str() != Some(""));
    assert_eq!(st["remote"]["state"], "pending", "{st}");
    let error = st["remote"]["last_error"].as_str().unwrap();
    assert!(error.contains("sslrootcert /nonexistent/ca.pem"), "{error}");
    assert!(!error.contains(PASSWORD), "{error}");

    for env in [&env, &down, &far] {
        env.kill_daemons();
        // config.toml is the user's own file: they wrote it there.
        for file in env
            .profile_files()
            .into_iter()
            .filter(|f| !f.ends_with("config.toml"))
        {
            let bytes = std::fs::read(&file).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(PASSWORD),
                "the password is in {}",
                file.display()
            );
        }
    }
}

/// A password file as libpq reads it: `PGPASSFILE` or `~/.pgpass`, only
/// when no one else can read it.
fn pgpass_file(dir: &std::path::Path, line: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(".pgpass");
    std::fs::write(&path, format!("# agentx test\n{line}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn a_password_from_pgpass_authenticates_and_a_readable_file_is_ignored() {
    let Some(pg) = shared() else { return };
    const PASSWORD: &str = "pgpass-Secret-51c7e0";
    pg.add_password_role("pw_user", PASSWORD, "t_pgpass");
    let url = format!("postgresql://pw_user@127.0.0.1:{}/t_pgpass", pg.port);
    let line = format!("127.0.0.1:{}:t_pgpass:pw_user:{PASSWORD}", pg.port);
    let model = FakeModel::start();

    // ~/.pgpass (mode 0600) of the user agentd runs as.
    let mut a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let home = a.work.parent().unwrap().join("home");
    pgpass_file(&home, &line, 0o600);
    a.extra_env
        .push(("HOME".into(), home.display().to_string()));
    assert_code(&a.chat(&model, ["--approval", "never"], "from pgpass\n"), 0);
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    // agentd connected as pw_user: it created the schema.
    let owner = pg.query(
        "t_pgpass",
        "SELECT tableowner::text FROM pg_tables WHERE tablename = 'conversations'",
    );
    assert_eq!(owner[0].get::<_, String>(0), "pw_user");

    // PGPASSFILE naming a file others can read: ignored, as libpq does,
    // so the server refuses the connection.
    let mut b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let dir = b.work.parent().unwrap().join("elsewhere");
    let file = pgpass_file(&dir, &line, 0o644);
    b.extra_env
        .push(("PGPASSFILE".into(), file.display().to_string()));
    assert_code(&b.chat(&model, ["--approval", "never"], "no password\n"), 0);
    let out = b.run(["sync", "--json", "--wait-ms", "3000"]);
    assert_code(&out, 1);
    let st = wait_status(&b, |s| {
        !s["remote"]["last_error"].as_str().unwrap_or("").is_empty()
    });
    let error = st["remote"]["last_error"].as_str().unwrap();
    assert!(error.contains("password"), "{error}");

    // Made private, the same file is used (agentd reads it when it starts).
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    b.kill_daemons();
    let synced = b.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(
        pg.count("t_pgpass", "SELECT count(*) FROM conversations"),
        2
    );
    for env in [&a, &b] {
        env.kill_daemons();
        let holding = env.profile_files_containing(PASSWORD);
        assert!(holding.is_empty(), "the password is in {holding:?}");
    }
}

#[test]
fn tls_is_used_and_checked_as_sslmode_says() {
    let Some(pg) = Cluster::start() else { return };
    let ca = pg.enable_tls();
    pg.create_db("t_tls");
    // The server refuses plaintext to this database: reaching it means TLS.
    pg.prepend_hba("hostnossl t_tls all all reject");
    let base = format!("postgresql://agentx@localhost:{}/t_tls", pg.port);
    let model = FakeModel::start();
    let tls_sessions = || {
        pg.count(
            "postgres",
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'agentd' AND s.ssl",
        )
    };

    // verify-full against the test CA: reached, over TLS.
    let a = machine(
        "machine-a",
        "git@github.com:acme/app.git",
        &format!("{base}?sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    assert_code(&a.chat(&model, ["--approval", "never"], "over tls\n"), 0);
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    let sessions = tls_sessions();
    assert!(sessions >= 1, "agentd holds {sessions} TLS sessions");
    let records = pg.count(
        "t_tls",
        "SELECT count(*) FROM records WHERE seq = 0 AND item::text LIKE '%over tls%'",
    );
    assert_eq!(
        records, 1,
        "the first record on the server, {records} times"
    );

    // The system's roots do not know the test CA: refused, and said why.
    let b = machine(
        "machine-b",
        "git@github.com:acme/app.git",
        &format!("{base}?sslmode=verify-full&sslrootcert=system"),
    );
    assert_code(&b.chat(&model, ["--approval", "never"], "unverified\n"), 0);
    assert_code(&b.run(["sync", "--wait-ms", "3000"]), 1);
    let st = wait_status(&b, |s| {
        !s["remote"]["last_error"].as_str().unwrap_or("").is_empty()
    });
    let error = st["remote"]["last_error"].as_str().unwrap();
    assert!(error.contains("certificate"), "{error}");

    // require: encrypted without checking the certificate, as in libpq.
    let c = machine(
        "machine-c",
        "git@github.com:acme/app.git",
        &format!("{base}?sslmode=require&sslrootcert=system"),
    );
    assert_code(
        &c.chat(&model, ["--approval", "never"], "encrypted only\n"),
        0,
    );
    let synced = c.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(pg.count("t_tls", "SELECT count(*) FROM conversations"), 2);
    // Plaintext is refused (the rule above holds).
    let plain = machine(
        "machine-d",
        "git@github.com:acme/app.git",
        &format!("{base}?sslmode=disable"),
    );
    assert_code(&plain.chat(&model, ["--approval", "never"], "plain\n"), 0);
    assert_code(&plain.run(["sync", "--wait-ms", "3000"]), 1);
}

#[test]
fn search_finds_remote_only_conversations_of_the_project_marked_remote() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_search");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "https://github.com/acme/app", &url);
    let other = machine("machine-c", "git@github.com:acme/other.git", &url);
    let model = FakeModel::start();
    assert_code(
        &a.chat(
            &model,
            ["--approval", "never"],
            "plan the quokka migration\nthen the zebra rollout for quokka users\n",
        ),
        0,
    );
    assert_code(
        &other.chat(
            &model,
            ["--approval", "never"],
            "quokka in another project\n",
        ),
        0,
    );
    assert_code(
        &b.chat(&model, ["--approval", "never"], "a local quokka note\n"),
        0,
    );
    for env in [&a, &other, &b] {
        assert_eq!(env.sync()["reached"], true);
    }
    let a_id = a.status()["session_id"].as_str().unwrap().to_owned();
    let b_id = b.status()["session_id"].as_str().unwrap().to_owned();

    // B's index has caught up with its own conversation.
    b.search_until(&["note"], |hits| hits.len() == 1);
    let out = b.run(["search", "zebra", "--json"]);
    assert_code(&out, 0);
    let note = stderr(&out);
    assert!(
        !note.contains("remote"),
        "no note when the remote answered: {note}"
    );
    let hits = json_out(&out);
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    let hit = &hits[0];
    assert_eq!(hit["session_id"], a_id.as_str());
    assert_eq!(hit["where"], "remote");
    assert_eq!(hit["machine"], "machine-a");
    assert_eq!(hit["turn"], 2, "{hit}");
    assert_eq!(hit["title"], "plan the quokka migration");
    let snippet = hit["snippet"].as_str().unwrap();
    assert!(snippet.contains("zebra rollout"), "{snippet}");
    let marked: Vec<&str> = hit["highlights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &snippet[r[0].as_u64().unwrap() as usize..r[1].as_u64().unwrap() as usize])
        .collect();
    assert_eq!(marked, ["zebra"], "{hit}");

    // Local and remote together; the other project only with --all; B's
    // own conversation (also on the server) only once, as local.
    let ids = |args: &[&str]| -> Vec<(String, String)> {
        let hits = json_out(&b.run(args));
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["session_id"].as_str().unwrap().to_owned(),
                    h["where"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let scoped = ids(&["search", "quokka", "--json"]);
    assert!(
        scoped.contains(&(b_id.clone(), "local".into())),
        "{scoped:?}"
    );
    assert!(
        scoped.contains(&(a_id.clone(), "remote".into())),
        "{scoped:?}"
    );
    assert!(
        scoped.iter().all(|(id, w)| id != &b_id || w == "local"),
        "{scoped:?}"
    );
    let other_id = other.status()["session_id"].as_str().unwrap().to_owned();
    assert!(!scoped.iter().any(|(id, _)| id == &other_id), "{scoped:?}");
    let all = ids(&["search", "quokka", "--all", "--json"]);
    assert!(all.contains(&(other_id, "remote".into())), "{all:?}");

    // Human output marks remote hits and names their machine.
    let human = b.run(["search", "zebra"]);
    assert_code(&human, 0);
    let text = stdout(&human);
    assert!(text.contains(&format!("remote: {a_id}")), "{text}");
    assert!(text.contains("on machine-a"), "{text}");
    // And in the REPL.
    let repl = b.chat(&model, Vec::<&str>::new(), "/search zebra\n");
    assert_code(&repl, 0);
    let text = stdout(&repl);
    assert!(text.contains(&format!("remote: {a_id}")), "{text}");
}

/// `first`, then distinct words (`w1 w2 …` in hex) up to `bytes` bytes.
fn varied_words(first: &str, bytes: usize) -> String {
    let mut text = first.to_owned();
    let mut n = 0u64;
    while text.len() + 12 < bytes {
        n += 1;
        text.push_str(&format!(" w{n:x}"));
    }
    text
}

/// This profile's conversations: (title, id).
fn titles(env: &TestEnv) -> Vec<(String, String)> {
    let listed = json_out(&env.run(["sessions", "--json"]));
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["title"].as_str().unwrap().to_owned(),
                s["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn id_titled(env: &TestEnv, prefix: &str) -> String {
    let all = titles(env);
    all.iter()
        .find(|(title, _)| title.starts_with(prefix))
        .unwrap_or_else(|| panic!("no conversation titled {prefix}…: {all:?}"))
        .1
        .clone()
}

#[test]
fn a_large_message_of_varied_words_is_pushed_and_found_and_holds_up_nothing() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_large");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "warm up\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    // The database as the released schema 2 left it (an unbounded index,
    // no revisions): agentd brings it up to date when it connects again.
    a.kill_daemons();
    pg.execute(
        "t_large",
        "DROP TABLE IF EXISTS schema_revision;
         ALTER TABLE records DROP COLUMN search;
         ALTER TABLE records ADD COLUMN search tsvector GENERATED ALWAYS AS (
             to_tsvector('simple'::regconfig,
                 coalesce(item->>'text', '') || ' ' || coalesce(item->>'arguments', '')
                 || ' ' || coalesce(item->>'output', ''))
         ) STORED;",
    );

    // ~1 MB of distinct words (legal: under agentx's 1 MiB per message),
    // then an ordinary turn in another conversation, made after it.
    let big = varied_words("zanzibar", 1_000_000);
    let out = a.chat(
        &model,
        ["--approval", "never"],
        &format!("/new\n{big}\n/new\nan ordinary turn\n"),
    );
    assert_code(&out, 0);
    let big_id = id_titled(&a, "zanzibar w1 w2");
    let ordinary_id = id_titled(&a, "an ordinary turn");

    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(
        synced["remote"]["refused"],
        serde_json::json!([]),
        "{synced}"
    );
    let st = a.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    assert_eq!(st["remote"]["pending"], 0, "{st}");
    for id in [&big_id, &ordinary_id] {
        let (count, _, _) = records(pg, "t_large", id);
        assert!(count >= 2, "{id} has {count} records on the server");
    }
    assert_eq!(
        pg.count(
            "t_large",
            &format!(
                "SELECT count(*) FROM records WHERE conversation_id = '{big_id}' \
                 AND length(item->>'text') >= 999000"
            )
        ),
        2,
        "the message and its echo"
    );
    // The bounded index is a revision (no version of its own), the
    // lines identified by their content hash are the last migration.
    assert_eq!(
        pg.count("t_large", "SELECT max(revision)::int8 FROM schema_revision"),
        1
    );
    assert_eq!(
        pg.count("t_large", "SELECT max(version)::int8 FROM schema_version"),
        3
    );

    // Another machine finds it by its indexed part.
    let b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let out = b.search_until(&["zanzibar"], |hits| !hits.is_empty());
    let hits = json_out(&out);
    assert_eq!(hits[0]["session_id"], big_id.as_str(), "{hits}");
    assert_eq!(hits[0]["where"], "remote", "{hits}");
    assert!(
        hits[0]["snippet"].as_str().unwrap().contains("zanzibar"),
        "{hits}"
    );
}

#[test]
fn a_conversation_the_server_refuses_is_reported_by_id_and_holds_up_no_other() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_refused");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "warm up\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    // The server refuses any record holding "poison-pill".
    pg.execute(
        "t_refused",
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.item::text LIKE '%poison-pill%' THEN
                 RAISE EXCEPTION 'no poison here';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT ON records
             FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    );
    // The refused conversation is made first: it is pushed first.
    let out = a.chat(
        &model,
        ["--approval", "never"],
        "/new\nswallow the poison-pill\n/new\nan innocent turn\n",
    );
    assert_code(&out, 0);
    let poisoned = id_titled(&a, "swallow the poison-pill");
    let innocent = id_titled(&a, "an innocent turn");

    let out = a.run(["sync", "--json"]);
    assert_code(&out, 1);
    let synced: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(synced["reached"], true, "{synced}");
    let refused = synced["remote"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{synced}");
    assert_eq!(refused[0]["id"], poisoned.as_str(), "{synced}");
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("no poison here"), "{error}");
    let said = stderr(&out);
    assert!(said.contains(&poisoned), "{said}");
    assert!(!said.contains("unreachable"), "{said}");
    // The other conversation got through.
    assert_eq!(records(pg, "t_refused", &innocent).0, 2);
    assert_eq!(records(pg, "t_refused", &poisoned).0, 0);

    // status and daemon status name it too.
    let st = a.status();
    assert_eq!(st["remote"]["pending"], 1, "{st}");
    assert_eq!(st["remote"]["refused"][0]["id"], poisoned.as_str(), "{st}");
    assert!(st["remote"]["last_error"].is_null(), "{st}");
    let text = stdout(&a.run(["status"]));
    assert!(text.contains(&format!("refused {poisoned}: ")), "{text}");
    let daemon = json_out(&a.run(["daemon", "status", "--json"]));
    assert_eq!(
        daemon["remote"]["refused"][0]["id"],
        poisoned.as_str(),
        "{daemon}"
    );
    let text = stdout(&a.run(["daemon", "status"]));
    assert!(text.contains(&format!("refused {poisoned}: ")), "{text}");
    let out = a.run(["sync"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains(&poisoned), "{}", stderr(&out));

    // Once the server takes it, it is pushed and no longer reported.
    pg.execute("t_refused", "DROP TRIGGER refuse_poison ON records");
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(
        synced["remote"]["refused"],
        serde_json::json!([]),
        "{synced}"
    );
    assert_eq!(synced["remote"]["pending"], 0, "{synced}");
    assert_eq!(records(pg, "t_refused", &poisoned).0, 2);
}

#[test]
fn a_password_in_any_form_of_the_url_is_shown_nowhere() {
    let Some(pg) = shared() else { return };
    pg.create_db("t_forms");
    const MARK: &str = "Mark-5e3a9";
    let port = pg.port;
    let urls = [
        // libpq's `password` parameter (trust authentication accepts it).
        format!("postgresql://agentx@127.0.0.1:{port}/t_forms?password={MARK}-q"),
        // User-info, percent-encoded, and the parameter; nothing listens.
        format!("postgresql://agentx:{MARK}-u%2Dx@127.0.0.1:1/nowhere?password={MARK}-p"),
        // `sslpassword` (agentx has no client key to open with it).
        format!(
            "postgresql://agentx@127.0.0.1:{port}/t_forms?sslpassword={MARK}-s&password={MARK}-t"
        ),
        // A URL that does not parse.
        format!("postgresql://agentx:{MARK}-x@127.0.0.1:{port}/t_forms?bogus=1&password={MARK}-y"),
        // Not a URL: libpq's key=value form.
        format!("host=127.0.0.1 port={port} password='{MARK} k'"),
    ];
    let model = FakeModel::start();
    for (n, url) in urls.iter().enumerate() {
        let mut env = machine("machine-a", "git@github.com:acme/app.git", url);
        env.extra_env.push(("RUST_LOG".into(), "debug".into()));
        assert_code(&env.chat(&model, ["--approval", "never"], "hello\n"), 0);
        let mut seen = String::new();
        for args in [
            &["sync", "--wait-ms", "3000"][..],
            &["sync", "--json", "--wait-ms", "3000"],
            &["sessions"],
            &["sessions", "--json"],
            &["status"],
            &["status", "--json"],
            &["daemon", "status"],
            &["daemon", "status", "--json"],
        ] {
            let out = env.run(args);
            let text = format!("{}{}", stdout(&out), stderr(&out));
            assert!(
                !text.contains(MARK),
                "url {n}: agentx {args:?} shows it: {text}"
            );
            seen.push_str(&text);
        }
        let st = env.status();
        if n == 0 {
            // The password parameter is used.
            assert_eq!(st["remote"]["state"], "synced", "{st}");
        } else {
            let error = st["remote"]["last_error"].as_str().unwrap_or_default();
            assert!(!error.is_empty(), "url {n}: {st}");
        }
        env.kill_daemons();
        let log = env.home.join("log").join("agentd.log");
        assert!(
            std::fs::read_to_string(&log).is_ok_and(|l| !l.is_empty()),
            "{} is empty",
            log.display()
        );
        let holding = env.profile_files_containing(MARK);
        assert!(
            holding.is_empty(),
            "url {n}: the password is in {holding:?}"
        );
    }
}

#[test]
fn remote_rows_whose_ids_name_agentds_own_files_are_neither_listed_nor_pulled() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_reserved");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "git@github.com:acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "from a\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let a_id = a.status()["session_id"].as_str().unwrap().to_owned();
    // Hostile rows: copies of A's conversation named like B's pointer files.
    for id in ["current", "shared"] {
        pg.execute(
            "t_reserved",
            &format!(
                "INSERT INTO conversations (id, project, agent, title, machine, folder,
                        created_at, updated_at, turns, records, rollbacks, response_id,
                        usage, checkpoints, forked_from)
                 SELECT '{id}', project, agent, title, machine, folder, created_at,
                        updated_at + interval '1 minute', turns, records, rollbacks,
                        response_id, usage, checkpoints, forked_from
                   FROM conversations WHERE id = '{a_id}';
                 INSERT INTO records (conversation_id, seq, at, item, machine)
                 SELECT '{id}', seq, at, item, machine FROM records
                  WHERE conversation_id = '{a_id}';"
            ),
        );
    }
    assert_code(&b.chat(&model, ["--approval", "never"], "from b\n"), 0);
    let b_id = b.status()["session_id"].as_str().unwrap().to_owned();

    let ids: Vec<String> = titles(&b).into_iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&a_id) && ids.contains(&b_id), "{ids:?}");
    for id in ["current", "shared"] {
        let out = b.chat(&model, ["resume", id], "");
        assert_ne!(out.status.code(), Some(0), "resume {id}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("not a conversation id"),
            "{}",
            stderr(&out)
        );
    }
    // B's pointer files are intact, also after a restart.
    b.kill_daemons();
    assert_eq!(b.status()["session_id"], b_id.as_str());
    let out = b.chat(&model, Vec::<&str>::new(), "again\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("[turns seen: 2]"), "{}", stdout(&out));
}

#[test]
fn a_local_fork_and_an_import_are_pushed_like_any_conversation() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("t_fork_import");
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    let b = machine("machine-b", "https://github.com/acme/app.git", &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "one\ntwo\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let parent = a.status()["session_id"].as_str().unwrap().to_owned();
    let ids = |env: &TestEnv| -> Vec<(String, String)> {
        json_out(&env.run(["sessions", "--json"]))
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let field = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
                (field("id"), field("where"))
            })
            .collect()
    };

    // A fork and an import made on A, with no turn after either.
    assert_code(&a.run(["fork", "2"]), 0);
    let file = a.root().join("conv.json");
    let out = a.run(["export", "1", "-o", file.to_str().unwrap()]);
    assert_code(&out, 0);
    // The file's id is taken here: the import gets a new one.
    assert_code(&a.run(["import", file.to_str().unwrap()]), 0);
    let made: Vec<String> = ids(&a)
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| *id != parent)
        .collect();
    assert_eq!(made.len(), 2, "a fork and an import: {made:?}");

    assert_eq!(a.sync()["reached"], true);
    let st = a.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    assert_eq!(st["remote"]["pending"], 0, "{st}");
    let on_server: Vec<String> = pg
        .query("t_fork_import", "SELECT id FROM conversations ORDER BY id")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for id in &made {
        assert!(on_server.contains(id), "{id} not pushed: {on_server:?}");
    }
    // The other machine lists both as remote.
    let on_b = ids(&b);
    for id in made {
        assert!(
            on_b.contains(&(id.clone(), "remote".into())),
            "{id}: {on_b:?}"
        );
    }
}

#[test]
fn resuming_with_a_misconfigured_remote_says_the_remote_failed_not_that_it_is_missing() {
    // No server needed: the URL is refused before any connection.
    let env = machine(
        "machine-a",
        "git@github.com:acme/app.git",
        "mysql://nowhere/db",
    );
    let model = FakeModel::start();
    let out = env.chat(&model, ["resume", "0190a1b2c3d-abc123"], "");
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains(
            "conversation 0190a1b2c3d-abc123 is not here, and pulling it from the remote \
             store failed: remote_url must start with postgresql://"
        ),
        "{said}"
    );
}
