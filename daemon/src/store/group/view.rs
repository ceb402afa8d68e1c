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
        let (found, id) = {
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            if !state.ready {
                return None;
            }
            let id = match session {
                Some(id) => id,
                None => state.current.get(folder)?,
            };
            let found = state.docs.get(id).filter(|d| d.folder == folder).cloned();
            (found, id.to_owned())
        };
        // Copied with the lock let go (the actor may be waiting to publish).
        if let Some(doc) = found {
            return Some(Some(ConversationDoc::clone(&doc)));
        }
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
        // Copied before the lock is taken: readers never wait for a copy.
        let stale: Vec<String> = {
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            state
                .watched
                .iter()
                .filter(|id| touched.contains(*id) || !state.docs.contains_key(*id))
                .cloned()
                .collect()
        };
        let fresh: Vec<(String, Option<Arc<ConversationDoc>>)> = stale
            .into_iter()
            .map(|id| {
                let doc = doc_of(&id).map(|d| Arc::new(d.clone()));
                (id, doc)
            })
            .collect();
        {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            state.ready = loaded;
            if loaded {
                if state.current != *current {
                    state.current.clone_from(current);
                }
                for (id, doc) in fresh {
                    match doc {
                        // Unless a reader started the watch list afresh
                        // meanwhile: an unwatched copy would never be renewed.
                        Some(doc) if state.watched.contains(&id) => state.docs.insert(id, doc),
                        _ => state.docs.remove(&id),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, items: u64) -> ConversationDoc {
        let mut doc = ConversationDoc::new(id.into(), "/w".into(), "default".into(), 0);
        doc.journal_items = items;
        doc
    }

    /// Publishes `docs` as the actor's conversations, `touched` all of them.
    fn publish(view: &View, seq: u64, docs: &[ConversationDoc]) {
        let by_id: HashMap<String, &ConversationDoc> =
            docs.iter().map(|d| (d.id.clone(), d)).collect();
        let touched = by_id.keys().cloned().collect();
        let current = HashMap::from([("/w".to_owned(), docs[0].id.clone())]);
        view.publish(seq, true, &current, &touched, |id| by_id.get(id).copied());
    }

    fn items(view: &View, id: &str) -> Option<u64> {
        view.peek("/w", Some(id))
            .map(|d| d.map_or(0, |d| d.journal_items))
    }

    #[test]
    fn a_conversation_is_copied_once_asked_for_and_renewed_when_touched() {
        let view = View::new();
        assert_eq!(
            items(&view, "a"),
            None,
            "nothing is known before the actor read its directory"
        );
        publish(&view, 1, &[doc("a", 1), doc("b", 1)]);
        assert_eq!(items(&view, "a"), None, "the first read asks the actor");
        publish(&view, 2, &[doc("a", 1), doc("b", 1)]);
        assert_eq!(items(&view, "a"), Some(1));
        assert_eq!(
            view.peek("/w", None).map(|d| d.map(|d| d.id)),
            Some(Some("a".into()))
        );
        assert_eq!(
            view.peek("/elsewhere", Some("a")),
            None,
            "another folder's is asked for"
        );
        publish(&view, 3, &[doc("a", 2), doc("b", 1)]);
        assert_eq!(items(&view, "a"), Some(2));
        assert_eq!(*view.done.borrow(), 3);
    }

    #[test]
    fn past_the_limit_the_watch_list_starts_afresh_and_keeps_nothing_stale() {
        let view = View::new();
        let docs: Vec<ConversationDoc> = (0..=WATCHED).map(|i| doc(&format!("c{i}"), 1)).collect();
        publish(&view, 1, &docs);
        for d in &docs[..WATCHED] {
            assert_eq!(items(&view, &d.id), None);
        }
        publish(&view, 2, &docs);
        assert_eq!(items(&view, "c0"), Some(1));
        // One more than the limit: the list starts again with it alone.
        assert_eq!(items(&view, &docs[WATCHED].id), None);
        publish(&view, 3, &docs);
        assert_eq!(items(&view, &docs[WATCHED].id), Some(1));
        assert_eq!(items(&view, "c0"), None, "an evicted copy is not served");
    }
}
