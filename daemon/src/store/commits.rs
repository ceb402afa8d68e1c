//! The store's announcements: one [`Changed`] event for each conversation that committed a
//! change, sent to every subscriber (search indexer, remote pusher). The store knows none of them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Conversation `id` of group directory `dir` changed on disk: a turn, a
/// rollback, a rename, or a new conversation (fork, import, pull).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub dir: PathBuf,
    pub id: String,
    /// Its number among every change announced (1 = the first).
    pub seq: u64,
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
    /// Changes announced so far.
    announced: Arc<AtomicU64>,
}

impl Commits {
    /// A new subscriber: receives every change announced from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Changed> {
        self.subscribe_counted().0
    }

    /// [`Self::subscribe`], and the number of changes announced before it
    /// (the subscriber hears every one numbered above).
    pub fn subscribe_counted(&self) -> (mpsc::UnboundedReceiver<Changed>, u64) {
        let (tx, rx) = mpsc::unbounded_channel();
        let Ok(mut subscribers) = self.subscribers.lock() else {
            return (rx, self.announced());
        };
        subscribers.push(tx);
        (rx, self.announced())
    }

    /// How many changes were announced so far: a subscriber that has taken
    /// the change numbered this has heard every one before now.
    pub fn announced(&self) -> u64 {
        self.announced.load(Ordering::SeqCst)
    }

    /// Conversation `id` of group directory `dir` committed a change.
    /// Never blocks; a subscriber that went away is dropped.
    pub fn announce(&self, dir: &Path, id: &str) {
        if let Ok(mut subscribers) = self.subscribers.lock() {
            // Numbered under the lock: subscribers hear them in order.
            let changed = Changed {
                dir: dir.to_owned(),
                id: id.to_owned(),
                seq: self.announced.fetch_add(1, Ordering::SeqCst) + 1,
            };
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

    #[tokio::test]
    async fn changes_are_numbered_and_a_subscriber_knows_where_it_came_in() {
        let commits = Commits::default();
        commits.announce(Path::new("/g"), "before");
        let (mut rx, from) = commits.subscribe_counted();
        assert_eq!(from, 1);
        commits.announce(Path::new("/g"), "c1");
        commits.announce(Path::new("/g"), "c2");
        assert_eq!(commits.announced(), 3);
        assert_eq!(rx.recv().await.unwrap().seq, 2);
        let last = rx.recv().await.unwrap();
        assert_eq!((last.id.as_str(), last.seq), ("c2", 3));
    }
}
