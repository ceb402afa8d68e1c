//! Recovery of the conversation store: a corrupt state document rebuilt
//! from its transcript, a corrupt shared checkpoint, folders whose keys
//! collide written concurrently, and idle conversations releasing files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::json_out;
use agentx_tests::{TestEnv, agentd_bin, assert_code, stderr, stdout};

/// The one group directory under the profile's sessions (`<key>/<agent>`).
fn group_dirs(env: &TestEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env
        .profile_files()
        .into_iter()
        .filter(|p| p.starts_with(env.home.join("sessions")))
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .filter(|d| !d.components().any(|c| c.as_os_str() == "oneshots"))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

fn corrupt_copies(env: &TestEnv) -> Vec<PathBuf> {
    env.profile_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect()
}

#[test]
fn a_corrupt_state_document_is_rebuilt_from_the_transcript() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, Vec::<&str>::new(), "first question\nsecond\n"),
        0,
    );
    let before = json_out(&env.run(["sessions", "--json"]));
    let id = before[0]["id"].as_str().unwrap().to_owned();
    env.kill_daemons();

    let dir = &group_dirs(&env)[0];
    let doc = dir.join(format!("{id}.json"));
    let journal = dir.join(format!("{id}.jsonl"));
    std::fs::write(&doc, b"\x00\x01 not json at all").unwrap();
    // A torn record at the end of the transcript (a crash mid-append).
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes.extend_from_slice(b"{\"at\":1,\"type\":\"us");
    std::fs::write(&journal, bytes).unwrap();

    let sessions = json_out(&env.run(["sessions", "--json"]));
    let list = sessions.as_array().unwrap();
    assert_eq!(list.len(), 1, "{sessions}");
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["title"], "first question");
    assert_eq!(list[0]["turns"], 2);
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["session_id"], id.as_str());
    assert_eq!(status["turns"], 2);

    let out = env.chat(&model, Vec::<&str>::new(), "third\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: third [turns seen: 3]");
    // One notice line says what happened.
    let err = stderr(&out);
    assert_eq!(
        err.lines().filter(|l| l.contains("rebuilt")).count(),
        1,
        "{err}"
    );
    // The bad document and the torn tail are kept aside, not deleted.
    let kept = corrupt_copies(&env);
    assert!(
        kept.iter()
            .any(|p| std::fs::read(p).unwrap() == b"\x00\x01 not json at all"),
        "{kept:?}"
    );
    assert!(
        kept.iter()
            .any(|p| std::fs::read(p).unwrap() == b"{\"at\":1,\"type\":\"us"),
        "{kept:?}"
    );
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["session_id"], id.as_str());
    assert_eq!(status["turns"], 3);
    // Rollback works on the rebuilt checkpoints.
    let checkpoints = json_out(&env.run(["checkpoints", "--json"]));
    assert_eq!(
        checkpoints.as_array().map(Vec::len),
        Some(3),
        "{checkpoints}"
    );
}

#[test]
fn a_corrupt_shared_checkpoint_falls_back_to_the_current_conversation() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "context\n"), 0);
    env.kill_daemons();
    let shared = group_dirs(&env)[0].join("shared.json");
    assert!(shared.is_file());
    std::fs::write(&shared, b"{\"shared\": {\"/x\": tru").unwrap();

    let out = env.chat(&model, ["exec", "hi"], "");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: hi [turns seen: 2]\n");
    let kept = corrupt_copies(&env);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].to_string_lossy().contains("shared.json.corrupt-"));
    // The next interactive start says so, once.
    let out = env.chat(&model, Vec::<&str>::new(), "more\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: more [turns seen: 2]");
    let err = stderr(&out);
    assert_eq!(
        err.lines().filter(|l| l.contains("shared.json")).count(),
        1,
        "{err}"
    );
    // ... and the turn recorded a fresh shared checkpoint.
    let out = env.chat(&model, ["exec", "again"], "");
    assert_eq!(stdout(&out), "echo: again [turns seen: 3]\n");
}

#[test]
fn folders_whose_keys_collide_keep_both_pointers_under_concurrent_turns() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Four real folders, one directory key.
    let folders = [
        env.work.join("a").join("b-c"),
        env.work.join("a").join("b").join("c"),
        env.work.join("a-b").join("c"),
        env.work.join("a-b-c"),
    ];
    for folder in &folders {
        std::fs::create_dir_all(folder).unwrap();
    }
    const CLIENTS: usize = 2;
    const MESSAGES: usize = 8;
    let mut children = Vec::new();
    for folder in &folders {
        for c in 0..CLIENTS {
            let input: String = (0..MESSAGES).map(|i| format!("m{c}-{i}\n")).collect();
            children.push(env.chat_command(&model, ["-C", folder.to_str().unwrap()], &input));
        }
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
        assert_eq!(stdout(&out).lines().count(), MESSAGES, "{}", stderr(&out));
    }
    let dirs = group_dirs(&env);
    assert_eq!(dirs.len(), 1, "{dirs:?}"); // one key
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dirs[0].join(name)).unwrap()).unwrap()
    };
    let (current, shared) = (read("current.json"), read("shared.json"));
    let turns = (CLIENTS * MESSAGES) as u64;
    for folder in &folders {
        let f = folder.to_str().unwrap();
        let status = json_out(&env.run(["-C", f, "status", "--json"]));
        assert_eq!(status["turns"], turns, "{status}");
        assert_eq!(current["current"][f], status["session_id"], "{current}");
        let cp = &shared["shared"][f];
        assert_eq!(cp["session_id"], status["session_id"], "{shared}");
        assert_eq!(cp["journal_items"], status["transcript_items"], "{shared}");
        let out = env.chat(&model, ["-C", f, "exec", "branch"], "");
        assert_eq!(
            stdout(&out),
            format!("echo: branch [turns seen: {}]\n", turns + 1)
        );
    }
    // No temp file was left behind by colliding writers.
    let temps: Vec<_> = env
        .profile_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
}

/// agentd started by agentx under a low open-file limit it cannot raise.
fn limit_agentd(env: &mut TestEnv, nofile: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    let wrapper = env.root().join("agentd-limited");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec prlimit --nofile={nofile}:{nofile} -- {} \"$@\"\n",
            agentd_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.extra_env
        .push(("AGENTX_AGENTD".into(), wrapper.display().to_string()));
    env.extra_env
        .push(("AGENTX_MAX_IDLE_GROUPS".into(), "8".into()));
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

#[test]
fn idle_conversations_release_their_files() {
    let mut env = TestEnv::new();
    limit_agentd(&mut env, 96);
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "warm up\n"), 0);
    let pid = env.daemon_pids()[0];
    let baseline = open_fds(pid);
    assert!(baseline < 60, "agentd starts with {baseline} files open");

    // Many conversations in one folder, each with a turn, in one client.
    const CONVERSATIONS: usize = 120;
    let input: String = (0..CONVERSATIONS)
        .map(|i| format!("/new\nconversation {i}\n"))
        .collect();
    let out = env.chat(&model, Vec::<&str>::new(), &input);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!(
            "echo: conversation {} [turns seen: 1]",
            CONVERSATIONS - 1
        )),
        "{}",
        stderr(&out)
    );
    // Many folders, each with a conversation and a turn.
    for i in 0..40 {
        let folder = env.work.join(format!("f{i}"));
        std::fs::create_dir(&folder).unwrap();
        let out = env.chat(&model, ["-C", folder.to_str().unwrap()], "hello\n");
        assert_code(&out, 0);
    }
    assert_eq!(env.daemon_pids(), vec![pid], "agentd restarted");
    // 160 conversations went through an agentd allowed 96 files: one file
    // per conversation would have failed the turns above. What stays open
    // (watches, the search index, pooled connections) varies with timing,
    // so the bound is the limit's headroom, not an exact count.
    let after = open_fds(pid);
    assert!(
        after <= 72,
        "open files grew from {baseline} to {after} (limit 96)"
    );
    let sessions = json_out(&env.run(["sessions", "--json"]));
    assert_eq!(sessions.as_array().map(Vec::len), Some(CONVERSATIONS + 1));
    let out = env.chat(&model, Vec::<&str>::new(), "/resume 2\nstill here\n");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("echo: still here [turns seen: 2]"),
        "{}",
        stdout(&out)
    );
}
