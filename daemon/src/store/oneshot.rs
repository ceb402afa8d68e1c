//! One-shot states: each one-shot owns a private directory and actor under
//! `<agent>/oneshots/<id>/`, branching from the shared checkpoint; kept only
//! when it failed or was interrupted, and synced to disk only then.

use std::path::{Path, PathBuf};

use super::conversation::{BaseRef, ConversationDoc};
use super::{GroupHandle, Store, StoreError, group};
use crate::durable;

/// A retained (or running) one-shot, as listed.
#[derive(Debug, Clone)]
pub struct OneshotInfo {
    pub id: String,
    pub status: &'static str,
    pub reason: String,
    pub created_at: i64,
    pub prompt: String,
    pub doc: Option<ConversationDoc>,
}

/// A one-shot being run.
pub struct Oneshot {
    pub id: String,
    pub dir: PathBuf,
    pub group: GroupHandle,
}

impl Store {
    fn oneshots_dir(&self, folder: &str, agent: &str) -> Result<PathBuf, StoreError> {
        // Validates folder and agent the same way conversations do.
        self.group(folder, agent)?;
        Ok(self.group_dir(folder, agent).join("oneshots"))
    }

    /// Creates a one-shot's isolated state, branched from the shared
    /// checkpoint of `folder`+`agent` (fresh when there is none).
    pub async fn start_oneshot(
        &self,
        folder: &str,
        agent: &str,
        pid: u32,
        prompt: &str,
    ) -> Result<Oneshot, StoreError> {
        let interactive = self.group(folder, agent)?;
        let shared = interactive.shared().await?;
        let parent = self.oneshots_dir(folder, agent)?;
        let group_dir = self.group_dir(folder, agent);
        let stamp = agentx_shared::time::now_ms();
        let (f, a) = (folder.to_owned(), agent.to_owned());
        // Stat and mkdir: off the runtime's workers. Nothing of the state is
        // synced while the one-shot runs (see `finish_oneshot`).
        let (shared, id, dir) = tokio::task::spawn_blocking(move || {
            // A branch point naming a conversation that is gone (cleared
            // before agentd reset branch points on clear) is not used: its
            // turns were deleted on purpose.
            let shared = shared.filter(|s| {
                let there = group_dir.join(format!("{}.json", s.session_id)).exists();
                if !there {
                    tracing::warn!(
                        "the branch point of {f} ({a}) names conversation {}, which is gone: \
                         one-shots start fresh",
                        s.session_id
                    );
                }
                there
            });
            agentx_shared::profile::create_private_dir(&parent)?;
            let (id, dir) = (0..1000)
                .find_map(|n| {
                    let id = if n == 0 {
                        format!("oneshot-{pid}-{stamp}")
                    } else {
                        format!("oneshot-{pid}-{stamp}-{n}")
                    };
                    let dir = parent.join(&id);
                    match std::fs::create_dir(&dir) {
                        Ok(()) => Some(Ok((id, dir))),
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
                        Err(e) => Some(Err(e)),
                    }
                })
                .ok_or(StoreError::Internal("no free one-shot id"))??;
            Ok::<_, StoreError>((shared, id, dir))
        })
        .await
        .map_err(|_| StoreError::Internal("a blocking task of the store failed"))??;

        let mut doc = ConversationDoc::new(id.clone(), folder.to_owned(), agent.to_owned(), stamp);
        doc.title = prompt
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        if let Some(shared) = shared {
            doc.response_id = shared.response_id;
            doc.base = Some(BaseRef {
                journal: self
                    .group_dir(folder, agent)
                    .join(format!("{}.jsonl", shared.session_id)),
                bytes: shared.journal_bytes,
                items: shared.journal_items,
                rollbacks: shared.rollbacks,
            });
        }
        let group = group::spawn_private(dir.clone(), folder.to_owned(), agent.to_owned());
        group.adopt(doc).await?;
        if let Ok(mut active) = self.active_oneshots.lock() {
            active.insert(id.clone());
        }
        Ok(Oneshot { id, dir, group })
    }

    /// Ends a one-shot: a success leaves nothing behind; anything else is
    /// kept for diagnosis, and made durable now. Its state was written
    /// without syncs ([`durable::Sync::Later`]): most one-shots succeed and
    /// their state is deleted, so syncing it as it grew (a dozen fsyncs per
    /// one-shot) bought nothing. A kill of agentd loses none of it; a power
    /// loss during a one-shot may lose or cut the state of that one-shot.
    pub async fn finish_oneshot(&self, oneshot: &Oneshot, success: bool) {
        if let Ok(mut active) = self.active_oneshots.lock() {
            active.remove(&oneshot.id);
        }
        let dir = oneshot.dir.clone();
        // Many files, or fsyncs: off the runtime's workers.
        let done = tokio::task::spawn_blocking(move || {
            if success {
                std::fs::remove_dir_all(&dir)
            } else {
                durable::sync_dir_files(&dir)
            }
        })
        .await
        .map_err(std::io::Error::other);
        if let Ok(Err(e)) | Err(e) = done {
            let what = if success { "remove" } else { "sync" };
            tracing::warn!(
                "cannot {what} one-shot state {}: {e}",
                oneshot.dir.display()
            );
        }
    }

    fn is_active(&self, id: &str) -> bool {
        self.active_oneshots
            .lock()
            .map(|a| a.contains(id))
            .unwrap_or(false)
    }

    /// Retained and running one-shots of `folder`+`agent`, newest first.
    pub fn list_oneshots(&self, folder: &str, agent: &str) -> Result<Vec<OneshotInfo>, StoreError> {
        let dir = self.oneshots_dir(folder, agent)?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut list: Vec<OneshotInfo> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| self.describe(&e.path(), &e.file_name().to_string_lossy()))
            .filter(|info| info.doc.as_ref().is_none_or(|d| d.folder == folder))
            .collect();
        list.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(list)
    }

    fn describe(&self, dir: &Path, id: &str) -> OneshotInfo {
        let doc: Option<ConversationDoc> = std::fs::read(dir.join(format!("{id}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let (status, reason) = match &doc {
            None => (
                "corrupt",
                "its state file is missing or unreadable".to_owned(),
            ),
            Some(_) if self.is_active(id) => ("running", String::new()),
            Some(d) if d.failed.is_some() => (
                "failed",
                d.failed
                    .as_ref()
                    .map(|m| m.message.clone())
                    .unwrap_or_default(),
            ),
            Some(d) if d.turn_open => ("interrupted", "agentd stopped during the turn".to_owned()),
            Some(d) => (
                "interrupted",
                d.interrupted
                    .as_ref()
                    .map(|m| m.message.clone())
                    .unwrap_or_else(|| "it did not finish".to_owned()),
            ),
        };
        OneshotInfo {
            id: id.to_owned(),
            status,
            reason,
            created_at: doc.as_ref().map(|d| d.created_at).unwrap_or(0),
            prompt: doc
                .as_ref()
                .map(|d| d.last_user.clone())
                .unwrap_or_default(),
            doc,
        }
    }

    /// One retained one-shot with its transcript.
    pub fn show_oneshot(
        &self,
        folder: &str,
        agent: &str,
        id: &str,
    ) -> Result<(OneshotInfo, Vec<agentx_shared::conversation::Item>), StoreError> {
        agentx_shared::folder::check_component("one-shot id", id)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let dir = self.oneshots_dir(folder, agent)?.join(id);
        if !dir.is_dir() {
            return Err(StoreError::NotFound(format!(
                "no one-shot {id} in this folder"
            )));
        }
        let info = self.describe(&dir, id);
        let transcript = match &info.doc {
            Some(doc) => super::conversation::read_journal(
                &dir.join(format!("{id}.jsonl")),
                doc.journal_bytes,
            )
            .map_err(StoreError::unreadable)?,
            None => Vec::new(),
        };
        Ok((info, transcript))
    }

    /// Removes every retained (not running) one-shot; returns how many.
    pub fn prune_oneshots(&self, folder: &str, agent: &str) -> Result<u32, StoreError> {
        let dir = self.oneshots_dir(folder, agent)?;
        let mut removed = 0;
        for info in self.list_oneshots(folder, agent)? {
            if info.status == "running" {
                continue;
            }
            std::fs::remove_dir_all(dir.join(&info.id))?;
            removed += 1;
        }
        if removed > 0 {
            durable::fsync_dir(&dir)?;
        }
        Ok(removed)
    }
}
