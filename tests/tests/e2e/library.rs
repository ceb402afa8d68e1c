//! Finding and carrying conversations end to end: fork, rename, full-text
//! search, export/import across profiles, completions and the man page.

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::json_out;
use agentx_tests::{TestEnv, assert_code, stderr, stdout};

fn sessions(env: &TestEnv) -> Vec<Value> {
    json_out(&env.run(["sessions", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn fork_branches_from_a_checkpoint_and_leaves_the_original_alone() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["--approval", "never"], "one\ntwo\nthree\n");
    assert_code(&out, 0);
    let parent = sessions(&env)[0].clone();
    let parent_id = parent["id"].as_str().unwrap().to_owned();
    assert_eq!(parent["forked_from"], Value::Null);

    // Checkpoint 2 (1 = newest) is the state after the second turn.
    let out = env.run(["fork", "2"]);
    assert_code(&out, 0);
    assert!(stdout(&out).contains(&parent_id), "{}", stdout(&out));
    let list = sessions(&env);
    assert_eq!(list.len(), 2);
    let fork = list
        .iter()
        .find(|s| s["id"] != parent["id"])
        .unwrap()
        .clone();
    assert_eq!(fork["forked_from"], json!({"id": parent_id, "turn": 2}));
    assert_eq!(fork["turns"], 2);

    // The fork is current: the next message continues from turn 2's response.
    let out = env.chat(&model, Vec::<&str>::new(), "branch\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: branch [turns seen: 3]");
    let ids = model.stored_response_ids();
    let last = model.requests().last().unwrap().body.clone();
    assert_eq!(last["previous_response_id"], json!(ids[1]));

    // The original is untouched and still listed.
    let list = sessions(&env);
    let original = list.iter().find(|s| s["id"] == json!(parent_id)).unwrap();
    assert_eq!(original["turns"], 3);
    let fork_id = fork["id"].as_str().unwrap();
    let tree = stdout(&env.run(["sessions", "--tree"]));
    let parent_line = tree.lines().position(|l| l.contains(&parent_id)).unwrap();
    let fork_line = tree.lines().position(|l| l.contains(fork_id)).unwrap();
    assert!(fork_line > parent_line, "{tree}");
    assert!(
        tree.lines().nth(fork_line).unwrap().contains("└─"),
        "{tree}"
    );
    // Out of range: one clear line.
    let out = env.run(["fork", "9"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("no checkpoint 9"), "{}", stderr(&out));
}

#[test]
fn slash_fork_and_rename_work_in_the_repl() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(
        &model,
        ["--approval", "never"],
        "alpha\nbeta\n/fork\n/rename Forked beta line\ngamma\n",
    );
    assert_code(&out, 0);
    let list = sessions(&env);
    assert_eq!(list.len(), 2);
    let fork = list.iter().find(|s| !s["forked_from"].is_null()).unwrap();
    assert_eq!(fork["title"], "Forked beta line");
    assert_eq!(fork["turns"], 3);
    assert_eq!(fork["forked_from"]["turn"], 2);
    let parent = list.iter().find(|s| s["forked_from"].is_null()).unwrap();
    assert_eq!(parent["turns"], 2);
    assert_eq!(parent["title"], "alpha");
}

#[test]
fn rename_sets_the_title_every_list_shows_and_search_finds() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "first words\n"),
        0,
    );
    assert_code(&env.chat(&model, ["new"], "second words\n"), 0);
    assert_eq!(sessions(&env)[1]["title"], "first words");

    let out = env.run(["rename", "2", "Quarterly", "zebra", "plan"]);
    assert_code(&out, 0);
    let list = sessions(&env);
    // Renaming does not reorder the list.
    assert_eq!(list[1]["title"], "Quarterly zebra plan");
    assert_eq!(list[0]["title"], "second words");
    assert!(stdout(&env.run(["sessions"])).contains("Quarterly zebra plan"));
    let out = env.run(["rename", "Current", "one"]);
    assert_code(&out, 0);
    assert_eq!(sessions(&env)[0]["title"], "Current one");

    let hits = json_out(&env.search_until(&["zebra"], |h| !h.is_empty()));
    assert_eq!(hits[0]["session_id"], list[1]["id"]);
    assert_eq!(hits[0]["turn"], 0);
    assert_eq!(hits[0]["title"], "Quarterly zebra plan");
}

#[test]
fn search_finds_messages_and_tool_output_in_this_folder_or_everywhere() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "shell",
        json!({"command": "echo xylophone-$((40+2))"}),
    ));
    let out = env.chat(
        &model,
        ["--approval", "auto"],
        "please run the tune\nsomething about kumquats\n",
    );
    assert_code(&out, 0);
    let id = sessions(&env)[0]["id"].as_str().unwrap().to_owned();

    // Tool output (only the tool printed "xylophone-42").
    let hits = json_out(&env.search_until(&["xylophone"], |h| !h.is_empty()));
    assert_eq!(hits[0]["session_id"], json!(id));
    assert_eq!(hits[0]["turn"], 1);
    for field in [
        "folder",
        "agent",
        "title",
        "at",
        "snippet",
        "highlights",
        "score",
        "where",
    ] {
        assert!(hits[0].get(field).is_some(), "{field} missing: {}", hits[0]);
    }
    let snippet = hits[0]["snippet"].as_str().unwrap();
    let [start, end] = [&hits[0]["highlights"][0][0], &hits[0]["highlights"][0][1]]
        .map(|v| v.as_u64().unwrap() as usize);
    assert_eq!(snippet[start..end].to_lowercase(), "xylophone");
    // A message of the second turn, marked in text output.
    let hits = json_out(&env.search_until(&["kumquats"], |h| !h.is_empty()));
    assert_eq!(hits[0]["turn"], 2);
    let text = stdout(&env.run(["search", "kumquats"]));
    assert!(text.contains("**kumquats**"), "{text}");
    assert!(text.contains(&id), "{text}");

    // Another folder sees it only with --all.
    let other = env.root().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let other = other.to_str().unwrap();
    let out = json_out(&env.run(["-C", other, "search", "--json", "kumquats"]));
    assert_eq!(out, json!([]));
    let out = json_out(&env.run(["-C", other, "search", "--json", "--all", "kumquats"]));
    assert_eq!(out[0]["session_id"], json!(id));
    assert_eq!(
        out[0]["folder"],
        json!(std::fs::canonicalize(&env.work).unwrap().to_str().unwrap())
    );
    // A hit opens with `agentx resume ID`.
    let out = env.chat(&model, ["resume", &id], "back again\n");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("[turns seen: 3]"), "{}", stdout(&out));
    // Cleared conversations leave the index.
    assert_code(&env.run(["clear", "--yes"]), 0);
    env.search_until(&["kumquats"], <[Value]>::is_empty);
}

#[test]
fn the_index_is_rebuilt_when_missing_or_corrupt() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "remember the walrus\n"),
        0,
    );
    env.search_until(&["walrus"], |h| h.len() == 1);
    assert_code(&env.run(["daemon", "stop"]), 0);
    // Garbage over the index's own metadata.
    let dir = env.home.join("search");
    std::fs::write(dir.join("meta.json"), b"garbage").unwrap();
    env.search_until(&["walrus"], |h| h.len() == 1);
    assert_code(&env.run(["daemon", "stop"]), 0);
    std::fs::remove_dir_all(&dir).unwrap();
    env.search_until(&["walrus"], |h| h.len() == 1);
}

#[test]
fn export_and_import_carry_a_conversation_into_another_profile() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::tool_call(
        "shell",
        json!({"command": "echo tool-said-hi"}),
    ));
    let out = env.chat(&model, ["--approval", "auto"], "first\nsecond\n");
    assert_code(&out, 0);
    assert_code(&env.run(["rename", "Carried over"]), 0);
    let file = env.root().join("conv.json");
    let out = env.run(["export", "-o", file.to_str().unwrap()]);
    assert_code(&out, 0);
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(doc["format"], "agentx-conversation");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["conversation"]["title"], "Carried over");
    assert_eq!(
        doc["conversation"]["checkpoints"].as_array().unwrap().len(),
        2
    );
    // Never overwrites.
    let out = env.run(["export", "-o", file.to_str().unwrap()]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("never overwrites"),
        "{}",
        stderr(&out)
    );
    let md = stdout(&env.run(["export", "1", "--format", "markdown"]));
    assert!(md.starts_with("# Carried over"), "{md}");
    assert!(
        md.contains("## Turn 2") && md.contains("tool-said-hi"),
        "{md}"
    );

    // Another profile, another folder.
    let env2 = TestEnv::new();
    let out = env2.run(["import", file.to_str().unwrap()]);
    assert_code(&out, 0);
    let list = sessions(&env2);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], doc["conversation"]["id"]);
    assert_eq!(list[0]["title"], "Carried over");
    assert_eq!(list[0]["turns"], 2);

    // The model sees the same context: the whole transcript, resent.
    let before = model.requests().len();
    let out = env2.chat(
        &model,
        ["resume", list[0]["id"].as_str().unwrap()],
        "third\n",
    );
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: third [turns seen: 3]");
    let body = model.requests()[before].body.clone();
    assert!(body.get("previous_response_id").is_none(), "{body}");
    let input = body["input"].as_array().unwrap();
    let texts: Vec<String> = input
        .iter()
        .map(|i| {
            i.get("content")
                .or_else(|| i.get("output"))
                .map(|c| c.to_string())
                .unwrap_or_default()
        })
        .collect();
    let joined = texts.join("|");
    for want in ["first", "tool-said-hi", "second", "third"] {
        assert!(joined.contains(want), "{want} missing from {joined}");
    }
    assert!(input.iter().any(|i| i["type"] == "function_call"), "{body}");

    // Importing again never overwrites: a new id.
    let out = env2.run(["import", file.to_str().unwrap()]);
    assert_code(&out, 0);
    assert!(stdout(&out).contains("exists already"), "{}", stdout(&out));
    assert_eq!(sessions(&env2).len(), 2);
    // --folder puts it elsewhere.
    let there = env2.root().join("there");
    std::fs::create_dir(&there).unwrap();
    let out = env2.run([
        "import",
        file.to_str().unwrap(),
        "--folder",
        there.to_str().unwrap(),
    ]);
    assert_code(&out, 0);
    let out = json_out(&env2.run(["-C", there.to_str().unwrap(), "sessions", "--json"]));
    assert_eq!(out.as_array().unwrap().len(), 1);

    // Malformed and newer files: one clear line, nothing imported.
    let bad = env.root().join("bad.json");
    std::fs::write(&bad, b"{\"format\":\"agentx-conversation\"").unwrap();
    let out = env2.run(["import", bad.to_str().unwrap()]);
    assert_code(&out, 1);
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    let mut newer = doc.clone();
    newer["version"] = json!(99);
    std::fs::write(&bad, newer.to_string()).unwrap();
    let out = env2.run(["import", bad.to_str().unwrap()]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("newer"), "{}", stderr(&out));
    assert_eq!(sessions(&env2).len(), 2);
}

#[test]
fn completions_and_the_man_page_are_generated() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.run(["completions", shell]);
        assert_code(&out, 0);
        let text = stdout(&out);
        assert!(
            text.contains("search") && text.contains("export"),
            "{shell}: {text}"
        );
    }
    let out = env.run(["man"]);
    assert_code(&out, 0);
    assert!(stdout(&out).contains(".TH agentx"), "{}", stdout(&out));
    // Neither starts agentd.
    assert!(env.daemon_pids().is_empty());
}

/// Titles are shown to people: escape sequences in them (an OSC 52
/// clipboard write, a screen clear) reach the terminal only as visible
/// text in `sessions`, `sessions --tree`, `search` and the resume header;
/// `--json` keeps them as they are.
#[test]
fn control_characters_in_titles_never_reach_the_terminal_raw() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "harmless \x1b[1Awords\n"),
        0,
    );
    let out = env.run(["checkpoints"]);
    assert_code(&out, 0);
    assert!(!stdout(&out).contains('\x1b'), "checkpoints: {out:?}");
    assert!(stdout(&out).contains("harmless \\x1b[1Awords"), "{out:?}");
    let title = "evil \x1b]52;c;cm0gLXJmIH4=\x07 narwhal \x1b[2J\u{9b}31m end";
    let out = env.run(["rename", title]);
    assert_code(&out, 0);
    assert!(!stdout(&out).contains('\x1b'), "rename echoed raw: {out:?}");
    assert_eq!(sessions(&env)[0]["title"], title);
    let json = stdout(&env.run(["sessions", "--json"]));
    assert!(json.contains("\\u001b]52;c;"), "{json}");

    let raw =
        |text: &str| text.contains('\x1b') || text.contains('\x07') || text.contains('\u{9b}');
    for args in [&["sessions"][..], &["sessions", "--tree"], &["status"]] {
        let out = env.run(args);
        assert_code(&out, 0);
        let text = stdout(&out);
        assert!(
            !raw(&text),
            "{args:?} printed raw control characters: {text:?}"
        );
        assert!(text.contains("\\x1b]52;c;"), "{args:?}: {text:?}");
    }
    env.search_until(&["narwhal"], |h| !h.is_empty());
    let out = env.run(["search", "narwhal"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(
        !raw(&text),
        "search printed raw control characters: {text:?}"
    );
    assert!(text.contains("narwhal"), "{text}");

    let out = env.chat(&model, ["resume"], "");
    assert_code(&out, 0);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("resuming"), "{text}");
    assert!(
        !raw(&text),
        "resume printed raw control characters: {text:?}"
    );
}

/// `--limit 0` is a usage error (exit 2), not "the default".
#[test]
fn search_limit_zero_is_a_usage_error() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "the quick brown fox\n"),
        0,
    );
    env.search_until(&["fox"], |h| !h.is_empty());
    let out = env.run(["search", "--limit", "0", "fox"]);
    assert_code(&out, 2);
    assert!(stdout(&out).is_empty(), "{out:?}");
    assert!(stderr(&out).contains("--limit"), "{out:?}");
    let out = env.run(["search", "--json", "--limit", "1", "fox"]);
    assert_code(&out, 0);
    assert_eq!(json_out(&out).as_array().map(Vec::len), Some(1));
}

/// Query syntax is not an error: `fox:*` and other punctuation-heavy text
/// is searched as words, and finds what it names.
#[test]
fn punctuation_heavy_queries_are_searched_as_text() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(
            &model,
            ["--approval", "never"],
            "the fox: jumps over c++ and a[0] -- title:nope (really)\n",
        ),
        0,
    );
    env.search_until(&["jumps"], |h| !h.is_empty());
    for query in [
        "fox:*",
        "fox:",
        "title:nope",
        "a[0]",
        "c++ AND",
        "(really",
        "\"fox",
        "-- jumps ^ ~",
        "over:fox AND *",
        "fox:/ jumps",
        "\"fox jumps\"",
        "{fox}",
    ] {
        let out = env.run(["search", "--json", "--", query]);
        assert_code(&out, 0);
        let hits = json_out(&out);
        let hits = hits.as_array().unwrap();
        assert_eq!(hits.len(), 1, "{query:?} found {hits:?}");
    }
    let out = env.run(["search", "--json", "*:*"]);
    assert_code(&out, 0);
    assert_eq!(json_out(&out), json!([]));
}

/// Overwrites the second half of every file in `dir` with pseudo-random
/// bytes, in place (same length), as a bad disk or a stray write would.
/// A running indexer may delete a file meanwhile (a merge): it is skipped.
fn garble_in_place(dir: &std::path::Path) {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let mut rng = agentx_shared::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let opened = std::fs::OpenOptions::new().write(true).open(entry.path());
        let (Ok(mut file), Ok(meta)) = (opened, entry.metadata()) else {
            continue;
        };
        let len = meta.len();
        file.seek(SeekFrom::Start(len / 2)).unwrap();
        let noise: Vec<u8> = (len / 2..len).map(|_| rng.next() as u8).collect();
        file.write_all(&noise).unwrap();
    }
}

/// A garbled search index never stops agentd: damaged while
/// agentd runs, searches go on (a failing one says the index is being
/// rebuilt); damaged before a start, agentd starts, rebuilds, says so in
/// one log line and in `daemon status`, and search finds again.
#[test]
fn a_garbled_search_index_is_rebuilt_while_running_and_at_start() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "remember the walrus\n"),
        0,
    );
    env.search_until(&["walrus"], |h| h.len() == 1);
    let dir = env.home.join("search");

    let pid = env.daemon_pids();
    garble_in_place(&dir);
    // The mapped files changed under the reader: a search may miss, or
    // fail and ask for a rebuild; none stops agentd.
    for word in ["walrus", "remember", "the", "anything"] {
        let out = env.run(["search", word]);
        if out.status.code() != Some(0) {
            assert_code(&out, 1);
            assert!(stderr(&out).contains("rebuilding"), "{out:?}");
        }
    }
    assert_eq!(env.daemon_pids(), pid);

    // Damaged before a start: the checksums show it. First a whole index
    // on disk (the running agentd may or may not have rebuilt it, and a
    // rebuild stopped halfway looks like no index at all to a start): a
    // restart rebuilds it, and once it finds again it is whole. Then it is
    // garbled with agentd stopped.
    assert_code(&env.run(["daemon", "stop"]), 0);
    env.search_until(&["walrus"], |h| h.len() == 1);
    assert_code(&env.run(["daemon", "stop"]), 0);
    garble_in_place(&dir);
    let out = env.run(["sessions", "--json"]);
    assert_code(&out, 0);
    // The index is checked by the indexer as agentd starts: wait for its word.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        let status = json_out(&env.run(["daemon", "status", "--json"]));
        let said = status["search_note"]
            .as_str()
            .is_some_and(|n| n.contains("damaged"));
        if said || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        status["search_note"]
            .as_str()
            .is_some_and(|n| n.contains("damaged")),
        "{status}"
    );
    env.search_until(&["walrus"], |h| h.len() == 1);
    let log = std::fs::read_to_string(status["log"].as_str().unwrap()).unwrap();
    let said = log
        .lines()
        .filter(|l| l.contains("search index damaged, rebuilding it"))
        .count();
    assert!(said >= 1, "{log}");
    let status = stdout(&env.run(["daemon", "status"]));
    assert!(status.contains("search:   rebuilt at"), "{status}");
}

/// `doc` with `edit` applied, written to a file of `env`; its path.
fn edited(env: &TestEnv, doc: &Value, name: &str, edit: impl Fn(&mut Value)) -> String {
    let mut doc = doc.clone();
    edit(&mut doc);
    let path = env.root().join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Hostile export files: ids that collide with a group's own
/// files or hold spaces, control characters or a leading `-` are renamed
/// (the message shows the id escaped, and never `resume -rf`), and the
/// folder's conversations all survive a restart; titles follow rename's
/// rules; a self-reference and inconsistent counts are refused.
#[test]
fn hostile_import_ids_titles_and_fields() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "first\n"), 0);
    let own = sessions(&env)[0]["id"].as_str().unwrap().to_owned();
    let file = env.root().join("conv.json");
    assert_code(&env.run(["export", "-o", file.to_str().unwrap()]), 0);
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();

    let ids = [
        "current",
        "shared",
        "a b",
        "x\ny",
        "e\u{1b}[31m",
        "n\0ul",
        "-rf",
    ];
    for (i, id) in ids.iter().enumerate() {
        let path = edited(&env, &doc, &format!("id{i}.json"), |d| {
            d["conversation"]["id"] = json!(id);
        });
        let out = env.run(["import", &path]);
        assert_code(&out, 0);
        let said = stdout(&out);
        assert!(!said.contains(['\u{1b}', '\0']), "{said:?}");
        assert!(!said.contains(" -rf"), "{said}");
        assert!(said.contains("not a conversation id"), "{said}");
        assert_eq!(said.lines().count(), 2, "{said:?}");
    }
    assert_eq!(sessions(&env).len(), 1 + ids.len());
    assert_code(&env.run(["daemon", "stop"]), 0);
    let after = sessions(&env);
    assert_eq!(after.len(), 1 + ids.len(), "{after:?}");
    assert!(after.iter().any(|s| s["id"] == own.as_str()));

    for (title, want) in [
        (json!("x".repeat(1_000_000)), None),
        (json!(""), Some("first")),
        (json!("one\ntwo\t three"), Some("one two three")),
    ] {
        let path = edited(&env, &doc, "title.json", |d| {
            d["conversation"]["id"] = json!("current");
            d["conversation"]["title"] = title.clone();
        });
        let out = env.run(["import", &path]);
        assert_code(&out, 0);
        let list = sessions(&env);
        let got = list[0]["title"].as_str().unwrap();
        assert!(got.chars().count() <= 200 && !got.is_empty(), "{got}");
        if let Some(want) = want {
            assert_eq!(got, want);
        }
    }

    let count = sessions(&env).len();
    for (name, edit) in [
        (
            "self",
            json!({"forked_from": {"id": own, "turn": 1}, "id": own}),
        ),
        ("turns", json!({"turns": 1_000_000})),
    ] {
        let path = edited(&env, &doc, &format!("{name}.json"), |d| {
            for (k, v) in edit.as_object().unwrap() {
                d["conversation"][k] = v.clone();
            }
        });
        let out = env.run(["import", &path]);
        assert_code(&out, 1);
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{out:?}");
    }
    assert_eq!(sessions(&env).len(), count);
}

/// Conversations whose fork origins form a cycle are drawn as roots in
/// `sessions --tree`, with their forks below.
#[test]
fn sessions_tree_shows_conversations_in_a_fork_cycle() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "first\n"), 0);
    let file = env.root().join("conv.json");
    assert_code(&env.run(["export", "-o", file.to_str().unwrap()]), 0);
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let (a, b, c) = (
        "0000000000a-00000a",
        "0000000000b-00000b",
        "0000000000c-00000c",
    );
    for (id, from) in [(a, b), (b, a), (c, a)] {
        let path = edited(&env, &doc, "cycle.json", |d| {
            d["conversation"]["id"] = json!(id);
            d["conversation"]["forked_from"] = json!({"id": from, "turn": 1});
        });
        assert_code(&env.run(["import", &path]), 0);
    }
    let out = env.run(["sessions", "--tree"]);
    assert_code(&out, 0);
    let tree = stdout(&out);
    for id in [a, b, c] {
        assert!(tree.contains(id), "{id} missing from\n{tree}");
    }
    let c_line = tree.lines().find(|l| l.contains(c)).unwrap();
    assert!(c_line.contains("└─") || c_line.contains("├─"), "{tree}");
}

/// `export -o -` writes to stdout, a device is written to (an honest
/// error for /dev/full), files are created 0600; `import /dev/zero` stops
/// at the size limit; `fork 0` is a usage error.
#[test]
fn export_targets_bounded_import_and_fork_zero() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "first\n"), 0);
    let out = env.run(["export", "-o", "-"]);
    assert_code(&out, 0);
    assert_eq!(json_out(&out)["format"], "agentx-conversation");
    assert!(!env.work.join("-").exists());
    let out = env.run(["export", "-o", "/dev/full"]);
    assert_code(&out, 1);
    assert!(!stderr(&out).contains("exists"), "{out:?}");
    assert!(stderr(&out).contains("No space left"), "{out:?}");
    let file = env.root().join("conv.json");
    assert_code(&env.run(["export", "-o", file.to_str().unwrap()]), 0);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let out = env.run(["import", "/dev/zero"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("larger than"), "{out:?}");

    let out = env.run(["fork", "0"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("1 is the newest"), "{out:?}");
    assert_eq!(sessions(&env).len(), 1);
}

/// A conversation whose export passes gRPC's message limits many times
/// over (a 33 MiB message, kept twice: transcript and checkpoint) is
/// imported, exported and imported again: both travel in pieces.
#[test]
fn a_huge_conversation_is_exported_and_imported_again() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "first\n"), 0);
    let file = env.root().join("conv.json");
    assert_code(&env.run(["export", "-o", file.to_str().unwrap()]), 0);
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let big = "walrus ".repeat(33 * 1024 * 1024 / 7);
    doc["conversation"]["transcript"][0]["text"] = json!(big);
    doc["conversation"]["checkpoints"][0]["last_user_message"] = json!(big);
    let huge = env.root().join("huge.json");
    std::fs::write(&huge, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    assert!(std::fs::metadata(&huge).unwrap().len() > 64 << 20);
    assert_code(&env.run(["import", huge.to_str().unwrap()]), 0);
    let again = env.root().join("again.json");
    let out = env.run(["export", "1", "-o", again.to_str().unwrap()]);
    assert_code(&out, 0);
    let back: Value = serde_json::from_slice(&std::fs::read(&again).unwrap()).unwrap();
    assert_eq!(back["conversation"]["transcript"][0]["text"], json!(big));
    let out = env.run(["import", again.to_str().unwrap()]);
    assert_code(&out, 0);
    assert_eq!(sessions(&env).len(), 3);
}
