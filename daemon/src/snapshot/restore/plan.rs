//! Restore plans: what an undo or a rewind would change, path by path,
//! and what it leaves alone (conflicts, paths it cannot capture or follow).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::snapshot::manifest::{Entry, Kind, Manifest, aligned, why};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Created since: remove it.
    Remove,
    /// Modified since: put the old content back.
    RestoreModified,
    /// Deleted since: put it back.
    RestoreDeleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub path: String,
    pub action: Action,
    /// Changed again since the message being undone.
    pub conflict: bool,
    /// Why it is left alone (empty: it is restored).
    #[serde(default)]
    pub reason: String,
}

/// One step of a restore: make `path` be `want` (or absent).
#[derive(Debug, Clone)]
pub struct Op {
    pub path: Vec<u8>,
    pub want: Option<Entry>,
    pub action: Action,
    pub conflict: bool,
    /// Left alone, and why: the path (or a directory above it) could not be
    /// captured now or in the snapshot restored from.
    pub left_alone: Option<String>,
    /// What the plan believes stands at the path now (`None`: nothing):
    /// checked against the live file before the restore touches it.
    pub now: Option<Entry>,
    /// The live file is not what the plan believes, and why: a conflict
    /// that even `--force` never writes over.
    pub live: Option<String>,
}

pub(super) fn action_for(current: Option<&Entry>, want: Option<&Entry>) -> Option<Action> {
    match (current, want) {
        (None, None) => None,
        (Some(_), None) => Some(Action::Remove),
        (None, Some(_)) => Some(Action::RestoreDeleted),
        (Some(c), Some(w)) if c.same_content(w) && (c.kind != Kind::Dir || c.mode == w.mode) => {
            None
        }
        (Some(_), Some(_)) => Some(Action::RestoreModified),
    }
}

/// The paths of a manifest that were not captured ([`Kind::Skipped`]),
/// and the directories holding one.
pub(super) struct Uncaptured<'a> {
    at: HashMap<&'a [u8], &'a [u8]>,
    /// Directory → whether what it holds is listed (not merely excluded).
    holds: HashMap<&'a [u8], bool>,
}

impl<'a> Uncaptured<'a> {
    pub(super) fn new(m: &'a Manifest) -> Self {
        let mut at = HashMap::new();
        let mut holds: HashMap<&[u8], bool> = HashMap::new();
        for e in m.iter().filter(|e| e.kind == Kind::Skipped) {
            at.insert(e.path.as_slice(), e.target.as_slice());
            let loud = !why::unlisted(&e.target);
            for (i, b) in e.path.iter().enumerate() {
                if *b == b'/' {
                    let slot = holds.entry(&e.path[..i]).or_insert(false);
                    *slot |= loud;
                }
            }
        }
        Self { at, holds }
    }

    /// The path, or the nearest directory above it, that was not captured,
    /// with the reason.
    pub(super) fn covering(&self, path: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        if self.at.is_empty() {
            return None;
        }
        let mut ends: Vec<usize> = path
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| i)
            .collect();
        ends.push(path.len());
        ends.into_iter().find_map(|end| {
            self.at
                .get(&path[..end])
                .map(|reason| (&path[..end], *reason))
        })
    }
}

/// Whether an op may run: `None` drops it silently (an excluded path, or a
/// directory that stays because it holds excluded content), `Some(Some(why))`
/// lists it as left alone (a FIFO, socket or device among them: never
/// captured, so never made again nor removed, but named).
pub(super) fn guard(
    path: &[u8],
    action: Action,
    now: Option<&Entry>,
    want: &Uncaptured<'_>,
    current: &Uncaptured<'_>,
) -> Option<Option<String>> {
    let show = |p: &[u8]| escape(p);
    if let Some((at, reason)) = current.covering(path) {
        if why::unlisted(reason) {
            return None;
        }
        let r = String::from_utf8_lossy(reason);
        return Some(Some(if at == path && why::special(reason) {
            format!("is {r} now: agentx does not capture those, so it is left as it is")
        } else if at == path {
            format!("{r} now: not captured, so left alone")
        } else {
            format!("{} is {r} now: left alone", show(at))
        }));
    }
    if let Some((at, reason)) = want.covering(path) {
        if why::unlisted(reason) {
            return None;
        }
        let r = String::from_utf8_lossy(reason);
        return Some(Some(if at == path && why::special(reason) {
            format!("was {r}: agentx does not capture those, so it is not made again")
        } else if at == path {
            format!("{r} then: its state was not captured, so left alone")
        } else {
            format!("{} was {r} then: left alone", show(at))
        }));
    }
    if action == Action::Remove
        && now.is_some_and(|n| n.kind == Kind::Dir)
        && let Some(loud) = current.holds.get(path)
    {
        if !loud {
            return None; // stays: it holds excluded content
        }
        return Some(Some(
            "holds files agentx could not capture: the folder stays".into(),
        ));
    }
    Some(None)
}

/// A path for display: control characters (newlines, tabs) escaped.
pub fn escape(path: &[u8]) -> String {
    let s = String::from_utf8_lossy(path);
    if !s.chars().any(char::is_control) {
        return s.into_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether a file system was mounted on the directory holding `path` since
/// `after`: the directory is another one in `current` (its inode changed)
/// and `mounted` says it is a mount's root now. (A directory merely
/// re-created, say by an earlier undo, is not a reason for a conflict.)
fn mounted_since(
    path: &[u8],
    after: &Manifest,
    current: &Manifest,
    mounted: &dyn Fn(&[u8]) -> bool,
) -> bool {
    let Some(i) = path.iter().rposition(|b| *b == b'/') else {
        return false;
    };
    let par = &path[..i];
    let replaced = match (after.find(par), current.find(par)) {
        (Some(a), Some(c)) => a.kind == Kind::Dir && c.kind == Kind::Dir && a.ino != c.ino,
        _ => false,
    };
    replaced && mounted(par)
}

/// Paths an undo must treat as conflicts beyond its own comparison.
pub struct Suspects<'a> {
    /// Changed by another conversation or one-shot while the message ran.
    pub foreign: &'a HashSet<Vec<u8>>,
    /// Whether a directory (relative path) is the root of a mount now.
    pub mounted: &'a dyn Fn(&[u8]) -> bool,
}

impl Suspects<'_> {
    /// None.
    pub fn none() -> Suspects<'static> {
        static EMPTY: std::sync::LazyLock<HashSet<Vec<u8>>> =
            std::sync::LazyLock::new(HashSet::new);
        Suspects {
            foreign: &EMPTY,
            mounted: &|_| false,
        }
    }
}

/// Undo: the paths `before`→`after` changed, put back as `before` had them.
/// A conflict: a path whose current state differs from `after`, whose
/// directory has a file system mounted on it since, or that another
/// conversation or one-shot changed while this message ran (`suspects`).
pub fn plan_undo(
    before: &Manifest,
    after: &Manifest,
    current: &Manifest,
    suspects: &Suspects<'_>,
) -> Vec<Op> {
    let (unc_before, unc_after, unc_now) = (
        Uncaptured::new(before),
        Uncaptured::new(after),
        Uncaptured::new(current),
    );
    let links = Links::new(before);
    let mut ops = Vec::new();
    for (p, [was, became, now]) in aligned([before, after, current]) {
        let changed = match (was, became) {
            (Some(x), Some(y)) => !x.same_content(y) || links.split(p, x, after),
            (None, None) => false,
            _ => true,
        };
        if !changed {
            continue;
        }
        let Some(action) = action_for(now, was).or_else(|| {
            was.filter(|w| links.split(p, w, current))
                .map(|_| Action::RestoreModified)
        }) else {
            continue;
        };
        let conflict = match (now, became) {
            (Some(n), Some(y)) => !n.same_content(y),
            (None, None) => false,
            _ => true,
        } || suspects.foreign.contains(p)
            || mounted_since(p, after, current, suspects.mounted);
        // Not captured after the message either: nothing to compare with.
        if unc_after.covering(p).is_some_and(|(_, r)| why::unlisted(r)) {
            continue;
        }
        let Some(left_alone) = guard(p, action, now, &unc_before, &unc_now) else {
            continue;
        };
        ops.push(Op {
            path: p.to_vec(),
            want: was.cloned(),
            action,
            conflict,
            left_alone,
            now: now.cloned(),
            live: None,
        });
    }
    mark_filled(&mut ops, current);
    ops
}

/// Directories the message made (so undo removes them) that hold files it
/// does not remove — saved there since — are conflicts: removing one would
/// fail, and the folder stays with the user's files (excluded content is
/// no reason: `guard` drops such a directory's removal).
fn mark_filled(ops: &mut [Op], current: &Manifest) {
    let dirs: HashSet<&[u8]> = ops
        .iter()
        .filter(|o| o.action == Action::Remove && o.left_alone.is_none())
        .filter(|o| o.now.as_ref().is_some_and(|n| n.kind == Kind::Dir))
        .map(|o| o.path.as_slice())
        .collect();
    if dirs.is_empty() {
        return;
    }
    let removed: HashSet<&[u8]> = ops
        .iter()
        .filter(|o| o.action == Action::Remove)
        .map(|o| o.path.as_slice())
        .collect();
    let mut filled: HashSet<Vec<u8>> = HashSet::new();
    for e in current.iter() {
        if removed.contains(e.path.as_slice())
            || (e.kind == Kind::Skipped && why::unlisted(&e.target))
        {
            continue;
        }
        for (i, b) in e.path.iter().enumerate() {
            if *b == b'/' && dirs.contains(&e.path[..i]) {
                filled.insert(e.path[..i].to_vec());
            }
        }
    }
    for op in ops.iter_mut().filter(|o| filled.contains(&o.path)) {
        op.conflict = true;
    }
}

/// Rewind: every path made as `target` has it.
pub fn plan_rewind(target: &Manifest, current: &Manifest) -> Vec<Op> {
    let (unc_want, unc_now) = (Uncaptured::new(target), Uncaptured::new(current));
    let links = Links::new(target);
    aligned([target, current])
        .filter_map(|(p, [want, now])| {
            let action = action_for(now, want).or_else(|| {
                want.filter(|w| links.split(p, w, current))
                    .map(|_| Action::RestoreModified)
            })?;
            let left_alone = guard(p, action, now, &unc_want, &unc_now)?;
            Some(Op {
                path: p.to_vec(),
                want: want.cloned(),
                action,
                conflict: false,
                left_alone,
                now: now.cloned(),
                live: None,
            })
        })
        .collect()
}

/// Hard-link groups of a manifest: files sharing an inode (`nlink > 1`).
pub(super) struct Links<'a> {
    by_ino: HashMap<u64, Vec<&'a [u8]>>,
}

impl<'a> Links<'a> {
    pub(super) fn new(m: &'a Manifest) -> Self {
        let mut by_ino: HashMap<u64, Vec<&[u8]>> = HashMap::new();
        for e in m.iter().filter(|e| e.kind == Kind::File && e.nlink > 1) {
            by_ino.entry(e.ino).or_default().push(&e.path);
        }
        by_ino.retain(|_, v| v.len() > 1);
        Self { by_ino }
    }

    /// Whether `path`, linked to others in this manifest, is no longer one
    /// inode with all of them in `other`.
    pub(super) fn split(&self, path: &[u8], e: &Entry, other: &Manifest) -> bool {
        let Some(group) = self.by_ino.get(&e.ino) else {
            return false;
        };
        if !group.contains(&path) {
            return false;
        }
        let Some(mine) = other.find(path) else {
            return false;
        };
        group
            .iter()
            .filter(|p| **p != path)
            .any(|p| other.find(p).is_none_or(|o| o.ino != mine.ino))
    }
}

pub fn describe(ops: &[Op]) -> Vec<Planned> {
    ops.iter()
        .map(|o| Planned {
            path: escape(&o.path),
            action: o.action,
            conflict: o.conflict || o.live.is_some(),
            reason: o
                .live
                .clone()
                .or_else(|| o.left_alone.clone())
                .unwrap_or_default(),
        })
        .collect()
}
