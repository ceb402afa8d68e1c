//! Version numbers exchanged in the client/daemon handshake: a daemon whose
//! version or protocol differs from the client's is replaced.

/// Crate version of this build (client and daemon are released together).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Wire protocol revision; bump on any incompatible change to `agentx.v1`.
pub const PROTOCOL: u32 = 2;
