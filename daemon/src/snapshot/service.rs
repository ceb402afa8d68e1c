//! The snapshot actor: one thread owns the [`SnapshotStore`] (every
//! timeline's only writer). Snapshot requests for a folder that queue up
//! while a scan runs are served together by the next scan.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use tokio::sync::oneshot;

use super::{Owner, Snap, SnapError, SnapshotStore};
use crate::environment::Environment;

type Work = Box<dyn FnOnce(&mut Result<SnapshotStore, Failure>) + Send>;

/// Why a snapshot request failed; shared, since one scan answers everyone
/// waiting on the same folder.
pub type Failure = Arc<SnapError>;

enum Job {
    Take {
        folder: PathBuf,
        owner: Owner,
        reply: oneshot::Sender<Result<Snap, Failure>>,
    },
    Other(Work),
}

/// Cheap, cloneable address of the snapshot actor.
#[derive(Clone)]
pub struct Snapshots {
    tx: mpsc::Sender<Job>,
    busy: Busy,
}

/// Turns and one-shots in flight, per folder: a restore refuses while one
/// runs there (it would revert half a message and lose the rest).
#[derive(Clone, Default)]
pub struct Busy(Arc<Mutex<Running>>);

/// Per folder: (registration id, what runs).
type Running = HashMap<PathBuf, Vec<(u64, String)>>;

/// Registration of one turn; dropping it ends it.
pub struct BusyGuard {
    busy: Busy,
    folder: PathBuf,
    id: u64,
}

impl Busy {
    /// Registers a turn (`what` names it: "conversation X", "one-shot Y").
    pub fn enter(&self, folder: &Path, what: String) -> BusyGuard {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut map) = self.0.lock() {
            map.entry(folder.to_path_buf())
                .or_default()
                .push((id, what));
        }
        BusyGuard {
            busy: self.clone(),
            folder: folder.to_path_buf(),
            id,
        }
    }

    /// Refuses with one line naming what runs in `folder`, if anything.
    pub fn check(&self, folder: &Path) -> Result<(), SnapError> {
        let running: Vec<String> = self
            .0
            .lock()
            .map(|m| {
                m.get(folder)
                    .map(|v| v.iter().map(|(_, w)| w.clone()).collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        match running.first() {
            None => Ok(()),
            Some(first) => Err(SnapError::Busy(format!(
                "{first}{} is running in this folder: wait for it to finish (or cancel it), then try again",
                if running.len() > 1 {
                    format!(" (and {} more)", running.len() - 1)
                } else {
                    String::new()
                }
            ))),
        }
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.busy.0.lock()
            && let Some(v) = map.get_mut(&self.folder)
        {
            v.retain(|(id, _)| *id != self.id);
            if v.is_empty() {
                map.remove(&self.folder);
            }
        }
    }
}

impl Snapshots {
    /// Starts the actor; the store opens on its thread (see
    /// [`SnapshotStore::open`]).
    pub fn start(root: PathBuf, config: PathBuf, env: Arc<Environment>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || {
                let mut store = SnapshotStore::open(&root, config, env).map_err(Arc::new);
                let mut backlog: VecDeque<Job> = VecDeque::new();
                loop {
                    let job = match backlog.pop_front() {
                        Some(job) => job,
                        // Idle: keep the folder watches drained.
                        None => match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                            Ok(job) => job,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                if let Ok(s) = &mut store {
                                    s.idle_tick();
                                }
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        },
                    };
                    match job {
                        Job::Other(work) => work(&mut store),
                        Job::Take {
                            folder,
                            owner,
                            reply,
                        } => {
                            // Everyone else waiting to snapshot this folder
                            // shares this scan.
                            let mut waiting = vec![(owner, reply)];
                            while let Ok(next) = rx.try_recv() {
                                match next {
                                    Job::Take {
                                        folder: f,
                                        owner,
                                        reply,
                                    } if f == folder => waiting.push((owner, reply)),
                                    other => backlog.push_back(other),
                                }
                            }
                            let owners = waiting.iter().map(|(o, _)| o.clone()).collect();
                            let result = match &mut store {
                                Ok(s) => s.take(&folder, owners).map_err(Arc::new),
                                Err(e) => Err(e.clone()),
                            };
                            for (_, reply) in waiting {
                                let _ = reply.send(result.clone());
                            }
                        }
                    }
                }
            })?;
        Ok(Self {
            tx,
            busy: Busy::default(),
        })
    }

    /// The registry of turns in flight.
    pub fn busy(&self) -> Busy {
        self.busy.clone()
    }

    /// Takes (or joins) a snapshot of `folder`; returns once it is durable.
    pub async fn take(&self, folder: &Path, owner: Owner) -> Result<Snap, Failure> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Take {
                folder: folder.to_path_buf(),
                owner,
                reply,
            })
            .map_err(|_| Arc::new(SnapError::Closed))?;
        rx.await.map_err(|_| Arc::new(SnapError::Closed))?
    }

    /// Runs `f` on the store's thread.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut SnapshotStore) -> Result<T, SnapError> + Send + 'static,
    ) -> Result<T, Failure> {
        let (reply, rx) = oneshot::channel();
        let work: Work = Box::new(move |store| {
            let result = match store {
                Ok(s) => f(s).map_err(Arc::new),
                Err(e) => Err(e.clone()),
            };
            let _ = reply.send(result);
        });
        self.tx
            .send(Job::Other(work))
            .map_err(|_| Arc::new(SnapError::Closed))?;
        rx.await.map_err(|_| Arc::new(SnapError::Closed))?
    }
}
