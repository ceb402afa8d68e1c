//! The background pusher's loop: marks what changed (the outbox scan at start, then the
//! store's notifications) and pushes it in passes with backoff, settling conflicts by a pull.
//! A conversation the server refuses waits on a backoff of its own and is
//! reported by id; it never holds up the others.

mod outbox;
mod send;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::lanes::{Lane, LaneClient};
use super::{Remote, RemoteError};
use outbox::{Push, RetryLater, read_push, scan};
pub(super) use outbox::{Pushed, current_hash, load_pushed, save_pushed};
use send::{Sent, send};

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The longest a refused conversation waits before it is tried again.
const REFUSED_MAX: Duration = Duration::from_secs(300);

/// A conversation whose push the server refused.
pub(super) struct Refused {
    pub(super) id: String,
    pub(super) error: String,
    backoff: Duration,
    retry_at: Instant,
}

pub(super) async fn run(
    remote: Arc<Remote>,
    mut rx: mpsc::UnboundedReceiver<crate::store::Changed>,
) {
    let scan_remote = Arc::clone(&remote);
    let scanned = tokio::task::spawn_blocking(move || {
        (scan(&scan_remote), super::clear::waiting(&scan_remote))
    });
    match scanned.await {
        Ok((dirty, deletions)) => {
            remote.with(|i| i.deletions.extend(deletions));
            for doc in dirty {
                remote.mark(doc);
            }
        }
        Err(e) => tracing::warn!("remote: the outbox scan failed: {e}"),
    }
    let forward = Arc::clone(&remote);
    tokio::spawn(async move {
        while let Some(changed) = rx.recv().await {
            forward.mark(changed.doc());
            forward.marked.send_replace(changed.seq);
        }
    });
    let mut backoff = BACKOFF_MIN;
    // `agentx sync` asked: refused conversations are tried again now.
    let mut forced = false;
    loop {
        let Some(start) = remote.with(|i| {
            i.started += 1;
            i.started
        }) else {
            return;
        };
        remote.with(|i| i.unreached = false);
        let result = watched(&remote, pass(&remote, forced)).await;
        let ok = result.is_ok();
        remote.with(|i| {
            i.attempted = true;
            match result {
                Ok(()) => {
                    i.reached = true;
                    i.unreached = false;
                    i.last_error = None;
                }
                Err(e) => {
                    if i.last_error.as_deref() != Some(&e.to_string()) {
                        tracing::warn!(pending = i.pending.len(), "remote push failed: {e}");
                    }
                    i.reached = false;
                    i.last_error = Some(e.to_string());
                }
            }
        });
        remote.passes.send_replace(start);
        if ok {
            backoff = BACKOFF_MIN;
            let retry = remote
                .with(|i| i.refused.values().map(|r| r.retry_at).min())
                .flatten();
            forced = tokio::select! {
                () = remote.wake.notified() => false,
                () = remote.now.notified() => true,
                () = sleep_until(retry) => false,
            };
        } else {
            forced = tokio::select! {
                () = tokio::time::sleep(backoff) => false,
                () = remote.now.notified() => true,
            };
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Runs `pass`; when it goes [`Waits::stall`](super::lanes::Waits) without
/// ending, a heartbeat on a connection of its own asks whether the server
/// is still there. A server that answers (a large push on a slow link) is
/// waited for; one that does not ends the pass: the push is dropped (its
/// connection closed), the remote counts as unreachable, and the pass is
/// tried again on the usual backoff. Without this a link that drops
/// packets (no reset) would hold the push, and `status`, forever.
async fn watched(
    remote: &Remote,
    pass: impl std::future::Future<Output = Result<(), RemoteError>>,
) -> Result<(), RemoteError> {
    tokio::pin!(pass);
    let every = remote.waits.stall;
    loop {
        tokio::select! {
            result = &mut pass => return result,
            () = tokio::time::sleep(every) => {
                if let Err(e) = heartbeat(remote, every).await {
                    remote.with(|i| i.unreached = true);
                    return Err(RemoteError::server(format!(
                        "the remote store stopped answering: a push made no progress for {} s and {e}",
                        every.as_secs_f32()
                    )));
                }
            }
        }
    }
}

/// A fresh connection and `SELECT 1` within `bound`.
async fn heartbeat(remote: &Remote, bound: Duration) -> Result<(), String> {
    let url = remote.url.as_ref().map_err(Clone::clone)?;
    let beat = async {
        let client = Remote::connect(url).await.map_err(|e| e.to_string())?;
        client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| RemoteError::db(e).redacted(url).to_string())
    };
    match tokio::time::timeout(bound, beat).await {
        Ok(result) => result.map_err(|e| format!("a heartbeat failed: {e}")),
        Err(_) => Err(format!(
            "a heartbeat got no answer within {} s",
            bound.as_secs_f32()
        )),
    }
}

/// Until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One pass over everything pending (refused conversations only once
/// their backoff ended, or when `forced`), on the push lane's connection.
async fn pass(remote: &Arc<Remote>, forced: bool) -> Result<(), RemoteError> {
    let url = remote
        .url
        .as_ref()
        .map_err(|e| RemoteError::Config(e.clone()))?;
    // Connecting migrates, and refuses a schema newer than ours.
    let mut client = remote.lane(Lane::Push).await.inspect_err(|e| {
        if e.unreached() {
            remote.with(|i| i.unreached = true);
        }
    })?;
    if client.reused()
        && let Err(e) = super::schema::check(&client).await
    {
        // Migrated by a newer agentd while connected: push nothing more
        // (connecting again checks again), and listing, search and pull
        // connect again too and learn it there.
        client.discard();
        return Err(match e {
            e @ RemoteError::Server { .. } => e.redacted(url),
            other => {
                remote.lanes.clear();
                other
            }
        });
    }
    let result = pass_on(remote, &mut client, forced).await;
    // Every statement of the pass was answered: the connection is idle and
    // kept for the next pass (unless it closed).
    client.done();
    result
}

/// [`pass`] once it holds a connection.
async fn pass_on(
    remote: &Arc<Remote>,
    client: &mut LaneClient,
    forced: bool,
) -> Result<(), RemoteError> {
    super::clear::flush(remote, client).await?;
    // A conflict settled in the first round leaves new work (the fork, the
    // rest of ours) for a second one.
    for _round in 0..2 {
        let todo: Vec<PathBuf> = remote
            .with(|i| i.pending.iter().cloned().collect())
            .unwrap_or_default();
        if !push_all(remote, client, todo, forced).await? {
            break;
        }
    }
    Ok(())
}

/// Pushes each of `todo`; `true` when a conflict was settled on the way.
async fn push_all(
    remote: &Arc<Remote>,
    client: &mut LaneClient,
    todo: Vec<PathBuf>,
    forced: bool,
) -> Result<bool, RemoteError> {
    let url = remote
        .url
        .as_ref()
        .map_err(|e| RemoteError::Config(e.clone()))?;
    let mut settled = false;
    for doc_path in todo {
        let waiting = remote.with(|i| {
            i.refused
                .get(&doc_path)
                .is_some_and(|r| r.retry_at > Instant::now())
        });
        if waiting == Some(true) && !forced {
            continue;
        }
        let _sync = remote.sync.lock().await;
        let Some(push) = read_pending(remote, &doc_path).await? else {
            continue;
        };
        match send(client.exclusive()?, &remote.machine, &push).await {
            Ok(Sent::Pushed) => {}
            Ok(Sent::Conflict) => {
                // Another machine changed it since: bring theirs in (a
                // fork of ours when both went on), then push again.
                tracing::info!(id = %push.id, "remote: changed elsewhere since the last push");
                match super::pull::reconcile_for_pusher(remote, &doc_path).await {
                    Ok(()) => settled = true,
                    Err(e @ RemoteError::Server { .. }) => return Err(e),
                    // A local problem with this one must not hold up the
                    // others: it stays pending and is tried again later.
                    Err(e) => tracing::warn!(id = %push.id, "remote: cannot reconcile: {e}"),
                }
                continue;
            }
            Ok(Sent::Gone) => {
                let _ = std::fs::remove_file(remote.pushed_dir.join(format!("{}.json", push.id)));
                settled = true;
                continue;
            }
            Err(RemoteError::Refused(e)) if !client.is_closed() => {
                refuse(remote, &doc_path, &push.id, url.redact(&e));
                continue;
            }
            Err(e) => {
                return Err(RemoteError::server_because(url.redact(&e.to_string()), e));
            }
        }
        record_pushed(remote, &doc_path, &push).await;
    }
    Ok(settled)
}

/// What to push of the document at `doc_path`, read off the async threads:
/// `None` when there is nothing (it is no longer pending) or it must wait
/// (it stays pending).
async fn read_pending(remote: &Arc<Remote>, doc_path: &Path) -> Result<Option<Push>, RemoteError> {
    let reader = Arc::clone(remote);
    let path = doc_path.to_path_buf();
    let marks = remote.with(|i| i.marks);
    let read = tokio::task::spawn_blocking(move || read_push(&reader, &path))
        .await
        .map_err(RemoteError::local)?;
    Ok(match read {
        Ok(Some(push)) => Some(push),
        Ok(None) => {
            remote.with(|i| {
                // Nothing to push as read (a new conversation whose first
                // turn has not finished, say); a commit marked meanwhile
                // keeps it pending, or its turn would never be pushed.
                if marks == Some(i.marks) {
                    i.pending.remove(doc_path);
                }
                i.refused.remove(doc_path);
            });
            None
        }
        Err(RetryLater) => None,
    })
}

/// The server refused the push of `id` (its document at `doc_path`): it
/// stays pending and waits on its own backoff, reported by id.
fn refuse(remote: &Remote, doc_path: &Path, id: &str, error: String) {
    remote.with(|i| {
        let backoff = i
            .refused
            .get(doc_path)
            .map_or(BACKOFF_MIN, |r| (r.backoff * 2).min(REFUSED_MAX));
        if i.refused.get(doc_path).is_none_or(|r| r.error != error) {
            tracing::warn!(%id, "remote: the server refused this conversation: {error}");
        }
        i.refused.insert(
            doc_path.to_path_buf(),
            Refused {
                id: id.to_owned(),
                error,
                backoff,
                retry_at: Instant::now() + backoff,
            },
        );
    });
}

/// Records a push that went through: what was pushed (for the next one to
/// start from), the document no longer pending, the counters.
async fn record_pushed(remote: &Remote, doc_path: &Path, push: &Push) {
    let records = push.records.len() as u64;
    let state = Pushed {
        hash: push.hash.clone(),
        items: push.end.items,
        bytes: push.end.bytes,
        rollbacks: push.doc.rollbacks,
        head: push.head.clone(),
    };
    let state_path = remote.pushed_dir.join(format!("{}.json", push.id));
    let saved = tokio::task::spawn_blocking(move || save_pushed(&state_path, &state)).await;
    if let Ok(Err(e)) | Err(e) = saved.map_err(std::io::Error::other) {
        // Pushing again later is harmless (records are idempotent).
        tracing::warn!("remote: cannot record the push of {}: {e}", push.id);
    }
    // Hashed off the runtime and outside the lock status takes; a mark that
    // comes meanwhile keeps the document pending (pushing again is harmless).
    let marks = remote.with(|i| i.marks);
    let path = doc_path.to_path_buf();
    let now = tokio::task::spawn_blocking(move || current_hash(&path))
        .await
        .ok()
        .flatten();
    remote.with(|i| {
        // A change committed meanwhile marked it again: it stays pending
        // only if the document differs from what was just pushed.
        if now.as_deref() == Some(push.hash.as_str()) && marks == Some(i.marks) {
            i.pending.remove(doc_path);
        }
        i.refused.remove(doc_path);
        i.pushed_conversations += 1;
        i.pushed_records += records;
    });
    tracing::debug!(id = %push.id, records, "pushed to the remote");
}
