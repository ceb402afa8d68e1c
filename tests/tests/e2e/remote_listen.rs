//! The pre-turn pull driven by LISTEN/NOTIFY and the listing
//! past 1,000 remote rows, against a real PostgreSQL cluster.
//!
//! Machine B connects as its own role, so that the tests can end B's
//! connections and refuse new ones (`NOLOGIN`) while A works on: a turn on
//! a conversation nobody else changed must not ask the server, and one
//! whose notification was missed (the listener dropped) must still bring
//! in the other machine's turn.

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{Cluster, machine, said, shared};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

const NOT_REACHED: &str = "remote store was not reached";

/// B's database role in the test of database `db`: each test its own, so
/// one test refusing B's logins never touches another's B (the tests share
/// the cluster and run at once).
fn role_b(db: &str) -> String {
    format!("b_{db}")
}

/// Waits (bounded) until `sql` counts `want`.
fn wait_count(pg: &Cluster, sql: &str, want: i64) {
    for _ in 0..1500 {
        if pg.count("postgres", sql) == want {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{sql} never counted {want}");
}

/// Waits until B's agentd (role `role`) listens (its LISTEN, or a
/// heartbeat after it).
fn wait_listening(pg: &Cluster, role: &str) {
    wait_count(
        pg,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}' \
             AND application_name = 'agentd listen' \
             AND query IN ('LISTEN agentx_conversations', 'SELECT 1')"
        ),
        1,
    );
}

/// Refuses (or admits again) new connections of B's role.
fn b_may_log_in(pg: &Cluster, role: &str, yes: bool) {
    let login = if yes { "LOGIN" } else { "NOLOGIN" };
    pg.execute("postgres", &format!("ALTER ROLE {role} {login}"));
}

/// Ends B's connections that `which` selects (SQL on pg_stat_activity) and
/// waits until they are gone.
fn end_b_connections(pg: &Cluster, role: &str, which: &str) {
    let select = format!("FROM pg_stat_activity WHERE usename = '{role}' AND {which}");
    pg.execute(
        "postgres",
        &format!("SELECT pg_terminate_backend(pid) {select}"),
    );
    wait_count(pg, &format!("SELECT count(*) {select}"), 0);
}

/// A (role agentx) and B (its own role) on database `db`; A starts a
/// conversation, B opens it and sends one turn, both pushed, B listening
/// and the conversation clean on B. Returns (a, b, id).
fn two_machines(pg: &Cluster, db: &str, model: &FakeModel) -> (TestEnv, TestEnv, String) {
    pg.create_db(db);
    let role = role_b(db);
    pg.execute(
        "postgres",
        &format!(
            "DO $$ BEGIN
                IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                    CREATE ROLE {role} LOGIN SUPERUSER;
                END IF;
             END $$"
        ),
    );
    let a = machine("machine-a", "git@github.com:acme/app.git", &pg.url(db));
    let b_url = format!("postgresql://{role}@127.0.0.1:{}/{db}", pg.port);
    let b = machine("machine-b", "git@github.com:acme/app.git", &b_url);
    assert_code(&a.chat(model, ["--approval", "never"], "one on a\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    assert_code(&b.chat(model, ["resume", id.as_str()], ""), 0);
    wait_listening(pg, &role);
    let out = b.chat(model, ["--approval", "never"], "one on b\n");
    assert_code(&out, 0);
    assert!(!stderr(&out).contains(NOT_REACHED), "{}", stderr(&out));
    assert_eq!(b.status()["session_id"], id.as_str());
    assert_eq!(b.sync()["reached"], true);
    (a, b, id)
}

#[test]
fn a_turn_asks_the_server_only_after_another_machine_pushed() {
    let Some(pg) = shared() else { return };
    let db = "l_notified";
    let model = FakeModel::start();
    let (a, b, id) = two_machines(pg, db, &model);

    // A goes on (it was told of B's turn and pulls it first).
    let out = a.chat(&model, ["--approval", "never"], "two on a\n");
    assert_code(&out, 0);
    assert_eq!(a.status()["turns"], 3, "{}", stderr(&out));
    assert_eq!(a.sync()["reached"], true);

    // B was told of A's push: its turn brings A's in first, no fork.
    let out = b.chat(&model, ["--approval", "never"], "two on b\n");
    assert_code(&out, 0);
    let st = b.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    assert_eq!(st["turns"], 4, "{st}\n{}", stderr(&out));
    assert_eq!(b.sync()["reached"], true);
    assert_eq!(
        said(pg, db, &id),
        ["one on a", "one on b", "two on a", "two on b"]
    );
    assert_eq!(pg.count(db, "SELECT count(*) FROM conversations"), 1);

    // Nobody changed it since: B's next turn does not ask the server.
    // B's connections other than the listener end and new ones are
    // refused, so a query would fail and say so.
    let role = role_b(db);
    b_may_log_in(pg, &role, false);
    end_b_connections(pg, &role, "application_name <> 'agentd listen'");
    let out = b.chat(&model, ["--approval", "never"], "three on b\n");
    b_may_log_in(pg, &role, true);
    assert_code(&out, 0);
    assert!(
        !stderr(&out).contains(NOT_REACHED),
        "the turn queried the server: {}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("echo: three on b"),
        "{}",
        stdout(&out)
    );
    assert_eq!(b.status()["turns"], 5);
    assert_eq!(b.sync()["reached"], true);
    assert_eq!(said(pg, db, &id).len(), 5);
}

#[test]
fn a_turn_after_the_listener_was_dropped_still_brings_in_the_other_machines_turn() {
    let Some(pg) = shared() else { return };
    let db = "l_dropped";
    let model = FakeModel::start();
    let (a, b, id) = two_machines(pg, db, &model);

    // B's listener goes away (and cannot come back) before A pushes, so B
    // hears nothing of it.
    let role = role_b(db);
    b_may_log_in(pg, &role, false);
    end_b_connections(pg, &role, "application_name = 'agentd listen'");
    let out = a.chat(&model, ["--approval", "never"], "two on a\n");
    assert_code(&out, 0);
    assert_eq!(a.sync()["reached"], true);

    // B still asks the server (its other connections are up) and gets it.
    let out = b.chat(&model, ["--approval", "never"], "two on b\n");
    b_may_log_in(pg, &role, true);
    assert_code(&out, 0);
    assert!(!stderr(&out).contains(NOT_REACHED), "{}", stderr(&out));
    let st = b.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    assert_eq!(st["turns"], 4, "{st}\n{}", stderr(&out));
    assert_eq!(b.sync()["reached"], true);
    assert_eq!(
        said(pg, db, &id),
        ["one on a", "one on b", "two on a", "two on b"]
    );
    assert_eq!(pg.count(db, "SELECT count(*) FROM conversations"), 1);

    // The listener comes back on its own.
    wait_listening(pg, &role);
}

#[test]
fn a_listing_past_1000_remote_conversations_says_how_many_more_there_are() {
    let Some(pg) = shared() else { return };
    let db = "l_listing";
    let url = pg.new_db(db);
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    // Start agentd so that it makes the schema.
    assert_eq!(a.sync()["reached"], true);
    pg.execute(
        db,
        "INSERT INTO conversations (id, project, agent, title, machine, folder,
             created_at, updated_at, turns, records)
         SELECT lpad(to_hex(g), 12, '0') || '-abcdef', 'github.com/acme/app', 'default',
                'remote conversation ' || g, 'elsewhere', '/srv/app',
                now() - g * interval '1 minute', now() - g * interval '1 minute', 3, 6
           FROM generate_series(1, 1005) g",
    );
    let out = a.run(["sessions", "--json"]);
    let listed = json_out(&out);
    let remote: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["where"] == "remote")
        .collect();
    assert_eq!(remote.len(), 1000);
    // The newest are listed.
    assert_eq!(remote[0]["title"], "remote conversation 1");
    assert_eq!(remote[999]["title"], "remote conversation 1000");
    assert!(
        stderr(&out).contains("and 5 more remote conversation(s)"),
        "{}",
        stderr(&out)
    );
    let out = a.run(["sessions"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert_eq!(text.lines().filter(|l| l.contains("remote:")).count(), 1000);
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains("and 5 more remote conversation(s)")),
        "{}",
        text.lines().last().unwrap_or_default()
    );
    // No note when all are listed.
    pg.execute(db, "DELETE FROM conversations WHERE title LIKE '% 100_'");
    let out = a.run(["sessions", "--json"]);
    assert_eq!(json_out(&out).as_array().unwrap().len(), 999);
    assert!(!stderr(&out).contains("more remote"), "{}", stderr(&out));
}

#[test]
fn rows_with_impossible_values_are_skipped_by_name_and_the_rest_is_listed() {
    let Some(pg) = shared() else { return };
    let db = "l_impossible";
    let url = pg.new_db(db);
    let a = machine("machine-a", "git@github.com:acme/app.git", &url);
    assert_eq!(a.sync()["reached"], true);
    pg.execute(
        db,
        "INSERT INTO conversations (id, project, agent, title, machine, folder,
             created_at, updated_at, turns, records)
         VALUES ('00000000000a-abcdef', 'github.com/acme/app', 'default', 'fine zebra one',
                 'elsewhere', '/srv/app', now(), now(), 3, 6),
                ('00000000000b-abcdef', 'github.com/acme/app', 'default', 'broken zebra',
                 'elsewhere', '/srv/app', now(), 'infinity', 3, 6),
                ('00000000000c-abcdef', 'github.com/acme/app', 'default', 'counted zebra',
                 'elsewhere', '/srv/app', now(), now() - interval '1 minute', 2147483647, 6)",
    );
    pg.execute(
        db,
        "INSERT INTO records (conversation_id, seq, at, item, machine)
         VALUES ('00000000000a-abcdef', 1, now(), '{\"type\":\"user\",\"text\":\"zebra crossing\"}', 'elsewhere'),
                ('00000000000c-abcdef', 1, 'infinity', '{\"type\":\"user\",\"text\":\"zebra stripes\"}', 'elsewhere')",
    );

    let out = a.run(["sessions", "--json"]);
    assert_code(&out, 0);
    let listed = json_out(&out);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["where"] == "remote")
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["00000000000a-abcdef", "00000000000c-abcdef"],
        "{listed}"
    );
    let counted = &listed.as_array().unwrap()[1];
    assert_eq!(
        counted["turns"], 0,
        "an implausible count is not shown: {counted}"
    );
    let said = stderr(&out);
    assert!(!said.contains("not reached"), "{said}");
    assert!(
        said.contains(
            "skipped remote conversation 00000000000b-abcdef: its update time is not a real time"
        ),
        "{said}"
    );
    assert!(said.contains("2147483647 turns, which cannot be"), "{said}");

    let out = a.run(["search", "--all", "--json", "zebra"]);
    assert_code(&out, 0);
    let found = json_out(&out);
    let hits: Vec<&str> = found
        .as_array()
        .unwrap_or_else(|| panic!("{found}"))
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    assert!(hits.contains(&"00000000000a-abcdef"), "{found}");
    assert!(!hits.contains(&"00000000000b-abcdef"), "{found}");
    let said = stderr(&out);
    assert!(!said.contains("not reached"), "{said}");
    assert!(said.contains("skipped a remote match"), "{said}");
}
