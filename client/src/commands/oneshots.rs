//! `agentx oneshots [--json]`, `oneshots show ID`, `oneshots prune`: the
//! one-shot states agentd kept because they failed or were interrupted.

use serde_json::{Value, json};

use agentx_shared::proto::oneshots_client::OneshotsClient;
use agentx_shared::proto::{ListOneshotsRequest, PruneOneshotsRequest, ShowOneshotRequest};
use agentx_shared::time::rfc3339_wire;

use crate::cli::OneshotsAction;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::oneshot_status;

pub async fn run(ctx: &Ctx, as_json: bool, action: Option<OneshotsAction>) -> CliResult<()> {
    let mut client = OneshotsClient::new(ctx.channel());
    match action {
        None => {
            let list = client
                .list_oneshots(ListOneshotsRequest { scope: ctx.scope() })
                .await
                .map_err(|s| CliError::from_status("listing one-shots", &s))?
                .into_inner()
                .oneshots;
            if as_json {
                let docs: Vec<Value> = list
                    .iter()
                    .map(|o| {
                        json!({"id": o.id, "status": oneshot_status(o.status()), "reason": o.reason,
                            "created_at": rfc3339_wire(o.created_at.as_ref()), "prompt": o.prompt})
                    })
                    .collect();
                println!("{}", Value::Array(docs));
            } else if list.is_empty() {
                println!("no retained one-shots in this folder");
            } else {
                for o in &list {
                    println!(
                        "{}  {:<11}  {}  {}",
                        o.id,
                        oneshot_status(o.status()),
                        crate::when::human(o.created_at.as_ref()),
                        if o.reason.is_empty() {
                            &o.prompt
                        } else {
                            &o.reason
                        }
                    );
                }
            }
        }
        Some(OneshotsAction::Show { id }) => {
            let reply = client
                .show_oneshot(ShowOneshotRequest {
                    scope: ctx.scope(),
                    id,
                })
                .await
                .map_err(|s| CliError::from_status("showing the one-shot", &s))?
                .into_inner();
            println!("{}", reply.state_json);
        }
        Some(OneshotsAction::Prune) => {
            let removed = client
                .prune_oneshots(PruneOneshotsRequest { scope: ctx.scope() })
                .await
                .map_err(|s| CliError::from_status("pruning one-shots", &s))?
                .into_inner()
                .removed;
            println!("removed {removed} retained one-shot(s)");
        }
    }
    Ok(())
}
