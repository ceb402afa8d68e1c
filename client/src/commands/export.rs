//! `agentx export [N|ID]`: a conversation as its JSON document or as
//! Markdown, to stdout or to a new file (never overwriting one).

use std::io::Write as _;
use std::path::Path;

use agentx_shared::export::Document;

use crate::choose;
use crate::cli::ExportFormat;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::ui::print_all;

pub async fn run(
    ctx: &Ctx,
    target: Option<&str>,
    format: Option<ExportFormat>,
    output: Option<&Path>,
) -> CliResult<()> {
    // `-o conv.md` means Markdown unless --format says otherwise.
    let markdown_file = output
        .and_then(Path::extension)
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"));
    let format = format.unwrap_or(if markdown_file {
        ExportFormat::Markdown
    } else {
        ExportFormat::Json
    });
    let id = choose::resolve(ctx, target).await?;
    let document = ctx.rpc().export(&id).await?;
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
