//! `agentx fork`, `rename`, `search`, `export`, `import`, `sessions --tree`,
//! `completions` and `man`: finding, naming, branching and carrying conversations.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use agentx_shared::export::Document;
use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::{
    ExportRequest, ForkRequest, ImportRequest, OpenSessionRequest, RenameRequest, SearchHit,
    SearchRequest, SessionSummary, open_session_request::Target,
};
use agentx_shared::time::rfc3339_wire;

use crate::cli::ExportFormat;
use crate::commands::sessions;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::show::visible;

/// Largest export document imported (agentd's limit too).
const MAX_DOCUMENT: usize = 128 * 1024 * 1024;
/// Exports and imports travel in pieces of this size.
const CHUNK: usize = 1024 * 1024;

pub fn client(ctx: &Ctx) -> LibraryClient<tonic::transport::Channel> {
    LibraryClient::new(ctx.channel())
}

/// `N` (1 = newest) or an id → a conversation id; `None` → "" (the current one).
pub async fn resolve(ctx: &Ctx, target: Option<&str>) -> CliResult<String> {
    let Some(target) = target else {
        return Ok(String::new());
    };
    match target.parse::<usize>() {
        Ok(n) => {
            let list = sessions::list(ctx).await?;
            n.checked_sub(1)
                .and_then(|i| list.get(i))
                .map(|s| s.id.clone())
                .ok_or_else(|| {
                    CliError::failed(format!(
                        "no conversation {n}: this folder has {} (1 is the newest)",
                        list.len()
                    ))
                })
        }
        Err(_) => Ok(target.to_owned()),
    }
}

/// Forks `session_id` ("" = current) at checkpoint `n` (0 = newest).
pub async fn fork(ctx: &Ctx, session_id: &str, n: u32) -> CliResult<SessionSummary> {
    Ok(client(ctx)
        .fork(ForkRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            checkpoint: n,
        })
        .await
        .map_err(|s| CliError::from_status("forking", &s))?
        .into_inner())
}

pub fn describe_fork(s: &SessionSummary) -> String {
    match &s.forked_from {
        Some(f) => format!(
            "forked {} at turn {}: new conversation {} (the original is unchanged)",
            f.id, f.turn, s.id
        ),
        None => format!("new conversation {}", s.id),
    }
}

/// `agentx fork [N]`: the fork becomes the folder's current conversation.
pub async fn fork_command(ctx: &Ctx, n: Option<u32>) -> CliResult<()> {
    if n == Some(0) {
        return Err(CliError::usage(
            "there is no checkpoint 0: 1 is the newest".to_owned(),
        ));
    }
    let forked = fork(ctx, "", n.unwrap_or(0)).await?;
    ctx.sessions()
        .open_session(OpenSessionRequest {
            scope: ctx.scope(),
            target: Some(Target::Id(forked.id.clone())),
        })
        .await
        .map_err(|s| CliError::from_status("opening the fork", &s))?;
    println!("{}", describe_fork(&forked));
    Ok(())
}

pub async fn rename(ctx: &Ctx, session_id: &str, title: &str) -> CliResult<SessionSummary> {
    Ok(client(ctx)
        .rename(RenameRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            title: title.to_owned(),
        })
        .await
        .map_err(|s| CliError::from_status("renaming", &s))?
        .into_inner())
}

/// `agentx rename [N|ID] TITLE`: with two or more words and a first word
/// that is a number or an id of this folder, that word picks the
/// conversation (quote a title that starts with a number).
pub async fn rename_command(ctx: &Ctx, words: &[String]) -> CliResult<()> {
    let (target, title) = match words {
        [first, rest @ ..] if !rest.is_empty() => {
            let is_target = first.parse::<usize>().is_ok()
                || sessions::list(ctx).await?.iter().any(|s| &s.id == first);
            if is_target {
                (Some(first.as_str()), rest.join(" "))
            } else {
                (None, words.join(" "))
            }
        }
        _ => (None, words.join(" ")),
    };
    let id = resolve(ctx, target).await?;
    let renamed = rename(ctx, &id, &title).await?;
    println!("{}  {}", renamed.id, visible(&renamed.title));
    Ok(())
}

/// Wraps each highlighted range of `snippet` in markers.
fn marked(snippet: &str, hit: &SearchHit, open: &str, close: &str) -> String {
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
        out.push_str(&visible(&snippet[at..start]));
        out.push_str(open);
        out.push_str(&visible(&snippet[start..end]));
        out.push_str(close);
        at = end;
    }
    out.push_str(&visible(&snippet[at..]));
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn hit_json(h: &SearchHit) -> Value {
    json!({
        "session_id": h.session_id,
        "folder": h.folder,
        "agent": h.agent,
        "title": h.title,
        "turn": h.turn,
        "at": rfc3339_wire(h.at.as_ref()),
        "snippet": h.snippet,
        "highlights": h.highlights.iter().map(|r| json!([r.start, r.end])).collect::<Vec<_>>(),
        "score": h.score,
        "where": h.r#where,
        "machine": if h.machine.is_empty() { Value::Null } else { json!(h.machine) },
    })
}

pub async fn search(ctx: &Ctx, text: &str, all: bool, limit: u32) -> CliResult<Vec<SearchHit>> {
    let reply = client(ctx)
        .search(SearchRequest {
            scope: ctx.scope(),
            query: text.to_owned(),
            all,
            limit,
        })
        .await
        .map_err(|s| CliError::from_status("searching", &s))?
        .into_inner();
    if reply.indexing {
        eprintln!("agentx: the search index is still catching up; results may be incomplete");
    }
    if !reply.remote_note.is_empty() {
        eprintln!("agentx: {}", reply.remote_note);
    }
    Ok(reply.hits)
}

/// Prints hits, best first, numbered; the command that opens each.
pub fn print_hits(ctx: &Ctx, hits: &[SearchHit]) {
    if hits.is_empty() {
        println!("no matches");
        return;
    }
    let (open, close) = if std::io::stdout().is_terminal() {
        ("\x1b[1;33m", "\x1b[0m")
    } else {
        ("**", "**")
    };
    for (i, h) in hits.iter().enumerate() {
        let place = if h.turn == 0 {
            "title".to_owned()
        } else {
            format!("turn {}", h.turn)
        };
        let remote = if h.r#where == "remote" {
            "remote: "
        } else {
            ""
        };
        println!(
            "{:>3}  {remote}{}  {}  {place}  {}",
            i + 1,
            h.session_id,
            crate::when::human(h.at.as_ref()),
            visible(&h.title)
        );
        let (folder, agent) = (visible(&h.folder), visible(&h.agent));
        if h.r#where == "remote" {
            println!("     {folder} (agent {agent}, on {})", visible(&h.machine));
        } else if h.folder != ctx.scope.folder || h.agent != ctx.scope.agent {
            println!("     {folder} (agent {agent})");
        }
        println!("     {}", marked(&h.snippet, h, open, close));
    }
    println!("open one with: agentx resume ID (add -C FOLDER --agent NAME for another folder)");
}

pub async fn search_command(
    ctx: &Ctx,
    text: &[String],
    all: bool,
    as_json: bool,
    limit: u32,
) -> CliResult<()> {
    let hits = search(ctx, &text.join(" "), all, limit).await?;
    if as_json {
        println!("{}", Value::Array(hits.iter().map(hit_json).collect()));
    } else {
        print_hits(ctx, &hits);
    }
    Ok(())
}

pub async fn export(ctx: &Ctx, session_id: &str) -> CliResult<String> {
    let mut pieces = client(ctx)
        .export(ExportRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
        })
        .await
        .map_err(|s| CliError::from_status("exporting", &s))?
        .into_inner();
    let mut document = Vec::new();
    while let Some(piece) = pieces
        .message()
        .await
        .map_err(|s| CliError::from_status("exporting", &s))?
    {
        document.extend_from_slice(&piece.chunk);
    }
    String::from_utf8(document)
        .map_err(|_| CliError::failed("agentd sent an export that is not UTF-8"))
}

pub async fn export_command(
    ctx: &Ctx,
    target: Option<&str>,
    format: ExportFormat,
    output: Option<&Path>,
) -> CliResult<()> {
    let id = resolve(ctx, target).await?;
    let document = export(ctx, &id).await?;
    let mut text = match format {
        ExportFormat::Json => document,
        ExportFormat::Markdown => Document::parse(&document)
            .map_err(|e| CliError::failed(e.to_string()))?
            .to_markdown(),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    match output {
        None => {
            print_all(text.as_bytes(), "the export")?;
        }
        Some(path) if path == Path::new("-") => {
            print_all(text.as_bytes(), "the export")?;
        }
        Some(path) => {
            use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
            // A device or a pipe (/dev/stdout, /dev/full, a fifo) is written
            // to; a file that exists is never overwritten.
            let device = std::fs::metadata(path).is_ok_and(|m| {
                let t = m.file_type();
                t.is_char_device() || t.is_fifo() || t.is_socket() || t.is_block_device()
            });
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(!device)
                .mode(0o600)
                .open(path)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => CliError::failed(format!(
                        "{} exists; export never overwrites a file",
                        path.display()
                    )),
                    _ => CliError::failed(format!("cannot create {}: {e}", path.display())),
                })?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| CliError::failed(format!("writing {}: {e}", path.display())))?;
            eprintln!("exported to {}", path.display());
        }
    }
    Ok(())
}

/// `agentx import FILE [--folder DIR]`.
pub async fn import_command(ctx: &Ctx, file: &Path, folder: Option<&Path>) -> CliResult<()> {
    // Bounded: a file over the limit (or /dev/zero) is refused as soon as
    // the limit is passed, never read whole.
    let mut bytes = Vec::new();
    let limit = MAX_DOCUMENT as u64 + 1;
    let read = if file == Path::new("-") {
        std::io::stdin().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| CliError::failed(format!("cannot read {}: {e}", file.display())))?;
    if bytes.len() > MAX_DOCUMENT {
        return Err(CliError::failed(format!(
            "{} is larger than {} MiB, the most an import takes",
            file.display(),
            MAX_DOCUMENT >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::failed(format!(
            "{}: not an agentx conversation export: not UTF-8 text",
            file.display()
        ))
    })?;
    // Validate here too: one clear line before anything is sent.
    let parsed =
        Document::parse(&text).map_err(|e| CliError::failed(format!("{}: {e}", file.display())))?;
    let mut scope = ctx.scope.clone();
    if let Some(dir) = folder {
        let dir: PathBuf = crate::context::resolve_folder(Some(dir))?;
        scope.folder = dir.to_string_lossy().into_owned();
    }
    let pieces: Vec<ImportRequest> = text
        .as_bytes()
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, chunk)| ImportRequest {
            scope: (i == 0).then(|| scope.clone()),
            chunk: chunk.to_vec(),
        })
        .collect();
    drop(text);
    let reply = client(ctx)
        .import(tokio_stream::iter(pieces))
        .await
        .map_err(|s| CliError::from_status("importing", &s))?
        .into_inner();
    let session = reply
        .session
        .ok_or_else(|| CliError::failed("agentd returned no conversation"))?;
    if !reply.renamed_from.is_empty() {
        // Escaped: the id comes from the file and may hold anything.
        let from = reply.renamed_from.escape_debug().to_string();
        if agentx_shared::conversation::is_conversation_id(&reply.renamed_from) {
            println!(
                "conversation {from} exists already; imported as {}",
                session.id
            );
        } else {
            println!(
                "\"{from}\" is not a conversation id agentx gives; imported as {}",
                session.id
            );
        }
    }
    println!(
        "imported {} ({}, {}) into {}: agentx -C {} resume {}",
        session.id,
        agentx_shared::plural::count(session.turns, "turn"),
        agentx_shared::plural::count(parsed.conversation.transcript.len() as u64, "item"),
        scope.folder,
        scope.folder,
        session.id
    );
    Ok(())
}

/// `agentx sessions --tree`: forks drawn under the conversation they came from.
pub fn print_tree(list: &[SessionSummary]) {
    if list.is_empty() {
        println!("no conversations in this folder yet");
        return;
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
    fn draw(
        s: &SessionSummary,
        prefix: &str,
        branch: &str,
        number: &HashMap<&str, usize>,
        children: &HashMap<&str, Vec<&SessionSummary>>,
    ) {
        let title = if s.title.is_empty() {
            "(empty)".into()
        } else {
            visible(&s.title)
        };
        let origin = match &s.forked_from {
            Some(f) if prefix.is_empty() && branch.is_empty() => {
                format!("  (fork of {} @turn {})", f.id, f.turn)
            }
            Some(f) if number.contains_key(f.id.as_str()) => format!("  @turn {}", f.turn),
            Some(f) => format!("  (fork of {} @turn {})", f.id, f.turn),
            None => String::new(),
        };
        println!(
            "{prefix}{branch}{:>2}  {}  {:>9}  {title}{origin}",
            number.get(s.id.as_str()).copied().unwrap_or(0),
            s.id,
            agentx_shared::plural::count(s.turns, "turn")
        );
        let kids = children
            .get(s.id.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let below = match branch {
            "" => prefix.to_owned(),
            "└─ " => format!("{prefix}   "),
            _ => format!("{prefix}│  "),
        };
        for (i, kid) in kids.iter().enumerate() {
            let last = i + 1 == kids.len();
            draw(
                kid,
                &below,
                if last { "└─ " } else { "├─ " },
                number,
                children,
            );
        }
    }
    for root in roots {
        draw(root, "", "", &number, &children);
    }
}

/// `agentx completions SHELL`.
pub fn completions(shell: clap_complete::Shell) -> CliResult<()> {
    use clap::CommandFactory as _;
    let mut command = crate::cli::Cli::command();
    // Made whole first: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "agentx", &mut script);
    print_all(&script, "the completion script")
}

/// `agentx man`: the man page in roff.
pub fn man() -> CliResult<()> {
    use clap::CommandFactory as _;
    let command = crate::cli::Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| CliError::failed(format!("writing the man page: {e}")))?;
    print_all(&page, "the man page")
}

/// Writes `bytes` to stdout; a reader that went away (`| head -1`) ends
/// it quietly, as every other command does.
fn print_all(bytes: &[u8], what: &str) -> CliResult<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failed(format!("writing {what}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_shared::proto::Highlight;

    #[test]
    fn highlights_are_marked() {
        let hit = SearchHit {
            highlights: vec![Highlight { start: 4, end: 9 }],
            ..SearchHit::default()
        };
        assert_eq!(marked("the quick fox", &hit, "[", "]"), "the [quick] fox");
    }
}
