//! A full disk: the profile, and then the chat folder, on a
//! small tmpfs that is filled up. Turns, snapshots and restores fail with
//! one clear line naming the full disk, leave no half-written or corrupt
//! file, lose nothing acknowledged, and everything goes on without manual
//! repair once space is freed.
//!
//! Mounting needs root: without it (or when the mount fails) each test
//! prints a visible `SKIPPED:` line and returns.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, is_root, skip, stderr, stdout};
use agentx_tests::{files, json_out};

/// A tmpfs mounted for the test; lazily unmounted on drop, so a failing
/// test never leaves a mount behind.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. "8m") on `dir` (created 0700).
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        if !is_root() {
            return Err("needs root to mount a tmpfs".into());
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }

    /// Fills the file system up with `<under>/filler` until ENOSPC.
    fn fill(&self, under: &Path) -> PathBuf {
        assert!(under.starts_with(&self.dir));
        let path = under.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0x5a_u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        drop(file);
        // Not even one more page fits.
        let probe = std::fs::write(under.join("probe"), vec![1_u8; 8192]);
        let _ = std::fs::remove_file(under.join("probe"));
        assert!(probe.is_err(), "{} is not full", self.dir.display());
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
    }
}

/// The command failed (exit 1) with one error line naming the full disk
/// (its last line), and without a panic or a backtrace. The only other
/// line that may name it is the warning that a turn runs without its
/// before-snapshot.
#[track_caller]
fn assert_fails_on_full_disk(out: &Output, what: &str) {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{err}",
        out.status,
        stdout(out)
    );
    let names_it = |l: &str| l.contains("No space left") || l.contains("disk is full");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        names_it(last),
        "{what}: the error does not name the full disk:\n{err}"
    );
    let others: Vec<&str> = err
        .lines()
        .rev()
        .skip(1)
        // A tool's own output (shown under `│`) may say it too: that is
        // the command's line, not agentx's.
        .filter(|l| {
            names_it(l)
                && !l.contains("no snapshot before this message")
                && !l.trim_start().starts_with('│')
        })
        .collect();
    assert!(
        others.is_empty(),
        "{what}: wanted one line naming the full disk:\n{err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("stack backtrace"),
        "{what}: {err}"
    );
}

/// No quarantined file, no temp file left behind, every document parses.
fn assert_profile_sound(env: &TestEnv) {
    for path in env.profile_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.contains(".corrupt-"),
            "quarantined: {}",
            path.display()
        );
        assert!(
            !name.contains(".tmp-"),
            "temp file left behind: {}",
            path.display()
        );
        if name.ends_with(".json") {
            let bytes = std::fs::read(&path).unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{} does not parse ({e}): {}",
                    path.display(),
                    String::from_utf8_lossy(&bytes)
                )
            });
        }
    }
}

fn say(env: &TestEnv, model: &FakeModel, line: &str) -> Output {
    env.chat(model, ["--auto"], &format!("{line}\n"))
}

#[track_caller]
fn assert_answer(out: &Output, text: &str, turns: u64) {
    assert_code(out, 0);
    assert_eq!(
        stdout(out).lines().last().unwrap_or_default(),
        format!("echo: {text} [turns seen: {turns}]"),
        "{}",
        stderr(out)
    );
}

#[test]
fn a_full_profile_disk_fails_clearly_and_recovers_once_freed() {
    let env = TestEnv::new();
    let mount = match Tmpfs::mount(&env.home, "8m") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    // The search index commits (and deletes its old files) on its own
    // thread after turns: on the same file system it could free space
    // after the filler took it, and a turn would then rightly go on.
    let _index = Tmpfs::mount(&env.home.join("search"), "8m").unwrap();
    let model = FakeModel::start();
    std::fs::write(env.work.join("a.txt"), "one\n").unwrap();
    assert_answer(&say(&env, &model, "first"), "first", 1);
    assert_answer(
        &say(&env, &model, "CALL echo two > a.txt"),
        "CALL echo two > a.txt",
        2,
    );
    assert_code(&env.run(["snapshot", "--label", "before-full"]), 0);
    let snapshots_before = json_out(&env.run(["snapshots", "--json"]))
        .as_array()
        .unwrap()
        .len();
    let folder = files(&env.work);
    // An export to import while full, bigger than one write buffer so the
    // import writes its journal as it parses.
    let export = env.home.parent().unwrap().join("big-export.json");
    let mut doc = json_out(&env.run(["export", "--format", "json"]));
    let entry = doc["conversation"]["transcript"][1].clone();
    let transcript = doc["conversation"]["transcript"].as_array_mut().unwrap();
    for _ in 0..200 {
        let mut copy = entry.clone();
        copy["text"] = "x".repeat(200).into();
        transcript.push(copy);
    }
    doc["conversation"]["id"] = "imported-while-full".into();
    std::fs::write(&export, doc.to_string()).unwrap();
    let filler = mount.fill(&env.home);

    // A turn, a snapshot and a restore: each one clear line, nothing done.
    let out = say(&env, &model, "while full");
    assert_fails_on_full_disk(&out, "a turn");
    std::fs::write(env.work.join("b.txt"), "new while full\n").unwrap();
    let out = env.run(["snapshot", "--label", "while-full"]);
    assert_fails_on_full_disk(&out, "a snapshot");
    let out = env.run(["undo", "--yes"]);
    assert_fails_on_full_disk(&out, "undo");
    let out = env.run(["rewind", "1", "--yes"]);
    assert_fails_on_full_disk(&out, "rewind");
    // The disk is named, not the file (which is a sound export).
    let out = env.run(["import", export.to_str().unwrap()]);
    assert_fails_on_full_disk(&out, "import");
    assert!(
        !stderr(&out).contains("not an agentx conversation export"),
        "a sound export was called malformed: {}",
        stderr(&out)
    );
    std::fs::remove_file(env.work.join("b.txt")).unwrap();
    assert_eq!(
        files(&env.work),
        folder,
        "a failed restore changed the folder"
    );

    // Nothing acknowledged is lost, nothing is corrupt, even for a fresh
    // agentd that starts on the full disk.
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 2, "{status}");
    assert_profile_sound(&env);
    env.kill_daemons();
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 2, "{status}");
    assert_eq!(status["snapshots"].as_u64(), Some(snapshots_before as u64));
    assert_profile_sound(&env);

    // Space again: everything goes on, no repair needed.
    std::fs::remove_file(&filler).unwrap();
    let out = env.chat(&model, ["--auto", "--on-pending", "retry"], "after\n");
    assert_answer(&out, "after", 3);
    assert_code(&env.run(["snapshot", "--label", "after-full"]), 0);
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    assert_eq!(
        std::fs::read_to_string(env.work.join("a.txt")).unwrap(),
        "one\n",
        "undo after the full disk: {}",
        stderr(&out)
    );
    env.kill_daemons();
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 3, "{status}");
    assert_profile_sound(&env);
}

#[test]
fn a_restore_into_a_full_folder_fails_clearly_and_a_retry_is_exact() {
    let env = TestEnv::new();
    let mount = match Tmpfs::mount(&env.work, "1m") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let model = FakeModel::start();
    // 600 KB the turn deletes; the undo must write it all back.
    for i in 0..4_u8 {
        let data: Vec<u8> = (0..150_000_u32)
            .map(|n| (n.wrapping_mul(31).wrapping_add(u32::from(i) * 7) % 251) as u8)
            .collect();
        std::fs::write(env.work.join(format!("big{i}.bin")), data).unwrap();
    }
    std::fs::write(env.work.join("small.txt"), "small\n").unwrap();
    let before = files(&env.work);
    let out = say(&env, &model, "CALL rm big*.bin small.txt");
    assert_answer(&out, "CALL rm big*.bin small.txt", 1);
    // The filler lives in .git: same file system, never snapshotted.
    std::fs::create_dir(env.work.join(".git")).unwrap();
    let filler = mount.fill(&env.work.join(".git"));
    let full = files(&env.work);

    let out = env.run(["undo", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("No space left") || err.contains("disk is full"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // Whatever was put back is whole; no temp file is left.
    let now = files(&env.work);
    for (path, data) in &now {
        assert!(!path.contains(".agentx-restore-"), "temp file left: {path}");
        if !path.starts_with(".git/") {
            assert_eq!(Some(data), before.get(path), "{path} half restored");
        }
    }
    // Only the message's own files came back (each whole, above), and what
    // was there when the disk filled is untouched by the failed undo.
    for path in now.keys().filter(|p| !p.starts_with(".git/")) {
        assert!(before.contains_key(path), "{path} appeared from nowhere");
    }
    for (path, data) in &full {
        assert_eq!(
            now.get(path),
            Some(data),
            "{path} changed by the failed undo"
        );
    }

    // Space again: undoing again restores exactly.
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_dir(env.work.join(".git")).unwrap();
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    assert_eq!(files(&env.work), before, "{}", stderr(&out));
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 1);
}

/// The user messages of the folder's current conversation; with `settled`,
/// checks that every tool call there is paired with its output.
fn user_messages(env: &TestEnv, settled: bool) -> u64 {
    let doc = json_out(&env.run(["export", "--format", "json"]));
    let transcript = doc["conversation"]["transcript"].as_array().unwrap();
    let ids = |kind: &str| -> Vec<&str> {
        let mut v: Vec<&str> = transcript
            .iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["call_id"].as_str().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    if settled {
        assert_eq!(ids("function_call"), ids("function_output"), "{doc}");
    }
    transcript.iter().filter(|e| e["type"] == "user").count() as u64
}

#[test]
fn the_profile_disk_filling_up_during_a_tool_call_is_settled_once_freed() {
    let env = TestEnv::new();
    let _mount = match Tmpfs::mount(&env.home, "8m") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    // The search index commits (and deletes its old files) on its own
    // thread whenever a turn's records land: on the same file system it
    // could free space after the tool filled it, and the turn would then
    // rightly go on. Here only the tool may change the free space.
    let _index = Tmpfs::mount(&env.home.join("search"), "8m").unwrap();
    let model = FakeModel::start();
    assert_answer(&say(&env, &model, "first"), "first", 1);
    // The tool itself fills the profile's disk: its output, and whatever
    // the turn writes after it, meet a full disk.
    let filler = env.home.join("filler");
    let call = format!("CALL cat /dev/zero > {} ; echo filled", filler.display());
    for restart in [false, true] {
        // The profile is out of the sandbox's reach: this tool needs none.
        let out = env.chat(
            &model,
            ["--auto", "--sandbox", "danger-full-access"],
            &format!("{call}\n"),
        );
        assert_fails_on_full_disk(&out, "a turn whose tool fills the disk");
        assert_profile_sound(&env);
        std::fs::remove_file(&filler).unwrap();
        if restart {
            // agentd dies before space comes back: a fresh one finds the
            // turn as it was last written and settles it.
            env.kill_daemons();
            assert_profile_sound(&env);
        }
        let seen = user_messages(&env, false);
        let out = env.chat(&model, ["--auto", "--on-pending", "continue"], "then\n");
        assert_code(&out, 0);
        let last = stdout(&out).lines().last().unwrap_or_default().to_owned();
        assert!(
            last.starts_with("echo: then [turns seen: ") && user_messages(&env, true) > seen,
            "{last}\n{}",
            stderr(&out)
        );
        // The model saw exactly the conversation agentd keeps.
        assert_eq!(
            last,
            format!("echo: then [turns seen: {}]", user_messages(&env, true))
        );
    }
    // All of it is on disk: a fresh agentd goes on from there.
    env.kill_daemons();
    assert_profile_sound(&env);
    let seen = user_messages(&env, true);
    assert_answer(&say(&env, &model, "last"), "last", seen + 1);
}

/// What the model was last sent, as text.
fn last_request(model: &FakeModel) -> String {
    model
        .requests()
        .last()
        .map(|r| r.body.to_string())
        .unwrap_or_default()
}

#[test]
fn a_compaction_the_full_profile_disk_cannot_keep_is_not_kept_and_says_so() {
    let env = TestEnv::new();
    let mount = match Tmpfs::mount(&env.home, "8m") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let _index = Tmpfs::mount(&env.home.join("search"), "8m").unwrap();
    let model = FakeModel::start();
    assert_answer(&say(&env, &model, "first"), "first", 1);
    assert_answer(&say(&env, &model, "second"), "second", 2);
    let checkpoints = || {
        let cps = json_out(&env.run(["checkpoints", "--json"]));
        let text = cps.to_string();
        (cps.as_array().unwrap().len(), text.contains("compacted"))
    };
    assert_eq!(checkpoints(), (2, false));
    let filler = mount.fill(&env.home);

    let out = env.chat(&model, ["compact"], "");
    assert_fails_on_full_disk(&out, "compact");
    let err = stderr(&out);
    assert!(
        err.contains("compaction") && !err.contains("the turn failed") && !err.contains("retry"),
        "worded as a failed turn: {err}"
    );
    // Neither the running agentd nor a fresh one has it.
    assert_eq!(checkpoints(), (2, false), "memory kept the compaction");
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(checkpoints(), (2, false), "memory kept the compaction");
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["failed"], Value::Null, "{status}");
    // The next turn carries the whole conversation, not a handoff.
    assert_answer(&say(&env, &model, "third"), "third", 3);
    assert!(
        !last_request(&model).contains("[agentx handoff]"),
        "{}",
        last_request(&model)
    );
    env.kill_daemons();
    assert_eq!(checkpoints(), (3, false));
    assert_profile_sound(&env);
    assert_answer(&say(&env, &model, "fourth"), "fourth", 4);
}
