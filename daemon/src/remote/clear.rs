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

/// Deletes the remote copy of cleared conversation `id`.
pub async fn delete(remote: &Remote, id: &str) -> Deleted {
    if !super::pull::has_copy(remote, id) {
        return Deleted::NoCopy;
    }
    let stone = tombstones(remote).join(id);
    let written = agentx_shared::profile::create_private_dir(&tombstones(remote))
        .and_then(|()| crate::durable::write_atomic(&stone, b""));
    if let Err(e) = written {
        tracing::warn!("remote: cannot record the deletion of {id}: {e}");
    }
    let _ = std::fs::remove_file(remote.pushed_dir.join(format!("{id}.json")));
    let attempt = async {
        let _sync = remote.sync.lock().await;
        let client = super::pull::reader(remote).await?;
        delete_now(&client, id).await?;
        let _ = std::fs::remove_file(&stone);
        Ok::<(), RemoteError>(())
    };
    match tokio::time::timeout(CLEAR_WAIT, attempt).await {
        Ok(Ok(())) => Deleted::Done,
        Ok(Err(e)) => Deleted::Later(e.to_string()),
        Err(_) => Deleted::Later(format!("no answer within {} s", CLEAR_WAIT.as_secs())),
    }
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

/// Deletes what `/clear` could not (the pusher, each pass).
pub(super) async fn flush(remote: &Remote, client: &Client) -> Result<(), RemoteError> {
    let Ok(entries) = std::fs::read_dir(tombstones(remote)) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if id.starts_with('.') || agentx_shared::folder::check_component("id", &id).is_err() {
            continue;
        }
        delete_now(client, &id).await?;
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(())
}
