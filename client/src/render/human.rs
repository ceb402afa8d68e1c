//! Text for people: conversation listings and trees, status, search hits,
//! the remote store's state and one-line answers. Each returns its lines.

use std::collections::HashMap;

use agentx_shared::conversation::PendingCall;
use agentx_shared::proto::{
    ClearSessionReply, Location, RemoteState, SearchHit, SessionStatus, SessionSummary,
};

use super::Local;
use crate::show::visible;

/// Where conversation `s` lives as seen from folder `here`: `None` when
/// here, else a relative path (another checkout: `../other`).
pub fn kept_in(s: &SessionSummary, here: &str) -> Option<String> {
    (s.location() != Location::Remote && !s.folder.is_empty() && s.folder != here)
        .then(|| agentx_shared::folder::relative(here, &s.folder))
}

/// The line saying that `more` older remote conversations are not listed.
pub fn more_line(more: u64) -> String {
    format!(
        "and {more} more remote conversation(s), older, not listed (agentx search finds them; agentx resume ID opens one)"
    )
}

/// The list's cells of one conversation as seen from folder `here`
/// (without its number): where and id, when, turns, title and origin.
fn cells(s: &SessionSummary, here: &str) -> Vec<String> {
    let title = if s.title.is_empty() {
        "(empty)".into()
    } else {
        visible(&s.title)
    };
    let origin = s
        .forked_from
        .as_ref()
        .map(|f| format!("  (fork of {} @turn {})", f.id, f.turn))
        .unwrap_or_default();
    let remote = if s.location() == Location::Remote {
        format!("remote: ({}) ", visible(&s.machine))
    } else if let Some(there) = kept_in(s, here) {
        format!("in {} ", visible(&there))
    } else {
        String::new()
    };
    vec![
        format!("{remote}{}", s.id),
        crate::when::human(s.updated_at.as_ref()),
        agentx_shared::plural::count(s.turns, "turn"),
        format!("{title}{origin}"),
    ]
}

/// One aligned line per conversation as seen from folder `here` (without
/// its number).
pub fn labels(sessions: &[SessionSummary], here: &str) -> Vec<String> {
    let rows: Vec<Vec<String>> = sessions.iter().map(|s| cells(s, here)).collect();
    crate::show::table(&rows, &[false, false, true, false])
}

/// Numbered list, newest first (1 = newest), its columns aligned.
pub fn list(sessions: &[SessionSummary], here: &str) -> Vec<String> {
    list_from(sessions, here, 1)
}

/// [`list`] of a page whose first row is number `first`.
pub fn list_from(sessions: &[SessionSummary], here: &str, first: usize) -> Vec<String> {
    if sessions.is_empty() {
        return vec![if first > 1 {
            "no conversations on this page".to_owned()
        } else {
            "no conversations in this folder yet".to_owned()
        }];
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut row = vec![(first + i).to_string()];
            row.extend(cells(s, here));
            row
        })
        .collect();
    crate::show::table(&rows, &[true, false, false, true, false])
}

/// `agentx sessions --tree`: forks drawn under the conversation they came from.
pub fn tree(list: &[SessionSummary]) -> Vec<String> {
    if list.is_empty() {
        return vec!["no conversations in this folder yet".to_owned()];
    }
    let number: HashMap<&str, usize> = list
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i + 1))
        .collect();
    let parent: HashMap<&str, &str> = list
        .iter()
        .filter_map(|s| Some((s.id.as_str(), s.forked_from.as_ref()?.id.as_str())))
        .collect();
    // A conversation whose line of origins comes back to it (a cycle, from
    // edited or imported files) is drawn as a root, so none goes missing.
    let in_cycle = |id: &str| {
        let mut at = id;
        for _ in 0..list.len() {
            match parent.get(at) {
                Some(&p) if p == id => return true,
                Some(&p) => at = p,
                None => return false,
            }
        }
        false
    };
    let mut children: HashMap<&str, Vec<&SessionSummary>> = HashMap::new();
    let mut roots = Vec::new();
    for s in list {
        match s
            .forked_from
            .as_ref()
            .filter(|f| number.contains_key(f.id.as_str()) && !in_cycle(&s.id))
        {
            Some(f) => children.entry(f.id.as_str()).or_default().push(s),
            None => roots.push(s),
        }
    }
    struct Tree<'a> {
        number: HashMap<&'a str, usize>,
        children: HashMap<&'a str, Vec<&'a SessionSummary>>,
        lines: Vec<String>,
    }
    fn draw(s: &SessionSummary, prefix: &str, branch: &str, tree: &mut Tree<'_>) {
        let title = if s.title.is_empty() {
            "(empty)".into()
        } else {
            visible(&s.title)
        };
        let origin = match &s.forked_from {
            Some(f) if prefix.is_empty() && branch.is_empty() => {
                format!("  (fork of {} @turn {})", f.id, f.turn)
            }
            Some(f) if tree.number.contains_key(f.id.as_str()) => format!("  @turn {}", f.turn),
            Some(f) => format!("  (fork of {} @turn {})", f.id, f.turn),
            None => String::new(),
        };
        tree.lines.push(format!(
            "{prefix}{branch}{:>2}  {}  {:>9}  {title}{origin}",
            tree.number.get(s.id.as_str()).copied().unwrap_or(0),
            s.id,
            agentx_shared::plural::count(s.turns, "turn")
        ));
        let kids = tree
            .children
            .get(s.id.as_str())
            .cloned()
            .unwrap_or_default();
        let below = match branch {
            "" => prefix.to_owned(),
            "└─ " => format!("{prefix}   "),
            _ => format!("{prefix}│  "),
        };
        for (i, kid) in kids.iter().enumerate() {
            let last = i + 1 == kids.len();
            draw(kid, &below, if last { "└─ " } else { "├─ " }, tree);
        }
    }
    let mut tree = Tree {
        number,
        children,
        lines: Vec::new(),
    };
    for root in roots {
        draw(root, "", "", &mut tree);
    }
    tree.lines
}

/// The answer to a fork: what was forked where, and the new conversation.
pub fn fork(s: &SessionSummary) -> String {
    match &s.forked_from {
        Some(f) => format!(
            "forked {} at turn {}: new conversation {} (the original is unchanged)",
            f.id, f.turn, s.id
        ),
        None => format!("new conversation {}", s.id),
    }
}

/// The question before a conversation is deleted: what goes (title, id,
/// turns) and where.
pub fn clear_question(s: &SessionStatus) -> String {
    let also = if s.remote_copy {
        " here and its copy on the remote store"
    } else {
        ""
    };
    let title = if s.title.is_empty() {
        String::new()
    } else {
        format!("{:?} ", visible(&s.title))
    };
    let turns = match s.turns {
        1 => "1 turn".to_owned(),
        n => format!("{n} turns"),
    };
    format!(
        "delete conversation {title}({}, {turns}){also}?",
        s.session_id
    )
}

/// The line saying what a clear of `session_id` ("" = the current one)
/// deleted, here and on the remote store, and the fresh conversation.
pub fn cleared(session_id: &str, reply: &ClearSessionReply, fresh: &SessionSummary) -> String {
    let cleared = if session_id.is_empty() {
        "the conversation".to_owned()
    } else {
        session_id.to_owned()
    };
    match reply.remote.as_str() {
        "deleted" => format!(
            "cleared {cleared} here and on the remote store; new conversation {}",
            fresh.id
        ),
        "later" => format!(
            "cleared {cleared} here; the remote store was not reached ({}), its copy is deleted \
             once it is back; new conversation {}",
            reply.remote_note, fresh.id
        ),
        _ => format!("cleared {cleared}; new conversation {}", fresh.id),
    }
}

/// One line per conversation the server refused, each starting with `lead`.
pub fn refused_lines(r: &RemoteState, lead: &str) -> Vec<String> {
    r.refused
        .iter()
        .map(|f| format!("{lead}refused {}: {}", f.id, f.error))
        .collect()
}

/// `synced (0 pending) postgresql://user@host:5432/db as laptop`, or `off`.
pub fn remote_line(remote: Option<&RemoteState>) -> String {
    match remote.filter(|r| super::remote_on(r.state())) {
        None => "off (set remote_url in config.toml or AGENTX_REMOTE_URL)".to_owned(),
        Some(r) => format!(
            "{} ({} pending) {} as {}",
            super::remote_sync(r.state()),
            r.pending,
            r.url,
            r.machine
        ),
    }
}

/// Wraps each highlighted range of `snippet` in markers.
pub fn marked(snippet: &str, hit: &SearchHit, open: &str, close: &str) -> String {
    let mut out = String::new();
    let mut at = 0usize;
    for h in &hit.highlights {
        let (start, end) = (h.start as usize, h.end as usize);
        if start < at
            || end > snippet.len()
            || !snippet.is_char_boundary(start)
            || !snippet.is_char_boundary(end)
        {
            continue;
        }
        out.push_str(&flat(&snippet[at..start]));
        out.push_str(open);
        out.push_str(&flat(&snippet[start..end]));
        out.push_str(close);
        at = end;
    }
    out.push_str(&flat(&snippet[at..]));
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A snippet's text on one line: line breaks and tabs are spaces (not
/// `\x0a`), any other control character shown escaped.
fn flat(text: &str) -> String {
    visible(&text.replace(['\n', '\r', '\t'], " ")).into_owned()
}

/// Hits, best first, numbered; the command that opens each. Highlights are
/// wrapped in `marks` (bold on a terminal, `**` otherwise); the folder is
/// named for hits outside `local`'s folder and agent.
pub fn hits(local: &Local, hits: &[SearchHit], marks: (&str, &str)) -> Vec<String> {
    if hits.is_empty() {
        return vec!["no matches".to_owned()];
    }
    let (open, close) = marks;
    let mut lines = Vec::new();
    for (i, h) in hits.iter().enumerate() {
        let place = if h.turn == 0 {
            "title".to_owned()
        } else {
            format!("turn {}", h.turn)
        };
        let remote = if h.r#where() == Location::Remote {
            "remote: "
        } else {
            ""
        };
        lines.push(format!(
            "{:>3}  {remote}{}  {}  {place}  {}",
            i + 1,
            h.session_id,
            crate::when::human(h.at.as_ref()),
            visible(&h.title)
        ));
        let (folder, agent) = (visible(&h.folder), visible(&h.agent));
        if h.r#where() == Location::Remote {
            lines.push(format!(
                "     {folder} (agent {agent}, on {})",
                visible(&h.machine)
            ));
        } else if h.folder != local.folder || h.agent != local.agent {
            lines.push(format!("     {folder} (agent {agent})"));
        }
        lines.push(format!("     {}", marked(&h.snippet, h, open, close)));
    }
    lines.push(
        "open one with: agentx resume ID (add -C FOLDER --agent NAME for another folder)"
            .to_owned(),
    );
    lines
}

/// `/model`'s answer: the model in use, where it comes from, and the context.
pub fn model(s: &SessionStatus) -> Vec<String> {
    let from = if s.conversation_model.is_empty() {
        "the configured default (/model NAME picks one for this conversation)"
    } else {
        "chosen for this conversation (/model default goes back)"
    };
    let mut lines = vec![format!("model {} ({}) — {from}", s.model, s.provider)];
    if let Some(c) = &s.context {
        lines.push(agentx_shared::context::Meter::from(c).line());
    }
    lines
}

/// The current conversation's state as `agentx status` shows it; `verbose`
/// adds internals (the server's response id, the watch).
pub fn status(local: &Local, s: &SessionStatus, verbose: bool) -> Vec<String> {
    if s.session_id.is_empty() {
        return vec![format!(
            "no conversation in {} yet (agent {})",
            local.folder, local.agent
        )];
    }
    let mut lines = Vec::new();
    conversation(&mut lines, local, s, verbose);
    pending(&mut lines, s);
    markers(&mut lines, s);
    snapshots_and_remote(&mut lines, s, verbose);
    lines.push(format!(
        "daemon        pid {}, version {}",
        local.daemon_pid, local.daemon_version
    ));
    lines
}

/// The approval mode as shown: `ask`, `auto (always, this conversation)`
/// once `[a]lways` was answered under `ask`.
pub fn approval_mode(mode: &str, approve_all: bool) -> String {
    if approve_all && mode == "ask" {
        "auto (always, this conversation)".to_owned()
    } else {
        mode.to_owned()
    }
}

/// The status lines naming the conversation and its transcript, usage and
/// checkpoints.
fn conversation(lines: &mut Vec<String>, local: &Local, s: &SessionStatus, verbose: bool) {
    let u = s.usage.unwrap_or_default();
    lines.push(format!(
        "conversation  {}  {}",
        s.session_id,
        visible(&s.title)
    ));
    lines.push(format!(
        "folder        {} (agent {})",
        local.folder, local.agent
    ));
    if let Some(setup) = &local.setup {
        let model = if s.model.is_empty() {
            &setup.model
        } else {
            &s.model
        };
        let chosen = if s.conversation_model.is_empty() {
            ""
        } else {
            " — chosen for this conversation with /model"
        };
        lines.push(format!(
            "model         {model} ({}), approval {}{chosen}",
            setup.provider,
            approval_mode(setup.approval, s.approve_all)
        ));
        lines.push(format!(
            "tool env      {}",
            setup.shell_environment.describe()
        ));
        lines.push(format!(
            "sandbox       {}",
            setup.sandbox.line(setup.landlock_abi)
        ));
        if verbose {
            lines.push(format!("server        {}", setup.base_url));
        }
    }
    if let Some(c) = &s.context {
        let meter = agentx_shared::context::Meter::from(c);
        let auto = match meter.auto_compact_at {
            Some(at) => format!("compacts automatically at {:.0}%", at * 100.0),
            None => "automatic compaction is off".to_owned(),
        };
        let est = if meter.estimated { ", estimated" } else { "" };
        lines.push(format!(
            "context       {} ({} of {} tokens{est}; window from {}; {auto})",
            meter.line(),
            meter.used_tokens,
            meter.window_tokens,
            meter.window_source
        ));
    }
    if !s.instruction_files.is_empty() {
        lines.push(format!("instructions  {}", s.instruction_files.join(", ")));
    }
    for skipped in &s.instruction_files_skipped {
        lines.push(format!("instructions  skipped {skipped}"));
    }
    if verbose {
        let response = if s.response_id.is_empty() {
            "-"
        } else {
            s.response_id.as_str()
        };
        lines.push(format!("response id   {response}"));
    }
    lines.push(format!(
        "turns         {} ({} transcript items)",
        s.turns, s.transcript_items
    ));
    lines.push(format!("usage         {}", crate::usage::line(&u)));
    lines.push(format!("checkpoints   {}", s.checkpoints));
}

/// The status lines for what waits: tool calls of an interrupted turn and
/// `!command` output not yet sent.
fn pending(lines: &mut Vec<String>, s: &SessionStatus) {
    if !s.pending_tool_calls.is_empty() {
        lines.push(format!(
            "pending       {} from an interrupted turn",
            agentx_shared::plural::count(s.pending_tool_calls.len() as u64, "tool call")
        ));
        for c in &s.pending_tool_calls {
            lines.push(format!(
                "              {} {} {}",
                c.call_id,
                PendingCall::state_name(c.state),
                c.arguments
            ));
        }
    }
    if s.has_pending_shell_transcript {
        lines.push(
            "local shell   output of !commands waits to be sent with the next message".to_owned(),
        );
    }
}

/// The status lines for a failed or interrupted turn and a rollback backup.
fn markers(lines: &mut Vec<String>, s: &SessionStatus) {
    if let Some(f) = &s.failed {
        // Retry offered only when it has something to send (a turn dropped
        // for the context window has not: `agentx retry` refuses it).
        let then = if f.resendable {
            "agentx retry [--new-chain], rollback or clear"
        } else {
            "not sent again: agentx compact, rollback or clear, then send it again"
        };
        lines.push(format!(
            "failed        {} ({}) — {then}",
            f.message,
            crate::when::human(f.at.as_ref())
        ));
    }
    if let Some(i) = &s.interrupted {
        lines.push(format!(
            "interrupted   {} ({})",
            i.message,
            crate::when::human(i.at.as_ref())
        ));
    }
    if s.has_rollback_backup {
        lines.push(format!(
            "rollback      backup from {} ({} restores it)",
            crate::when::human(s.rollback_backup_at.as_ref()),
            crate::ui::how_either("rollback --undo", "rollback undo")
        ));
    }
}

/// The status lines for the folder's snapshots and the remote store (when on).
fn snapshots_and_remote(lines: &mut Vec<String>, s: &SessionStatus, verbose: bool) {
    lines.push(format!(
        "snapshots     {} ({} bytes stored)",
        s.snapshots, s.snapshot_store_bytes
    ));
    if verbose && !s.snapshot_watch.is_empty() {
        lines.push(format!("watch         {}", s.snapshot_watch));
    }
    if let Some(r) = s.remote.as_ref().filter(|r| super::remote_on(r.state())) {
        let error = if r.last_error.is_empty() {
            String::new()
        } else {
            format!(" — {}", r.last_error)
        };
        lines.push(format!(
            "remote        {} ({} pending) {}{error}",
            super::remote_sync(r.state()),
            r.pending,
            r.url
        ));
        lines.extend(refused_lines(r, "              "));
        if s.remote_copy {
            lines.push("              this conversation is kept there too".to_owned());
        }
    }
}
