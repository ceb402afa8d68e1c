//! What commands print, kept apart from calling agentd: text for people
//! (`human`, `diff`), `--json` documents (`json`, `exec_events`); no daemon needed.

pub mod diff;
pub mod exec_events;
pub mod human;
pub mod json;
pub mod markdown;
pub mod tool_block;

use agentx_shared::proto::{Location, OneshotStatus, RemoteSync};

use crate::context::Setup;

/// What a status shows about this side: the folder and agent asked about,
/// the client's setup (when the configuration reads) and the daemon.
pub struct Local {
    pub folder: String,
    pub agent: String,
    pub setup: Option<Setup>,
    pub daemon_pid: u32,
    pub daemon_version: String,
}

/// A conversation's place as `--json` and the web view name it.
pub fn location(l: Location) -> &'static str {
    match l {
        Location::Remote => "remote",
        Location::Both => "both",
        Location::Local | Location::Unspecified => "local",
    }
}

/// The remote store's state as `--json` and `status` name it ("": not said).
pub fn remote_sync(s: RemoteSync) -> &'static str {
    match s {
        RemoteSync::Unspecified => "",
        RemoteSync::Off => "off",
        RemoteSync::Synced => "synced",
        RemoteSync::Pending => "pending",
        RemoteSync::Unreachable => "unreachable",
    }
}

/// Whether a remote store is configured, by its state.
pub fn remote_on(s: RemoteSync) -> bool {
    !matches!(s, RemoteSync::Unspecified | RemoteSync::Off)
}

/// A retained one-shot's status as `--json` and the listing name it.
pub fn oneshot_status(s: OneshotStatus) -> &'static str {
    match s {
        OneshotStatus::Unspecified => "",
        OneshotStatus::Running => "running",
        OneshotStatus::Failed => "failed",
        OneshotStatus::Interrupted => "interrupted",
        OneshotStatus::Corrupt => "corrupt",
    }
}

/// Prints lines rendered for people.
pub fn print(lines: Vec<String>) {
    for line in lines {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests;
