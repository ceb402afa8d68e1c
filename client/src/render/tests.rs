//! Renderer tests: fixed conversations, statuses and hits rendered for
//! people and as JSON, compared whole, with no daemon.

use agentx_shared::proto::{
    ClearSessionReply, ContextMeter, ForkOrigin, Highlight, Location, OneshotStatus, RemoteRefusal,
    RemoteState, RemoteSync, SearchHit, SessionStatus, SessionSummary, SyncRemoteReply,
};

use super::{Local, human, json};
use crate::context::Setup;

fn local() -> Local {
    Local {
        folder: "/work/app".into(),
        agent: "default".into(),
        setup: Some(Setup {
            model: "gpt-5".into(),
            provider: "responses".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            approval: "ask",
            shell_environment: Default::default(),
            sandbox: Default::default(),
            landlock_abi: 7,
        }),
        daemon_pid: 42,
        daemon_version: "0.1.0".into(),
    }
}

fn summary(id: &str, title: &str, turns: u32) -> SessionSummary {
    SessionSummary {
        id: id.into(),
        title: title.into(),
        folder: "/work/app".into(),
        agent: "default".into(),
        turns,
        ..SessionSummary::default()
    }
}

fn remote() -> RemoteState {
    RemoteState {
        state: RemoteSync::Synced as i32,
        pending: 2,
        last_error: String::new(),
        url: "postgresql://me@db/agentx".into(),
        machine: "laptop".into(),
        refused: vec![RemoteRefusal {
            id: "c-9".into(),
            error: "too big".into(),
        }],
    }
}

#[test]
fn a_listing_numbers_and_aligns_conversations() {
    let mut fork = summary("c-2", "second", 3);
    fork.forked_from = Some(ForkOrigin {
        id: "c-1".into(),
        turn: 1,
    });
    let mut far = summary("c-3", "", 1);
    far.location = Location::Remote as i32;
    far.machine = "desk".into();
    let lines = human::list(&[summary("c-1", "first", 12), fork, far], "/work/app");
    assert_eq!(
        lines,
        [
            "1  c-1                   12 turns  first",
            "2  c-2                    3 turns  second  (fork of c-1 @turn 1)",
            "3  remote: (desk) c-3      1 turn  (empty)",
        ]
    );
    assert_eq!(
        human::list(&[], "/work/app"),
        ["no conversations in this folder yet"]
    );
}

#[test]
fn a_tree_draws_forks_under_their_origin() {
    let mut child = summary("c-2", "child", 2);
    child.forked_from = Some(ForkOrigin {
        id: "c-1".into(),
        turn: 1,
    });
    let mut grandchild = summary("c-3", "grandchild", 3);
    grandchild.forked_from = Some(ForkOrigin {
        id: "c-2".into(),
        turn: 2,
    });
    let lines = human::tree(&[summary("c-1", "root", 1), child, grandchild]);
    assert_eq!(
        lines,
        [
            " 1  c-1     1 turn  root",
            "└─  2  c-2    2 turns  child  @turn 1",
            "   └─  3  c-3    3 turns  grandchild  @turn 2",
        ]
    );
}

#[test]
fn a_summary_document_says_where_it_is_kept() {
    let mut s = summary("c-1", "first", 2);
    s.folder = "/work/other".into();
    assert_eq!(
        json::summary(&s, "/work/app").to_string(),
        r#"{"agent":"default","created_at":"","folder":"/work/other","forked_from":null,"id":"c-1","in":"../other","machine":null,"title":"first","turns":2,"updated_at":"","where":"local"}"#
    );
}

fn status() -> SessionStatus {
    SessionStatus {
        session_id: "c-1".into(),
        title: "first".into(),
        turns: 2,
        checkpoints: 2,
        transcript_items: 5,
        snapshots: 3,
        snapshot_store_bytes: 1024,
        remote: Some(remote()),
        remote_copy: true,
        ..SessionStatus::default()
    }
}

#[test]
fn a_status_for_people_names_each_part() {
    let lines = human::status(&local(), &status(), false);
    assert_eq!(
        lines,
        [
            "conversation  c-1  first",
            "folder        /work/app (agent default)",
            "model         gpt-5 (responses), approval ask",
            "tool env      inherit all, secrets removed (*KEY* *SECRET* *TOKEN* *PASSWORD* \
             *CREDENTIAL*), the provider key never",
            "sandbox       workspace-write (enforced)",
            "turns         2 (5 transcript items)",
            "usage         0 total = 0 in (0 cached) + 0 out (0 reasoning)",
            "checkpoints   2",
            "snapshots     3 (1024 bytes stored)",
            "remote        synced (2 pending) postgresql://me@db/agentx",
            "              refused c-9: too big",
            "              this conversation is kept there too",
            "daemon        pid 42, version 0.1.0",
        ]
    );
    let none = SessionStatus::default();
    assert_eq!(
        human::status(&local(), &none, false),
        ["no conversation in /work/app yet (agent default)"]
    );
}

#[test]
fn a_status_document_keeps_its_fields() {
    let doc = json::status(&local(), &status());
    assert_eq!(doc["model"], "gpt-5");
    assert_eq!(doc["approval"], "ask");
    assert_eq!(doc["shell_environment"]["inherit"], "all");
    assert_eq!(doc["shell_environment"]["default_excludes"][0], "*KEY*");
    assert_eq!(
        doc["sandbox"].to_string(),
        r#"{"enforced":true,"landlock_abi":7,"mode":"workspace-write","network":false,"reason":null,"writable_roots":[]}"#
    );
    assert_eq!(doc["daemon"].to_string(), r#"{"pid":42,"version":"0.1.0"}"#);
    assert_eq!(
        doc["remote"].to_string(),
        r#"{"last_error":null,"machine":"laptop","pending":2,"refused":[{"error":"too big","id":"c-9"}],"state":"synced","url":"postgresql://me@db/agentx"}"#
    );
    assert_eq!(
        json::remote(None).to_string(),
        r#"{"last_error":null,"pending":0,"refused":[],"state":"off"}"#
    );
}

#[test]
fn a_context_document_rounds_the_percent() {
    let meter = ContextMeter {
        used_tokens: 1234,
        window_tokens: 10000,
        percent: 12.34,
        estimated: true,
        auto_compact_at: 0.0,
        window_source: "model".into(),
    };
    assert_eq!(
        json::context(&meter).to_string(),
        r#"{"auto_compact_at":null,"estimated":true,"percent":12.3,"used_tokens":1234,"window_source":"model","window_tokens":10000}"#
    );
}

#[test]
fn search_hits_are_marked_and_placed() {
    let hit = SearchHit {
        session_id: "c-1".into(),
        folder: "/work/app".into(),
        agent: "default".into(),
        title: "first".into(),
        turn: 2,
        snippet: "the quick  fox".into(),
        highlights: vec![Highlight { start: 4, end: 9 }],
        r#where: Location::Local as i32,
        ..SearchHit::default()
    };
    let mut far = hit.clone();
    far.r#where = Location::Remote as i32;
    far.machine = "desk".into();
    far.turn = 0;
    assert_eq!(
        human::hits(&local(), &[hit.clone(), far], ("[", "]")),
        [
            "  1  c-1    turn 2  first",
            "     the [quick] fox",
            "  2  remote: c-1    title  first",
            "     /work/app (agent default, on desk)",
            "     the [quick] fox",
            "open one with: agentx resume ID (add -C FOLDER --agent NAME for another folder)",
        ]
    );
    assert_eq!(human::hits(&local(), &[], ("[", "]")), ["no matches"]);
    assert_eq!(
        json::hit(&hit).to_string(),
        r#"{"agent":"default","at":"","folder":"/work/app","highlights":[[4,9]],"machine":null,"score":0.0,"session_id":"c-1","snippet":"the quick  fox","title":"first","turn":2,"where":"local"}"#
    );
}

#[test]
fn one_line_answers() {
    let mut fork = summary("c-2", "", 0);
    assert_eq!(human::fork(&fork), "new conversation c-2");
    fork.forked_from = Some(ForkOrigin {
        id: "c-1".into(),
        turn: 3,
    });
    assert_eq!(
        human::fork(&fork),
        "forked c-1 at turn 3: new conversation c-2 (the original is unchanged)"
    );
    assert_eq!(
        human::clear_question(&status()),
        "delete conversation \"first\" (c-1, 2 turns) here and its copy on the remote store?"
    );
    let later = ClearSessionReply {
        session: None,
        remote: "later".into(),
        remote_note: "connection refused".into(),
    };
    assert_eq!(
        human::cleared("", &later, &fork),
        "cleared the conversation here; the remote store was not reached (connection refused), \
         its copy is deleted once it is back; new conversation c-2"
    );
    assert_eq!(
        human::remote_line(Some(&remote())),
        "synced (2 pending) postgresql://me@db/agentx as laptop"
    );
    assert_eq!(
        human::remote_line(None),
        "off (set remote_url in config.toml or AGENTX_REMOTE_URL)"
    );
    assert_eq!(
        human::more_line(3),
        "and 3 more remote conversation(s), older, not listed (agentx search finds them; agentx resume ID opens one)"
    );
}

#[test]
fn a_sync_document_lists_forks() {
    let reply = SyncRemoteReply {
        remote: Some(remote()),
        pushed_conversations: 1,
        pushed_records: 4,
        reached: true,
        timed_out: false,
        forks: Vec::new(),
    };
    let doc = json::sync(&reply, &remote());
    assert_eq!(doc["pushed_records"], 4);
    assert_eq!(doc["forks"].to_string(), "[]");
    assert_eq!(doc["remote"]["state"], "synced");
}

/// No rendered line has a newline in it, or a run of spaces after a word
/// that is not column alignment (the lost `\` of a string continuation).
#[test]
fn rendered_lines_are_single_lines() {
    let mut lines = human::status(&local(), &status(), true);
    lines.extend(human::model(&status()));
    lines.push(human::clear_question(&status()));
    for line in lines {
        assert!(!line.contains('\n'), "{line:?}");
        let prose = line.get(14..).unwrap_or("");
        assert!(!prose.contains("   "), "{line:?}");
    }
}

/// The wire enums keep the words `--json` always printed.
#[test]
fn wire_enums_keep_their_json_words() {
    let places = [
        Location::Unspecified,
        Location::Local,
        Location::Remote,
        Location::Both,
    ];
    let words: Vec<_> = places.into_iter().map(super::location).collect();
    assert_eq!(words, ["local", "local", "remote", "both"]);
    let states = [
        RemoteSync::Unspecified,
        RemoteSync::Off,
        RemoteSync::Synced,
        RemoteSync::Pending,
        RemoteSync::Unreachable,
    ];
    let words: Vec<_> = states.into_iter().map(super::remote_sync).collect();
    assert_eq!(words, ["", "off", "synced", "pending", "unreachable"]);
    let statuses = [
        OneshotStatus::Unspecified,
        OneshotStatus::Running,
        OneshotStatus::Failed,
        OneshotStatus::Interrupted,
        OneshotStatus::Corrupt,
    ];
    let words: Vec<_> = statuses.into_iter().map(super::oneshot_status).collect();
    assert_eq!(words, ["", "running", "failed", "interrupted", "corrupt"]);
    let off = RemoteState {
        state: RemoteSync::Off as i32,
        ..RemoteState::default()
    };
    assert_eq!(
        json::remote(Some(&off)).to_string(),
        r#"{"last_error":null,"machine":null,"pending":0,"refused":[],"state":"off","url":null}"#
    );
    let mut both = summary("c-1", "", 0);
    both.location = Location::Both as i32;
    assert_eq!(json::summary(&both, "/work/app")["where"], "both");
}

#[test]
fn a_search_snippet_reads_on_one_line_with_its_breaks_as_spaces() {
    let hit = agentx_shared::proto::SearchHit {
        snippet: "first line\nsecond\tline \u{1b}[31m".into(),
        highlights: vec![agentx_shared::proto::Highlight { start: 11, end: 17 }],
        ..Default::default()
    };
    let shown = super::human::marked(&hit.snippet, &hit, "[", "]");
    assert_eq!(shown, "first line [second] line \\x1b[31m");
}
