//! `agentx sync`: push to the remote store now and say what was pushed;
//! exit 1 when the store was not reached or refused a conversation.

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::json;

/// `agentx sync`: push now, print what was pushed; exit 1 if the remote
/// was not reached.
pub async fn run(ctx: &Ctx, as_json: bool, wait_ms: Option<u32>) -> CliResult<()> {
    let reply = ctx.rpc().sync(wait_ms.unwrap_or(0)).await?;
    let remote = reply.remote.clone().unwrap_or_default();
    if as_json {
        println!("{}", json::sync(&reply, &remote));
    }
    if !crate::render::remote_on(remote.state()) {
        if !as_json {
            println!("remote keeping is off (set remote_url in config.toml or AGENTX_REMOTE_URL)");
        }
        return Ok(());
    }
    for fork in &reply.forks {
        eprintln!("agentx: {}", fork.message);
    }
    if !as_json {
        println!(
            "pushed {}, {} to {}; {} pending",
            agentx_shared::plural::count(reply.pushed_conversations, "conversation"),
            agentx_shared::plural::count(reply.pushed_records, "record"),
            remote.url,
            remote.pending
        );
    }
    if reply.reached && !remote.refused.is_empty() {
        let ids: Vec<String> = remote
            .refused
            .iter()
            .map(|f| format!("{} ({})", f.id, f.error))
            .collect();
        Err(CliError::failed(format!(
            "the remote store refused {}, the others are synced: {}",
            agentx_shared::plural::count(ids.len() as u64, "conversation"),
            ids.join("; ")
        )))
    } else if reply.reached {
        Ok(())
    } else if reply.timed_out {
        Err(CliError::failed(format!(
            "the remote store did not finish within the wait ({} pending){}",
            remote.pending,
            if remote.last_error.is_empty() {
                String::new()
            } else {
                format!(": {}", remote.last_error)
            }
        )))
    } else {
        Err(CliError::failed(format!(
            "the remote store is unreachable: {}",
            if remote.last_error.is_empty() {
                "no answer"
            } else {
                remote.last_error.as_str()
            }
        )))
    }
}
