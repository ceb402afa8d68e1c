//! `agentx import FILE`: reads an export document (bounded), checks it, and
//! sends it to agentd in pieces as a conversation of this (or another) folder.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use agentx_shared::export::Document;
use agentx_shared::proto::ImportRequest;
use agentx_shared::proto::library_client::LibraryClient;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// Largest export document imported (agentd's limit too).
const MAX_DOCUMENT: usize = 128 * 1024 * 1024;
/// Imports travel in pieces of this size.
const CHUNK: usize = 1024 * 1024;

/// `agentx import FILE [--folder DIR]`.
pub async fn run(ctx: &Ctx, file: &Path, folder: Option<&Path>) -> CliResult<()> {
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
    let reply = LibraryClient::new(ctx.channel())
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
