//! A folder's timeline on disk (`timeline.json`: its snapshots, oldest
//! first) and its manifests (whole or delta, chained) as files.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::manifest::{self, Manifest, Stored};
use super::{FolderState, MAX_DELTA_DEPTH, Snap, SnapError, SnapshotStore};
use crate::durable;

#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Timeline {
    pub(super) folder: String,
    /// Oldest first.
    pub(crate) snaps: Vec<Snap>,
}

pub(super) fn next_id(timeline: &Timeline, now: i64) -> String {
    let mut id = format!("{now:013x}");
    let mut n = 0;
    while timeline.snaps.iter().any(|s| s.id == id) {
        n += 1;
        id = format!("{now:013x}-{n}");
    }
    id
}

pub(super) fn read_timeline(dir: &Path) -> Option<Timeline> {
    std::fs::read(dir.join("timeline.json"))
        .ok()
        .and_then(|b| parse_timeline(&b))
}

/// A timeline file's contents (`None` when they do not parse). Snapshots
/// naming themselves or their manifest by something other than a plain id
/// are dropped: ids become file names.
pub(crate) fn parse_timeline(bytes: &[u8]) -> Option<Timeline> {
    let mut timeline: Timeline = serde_json::from_slice(bytes).ok()?;
    timeline
        .snaps
        .retain(|s| manifest::plain_id(&s.id) && manifest::plain_id(&s.manifest));
    Some(timeline)
}

pub(super) fn save_timeline(dir: &Path, timeline: &Timeline) -> Result<(), SnapError> {
    let bytes = serde_json::to_vec(timeline).map_err(std::io::Error::other)?;
    durable::write_atomic(&dir.join("timeline.json"), &bytes)?;
    Ok(())
}

/// Keeps a manifest among the few recently used ones.
pub(super) fn remember(fs: &mut FolderState, id: &str, m: &Arc<Manifest>) {
    fs.recent.retain(|(i, _)| i != id);
    fs.recent.push((id.to_owned(), Arc::clone(m)));
    let excess = fs.recent.len().saturating_sub(4);
    fs.recent.drain(..excess);
}

/// `ids` and every manifest their delta chains build on. `bases` caches
/// each file's base (read from its header); a missing file ends a chain.
pub(super) fn chains(
    dir: &Path,
    ids: Vec<String>,
    bases: &mut HashMap<String, Option<String>>,
) -> Result<HashSet<String>, SnapError> {
    let mut out = HashSet::new();
    let mut stack = ids;
    while let Some(id) = stack.pop() {
        if out.contains(&id) {
            continue;
        }
        let base = match bases.get(&id) {
            Some(b) => b.clone(),
            None => {
                let b = manifest_base(dir, &id)?;
                bases.insert(id.clone(), b.clone());
                b
            }
        };
        stack.extend(base);
        out.insert(id);
    }
    Ok(out)
}

/// The base a manifest file names in its header (None: full, or missing).
pub(super) fn manifest_base(dir: &Path, id: &str) -> Result<Option<String>, SnapError> {
    use std::io::Read as _;
    let path = dir.join("manifests").join(format!("{id}.zst"));
    let mut head = Vec::with_capacity(80);
    match std::fs::File::open(&path) {
        Ok(f) => f.take(80).read_to_end(&mut head)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(Stored::peek_base(&head)?)
}

/// A manifest with its delta chain applied, and the chain's length.
pub(super) fn load_manifest(dir: &Path, id: &str) -> Result<(Manifest, u32), SnapError> {
    let mut deltas = Vec::new();
    let mut current = id.to_owned();
    let base = loop {
        let bytes = std::fs::read(dir.join("manifests").join(format!("{current}.zst")))?;
        match Stored::decode(&bytes)? {
            Stored::Full(m) => break m,
            Stored::Delta {
                base,
                upserts,
                removed,
            } => {
                deltas.push((upserts, removed));
                if deltas.len() > 2 * MAX_DELTA_DEPTH as usize {
                    return Err(SnapError::NotFound(format!(
                        "manifest {id} has a broken delta chain"
                    )));
                }
                current = base;
            }
        }
    };
    let depth = u32::try_from(deltas.len()).unwrap_or(u32::MAX);
    let manifest = deltas
        .into_iter()
        .rev()
        .fold(base, |m, (upserts, removed)| m.apply(&upserts, &removed));
    Ok((manifest, depth))
}

/// Says what a snapshot label of a cleared conversation's message became.
pub const CLEARED_LABEL: &str = "a message of a cleared conversation";

impl SnapshotStore {
    /// Conversation `session` was cleared: its snapshots stay (the folder's
    /// history is the folder's), but their labels, which quote its
    /// messages, no longer do.
    pub fn forget_conversation(&mut self, folder: &Path, session: &str) -> Result<(), SnapError> {
        let fs = self.folder(folder)?;
        let mut changed = false;
        for owner in fs
            .timeline
            .snaps
            .iter_mut()
            .flat_map(|s| s.owners.iter_mut())
            .filter(|o| o.session == session && o.label != CLEARED_LABEL)
        {
            owner.label = CLEARED_LABEL.to_owned();
            changed = true;
        }
        if changed {
            save_timeline(&fs.dir, &fs.timeline)?;
        }
        Ok(())
    }
}
