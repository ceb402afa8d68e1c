//! Sending one conversation's push to the server: its row and new records
//! in one transaction, behind the sequence check that detects a conflict.

use tokio_postgres::Client;

use super::outbox::Push;
use crate::remote::RemoteError;

/// Records per INSERT statement.
const BATCH: usize = 1000;

/// How a push ended.
pub(super) enum Sent {
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
        .map_err(RemoteError::refused)?;
    let Some(row) = row else {
        return Ok((push.start > 0 && !push.reset).then_some(Sent::Gone));
    };
    let theirs = row
        .try_get::<_, i64>(0)
        .map_err(RemoteError::refused)?
        .max(0) as u64;
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
        .map_err(RemoteError::refused)?
        .try_get(0)
        .map_err(RemoteError::refused)?;
    Ok(same == seqs.len() as i64)
}

/// Pushes one conversation in one transaction.
pub(super) async fn send(
    client: &mut Client,
    machine: &str,
    push: &Push,
) -> Result<Sent, RemoteError> {
    let tx = client.transaction().await.map_err(RemoteError::refused)?;
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
        .map_err(RemoteError::refused)?;
    }
    if !insert_records(&tx, machine, push).await? {
        // Another machine's record holds one of these places.
        return Ok(Sent::Conflict);
    }
    crate::remote::listen::notify(&tx, &push.doc.id).await?;
    tx.commit().await.map_err(RemoteError::refused)?;
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
    .map_err(RemoteError::refused)?;
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
        .map_err(RemoteError::refused)?;
        if !all_ours(tx, &doc.id, &seqs, &ats, &items).await? {
            return Ok(false);
        }
    }
    Ok(true)
}
