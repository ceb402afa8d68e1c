//! The store's announcements: the document of each conversation that committed a change,
//! sent to every subscriber (search indexer, remote pusher). The store knows none of them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Where commits are announced; clones announce to the same subscribers.
#[derive(Clone, Default)]
pub struct Commits {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<PathBuf>>>>,
}

impl Commits {
    /// A new subscriber: receives the document path of every commit
    /// announced from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<PathBuf> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.push(tx);
        }
        rx
    }

    /// Conversation `id` of group directory `dir` committed a change.
    /// Never blocks; a subscriber that went away is dropped.
    pub fn announce(&self, dir: &Path, id: &str) {
        let doc = dir.join(format!("{id}.json"));
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.retain(|tx| tx.send(doc.clone()).is_ok());
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
        assert_eq!(a.recv().await.unwrap(), Path::new("/g/c1.json"));
        assert_eq!(commits.subscribers.lock().unwrap().len(), 1);
    }
}
