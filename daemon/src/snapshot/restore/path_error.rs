//! Why one path of a restore could not be checked, put back, removed or
//! made durable: typed, so callers match on the reason, not on its text.

use nix::errno::Errno;

/// Why one path failed; its text is what the user is told about the path.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path could leave the folder (empty, `.` or `..` components):
    /// refused, nothing touched.
    #[error("refusing unsafe path {0:?}")]
    Unsafe(String),
    /// A parent directory is not there: nothing is left to remove, and
    /// nothing to sync (the step that removed it is synced itself).
    #[error("a parent directory is missing")]
    Missing,
    /// A parent directory is a symlink or a file now: never followed; left.
    #[error("a parent directory is now a symlink or a file; not following it")]
    ParentNotDir,
    /// A file over the size limit stands there now: never replaced; left.
    #[error("over 10 MB now: left alone")]
    OversizedNow,
    /// The snapshot did not capture this path: left alone.
    #[error("not captured: left alone")]
    NotCaptured,
    /// A non-empty directory stands where a file belongs: left alone.
    #[error("a directory is in the way ({0})")]
    InTheWay(#[source] Errno),
    /// What stands there is not what the plan believes (`0` says how):
    /// never written over; left alone.
    #[error("changed on disk since agentd last looked ({0}): left alone")]
    Changed(&'static str),
    /// Changed while the restore ran (`0` says how), seen right before it
    /// was to be replaced or removed: the user's version is kept (a
    /// conflict, listed).
    #[error("changed while the restore ran ({0}): your version is kept")]
    Moved(&'static str),
    /// A directory to remove holds files the restore does not remove
    /// (added since the plan was made, or conflicts it skipped): it stays
    /// with them, a conflict, listed (not counted as restored).
    #[error("holds files this undo does not remove (yours): the folder stays with them")]
    Filled,
    /// What stands there could not be read to compare it: left alone.
    #[error("cannot be checked ({0}): left alone")]
    Unchecked(#[source] Errno),
    /// The folder's own directory could not be opened: nothing done.
    #[error("the folder cannot be opened")]
    NoFolder,
    /// A system call on the path failed: report it (the rest goes on).
    #[error("{0}")]
    Sys(#[from] Errno),
    /// Reading the snapshot's content or writing the file failed: report it.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
