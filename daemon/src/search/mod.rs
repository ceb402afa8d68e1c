//! Full-text search over every conversation (tantivy): a background thread
//! keeps the index in step with committed turns; queries rank and snippet.
//!
//! The index lives in `<profile>/search/` and is derived data: when it is
//! missing, unreadable or of another layout it is rebuilt from the sessions.
//! On start a reconcile pass compares each conversation's stamp (journal
//! length, rollbacks, update time, title) with the index and re-indexes what
//! differs, so a crash between a commit and its indexing loses nothing.
//! A damaged index (an error or a panic reading it) is rebuilt: see [`health`].
//! A commit is indexed incrementally: see [`indexing`].
//!
//! Clearing a conversation deletes its documents and commits; the indexer
//! then (nobody waiting) rewrites the segments that held them so the text
//! leaves the disk: see [`Purge`].
//!
//! Index commits come at most one per [`COMMIT_GAP`]: one that follows
//! another closely waits out the gap and takes in what came meanwhile, so
//! a turn's quick tool steps, or many conversations committing at once,
//! are indexed in a few commits, not one each. A clear never waits.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tantivy::collector::DocSetCollector;
use tantivy::query::TermQuery;
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TEXT, Value as _};
use tantivy::{IndexWriter, TantivyDocument, Term};

pub(crate) mod garbled;
mod health;
mod indexing;
mod query;
#[cfg(test)]
mod tests;

pub use query::Hit;

/// Bumped when the schema or what goes into it changes: forces a rebuild.
const LAYOUT: &str = "agentx-search-2";
/// Indexing memory budget (tantivy's minimum is 15 MB).
const WRITER_BYTES: usize = 40_000_000;
/// The least time from the end of one index commit to the start of the
/// next (unless a clear waits): search is at most this far behind under a
/// stream of commits, and immediate after a quiet spell.
const COMMIT_GAP: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("search index: {0}")]
    Index(#[from] tantivy::TantivyError),
    #[error("search index: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Query(String),
    #[error("search index: {0}")]
    Damaged(String),
    #[error(
        "the search index was damaged; agentd is rebuilding it from the conversations \
         (search again in a moment)"
    )]
    Rebuilding,
}

#[derive(Clone, Copy)]
struct Fields {
    key: Field,
    /// `<key>#<turn>`: one document (turn 0 is the meta document).
    turnkey: Field,
    sid: Field,
    folder: Field,
    agent: Field,
    kind: Field,
    turn: Field,
    at: Field,
    title: Field,
    label: Field,
    body: Field,
    stamp: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let f = Fields {
        key: b.add_text_field("key", STRING | STORED),
        sid: b.add_text_field("sid", STORED),
        folder: b.add_text_field("folder", STRING | STORED),
        agent: b.add_text_field("agent", STRING | STORED),
        kind: b.add_text_field("kind", STRING | STORED),
        turn: b.add_u64_field("turn", STORED),
        at: b.add_i64_field("at", STORED),
        title: b.add_text_field("title", TEXT | STORED),
        label: b.add_text_field("label", STORED),
        body: b.add_text_field("body", TEXT | STORED),
        stamp: b.add_text_field("stamp", STORED),
        turnkey: b.add_text_field("turnkey", STRING),
    };
    (b.build(), f)
}

pub struct SearchIndex {
    /// Replaced whole when the index is rebuilt.
    live: RwLock<health::Live>,
    f: Fields,
    dir: PathBuf,
    indexing: AtomicBool,
    sessions: AtomicU64,
    /// The indexer's queue, for asking it to rebuild.
    jobs: Sender<Job>,
    /// A rebuild is asked for and not yet done.
    rebuild_asked: AtomicBool,
    /// The last rebuild of a damaged index, for `daemon status`.
    note: health::RebuildNote,
    /// How far each conversation was indexed (the indexer's alone).
    memory: Mutex<indexing::Memory>,
    /// Index commits the indexer made.
    commits: AtomicU64,
}

/// What the indexer thread is asked to do.
enum Job {
    /// Re-index (or drop) the conversation whose document is this path.
    Touched(PathBuf),
    /// The conversation was cleared: drop it and answer once that is
    /// committed; then rewrite the segments that held it so its text leaves
    /// the disk (nobody waits for that).
    Forget(PathBuf, tokio::sync::oneshot::Sender<()>),
    /// Reading the index failed (the reason): replace it and re-index all.
    Rebuild(String),
}

impl Job {
    /// Someone waits for it, or it is repair: it does not wait out the gap.
    fn urgent(&self) -> bool {
        matches!(self, Job::Forget(..) | Job::Rebuild(_))
    }
}

/// `first` and every job that comes until `due` (or until an urgent one
/// comes): the batch of one commit.
fn gather(rx: &Receiver<Job>, first: Job, due: Option<Instant>) -> Vec<Job> {
    let mut jobs = vec![first];
    jobs.extend(std::iter::from_fn(|| rx.try_recv().ok()));
    let Some(due) = due else {
        return jobs;
    };
    while !jobs.iter().any(Job::urgent) {
        let Some(left) = due
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            break;
        };
        match rx.recv_timeout(left) {
            Ok(job) => {
                jobs.push(job);
                jobs.extend(std::iter::from_fn(|| rx.try_recv().ok()));
            }
            // Disconnected: what was gathered is still indexed; the next
            // receive ends the loop.
            Err(_) => break,
        }
    }
    jobs
}

impl SearchIndex {
    /// An index over `live` in `dir`, not indexing, whose indexer takes
    /// `jobs`.
    fn new(
        live: health::Live,
        f: Fields,
        dir: PathBuf,
        jobs: Sender<Job>,
        note: health::RebuildNote,
    ) -> Self {
        SearchIndex {
            live: RwLock::new(live),
            f,
            dir,
            indexing: AtomicBool::new(false),
            sessions: AtomicU64::new(0),
            jobs,
            rebuild_asked: AtomicBool::new(false),
            note,
            memory: Mutex::default(),
            commits: AtomicU64::new(0),
        }
    }

    /// One line on the last time a damaged index was rebuilt, if it was.
    pub fn rebuild_note(&self) -> Option<String> {
        self.note.get()
    }

    /// Drops cleared conversation `id` of `dir` from the index; returns
    /// once that is committed (no search finds it any more), bounded so a
    /// stuck indexer cannot hold up a clear (the start-up reconcile drops
    /// it then). The index files that still hold its text are rewritten
    /// afterwards by the indexer, without anyone waiting for it.
    pub async fn forget(&self, dir: &Path, id: &str) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self
            .jobs
            .send(Job::Forget(dir.join(format!("{id}.json")), done))
            .is_ok()
            && tokio::time::timeout(std::time::Duration::from_secs(60), wait)
                .await
                .is_err()
        {
            tracing::warn!("the search index did not drop cleared conversation {id} in time");
        }
    }
}

/// Opens (or rebuilds) the index in `index_dir` and starts the indexer
/// thread, which first reconciles the index with `sessions_dir`, then
/// re-indexes each conversation the store announces as changed.
pub fn start(
    index_dir: PathBuf,
    sessions_dir: PathBuf,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<crate::store::Changed>,
) -> Result<Arc<SearchIndex>, SearchError> {
    let (schema, f) = schema();
    let (live, why) = health::open_or_create(&index_dir, &schema)?;
    let note = health::RebuildNote::default();
    if let Some(why) = why {
        note.record(&why);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let search = Arc::new(SearchIndex::new(live, f, index_dir, tx.clone(), note));
    search.indexing.store(true, Ordering::SeqCst);
    let touched = tx;
    tokio::spawn(async move {
        while let Some(changed) = changes.recv().await {
            if touched.send(Job::Touched(changed.doc())).is_err() {
                return;
            }
        }
    });
    let worker = Arc::clone(&search);
    let (made, writer_made) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("search-indexer".into())
        .spawn(move || {
            // Indexing is background work; tantivy's threads, started by
            // the writer made here, take this thread's priority.
            crate::priority::lower_this_thread();
            let writer = health::guarded(|| Ok(writer_of(&worker.live())?));
            match writer {
                Ok(writer) => {
                    let _ = made.send(Ok(()));
                    worker.run(writer, rx, &sessions_dir);
                }
                Err(e) => {
                    let _ = made.send(Err(e));
                }
            }
        })?;
    writer_made
        .recv()
        .map_err(|_| SearchError::Damaged("the indexer thread ended".into()))??;
    Ok(search)
}

/// An index whose conversations the caller indexes on its own thread, one
/// commit at a time as the indexer does (benchmarks and tests).
pub(crate) struct Direct {
    search: SearchIndex,
    writer: IndexWriter<TantivyDocument>,
}

impl Direct {
    /// Opens (or creates) the index in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self, SearchError> {
        let (schema, f) = schema();
        let (live, _) = health::open_or_create(dir, &schema)?;
        let writer = writer_of(&live)?;
        // Nobody runs jobs: a rebuild asked for is not done.
        let (jobs, _) = std::sync::mpsc::channel();
        let search = SearchIndex::new(
            live,
            f,
            dir.to_path_buf(),
            jobs,
            health::RebuildNote::default(),
        );
        Ok(Self { search, writer })
    }

    /// Indexes the conversation whose document is `path` and commits;
    /// returns how many documents that added.
    pub(crate) fn index(&mut self, path: &Path) -> Result<usize, SearchError> {
        let added = self.search.index_conversation(&self.writer, path);
        self.search.commit(&mut self.writer)?;
        Ok(added)
    }

    /// Forgets how far each conversation was indexed, as a restart does:
    /// the next commit of each is indexed whole.
    pub(crate) fn forget_progress(&self) {
        self.search.forget_progress();
    }

    pub(crate) fn search(&self) -> &SearchIndex {
        &self.search
    }
}

/// Segments of fewer turns than this make one merge level; bigger ones
/// are merged only with segments of about their size. (tantivy's default
/// puts every segment under 10,000 documents in one level, so a turn's
/// one-document segment was merged with an imported conversation's and all
/// of it was read again: 70 MB of positions for two 100 MB imports.)
const SMALL_SEGMENT_TURNS: u32 = 64;

fn writer_of(live: &health::Live) -> tantivy::Result<IndexWriter<TantivyDocument>> {
    let writer = live.index.writer_with_num_threads(1, WRITER_BYTES)?;
    let mut merges = tantivy::indexer::LogMergePolicy::default();
    merges.set_min_layer_size(SMALL_SEGMENT_TURNS);
    writer.set_merge_policy(Box::new(merges));
    Ok(writer)
}

/// The parts of a session document the indexer needs.
#[derive(Deserialize)]
struct DocHead {
    id: String,
    folder: String,
    agent: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    updated_at: i64,
    #[serde(default)]
    journal_bytes: u64,
    #[serde(default)]
    rollbacks: u64,
    #[serde(default)]
    base: Option<serde_json::Value>,
}

impl DocHead {
    fn read(path: &Path) -> Option<Self> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn stamp(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.journal_bytes, self.rollbacks, self.updated_at, self.title
        )
    }
}

impl SearchIndex {
    /// The index as it is now (a rebuild waits for readers to let go).
    fn live(&self) -> RwLockReadGuard<'_, health::Live> {
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reading the index failed with `e`: unless it is the query's fault,
    /// asks the indexer for a rebuild and says so.
    fn failed(&self, e: SearchError) -> SearchError {
        if matches!(e, SearchError::Query(_)) {
            return e;
        }
        if !self.rebuild_asked.swap(true, Ordering::SeqCst) {
            let _ = self.jobs.send(Job::Rebuild(e.to_string()));
        }
        SearchError::Rebuilding
    }

    /// What the indexer remembers of each conversation.
    fn memory(&self) -> MutexGuard<'_, indexing::Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets how far conversations were indexed: each is indexed whole
    /// next time (after a failure, the index may not hold what was added).
    fn forget_progress(&self) {
        self.memory().clear();
    }

    fn run(&self, writer: IndexWriter<TantivyDocument>, rx: Receiver<Job>, sessions: &Path) {
        let mut writer = Some(writer);
        self.catch_up(&mut writer, sessions);
        let mut purge = Purge::default();
        let mut last_commit: Option<Instant> = None;
        loop {
            let first = match purge.next_step() {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(after) => rx.recv_timeout(after),
            };
            let first = match first {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    // Nothing to index meanwhile: the purge goes on.
                    if let Some(why) = self.purge_step(&mut writer, &mut purge) {
                        self.rebuild(&mut writer, &why, sessions);
                        purge = Purge::default();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let due = last_commit.map(|at| at + COMMIT_GAP);
            let mut batch: HashSet<PathBuf> = HashSet::new();
            let mut forgotten = Vec::new();
            let mut rebuild = None;
            for job in gather(&rx, first, due) {
                match job {
                    Job::Touched(path) => {
                        batch.insert(path);
                    }
                    Job::Forget(path, done) => {
                        batch.insert(path);
                        forgotten.push(done);
                    }
                    Job::Rebuild(why) => rebuild = Some(why),
                }
            }
            self.indexing.store(true, Ordering::SeqCst);
            let started = Instant::now();
            if let Some(why) = rebuild {
                // Re-indexes every conversation: the batch included.
                self.rebuild(&mut writer, &why, sessions);
                purge = Purge::default();
            } else if let Some(w) = writer.as_mut() {
                let indexed = health::guarded(|| {
                    for path in &batch {
                        self.index_conversation(w, path);
                    }
                    self.commit(w)
                });
                match indexed {
                    Ok(()) => {
                        if !forgotten.is_empty() {
                            purge.ask();
                        }
                    }
                    Err(e @ SearchError::Damaged(_)) => {
                        let why = e.to_string();
                        self.rebuild(&mut writer, &why, sessions);
                        purge = Purge::default();
                    }
                    Err(e) => {
                        self.forget_progress();
                        tracing::warn!("search index commit failed: {e}");
                    }
                }
            }
            for done in forgotten {
                let _ = done.send(());
            }
            last_commit = Some(Instant::now());
            self.indexing.store(false, Ordering::SeqCst);
            // A long batch read big transcripts: hand the heap back.
            if started.elapsed() > std::time::Duration::from_millis(100) {
                crate::memory::trim_now();
            }
        }
    }

    /// Moves the purge of deleted text on by one step (start the merge,
    /// or see whether it ended); returns why the index must be rebuilt
    /// when it turned out damaged.
    fn purge_step(
        &self,
        writer: &mut Option<IndexWriter<TantivyDocument>>,
        purge: &mut Purge,
    ) -> Option<String> {
        let w = writer.as_mut()?;
        let stepped = health::guarded(|| {
            if let Some(merging) = purge.merging.as_mut() {
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                let std::task::Poll::Ready(merged) = merging.as_mut().poll(&mut cx) else {
                    return Ok(());
                };
                purge.merging = None;
                merged?;
                self.purged(w)?;
                purge.failures = 0;
            } else if std::mem::take(&mut purge.due) {
                let ids = self.segments_with_deletes()?;
                if ids.is_empty() {
                    self.purged(w)?;
                    purge.failures = 0;
                } else {
                    purge.merging = Some(Box::pin(w.merge(&ids)));
                }
            }
            Ok(())
        });
        match stepped {
            Ok(()) => None,
            Err(e @ SearchError::Damaged(_)) => Some(e.to_string()),
            Err(e) => {
                // Most likely a segment was in one of tantivy's own merges.
                purge.failures += 1;
                if purge.failures < Purge::ATTEMPTS {
                    tracing::debug!("purging deleted search text failed, retrying: {e}");
                    purge.due = true;
                } else {
                    tracing::warn!("could not purge deleted text from the search index: {e}");
                    purge.failures = 0;
                }
                None
            }
        }
    }

    /// First thing on start: reconciles the index with the conversations,
    /// rebuilding it when reading it fails.
    fn catch_up(&self, writer: &mut Option<IndexWriter<TantivyDocument>>, sessions: &Path) {
        let started = Instant::now();
        let reconciled = match writer.as_mut() {
            Some(w) => health::guarded(|| self.reconcile(w, sessions)),
            None => return,
        };
        match reconciled {
            Ok(n) => tracing::info!(
                reindexed = n,
                secs = started.elapsed().as_secs_f64(),
                "search index up to date"
            ),
            Err(e @ (SearchError::Damaged(_) | SearchError::Index(_))) => {
                let why = e.to_string();
                self.rebuild(writer, &why, sessions);
            }
            Err(e) => {
                self.forget_progress();
                tracing::warn!("search index reconcile failed: {e}");
            }
        }
        self.indexing.store(false, Ordering::SeqCst);
    }

    /// Replaces the index with an empty one and indexes every conversation
    /// again; `why` goes to the log and `daemon status`.
    fn rebuild(
        &self,
        writer: &mut Option<IndexWriter<TantivyDocument>>,
        why: &str,
        sessions: &Path,
    ) {
        self.note.record(why);
        self.forget_progress();
        // The writer holds the directory's lock and files: let go first.
        drop(writer.take());
        let (schema, _) = schema();
        let made = {
            let mut live = self
                .live
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            health::create(&self.dir, &schema).and_then(|fresh| {
                let w = health::guarded(|| Ok(writer_of(&fresh)?))?;
                *live = fresh;
                Ok(w)
            })
        };
        self.rebuild_asked.store(false, Ordering::SeqCst);
        match made {
            Ok(w) => *writer = Some(w),
            Err(e) => {
                tracing::warn!("cannot rebuild the search index: {e}");
                return;
            }
        }
        let started = Instant::now();
        let reconciled = match writer.as_mut() {
            Some(w) => health::guarded(|| self.reconcile(w, sessions)),
            None => return,
        };
        match reconciled {
            Ok(n) => tracing::info!(
                reindexed = n,
                secs = started.elapsed().as_secs_f64(),
                "search index rebuilt"
            ),
            Err(e) => {
                self.forget_progress();
                tracing::warn!("search index rebuild failed: {e}");
            }
        }
    }

    fn commit(&self, writer: &mut IndexWriter<TantivyDocument>) -> Result<(), SearchError> {
        writer.commit()?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        let live = self.live();
        live.reader.reload()?;
        let searcher = live.reader.searcher();
        let metas = searcher.search(
            &self.term_query(self.f.kind, "meta"),
            &tantivy::collector::Count,
        )?;
        self.sessions.store(metas as u64, Ordering::SeqCst);
        Ok(())
    }

    /// The segments holding deleted documents.
    fn segments_with_deletes(&self) -> Result<Vec<tantivy::index::SegmentId>, SearchError> {
        Ok(self
            .live()
            .index
            .searchable_segment_metas()?
            .into_iter()
            .filter(|m| m.has_deletes())
            .map(|m| m.id())
            .collect())
    }

    /// After the segments holding deleted documents were rewritten without
    /// them: removes the old files (deleted text would otherwise stay on
    /// disk until a merge happened to pick its segment) and lets the
    /// reader go of them.
    fn purged(&self, writer: &mut IndexWriter<TantivyDocument>) -> Result<(), SearchError> {
        writer.garbage_collect_files().wait()?;
        self.live().reader.reload()?;
        Ok(())
    }

    fn term_query(&self, field: Field, text: &str) -> TermQuery {
        TermQuery::new(Term::from_field_text(field, text), IndexRecordOption::Basic)
    }

    /// Brings the index in line with every interactive conversation on disk.
    fn reconcile(
        &self,
        writer: &mut IndexWriter<TantivyDocument>,
        sessions: &Path,
    ) -> Result<usize, SearchError> {
        let searcher = self.live().reader.searcher();
        let metas = searcher.search(&self.term_query(self.f.kind, "meta"), &DocSetCollector)?;
        let mut indexed: HashMap<String, String> = HashMap::new();
        for addr in metas {
            let doc: TantivyDocument = searcher.doc(addr)?;
            let get = |f| {
                doc.get_first(f)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            indexed.insert(get(self.f.key), get(self.f.stamp));
        }
        let mut on_disk = HashSet::new();
        let mut changed = 0usize;
        for path in conversation_docs(sessions) {
            let key = path.to_string_lossy().into_owned();
            let Some(head) = DocHead::read(&path) else {
                continue;
            };
            if head.base.is_some() {
                continue;
            }
            on_disk.insert(key.clone());
            if indexed.get(&key) == Some(&head.stamp()) {
                continue;
            }
            self.index_conversation(writer, &path);
            changed += 1;
            if changed.is_multiple_of(1000) {
                self.commit(writer)?;
            }
        }
        for key in indexed.keys().filter(|k| !on_disk.contains(*k)) {
            writer.delete_term(Term::from_field_text(self.f.key, key));
            self.memory().remove(key);
            changed += 1;
        }
        self.commit(writer)?;
        Ok(changed)
    }

    /// Whether the index is still catching up, and how many conversations it holds.
    pub fn progress(&self) -> (bool, u64) {
        (
            self.indexing.load(Ordering::SeqCst),
            self.sessions.load(Ordering::SeqCst),
        )
    }
}

/// Rewriting the segments that hold deleted documents without them, after a
/// clear, on the indexer thread: started once no job waits, the merge runs
/// on tantivy's merge thread while the indexer goes on indexing.
#[derive(Default)]
struct Purge {
    /// Asked for and not started yet.
    due: bool,
    /// The merge under way.
    merging: Option<std::pin::Pin<Box<tantivy::FutureResult<Option<tantivy::SegmentMeta>>>>>,
    /// Attempts that failed in a row.
    failures: u32,
}

impl Purge {
    /// Attempts before giving up (a segment may be in another merge).
    const ATTEMPTS: u32 = 20;

    fn ask(&mut self) {
        self.due = true;
    }

    /// How long the indexer may wait for a job before the purge's next
    /// step; None: no purge to move on.
    fn next_step(&self) -> Option<Duration> {
        if self.merging.is_some() {
            Some(Duration::from_millis(20))
        } else if self.due {
            Some(Duration::from_millis(if self.failures == 0 {
                0
            } else {
                500
            }))
        } else {
            None
        }
    }
}

/// `<sessions>/<folder-key>/<agent>/<id>.json` of every conversation (one-shot
/// states live deeper and are left out).
fn conversation_docs(sessions: &Path) -> Vec<PathBuf> {
    crate::store::tree::docs(sessions)
}
