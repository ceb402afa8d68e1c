//! agentd: the per-user daemon that owns all conversation, checkpoint and
//! snapshot state and serves it to `agentx` clients over a Unix socket.
//!
//! The daemon is a library with a thin binary (`src/main.rs`) so that fuzz
//! targets and benchmarks can reach its on-disk readers; see [`fuzzing`].

mod authority;
#[doc(hidden)]
pub mod benching;
pub mod cli;
mod durable;
#[doc(hidden)]
pub mod fuzzing;
mod layers;
mod listener;
mod logging;
mod peer;
mod pidlock;
#[cfg(test)]
mod proptests;
mod remote;
mod runner;
mod search;
mod server;
mod services;
mod shutdown;
mod snapshot;
mod store;
mod turn;

use std::process::ExitCode;

use anyhow::Context as _;

use agentx_shared::profile::Profile;

/// Runs the daemon until it is told to stop: takes the profile's pid lock,
/// sets up logging and serves clients. An already running daemon for the
/// same profile is not an error (exit code 0, nothing done).
pub fn run(args: cli::Args) -> anyhow::Result<ExitCode> {
    // Everything agentd creates is private to the user, sockets included.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let profile = Profile::resolve(args.profile.as_deref())?;
    profile.ensure_dir()?;
    raise_fd_limit();

    let lock = match pidlock::PidLock::acquire(&profile.pid_file())? {
        pidlock::Acquired::Lock(lock) => std::sync::Arc::new(std::sync::Mutex::new(lock)),
        pidlock::Acquired::HeldBy(pid) => {
            eprintln!(
                "agentd: already running (pid {pid}) for {}",
                profile.dir.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let log_path = logging::init(args.log, &profile)?;
    // TLS for https model servers; an error only means it was installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = server::Config {
        profile,
        log_path,
        #[cfg(debug_assertions)]
        reported_version: args.report_version,
        #[cfg(not(debug_assertions))]
        reported_version: None,
        pid_lock: std::sync::Arc::clone(&lock),
    };
    let result = runtime.block_on(server::run(config));
    // Let blocked tasks go before the lock is released, so a successor never
    // overlaps with us.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    if let Err(err) = &result {
        tracing::error!("agentd stopped with an error: {err:#}");
    }
    drop(lock);
    result.map(|()| ExitCode::SUCCESS)
}

/// Every client connection and open conversation holds descriptors: lift
/// the soft limit to the hard one so a thousand concurrent one-shots fit.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}
