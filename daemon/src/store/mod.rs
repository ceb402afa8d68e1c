//! The conversation store: one actor task per (folder, agent) group owns its
//! files and serializes every write; handlers reach it through a [`GroupHandle`].

mod carry;
mod commits;
pub mod elsewhere;
pub mod fork;
mod group;
pub mod journal;

pub use commits::{Changed, Commits};
pub mod conversation;
pub mod oneshot;
pub mod pulled;
pub mod tree;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use group::{
    AccountingChange, Change, Enough, Expect, GroupHandle, NewCheckpoint, OpenTarget, Opened,
    Recent, RollbackTarget, SettingsChange, ShellChange, TranscriptChange, TurnChange, TurnLease,
    Update,
};

use agentx_shared::folder::{check_component, folder_key};

use crate::environment::Environment;

pub use agentx_shared::conversation::is_conversation_id;

/// Why a store request failed; mapped to a gRPC status at the edge.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// The state changed since the caller looked (another client went on).
    #[error("{0}")]
    Moved(String),
    /// A file operation failed; the OS error is kept as the source. Ours:
    /// report it; the caller may try again.
    #[error("storage error: {0}")]
    Disk(#[source] std::sync::Arc<std::io::Error>),
    /// The file at `path` does not hold what its document or checkpoint
    /// says (`message`): it is damaged; report it, nothing was changed.
    #[error("storage error: {message}")]
    Damaged { path: PathBuf, message: String },
    /// A stored transcript did not read back (the source says where and
    /// why): report it; retrying does not help.
    #[error("storage error: {0}")]
    Unreadable(#[source] std::sync::Arc<conversation::LoadError>),
    /// A record could not be written as JSON (a bug, not the disk): report
    /// it; nothing was written.
    #[error("storage error: {0}")]
    Encode(#[source] std::sync::Arc<serde_json::Error>),
    /// agentd's own bookkeeping failed (`0` says how): report it; a
    /// restart of agentd clears it.
    #[error("storage error: {0}")]
    Internal(&'static str),
    /// agentd hit a bug handling the request (`0`: the panic's message):
    /// logged with the folder; the folder's state was reloaded from disk.
    #[error(
        "agentd hit an internal error handling this request ({0}); it is logged, the folder's \
         conversations were reloaded from disk, and nothing else was affected: try again"
    )]
    Panicked(String),
    #[error("agentd is shutting down")]
    Closed,
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        Self::Disk(std::sync::Arc::new(e))
    }
}

impl StoreError {
    /// Encoding a record as JSON failed.
    pub fn encode(e: serde_json::Error) -> Self {
        Self::Encode(std::sync::Arc::new(e))
    }

    /// Reading a stored transcript back failed.
    pub fn unreadable(e: conversation::LoadError) -> Self {
        Self::Unreadable(std::sync::Arc::new(e))
    }
}

/// Idle group actors kept loaded (most recently used first) unless
/// `AGENTX_MAX_IDLE_GROUPS` says otherwise.
const DEFAULT_IDLE_GROUPS: usize = 64;

/// How many idle group actors to keep: `AGENTX_MAX_IDLE_GROUPS` in `env`,
/// else [`DEFAULT_IDLE_GROUPS`].
pub fn max_idle_groups(env: &Environment) -> usize {
    env.var("AGENTX_MAX_IDLE_GROUPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_IDLE_GROUPS)
}

/// Registry of group actors, one per `<folder-key>/<agent>` directory
/// (colliding real folders share it: one writer per file), created on
/// first use and released when idle.
///
/// The registry holds a weak mailbox for every actor, so a live actor is
/// always found again and never doubled (a successor started while its
/// predecessor finishes waits for the directory's lock), and strong ones only for the
/// most recently used `max_idle` directories. An actor ends when
/// its last handle goes (after the reply to its last request, or when its
/// turn's lease drops); it holds no file open meanwhile, and the next
/// request starts a new actor that loads the directory again.
pub struct Store {
    sessions_dir: PathBuf,
    /// Where groups announce their commits.
    commits: Commits,
    groups: Mutex<Registry>,
    max_idle: usize,
    /// One-shots running now (their state must not be pruned).
    active_oneshots: Mutex<HashSet<String>>,
}

type GroupKey = (String, String);

#[derive(Default)]
struct Registry {
    /// Each directory's actor, and the lock its actor holds while alive.
    live: HashMap<GroupKey, (group::WeakMailbox, Arc<tokio::sync::Mutex<()>>)>,
    /// Kept alive while idle, least recently used first.
    recent: VecDeque<(GroupKey, group::Mailbox)>,
}

impl Store {
    /// The store of `sessions_dir`, announcing its commits on `commits`,
    /// keeping `max_idle` idle groups loaded (see [`max_idle_groups`]).
    pub fn new(sessions_dir: PathBuf, commits: Commits, max_idle: usize) -> Arc<Self> {
        Arc::new(Self {
            sessions_dir,
            commits,
            groups: Mutex::new(Registry::default()),
            max_idle,
            active_oneshots: Mutex::new(HashSet::new()),
        })
    }

    /// `<sessions>/<folder-key>/<agent>`.
    pub fn group_dir(&self, folder: &str, agent: &str) -> PathBuf {
        self.sessions_dir
            .join(folder_key(std::path::Path::new(folder)))
            .join(agent)
    }

    /// The actor for `folder` (absolute path) and `agent`.
    pub fn group(&self, folder: &str, agent: &str) -> Result<GroupHandle, StoreError> {
        check_component("agent name", agent).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if !folder.starts_with('/') || folder.split('/').any(|c| c == "..") {
            return Err(StoreError::Invalid(format!(
                "folder {folder:?} must be an absolute path without '..'"
            )));
        }
        let key = (folder_key(std::path::Path::new(folder)), agent.to_owned());
        let mut registry = self
            .groups
            .lock()
            .map_err(|_| StoreError::Internal("store registry poisoned"))?;
        let tx = match registry.live.get(&key).and_then(|(weak, _)| weak.upgrade()) {
            Some(tx) => tx,
            None => {
                // The previous actor may still be finishing a request whose
                // caller went away: the new one waits for its lock.
                let lock = registry
                    .live
                    .get(&key)
                    .map(|(_, lock)| lock.clone())
                    .unwrap_or_default();
                let tx = group::spawn(
                    self.group_dir(folder, agent),
                    agent.to_owned(),
                    group::Keeps::Conversations(self.commits.clone()),
                    Some(lock.clone()),
                );
                registry.live.insert(key.clone(), (tx.downgrade(), lock));
                if registry.live.len() > 2 * self.max_idle.max(16) {
                    registry.live.retain(|_, (weak, lock)| {
                        weak.strong_count() > 0 || Arc::strong_count(lock) > 1
                    });
                }
                tracing::debug!(
                    actors = registry.live.len(),
                    loaded_conversations = conversation::open_conversations(),
                    "started a group actor"
                );
                tx
            }
        };
        registry.recent.retain(|(k, _)| *k != key);
        registry.recent.push_back((key, tx.clone()));
        while registry.recent.len() > self.max_idle {
            registry.recent.pop_front();
        }
        Ok(GroupHandle::new(tx, folder.to_owned()))
    }
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn only_ids_shaped_as_agentds_own_are_conversation_ids() {
        for _ in 0..100 {
            let id = group::new_id();
            assert!(is_conversation_id(&id), "{id}");
        }
        for bad in [
            "current",
            "shared",
            "",
            "-",
            "0000000000-000000",
            "0000000000g-000000",
            "0000000000A-000000",
            "00000000000-0000000",
            "00000000000-00000",
            "../00000000000-000000",
            "00000000000-000000.json",
        ] {
            assert!(!is_conversation_id(bad), "{bad}");
        }
        assert!(is_conversation_id("19ad6c2b1f0-0a3b4c"));
    }
}

#[cfg(test)]
mod error_tests {
    use super::conversation::{LoadError, parse_journal};
    use super::*;

    #[test]
    fn an_unreadable_transcript_keeps_its_cause_with_the_path_and_its_message() {
        let path = std::path::Path::new("/profile/sessions/x.jsonl");
        let Err(e) = parse_journal(&b"not json\n"[..], 9, path) else {
            panic!("a line that is not JSON read back");
        };
        let text = e.to_string();
        let e = StoreError::unreadable(e);
        assert_eq!(e.to_string(), format!("storage error: {text}"));
        // StoreError is Clone, so its causes are shared: an Arc.
        let cause = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::sync::Arc<LoadError>>())
            .map(|c| &**c);
        assert!(
            matches!(cause, Some(LoadError::Corrupt { path: p, .. }) if p == path),
            "{cause:?}"
        );
    }
}

#[cfg(test)]
mod supervision_tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_fails_only_its_request_and_the_folder_reloads_from_disk() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(
            root.path().join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let a = store.group("/w/panics-a", "default").unwrap();
        let b = store.group("/w/panics-b", "default").unwrap();
        let made = a.open(OpenTarget::New).await.unwrap().doc.id;
        b.open(OpenTarget::New).await.unwrap();

        group::seams::panic_next_request_in(Some("/w/panics-a"));
        let hit = store.group("/w/panics-a", "default").unwrap().list().await;
        match hit {
            Err(StoreError::Panicked(cause)) => assert!(cause.contains("test seam"), "{cause}"),
            other => panic!("expected INTERNAL naming the panic, got {other:?}"),
        }
        // The other folder never noticed.
        assert_eq!(b.list().await.unwrap().len(), 1);
        // The hit folder's actor lives on, reloaded: same handle and a new one.
        let listed = a.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, made);
        let again = store.group("/w/panics-a", "default").unwrap();
        let opened = again.open(OpenTarget::Latest).await.unwrap();
        assert_eq!(opened.doc.id, made);
        // What status reads was dropped with it and is read again.
        assert_eq!(a.peek(None).await.unwrap().map(|d| d.id), Some(made));
    }
}

#[cfg(test)]
mod peek_tests {
    use std::time::Duration;

    use agentx_shared::conversation::Item;

    use super::group::seams::{Hold, hold_next_request_in};
    use super::*;

    fn said(text: &str) -> Change {
        Change {
            transcript: TranscriptChange {
                append: vec![Item::User { text: text.into() }],
                ..TranscriptChange::default()
            },
            ..Change::default()
        }
    }

    /// A folder with one conversation in which one thing was said, read
    /// once through `peek` (so the view holds it from then on).
    async fn said_once(root: &std::path::Path, folder: &str) -> (Arc<Store>, GroupHandle, String) {
        let store = Store::new(
            root.join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let group = store.group(folder, "default").unwrap();
        let id = group.open(OpenTarget::New).await.unwrap().doc.id;
        group.commit(&id, said("one")).await.unwrap();
        let seen = group.peek(None).await.unwrap().unwrap();
        assert_eq!((seen.id.as_str(), seen.journal_items), (id.as_str(), 1));
        (store, group, id)
    }

    /// A second commit, started in the background; returns once the
    /// actor holds it where `held` says.
    async fn held_commit(
        group: &GroupHandle,
        id: &str,
        held: &group::seams::HeldRequest,
    ) -> tokio::task::JoinHandle<Result<conversation::ConversationDoc, StoreError>> {
        let committing = tokio::spawn({
            let (group, id) = (group.clone(), id.to_owned());
            async move { group.commit(&id, said("two")).await }
        });
        tokio::task::block_in_place(|| held.reached.recv_timeout(Duration::from_secs(30)))
            .expect("the actor never reached the held request");
        committing
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_reads_never_wait_behind_a_commit_in_progress() {
        let root = tempfile::tempdir().unwrap();
        let (_store, group, id) = said_once(root.path(), "/w/peek-held").await;
        let held = hold_next_request_in("/w/peek-held", Hold::Handling);
        let committing = held_commit(&group, &id, &held).await;
        // The actor is stuck in the commit (as in a slow fsync): the
        // conversation and the folder's current one are read all the same,
        // as the last finished request left them.
        for session in [None, Some(id.clone())] {
            let seen = tokio::time::timeout(Duration::from_secs(10), group.peek(session))
                .await
                .expect("peek waited behind the commit in progress")
                .unwrap()
                .unwrap();
            assert_eq!(seen.journal_items, 1);
        }
        assert!(!committing.is_finished());
        held.release.send(()).unwrap();
        assert_eq!(committing.await.unwrap().unwrap().journal_items, 2);
        assert_eq!(group.peek(None).await.unwrap().unwrap().journal_items, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_returns_only_once_status_reads_it() {
        let root = tempfile::tempdir().unwrap();
        let (_store, group, id) = said_once(root.path(), "/w/peek-published").await;
        // The actor has made the change and sent its reply, and is held
        // before publishing it: the change must not return yet.
        let held = hold_next_request_in("/w/peek-published", Hold::Publishing);
        let committing = held_commit(&group, &id, &held).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !committing.is_finished(),
            "the commit returned before status could read it"
        );
        assert_eq!(group.peek(None).await.unwrap().unwrap().journal_items, 1);
        held.release.send(()).unwrap();
        let committed = committing.await.unwrap().unwrap();
        let seen = group.peek(None).await.unwrap().unwrap();
        assert_eq!(
            (committed.journal_items, seen.journal_items, seen.updated_at),
            (2, 2, committed.updated_at)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_reads_only_its_folders_conversations_and_follows_new_and_clear() {
        let root = tempfile::tempdir().unwrap();
        let (store, group, id) = said_once(root.path(), "/w/peek-own").await;
        // Another folder's conversation is not found through this one.
        let other = store.group("/w/peek-other", "default").unwrap();
        assert!(matches!(
            other.peek(Some(id.clone())).await,
            Err(StoreError::NotFound(_))
        ));
        // A new conversation becomes the current one at once.
        let fresh = group.open(OpenTarget::New).await.unwrap().doc.id;
        assert_eq!(
            group.peek(None).await.unwrap().map(|d| d.id),
            Some(fresh.clone())
        );
        // A cleared one is gone.
        group.open(OpenTarget::Id(id.clone())).await.unwrap();
        assert_eq!(
            group.peek(None).await.unwrap().map(|d| d.id),
            Some(id.clone())
        );
        let replaced = group.clear(Some(id.clone())).await.unwrap();
        assert!(matches!(
            group.peek(Some(id.clone())).await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(
            group.peek(None).await.unwrap().map(|d| d.id),
            Some(replaced.id)
        );
    }
}

#[cfg(test)]
mod leftovers_tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loading_a_folder_removes_what_killed_writes_left_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(
            root.path().join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let dir = store.group_dir("/w/a", "default");
        std::fs::create_dir_all(&dir).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let write = |name: &str, age: Option<std::time::SystemTime>| {
            let path = dir.join(name);
            std::fs::write(&path, b"{}\n").unwrap();
            if let Some(t) = age {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
            }
            path
        };
        let orphan_id = group::new_id();
        // Another id (ids made in one millisecond differ in their tail).
        let fresh_id = std::iter::repeat_with(group::new_id)
            .find(|id| *id != orphan_id)
            .unwrap();
        let stale_temp = write(
            &format!(".current.json.tmp-{}-7", std::process::id() + 1),
            None,
        );
        let own_temp = write(&format!(".current.json.tmp-{}-7", std::process::id()), None);
        let orphan = write(&format!("{orphan_id}.jsonl"), Some(old));
        let fresh = write(&format!("{fresh_id}.jsonl"), None);
        let user_file = write("notes.jsonl", Some(old));
        let quarantined = write(&format!("{orphan_id}.jsonl.corrupt-1"), Some(old));

        let group = store.group("/w/a", "default").unwrap();
        let made = group.open(OpenTarget::New).await.unwrap().doc.id;
        assert!(!stale_temp.exists(), "a dead agentd's temp file stayed");
        assert!(
            !orphan.exists(),
            "an old journal without a conversation stayed"
        );
        for kept in [&own_temp, &fresh, &user_file, &quarantined] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        assert!(dir.join(format!("{made}.json")).exists());
    }
}

#[cfg(test)]
mod failed_write_tests {
    use agentx_shared::conversation::Item;

    use super::conversation::{Conversation, seams};
    use super::*;

    pub(super) fn said(text: &str) -> Change {
        Change {
            transcript: TranscriptChange {
                append: vec![
                    Item::User { text: text.into() },
                    Item::Assistant {
                        text: format!("re: {text}"),
                    },
                ],
                last_user: Some(text.into()),
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                completed: true,
                ..TurnChange::default()
            },
            checkpoint: Some(NewCheckpoint { note: None }),
            ..Change::default()
        }
    }

    /// Every kind of commit that cannot be saved leaves the conversation in
    /// memory exactly as its files have it, and the next one goes on from
    /// there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_that_cannot_be_saved_leaves_memory_as_the_disk_has_it() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(
            root.path().join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let folder = "/w/failed-writes";
        let group = store.group(folder, "default").unwrap();
        let id = group.open(OpenTarget::New).await.unwrap().doc.id;
        for text in ["one", "two"] {
            group.commit(&id, said(text)).await.unwrap();
        }
        let dir = store.group_dir(folder, "default");
        let on_disk = || Conversation::load(&dir.join(format!("{id}.json"))).unwrap();
        let memory = || async {
            let doc = group.get(Some(id.clone())).await.unwrap().unwrap();
            (doc, group.transcript(&id).await.unwrap())
        };
        let (before, items) = memory().await;
        assert_eq!(before, on_disk().doc);
        assert_eq!(items.len(), 4);

        seams::fail_saves_in(&dir, true);
        // A turn, a rollback, settings, a compaction-like commit: each fails.
        assert!(group.commit(&id, said("three")).await.is_err());
        let rolled = group
            .rollback(
                Some(id.clone()),
                RollbackTarget::Index(2),
                Expect::default(),
            )
            .await;
        assert!(rolled.is_err(), "{rolled:?}");
        assert_eq!(memory().await, (before.clone(), items.clone()));
        let renamed = Change::settings(SettingsChange {
            title: Some("renamed".into()),
            ..SettingsChange::default()
        });
        assert!(group.commit(&id, renamed).await.is_err());
        assert_eq!(memory().await, (before.clone(), items.clone()));
        assert_eq!(on_disk().doc, before);

        // Space again: the rollback, its undo and the next turn go on from
        // what is on disk.
        seams::fail_saves_in(&dir, false);
        let doc = group
            .rollback(
                Some(id.clone()),
                RollbackTarget::Index(2),
                Expect::default(),
            )
            .await
            .unwrap();
        assert_eq!(doc.turns, 1);
        seams::fail_saves_in(&dir, true);
        let undone = group
            .rollback(Some(id.clone()), RollbackTarget::Undo, Expect::default())
            .await;
        assert!(undone.is_err(), "{undone:?}");
        assert_eq!(memory().await.0, on_disk().doc);
        assert_eq!(memory().await.1.len(), 2);
        seams::fail_saves_in(&dir, false);
        group
            .rollback(Some(id.clone()), RollbackTarget::Undo, Expect::default())
            .await
            .unwrap();
        let doc = group.commit(&id, said("three")).await.unwrap();
        assert_eq!(doc.turns, 3);
        let (doc, items) = memory().await;
        assert_eq!(doc, on_disk().doc);
        let users: Vec<&Item> = items
            .iter()
            .filter(|i| matches!(i, Item::User { .. }))
            .collect();
        assert_eq!(users.len(), 3, "{items:?}");
    }
}

#[cfg(test)]
mod oneshot_sync_tests {
    use super::failed_write_tests::said;
    use super::*;
    use crate::durable::seams::synced_under;

    /// A one-shot's state is written without syncs while it runs; a kept
    /// (failed or interrupted) one is synced whole when it ends, a
    /// successful one removed. Conversations are synced as they are written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_oneshots_state_reaches_the_disk_only_when_it_is_kept() {
        let root = tempfile::tempdir().unwrap();
        // Resolved: the seam records the paths the kernel names.
        let root = root.path().canonicalize().unwrap();
        let store = Store::new(
            root.join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let folder = "/w/oneshot-syncs";
        let ok = store
            .start_oneshot(folder, "default", 1, "one")
            .await
            .unwrap();
        let kept = store
            .start_oneshot(folder, "default", 2, "two")
            .await
            .unwrap();
        for o in [&ok, &kept] {
            o.group.commit(&o.id, said("hi")).await.unwrap();
        }
        let parent = kept.dir.parent().unwrap().to_path_buf();
        assert_eq!(synced_under(&parent), Vec::<std::path::PathBuf>::new());

        store.finish_oneshot(&ok, true).await;
        assert!(!ok.dir.exists());
        store.finish_oneshot(&kept, false).await;
        let synced = synced_under(&parent);
        for name in [format!("{}.json", kept.id), format!("{}.jsonl", kept.id)] {
            assert!(
                synced.contains(&kept.dir.join(&name)),
                "{name} not synced: {synced:?}"
            );
        }
        assert!(synced.contains(&kept.dir), "{synced:?}");
        assert!(synced.contains(&parent), "{synced:?}");
        assert!(synced.iter().all(|p| !p.starts_with(&ok.dir)), "{synced:?}");
        // What was kept reads back.
        let listed = store.list_oneshots(folder, "default").unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, kept.id);
        assert_eq!(listed[0].doc.as_ref().unwrap().journal_items, 2);

        // The folder's own conversations are synced at each commit.
        let group = store.group(folder, "default").unwrap();
        let id = group.open(OpenTarget::New).await.unwrap().doc.id;
        group.commit(&id, said("three")).await.unwrap();
        let dir = store.group_dir(folder, "default");
        let synced = synced_under(&dir);
        assert!(
            synced.contains(&dir.join(format!("{id}.json"))),
            "{synced:?}"
        );
        assert!(
            synced.contains(&dir.join(format!("{id}.jsonl"))),
            "{synced:?}"
        );
    }
}
