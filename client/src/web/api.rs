//! The web view's reading API: conversations (newest first, with forks),
//! search, and a conversation's transcript a page at a time.

use std::sync::Arc;

use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use agentx_shared::proto::{Scope, SessionSummary};

use super::Web;
use super::reply::{ApiError, ApiResult, ok};

/// Items of a transcript page.
const PAGE: usize = 200;

/// Which folder and agent a request is about (default: where `agentx web`
/// was started).
#[derive(Debug, Deserialize, Default)]
pub struct Where {
    #[serde(default)]
    pub folder: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
}

impl Where {
    pub fn scope(&self, web: &Web) -> Scope {
        Scope {
            folder: self
                .folder
                .clone()
                .filter(|f| !f.is_empty())
                .unwrap_or_else(|| web.scope.folder.clone()),
            agent: self
                .agent
                .clone()
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| web.scope.agent.clone()),
        }
    }
}

pub async fn info(State(web): State<Arc<Web>>) -> ApiResult {
    let approval = match web.approval {
        agentx_shared::proto::ApprovalPolicy::Auto => "auto",
        agentx_shared::proto::ApprovalPolicy::Never => "never",
        _ => "ask",
    };
    ok(json!({
        "folder": web.scope.folder,
        "agent": web.scope.agent,
        "approval": approval,
        "can_send": web.provider.is_ok(),
        "cannot_send": web.provider.as_ref().err(),
        "version": agentx_shared::version::VERSION,
    }))
}

fn ms(t: Option<&agentx_shared::proto::Timestamp>) -> i64 {
    t.map_or(0, |t| t.unix_ms)
}

/// A conversation as the page lists it.
pub fn summary_json(s: &SessionSummary) -> Value {
    json!({
        "id": s.id,
        "title": s.title,
        "folder": s.folder,
        "agent": s.agent,
        "created_ms": ms(s.created_at.as_ref()),
        "updated_ms": ms(s.updated_at.as_ref()),
        "turns": s.turns,
        "forked_from": s.forked_from.as_ref().map(|f| json!({"id": f.id, "turn": f.turn})),
        "location": crate::render::location(s.location()),
        "machine": s.machine,
    })
}

/// The folder's conversations, local and remote, newest first.
pub async fn sessions(State(web): State<Arc<Web>>, Query(at): Query<Where>) -> ApiResult {
    let scope = at.scope(&web);
    let reply = web.rpc(&scope).list_sessions(true).await?;
    let mut sessions = reply.sessions;
    sessions.sort_by_key(|s| std::cmp::Reverse(ms(s.updated_at.as_ref())));
    ok(json!({
        "folder": scope.folder,
        "agent": scope.agent,
        "sessions": sessions.iter().map(summary_json).collect::<Vec<_>>(),
        "remote_note": reply.remote_note,
        "remote_more": reply.remote_more,
    }))
}

#[derive(Debug, Deserialize)]
pub struct SearchQuery {
    q: String,
    #[serde(default)]
    all: bool,
    #[serde(flatten)]
    at: Where,
}

/// The same engine as `agentx search`.
pub async fn search(State(web): State<Arc<Web>>, Query(query): Query<SearchQuery>) -> ApiResult {
    if query.q.trim().is_empty() {
        return Err(ApiError::bad("type something to search for"));
    }
    let reply = web
        .rpc(&query.at.scope(&web))
        .search(&query.q, query.all, 50)
        .await?;
    let hits: Vec<Value> = reply
        .hits
        .iter()
        .map(|h| {
            json!({
                "session_id": h.session_id,
                "folder": h.folder,
                "agent": h.agent,
                "title": h.title,
                "turn": h.turn,
                "at_ms": ms(h.at.as_ref()),
                "snippet": h.snippet,
                "highlights": h.highlights.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
                "where": crate::render::location(h.r#where()),
                "machine": h.machine,
            })
        })
        .collect();
    ok(json!({
        "hits": hits,
        "indexing": reply.indexing,
        "remote_note": reply.remote_note,
    }))
}

#[derive(Debug, Deserialize)]
pub struct TranscriptQuery {
    id: String,
    /// 0-based; absent: the last page.
    #[serde(default)]
    page: Option<usize>,
    #[serde(default)]
    per: Option<usize>,
    #[serde(flatten)]
    at: Where,
}

/// One page of a conversation's whole transcript, items as stored (kinds
/// this build does not know are passed on for the page to show as they
/// are), with the checkpoints that fall in it.
pub async fn transcript(
    State(web): State<Arc<Web>>,
    Query(query): Query<TranscriptQuery>,
) -> ApiResult {
    let scope = query.at.scope(&web);
    let rpc = web.rpc(&scope);
    let (export, checkpoints) = tokio::join!(rpc.export(&query.id), rpc.checkpoints(&query.id));
    let document = export.map_err(|failed| failed.doing("reading the conversation"))?;
    let checkpoints = checkpoints?;
    let mut document: Value = serde_json::from_str(&document)
        .map_err(|e| ApiError::bad(format!("agentd sent an unreadable export: {e}")))?;
    let conversation = document
        .get_mut("conversation")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let items = match conversation.get("transcript") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    let per = query.per.unwrap_or(PAGE).clamp(1, 2000);
    let pages = items.len().div_ceil(per).max(1);
    let page = query.page.unwrap_or(pages - 1).min(pages - 1);
    let from = page * per;
    let to = (from + per).min(items.len());
    let turns = count_turns(items);
    let mut turn = count_turns(&items[..from]);
    let shown: Vec<Value> = items[from..to]
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut item = item.clone();
            if let Value::Object(fields) = &mut item {
                // An answer as the page shows it: Markdown, rendered here
                // and sanitized (the page inserts only this HTML).
                if fields.get("type").and_then(Value::as_str) == Some("assistant")
                    && let Some(text) = fields.get("text").and_then(Value::as_str)
                {
                    let html = crate::render::markdown::html::render(text);
                    fields.insert("html".into(), json!(html));
                }
                if fields.get("type").and_then(Value::as_str) == Some("compaction") {
                    compaction_fields(fields);
                }
                if fields.get("type").and_then(Value::as_str) == Some("user") {
                    turn += 1;
                    fields.insert("turn".into(), json!(turn));
                    // `agentx diff N`: 1 is the last message.
                    fields.insert("message".into(), json!(turns + 1 - turn));
                }
                fields.insert("index".into(), json!(from + i));
            }
            item
        })
        .collect();
    let marks: Vec<Value> = checkpoints
        .checkpoints
        .iter()
        .filter(|c| (c.transcript_len as usize) > from && (c.transcript_len as usize) <= to)
        .map(|c| {
            json!({
                "index": c.index,
                "id": c.id,
                "after_item": c.transcript_len.saturating_sub(1),
                "created_ms": ms(c.created_at.as_ref()),
            })
        })
        .collect();
    let field = |name: &str| conversation.get(name).cloned().unwrap_or(Value::Null);
    ok(json!({
        "id": query.id,
        "folder": scope.folder,
        "agent": scope.agent,
        "title": field("title"),
        "forked_from": field("forked_from"),
        "turns": turns,
        "total_items": items.len(),
        "page": page,
        "pages": pages,
        "per": per,
        "items": shown,
        "checkpoints": marks,
        "checkpoint_count": checkpoints.checkpoints.len(),
        "head": checkpoints.head,
    }))
}

/// A compaction as the page shows it: its boundary line and a note on why
/// and how; the model's replacement context (large) stays out.
fn compaction_fields(fields: &mut serde_json::Map<String, Value>) {
    let number = |name: &str| fields.get(name).and_then(Value::as_u64).unwrap_or(0);
    let text = |name: &str| {
        fields
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let event = agentx_shared::proto::CompactionEvent {
        tokens_before: number("tokens_before"),
        tokens_after: number("tokens_after"),
        reason: text("reason"),
        trimmed_only: text("summary").is_empty(),
    };
    fields.remove("context");
    fields.insert(
        "line".into(),
        json!(agentx_shared::conversation::Item::compaction_line(
            event.tokens_before,
            event.tokens_after
        )),
    );
    fields.insert("note".into(), json!(crate::turn::compaction_note(&event)));
}

fn is_user(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("user")
}

fn count_turns(items: &[Value]) -> usize {
    items.iter().filter(|i| is_user(i)).count()
}
