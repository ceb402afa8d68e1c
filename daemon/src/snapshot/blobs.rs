//! The content store: zstd-compressed blobs keyed by BLAKE3 hash, appended
//! to pack files (one per snapshot run) with a sidecar index, reference
//! counted by the manifests that use them and compacted when they die.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::manifest::Hash;
use crate::durable;

/// Where a blob lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub pack: u64,
    pub offset: u64,
    pub len: u32,
    pub raw: u64,
}

const IDX_RECORD: usize = 32 + 8 + 4 + 8;

#[derive(Debug, Default, Clone, Copy)]
struct PackStat {
    bytes: u64,
    dead: u64,
}

/// Hashes a BLAKE3 hash by its first 8 bytes: they are uniformly random
/// already, and SipHash over 100,000 keys per snapshot shows in profiles.
#[derive(Default)]
pub struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
    }
    fn write_usize(&mut self, _len: usize) {}
}

/// A map keyed by content hash.
pub type HashKeyed<V> = HashMap<Hash, V, BuildHasherDefault<PrefixHasher>>;

/// Where every stored blob is: shared with scans that run off the store's
/// thread (they only ask whether a blob is stored; the store's thread is
/// the only writer, and holds off collecting garbage while they run).
#[derive(Clone, Default)]
pub struct Known(Arc<RwLock<HashKeyed<Loc>>>);

impl Known {
    pub fn contains(&self, hash: &Hash) -> bool {
        self.read().contains_key(hash)
    }

    fn read(&self) -> RwLockReadGuard<'_, HashKeyed<Loc>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashKeyed<Loc>> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads blobs by hash; cheap to clone, usable off the store's thread.
#[derive(Clone)]
pub struct Reader {
    dir: PathBuf,
    index: Known,
}

impl Reader {
    /// The uncompressed bytes of a blob.
    pub fn read(&self, hash: &Hash) -> io::Result<Vec<u8>> {
        let loc = self.index.read().get(hash).copied().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "blob missing from the store")
        })?;
        // The index's size is untrusted: no stored file is larger than
        // MAX_FILE, and decompression stops at the size (a bomb is an error).
        if loc.raw > super::scan::MAX_FILE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "blob larger than any stored file",
            ));
        }
        let compressed = self.read_compressed(&loc)?;
        let data =
            zstd::bulk::decompress(&compressed, usize::try_from(loc.raw).unwrap_or(0).max(1))?;
        if blake3::hash(&data).as_bytes() != hash {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "blob content does not match its hash",
            ));
        }
        Ok(data)
    }

    fn read_compressed(&self, loc: &Loc) -> io::Result<Vec<u8>> {
        let mut file = File::open(pack_path(&self.dir, loc.pack))?;
        // Checked at open against the pack's size then, but the pack may
        // have been cut short since: the length is allocated only once the
        // pack is known to hold it.
        let size = file.metadata()?.len();
        if loc
            .offset
            .checked_add(u64::from(loc.len))
            .is_none_or(|end| end > size)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "blob past the end of its pack",
            ));
        }
        file.seek(SeekFrom::Start(loc.offset))?;
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact(&mut buf)?;
        Ok(buf)
    }
}

pub struct Blobs {
    dir: PathBuf,
    index: Known,
    refs: HashKeyed<u32>,
    packs: HashMap<u64, PackStat>,
    next_pack: u64,
    /// Blobs that may have no reference left (their count dropped to zero,
    /// or they were just written): all a routine collection looks at.
    candidates: HashSet<Hash, BuildHasherDefault<PrefixHasher>>,
}

/// New blobs being written by one snapshot run.
pub struct PackWriter {
    id: u64,
    file: File,
    path: PathBuf,
    /// Its index file's path.
    idx: PathBuf,
    /// Durable already, data and index ([`PackWriter::seal`]).
    sealed: bool,
    offset: u64,
    written: Vec<(Hash, Loc)>,
    pending: HashSet<Hash>,
    behind: durable::WriteBehind,
}

impl PackWriter {
    /// Makes the pack durable, its data and then its index, on the calling
    /// thread (a scan's: syncing a big first snapshot's pack takes a while);
    /// [`Blobs::finish`] then only adds it to the index.
    pub fn seal(&mut self) -> io::Result<()> {
        if self.written.is_empty() || self.sealed {
            return Ok(());
        }
        self.file.flush()?;
        self.file.sync_all()?;
        durable::write_atomic(&self.idx, &encode_index(&self.written))?;
        self.sealed = true;
        Ok(())
    }

    /// Drops a pack that will not be used (an aborted run, a verification
    /// scan): its files go.
    pub fn discard(self) {
        drop(self.file);
        if self.sealed {
            let _ = std::fs::remove_file(&self.idx);
        }
        let _ = std::fs::remove_file(&self.path);
    }

    pub fn contains(&self, hash: &Hash) -> bool {
        self.pending.contains(hash)
    }

    /// Appends one compressed blob.
    pub fn append(&mut self, hash: Hash, compressed: &[u8], raw: u64) -> io::Result<()> {
        if !self.pending.insert(hash) {
            return Ok(());
        }
        self.file.write_all(compressed)?;
        if self.behind.due(compressed.len()) {
            self.behind.push(&self.file);
        }
        let len =
            u32::try_from(compressed.len()).map_err(|_| io::Error::other("blob too large"))?;
        self.written.push((
            hash,
            Loc {
                pack: self.id,
                offset: self.offset,
                len,
                raw,
            },
        ));
        self.offset += u64::from(len);
        Ok(())
    }
}

fn pack_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.pack"))
}

fn idx_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.idx"))
}

/// A pack's index file: one fixed-size record per blob.
pub fn encode_index(records: &[(Hash, Loc)]) -> Vec<u8> {
    let mut idx = Vec::with_capacity(records.len() * IDX_RECORD);
    for (hash, loc) in records {
        idx.extend_from_slice(hash);
        idx.extend_from_slice(&loc.offset.to_le_bytes());
        idx.extend_from_slice(&loc.len.to_le_bytes());
        idx.extend_from_slice(&loc.raw.to_le_bytes());
    }
    idx
}

/// The records of pack `pack`'s index file that lie inside the pack's
/// `pack_size` bytes; a torn trailing record and records pointing past the
/// end (a pack cut short) are left out.
pub fn parse_index(bytes: &[u8], pack: u64, pack_size: u64) -> Vec<(Hash, Loc)> {
    let field = |rec: &[u8], at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&rec[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let mut out = Vec::with_capacity(bytes.len() / IDX_RECORD);
    for rec in bytes.chunks_exact(IDX_RECORD) {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&rec[..32]);
        let offset = field(rec, 32);
        let mut len = [0u8; 4];
        len.copy_from_slice(&rec[40..44]);
        let len = u32::from_le_bytes(len);
        let raw = field(rec, 44);
        if offset
            .checked_add(u64::from(len))
            .is_none_or(|end| end > pack_size)
        {
            continue;
        }
        out.push((
            hash,
            Loc {
                pack,
                offset,
                len,
                raw,
            },
        ));
    }
    out
}

impl Blobs {
    /// Loads every pack index under `dir`; packs without an index (a run
    /// cut short) are deleted.
    pub fn open(dir: &Path) -> io::Result<Self> {
        agentx_shared::profile::create_private_dir(dir)?;
        let mut blobs = Self {
            dir: dir.to_path_buf(),
            index: Known::default(),
            refs: HashKeyed::default(),
            packs: HashMap::new(),
            next_pack: 1,
            candidates: HashSet::default(),
        };
        let mut packs = Vec::new();
        for entry in std::fs::read_dir(dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((stem, ext)) = name.rsplit_once('.') else {
                continue;
            };
            let Ok(id) = u64::from_str_radix(stem, 16) else {
                continue;
            };
            blobs.next_pack = blobs.next_pack.max(id + 1);
            if ext == "pack" {
                packs.push(id);
            }
        }
        for id in packs {
            let idx = idx_path(dir, id);
            let Ok(bytes) = std::fs::read(&idx) else {
                let _ = std::fs::remove_file(pack_path(dir, id));
                continue;
            };
            let size = std::fs::metadata(pack_path(dir, id))
                .map(|m| m.len())
                .unwrap_or(0);
            let mut dead = 0;
            let index = blobs.index.clone();
            let mut index = index.write();
            for (hash, loc) in parse_index(&bytes, id, size) {
                // A blob already indexed from another pack (a compaction cut
                // short) is dead here: collected at the next GC.
                match index.entry(hash) {
                    std::collections::hash_map::Entry::Occupied(_) => dead += u64::from(loc.len),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(loc);
                    }
                }
            }
            blobs.packs.insert(id, PackStat { bytes: size, dead });
        }
        Ok(blobs)
    }

    /// The set of stored blobs, for a scan on another thread.
    pub fn known(&self) -> &Known {
        &self.index
    }

    pub fn begin(&mut self) -> io::Result<PackWriter> {
        let id = self.next_pack;
        self.next_pack += 1;
        let path = pack_path(&self.dir, id);
        let file = durable::create_new(&path)?;
        Ok(PackWriter {
            id,
            file,
            path,
            idx: idx_path(&self.dir, id),
            sealed: false,
            offset: 0,
            written: Vec::new(),
            pending: HashSet::new(),
            behind: durable::WriteBehind::default(),
        })
    }

    /// Makes a pack durable (data, then its index) unless it was sealed,
    /// and adds it to the index.
    pub fn finish(&mut self, mut pack: PackWriter) -> io::Result<()> {
        if pack.written.is_empty() {
            drop(pack.file);
            return std::fs::remove_file(&pack.path);
        }
        pack.seal()?;
        self.packs.insert(
            pack.id,
            PackStat {
                bytes: pack.offset,
                dead: 0,
            },
        );
        // Room made once: a first snapshot adds tens of thousands at a time.
        self.candidates.reserve(pack.written.len());
        let mut index = self.index.write();
        index.reserve(pack.written.len());
        for (hash, loc) in pack.written {
            self.candidates.insert(hash);
            match index.entry(hash) {
                // Stored meanwhile by a scan that ran beside this one: this
                // copy is dead weight, reclaimed when its pack is rewritten.
                std::collections::hash_map::Entry::Occupied(_) => {
                    if let Some(p) = self.packs.get_mut(&pack.id) {
                        p.dead += u64::from(loc.len);
                    }
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(loc);
                }
            }
        }
        Ok(())
    }

    /// Drops a pack that was begun but will not be used (an aborted run).
    pub fn abandon(&mut self, pack: PackWriter) {
        pack.discard();
    }

    /// The uncompressed bytes of a blob.
    pub fn read(&self, hash: &Hash) -> io::Result<Vec<u8>> {
        self.reader().read(hash)
    }

    /// A reader of stored blobs for another thread (a restore's writes):
    /// the store's thread holds off collecting garbage while one is used.
    pub fn reader(&self) -> Reader {
        Reader {
            dir: self.dir.clone(),
            index: self.index.clone(),
        }
    }

    /// Counts one more manifest using each of `hashes` (unique per manifest).
    pub fn add_refs<'a>(&mut self, hashes: impl Iterator<Item = &'a Hash>) {
        self.refs.reserve(hashes.size_hint().0);
        for h in hashes {
            *self.refs.entry(*h).or_insert(0) += 1;
        }
    }

    /// One manifest fewer uses each of `hashes`; blobs nobody uses die.
    pub fn drop_refs<'a>(&mut self, hashes: impl Iterator<Item = &'a Hash>) {
        for h in hashes {
            if let Some(n) = self.refs.get_mut(h) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.refs.remove(h);
                    self.candidates.insert(*h);
                }
            }
        }
    }

    /// Removes blobs no manifest references: dead blobs leave the index at
    /// once; a pack with nothing live is deleted; a pack mostly dead (or
    /// small with any dead blob) is rewritten with its live blobs only.
    ///
    /// Routine collections look only at [`Self::candidates`] (what changed
    /// since the last one); `everything` checks the whole index (at start,
    /// for what a run killed half-way left behind).
    pub fn collect_garbage(&mut self, everything: bool) -> io::Result<GcReport> {
        let index = self.index.clone();
        let dead: Vec<(Hash, Loc)> = if everything {
            self.candidates.clear();
            index
                .read()
                .iter()
                .filter(|(h, _)| !self.refs.contains_key(*h))
                .map(|(h, l)| (*h, *l))
                .collect()
        } else {
            let index = index.read();
            let dead = self
                .candidates
                .drain()
                .filter(|h| !self.refs.contains_key(h))
                .filter_map(|h| index.get(&h).map(|l| (h, *l)))
                .collect();
            // A first snapshot of a big tree made it hold every hash.
            self.candidates.shrink_to(1024);
            dead
        };
        let mut report = GcReport::default();
        for (h, loc) in &dead {
            index.write().remove(h);
            if let Some(p) = self.packs.get_mut(&loc.pack) {
                p.dead += u64::from(loc.len);
            }
            report.blobs += 1;
        }
        let packs: Vec<(u64, PackStat)> = self.packs.iter().map(|(id, s)| (*id, *s)).collect();
        for (id, stat) in packs {
            if stat.dead == 0 {
                continue;
            }
            // Decided from the pack's counters first: most packs with a few
            // dead blobs stay as they are, without a look at the index.
            let live_estimate = stat.bytes.saturating_sub(stat.dead);
            if live_estimate >= 8 * 1024 * 1024 && stat.dead * 2 < stat.bytes {
                continue;
            }
            let live: Vec<(Hash, Loc)> = index
                .read()
                .iter()
                .filter(|(_, l)| l.pack == id)
                .map(|(h, l)| (*h, *l))
                .collect();
            let live_bytes: u64 = live.iter().map(|(_, l)| u64::from(l.len)).sum();
            let small = live_bytes < 8 * 1024 * 1024;
            if !live.is_empty() && !small && stat.dead * 2 < stat.bytes {
                continue;
            }
            if !live.is_empty() {
                let mut writer = self.begin()?;
                for (h, l) in &live {
                    let data = self.reader().read_compressed(l)?;
                    writer.append(*h, &data, l.raw)?;
                }
                {
                    let mut index = index.write();
                    for (h, _) in &live {
                        index.remove(h);
                    }
                }
                self.finish(writer)?;
            }
            // The live blobs are durable elsewhere now: drop the old pack.
            std::fs::remove_file(idx_path(&self.dir, id))?;
            std::fs::remove_file(pack_path(&self.dir, id))?;
            self.packs.remove(&id);
            report.packs_removed += 1;
            report.bytes_freed += stat.bytes.saturating_sub(live_bytes);
        }
        if report.packs_removed > 0 {
            durable::fsync_dir(&self.dir)?;
        }
        Ok(report)
    }

    /// Bytes the packs take on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.packs.values().map(|p| p.bytes).sum()
    }

    /// Hashes currently stored (for consistency checks).
    #[cfg(test)]
    pub fn stored(&self) -> HashSet<Hash> {
        self.index.read().keys().copied().collect()
    }

    #[cfg(test)]
    pub fn referenced(&self) -> HashSet<Hash> {
        self.refs.keys().copied().collect()
    }
}

#[derive(Debug, Default)]
pub struct GcReport {
    pub blobs: u64,
    pub packs_removed: u64,
    pub bytes_freed: u64,
}

/// Compresses with one zstd context per thread (reused across files).
pub fn compress(data: &[u8]) -> io::Result<Vec<u8>> {
    thread_local! {
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            // Level 1: first snapshots are bound by compression speed.
            *slot = Some(zstd::bulk::Compressor::new(1)?);
        }
        match slot.as_mut() {
            Some(c) => c.compress(data),
            None => Err(io::Error::other("no compressor")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_whose_index_claims_a_huge_size_is_an_error_not_an_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let data = vec![0u8; 1 << 20];
        let hash = *blake3::hash(&data).as_bytes();
        let compressed = zstd::bulk::compress(&data, 1).unwrap();
        std::fs::write(pack_path(tmp.path(), 1), &compressed).unwrap();
        let loc = |raw| Loc {
            pack: 1,
            offset: 0,
            len: compressed.len() as u32,
            raw,
        };
        // As written, the blob reads back.
        std::fs::write(
            idx_path(tmp.path(), 1),
            encode_index(&[(hash, loc(1 << 20))]),
        )
        .unwrap();
        assert_eq!(Blobs::open(tmp.path()).unwrap().read(&hash).unwrap(), data);
        // An index that claims a terabyte is refused before any allocation.
        std::fs::write(
            idx_path(tmp.path(), 1),
            encode_index(&[(hash, loc(1 << 40))]),
        )
        .unwrap();
        let err = Blobs::open(tmp.path()).unwrap().read(&hash).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[test]
    fn a_pack_cut_short_after_open_is_an_error_before_any_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let data = vec![7u8; 1000];
        let hash = *blake3::hash(&data).as_bytes();
        let compressed = zstd::bulk::compress(&data, 1).unwrap();
        // The index is checked against the pack's size at open: a pack as
        // large as the (hostile) length claims passes that check…
        let len = u32::MAX - 1;
        let pack = File::create(pack_path(tmp.path(), 1)).unwrap();
        pack.set_len(u64::from(len)).unwrap();
        let loc = Loc {
            pack: 1,
            offset: 0,
            len,
            raw: data.len() as u64,
        };
        std::fs::write(idx_path(tmp.path(), 1), encode_index(&[(hash, loc)])).unwrap();
        let blobs = Blobs::open(tmp.path()).unwrap();
        // …and is cut short before the read: the read must not allocate
        // the claimed 4 GiB (it would, then fail to fill it).
        std::fs::write(pack_path(tmp.path(), 1), &compressed).unwrap();
        let err = blobs.read(&hash).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    /// A first snapshot of a big tree puts every new blob among the
    /// candidates of the next collection; once collected, the set does
    /// not keep room for them all (4 MB per 100,000 files).
    #[test]
    fn a_collection_gives_back_the_room_its_candidates_took() {
        let tmp = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(tmp.path()).unwrap();
        let mut pack = blobs.begin().unwrap();
        let mut hashes = Vec::new();
        for i in 0..20_000u32 {
            let data = i.to_le_bytes();
            let hash = *blake3::hash(&data).as_bytes();
            pack.append(hash, &zstd::bulk::compress(&data, 1).unwrap(), 4)
                .unwrap();
            hashes.push(hash);
        }
        blobs.finish(pack).unwrap();
        blobs.add_refs(hashes.iter());
        assert!(blobs.candidates.capacity() >= 20_000);
        let report = blobs.collect_garbage(false).unwrap();
        assert_eq!(report.blobs, 0, "every blob is referenced");
        assert!(
            blobs.candidates.capacity() <= 2048,
            "{}",
            blobs.candidates.capacity()
        );
        assert_eq!(blobs.read(&hashes[7]).unwrap(), 7u32.to_le_bytes());
    }
}
