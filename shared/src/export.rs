//! The conversation export document (`agentx export`, `agentx import`): a
//! versioned JSON format, its validation, and the Markdown rendering.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::conversation::{Item, Usage};

/// The `format` field of every export document.
pub const FORMAT_NAME: &str = "agentx-conversation";
/// The newest version this build writes and reads.
pub const VERSION: u32 = 1;
/// Most checkpoints a conversation keeps (agentd keeps the newest 20).
pub const MAX_CHECKPOINTS: usize = 20;

/// An exported conversation: everything needed to continue it elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub format: String,
    pub version: u32,
    pub exported_at: String,
    /// agentx version that wrote the file.
    pub exported_by: String,
    pub conversation: Conversation,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: String,
    pub title: String,
    pub folder: String,
    pub agent: String,
    pub created_at: String,
    pub updated_at: String,
    /// The server-side chain head when exported (a cache; import drops it).
    #[serde(default)]
    pub response_id: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub turns: u32,
    #[serde(default)]
    pub forked_from: Option<ForkRef>,
    /// Oldest first.
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
    /// The full local transcript, oldest first.
    pub transcript: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRef {
    pub id: String,
    pub turn: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    #[serde(default)]
    pub response_id: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub last_user_message: String,
    #[serde(default)]
    pub last_assistant_message: String,
    pub turns: u32,
    /// How many transcript entries the checkpoint covers.
    pub transcript_items: u64,
    pub created_at: String,
}

/// One transcript item with the time it was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: String,
    #[serde(flatten)]
    pub item: Item,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("not an agentx conversation export: {0}")]
    Malformed(String),
    #[error("this export is format version {0}, newer than this agentx reads; upgrade agentx")]
    Newer(u32),
}

/// RFC 3339 of Unix milliseconds.
pub fn time_of(ms: i64) -> String {
    crate::time::rfc3339(
        SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
    )
}

/// Unix milliseconds of an RFC 3339 time.
pub fn ms_of(text: &str) -> Result<i64, ExportError> {
    humantime::parse_rfc3339_weak(text)
        .map(crate::time::unix_ms)
        .map_err(|e| ExportError::Malformed(format!("bad time {text:?}: {e}")))
}

/// What validation needs of a transcript that was not kept (see
/// [`Document::parse_each`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub items: u64,
    pub users: u64,
}

impl Document {
    /// Parses and validates an export document.
    pub fn parse(text: &str) -> Result<Self, ExportError> {
        let mut transcript = Vec::new();
        let mut doc = Self::parse_each(text, |entry| {
            transcript.push(entry);
            Ok(())
        })?;
        doc.conversation.transcript = transcript;
        Ok(doc)
    }

    /// Parses and validates an export document, handing each transcript
    /// entry to `each` as it is read instead of keeping it (the returned
    /// document's transcript is empty): an import holds one entry at a
    /// time, not the whole transcript. An error of `each` ends the parse.
    pub fn parse_each(
        text: &str,
        mut each: impl FnMut(Entry) -> Result<(), String>,
    ) -> Result<Self, ExportError> {
        // The format and version first (a pass that keeps nothing else), so
        // a newer or foreign file gets its own error; then the document,
        // parsed once (no intermediate tree: a 100 MB export is not held
        // twice).
        #[derive(Deserialize)]
        struct Head {
            format: Option<serde_json::Value>,
            version: Option<serde_json::Value>,
        }
        let head = match serde_json::from_str::<Head>(text) {
            Ok(head) => head,
            // JSON, but not an object: it has no format field.
            Err(e) if e.is_data() => Head {
                format: None,
                version: None,
            },
            Err(e) => return Err(ExportError::Malformed(format!("not JSON: {e}"))),
        };
        if head.format.as_ref().and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
            return Err(ExportError::Malformed(format!(
                "the \"format\" field must be {FORMAT_NAME:?}"
            )));
        }
        match head.version.as_ref().and_then(serde_json::Value::as_u64) {
            Some(v) if v > u64::from(VERSION) => {
                return Err(ExportError::Newer(u32::try_from(v).unwrap_or(u32::MAX)));
            }
            Some(v) if v >= 1 => {}
            _ => return Err(ExportError::Malformed("no valid \"version\" field".into())),
        }
        let mut counted = Counted::default();
        let mut counting = |entry: Entry| {
            ms_of(&entry.at).map_err(|e| e.to_string())?;
            counted.items += 1;
            if matches!(entry.item, Item::User { .. }) {
                counted.users += 1;
            }
            each(entry)
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let doc = serde::de::DeserializeSeed::deserialize(
            streaming::DocumentSeed(&mut counting),
            &mut de,
        )
        .and_then(|doc| de.end().map(|()| doc))
        .map_err(|e| ExportError::Malformed(e.to_string()))?;
        doc.validate(counted)?;
        Ok(doc)
    }

    fn validate(&self, counted: Counted) -> Result<(), ExportError> {
        let c = &self.conversation;
        let bad = |m: String| Err(ExportError::Malformed(m));
        if c.id.is_empty() || c.id.contains('/') || c.id.contains("..") || c.id.starts_with('.') {
            return bad(format!("invalid conversation id {:?}", c.id));
        }
        if c.forked_from.as_ref().is_some_and(|f| f.id == c.id) {
            return bad(format!(
                "conversation {:?} names itself as its fork origin",
                c.id
            ));
        }
        ms_of(&c.created_at)?;
        ms_of(&c.updated_at)?;
        let users = counted.users;
        if u64::from(c.turns) > users {
            return bad(format!(
                "\"turns\" is {} but the transcript has {users} user message(s)",
                c.turns
            ));
        }
        if c.checkpoints.len() > MAX_CHECKPOINTS {
            return bad(format!(
                "{} checkpoints; a conversation keeps at most {MAX_CHECKPOINTS}",
                c.checkpoints.len()
            ));
        }
        if let Some(cp) = c.checkpoints.iter().find(|cp| cp.turns > c.turns) {
            return bad(format!(
                "a checkpoint at turn {} of a conversation with {} turn(s)",
                cp.turns, c.turns
            ));
        }
        let len = counted.items;
        let mut last = 0;
        for (i, cp) in c.checkpoints.iter().enumerate() {
            if cp.transcript_items > len || cp.transcript_items < last {
                return bad(format!(
                    "checkpoint {} covers {} transcript entries; the transcript has {len} \
                     (checkpoints must be oldest first)",
                    i + 1,
                    cp.transcript_items
                ));
            }
            last = cp.transcript_items;
            ms_of(&cp.created_at)?;
        }
        Ok(())
    }

    /// A readable Markdown rendering (not importable).
    pub fn to_markdown(&self) -> String {
        let c = &self.conversation;
        let mut out = String::new();
        let title = if c.title.is_empty() {
            "(untitled)"
        } else {
            &c.title
        };
        out.push_str(&format!("# {title}\n\n"));
        out.push_str(&format!(
            "- conversation `{}` (agent `{}`)\n- folder `{}`\n- created {}, updated {}\n- {} turn(s), {} tokens\n",
            c.id, c.agent, c.folder, c.created_at, c.updated_at, c.turns, c.usage.total_tokens
        ));
        if let Some(f) = &c.forked_from {
            out.push_str(&format!("- forked from `{}` at turn {}\n", f.id, f.turn));
        }
        let fence = |text: &str| {
            let mut ticks = "```".to_owned();
            while text.contains(&ticks) {
                ticks.push('`');
            }
            format!("{ticks}\n{}\n{ticks}\n", text.trim_end())
        };
        let mut turn = 0;
        for entry in &c.transcript {
            match &entry.item {
                Item::User { text } => {
                    turn += 1;
                    // Fenced: message text can forge no heading and
                    // leave no fence open.
                    out.push_str(&format!(
                        "\n## Turn {turn} — user ({})\n\n{}",
                        entry.at,
                        fence(text)
                    ));
                }
                Item::Assistant { text } => {
                    out.push_str(&format!("\n**assistant**\n\n{}", fence(text)));
                }
                Item::FunctionCall {
                    name, arguments, ..
                } => {
                    let shown = serde_json::from_str::<serde_json::Value>(arguments)
                        .ok()
                        .and_then(|v| v.get("command").and_then(|c| c.as_str()).map(str::to_owned))
                        .unwrap_or_else(|| arguments.clone());
                    out.push_str(&format!("\n**tool `{name}`**\n\n{}", fence(&shown)));
                }
                Item::FunctionOutput { output, .. } => {
                    out.push_str(&format!("\n**output**\n\n{}", fence(output)));
                }
                Item::Compaction {
                    summary,
                    tokens_before,
                    tokens_after,
                    ..
                } => {
                    let line = Item::compaction_line(*tokens_before, *tokens_after);
                    out.push_str(&format!("\n---\n\n*{line}*\n"));
                    if !summary.is_empty() {
                        out.push_str(&format!("\n**handoff summary**\n\n{}", fence(summary)));
                    }
                    out.push_str("\n---\n");
                }
            }
        }
        out
    }
}

/// The seeds that parse a document with its transcript handed out entry
/// by entry: every other field is gathered as JSON and read by the derived
/// `Deserialize` (so defaults and rules stay the derive's).
mod streaming {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::{Conversation, Document, Entry};

    type Each<'a> = &'a mut dyn FnMut(Entry) -> Result<(), String>;

    /// The fields gathered beside the conversation and beside the
    /// transcript; any other is skipped unread, as the derive skips it (a
    /// test checks these name every field).
    pub(super) const DOCUMENT_FIELDS: &[&str] =
        &["format", "version", "exported_at", "exported_by"];
    pub(super) const CONVERSATION_FIELDS: &[&str] = &[
        "id",
        "title",
        "folder",
        "agent",
        "created_at",
        "updated_at",
        "response_id",
        "usage",
        "turns",
        "forked_from",
        "checkpoints",
    ];

    /// The value of a field: kept when `known`, else skipped unread.
    fn gather<'de, A: MapAccess<'de>>(
        map: &mut A,
        rest: &mut Map<String, Value>,
        key: String,
        known: &[&str],
    ) -> Result<(), A::Error> {
        if known.contains(&key.as_str()) {
            rest.insert(key, map.next_value()?);
        } else {
            map.next_value::<de::IgnoredAny>()?;
        }
        Ok(())
    }

    /// A whole document.
    pub(super) struct DocumentSeed<'a>(pub(super) Each<'a>);

    /// The document's own fields; its conversation comes from the seed.
    #[derive(serde::Deserialize)]
    struct Head {
        format: String,
        version: u32,
        exported_at: String,
        exported_by: String,
    }

    impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
        type Value = Document;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Document, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for DocumentSeed<'_> {
        type Value = Document;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an agentx conversation export (a JSON object)")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
            let mut rest = Map::new();
            let mut conversation = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "conversation" {
                    if conversation.is_some() {
                        return Err(de::Error::duplicate_field("conversation"));
                    }
                    conversation = Some(map.next_value_seed(ConversationSeed(&mut *self.0))?);
                } else {
                    gather(&mut map, &mut rest, key, DOCUMENT_FIELDS)?;
                }
            }
            let head: Head =
                serde_json::from_value(Value::Object(rest)).map_err(de::Error::custom)?;
            Ok(Document {
                format: head.format,
                version: head.version,
                exported_at: head.exported_at,
                exported_by: head.exported_by,
                conversation: conversation
                    .ok_or_else(|| de::Error::missing_field("conversation"))?,
            })
        }
    }

    /// The conversation, its transcript handed out.
    struct ConversationSeed<'a>(Each<'a>);

    impl<'de> DeserializeSeed<'de> for ConversationSeed<'_> {
        type Value = Conversation;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Conversation, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for ConversationSeed<'_> {
        type Value = Conversation;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a conversation (a JSON object)")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Conversation, A::Error> {
            let mut rest = Map::new();
            let mut transcript = false;
            while let Some(key) = map.next_key::<String>()? {
                if key == "transcript" {
                    if transcript {
                        return Err(de::Error::duplicate_field("transcript"));
                    }
                    map.next_value_seed(TranscriptSeed(&mut *self.0))?;
                    transcript = true;
                } else {
                    gather(&mut map, &mut rest, key, CONVERSATION_FIELDS)?;
                }
            }
            if !transcript {
                return Err(de::Error::missing_field("transcript"));
            }
            rest.insert("transcript".into(), Value::Array(Vec::new()));
            serde_json::from_value(Value::Object(rest)).map_err(de::Error::custom)
        }
    }

    /// The transcript: each entry to the callback, none kept.
    struct TranscriptSeed<'a>(Each<'a>);

    impl<'de> DeserializeSeed<'de> for TranscriptSeed<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for TranscriptSeed<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a transcript (a JSON array)")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(entry) = seq.next_element::<Entry>()? {
                (self.0)(entry).map_err(de::Error::custom)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Document {
        Document {
            format: FORMAT_NAME.into(),
            version: VERSION,
            exported_at: time_of(1000),
            exported_by: "test".into(),
            conversation: Conversation {
                id: "abc".into(),
                title: "t".into(),
                folder: "/f".into(),
                agent: "default".into(),
                created_at: time_of(1000),
                updated_at: time_of(2000),
                response_id: None,
                usage: Usage::default(),
                turns: 1,
                forked_from: None,
                checkpoints: vec![Checkpoint {
                    response_id: None,
                    usage: Usage::default(),
                    last_user_message: "hi".into(),
                    last_assistant_message: "yo".into(),
                    turns: 1,
                    transcript_items: 2,
                    created_at: time_of(2000),
                }],
                transcript: vec![
                    Entry {
                        at: time_of(1500),
                        item: Item::User { text: "hi".into() },
                    },
                    Entry {
                        at: time_of(1600),
                        item: Item::Assistant { text: "yo".into() },
                    },
                ],
            },
        }
    }

    #[test]
    fn a_document_round_trips_and_validates() {
        let doc = sample();
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(Document::parse(&text).unwrap(), doc);
        assert!(doc.to_markdown().contains("## Turn 1"));
    }

    /// The streaming parse gathers every field the structs have (a field
    /// added to them and not to its lists would be dropped on import).
    #[test]
    fn the_streamed_field_lists_name_every_field() {
        let v = serde_json::to_value(sample()).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let mut doc: Vec<String> = streaming::DOCUMENT_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .chain(["conversation".to_owned()])
            .collect();
        doc.sort();
        assert_eq!(keys(&v), doc);
        let mut conv: Vec<String> = streaming::CONVERSATION_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .chain(["transcript".to_owned()])
            .collect();
        conv.sort();
        assert_eq!(keys(&v["conversation"]), conv);
    }

    #[test]
    fn parse_each_hands_out_the_transcript_and_keeps_none_of_it() {
        let mut v = serde_json::to_value(sample()).unwrap();
        // Unknown fields are skipped at both levels, wherever they are.
        v["extra"] = serde_json::json!({"big": [1, 2, 3]});
        v["conversation"]["later"] = "x".into();
        let mut seen = Vec::new();
        let doc = Document::parse_each(&v.to_string(), |e| {
            seen.push(e);
            Ok(())
        })
        .unwrap();
        assert!(doc.conversation.transcript.is_empty());
        assert_eq!(seen, sample().conversation.transcript);
        let mut whole = doc;
        whole.conversation.transcript = seen;
        assert_eq!(whole, sample());
        // The callback's error ends the parse, named.
        let err = Document::parse_each(&v.to_string(), |_| Err("disk full".into())).unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        // A bad entry time is refused as it is read.
        v["conversation"]["transcript"][1]["at"] = "yesterday".into();
        assert!(Document::parse_each(&v.to_string(), |_| Ok(())).is_err());
    }

    #[test]
    fn newer_and_malformed_documents_are_refused() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v["version"] = 2.into();
        let err = Document::parse(&v.to_string()).unwrap_err();
        assert!(matches!(err, ExportError::Newer(2)), "{err}");
        let mut v = serde_json::to_value(sample()).unwrap();
        v["conversation"]["checkpoints"][0]["transcript_items"] = 9.into();
        assert!(Document::parse(&v.to_string()).is_err());
        assert!(Document::parse("{}").is_err());
        assert!(Document::parse("nope").is_err());
    }

    #[test]
    fn inconsistent_documents_are_refused() {
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = serde_json::to_value(sample()).unwrap();
            f(&mut v);
            Document::parse(&v.to_string())
        };
        use serde_json::Value;
        assert!(with(&|_| {}).is_ok());
        assert!(with(&|v| v["conversation"]["turns"] = 1_000_000.into()).is_err());
        assert!(
            with(
                &|v| v["conversation"]["forked_from"] = serde_json::json!({"id": "abc", "turn": 1})
            )
            .is_err()
        );
        let cp = serde_json::to_value(&sample().conversation.checkpoints[0]).unwrap();
        assert!(with(&|v| v["conversation"]["checkpoints"] = vec![cp.clone(); 21].into()).is_err());
        assert!(with(&|v| v["conversation"]["checkpoints"] = vec![cp.clone(); 20].into()).is_ok());
        assert!(with(&|v| v["conversation"]["checkpoints"][0]["turns"] = 2.into()).is_err());
    }

    #[test]
    fn message_text_cannot_forge_markdown_structure() {
        let mut doc = sample();
        doc.conversation.transcript[0].item = Item::User {
            text: "hi\n## Turn 99 — user\n```".into(),
        };
        doc.conversation.transcript[1].item = Item::Assistant {
            text: "````\n# Forged\n".into(),
        };
        let md = doc.to_markdown();
        // CommonMark: a fence closes on a line of at least as many ticks.
        let mut open: Option<usize> = None;
        let mut headings = Vec::new();
        for line in md.lines() {
            let ticks = line.len() - line.trim_start_matches('`').len();
            match open {
                None if ticks >= 3 => open = Some(ticks),
                None if line.starts_with('#') => headings.push(line),
                Some(n) if ticks >= n && line.trim_start_matches('`').trim().is_empty() => {
                    open = None;
                }
                _ => {}
            }
        }
        assert_eq!(open, None, "{md}");
        assert_eq!(headings.len(), 2, "{md}");
        assert!(headings[1].starts_with("## Turn 1 "), "{md}");
    }
}
