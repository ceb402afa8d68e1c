//! The supervisor: a tiny process between agentd and a tool command or an
//! MCP server, so that nothing either starts outlives agentd.
//!
//! For a tool command agentd runs its own executable again (`/proc/self/exe`, which works even
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
//! For an MCP server it runs as `agentd __agentd_server_supervisor
//! AGENTD_PID PROGRAM ARGS…`: the same death signal, subreaper and kill of
//! every process left on agentd's death, but `PROGRAM` runs directly (in
//! the supervisor's process group, which agentd signals to stop it) with
//! the supervisor's stdin and stdout, agentd's pipes, which the supervisor
//! then lets go of. When the server exits, what it left behind is killed
//! and the supervisor exits with the server's code (128 + N for a signal).
//! So `npx pkg`'s node, a grandchild, dies with agentd too.
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

/// The hidden first argument that makes a process a tool supervisor.
const ARG: &str = "__agentd_tool_supervisor";

/// The hidden first argument that makes a process an MCP server's.
const SERVER_ARG: &str = "__agentd_server_supervisor";

/// What `ps`/`top` show for a supervisor (at most 15 bytes).
const NAME: &CStr = c"agentd-tool";
const SERVER_NAME: &CStr = c"agentd-mcp";

/// The variable that hands a tool supervisor the sandbox's ruleset (a
/// descriptor number); `sh` never sees it.
pub const SANDBOX_FD_ENV: &str = "AGENTD_SANDBOX_FD";

/// The variable that hands a tool supervisor the command's umask (octal);
/// `sh` never sees it (it inherits the umask itself).
pub const UMASK_ENV: &str = "AGENTD_UMASK";

/// How long killing a tree may take before the supervisor gives up (a
/// process stuck in uninterruptible sleep cannot be reaped at once).
const KILL_BOUND: Duration = Duration::from_secs(3);

/// Runs before `main` in every process of this executable.
#[used]
#[unsafe(link_section = ".init_array")]
static HOOK: extern "C" fn() = hook;

/// The command that starts a supervisor for `command`, watched by `parent`
/// (the agentd process; it must spawn it from the spawner thread, which
/// the supervisor's death signal is keyed to).
pub fn command(command: &str, parent: u32) -> std::process::Command {
    let mut cmd = own_executable();
    cmd.arg(ARG).arg(parent.to_string()).arg(command);
    cmd
}

/// The command that starts a supervisor running the MCP server `program
/// args` with its stdin and stdout, watched by `parent` (agentd; it must
/// spawn it from the spawner thread, in a process group of its own).
pub fn server_command(program: &str, args: &[String], parent: u32) -> std::process::Command {
    let mut cmd = own_executable();
    cmd.arg(SERVER_ARG)
        .arg(parent.to_string())
        .arg(program)
        .args(args);
    cmd
}

/// The server a server supervisor `pid` runs, once it runs: its one child.
pub fn server_pid(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_ascii_whitespace().next()?.parse().ok()
}

fn own_executable() -> std::process::Command {
    // Referencing the hook keeps its object file, and so its `.init_array`
    // entry, in every binary that can start a supervisor.
    std::hint::black_box(&HOOK);
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("agentd");
    cmd
}

extern "C" fn hook() {
    // Not argc/argv: only glibc passes them to constructors.
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else {
        return;
    };
    // Each argument ends with a NUL: no empty piece after the last.
    let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(&cmdline);
    let mut args = cmdline.split(|&b| b == 0);
    let mode = args.nth(1);
    if mode != Some(ARG.as_bytes()) && mode != Some(SERVER_ARG.as_bytes()) {
        return;
    }
    let parent = args
        .next()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|p| p.parse::<i32>().ok())
        .map(Pid::from_raw);
    let code = match (parent, args.next()) {
        (Some(parent), Some(program)) if mode == Some(SERVER_ARG.as_bytes()) => {
            let args: Vec<&OsStr> = args.map(OsStr::from_bytes).collect();
            supervise_server(parent, OsStr::from_bytes(program), &args)
        }
        (Some(parent), Some(command)) => {
            let rules = std::env::var_os(SANDBOX_FD_ENV)
                .map(|text| text.to_str().and_then(|fd| fd.parse::<i32>().ok()));
            let umask = std::env::var_os(UMASK_ENV)
                .and_then(|text| libc::mode_t::from_str_radix(text.to_str()?, 8).ok());
            if let Some(mask) = umask {
                nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
            }
            supervise(parent, OsStr::from_bytes(command), rules)
        }
        _ => 2,
    };
    std::process::exit(code);
}

/// `rules`: `None` unconfined, else the ruleset's descriptor
/// (`Some(None)`: one that could not be read).
fn supervise(parent: Pid, command: &OsStr, rules: Option<Option<i32>>) -> i32 {
    let watched = match take_over(parent, NAME) {
        Ok(Some(watched)) => watched,
        Ok(None) => return 1,
        Err(errno) => {
            report_error(errno);
            return 1;
        }
    };
    if let Some(rules) = rules {
        let enforced = rules.map_or(Err(Errno::EINVAL as i32), confine);
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

    let mut sh_ended = None;
    // Reaps, and tells agentd how `sh` ended once it has.
    let mut reap_sh = |sh_ended: &mut Option<Ended>| {
        let known = sh_ended.is_some();
        let more = reap(sh, sh_ended);
        if let (false, Some(status)) = (known, *sh_ended) {
            report(&status_line(status));
        }
        more
    };
    loop {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => {
                if !reap_sh(&mut sh_ended) {
                    return 0;
                }
            }
            Ok(_) | Err(_) => {
                kill_tree(Some(sh), &mut sh_ended, &mut reap_sh);
                return 0;
            }
        }
    }
}

/// An MCP server's supervisor: runs `program args` with this process's
/// stdin and stdout, then waits. The server's exit ends it (with what the
/// server left killed); agentd's death kills everything. A stop agentd
/// asks for reaches the server through the process group they share.
fn supervise_server(parent: Pid, program: &OsStr, args: &[&OsStr]) -> i32 {
    let Ok(Some(watched)) = take_over(parent, SERVER_NAME) else {
        return 1;
    };
    let mut server = std::process::Command::new(program);
    server.args(args);
    // SAFETY: prctl and sigprocmask are async-signal-safe and only touch
    // the child. Should the supervisor itself be killed outright, the
    // server goes too; it starts with no signal blocked (ours are, for
    // sigwait).
    unsafe {
        server.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
    }
    let spawned = server.spawn();
    drop(server);
    let Some(server) = spawned
        .ok()
        .and_then(|child| i32::try_from(child.id()).ok())
        .map(Pid::from_raw)
    else {
        // Not found or not runnable, as a shell says it.
        return 127;
    };
    // Only the server holds agentd's pipes now: their ends are the server's.
    let _ = silence(nix::unistd::dup2_stdin);
    let _ = silence(nix::unistd::dup2_stdout);

    let mut ended = None;
    loop {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => {
                let more = reap(server, &mut ended);
                if let Some(how) = ended {
                    // What the server started and left behind goes too.
                    kill_tree(None, &mut ended, &mut |e| reap(server, e));
                    return how.code();
                }
                if !more {
                    return 1;
                }
            }
            // agentd's death: everything goes. Any other signal is agentd
            // stopping the server: its group (the server's too) got it.
            Ok(_) | Err(_) if nix::unistd::getppid() != parent => {
                kill_tree(None, &mut ended, &mut |e| reap(server, e));
                return 1;
            }
            Ok(_) | Err(_) => {}
        }
    }
}

/// Makes this process the supervisor of `parent`'s command: named, its
/// signals blocked for sigwait, a child subreaper. The signals it waits
/// for; `None` when it must exit; the errno of what failed.
fn take_over(parent: Pid, name: &CStr) -> Result<Option<SigSet>, i32> {
    let _ = nix::sys::prctl::set_name(name);
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
    watched.thread_block().map_err(|e| e as i32)?;
    // SAFETY: installs no handler, only ignores; no other thread exists.
    // A reader that went away must not kill us before we kill the tree.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn) };
    // Set here, not between agentd's fork and exec: agentd starts us with
    // posix_spawn (no copy of its page tables, no pause of its threads).
    // The "parent" is the thread that spawned us, agentd's spawner thread,
    // which lives as long as agentd.
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(|e| e as i32)?;
    // agentd died before our death signal was set: nobody wants the command.
    if nix::unistd::getppid() != parent {
        return Ok(None);
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| e as i32)?;
    Ok(Some(watched))
}

/// Confines this process (and all it starts) with the sandbox ruleset `fd`
/// names: from here on the kernel refuses the rest. The errno on failure.
fn confine(fd: i32) -> Result<(), i32> {
    let last = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: prctl and landlock_restrict_self take plain integers; the
    // descriptor is ours (inherited for this) and closed after.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(last());
        }
        let done = libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32);
        let errno = last();
        libc::close(fd);
        // The ruleset comes as stdin: stdin is nothing again.
        if fd == 0 {
            libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        }
        if done != 0 {
            return Err(errno);
        }
    }
    Ok(())
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
    sh.env_remove(SANDBOX_FD_ENV)
        .env_remove(UMASK_ENV)
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output))
        .process_group(0);
    // SAFETY: prctl and sigprocmask are async-signal-safe and only touch
    // the child. Should the supervisor itself be killed outright, `sh` goes
    // too; it starts with no signal blocked (ours are, for sigwait) and
    // std restores SIGPIPE: the signal state it had under agentd.
    unsafe {
        sh.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
    }
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

/// How the process a supervisor runs ended.
#[derive(Clone, Copy)]
enum Ended {
    Exit(i32),
    Signal(i32),
}

impl Ended {
    /// As a shell gives it: the code, or 128 + the signal.
    fn code(self) -> i32 {
        match self {
            Ended::Exit(code) => code,
            Ended::Signal(signal) => 128 + signal,
        }
    }
}

/// Reaps every child that has exited, keeping how `main` ended once;
/// `false` once no child is left.
fn reap(main: Pid, ended: &mut Option<Ended>) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Ok(status) => {
                if status.pid() == Some(main) && ended.is_none() {
                    *ended = Some(match status {
                        WaitStatus::Exited(_, code) => Ended::Exit(code),
                        WaitStatus::Signaled(_, signal, _) => Ended::Signal(signal as i32),
                        _ => Ended::Signal(0),
                    });
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// How `sh` ended, as agentd reads it (see the module's doc).
fn status_line(ended: Ended) -> String {
    match ended {
        Ended::Exit(code) => format!("exit {code}\n"),
        Ended::Signal(signal) => format!("signal {signal}\n"),
    }
}

/// Kills `group` (while `ended` says its leader is not reaped: its id is
/// ours till then) and every child, re-parented orphans included, round
/// after round, until none is left or time is up; `reap` reaps.
fn kill_tree(
    group: Option<Pid>,
    ended: &mut Option<Ended>,
    reap: &mut dyn FnMut(&mut Option<Ended>) -> bool,
) {
    let me = nix::unistd::getpid();
    let deadline = Instant::now() + KILL_BOUND;
    loop {
        if let Some(group) = group
            && ended.is_none()
        {
            let _ = killpg(group, Signal::SIGKILL);
        }
        // Our children's pids stay ours until we reap them, so none of
        // these can be someone else's process.
        for child in children(me) {
            let _ = kill(child, Signal::SIGKILL);
        }
        if !reap(ended) || Instant::now() >= deadline {
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
