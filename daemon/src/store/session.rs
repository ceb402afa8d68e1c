//! One conversation on disk: a small state document `<id>.json` (atomically
//! replaced) beside an append-only transcript journal `<id>.jsonl`.
//!
//! The document is the commit point: it records how many journal items and
//! bytes belong to the conversation, so bytes past that (a crash between the
//! append and the document write) are cut off on load.

use std::fs::File;
use std::io::{self, BufRead as _, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::{Item, PendingCall, Usage};

use super::durable;

pub const FORMAT: u32 = 1;

/// The state document. Small and bounded: it never holds the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDoc {
    pub format: u32,
    pub id: String,
    /// The real folder path; distinct folders can share a directory key.
    pub folder: String,
    pub agent: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub response_id: Option<String>,
    pub usage: Usage,
    pub last_user: String,
    pub last_assistant: String,
    /// `!command` transcripts run locally since the last message.
    pub pending_shell: String,
    pub pending_calls: Vec<PendingCall>,
    pub turns: u32,
    /// Tool calls approved for the rest of this conversation ("always").
    pub approve_all: bool,
    pub journal_items: u64,
    pub journal_bytes: u64,
}

impl SessionDoc {
    pub fn new(id: String, folder: String, agent: String, now_ms: i64) -> Self {
        Self {
            format: FORMAT,
            id,
            folder,
            agent,
            title: String::new(),
            created_at: now_ms,
            updated_at: now_ms,
            response_id: None,
            usage: Usage::default(),
            last_user: String::new(),
            last_assistant: String::new(),
            pending_shell: String::new(),
            pending_calls: Vec::new(),
            turns: 0,
            approve_all: false,
            journal_items: 0,
            journal_bytes: 0,
        }
    }
}

/// A journal line.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    at: i64,
    #[serde(flatten)]
    item: Item,
}

/// Paths of one conversation's files.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    pub doc: PathBuf,
    pub journal: PathBuf,
}

impl SessionPaths {
    pub fn new(dir: &Path, id: &str) -> Self {
        Self {
            doc: dir.join(format!("{id}.json")),
            journal: dir.join(format!("{id}.jsonl")),
        }
    }
}

/// A loaded conversation with its journal open for appending.
pub struct Session {
    pub doc: SessionDoc,
    pub paths: SessionPaths,
    journal: Option<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl Session {
    /// Creates a new conversation and makes it durable.
    pub fn create(dir: &Path, doc: SessionDoc) -> io::Result<Self> {
        let paths = SessionPaths::new(dir, &doc.id);
        let mut session = Self {
            doc,
            paths,
            journal: None,
        };
        session.save()?;
        Ok(session)
    }

    /// Reads `<id>.json`; a document that does not parse is `Corrupt`.
    pub fn load(doc_path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(doc_path)?;
        let doc: SessionDoc = serde_json::from_slice(&bytes).map_err(|e| LoadError::Corrupt {
            path: doc_path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let dir = doc_path.parent().unwrap_or(Path::new("."));
        let paths = SessionPaths::new(dir, &doc.id);
        if paths.doc != doc_path {
            return Err(LoadError::Corrupt {
                path: doc_path.to_path_buf(),
                reason: format!("its id {:?} does not match the file name", doc.id),
            });
        }
        let journal_len = match std::fs::metadata(&paths.journal) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        if journal_len < doc.journal_bytes {
            return Err(LoadError::Corrupt {
                path: paths.journal.clone(),
                reason: format!(
                    "transcript has {journal_len} bytes, {} were committed",
                    doc.journal_bytes
                ),
            });
        }
        Ok(Self {
            doc,
            paths,
            journal: None,
        })
    }

    /// Writes the state document atomically.
    pub fn save(&mut self) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&self.doc).map_err(io::Error::other)?;
        durable::write_atomic(&self.paths.doc, &bytes)
    }

    /// Appends items to the journal durably and advances the committed
    /// counters in memory; the caller saves the document afterwards.
    pub fn append(&mut self, items: &[Item], now_ms: i64) -> io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for item in items {
            serde_json::to_writer(
                &mut buf,
                &Entry {
                    at: now_ms,
                    item: item.clone(),
                },
            )
            .map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        let journal = self.journal_file()?;
        durable::append_durable(journal, &buf)?;
        self.doc.journal_items += items.len() as u64;
        self.doc.journal_bytes += buf.len() as u64;
        Ok(())
    }

    /// The journal, opened on first use with uncommitted bytes cut off.
    fn journal_file(&mut self) -> io::Result<&mut File> {
        if self.journal.is_none() {
            let file = durable::open_append(&self.paths.journal)?;
            if file.metadata()?.len() > self.doc.journal_bytes {
                file.set_len(self.doc.journal_bytes)?;
                file.sync_data()?;
            }
            if self.doc.journal_bytes == 0
                && let Some(dir) = self.paths.journal.parent()
            {
                durable::fsync_dir(dir)?;
            }
            self.journal = Some(file);
        }
        self.journal
            .as_mut()
            .ok_or_else(|| io::Error::other("journal not open"))
    }

    /// Reads the committed transcript.
    pub fn transcript(&self) -> Result<Vec<Item>, LoadError> {
        read_journal(&self.paths.journal, self.doc.journal_bytes)
    }
}

/// Reads the first `committed` bytes of a journal as items.
pub fn read_journal(path: &Path, committed: u64) -> Result<Vec<Item>, LoadError> {
    if committed == 0 {
        return Ok(Vec::new());
    }
    let file = File::open(path)?;
    let reader = BufReader::new(io::Read::take(file, committed));
    let mut items = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        let entry: Entry = serde_json::from_str(&line).map_err(|e| LoadError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("line {}: {e}", n + 1),
        })?;
        items.push(entry.item);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_session(dir: &Path) -> Session {
        Session::create(
            dir,
            SessionDoc::new("abc".into(), "/f".into(), "default".into(), 1),
        )
        .unwrap()
    }

    #[test]
    fn appended_items_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(
            &[
                Item::User { text: "hi".into() },
                Item::Assistant { text: "yo".into() },
            ],
            2,
        )
        .unwrap();
        s.save().unwrap();
        let loaded = Session::load(&s.paths.doc).unwrap();
        assert_eq!(loaded.doc.journal_items, 2);
        assert_eq!(
            loaded.transcript().unwrap(),
            vec![
                Item::User { text: "hi".into() },
                Item::Assistant { text: "yo".into() }
            ]
        );
    }

    #[test]
    fn bytes_appended_but_never_committed_are_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(
            &[Item::User {
                text: "kept".into(),
            }],
            2,
        )
        .unwrap();
        s.save().unwrap();
        // A crash after this append but before the document write:
        s.append(
            &[Item::User {
                text: "lost".into(),
            }],
            3,
        )
        .unwrap();
        let mut loaded = Session::load(&s.paths.doc).unwrap();
        assert_eq!(
            loaded.transcript().unwrap(),
            vec![Item::User {
                text: "kept".into()
            }]
        );
        loaded
            .append(
                &[Item::Assistant {
                    text: "next".into(),
                }],
                4,
            )
            .unwrap();
        loaded.save().unwrap();
        let again = Session::load(&s.paths.doc).unwrap();
        assert_eq!(
            again.transcript().unwrap(),
            vec![
                Item::User {
                    text: "kept".into()
                },
                Item::Assistant {
                    text: "next".into()
                }
            ]
        );
    }

    #[test]
    fn garbage_and_truncated_files_are_reported_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(&[Item::User { text: "hi".into() }], 2).unwrap();
        s.save().unwrap();
        std::fs::write(&s.paths.journal, b"").unwrap();
        assert!(matches!(
            Session::load(&s.paths.doc),
            Err(LoadError::Corrupt { .. })
        ));
        std::fs::write(&s.paths.doc, b"{\"format\":1,\"id\":").unwrap();
        assert!(matches!(
            Session::load(&s.paths.doc),
            Err(LoadError::Corrupt { .. })
        ));
    }
}
