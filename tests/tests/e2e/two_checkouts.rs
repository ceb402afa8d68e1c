//! Two checkouts of one repository under one profile, against
//! a real PostgreSQL cluster: listed as local "in ../clone1", resumed as a
//! fork, never interleaved on the server, one id in one folder per profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::postgres::{git_repo, machine, records, said, shared};
use agentx_tests::{TestEnv, assert_code, json_out, stderr, stdout};

const ORIGIN: &str = "git@github.com:acme/app.git";

/// One profile whose work folder is `clone1`, with a second checkout
/// `clone2` of the same origin (an https clone: the same project).
fn two_checkouts(env: &mut TestEnv) -> (PathBuf, PathBuf) {
    let one = env.root().join("clone1");
    let two = env.root().join("clone2");
    for (dir, origin) in [(&one, ORIGIN), (&two, "https://github.com/acme/app")] {
        std::fs::create_dir(dir).unwrap();
        git_repo(dir, origin);
    }
    env.work = one.clone();
    (one, two)
}

/// Every conversation id the profile keeps, with the group directories
/// holding it (`<sessions>/<folder-key>/<agent>/<id>.json`).
fn kept_ids(env: &TestEnv) -> BTreeMap<String, Vec<PathBuf>> {
    let mut ids: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let sessions = env.home.join("sessions");
    for folder in std::fs::read_dir(&sessions).unwrap().flatten() {
        for group in std::fs::read_dir(folder.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for file in std::fs::read_dir(group.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = file.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_suffix(".json") else {
                    continue;
                };
                if id.split_once('-').is_some_and(|(t, s)| {
                    t.len() >= 11
                        && s.len() == 6
                        && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
                }) {
                    ids.entry(id.to_owned()).or_default().push(group.path());
                }
            }
        }
    }
    ids
}

/// One id per profile: each kept in exactly one folder.
fn assert_one_folder_per_id(env: &TestEnv, expected: usize) {
    let ids = kept_ids(env);
    for (id, dirs) in &ids {
        assert_eq!(dirs.len(), 1, "{id} is kept in {dirs:?}");
    }
    assert_eq!(ids.len(), expected, "{ids:?}");
}

fn listed(env: &TestEnv, id: &str) -> Value {
    let list = json_out(&env.run(["sessions", "--json"]));
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} is not listed: {list}"))
}

#[test]
fn another_checkouts_conversation_is_listed_as_local_in_its_folder_not_remote() {
    let Some(pg) = shared() else { return };
    pg.create_db("k_list");
    let mut env = machine("machine-a", ORIGIN, &pg.url("k_list"));
    let (one, two) = two_checkouts(&mut env);
    let model = FakeModel::start();
    assert_code(
        &env.chat(
            &model,
            ["--approval", "never"],
            "zebra crossing in clone1\n",
        ),
        0,
    );
    assert_eq!(env.sync()["reached"], true);
    let id = env.status()["session_id"].as_str().unwrap().to_owned();

    env.work = two.clone();
    let s = listed(&env, &id);
    assert_eq!(s["where"], "local", "{s}");
    assert_eq!(s["in"], "../clone1", "{s}");
    assert_eq!(s["machine"], "machine-a", "{s}");
    assert_eq!(s["folder"], one.to_str().unwrap(), "{s}");
    let out = env.run(["sessions"]);
    assert_code(&out, 0);
    let line = stdout(&out);
    assert!(line.contains(&format!("in ../clone1 {id}")), "{line}");
    assert!(!line.contains("remote:"), "{line}");
    // Search in clone 2 finds it through the server: shown as local.
    let out = env.run(["search", "--json", "zebra"]);
    assert_code(&out, 0);
    let hits = json_out(&out);
    let ours: Vec<&Value> = hits
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["session_id"] == id.as_str())
        .collect();
    assert!(!ours.is_empty(), "{hits}");
    assert!(ours.iter().all(|h| h["where"] == "local"), "{hits}");
    // Clone 1 itself lists it as its own (no "in").
    env.work = one;
    let s = listed(&env, &id);
    assert!(s["in"].is_null(), "{s}");
    assert_one_folder_per_id(&env, 1);
}

#[test]
fn resuming_in_another_checkout_forks_and_each_line_reaches_the_server_alone() {
    let Some(pg) = shared() else { return };
    pg.create_db("k_fork");
    let mut env = machine("machine-a", ORIGIN, &pg.url("k_fork"));
    let (one, two) = two_checkouts(&mut env);
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "one in clone1\n"),
        0,
    );
    assert_eq!(env.sync()["reached"], true);
    let id = env.status()["session_id"].as_str().unwrap().to_owned();

    // Clone 2 resumes it: a fork here, with the whole context, one line.
    env.work = two.clone();
    let out = env.chat(
        &model,
        ["resume", id.as_str(), "--approval", "never"],
        "two in clone2\n",
    );
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: two in clone2 [turns seen: 2]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let st = env.status();
    let fork = st["session_id"].as_str().unwrap().to_owned();
    assert_ne!(fork, id, "{st}");
    let notice = format!("conversation {id} lives in ../clone1; continuing here as fork {fork}");
    let err = stderr(&out);
    assert_eq!(err.matches(&notice).count(), 1, "{err}");
    let s = listed(&env, &fork);
    assert_eq!(s["forked_from"]["id"], id.as_str(), "{s}");
    assert!(s["in"].is_null(), "{s}");
    // The original is still clone 1's, listed from here as such.
    assert_eq!(listed(&env, &id)["in"], "../clone1");

    // Clone 1 goes on with its own conversation.
    env.work = one.clone();
    assert_eq!(env.status()["session_id"], id.as_str());
    assert_code(
        &env.chat(&model, ["--approval", "never"], "three in clone1\n"),
        0,
    );
    let one_items = env.status()["transcript_items"].as_i64().unwrap();
    let synced = env.sync();
    assert_eq!(synced["reached"], true, "{synced}");
    assert_eq!(synced["remote"]["pending"], 0, "{synced}");
    assert_eq!(synced["forks"], Value::Array(Vec::new()), "{synced}");
    env.work = two.clone();
    let two_items = env.status()["transcript_items"].as_i64().unwrap();

    // On the server: two lines, never interleaved, each complete.
    assert_eq!(
        said(pg, "k_fork", &id),
        ["one in clone1", "three in clone1"]
    );
    assert_eq!(
        said(pg, "k_fork", &fork),
        ["one in clone1", "two in clone2"]
    );
    assert_eq!(
        records(pg, "k_fork", &id),
        (one_items, one_items, one_items)
    );
    assert_eq!(
        records(pg, "k_fork", &fork),
        (two_items, two_items, two_items)
    );
    let rows = pg.query(
        "k_fork",
        &format!("SELECT forked_from->>'id', folder FROM conversations WHERE id = '{fork}'"),
    );
    assert_eq!(
        rows[0].get::<_, Option<String>>(0).as_deref(),
        Some(id.as_str())
    );
    assert_eq!(rows[0].get::<_, String>(1), two.to_str().unwrap());
    // Each conversation has its own outbox entry.
    for id in [&id, &fork] {
        assert!(env.home.join(format!("remote/pushed/{id}.json")).exists());
    }
    assert_one_folder_per_id(&env, 2);
}

#[test]
fn with_no_remote_another_checkouts_conversation_is_forked_and_another_projects_refused() {
    let mut env = TestEnv::new();
    let (one, two) = two_checkouts(&mut env);
    let other: &Path = &env.root().join("elsewhere");
    std::fs::create_dir(other).unwrap();
    git_repo(other, "git@github.com:acme/other.git");
    let other = other.to_path_buf();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "one in clone1\n"),
        0,
    );
    let id = env.status()["session_id"].as_str().unwrap().to_owned();

    env.work = two;
    let out = env.chat(
        &model,
        ["resume", id.as_str(), "--approval", "never"],
        "two in clone2\n",
    );
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: two in clone2 [turns seen: 2]"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let fork = env.status()["session_id"].as_str().unwrap().to_owned();
    assert_ne!(fork, id);
    assert!(
        stderr(&out).contains(&format!(
            "conversation {id} lives in ../clone1; continuing here as fork {fork}"
        )),
        "{}",
        stderr(&out)
    );

    // Another project's folder: refused, naming where it lives.
    env.work = other;
    let out = env.chat(&model, ["resume", id.as_str()], "");
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("conversation {id} lives in ../clone1"))
            && err.contains("not a checkout"),
        "{err}"
    );
    env.work = one;
    let st = env.status();
    assert_eq!(st["session_id"], id.as_str());
    assert_eq!(st["turns"], 1, "{st}");

    // Importing clone 1's export in clone 2 keeps the id one folder's too.
    let file = env.root().join("one.json");
    assert_code(
        &env.run(["export", id.as_str(), "-o", file.to_str().unwrap()]),
        0,
    );
    env.work = env.root().join("clone2");
    let out = env.run(["import", file.to_str().unwrap()]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!("conversation {id} exists already; imported as")),
        "{}",
        stdout(&out)
    );
    assert_one_folder_per_id(&env, 3);
}
