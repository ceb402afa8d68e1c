//! Pulling from the remote store: a remote-only conversation brought into
//! this machine's store (same id), and, before each turn on a conversation
//! that is also remote, the records other machines added since. When both
//! machines went on from one point, this machine's line is kept as a fork
//! (new id, title marked) and the conversation takes the remote's line:
//! never interleaved, never lost.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::copy::{self, RemoteCopy};
use super::pusher::{Pushed, current_hash, load_pushed, save_pushed};
use super::rule::{Settle, decide};
use super::{Remote, RemoteError};
use crate::store::conversation::{ConversationDoc, ConversationPaths};
use crate::store::{GroupHandle, Store, StoreError, TurnLease};

/// How long a turn waits for the remote before going on locally.
pub const PULL_WAIT: Duration = Duration::from_millis(1500);
/// When a turn holds a conversation the pusher must settle: look again.
const BUSY_AGAIN: Duration = Duration::from_secs(1);
/// How long opening a remote-only conversation may wait for it.
const OPEN_WAIT: Duration = Duration::from_secs(15);

pub use super::forks::ForkNote;

/// Forks not shown by `agentx sync` yet, now marked shown.
pub fn unreported_forks(remote: &Remote) -> Vec<ForkNote> {
    remote.forks.unreported()
}

/// The user opened conversation `id` themselves: its fork is no longer
/// continued in its place.
pub fn opened(remote: &Remote, id: &str) {
    remote.forks.opened(id);
}

/// Whether this machine has pushed or pulled conversation `id`.
pub fn has_copy(remote: &Remote, id: &str) -> bool {
    remote.pushed_dir.join(format!("{id}.json")).exists()
}

/// The pull's own connection, (re)made when needed.
pub(super) async fn reader(remote: &Remote) -> Result<super::lanes::LaneClient, RemoteError> {
    remote.lane_unmarked(super::lanes::Lane::Pull).await
}

/// Records what is now known to be on the server for `doc`: the pusher
/// pushes from there. `hash`: the document as pushed ("" when its
/// metadata still has to go); `head`: the chain of the server's line.
/// Records what the server holds of `doc` (its push state), with the hash
/// of the document at `hash_of` (none: pushed again); file work off the
/// runtime's workers.
async fn remember(
    remote: &Remote,
    doc: &ConversationDoc,
    at: (u64, u64),
    head: &str,
    hash_of: Option<std::path::PathBuf>,
) {
    let path = remote.pushed_dir.join(format!("{}.json", doc.id));
    let (rollbacks, head) = (doc.rollbacks, head.to_owned());
    let saved = tokio::task::spawn_blocking(move || {
        let state = Pushed {
            hash: hash_of.and_then(|p| current_hash(&p)).unwrap_or_default(),
            items: at.0,
            bytes: at.1,
            rollbacks,
            head,
        };
        save_pushed(&path, &state)
    })
    .await
    .map_err(std::io::Error::other);
    if let Ok(Err(e)) | Err(e) = saved {
        tracing::warn!("remote: cannot record the state of {}: {e}", doc.id);
    }
}

/// `agentx resume ID` of a conversation this machine does not have: pulls
/// the remote's copy into `group` (folder `folder`) under the same id.
pub async fn open_remote(
    remote: &Remote,
    store: &Store,
    group: &GroupHandle,
    folder: &str,
    agent: &str,
    id: &str,
) -> Result<ConversationDoc, RemoteError> {
    if !crate::store::is_conversation_id(id) {
        return Err(RemoteError::NotFound(format!(
            "no conversation {id} here, and {id} is not a conversation id"
        )));
    }
    let project = super::project_key(Path::new(folder), &remote.machine);
    let read = async {
        let client = reader(remote).await?;
        copy::read_remote(&client, id, None).await
    };
    let copy = match tokio::time::timeout(OPEN_WAIT, read).await {
        Ok(copy) => copy?,
        Err(_) => {
            return Err(RemoteError::server(format!(
                "the remote store did not answer within {} s",
                OPEN_WAIT.as_secs()
            )));
        }
    };
    let copy = copy.ok_or_else(|| {
        RemoteError::NotFound(format!("no conversation {id} here or on the remote store"))
    })?;
    if copy.project != project || copy.agent != agent {
        return Err(RemoteError::WrongScope(format!(
            "conversation {id} belongs to {} (agent {}), not to this folder ({project}, agent {agent})",
            copy.project, copy.agent
        )));
    }
    let dir = store.group_dir(folder, agent);
    let pulled = copy::pulled(&[], 0, &copy)?;
    let mut doc = ConversationDoc::new(
        id.to_owned(),
        folder.to_owned(),
        agent.to_owned(),
        copy.created_at,
    );
    doc.forked_from = copy.forked_from.clone();
    doc.journal_items = pulled.items;
    doc.journal_bytes = pulled.lines.len() as u64;
    // A fresh document: its update time is its creation until the pull's.
    pulled.meta.apply_to(&mut doc);
    let local = |e: StoreError| RemoteError::local(e);
    let _sync = remote.sync.lock().await;
    // Opened twice at once: the first one pulled it already.
    if let Ok(Some(here)) = group.get(Some(id.to_owned())).await {
        return Ok(here);
    }
    // One id lives in one folder per profile: never a second local copy.
    // (A walk of every folder, and file writes: off the runtime's workers.)
    let (lookup, wanted, at) = (Arc::clone(&remote.store), id.to_owned(), dir.clone());
    let lines = pulled.lines;
    let held = tokio::task::spawn_blocking(move || {
        if let Some(held) = lookup.holder(&wanted) {
            return Ok(Some(held));
        }
        agentx_shared::profile::create_private_dir(&at)?;
        crate::durable::write_atomic(&ConversationPaths::new(&at, &wanted).journal, &lines)?;
        Ok::<_, std::io::Error>(None)
    })
    .await
    .map_err(RemoteError::local)?
    .map_err(RemoteError::local)?;
    if let Some(held) = held {
        return Err(RemoteError::WrongScope(format!(
            "conversation {id} is already kept in {} on this machine; resume it there",
            held.dir.display()
        )));
    }
    group.adopt(doc.clone()).await.map_err(local)?;
    remember(
        remote,
        &doc,
        (doc.journal_items, doc.journal_bytes),
        &copy.head,
        Some(ConversationPaths::new(&dir, id).doc),
    )
    .await;
    tracing::info!(id, records = doc.journal_items, from = %copy.machine, "pulled a conversation from the remote");
    Ok(doc)
}

/// Before a turn: brings in what other machines added to the leased
/// conversation (bounded wait). Returns the lease to run on, holding the
/// conversation as it now is (the model must see what was pulled), or
/// another one when this machine's line was kept as a fork; and what the
/// user should be told.
pub async fn before_turn(
    remote: &Remote,
    group: &GroupHandle,
    mut lease: TurnLease,
) -> (TurnLease, Vec<String>) {
    let mut notes = Vec::new();
    // A remote_url that cannot be used: nothing is pulled.
    if remote.url.is_err() || lease.doc.base.is_some() || !has_copy(remote, &lease.doc.id) {
        return (lease, notes);
    }
    // No other agentd changed it since the last pull (LISTEN/NOTIFY): no query.
    let ticket = remote.listener.begin_check(&lease.doc.id);
    if ticket.is_none() && !remote.forks.waiting(&lease.doc.id) {
        return (lease, notes);
    }
    let id = lease.doc.id.clone();
    let settled = tokio::time::timeout(PULL_WAIT, async {
        let _sync = remote.sync.lock().await;
        let client = reader(remote).await?;
        let fetched = fetch(remote, &client, &lease.doc).await?;
        Ok::<_, RemoteError>((fetched, _sync))
    })
    .await;
    let note = match settled {
        Err(_) => Some(format!(
            "the remote store was not reached within {} ms; this turn goes on with this machine's copy",
            PULL_WAIT.as_millis()
        )),
        Ok(Err(e)) => Some(format!(
            "the remote store was not reached ({e}); this turn goes on with this machine's copy"
        )),
        Ok(Ok((None, _sync))) => None,
        Ok(Ok((Some(copy), _sync))) => match reconcile(remote, group, &lease, copy).await {
            Ok(Some(now)) if now.id == lease.doc.id => {
                lease.doc = now;
                None
            }
            Ok(_) => None,
            Err(e) => Some(format!("could not bring in the remote's turns: {e}")),
        },
    };
    if note.is_none()
        && let Some(ticket) = ticket
    {
        ticket.pulled();
    }
    if let Some(note) = note {
        tracing::warn!(id = %id, "{note}");
        notes.push(note);
    }
    // A fork made here (by this pull, or by the pusher or a pull before
    // this turn): the turn says so, on whichever side it landed.
    let (lines, continue_in) = remote.forks.for_turn(&id);
    notes.extend(lines);
    let Some(fork) = continue_in else {
        return (lease, notes);
    };
    // The fork is new here: no turn holds it, so this does not wait.
    match group.begin_turn(Some(fork.clone())).await {
        Ok(forked) => (forked, notes),
        Err(e) => {
            tracing::warn!("remote: cannot continue fork {fork}: {e}");
            (lease, notes)
        }
    }
}

/// The remote copy of `doc` when its line on the server is not the one
/// this machine last pushed or pulled (`None`: nothing to bring in).
async fn fetch(
    remote: &Remote,
    client: &Client,
    doc: &ConversationDoc,
) -> Result<Option<RemoteCopy>, RemoteError> {
    let known = load_pushed(&remote.pushed_dir, &doc.id);
    let Some((records, head)) = copy::remote_line(client, &doc.id).await? else {
        return Ok(None);
    };
    let same = known.as_ref().is_some_and(|k| {
        k.items == records
            && match head.as_deref() {
                Some(head) if !head.is_empty() => k.head == head,
                // A row from before lines were hashed: counted.
                _ => true,
            }
    });
    if same {
        return Ok(None);
    }
    // Only what follows the line both last shared, when the local copy
    // still holds it unchanged and the server's line still starts with it.
    let base = known
        .as_ref()
        .filter(|k| k.rollbacks == doc.rollbacks && doc.journal_items >= k.items)
        .map(|k| (k.items, k.head.as_str()));
    copy::read_remote(client, &doc.id, base).await
}

/// Makes the leased conversation agree with `copy`: nothing to do, push
/// ours, take theirs, or keep ours as a fork and take theirs. Returns the
/// conversation as it now is when it took records from the server.
pub(super) async fn reconcile(
    remote: &Remote,
    group: &GroupHandle,
    lease: &TurnLease,
    mut copy: RemoteCopy,
) -> Result<Option<ConversationDoc>, RemoteError> {
    let local_err = |e: StoreError| RemoteError::local(e);
    let doc = group
        .get(Some(lease.doc.id.clone()))
        .await
        .map_err(local_err)?
        .ok_or_else(|| RemoteError::local(format!("conversation {} is gone", lease.doc.id)))?;
    let dir = remote.store.group_dir(&doc.folder, &doc.agent);
    let paths = ConversationPaths::new(&dir, &doc.id);
    let local = copy::read_local(&paths.journal, doc.journal_bytes).map_err(RemoteError::local)?;
    if copy.from > local.len() as u64 {
        // The local journal no longer holds the line the read started
        // after (a rollback meanwhile): compare all.
        let again = async {
            let client = reader(remote).await?;
            copy::read_remote(&client, &doc.id, None).await
        };
        copy = tokio::time::timeout(PULL_WAIT, again)
            .await
            .map_err(|_| RemoteError::server("the remote store stopped answering"))??
            .ok_or_else(|| RemoteError::server(format!("{} left the remote", doc.id)))?;
    }
    // Below `copy.from` the server's line is, by its chain, the one this
    // machine last shared with it.
    let shared = copy::shared_prefix(&local, &copy.lines, copy.from);
    let rule = decide(shared, doc.journal_items, copy.records);
    if rule == Settle::PushOurs {
        // Theirs is a prefix of ours (or the same): push ours from there.
        let bytes = shared
            .checked_sub(1)
            .and_then(|i| local.get(usize::try_from(i).ok()?))
            .map_or(0, |(_, end)| *end);
        remember(remote, &doc, (shared, bytes), &copy.head, None).await;
        remote.mark(paths.doc.clone());
        return Ok(None);
    }
    if rule == Settle::ForkOursTakeTheirs {
        // Both went on: ours is kept as a fork first.
        let title = format!("{} (fork on {})", doc.title, remote.machine)
            .trim_start()
            .to_owned();
        let turn = copy::turns_at(&doc, shared);
        let fork = crate::store::fork::keep_as_fork(group, &dir, &doc, turn, title.clone())
            .await
            .map_err(local_err)?;
        remote.mark(ConversationPaths::new(&dir, &fork.id).doc);
        group.repoint(&doc.id, &fork.id).await.map_err(local_err)?;
        let note = ForkNote {
            from: doc.id.clone(),
            to: fork.id.clone(),
            title,
            other: copy.machine.clone(),
            redirect: true,
            told: false,
            reported: false,
        };
        tracing::warn!("remote: {}", note.line());
        remote.forks.made(note);
    }
    let pulled = copy::pulled(&local, shared, &copy)?;
    let now = group.absorb(lease, pulled).await.map_err(local_err)?;
    remember(
        remote,
        &now,
        (now.journal_items, now.journal_bytes),
        &copy.head,
        Some(ConversationPaths::new(&dir, &now.id).doc),
    )
    .await;
    tracing::info!(id = %now.id, records = now.journal_items - shared, from = %copy.machine, "pulled records from the remote");
    Ok(Some(now))
}

/// The pusher found `doc_path`'s conversation changed on the server by
/// someone else: settle it now unless a turn holds it (that turn's pull
/// does it, or the next push once it ends). The caller holds the
/// remote's `sync` lock.
pub(super) async fn reconcile_for_pusher(
    remote: &Arc<Remote>,
    doc_path: &Path,
) -> Result<(), RemoteError> {
    let store = &remote.store;
    let doc: ConversationDoc = match std::fs::read(doc_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(doc) => doc,
        None => return Ok(()),
    };
    let group = store
        .group(&doc.folder, &doc.agent)
        .map_err(RemoteError::local)?;
    let Some(lease) = group
        .try_begin_turn(&doc.id)
        .await
        .map_err(RemoteError::local)?
    else {
        // A turn holds it (its own pull settles it first); look again
        // shortly in case that turn was just ending.
        let (remote, path) = (Arc::clone(remote), doc_path.to_path_buf());
        tokio::spawn(async move {
            tokio::time::sleep(BUSY_AGAIN).await;
            remote.mark(path);
        });
        return Ok(());
    };
    let client = reader(remote).await?;
    match copy::read_remote(&client, &doc.id, None).await? {
        Some(copy) => reconcile(remote, &group, &lease, copy).await.map(drop),
        None => Ok(()),
    }
}
