//! The store's announcements: one [`Changed`] event for each conversation that committed a
//! change, sent to every subscriber (search indexer, remote pusher). The store knows none of them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Conversation `id` of group directory `dir` changed on disk: a turn, a
/// rollback, a rename, or a new conversation (fork, import, pull).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub dir: PathBuf,
    pub id: String,
}

impl Changed {
    /// The conversation's state document.
    pub fn doc(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.id))
    }
}

/// Where changes are announced; clones announce to the same subscribers.
#[derive(Clone, Default)]
pub struct Commits {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Changed>>>>,
}

impl Commits {
    /// A new subscriber: receives every change announced from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Changed> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.push(tx);
        }
        rx
    }

    /// Conversation `id` of group directory `dir` committed a change.
    /// Never blocks; a subscriber that went away is dropped.
    pub fn announce(&self, dir: &Path, id: &str) {
        let changed = Changed {
            dir: dir.to_owned(),
            id: id.to_owned(),
        };
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.retain(|tx| tx.send(changed.clone()).is_ok());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_subscriber_hears_every_commit_and_a_gone_one_is_dropped() {
        let commits = Commits::default();
        let mut a = commits.subscribe();
        let b = commits.subscribe();
        drop(b);
        commits.announce(Path::new("/g"), "c1");
        let heard = a.recv().await.unwrap();
        assert_eq!(heard.id, "c1");
        assert_eq!(heard.doc(), Path::new("/g/c1.json"));
        assert_eq!(commits.subscribers.lock().unwrap().len(), 1);
    }
}
