//! Entry points for the fuzz targets in `fuzz/` and the property tests: each
//! feeds arbitrary bytes to one on-disk reader or provider event handler.
//! None may panic, whatever the bytes; errors come back as their message.
//! A broken invariant (what was written does not read back) is a panic, so
//! that the fuzzer reports it. Not an API: nothing here is stable.

use std::path::Path;

use crate::snapshot;
use crate::snapshot::manifest::{Manifest, Stored};
use crate::store::{conversation, fork};
use crate::turn::{chat, responses, sse};

/// The file name [`session_doc`] reads its bytes as: only a document whose
/// id is `s` gets past the name check.
pub const SESSION_DOC_PATH: &str = "/fuzz/s.json";

/// A conversation's state document (`<id>.json`), as `Conversation::load` reads
/// it. A document that loads must survive being written and read again.
pub fn session_doc(data: &[u8]) -> Result<(), String> {
    let path = Path::new(SESSION_DOC_PATH);
    let (doc, _paths) = conversation::parse_doc(data, path).map_err(|e| e.to_string())?;
    let _ = doc.checkpoint(0);
    let written = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    match conversation::parse_doc(&written, path) {
        Ok((again, _)) => assert_eq!(again, doc, "the document changed when written and read"),
        Err(e) => panic!("a written document does not load: {e}"),
    }
    Ok(())
}

/// An export file as `agentx import` reads it: one that parses becomes a
/// journal and a state document, and both must read back as what they came
/// from (the journal has every transcript item; the document loads).
pub fn import(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|e| e.to_string())?;
    let mut journal = fork::ImportedJournal::new(Vec::new());
    let mut items = 0;
    let document = agentx_shared::export::Document::parse_each(text, |entry| {
        items += 1;
        journal.push(entry).map_err(|e| e.to_string())
    })
    .map_err(|e| e.to_string())?;
    let c = document.conversation;
    let doc = fork::imported_doc(&c, &journal, "s".into(), "/f", "agent");
    let path = Path::new("/fuzz/s.jsonl");
    match conversation::parse_journal(journal.out.as_slice(), journal.bytes(), path) {
        Ok(read) => assert_eq!(read.len(), items, "an imported journal lost items"),
        Err(e) => panic!("an imported journal does not read back: {e}"),
    }
    assert_eq!(
        doc.journal_items, items as u64,
        "the document miscounts the journal"
    );
    let written = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    if let Err(e) = conversation::parse_doc(&written, Path::new(SESSION_DOC_PATH)) {
        panic!("an imported document does not load: {e}");
    }
    Ok(())
}

/// The search index with its files garbled by `data` (see
/// `search::garbled::garble`), opened and searched as agentd
/// does: damage must lead to a rebuild, never to a panic out of agentd's
/// code or a failing search after the rebuild. tantivy's own panics are
/// caught, so under libFuzzer replace its abort-on-panic hook first.
pub fn search_index(data: &[u8]) -> Result<usize, String> {
    crate::search::garbled::open_and_search(&crate::search::garbled::garble(data))
}

/// A conversation's journal (`<id>.jsonl`); the first byte picks how much
/// of the rest counts as committed.
pub fn journal(data: &[u8]) -> Result<usize, String> {
    let (committed, body) = match data.split_first() {
        Some((&b, rest)) if b < 0x80 => (rest.len() as u64, rest),
        Some((&b, rest)) => (u64::from(b & 0x7f) * rest.len() as u64 / 0x7f, rest),
        None => (0, data),
    };
    conversation::parse_journal(body, committed, Path::new("/fuzz/s.jsonl"))
        .map(|items| items.len())
        .map_err(|e| e.to_string())
}

/// Valid manifest files for the `manifest` target's corpus
/// (`fuzz/corpus/manifest/valid-*`): a full manifest with every kind of
/// entry, the bare entry list it wraps, and a delta against it. Without
/// them the fuzzer rarely gets past the magic and the zstd frame.
pub fn manifest_seeds() -> Vec<Stored> {
    use crate::snapshot::manifest::{Entry, Kind, why};
    let entry = |path: &str, kind: Kind, target: &[u8]| Entry {
        path: path.as_bytes().to_vec(),
        kind,
        mode: if kind == Kind::Dir { 0o755 } else { 0o644 },
        size: if kind == Kind::File { 12 } else { 0 },
        mtime_ns: 1_700_000_000_123_456_789,
        ctime_ns: 1_700_000_000_987_654_321,
        ino: 4242,
        racy: false,
        hash: if kind == Kind::File { [7; 32] } else { [0; 32] },
        target: target.to_vec(),
        uid: 1000,
        gid: 1000,
        nlink: 1,
    };
    let mut linked = entry("src/lib.rs", Kind::File, b"");
    linked.nlink = 2;
    linked.racy = true;
    let mut twin = linked.clone();
    twin.path = b"src/lib_link.rs".to_vec();
    let full = Manifest::from_entries(vec![
        entry("README.md", Kind::File, b""),
        entry("big.bin", Kind::Skipped, why::OVERSIZED),
        entry("link", Kind::Symlink, b"README.md"),
        entry("src", Kind::Dir, b""),
        linked,
        twin,
        entry("target", Kind::Skipped, why::EXCLUDED),
    ]);
    let mut changed = entry("README.md", Kind::File, b"");
    changed.size = 40;
    changed.hash = [9; 32];
    vec![
        Stored::Full(full),
        Stored::Full(Manifest::default()),
        Stored::Delta {
            base: "0000000000000001-0001".to_owned(),
            upserts: vec![changed, entry("new.txt", Kind::File, b"")],
            removed: vec![b"link".to_vec()],
        },
    ]
}

/// A manifest file (full or delta). One that decodes must encode to bytes
/// that decode to the same thing.
pub fn manifest(data: &[u8]) -> Result<(), String> {
    // Also the bare (zstd) entry list a full manifest file wraps.
    if let Ok(m) = Manifest::decode(data) {
        match m.encode().and_then(|b| Manifest::decode(&b)) {
            Ok(again) => assert_eq!(again, m, "a manifest changed when encoded and decoded"),
            Err(e) => panic!("a decoded manifest does not encode and decode: {e}"),
        }
    }
    let stored = Stored::decode(data).map_err(|e| e.to_string())?;
    let _ = Stored::peek_base(data);
    let _ = stored.own_hashes();
    match stored.encode().and_then(|b| Stored::decode(&b)) {
        Ok(again) => assert_eq!(
            again, stored,
            "a manifest file changed when encoded and decoded"
        ),
        Err(e) => panic!("a decoded manifest file does not encode and decode: {e}"),
    }
    if let Stored::Delta {
        upserts, removed, ..
    } = &stored
    {
        let m = Manifest::default().apply(upserts, removed);
        let _ = (m.files(), m.bytes(), m.skipped());
    }
    Ok(())
}

/// A folder's `timeline.json`; the number of snapshots kept.
pub fn timeline(data: &[u8]) -> Option<usize> {
    let timeline = snapshot::parse_timeline(data)?;
    for snap in &timeline.snaps {
        let _ = snap.label();
    }
    Some(timeline.snaps.len())
}

/// A connection's first HTTP/2 header block, as agentd's first look reads
/// it (`authority`): a block it passes on untouched must decode, and name
/// no `:authority` h2 would refuse.
pub fn first_header_block(data: &[u8]) -> bool {
    let usable = crate::authority::first_block_usable(data);
    if usable {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(4096);
        let fields = decoder
            .decode(data)
            .unwrap_or_else(|e| panic!("a block passed on untouched does not decode: {e:?}"));
        for (name, value) in &fields {
            if name == b":authority" {
                assert!(
                    tonic::codegen::http::uri::Authority::try_from(&value[..]).is_ok(),
                    "a block passed on untouched names an unusable authority"
                );
            }
        }
    }
    usable
}

/// A pack's index file (`<id>.idx`); the first 8 bytes are the pack's size.
/// Every record kept must lie inside the pack.
pub fn pack_index(data: &[u8]) -> usize {
    let (size, idx) = match data.split_first_chunk::<8>() {
        Some((size, rest)) => (u64::from_le_bytes(*size), rest),
        None => (0, data),
    };
    let records = snapshot::parse_index(idx, 1, size);
    for (_, loc) in &records {
        assert!(
            loc.offset.saturating_add(u64::from(loc.len)) <= size,
            "a record reaches past the end of its pack"
        );
    }
    records.len()
}

/// An SSE byte stream split into events as `EventStream` does, with the
/// events it skips (no data) left out; the first byte picks the size of the
/// chunks the bytes arrive in. The error is where the stream broke.
pub fn sse_events(data: &[u8]) -> (Vec<(String, String)>, Option<String>) {
    let (chunk, body) = match data.split_first() {
        Some((&n, rest)) => (usize::from(n).max(1), rest),
        None => (1, data),
    };
    let mut decoder = sse::Decoder::default();
    let mut events = Vec::new();
    let mut broken = None;
    for piece in body.chunks(chunk) {
        if let Err(e) = decoder.feed(piece, &mut events) {
            broken = Some(e);
            break;
        }
    }
    let events = events
        .into_iter()
        .filter(|e| !e.data.trim().is_empty())
        .map(|e| (e.event, e.data))
        .collect();
    (events, broken)
}

/// A Responses API event stream, from raw bytes.
pub fn responses_sse(data: &[u8]) -> Result<(), String> {
    let (events, broken) = sse_events(data);
    responses_events(events.iter().map(|(e, d)| (e.as_str(), d.as_str())))?;
    broken.map_or(Ok(()), Err)
}

/// A Responses API stream given as its events (`event:` name, `data:`).
pub fn responses_events<'a>(
    events: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    let mut reader = responses::Reader::default();
    let mut streamed = 0usize;
    for (event, data) in events {
        let done = reader
            .event(event, data, &mut |d| streamed += d.len())
            .map_err(|e| e.to_string())?;
        if done.is_some() {
            return Ok(());
        }
    }
    Err("the stream ended before response.completed".into())
}

/// A Chat Completions event stream, from raw bytes.
pub fn chat_sse(data: &[u8]) -> Result<(), String> {
    let (events, broken) = sse_events(data);
    chat_events(events.iter().map(|(_, d)| d.as_str()))?;
    broken.map_or(Ok(()), Err)
}

/// A Chat Completions stream given as its events' data.
pub fn chat_events<'a>(events: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    let mut reader = chat::Reader::default();
    let mut streamed = 0usize;
    for data in events {
        if reader
            .event(data, &mut |d| streamed += d.len())
            .map_err(|e| e.to_string())?
        {
            break;
        }
    }
    reader.finish().map(drop).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/manifest")
    }

    /// The seeds kept in the corpus still decode to what [`manifest_seeds`]
    /// builds: a format change that leaves them stale (the fuzzer then
    /// stuck at the magic again) fails here. `AGENTX_WRITE_FUZZ_SEEDS=1`
    /// writes them anew.
    #[test]
    fn the_manifest_seeds_in_the_corpus_are_valid_manifest_files() {
        let seeds = manifest_seeds();
        for (i, seed) in seeds.iter().enumerate() {
            let path = corpus().join(format!("valid-{i}"));
            if std::env::var_os("AGENTX_WRITE_FUZZ_SEEDS").is_some() {
                std::fs::write(&path, seed.encode().unwrap()).unwrap();
            }
            let bytes = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (AGENTX_WRITE_FUZZ_SEEDS=1 writes it)",
                    path.display()
                )
            });
            assert_eq!(
                Stored::decode(&bytes).ok().as_ref(),
                Some(seed),
                "{} is stale (AGENTX_WRITE_FUZZ_SEEDS=1 writes it anew)",
                path.display()
            );
            manifest(&bytes).unwrap();
            // The bare entry list a full manifest file wraps.
            if let Stored::Full(m) = seed {
                let path = corpus().join(format!("valid-{i}-entries"));
                if std::env::var_os("AGENTX_WRITE_FUZZ_SEEDS").is_some() {
                    std::fs::write(&path, m.encode().unwrap()).unwrap();
                }
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(Manifest::decode(&bytes).ok().as_ref(), Some(m));
            }
        }
    }
}
