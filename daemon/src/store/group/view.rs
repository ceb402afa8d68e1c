//! A group's conversations as its actor left them after its last finished
//! request, for reads (status) that must not wait behind a commit's fsync.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::sync::watch;

use crate::store::conversation::ConversationDoc;

/// Conversations the view copies at most; asking for more starts afresh.
const WATCHED: usize = 16;

/// What the actor published, the number of the request it published
/// after, and the lock that keeps requests' numbers in queue order.
pub(in crate::store) struct View {
    state: RwLock<State>,
    /// The number of the last request whose changes `state` holds.
    done: watch::Sender<u64>,
    /// Held while a request is numbered and queued: numbers reach the
    /// actor in increasing order, so "published past mine" means "mine
    /// is in".
    order: Mutex<()>,
}

#[derive(Default)]
struct State {
    /// The actor has read its directory (else nothing here is known).
    ready: bool,
    current: HashMap<String, String>,
    /// Copies of the watched conversations.
    docs: HashMap<String, Arc<ConversationDoc>>,
    /// The conversations asked for through the view: only these are copied.
    watched: HashSet<String>,
}

impl View {
    pub(in crate::store) fn new() -> Self {
        Self {
            state: RwLock::new(State::default()),
            done: watch::Sender::new(0),
            order: Mutex::new(()),
        }
    }

    /// Runs `send` (which numbers and queues a request) so that numbers
    /// reach the actor in the order they were taken.
    pub(in crate::store) fn in_order<T>(&self, send: impl FnOnce() -> T) -> T {
        let _queued_in_order = self.order.lock().unwrap_or_else(PoisonError::into_inner);
        send()
    }

    /// Conversation `session` of `folder` (the folder's current one when
    /// `None`) as the last finished request left it; `None` when the view
    /// does not hold it — the caller asks the actor, and from the next
    /// request on the view holds it.
    pub(in crate::store) fn peek(
        &self,
        folder: &str,
        session: Option<&str>,
    ) -> Option<Option<ConversationDoc>> {
        let id = {
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            if !state.ready {
                return None;
            }
            let id = match session {
                Some(id) => id,
                None => state.current.get(folder)?,
            };
            if let Some(doc) = state.docs.get(id).filter(|d| d.folder == folder) {
                return Some(Some(ConversationDoc::clone(doc)));
            }
            id.to_owned()
        };
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.watched.len() >= WATCHED && !state.watched.contains(&id) {
            state.watched.clear();
            state.docs.clear();
        }
        state.watched.insert(id);
        None
    }

    /// Publishes what request `seq` left: whether the directory is read,
    /// the current conversations, and a fresh copy of each watched
    /// conversation that was `touched` (or not copied yet).
    pub(in crate::store) fn publish<'a>(
        &self,
        seq: u64,
        loaded: bool,
        current: &HashMap<String, String>,
        touched: &HashSet<String>,
        doc_of: impl Fn(&str) -> Option<&'a ConversationDoc>,
    ) {
        {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            let state = &mut *state;
            state.ready = loaded;
            if loaded {
                if state.current != *current {
                    state.current.clone_from(current);
                }
                for id in &state.watched {
                    if !touched.contains(id) && state.docs.contains_key(id) {
                        continue;
                    }
                    match doc_of(id) {
                        Some(doc) => state.docs.insert(id.clone(), Arc::new(doc.clone())),
                        None => state.docs.remove(id),
                    };
                }
            } else {
                state.current.clear();
                state.docs.clear();
            }
        }
        self.done.send_replace(seq);
    }

    /// Returns once request `seq` is published, or the actor is gone
    /// (`closed` resolves).
    pub(in crate::store) async fn published(
        &self,
        seq: u64,
        closed: impl std::future::Future<Output = ()>,
    ) {
        let mut done = self.done.subscribe();
        tokio::select! {
            _ = done.wait_for(|d| *d >= seq) => {}
            () = closed => {}
        }
    }
}
