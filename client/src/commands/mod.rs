//! One module per `agentx` command; none imports another (shared calls are
//! in `crate::rpc`, shared rendering in `crate::render`).

pub mod checkpoints;
pub mod clear;
pub mod daemon;
pub mod diff;
pub mod exec;
pub mod export;
pub mod fork;
pub mod import;
pub mod manuals;
pub mod mcp;
pub mod oneshots;
pub mod rename;
pub mod search;
pub mod sessions;
pub mod snapshots;
pub mod status;
pub mod sync;
