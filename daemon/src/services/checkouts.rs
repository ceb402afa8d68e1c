//! Two checkouts of one repository under one profile: their
//! conversations are listed as this machine's, and resuming one forks it here.

use std::path::Path;
use std::sync::Arc;

use tonic::Status;

use agentx_shared::folder::relative;
use agentx_shared::proto::SessionSummary;

use super::{status_of, summary};
use crate::remote::Remote;
use crate::store::{GroupHandle, OpenTarget, Opened, Store, elsewhere};

/// The project key of `folder` on `machine` as the remote store groups it
/// (computed the same way when no remote store is configured).
fn project_of(folder: &str, machine: &str) -> String {
    crate::remote::project_key(Path::new(folder), machine)
}

/// `agent`'s conversations this profile keeps in other checkouts of
/// `folder`'s project, as listed: local, on this machine, with their folder.
pub async fn listed_elsewhere(
    store: &Arc<Store>,
    remote: &Remote,
    folder: &str,
    agent: &str,
) -> Vec<SessionSummary> {
    let (store, folder, agent) = (Arc::clone(store), folder.to_owned(), agent.to_owned());
    let machine = remote.machine().to_owned();
    let docs = tokio::task::spawn_blocking(move || {
        let project = crate::remote::project_key(Path::new(&folder), &machine);
        store.kept_elsewhere(&folder, &agent, |other| {
            crate::remote::project_key(Path::new(other), &machine) == project
        })
    })
    .await
    .unwrap_or_default();
    docs.iter()
        .map(|doc| SessionSummary {
            location: agentx_shared::proto::Location::Local as i32,
            machine: remote.machine().to_owned(),
            ..summary(doc)
        })
        .collect()
}

/// `agentx resume ID` in `folder` of a conversation this profile keeps in
/// another folder: forked here when that folder is another checkout of the
/// same project (the original stays there, untouched), else refused with
/// where it is (projects keyed as on `machine`, this one). `None`: this
/// profile keeps no conversation `id`.
pub async fn open_elsewhere(
    store: &Arc<Store>,
    machine: &str,
    group: &GroupHandle,
    folder: &str,
    agent: &str,
    id: &str,
) -> Result<Option<Opened>, Status> {
    let (lookup, wanted) = (Arc::clone(store), id.to_owned());
    let Some(held) = tokio::task::spawn_blocking(move || lookup.holder(&wanted))
        .await
        .map_err(super::status::task_failed)?
    else {
        return Ok(None);
    };
    let there = if held.folder.is_empty() {
        held.dir.display().to_string()
    } else {
        relative(folder, &held.folder)
    };
    if held.folder.is_empty() {
        return Err(Status::failed_precondition(format!(
            "conversation {id} is kept in {there}, and its state cannot be read"
        )));
    }
    if held.folder == folder && held.agent == agent {
        // Kept right here (the group did not know it a moment ago).
        return group
            .open(OpenTarget::Id(id.to_owned()))
            .await
            .map(Some)
            .map_err(status_of);
    }
    if held.agent != agent {
        return Err(Status::not_found(format!(
            "conversation {id} belongs to agent {} in {there}; resume it there \
             (agentx -C {} --agent {} resume {id})",
            held.agent, held.folder, held.agent
        )));
    }
    if project_of(&held.folder, machine) != project_of(folder, machine) {
        return Err(Status::not_found(format!(
            "conversation {id} lives in {there}, which is not a checkout of this folder's \
             project; resume it there (agentx -C {} resume {id})",
            held.folder
        )));
    }
    let from = store.group(&held.folder, agent).map_err(status_of)?;
    let to_dir = store.group_dir(folder, agent);
    let fork = elsewhere::fork_into(&from, &held.dir, id, group, &to_dir, folder)
        .await
        .map_err(status_of)?;
    // Adopting it announced it: pushed as a conversation of its own.
    tracing::info!(from = id, to = %fork.id, there = %held.folder, "forked a conversation from another checkout");
    let mut opened = group
        .open(OpenTarget::Id(fork.id.clone()))
        .await
        .map_err(status_of)?;
    opened.notices.insert(
        0,
        format!(
            "conversation {id} lives in {there}; continuing here as fork {}",
            fork.id
        ),
    );
    Ok(Some(opened))
}
