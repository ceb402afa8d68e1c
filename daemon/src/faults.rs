//! Fault points for tests, in debug builds only: `AGENTD_FAULT=<point>` in
//! agentd's environment makes it kill itself (SIGKILL) on reaching that point.

/// Stops agentd here as a `kill -9` would, when `AGENTD_FAULT` names `name`
/// (debug builds only; release builds compile this to nothing).
pub fn point(name: &str) {
    #[cfg(debug_assertions)]
    {
        static CHOSEN: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
        let chosen = CHOSEN.get_or_init(|| std::env::var_os("AGENTD_FAULT"));
        if chosen.as_deref().is_some_and(|c| c == name) {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
