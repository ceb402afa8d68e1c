//! One turn at a time per conversation: starting a turn (or queueing the
//! caller behind the running one) and handing it to the next waiter at its end.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use super::Group;
use crate::store::StoreError;
use crate::store::conversation::ConversationDoc;

impl Group {
    pub(super) fn begin_turn(
        &mut self,
        folder: &str,
        session: Option<String>,
        reply: oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ) {
        let id = match session.or_else(|| self.current_id(folder)) {
            Some(id) => id,
            None => match self
                .create(folder)
                .and_then(|id| self.set_current(folder, &id).map(|()| id))
            {
                Ok(id) => id,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            },
        };
        let doc = match self.session(folder, &id) {
            Ok(s) => s.doc.clone(),
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if self.running.contains(&id) {
            self.waiting.entry(id).or_default().push_back(reply);
            return;
        }
        self.running.insert(id);
        let _ = reply.send(Ok(doc));
    }

    /// Starts a turn on `id` unless one runs on it already (then `None`).
    pub(super) fn try_begin_turn(
        &mut self,
        folder: &str,
        id: String,
    ) -> Result<Option<ConversationDoc>, StoreError> {
        let doc = self.session(folder, &id).map(|s| s.doc.clone())?;
        if self.running.contains(&id) {
            return Ok(None);
        }
        self.running.insert(id);
        Ok(Some(doc))
    }

    pub(super) fn end_turn(&mut self, id: &str) {
        // Hand the conversation to the next live waiter, if any.
        while let Some(next) = self.waiting.get_mut(id).and_then(VecDeque::pop_front) {
            let doc = match self.sessions.get(id) {
                Some(s) => Ok(s.doc.clone()),
                None => Err(StoreError::NotFound(format!(
                    "conversation {id} was cleared"
                ))),
            };
            if next.send(doc).is_ok() {
                return;
            }
        }
        self.waiting.remove(id);
        self.running.remove(id);
    }
}
