//! For the fuzz target and property test: a small index whose files are
//! garbled by given bytes, opened and searched the way agentd does it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tantivy::{IndexWriter, TantivyDocument};

use super::{SearchError, SearchIndex, health, schema};

/// Words the sample index holds, searched after garbling.
const QUERIES: [&str; 4] = ["walrus", "\"quick brown\" fox", "title", "nothing"];

/// A few committed conversations' worth of documents in `dir` (two commits,
/// so two segments).
fn build_sample(dir: &Path) -> Result<(), SearchError> {
    let (schema, f) = schema();
    let (live, _) = health::open_or_create(dir, &schema)?;
    let mut writer: IndexWriter<TantivyDocument> = super::writer_of(&live)?;
    for (n, body) in [
        "remember the walrus and the quick brown fox",
        "a title of its own: the walrus song",
        "cargo build finished in 3.2s; no warnings",
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = TantivyDocument::default();
        d.add_text(f.key, format!("/s/{n}.json"));
        d.add_text(f.sid, format!("0000000000{n}-000000"));
        d.add_text(f.folder, "/f");
        d.add_text(f.agent, "default");
        d.add_text(f.kind, if n == 1 { "meta" } else { "turn" });
        d.add_u64(f.turn, n as u64);
        d.add_i64(f.at, 1000 + n as i64);
        d.add_text(f.title, "walrus title");
        d.add_text(f.label, "label");
        d.add_text(f.body, body);
        d.add_text(f.stamp, "1:0:0:t");
        writer.add_document(d)?;
        writer.commit()?;
    }
    drop(writer);
    Ok(())
}

/// The sample index's files (name, bytes), built once per process.
fn sample() -> &'static [(String, Vec<u8>)] {
    static FILES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = scratch("sample");
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = build_sample(&dir) {
            panic!("cannot build the sample search index: {e}");
        }
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
                    .filter_map(|e| {
                        let bytes = std::fs::read(e.path()).ok()?;
                        Some((e.file_name().to_string_lossy().into_owned(), bytes))
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let _ = std::fs::remove_dir_all(&dir);
        files
    })
}

/// A directory of this process for `what` (in /dev/shm when there is one).
fn scratch(what: &str) -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    base.join(format!("agentd-garbled-{}-{n}-{what}", std::process::id()))
}

/// The sample's files with `data` applied as edits: each is a file byte
/// (which file; its top bit truncates instead), a 2-byte offset, a length
/// byte and that many bytes written over the file at the offset.
pub fn garble(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files = sample().to_vec();
    let mut rest = data;
    while let [which, a, b, n, tail @ ..] = rest {
        let count = files.len().max(1);
        let Some((_, bytes)) = files.get_mut(usize::from(*which & 0x7f) % count) else {
            break;
        };
        let at = usize::from(u16::from_le_bytes([*a, *b])) % bytes.len().max(1);
        let (patch, after) = tail.split_at(usize::from(*n).min(tail.len()));
        if which & 0x80 != 0 {
            bytes.truncate(at);
        } else {
            for (i, byte) in patch.iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + i) {
                    *slot = *byte;
                }
            }
        }
        rest = after;
    }
    files
}

/// Writes `files` into a fresh directory, opens it as agentd's start does
/// and searches it; when a search fails, rebuilds as the indexer does and
/// searches again, which must then work. The number of hits found.
pub fn open_and_search(files: &[(String, Vec<u8>)]) -> Result<usize, String> {
    let dir = scratch("index");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).map_err(|e| e.to_string())?;
    }
    let (schema, f) = schema();
    let (live, _why) = health::open_or_create(&dir, &schema).map_err(|e| e.to_string())?;
    let (jobs, _rx) = std::sync::mpsc::channel();
    let index = SearchIndex::new(live, f, dir.clone(), jobs, health::RebuildNote::default());
    let mut hits = 0;
    for query in QUERIES {
        match index.search(query, None, 10) {
            Ok(found) => hits += found.len(),
            Err(SearchError::Rebuilding) => {
                let fresh = health::create(&dir, &schema).map_err(|e| e.to_string())?;
                *index
                    .live
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
                match index.search(query, None, 10) {
                    Ok(found) => hits += found.len(),
                    Err(e) => panic!("a rebuilt index fails a search: {e}"),
                }
            }
            Err(e) => panic!("a search failed without a rebuild: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The case: the second half of every file overwritten with
    /// random bytes (same length). Opening says why it rebuilt, and every
    /// search works on the rebuilt index.
    #[test]
    fn an_index_garbled_everywhere_is_rebuilt() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let files: Vec<(String, Vec<u8>)> = sample()
            .iter()
            .map(|(name, bytes)| {
                let mut bytes = bytes.clone();
                let half = bytes.len() / 2;
                for b in &mut bytes[half..] {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    *b = seed as u8;
                }
                (name.clone(), bytes)
            })
            .collect();
        let dir = scratch("half");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let (schema, _) = schema();
        let (_, why) = health::open_or_create(&dir, &schema).unwrap();
        assert!(why.is_some(), "the damage went unseen");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(open_and_search(&files).is_ok());
        // Untouched, the sample is found.
        assert!(matches!(open_and_search(&garble(&[])), Ok(n) if n > 0));
    }

    /// Starting on a damaged index says so in that index's own note (what
    /// `daemon status` shows); an index started on a sound copy has none.
    #[tokio::test]
    async fn starting_on_a_damaged_index_notes_the_rebuild_on_that_index() {
        let mut dirs = Vec::new();
        let mut start = |what: &str, layout: &[u8]| {
            let dir = scratch(what);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in sample() {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
            std::fs::write(dir.join("LAYOUT"), layout).unwrap();
            let sessions = scratch("sessions");
            std::fs::create_dir_all(&sessions).unwrap();
            dirs.extend([dir.clone(), sessions.clone()]);
            let (_, rx) = tokio::sync::mpsc::unbounded_channel();
            super::super::start(dir, sessions, rx).unwrap()
        };
        let damaged = start("damaged", b"\0 not a layout");
        let sound = start("sound", super::super::LAYOUT.as_bytes());
        let note = damaged.rebuild_note().unwrap_or_default();
        assert!(note.starts_with("rebuilt at "), "{note:?}");
        assert!(
            note.ends_with("(the index was damaged: its LAYOUT file is garbled)"),
            "{note:?}"
        );
        assert_eq!(sound.rebuild_note(), None);
        // The indexers write into the directories until they caught up.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while damaged.progress().0 || sound.progress().0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the indexers never caught up"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
