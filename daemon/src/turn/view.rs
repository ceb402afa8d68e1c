//! The model's view of a conversation, read from the journal's end: back to
//! its last compaction, or only as far as a decision about it needs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentx_shared::conversation::Item;

use super::tokens::Counter;
use super::{Turn, context};
use crate::store::{Enough, StoreError};

/// What was read of the model's view.
#[derive(Debug)]
pub struct View {
    /// Made valid to resend ([`context::normalize`]), oldest first.
    pub items: Vec<Item>,
    /// Read only back to past the limit: the view's older part was left
    /// unread, so its size is more than these items'.
    pub cut: bool,
}

/// When a read backwards has enough of the model's view: at the last
/// compaction (the view starts with its context), or past `limit` tokens
/// counted newest first — which sets `cut`.
pub fn enough(counter: Counter, limit: Option<u64>, cut: Arc<AtomicBool>) -> Enough {
    Box::new(move |newest_first| {
        let mut tokens = 0u64;
        for item in newest_first {
            if matches!(item, Item::Compaction { .. }) {
                return true;
            }
            tokens += counter.item(item);
            if limit.is_some_and(|limit| tokens > limit) {
                cut.store(true, Ordering::Relaxed);
                return true;
            }
        }
        false
    })
}

impl Turn<'_> {
    /// The model's view of the conversation now, read back to its last
    /// compaction — or, with `limit`, to past that many tokens when sooner.
    pub(super) async fn read_view(&self, limit: Option<u64>) -> Result<View, StoreError> {
        let cut = Arc::new(AtomicBool::new(false));
        let transcript = self
            .group
            .transcript_tail(&self.session, enough(self.counter, limit, cut.clone()))
            .await?;
        Ok(View {
            items: context::normalize(&context::model_view(&transcript)),
            cut: cut.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conversation::{Conversation, ConversationDoc};

    fn user(i: usize) -> Item {
        Item::User {
            text: format!("message {i}: {}", "x".repeat(400)),
        }
    }

    /// The tail read with [`enough`], and whether it said it was cut.
    fn read(s: &Conversation, counter: Counter, limit: Option<u64>) -> (Vec<Item>, bool) {
        let cut = Arc::new(AtomicBool::new(false));
        let enough = enough(counter, limit, cut.clone());
        let items = s.transcript_tail(|read| enough(read)).unwrap();
        (items, cut.load(Ordering::Relaxed))
    }

    #[test]
    fn a_view_is_read_back_to_its_compaction_or_past_the_limit_and_cut_says_which() {
        let dir = tempfile::tempdir().unwrap();
        let doc = ConversationDoc::new("abc".into(), "/f".into(), "default".into(), 1);
        let mut s = Conversation::create(dir.path(), doc).unwrap();
        // About 2 MB: read backwards in several pieces.
        let all: Vec<Item> = (0..5000).map(user).collect();
        s.append(&all, 2).unwrap();
        s.save().unwrap();
        let counter = Counter::bytes();
        let total = counter.items(&all);

        let (items, cut) = read(&s, counter, None);
        assert_eq!((items.len(), cut), (all.len(), false));
        // Past 10,000 tokens: only the end, and said to be cut.
        let (items, cut) = read(&s, counter, Some(10_000));
        assert!(cut);
        assert!(items.len() < all.len() / 4, "{}", items.len());
        assert!(counter.items(&items) > 10_000);
        assert_eq!(items.last(), all.last());
        // A limit passed only at the journal's start: all of it was read,
        // so nothing is cut.
        let (items, cut) = read(&s, counter, Some(total - 1));
        assert_eq!((items.len(), cut), (all.len(), false));

        // After a compaction: back to it, whatever the limit.
        let compaction = Item::Compaction {
            summary: "s".into(),
            context: vec![Item::User {
                text: "summary".into(),
            }],
            tokens_before: total,
            tokens_after: 10,
            replaced: 5000,
            reason: "auto".into(),
        };
        s.append(&[compaction.clone(), user(5000)], 3).unwrap();
        s.save().unwrap();
        for limit in [None, Some(1_000_000)] {
            let (items, cut) = read(&s, counter, limit);
            assert!(!cut);
            assert!(items.len() < all.len() / 4, "{}", items.len());
            let view = context::model_view(&items);
            assert_eq!(
                view,
                vec![
                    Item::User {
                        text: "summary".into()
                    },
                    user(5000)
                ]
            );
        }
    }
}
