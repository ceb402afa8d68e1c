//! agentx-shared: what both `agentx` and `agentd` must agree on — the gRPC
//! contract, the profile and path rules, versions, and the Unix-socket transport.

pub mod config;
pub mod context;
pub mod conversation;
pub mod export;
pub mod folder;
pub mod plural;
pub mod profile;
pub mod proto;
pub mod time;
pub mod transport;
pub mod version;

/// Limits shared by agentx and agentd.
pub mod limits {
    /// Longest user message (prompt) a turn accepts, in bytes.
    pub const MAX_MESSAGE: usize = 1 << 20;
}
