//! The conversation store: one actor task per (folder, agent) group owns
//! that group's files and serializes every write; handlers talk to it
//! through a [`GroupHandle`].

pub(crate) mod durable;
pub mod fork;
mod group;
pub mod oneshot;
pub mod session;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use group::{Change, GroupHandle, OpenTarget, RollbackTarget, TurnLease};

use agentx_shared::folder::{check_component, folder_key};

/// Why a store request failed; mapped to a gRPC status at the edge.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("storage error: {0}")]
    Io(String),
    #[error("agentd is shutting down")]
    Closed,
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.to_string())
    }
}

/// Registry of group actors, created on first use.
pub struct Store {
    sessions_dir: PathBuf,
    groups: Mutex<HashMap<(String, String), GroupHandle>>,
    /// One-shots running now (their state must not be pruned).
    active_oneshots: Mutex<HashSet<String>>,
}

impl Store {
    pub fn new(sessions_dir: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            sessions_dir,
            groups: Mutex::new(HashMap::new()),
            active_oneshots: Mutex::new(HashSet::new()),
        })
    }

    /// `<sessions>/<folder-key>/<agent>`.
    pub fn group_dir(&self, folder: &str, agent: &str) -> PathBuf {
        self.sessions_dir
            .join(folder_key(std::path::Path::new(folder)))
            .join(agent)
    }

    /// The actor for `folder` (absolute path) and `agent`.
    pub fn group(&self, folder: &str, agent: &str) -> Result<GroupHandle, StoreError> {
        check_component("agent name", agent).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if !folder.starts_with('/') || folder.split('/').any(|c| c == "..") {
            return Err(StoreError::Invalid(format!(
                "folder {folder:?} must be an absolute path without '..'"
            )));
        }
        let key = (folder.to_owned(), agent.to_owned());
        let mut groups = self
            .groups
            .lock()
            .map_err(|_| StoreError::Io("store registry poisoned".into()))?;
        if let Some(handle) = groups.get(&key) {
            return Ok(handle.clone());
        }
        let dir = self.group_dir(folder, agent);
        let handle = group::spawn(dir, folder.to_owned(), agent.to_owned(), true);
        groups.insert(key, handle.clone());
        Ok(handle)
    }
}
