//! Undo never writes over a change the watcher could not see: a renamed
//! parent with a new checkout in its place, a mount inside the folder, a
//! write through a hard link from outside or through a shared mapping, two
//! names of one file; and changes of another conversation that ran at the
//! same time. The watcher is on (the default) in every test here.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, is_root, skip, stderr};

/// The project folder inside the env's work folder (so its parent can be
/// renamed), with `files` in it.
fn project(env: &TestEnv, files: &[(&str, &str)]) -> PathBuf {
    let proj = env.work.join("proj");
    for (path, text) in files {
        let p = proj.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    proj
}

/// One message in `proj` whose shell call runs `command`.
fn message(env: &TestEnv, model: &FakeModel, proj: &Path, command: &str) {
    let proj = proj.to_str().unwrap();
    let out = env.chat(model, ["--auto", "-C", proj], &format!("CALL {command}\n"));
    assert_code(&out, 0);
}

fn undo(env: &TestEnv, proj: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["-C", proj.to_str().unwrap(), "undo", "--yes"];
    args.extend_from_slice(extra);
    env.run(args)
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn a_new_checkout_where_a_renamed_parent_was_is_never_overwritten() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("a.txt", "one\n"), ("keep.txt", "k\n")]);
    // Two messages: the second one's snapshots come from the watcher.
    message(&env, &model, &proj, "echo k2 > keep.txt");
    message(
        &env,
        &model,
        &proj,
        "echo two > a.txt && echo made > new.txt",
    );

    // `mv ~/work ~/work-old; git clone … ~/work/proj`
    std::fs::rename(&env.work, env.root().join("work-old")).unwrap();
    let proj = project(
        &env,
        &[("a.txt", "the new checkout\n"), ("new.txt", "made\n")],
    );
    let out = undo(&env, &proj, &[]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(read(proj.join("a.txt")), "the new checkout\n");
    // Same content as the message made, but another checkout's file.
    assert_eq!(read(proj.join("new.txt")), "made\n");
    // The old tree, now elsewhere, is not touched either.
    assert_eq!(read(env.root().join("work-old/proj/a.txt")), "two\n");
}

/// `mount ARGS`, or None when this machine cannot mount (not root).
fn mount(args: &[&str]) -> Option<()> {
    if !is_root() {
        skip("mounting a file system needs root");
        return None;
    }
    let ok = Command::new("mount").args(args).status().unwrap().success();
    assert!(ok, "mount {args:?} failed");
    Some(())
}

fn umount(path: &Path) {
    assert!(Command::new("umount").arg(path).status().unwrap().success());
}

#[test]
fn undo_never_writes_into_a_file_system_mounted_in_the_folder_after_the_message() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(
        &env,
        &[
            ("sub/x.txt", "one\n"),
            ("sub/y.txt", "y\n"),
            ("t/z.txt", "z\n"),
        ],
    );
    message(&env, &model, &proj, "echo warm > t/z.txt");
    message(
        &env,
        &model,
        &proj,
        "echo two > sub/x.txt && rm sub/y.txt && echo two > t/z.txt",
    );

    // A bind mount of a directory outside the folder over sub/, and a
    // tmpfs over t/.
    let outside = env.root().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("x.txt"), "outside's own\n").unwrap();
    let sub = proj.join("sub");
    let t = proj.join("t");
    if mount(&["--bind", outside.to_str().unwrap(), sub.to_str().unwrap()]).is_none() {
        return;
    }
    mount(&["-t", "tmpfs", "none", t.to_str().unwrap()]);
    std::fs::write(t.join("z.txt"), "in the tmpfs\n").unwrap();

    let out = undo(&env, &proj, &[]);
    let (x, z) = (read(outside.join("x.txt")), read(t.join("z.txt")));
    let y_outside = outside.join("y.txt").exists();
    umount(&sub);
    umount(&t);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(x, "outside's own\n", "undo wrote through the bind mount");
    assert!(!y_outside, "undo created a file in the bind source");
    assert_eq!(z, "in the tmpfs\n", "undo wrote into the tmpfs");
    // Under the mounts, the message's state is still there.
    assert_eq!(read(proj.join("sub/x.txt")), "two\n");
    assert_eq!(read(proj.join("t/z.txt")), "two\n");
}

#[test]
fn a_write_through_a_hard_link_from_outside_the_folder_is_a_conflict() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("other.txt", "o\n")]);
    let outside = env.root().join("outside.txt");
    std::fs::write(&outside, "one\n").unwrap();
    std::fs::hard_link(&outside, proj.join("f.txt")).unwrap();
    message(&env, &model, &proj, "echo o2 > other.txt");
    message(&env, &model, &proj, "echo two > f.txt");
    // Written through the outside name: no event in the folder.
    std::fs::write(&outside, "the user's\n").unwrap();

    let out = undo(&env, &proj, &[]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(read(proj.join("f.txt")), "the user's\n");
    let (a, b) = (
        std::fs::metadata(&outside).unwrap(),
        std::fs::metadata(proj.join("f.txt")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "the link was broken");
}

#[test]
fn a_write_through_a_shared_mapping_held_across_the_message_is_a_conflict() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("m.txt", "one one one\n"), ("w.txt", "w\n")]);
    message(&env, &model, &proj, "echo w2 > w.txt");
    // A process maps m.txt before the message and writes through the
    // mapping after it: no system call on the file, so no inotify event.
    let (ready, go, done) = (
        env.root().join("mapped"),
        env.root().join("go"),
        env.root().join("written"),
    );
    let script = format!(
        "import mmap, os, time\n\
         f = open({m:?}, 'r+b'); mm = mmap.mmap(f.fileno(), 12)\n\
         open({ready:?}, 'w').close()\n\
         while not os.path.exists({go:?}): time.sleep(0.01)\n\
         mm[0:4] = b'USER'; mm.flush()\n\
         open({done:?}, 'w').close()\n\
         time.sleep(600)\n",
        m = proj.join("m.txt").to_str().unwrap(),
        ready = ready.to_str().unwrap(),
        go = go.to_str().unwrap(),
        done = done.to_str().unwrap(),
    );
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .spawn()
        .unwrap();
    let wait = |p: &Path| {
        for _ in 0..1000 {
            if p.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{} never appeared", p.display());
    };
    wait(&ready);
    message(&env, &model, &proj, "printf 'two two two\\n' > m.txt");
    // The timestamps a write fault sets come from a coarse clock: let it
    // move on from the message's own write.
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(&go, "").unwrap();
    wait(&done);

    let out = undo(&env, &proj, &[]);
    let _ = child.kill();
    let _ = child.wait();
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(read(proj.join("m.txt")), "USERtwo two\n");
}

#[test]
fn two_names_of_one_file_are_restored_together_and_stay_linked() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("a/x", "one\n"), ("c/w", "w\n")]);
    std::fs::create_dir(proj.join("b")).unwrap();
    std::fs::hard_link(proj.join("a/x"), proj.join("b/y")).unwrap();
    message(&env, &model, &proj, "echo w2 > c/w");
    message(&env, &model, &proj, "echo two > a/x");
    assert_eq!(read(proj.join("b/y")), "two\n");

    let out = undo(&env, &proj, &[]);
    assert_code(&out, 0);
    assert_eq!(read(proj.join("a/x")), "one\n", "{}", stderr(&out));
    assert_eq!(read(proj.join("b/y")), "one\n", "{}", stderr(&out));
    let (x, y) = (
        std::fs::metadata(proj.join("a/x")).unwrap(),
        std::fs::metadata(proj.join("b/y")).unwrap(),
    );
    assert_eq!(x.ino(), y.ino(), "the two names are no longer one file");
}

/// Agent a's message writes a.txt, then waits while `other` (another
/// agent's message, or a one-shot) writes b.txt and appends to shared.txt;
/// then a's undo.
fn concurrent_then_undo(other: &[&str]) {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("shared.txt", "s\n")]);
    let p = proj.to_str().unwrap();
    let go = env.root().join("other-done");
    let a = env.chat_command(
        &model,
        ["--auto", "--agent", "a", "-C", p],
        &format!(
            "CALL echo A > a.txt; while [ ! -e {} ]; do sleep 0.02; done\n",
            go.display()
        ),
    );
    let flag = proj.join("a.txt");
    for _ in 0..1000 {
        if flag.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut args = vec!["--auto", "-C", p];
    args.extend_from_slice(other);
    let b = env.chat(&model, args, "CALL echo B > b.txt; echo B >> shared.txt\n");
    assert_code(&b, 0);
    std::fs::write(&go, "").unwrap();
    assert_code(&a.wait_with_output().unwrap(), 0);

    let out = env.run(["--agent", "a", "-C", p, "undo", "--yes"]);
    assert_code(&out, 0);
    assert!(stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(read(proj.join("b.txt")), "B\n");
    assert_eq!(read(proj.join("shared.txt")), "s\nB\n");
    // a.txt changed before the other message began: a's alone, taken back.
    assert!(!flag.exists(), "{}", stderr(&out));
}

#[test]
fn undo_does_not_take_back_what_another_conversation_changed_meanwhile() {
    concurrent_then_undo(&["--agent", "b"]);
}

#[test]
fn undo_does_not_take_back_what_a_one_shot_changed_meanwhile() {
    concurrent_then_undo(&["exec", "-"]);
}

/// The mount rule does not misfire: a directory an earlier undo re-created
/// (a new inode, same file system) is no reason for a conflict.
#[test]
fn repeated_undo_through_a_re_created_directory_has_no_conflict() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let proj = project(&env, &[("d/x", "one\n"), ("w", "w\n")]);
    message(&env, &model, &proj, "echo w2 > w");
    message(&env, &model, &proj, "echo two > d/x");
    message(&env, &model, &proj, "rm -rf d");
    let out = undo(&env, &proj, &[]);
    assert_code(&out, 0);
    assert_eq!(read(proj.join("d/x")), "two\n");
    let out = undo(&env, &proj, &[]);
    assert_code(&out, 0);
    assert!(!stderr(&out).contains("conflict"), "{}", stderr(&out));
    assert_eq!(read(proj.join("d/x")), "one\n");
}
