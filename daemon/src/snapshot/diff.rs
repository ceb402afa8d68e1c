//! What changed between two states of a folder, file by file: a message's before and
//! after snapshots, or a snapshot and the folder now, as unified diffs (the `similar` crate).
//!
//! Binary files (a NUL byte, or not UTF-8) and files over [`MAX_TEXT`]
//! are one line each, never a diff.

use std::path::Path;

use similar::{ChangeTag, TextDiff};

use super::manifest::{Entry, Kind, Manifest};
use super::{RewindTo, Snap, SnapError, SnapshotStore, restore};

/// Files larger than this (either side) are not diffed.
pub const MAX_TEXT: u64 = 1024 * 1024;

/// What to compare.
#[derive(Debug, Clone)]
pub enum DiffOf {
    /// Message N of a conversation (1 = its last), before → after.
    Message { session: String, n: usize },
    /// A snapshot → the folder now.
    Since(RewindTo),
}

/// One path that differs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileDiff {
    /// The path, control bytes escaped.
    pub path: String,
    /// `added`, `deleted`, `modified`, `mode` (permissions only), `type`
    /// (a file became a link or a directory…).
    pub change: &'static str,
    pub added: u64,
    pub removed: u64,
    pub binary: bool,
    pub too_big: bool,
    /// The unified diff (empty for binary, too big or mode-only changes).
    pub unified: String,
}

/// The comparison: what it was between, and each path that differs.
#[derive(Debug, Default)]
pub struct Diff {
    pub from: String,
    pub to: String,
    pub files: Vec<FileDiff>,
}

/// Where a side's contents are read from.
enum Side<'a> {
    Stored,
    Disk(&'a Path),
}

impl SnapshotStore {
    /// The diff `of` asks for, in `folder`.
    pub fn diff(&mut self, folder: &Path, of: &DiffOf) -> Result<Diff, SnapError> {
        match of {
            DiffOf::Message { session, n } => {
                let messages = self.messages(folder, session)?;
                let count = messages.len();
                let Some((before, after)) = messages.into_iter().nth(n.saturating_sub(1)) else {
                    return Err(SnapError::NotFound(format!(
                        "no message {n} of this conversation with snapshots (it has {count}; 1 is the last)"
                    )));
                };
                let a = self.manifest_of(folder, &before)?;
                let said = before
                    .owners
                    .iter()
                    .find(|o| &o.session == session)
                    .map(|o| o.label.clone())
                    .unwrap_or_default();
                let from = format!("before message {n} ({said:?}, snapshot {})", before.id);
                let (b, to, side) = match after {
                    Some(after) => (
                        self.manifest_of(folder, &after)?,
                        format!("after it (snapshot {})", after.id),
                        Side::Stored,
                    ),
                    // Still running (or cut short): up to the folder now.
                    None => (
                        std::sync::Arc::new(self.current(folder)?),
                        "now".to_owned(),
                        Side::Disk(folder),
                    ),
                };
                let files = self.compare(&a, &b, side)?;
                Ok(Diff { from, to, files })
            }
            DiffOf::Since(to) => {
                let snap = self.rewind_target(folder, to)?;
                let a = self.manifest_of(folder, &snap)?;
                let now = self.current(folder)?;
                let files = self.compare(&a, &now, Side::Disk(folder))?;
                Ok(Diff {
                    from: label(&snap),
                    to: "now".to_owned(),
                    files,
                })
            }
        }
    }

    /// Every path whose content differs between `a` and `b`, in path order.
    fn compare(
        &self,
        a: &Manifest,
        b: &Manifest,
        side: Side<'_>,
    ) -> Result<Vec<FileDiff>, SnapError> {
        let mut out = Vec::new();
        let (mut i, mut j) = (a.iter().peekable(), b.iter().peekable());
        loop {
            let (old, new) = match (i.peek(), j.peek()) {
                (None, None) => break,
                (Some(x), Some(y)) if x.path == y.path => (i.next(), j.next()),
                (Some(x), Some(y)) if x.path < y.path => (i.next(), None),
                (Some(_), None) => (i.next(), None),
                _ => (None, j.next()),
            };
            if let Some(d) = self.file_diff(old, new, &side)? {
                out.push(d);
            }
        }
        Ok(out)
    }

    fn file_diff(
        &self,
        old: Option<&Entry>,
        new: Option<&Entry>,
        side: &Side<'_>,
    ) -> Result<Option<FileDiff>, SnapError> {
        let (old, new) = (counted(old), counted(new));
        let change = match (old, new) {
            (None, None) => return Ok(None),
            (Some(o), Some(n)) if o.same_content(n) => return Ok(None),
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            (Some(o), Some(n)) if o.kind != n.kind => "type",
            (Some(o), Some(n)) if o.kind == Kind::File && o.hash == n.hash => "mode",
            _ => "modified",
        };
        let path = restore::escape(&old.or(new).map(|e| e.path.clone()).unwrap_or_default());
        let mut d = FileDiff {
            path: path.clone(),
            change,
            ..FileDiff::default()
        };
        if change == "mode" {
            return Ok(Some(d));
        }
        if old.or(new).is_some_and(|e| e.size > MAX_TEXT) || new.is_some_and(|e| e.size > MAX_TEXT)
        {
            d.too_big = true;
            return Ok(Some(d));
        }
        let before = match old {
            Some(e) => self.content(e, &Side::Stored)?,
            None => Vec::new(),
        };
        let after = match new {
            Some(e) => self.content(e, side)?,
            None => Vec::new(),
        };
        let (Some(before), Some(after)) = (text(&before), text(&after)) else {
            d.binary = true;
            return Ok(Some(d));
        };
        let diff = TextDiff::from_lines(before, after);
        for change in diff.iter_all_changes() {
            match change.tag() {
                ChangeTag::Insert => d.added += 1,
                ChangeTag::Delete => d.removed += 1,
                ChangeTag::Equal => {}
            }
        }
        let (a, b) = match change {
            "added" => ("/dev/null".to_owned(), format!("b/{path}")),
            "deleted" => (format!("a/{path}"), "/dev/null".to_owned()),
            _ => (format!("a/{path}"), format!("b/{path}")),
        };
        d.unified = diff
            .unified_diff()
            .context_radius(3)
            .header(&a, &b)
            .to_string();
        Ok(Some(d))
    }

    /// A file's bytes (a link's target), from the store or from disk.
    fn content(&self, e: &Entry, side: &Side<'_>) -> Result<Vec<u8>, SnapError> {
        if e.kind == Kind::Symlink {
            return Ok(e.target.clone());
        }
        match side {
            Side::Stored => Ok(self.blobs.read(&e.hash)?),
            Side::Disk(folder) => {
                use std::os::unix::ffi::OsStrExt as _;
                let path = folder.join(std::ffi::OsStr::from_bytes(&e.path));
                // Changed or gone since the scan: what is there now.
                Ok(std::fs::read(path).unwrap_or_default())
            }
        }
    }
}

/// `e` when it has content to compare (a file or a symlink).
fn counted(e: Option<&Entry>) -> Option<&Entry> {
    e.filter(|e| matches!(e.kind, Kind::File | Kind::Symlink))
}

/// `bytes` as text, unless they look binary.
fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// How a snapshot is named in a diff's header.
fn label(s: &Snap) -> String {
    format!("snapshot {}", s.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_is_told_from_text() {
        assert_eq!(text(b"a\nb\n"), Some("a\nb\n"));
        assert_eq!(text(b"a\0b"), None);
        assert_eq!(text(&[0xff, 0xfe]), None);
    }
}
