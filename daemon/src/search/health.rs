//! Keeping a damaged index from stopping agentd: opening with tantivy's own
//! checks and its panics caught, rebuilding, and the note `daemon status` shows.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Mutex;

use tantivy::schema::Schema;
use tantivy::{Index, IndexReader, ReloadPolicy};

use super::{LAYOUT, SearchError};

/// The last rebuild of a damaged index: when and why (for `daemon status`).
#[derive(Default)]
pub(super) struct RebuildNote(Mutex<String>);

impl RebuildNote {
    /// One line on the last time a damaged index was rebuilt, if it was.
    pub(super) fn get(&self) -> Option<String> {
        let note = self.0.lock().map(|n| n.clone()).unwrap_or_default();
        (!note.is_empty()).then_some(note)
    }

    /// Logs and keeps (for `daemon status`) one line saying the index was
    /// damaged and is rebuilt, and why.
    pub(super) fn record(&self, why: &str) {
        let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
        let line = format!(
            "rebuilt at {} (the index was damaged: {why})",
            agentx_shared::time::rfc3339(std::time::SystemTime::now())
        );
        tracing::warn!("search index damaged, rebuilding it from the conversations: {why}");
        if let Ok(mut note) = self.0.lock() {
            *note = line;
        }
    }
}

/// Runs `f`, turning a panic inside it (tantivy asserts on some damaged
/// files) into [`SearchError::Damaged`].
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T, SearchError>) -> Result<T, SearchError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(SearchError::Damaged(what))
    })
}

/// An opened index and its reader.
pub(super) struct Live {
    pub index: Index,
    pub reader: IndexReader,
}

impl Live {
    fn of(index: Index) -> Result<Self, SearchError> {
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self { index, reader })
    }
}

/// The index in `dir` when it opens, has `schema` and every file passes
/// its checksum; else why not (None: missing or of another layout, which
/// is no damage).
fn open_existing(dir: &Path, schema: &Schema) -> Result<Live, Option<String>> {
    let layout = std::fs::read(dir.join("LAYOUT")).map_err(|_| None)?;
    let layout = String::from_utf8_lossy(&layout);
    if layout.trim() != LAYOUT {
        // An older layout is no damage; bytes that are no layout are.
        let older = layout.starts_with("agentx-search-")
            && layout
                .trim()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        return Err((!older).then(|| "its LAYOUT file is garbled".to_owned()));
    }
    guarded(|| {
        let index = Index::open_in_dir(dir)?;
        if index.schema() != *schema {
            return Err(SearchError::Damaged("of another schema".into()));
        }
        let damaged = index.validate_checksum()?;
        if let Some(file) = damaged.iter().next() {
            return Err(SearchError::Damaged(format!(
                "{} damaged file(s), {} among them",
                damaged.len(),
                file.display()
            )));
        }
        let live = Live::of(index)?;
        // Opening every segment reads its footers.
        live.reader
            .searcher()
            .search(&tantivy::query::AllQuery, &tantivy::collector::Count)?;
        Ok(live)
    })
    .map_err(|e| Some(e.to_string()))
}

/// The index in `dir`, or a new empty one when it is missing, outdated or
/// damaged (then also why it was replaced, when there was one to replace).
pub(super) fn open_or_create(
    dir: &Path,
    schema: &Schema,
) -> Result<(Live, Option<String>), SearchError> {
    let why = match open_existing(dir, schema) {
        Ok(live) => return Ok((live, None)),
        Err(why) => why,
    };
    if why.is_none() && dir.exists() {
        tracing::info!(dir = %dir.display(), "search index of another layout: rebuilding it");
    }
    Ok((create(dir, schema)?, why))
}

/// Replaces whatever is in `dir` with a new empty index.
pub(super) fn create(dir: &Path, schema: &Schema) -> Result<Live, SearchError> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    agentx_shared::profile::create_private_dir(dir)?;
    let index = guarded(|| Ok(Index::create_in_dir(dir, schema.clone())?))?;
    std::fs::write(dir.join("LAYOUT"), LAYOUT)?;
    Live::of(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note is empty until its index is rebuilt, then one line saying
    /// when and why (the reason's whitespace folded); another stays empty.
    #[test]
    fn a_rebuild_note_says_when_and_why_and_is_its_own() {
        let damaged = RebuildNote::default();
        let other = RebuildNote::default();
        assert_eq!(damaged.get(), None);
        damaged.record("2 damaged file(s),\n   meta.json among them");
        let note = damaged.get().unwrap_or_default();
        assert!(note.starts_with("rebuilt at 20"), "{note:?}");
        assert!(
            note.ends_with("(the index was damaged: 2 damaged file(s), meta.json among them)"),
            "{note:?}"
        );
        assert_eq!(other.get(), None);
    }
}
