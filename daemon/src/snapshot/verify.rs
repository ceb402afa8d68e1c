//! Idle verification: a quiet watched folder is scanned in full, away from
//! the store's thread, and compared with its newest manifest.
//!
//! Equal, the watcher is trusted on; different, the folder is scanned in
//! full from now on. Nothing is stored: content the scan reads is dropped.
//! A scan of a big tree takes seconds; meanwhile the store's thread serves
//! every folder, and a change seen in the folder voids the result.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::blobs::{Known, PackWriter};
use super::manifest::Manifest;
use super::{SnapError, SnapshotStore, incremental, scan};

/// A verification scan of one folder, cut loose from the store.
pub struct AwayVerify {
    folder: PathBuf,
    /// The newest manifest's id when it began, and the manifest.
    base: String,
    latest: Arc<Manifest>,
    excludes: scan::Excludes,
    known: Known,
    pack: Option<PackWriter>,
    started: Instant,
    /// What differs (`None`: nothing), once run.
    outcome: Option<std::io::Result<Option<String>>>,
}

impl AwayVerify {
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Scans the folder and compares (on any thread); a panic is an error
    /// of this verification only.
    pub fn run(&mut self) {
        let Some(mut pack) = self.pack.take() else {
            return;
        };
        let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scan::scan(
                &self.folder,
                &self.excludes,
                Some(&self.latest),
                &self.known,
                &mut pack,
            )
            .map(|(full, _)| incremental::first_difference(&self.latest, &full))
        }))
        .unwrap_or_else(|_| Err(std::io::Error::other("the scan hit an internal error")));
        pack.discard();
        self.outcome = Some(scanned);
    }
}

impl SnapshotStore {
    /// Verification scans due now, one per folder at a time, each to be
    /// run anywhere and handed back to [`Self::finish_verify`]. Until then
    /// no garbage is collected (the scans count on stored blobs).
    pub(super) fn begin_verify(&mut self) -> Vec<AwayVerify> {
        let due = self.watch.due();
        let mut out = Vec::new();
        for (folder, base) in due {
            if self.verifying.contains(&folder) {
                continue;
            }
            match self.verify_of(&folder, base) {
                Ok(Some(away)) => {
                    self.verifying.insert(folder);
                    self.away += 1;
                    out.push(away);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(folder = %folder.display(), "verification scan failed: {e}");
                    self.pause_idle_work();
                }
            }
        }
        out
    }

    fn verify_of(&mut self, folder: &Path, base: String) -> Result<Option<AwayVerify>, SnapError> {
        let Some((id, latest, _)) = self.latest(folder)? else {
            return Ok(None);
        };
        if id != base {
            return Ok(None);
        }
        Ok(Some(AwayVerify {
            folder: folder.to_path_buf(),
            base,
            latest,
            excludes: self.extra_excludes(),
            known: self.blobs.known().clone(),
            pack: Some(self.blobs.begin()?),
            started: Instant::now(),
            outcome: None,
        }))
    }

    /// A verification came back: it counts only if the folder's newest
    /// manifest is still the one scanned and no change was seen since.
    pub fn finish_verify(&mut self, away: AwayVerify) {
        let AwayVerify {
            folder,
            base,
            pack,
            started,
            outcome,
            ..
        } = away;
        if let Some(pack) = pack {
            pack.discard(); // never ran
        }
        self.verifying.remove(&folder);
        self.end_away();
        let current = self.latest(&folder).ok().flatten().map(|(id, _, _)| id);
        match outcome {
            Some(Ok(difference)) => {
                if current.as_deref() != Some(base.as_str()) || !self.watch.still_quiet(&folder) {
                    return; // changed while scanned: again when idle
                }
                match difference {
                    Some(diff) => self.watch.distrust(&folder, &diff),
                    None => self.watch.verified(&folder),
                }
                tracing::debug!(
                    folder = %folder.display(),
                    took_us = started.elapsed().as_micros(),
                    "verified while idle"
                );
            }
            Some(Err(e)) => {
                tracing::warn!(folder = %folder.display(), "verification scan failed: {e}");
                self.pause_idle_work();
            }
            None => {}
        }
    }
}
