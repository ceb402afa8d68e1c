//! `agentx rename [N|ID] TITLE`: give a conversation (the current one by
//! default) a title.

use crate::choose;
use crate::context::Ctx;
use crate::error::CliResult;
use crate::show::visible;

/// `agentx rename [N|ID] TITLE`: with two or more words and a first word
/// that is a number or an id of this folder, that word picks the
/// conversation (quote a title that starts with a number).
pub async fn run(ctx: &Ctx, words: &[String]) -> CliResult<()> {
    let (target, title) = match words {
        [first, rest @ ..] if !rest.is_empty() => {
            let is_target = first.parse::<usize>().is_ok() || choose::is_listed(ctx, first).await?;
            if is_target {
                (Some(first.as_str()), rest.join(" "))
            } else {
                (None, words.join(" "))
            }
        }
        _ => (None, words.join(" ")),
    };
    let id = choose::resolve(ctx, target).await?;
    let renamed = ctx.rpc().rename(&id, &title).await?;
    println!("{}  {}", renamed.id, visible(&renamed.title));
    Ok(())
}
