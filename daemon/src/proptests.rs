//! Property tests of every on-disk reader and of both providers' event
//! handling: whatever the input (at most 64 KiB), they return — an error
//! or a value — without panicking and in bounded time; where a writer
//! exists, what it writes reads back unchanged. The same entry points back
//! the fuzz targets in `fuzz/` (see [`crate::fuzzing`]).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Value, json};

use agentx_shared::conversation::Item;

use crate::fuzzing;
use crate::snapshot::manifest::{Entry, Hash, Kind, Manifest, Stored};
use crate::store::conversation::{Conversation, ConversationDoc};

const MAX_INPUT: usize = 64 * 1024;

/// Generous even for a debug build on a loaded machine; the inputs are
/// small, so only a blow-up (quadratic or worse) comes near it.
const TIME_LIMIT: Duration = Duration::from_secs(5);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs `f`, failing the case if it took longer than [`TIME_LIMIT`].
fn bounded<T>(f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    prop_assert!(took < TIME_LIMIT, "took {took:?}");
    Ok(out)
}

/// Arbitrary bytes, mostly short, up to [`MAX_INPUT`].
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        7 => prop::collection::vec(any::<u8>(), 0..256),
        1 => prop::collection::vec(any::<u8>(), 0..=MAX_INPUT),
    ]
}

/// `base` with a few bytes overwritten, inserted or cut (a torn or bit-rotted file).
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len().max(1);
    (
        prop::collection::vec((0..len, any::<u8>(), 0..3u8), 1..8),
        0..=len,
    )
        .prop_map(move |(edits, keep)| {
            let mut out = base.clone();
            for (at, byte, how) in edits {
                let at = at.min(out.len());
                match how {
                    0 if at < out.len() => out[at] = byte,
                    1 => out.insert(at, byte),
                    _ if at < out.len() => {
                        out.remove(at);
                    }
                    _ => {}
                }
            }
            out.truncate(keep.max(out.len().saturating_sub(16)));
            out
        })
}

/// Field names the readers look at, so that random objects reach past the
/// first lookup.
const KEYS: &[&str] = &[
    "type",
    "id",
    "response",
    "usage",
    "item",
    "content",
    "text",
    "delta",
    "choices",
    "tool_calls",
    "index",
    "function",
    "name",
    "arguments",
    "finish_reason",
    "error",
    "code",
    "message",
    "call_id",
    "incomplete_details",
    "reason",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens_details",
    "output_tokens_details",
    "prompt_tokens_details",
    "cached_tokens",
    "reasoning_tokens",
    "format",
    "folder",
    "snaps",
    "owners",
    "manifest",
    "at",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => ".{0,12}",
    ]
}

fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<f64>().prop_map(Value::from),
        (0u64..10).prop_map(Value::from),
    ]
    .boxed()
}

/// Arbitrary JSON, biased towards the names and shapes the readers expect.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        ".{0,24}".prop_map(Value::from),
        prop::sample::select(KEYS).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A usage object with any token counts, up to `u64::MAX`.
fn usage() -> impl Strategy<Value = Value> {
    let count = prop_oneof![number(), json_value()];
    prop::collection::btree_map(
        prop::sample::select(&KEYS[21..31]).prop_map(str::to_owned),
        count,
        0..6,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,40}", "[a-z ]{0,8}", Just(String::new())]
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        text().prop_map(|text| Item::User { text }),
        text().prop_map(|text| Item::Assistant { text }),
        (text(), text(), text()).prop_map(|(call_id, name, arguments)| Item::FunctionCall {
            call_id,
            name,
            arguments
        }),
        (
            text(),
            text(),
            proptest::collection::vec(("[a-z/]{0,12}", "[A-Za-z0-9+/=]{0,16}"), 0..2)
        )
            .prop_map(|(call_id, output, images)| Item::FunctionOutput {
                call_id,
                output,
                images: images
                    .into_iter()
                    .map(|(mime, base64)| agentx_shared::conversation::ToolImage { mime, base64 })
                    .collect(),
            }),
    ]
}

fn valid_doc() -> Vec<u8> {
    let doc = ConversationDoc::new("s".into(), "/tmp/p".into(), "default".into(), 1);
    serde_json::to_vec_pretty(&doc).unwrap_or_default()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn session_doc_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::session_doc(&data))?;
    }

    #[test]
    fn session_doc_survives_arbitrary_json(value in json_value()) {
        let data = serde_json::to_vec(&value).unwrap_or_default();
        let _ = bounded(|| fuzzing::session_doc(&data))?;
    }

    #[test]
    fn a_garbled_search_index_is_rebuilt_never_fatal(
        data in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let searched = bounded(|| fuzzing::search_index(&data))?;
        prop_assert!(searched.is_ok(), "{searched:?}");
    }

    #[test]
    fn session_doc_survives_damage(data in mutated(valid_doc())) {
        let _ = bounded(|| fuzzing::session_doc(&data))?;
    }

    #[test]
    fn journal_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::journal(&data))?;
    }

    #[test]
    fn journal_survives_arbitrary_json_lines(
        lines in prop::collection::vec(json_value(), 0..16),
        committed in any::<u8>(),
    ) {
        let mut data = vec![committed];
        for line in &lines {
            data.extend_from_slice(&serde_json::to_vec(line).unwrap_or_default());
            data.push(b'\n');
        }
        let _ = bounded(|| fuzzing::journal(&data))?;
    }

    #[test]
    fn manifest_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::manifest(&data))?;
    }

    #[test]
    fn manifest_survives_arbitrary_entry_lists(
        magic in prop::sample::select(vec![&b"AXM2"[..], &b"AXM1"[..], &b"AXMX"[..]]),
        count in prop_oneof![0u64..8, any::<u64>()],
        body in bytes(),
        delta in any::<bool>(),
    ) {
        // Valid framing around a garbage entry list: the entry decoder runs.
        let mut raw = magic.to_vec();
        raw.extend_from_slice(&count.to_le_bytes());
        raw.extend_from_slice(&body);
        let compressed = zstd::bulk::compress(&raw, 1).unwrap_or_default();
        let mut file = if delta {
            let mut f = b"AXD1".to_vec();
            f.extend_from_slice(&2u32.to_le_bytes());
            f.extend_from_slice(b"b1");
            f
        } else {
            b"AXF1".to_vec()
        };
        file.extend_from_slice(&compressed);
        let _ = bounded(|| fuzzing::manifest(&file))?;
    }

    #[test]
    fn manifest_files_round_trip(stored in stored()) {
        let bytes = stored.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&Stored::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?, &stored);
        if let Stored::Full(m) = &stored {
            let inner = m.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&Manifest::decode(&inner).map_err(|e| TestCaseError::fail(e.to_string()))?, m);
        }
    }

    #[test]
    fn damaged_manifest_files_are_errors_not_panics(
        data in stored().prop_flat_map(|s| mutated(s.encode().unwrap_or_default())),
    ) {
        let _ = bounded(|| fuzzing::manifest(&data))?;
    }

    #[test]
    fn timeline_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::timeline(&data))?;
    }

    #[test]
    fn timeline_keeps_only_snapshots_with_plain_ids(
        snaps in prop::collection::vec((snap_id(), snap_id(), json_value()), 0..8),
    ) {
        let plain = |id: &str| crate::snapshot::manifest::plain_id(id);
        let want = snaps.iter().filter(|(id, m, _)| plain(id) && plain(m)).count();
        let doc = json!({
            "folder": "/tmp/p",
            "snaps": snaps.iter().map(|(id, manifest, label)| json!({
                "id": id,
                "manifest": manifest,
                "created_at": 1,
                "files": 0,
                "bytes": 0,
                "changed": 0,
                "owners": [{"session": "s", "phase": "manual", "pair": "", "label": label.to_string()}],
            })).collect::<Vec<_>>(),
        });
        let data = serde_json::to_vec(&doc).unwrap_or_default();
        prop_assert_eq!(bounded(|| fuzzing::timeline(&data))?, Some(want));
    }

    #[test]
    fn a_first_header_block_passed_on_decodes(data in bytes()) {
        let _ = bounded(|| fuzzing::first_header_block(&data))?;
    }

    #[test]
    fn pack_index_survives_arbitrary_bytes(data in bytes()) {
        prop_assert!(bounded(|| fuzzing::pack_index(&data))? <= data.len() / 52);
    }

    #[test]
    fn pack_index_round_trips_records_inside_the_pack(
        records in prop::collection::vec(
            (any::<Hash>(), prop_oneof![0u64..4096, any::<u64>()], any::<u32>(), any::<u64>()),
            0..64,
        ),
        pack_size in prop_oneof![0u64..1 << 20, any::<u64>()],
        torn in 0usize..52,
    ) {
        use crate::snapshot::{Loc, encode_index, parse_index};
        let records: Vec<(Hash, Loc)> = records
            .into_iter()
            .map(|(hash, offset, len, raw)| (hash, Loc { pack: 7, offset, len, raw }))
            .collect();
        let mut idx = encode_index(&records);
        // A torn trailing record is ignored.
        idx.extend(std::iter::repeat_n(0xa5, torn));
        let inside: Vec<(Hash, Loc)> = records
            .into_iter()
            .filter(|(_, l)| l.offset.checked_add(u64::from(l.len)).is_some_and(|e| e <= pack_size))
            .collect();
        prop_assert_eq!(parse_index(&idx, 7, pack_size), inside);
    }

    #[test]
    fn responses_stream_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::responses_sse(&data))?;
    }

    #[test]
    fn chat_stream_survives_arbitrary_bytes(data in bytes()) {
        let _ = bounded(|| fuzzing::chat_sse(&data))?;
    }

    #[test]
    fn responses_events_survive_arbitrary_json(
        events in prop::collection::vec((response_event_name(), responses_event()), 0..6),
    ) {
        let events: Vec<(String, String)> = events
            .into_iter()
            .map(|(name, data)| (name, data.to_string()))
            .collect();
        let _ = bounded(|| {
            fuzzing::responses_events(events.iter().map(|(e, d)| (e.as_str(), d.as_str())))
        })?;
    }

    #[test]
    fn chat_events_survive_arbitrary_json(
        chunks in prop::collection::vec(chat_chunk(), 0..6),
        done in any::<bool>(),
    ) {
        let mut data: Vec<String> = chunks.iter().map(Value::to_string).collect();
        if done {
            data.push("[DONE]".into());
        }
        let _ = bounded(|| fuzzing::chat_events(data.iter().map(String::as_str)))?;
    }

    #[test]
    fn any_token_counts_are_read(
        input in any::<u64>(),
        output in any::<u64>(),
        total in prop::option::of(any::<u64>()),
    ) {
        let mut usage = json!({"input_tokens": input, "output_tokens": output,
            "prompt_tokens": input, "completion_tokens": output});
        if let Some(total) = total {
            usage["total_tokens"] = json!(total);
        }
        let completed = json!({"type": "response.completed",
            "response": {"id": "r", "usage": usage}}).to_string();
        prop_assert!(fuzzing::responses_events([("", completed.as_str())]).is_ok());
        let chunk = json!({"choices": [{"delta": {}, "finish_reason": "stop"}],
            "usage": usage}).to_string();
        prop_assert!(fuzzing::chat_events([chunk.as_str()]).is_ok());
        // Totals across responses saturate rather than overflow.
        let one = crate::turn::responses::parse_usage(&usage);
        let mut sum = one;
        sum.add(&one);
        prop_assert!(sum.input_tokens >= one.input_tokens);
    }

    #[test]
    fn sse_framing_round_trips_single_line_events(
        events in prop::collection::vec(("[a-z._]{0,20}", json_value()), 0..8),
        chunk in any::<u8>(),
    ) {
        let mut wire = vec![chunk];
        let mut want = Vec::new();
        for (name, value) in &events {
            let data = value.to_string();
            if !name.is_empty() {
                wire.extend_from_slice(format!("event: {name}\n").as_bytes());
            }
            wire.extend_from_slice(format!("data: {data}\n\n").as_bytes());
            let name = if name.is_empty() { "message" } else { name.as_str() };
            want.push((name.to_owned(), data));
        }
        let (got, broken) = bounded(|| fuzzing::sse_events(&wire))?;
        prop_assert_eq!(broken, None);
        prop_assert_eq!(got, want);
    }
}

proptest! {
    // Each case writes and fsyncs real files: fewer of them.
    #![proptest_config(config(32))]

    #[test]
    fn sessions_read_back_what_was_written(
        doc in doc_fields(),
        batches in prop::collection::vec(prop::collection::vec(item(), 0..4), 0..4),
    ) {
        let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
        let dir = tempfile::tempdir().map_err(|e| fail(&e))?;
        let mut session = Conversation::create(dir.path(), doc).map_err(|e| fail(&e))?;
        let mut all = Vec::new();
        for (n, items) in batches.iter().enumerate() {
            session.append(items, n as i64).map_err(|e| fail(&e))?;
            all.extend(items.iter().cloned());
        }
        session.save().map_err(|e| fail(&e))?;
        let loaded = Conversation::load(&session.paths.doc).map_err(|e| fail(&e))?;
        prop_assert_eq!(&loaded.doc, &session.doc);
        prop_assert_eq!(loaded.transcript().map_err(|e| fail(&e))?, all);
    }
}

fn doc_fields() -> impl Strategy<Value = ConversationDoc> {
    (
        "[a-z0-9-]{1,20}",
        text(),
        text(),
        text(),
        any::<i64>(),
        (any::<u64>(), any::<u64>(), any::<u32>(), any::<bool>()),
        (text(), text(), prop::collection::vec(item(), 0..3)),
    )
        .prop_map(
            |(
                id,
                folder,
                agent,
                title,
                now,
                (input, total, turns, approve),
                (user, asst, unsent),
            )| {
                let mut doc = ConversationDoc::new(id, folder, agent, now);
                doc.title = title;
                doc.usage.input_tokens = input;
                doc.usage.total_tokens = total;
                doc.turns = turns;
                doc.approve_all = approve;
                doc.last_user = user;
                doc.last_assistant = asst;
                doc.unsent = unsent;
                doc
            },
        )
}

fn snap_id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9a-f]{13}(-[0-9])?",
        1 => prop::sample::select(vec!["", ".", "..", "../x", "a/b", "a\0b", "é"]).prop_map(str::to_owned),
        1 => ".{0,70}",
    ]
}

fn path_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..24)
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        path_bytes(),
        prop::sample::select(vec![Kind::File, Kind::Symlink, Kind::Dir, Kind::Skipped]),
        (
            any::<u32>(),
            any::<u64>(),
            any::<i64>(),
            any::<i64>(),
            any::<u64>(),
            any::<bool>(),
        ),
        (any::<Hash>(), path_bytes()),
        (any::<u32>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |(
                path,
                kind,
                (mode, size, mtime_ns, ctime_ns, ino, racy),
                (hash, target),
                (uid, gid, nlink),
            )| {
                // What the format keeps: a hash for files, a target for
                // symlinks and skipped paths.
                let (hash, target) = match kind {
                    Kind::File => (hash, Vec::new()),
                    Kind::Symlink | Kind::Skipped => ([0; 32], target),
                    Kind::Dir => ([0; 32], Vec::new()),
                };
                Entry {
                    path,
                    kind,
                    mode,
                    size,
                    mtime_ns,
                    ctime_ns,
                    ino,
                    racy,
                    hash,
                    target,
                    uid,
                    gid,
                    nlink,
                }
            },
        )
}

fn stored() -> impl Strategy<Value = Stored> {
    let entries = prop::collection::vec(entry(), 0..24).boxed();
    prop_oneof![
        entries.clone().prop_map(|mut entries| {
            // A manifest lists each path once, in order.
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            entries.dedup_by(|a, b| a.path == b.path);
            Stored::Full(Manifest::from_entries(entries))
        }),
        (
            "[0-9a-f]{13}(-[0-9])?",
            entries,
            prop::collection::vec(path_bytes(), 0..8),
        )
            .prop_map(|(base, upserts, removed)| Stored::Delta {
                base,
                upserts,
                removed
            }),
    ]
}

fn response_event_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(RESPONSE_KINDS).prop_map(str::to_owned),
        Just("message".to_owned()),
        ".{0,12}",
    ]
}

const RESPONSE_KINDS: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.output_text.delta",
    "response.output_item.done",
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// A Responses API event: a known (or any) type with fields of any shape.
fn responses_event() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        4 => prop::sample::select(RESPONSE_KINDS).prop_map(Value::from),
        1 => json_value(),
    ];
    let response = (
        prop_oneof![".{0,8}".prop_map(Value::from), json_value()],
        prop_oneof![usage(), json_value()],
        json_value(),
    )
        .prop_map(|(id, usage, error)| json!({"id": id, "usage": usage, "error": error}));
    let item = (
        prop::sample::select(vec!["function_call", "message", "reasoning"]),
        json_value(),
        prop::collection::vec(
            (prop::sample::select(vec!["output_text", "refusal"]), json_value()),
            0..4,
        ),
    )
        .prop_map(|(t, any, parts)| {
            json!({
                "type": t,
                "call_id": any,
                "name": "shell",
                "arguments": any,
                "content": parts.into_iter().map(|(t, text)| json!({"type": t, "text": text})).collect::<Vec<_>>(),
            })
        });
    (kind, response, item, json_value(), json_value()).prop_map(
        |(kind, response, item, delta, other)| {
            json!({"type": kind, "response": response, "item": item, "delta": delta, "error": other})
        },
    )
}

/// A Chat Completions chunk: choices with text and tool-call deltas of any shape.
fn chat_chunk() -> impl Strategy<Value = Value> {
    let tool_call = (
        prop_oneof![number(), json_value()],
        json_value(),
        json_value(),
        json_value(),
    )
        .prop_map(|(index, id, name, args)| {
            json!({"index": index, "id": id, "function": {"name": name, "arguments": args}})
        });
    let choice = (
        json_value(),
        prop::collection::vec(tool_call, 0..4),
        json_value(),
    )
        .prop_map(|(content, calls, finish)| {
            json!({"delta": {"content": content, "tool_calls": calls}, "finish_reason": finish})
        });
    prop_oneof![
        8 => (json_value(), prop::collection::vec(choice, 0..3), prop_oneof![usage(), json_value()])
            .prop_map(|(id, choices, usage)| json!({"id": id, "choices": choices, "usage": usage})),
        1 => json_value().prop_map(|e| json!({"error": e})),
        1 => json_value(),
    ]
}

/// The worst case for line-buffered readers: one 64 KiB line arriving in
/// the smallest chunks, and a 64 KiB JSON string.
#[test]
fn long_lines_are_read_in_bounded_time() -> Result<(), TestCaseError> {
    let mut line = b"\0data: \"".to_vec();
    line.resize(MAX_INPUT - 2, b'a');
    line.extend_from_slice(b"\"\n");
    let json = &line[7..MAX_INPUT - 1];
    for f in [fuzzing::responses_sse, fuzzing::chat_sse] {
        let _ = bounded(|| f(&line))?;
    }
    let _ = bounded(|| fuzzing::session_doc(json))?;
    let _ = bounded(|| fuzzing::journal(json))?;
    let _ = bounded(|| fuzzing::timeline(json))?;
    let _ = bounded(|| fuzzing::manifest(&line))?;
    let _ = bounded(|| fuzzing::pack_index(&line))?;
    Ok(())
}
