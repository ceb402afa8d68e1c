//! Property and scenario tests of the snapshot engine on real temp trees:
//! random trees and random edits, then undo and rewind checked against a
//! model of what they must produce.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use super::*;

thread_local! {
    /// Makes `take` stop right after saving the timeline, as a kill -9
    /// there would (this thread only).
    pub(super) static CRASH_AFTER_TIMELINE_SAVE: std::cell::Cell<bool> =
        const { std::cell::Cell::new(false) };
}

/// What a path holds, as a restore must reproduce it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    File(Vec<u8>, u32),
    Link(PathBuf),
    Dir,
}

/// The visible tree (excluded dirs skipped, like snapshots do).
fn tree(root: &Path) -> BTreeMap<String, State> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, State::Link(std::fs::read_link(&p).unwrap()));
            } else if meta.is_dir() {
                if scan::excluded(e.file_name().as_encoded_bytes(), &[]) {
                    continue;
                }
                out.insert(rel, State::Dir);
                stack.push(p);
            } else if meta.len() <= scan::MAX_FILE {
                out.insert(
                    rel,
                    State::File(
                        std::fs::read(&p).unwrap(),
                        meta.permissions().mode() & 0o777,
                    ),
                );
            }
        }
    }
    out
}

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const NAMES: &[&str] = &["a", "b", "c", "d", "e"];

fn random_path(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(3);
    (0..depth)
        .map(|_| NAMES[rng.below(NAMES.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join("/")
}

/// One random edit somewhere in the tree: create, modify, delete, chmod,
/// symlink, or swap a file and a directory.
fn random_edit(root: &Path, rng: &mut Rng) {
    let rel = random_path(rng);
    let p = root.join(&rel);
    let _ = std::fs::create_dir_all(p.parent().unwrap());
    let meta = std::fs::symlink_metadata(&p).ok();
    match rng.below(6) {
        0 | 1 => {
            if meta.as_ref().is_some_and(|m| m.is_dir()) {
                return;
            }
            let _ = std::fs::remove_file(&p);
            let content = format!("{rel} {}", rng.next()).repeat(1 + rng.below(50) as usize);
            let _ = std::fs::write(&p, content);
        }
        2 => match meta {
            Some(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&p);
            }
            Some(_) => {
                let _ = std::fs::remove_file(&p);
            }
            None => {}
        },
        3 => {
            if meta.is_some_and(|m| m.is_file()) {
                let mode = if rng.below(2) == 0 { 0o755 } else { 0o600 };
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode));
            }
        }
        4 => {
            if meta.is_none() {
                let _ = symlink(format!("target-{}", rng.below(9)), &p);
            }
        }
        _ => match meta {
            // file -> directory with a file inside, or directory -> file
            Some(m) if m.is_file() || m.file_type().is_symlink() => {
                let _ = std::fs::remove_file(&p);
                let _ = std::fs::create_dir(&p);
                let _ = std::fs::write(p.join("inside"), "inside");
            }
            Some(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&p);
                let _ = std::fs::write(&p, "was a dir");
            }
            _ => {}
        },
    }
}

fn store(dir: &Path) -> SnapshotStore {
    SnapshotStore::open(&dir.join("checkpoints"), None, dir.join("config.toml")).unwrap()
}

fn owner(session: &str, phase: Phase, pair: &str) -> Owner {
    Owner {
        session: session.into(),
        phase,
        pair: pair.into(),
        label: format!("{phase:?}"),
    }
}

fn folder(tmp: &Path) -> PathBuf {
    let f = tmp.join("work");
    std::fs::create_dir_all(&f).unwrap();
    std::fs::canonicalize(f).unwrap()
}

#[test]
fn rewind_restores_the_whole_tree_exactly_for_random_edit_sequences() {
    for seed in 1..=25u64 {
        let tmp = tempfile::tempdir().unwrap();
        let root = folder(tmp.path());
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for _ in 0..30 {
            random_edit(&root, &mut rng);
        }
        let mut s = store(tmp.path());
        let want = tree(&root);
        s.take(&root, vec![owner("s", Phase::Manual, "")]).unwrap();
        for _ in 0..25 {
            random_edit(&root, &mut rng);
        }
        let report = s.rewind(&root, &RewindTo::Index(1)).unwrap();
        assert!(report.errors.is_empty(), "seed {seed}: {:?}", report.errors);
        assert_eq!(tree(&root), want, "seed {seed}");
        // The rewind itself can be rewound (its pre-restore snapshot is newest).
        let snaps = s.list(&root).unwrap();
        assert_eq!(snaps[0].owners[0].phase, Phase::PreRestore);
    }
}

#[test]
fn undo_restores_exactly_what_the_message_changed_and_skips_conflicts() {
    for seed in 1..=25u64 {
        let tmp = tempfile::tempdir().unwrap();
        let root = folder(tmp.path());
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
        for _ in 0..30 {
            random_edit(&root, &mut rng);
        }
        let mut s = store(tmp.path());
        let before = tree(&root);
        s.take(&root, vec![owner("conv", Phase::Before, "t1")])
            .unwrap();
        for _ in 0..15 {
            random_edit(&root, &mut rng);
        }
        let after = tree(&root);
        s.take(&root, vec![owner("conv", Phase::After, "t1")])
            .unwrap();
        // The user then edits some top-level files (possible conflicts).
        let mut user = BTreeMap::new();
        for name in NAMES {
            if rng.below(3) == 0 {
                let p = root.join(name);
                if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                    std::fs::write(&p, format!("user {seed}")).unwrap();
                    user.insert((*name).to_owned(), ());
                }
            }
        }
        let current = tree(&root);
        let report = s.undo(&root, "conv", false).unwrap();
        let result = tree(&root);

        // Model: a non-directory path the message changed goes back to its
        // before state unless the user changed it since (a conflict); every
        // other path stays as it was just before the undo.
        let mut model: BTreeMap<String, State> = BTreeMap::new();
        let all: std::collections::BTreeSet<&String> = before
            .keys()
            .chain(after.keys())
            .chain(current.keys())
            .collect();
        for p in all {
            let (b, a, c) = (before.get(p), after.get(p), current.get(p));
            let changed_by_message = b != a;
            let conflict = c != a;
            let target = if changed_by_message && !conflict {
                b
            } else {
                c
            };
            if let Some(t) = target {
                model.insert(p.clone(), t.clone());
            }
        }
        // Nothing can be put under a path that stays a file or a link (a
        // skipped conflict); such children stay as they are: absent.
        let blocked = |p: &str, m: &BTreeMap<String, State>| {
            let mut prefix = String::new();
            for part in p
                .split('/')
                .collect::<Vec<_>>()
                .split_last()
                .map(|x| x.1)
                .unwrap_or_default()
            {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
                if matches!(m.get(&prefix), Some(State::File(..) | State::Link(_))) {
                    return true;
                }
            }
            false
        };
        let expected: BTreeMap<String, State> = model
            .iter()
            .filter(|(p, v)| **v != State::Dir && !blocked(p, &model))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect();
        let files = |t: &BTreeMap<String, State>| -> BTreeMap<String, State> {
            t.iter()
                .filter(|(_, v)| **v != State::Dir)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        assert_eq!(files(&result), expected, "seed {seed}: {report:?}");
        for skipped in &report.skipped {
            assert!(skipped.conflict, "seed {seed}");
            assert!(
                user.contains_key(&skipped.path)
                    || current.get(&skipped.path) != after.get(&skipped.path)
            );
        }
    }
}

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
        Some(home.clone()),
        tmp.path().join("c.toml"),
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

#[test]
fn retention_keeps_50_and_gc_leaves_no_orphan_and_no_dangling_blob() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    for i in 0..20 {
        std::fs::write(root.join(format!("f{i}")), format!("base {i}")).unwrap();
    }
    let mut s = store(tmp.path());
    for round in 0..70 {
        for i in 0..3 {
            std::fs::write(
                root.join(format!("f{}", (round + i) % 20)),
                format!("round {round} {i}"),
            )
            .unwrap();
        }
        s.take(&root, vec![owner("c", Phase::Before, &round.to_string())])
            .unwrap();
        // Manual snapshots in between never push a message snapshot out.
        s.take(&root, vec![owner("", Phase::Manual, "")]).unwrap();
        // Now and then the store is idle: long chains are rewritten whole
        // between retention passes.
        if round % 7 == 6 {
            s.idle_tick();
        }
    }
    let list = s.list(&root).unwrap();
    let manual = list.iter().filter(|s| s.manual()).count();
    // The numbers themselves (not the constants): 50 message snapshots,
    // 20 manual ones.
    assert_eq!(list.len() - manual, 50);
    assert_eq!(manual, 20);
    assert_eq!(
        list.iter().find(|s| !s.manual()).unwrap().owners[0].pair,
        "69"
    );
    // The manifest files kept are exactly the snapshots' and the bases
    // their deltas build on; every blob stored is referenced by one of them
    // and vice versa; every snapshot's tree is readable.
    let fdir = s.folder(&root).unwrap().dir.clone();
    let used = s
        .list(&root)
        .unwrap()
        .iter()
        .map(|s| s.manifest.clone())
        .collect();
    let needed = chains(&fdir, used, &mut HashMap::new()).unwrap();
    let mut kept = HashSet::new();
    let mut referenced = HashSet::new();
    for file in std::fs::read_dir(fdir.join("manifests")).unwrap() {
        let file = file.unwrap();
        let name = file.file_name().to_string_lossy().into_owned();
        kept.insert(name.strip_suffix(".zst").unwrap().to_owned());
        let stored = Stored::decode(&std::fs::read(file.path()).unwrap()).unwrap();
        referenced.extend(stored.own_hashes());
    }
    assert_eq!(
        kept, needed,
        "a manifest kept that nothing needs, or one lost"
    );
    assert!(kept.len() < 70 + MAX_DELTA_DEPTH as usize);
    for snap in s.list(&root).unwrap() {
        let m = s.manifest_of(&root, &snap).unwrap();
        assert!(unique_hashes(&m).is_subset(&referenced));
    }
    assert_eq!(s.blobs.referenced(), referenced);
    assert_eq!(s.blobs.stored(), referenced, "orphan or dangling blobs");
    for h in &referenced {
        s.blobs.read(h).unwrap();
    }
    // A fresh store (as after a restart) agrees.
    let s2 = {
        let mut s2 = store(tmp.path());
        s2.ensure_loaded().unwrap();
        s2
    };
    assert_eq!(s2.blobs.stored(), referenced);
}

#[test]
fn an_idle_store_rewrites_a_long_delta_chain_whole_without_changing_a_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    let mut trees = Vec::new();
    for round in 0..COMPACT_DEPTH + 3 {
        std::fs::write(root.join(format!("f{}", round % 3)), format!("r{round}")).unwrap();
        let snap = s.take(&root, vec![owner("c", Phase::Before, "")]).unwrap();
        trees.push((snap.clone(), s.manifest_of(&root, &snap).unwrap()));
    }
    let dir = s.folder(&root).unwrap().dir.clone();
    let newest = trees.last().unwrap().0.manifest.clone();
    assert!(s.latest(&root).unwrap().unwrap().2 >= COMPACT_DEPTH);
    assert!(
        manifest_base(&dir, &newest).unwrap().is_some(),
        "not a delta"
    );
    s.idle_tick();
    assert!(
        manifest_base(&dir, &newest).unwrap().is_none(),
        "the newest manifest was not rewritten whole"
    );
    assert_eq!(s.latest(&root).unwrap().unwrap().2, 0);
    // Every snapshot reads back the tree it had, from disk.
    for (snap, tree) in &trees {
        assert_eq!(load_manifest(&dir, &snap.manifest).unwrap().0, **tree);
    }
    // The next snapshot builds on the rewritten file.
    std::fs::write(root.join("f0"), "after").unwrap();
    s.take(&root, vec![owner("c", Phase::After, "")]).unwrap();
    assert_eq!(s.latest(&root).unwrap().unwrap().2, 1);
    // References count each file's own hashes, as a fresh store does.
    let mut s2 = store(tmp.path());
    s2.ensure_loaded().unwrap();
    assert_eq!(s.blobs.referenced(), s2.blobs.referenced());
}

/// Found by tests/tests/torture.rs: the timeline was saved without the
/// snapshots it drops before the retained deltas on their manifests were
/// rewritten in full, so a kill in between, then the restart's cleanup of
/// manifests no timeline uses, left deltas without a base.
#[test]
fn a_kill_right_after_the_timeline_is_saved_leaves_every_snapshot_loadable() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    for round in 0..(KEEP_MANUAL + 5) {
        std::fs::write(
            root.join(format!("f{}", round % 4)),
            format!("round {round}"),
        )
        .unwrap();
        let mut s = store(tmp.path());
        CRASH_AFTER_TIMELINE_SAVE.set(true);
        let taken = s.take(&root, vec![owner("", Phase::Manual, "")]);
        CRASH_AFTER_TIMELINE_SAVE.set(false);
        assert!(taken.is_err(), "the simulated crash did not happen");
        // A fresh agentd: every snapshot its timeline lists still loads.
        let mut s = store(tmp.path());
        for snap in s.list(&root).unwrap() {
            s.manifest_of(&root, &snap)
                .unwrap_or_else(|e| panic!("round {round}: snapshot {} is lost: {e}", snap.id));
        }
    }
}

#[test]
fn an_unchanged_tree_reuses_its_manifest_and_stores_nothing_new() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("x"), "x").unwrap();
    let mut s = store(tmp.path());
    let a = s.take(&root, vec![]).unwrap();
    // Wait out the racy window so the stat cache is trusted.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let b = s.take(&root, vec![]).unwrap();
    let c = s.take(&root, vec![]).unwrap();
    assert_eq!(b.changed, 0);
    assert_eq!(
        c.manifest, b.manifest,
        "an unchanged tree wrote a new manifest"
    );
    assert_ne!(a.id, c.id);
}

#[test]
fn a_restore_cut_short_is_finished_by_the_next_operation() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("keep"), "v1").unwrap();
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    std::fs::write(root.join("keep"), "v2").unwrap();
    std::fs::write(root.join("extra"), "new").unwrap();
    // As if agentd died right after writing the journal.
    let dir = s.folder(&root).unwrap().dir.clone();
    let journal = RestoreJournal {
        want_manifest: snap.manifest.clone(),
        paths: vec![b"extra".to_vec(), b"keep".to_vec()],
    };
    std::fs::write(
        dir.join("restore.json"),
        serde_json::to_vec(&journal).unwrap(),
    )
    .unwrap();
    drop(s);
    let mut s = store(tmp.path());
    s.list(&root).unwrap();
    assert_eq!(std::fs::read(root.join("keep")).unwrap(), b"v1");
    assert!(!root.join("extra").exists());
    assert!(!dir.join("restore.json").exists());
}

#[test]
fn the_profile_inside_the_folder_is_never_snapshotted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let profile = root.join("my-profile");
    std::fs::create_dir(&profile).unwrap();
    std::fs::write(root.join("a"), "a").unwrap();
    let mut s = SnapshotStore::open(
        &profile.join("checkpoints"),
        None,
        profile.join("config.toml"),
    )
    .unwrap();
    let snap = s.take(&root, vec![]).unwrap();
    assert_eq!(snap.files, 1, "the store's own files were snapshotted");
    std::fs::write(profile.join("state"), "daemon state").unwrap();
    s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert_eq!(
        std::fs::read(profile.join("state")).unwrap(),
        b"daemon state"
    );
}

#[test]
fn leftovers_of_a_run_killed_mid_snapshot_or_mid_gc_are_cleaned_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("a"), "a").unwrap();
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    let packs = tmp.path().join("checkpoints/packs");
    let fdir = s.folder(&root).unwrap().dir.clone();
    drop(s);
    // A pack written without its index (killed mid-snapshot), an orphan
    // manifest (killed before the timeline), and a duplicate of a live pack
    // (killed mid-GC rewrite, before the old pack was deleted).
    std::fs::write(packs.join("00000000000000ff.pack"), b"partial").unwrap();
    std::fs::write(fdir.join("manifests/orphan.zst"), b"whatever").unwrap();
    let live: Vec<_> = std::fs::read_dir(&packs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    for p in &live {
        let name = p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("0000000000000001", "00000000000000fe");
        if name != p.file_name().unwrap().to_string_lossy() {
            std::fs::copy(p, packs.join(name)).unwrap();
        }
    }
    let mut s = store(tmp.path());
    s.ensure_loaded().unwrap();
    assert!(
        !packs.join("00000000000000ff.pack").exists(),
        "a pack without index survived"
    );
    assert!(
        !fdir.join("manifests/orphan.zst").exists(),
        "an orphan manifest survived"
    );
    // Every stored blob is referenced and readable; the tree rewinds exactly.
    let m = s.manifest_of(&root, &snap).unwrap();
    assert_eq!(s.blobs.stored(), unique_hashes(&m));
    std::fs::write(root.join("a"), "changed").unwrap();
    s.rewind(&root, &RewindTo::Index(1)).unwrap();
    assert_eq!(std::fs::read(root.join("a")).unwrap(), b"a");
}

/// Takes a before/after pair for `session` around `edit`.
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
    let ops = restore::plan_undo(&before, &now, &now);
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
    let (m, _) = scan::scan(&root, &ex, Some(&prev), &s.blobs, &mut pack).unwrap();
    assert_eq!(
        m.get(0).unwrap().hash,
        *blake3::hash(b"new content").as_bytes(),
        "racy entry trusted"
    );
    entries[0].racy = false;
    let prev = Manifest::from_entries(entries);
    let (m, _) = scan::scan(&root, &ex, Some(&prev), &s.blobs, &mut pack).unwrap();
    assert_eq!(m.get(0).unwrap().hash, stale, "the stat cache was not used");
    s.blobs.abandon(pack);
}

#[test]
fn restore_temp_files_are_never_captured_and_recovery_removes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    std::fs::write(root.join("keep"), "v1").unwrap();
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    std::fs::write(root.join("keep"), "v2").unwrap();
    // As if agentd died mid-restore: journal written, a temp file left.
    std::fs::write(root.join(".agentx-restore-keep"), "half").unwrap();
    let dir = s.folder(&root).unwrap().dir.clone();
    let journal = RestoreJournal {
        want_manifest: snap.manifest.clone(),
        paths: vec![b"keep".to_vec()],
    };
    std::fs::write(
        dir.join("restore.json"),
        serde_json::to_vec(&journal).unwrap(),
    )
    .unwrap();
    drop(s);
    let mut s = store(tmp.path());
    let snap = s.take(&root, vec![]).unwrap();
    assert_eq!(snap.files, 1);
    assert!(!root.join(".agentx-restore-keep").exists());
    assert_eq!(std::fs::read(root.join("keep")).unwrap(), b"v1");
    // A temp name is never captured even when one lingers.
    std::fs::write(root.join(".agentx-restore-x"), "t").unwrap();
    assert_eq!(s.take(&root, vec![]).unwrap().files, 1);
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
        Some(link),
        tmp.path().join("c.toml"),
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
    scan::torn::set(Some(Box::new(move |rel: &[u8]| {
        if rel == b"busy.log" && w.fetch_add(1, Ordering::SeqCst) == 0 {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            f.write_all(b"appended\n").unwrap();
        }
    })));
    let taken = s.take(&root, vec![]);
    scan::torn::set(None);
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
    scan::torn::set(Some(Box::new(move |rel: &[u8]| {
        if rel == b"busy.log" {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            f.write_all(b"more\n").unwrap();
        }
    })));
    let taken = s.take(&root, vec![]);
    scan::torn::set(None);
    taken.unwrap();
    let (_, m, _) = s.latest(&root).unwrap().unwrap();
    let e = m.find(b"busy.log").unwrap();
    assert_eq!(e.kind, manifest::Kind::Skipped, "{e:?}");
    assert_eq!(e.target, manifest::why::CHANGING);
}
