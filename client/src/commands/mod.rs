//! One module per group of `agentx` commands.

pub mod checkpoints;
pub mod daemon;
pub mod diff;
pub mod exec;
mod exec_events;
pub mod library;
pub mod oneshots;
pub mod sessions;
pub mod snapshots;
