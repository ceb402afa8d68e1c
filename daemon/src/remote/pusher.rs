//! The background pusher: finds what changed (at start, by comparing every
//! conversation document with what was last pushed; later, from the
//! store's notifications) and pushes it in passes, each conversation in one
//! transaction, records inserted `ON CONFLICT DO NOTHING`.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::project::project_key;
use super::{Remote, RemoteError};
use crate::store::session::SessionDoc;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Records per INSERT statement.
const BATCH: usize = 1000;

/// What was last pushed of one conversation (or pulled: what is known to
/// be on the server).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Pushed {
    /// blake3 of the document pushed.
    pub hash: String,
    pub items: u64,
    pub bytes: u64,
    pub rollbacks: u64,
}

/// One conversation's push, read from its files.
struct Push {
    id: String,
    hash: String,
    doc: SessionDoc,
    project: String,
    /// Start over: the journal was rewritten (rollback) since the last push.
    reset: bool,
    /// The server's record count as last pushed or pulled (`None`: never).
    known: Option<u64>,
    /// The first record pushed.
    start: u64,
    /// (seq, at ms, item JSON) from the first unpushed record.
    records: Vec<(i64, i64, String)>,
}

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

/// The document changed under us (a rollback while reading): try again on
/// the next notification or pass.
struct RetryLater;

pub(super) fn current_hash(doc: &Path) -> Option<String> {
    std::fs::read(doc)
        .ok()
        .map(|b| blake3::hash(&b).to_hex().to_string())
}

pub(super) fn load_pushed(dir: &Path, id: &str) -> Option<Pushed> {
    let bytes = std::fs::read(dir.join(format!("{id}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

pub(super) fn save_pushed(path: &Path, state: &Pushed) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        agentx_shared::profile::create_private_dir(dir)?;
    }
    let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    crate::store::durable::write_atomic(path, &bytes)
}

/// What to push of the conversation whose document is `doc_path`: `None`
/// when nothing changed or it is gone (cleared; the remote copy stays).
fn read_push(remote: &Remote, doc_path: &Path) -> Result<Option<Push>, RetryLater> {
    let Ok(bytes) = std::fs::read(doc_path) else {
        return Ok(None);
    };
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let Ok(doc) = serde_json::from_slice::<SessionDoc>(&bytes) else {
        tracing::warn!(
            "remote: {} is not a conversation document; not pushed",
            doc_path.display()
        );
        return Ok(None);
    };
    if doc.base.is_some() {
        return Ok(None); // a one-shot's state: one-shots stay local
    }
    let known = load_pushed(&remote.pushed_dir, &doc.id);
    if known.is_none() && doc.journal_items == 0 {
        return Ok(None); // nothing said yet: listed elsewhere once it has
    }
    let prev = known.clone().unwrap_or_default();
    if prev.hash == hash {
        return Ok(None);
    }
    let reset = prev.rollbacks != doc.rollbacks
        || prev.items > doc.journal_items
        || prev.bytes > doc.journal_bytes;
    let (from_items, from_bytes) = if reset {
        (0, 0)
    } else {
        (prev.items, prev.bytes)
    };
    let journal = doc_path.with_extension("jsonl");
    let records = match read_records(&journal, from_items, from_bytes, doc.journal_bytes) {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("remote: cannot read {}: {e}", journal.display());
            return Err(RetryLater);
        }
    };
    // A rollback between reading the document and the journal may have
    // rewritten what we read: check the document still says the same.
    match std::fs::read(doc_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<SessionDoc>(&b).ok())
    {
        Some(now) if now.rollbacks == doc.rollbacks && now.journal_bytes >= doc.journal_bytes => {}
        _ => return Err(RetryLater),
    }
    if records.len() as u64 != doc.journal_items - from_items {
        tracing::warn!(
            "remote: {} holds {} records past {from_items}, its document says {}; pushing what is there",
            journal.display(),
            records.len(),
            doc.journal_items - from_items
        );
    }
    let project = project_key(Path::new(&doc.folder), &remote.machine);
    Ok(Some(Push {
        id: doc.id.clone(),
        hash,
        doc,
        project,
        reset,
        known: known.map(|k| k.items),
        start: from_items,
        records,
    }))
}

/// Journal lines (`{"at":…, …the item's fields}`) from byte `from` to
/// `to`, numbered from `first_seq`: (seq, at, the item without `at`).
fn read_records(
    path: &Path,
    first_seq: u64,
    from: u64,
    to: u64,
) -> std::io::Result<Vec<(i64, i64, String)>> {
    if to <= from {
        return Ok(Vec::new());
    }
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    file.take(to - from).read_to_end(&mut buf)?;
    let mut out = Vec::new();
    let first = i64::try_from(first_seq).unwrap_or(i64::MAX);
    let lines = buf.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    for (seq, line) in (first..).zip(lines) {
        let mut item: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(line).map_err(std::io::Error::other)?;
        let at = item.remove("at").and_then(|v| v.as_i64()).unwrap_or(0);
        out.push((seq, at, serde_json::Value::Object(item).to_string()));
    }
    Ok(out)
}

/// How a push ended.
enum Sent {
    Pushed,
    /// The server's copy went on (or was rewritten) elsewhere since this
    /// machine last pushed or pulled it: nothing was changed.
    Conflict,
    /// The server no longer has it (cleared elsewhere) and this push would
    /// start past record 0: push it whole.
    Gone,
}

/// The sequence check, under the conversation row's lock: a push extends
/// the server's copy only from where this machine last left it.
async fn in_sequence(
    tx: &tokio_postgres::Transaction<'_>,
    push: &Push,
) -> Result<Option<Sent>, RemoteError> {
    let row = tx
        .query_opt(
            "SELECT records FROM conversations WHERE id = $1 FOR UPDATE",
            &[&push.doc.id],
        )
        .await
        .map_err(RemoteError::db)?;
    let Some(row) = row else {
        return Ok((push.start > 0 && !push.reset).then_some(Sent::Gone));
    };
    let theirs = row.try_get::<_, i64>(0).map_err(RemoteError::db)?.max(0) as u64;
    let ok = if push.reset {
        push.known == Some(theirs)
    } else {
        // Records the server has past `start` must be ours (a push that
        // landed before a crash): checked record by record on insert.
        theirs >= push.start && theirs <= push.doc.journal_items
    };
    Ok((!ok).then_some(Sent::Conflict))
}

/// Whether every record of `chunk` is on the server as ours.
async fn all_ours(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    seqs: &[i64],
    ats: &[i64],
    items: &[&str],
) -> Result<bool, RemoteError> {
    let same: i64 = tx
        .query_one(
            "SELECT count(*) FROM records r
               JOIN unnest($2::int8[], $3::int8[], $4::text[]) AS m (seq, at, item)
                 ON r.seq = m.seq
              WHERE r.conversation_id = $1 AND r.item = m.item::jsonb
                AND r.at IS NOT DISTINCT FROM to_timestamp(m.at::float8 / 1000)",
            &[&id, &seqs, &ats, &items],
        )
        .await
        .map_err(RemoteError::db)?
        .try_get(0)
        .map_err(RemoteError::db)?;
    Ok(same == seqs.len() as i64)
}

/// Pushes one conversation in one transaction.
async fn send(client: &mut Client, machine: &str, push: &Push) -> Result<Sent, RemoteError> {
    let tx = client.transaction().await.map_err(RemoteError::db)?;
    if let Some(not_now) = in_sequence(&tx, push).await? {
        return Ok(not_now);
    }
    upsert(&tx, machine, push).await?;
    if push.reset {
        tx.execute(
            "DELETE FROM records WHERE conversation_id = $1",
            &[&push.doc.id],
        )
        .await
        .map_err(RemoteError::db)?;
    }
    if !insert_records(&tx, machine, push).await? {
        // Another machine's record holds one of these places.
        return Ok(Sent::Conflict);
    }
    tx.commit().await.map_err(RemoteError::db)?;
    Ok(Sent::Pushed)
}

/// The conversation's row: its document's metadata, inserted or replaced.
async fn upsert(
    tx: &tokio_postgres::Transaction<'_>,
    machine: &str,
    push: &Push,
) -> Result<(), RemoteError> {
    let doc = &push.doc;
    let usage = serde_json::to_string(&doc.usage).map_err(|e| RemoteError::Local(e.to_string()))?;
    let checkpoints: Vec<serde_json::Value> = doc
        .checkpoints
        .iter()
        .map(|cp| {
            serde_json::json!({
                "seq": cp.journal_items,
                "turns": cp.turns,
                "response_id": cp.response_id,
                "created_at": cp.created_at,
                "usage": cp.usage,
                "last_user": cp.last_user,
                "last_assistant": cp.last_assistant,
            })
        })
        .collect();
    let checkpoints = serde_json::Value::Array(checkpoints).to_string();
    let forked_from = doc
        .forked_from
        .as_ref()
        .map(|f| serde_json::json!({"id": f.id, "turn": f.turn}).to_string());
    let turns = i32::try_from(doc.turns).unwrap_or(i32::MAX);
    let records = i64::try_from(doc.journal_items).unwrap_or(i64::MAX);
    let rollbacks = i64::try_from(doc.rollbacks).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO conversations (id, project, agent, title, machine, folder,
                created_at, updated_at, turns, records, rollbacks, response_id,
                usage, checkpoints, forked_from)
         VALUES ($1, $2, $3, $4, $5, $6,
                 to_timestamp($7::int8::float8 / 1000), to_timestamp($8::int8::float8 / 1000),
                 $9::int4, $10::int8, $11::int8, $12::text,
                 $13::text::jsonb, $14::text::jsonb, $15::text::jsonb)
         ON CONFLICT (id) DO UPDATE SET
             project = EXCLUDED.project, agent = EXCLUDED.agent, title = EXCLUDED.title,
             machine = EXCLUDED.machine, folder = EXCLUDED.folder,
             updated_at = EXCLUDED.updated_at, turns = EXCLUDED.turns,
             records = EXCLUDED.records, rollbacks = EXCLUDED.rollbacks,
             response_id = EXCLUDED.response_id, usage = EXCLUDED.usage,
             checkpoints = EXCLUDED.checkpoints, forked_from = EXCLUDED.forked_from",
        &[
            &doc.id,
            &push.project,
            &doc.agent,
            &doc.title,
            &machine,
            &doc.folder,
            &doc.created_at,
            &doc.updated_at,
            &turns,
            &records,
            &rollbacks,
            &doc.response_id,
            &usage,
            &checkpoints,
            &forked_from,
        ],
    )
    .await
    .map_err(RemoteError::db)?;
    Ok(())
}

/// The new records, batched; `false` when another machine's record holds
/// one of their places (the sequence check failed).
async fn insert_records(
    tx: &tokio_postgres::Transaction<'_>,
    machine: &str,
    push: &Push,
) -> Result<bool, RemoteError> {
    let doc = &push.doc;
    for chunk in push.records.chunks(BATCH) {
        let seqs: Vec<i64> = chunk.iter().map(|r| r.0).collect();
        let ats: Vec<i64> = chunk.iter().map(|r| r.1).collect();
        let items: Vec<&str> = chunk.iter().map(|r| r.2.as_str()).collect();
        tx.execute(
            "INSERT INTO records (conversation_id, seq, at, item, machine)
             SELECT $1::text, r.seq, to_timestamp(r.at::float8 / 1000), r.item::jsonb, $5::text
               FROM unnest($2::int8[], $3::int8[], $4::text[]) AS r (seq, at, item)
             ON CONFLICT (conversation_id, seq) DO NOTHING",
            &[&doc.id, &seqs, &ats, &items, &machine],
        )
        .await
        .map_err(RemoteError::db)?;
        if !all_ours(tx, &doc.id, &seqs, &ats, &items).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Every conversation document under the sessions directory whose content
/// differs from what was last pushed (`<folder-key>/<agent>/<id>.json`).
fn scan(remote: &Remote) -> Vec<PathBuf> {
    let mut dirty = Vec::new();
    let Ok(folders) = std::fs::read_dir(&remote.sessions_dir) else {
        return dirty;
    };
    for folder in folders.flatten() {
        let Ok(agents) = std::fs::read_dir(folder.path()) else {
            continue;
        };
        for agent in agents.flatten() {
            let Ok(files) = std::fs::read_dir(agent.path()) else {
                continue;
            };
            for file in files.flatten() {
                let path = file.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                let Some(id) = name.strip_suffix(".json") else {
                    continue;
                };
                if matches!(id, "current" | "shared") || id.contains('.') {
                    continue;
                }
                let pushed = load_pushed(&remote.pushed_dir, id).map(|p| p.hash);
                if current_hash(&path) != pushed {
                    dirty.push(path);
                }
            }
        }
    }
    dirty
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_records_are_read_from_a_position_and_numbered() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("j.jsonl");
        let a = r#"{"at":5,"type":"user","text":"hi"}"#;
        let b = r#"{"at":6,"type":"assistant","text":"yo"}"#;
        std::fs::write(&path, format!("{a}\n{b}\n")).unwrap();
        let all = read_records(&path, 0, 0, (a.len() + b.len() + 2) as u64).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[1].0, all[1].1), (1, 6));
        let tail = read_records(
            &path,
            1,
            (a.len() + 1) as u64,
            (a.len() + b.len() + 2) as u64,
        )
        .unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].0, 1);
        assert_eq!(tail[0].2, r#"{"text":"yo","type":"assistant"}"#);
        // Bytes past the committed end are not read.
        assert_eq!(
            read_records(&path, 0, 0, (a.len() + 1) as u64)
                .unwrap()
                .len(),
            1
        );
    }
}
