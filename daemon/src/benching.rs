//! What the benchmarks under `benches/` measure in-process: token counting,
//! composing a compacted context, a tool call's commit, indexing a commit
//! for search (not a stable API).

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
                images: Vec::new(),
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

/// Conversations on disk and a search index over them, for the
/// indexing-cost benchmark: one commit (a turn appended) indexed as the
/// indexer does it ([`SearchBench::commit`]), or the conversation indexed
/// whole as before ([`SearchBench::commit_whole`]).
pub struct SearchBench {
    index: crate::search::Direct,
    conversations: Vec<crate::store::conversation::Conversation>,
    /// Each conversation's journal length after each of its turns.
    ends: Vec<Vec<(u64, u64)>>,
    clock: i64,
}

/// What the benchmark's setup or a commit failed on.
#[derive(Debug)]
pub struct SearchBenchError(pub String);

impl std::fmt::Display for SearchBenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SearchBenchError {}

fn bench_err(e: impl std::fmt::Display) -> SearchBenchError {
    SearchBenchError(e.to_string())
}

/// Turn `n` of a bench conversation: a request, a tool call and its
/// output, an answer (about 1.5 KB, as a coding turn).
fn bench_turn(n: usize) -> Vec<agentx_shared::conversation::Item> {
    use agentx_shared::conversation::Item;
    vec![
        Item::User {
            text: format!("turn {n}: please look at parser{n}.rs, the spans are off by one"),
        },
        Item::FunctionCall {
            call_id: format!("call_{n}"),
            name: "shell".into(),
            arguments: format!(r#"{{"command":"sed -n 1,40p src/parser{n}.rs"}}"#),
        },
        Item::FunctionOutput {
            call_id: format!("call_{n}"),
            output: format!(
                "fn span_{n}(start: usize, end: usize) -> Span {{ Span {{ start, end }} }}\n"
            )
            .repeat(12),
            images: Vec::new(),
        },
        Item::Assistant {
            text: format!(
                "The span of token {n} ends one byte early; I fixed it and `cargo test` passes.\n"
            )
            .repeat(3),
        },
    ]
}

impl SearchBench {
    /// One conversation per entry of `turns`, with that many turns (each
    /// written in one append), all indexed, in `dir`.
    pub fn new(dir: &std::path::Path, turns: &[usize]) -> Result<Self, SearchBenchError> {
        let sessions = dir.join("sessions/bench/default");
        std::fs::create_dir_all(&sessions).map_err(bench_err)?;
        let index = crate::search::Direct::open(&dir.join("search")).map_err(bench_err)?;
        let mut bench = Self {
            index,
            conversations: Vec::new(),
            ends: Vec::new(),
            clock: 1,
        };
        for (i, &n) in turns.iter().enumerate() {
            let mut doc = crate::store::conversation::ConversationDoc::new(
                format!("{:011}-bench{i}", i + 1),
                "/bench".into(),
                "default".into(),
                0,
            );
            doc.title = format!("bench conversation {i}");
            let mut c = crate::store::conversation::Conversation::create(&sessions, doc)
                .map_err(bench_err)?;
            let mut ends = Vec::new();
            for t in 1..=n {
                c.append(&bench_turn(t), t as i64).map_err(bench_err)?;
                ends.push((c.doc.journal_bytes, c.doc.journal_items));
            }
            c.doc.turns = u32::try_from(n).unwrap_or(u32::MAX);
            c.save().map_err(bench_err)?;
            bench.index.index(&c.paths.doc).map_err(bench_err)?;
            bench.conversations.push(c);
            bench.ends.push(ends);
        }
        Ok(bench)
    }

    /// Turns conversation `which` holds.
    pub fn turns(&self, which: usize) -> usize {
        self.ends.get(which).map_or(0, Vec::len)
    }

    /// Rolls conversation `which` back to its first `turns` turns and
    /// indexes that (not part of any measure).
    pub fn roll_back(&mut self, which: usize, turns: usize) -> Result<(), SearchBenchError> {
        let c = self
            .conversations
            .get_mut(which)
            .ok_or_else(|| bench_err("no such conversation"))?;
        let ends = &mut self.ends[which];
        ends.truncate(turns);
        let (bytes, items) = ends.last().copied().unwrap_or((0, 0));
        c.doc.journal_bytes = bytes;
        c.doc.journal_items = items;
        c.doc.rollbacks += 1;
        c.save().map_err(bench_err)?;
        c.truncate_journal().map_err(bench_err)?;
        self.index.index(&c.paths.doc).map_err(bench_err)?;
        Ok(())
    }

    /// Appends a turn to conversation `which` (not measured) and returns
    /// how long indexing that commit took, incrementally as agentd does.
    pub fn commit(&mut self, which: usize) -> Result<std::time::Duration, SearchBenchError> {
        let path = self.append(which)?;
        let start = std::time::Instant::now();
        self.index.index(&path).map_err(bench_err)?;
        Ok(start.elapsed())
    }

    /// The same, the conversation indexed whole (as before incremental
    /// indexing, or after a restart).
    pub fn commit_whole(&mut self, which: usize) -> Result<std::time::Duration, SearchBenchError> {
        let path = self.append(which)?;
        let start = std::time::Instant::now();
        self.index.forget_progress();
        self.index.index(&path).map_err(bench_err)?;
        Ok(start.elapsed())
    }

    fn append(&mut self, which: usize) -> Result<std::path::PathBuf, SearchBenchError> {
        self.clock += 1;
        let c = self
            .conversations
            .get_mut(which)
            .ok_or_else(|| bench_err("no such conversation"))?;
        let ends = &mut self.ends[which];
        c.append(&bench_turn(ends.len() + 1), self.clock)
            .map_err(bench_err)?;
        ends.push((c.doc.journal_bytes, c.doc.journal_items));
        c.doc.updated_at = self.clock;
        c.save().map_err(bench_err)?;
        Ok(c.paths.doc.clone())
    }

    /// How many hits a search for `text` gives (to check the index).
    pub fn hits(&self, text: &str) -> usize {
        self.index
            .search()
            .search(text, None, 100)
            .map_or(0, |h| h.len())
    }
}
