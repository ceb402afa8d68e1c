//! The end of a transcript without the rest: the journal is read backwards
//! in growing pieces until the caller has the items it needs.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use agentx_shared::conversation::Item;

use super::{Entry, LoadError};

/// First piece read from the end; each next one doubles, up to [`MAX_PIECE`].
const FIRST_PIECE: u64 = 64 << 10;
const MAX_PIECE: u64 = 8 << 20;

/// The last items of the first `committed` bytes of journal `path`, oldest
/// first: read from the end until `enough` says so of what was read (newest
/// first) or the journal's start is reached. A line that is not an item is
/// corruption, as when the whole journal is read.
pub fn read_tail(
    path: &Path,
    committed: u64,
    enough: impl Fn(&[Item]) -> bool,
) -> Result<Vec<Item>, LoadError> {
    let mut newest_first: Vec<Item> = Vec::new();
    if committed == 0 {
        return Ok(newest_first);
    }
    let mut file = File::open(path)?;
    // Bytes [end, committed) are parsed; `carry` is the unparsed start of
    // the line that ends at `end + carry.len()`.
    let mut end = committed;
    let mut carry: Vec<u8> = Vec::new();
    let mut piece = FIRST_PIECE;
    while end > 0 {
        let start = end.saturating_sub(piece);
        let mut data = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut data)?;
        data.extend_from_slice(&carry);
        // Unless at the journal's start, the first line may be cut: keep it
        // for the next piece.
        let whole_from = if start == 0 {
            0
        } else {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => data.len(),
            }
        };
        let mut at = start + whole_from as u64;
        let mut lines: Vec<(u64, &[u8])> = Vec::new();
        for line in data[whole_from..].split(|&b| b == b'\n') {
            if !line.is_empty() {
                lines.push((at, line));
            }
            at += line.len() as u64 + 1;
        }
        for (offset, line) in lines.into_iter().rev() {
            let entry: Entry = serde_json::from_slice(line).map_err(|e| LoadError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("the line at byte {offset}: {e}"),
            })?;
            newest_first.push(entry.item);
        }
        carry = data[..whole_from].to_vec();
        end = start;
        if enough(&newest_first) {
            break;
        }
        piece = (piece * 2).min(MAX_PIECE);
    }
    newest_first.reverse();
    Ok(newest_first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(items: &[Item]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let entry = Entry {
                at: i as i64,
                item: item.clone(),
            };
            serde_json::to_writer(&mut out, &entry).unwrap();
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn the_tail_is_the_end_of_the_whole_transcript_however_the_pieces_fall() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        // Lines from a few bytes to past the first piece, so pieces cut
        // lines everywhere.
        let items: Vec<Item> = (0..400)
            .map(|i| match i % 4 {
                0 => Item::User {
                    text: format!("question {i}"),
                },
                1 => Item::FunctionOutput {
                    call_id: format!("c{i}"),
                    output: "x".repeat((i * 997) % 90_000),
                    images: Vec::new(),
                },
                _ => Item::Assistant {
                    text: format!("answer {i} ").repeat(i % 7 + 1),
                },
            })
            .collect();
        let bytes = journal(&items);
        // A torn line past the committed length is not read.
        let mut on_disk = bytes.clone();
        on_disk.extend_from_slice(b"{\"at\":1,\"ty");
        std::fs::write(&path, &on_disk).unwrap();
        let users = |items: &[Item]| {
            items
                .iter()
                .filter(|i| matches!(i, Item::User { .. }))
                .count()
        };
        for want in [0usize, 1, 3, 40, 1000] {
            let tail = read_tail(&path, bytes.len() as u64, |got| users(got) >= want).unwrap();
            assert!(users(&tail) >= want.min(100), "want {want}");
            assert_eq!(tail[..], items[items.len() - tail.len()..], "want {want}");
            if want == 1000 {
                assert_eq!(tail, items);
            }
        }
        // Reads only what it needs: the last exchange of a long journal
        // costs one piece.
        let tail = read_tail(&path, bytes.len() as u64, |got| users(got) >= 1).unwrap();
        assert!(tail.len() < 10, "{}", tail.len());
    }

    #[test]
    fn a_bad_line_in_the_tail_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut bytes = journal(&[Item::User { text: "a".into() }]);
        bytes.extend_from_slice(b"not json\n");
        std::fs::write(&path, &bytes).unwrap();
        let err = read_tail(&path, bytes.len() as u64, |_| false).unwrap_err();
        assert!(err.to_string().contains("byte"), "{err}");
    }
}
