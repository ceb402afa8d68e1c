//! Incremental indexing against indexing whole, and clearing without
//! waiting for the purge.

use std::path::Path;
use std::time::{Duration, Instant};

use tantivy::TantivyDocument;
use tantivy::collector::DocSetCollector;
use tantivy::query::AllQuery;
use tantivy::schema::document::Document as _;

use agentx_shared::conversation::Item;

use super::{Direct, Job, SearchIndex};
use crate::store::conversation::{Conversation, ConversationDoc};

fn user(text: &str) -> Item {
    Item::User { text: text.into() }
}

fn assistant(text: &str) -> Item {
    Item::Assistant { text: text.into() }
}

fn call(n: u32, arguments: &str, output: &str) -> [Item; 2] {
    [
        Item::FunctionCall {
            call_id: format!("call_{n}"),
            name: "shell".into(),
            arguments: arguments.into(),
        },
        Item::FunctionOutput {
            call_id: format!("call_{n}"),
            output: output.into(),
            images: Vec::new(),
        },
    ]
}

fn compaction() -> Item {
    Item::Compaction {
        summary: "a summary nobody searches".into(),
        context: Vec::new(),
        tokens_before: 10,
        tokens_after: 5,
        replaced: 3,
        reason: "manual".into(),
    }
}

/// One commit: `items` appended at time `at`, the document saved.
fn commit(c: &mut Conversation, items: &[Item], at: i64) {
    c.append(items, at).unwrap();
    c.doc.updated_at = at;
    c.save().unwrap();
}

/// Every live document of the index, as JSON, sorted.
fn documents(index: &Direct) -> Vec<String> {
    let search = index.search();
    let live = search.live();
    let searcher = live.reader.searcher();
    let schema = live.index.schema();
    let mut docs: Vec<String> = searcher
        .search(&AllQuery, &DocSetCollector)
        .unwrap()
        .into_iter()
        .map(|addr| {
            searcher
                .doc::<TantivyDocument>(addr)
                .unwrap()
                .to_json(&schema)
        })
        .collect();
    docs.sort();
    docs
}

/// What a search finds (everything but the score, which counts deleted
/// documents until a merge), sorted.
fn found(index: &Direct, text: &str) -> Vec<String> {
    let mut hits: Vec<String> = index
        .search()
        .search(text, None, 1000)
        .unwrap()
        .into_iter()
        .map(|h| {
            format!(
                "{} {} {} {} {} {:?} {}",
                h.session_id, h.folder, h.agent, h.turn, h.at, h.highlights, h.snippet
            ) + &h.title
        })
        .collect();
    hits.sort();
    hits
}

/// Documents of `key` naming turn `n` (meta: 0).
fn turn_docs(index: &Direct, key: &Path, n: u64) -> usize {
    let search = index.search();
    let term = super::indexing::turn_key(search.f, &key.to_string_lossy(), n);
    let live = search.live();
    live.reader
        .searcher()
        .search(
            &tantivy::query::TermQuery::new(term, tantivy::schema::IndexRecordOption::Basic),
            &tantivy::collector::Count,
        )
        .unwrap()
}

const WORDS: [&str; 12] = [
    "walrus",
    "kumquat",
    "xylophone",
    "continued",
    "narwhal",
    "quokka",
    "zebra",
    "axolotl",
    "renamed",
    "ocelot",
    "echo",
    "\"quick brown\"",
];

/// The same commits indexed incrementally (`inc`) and whole (`whole`).
struct Both {
    inc: Direct,
    whole: Direct,
}

impl Both {
    /// Indexes `c`'s last commit both ways and compares the documents and
    /// what searches find; `added`: the documents the incremental index
    /// must add.
    fn check(&mut self, c: &Conversation, step: &str, added: Option<usize>) {
        let got = self.inc.index(&c.paths.doc).unwrap();
        self.whole.forget_progress();
        self.whole.index(&c.paths.doc).unwrap();
        if let Some(added) = added {
            assert_eq!(got, added, "{step}: documents added");
        }
        assert_eq!(documents(&self.inc), documents(&self.whole), "{step}");
        for word in WORDS {
            assert_eq!(
                found(&self.inc, word),
                found(&self.whole, word),
                "{step}: {word}"
            );
        }
    }
}

/// Over commits that append turns, continue the last turn, append a
/// compaction, rename, roll back and go on, an index fed each commit
/// incrementally holds exactly the documents (and so gives exactly the
/// hits) of one re-indexing the conversation whole every time; and the
/// incremental index adds only the last turn again, the meta document and
/// what is new.
#[test]
fn incremental_indexing_gives_what_indexing_whole_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/f/default");
    std::fs::create_dir_all(&dir).unwrap();
    let mut both = Both {
        inc: Direct::open(&tmp.path().join("inc")).unwrap(),
        whole: Direct::open(&tmp.path().join("whole")).unwrap(),
    };
    let conversation = |id: &str| {
        Conversation::create(
            &dir,
            ConversationDoc::new(id.into(), "/f".into(), "default".into(), 1),
        )
        .unwrap()
    };
    let mut a = conversation("00000000001-aaaaaa");
    let mut b = conversation("00000000002-bbbbbb");
    b.doc.title = "remember the walrus".into();
    commit(&mut b, &[user("remember the walrus"), assistant("ok")], 2);
    both.check(&b, "another conversation", None);

    a.doc.title = "remember the walrus".into();
    let [c1, o1] = call(1, r#"{"command":"echo xylophone"}"#, "xylophone");
    commit(
        &mut a,
        &[
            user("remember the walrus"),
            c1,
            o1,
            assistant("the quick brown fox"),
        ],
        10,
    );
    both.check(&a, "first turn", None);
    commit(
        &mut a,
        &[user("about kumquats"), assistant("kumquats?")],
        20,
    );
    both.check(&a, "second turn", Some(3));
    // A continued turn: no user message, turn 2 grows.
    commit(&mut a, &[assistant("continued: narwhal")], 30);
    both.check(&a, "continued turn", Some(2));
    commit(&mut a, &[], 31);
    both.check(&a, "only the update time", Some(2));
    commit(
        &mut a,
        &[
            user("three quokka"),
            assistant("3"),
            compaction(),
            user("four zebra"),
            assistant("4"),
        ],
        40,
    );
    both.check(&a, "two turns and a compaction", Some(4));
    let kept = (a.doc.journal_bytes, a.doc.journal_items);
    commit(&mut a, &[user("five axolotl"), assistant("5")], 50);
    both.check(&a, "fifth turn", Some(3));
    both.check(&a, "nothing new", Some(2));
    // A title of its own: every turn's label changes.
    a.doc.title = "renamed ocelot".into();
    a.doc.updated_at = 55;
    a.save().unwrap();
    both.check(&a, "renamed", Some(6));
    commit(&mut a, &[user("six"), assistant("echo")], 60);
    both.check(&a, "after the rename", Some(3));
    // Rolled back to four turns, then a different fifth.
    (a.doc.journal_bytes, a.doc.journal_items) = kept;
    a.doc.rollbacks += 1;
    a.doc.updated_at = 70;
    a.save().unwrap();
    a.truncate_journal().unwrap();
    both.check(&a, "rolled back", Some(5));
    commit(&mut a, &[user("five again, zebra"), assistant("5b")], 80);
    both.check(&a, "after the rollback", Some(3));
    commit(&mut a, &[assistant("continued echo")], 90);
    both.check(&a, "continued after the rollback", Some(2));
    // A restart remembers nothing: indexed whole, then incrementally again.
    both.inc.forget_progress();
    commit(&mut a, &[user("seven quokka")], 100);
    both.check(&a, "after a restart", Some(7));
    commit(&mut a, &[assistant("seven done")], 110);
    both.check(&a, "continued after a restart", Some(2));
    commit(&mut b, &[user("b goes on")], 120);
    both.check(&b, "the other conversation goes on", Some(3));
    // One document per turn and one meta document: none left over.
    assert_eq!(turn_docs(&both.inc, &a.paths.doc, 0), 1);
    for n in 1..=6 {
        assert_eq!(turn_docs(&both.inc, &a.paths.doc, n), 1, "turn {n}");
    }
    assert_eq!(turn_docs(&both.inc, &a.paths.doc, 7), 0);
    assert_eq!(found(&both.inc, "zebra").len(), 2, "turns 4 and 5");

    // Cleared: nothing of it is left.
    for p in [&a.paths.doc, &a.paths.journal] {
        std::fs::remove_file(p).unwrap();
    }
    both.check(&a, "cleared", Some(0));
    assert!(found(&both.inc, "kumquats").is_empty());
    assert_eq!(turn_docs(&both.inc, &a.paths.doc, 1), 0);
}

/// Whether a file of `dir` holds `text`.
fn on_disk(dir: &Path, text: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        std::fs::read(e.path())
            .unwrap_or_default()
            .windows(text.len())
            .any(|w| w == text.as_bytes())
    })
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `forget` answers once no search finds the conversation; its text then
/// leaves the index's files without anyone waiting, and the indexer goes
/// on indexing meanwhile.
#[tokio::test]
async fn a_forgotten_conversation_is_unfindable_at_once_and_leaves_the_disk_soon() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("sessions");
    let dir = sessions.join("f/default");
    std::fs::create_dir_all(&dir).unwrap();
    let index_dir = tmp.path().join("search");
    let (_changes, rx) = tokio::sync::mpsc::unbounded_channel();
    let search: std::sync::Arc<SearchIndex> =
        super::start(index_dir.clone(), sessions.clone(), rx).unwrap();
    let marker = "zebramarker9931";
    let mut convs = Vec::new();
    for (n, text) in [format!("one {marker}"), "two keeper".to_owned()]
        .into_iter()
        .enumerate()
    {
        let mut c = Conversation::create(
            &dir,
            ConversationDoc::new(
                format!("0000000000{n}-cccccc"),
                "/f".into(),
                "default".into(),
                1,
            ),
        )
        .unwrap();
        commit(&mut c, &[user(&text), assistant("ok")], 10);
        // More segments, as a conversation's commits make.
        for t in 0..3 {
            commit(
                &mut c,
                &[user(&format!("more {t}")), assistant("ok")],
                20 + t,
            );
            search.jobs.send(Job::Touched(c.paths.doc.clone())).unwrap();
        }
        convs.push(c);
    }
    let finds = |text: &str| !search.search(text, None, 10).unwrap().is_empty();
    until("indexing", || finds(marker) && finds("keeper")).await;
    let gone = convs.remove(0);
    // Deleted documents count until their segments are rewritten.
    let key = tantivy::Term::from_field_text(search.f.key, &gone.paths.doc.to_string_lossy());
    let held = || {
        let live = search.live();
        live.reader.reload().unwrap();
        live.reader.searcher().doc_freq(&key).unwrap()
    };
    assert!(held() > 0);
    // (In the files verbatim or not, depending on compression.)
    let verbatim = on_disk(&index_dir, marker);
    for p in [&gone.paths.doc, &gone.paths.journal] {
        std::fs::remove_file(p).unwrap();
    }
    search.forget(&dir, &gone.doc.id).await;
    assert!(!finds(marker));
    assert!(finds("keeper"));
    // Indexing goes on, the purge or not.
    let mut kept = convs.remove(0);
    commit(&mut kept, &[user("after the clear: quokka")], 40);
    search
        .jobs
        .send(Job::Touched(kept.paths.doc.clone()))
        .unwrap();
    until("indexing after a clear", || finds("quokka")).await;
    until("the purge", || {
        held() == 0 && !(verbatim && on_disk(&index_dir, marker))
    })
    .await;
    assert!(finds("keeper") && finds("quokka") && !finds(marker));
}

/// A job the batch can carry without a conversation behind it.
fn touched(n: usize) -> Job {
    Job::Touched(format!("/nowhere/{n}.json").into())
}

/// After a recent commit, what comes before the gap ends joins one batch;
/// a clear someone waits for ends the wait at once.
#[test]
fn a_batch_takes_in_what_comes_during_the_gap_but_a_clear_does_not_wait() {
    let (tx, rx) = std::sync::mpsc::channel();
    // No recent commit: only what is queued.
    tx.send(touched(1)).unwrap();
    assert_eq!(super::gather(&rx, touched(0), None).len(), 2);

    let sender = std::thread::spawn({
        let tx = tx.clone();
        move || {
            for n in 1..=3 {
                std::thread::sleep(Duration::from_millis(40));
                tx.send(touched(n)).unwrap();
            }
        }
    });
    let due = Instant::now() + Duration::from_millis(600);
    assert_eq!(super::gather(&rx, touched(0), Some(due)).len(), 4);
    sender.join().unwrap();

    let (done, _wait) = tokio::sync::oneshot::channel();
    tx.send(Job::Forget("/nowhere/x.json".into(), done))
        .unwrap();
    let started = Instant::now();
    let far = started + Duration::from_secs(60);
    let jobs = super::gather(&rx, touched(0), Some(far));
    assert_eq!(jobs.len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a clear waited out the gap"
    );
}

/// A conversation committed every few milliseconds is indexed in a
/// handful of index commits, not one per commit, and every turn is found.
#[tokio::test]
async fn a_stream_of_commits_is_indexed_in_few_index_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("sessions");
    let dir = sessions.join("f/default");
    std::fs::create_dir_all(&dir).unwrap();
    let (_changes, rx) = tokio::sync::mpsc::unbounded_channel();
    let search: std::sync::Arc<SearchIndex> =
        super::start(tmp.path().join("search"), sessions.clone(), rx).unwrap();
    let finds = |text: &str| !search.search(text, None, 10).unwrap().is_empty();
    let mut c = Conversation::create(
        &dir,
        ConversationDoc::new(
            "00000000001-dddddd".into(),
            "/f".into(),
            "default".into(),
            1,
        ),
    )
    .unwrap();
    // The reconcile at start may commit; count from after it.
    commit(&mut c, &[user("first walrus"), assistant("ok")], 1);
    search.jobs.send(Job::Touched(c.paths.doc.clone())).unwrap();
    until("the first commit", || finds("walrus")).await;
    let before = search.commits.load(std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    let turns = 60;
    for t in 0..turns {
        commit(
            &mut c,
            &[user(&format!("turn marker{t}")), assistant("ok")],
            10 + t,
        );
        search.jobs.send(Job::Touched(c.paths.doc.clone())).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last = format!("marker{}", turns - 1);
    until("the last turn indexed", || finds(&last)).await;
    let spent = started.elapsed();
    let commits = search.commits.load(std::sync::atomic::Ordering::SeqCst) - before;
    // One per gap the stream lasted, and the last.
    let most = spent.as_millis() / super::COMMIT_GAP.as_millis() + 2;
    assert!(
        u128::from(commits) <= most,
        "{commits} index commits for {turns} commits over {spent:?} (at most {most})"
    );
    assert!((0..turns).all(|t| finds(&format!("marker{t}"))));
}

/// A stream of one-turn commits merges among its own small segments and
/// never with a big one (an imported conversation's): a turn's commit does
/// not read the whole index again.
#[test]
fn small_commits_are_not_merged_into_a_big_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let (schema, f) = super::schema();
    let live = super::health::create(tmp.path(), &schema).unwrap();
    let mut writer = super::writer_of(&live).unwrap();
    let doc = |n: u64| {
        let mut d = TantivyDocument::default();
        d.add_text(f.key, format!("k{n}"));
        d.add_text(f.body, format!("turn {n} of a long conversation"));
        d
    };
    for n in 0..2_000 {
        writer.add_document(doc(n)).unwrap();
    }
    writer.commit().unwrap();
    let big = live.index.searchable_segment_ids().unwrap();
    assert_eq!(big.len(), 1);
    for n in 2_000..2_040 {
        writer.add_document(doc(n)).unwrap();
        writer.commit().unwrap();
    }
    writer.wait_merging_threads().unwrap();
    let after = live.index.searchable_segment_ids().unwrap();
    assert!(after.contains(&big[0]), "the big segment was merged again");
    // The small ones were merged among themselves.
    assert!(after.len() < 40, "{} segments", after.len());
}
