//! This profile's conversations kept in other folders: which folder keeps an
//! id (an id lives in one folder per profile), and forks into another folder.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::conversation::{ConversationDoc, ConversationPaths, parse_doc};
use super::fork::ForkOrigin;
use super::{GroupHandle, Store, StoreError, group, tree};
use crate::durable;

/// Where this profile keeps a conversation.
#[derive(Debug, Clone)]
pub struct Held {
    /// Its group directory (`<sessions>/<folder-key>/<agent>`).
    pub dir: PathBuf,
    /// Its folder ("" when its document cannot be read).
    pub folder: String,
    pub agent: String,
}

/// The document at `path`, when it reads and names itself.
fn read_doc(path: &Path) -> Option<ConversationDoc> {
    let bytes = std::fs::read(path).ok()?;
    parse_doc(&bytes, path).ok().map(|(doc, _)| doc)
}

/// Whether the profile whose group directory is `group_dir`
/// (`<sessions>/<folder-key>/<agent>`) keeps conversation `id` in any group
/// (one id lives in one folder per profile). Blocking.
pub(super) fn kept_beside(group_dir: &Path, id: &str) -> bool {
    let Some(sessions) = group_dir.parent().and_then(Path::parent) else {
        return false;
    };
    super::is_conversation_id(id)
        && tree::groups(sessions)
            .iter()
            .any(|dir| ConversationPaths::new(dir, id).doc.exists())
}

impl Store {
    /// Where this profile keeps conversation `id`, in any folder and for
    /// any agent (`None`: nowhere). Blocking: reads directories.
    pub fn holder(&self, id: &str) -> Option<Held> {
        if !super::is_conversation_id(id) {
            return None;
        }
        for dir in tree::groups(&self.sessions_dir) {
            let path = ConversationPaths::new(&dir, id).doc;
            if !path.exists() {
                continue;
            }
            let agent = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            let folder = read_doc(&path).map(|d| d.folder).unwrap_or_default();
            return Some(Held { dir, folder, agent });
        }
        None
    }

    /// `agent`'s conversations kept in folders other than `folder` whose
    /// folder passes `same` (another checkout of the same project), newest
    /// first. Each other group directory is judged by its first document
    /// (folders sharing a directory key are taken as one). Blocking.
    pub fn kept_elsewhere(
        &self,
        folder: &str,
        agent: &str,
        same: impl Fn(&str) -> bool,
    ) -> Vec<ConversationDoc> {
        let own = self.group_dir(folder, agent);
        let mut docs = Vec::new();
        for folder_dir in tree::subdirs(&self.sessions_dir) {
            let dir = folder_dir.join(agent);
            if dir == own || !dir.is_dir() {
                continue;
            }
            let mut paths = tree::docs_in(&dir).into_iter();
            let Some(first) = paths.by_ref().find_map(|p| read_doc(&p)) else {
                continue;
            };
            if first.folder == folder || !same(&first.folder) {
                continue;
            }
            let there = first.folder.clone();
            docs.push(first);
            docs.extend(
                paths
                    .filter_map(|p| read_doc(&p))
                    .filter(|d| d.folder == there && d.base.is_none()),
            );
        }
        docs.retain(|d| d.base.is_none() && d.agent == agent);
        docs.sort_by_key(|d| std::cmp::Reverse(d.updated_at));
        docs
    }
}

/// Forks conversation `id` of group `from` (directory `from_dir`) into
/// group `to` (directory `to_dir`, folder `folder`): a new conversation
/// with the transcript and context of its last finished turn, its
/// checkpoints, and `forked_from` naming it. The original is not changed.
pub async fn fork_into(
    from: &GroupHandle,
    from_dir: &Path,
    id: &str,
    to: &GroupHandle,
    to_dir: &Path,
    folder: &str,
) -> Result<ConversationDoc, StoreError> {
    let parent = from
        .get(Some(id.to_owned()))
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no conversation {id}")))?;
    if parent.base.is_some() {
        return Err(StoreError::Invalid(
            "a one-shot's state cannot be forked".into(),
        ));
    }
    let cp = parent.checkpoints.last().cloned();
    let (items, bytes) = cp
        .as_ref()
        .map_or((0, 0), |c| (c.journal_items, c.journal_bytes));
    let mut prefix = Vec::new();
    if bytes > 0 {
        std::fs::File::open(ConversationPaths::new(from_dir, &parent.id).journal)?
            .take(bytes)
            .read_to_end(&mut prefix)?;
    }
    if prefix.len() as u64 != bytes {
        return Err(StoreError::Damaged {
            path: ConversationPaths::new(from_dir, &parent.id).journal,
            message: format!(
                "the journal of {} is shorter than its checkpoint",
                parent.id
            ),
        });
    }
    agentx_shared::profile::create_private_dir(to_dir)?;
    let new_id = loop {
        let candidate = group::new_id();
        let paths = ConversationPaths::new(to_dir, &candidate);
        if !paths.doc.exists() && !paths.journal.exists() {
            break candidate;
        }
    };
    let to_paths = ConversationPaths::new(to_dir, &new_id);
    durable::write_atomic(&to_paths.journal, &prefix)?;
    // A rollback while we copied may have rewritten the journal.
    let again = from.get(Some(parent.id.clone())).await?;
    if again.is_none_or(|d| d.rollbacks != parent.rollbacks) {
        let _ = std::fs::remove_file(&to_paths.journal);
        return Err(StoreError::Invalid(format!(
            "conversation {} was rolled back while it was forked; try again",
            parent.id
        )));
    }
    let now = agentx_shared::time::unix_ms(SystemTime::now());
    let mut doc = ConversationDoc::new(new_id, folder.to_owned(), parent.agent.clone(), now);
    doc.title = parent.title.clone();
    doc.journal_items = items;
    doc.journal_bytes = bytes;
    if let Some(cp) = &cp {
        doc.response_id = cp.response_id.clone();
        doc.usage = cp.usage;
        doc.last_user = cp.last_user.clone();
        doc.last_assistant = cp.last_assistant.clone();
        doc.turns = cp.turns;
    }
    doc.checkpoints = parent.checkpoints.clone();
    doc.forked_from = Some(ForkOrigin {
        id: parent.id.clone(),
        turn: doc.turns,
    });
    if let Err(e) = to.adopt(doc.clone()).await {
        let _ = std::fs::remove_file(&to_paths.journal);
        return Err(e);
    }
    // (Adopting it announced the commit: indexed and pushed like any other.)
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a conversation document of `folder` into its group directory.
    fn keep(store: &Store, folder: &str, agent: &str, updated_at: i64) -> String {
        let id = group::new_id();
        let dir = store.group_dir(folder, agent);
        std::fs::create_dir_all(&dir).unwrap();
        let mut doc = ConversationDoc::new(id.clone(), folder.into(), agent.into(), updated_at);
        doc.updated_at = updated_at;
        let path = ConversationPaths::new(&dir, &id).doc;
        std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
        id
    }

    #[test]
    fn other_checkouts_of_the_project_are_found_and_an_id_has_one_holder() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(
            root.path().join("sessions"),
            crate::store::Commits::default(),
            crate::store::DEFAULT_IDLE_GROUPS,
        );
        let own = keep(&store, "/w/clone2", "default", 1);
        let old = keep(&store, "/w/clone1", "default", 2);
        let new = keep(&store, "/w/clone1", "default", 3);
        let other_agent = keep(&store, "/w/clone1", "reviewer", 4);
        let other_project = keep(&store, "/w/other", "default", 5);
        std::fs::write(
            store.group_dir("/w/clone1", "default").join("current.json"),
            b"{}",
        )
        .unwrap();
        let same = |f: &str| f.starts_with("/w/clone");
        let found: Vec<String> = store
            .kept_elsewhere("/w/clone2", "default", same)
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(found, [new.clone(), old]);
        let held = store.holder(&other_agent).unwrap();
        assert_eq!(
            (held.folder.as_str(), held.agent.as_str()),
            ("/w/clone1", "reviewer")
        );
        assert_eq!(store.holder(&own).unwrap().folder, "/w/clone2");
        assert_eq!(store.holder(&other_project).unwrap().folder, "/w/other");
        assert!(store.holder("current").is_none());
        assert!(store.holder(&group::new_id()).is_none());
        let beside = store.group_dir("/w/clone2", "default");
        assert!(kept_beside(&beside, &new));
        assert!(!kept_beside(&beside, &group::new_id()));
    }
}
