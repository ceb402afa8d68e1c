//! What a tool command produced and ran as: its bounded output and outcome
//! (as told to the model), and the caller's environment it runs in.

use std::ffi::OsString;

/// Output kept from each end of a long output.
pub(super) const KEEP_HEAD: usize = 16 * 1024;
pub(super) const KEEP_TAIL: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub output: String,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Killed (or never started) because agentd is stopping; `cancelled` too.
    pub stopped: bool,
}

impl Outcome {
    /// A command not started because agentd is stopping.
    pub fn not_run_stopping() -> Self {
        Self {
            exit_code: None,
            output: "not run: agentd is stopping".to_owned(),
            timed_out: false,
            cancelled: true,
            stopped: true,
        }
    }

    /// What the model is told.
    pub fn for_model(&self) -> String {
        self.for_model_when(false)
    }

    /// What the model is told; `client_gone`: a cancel came from the
    /// client going away (killed, connection lost), not from the user.
    pub fn for_model_when(&self, client_gone: bool) -> String {
        let status = if self.stopped {
            "killed: agentd stopped while it ran".to_owned()
        } else if self.timed_out {
            "timed out (killed)".to_owned()
        } else if self.cancelled && client_gone {
            "killed: the agentx that ran the turn went away (killed or disconnected)".to_owned()
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
    /// Every variable the command gets; `None`: agentd's own environment
    /// (only tests and internal callers: a turn always sets it).
    pub vars: Option<Vec<(OsString, OsString)>>,
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
            vars: Some(vars),
            umask: umask.map(|m| m & 0o777),
        }
    }

    /// The same with only the variables `policy` lets through (`secrets`:
    /// values no variable may carry).
    pub fn filtered(
        mut self,
        policy: &agentx_shared::shell_env::ShellEnvironment,
        secrets: &[&str],
    ) -> Self {
        let vars = self
            .vars
            .take()
            .unwrap_or_else(|| std::env::vars_os().collect());
        self.vars = Some(policy.apply(vars, secrets));
        self
    }
}

/// Keeps the first and last bytes of a stream, counting what it drops.
pub(super) struct Bounded {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Bounded {
    pub(super) fn new() -> Self {
        Self {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }

    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < KEEP_HEAD {
            let take = (KEEP_HEAD - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= KEEP_TAIL {
            // All the tail held so far goes: copy only what stays.
            self.dropped += self.tail.len() + bytes.len() - KEEP_TAIL;
            self.tail.clear();
            bytes = &bytes[bytes.len() - KEEP_TAIL..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(KEEP_TAIL);
        if excess > 0 {
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    pub(super) fn finish(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n… [{} bytes omitted] …\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}
