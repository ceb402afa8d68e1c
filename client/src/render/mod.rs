//! What commands print, kept apart from calling agentd: text for people
//! (`human`, `diff`), `--json` documents (`json`, `exec_events`); no daemon needed.

pub mod diff;
pub mod exec_events;
pub mod human;
pub mod json;

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

/// Prints lines rendered for people.
pub fn print(lines: Vec<String>) {
    for line in lines {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests;
