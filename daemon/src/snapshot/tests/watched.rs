//! Tests of watcher-based snapshots on real temp trees: random edit
//! sequences where each watcher-based snapshot must equal a full scan, and
//! each fall-back path forced.

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use agentx_shared::rng::Rng;

use super::*;

fn store(profile: &Path) -> SnapshotStore {
    let mut s = SnapshotStore::open(
        &profile.join("checkpoints"),
        profile.join("config.toml"),
        std::sync::Arc::default(),
    )
    .unwrap();
    let cfg = s.watch.config_mut();
    cfg.enabled = true;
    cfg.verify_every = u32::MAX;
    cfg.max_dirs = 100_000;
    cfg.max_folders = 16;
    s
}

fn manual() -> Vec<Owner> {
    vec![Owner {
        session: String::new(),
        phase: Phase::Manual,
        pair: String::new(),
        label: String::new(),
    }]
}

/// Takes a snapshot and checks it against an independent full scan.
fn take_exact(s: &mut SnapshotStore, folder: &Path) -> Arc<Manifest> {
    s.take(folder, manual()).unwrap();
    let (_, got, _) = s.latest(folder).unwrap().unwrap();
    let mut pack = s.blobs.begin().unwrap();
    let (full, _) = scan::scan(
        folder,
        &s.extra_excludes(),
        None,
        s.blobs.known(),
        &mut pack,
    )
    .unwrap();
    s.blobs.abandon(pack);
    if let Some(diff) = incremental::first_difference(&got, &full) {
        let path = diff.split(' ').next().unwrap_or_default().as_bytes();
        panic!(
            "watcher-based snapshot differs from a full scan: {diff}\nwatcher: {:?}\nscan: {:?}",
            got.find(path),
            full.find(path)
        );
    }
    got
}

/// Directories (relative, "" = root) and files/links of the visible tree.
fn listing(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut dirs, mut files) = (vec![PathBuf::new()], Vec::new());
    let mut stack = vec![PathBuf::new()];
    while let Some(d) = stack.pop() {
        let Ok(read) = std::fs::read_dir(root.join(&d)) else {
            continue;
        };
        for e in read.flatten() {
            let rel = d.join(e.file_name());
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                if e.file_name() == "node_modules" {
                    continue;
                }
                dirs.push(rel.clone());
                stack.push(rel);
            } else {
                files.push(rel);
            }
        }
    }
    dirs.sort();
    files.sort();
    (dirs, files)
}

/// One random edit of the kinds a tool or a user makes.
fn edit(rng: &mut Rng, root: &Path, outside: &Path, n: u64) {
    let (dirs, files) = listing(root);
    let subdirs: Vec<PathBuf> = dirs
        .iter()
        .filter(|d| !d.as_os_str().is_empty())
        .cloned()
        .collect();
    let dir = rng.pick(&dirs).unwrap_or_default();
    let at = |p: &Path| root.join(p);
    let fresh = |d: &Path, tag: &str| d.join(format!("{tag}{n}"));
    match rng.below(21) {
        0 => std::fs::write(at(&fresh(&dir, "f")), format!("new {n}")).unwrap(),
        1 => {
            if let Some(f) = rng.pick(&files) {
                let mut o = std::fs::OpenOptions::new().append(true).open(at(&f));
                if let Ok(o) = &mut o {
                    let _ = std::io::Write::write_all(o, b"more\n");
                }
            }
        }
        2 => {
            // Same size, same mtime: an edit inside the racy window.
            if let Some(f) = rng.pick(&files)
                && let Ok(meta) = std::fs::symlink_metadata(at(&f))
                && meta.is_file()
            {
                let old = std::fs::read(at(&f)).unwrap();
                let flipped: Vec<u8> = old.iter().map(|b| b ^ 1).collect();
                std::fs::write(at(&f), flipped).unwrap();
                let file = std::fs::File::options().write(true).open(at(&f)).unwrap();
                file.set_modified(meta.modified().unwrap()).unwrap();
            }
        }
        3 => {
            if let Some(f) = rng.pick(&files) {
                let _ = std::fs::remove_file(at(&f));
            }
        }
        4 => {
            if let Some(f) = rng.pick(&files)
                && std::fs::symlink_metadata(at(&f)).is_ok_and(|m| m.is_file())
            {
                let mode = if rng.below(2) == 0 { 0o755 } else { 0o600 };
                let _ = std::fs::set_permissions(at(&f), std::fs::Permissions::from_mode(mode));
            }
        }
        5 => {
            if let Some(d) = rng.pick(&subdirs) {
                let mode = if rng.below(2) == 0 { 0o755 } else { 0o711 };
                let _ = std::fs::set_permissions(at(&d), std::fs::Permissions::from_mode(mode));
            }
        }
        6 => {
            if let Some(f) = rng.pick(&files) {
                let _ = std::fs::rename(at(&f), at(&fresh(&dir, "mv")));
            }
        }
        7 => {
            // Rename a directory somewhere else in the tree (not into itself).
            if let Some(d) = rng.pick(&subdirs)
                && !dir.starts_with(&d)
            {
                let _ = std::fs::rename(at(&d), at(&fresh(&dir, "md")));
            }
        }
        8 => {
            if let Some(d) = rng.pick(&subdirs) {
                let _ = std::fs::remove_dir_all(at(&d));
            }
        }
        9 => {
            let target = match rng.below(3) {
                0 => "missing".to_owned(),
                1 => "..".to_owned(),
                _ => files
                    .first()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default(),
            };
            let _ = symlink(target, at(&fresh(&dir, "ln")));
        }
        10 => {
            // File -> directory with content.
            if let Some(f) = rng.pick(&files) {
                let _ = std::fs::remove_file(at(&f));
                if std::fs::create_dir(at(&f)).is_ok() {
                    std::fs::write(at(&f).join("inside"), "inside").unwrap();
                }
            }
        }
        11 => {
            // Directory -> file.
            if let Some(d) = rng.pick(&subdirs) {
                let _ = std::fs::remove_dir_all(at(&d));
                let _ = std::fs::write(at(&d), "was a dir");
            }
        }
        12 => {
            // Edits inside newly created directories.
            let deep = fresh(&dir, "nd").join("a").join("b");
            std::fs::create_dir_all(at(&deep)).unwrap();
            std::fs::write(at(&deep).join("x"), "x").unwrap();
            std::fs::write(at(&deep).parent().unwrap().join("y"), "y").unwrap();
            std::fs::write(at(&deep).join("x"), "x2").unwrap();
        }
        13 => {
            // A directory moved out of the folder, or one moved in.
            let parked: Vec<PathBuf> = std::fs::read_dir(outside)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            if rng.below(2) == 0
                && let Some(d) = rng.pick(&subdirs)
            {
                let _ = std::fs::rename(at(&d), outside.join(format!("out{n}")));
            } else if let Some(p) = rng.pick(&parked) {
                let _ = std::fs::rename(p, at(&fresh(&dir, "in")));
            } else {
                let p = outside.join(format!("made{n}"));
                std::fs::create_dir_all(p.join("sub")).unwrap();
                std::fs::write(p.join("sub").join("z"), "z").unwrap();
                let _ = std::fs::rename(p, at(&fresh(&dir, "in")));
            }
        }
        14 => {
            // Excluded directories stay out, whatever happens inside them.
            let nm = at(&dir).join("node_modules").join("pkg");
            let _ = std::fs::create_dir_all(&nm);
            let _ = std::fs::write(nm.join(format!("m{n}")), "module");
        }
        15 => {
            // A directory renamed over an existing empty one.
            if let Some(d) = rng.pick(&subdirs) {
                let empty = fresh(&dir, "e");
                std::fs::create_dir(at(&empty)).unwrap();
                if !empty.starts_with(&d) {
                    let _ = std::fs::rename(at(&d), at(&empty));
                }
            }
        }
        16 => {
            // Symlink <-> directory.
            let (_, files) = listing(root);
            let links: Vec<PathBuf> = files
                .into_iter()
                .filter(|f| std::fs::symlink_metadata(at(f)).is_ok_and(|m| m.is_symlink()))
                .collect();
            if let Some(l) = rng.pick(&links) {
                let _ = std::fs::remove_file(at(&l));
                if std::fs::create_dir(at(&l)).is_ok() {
                    std::fs::write(at(&l).join("was-link"), "w").unwrap();
                }
            }
        }
        18 => {
            // A second name of a file, in another directory (later writes
            // through either name change both).
            if let Some(f) = rng.pick(&files)
                && std::fs::symlink_metadata(at(&f)).is_ok_and(|m| m.is_file())
            {
                let _ = std::fs::hard_link(at(&f), at(&fresh(&dir, "hl")));
            }
        }
        19 => {
            // A file with a name outside the folder, written through it (no
            // event in the folder); or linked in first.
            let ext = outside.with_file_name("ext");
            std::fs::create_dir_all(&ext).unwrap();
            let names: Vec<PathBuf> = std::fs::read_dir(&ext)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            match rng.pick(&names) {
                Some(p) if rng.below(3) > 0 => {
                    std::fs::write(&p, format!("written outside {n}")).unwrap();
                }
                _ => {
                    let p = ext.join(format!("x{n}"));
                    std::fs::write(&p, "linked in").unwrap();
                    let _ = std::fs::hard_link(&p, at(&fresh(&dir, "hx")));
                }
            }
        }
        20 => {
            // An in-place write (same inode) of a file that may have
            // other names.
            if let Some(f) = rng.pick(&files)
                && std::fs::symlink_metadata(at(&f)).is_ok_and(|m| m.is_file())
            {
                std::fs::write(at(&f), format!("in place {n}")).unwrap();
            }
        }
        _ => {
            // An editor's atomic save: write a temp file, rename it over.
            if let Some(f) = rng.pick(&files) {
                let tmp = at(&dir).join(format!(".tmp{n}"));
                std::fs::write(&tmp, format!("saved {n}")).unwrap();
                let _ = std::fs::rename(&tmp, at(&f));
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
}

/// Tmpfs mounts made by [`structural_edit`], unmounted when dropped (also
/// when a test fails).
#[derive(Default)]
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in self.0.iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(m)
                .status();
        }
    }
}

/// One edit of the folder's structure that no event reports, so the next
/// snapshot must be a full scan: its parent renamed and a copy put where it
/// was, or (as root) a tmpfs mounted on a directory or unmounted again.
fn structural_edit(rng: &mut Rng, root: &Path, mounts: &mut Mounts, n: u64) {
    if nix::unistd::geteuid().is_root() && rng.below(2) == 0 {
        if let Some(m) = mounts.0.pop() {
            let _ = std::process::Command::new("umount").arg(&m).status();
            return;
        }
        let (dirs, _) = listing(root);
        let dir = root.join(rng.pick(&dirs).unwrap_or_default());
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            std::fs::write(dir.join(format!("on-tmpfs{n}")), "t").unwrap();
            mounts.0.push(dir);
        }
        return;
    }
    if !mounts.0.is_empty() {
        return; // a mounted folder cannot be renamed
    }
    let parent = root.parent().unwrap();
    let old = parent.with_file_name(format!("old{n}"));
    std::fs::rename(parent, &old).unwrap();
    std::fs::create_dir(parent).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(old.join(root.file_name().unwrap()))
        .arg(root)
        .status()
        .unwrap();
    assert!(copied.success());
}

#[test]
fn watcher_snapshots_equal_full_scans_after_random_edits_and_structural_changes() {
    for seed in [3u64, 11] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p/work");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("src/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("src/a/one.rs"), "one").unwrap();
        let mut s = store(&tmp.path().join("profile"));
        let mut mounts = Mounts::default();
        take_exact(&mut s, &root);
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for step in 0..40u64 {
            let structural = rng.below(4) == 0;
            if structural {
                structural_edit(&mut rng, &root, &mut mounts, step);
            }
            edit(&mut rng, &root, &outside, step * 10);
            take_exact(&mut s, &root);
            // The one after it is the watcher's again, and exact.
            edit(&mut rng, &root, &outside, step * 10 + 1);
            take_exact(&mut s, &root);
            assert!(
                s.watch.last_was_incremental(&root),
                "seed {seed} step {step}: {}",
                s.watch_status(&root)
            );
        }
    }
}

#[test]
fn watcher_snapshots_equal_full_scans_after_random_edits() {
    for seed in [1u64, 7, 42, 1234] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("work");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("src/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("src/a/one.rs"), "one").unwrap();
        std::fs::write(root.join("top.txt"), "top").unwrap();
        let mut s = store(&tmp.path().join("profile"));
        take_exact(&mut s, &root);
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for step in 0..80u64 {
            for k in 0..=rng.below(3) {
                edit(&mut rng, &root, &outside, step * 10 + k);
            }
            take_exact(&mut s, &root);
            assert!(
                s.watch.last_was_incremental(&root),
                "seed {seed} step {step}: fell back to a full scan: {}",
                s.watch_status(&root)
            );
        }
    }
}

/// Files in the folder's `manifests/` directory.
fn manifest_files(s: &mut SnapshotStore, folder: &Path) -> usize {
    let dir = s.folder(folder).unwrap().dir.join("manifests");
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn an_unchanged_watched_folder_points_at_the_previous_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::write(root.join("a/f"), "f").unwrap();
    let mut s = store(&tmp.path().join("profile"));
    s.take(&root, manual()).unwrap();
    std::fs::write(root.join("a/f"), "changed").unwrap();
    // Just changed, so racy in its manifest: still no re-read is needed
    // while no event came for its directory.
    let changed = s.take(&root, manual()).unwrap();
    let files = manifest_files(&mut s, &root);
    let same = s.take(&root, manual()).unwrap();
    assert_eq!(same.manifest, changed.manifest);
    assert_eq!((same.changed, same.files, same.bytes), (0, 1, 7));
    assert_eq!(
        manifest_files(&mut s, &root),
        files,
        "a manifest was written"
    );
    // The next change is seen, and the result equals a full scan.
    std::fs::write(root.join("a/f"), "changed again").unwrap();
    let m = take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    assert_eq!(m.find(b"a/f").unwrap().size, 13);
    let newest = s.list(&root).unwrap()[0].clone();
    assert_eq!((newest.changed, newest.files, newest.bytes), (1, 1, 13));
}

#[test]
fn an_unchanged_watched_folder_re_reads_no_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f"), "f").unwrap();
    let mut s = store(&tmp.path().join("profile"));
    take_exact(&mut s, &root);
    assert!(
        !s.watch.last_was_incremental(&root),
        "the first is a full scan"
    );
    take_exact(&mut s, &root);
    assert!(s.watch_status(&root).contains("re-read 0 directories"));
    std::fs::write(root.join("a/b/f"), "g").unwrap();
    take_exact(&mut s, &root);
    assert!(
        s.watch_status(&root).contains("re-read 1 directory)"),
        "{}",
        s.watch_status(&root)
    );
}

#[test]
fn a_small_change_shares_the_untouched_part_of_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    for d in 0..40 {
        std::fs::create_dir_all(root.join(format!("d{d:02}"))).unwrap();
        for f in 0..50 {
            std::fs::write(root.join(format!("d{d:02}/f{f:02}")), format!("{d} {f}")).unwrap();
        }
    }
    let mut s = store(&tmp.path().join("profile"));
    let before = take_exact(&mut s, &root);
    std::fs::write(root.join("d17/f03"), "changed").unwrap();
    std::fs::write(root.join("d17/new"), "new").unwrap();
    let after = take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    assert_eq!(after.len(), before.len() + 1);
    // 2,040 entries in chunks of 256: one or two chunks rebuilt, the
    // rest the same memory as the previous manifest's.
    let shared = after.shared_chunks(&before);
    assert!(shared >= 6, "only {shared} chunks shared");
    assert_eq!(after.find(b"d17/f03").unwrap().size, 7);
}

#[test]
fn an_overflowed_event_queue_falls_back_to_a_full_scan() {
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(max < 1_000_000, "queue too large to overflow in a test");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("d")).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    // Alternating files: the kernel merges only identical consecutive events.
    let (a, b) = (root.join("d/a"), root.join("d/b"));
    let mut fa = std::fs::File::create(&a).unwrap();
    let mut fb = std::fs::File::create(&b).unwrap();
    for _ in 0..max + 100 {
        std::io::Write::write_all(&mut fa, b"a").unwrap();
        std::io::Write::write_all(&mut fb, b"b").unwrap();
    }
    std::fs::write(root.join("late"), "after the overflow").unwrap();
    take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert!(
        s.watch_status(&root).contains("full scan"),
        "{}",
        s.watch_status(&root)
    );
    // Watching again from the full scan on.
    std::fs::write(root.join("d/a"), "x").unwrap();
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
}

#[test]
fn a_folder_over_the_watch_cap_is_scanned_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().max_dirs = 3;
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    // Growing past the cap while watched.
    for d in ["b", "c", "d/e"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        std::fs::write(root.join(d).join("f"), d).unwrap();
    }
    take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert!(
        s.watch_status(&root).contains("more than 3 directories"),
        "{}",
        s.watch_status(&root)
    );
    std::fs::write(root.join("d/e/f"), "changed").unwrap();
    take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    // After a restart the last snapshot says the folder is too large: no
    // watch is even tried (it would cost a walk before the full scan).
    drop(s);
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().max_dirs = 3;
    take_exact(&mut s, &root);
    assert!(
        s.watch_status(&root).contains("its last snapshot had 5"),
        "{}",
        s.watch_status(&root)
    );
}

#[test]
fn a_network_or_fuse_file_system_is_not_watched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().assume_remote_fs = true;
    for i in 0..3 {
        std::fs::write(root.join("a/f"), format!("{i}")).unwrap();
        take_exact(&mut s, &root);
        assert!(!s.watch.last_was_incremental(&root));
    }
    assert!(
        s.watch_status(&root).contains("network or FUSE"),
        "{}",
        s.watch_status(&root)
    );
}

#[test]
fn after_a_restart_the_first_snapshot_is_a_full_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let profile = tmp.path().join("profile");
    let mut s = store(&profile);
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    drop(s);
    // Changed while agentd was down.
    std::fs::write(root.join("a/while-down"), "x").unwrap();
    let mut s = store(&profile);
    assert!(s.watch_status(&root).contains("not watched yet"));
    let m = take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert!(m.find(b"a/while-down").is_some());
    std::fs::write(root.join("a/after"), "y").unwrap();
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
}

/// Sets `path`'s mtime `secs` seconds into the past.
fn modified_ago(path: &Path, secs: u64) {
    let at = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

/// A folder with a file the watcher will be made to miss a change of.
fn blind_spot(tmp: &Path) -> (PathBuf, PathBuf) {
    let root = tmp.join("work");
    std::fs::create_dir_all(&root).unwrap();
    let file = root.join("linked.txt");
    std::fs::write(&file, "one").unwrap();
    modified_ago(&file, 7200);
    (root.clone(), file)
}

/// Changes the file behind the watcher's back, as a write through a shared
/// mapping would (no event): its events are dropped (outside the racy
/// window, or the racy rule alone would re-read it).
fn change_unseen(s: &mut SnapshotStore, root: &Path, file: &Path) {
    std::fs::write(file, "two, longer").unwrap();
    modified_ago(file, 3600);
    s.watch.forget_events(root);
}

#[test]
fn a_folder_whose_path_leads_to_another_directory_is_scanned_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p/work");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "old").unwrap();
    let mut s = store(&tmp.path().join("profile"));
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    // `mv p p-old; git clone … p/work`: no event reaches the old watches.
    std::fs::rename(tmp.path().join("p"), tmp.path().join("p-old")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "the new checkout").unwrap();
    let m = take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert_eq!(m.find(b"src/a.rs").unwrap().size, 16);
    // Watched again from the new directory.
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
}

/// Runs `cmd args`, or says why not: mounting needs root (CI has it and
/// sets AGENTX_TESTS_NO_SKIP, so there a skip fails).
fn run_root(cmd: &str, args: &[&Path]) -> bool {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("AGENTX_TESTS_NO_SKIP").is_none(),
            "{cmd} needs root"
        );
        return false;
    }
    let ok = std::process::Command::new(cmd)
        .args(args)
        .status()
        .unwrap()
        .success();
    assert!(ok, "{cmd} {args:?} failed");
    true
}

#[test]
fn a_mount_or_unmount_inside_the_folder_is_scanned_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/covered.txt"), "under the mount").unwrap();
    let mut s = store(&tmp.path().join("profile"));
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    let sub = root.join("sub");
    let tmpfs = Path::new("-ttmpfs");
    if !run_root("mount", &[tmpfs, Path::new("none"), &sub]) {
        return;
    }
    std::fs::write(sub.join("in-mount.txt"), "on the tmpfs").unwrap();
    let m = take_exact(&mut s, &root);
    let watched = s.watch.last_was_incremental(&root);
    run_root("umount", &[&sub]);
    assert!(!watched, "a mount sends no event: the snapshot must scan");
    assert!(m.find(b"sub/in-mount.txt").is_some());
    assert!(m.find(b"sub/covered.txt").is_none());
    // The unmount is seen too.
    let m = take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert!(m.find(b"sub/covered.txt").is_some());
}

#[test]
fn an_idle_verification_scan_catches_what_the_watcher_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, outside) = blind_spot(tmp.path());
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().verify_every = 2;
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    take_exact(&mut s, &root);
    // Due, nothing changed: the idle scan agrees and the watcher stays.
    s.idle_tick_inline();
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    take_exact(&mut s, &root);
    change_unseen(&mut s, &root, &outside);
    // The watcher-based snapshot cannot see it...
    let snap = s.take(&root, manual()).unwrap();
    assert_eq!(snap.changed, 0);
    // ...the verification scan while idle does: full scans from now on.
    s.idle_tick_inline();
    assert!(
        s.watch_status(&root).contains("verification"),
        "{}",
        s.watch_status(&root)
    );
    let m = take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
    assert_eq!(m.find(b"linked.txt").unwrap().size, 11);
}

/// The idle verification scan runs away from the store's thread: the
/// store serves other folders meanwhile, starts no second one for the
/// folder, and decides only when it is handed back; a change seen in the
/// folder meanwhile voids it.
#[test]
fn an_idle_verification_runs_away_from_the_store_and_counts_only_if_nothing_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, outside) = blind_spot(tmp.path());
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    // Due after 3 watcher-based snapshots, inline with the 6th.
    s.watch.config_mut().verify_every = 3;
    for _ in 0..4 {
        take_exact(&mut s, &root);
    }
    change_unseen(&mut s, &root, &outside);
    assert_eq!(s.take(&root, manual()).unwrap().changed, 0);
    let missed = |s: &mut SnapshotStore| s.watch_status(&root).contains("verification");

    // A change seen while it scans: the verdict is void.
    let (_, mut verify) = s.idle_tick();
    assert_eq!(verify.len(), 1);
    assert!(
        s.idle_tick().1.is_empty(),
        "a second scan of the same folder"
    );
    take_exact(&mut s, &other);
    let mut away = verify.remove(0);
    away.run();
    // (Below the directory of the unseen change, which stays unseen.)
    std::fs::write(root.join("sub/seen.txt"), "seen").unwrap();
    assert!(!missed(&mut s));
    s.finish_verify(away);
    assert!(!missed(&mut s), "{}", s.watch_status(&root));

    // Quiet again: the next one decides, once handed back.
    s.take(&root, manual()).unwrap();
    let (_, mut verify) = s.idle_tick();
    assert_eq!(verify.len(), 1);
    let mut away = verify.remove(0);
    away.run();
    assert!(!missed(&mut s));
    s.finish_verify(away);
    assert!(missed(&mut s), "{}", s.watch_status(&root));
}

#[test]
fn a_verification_that_never_gets_an_idle_moment_runs_with_a_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, outside) = blind_spot(tmp.path());
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().verify_every = 2;
    take_exact(&mut s, &root);
    for _ in 0..2 {
        take_exact(&mut s, &root); // watcher-based; due after the 2nd
    }
    change_unseen(&mut s, &root, &outside);
    s.take(&root, manual()).unwrap(); // 3rd: still waiting for idle
    // 4th: overdue, so verified inline; the mismatch makes the full scan win.
    let m = take_exact(&mut s, &root);
    assert_eq!(m.find(b"linked.txt").unwrap().size, 11);
    assert!(
        s.watch_status(&root).contains("verification"),
        "{}",
        s.watch_status(&root)
    );
    take_exact(&mut s, &root);
    assert!(!s.watch.last_was_incremental(&root));
}

#[test]
fn idle_and_least_recently_used_folders_are_released() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    s.watch.config_mut().max_folders = 1;
    take_exact(&mut s, &one);
    assert!(s.watch_status(&one).starts_with("watched"));
    take_exact(&mut s, &two);
    assert!(
        s.watch_status(&one)
            .contains("released for a more recently used"),
        "{}",
        s.watch_status(&one)
    );
    assert!(s.watch_status(&two).starts_with("watched"));
    s.watch.config_mut().idle = std::time::Duration::ZERO;
    s.idle_tick_inline();
    assert!(
        s.watch_status(&two).contains("without snapshots"),
        "{}",
        s.watch_status(&two)
    );
    // Watched again on the next snapshot, exact all along.
    std::fs::write(two.join("f"), "f").unwrap();
    take_exact(&mut s, &two);
    assert!(s.watch_status(&two).starts_with("watched"));
}

#[test]
fn undo_in_a_watched_folder_is_cheap_and_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    for d in 0..20 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        std::fs::write(root.join(format!("d{d}/f")), format!("{d}")).unwrap();
    }
    let mut s = store(&tmp.path().join("profile"));
    take_exact(&mut s, &root);
    s.take(&root, vec![owner_of("c", Phase::Before)]).unwrap();
    let before = listing(&root);
    std::fs::write(root.join("d3/f"), "edited").unwrap();
    std::fs::write(root.join("d4/new"), "new").unwrap();
    std::fs::remove_file(root.join("d5/f")).unwrap();
    s.take(&root, vec![owner_of("c", Phase::After)]).unwrap();
    assert!(s.watch.last_was_incremental(&root));
    let report = s.undo(&root, "c", false).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.applied.len(), 3);
    // The pre-restore snapshot came from the watcher.
    assert!(s.watch.last_was_incremental(&root));
    assert_eq!(listing(&root), before);
    assert_eq!(std::fs::read(root.join("d3/f")).unwrap(), b"3");
    // The restore's own writes: the next snapshot re-reads only the
    // directories it touched and matches a full scan.
    take_exact(&mut s, &root);
    assert!(s.watch.last_was_incremental(&root));
    assert!(
        s.watch_status(&root).contains("re-read 3 directories"),
        "{}",
        s.watch_status(&root)
    );
}

fn owner_of(session: &str, phase: Phase) -> Owner {
    Owner {
        session: session.into(),
        phase,
        pair: "p1".into(),
        label: String::new(),
    }
}

#[test]
fn a_write_through_an_outside_name_is_seen_after_the_manifest_left_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("work");
    let others = [tmp.path().join("b"), tmp.path().join("c")];
    for dir in [&root, &others[0], &others[1]] {
        std::fs::create_dir_all(dir.join("d")).unwrap();
        for i in 0..10 {
            std::fs::write(dir.join(format!("d/f{i}")), "f").unwrap();
        }
    }
    let ext = tmp.path().join("ext");
    std::fs::write(&ext, "linked in").unwrap();
    std::fs::hard_link(&ext, root.join("d/linked")).unwrap();
    let mut s = store(&tmp.path().join("profile"));
    s.resident_entries = 25;
    take_exact(&mut s, &root);
    for other in &others {
        s.take(other, manual()).unwrap();
    }
    assert!(
        s.folders[&root.display().to_string()].latest.is_none(),
        "the manifest stayed in memory"
    );
    // No event in the folder: only the outside link says to look.
    std::fs::write(&ext, "written outside").unwrap();
    let m = take_exact(&mut s, &root);
    assert_eq!(m.find(b"d/linked").unwrap().size, 15);
}
