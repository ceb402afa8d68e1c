//! The tool supervisor: a tiny process between agentd and a tool command,
//! so that nothing a command starts outlives agentd.
//!
//! agentd runs its own executable again (`/proc/self/exe`, which works even
//! after an upgrade replaced the file) as
//! `agentd __agentd_tool_supervisor AGENTD_PID COMMAND`, with the caller's
//! environment, umask and folder already in place. The supervisor
//!
//! - gets SIGTERM when agentd dies (`PR_SET_PDEATHSIG`, set before exec),
//!   `kill -9` included, and becomes a child subreaper: whatever the command
//!   leaves behind (`cmd &`, double forks, `setsid`) is re-parented to it,
//!   not to PID 1;
//! - runs `/bin/sh -c COMMAND` in a new process group, with the output pipe
//!   agentd gave it as stderr as both stdout and stderr, and then lets go of
//!   that pipe so agentd sees its end when the command's processes do;
//! - confines itself to the sandbox's rules when agentd gave some (the
//!   variable `sandbox::ENV`, which `sh` never sees), so `sh` and all it
//!   starts are confined too; rules it cannot apply mean no command;
//! - reports how `sh` ended as one line on its stdout (`exit N`,
//!   `signal N`, `error ERRNO` when `sh` could not start, or `sandbox
//!   ERRNO` when the sandbox could not be set up);
//! - stays while any process of the command lives; on SIGTERM (agentd's
//!   death, a timeout, a cancel, agentd stopping), SIGINT, SIGHUP or SIGQUIT
//!   it kills `sh`'s process group and, round after round, every process
//!   re-parented to it, until it has no children left, then exits.
//!
//! It starts from an `.init_array` constructor, before `main` and before
//! anything of agentd (flags, logging, the runtime) runs: the same entry
//! works from the `agentd` binary and from this crate's test binaries, and
//! `main` stays untouched. Anything else on the command line returns at once.

use std::ffi::{CStr, OsStr};
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigHandler, SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The hidden first argument that makes a process a supervisor.
pub(super) const ARG: &str = "__agentd_tool_supervisor";

/// What `ps`/`top` show for a supervisor (at most 15 bytes).
const NAME: &CStr = c"agentd-tool";

/// How long killing a tree may take before the supervisor gives up (a
/// process stuck in uninterruptible sleep cannot be reaped at once).
const KILL_BOUND: Duration = Duration::from_secs(3);

/// Runs before `main` in every process of this executable.
#[used]
#[unsafe(link_section = ".init_array")]
static HOOK: extern "C" fn() = hook;

/// The command that starts a supervisor for `command`, watched by `parent`
/// (the agentd process; it must spawn it and set its death signal).
pub(super) fn command(command: &str, parent: u32) -> std::process::Command {
    // Referencing the hook keeps its object file, and so its `.init_array`
    // entry, in every binary that can start a supervisor.
    std::hint::black_box(&HOOK);
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("agentd")
        .arg(ARG)
        .arg(parent.to_string())
        .arg(command);
    cmd
}

extern "C" fn hook() {
    // Not argc/argv: only glibc passes them to constructors.
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else {
        return;
    };
    let mut args = cmdline.split(|&b| b == 0);
    if args.nth(1) != Some(ARG.as_bytes()) {
        return;
    }
    let parent = args
        .next()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|p| p.parse::<i32>().ok());
    let rules = std::env::var_os(super::sandbox::ENV)
        .map(|text| text.to_str().and_then(|fd| fd.parse::<i32>().ok()));
    let code = match (parent, args.next()) {
        (Some(parent), Some(command)) => {
            supervise(Pid::from_raw(parent), OsStr::from_bytes(command), rules)
        }
        _ => 2,
    };
    std::process::exit(code);
}

/// `rules`: `None` unconfined, else the ruleset's descriptor
/// (`Some(None)`: one that could not be read).
fn supervise(parent: Pid, command: &OsStr, rules: Option<Option<i32>>) -> i32 {
    let Some(watched) = take_over(parent) else {
        return 1;
    };
    if let Some(rules) = rules {
        let enforced = rules.map_or(Err(Errno::EINVAL as i32), super::sandbox::enforce);
        if let Err(errno) = enforced {
            report(&format!("sandbox {errno}\n"));
            return 1;
        }
    }
    let Some(sh) = spawn_sh(command) else {
        return 1;
    };
    // Only the command holds the output pipe now: its end is the command's.
    let _ = silence(nix::unistd::dup2_stderr);

    let mut sh_reaped = false;
    loop {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => {
                if !reap(sh, &mut sh_reaped) {
                    return 0;
                }
            }
            Ok(_) | Err(_) => {
                kill_tree(sh, &mut sh_reaped);
                return 0;
            }
        }
    }
}

/// Makes this process the supervisor of `parent`'s command: named, its
/// signals blocked for sigwait, a child subreaper. The signals it waits
/// for; `None` when it must exit (a failure is reported).
fn take_over(parent: Pid) -> Option<SigSet> {
    let _ = nix::sys::prctl::set_name(NAME);
    // Signals are taken one at a time with sigwait; blocked from here on, so
    // none is lost between the checks below and the loop.
    let mut watched = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        watched.add(signal);
    }
    if let Err(e) = watched.thread_block() {
        report_error(e as i32);
        return None;
    }
    // SAFETY: installs no handler, only ignores; no other thread exists.
    // A reader that went away must not kill us before we kill the tree.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) };
    // agentd died before our death signal was set: nobody wants the command.
    if nix::unistd::getppid() != parent {
        return None;
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        report_error(e as i32);
        return None;
    }
    Some(watched)
}

/// Starts `/bin/sh -c COMMAND` in a process group of its own, its output
/// (both streams) to the pipe agentd gave as stderr; `None` when it could
/// not start (reported).
fn spawn_sh(command: &OsStr) -> Option<Pid> {
    let output = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            report_error(e.raw_os_error().unwrap_or(Errno::EINVAL as i32));
            return None;
        }
    };
    let mut sh = std::process::Command::new("/bin/sh");
    sh.env_remove(super::sandbox::ENV)
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output))
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the child.
    // Should the supervisor itself be killed outright, `sh` goes too.
    unsafe {
        sh.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    // std empties the signal mask and restores SIGPIPE in the child: `sh`
    // starts with the signal state it had under agentd.
    let spawned = sh.spawn();
    drop(sh);
    match spawned.map(|child| i32::try_from(child.id())) {
        Ok(Ok(pid)) => Some(Pid::from_raw(pid)),
        Ok(Err(_)) => {
            report_error(Errno::ERANGE as i32);
            None
        }
        Err(e) => {
            report_error(e.raw_os_error().unwrap_or(Errno::EINVAL as i32));
            None
        }
    }
}

/// Reaps every child that has exited, reporting `sh`; `false` once no
/// child is left.
fn reap(sh: Pid, sh_reaped: &mut bool) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Ok(status) => {
                if status.pid() == Some(sh) && !*sh_reaped {
                    *sh_reaped = true;
                    match status {
                        WaitStatus::Exited(_, code) => report(&format!("exit {code}\n")),
                        WaitStatus::Signaled(_, signal, _) => {
                            report(&format!("signal {}\n", signal as i32));
                        }
                        _ => report("signal 0\n"),
                    }
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Kills `sh`'s process group and every child (re-parented orphans
/// included), round after round, until none is left or time is up.
fn kill_tree(sh: Pid, sh_reaped: &mut bool) {
    let me = nix::unistd::getpid();
    let deadline = Instant::now() + KILL_BOUND;
    loop {
        // The group's id is `sh`'s pid, ours until we reap `sh`.
        if !*sh_reaped {
            let _ = killpg(sh, Signal::SIGKILL);
        }
        // Our children's pids stay ours until we reap them, so none of
        // these can be someone else's process.
        for child in children(me) {
            let _ = kill(child, Signal::SIGKILL);
        }
        if !reap(sh, sh_reaped) || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The processes whose parent is `me`.
fn children(me: Pid) -> Vec<Pid> {
    let parse = |text: &str| {
        text.split_ascii_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .map(Pid::from_raw)
            .collect()
    };
    // A single-threaded process's children, where the kernel keeps the list.
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")) {
        return parse(&text);
    }
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let ppid = u32::try_from(pid)
            .ok()
            .and_then(agentx_shared::procfs::stat)
            .map(|s| s.ppid);
        if ppid == Some(me.as_raw()) {
            found.push(Pid::from_raw(pid));
        }
    }
    found
}

/// Tells agentd how `sh` ended, then closes the channel.
fn report(line: &str) {
    let _ = nix::unistd::write(std::io::stdout(), line.as_bytes());
    let _ = silence(nix::unistd::dup2_stdout);
}

/// Tells agentd that `sh` could not start, and why.
fn report_error(errno: i32) {
    report(&format!("error {errno}\n"));
}

/// Points a standard descriptor at /dev/null.
fn silence(dup2: fn(std::fs::File) -> nix::Result<()>) -> nix::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EINVAL as i32)))?;
    dup2(null)
}
