//! `/clear` of a conversation that is also remote deletes the server's copy
//! too: at once when the server answers, else from a durable tombstone
//! (`<profile>/remote/deleted/<id>`) the pusher flushes once it is back.

use std::path::PathBuf;
use std::time::Duration;

use tokio_postgres::Client;

use super::{Remote, RemoteError};

/// How long `/clear` waits for the server before leaving it to the pusher.
const CLEAR_WAIT: Duration = Duration::from_secs(2);

fn tombstones(remote: &Remote) -> PathBuf {
    remote.pushed_dir.with_file_name("deleted")
}

/// How a remote copy's deletion went.
pub enum Deleted {
    /// This machine never pushed or pulled it: nothing to delete.
    NoCopy,
    Done,
    /// The server was not reached: the pusher deletes it later.
    Later(String),
}

/// Deletes the remote copy of cleared conversation `id`. Until the server
/// confirms, the deletion is pending (status counts it, the pusher retries
/// it with backoff) — also when its tombstone cannot be written, for as long
/// as this agentd runs.
pub async fn delete(remote: &Remote, id: &str) -> Deleted {
    if !super::pull::has_copy(remote, id) {
        return Deleted::NoCopy;
    }
    remote.with(|i| i.deletions.insert(id.to_owned()));
    let stone = tombstones(remote).join(id);
    let written = agentx_shared::profile::create_private_dir(&tombstones(remote))
        .and_then(|()| crate::durable::write_atomic(&stone, b""));
    let lost_on_restart = match written {
        // Durable: the push state may go; the tombstone carries it.
        Ok(()) => {
            let _ = std::fs::remove_file(remote.pushed_dir.join(format!("{id}.json")));
            false
        }
        Err(e) => {
            tracing::warn!("remote: cannot record the deletion of {id}: {e}");
            true
        }
    };
    let attempt = async {
        let _sync = remote.sync.lock().await;
        let client = super::pull::reader(remote).await?;
        delete_now(&client, id).await?;
        Ok::<(), RemoteError>(())
    };
    let why = match tokio::time::timeout(CLEAR_WAIT, attempt).await {
        Ok(Ok(())) => {
            deleted(remote, id);
            return Deleted::Done;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} s", CLEAR_WAIT.as_secs()),
    };
    // The pusher tries again now and on its backoff until the server
    // answers, even when nothing else changes meanwhile.
    remote.wake.notify_one();
    Deleted::Later(if lost_on_restart {
        format!(
            "{why}; the deletion could not be recorded on disk either, so it is retried only while agentd runs"
        )
    } else {
        why
    })
}

/// The server confirmed: nothing of `id` is left to delete.
fn deleted(remote: &Remote, id: &str) {
    let _ = std::fs::remove_file(tombstones(remote).join(id));
    let _ = std::fs::remove_file(remote.pushed_dir.join(format!("{id}.json")));
    remote.with(|i| i.deletions.remove(id));
}

async fn delete_now(client: &Client, id: &str) -> Result<(), RemoteError> {
    client
        .execute(
            "WITH gone AS (DELETE FROM conversations WHERE id = $1 RETURNING id)
             SELECT pg_notify($2, $3) FROM gone",
            &[&id, &super::listen::CHANNEL, &super::listen::payload(id)],
        )
        .await
        .map_err(RemoteError::db)?;
    tracing::info!(id, "deleted the remote copy of a cleared conversation");
    Ok(())
}

/// The deletions still to make: tombstones on disk (an earlier agentd's
/// too) and those only in memory. Blocking (reads a directory).
pub(super) fn waiting(remote: &Remote) -> std::collections::BTreeSet<String> {
    let mut ids = remote.with(|i| i.deletions.clone()).unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(tombstones(remote)) {
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if id.starts_with('.') || agentx_shared::folder::check_component("id", &id).is_err() {
                continue;
            }
            ids.insert(id);
        }
    }
    ids
}

/// Deletes what `/clear` could not (the pusher, each pass).
pub(super) async fn flush(remote: &Remote, client: &Client) -> Result<(), RemoteError> {
    let ids = waiting(remote);
    for id in ids {
        delete_now(client, &id).await?;
        deleted(remote, &id);
    }
    Ok(())
}
