//! The snapshot actor: one thread owns the [`SnapshotStore`] (every
//! timeline's only writer); full scans and a restore's writes run on
//! threads of their own, so one folder's first snapshot or big restore
//! never holds up another folder's requests.
//!
//! Requests for a folder whose scan or restore runs wait for it, in order;
//! requests to snapshot a folder that queue up meanwhile are served
//! together by the next scan. A request whose caller went away before it
//! started is dropped; a panic fails only the request that hit it (the
//! store is reopened from disk; a restore still writing goes on, its folder
//! still held).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

use tokio::sync::oneshot;

use super::fair::Fair;
use super::restoring::AwayRestore;
use super::standing::Published;
use super::take::{AwayScan, Begun};
use super::verify::AwayVerify;
use super::{Owner, RestoreReport, Snap, SnapError, SnapshotStore};
use crate::environment::Environment;

type Work = Box<dyn FnOnce(&mut Result<SnapshotStore, Failure>) + Send>;
type Reply = oneshot::Sender<Result<Snap, Failure>>;
type RestoreReply = oneshot::Sender<Result<RestoreReport, Failure>>;
type BeginRestore = Box<dyn FnOnce(&mut SnapshotStore) -> Result<AwayRestore, SnapError> + Send>;

/// Why a snapshot request failed; shared, since one scan answers everyone
/// waiting on the same folder.
pub type Failure = Arc<SnapError>;

enum Job {
    Take {
        folder: PathBuf,
        owner: Owner,
        reply: Reply,
    },
    Other {
        folder: PathBuf,
        work: Work,
        /// Set when the caller stopped waiting.
        gone: Arc<AtomicBool>,
    },
    /// A full scan came back from its thread.
    Scanned(Box<AwayScan>),
    Restore {
        folder: PathBuf,
        begin: BeginRestore,
        reply: RestoreReply,
        gone: Arc<AtomicBool>,
    },
    /// A restore's writes came back from their thread.
    Restored(Box<AwayRestore>, RestoreReply),
    /// A restore's writes panicked on their thread.
    RestorePanicked {
        folder: PathBuf,
        cause: String,
        reply: RestoreReply,
    },
    /// An idle verification scan came back from its thread.
    Verified(Box<AwayVerify>),
}

impl Job {
    fn folder(&self) -> &Path {
        match self {
            Job::Take { folder, .. }
            | Job::Other { folder, .. }
            | Job::Restore { folder, .. }
            | Job::RestorePanicked { folder, .. } => folder,
            Job::Scanned(away) => away.folder(),
            Job::Restored(away, _) => away.folder(),
            Job::Verified(away) => away.folder(),
        }
    }
}

/// Runs `work` on `item` on a thread named `name`; gives `item` back when
/// no thread can be started (the caller then does the work itself).
fn on_thread<T: Send + 'static>(
    name: &str,
    item: T,
    work: impl FnOnce(T) + Send + 'static,
) -> Result<(), T> {
    // Shared so that the item stays here if the thread is not started.
    let handed = Arc::new(Mutex::new(Some(item)));
    let theirs = Arc::clone(&handed);
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if let Some(item) = theirs.lock().ok().and_then(|mut h| h.take()) {
                work(item);
            }
        });
    match spawned {
        Ok(_) => Ok(()),
        Err(_) => handed
            .lock()
            .ok()
            .and_then(|mut h| h.take())
            .map_or(Ok(()), Err),
    }
}

/// Cheap, cloneable address of the snapshot actor; the actor ends when the
/// last one is gone and no scan runs.
#[derive(Clone)]
pub struct Snapshots {
    tx: mpsc::Sender<Job>,
    busy: Busy,
    /// What status shows per folder, as the store's thread last left it.
    published: Published,
    _alive: Arc<()>,
}

pub use super::standing::Standing;

/// Marks a request abandoned when its caller's future is dropped.
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A panic's message, for the log and the caller.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// The actor's thread: the store, and the folders whose full scans run.
struct Actor {
    store: Result<SnapshotStore, Failure>,
    open: Box<dyn Fn() -> Result<SnapshotStore, SnapError> + Send>,
    /// Folders scanning now: who waits for the scan, and what came for the
    /// folder meanwhile (in order).
    scanning: HashMap<PathBuf, (Vec<Reply>, VecDeque<Job>)>,
    /// Folders whose restore writes now, and what came for them meanwhile.
    restoring: HashMap<PathBuf, VecDeque<Job>>,
    /// Idle verification scans running on their threads.
    verifying: usize,
    /// Work taken off the channel: folders take turns (see `fair`).
    queue: Fair<Job>,
    /// For scan threads to send their result back.
    tx: mpsc::Sender<Job>,
    /// What status reads without waiting, refreshed after every job.
    published: Published,
    /// A full scan, a restore or idle verification freed much heap since
    /// the last trim: it goes back to the system at the next idle second
    /// (glibc keeps it otherwise: 30 MB after a first snapshot of 100,000
    /// files).
    heap_to_return: bool,
}

impl Actor {
    fn run(mut self, rx: mpsc::Receiver<Job>, alive: Weak<()>) {
        loop {
            // Everything sent so far joins the line, so that each folder
            // gets its turn: 200 one-shots in one folder hold up another
            // folder's status or message by one job, not 200.
            while let Ok(job) = rx.try_recv() {
                self.enqueue(job);
            }
            let job = match self.queue.pop() {
                Some(job) => job,
                // Idle: keep the folder watches drained.
                None => match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(job) => {
                        self.enqueue(job);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if alive.strong_count() == 0
                            && self.scanning.is_empty()
                            && self.restoring.is_empty()
                            && self.verifying == 0
                        {
                            return;
                        }
                        let mut heavy = false;
                        let mut verify = Vec::new();
                        self.guarded("idle upkeep", |store| {
                            if let Ok(s) = store {
                                (heavy, verify) = s.idle_tick();
                            }
                        });
                        self.publish();
                        for away in verify {
                            self.verify_away(away);
                        }
                        if std::mem::replace(&mut self.heap_to_return, heavy) {
                            crate::memory::trim_now();
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
            };
            if !matches!(
                job,
                Job::Scanned(_)
                    | Job::Restored(..)
                    | Job::RestorePanicked { .. }
                    | Job::Verified(_)
            ) && let Some(parked) = self.parked(job.folder())
            {
                parked.push_back(job);
                continue;
            }
            match job {
                Job::Other { work, gone, folder } => {
                    if gone.load(Ordering::SeqCst) {
                        continue; // nobody waits for it any more
                    }
                    self.guarded(&folder.display().to_string(), work);
                }
                Job::Take {
                    folder,
                    owner,
                    reply,
                } => self.take(&rx, folder, owner, reply),
                Job::Scanned(away) => self.scanned(*away),
                Job::Restore {
                    folder,
                    begin,
                    reply,
                    gone,
                } => {
                    if !gone.load(Ordering::SeqCst) {
                        self.restore(folder, begin, reply);
                    }
                }
                Job::Restored(away, reply) => self.restored(*away, reply),
                Job::RestorePanicked {
                    folder,
                    cause,
                    reply,
                } => {
                    self.unpark(&folder);
                    tracing::error!(folder = %folder.display(), "a restore panicked: {cause}");
                    self.reopen();
                    let _ = reply.send(Err(Arc::new(SnapError::Internal(cause))));
                }
                Job::Verified(away) => {
                    self.verifying -= 1;
                    let folder = away.folder().display().to_string();
                    self.guarded(&folder, |store| {
                        if let Ok(s) = store {
                            s.finish_verify(*away);
                        }
                    });
                    self.publish();
                }
            }
        }
    }

    /// Puts `job` in line: a scan or restore coming back goes first.
    fn enqueue(&mut self, job: Job) {
        match job {
            Job::Scanned(_)
            | Job::Restored(..)
            | Job::RestorePanicked { .. }
            | Job::Verified(_) => {
                self.queue.push_urgent(job);
            }
            _ => {
                let folder = job.folder().to_path_buf();
                self.queue.push(&folder, job);
            }
        }
    }

    /// Where jobs for `folder` wait while its scan or restore runs.
    fn parked(&mut self, folder: &Path) -> Option<&mut VecDeque<Job>> {
        match self.scanning.get_mut(folder) {
            Some((_, parked)) => Some(parked),
            None => self.restoring.get_mut(folder),
        }
    }

    /// A restore's writes ended: what waited for its folder goes first.
    fn unpark(&mut self, folder: &Path) {
        let parked = self.restoring.remove(folder).unwrap_or_default();
        self.queue.push_first(folder, parked);
    }

    /// Plans and journals a restore here, and writes it on a thread of its
    /// own while the folder's other requests wait.
    fn restore(&mut self, folder: PathBuf, begin: BeginRestore, reply: RestoreReply) {
        let store = &mut self.store;
        let begun = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match store {
            Ok(s) => begin(s).map_err(Arc::new),
            Err(e) => Err(e.clone()),
        }));
        let away = match begun {
            Ok(Ok(away)) => Box::new(away),
            Ok(Err(e)) => {
                let _ = reply.send(Err(e));
                return;
            }
            Err(payload) => {
                let _ = reply.send(Err(self.panicked(&folder, &*payload)));
                return;
            }
        };
        let tx = self.tx.clone();
        let at = folder.clone();
        let started = on_thread(
            "snapshot-restore",
            (away, reply),
            move |(mut away, reply)| {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| away.run()));
                let _ = tx.send(match ran {
                    Ok(()) => Job::Restored(away, reply),
                    Err(payload) => Job::RestorePanicked {
                        folder: at,
                        cause: panic_text(&*payload),
                        reply,
                    },
                });
            },
        );
        self.published.busy(&folder);
        self.restoring.insert(folder, VecDeque::new());
        if let Err((away, reply)) = started {
            self.restored(*away, reply); // writes here instead
        }
    }

    /// Runs an idle verification scan on a thread of its own at background
    /// priority (here when none can be started) and finishes it when it
    /// comes back.
    fn verify_away(&mut self, away: AwayVerify) {
        let tx = self.tx.clone();
        let started = on_thread("snapshot-verify", away, move |mut away| {
            crate::priority::lower_this_thread();
            away.run();
            let _ = tx.send(Job::Verified(Box::new(away)));
        });
        self.verifying += 1;
        if let Err(mut away) = started {
            away.run();
            self.enqueue(Job::Verified(Box::new(away)));
        }
    }

    /// A restore's writes came back: it is finished here.
    fn restored(&mut self, away: AwayRestore, reply: RestoreReply) {
        let folder = away.folder().to_path_buf();
        self.unpark(&folder);
        let store = &mut self.store;
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match store {
            Ok(s) => s.finish_restore(away).map_err(Arc::new),
            Err(e) => Err(e.clone()),
        }));
        let result = done.unwrap_or_else(|payload| Err(self.panicked(&folder, &*payload)));
        self.heap_to_return = true;
        self.published.done(&folder);
        self.publish();
        let _ = reply.send(result);
    }

    /// Runs `work` on the store; a panic is logged, the store reopened from
    /// disk, and the request fails (its reply is dropped unanswered).
    fn guarded(&mut self, what: &str, work: impl FnOnce(&mut Result<SnapshotStore, Failure>)) {
        let store = &mut self.store;
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(store)))
        {
            let cause = panic_text(&*payload);
            tracing::error!(
                "a snapshot request panicked ({what}): {cause}; reopening the snapshot store from disk"
            );
            self.reopen();
        }
    }

    /// A snapshot of `folder` panicked: logged, the store reopened from
    /// disk, and the error its waiters get.
    fn panicked(&mut self, folder: &Path, payload: &(dyn std::any::Any + Send)) -> Failure {
        let cause = panic_text(payload);
        tracing::error!(folder = %folder.display(), "a snapshot panicked: {cause}");
        self.reopen();
        Arc::new(SnapError::Internal(cause))
    }

    fn reopen(&mut self) {
        // Scans still running count on the old store's bookkeeping: their
        // results are dropped (they fail) when they come back.
        let scanning: Vec<_> = self.scanning.drain().collect();
        for (folder, (replies, parked)) in scanning {
            for r in replies {
                let _ = r.send(Err(Arc::new(SnapError::Internal(
                    "the snapshot store restarted during this scan: try again".into(),
                ))));
            }
            self.queue.push_first(&folder, parked);
        }
        // Restores still writing keep their folders held; the new store
        // finishes them when they come back (their journals are replayed
        // only if agentd dies first).
        self.store = (self.open)().map_err(Arc::new);
        if let Ok(s) = &mut self.store {
            s.hold_for_away(self.restoring.len() + self.verifying);
        }
        self.published.forget();
        for folder in self.restoring.keys() {
            self.published.busy(folder);
        }
    }

    /// Refreshes what status reads (before any reply of the job leaves).
    fn publish(&self) {
        if let Ok(s) = &self.store {
            self.published.refresh(s);
        }
    }

    /// Takes (or starts) a snapshot of `folder` for everyone waiting to.
    fn take(&mut self, rx: &mpsc::Receiver<Job>, folder: PathBuf, owner: Owner, reply: Reply) {
        // Everyone else waiting to snapshot this folder shares this scan.
        let mut waiting = vec![(owner, reply)];
        while let Ok(next) = rx.try_recv() {
            self.enqueue(next);
        }
        for job in self
            .queue
            .take_out(&folder, |job| matches!(job, Job::Take { .. }))
        {
            if let Job::Take { owner, reply, .. } = job {
                waiting.push((owner, reply));
            }
        }
        waiting.retain(|(_, reply)| !reply.is_closed());
        if waiting.is_empty() {
            return; // every caller went away
        }
        let owners = waiting.iter().map(|(o, _)| o.clone()).collect();
        let replies: Vec<Reply> = waiting.into_iter().map(|(_, r)| r).collect();
        let store = &mut self.store;
        let begun = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match store {
            Ok(s) => s.begin_take(&folder, owners).map_err(Arc::new),
            Err(e) => Err(e.clone()),
        }));
        let result = match begun {
            Ok(Ok(Begun::Away(mut away))) => {
                let tx = self.tx.clone();
                let spawned = std::thread::Builder::new()
                    .name("snapshot-scan".into())
                    .spawn(move || {
                        crate::priority::lower_this_thread();
                        away.run();
                        let _ = tx.send(Job::Scanned(away));
                    });
                match spawned {
                    Ok(_) => {
                        self.published.busy(&folder);
                        self.scanning.insert(folder, (replies, VecDeque::new()));
                        return;
                    }
                    Err(e) => {
                        // The scan (and its pack) went with the closure; a
                        // fresh store forgets it.
                        self.reopen();
                        Err(Arc::new(SnapError::Io(e)))
                    }
                }
            }
            Ok(Ok(Begun::Done(snap))) => Ok(snap),
            Ok(Err(e)) => Err(e),
            Err(payload) => Err(self.panicked(&folder, &*payload)),
        };
        self.publish();
        for r in replies {
            let _ = r.send(result.clone());
        }
    }

    /// A full scan came back: the snapshot is finished and the folder's
    /// waiting requests go first.
    fn scanned(&mut self, away: AwayScan) {
        let folder = away.folder().to_path_buf();
        let Some((replies, parked)) = self.scanning.remove(&folder) else {
            return; // the store restarted meanwhile: the scan is dropped
        };
        let store = &mut self.store;
        let started = std::time::Instant::now();
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match store {
            Ok(s) => s.finish_take(away).map_err(Arc::new),
            Err(e) => Err(e.clone()),
        }));
        tracing::debug!(
            folder = %folder.display(),
            us = started.elapsed().as_micros(),
            "a scan finished on the store's thread"
        );
        let result = done.unwrap_or_else(|payload| Err(self.panicked(&folder, &*payload)));
        self.heap_to_return = true;
        self.published.done(&folder);
        self.publish();
        for r in replies {
            let _ = r.send(result.clone());
        }
        self.queue.push_first(&folder, parked);
    }
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
        let alive = Arc::new(());
        let weak = Arc::downgrade(&alive);
        let scans = tx.clone();
        let published = Published::default();
        let shown = published.clone();
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || {
                let open = move || SnapshotStore::open(&root, config.clone(), Arc::clone(&env));
                let actor = Actor {
                    store: open().map_err(Arc::new),
                    open: Box::new(open),
                    scanning: HashMap::new(),
                    restoring: HashMap::new(),
                    verifying: 0,
                    queue: Fair::default(),
                    tx: scans,
                    published: shown,
                    heap_to_return: false,
                };
                actor.run(rx, weak);
            })?;
        Ok(Self {
            tx,
            busy: Busy::default(),
            published,
            _alive: alive,
        })
    }

    /// The folder's snapshots for status: as the store's thread published
    /// them after its last job in the folder, read without waiting. A
    /// folder not asked about before is asked within `patience`; when the
    /// store is busy longer (a restore, the folder's own first scan), the
    /// watch line says the counts are unknown for now. `None`: snapshots
    /// are off in the folder (or the store failed).
    pub async fn standing(&self, folder: &Path, patience: Duration) -> Option<Standing> {
        if let Some(published) = self.published.get(folder) {
            return Some(published);
        }
        let (at, published) = (folder.to_path_buf(), self.published.clone());
        let asked = self.call(folder, move |s| published.learn(s, &at));
        match tokio::time::timeout(patience, asked).await {
            Ok(Ok(fresh)) => Some(fresh),
            Ok(Err(_)) => None,
            Err(_) => Some(Standing {
                watch: "(the snapshot store is busy: counts unknown for now)".to_owned(),
                ..Standing::default()
            }),
        }
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

    /// Restores `folder` as `begin` plans it (on the store's thread, after
    /// whatever runs for the folder); its writes run on a thread of their
    /// own. Once begun it runs to the end even if the caller goes away.
    ///
    /// A snapshot is taken first, as any other, so that a full scan the
    /// pre-restore snapshot needs (after the watcher lost track, as it does
    /// when a restore writes thousands of files) runs off the store's
    /// thread; the pre-restore snapshot then takes its place.
    pub async fn restore(
        &self,
        folder: &Path,
        begin: impl FnOnce(&mut SnapshotStore) -> Result<AwayRestore, SnapError> + Send + 'static,
    ) -> Result<RestoreReport, Failure> {
        self.busy.check(folder).map_err(Arc::new)?;
        if let Err(e) = self.take(folder, Owner::ahead_of_restore()).await {
            // The restore's own snapshot says what is wrong, if it still is.
            tracing::debug!(folder = %folder.display(), "the snapshot ahead of a restore failed: {e}");
        }
        let (reply, rx) = oneshot::channel();
        let gone = Arc::new(AtomicBool::new(false));
        let _abandoned = Abandoned(Arc::clone(&gone));
        self.tx
            .send(Job::Restore {
                folder: folder.to_path_buf(),
                begin: Box::new(begin),
                reply,
                gone,
            })
            .map_err(|_| Arc::new(SnapError::Closed))?;
        rx.await.map_err(|_| {
            Arc::new(SnapError::Internal(
                "the snapshot store hit an internal error on this restore (see agentd's log)"
                    .into(),
            ))
        })?
    }

    /// Runs `f` on the store's thread, after whatever runs for `folder`
    /// (its scan, say); dropped unrun when the caller stops waiting first.
    pub async fn call<T: Send + 'static>(
        &self,
        folder: &Path,
        f: impl FnOnce(&mut SnapshotStore) -> Result<T, SnapError> + Send + 'static,
    ) -> Result<T, Failure> {
        let (reply, rx) = oneshot::channel();
        let published = self.published.clone();
        let work: Work = Box::new(move |store| {
            let result = match store {
                Ok(s) => {
                    let result = f(s).map_err(Arc::new);
                    // Before the reply: whoever it reaches reads it.
                    published.refresh(s);
                    result
                }
                Err(e) => Err(e.clone()),
            };
            let _ = reply.send(result);
        });
        let gone = Arc::new(AtomicBool::new(false));
        let _abandoned = Abandoned(Arc::clone(&gone));
        self.tx
            .send(Job::Other {
                folder: folder.to_path_buf(),
                work,
                gone,
            })
            .map_err(|_| Arc::new(SnapError::Closed))?;
        rx.await.map_err(|_| {
            Arc::new(SnapError::Internal(
                "the snapshot store hit an internal error on this request (see agentd's log)"
                    .into(),
            ))
        })?
    }
}
