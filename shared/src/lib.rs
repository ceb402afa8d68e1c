//! agentx-shared: what both `agentx` and `agentd` must agree on — the gRPC
//! contract, the profile and path rules, versions, and the Unix-socket transport.

pub mod config;
pub mod context;
pub mod conversation;
pub mod export;
pub mod folder;
pub mod mcp_config;
pub mod plural;
pub mod procfs;
pub mod profile;
pub mod proto;
#[cfg(feature = "test-support")]
pub mod rng;
pub mod sandbox;
pub mod shell_env;
pub mod terminal;
pub mod time;
pub mod transport;
pub mod version;

/// Limits shared by agentx and agentd.
pub mod limits {
    /// Longest user message (prompt) a turn accepts, in bytes.
    pub const MAX_MESSAGE: usize = 1 << 20;
    /// Largest gRPC message of a turn's event stream, set on both sides
    /// (agentd encodes, agentx decodes). agentd keeps every event far
    /// below it: text in 1 MiB pieces, other fields cut at 64 KiB, ids at 1 KiB.
    pub const MAX_TURN_EVENT: usize = 8 << 20;
}
