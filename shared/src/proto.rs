//! Generated gRPC code for package `agentx.v1` and its encoded descriptor
//! set (served by agentd's reflection service).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("agentx.v1");

/// Encoded `FileDescriptorSet` of every `agentx.v1` proto file.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("agentx_descriptor");
