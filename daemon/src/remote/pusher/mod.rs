//! The background pusher's loop: marks what changed (the outbox scan at start, then the
//! store's notifications) and pushes it in passes with backoff, settling conflicts by a pull.

mod outbox;
mod send;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::{Remote, RemoteError};
use outbox::{Push, RetryLater, read_push, scan};
pub(super) use outbox::{Pushed, current_hash, load_pushed, save_pushed};
use send::{Sent, send};

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub(super) async fn run(remote: Arc<Remote>, mut rx: mpsc::UnboundedReceiver<PathBuf>) {
    let scan_remote = Arc::clone(&remote);
    match tokio::task::spawn_blocking(move || scan(&scan_remote)).await {
        Ok(dirty) => {
            for doc in dirty {
                remote.mark(doc);
            }
        }
        Err(e) => tracing::warn!("remote: the outbox scan failed: {e}"),
    }
    let forward = Arc::clone(&remote);
    tokio::spawn(async move {
        while let Some(doc) = rx.recv().await {
            forward.mark(doc);
        }
    });
    let mut client: Option<Client> = None;
    let mut backoff = BACKOFF_MIN;
    loop {
        let Some(start) = remote.with(|i| {
            i.started += 1;
            i.started
        }) else {
            return;
        };
        let result = pass(&remote, &mut client).await;
        let ok = result.is_ok();
        remote.with(|i| {
            i.attempted = true;
            match result {
                Ok(()) => {
                    i.reached = true;
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
            tokio::select! {
                () = remote.wake.notified() => {}
                () = remote.now.notified() => {}
            }
        } else {
            if client.as_ref().is_some_and(Client::is_closed) {
                client = None;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = remote.now.notified() => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// One pass over everything pending.
async fn pass(remote: &Arc<Remote>, client: &mut Option<Client>) -> Result<(), RemoteError> {
    let url = remote
        .url
        .as_ref()
        .map_err(|e| RemoteError::Config(e.clone()))?;
    if client.as_ref().is_none_or(Client::is_closed) {
        *client = Some(Remote::connect(url).await?);
    }
    if let Some(c) = client.as_ref() {
        super::clear::flush(remote, c).await?;
    }
    // A conflict settled in the first round leaves new work (the fork, the
    // rest of ours) for a second one.
    for _round in 0..2 {
        let todo: Vec<PathBuf> = remote
            .with(|i| i.pending.iter().cloned().collect())
            .unwrap_or_default();
        if !push_all(remote, client, todo).await? {
            break;
        }
    }
    Ok(())
}

/// Pushes each of `todo`; `true` when a conflict was settled on the way.
async fn push_all(
    remote: &Arc<Remote>,
    client: &mut Option<Client>,
    todo: Vec<PathBuf>,
) -> Result<bool, RemoteError> {
    let url = remote
        .url
        .as_ref()
        .map_err(|e| RemoteError::Config(e.clone()))?;
    let mut settled = false;
    for doc_path in todo {
        let Some(c) = client.as_mut() else {
            return Ok(settled);
        };
        let _sync = super::pull::SYNC.lock().await;
        let Some(push) = read_pending(remote, &doc_path).await? else {
            continue;
        };
        match send(c, &remote.machine, &push).await {
            Ok(Sent::Pushed) => {}
            Ok(Sent::Conflict) => {
                // Another machine changed it since: bring theirs in (a
                // fork of ours when both went on), then push again.
                tracing::info!(id = %push.id, "remote: changed elsewhere since the last push");
                match super::pull::settle_for_pusher(remote, &doc_path).await {
                    Ok(()) => settled = true,
                    Err(e @ RemoteError::Server(_)) => return Err(e),
                    // A local problem with this one must not hold up the
                    // others: it stays pending and is tried again later.
                    Err(e) => tracing::warn!(id = %push.id, "remote: cannot settle: {e}"),
                }
                continue;
            }
            Ok(Sent::Gone) => {
                let _ = std::fs::remove_file(remote.pushed_dir.join(format!("{}.json", push.id)));
                settled = true;
                continue;
            }
            Err(e) => {
                if c.is_closed() {
                    *client = None;
                }
                return Err(RemoteError::Server(url.redact(&e.to_string())));
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
    let read = tokio::task::spawn_blocking(move || read_push(&reader, &path))
        .await
        .map_err(|e| RemoteError::Local(e.to_string()))?;
    Ok(match read {
        Ok(Some(push)) => Some(push),
        Ok(None) => {
            remote.with(|i| i.pending.remove(doc_path));
            None
        }
        Err(RetryLater) => None,
    })
}

/// Records a push that went through: what was pushed (for the next one to
/// start from), the document no longer pending, the counters.
async fn record_pushed(remote: &Remote, doc_path: &Path, push: &Push) {
    let records = push.records.len() as u64;
    let state = Pushed {
        hash: push.hash.clone(),
        items: push.doc.journal_items,
        bytes: push.doc.journal_bytes,
        rollbacks: push.doc.rollbacks,
    };
    let state_path = remote.pushed_dir.join(format!("{}.json", push.id));
    let saved = tokio::task::spawn_blocking(move || save_pushed(&state_path, &state)).await;
    if let Ok(Err(e)) | Err(e) = saved.map_err(std::io::Error::other) {
        // Pushing again later is harmless (records are idempotent).
        tracing::warn!("remote: cannot record the push of {}: {e}", push.id);
    }
    remote.with(|i| {
        // A change committed meanwhile marked it again: it stays pending
        // only if the document differs from what was just pushed.
        if current_hash(doc_path).as_deref() == Some(push.hash.as_str()) {
            i.pending.remove(doc_path);
        }
        i.pushed_conversations += 1;
        i.pushed_records += records;
    });
    tracing::debug!(id = %push.id, records, "pushed to the remote");
}
