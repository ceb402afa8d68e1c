//! One conversation as the remote keeps it and as this machine does, side
//! by side: read both, find what they share, and build the local journal.

use std::path::Path;

use tokio_postgres::Client;

use agentx_shared::conversation::{Item, Usage};

use super::RemoteError;
use crate::store::conversation::{Checkpoint, ConversationDoc};
use crate::store::pulled::{Pulled, PulledMeta};

/// One transcript record: time (ms) and the item.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub at: i64,
    pub item: serde_json::Value,
}

/// The remote's copy of one conversation.
pub struct RemoteCopy {
    pub project: String,
    pub agent: String,
    pub title: String,
    pub machine: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub turns: u32,
    pub records: u64,
    pub response_id: Option<String>,
    pub usage: Usage,
    /// (seq, turns, response id, created at, usage, last user, last assistant).
    pub checkpoints: Vec<serde_json::Value>,
    pub forked_from: Option<crate::store::fork::ForkOrigin>,
    /// The chain of the whole line ("" for a row written before lines were
    /// hashed).
    pub head: String,
    /// Records from `from` on.
    pub from: u64,
    pub lines: Vec<Record>,
}

fn db(e: tokio_postgres::Error) -> RemoteError {
    RemoteError::db(e)
}

/// The remote's record count and line head for `id` (`None`: it keeps no
/// such conversation; a `None` head: a row written before lines were hashed).
pub async fn remote_line(
    client: &Client,
    id: &str,
) -> Result<Option<(u64, Option<String>)>, RemoteError> {
    let row = client
        .query_opt(
            "SELECT records, head FROM conversations WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(db)?;
    row.map(|r| {
        Ok((
            r.try_get::<_, i64>(0)?.max(0) as u64,
            r.try_get::<_, Option<String>>(1)?,
        ))
    })
    .transpose()
    .map_err(db)
}

/// Reads the remote copy of `id` in one statement, so the row and its
/// records are one consistent snapshot (a push commits both at once). With
/// `known` (records and chain this machine last saw), only the records past
/// it, when the server's line still starts with it; else all of them.
pub async fn read_remote(
    client: &Client,
    id: &str,
    known: Option<(u64, &str)>,
) -> Result<Option<RemoteCopy>, RemoteError> {
    let (known_items, known_head) = known.unwrap_or((0, ""));
    let known_items = i64::try_from(known_items).unwrap_or(i64::MAX);
    let Some(row) = client
        .query_opt(
            "WITH base AS (
                SELECT CASE WHEN $2::int8 > 0 AND $3::text <> '' AND (
                    SELECT chain FROM records WHERE conversation_id = $1 AND seq = $2::int8 - 1
                ) = $3::text THEN $2::int8 ELSE 0 END AS first
            )
            SELECT c.project, c.agent, c.title, c.machine,
                   (extract(epoch FROM c.created_at) * 1000)::int8,
                   (extract(epoch FROM c.updated_at) * 1000)::int8,
                   c.turns, c.records, c.response_id, c.usage::text, c.checkpoints::text,
                   c.forked_from::text, c.head, b.first,
                   (SELECT coalesce(json_agg(json_build_array(
                                r.seq, coalesce(round(extract(epoch FROM r.at) * 1000)::int8, 0),
                                r.item) ORDER BY r.seq), '[]')::text
                      FROM records r WHERE r.conversation_id = c.id AND r.seq >= b.first)
              FROM conversations c, base b WHERE c.id = $1",
            &[&id, &known_items, &known_head],
        )
        .await
        .map_err(db)?
    else {
        return Ok(None);
    };
    let text = |i: usize| row.try_get::<_, Option<String>>(i).map_err(db);
    let usage: Usage = text(9)?
        .and_then(|u| serde_json::from_str(&u).ok())
        .unwrap_or_default();
    let checkpoints = text(10)?
        .and_then(|c| serde_json::from_str::<Vec<serde_json::Value>>(&c).ok())
        .unwrap_or_default();
    let forked_from = text(11)?.and_then(|f| serde_json::from_str(&f).ok());
    let first: i64 = row.try_get(13).map_err(db)?;
    let listed: Vec<(i64, i64, serde_json::Value)> =
        serde_json::from_str(&text(14)?.unwrap_or_default()).map_err(|e| {
            RemoteError::server_because(format!("the records of {id} do not read: {e}"), e)
        })?;
    let records = row.try_get::<_, i64>(7).map_err(db)?.max(0);
    if records - first != listed.len() as i64 {
        return Err(RemoteError::server(format!(
            "the remote copy of {id} says {records} records but holds {}",
            first + listed.len() as i64
        )));
    }
    let mut lines = Vec::with_capacity(listed.len());
    for (expected, (seq, at, item)) in (first..).zip(listed) {
        if seq != expected {
            return Err(RemoteError::server(format!(
                "the remote copy of {id} misses record {expected}"
            )));
        }
        lines.push(Record { at, item });
    }
    Ok(Some(RemoteCopy {
        project: row.try_get(0).map_err(db)?,
        agent: row.try_get(1).map_err(db)?,
        title: row.try_get(2).map_err(db)?,
        machine: row.try_get(3).map_err(db)?,
        created_at: row.try_get(4).map_err(db)?,
        updated_at: row.try_get(5).map_err(db)?,
        turns: u32::try_from(row.try_get::<_, i32>(6).map_err(db)?).unwrap_or(0),
        records: records as u64,
        response_id: text(8)?,
        usage,
        checkpoints,
        forked_from,
        head: text(12)?.unwrap_or_default(),
        from: first as u64,
        lines,
    }))
}

/// The committed local journal: each record and the byte offset after it.
pub fn read_local(journal: &Path, committed: u64) -> std::io::Result<Vec<(Record, u64)>> {
    let lines = crate::store::journal::read::<serde_json::Map<String, serde_json::Value>>(
        journal, 0, committed,
    )
    .map_err(std::io::Error::other)?;
    Ok(lines
        .into_iter()
        .map(|line| {
            let mut item = line.value;
            let at = item.remove("at").and_then(|v| v.as_i64()).unwrap_or(0);
            (
                Record {
                    at,
                    item: serde_json::Value::Object(item),
                },
                line.end,
            )
        })
        .collect())
}

/// How many records from the start the two copies share (`remote` holds
/// records from `remote_from` on; below that they are taken as shared).
pub fn shared_prefix(local: &[(Record, u64)], remote: &[Record], remote_from: u64) -> u64 {
    let from = usize::try_from(remote_from).unwrap_or(usize::MAX);
    let same = local
        .iter()
        .skip(from)
        .zip(remote)
        .take_while(|((l, _), r)| l == *r)
        .count();
    remote_from.min(local.len() as u64) + same as u64
}

/// A journal line as the store writes it.
fn line(record: &Record) -> Result<Vec<u8>, RemoteError> {
    // Checked as a transcript item, but kept as the server has it: the
    // local copy must compare equal to the remote's, field for field.
    serde_json::from_value::<Item>(record.item.clone()).map_err(|e| {
        RemoteError::server_because(format!("a remote record is not a transcript item: {e}"), e)
    })?;
    let mut value = record.item.clone();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("at".into(), record.at.into());
    }
    let mut bytes = serde_json::to_vec(&value).map_err(RemoteError::local)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// What makes the local conversation (whose committed records are `local`)
/// equal `remote`, keeping the first `keep` local records.
pub fn pulled(
    local: &[(Record, u64)],
    keep: u64,
    remote: &RemoteCopy,
) -> Result<Pulled, RemoteError> {
    let keep_n = usize::try_from(keep).unwrap_or(usize::MAX).min(local.len());
    let keep_bytes = keep_n.checked_sub(1).map_or(0, |i| local[i].1);
    let mut offsets: Vec<u64> = std::iter::once(0)
        .chain(local[..keep_n].iter().map(|(_, end)| *end))
        .collect();
    let mut items: Vec<&serde_json::Value> = local[..keep_n].iter().map(|(r, _)| &r.item).collect();
    let skip = keep_n.saturating_sub(usize::try_from(remote.from).unwrap_or(usize::MAX));
    let mut lines = Vec::new();
    for record in remote.lines.iter().skip(skip) {
        lines.extend(line(record)?);
        offsets.push(keep_bytes + lines.len() as u64);
        items.push(&record.item);
    }
    let appended = (offsets.len() - 1 - keep_n) as u64;
    let last = |kind: &str| {
        items
            .iter()
            .rev()
            .find(|i| i["type"] == kind)
            .and_then(|i| i["text"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let checkpoints = remote
        .checkpoints
        .iter()
        .filter_map(|cp| {
            let seq = cp["seq"].as_u64()?;
            let bytes = *offsets.get(usize::try_from(seq).ok()?)?;
            Some(Checkpoint {
                response_id: cp["response_id"].as_str().map(str::to_owned),
                usage: serde_json::from_value(cp["usage"].clone()).unwrap_or_default(),
                last_user: cp["last_user"].as_str().unwrap_or_default().to_owned(),
                last_assistant: cp["last_assistant"].as_str().unwrap_or_default().to_owned(),
                turns: u32::try_from(cp["turns"].as_u64().unwrap_or(0)).unwrap_or(0),
                journal_items: seq,
                journal_bytes: bytes,
                created_at: cp["created_at"].as_i64().unwrap_or(0),
                context: serde_json::from_value(cp["context"].clone()).ok(),
                note: cp["note"].as_str().map(str::to_owned),
            })
        })
        .collect();
    Ok(Pulled {
        keep_items: keep_n as u64,
        keep_bytes,
        lines,
        items: appended,
        meta: PulledMeta {
            title: remote.title.clone(),
            response_id: remote.response_id.clone(),
            usage: remote.usage,
            turns: remote.turns,
            checkpoints,
            last_user: last("user"),
            last_assistant: last("assistant"),
            updated_at: remote.updated_at,
        },
    })
}

/// The turn count of the first `items` records of `doc` (its last
/// checkpoint within them).
pub fn turns_at(doc: &ConversationDoc, items: u64) -> u32 {
    doc.checkpoints
        .iter()
        .filter(|cp| cp.journal_items <= items)
        .map(|cp| cp.turns)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(at: i64, text: &str) -> Record {
        Record {
            at,
            item: serde_json::json!({"type": "user", "text": text}),
        }
    }

    #[test]
    fn the_shared_prefix_stops_at_the_first_difference() {
        let local: Vec<(Record, u64)> = [rec(1, "a"), rec(2, "b"), rec(3, "c")]
            .into_iter()
            .zip([10, 20, 30])
            .collect();
        assert_eq!(shared_prefix(&local, &[rec(1, "a"), rec(2, "b")], 0), 2);
        assert_eq!(shared_prefix(&local, &[rec(2, "b"), rec(9, "x")], 1), 2);
        assert_eq!(shared_prefix(&local, &[rec(1, "z")], 0), 0);
        assert_eq!(shared_prefix(&[], &[rec(1, "a")], 0), 0);
    }

    #[test]
    fn a_pull_keeps_the_shared_records_and_appends_the_remote_ones() {
        let local: Vec<(Record, u64)> = vec![(rec(1, "a"), 10), (rec(2, "mine"), 25)];
        let remote = RemoteCopy {
            project: String::new(),
            agent: "default".into(),
            title: "a".into(),
            machine: "m".into(),
            created_at: 0,
            updated_at: 5,
            turns: 1,
            records: 2,
            response_id: Some("resp_1".into()),
            usage: Usage::default(),
            checkpoints: vec![serde_json::json!({"seq": 2, "turns": 1})],
            forked_from: None,
            head: String::new(),
            from: 0,
            lines: vec![rec(1, "a"), rec(3, "theirs")],
        };
        let p = pulled(&local, 1, &remote).unwrap();
        assert_eq!((p.keep_items, p.keep_bytes, p.items), (1, 10, 1));
        let text = String::from_utf8(p.lines.clone()).unwrap();
        assert!(text.contains("theirs") && text.ends_with('\n'), "{text}");
        assert_eq!(p.meta.last_user, "theirs");
        assert_eq!(p.meta.checkpoints.len(), 1);
        assert_eq!(
            p.meta.checkpoints[0].journal_bytes,
            10 + p.lines.len() as u64
        );
    }
}
