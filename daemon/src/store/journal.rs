//! The one reader of a conversation's journal: the committed lines of a byte
//! range, each parsed as the caller's record type, with where it starts and
//! ends — read forwards, or backwards from the end until the caller has enough.
//!
//! One policy for a committed line that does not parse: it is damage,
//! reported with the journal, the line's number and byte offset and why —
//! never skipped, never read past. Loading a conversation fails with it (the
//! store then treats the conversation as damaged), a push or a pull stops
//! with it; views that only show or index ([`read_until_bad`]: search, an
//! export's times) keep the lines before it and say what stopped them.

use std::io::{self, BufRead as _, BufReader, Read, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// One committed line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<T> {
    pub value: T,
    /// Byte offsets in the journal: the line's first byte, and the byte
    /// after its newline.
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{}: {} is not a journal record: {reason}", path.display(), place(*line, *offset))]
    Bad {
        path: PathBuf,
        /// Counted from the start of the range read, from 1; `None` when
        /// read backwards (only the offset is known).
        line: Option<u64>,
        offset: u64,
        reason: String,
    },
}

/// Where a bad line is: its number when known, and its byte offset.
pub fn place(line: Option<u64>, offset: u64) -> String {
    match line {
        Some(line) => format!("line {line} (at byte {offset})"),
        None => format!("the line at byte {offset}"),
    }
}

/// First piece [`read_back`] reads from the end; each next one doubles, up
/// to [`MAX_PIECE`].
const FIRST_PIECE: u64 = 64 << 10;
const MAX_PIECE: u64 = 8 << 20;

/// The last records of the first `committed` bytes of `path`, oldest first:
/// read backwards in growing pieces until `enough` says so of what was read
/// (newest first) or the journal's start is reached. A line that does not
/// parse is damage, as when reading forwards.
pub fn read_back<T: DeserializeOwned>(
    path: &Path,
    committed: u64,
    mut enough: impl FnMut(&[Record<T>]) -> bool,
) -> Result<Vec<Record<T>>, JournalError> {
    let mut newest_first: Vec<Record<T>> = Vec::new();
    if committed == 0 {
        return Ok(newest_first);
    }
    let mut file = std::fs::File::open(path)?;
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
            data.iter()
                .position(|&b| b == b'\n')
                .map_or(data.len(), |i| i + 1)
        };
        let from = start + whole_from as u64;
        let to = start + data.len() as u64;
        let (records, bad) = parse_until_bad::<T>(&data[whole_from..], (from, to), path);
        if let Some(bad) = bad {
            return Err(match bad {
                JournalError::Bad {
                    path,
                    offset,
                    reason,
                    ..
                } => JournalError::Bad {
                    path,
                    line: None,
                    offset,
                    reason,
                },
                io => io,
            });
        }
        newest_first.extend(records.into_iter().rev());
        carry = data[..whole_from].to_vec();
        end = start;
        // At the start, everything was read: not asked.
        if end == 0 || enough(&newest_first) {
            break;
        }
        piece = (piece * 2).min(MAX_PIECE);
    }
    newest_first.reverse();
    Ok(newest_first)
}

/// The lines of `path` from byte `from` (where a line starts) to `to`
/// (where the committed part ends), each parsed as `T`.
pub fn read<T: DeserializeOwned>(
    path: &Path,
    from: u64,
    to: u64,
) -> Result<Vec<Record<T>>, JournalError> {
    if to <= from {
        return Ok(Vec::new());
    }
    let mut file = std::fs::File::open(path)?;
    if from > 0 {
        file.seek(SeekFrom::Start(from))?;
    }
    parse(file, (from, to), path)
}

/// [`read`] over journal contents given as a reader positioned at `from`;
/// `path` only names the journal in errors.
pub fn parse<T: DeserializeOwned>(
    contents: impl Read,
    (from, to): (u64, u64),
    path: &Path,
) -> Result<Vec<Record<T>>, JournalError> {
    let (records, bad) = parse_until_bad(contents, (from, to), path);
    match bad {
        Some(e) => Err(e),
        None => Ok(records),
    }
}

/// [`read`], keeping the records before the first line that does not
/// parse, and that line's error.
pub fn read_until_bad<T: DeserializeOwned>(
    path: &Path,
    from: u64,
    to: u64,
) -> (Vec<Record<T>>, Option<JournalError>) {
    if to <= from {
        return (Vec::new(), None);
    }
    let opened = std::fs::File::open(path).and_then(|mut file| {
        if from > 0 {
            file.seek(SeekFrom::Start(from))?;
        }
        Ok(file)
    });
    match opened {
        Ok(file) => parse_until_bad(file, (from, to), path),
        Err(e) => (Vec::new(), Some(e.into())),
    }
}

fn parse_until_bad<T: DeserializeOwned>(
    contents: impl Read,
    range: (u64, u64),
    path: &Path,
) -> (Vec<Record<T>>, Option<JournalError>) {
    let mut records = Vec::new();
    let bad = visit(contents, range, path, |r| records.push(r));
    (records, bad)
}

/// How many records the first `committed` bytes of `path` hold, each
/// parsed as `T` and dropped (memory for one line, whatever the length).
pub fn count<T: DeserializeOwned>(path: &Path, committed: u64) -> Result<u64, JournalError> {
    let mut n = 0;
    match visit::<T>(std::fs::File::open(path)?, (0, committed), path, |_| n += 1) {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// Each committed line of `contents` (positioned at `from`) parsed as `T`
/// and handed to `each`, up to `to` or the first line that does not
/// parse, whose error is returned.
fn visit<T: DeserializeOwned>(
    contents: impl Read,
    (from, to): (u64, u64),
    path: &Path,
    mut each: impl FnMut(Record<T>),
) -> Option<JournalError> {
    let mut reader = BufReader::new(contents.take(to.saturating_sub(from)));
    let mut at = from;
    let mut buf = Vec::new();
    for line in 1u64.. {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(n) => n as u64,
            Err(e) => return Some(e.into()),
        };
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        match serde_json::from_slice::<T>(text) {
            Ok(value) => each(Record {
                value,
                start: at,
                end: at + n,
            }),
            Err(e) => {
                return Some(JournalError::Bad {
                    path: path.to_path_buf(),
                    line: Some(line),
                    offset: at,
                    reason: e.to_string(),
                });
            }
        }
        at += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct At {
        at: i64,
    }

    #[test]
    fn records_come_with_their_offsets_from_any_line_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "{\"at\":1}\n{\"at\":22}\n{\"at\":3}\n").unwrap();
        let all: Vec<Record<At>> = read(&path, 0, 28).unwrap();
        assert_eq!(
            all.iter()
                .map(|r| (r.value.at, r.start, r.end))
                .collect::<Vec<_>>(),
            [(1, 0, 9), (22, 9, 19), (3, 19, 28)]
        );
        let tail: Vec<Record<At>> = read(&path, 9, 19).unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].value.at, 22);
        // Past the committed end is not read.
        assert_eq!(read::<At>(&path, 0, 9).unwrap().len(), 1);
    }

    #[test]
    fn a_bad_line_is_damage_named_by_line_and_offset_and_nothing_after_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "{\"at\":1}\nnot json\n{\"at\":3}\n").unwrap();
        let err = read::<At>(&path, 0, 27).unwrap_err().to_string();
        assert!(err.contains("line 2 (at byte 9)"), "{err}");
        let (kept, bad) = read_until_bad::<At>(&path, 0, 27);
        assert_eq!(kept.len(), 1);
        assert!(bad.is_some());
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Padded {
        at: i64,
        pad: String,
    }

    #[test]
    fn read_back_gives_the_end_of_the_whole_journal_however_the_pieces_fall() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        // Lines from a few bytes to past the first piece, so pieces cut
        // lines everywhere.
        let mut bytes = Vec::new();
        for at in 0..400i64 {
            let pad =
                "x".repeat(usize::try_from(at * 997 % 90_000).unwrap() * usize::from(at % 4 == 1));
            serde_json::to_writer(&mut bytes, &Padded { at, pad }).unwrap();
            bytes.push(b'\n');
        }
        let committed = bytes.len() as u64;
        // A torn line past the committed length is not read.
        let mut on_disk = bytes.clone();
        on_disk.extend_from_slice(b"{\"at\":1,\"pa");
        std::fs::write(&path, &on_disk).unwrap();
        let all: Vec<Record<Padded>> = read(&path, 0, committed).unwrap();
        let marked = |got: &[Record<Padded>]| got.iter().filter(|r| r.value.at % 4 == 0).count();
        for want in [0usize, 1, 3, 40, 1000] {
            let tail = read_back(&path, committed, |got| marked(got) >= want).unwrap();
            assert!(marked(&tail) >= want.min(100), "want {want}");
            assert_eq!(tail[..], all[all.len() - tail.len()..], "want {want}");
            if want == 1000 {
                assert_eq!(tail, all);
            }
        }
        // Reads only what it needs: the last few lines of a long journal
        // cost one piece.
        let tail = read_back(&path, committed, |got| marked(got) >= 1).unwrap();
        assert!(tail.len() < 10, "{}", tail.len());
    }

    #[test]
    fn a_bad_line_read_backwards_is_damage_named_by_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "{\"at\":1}\nnot json\n{\"at\":3}\n").unwrap();
        let err = read_back::<At>(&path, 27, |_| false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the line at byte 9"), "{err}");
    }
}
