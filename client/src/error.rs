//! Errors that end an `agentx` run: one line on stderr and an exit code
//! (1 failed, 2 usage, 3 daemon unreachable).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Failed = 1,
    Usage = 2,
    Unreachable = 3,
}

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
    /// The daemon was unreachable before a turn started: nothing of it
    /// reached agentd, so it may be sent again after reconnecting.
    pub not_started: bool,
}

impl CliError {
    fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            not_started: false,
        }
    }
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(Exit::Unreachable, message)
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(Exit::Failed, message)
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// Maps an RPC failure: a daemon that vanished or refuses us is
    /// unreachable (3); anything else failed the command (1).
    pub fn from_status(what: &str, status: &tonic::Status) -> Self {
        use tonic::Code;
        // A transport failure (the connection broke: agentd stopped or
        // died) comes as Unknown with its cause attached; a status agentd
        // sent has none.
        let broken = status.code() == Code::Unknown && std::error::Error::source(status).is_some();
        match status.code() {
            Code::Unavailable | Code::Cancelled => Self::unreachable(format!(
                "{what}: lost the connection to agentd: {}",
                status.message()
            )),
            Code::Unknown if broken => Self::unreachable(format!(
                "{what}: lost the connection to agentd: {}",
                status.message()
            )),
            Code::PermissionDenied => Self::unreachable(format!(
                "{what}: agentd refused this client: {}; each user runs their own agentd \
                 (check AGENTX_SOCKET/AGENTX_HOME)",
                status.message()
            )),
            Code::Unimplemented => Self::failed(format!(
                "{what} is not available in this version of agentd yet"
            )),
            Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition => {
                Self::failed(status.message().to_owned())
            }
            _ => Self::failed(format!("{what}: {}", status.message())),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

pub type CliResult<T> = Result<T, CliError>;
