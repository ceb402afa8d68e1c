//! A manifest's sorted entry list, held in shared chunks: a snapshot that
//! changed a few directories shares every other chunk with the one before.

use std::sync::Arc;

use super::{Entry, Kind};

/// Entries per chunk when a list is cut up (a rebuilt chunk is flushed at
/// this size; a reused one keeps whatever size it has).
const CHUNK: usize = 256;

/// Entries sorted by path, in immutable chunks shared between manifests.
/// Cloning one costs a reference count per chunk.
#[derive(Clone, Default)]
pub struct Manifest {
    /// Never empty chunks, in path order.
    chunks: Vec<Arc<[Entry]>>,
    /// `ends[k]`: the number of entries in chunks `0..=k`.
    ends: Vec<usize>,
}

impl Manifest {
    /// A manifest of `entries`, which must be sorted by path.
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        let mut b = Builder::default();
        for e in entries {
            b.push_unchecked(e);
        }
        b.finish()
    }

    /// The directories it holds.
    pub fn dir_count(&self) -> usize {
        self.iter().filter(|e| e.kind == Kind::Dir).count()
    }

    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Every entry, in path order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + Clone + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// The entries from position `i` on.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = &Entry> + '_ {
        let k = self.ends.partition_point(|end| *end <= i);
        let skip = i.saturating_sub(self.start(k));
        self.chunks[k.min(self.chunks.len())..]
            .iter()
            .flat_map(|c| c.iter())
            .skip(skip)
    }

    /// The entry at position `i`.
    pub fn get(&self, i: usize) -> Option<&Entry> {
        let k = self.ends.partition_point(|end| *end <= i);
        self.chunks.get(k)?.get(i - self.start(k))
    }

    /// Where `path` is (`Ok`) or would be inserted (`Err`), as
    /// `slice::binary_search` answers.
    pub fn search(&self, path: &[u8]) -> Result<usize, usize> {
        if self.is_empty() {
            return Err(0);
        }
        let k = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|l| l.path.as_slice() < path));
        let Some(chunk) = self.chunks.get(k) else {
            return Err(self.len());
        };
        let start = self.start(k);
        chunk
            .binary_search_by(|e| e.path.as_slice().cmp(path))
            .map(|i| start + i)
            .map_err(|i| start + i)
    }

    /// The entry for `path`.
    pub fn find(&self, path: &[u8]) -> Option<&Entry> {
        self.search(path).ok().and_then(|i| self.get(i))
    }

    /// The position of the first entry whose path is not below `path`.
    pub fn lower_bound(&self, path: &[u8]) -> usize {
        self.search(path).unwrap_or_else(|i| i)
    }

    /// A copy of the entries (to edit them; tests).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<Entry> {
        self.iter().cloned().collect()
    }

    /// How many chunks this manifest shares with `other` (the same memory).
    #[cfg(test)]
    pub fn shared_chunks(&self, other: &Manifest) -> usize {
        self.chunks
            .iter()
            .filter(|c| other.chunks.iter().any(|o| Arc::ptr_eq(c, o)))
            .count()
    }

    fn start(&self, k: usize) -> usize {
        match k {
            0 => 0,
            k => self.ends.get(k - 1).copied().unwrap_or_else(|| self.len()),
        }
    }

    /// This manifest with the entries at positions where `keep` is false
    /// taken out and `adds` (sorted by path) put in. Chunks with nothing
    /// taken out or put in are shared, not copied. None if the result
    /// would not be strictly in path order (an add whose path is kept).
    pub fn merged(&self, keep: &[bool], adds: Vec<Entry>) -> Option<Manifest> {
        let mut out = Builder::default();
        let mut adds = adds.into_iter().peekable();
        for (k, chunk) in self.chunks.iter().enumerate() {
            let start = self.start(k);
            let next = self.chunks.get(k + 1).and_then(|c| c.first());
            // Adds before the next chunk's first path belong here.
            let here = |a: &Entry| next.is_none_or(|n| a.path < n.path);
            let untouched = keep
                .get(start..self.ends[k])
                .is_none_or(|k| k.iter().all(|k| *k))
                && adds.peek().is_none_or(|a| !here(a));
            if untouched {
                out.reuse(chunk)?;
                continue;
            }
            for (i, e) in chunk.iter().enumerate() {
                while let Some(a) = adds.next_if(|a| a.path < e.path) {
                    out.push(a)?;
                }
                if keep.get(start + i).copied().unwrap_or(true) {
                    out.push(e.clone())?;
                }
            }
            while let Some(a) = adds.next_if(here) {
                out.push(a)?;
            }
        }
        for a in adds {
            out.push(a)?;
        }
        Some(out.finish())
    }
}

/// Builds a chunk list: rebuilt entries gather in `pending`, shared
/// chunks go in whole.
#[derive(Default)]
struct Builder {
    done: Manifest,
    pending: Vec<Entry>,
}

impl Builder {
    fn last_path(&self) -> Option<&[u8]> {
        self.pending
            .last()
            .or_else(|| self.done.chunks.last().and_then(|c| c.last()))
            .map(|e| e.path.as_slice())
    }

    /// Appends `e`; None if it is not after the last entry.
    fn push(&mut self, e: Entry) -> Option<()> {
        if self.last_path().is_some_and(|l| l >= e.path.as_slice()) {
            return None;
        }
        self.push_unchecked(e);
        Some(())
    }

    fn push_unchecked(&mut self, e: Entry) {
        self.pending.push(e);
        if self.pending.len() >= CHUNK {
            self.flush();
        }
    }

    /// Appends a shared chunk; None if it does not start after the last entry.
    fn reuse(&mut self, chunk: &Arc<[Entry]>) -> Option<()> {
        let first = chunk.first()?;
        if self.last_path().is_some_and(|l| l >= first.path.as_slice()) {
            return None;
        }
        self.flush();
        self.add(Arc::clone(chunk));
        Some(())
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let chunk: Arc<[Entry]> = std::mem::take(&mut self.pending).into();
            self.add(chunk);
        }
    }

    fn add(&mut self, chunk: Arc<[Entry]>) {
        let end = self.done.len() + chunk.len();
        self.done.chunks.push(chunk);
        self.done.ends.push(end);
    }

    fn finish(mut self) -> Manifest {
        self.flush();
        self.done
    }
}

impl PartialEq for Manifest {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && (self
                .chunks
                .iter()
                .zip(&other.chunks)
                .all(|(a, b)| Arc::ptr_eq(a, b))
                && self.chunks.len() == other.chunks.len()
                || self.iter().eq(other.iter()))
    }
}

impl Eq for Manifest {}

impl std::fmt::Debug for Manifest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Walks sorted manifests side by side: each path once, with its entry
/// (or none) in each.
pub fn aligned<'a, const N: usize>(
    lists: [&'a Manifest; N],
) -> impl Iterator<Item = (&'a [u8], [Option<&'a Entry>; N])> + 'a {
    let mut iters = lists.map(|m| m.iter().peekable());
    std::iter::from_fn(move || {
        let path = iters
            .iter_mut()
            .filter_map(|it| it.peek().map(|e| e.path.as_slice()))
            .min()?;
        let row = std::array::from_fn(|k| iters[k].next_if(|e| e.path.as_slice() == path));
        Some((path, row))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::manifest::Kind;

    fn entry(path: &str) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::File,
            mode: 0o644,
            size: 1,
            mtime_ns: 1,
            ctime_ns: 1,
            ino: 1,
            racy: false,
            hash: [1; 32],
            target: Vec::new(),
            uid: 0,
            gid: 0,
            nlink: 1,
        }
    }

    fn paths(m: &Manifest) -> Vec<String> {
        m.iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect()
    }

    fn big(n: usize) -> Manifest {
        Manifest::from_entries((0..n).map(|i| entry(&format!("p{i:06}"))).collect())
    }

    #[test]
    fn lookups_agree_with_a_plain_list() {
        let m = big(1000);
        let flat = m.to_vec();
        assert_eq!(m.len(), 1000);
        assert!(m.chunks.len() > 1);
        for (i, e) in flat.iter().enumerate() {
            assert_eq!(m.get(i), Some(e));
            assert_eq!(m.search(&e.path), Ok(i));
            assert_eq!(m.iter_from(i).next(), Some(e));
        }
        assert_eq!(m.get(1000), None);
        assert_eq!(m.iter_from(1000).count(), 0);
        assert_eq!(m.search(b"p000010x"), Err(11));
        assert_eq!(m.search(b"a"), Err(0));
        assert_eq!(m.search(b"z"), Err(1000));
        assert_eq!(m.lower_bound(b"p000256"), 256);
        assert_eq!(Manifest::default().search(b"a"), Err(0));
    }

    #[test]
    fn a_small_change_shares_every_untouched_chunk() {
        let m = big(10_000);
        let mut keep = vec![true; m.len()];
        keep[5000] = false;
        let adds = vec![entry("p005000"), entry("p007777a")];
        let n = m.merged(&keep, adds).unwrap();
        assert_eq!(n.len(), 10_001);
        assert!(n.shared_chunks(&m) >= m.chunks.len() - 2);
        let mut want = m.to_vec();
        want.insert(7778, entry("p007777a"));
        assert_eq!(n.to_vec(), want);
        assert_eq!(n, Manifest::from_entries(want));
        // Nothing changed: the same chunks.
        assert_eq!(
            m.merged(&vec![true; m.len()], Vec::new())
                .unwrap()
                .shared_chunks(&m),
            m.chunks.len()
        );
    }

    #[test]
    fn merges_at_the_edges_and_refuses_duplicates() {
        let m = big(600);
        let mut keep = vec![true; 600];
        keep[0] = false;
        keep[599] = false;
        let n = m
            .merged(&keep, vec![entry("a"), entry("p000255z"), entry("q")])
            .unwrap();
        let p = paths(&n);
        assert_eq!(p.first().map(String::as_str), Some("a"));
        assert_eq!(p.last().map(String::as_str), Some("q"));
        assert!(p.contains(&"p000255z".to_owned()));
        assert!(!p.contains(&"p000000".to_owned()));
        assert_eq!(n.len(), 600 + 3 - 2);
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        // An add whose path is kept would appear twice.
        assert!(m.merged(&vec![true; 600], vec![entry("p000300")]).is_none());
        // Everything taken out.
        assert!(m.merged(&vec![false; 600], Vec::new()).unwrap().is_empty());
        assert_eq!(
            paths(&Manifest::default().merged(&[], vec![entry("x")]).unwrap()),
            ["x"]
        );
    }

    #[test]
    fn aligned_walks_each_path_once() {
        let a = Manifest::from_entries(vec![entry("a"), entry("c")]);
        let b = Manifest::from_entries(vec![entry("b"), entry("c")]);
        let rows: Vec<_> = aligned([&a, &b])
            .map(|(p, [x, y])| (p.to_vec(), x.is_some(), y.is_some()))
            .collect();
        assert_eq!(
            rows,
            [
                (b"a".to_vec(), true, false),
                (b"b".to_vec(), false, true),
                (b"c".to_vec(), true, true)
            ]
        );
    }
}
