//! Walks the sessions tree in one place: `<sessions>/<folder-key>/<agent>/<id>.json`
//! (one-shots, under `<agent>/oneshots/<id>/`, are not part of the walk).
//!
//! A document is a conversation's when its stem is a conversation id (see
//! [`super::is_conversation_id`]): that leaves out a group's own files
//! (`current.json`, `shared.json`), temporaries and anything a user put there.
//! Unreadable directories are skipped: the walk is what can be seen.

use std::path::{Path, PathBuf};

/// The directories directly in `dir` (none when it cannot be read).
pub fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Every group directory (`<sessions>/<folder-key>/<agent>`).
pub fn groups(sessions: &Path) -> Vec<PathBuf> {
    subdirs(sessions)
        .iter()
        .flat_map(|folder| subdirs(folder))
        .collect()
}

/// The id of the conversation whose document is `path`, if it is one.
pub fn doc_id(path: &Path) -> Option<&str> {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".json"))
        .filter(|id| super::is_conversation_id(id))
}

/// The conversation documents in group directory `group`, sorted by path.
pub fn docs_in(group: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(group)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| doc_id(p).is_some())
        .collect();
    paths.sort();
    paths
}

/// Every conversation document under the sessions directory.
pub fn docs(sessions: &Path) -> Vec<PathBuf> {
    groups(sessions).iter().flat_map(|g| docs_in(g)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_conversations_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let sessions = tmp.path();
        let group = sessions.join("home-x-1a2b").join("agent");
        let other = sessions.join("srv-y-3c4d").join("other");
        let oneshot = group.join("oneshots").join("19a0b1c2d3e-0a1b2c");
        for dir in [&group, &other, &oneshot] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let a = group.join("19a0b1c2d3e-abcdef.json");
        let b = other.join("19a0b1c2d3f-000000.json");
        for path in [
            &a,
            &b,
            &group.join("19a0b1c2d3e-abcdef.jsonl"),
            &group.join("current.json"),
            &group.join("shared.json"),
            &group.join(".19a0b1c2d3e-abcdef.json.tmp-1-0"),
            &group.join("notes.json"),
            &oneshot.join("19a0b1c2d3e-0a1b2c.json"),
            &sessions.join("19a0b1c2d3e-111111.json"),
        ] {
            std::fs::write(path, "{}").unwrap();
        }
        let mut found = docs(sessions);
        found.sort();
        assert_eq!(found, vec![a.clone(), b]);
        assert_eq!(docs_in(&group), vec![a.clone()]);
        assert_eq!(doc_id(&a), Some("19a0b1c2d3e-abcdef"));
        let mut all_groups = groups(sessions);
        all_groups.sort();
        assert_eq!(all_groups, vec![group, other]);
    }
}
