//! Slow and odd servers against a real PostgreSQL cluster: a search held up
//! on the server blocks no listing and is cancelled there, a 50 MB record stays cheap, and more.
//!
//! Also: a schema migrated by a newer agentd while this one runs stops its
//! pushes with a clear error, and a server at a non-loopback IP literal is
//! reached over TLS when the URL does not say otherwise.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{Cluster, lock_records, machine, records, shared};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, wait_status};

const ORIGIN: &str = "git@github.com:acme/slow.git";

/// agentd's search queries running on the server now, in database `db`:
/// `pg_stat_activity` shows the whole cluster, and the other tests of this
/// file search their own databases of the shared cluster at the same time.
fn searches_running(pg: &Cluster, db: &str) -> i64 {
    pg.count(
        db,
        "SELECT count(*) FROM pg_stat_activity
          WHERE pid <> pg_backend_pid() AND state = 'active'
            AND datname = current_database()
            AND application_name = 'agentd'
            AND query LIKE '%websearch_to_tsquery%'",
    )
}

/// agentd's queries running now in the whole cluster, with their database
/// and server process: what a failed count of one database explains.
fn agentd_active(pg: &Cluster) -> Vec<String> {
    pg.query(
        "postgres",
        "SELECT datname, pid, left(regexp_replace(query, '\\s+', ' ', 'g'), 60)
           FROM pg_stat_activity
          WHERE application_name = 'agentd' AND state = 'active'
          ORDER BY datname, pid",
    )
    .iter()
    .map(|r| {
        format!(
            "{} pid {}: {}",
            r.get::<_, String>(0),
            r.get::<_, i32>(1),
            r.get::<_, String>(2)
        )
    })
    .collect()
}

/// Waits (bounded) until `ok` holds.
fn eventually(within: Duration, ok: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Machine A with one pushed conversation ("the walrus plan"), and
/// machine B of the same project with `env` added; A's conversation id.
fn two_machines(pg: &Cluster, db: &str, env: &[(&str, &str)]) -> (TestEnv, TestEnv, String) {
    let url = pg.new_db(db);
    let a = machine("machine-a", ORIGIN, &url);
    let mut b = machine("machine-b", ORIGIN, &url);
    for (k, v) in env {
        b.extra_env.push(((*k).into(), (*v).into()));
    }
    let model = FakeModel::start();
    assert_code(
        &a.chat(&model, ["--approval", "never"], "the walrus plan\n"),
        0,
    );
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    (a, b, id)
}

#[test]
fn a_search_held_up_on_the_server_blocks_no_listing_and_is_cancelled_when_given_up() {
    let Some(pg) = shared() else { return };
    // The search waits 3 s; the server alone would let it run a minute.
    let (_a, b, id) = two_machines(
        pg,
        "s_held",
        &[
            ("AGENTX_REMOTE_WAIT_MS", "3000"),
            ("AGENTX_REMOTE_STATEMENT_MS", "60000"),
        ],
    );
    let listed = json_out(&b.run(["sessions", "--json"]));
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");

    // Searching reads the records table, which a transaction holds locked
    // (as a slow query would keep the server busy); listing does not.
    let (release, holder) = lock_records(pg.url("s_held"));
    let searching = {
        let mut cmd = b.agentx(["search", "walrus", "--json"]);
        std::thread::spawn(move || {
            let started = Instant::now();
            let out = cmd.output().unwrap();
            (out, started.elapsed(), Instant::now())
        })
    };
    assert!(
        eventually(Duration::from_secs(2), || searches_running(pg, "s_held")
            == 1),
        "the search never reached the server"
    );

    // Listing answers while the search waits on the server.
    let started = Instant::now();
    let out = b.run(["sessions", "--json"]);
    let took = started.elapsed();
    assert_code(&out, 0);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let listed = json_out(&out);
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["where"], "remote", "{listed}");
    assert!(took < Duration::from_millis(1500), "listing took {took:?}");
    let active = agentd_active(pg);
    let running = searches_running(pg, "s_held");
    // Other tests' searches in their own databases are no business of this one.
    println!("agentd's active queries in the cluster when listing answered: {active:#?}");
    assert_eq!(running, 1, "still held up: {active:#?}");

    // The search gives up after its wait, with this machine's hits and a
    // line saying so; its query is gone from the server at once, though
    // the lock it waits for is still held.
    let (out, took, ended) = searching.join().unwrap();
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("not reached within 3000 ms"),
        "{}",
        stderr(&out)
    );
    assert!(took >= Duration::from_secs(3), "search took {took:?}");
    assert!(
        eventually(Duration::from_millis(1000), || searches_running(
            pg, "s_held"
        ) == 0),
        "the given-up search still runs on the server"
    );
    let gone_after = ended.elapsed();
    release.send(()).unwrap();
    holder.join().unwrap();
    println!("the given-up search was gone from the server {gone_after:?} after agentx ended");

    // And the search lane works again.
    let hits = json_out(&b.run(["search", "walrus", "--json"]));
    assert_eq!(hits[0]["session_id"], id.as_str(), "{hits}");
    assert_eq!(hits[0]["where"], "remote", "{hits}");
}

/// The server processes running one of agentd's pulls of records now, in
/// database `db` (the cluster is shared with this file's other tests).
fn pulls_running(pg: &Cluster, db: &str) -> Vec<i32> {
    pg.query(
        db,
        "SELECT pid FROM pg_stat_activity
          WHERE pid <> pg_backend_pid() AND state = 'active'
            AND datname = current_database()
            AND application_name = 'agentd'
            AND query LIKE '%FROM records r WHERE r.conversation_id = c.id AND r.seq >= b.first%'",
    )
    .iter()
    .map(|r| r.get::<_, i32>(0))
    .collect()
}

#[test]
fn a_pull_given_up_before_a_turn_is_cancelled_on_the_server() {
    let Some(pg) = shared() else { return };
    let (a, b, id) = two_machines(pg, "s_pull", &[]);
    let model = FakeModel::start();
    assert_code(
        &b.chat(
            &model,
            ["resume", id.as_str(), "--approval", "never"],
            "b goes on\n",
        ),
        0,
    );
    assert_eq!(b.sync()["reached"], true);
    // A goes on too, so B's next turn has records to pull.
    assert_code(&a.chat(&model, ["--approval", "never"], "a goes on\n"), 0);
    assert_eq!(a.sync()["reached"], true);

    let (release, holder) = lock_records(pg.url("s_pull"));
    let turn = {
        let child = b.chat_command(&model, ["--approval", "never"], "b again\n");
        std::thread::spawn(move || child.wait_with_output().unwrap())
    };
    assert!(
        eventually(Duration::from_secs(3), || pulls_running(pg, "s_pull").len()
            == 1),
        "the pull never reached the server"
    );
    // The turn's own pull (the pusher may pull later, after the turn, to
    // settle B's push: that one is background work and may wait).
    let turns_pull = pulls_running(pg, "s_pull")[0];
    let out = turn.join().unwrap();
    let ended = Instant::now();
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("was not reached within 1500 ms"),
        "{}",
        stderr(&out)
    );
    // The pull's query does not outlive the turn that gave up on it by
    // more than the check that the connection is idle (1 s).
    assert!(
        eventually(Duration::from_millis(2500), || !pulls_running(pg, "s_pull")
            .contains(&turns_pull)),
        "the given-up pull still runs on the server"
    );
    println!(
        "the given-up pull was gone {:?} after the turn ended",
        ended.elapsed()
    );
    release.send(()).unwrap();
    holder.join().unwrap();
}

#[test]
fn the_server_stops_a_search_past_its_statement_bound_by_itself() {
    let Some(pg) = shared() else { return };
    // The search would wait 20 s; the server allows each statement 1 s.
    let (_a, b, _id) = two_machines(
        pg,
        "s_bound",
        &[
            ("AGENTX_REMOTE_WAIT_MS", "20000"),
            ("AGENTX_REMOTE_STATEMENT_MS", "1000"),
        ],
    );
    let (release, holder) = lock_records(pg.url("s_bound"));
    let started = Instant::now();
    let out = b.run(["search", "walrus", "--json"]);
    let took = started.elapsed();
    assert_code(&out, 0);
    let note = stderr(&out);
    assert!(note.contains("statement timeout"), "{note}");
    assert!(took < Duration::from_secs(6), "search took {took:?}");
    assert_eq!(searches_running(pg, "s_bound"), 0);
    release.send(()).unwrap();
    holder.join().unwrap();
}

/// Appends one assistant record of about `bytes` bytes of distinct words
/// to conversation `id`, by SQL, starting with `first`.
fn insert_huge_record(pg: &Cluster, db: &str, id: &str, first: &str, bytes: usize) {
    let words = bytes / 33;
    pg.execute(
        db,
        &format!(
            "INSERT INTO records (conversation_id, seq, at, item, machine)
             SELECT '{id}', c.records, now(),
                    jsonb_build_object('type', 'assistant', 'text',
                        '{first} ' || (SELECT string_agg(md5(i::text), ' ')
                                         FROM generate_series(1, {words}) i)),
                    'machine-a'
               FROM conversations c WHERE c.id = '{id}';
             UPDATE conversations SET records = records + 1, updated_at = now()
              WHERE id = '{id}';"
        ),
    );
}

#[test]
fn a_conversation_with_a_50_mb_record_is_found_quickly_and_resumed() {
    let Some(pg) = shared() else { return };
    let (_a, b, id) = two_machines(pg, "s_huge", &[]);
    insert_huge_record(pg, "s_huge", &id, "capybara", 50_000_000);
    let size = pg.count(
        "s_huge",
        &format!(
            "SELECT max(length(item->>'text'))::int8 FROM records WHERE conversation_id = '{id}'"
        ),
    );
    assert!(size > 49_000_000, "{size}");
    // Found by its indexed part within the search's usual wait (0.9 s).
    let mut took = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let out = b.run(["search", "capybara", "--json"]);
        took.push(started.elapsed());
        assert_code(&out, 0);
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
        let hits = json_out(&out);
        assert_eq!(hits[0]["session_id"], id.as_str(), "{hits}");
        assert_eq!(hits[0]["where"], "remote", "{hits}");
        let snippet = hits[0]["snippet"].as_str().unwrap();
        assert!(snippet.contains("capybara"), "{snippet}");
        assert!(snippet.len() < 2000, "{} bytes", snippet.len());
    }
    println!("searches with a 50 MB record: {took:?}");

    // It is resumed here, whole.
    let model = FakeModel::start();
    let started = Instant::now();
    let out = b.chat(&model, ["resume", id.as_str()], "");
    let resumed = started.elapsed();
    assert_code(&out, 0);
    println!("resuming it took {resumed:?}");
    let st = b.status();
    assert_eq!(st["session_id"], id.as_str(), "{st}");
    let (count, _, _) = records(pg, "s_huge", &id);
    assert_eq!(st["transcript_items"].as_i64(), Some(count), "{st}");
}

#[test]
fn a_schema_migrated_by_a_newer_agentd_meanwhile_stops_the_pushes_with_a_clear_error() {
    let Some(pg) = shared() else { return };
    let url = pg.new_db("s_newer");
    let a = machine("machine-a", ORIGIN, &url);
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "first\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    let before = records(pg, "s_newer", &id);
    // The listing's connection is made (and kept) before the change.
    let out = a.run(["sessions", "--json"]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));

    // A newer agentd migrates the database while this one runs.
    pg.execute(
        "s_newer",
        "INSERT INTO schema_version (version) SELECT max(version) + 1 FROM schema_version",
    );
    let newer = pg.count("s_newer", "SELECT max(version)::int8 FROM schema_version");
    assert_code(&a.chat(&model, ["--approval", "never"], "second\n"), 0);
    let out = a.run(["sync", "--json"]);
    assert_code(&out, 1);
    let synced: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(synced["reached"], false, "{synced}");
    assert_eq!(synced["pushed_records"], 0, "{synced}");
    let expected = format!("the remote's schema is version {newer}, newer than this agentd knows");
    let error = synced["remote"]["last_error"].as_str().unwrap();
    assert!(error.contains(&expected), "{synced}");
    assert!(error.contains("update agentx"), "{synced}");
    assert_eq!(records(pg, "s_newer", &id), before, "nothing was pushed");
    // Listing learns it too, and says so.
    let out = a.run(["sessions", "--json"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    let st = a.status();
    assert_eq!(st["remote"]["state"], "pending", "{st}");
    assert!(
        st["remote"]["last_error"]
            .as_str()
            .unwrap()
            .contains(&expected),
        "{st}"
    );
    // Still refused after a reconnect (agentd restarted).
    a.kill_daemons();
    let out = a.run(["sync", "--json"]);
    assert_code(&out, 1);
    let synced: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(synced["pushed_records"], 0, "{synced}");
    assert!(
        synced["remote"]["last_error"]
            .as_str()
            .unwrap()
            .contains(&expected),
        "{synced}"
    );
    assert_eq!(records(pg, "s_newer", &id), before, "nothing was pushed");
}

/// What a PostgreSQL client sends first when it asks for TLS.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// This machine's own non-loopback address of `family` (the one it would
/// use towards a documentation address), if it has one.
fn own_address(towards: &str) -> Option<IpAddr> {
    let socket = UdpSocket::bind(if towards.starts_with('[') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    })
    .ok()?;
    socket.connect(towards).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Starts agentd with its remote at `host:port` (a listener of ours) and
/// returns the first 8 bytes its first connection sent.
fn first_bytes(listener: TcpListener, host: &str) -> [u8; 8] {
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut first = [0u8; 8];
            if stream.read_exact(&mut first).is_ok() {
                // "No TLS here": the client gives up (it never falls back).
                let _ = stream.write_all(b"N");
                let _ = tx.send(first);
            }
        }
    });
    let env = machine(
        "machine-a",
        ORIGIN,
        &format!("postgresql://agentx@{host}:{port}/x"),
    );
    // Starting agentd starts the pusher, which connects.
    wait_status(&env, |st| st["remote"]["url"].is_string());
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("agentd never connected");
    let st = wait_status(&env, |st| st["remote"]["last_error"] != "");
    env.kill_daemons();
    println!("{host}: {first:?}, then {}", st["remote"]["last_error"]);
    first
}

#[test]
fn a_server_at_a_non_loopback_ip_literal_is_asked_for_tls_and_loopback_is_not() {
    let mut reached = 0;
    for towards in ["192.0.2.1:9", "[2001:db8::1]:9"] {
        let Some(ip) = own_address(towards) else {
            println!("no route towards {towards}: not tried");
            continue;
        };
        let Ok(listener) = TcpListener::bind(SocketAddr::new(ip, 0)) else {
            println!("cannot listen on {ip}: not tried");
            continue;
        };
        let host = match ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        };
        let first = first_bytes(listener, &host);
        assert_eq!(
            first, SSL_REQUEST,
            "{host} is not loopback: TLS must be asked for first"
        );
        reached += 1;
    }
    if reached == 0 {
        agentx_tests::skip("this machine has no non-loopback address to listen on");
    }
    // Loopback, the same way: plaintext (a startup message, not a TLS
    // request), so the check above does tell them apart.
    for host in ["127.0.0.1", "[::1]"] {
        let bind = host.trim_start_matches('[').trim_end_matches(']');
        let Ok(listener) = TcpListener::bind((bind, 0)) else {
            continue;
        };
        let first = first_bytes(listener, host);
        assert_ne!(first, SSL_REQUEST, "{host} is loopback");
        // A startup message: its length, then protocol 3.0.
        assert_eq!(first[4..], [0, 3, 0, 0], "{host}: {first:?}");
    }
}

/// agentd's statements in database `db` that have waited on a lock for
/// longer than `secs` seconds.
fn agentd_waiting_longer_than(pg: &Cluster, db: &str, secs: u32) -> i64 {
    pg.count(
        db,
        &format!(
            "SELECT count(*) FROM pg_stat_activity
              WHERE pid <> pg_backend_pid() AND state = 'active'
                AND datname = current_database()
                AND application_name = 'agentd'
                AND wait_event_type = 'Lock'
                AND now() - query_start > interval '{secs} seconds'"
        ),
    )
}

#[test]
fn a_push_held_up_on_the_server_is_not_bounded_like_a_listing_and_goes_through() {
    let Some(pg) = shared() else { return };
    pg.create_db("s_push_wait");
    let mut a = machine("machine-a", ORIGIN, &pg.url("s_push_wait"));
    // Listing, search and pull statements may run half a second.
    a.extra_env
        .push(("AGENTX_REMOTE_STATEMENT_MS".into(), "500".into()));
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "first\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();
    let (before, _, _) = records(pg, "s_push_wait", &id);

    // The push of the next turn waits on the locked records table, far
    // past the other lanes' bound, without the server stopping it.
    let (release, holder) = lock_records(pg.url("s_push_wait"));
    assert_code(&a.chat(&model, ["--approval", "never"], "second\n"), 0);
    assert!(
        eventually(Duration::from_secs(20), || agentd_waiting_longer_than(
            pg,
            "s_push_wait",
            3
        ) == 1),
        "no push waited on the server past 3 s: {:?}",
        agentd_active(pg)
    );
    release.send(()).unwrap();
    holder.join().unwrap();
    let synced = a.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    let (after, _, _) = records(pg, "s_push_wait", &id);
    assert!(after > before, "{before} records before, {after} after");
    assert_eq!(a.status()["remote"]["state"], "synced");
}

#[test]
fn a_link_that_drops_packets_makes_the_remote_unreachable_with_a_reason_then_heals() {
    let Some(pg) = shared() else { return };
    let db = "s_blackhole";
    pg.new_db(db);
    let hole = agentx_tests::blackhole::Blackhole::start(
        format!("127.0.0.1:{}", pg.port).parse().unwrap(),
    );
    let url = format!("postgresql://agentx@127.0.0.1:{}/{db}", hole.port);
    let mut a = machine("machine-a", "git@github.com:acme/app.git", &url);
    a.extra_env
        .push(("AGENTX_REMOTE_STALL_MS".into(), "1000".into()));
    let model = FakeModel::start();
    assert_code(&a.chat(&model, ["--approval", "never"], "before\n"), 0);
    assert_eq!(a.sync()["reached"], true);
    let id = a.status()["session_id"].as_str().unwrap().to_owned();

    hole.swallow();
    let out = a.chat(&model, ["--approval", "never"], "in the hole\n");
    assert_code(&out, 0);
    // The stuck push is given up and the reason shown, not "pending"
    // with no error for as long as the link stays dead.
    let st = wait_status(&a, |s| s["remote"]["state"] == "unreachable");
    assert_eq!(st["remote"]["state"], "unreachable", "{st}");
    let error = st["remote"]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("stopped answering") || error.contains("no answer within"),
        "{st}"
    );
    assert!(st["remote"]["pending"].as_u64() >= Some(1), "{st}");

    hole.heal();
    // The retry backoff may be a few seconds by now.
    let out = a.run(["sync", "--json", "--wait-ms", "20000"]);
    assert_code(&out, 0);
    let synced = json_out(&out);
    assert_eq!(synced["reached"], true, "{synced}");
    let st = a.status();
    assert_eq!(st["remote"]["state"], "synced", "{st}");
    let said = agentx_tests::postgres::texts(pg, db, &id);
    assert!(said.iter().any(|t| t == "in the hole"), "{said:?}");
}
