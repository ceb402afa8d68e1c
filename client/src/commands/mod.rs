//! One module per group of `agentx` commands.

pub mod daemon;
pub mod pending;
pub mod sessions;
