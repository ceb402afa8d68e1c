//! What the benchmarks under `benches/` measure in-process: token counting,
//! composing a compacted context, a tool call's commit (not a stable API).

pub use crate::turn::compact::{Budget, compose};
pub use crate::turn::tokens::Counter;

/// A conversation on disk with `pending` tool calls, for the commit-cost
/// benchmark: where a call stands is committed as one append
/// ([`CallsBench::append`]) or, as before, as a rewrite of the whole
/// document ([`CallsBench::rewrite`]).
pub struct CallsBench {
    conversation: crate::store::conversation::Conversation,
    next: usize,
}

impl CallsBench {
    pub fn new(dir: &std::path::Path, pending: usize) -> std::io::Result<Self> {
        use agentx_shared::conversation::{CallState, PendingCall};
        let mut doc = crate::store::conversation::ConversationDoc::new(
            "bench".into(),
            "/bench".into(),
            "default".into(),
            0,
        );
        doc.pending_calls = (0..pending)
            .map(|i| PendingCall {
                call_id: format!("call_{i:06}"),
                name: "shell".into(),
                arguments: format!(r#"{{"command":"cargo test -p crate{i} 2>&1 | tail"}}"#),
                // Finished calls keep their output until the step ends.
                state: CallState::Finished,
                exit_code: Some(0),
                output: "test result: ok. 12 passed; 0 failed\n".repeat(8),
            })
            .collect();
        let conversation = crate::store::conversation::Conversation::create(dir, doc)?;
        Ok(Self {
            conversation,
            next: 0,
        })
    }

    fn next_call(&mut self) -> (usize, agentx_shared::conversation::PendingCall) {
        let calls = &self.conversation.doc.pending_calls;
        let i = self.next % calls.len();
        self.next += 1;
        let mut call = calls[i].clone();
        call.exit_code = Some((self.next % 2) as i32);
        (i, call)
    }

    /// One call's new state as agentd commits it: one durable append.
    pub fn append(&mut self) -> std::io::Result<()> {
        let (i, call) = self.next_call();
        self.conversation.update_call(i, call)
    }

    /// The same as before: the list changed in memory, the whole document
    /// written again (temp file, fsync, rename, fsync of the directory).
    pub fn rewrite(&mut self) -> std::io::Result<()> {
        let (i, call) = self.next_call();
        self.conversation.doc.pending_calls[i] = call;
        self.conversation.save()
    }
}
