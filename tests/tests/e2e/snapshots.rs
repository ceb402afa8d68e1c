//! Folder snapshots end to end: a turn whose shell tool edits, creates and
//! deletes files, then undo and rewind; listings; conflicts; the home-folder
//! guard; and kill -9 of agentd while it snapshots.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code, stderr, wait_pid_gone};
use agentx_tests::{files, json_out};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn seed(work: &Path) {
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::create_dir_all(work.join(".git")).unwrap();
    std::fs::write(work.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(work.join("README"), "hello\n").unwrap();
    std::fs::write(work.join("doomed.txt"), "delete me\n").unwrap();
    std::fs::write(work.join(".git/HEAD"), "ref: main\n").unwrap();
}

/// One turn in which the model's shell call edits, creates and deletes.
fn editing_turn(env: &TestEnv, model: &FakeModel) {
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo '// edited' >> src/main.rs && echo new > created.txt && mkdir -p gen && echo x > gen/out && rm doomed.txt && echo agent > .git/HEAD"}),
    });
    let out = env.chat(model, ["--auto"], "refactor please\n");
    assert_code(&out, 0);
}

#[test]
fn undo_puts_back_what_a_shell_turn_changed_and_rewind_redoes_it() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    seed(&env.work);
    let before = files(&env.work);
    editing_turn(&env, &model);
    let after = files(&env.work);
    assert!(after.contains_key("created.txt") && !after.contains_key("doomed.txt"));

    // Without a terminal, undo needs --yes (and changes nothing).
    let out = env.run(["undo"]);
    assert_code(&out, 2);
    assert_eq!(files(&env.work), after);

    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    let listing = stderr(&out);
    assert!(
        listing.contains("created  → remove") && listing.contains("created.txt"),
        "{listing}"
    );
    assert!(
        listing.contains("modified → restore") && listing.contains("src/main.rs"),
        "{listing}"
    );
    assert!(
        listing.contains("deleted  → restore") && listing.contains("doomed.txt"),
        "{listing}"
    );
    let mut expected = before.clone();
    // .git is never snapshotted: the turn's change there stays.
    expected.insert(".git/HEAD".into(), b"agent\n".to_vec());
    assert_eq!(files(&env.work), expected);
    assert!(
        !env.work.join("gen").exists(),
        "a directory the turn created was left behind"
    );

    // The undo took a snapshot first: rewinding to it redoes the turn.
    let out = env.run(["rewind", "1", "--yes"]);
    assert_code(&out, 0);
    assert_eq!(files(&env.work), after);
}

#[test]
fn snapshots_are_listed_labelled_and_counted() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    seed(&env.work);
    editing_turn(&env, &model);
    assert_code(&env.run(["snapshot", "--label", "by hand"]), 0);
    let list = json_out(&env.run(["snapshots", "--json"]));
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "{list:?}"); // before, after, manual
    assert_eq!(list[0]["index"], 1);
    assert_eq!(list[0]["label"], "by hand");
    assert_eq!(list[2]["label"], "refactor please");
    for field in ["index", "id", "created_at", "label", "files", "bytes"] {
        assert!(list[0].get(field).is_some(), "{field}");
    }
    assert_eq!(list[2]["files"], 3); // src/main.rs, README, doomed.txt
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["snapshots"], 3);
    assert!(status["snapshot_store_bytes"].as_u64().unwrap() > 0);
    // Nothing of the store lives in the folder.
    assert!(!files(&env.work).keys().any(|k| k.contains("agentx")));
}

#[test]
fn a_path_changed_again_is_a_conflict_skipped_unless_forced() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    seed(&env.work);
    editing_turn(&env, &model);
    std::fs::write(env.work.join("created.txt"), "the user's own edit\n").unwrap();
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.work.join("created.txt")).unwrap(),
        "the user's own edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.work.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );

    // With --force the conflicting path is restored too.
    let env = TestEnv::new();
    seed(&env.work);
    editing_turn(&env, &model);
    std::fs::write(env.work.join("created.txt"), "the user's own edit\n").unwrap();
    let out = env.run(["undo", "--yes", "--force"]);
    assert_code(&out, 0);
    assert!(!env.work.join("created.txt").exists());
}

#[test]
fn undo_is_off_in_the_home_folder() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // agentd learns HOME when it starts: make the chat folder the home.
    let out = env
        .agentx(["daemon", "start"])
        .env("HOME", &env.work)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let out = env.run(["snapshot"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("home folder"), "{}", stderr(&out));
    // Chatting still works; it just takes no snapshots.
    let out = env.chat(&model, Vec::<&str>::new(), "hi\n");
    assert_code(&out, 0);
    assert_eq!(json_out(&env.run(["status", "--json"]))["snapshots"], 0);
    // Undo itself is refused there, with the reason.
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("home folder"), "{}", stderr(&out));
}

#[test]
fn the_home_guard_compares_real_paths() {
    let env = TestEnv::new();
    // HOME is a symlink to the chat folder.
    let link = env.root().join("home-link");
    std::os::unix::fs::symlink(&env.work, &link).unwrap();
    let out = env
        .agentx(["daemon", "start"])
        .env("HOME", &link)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let out = env.run([
        std::ffi::OsStr::new("-C"),
        link.as_os_str(),
        "snapshot".as_ref(),
    ]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("home folder"), "{}", stderr(&out));
}

#[test]
fn kill_9_during_a_snapshot_leaves_a_consistent_store() {
    let env = TestEnv::new();
    for d in 0..30 {
        let dir = env.work.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f} ").repeat(50)).unwrap();
        }
    }
    assert_code(&env.run(["snapshot", "--label", "base"]), 0);
    let base = files(&env.work);
    for (round, delay) in [5u64, 15, 30, 60].iter().enumerate() {
        // Change many files so the snapshot has real work to do.
        for d in 0..30 {
            std::fs::write(
                env.work.join(format!("d{d}/f{round}")),
                format!("round {round}"),
            )
            .unwrap();
        }
        let child = env.agentx(["snapshot"]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(*delay));
        if let Some(pid) = env.daemon_pids().first().copied() {
            kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
            assert!(wait_pid_gone(pid, Duration::from_secs(5)));
        }
        let _ = child.wait_with_output();
    }
    // A fresh agentd: the store still lists, snapshots and restores exactly.
    let list = json_out(&env.run(["snapshots", "--json"]));
    let base_index = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == "base")
        .map(|s| s["index"].as_u64().unwrap())
        .unwrap();
    assert_code(&env.run(["snapshot"]), 0);
    let out = env.run(["rewind", &(base_index + 1).to_string(), "--yes"]);
    assert_code(&out, 0);
    assert_eq!(files(&env.work), base);
}

/// Waits (generously) until `path` exists.
fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Both refuse at once, before any plan is shown: one line on stderr,
/// nothing on stdout, exit 1 — also while the running tool has not written
/// anything yet (the folder then matches the newest snapshot, which once
/// made `rewind 1` print "nothing to change" and exit 0, and `undo` show the
/// running message and "nothing to change" before refusing).
#[test]
fn undo_and_rewind_refuse_while_a_turn_runs_in_the_folder() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    seed(&env.work);
    assert_code(&env.run(["snapshot"]), 0);
    let gate = tempfile::tempdir().unwrap();
    let g = |name: &str| gate.path().join(name);
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": format!(
            "touch {s1}; while [ ! -e {g1} ]; do sleep 0.05; done; echo half > half.txt; \
             touch {s2}; while [ ! -e {g2} ]; do sleep 0.05; done; echo rest > rest.txt",
            s1 = g("started").display(), g1 = g("go").display(),
            s2 = g("half").display(), g2 = g("go2").display())}),
    });
    // Its gates live outside the folder: the command may write there.
    let child = env.chat_command(
        &model,
        ["--auto", "--sandbox", "danger-full-access"],
        "write two files\n",
    );
    let refused = |when: &str| {
        for args in [vec!["undo", "--yes"], vec!["rewind", "1", "--yes"]] {
            let out = env.run(&args);
            assert_code(&out, 1);
            let err = stderr(&out);
            assert!(
                err.contains("is running in this folder") && err.trim_end().lines().count() == 1,
                "{when}, {args:?}: {err}"
            );
            assert_eq!(agentx_tests::stdout(&out), "", "{when}, {args:?}");
        }
    };
    wait_for(&g("started"));
    refused("before the tool wrote");
    std::fs::write(g("go"), "").unwrap();
    wait_for(&g("half"));
    refused("halfway");
    assert!(
        env.work.join("half.txt").exists(),
        "half of the message was reverted"
    );
    std::fs::write(g("go2"), "").unwrap();
    assert_code(&child.wait_with_output().unwrap(), 0);
    // Once it is over, the whole message is undone.
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    assert!(!env.work.join("half.txt").exists() && !env.work.join("rest.txt").exists());
}

#[test]
fn repeated_undo_passes_a_message_that_changed_nothing_and_rewind_takes_an_id() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "echo a > a.txt"}),
    });
    assert_code(&env.chat(&model, ["--auto"], "make a\n"), 0);
    assert_code(&env.chat(&model, ["--auto"], "just talk\n"), 0);
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains("passing over \u{201c}just talk\u{201d}"),
        "{err}"
    );
    assert!(err.contains("undoing \u{201c}make a\u{201d} ("), "{err}");
    assert!(!env.work.join("a.txt").exists());
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 1);
    // The undo printed the id of the snapshot before it: rewind takes it.
    let id = json_out(&env.run(["snapshots", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = env.run(["rewind", &id, "--yes"]);
    assert_code(&out, 0);
    assert!(env.work.join("a.txt").exists());
}

/// kill -9 of agentd during a 6,000-file rewind: the client says agentd
/// stopped during the rewind; the next command finishes it (or, killed
/// before it began, leaves the folder as it was) — never half a tree, never
/// a restore temp file left in the user's folder.
#[test]
fn kill_9_during_a_rewind_is_finished_by_the_next_command() {
    let env = TestEnv::new();
    let write_all = |tag: &str| {
        for d in 0..60 {
            let dir = env.work.join(format!("d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..100 {
                std::fs::write(dir.join(format!("f{f}")), format!("{tag} {d}/{f}")).unwrap();
            }
        }
    };
    write_all("base");
    assert_code(&env.run(["snapshot", "--label", "base"]), 0);
    let base = files(&env.work);
    for (round, delay) in [15u64, 80].iter().enumerate() {
        let tag = format!("round{round}");
        write_all(&tag);
        assert_code(&env.run(["snapshot"]), 0);
        let edited = files(&env.work);
        let list = json_out(&env.run(["snapshots", "--json"]));
        let base_id = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == "base")
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .unwrap();
        let child = env
            .agentx(["rewind", &base_id, "--yes"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(*delay));
        if let Some(pid) = env.daemon_pids().first().copied() {
            kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
            assert!(wait_pid_gone(pid, Duration::from_secs(5)));
        }
        let out = child.wait_with_output().unwrap();
        if out.status.code() != Some(0) {
            assert_code(&out, 3);
            let err = stderr(&out);
            assert!(
                err.contains("agentd stopped during the rewind")
                    || err.contains("agentd stopped while planning the restore"),
                "{err}"
            );
        }
        // The next command (a fresh agentd) finishes what was journaled.
        json_out(&env.run(["snapshots", "--json"]));
        let now = files(&env.work);
        assert!(
            now == base || now == edited,
            "round {round}: a half-restored tree ({} of {} paths differ from the base)",
            now.iter().filter(|(p, c)| base.get(*p) != Some(*c)).count(),
            now.len()
        );
        assert!(
            !now.keys().any(|p| p.contains(".agentx-restore-")),
            "a restore temp file was left in the folder"
        );
        // Back to the base for the next round.
        assert_code(&env.run(["rewind", &base_id, "--yes"]), 0);
        assert_eq!(files(&env.work), base);
    }
}

/// As an ordinary user, files and folders the scan cannot read are
/// recorded as present-but-unreadable: a rewind to a snapshot that could
/// not read them never deletes them as "created".
#[test]
fn unreadable_paths_are_never_removed_by_a_restore() {
    use std::os::unix::fs::PermissionsExt as _;
    if !agentx_tests::is_root() {
        agentx_tests::skip("needs root to run agentx as another user");
        return;
    }
    let env = TestEnv::new();
    env.open_root_for_others();
    let nobody = nix::unistd::Uid::from_raw(65534);
    let group = nix::unistd::Gid::from_raw(65534);
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    for dir in [&env.home, &env.work] {
        nix::unistd::chown(dir.as_path(), Some(nobody), Some(group)).unwrap();
    }
    let as_nobody = |script: &str| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(["sh", "-c", script])
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", agentx_tests::bin_dir().display()),
            )
            .env("AGENTX_HOME", &env.home)
            .current_dir(&env.work)
            .output()
            .unwrap()
    };
    let out = as_nobody(
        "echo precious > notes.txt && chmod 000 notes.txt && mkdir locked && \
         echo in > locked/k && chmod 000 locked && agentx snapshot --label unreadable",
    );
    assert_code(&out, 0);
    let list = as_nobody("agentx snapshots --json");
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let snap = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == "unreadable")
        .unwrap()
        .clone();
    // The snapshot says what it could not read, and why.
    assert_eq!(snap["skipped"], 2, "{snap}");
    assert!(
        snap["skipped_why"].as_str().unwrap().contains("unreadable"),
        "{snap}"
    );
    let id = snap["id"].as_str().unwrap().to_owned();
    let out = as_nobody(&format!(
        "chmod 600 notes.txt && chmod 700 locked && agentx snapshot --label readable && \
         agentx rewind {id} --yes"
    ));
    assert_code(&out, 0);
    assert_eq!(
        std::fs::read_to_string(env.work.join("notes.txt")).unwrap(),
        "precious\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.work.join("locked/k")).unwrap(),
        "in\n"
    );
    let _ = as_nobody("agentx daemon stop");
}
