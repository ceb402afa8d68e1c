//! What status shows of a folder's snapshots, published by the store's
//! thread after each of its jobs, so that status reads it without waiting.
//!
//! Only folders someone asked the status of are kept. Each entry is
//! refreshed on the store's thread before any reply of a job leaves it,
//! so a caller that saw its snapshot taken then reads a count that has it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{SnapError, SnapshotStore};

/// How old the count of the manifests' bytes may be: counting looks up
/// every manifest (the packs' bytes are always current).
const MANIFEST_BYTES_AGE: Duration = Duration::from_secs(1);

/// A folder's snapshots as status shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    pub count: usize,
    /// Bytes of the whole store.
    pub store_bytes: u64,
    /// The watcher's one line on the folder.
    pub watch: String,
}

/// The standings the store's thread published, shared with status.
#[derive(Clone, Default)]
pub struct Published(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// What status reads: held only to copy an entry in or out.
    folders: Mutex<Folders>,
    /// The manifests' bytes and when they were counted (the store's
    /// thread's).
    manifests: Mutex<Option<(Instant, u64)>>,
}

#[derive(Default)]
struct Folders {
    shown: HashMap<PathBuf, Standing>,
    /// Folders whose scan or restore runs off the store's thread.
    busy: HashSet<PathBuf>,
}

impl Folders {
    fn show(&mut self, folder: PathBuf, mut standing: Standing) {
        if self.busy.contains(&folder) {
            standing.watch = format!(
                "(the snapshot store is busy: counts as last seen) {}",
                standing.watch
            )
            .trim_end()
            .to_owned();
        }
        self.shown.insert(folder, standing);
    }
}

impl Published {
    /// `folder`'s standing as of the store's last job there (`None`: not
    /// asked about yet, or forgotten when the store was reopened).
    pub fn get(&self, folder: &Path) -> Option<Standing> {
        self.0.folders.lock().ok()?.shown.get(folder).cloned()
    }

    /// On the store's thread: `folder`'s standing now, kept from now on.
    pub fn learn(&self, store: &mut SnapshotStore, folder: &Path) -> Result<Standing, SnapError> {
        let standing = Standing {
            count: store.count(folder)?,
            store_bytes: self.bytes(store),
            watch: store.watch_status(folder),
        };
        if let Ok(mut folders) = self.0.folders.lock() {
            folders.show(folder.to_path_buf(), standing.clone());
        }
        Ok(standing)
    }

    /// On the store's thread, after a job: every folder kept, as the
    /// store has it now.
    pub fn refresh(&self, store: &SnapshotStore) {
        let kept: Vec<PathBuf> = match self.0.folders.lock() {
            Ok(folders) => folders.shown.keys().cloned().collect(),
            Err(_) => return,
        };
        if kept.is_empty() {
            return;
        }
        let bytes = self.bytes(store);
        let fresh: Vec<(PathBuf, Option<Standing>)> = kept
            .into_iter()
            .map(|folder| {
                let standing = store.count_loaded(&folder).map(|count| Standing {
                    count,
                    store_bytes: bytes,
                    watch: store.watch_status(&folder),
                });
                (folder, standing)
            })
            .collect();
        if let Ok(mut folders) = self.0.folders.lock() {
            for (folder, standing) in fresh {
                match standing {
                    Some(standing) => folders.show(folder, standing),
                    None => {
                        folders.shown.remove(&folder);
                    }
                }
            }
        }
    }

    /// A scan or restore of `folder` began off the store's thread: until
    /// [`Published::done`], its counts are as last seen, and status says so.
    pub fn busy(&self, folder: &Path) {
        if let Ok(mut folders) = self.0.folders.lock()
            && folders.busy.insert(folder.to_path_buf())
            && let Some(standing) = folders.shown.remove(folder)
        {
            folders.show(folder.to_path_buf(), standing);
        }
    }

    /// `folder`'s scan or restore came back (the next refresh shows it).
    pub fn done(&self, folder: &Path) {
        if let Ok(mut folders) = self.0.folders.lock() {
            folders.busy.remove(folder);
        }
    }

    /// The store was reopened from disk: nothing published stands (the
    /// caller marks again what still runs away).
    pub fn forget(&self) {
        if let Ok(mut folders) = self.0.folders.lock() {
            *folders = Folders::default();
        }
        if let Ok(mut manifests) = self.0.manifests.lock() {
            *manifests = None;
        }
    }

    /// The store's bytes: the packs' as they are, the manifests' counted
    /// again when older than [`MANIFEST_BYTES_AGE`].
    fn bytes(&self, store: &SnapshotStore) -> u64 {
        let manifests = match self.0.manifests.lock() {
            Ok(mut seen) => match *seen {
                Some((at, bytes)) if at.elapsed() < MANIFEST_BYTES_AGE => bytes,
                _ => {
                    let bytes = store.manifest_bytes();
                    *seen = Some((Instant::now(), bytes));
                    bytes
                }
            },
            Err(_) => store.manifest_bytes(),
        };
        store.pack_bytes() + manifests
    }
}
