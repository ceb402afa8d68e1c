//! Full-text search of the remote store: PostgreSQL's own
//! (`tsvector` columns with GIN indexes, `ts_rank`, `ts_headline`) over the
//! conversations this machine does not hold, of one project and agent or all.

use std::path::Path;

use super::{Remote, RemoteError};
use crate::store::tree;

/// Marks around a match in `ts_headline`'s output (never in real text).
const START: char = '\u{1}';
const STOP: char = '\u{2}';

/// One remote hit: a message or tool output (turn ≥ 1) or a title (turn 0).
#[derive(Debug, Clone)]
pub struct RemoteHit {
    /// The hit, as a local search gives one (score from `ts_rank`).
    pub hit: crate::search::Hit,
    /// The machine that wrote the conversation.
    pub machine: String,
}

/// Best records and titles first; the turn, time and snippet only for them.
/// The snippet is cut from the indexed part of the record (a large record
/// would make `ts_headline` slow, and it matched there).
const QUERY: &str = "
WITH q AS (SELECT websearch_to_tsquery('simple', $1) AS q),
top AS (
    (SELECT c.id, NULL::int8 AS seq, ts_rank(c.title_search, q.q) AS rank
       FROM conversations c, q
      WHERE c.title_search @@ q.q
        AND ($2::text IS NULL OR (c.project = $2 AND c.agent = $3))
        AND NOT (c.id = ANY($4::text[]))
     UNION ALL
     SELECT r.conversation_id, r.seq, ts_rank(r.search, q.q)
       FROM records r JOIN conversations c ON c.id = r.conversation_id, q
      WHERE r.search @@ q.q
        AND ($2::text IS NULL OR (c.project = $2 AND c.agent = $3))
        AND NOT (c.id = ANY($4::text[])))
    ORDER BY rank DESC
    LIMIT $5
)
SELECT c.id, c.folder, c.agent, c.title, c.machine, top.rank::float4,
       CASE WHEN top.seq IS NULL THEN 0 ELSE (
           SELECT count(*) FROM records u
            WHERE u.conversation_id = c.id AND u.seq <= top.seq AND u.item->>'type' = 'user'
       ) END::int8,
       CASE WHEN isfinite(coalesce(r.at, c.updated_at))
            THEN (extract(epoch FROM coalesce(r.at, c.updated_at)) * 1000)::int8 END,
       ts_headline('simple',
           left(CASE WHEN top.seq IS NULL THEN c.title
                ELSE coalesce(r.item->>'text', r.item->>'output', r.item->>'arguments', '') END,
                $7::int4),
           q.q, $6)
  FROM top JOIN conversations c ON c.id = top.id
  LEFT JOIN records r ON r.conversation_id = top.id AND r.seq = top.seq, q
 ORDER BY top.rank DESC, c.id, top.seq";

impl Remote {
    /// The best `limit` hits for `text` among conversations not in `local`:
    /// of `scope` (project key, agent), or everywhere. One hit per turn.
    /// The caller bounds the wait.
    pub async fn search(
        &self,
        text: &str,
        scope: Option<(&str, &str)>,
        local: &[String],
        limit: usize,
    ) -> Result<(Vec<RemoteHit>, Vec<String>), RemoteError> {
        let client = self.lane(super::lanes::Lane::Search).await?;
        let (project, agent) = scope.unzip();
        // Several records of one turn may match: fetch more, keep the best.
        let fetch = i64::try_from(limit.saturating_mul(3)).unwrap_or(i64::MAX);
        let options =
            format!("StartSel={START}, StopSel={STOP}, MaxWords=30, MinWords=12, MaxFragments=1");
        let rows = client
            .query(
                QUERY,
                &[
                    &text,
                    &project,
                    &agent,
                    &local,
                    &fetch,
                    &options,
                    &super::schema::INDEXED_CHARS,
                ],
            )
            .await
            .map_err(|e| self.server_error(e))?;
        client.done();
        let mut hits: Vec<RemoteHit> = Vec::new();
        let mut notes = Vec::new();
        for row in rows {
            // A row with a value no agentd writes is skipped, and named.
            let hit = match hit_of(&row) {
                Ok(hit) => hit,
                Err(e) => {
                    let id = row.try_get::<_, String>(0).unwrap_or_default();
                    let note = format!(
                        "skipped a remote match in conversation {}: {e}",
                        agentx_shared::terminal::visible(&id)
                    );
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                    continue;
                }
            };
            if crate::store::is_conversation_id(&hit.hit.session_id)
                && !hits
                    .iter()
                    .any(|h| h.hit.session_id == hit.hit.session_id && h.hit.turn == hit.hit.turn)
            {
                hits.push(hit);
            }
        }
        hits.truncate(limit);
        Ok((hits, notes))
    }

    /// Ids of the conversations this machine holds: in `group_dir`
    /// (`<sessions>/<folder-key>/<agent>`), or in every group. Blocking.
    pub fn local_ids(&self, group_dir: Option<&Path>) -> Vec<String> {
        let docs = match group_dir {
            Some(dir) => tree::docs_in(dir),
            None => tree::docs(&self.sessions_dir),
        };
        docs.iter()
            .filter_map(|p| tree::doc_id(p))
            .map(str::to_owned)
            .collect()
    }

    fn server_error(&self, e: tokio_postgres::Error) -> RemoteError {
        match &self.url {
            Ok(url) => RemoteError::db(e).redacted(url),
            Err(_) => RemoteError::db(e),
        }
    }
}

/// One hit, or why its row cannot be one (a value no agentd writes).
fn hit_of(row: &tokio_postgres::Row) -> Result<RemoteHit, String> {
    let read = |e: tokio_postgres::Error| format!("a value cannot be read ({e})");
    let (snippet, highlights) = marked(&row.try_get::<_, String>(8).map_err(read)?);
    let at = row
        .try_get::<_, Option<i64>>(7)
        .map_err(read)?
        .ok_or_else(|| "its time is not a real time".to_owned())?;
    Ok(RemoteHit {
        hit: crate::search::Hit {
            session_id: row.try_get(0).map_err(read)?,
            folder: row.try_get(1).map_err(read)?,
            agent: row.try_get(2).map_err(read)?,
            title: row.try_get(3).map_err(read)?,
            score: row.try_get(5).map_err(read)?,
            turn: u32::try_from(row.try_get::<_, i64>(6).map_err(read)?).unwrap_or(u32::MAX),
            at,
            snippet,
            highlights,
        },
        machine: row.try_get(4).map_err(read)?,
    })
}

/// `ts_headline` output without its marks, and the byte ranges they held.
fn marked(headline: &str) -> (String, Vec<(usize, usize)>) {
    let mut text = String::with_capacity(headline.len());
    let mut ranges = Vec::new();
    let mut open = None;
    for c in headline.chars() {
        match c {
            START => open = Some(text.len()),
            STOP => {
                if let Some(start) = open.take()
                    && start < text.len()
                {
                    ranges.push((start, text.len()));
                }
            }
            c => text.push(c),
        }
    }
    let ranges = shift(&text, ranges);
    (text.trim().to_owned(), ranges)
}

/// Ranges of `text` moved to its trimmed form.
fn shift(text: &str, ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    let lead = text.len() - text.trim_start().len();
    let end = text.trim_end().len();
    ranges
        .into_iter()
        .filter_map(|(s, e)| {
            let (s, e) = (s.max(lead), e.min(end));
            (s < e).then(|| (s - lead, e - lead))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_become_byte_ranges_of_the_plain_snippet() {
        let (text, ranges) = marked("  the \u{1}héron\u{2} flew to \u{1}Zürich\u{2} ");
        assert_eq!(text, "the héron flew to Zürich");
        let words: Vec<&str> = ranges.iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(words, ["héron", "Zürich"]);
        assert_eq!(marked("no match"), ("no match".to_owned(), Vec::new()));
    }
}
