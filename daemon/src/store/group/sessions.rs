//! The actor's conversations by id, noting which ones may have changed
//! since the actor last published its view (every mutable access counts).

use std::collections::HashMap;
use std::collections::HashSet;

use crate::store::conversation::Conversation;

/// Conversations by id; `get_mut`, `insert`, `remove` and `clear` note
/// what they touched for [`Sessions::take_touched`].
#[derive(Default)]
pub(super) struct Sessions {
    by_id: HashMap<String, Conversation>,
    touched: HashSet<String>,
}

impl Sessions {
    pub(super) fn get(&self, id: &str) -> Option<&Conversation> {
        self.by_id.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Conversation> {
        let found = self.by_id.get_mut(id);
        if found.is_some() {
            self.touched.insert(id.to_owned());
        }
        found
    }

    pub(super) fn insert(&mut self, id: String, session: Conversation) {
        self.touched.insert(id.clone());
        self.by_id.insert(id, session);
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Conversation> {
        self.touched.insert(id.to_owned());
        self.by_id.remove(id)
    }

    /// Forgets every conversation (the actor reads them again).
    pub(super) fn clear(&mut self) {
        self.touched.extend(self.by_id.drain().map(|(id, _)| id));
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Conversation> {
        self.by_id.values()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Conversation)> {
        self.by_id.iter()
    }

    /// The ids touched since the last call.
    pub(super) fn take_touched(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.touched)
    }
}
