//! Sending one conversation's push to the server: its row and new records
//! in one transaction, behind the line check (by content: the chain of hashes) that
//! detects a conflict.

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

/// The line check, under the conversation row's lock: a push extends the
/// server's line only from where this machine last left it, by content.
async fn in_sequence(
    tx: &tokio_postgres::Transaction<'_>,
    push: &Push,
) -> Result<Option<Sent>, RemoteError> {
    let row = tx
        .query_opt(
            "SELECT records, head FROM conversations WHERE id = $1 FOR UPDATE",
            &[&push.doc.id],
        )
        .await
        .map_err(RemoteError::refused)?;
    let Some(row) = row else {
        let went_on = push.known.as_ref().is_some_and(|k| k.items > 0) && !push.reset;
        return Ok(went_on.then_some(Sent::Gone));
    };
    let theirs = row
        .try_get::<_, i64>(0)
        .map_err(RemoteError::refused)?
        .max(0) as u64;
    let head: Option<String> = row.try_get(1).map_err(RemoteError::refused)?;
    Ok((!extends(push, theirs, head.as_deref())).then_some(Sent::Conflict))
}

/// Whether `push` may go onto a server line of `theirs` records whose
/// chain is `head` (`None`: a row an agentd before hashed lines wrote).
fn extends(push: &Push, theirs: u64, head: Option<&str>) -> bool {
    let known = push.known.as_ref();
    match head {
        // The server's line is the one this machine last pushed or pulled,
        // or ours went on past it before a crash kept us from recording
        // that: the server's line is a prefix of ours.
        Some(head) if !head.is_empty() => {
            known.is_some_and(|k| k.items == theirs && k.head == head)
                || (!push.reset
                    && theirs > push.start
                    && theirs <= push.end.items
                    && push.chain_at(theirs) == Some(head))
        }
        // Counted as before lines were hashed, once: this push hashes it.
        _ => known.is_some_and(|k| k.items == theirs),
    }
}

/// Whether every record of `chunk` is on the server with our chain.
async fn all_ours(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    seqs: &[i64],
    chains: &[&str],
) -> Result<bool, RemoteError> {
    let same: i64 = tx
        .query_one(
            "SELECT count(*) FROM records r
               JOIN unnest($2::int8[], $3::text[]) AS m (seq, chain) ON r.seq = m.seq
              WHERE r.conversation_id = $1 AND r.chain = m.chain",
            &[&id, &seqs, &chains],
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
    let checkpoints: Vec<serde_json::Value> = push
        .checkpoints()
        .map(|cp| {
            serde_json::json!({
                "seq": cp.journal_items,
                "turns": cp.turns,
                "response_id": cp.response_id,
                "created_at": cp.created_at,
                "usage": cp.usage,
                "last_user": cp.last_user,
                "last_assistant": cp.last_assistant,
                "context": cp.context,
                "note": cp.note,
            })
        })
        .collect();
    let checkpoints = serde_json::Value::Array(checkpoints).to_string();
    let forked_from = doc
        .forked_from
        .as_ref()
        .map(|f| serde_json::json!({"id": f.id, "turn": f.turn}).to_string());
    // The line pushed ends at its last finished turn: what the row says
    // of it is that turn's.
    let last = push.checkpoints().last();
    let finished = push.end.items == doc.journal_items;
    let (turns, response_id, usage) = match last {
        Some(cp) if !finished => (cp.turns, cp.response_id.clone(), cp.usage),
        None if !finished => (0, None, Default::default()),
        _ => (doc.turns, doc.response_id.clone(), doc.usage),
    };
    let usage = serde_json::to_string(&usage).map_err(RemoteError::local)?;
    let turns = i32::try_from(turns).unwrap_or(i32::MAX);
    let records = i64::try_from(push.end.items).unwrap_or(i64::MAX);
    let rollbacks = i64::try_from(doc.rollbacks).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO conversations (id, project, agent, title, machine, folder,
                created_at, updated_at, turns, records, rollbacks, response_id,
                usage, checkpoints, forked_from, head)
         VALUES ($1, $2, $3, $4, $5, $6,
                 to_timestamp($7::int8::float8 / 1000), to_timestamp($8::int8::float8 / 1000),
                 $9::int4, $10::int8, $11::int8, $12::text,
                 $13::text::jsonb, $14::text::jsonb, $15::text::jsonb, $16::text)
         ON CONFLICT (id) DO UPDATE SET
             project = EXCLUDED.project, agent = EXCLUDED.agent, title = EXCLUDED.title,
             machine = EXCLUDED.machine, folder = EXCLUDED.folder,
             updated_at = EXCLUDED.updated_at, turns = EXCLUDED.turns,
             records = EXCLUDED.records, rollbacks = EXCLUDED.rollbacks,
             response_id = EXCLUDED.response_id, usage = EXCLUDED.usage,
             checkpoints = EXCLUDED.checkpoints, forked_from = EXCLUDED.forked_from,
             head = EXCLUDED.head",
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
            &response_id,
            &usage,
            &checkpoints,
            &forked_from,
            &push.head,
        ],
    )
    .await
    .map_err(RemoteError::refused)?;
    Ok(())
}

/// The new records, batched; `false` when another machine's record holds
/// one of their places.
async fn insert_records(
    tx: &tokio_postgres::Transaction<'_>,
    machine: &str,
    push: &Push,
) -> Result<bool, RemoteError> {
    let doc = &push.doc;
    for chunk in push.records.chunks(BATCH) {
        let seqs: Vec<i64> = chunk.iter().map(|r| r.seq).collect();
        let ats: Vec<i64> = chunk.iter().map(|r| r.at).collect();
        let items: Vec<&str> = chunk.iter().map(|r| r.item.as_str()).collect();
        let chains: Vec<&str> = chunk.iter().map(|r| r.chain.as_str()).collect();
        let inserted = tx
            .execute(
                "INSERT INTO records (conversation_id, seq, at, item, machine, chain)
                 SELECT $1::text, r.seq, to_timestamp(r.at::float8 / 1000), r.item::jsonb,
                        $5::text, r.chain
                   FROM unnest($2::int8[], $3::int8[], $4::text[], $6::text[])
                        AS r (seq, at, item, chain)
                 ON CONFLICT (conversation_id, seq) DO NOTHING",
                &[&doc.id, &seqs, &ats, &items, &machine, &chains],
            )
            .await
            .map_err(RemoteError::refused)?;
        // Records already there must be ours (pushed before a crash kept
        // this machine from recording it): the same chain at each place.
        if inserted < chunk.len() as u64 && !all_ours(tx, &doc.id, &seqs, &chains).await? {
            return Ok(false);
        }
    }
    Ok(true)
}
