//! The directory's files as the actor reads and writes them: loading its
//! conversations (rebuilt or quarantined when corrupt) and the pointer files.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::handle::SharedCheckpoint;
use super::{CurrentFile, Group, SharedFile};
use crate::durable;
use crate::store::StoreError;
use crate::store::conversation::{Conversation, ConversationDoc, LoadError, Marker};

/// A state document that did not load: (its path, the path the error
/// names, why).
type Unreadable = (PathBuf, PathBuf, String);

impl Group {
    /// Reads one of the directory's pointer files (`current.json`,
    /// `shared.json`). A missing file is empty; one that does not parse is
    /// quarantined (kept aside as `.corrupt-<ms>`), reported once, and read
    /// as empty, so the next write starts it afresh instead of failing or
    /// silently overwriting it. Any other read error is returned.
    pub(super) fn read_pointer<T: serde::de::DeserializeOwned + Default>(
        &mut self,
        name: &str,
    ) -> Result<T, StoreError> {
        let path = self.dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(reason) => {
                let moved = match durable::quarantine(&path) {
                    Ok(to) => format!("moved aside to {}", to.display()),
                    Err(e) => format!("could not be moved aside: {e}"),
                };
                tracing::warn!(file = %path.display(), %reason, "quarantined a corrupt pointer file");
                let what = if name == "shared.json" {
                    "one-shots branch from the current conversation's latest checkpoint until \
                     the next turn records a new one"
                } else {
                    "the newest conversation is current"
                };
                self.notices.push((
                    None,
                    format!(
                        "{} was unreadable ({reason}); it was {moved}, and {what}",
                        path.display()
                    ),
                ));
                Ok(T::default())
            }
        }
    }

    /// The shared checkpoint of `folder`. When none is recorded (never, or
    /// `shared.json` was lost to corruption) one-shots branch from the
    /// latest checkpoint of the folder's current conversation instead of
    /// starting with no context.
    pub(super) fn read_shared(&mut self, folder: &str) -> Option<SharedCheckpoint> {
        if !self.shares_checkpoint {
            return None;
        }
        let file: SharedFile = match self.read_pointer("shared.json") {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!("cannot read {}/shared.json: {e}", self.dir.display());
                SharedFile::default()
            }
        };
        if let Some(shared) = file.shared.get(folder) {
            return Some(shared.clone());
        }
        let id = self.current_id(folder)?;
        let doc = &self.sessions.get(&id)?.doc;
        let cp = doc.checkpoints.last()?;
        Some(SharedCheckpoint {
            session_id: doc.id.clone(),
            response_id: cp.response_id.clone(),
            journal_items: cp.journal_items,
            journal_bytes: cp.journal_bytes,
            rollbacks: doc.rollbacks,
            at: cp.created_at,
        })
    }

    /// Drops every folder's shared checkpoint that names conversation `id`
    /// (it is being cleared): one-shots there then start fresh.
    pub(super) fn forget_shared(&mut self, id: &str) -> Result<(), StoreError> {
        if !self.shares_checkpoint {
            return Ok(());
        }
        let mut file: SharedFile = self.read_pointer("shared.json")?;
        let before = file.shared.len();
        file.shared.retain(|_, s| s.session_id != id);
        if file.shared.len() == before {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&file).map_err(StoreError::encode)?;
        durable::write_atomic(&self.dir.join("shared.json"), &bytes)?;
        Ok(())
    }

    /// Makes `doc`'s current state its folder+agent's shared checkpoint.
    pub(super) fn write_shared(&mut self, doc: &ConversationDoc) -> Result<(), StoreError> {
        if !self.shares_checkpoint {
            return Ok(());
        }
        let mut file: SharedFile = self.read_pointer("shared.json")?;
        file.shared.insert(
            doc.folder.clone(),
            SharedCheckpoint {
                session_id: doc.id.clone(),
                response_id: doc.response_id.clone(),
                journal_items: doc.journal_items,
                journal_bytes: doc.journal_bytes,
                rollbacks: doc.rollbacks,
                at: agentx_shared::time::now_ms(),
            },
        );
        let bytes = serde_json::to_vec(&file).map_err(StoreError::encode)?;
        durable::write_atomic(&self.dir.join("shared.json"), &bytes)?;
        Ok(())
    }

    /// Reads every conversation of the directory (all real folders of its
    /// key). A conversation whose state document is unreadable is rebuilt
    /// from its transcript when that is readable (see
    /// [`Conversation::rebuild`]); otherwise both files are quarantined.
    /// `requester`: the folder whose request caused the load.
    pub(super) fn load(&mut self, requester: &str) {
        self.loaded = true;
        let Some(bad) = self.load_documents() else {
            return;
        };
        let current: CurrentFile = self.read_pointer("current.json").unwrap_or_else(|e| {
            tracing::warn!("cannot read {}/current.json: {e}", self.dir.display());
            CurrentFile::default()
        });
        let shared: SharedFile = if self.shares_checkpoint {
            self.read_pointer("shared.json").unwrap_or_default()
        } else {
            SharedFile::default()
        };
        for unreadable in bad {
            self.recover(unreadable, &current, &shared, requester);
        }
        self.current = current
            .current
            .into_iter()
            .filter(|(folder, id)| {
                self.sessions
                    .get(id)
                    .is_some_and(|s| &s.doc.folder == folder)
            })
            .collect();
    }

    /// Loads every readable state document of the directory and returns
    /// the corrupt ones; `None` when the directory cannot be read.
    fn load_documents(&mut self) -> Option<Vec<Unreadable>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.notices
                    .push((None, format!("cannot read {}: {e}", self.dir.display())));
                return None;
            }
        };
        let mut bad = Vec::new();
        let mut journals = Vec::new();
        let mut docs = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if durable::is_stale_temp(&name) {
                tracing::info!(
                    "removing {}, left by an agentd that was killed",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if name
                .strip_suffix(".jsonl")
                .is_some_and(crate::store::is_conversation_id)
            {
                journals.push(path);
                continue;
            }
            if !name.ends_with(".json")
                || name == "current.json"
                || name == "shared.json"
                || name.starts_with('.')
            {
                continue;
            }
            docs.push(path);
        }
        // Read and parsed in parallel: a folder with 10,000 conversations
        // is loaded in a fraction of the time on the first request.
        use rayon::prelude::*;
        let loaded: Vec<_> = docs
            .into_par_iter()
            .map(|path| {
                let loaded = Conversation::load(&path);
                (path, loaded)
            })
            .collect();
        for (path, loaded) in loaded {
            match loaded {
                Ok(mut session) => {
                    session.set_sync(self.sync());
                    if session.doc.turn_open {
                        self.close_stopped_turn(&mut session, &path);
                    }
                    self.sessions.insert(session.doc.id.clone(), session);
                }
                Err(LoadError::Corrupt {
                    path: bad_path,
                    reason,
                }) => {
                    bad.push((path, bad_path, reason));
                }
                Err(LoadError::Io(e)) => {
                    self.notices
                        .push((None, format!("cannot read {}: {e}", path.display())));
                }
                // Loading reads no branch point (only `transcript` does).
                Err(LoadError::Branch(why)) => {
                    self.notices.push((None, why));
                }
            }
        }
        remove_orphan_journals(&journals);
        Some(bad)
    }

    /// Marks the turn agentd died during as interrupted (what it recorded
    /// stands) and saves `session`, at `path`.
    fn close_stopped_turn(&mut self, session: &mut Conversation, path: &Path) {
        session.doc.turn_open = false;
        session.doc.interrupted = Some(Marker {
            message: "agentd stopped during the turn".into(),
            at: agentx_shared::time::now_ms(),
            retryable: true,
        });
        if let Err(e) = session.save() {
            self.notices.push((
                Some(session.doc.folder.clone()),
                format!("cannot update {}: {e}", path.display()),
            ));
        }
    }

    /// Rebuilds a conversation whose state document is unreadable from its
    /// transcript, or quarantines both files when it cannot be.
    fn recover(
        &mut self,
        (doc_path, bad_path, reason): Unreadable,
        current: &CurrentFile,
        shared: &SharedFile,
        requester: &str,
    ) {
        let id = doc_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !self.shares_checkpoint || id.is_empty() || self.sessions.contains_key(&id) {
            self.quarantine(&doc_path, &bad_path, &reason);
            return;
        }
        let folder = self.owner_of(&id, current, shared, requester);
        let rollbacks = shared
            .shared
            .values()
            .find(|s| s.session_id == id)
            .map_or(0, |s| s.rollbacks);
        match self.rebuild(&doc_path, &id, &folder, rollbacks, &reason) {
            Ok(session) => {
                self.sessions.insert(id, session);
            }
            Err(why) => {
                tracing::warn!(file = %doc_path.display(), %why, "cannot rebuild a conversation");
                self.quarantine(&doc_path, &bad_path, &reason);
            }
        }
    }

    /// The real folder a conversation whose document is unreadable belongs
    /// to: the one a pointer file names it for, else the only real folder
    /// this directory is known to hold, else the folder asking.
    pub(super) fn owner_of(
        &self,
        id: &str,
        current: &CurrentFile,
        shared: &SharedFile,
        requester: &str,
    ) -> String {
        let named = current
            .current
            .iter()
            .find(|(_, cur)| cur.as_str() == id)
            .map(|(folder, _)| folder)
            .or_else(|| {
                shared
                    .shared
                    .iter()
                    .find(|(_, s)| s.session_id == id)
                    .map(|(folder, _)| folder)
            });
        if let Some(folder) = named {
            return folder.clone();
        }
        let known: HashSet<&String> = self
            .sessions
            .values()
            .map(|s| &s.doc.folder)
            .chain(current.current.keys())
            .chain(shared.shared.keys())
            .collect();
        match known.into_iter().collect::<Vec<_>>().as_slice() {
            [only] => (*only).clone(),
            _ => requester.to_owned(),
        }
    }

    /// Rebuilds conversation `id` from its journal: keeps the unreadable
    /// document (and any cut journal tail) aside, writes the rebuilt one,
    /// and leaves one notice.
    pub(super) fn rebuild(
        &mut self,
        doc_path: &std::path::Path,
        id: &str,
        folder: &str,
        rollbacks: u64,
        reason: &str,
    ) -> Result<Conversation, String> {
        let rebuilt = Conversation::rebuild(&self.dir, id, folder, &self.agent, rollbacks)
            .map_err(|e| e.to_string())?;
        // Copy first, then replace: a crash in between leaves the bad
        // document in place (rebuilt again next time), never no document.
        let kept = durable::quarantine_copy(doc_path).map_err(|e| e.to_string())?;
        let tail = rebuilt
            .keep_cut_tail(agentx_shared::time::now_ms())
            .map_err(|e| e.to_string())?;
        let mut session = rebuilt.session;
        session.save().map_err(|e| e.to_string())?;
        tracing::warn!(file = %doc_path.display(), %reason, "rebuilt a conversation from its transcript");
        let tail_note = tail
            .map(|t| {
                format!(
                    "; its transcript's unreadable tail was cut and kept as {}",
                    t.display()
                )
            })
            .unwrap_or_default();
        self.notices.push((
            Some(folder.to_owned()),
            format!(
                "conversation {id} ({:?}) had an unreadable state file ({reason}); it was rebuilt \
                 from its transcript ({} turns) and the bad file kept as {}{tail_note}; its usage \
                 totals, server response chain, approvals and rollback backup were lost",
                session.doc.title,
                session.doc.turns,
                kept.display()
            ),
        ));
        Ok(session)
    }

    pub(super) fn quarantine(
        &mut self,
        doc: &std::path::Path,
        bad: &std::path::Path,
        reason: &str,
    ) {
        let mut moved = Vec::new();
        for path in [
            doc.to_path_buf(),
            doc.with_extension("jsonl"),
            doc.with_extension("calls.jsonl"),
        ] {
            if path.exists() {
                match durable::quarantine(&path) {
                    Ok(to) => moved.push(to.display().to_string()),
                    Err(e) => moved.push(format!("(could not move {}: {e})", path.display())),
                }
            }
        }
        tracing::warn!(file = %bad.display(), %reason, "quarantined a corrupt conversation");
        self.notices.push((
            None,
            format!(
                "a conversation file was unreadable ({}: {reason}); it was moved aside to {} and a \
                 fresh conversation continues",
                bad.display(),
                moved.join(", ")
            ),
        ));
    }
}

/// How old a journal without a document must be before it is taken for
/// what a killed fork, import or pull left (they write the journal, then
/// hand the document to the actor; an RPC runs them to their end).
const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes the journals in `journals` that have no state document and
/// were last written more than [`ORPHAN_AGE`] ago: copies (a fork's
/// prefix, an import, a pulled copy) whose making was cut short by a kill.
fn remove_orphan_journals(journals: &[PathBuf]) {
    for journal in journals {
        if journal.with_extension("json").exists() {
            continue;
        }
        let old = std::fs::metadata(journal)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= ORPHAN_AGE);
        if old {
            tracing::info!(
                "removing {}: a transcript without a conversation, left when making one was cut short",
                journal.display()
            );
            let _ = std::fs::remove_file(journal);
        }
    }
}
