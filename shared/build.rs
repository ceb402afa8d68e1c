//! Compiles `proto/agentx/v1/*.proto` with protox (no `protoc` needed) and
//! generates the prost messages and tonic services, plus the descriptor set
//! that server reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("..");
    let proto_dir = root.join("proto");
    println!("cargo:rerun-if-changed={}", proto_dir.display());

    let mut files = Vec::new();
    for entry in std::fs::read_dir(proto_dir.join("agentx/v1"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "proto") {
            println!("cargo:rerun-if-changed={}", path.display());
            files.push(path);
        }
    }
    files.sort();

    let fds = protox::compile(&files, [&proto_dir])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds_path = out.join("agentx_descriptor.bin");
    std::fs::write(&fds_path, prost::Message::encode_to_vec(&fds))?;

    tonic_prost_build::configure()
        .file_descriptor_set_path(&fds_path)
        .skip_protoc_run()
        .generate_default_stubs(true)
        .compile_protos(&files, &[proto_dir])?;
    Ok(())
}
