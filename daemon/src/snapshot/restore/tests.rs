//! Restores large enough to run in parallel and to be made durable with
//! `syncfs`: exact results (contents, modes, mtimes, hard links, symlinks,
//! long names whose temp names coincide), and a crash before the final
//! sync finished by the intent journal.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use super::super::{RestoreJournal, RewindTo, SnapshotStore};
use super::{PARALLEL_MIN, SYNC_EACH_MAX};

#[derive(Debug, PartialEq, Eq)]
enum State {
    File(Vec<u8>, u32, i64),
    Link(PathBuf),
    Dir(u32),
}

/// Every path under `root` with what it holds; hard-link groups by path.
fn tree(root: &Path) -> (BTreeMap<String, State>, Vec<Vec<String>>) {
    let mut out = BTreeMap::new();
    let mut by_ino: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let state = if m.file_type().is_symlink() {
                State::Link(std::fs::read_link(&p).unwrap())
            } else if m.is_dir() {
                stack.push(p.clone());
                State::Dir(m.permissions().mode() & 0o7777)
            } else {
                if m.nlink() > 1 {
                    by_ino.entry(m.ino()).or_default().push(rel.clone());
                }
                State::File(
                    std::fs::read(&p).unwrap(),
                    m.permissions().mode() & 0o7777,
                    m.mtime(),
                )
            };
            out.insert(rel, state);
        }
    }
    let mut links: Vec<Vec<String>> = by_ino
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    links.sort();
    (out, links)
}

fn store(dir: &Path) -> SnapshotStore {
    SnapshotStore::open(
        &dir.join("checkpoints"),
        dir.join("config.toml"),
        std::sync::Arc::default(),
    )
    .unwrap()
}

fn folder(tmp: &Path) -> PathBuf {
    let f = tmp.join("work");
    std::fs::create_dir_all(&f).unwrap();
    std::fs::canonicalize(f).unwrap()
}

/// Two long names sharing their first 200 bytes: the same temp name.
fn long_names() -> [String; 2] {
    let stem = "L".repeat(210);
    [format!("{stem}-one"), format!("{stem}-two")]
}

const DIRS: usize = 12;
const PER_DIR: usize = 25;

fn populate(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..PER_DIR {
            let p = dir.join(format!("f{f:02}"));
            std::fs::write(&p, format!("original {d}/{f}\n").repeat(1 + f)).unwrap();
            let mode = if f % 3 == 0 { 0o755 } else { 0o640 };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    std::fs::write(root.join("linked-a"), "one inode").unwrap();
    std::fs::hard_link(root.join("linked-a"), root.join("d03/linked-b")).unwrap();
    symlink("d00/f00", root.join("shortcut")).unwrap();
    for name in long_names() {
        std::fs::write(root.join("d05").join(&name), format!("long {name}")).unwrap();
    }
}

fn rewrite_everything(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:02}"));
        for f in 0..PER_DIR {
            let p = dir.join(format!("f{f:02}"));
            match (d + f) % 5 {
                0 => std::fs::remove_file(&p).unwrap(),
                1 => std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap(),
                _ => std::fs::write(&p, format!("changed {d}/{f}")).unwrap(),
            }
        }
        std::fs::write(dir.join("new-file"), "created since").unwrap();
    }
    std::fs::remove_dir_all(root.join("d07")).unwrap();
    std::fs::write(root.join("d07"), "a file where a directory was").unwrap();
    std::fs::remove_file(root.join("d03/linked-b")).unwrap();
    std::fs::write(root.join("d03/linked-b"), "split").unwrap();
    std::fs::remove_file(root.join("shortcut")).unwrap();
    std::fs::create_dir(root.join("shortcut")).unwrap();
    for name in long_names() {
        std::fs::write(root.join("d05").join(&name), "overwritten").unwrap();
    }
    std::fs::create_dir_all(root.join("fresh/deeper")).unwrap();
    std::fs::write(root.join("fresh/deeper/x"), "new").unwrap();
}

#[test]
fn a_large_restore_runs_in_parallel_and_puts_back_the_tree_exactly() {
    assert!(DIRS * PER_DIR > SYNC_EACH_MAX.max(PARALLEL_MIN) * 2);
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    populate(&root);
    let want = tree(&root);
    let mut s = store(tmp.path());
    s.take(&root, vec![]).unwrap();
    rewrite_everything(&root);
    let report = s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        report.applied.len() > SYNC_EACH_MAX,
        "{}",
        report.applied.len()
    );
    assert_eq!(tree(&root), want);
    // No temp file is left, and the rewind can itself be rewound.
    let (now, _) = tree(&root);
    assert!(!now.keys().any(|k| k.contains(".agentx-restore-")));
    let report = s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(root.join("fresh/deeper/x").exists());
    assert!(root.join("d07").is_file());
}

#[test]
fn a_large_restore_cut_short_before_its_final_sync_is_finished_by_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    populate(&root);
    let want = tree(&root);
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    let (before, _) = tree(&root);
    rewrite_everything(&root);
    let (after, _) = tree(&root);
    // As if agentd died after the renames of half of the files but before
    // the final sync: some paths restored, some not, temp files beside
    // others, the journal naming every path of the restore.
    let mut paths: Vec<Vec<u8>> = before
        .keys()
        .chain(after.keys())
        .map(|k| k.as_bytes().to_vec())
        .collect();
    paths.sort();
    paths.dedup();
    for name in ["d00/f02", "d01/f03", "d05/f04"] {
        let (dir, file) = name.split_once('/').unwrap();
        std::fs::write(
            root.join(dir).join(format!(".agentx-restore-{file}")),
            "torn",
        )
        .unwrap();
    }
    let dir = s.folder(&root).unwrap().dir.clone();
    let journal = RestoreJournal {
        want_manifest: snap.manifest.clone(),
        paths,
        token: String::new(),
    };
    journal.write(&dir).unwrap();
    drop(s);
    let mut s = store(tmp.path());
    s.list(&root).unwrap();
    assert_eq!(tree(&root), want);
    assert!(!RestoreJournal::path(&dir).exists());
}

/// The reasons the restore matches on are typed: a missing parent makes a
/// removal a no-op, a symlinked parent is refused (never followed), an
/// unsafe path too, each with the text the user is shown.
#[test]
fn path_errors_are_matched_by_kind_and_keep_their_text() {
    use super::durable::Devices;
    use super::{PathError, remove, with_parent};
    use nix::fcntl::{AT_FDCWD, OFlag, openat};
    use nix::sys::stat::Mode;

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/f"), b"kept").unwrap();
    symlink(root.join("real"), root.join("link")).unwrap();
    let fd = openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let devices = Devices::new(&fd);

    assert!(remove(&fd, b"gone/f", &devices, None, &[]).is_ok());
    let through_link = remove(&fd, b"link/f", &devices, None, &[]).unwrap_err();
    assert!(
        matches!(through_link, PathError::ParentNotDir),
        "{through_link:?}"
    );
    assert_eq!(
        through_link.to_string(),
        "a parent directory is now a symlink or a file; not following it"
    );
    assert_eq!(std::fs::read(root.join("real/f")).unwrap(), b"kept");
    let missing = with_parent(&fd, b"gone/f", false, |_, _| Ok(())).unwrap_err();
    assert!(matches!(missing, PathError::Missing), "{missing:?}");
    let unsafe_path = with_parent(&fd, b"real/../f", false, |_, _| Ok(())).unwrap_err();
    assert_eq!(
        unsafe_path.to_string(),
        r#"refusing unsafe path "real/../f""#
    );
}

/// A directory being removed that is not empty stays quietly only when it
/// holds what snapshots leave out by rule; a file of the user's (or a
/// symlink, or a folder holding one) makes it a conflict.
#[test]
fn only_content_left_out_by_rule_keeps_a_removed_directory_quietly() {
    use super::only_kept_by_rule;
    use nix::fcntl::{AT_FDCWD, OFlag, openat};
    use nix::sys::stat::Mode;

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let d = root.join("d");
    std::fs::create_dir_all(d.join("node_modules/x")).unwrap();
    std::fs::write(d.join("node_modules/x/i.js"), "js").unwrap();
    std::fs::create_dir_all(d.join("cache/target")).unwrap();
    std::fs::write(d.join("cache/target/o"), "o").unwrap();
    std::fs::create_dir_all(d.join("empty/inner")).unwrap();
    nix::unistd::mkfifo(&d.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::File::create(d.join("big"))
        .unwrap()
        .set_len(super::MAX_FILE + 1)
        .unwrap();
    let fd = openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let extra = vec!["target".to_owned()];
    assert!(only_kept_by_rule(&fd, b"d", &extra, 0).unwrap());
    assert!(!only_kept_by_rule(&fd, b"d", &[], 0).unwrap());
    for (name, make) in [
        (
            "file",
            &(|p: &Path| std::fs::write(p, "mine").unwrap()) as &dyn Fn(&Path),
        ),
        ("link", &|p: &Path| symlink("file", p).unwrap()),
    ] {
        let path = d.join("empty/inner").join(name);
        make(&path);
        assert!(!only_kept_by_rule(&fd, b"d", &extra, 0).unwrap(), "{name}");
        std::fs::remove_file(&path).unwrap();
    }
    assert!(only_kept_by_rule(&fd, b"d", &extra, 0).unwrap());
}
