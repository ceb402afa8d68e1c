//! Tests of one conversation on disk: appends, the commit point, branches,
//! rebuilding from the journal, and corrupt files.

use agentx_shared::conversation::CallState;

use super::rebuild::SHELL_HEADER;
use super::*;

fn new_conversation(dir: &Path) -> Conversation {
    Conversation::create(
        dir,
        ConversationDoc::new("abc".into(), "/f".into(), "default".into(), 1),
    )
    .unwrap()
}

#[test]
fn appended_items_survive_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    s.append(
        &[
            Item::User { text: "hi".into() },
            Item::Assistant { text: "yo".into() },
        ],
        2,
    )
    .unwrap();
    s.save().unwrap();
    let loaded = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(loaded.doc.journal_items, 2);
    assert_eq!(
        loaded.transcript().unwrap(),
        vec![
            Item::User { text: "hi".into() },
            Item::Assistant { text: "yo".into() }
        ]
    );
}

#[test]
fn bytes_appended_but_never_committed_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    s.append(
        &[Item::User {
            text: "kept".into(),
        }],
        2,
    )
    .unwrap();
    s.save().unwrap();
    // A crash after this append but before the document write:
    s.append(
        &[Item::User {
            text: "lost".into(),
        }],
        3,
    )
    .unwrap();
    let mut loaded = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(
        loaded.transcript().unwrap(),
        vec![Item::User {
            text: "kept".into()
        }]
    );
    loaded
        .append(
            &[Item::Assistant {
                text: "next".into(),
            }],
            4,
        )
        .unwrap();
    loaded.save().unwrap();
    let again = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(
        again.transcript().unwrap(),
        vec![
            Item::User {
                text: "kept".into()
            },
            Item::Assistant {
                text: "next".into()
            }
        ]
    );
}

#[test]
fn a_branch_reads_its_base_until_the_base_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut base = new_conversation(dir.path());
    base.append(
        &[Item::User {
            text: "base".into(),
        }],
        2,
    )
    .unwrap();
    base.save().unwrap();
    let branch_dir = dir.path().join("oneshot");
    std::fs::create_dir(&branch_dir).unwrap();
    let mut doc = ConversationDoc::new("branch".into(), "/f".into(), "default".into(), 3);
    doc.base = Some(BaseRef {
        journal: base.paths.journal.clone(),
        bytes: base.doc.journal_bytes,
        items: base.doc.journal_items,
        rollbacks: base.doc.rollbacks,
    });
    let mut branch = Conversation::create(&branch_dir, doc).unwrap();
    branch
        .append(&[Item::User { text: "own".into() }], 4)
        .unwrap();
    branch.save().unwrap();
    assert_eq!(
        branch.transcript().unwrap(),
        vec![
            Item::User {
                text: "base".into()
            },
            Item::User { text: "own".into() }
        ]
    );
    // The base is rolled back (and could be rewritten): no silent resend.
    base.doc.rollbacks += 1;
    base.save().unwrap();
    let err = branch.transcript().unwrap_err();
    assert!(err.to_string().contains("rolled back"), "{err}");
}

#[test]
fn a_document_is_rebuilt_from_the_journal_up_to_its_last_good_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    let turn = |q: &str, a: &str| {
        vec![
            Item::User { text: q.into() },
            Item::Assistant { text: a.into() },
        ]
    };
    s.append(&turn("first line\nmore", "one"), 2).unwrap();
    s.append(
        &[
            Item::User {
                text: format!("{SHELL_HEADER}$ ls\n```\n\nsecond"),
            },
            Item::Assistant {
                text: "calling".into(),
            },
            Item::FunctionCall {
                call_id: "c1".into(),
                name: "shell".into(),
                arguments: "{}".into(),
            },
        ],
        3,
    )
    .unwrap();
    s.append(
        &[
            Item::FunctionOutput {
                call_id: "c1".into(),
                output: "ok".into(),
                images: Vec::new(),
            },
            Item::Assistant { text: "two".into() },
        ],
        4,
    )
    .unwrap();
    let complete = s.doc.journal_bytes;
    s.append(
        &[
            Item::User {
                text: "third".into(),
            },
            Item::Assistant {
                text: "calling again".into(),
            },
            Item::FunctionCall {
                call_id: "c2".into(),
                name: "shell".into(),
                arguments: "{\"command\":\"make\"}".into(),
            },
        ],
        5,
    )
    .unwrap();
    let good = s.doc.journal_bytes;
    let mut bytes = std::fs::read(&s.paths.journal).unwrap();
    bytes.extend_from_slice(b"{\"at\":6,\"type\":\"function_out");
    std::fs::write(&s.paths.journal, &bytes).unwrap();

    let rebuilt = Conversation::rebuild(dir.path(), "abc", "/f", "default", 7).unwrap();
    let doc = &rebuilt.session.doc;
    assert_eq!(rebuilt.cut_tail, b"{\"at\":6,\"type\":\"function_out");
    assert_eq!(doc.title, "first line");
    assert_eq!(doc.last_user, "third");
    assert_eq!(doc.last_assistant, "calling again");
    assert_eq!((doc.created_at, doc.updated_at), (2, 5));
    assert_eq!(doc.turns, 2);
    assert_eq!(doc.journal_bytes, good);
    assert_eq!(doc.journal_items, 10);
    assert_eq!(doc.rollbacks, 7);
    let cps: Vec<(u32, u64)> = doc
        .checkpoints
        .iter()
        .map(|c| (c.turns, c.journal_items))
        .collect();
    assert_eq!(cps, vec![(1, 2), (2, 7)]);
    assert_eq!(doc.checkpoints[1].journal_bytes, complete);
    assert_eq!(doc.checkpoints[1].last_user, "second");
    assert_eq!(doc.pending_calls.len(), 1);
    assert_eq!(doc.pending_calls[0].call_id, "c2");
    assert_eq!(doc.pending_calls[0].state, CallState::Running);
    assert!(doc.unsent.is_empty());
    assert!(doc.interrupted.is_some());
    let kept = rebuilt.keep_cut_tail(9).unwrap().unwrap();
    assert_eq!(std::fs::read(kept).unwrap(), rebuilt.cut_tail);

    std::fs::write(&s.paths.journal, b"garbage\n").unwrap();
    assert!(matches!(
        Conversation::rebuild(dir.path(), "abc", "/f", "default", 0),
        Err(LoadError::Corrupt { .. })
    ));
}

#[test]
fn garbage_and_truncated_files_are_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    s.append(&[Item::User { text: "hi".into() }], 2).unwrap();
    s.save().unwrap();
    std::fs::write(&s.paths.journal, b"").unwrap();
    assert!(matches!(
        Conversation::load(&s.paths.doc),
        Err(LoadError::Corrupt { .. })
    ));
    std::fs::write(&s.paths.doc, b"{\"format\":1,\"id\":").unwrap();
    assert!(matches!(
        Conversation::load(&s.paths.doc),
        Err(LoadError::Corrupt { .. })
    ));
}

fn pending(n: usize) -> Vec<PendingCall> {
    (0..n)
        .map(|i| PendingCall {
            call_id: format!("call_{i}"),
            name: "shell".into(),
            arguments: "{}".into(),
            state: CallState::NotStarted,
            exit_code: None,
            output: String::new(),
            images: Vec::new(),
        })
        .collect()
}

fn finished(call: &PendingCall, output: &str) -> PendingCall {
    PendingCall {
        state: CallState::Finished,
        exit_code: Some(0),
        output: output.into(),
        ..call.clone()
    }
}

#[test]
fn a_calls_state_is_one_append_and_survives_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    s.doc.pending_calls = pending(1000);
    s.save().unwrap();
    let doc_bytes = std::fs::read(&s.paths.doc).unwrap();
    let call = finished(&s.doc.pending_calls[7], "seven");
    s.update_call(7, call.clone()).unwrap();
    // The document was not rewritten; one short record was appended.
    assert_eq!(std::fs::read(&s.paths.doc).unwrap(), doc_bytes);
    let log = std::fs::metadata(&s.paths.calls).unwrap().len();
    assert!(log < 200, "{log} bytes for one call");
    s.update_call(8, finished(&s.doc.pending_calls[8], "eight"))
        .unwrap();
    let per_call = std::fs::metadata(&s.paths.calls).unwrap().len() - log;
    assert!(per_call <= log + 2, "{per_call} vs {log}");

    // A kill -9 now: the load folds the records in.
    let mut loaded = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(loaded.doc.pending_calls[7], call);
    assert_eq!(loaded.doc.pending_calls[8].output, "eight");
    assert_eq!(loaded.doc.pending_calls[9].state, CallState::NotStarted);

    // A save folds them into the document, moves on, and empties the log.
    loaded.save().unwrap();
    assert_eq!(std::fs::metadata(&s.paths.calls).unwrap().len(), 0);
    let again = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(again.doc.pending_calls[7], call);
    assert_eq!(again.doc.calls_epoch, 1);
}

#[test]
fn stale_and_torn_call_records_are_ignored() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_conversation(dir.path());
    s.doc.pending_calls = pending(3);
    s.save().unwrap();
    s.update_call(0, finished(&s.doc.pending_calls[0], "old epoch"))
        .unwrap();
    let stale = std::fs::read(&s.paths.calls).unwrap();
    // The save folds it in; a crash left the old record on disk anyway.
    s.save().unwrap();
    std::fs::write(&s.paths.calls, &stale).unwrap();
    // A new list of calls under the same ids must not take the old state.
    s.doc.pending_calls = pending(3);
    s.save().unwrap();
    std::fs::write(&s.paths.calls, &stale).unwrap();
    let mut loaded = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(loaded.doc.pending_calls[0].state, CallState::NotStarted);

    // A record appended after the stale one counts; a torn one does not.
    loaded
        .update_call(1, finished(&loaded.doc.pending_calls[1], "new"))
        .unwrap();
    let mut file = durable::open_append(&s.paths.calls).unwrap();
    file.write_all(br#"{"epoch":"#).unwrap();
    drop(file);
    let mut again = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(again.doc.pending_calls[0].state, CallState::NotStarted);
    assert_eq!(again.doc.pending_calls[1].output, "new");
    // The torn tail is cut before the next record.
    again
        .update_call(2, finished(&again.doc.pending_calls[2], "two"))
        .unwrap();
    let last = Conversation::load(&s.paths.doc).unwrap();
    assert_eq!(last.doc.pending_calls[1].output, "new");
    assert_eq!(last.doc.pending_calls[2].output, "two");
}
