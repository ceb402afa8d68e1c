//! What a snapshot records about its manifest (files, bytes, paths changed,
//! paths skipped): from the splice's delta when there is one, else whole.

use super::Snap;
use super::incremental::Scanned;
use super::manifest::{Entry, Kind, Manifest, aligned};

/// The numbers a [`Snap`] carries, and whether its manifest equals the previous one.
pub struct Summary {
    pub same: bool,
    pub changed: u64,
    pub files: u64,
    pub bytes: u64,
    pub skipped: u64,
    pub skipped_why: String,
}

/// A file's contribution to the counts.
fn counted(e: Option<&Entry>) -> (u64, u64) {
    match e {
        Some(e) if e.kind == Kind::File => (1, e.size),
        _ => (0, 0),
    }
}

/// Sums up `scanned` against the previous manifest and its newest snapshot
/// (`prev_snap`, whose numbers are `prev`'s). With a delta this costs what
/// changed; without one, a walk over both manifests.
pub fn summarize(prev: Option<(&Manifest, &Snap)>, scanned: &Scanned) -> Summary {
    let m = &scanned.manifest;
    let whole = || {
        let (skipped, skipped_why) = m.skipped();
        let same = prev.is_some_and(|(p, _)| p.same_as(m));
        let changed = match prev {
            None => m.len() as u64,
            Some(_) if same => 0,
            Some((p, _)) => count_changes(p, m),
        };
        Summary {
            same,
            changed,
            files: m.files(),
            bytes: m.bytes(),
            skipped,
            skipped_why,
        }
    };
    let (Some((p, snap)), Some((upserts, removed))) = (prev, &scanned.delta) else {
        return whole();
    };
    let (mut files, mut bytes) = (snap.files, snap.bytes);
    let mut changed = removed.len() as u64;
    for path in removed {
        let (f, b) = counted(p.find(path));
        files = files.saturating_sub(f);
        bytes = bytes.saturating_sub(b);
    }
    for u in upserts {
        let old = p.find(&u.path);
        changed += u64::from(old.is_none_or(|o| !o.same_content(u)));
        let (f, b) = counted(old);
        let (nf, nb) = counted(Some(u));
        files = files.saturating_sub(f) + nf;
        bytes = bytes.saturating_sub(b) + nb;
    }
    // Skipped paths: only a manifest that has or gets one needs the walk.
    let (skipped, skipped_why) = if snap.skipped == 0 && !upserts.iter().any(Entry::loud_skip) {
        (0, String::new())
    } else {
        m.skipped()
    };
    Summary {
        same: upserts.is_empty() && removed.is_empty(),
        changed,
        files,
        bytes,
        skipped,
        skipped_why,
    }
}

/// Paths added, removed or changed in content between two sorted manifests.
fn count_changes(a: &Manifest, b: &Manifest) -> u64 {
    aligned([a, b])
        .filter(|(_, row)| match row {
            [Some(p), Some(q)] => !p.same_content(q),
            _ => true,
        })
        .count() as u64
}
