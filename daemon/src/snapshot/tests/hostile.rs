//! Restores against hostile trees: symlinks swapped in, excluded, big,
//! unreadable and changing files, long and odd names, links, modes, owners.

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::Path;

use super::*;

#[test]
fn a_directory_swapped_for_a_symlink_never_redirects_a_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/file"), "mine").unwrap();
    let mut s = store(tmp.path());
    s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
    std::fs::remove_dir_all(root.join("d")).unwrap();
    symlink(&outside, root.join("d")).unwrap();
    let report = s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "wrote outside the folder"
    );
    assert!(std::fs::symlink_metadata(root.join("d")).unwrap().is_dir());
    assert_eq!(std::fs::read(root.join("d/file")).unwrap(), b"mine");
}

#[test]
fn excluded_and_oversized_paths_are_never_stored_or_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("sub/node_modules/x")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref").unwrap();
    std::fs::write(root.join("sub/node_modules/x/i.js"), "js").unwrap();
    let big = vec![7u8; (scan::MAX_FILE + 1) as usize];
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("small"), "s").unwrap();
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
    assert_eq!(snap.files, 1);
    // Change everything, then rewind: only `small` comes back.
    std::fs::write(root.join(".git/HEAD"), "changed").unwrap();
    std::fs::write(root.join("sub/node_modules/x/i.js"), "changed").unwrap();
    let big_changed = vec![9u8; (scan::MAX_FILE + 5) as usize];
    std::fs::write(root.join("big.bin"), &big_changed).unwrap();
    std::fs::write(root.join("small"), "changed").unwrap();
    let report = s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(std::fs::read(root.join("small")).unwrap(), b"s");
    assert_eq!(std::fs::read(root.join(".git/HEAD")).unwrap(), b"changed");
    assert_eq!(
        std::fs::read(root.join("sub/node_modules/x/i.js")).unwrap(),
        b"changed"
    );
    assert_eq!(std::fs::read(root.join("big.bin")).unwrap(), big_changed);
    // A created oversized file is not removed by a rewind either.
    std::fs::write(root.join("big2.bin"), &big).unwrap();
    s.rewind(&root, &RewindTo::Index(2)).unwrap();
    assert!(root.join("big2.bin").exists());
}

#[test]
fn home_folder_and_above_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = folder(tmp.path()).join("home");
    std::fs::create_dir(&home).unwrap();
    let mut s = SnapshotStore::open(
        &tmp.path().join("cp"),
        tmp.path().join("c.toml"),
        with_home(&home),
    )
    .unwrap();
    assert!(matches!(s.take(&home, vec![]), Err(SnapError::Home(_))));
    assert!(matches!(
        s.take(home.parent().unwrap(), vec![]),
        Err(SnapError::Home(_))
    ));
    std::fs::create_dir(home.join("project")).unwrap();
    assert!(s.take(&home.join("project"), vec![]).is_ok());
}

/// Takes a before/after pair for `session` around `edit`.
/// agentd's environment with `home` as its HOME.
fn with_home(home: &Path) -> Arc<crate::environment::Environment> {
    Arc::new(crate::environment::Environment::from_pairs([(
        "HOME", home,
    )]))
}

fn message(s: &mut SnapshotStore, root: &Path, session: &str, pair: &str, edit: impl FnOnce()) {
    s.take(root, vec![owner(session, Phase::Before, pair)])
        .unwrap();
    edit();
    s.take(root, vec![owner(session, Phase::After, pair)])
        .unwrap();
}

const MB: usize = 1024 * 1024;

#[test]
fn the_10_mb_rule_is_10_mib_and_a_restore_leaves_big_files_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    // Exactly 10 MiB is captured; one byte more is not.
    std::fs::write(root.join("edge"), vec![1u8; 10 * MB]).unwrap();
    std::fs::write(root.join("over"), vec![1u8; 10 * MB + 1]).unwrap();
    let snap = s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
    assert_eq!(snap.files, 1);
    assert_eq!(
        (snap.skipped, snap.skipped_why.as_str()),
        (1, "1 over 10 MB")
    );
    std::fs::remove_file(root.join("edge")).unwrap();
    std::fs::remove_file(root.join("over")).unwrap();

    // A small file grows past the limit: rewinding to before it grew, or
    // to before it existed, leaves it alone (listed, with why).
    std::fs::write(root.join("db"), "small\n").unwrap();
    s.take(&root, vec![owner("", Phase::Manual, "S")]).unwrap();
    let mut big = b"small\n".to_vec();
    big.extend(vec![0u8; 11 * MB]);
    std::fs::write(root.join("db"), &big).unwrap();
    s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
    let plan = s.plan_rewind(&root, &RewindTo::Index(2)).unwrap();
    assert!(plan.changes.is_empty(), "{plan:?}");
    assert_eq!(plan.left_alone.len(), 1, "{plan:?}");
    let report = s.rewind(&root, &RewindTo::Index(2)).unwrap();
    assert_eq!(report.left_alone.len(), 1);
    assert_eq!(std::fs::read(root.join("db")).unwrap(), big);
    let report = s.rewind(&root, &RewindTo::Index(4)).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(std::fs::read(root.join("db")).unwrap(), big);

    // A message truncates a 15 MB file: undo cannot put it back and must
    // not delete it.
    std::fs::write(root.join("data.csv"), vec![3u8; 15 * MB]).unwrap();
    message(&mut s, &root, "c", "t1", || {
        std::fs::write(root.join("data.csv"), "tiny").unwrap();
    });
    let report = s.undo(&root, "c", false).unwrap();
    assert_eq!(std::fs::read(root.join("data.csv")).unwrap(), b"tiny");
    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(report.left_alone.len(), 1, "{report:?}");

    // A message grows a 9.9 MB file past the limit; one replaces a folder
    // by a big file: undo leaves both alone.
    std::fs::write(root.join("grow"), vec![4u8; 10 * MB - 100_000]).unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/inner"), "inner").unwrap();
    message(&mut s, &root, "c", "t2", || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("grow"))
            .unwrap();
        std::io::Write::write_all(&mut f, &vec![5u8; 200_000]).unwrap();
        std::fs::remove_dir_all(root.join("dir")).unwrap();
        std::fs::write(root.join("dir"), vec![6u8; 12 * MB]).unwrap();
    });
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(
        std::fs::metadata(root.join("grow")).unwrap().len(),
        10 * MB as u64 + 100_000
    );
    assert_eq!(
        std::fs::metadata(root.join("dir")).unwrap().len(),
        12 * MB as u64
    );
}

fn skipped_entry(path: &str, reason: &[u8]) -> manifest::Entry {
    manifest::Entry {
        path: path.as_bytes().to_vec(),
        kind: Kind::Skipped,
        mode: 0,
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        ino: 0,
        racy: false,
        hash: [0; 32],
        target: reason.to_vec(),
        uid: 0,
        gid: 0,
        nlink: 1,
    }
}

#[test]
fn paths_that_were_unreadable_are_never_removed_as_created() {
    // The scan as `nobody` recorded notes.txt and locked/ as unreadable; the
    // message made them readable. Nothing may be removed.
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("notes.txt"), "precious").unwrap();
    std::fs::create_dir(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/k"), "in").unwrap();
    let mut s = store(tmp.path());
    let now = s.current(&root).unwrap();
    let before = Manifest::from_entries(
        now.iter()
            .filter(|e| e.path != b"locked/k")
            .map(|e| {
                skipped_entry(
                    std::str::from_utf8(&e.path).unwrap(),
                    manifest::why::UNREADABLE,
                )
            })
            .collect(),
    );
    let ops = restore::plan_undo(&before, &now, &now, &restore::Suspects::none());
    assert!(!ops.is_empty());
    for op in &ops {
        assert!(op.left_alone.is_some(), "{op:?}");
    }
    let ops = restore::plan_rewind(&before, &now);
    assert!(ops.iter().all(|o| o.left_alone.is_some()), "{ops:?}");
    // And the other way round: unreadable now, so never touched.
    let ops = restore::plan_rewind(&now, &before);
    assert!(ops.iter().all(|o| o.left_alone.is_some()), "{ops:?}");
}

#[test]
fn paths_longer_than_path_max_are_captured_and_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    s.take(&root, vec![owner("", Phase::Manual, "empty")])
        .unwrap();
    // 30 levels of 250-byte names: 7,500 bytes, beyond PATH_MAX (4,096).
    let name = "n".repeat(250);
    let fd = scan::open_dir_at(nix::fcntl::AT_FDCWD, root.as_os_str().as_encoded_bytes()).unwrap();
    let mut dir = fd;
    for level in 0..30 {
        nix::sys::stat::mkdirat(
            &dir,
            name.as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o755),
        )
        .unwrap();
        let f = nix::fcntl::openat(
            &dir,
            format!("f{level}").as_str(),
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CREAT,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        nix::unistd::write(&f, format!("level {level}").as_bytes()).unwrap();
        dir = scan::open_dir_at(&dir, name.as_bytes()).unwrap();
    }
    let snap = s
        .take(&root, vec![owner("", Phase::Manual, "deep")])
        .unwrap();
    assert_eq!(snap.files, 30);
    assert_eq!(snap.skipped, 0);
    // Rewinding to before the tree existed removes all of it.
    let report = s.rewind(&root, &RewindTo::Index(2)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    // And rewinding back puts every level back.
    s.rewind(&root, &RewindTo::Index(2)).unwrap();
    let again = s.take(&root, vec![]).unwrap();
    assert_eq!(again.files, 30);
}

#[test]
fn a_partial_undo_stays_current_and_force_applies_to_the_same_message() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("old"), "v0").unwrap();
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m1", || {
        std::fs::write(root.join("old"), "m1").unwrap()
    });
    message(&mut s, &root, "c", "m2", || {
        std::fs::write(root.join("a"), "m2").unwrap();
        std::fs::write(root.join("b"), "m2").unwrap();
    });
    // The user edits `a` after message 2: a conflict.
    std::fs::write(root.join("a"), "user").unwrap();
    let report = s.undo(&root, "c", false).unwrap();
    assert!(!report.undone);
    assert_eq!((report.applied.len(), report.skipped.len()), (1, 1));
    assert!(!root.join("b").exists());
    // --force now undoes message 2's `a`, not message 1.
    let report = s.undo(&root, "c", true).unwrap();
    assert!(report.undone, "{report:?}");
    assert!(!root.join("a").exists());
    assert_eq!(std::fs::read(root.join("old")).unwrap(), b"m1");
    // Then message 1.
    s.undo(&root, "c", false).unwrap();
    assert_eq!(std::fs::read(root.join("old")).unwrap(), b"v0");
}

#[test]
fn repeated_undo_walks_back_past_a_message_that_changed_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m1", || {
        std::fs::write(root.join("a.txt"), "a").unwrap()
    });
    message(&mut s, &root, "c", "m2", || {});
    let plan = s.plan_undo(&root, "c").unwrap();
    assert_eq!(plan.passed.len(), 1, "{plan:?}");
    assert!(plan.message.contains("Before"), "{plan:?}");
    assert_eq!(plan.changes.len(), 1);
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.undone);
    assert!(!root.join("a.txt").exists());
    assert!(matches!(
        s.plan_undo(&root, "c"),
        Err(SnapError::NotFound(_))
    ));
}

#[test]
fn hard_links_directory_modes_and_owners_are_restored() {
    use std::os::unix::fs::MetadataExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("a"), "o\n").unwrap();
    std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::set_permissions(root.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root_user = nix::unistd::geteuid().is_root();
    if root_user {
        std::fs::write(root.join("suid"), "x").unwrap();
        std::os::unix::fs::chown(root.join("suid"), Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(root.join("suid"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
    } else {
        // Straight to stderr: libtest captures eprintln! of passing tests.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED: hard_links_directory_modes_and_owners_are_restored: the owner part needs root"
        );
    }
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m", || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("a"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"c\n").unwrap();
        std::fs::set_permissions(root.join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
        if root_user {
            std::fs::write(root.join("suid"), "changed").unwrap();
        }
    });
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    let (a, b) = (root.join("a"), root.join("b"));
    assert_eq!(std::fs::read(&a).unwrap(), b"o\n");
    assert_eq!(
        std::fs::metadata(&a).unwrap().ino(),
        std::fs::metadata(&b).unwrap().ino()
    );
    assert_eq!(
        std::fs::metadata(root.join("d")).unwrap().mode() & 0o7777,
        0o700
    );
    if root_user {
        let m = std::fs::metadata(root.join("suid")).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (65534, 65534, 0o4755)
        );
    }
    // A rewind also rejoins links a tool split (same content, two inodes).
    s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
    std::fs::remove_file(&b).unwrap();
    std::fs::write(&b, "o\n").unwrap();
    let plan = s.plan_rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(!plan.changes.is_empty(), "split links not seen");
    s.rewind(&root, &RewindTo::Index(2)).unwrap();
    assert_eq!(
        std::fs::metadata(&a).unwrap().ino(),
        std::fs::metadata(&b).unwrap().ino()
    );
}

#[test]
fn the_racy_timestamp_rule_rehashes_entries_modified_near_a_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("f"), "new content").unwrap();
    let mut s = store(tmp.path());
    // A fresh file is racy (modified within 2 s of the scan).
    let now = s.current(&root).unwrap();
    assert!(now.get(0).unwrap().racy);
    // A previous manifest whose stat data matches exactly but whose hash
    // is stale: trusted when not racy, re-hashed when racy.
    let stale = *blake3::hash(b"old content").as_bytes();
    let mut pack = s.blobs.begin().unwrap();
    pack.append(stale, &blobs::compress(b"old content").unwrap(), 11)
        .unwrap();
    s.blobs.finish(pack).unwrap();
    let mut entries = now.to_vec();
    entries[0].hash = stale;
    entries[0].racy = true;
    let prev = Manifest::from_entries(entries.clone());
    let ex = s.extra_excludes();
    let mut pack = s.blobs.begin().unwrap();
    let (m, _) = scan::scan(&root, &ex, Some(&prev), s.blobs.known(), &mut pack).unwrap();
    assert_eq!(
        m.get(0).unwrap().hash,
        *blake3::hash(b"new content").as_bytes(),
        "racy entry trusted"
    );
    entries[0].racy = false;
    let prev = Manifest::from_entries(entries);
    let (m, _) = scan::scan(&root, &ex, Some(&prev), s.blobs.known(), &mut pack).unwrap();
    assert_eq!(m.get(0).unwrap().hash, stale, "the stat cache was not used");
    s.blobs.abandon(pack);
}

#[test]
fn recovery_removes_only_its_own_temp_files_and_user_files_named_alike_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("keep"), "v1").unwrap();
    // The user's own files whose names look like a restore's temp files.
    std::fs::write(root.join(".agentx-restore-notes.txt"), "mine").unwrap();
    std::fs::write(root.join(".agentx-restore-keep"), "mine too").unwrap();
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    assert_eq!(snap.files, 3, "a user's file is captured whatever its name");
    std::fs::write(root.join("keep"), "v2").unwrap();
    // As if agentd died mid-restore: journal written, a temp file left.
    let token = "00112233aabbccdd";
    let temp = root.join(String::from_utf8(restore::temp_name(token, b"keep")).unwrap());
    std::fs::write(&temp, "half").unwrap();
    let dir = s.folder(&root).unwrap().dir.clone();
    let journal = RestoreJournal {
        want_manifest: snap.manifest.clone(),
        paths: vec![b"keep".to_vec()],
        token: token.to_owned(),
    };
    journal.write(&dir).unwrap();
    drop(s);
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    assert!(!temp.exists(), "the restore's own temp file stayed");
    assert_eq!(std::fs::read(root.join("keep")).unwrap(), b"v1");
    assert_eq!(snap.files, 3);
    for mine in [".agentx-restore-notes.txt", ".agentx-restore-keep"] {
        assert!(root.join(mine).exists(), "{mine} was removed");
    }
}

#[test]
fn an_undo_brings_back_a_directory_named_like_a_temp_file_and_keeps_the_users() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::create_dir(root.join(".agentx-restore-dir")).unwrap();
    std::fs::write(root.join(".agentx-restore-dir/f"), "f").unwrap();
    std::fs::write(root.join(".agentx-restore-notes.txt"), "mine").unwrap();
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m", || {
        std::fs::remove_dir_all(root.join(".agentx-restore-dir")).unwrap();
        std::fs::write(root.join("notes.txt"), "the model's").unwrap();
    });
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(
        std::fs::read(root.join(".agentx-restore-dir/f")).unwrap(),
        b"f"
    );
    assert_eq!(
        std::fs::read(root.join(".agentx-restore-notes.txt")).unwrap(),
        b"mine"
    );
    assert!(!root.join("notes.txt").exists());
}

#[test]
fn names_with_newlines_are_escaped_in_listings() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    s.take(&root, vec![]).unwrap();
    std::fs::write(root.join("evil\nmodified → restore  fake\tname"), "x").unwrap();
    let plan = s.plan_rewind(&root, &RewindTo::Index(1)).unwrap();
    assert_eq!(plan.changes.len(), 1);
    let shown = &plan.changes[0].path;
    assert!(!shown.contains('\n') && !shown.contains('\t'), "{shown:?}");
    assert!(shown.contains("\\n"), "{shown:?}");
}

#[test]
fn a_folder_holding_excluded_content_is_not_listed_as_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    s.take(&root, vec![]).unwrap();
    std::fs::create_dir_all(root.join("pkg/node_modules/x")).unwrap();
    std::fs::write(root.join("pkg/node_modules/x/i.js"), "js").unwrap();
    std::fs::write(root.join("pkg/a"), "a").unwrap();
    let plan = s.plan_rewind(&root, &RewindTo::Index(1)).unwrap();
    let paths: Vec<&str> = plan.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["pkg/a"], "{plan:?}");
    s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(root.join("pkg/node_modules/x/i.js").exists());
    assert!(!root.join("pkg/a").exists());
}

#[test]
fn a_home_reached_through_a_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = folder(tmp.path());
    let link = tmp.path().join("home-link");
    symlink(&real, &link).unwrap();
    let mut s = SnapshotStore::open(
        &tmp.path().join("cp"),
        tmp.path().join("c.toml"),
        with_home(&link),
    )
    .unwrap();
    assert!(matches!(s.take(&real, vec![]), Err(SnapError::Home(_))));
}

/// A file rewritten while the scan reads it is never stored half old, half
/// new: the read is retried, and a file that keeps changing is recorded as
/// not captured ("changing while it was read") — which a restore leaves
/// alone.
#[test]
fn a_file_changing_while_read_is_reread_or_recorded_as_not_captured() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let path = root.join("busy.log");
    std::fs::write(&path, "first version\n").unwrap();
    let mut s = store(tmp.path());
    // Appends once, during the first read: the second read is stable.
    let writes = Arc::new(AtomicU32::new(0));
    let (w, p) = (Arc::clone(&writes), path.clone());
    let hooked = seams::on_file_read(Box::new(move |rel: &[u8]| {
        if rel == b"busy.log" && w.fetch_add(1, Ordering::SeqCst) == 0 {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            f.write_all(b"appended\n").unwrap();
        }
    }));
    let taken = s.take(&root, vec![]);
    drop(hooked);
    taken.unwrap();
    let (_, m, _) = s.latest(&root).unwrap().unwrap();
    let e = m.find(b"busy.log").unwrap();
    assert_eq!(e.kind, manifest::Kind::File);
    assert_eq!(e.size, "first version\nappended\n".len() as u64);
    assert_eq!(
        e.hash,
        *blake3::hash(b"first version\nappended\n").as_bytes()
    );

    // Appends during every read: recorded as not captured, with why.
    let p = path.clone();
    let hooked = seams::on_file_read(Box::new(move |rel: &[u8]| {
        if rel == b"busy.log" {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            f.write_all(b"more\n").unwrap();
        }
    }));
    let taken = s.take(&root, vec![]);
    drop(hooked);
    taken.unwrap();
    let (_, m, _) = s.latest(&root).unwrap().unwrap();
    let e = m.find(b"busy.log").unwrap();
    assert_eq!(e.kind, manifest::Kind::Skipped, "{e:?}");
    assert_eq!(e.target, manifest::why::CHANGING);

    // Rewritten in place with the same length during the first read (a
    // size check alone passes it): the stored content is the new one.
    let same = path.with_file_name("same.txt");
    std::fs::write(&same, "version one\n").unwrap();
    let (w, p) = (Arc::new(AtomicU32::new(0)), same.clone());
    let hooked = seams::on_file_read(Box::new(move |rel: &[u8]| {
        if rel == b"same.txt" && w.fetch_add(1, Ordering::SeqCst) == 0 {
            std::fs::write(&p, "version two\n").unwrap();
            // A distinct mtime, whatever the clock's granularity.
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        }
    }));
    let taken = s.take(&root, vec![]);
    drop(hooked);
    taken.unwrap();
    let (_, m, _) = s.latest(&root).unwrap().unwrap();
    let e = m.find(b"same.txt").unwrap();
    assert_eq!(e.hash, *blake3::hash(b"version two\n").as_bytes(), "{e:?}");
}

#[test]
fn a_save_that_lands_while_undo_writes_is_kept_and_listed_as_a_conflict() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    // Fewer than a parallel restore takes: put back in path order.
    let names: Vec<String> = (0..20).map(|i| format!("f{i:03}")).collect();
    for n in &names {
        std::fs::write(root.join(n), "before").unwrap();
    }
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m", || {
        for n in &names {
            std::fs::write(root.join(n), "the model's").unwrap();
        }
    });
    // An editor saves the last file as soon as the first one is restored.
    let last = root.join(names.last().unwrap());
    let saved = Arc::new(AtomicU32::new(0));
    let (flag, path) = (Arc::clone(&saved), last.clone());
    let hooked = seams::on_restored(Box::new(move |rel: &[u8]| {
        if rel == b"f000" && flag.fetch_add(1, Ordering::SeqCst) == 0 {
            std::fs::write(&path, "the user's save").unwrap();
        }
    }));
    let report = s.undo(&root, "c", false);
    drop(hooked);
    let report = report.unwrap();
    assert_eq!(saved.load(Ordering::SeqCst), 1, "the editor never saved");
    assert_eq!(std::fs::read(&last).unwrap(), b"the user's save");
    for n in &names[..names.len() - 1] {
        assert_eq!(std::fs::read(root.join(n)).unwrap(), b"before", "{n}");
    }
    assert_eq!(report.applied.len(), names.len() - 1, "{report:?}");
    assert!(
        report
            .skipped
            .iter()
            .any(|p| p.path == *names.last().unwrap() && p.conflict),
        "{report:?}"
    );
    assert!(!report.undone);
}

#[test]
fn a_folder_renamed_away_while_undo_writes_is_not_made_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::create_dir(root.join("d")).unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("d/f{i:03}")).collect();
    for n in &names {
        std::fs::write(root.join(n), "before").unwrap();
    }
    let mut s = store(tmp.path());
    message(&mut s, &root, "c", "m", || {
        for n in &names {
            std::fs::write(root.join(n), "the model's").unwrap();
        }
    });
    let moved = Arc::new(AtomicU32::new(0));
    let (flag, r) = (Arc::clone(&moved), root.clone());
    let hooked = seams::on_restored(Box::new(move |rel: &[u8]| {
        if rel == b"d/f000" && flag.fetch_add(1, Ordering::SeqCst) == 0 {
            std::fs::rename(r.join("d"), r.join("d.real")).unwrap();
        }
    }));
    let report = s.undo(&root, "c", false);
    drop(hooked);
    let report = report.unwrap();
    assert_eq!(moved.load(Ordering::SeqCst), 1);
    assert!(!root.join("d").exists(), "d/ was made again: {report:?}");
    assert_eq!(report.applied.len(), 1, "{report:?}");
    assert_eq!(report.skipped.len(), names.len() - 1, "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
}

#[test]
fn fifos_and_sockets_a_message_deletes_or_makes_are_named_as_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    std::fs::write(root.join("notes.txt"), "one").unwrap();
    nix::unistd::mkfifo(
        &root.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let listener = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
    // The message deletes both and changes a file.
    message(&mut s, &root, "c", "t1", || {
        std::fs::remove_file(root.join("pipe")).unwrap();
        std::fs::remove_file(root.join("sock")).unwrap();
        std::fs::write(root.join("notes.txt"), "two").unwrap();
    });
    drop(listener);
    let plan = s.plan_undo(&root, "c").unwrap();
    let named = |list: &[Planned]| -> Vec<(String, String)> {
        list.iter()
            .map(|p| (p.path.clone(), p.reason.clone()))
            .collect()
    };
    let expected = vec![
        (
            "pipe".to_owned(),
            "was a named pipe (FIFO): agentx does not capture those, so it is not made again"
                .to_owned(),
        ),
        (
            "sock".to_owned(),
            "was a socket: agentx does not capture those, so it is not made again".to_owned(),
        ),
    ];
    assert_eq!(named(&plan.left_alone), expected, "{plan:?}");
    let report = s.undo(&root, "c", false).unwrap();
    assert_eq!(report.applied.len(), 1, "{report:?}");
    assert_eq!(named(&report.left_alone), expected, "{report:?}");
    assert!(report.undone, "{report:?}");
    assert_eq!(std::fs::read(root.join("notes.txt")).unwrap(), b"one");

    // A message that makes them (in a folder of its own, too): undo
    // leaves them, and the folder holding one, where they are, and says so.
    message(&mut s, &root, "c", "t2", || {
        nix::unistd::mkfifo(
            &root.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        std::fs::create_dir(root.join("run")).unwrap();
        let l = std::os::unix::net::UnixListener::bind(root.join("run/sock")).unwrap();
        drop(l);
    });
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(
        named(&report.left_alone),
        vec![
            (
                "pipe".to_owned(),
                "is a named pipe (FIFO) now: agentx does not capture those, so it is left as it is"
                    .to_owned()
            ),
            (
                "run".to_owned(),
                "holds files agentx could not capture: the folder stays".to_owned()
            ),
            (
                "run/sock".to_owned(),
                "is a socket now: agentx does not capture those, so it is left as it is".to_owned()
            ),
        ],
        "{report:?}"
    );
    assert!(root.join("pipe").exists() && root.join("run/sock").exists());
}

#[test]
fn a_folder_the_message_made_and_the_user_filled_is_a_conflict_not_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    std::fs::write(root.join("keep.txt"), "k").unwrap();
    message(&mut s, &root, "c", "t1", || {
        std::fs::create_dir(root.join("gen")).unwrap();
        std::fs::write(root.join("gen/out.txt"), "generated").unwrap();
    });
    // The user saves a file of their own in the folder the message made.
    std::fs::write(root.join("gen/mine.txt"), "mine").unwrap();
    let plan = s.plan_undo(&root, "c").unwrap();
    let gen_planned = plan.changes.iter().find(|p| p.path == "gen").unwrap();
    assert!(gen_planned.conflict, "{plan:?}");

    let report = s.undo(&root, "c", false).unwrap();
    let paths = |l: &[Planned]| l.iter().map(|p| p.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&report.applied), ["gen/out.txt"], "{report:?}");
    assert_eq!(paths(&report.skipped), ["gen"], "{report:?}");
    assert!(!report.undone, "{report:?}");
    assert_eq!(std::fs::read(root.join("gen/mine.txt")).unwrap(), b"mine");

    // Forced, the write phase finds it not empty: still a conflict, kept,
    // never counted as restored.
    let report = s.undo(&root, "c", true).unwrap();
    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(paths(&report.skipped), ["gen"], "{report:?}");
    assert_eq!(
        report.skipped[0].reason,
        "holds files this undo does not remove (yours): the folder stays with them"
    );
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(!report.undone, "{report:?}");
    assert_eq!(std::fs::read(root.join("gen/mine.txt")).unwrap(), b"mine");

    // Once the user's file is gone, the undo completes.
    std::fs::remove_file(root.join("gen/mine.txt")).unwrap();
    let report = s.undo(&root, "c", false).unwrap();
    assert_eq!(paths(&report.applied), ["gen"], "{report:?}");
    assert!(report.undone, "{report:?}");
    assert!(!root.join("gen").exists());
}
