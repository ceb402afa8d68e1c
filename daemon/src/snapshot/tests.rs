//! Property and scenario tests of the snapshot engine on real temp trees:
//! random trees and random edits, then undo and rewind checked against a
//! model of what they must produce.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use super::timeline::manifest_base;
use super::*;

mod hostile;
mod service;
mod watched;

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
    SnapshotStore::open(
        &dir.join("checkpoints"),
        dir.join("config.toml"),
        Arc::default(),
    )
    .unwrap()
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
            s.idle_tick_inline();
        }
    }
    let list = s.list(&root).unwrap();
    let manual = list.iter().filter(|s| s.only(Phase::Manual)).count();
    // The numbers themselves (not the constants): 50 message snapshots,
    // 20 manual ones.
    assert_eq!(list.len() - manual, 50);
    assert_eq!(manual, 20);
    assert_eq!(
        list.iter().find(|s| !s.only(Phase::Manual)).unwrap().owners[0].pair,
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
    s.idle_tick_inline();
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

/// Found by tests/tests/e2e/torture.rs: the timeline was saved without the
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
        seams::crash_after_timeline_save(true);
        let taken = s.take(&root, vec![owner("", Phase::Manual, "")]);
        seams::crash_after_timeline_save(false);
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
        token: String::new(),
    };
    journal.write(&dir).unwrap();
    drop(s);
    let mut s = store(tmp.path());
    s.list(&root).unwrap();
    assert_eq!(std::fs::read(root.join("keep")).unwrap(), b"v1");
    assert!(!root.join("extra").exists());
    assert!(!RestoreJournal::path(&dir).exists());
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
        profile.join("config.toml"),
        Arc::default(),
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

#[test]
fn undoing_message_after_message_never_pushes_out_the_messages_left_to_undo() {
    let tmp = tempfile::tempdir().unwrap();
    let root = folder(tmp.path());
    let mut s = store(tmp.path());
    // 30 messages, each writing its own file.
    for m in 0..30 {
        let pair = format!("t{m}");
        s.take(&root, vec![owner("conv", Phase::Before, &pair)])
            .unwrap();
        std::fs::write(root.join(format!("m{m}.txt")), format!("message {m}")).unwrap();
        s.take(&root, vec![owner("conv", Phase::After, &pair)])
            .unwrap();
    }
    // The newest 25 messages (50 snapshots) are kept, and each undoes.
    for m in (5..30).rev() {
        let report = s.undo(&root, "conv", false).unwrap_or_else(|e| {
            panic!("undo of message {m} failed: {e}");
        });
        assert!(
            !root.join(format!("m{m}.txt")).exists(),
            "message {m}: {report:?}"
        );
    }
    // The rest were let go, and the message says so truthfully.
    let err = s.undo(&root, "conv", false).unwrap_err().to_string();
    assert!(err.contains("among the snapshots kept"), "{err}");
    assert!(root.join("m4.txt").exists());
    // Pre-restore snapshots stayed within their own cap.
    let pre = s
        .list(&root)
        .unwrap()
        .iter()
        .filter(|x| x.only(Phase::PreRestore))
        .count();
    assert_eq!(pre, KEEP_PRE_RESTORE);
}

/// Files of `dir` (names), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A full scan makes its pack durable and writes its manifest where it
/// runs (a scan thread), so the store's thread only records it: a first
/// snapshot of a big tree holds no other folder up while it is written.
#[test]
fn a_full_scan_seals_its_pack_and_writes_its_manifest_where_it_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("w");
    std::fs::create_dir(&root).unwrap();
    for i in 0..50 {
        std::fs::write(root.join(format!("f{i}")), format!("content {i}")).unwrap();
    }
    let mut s = store(tmp.path());
    let packs = tmp.path().join("checkpoints/packs");
    let take::Begun::Away(mut away) = s.begin_take(&root, vec![]).unwrap() else {
        panic!("a first snapshot scans in full");
    };
    let manifests = s.folder(&root).unwrap().dir.join("manifests");
    assert!(names(&manifests).is_empty());
    away.run();
    // Before the store's thread sees it again: synced pack, its index, the
    // manifest.
    let written = names(&manifests);
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(names(&packs).iter().any(|n| n.ends_with(".idx")));
    let snap = s.finish_take(*away).unwrap();
    assert_eq!(written, [format!("{}.zst", snap.manifest)]);
    assert_eq!(snap.files, 50);
    // It is the newest snapshot, and rewinds.
    std::fs::write(root.join("f0"), "changed").unwrap();
    let again = s.take(&root, vec![]).unwrap();
    assert_eq!(again.changed, 1);
    s.rewind(&root, &RewindTo::Index(2)).unwrap();
    assert_eq!(std::fs::read(root.join("f0")).unwrap(), b"content 0");
}

/// A full scan whose manifest cannot be written fails alone: its pack and
/// pack index go, and the next snapshot works.
#[test]
fn a_full_scan_whose_manifest_cannot_be_written_leaves_no_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("w");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a"), "a").unwrap();
    let mut s = store(tmp.path());
    let packs = tmp.path().join("checkpoints/packs");
    let take::Begun::Away(mut away) = s.begin_take(&root, vec![]).unwrap() else {
        panic!("a first snapshot scans in full");
    };
    let manifests = s.folder(&root).unwrap().dir.join("manifests");
    std::fs::remove_dir(&manifests).unwrap();
    std::fs::write(&manifests, "in the way").unwrap();
    away.run();
    assert!(s.finish_take(*away).is_err());
    assert!(names(&packs).is_empty(), "{:?}", names(&packs));
    std::fs::remove_file(&manifests).unwrap();
    std::fs::create_dir(&manifests).unwrap();
    let snap = s.take(&root, vec![]).unwrap();
    assert_eq!(snap.files, 1);
}

#[test]
fn manifests_of_folders_not_in_use_leave_memory_and_come_back_from_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let roots: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let root = tmp.path().join(name);
            for i in 0..30 {
                let dir = root.join(format!("d{}", i % 3));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(format!("f{i}")), format!("{name}{i}")).unwrap();
            }
            std::fs::canonicalize(root).unwrap()
        })
        .collect();
    let mut s = store(tmp.path());
    // Each manifest holds 33 entries: room for two of them.
    s.resident_entries = 70;
    let wants: Vec<_> = roots.iter().map(|r| tree(r)).collect();
    for root in &roots {
        s.take(root, vec![owner("s", Phase::Manual, "")]).unwrap();
    }
    let kept =
        |s: &SnapshotStore, root: &Path| s.folders[&root.display().to_string()].latest.is_some();
    assert!(!kept(&s, &roots[0]), "the least recently used stayed");
    assert!(kept(&s, &roots[1]) && kept(&s, &roots[2]));

    // The dropped one is read back for its next snapshot, which sees the
    // change against it; then the least recently used goes.
    std::fs::write(roots[0].join("d0/f0"), "changed").unwrap();
    let snap = s
        .take(&roots[0], vec![owner("s", Phase::Manual, "")])
        .unwrap();
    assert_eq!(snap.changed, 1);
    assert!(kept(&s, &roots[0]) && !kept(&s, &roots[1]) && kept(&s, &roots[2]));

    // A dropped folder's snapshots still restore exactly.
    std::fs::write(roots[1].join("d1/f1"), "edited").unwrap();
    std::fs::remove_file(roots[1].join("d2/f2")).unwrap();
    let report = s.rewind(&roots[1], &RewindTo::Index(1)).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(tree(&roots[1]), wants[1]);

    // The folder in use keeps its own, however big.
    s.resident_entries = 10;
    s.take(&roots[2], vec![owner("s", Phase::Manual, "")])
        .unwrap();
    assert!(kept(&s, &roots[2]));
    assert!(!kept(&s, &roots[0]) && !kept(&s, &roots[1]));
}
