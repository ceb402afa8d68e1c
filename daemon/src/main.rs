//! The `agentd` binary: parses flags and hands over to the library.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let args = agentd::cli::Args::parse();
    match agentd::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("agentd: {err:#}");
            ExitCode::FAILURE
        }
    }
}
