//! The `shell` tool: runs `sh -c COMMAND` in the conversation's folder with a
//! timeout, capturing combined output bounded to its head and tail.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::sync::watch;

/// Output kept from each end of a long output.
const KEEP_HEAD: usize = 16 * 1024;
const KEEP_TAIL: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub output: String,
    pub timed_out: bool,
    pub cancelled: bool,
}

impl Outcome {
    /// What the model is told.
    pub fn for_model(&self) -> String {
        let status = if self.timed_out {
            "timed out (killed)".to_owned()
        } else if self.cancelled {
            "cancelled by the user (killed)".to_owned()
        } else {
            match self.exit_code {
                Some(code) => format!("exit code {code}"),
                None => "killed by a signal".to_owned(),
            }
        };
        format!("{status}\n{}", self.output)
    }
}

/// The terminal a command runs as: the environment and umask of the
/// `agentx` that started the turn. Held in memory for the turn only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Empty: agentd's own environment (a client that sent none).
    pub vars: Vec<(OsString, OsString)>,
    pub umask: Option<u32>,
}

impl Environment {
    /// Parses `NAME=value` entries; entries without `=` or with an empty
    /// name are dropped, as the kernel's own environment parsing would.
    pub fn from_entries(entries: Vec<Vec<u8>>, umask: Option<u32>) -> Self {
        use std::os::unix::ffi::OsStringExt as _;
        let vars = entries
            .into_iter()
            .filter_map(|mut entry| {
                let eq = entry.iter().position(|&b| b == b'=').filter(|&i| i > 0)?;
                let value = entry.split_off(eq + 1);
                entry.pop();
                Some((OsString::from_vec(entry), OsString::from_vec(value)))
            })
            .collect();
        Self {
            vars,
            umask: umask.map(|m| m & 0o777),
        }
    }
}

/// Keeps the first and last bytes of a stream, counting what it drops.
struct Bounded {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Bounded {
    fn new() -> Self {
        Self {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < KEEP_HEAD {
            let take = (KEEP_HEAD - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(KEEP_TAIL);
        if excess > 0 {
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    fn finish(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n… [{} bytes omitted] …\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Runs the command; a `true` on `cancel` kills it.
pub async fn run(
    command: &str,
    cwd: &Path,
    env: &Environment,
    timeout: Duration,
    mut cancel: watch::Receiver<bool>,
) -> std::io::Result<Outcome> {
    let (reader, writer) = std::io::pipe()?;
    let writer_err = writer.try_clone()?;
    // By absolute path: the caller's PATH must not decide which shell runs.
    let mut cmd = tokio::process::Command::new("/bin/sh");
    if !env.vars.is_empty() {
        cmd.env_clear()
            .envs(env.vars.iter().cloned())
            .env("PWD", cwd);
    }
    if let Some(mask) = env.umask {
        let mask = nix::sys::stat::Mode::from_bits_truncate(mask as nix::libc::mode_t);
        // SAFETY: umask is async-signal-safe and only affects the child.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::stat::umask(mask);
                Ok(())
            });
        }
    }
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err))
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the child.
    // A command must not outlive an agentd that was killed: its turn is
    // recorded as interrupted and nobody would collect its output.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;

    let mut output = Bounded::new();
    let mut buf = vec![0u8; 8192];
    let deadline = tokio::time::Instant::now() + timeout;
    let mut timed_out = false;
    let mut cancelled = false;
    let mut status = None;
    let mut eof = false;
    while !(eof && status.is_some()) {
        tokio::select! {
            read = pipe.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => output.push(&buf[..n]),
            },
            exit = child.wait(), if status.is_none() => {
                status = Some(exit?);
                // Background children may hold the pipe open: give the
                // output a moment to drain, then stop reading.
                if !eof {
                    let grace = tokio::time::sleep(Duration::from_millis(200));
                    tokio::pin!(grace);
                    loop {
                        tokio::select! {
                            read = pipe.read(&mut buf) => match read {
                                Ok(0) | Err(_) => break,
                                Ok(n) => output.push(&buf[..n]),
                            },
                            () = &mut grace => break,
                        }
                    }
                    eof = true;
                }
            },
            () = tokio::time::sleep_until(deadline), if status.is_none() => {
                timed_out = true;
                kill_group(pgid);
            },
            changed = cancel.changed(), if status.is_none() && !cancelled => {
                if changed.is_err() || *cancel.borrow() {
                    cancelled = true;
                    kill_group(pgid);
                }
            },
        }
    }
    let exit_code = status.and_then(|s| s.code());
    Ok(Outcome {
        exit_code,
        output: output.finish(),
        timed_out,
        cancelled,
    })
}

fn kill_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_cancel() -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        rx
    }

    #[tokio::test]
    async fn captures_exit_code_and_interleaved_output() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "echo out; echo err >&2; exit 3",
            dir.path(),
            &Environment::default(),
            Duration::from_secs(5),
            no_cancel(),
        )
        .await
        .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.output, "out\nerr\n");
        let out = run(
            "pwd",
            dir.path(),
            &Environment::default(),
            Duration::from_secs(5),
            no_cancel(),
        )
        .await
        .unwrap();
        assert_eq!(
            out.output.trim(),
            std::fs::canonicalize(dir.path()).unwrap().to_str().unwrap()
        );
    }

    #[tokio::test]
    async fn runs_with_the_callers_environment_and_umask() {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment::from_entries(
            vec![
                b"MYVAR=from terminal=yes".to_vec(),
                b"PATH=/opt/caller-bin:/usr/bin:/bin".to_vec(),
                b"no-equals-sign".to_vec(),
                b"=empty-name".to_vec(),
            ],
            Some(0o027),
        );
        assert_eq!(env.vars.len(), 2);
        let out = run(
            "echo \"[$MYVAR]\"; echo \"$PATH\"; umask; touch made.txt; env | wc -l",
            dir.path(),
            &env,
            Duration::from_secs(5),
            no_cancel(),
        )
        .await
        .unwrap();
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines[0], "[from terminal=yes]");
        assert_eq!(lines[1], "/opt/caller-bin:/usr/bin:/bin");
        assert_eq!(lines[2], "0027");
        // MYVAR, PATH, PWD, and what sh itself adds (SHLVL, _): nothing of agentd's.
        let count: usize = lines[3].trim().parse().unwrap();
        assert!(count <= 5, "{}", out.output);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("made.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "seq 1 100000",
            dir.path(),
            &Environment::default(),
            Duration::from_secs(10),
            no_cancel(),
        )
        .await
        .unwrap();
        assert!(out.output.starts_with("1\n2\n3\n"));
        assert!(out.output.ends_with("99999\n100000\n"));
        assert!(out.output.contains("bytes omitted"));
        assert!(out.output.len() < KEEP_HEAD + KEEP_TAIL + 100);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let out = run(
            "sleep 30 & sleep 30",
            dir.path(),
            &Environment::default(),
            Duration::from_millis(300),
            no_cancel(),
        )
        .await
        .unwrap();
        assert!(out.timed_out);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(out.for_model().starts_with("timed out"));
    }

    #[tokio::test]
    async fn cancel_kills_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn({
            let dir = dir.path().to_path_buf();
            async move {
                run(
                    "sleep 30",
                    &dir,
                    &Environment::default(),
                    Duration::from_secs(60),
                    rx,
                )
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(true).unwrap();
        let out = task.await.unwrap().unwrap();
        assert!(out.cancelled);
    }
}
