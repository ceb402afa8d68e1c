//! One module per group of `agentx` commands.

pub mod checkpoints;
pub mod daemon;
pub mod exec;
pub mod oneshots;
pub mod pending;
pub mod sessions;
