//! A snapshot's manifest: every path of the folder with its kind, mode, stat
//! fields and content hash or link target; its zstd-compressed file format.

use std::io;

mod chunks;

pub use chunks::{Manifest, aligned};

pub type Hash = [u8; 32];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Symlink,
    Dir,
    /// Present but not captured (excluded, over 10 MB, unreadable, changing
    /// while read): `target` holds the reason. A restore never touches it
    /// or anything below it.
    Skipped,
}

/// Reasons a path is [`Kind::Skipped`]. The quiet ones are left alone
/// without a word (that is their documented rule); the others are reported.
pub mod why {
    pub const EXCLUDED: &[u8] = b"excluded";
    /// Any other file type (what older snapshots say of every special file).
    pub const SPECIAL: &[u8] = b"not a file, directory or symlink";
    pub const FIFO: &[u8] = b"a named pipe (FIFO)";
    pub const SOCKET: &[u8] = b"a socket";
    pub const DEVICE: &[u8] = b"a device file";
    pub const OVERSIZED: &[u8] = b"over 10 MB";
    pub const UNREADABLE: &[u8] = b"unreadable";
    pub const CHANGING: &[u8] = b"changing while it was read";

    /// Not counted among a snapshot's skipped files (excluded directories,
    /// and FIFOs, sockets and devices: they hold no content to capture).
    pub fn quiet(reason: &[u8]) -> bool {
        reason == EXCLUDED || special(reason)
    }

    /// A FIFO, socket, device or other special file.
    pub fn special(reason: &[u8]) -> bool {
        [SPECIAL, FIFO, SOCKET, DEVICE].contains(&reason)
    }

    /// Left alone by a restore without being listed: only what is excluded
    /// by rule. A special file a restore cannot make again or remove is
    /// listed as left alone, with why.
    pub fn unlisted(reason: &[u8]) -> bool {
        reason == EXCLUDED
    }

    /// Why a special file of type `fmt` (`st_mode & S_IFMT`) is not captured.
    pub fn special_kind(fmt: u32) -> &'static [u8] {
        match fmt {
            0o010000 => FIFO,
            0o140000 => SOCKET,
            0o020000 | 0o060000 => DEVICE,
            _ => SPECIAL,
        }
    }
}

/// One path of a snapshot. Paths are relative, `/`-separated, raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    /// Modified too close to the scan to trust the stat cache next time.
    pub racy: bool,
    /// Content hash (files).
    pub hash: Hash,
    /// Link target (symlinks), or why the path is [`Kind::Skipped`].
    pub target: Vec<u8>,
    /// Owner and group (`u32::MAX` when unknown: older manifests).
    pub uid: u32,
    pub gid: u32,
    /// Hard-link count at scan time (files sharing `ino` with `nlink > 1`
    /// are one inode, restored as links of each other).
    pub nlink: u32,
}

impl Entry {
    /// Same content as far as a restore is concerned: kind, permission
    /// bits, and content hash or link target.
    pub fn same_content(&self, other: &Entry) -> bool {
        self.kind == other.kind
            && match self.kind {
                Kind::File => {
                    self.hash == other.hash
                        && self.mode & 0o7777 == other.mode & 0o7777
                        && self.same_owner(other)
                }
                Kind::Symlink | Kind::Skipped => self.target == other.target,
                Kind::Dir => self.mode == other.mode,
            }
    }

    /// Owner and group match (or one side does not know them).
    pub fn same_owner(&self, other: &Entry) -> bool {
        let unknown = |e: &Entry| e.uid == u32::MAX || other.uid == u32::MAX;
        unknown(self) || (self.uid == other.uid && self.gid == other.gid)
    }

    /// Not captured, for a reason that is reported.
    pub fn loud_skip(&self) -> bool {
        self.kind == Kind::Skipped && !why::quiet(&self.target)
    }
}

/// Entry list without owners and link counts (read only).
const MAGIC_V1: &[u8; 4] = b"AXM1";
const MAGIC: &[u8; 4] = b"AXM2";
/// File header of a full manifest.
const FULL: &[u8; 4] = b"AXF1";
/// File header of a delta manifest (followed by its base id).
const DELTA: &[u8; 4] = b"AXD1";

/// A manifest file: the whole tree, or the changes against a base manifest
/// (so 50 snapshots of a large tree do not store 50 full path lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Full(Manifest),
    Delta {
        base: String,
        /// New or changed entries (any field).
        upserts: Vec<Entry>,
        removed: Vec<Vec<u8>>,
    },
}

impl Stored {
    /// The hashes this file itself lists (what keeps blobs alive).
    pub fn own_hashes(&self) -> std::collections::HashSet<Hash> {
        match self {
            Stored::Full(m) => m.file_hashes(),
            Stored::Delta { upserts, .. } => upserts
                .iter()
                .filter(|e| e.kind == Kind::File)
                .map(|e| e.hash)
                .collect(),
        }
    }

    /// The file of a full manifest, without copying it into a [`Stored`].
    pub fn encode_full(m: &Manifest) -> io::Result<Vec<u8>> {
        let mut out = FULL.to_vec();
        out.extend_from_slice(&m.encode()?);
        Ok(out)
    }

    pub fn encode(&self) -> io::Result<Vec<u8>> {
        match self {
            Stored::Full(m) => {
                let mut out = FULL.to_vec();
                out.extend_from_slice(&m.encode()?);
                Ok(out)
            }
            Stored::Delta {
                base,
                upserts,
                removed,
            } => {
                let mut out = DELTA.to_vec();
                out.extend_from_slice(&(base.len() as u32).to_le_bytes());
                out.extend_from_slice(base.as_bytes());
                let mut raw = encode_entries(upserts.len(), upserts.iter())?;
                raw.extend_from_slice(&(removed.len() as u64).to_le_bytes());
                for p in removed {
                    raw.extend_from_slice(&(p.len() as u32).to_le_bytes());
                    raw.extend_from_slice(p);
                }
                out.extend_from_slice(&zstd::bulk::compress(&raw, 3)?);
                Ok(out)
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> io::Result<Self> {
        if bytes.len() < 4 {
            return Err(bad("truncated manifest"));
        }
        match &bytes[..4] {
            h if h == FULL => Ok(Stored::Full(Manifest::decode(&bytes[4..])?)),
            h if h == DELTA => {
                let mut r = Reader { buf: bytes, pos: 4 };
                let len = r.u32()? as usize;
                let base = String::from_utf8(r.take(len)?.to_vec())
                    .ok()
                    .filter(|b| plain_id(b))
                    .ok_or_else(|| bad("bad base id"))?;
                let raw = decompress(&bytes[r.pos..])?;
                let mut r = Reader { buf: &raw, pos: 0 };
                let upserts = decode_entries(&mut r)?;
                let n = r.u64()?;
                let mut removed = Vec::new();
                for _ in 0..n {
                    let len = r.u32()? as usize;
                    removed.push(r.take(len)?.to_vec());
                }
                Ok(Stored::Delta {
                    base,
                    upserts,
                    removed,
                })
            }
            _ => Err(bad("not a manifest")),
        }
    }

    /// The base id recorded in a file's header (its first bytes are
    /// enough), read without decompressing.
    pub fn peek_base(bytes: &[u8]) -> io::Result<Option<String>> {
        match bytes.get(..4) {
            Some(h) if h == FULL => Ok(None),
            Some(h) if h == DELTA => {
                let mut r = Reader { buf: bytes, pos: 4 };
                let len = r.u32()? as usize;
                String::from_utf8(r.take(len)?.to_vec())
                    .ok()
                    .filter(|b| plain_id(b))
                    .map(Some)
                    .ok_or_else(|| bad("bad base id"))
            }
            _ => Err(bad("not a manifest")),
        }
    }
}

impl Manifest {
    /// The distinct content hashes of its files.
    pub fn file_hashes(&self) -> std::collections::HashSet<Hash> {
        self.iter()
            .filter(|e| e.kind == Kind::File)
            .map(|e| e.hash)
            .collect()
    }

    pub fn files(&self) -> u64 {
        self.iter().filter(|e| e.kind == Kind::File).count() as u64
    }

    /// The files' total size; a damaged manifest's sizes cannot overflow
    /// it (saturates at `u64::MAX`).
    pub fn bytes(&self) -> u64 {
        self.iter()
            .filter(|e| e.kind == Kind::File)
            .fold(0u64, |total, e| total.saturating_add(e.size))
    }

    /// Whether two manifests describe the same tree with the same stat data
    /// (then the old one can stand for the new snapshot).
    pub fn same_as(&self, other: &Manifest) -> bool {
        self == other
    }

    /// Paths present but not captured, for a reported reason, and a
    /// summary of the reasons ("2 unreadable, 1 over 10 MB").
    pub fn skipped(&self) -> (u64, String) {
        let mut counts: Vec<(&[u8], u64)> = Vec::new();
        for e in self.iter().filter(|e| e.loud_skip()) {
            match counts.iter_mut().find(|(r, _)| *r == e.target.as_slice()) {
                Some((_, n)) => *n += 1,
                None => counts.push((&e.target, 1)),
            }
        }
        let total = counts.iter().map(|(_, n)| n).sum();
        let why = counts
            .iter()
            .map(|(r, n)| format!("{n} {}", String::from_utf8_lossy(r)))
            .collect::<Vec<_>>()
            .join(", ");
        (total, why)
    }

    /// The changes that turn `base` into `self` (one walk over both sorted
    /// lists: no maps, no copies of what did not change).
    pub fn delta_from(&self, base: &Manifest) -> (Vec<Entry>, Vec<Vec<u8>>) {
        let (mut upserts, mut removed) = (Vec::new(), Vec::new());
        for (path, [old, new]) in aligned([base, self]) {
            match (old, new) {
                (Some(o), Some(n)) if o == n => {}
                (_, Some(n)) => upserts.push(n.clone()),
                (Some(_), None) => removed.push(path.to_vec()),
                (None, None) => {}
            }
        }
        (upserts, removed)
    }

    /// `self` with a delta applied: the chunks it does not touch are
    /// shared (deltas written by older versions may be out of order).
    pub fn apply(&self, upserts: &[Entry], removed: &[Vec<u8>]) -> Manifest {
        let mut ups: Vec<Entry> = upserts.to_vec();
        ups.sort_by(|a, b| a.path.cmp(&b.path));
        ups.dedup_by(|a, b| a.path == b.path);
        let mut keep = vec![true; self.len()];
        let gone = removed.iter().map(Vec::as_slice);
        for p in gone.chain(ups.iter().map(|u| u.path.as_slice())) {
            if let Ok(i) = self.search(p) {
                keep[i] = false;
            }
        }
        self.merged(&keep, ups.clone()).unwrap_or_else(|| {
            // Only an out-of-order base gets here: rebuild it in order.
            let mut all: Vec<Entry> = self
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(e, _)| e.clone())
                .chain(ups)
                .collect();
            all.sort_by(|a, b| a.path.cmp(&b.path));
            all.dedup_by(|a, b| a.path == b.path);
            Manifest::from_entries(all)
        })
    }

    pub fn encode(&self) -> io::Result<Vec<u8>> {
        zstd::bulk::compress(&self.encode_raw()?, 3)
    }

    fn encode_raw(&self) -> io::Result<Vec<u8>> {
        encode_entries(self.len(), self.iter())
    }

    pub fn decode(bytes: &[u8]) -> io::Result<Self> {
        let raw = decompress(bytes)?;
        let mut r = Reader { buf: &raw, pos: 0 };
        let mut entries = decode_entries(&mut r)?;
        if !entries.windows(2).all(|w| w[0].path < w[1].path) {
            // Not written by agentd: put in order, one entry per path.
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            entries.dedup_by(|a, b| a.path == b.path);
        }
        Ok(Self::from_entries(entries))
    }
}

/// The raw (uncompressed) form of `count` entries.
fn encode_entries<'a>(
    count: usize,
    entries: impl Iterator<Item = &'a Entry>,
) -> io::Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(count * 96 + 8);
    raw.extend_from_slice(MAGIC);
    raw.extend_from_slice(&(count as u64).to_le_bytes());
    for e in entries {
        let len = u32::try_from(e.path.len()).map_err(|_| io::Error::other("path too long"))?;
        raw.extend_from_slice(&len.to_le_bytes());
        raw.extend_from_slice(&e.path);
        raw.push(match e.kind {
            Kind::File => 0,
            Kind::Symlink => 1,
            Kind::Dir => 2,
            Kind::Skipped => 3,
        });
        raw.extend_from_slice(&e.mode.to_le_bytes());
        raw.extend_from_slice(&e.size.to_le_bytes());
        raw.extend_from_slice(&e.mtime_ns.to_le_bytes());
        raw.extend_from_slice(&e.ctime_ns.to_le_bytes());
        raw.extend_from_slice(&e.ino.to_le_bytes());
        raw.push(u8::from(e.racy));
        raw.extend_from_slice(&e.uid.to_le_bytes());
        raw.extend_from_slice(&e.gid.to_le_bytes());
        raw.extend_from_slice(&e.nlink.to_le_bytes());
        match e.kind {
            Kind::File => raw.extend_from_slice(&e.hash),
            Kind::Symlink | Kind::Skipped => {
                let len = u32::try_from(e.target.len())
                    .map_err(|_| io::Error::other("target too long"))?;
                raw.extend_from_slice(&len.to_le_bytes());
                raw.extend_from_slice(&e.target);
            }
            Kind::Dir => {}
        }
    }
    Ok(raw)
}

fn decode_entries(r: &mut Reader<'_>) -> io::Result<Vec<Entry>> {
    let v2 = match r.take(4)? {
        m if m == MAGIC => true,
        m if m == MAGIC_V1 => false,
        _ => return Err(bad("not a manifest")),
    };
    let count = r.u64()?;
    // The count is untrusted: reserve no more entries than the bytes
    // left could hold (a directory entry takes at least this many).
    const MIN_ENTRY: usize = 4 + 1 + 4 + 8 * 4 + 1;
    let fits = r.buf.len().saturating_sub(r.pos) / MIN_ENTRY;
    let mut entries = Vec::with_capacity(usize::try_from(count).unwrap_or(usize::MAX).min(fits));
    for _ in 0..count {
        let len = r.u32()? as usize;
        let path = r.take(len)?.to_vec();
        let kind = match r.u8()? {
            0 => Kind::File,
            1 => Kind::Symlink,
            2 => Kind::Dir,
            3 => Kind::Skipped,
            _ => return Err(bad("unknown entry kind")),
        };
        let mode = r.u32()?;
        let size = r.u64()?;
        let mtime_ns = r.u64()? as i64;
        let ctime_ns = r.u64()? as i64;
        let ino = r.u64()?;
        let racy = r.u8()? != 0;
        let (uid, gid, nlink) = if v2 {
            (r.u32()?, r.u32()?, r.u32()?)
        } else {
            (u32::MAX, u32::MAX, 1)
        };
        let mut hash = [0u8; 32];
        let mut target = Vec::new();
        match kind {
            Kind::File => hash.copy_from_slice(r.take(32)?),
            Kind::Symlink | Kind::Skipped => {
                let len = r.u32()? as usize;
                target = r.take(len)?.to_vec();
            }
            Kind::Dir => {}
        }
        entries.push(Entry {
            path,
            kind,
            mode,
            size,
            mtime_ns,
            ctime_ns,
            ino,
            racy,
            hash,
            target,
            uid,
            gid,
            nlink,
        });
    }
    Ok(entries)
}

/// Whether a snapshot or manifest id read from disk can name a file in
/// its folder's directory (ids are made by agentd: hex digits and `-`).
pub fn plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Largest decompressed manifest accepted: millions of entries, far past
/// any folder agentd snapshots. A manifest file is untrusted (a few KiB of
/// zstd can claim gigabytes); past this it is an error, not an allocation.
pub const MAX_RAW: u64 = 256 << 20;

/// The zstd stream `bytes`, decompressed, up to [`MAX_RAW`].
fn decompress(bytes: &[u8]) -> io::Result<Vec<u8>> {
    decompress_capped(bytes, MAX_RAW)
}

fn decompress_capped(bytes: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    read_capped(zstd::stream::read::Decoder::new(bytes)?, limit)
}

/// Reads `decoded` to its end, but never more than one byte past `limit`.
fn read_capped(decoded: impl io::Read, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut raw = Vec::new();
    decoded
        .take(limit.saturating_add(1))
        .read_to_end(&mut raw)?;
    if raw.len() as u64 > limit {
        return Err(bad("manifest decompresses past its size limit"));
    }
    Ok(raw)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| bad("truncated manifest"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` zero bytes as one zstd stream, compressed as they are produced.
    fn zeros_compressed(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = zstd::stream::write::Encoder::new(&mut out, 3).unwrap();
        std::io::copy(&mut std::io::Read::take(std::io::repeat(0), n), &mut enc).unwrap();
        enc.finish().unwrap();
        out
    }

    /// Found by the fuzzer once it had valid manifests to start from: a
    /// damaged manifest's file sizes overflowed the total (a panic in a
    /// debug build, a wrapped number in a release one).
    #[test]
    fn the_total_size_of_huge_files_saturates() {
        let file = |path: &str| Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::File,
            mode: 0o644,
            size: u64::MAX / 2 + 1,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 1,
            racy: false,
            hash: [1; 32],
            target: Vec::new(),
            uid: 0,
            gid: 0,
            nlink: 1,
        };
        let m = Manifest::from_entries(vec![file("a"), file("b")]);
        assert_eq!(m.bytes(), u64::MAX);
        assert_eq!(m.files(), 2);
    }

    #[test]
    fn a_decompression_bomb_is_an_error_not_an_allocation() {
        // A few KiB that claim more than MAX_RAW: a full manifest, and the
        // same bytes as a delta's body.
        let bomb = zeros_compressed(MAX_RAW + (1 << 20));
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let err = Manifest::decode(&bomb).unwrap_err();
        assert!(err.to_string().contains("size limit"), "{err}");
        let mut delta = DELTA.to_vec();
        delta.extend_from_slice(&1u32.to_le_bytes());
        delta.extend_from_slice(b"a");
        delta.extend_from_slice(&bomb);
        let err = Stored::decode(&delta).unwrap_err();
        assert!(err.to_string().contains("size limit"), "{err}");
        // What is read stops one byte past the limit: a stream of 1 GiB
        // is never read (nor held) whole.
        struct Counted<R>(R, std::rc::Rc<std::cell::Cell<u64>>);
        impl<R: std::io::Read> std::io::Read for Counted<R> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1.set(self.1.get() + n as u64);
                Ok(n)
            }
        }
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let endless = std::io::Read::take(std::io::repeat(0), 1 << 30);
        assert!(read_capped(Counted(endless, read.clone()), 4096).is_err());
        assert_eq!(read.get(), 4097);
        // Up to the limit, decompression is whole.
        let small = zeros_compressed(1000);
        assert_eq!(decompress_capped(&small, 1000).unwrap().len(), 1000);
        assert!(decompress_capped(&small, 999).is_err());
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut entries = vec![
            Entry {
                path: b"b/file".to_vec(),
                kind: Kind::File,
                mode: 0o755,
                size: 3,
                mtime_ns: -5,
                ctime_ns: 7,
                ino: 9,
                racy: true,
                hash: [7; 32],
                target: vec![],
                uid: 1,
                gid: 2,
                nlink: 1,
            },
            Entry {
                path: b"a".to_vec(),
                kind: Kind::Symlink,
                mode: 0o777,
                size: 0,
                mtime_ns: 1,
                ctime_ns: 2,
                ino: 3,
                racy: false,
                hash: [0; 32],
                target: b"../x".to_vec(),
                uid: 0,
                gid: 0,
                nlink: 1,
            },
            Entry {
                path: b"b".to_vec(),
                kind: Kind::Dir,
                mode: 0o700,
                size: 0,
                mtime_ns: 1,
                ctime_ns: 2,
                ino: 4,
                racy: false,
                hash: [0; 32],
                target: vec![],
                uid: 3,
                gid: 4,
                nlink: 2,
            },
            Entry {
                path: b"big".to_vec(),
                kind: Kind::Skipped,
                mode: 0o644,
                size: 0,
                mtime_ns: 1,
                ctime_ns: 2,
                ino: 5,
                racy: false,
                hash: [0; 32],
                target: why::OVERSIZED.to_vec(),
                uid: 0,
                gid: 0,
                nlink: 1,
            },
        ];
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let m = Manifest::from_entries(entries);
        let back = Manifest::decode(&m.encode().unwrap()).unwrap();
        assert_eq!(back, m);
        assert!(Manifest::decode(b"garbage").is_err());

        // A delta from an older tree rebuilds exactly this one.
        let mut older = m.to_vec();
        older.remove(0);
        older[0].mtime_ns = 99;
        older.push(Entry {
            path: b"zz".to_vec(),
            ..m.to_vec()[0].clone()
        });
        older.sort_by(|a, b| a.path.cmp(&b.path));
        let older = Manifest::from_entries(older);
        let (upserts, removed) = m.delta_from(&older);
        let stored = Stored::Delta {
            base: "b1".into(),
            upserts,
            removed,
        };
        let back = Stored::decode(&stored.encode().unwrap()).unwrap();
        assert_eq!(back, stored);
        let Stored::Delta {
            upserts, removed, ..
        } = back
        else {
            panic!()
        };
        assert_eq!(older.apply(&upserts, &removed), m);
        assert_eq!(
            Stored::peek_base(&stored.encode().unwrap())
                .unwrap()
                .as_deref(),
            Some("b1")
        );
        let full = Stored::Full(m.clone());
        assert_eq!(Stored::decode(&full.encode().unwrap()).unwrap(), full);
    }
}
