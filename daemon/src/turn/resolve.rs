//! How a turn that settles an earlier one starts: the last message again,
//! the failed request again (or on a new chain), or an interrupted turn finished.

use super::{
    Change, ConversationDoc, Event, RollbackTarget, Stop, TranscriptChange, Turn, TurnChange,
    TurnLease, Update, first_line,
};

impl Turn<'_> {
    /// Back to the last checkpoint, then the last message sent again.
    pub(super) async fn retry_message(
        &mut self,
        doc: ConversationDoc,
        lease: &TurnLease,
    ) -> Result<(), Stop> {
        if doc.last_user.is_empty() {
            return Err(Self::failed("there is no message to retry"));
        }
        let message = doc.last_user.clone();
        let target = if doc.checkpoints.is_empty() {
            RollbackTarget::Origin
        } else {
            RollbackTarget::Index(1)
        };
        let doc = self.group.rollback_in_turn(lease, target).await?;
        self.response_id = doc.response_id.clone();
        self.unsent = doc.unsent.clone();
        self.emit(Event::Notice(format!(
            "back at the last checkpoint; resending: {}",
            first_line(&message)
        )))
        .await;
        self.start_message(&doc, &message).await
    }
    /// The failed request again (on a new chain with `new_chain`): open
    /// calls are answered without running, then everything unsent goes.
    pub(super) async fn retry_request(
        &mut self,
        doc: &ConversationDoc,
        new_chain: bool,
    ) -> Result<(), Stop> {
        if new_chain {
            self.response_id = None;
            self.commit(Change::new_chain()).await?;
        }
        let outputs = Self::answer_unrun_calls(&doc.pending_calls);
        if outputs.is_empty() && self.unsent.is_empty() {
            // A turn the context window could not take was dropped.
            if let Some(failed) = &doc.failed {
                return Err(Stop::Refused(format!(
                    "the last turn cannot be sent again as it was: {}",
                    failed.message
                )));
            }
            return Err(Self::failed(
                "there is nothing to retry: the last request succeeded",
            ));
        }
        self.unsent.extend(outputs.iter().cloned());
        self.commit(Change {
            transcript: TranscriptChange {
                append: outputs,
                unsent: Some(self.unsent.clone()),
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                calls: Some(Vec::new()),
                ..TurnChange::started()
            },
            ..Change::default()
        })
        .await?;
        Ok(())
    }
    /// Finishes an interrupted turn's pending calls; whether anything is
    /// left to send to the model.
    pub(super) async fn continue_interrupted(
        &mut self,
        doc: &ConversationDoc,
    ) -> Result<bool, Stop> {
        if doc.pending_calls.is_empty() && self.unsent.is_empty() {
            if doc.interrupted.is_none() && !doc.turn_open {
                return Err(Self::failed("there is no interrupted turn to continue"));
            }
            // Interrupted after its last request had been answered and
            // recorded: nothing is left to run or send. Settle the marker so
            // the conversation simply goes on.
            self.commit(Change::turn(TurnChange {
                open: Some(false),
                interrupted: Update::Clear,
                ..TurnChange::default()
            }))
            .await?;
            self.emit(Event::Notice(
                "the interrupted turn had nothing left to run or send".to_owned(),
            ))
            .await;
            return Ok(false);
        }
        self.commit(Change::turn(TurnChange::started())).await?;
        if !doc.pending_calls.is_empty() {
            self.run_tools(doc.pending_calls.clone(), true).await?;
        }
        Ok(true)
    }
}
