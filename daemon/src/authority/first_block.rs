//! Reads a connection's first header block just far enough to say whether
//! its `:authority` is usable, without building a decoder (the fast path).

use tonic::codegen::http::uri::Authority;

use super::{MAX_BLOCK, TABLE_SIZE, huffman};

/// HPACK's static table (RFC 7541 Appendix A), index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// What the dynamic table holds of an entry: its size (RFC 7541 §4.1), its
/// name's length and, for an `:authority`, whether its value is usable.
#[derive(Clone, Copy)]
struct Entry {
    size: usize,
    name_len: usize,
    authority: Option<bool>,
}

/// A field's name as far as it matters: its length, and whether it is
/// `:authority`.
#[derive(Clone, Copy)]
struct Name {
    len: usize,
    authority: bool,
}

/// Whether `block`, the first header block of a connection (empty dynamic
/// table, at most [`TABLE_SIZE`]), is well formed and names no unusable
/// `:authority`. `false` also for whatever is not understood here: the
/// caller then decodes the block in full.
pub(super) fn usable(block: &[u8]) -> bool {
    Reader::default().read(block).unwrap_or(false)
}

#[derive(Default)]
struct Reader {
    /// Newest first.
    table: std::collections::VecDeque<Entry>,
    used: usize,
    max: Option<usize>,
    /// Bytes of names and values the block decodes to so far.
    decoded: usize,
    scratch: Vec<u8>,
}

impl Reader {
    fn read(&mut self, mut block: &[u8]) -> Option<bool> {
        let mut usable = true;
        let mut fields = 0usize;
        let mut resized_last = false;
        while let Some(&first) = block.first() {
            resized_last = first & 0xe0 == 0x20;
            if !resized_last {
                fields += 1;
            }
            if first & 0x80 != 0 {
                let index = integer(&mut block, 7)?;
                let (size, authority) = self.indexed(index)?;
                self.decoded(size)?;
                if let Some(ok) = authority {
                    usable &= ok;
                }
            } else if resized_last {
                let size = integer(&mut block, 5)?;
                // Size updates come first in a block (RFC 7541 §4.2).
                if size > TABLE_SIZE || fields > 0 {
                    return None;
                }
                self.max = Some(size);
                self.evict(0);
            } else {
                // With incremental indexing (01), without (0000) or never
                // indexed (0001).
                let insert = first & 0x40 != 0;
                let index = integer(&mut block, if insert { 6 } else { 4 })?;
                let name = if index == 0 {
                    let name = self.string(&mut block)?;
                    Name {
                        len: name.len(),
                        authority: name == b":authority",
                    }
                } else {
                    self.name(index)?
                };
                let value = self.string(&mut block)?;
                let ok = name.authority.then(|| Authority::try_from(value).is_ok());
                let len = name.len + value.len();
                self.decoded(len)?;
                if let Some(ok) = ok {
                    usable &= ok;
                }
                if insert {
                    let size = len + 32;
                    self.insert(Entry {
                        size,
                        name_len: name.len,
                        authority: ok,
                    });
                }
            }
        }
        // A block may not end with a size update (loona-hpack refuses it;
        // found by the fuzz target).
        (!resized_last).then_some(usable)
    }

    /// An indexed field: its size as decoded (name and value) and, if it
    /// is an `:authority`, whether that is usable.
    fn indexed(&self, index: usize) -> Option<(usize, Option<bool>)> {
        match index {
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                let authority = (index == 1).then(|| Authority::try_from(value).is_ok());
                Some((name.len() + value.len(), authority))
            }
            _ => {
                let entry = self.table.get(index.checked_sub(62)?)?;
                Some((entry.size - 32, entry.authority))
            }
        }
    }

    /// Counts `len` more bytes decoded; `None` past [`MAX_BLOCK`] (the full
    /// decoder then refuses the block, as it always did).
    fn decoded(&mut self, len: usize) -> Option<()> {
        self.decoded += len;
        (self.decoded <= MAX_BLOCK).then_some(())
    }

    fn name(&self, index: usize) -> Option<Name> {
        match index {
            1..=61 => {
                let (name, _) = STATIC[index - 1];
                Some(Name {
                    len: name.len(),
                    authority: index == 1,
                })
            }
            _ => {
                let entry = self.table.get(index.checked_sub(62)?)?;
                Some(Name {
                    len: entry.name_len,
                    authority: entry.authority.is_some(),
                })
            }
        }
    }

    /// A string literal (RFC 7541 §5.2), decoded into the scratch buffer.
    fn string(&mut self, block: &mut &[u8]) -> Option<&[u8]> {
        let huffman = block.first()? & 0x80 != 0;
        let len = integer(block, 7)?;
        let (raw, rest) = block.split_at_checked(len)?;
        *block = rest;
        self.scratch.clear();
        if huffman {
            huffman::decode(raw, &mut self.scratch)?;
        } else {
            self.scratch.extend_from_slice(raw);
        }
        Some(&self.scratch)
    }

    fn insert(&mut self, entry: Entry) {
        self.evict(entry.size);
        if entry.size <= self.max() {
            self.used += entry.size;
            self.table.push_front(entry);
        }
    }

    /// Drops the oldest entries until `room` more bytes fit (RFC 7541 §4.4).
    fn evict(&mut self, room: usize) {
        while self.used + room > self.max() {
            match self.table.pop_back() {
                Some(old) => self.used -= old.size,
                None => break,
            }
        }
    }

    fn max(&self) -> usize {
        self.max.unwrap_or(TABLE_SIZE)
    }
}

/// An integer with an `n`-bit prefix (RFC 7541 §5.1), at most 2^28.
fn integer(block: &mut &[u8], n: u32) -> Option<usize> {
    let (&first, mut rest) = block.split_first()?;
    let max = (1usize << n) - 1;
    let mut value = usize::from(first) & max;
    if value == max {
        let mut shift = 0;
        loop {
            let (&byte, after) = rest.split_first()?;
            rest = after;
            value += usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
            if shift > 21 {
                return None;
            }
        }
    }
    *block = rest;
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::huffman::tests::hex;

    /// RFC 7541 C.4: three requests on one connection, Huffman-coded; the
    /// second and third name the first's `:authority` by its index.
    #[test]
    fn the_rfcs_requests_read_as_usable() {
        let mut reader = Reader::default();
        for block in [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ] {
            assert_eq!(reader.read(&hex(block)), Some(true), "{block}");
        }
        assert_eq!(reader.table.len(), 3);
        assert_eq!(reader.used, 164, "the RFC's table size after C.4.3");
    }

    fn literal(out: &mut Vec<u8>, high: u8, prefix: u32, index: usize, name: &[u8], value: &[u8]) {
        super::super::encode_integer(out, index, prefix, high);
        if index == 0 {
            super::super::encode_string(out, name);
        }
        super::super::encode_string(out, value);
    }

    #[test]
    fn a_socket_path_or_an_empty_authority_is_not_usable() {
        let mut block = vec![0x83];
        literal(&mut block, 0x40, 6, 1, b"", b"/tmp/x/agentd.sock");
        assert!(!usable(&block));
        // The static table's own `:authority`, whose value is empty.
        assert!(!usable(&[0x83, 0x81]));
        // A new name spelled `:authority`, never indexed.
        let mut block = Vec::new();
        literal(&mut block, 0x10, 4, 0, b":authority", b"unix:/tmp/s");
        assert!(!usable(&block));
        let mut block = Vec::new();
        literal(&mut block, 0x00, 4, 0, b":authority", b"localhost:50051");
        assert!(usable(&block));
    }

    /// Index 62 is the newest entry; older ones move up as entries are
    /// added, and go when the table is full.
    #[test]
    fn dynamic_indexes_follow_insertions_and_evictions() {
        let mut block = Vec::new();
        literal(&mut block, 0x40, 6, 1, b"", b"/tmp/x/agentd.sock");
        literal(&mut block, 0x40, 6, 0, b"x-a", b"1");
        block.push(0x80 | 63); // the bad authority again
        assert!(!usable(&block));
        let mut block = Vec::new();
        literal(&mut block, 0x40, 6, 1, b"", b"localhost");
        literal(&mut block, 0x40, 6, 0, b"x-a", b"1");
        block.push(0x80 | 63);
        assert!(usable(&block));
        // A literal naming the dynamic entry's name.
        literal(&mut block, 0x00, 4, 63, b"", b"/a/b");
        assert!(!usable(&block));
        // A size update to 0 empties the table: index 62 names nothing.
        let mut block = vec![0x20];
        literal(&mut block, 0x40, 6, 1, b"", b"localhost");
        block.push(0x80 | 62);
        assert!(!usable(&block));
        // An entry larger than the table empties it.
        let mut block = Vec::new();
        literal(&mut block, 0x40, 6, 1, b"", b"localhost");
        literal(&mut block, 0x40, 6, 0, b"x-big", &[b'a'; 4100]);
        block.push(0x80 | 62);
        assert!(!usable(&block));
    }

    #[test]
    fn malformed_blocks_are_left_to_the_full_decoder() {
        for block in [
            &[0x80][..],                           // index 0
            &[0xff, 0xff, 0xff, 0xff, 0x7f],       // an index past the table
            &[0x41, 0x85, b'a'],                   // a string cut short
            &[0x3f, 0xe2, 0x1f],                   // a size update past the maximum
            &[0x41, 0x81, 0x00],                   // bad Huffman padding
            &[0xff, 0x80, 0x80, 0x80, 0x80, 0x01], // an integer too large
        ] {
            assert!(!usable(block), "{block:02x?}");
        }
    }

    /// The static table, against loona-hpack's.
    #[test]
    fn the_static_table_is_the_rfcs() {
        let mut decoder = loona_hpack::Decoder::new();
        for (i, (name, value)) in STATIC.iter().enumerate() {
            let fields = decoder.decode(&[0x80 | (i as u8 + 1)]).unwrap();
            assert_eq!(fields[0].0, name.as_bytes(), "index {}", i + 1);
            assert_eq!(fields[0].1, value.as_bytes(), "index {}", i + 1);
        }
    }

    /// Random blocks, as plain or Huffman-coded literals of every kind and
    /// indexed fields, against a full decode: the same verdict whenever the
    /// block decodes, and never "usable" when it does not.
    #[test]
    fn it_agrees_with_a_full_decoder_on_random_blocks() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names: [&[u8]; 4] = [b":authority", b"x-a", b"content-type", b":path"];
        let values: [&[u8]; 5] = [b"localhost", b"/tmp/a.sock", b"", b"example.com:80", b"a b"];
        let (mut usable_seen, mut unusable_seen) = (0, 0);
        for _ in 0..5_000 {
            let mut block = Vec::new();
            if next(8) == 0 {
                super::super::encode_integer(&mut block, next(5000) as usize, 5, 0x20);
            }
            let mut misplaced = false;
            for field in 0..1 + next(6) {
                if next(20) == 0 {
                    // Only a block's start may resize (h2 refuses it
                    // elsewhere; the reader leaves it alone).
                    super::super::encode_integer(&mut block, next(5000) as usize, 5, 0x20);
                    misplaced |= field > 0;
                }
                let name = names[next(4) as usize];
                let value = values[next(5) as usize];
                match next(5) {
                    0 => super::super::encode_integer(&mut block, 1 + next(66) as usize, 7, 0x80),
                    kind => {
                        let (high, prefix) =
                            [(0x40, 6), (0x00, 4), (0x10, 4), (0x40, 6)][kind as usize - 1];
                        let index = if next(2) == 0 {
                            0
                        } else {
                            1 + next(64) as usize
                        };
                        super::super::encode_integer(&mut block, index, prefix, high);
                        if index == 0 {
                            string(&mut block, name, next(2) == 0);
                        }
                        string(&mut block, value, next(2) == 0);
                    }
                }
            }
            let ours = usable(&block);
            if misplaced {
                assert!(!ours, "a misplaced size update was read: {block:02x?}");
                continue;
            }
            let mut decoder = loona_hpack::Decoder::new();
            decoder.set_max_allowed_table_size(TABLE_SIZE);
            match decoder.decode(&block) {
                Ok(fields) => {
                    let theirs = fields
                        .iter()
                        .all(|(n, v)| n != b":authority" || Authority::try_from(&v[..]).is_ok());
                    assert_eq!(ours, theirs, "{block:02x?}");
                    if theirs {
                        usable_seen += 1;
                    } else {
                        unusable_seen += 1;
                    }
                }
                Err(_) => assert!(!ours, "usable, yet it does not decode: {block:02x?}"),
            }
        }
        assert!(
            usable_seen > 200 && unusable_seen > 200,
            "{usable_seen} / {unusable_seen}"
        );
    }

    /// A string literal, Huffman-coded with the canonical code when `coded`.
    fn string(out: &mut Vec<u8>, s: &[u8], coded: bool) {
        if !coded {
            super::super::encode_string(out, s);
            return;
        }
        let codes = huffman::tests::codes();
        let (mut bits, mut acc, mut bytes) = (0u32, 0u64, Vec::new());
        for &b in s {
            let (code, len) = codes[usize::from(b)];
            acc = acc << len | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bytes.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        if bits > 0 {
            bytes.push((acc << (8 - bits)) as u8 | (0xff >> bits));
        }
        super::super::encode_integer(out, bytes.len(), 7, 0x80);
        out.extend_from_slice(&bytes);
    }
}
