//! HPACK's Huffman code (RFC 7541 Appendix B), decoding only. The code is
//! canonical, so each symbol's code follows from the code lengths alone.

/// The code length of each symbol, 0–255 and EOS (256).
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The longest code.
const MAX_LEN: usize = 30;
const EOS: u16 = 256;

/// The canonical code, by length: codes of length `l` are `first[l]` to
/// `first[l] + count[l] - 1`, standing for `symbols[offset[l]..]`.
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [usize; MAX_LEN + 1],
    /// Symbols ordered by code length, then value.
    symbols: [u16; 257],
}

const CODE: Canonical = canonical();

const fn canonical() -> Canonical {
    let mut count = [0u32; MAX_LEN + 1];
    let mut s = 0;
    while s < LENGTHS.len() {
        count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let mut first = [0u32; MAX_LEN + 1];
    let mut offset = [0usize; MAX_LEN + 1];
    let (mut code, mut at) = (0u32, 0usize);
    let mut len = 1;
    while len <= MAX_LEN {
        first[len] = code;
        offset[len] = at;
        code = (code + count[len]) << 1;
        at += count[len] as usize;
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut filled = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        let mut s = 0;
        while s < LENGTHS.len() {
            if LENGTHS[s] as usize == len {
                symbols[filled] = s as u16;
                filled += 1;
            }
            s += 1;
        }
        len += 1;
    }
    Canonical {
        first,
        count,
        offset,
        symbols,
    }
}

/// Decodes a Huffman-coded string onto `out`; `None` when it is not a
/// valid one (EOS inside, padding longer than 7 bits or not all ones).
pub(super) fn decode(bytes: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in bytes {
        for shift in (0..8).rev() {
            code = code << 1 | u32::from(byte >> shift & 1);
            len += 1;
            if len > MAX_LEN {
                return None;
            }
            let index = code.wrapping_sub(CODE.first[len]);
            if code >= CODE.first[len] && index < CODE.count[len] {
                let symbol = CODE.symbols[CODE.offset[len] + index as usize];
                if symbol == EOS {
                    return None;
                }
                out.push(symbol as u8);
                (code, len) = (0, 0);
            }
        }
    }
    // What is left is padding: the start of EOS, whose bits are all ones.
    (len <= 7 && code == (1 << len) - 1).then_some(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Each symbol's code and length, from the canonical code (for tests
    /// that write Huffman-coded strings).
    pub(in crate::authority) fn codes() -> Vec<(u32, u8)> {
        let mut codes = vec![(0, 0); 257];
        let mut len = 1;
        while len <= MAX_LEN {
            for i in 0..CODE.count[len] {
                let symbol = CODE.symbols[CODE.offset[len] + i as usize];
                codes[usize::from(symbol)] = (CODE.first[len] + i, len as u8);
            }
            len += 1;
        }
        codes
    }

    /// The codes the canonical construction gives are the RFC's (a few
    /// from Appendix B).
    #[test]
    fn the_codes_are_the_rfcs() {
        let codes = codes();
        assert_eq!(codes[usize::from(b'0')], (0x0, 5));
        assert_eq!(codes[usize::from(b'a')], (0x3, 5));
        assert_eq!(codes[usize::from(b'/')], (0x18, 6));
        assert_eq!(codes[usize::from(b':')], (0x5c, 7));
        assert_eq!(codes[0], (0x1ff8, 13));
        assert_eq!(codes[255], (0x3ffffee, 26));
        assert_eq!(codes[256], (0x3fffffff, 30));
    }

    fn decoded(bytes: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        decode(bytes, &mut out).map(|()| out)
    }

    /// Bytes written as hex, spaces allowed (as the RFC prints them).
    pub(in crate::authority) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 7541 Appendix C.4 and C.6.
    #[test]
    fn the_rfcs_examples_decode() {
        for (coded, plain) in [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
            ("6402", "302"),
            ("aec3 771a 4b", "private"),
            (
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
                "Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            (
                "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
                "https://www.example.com",
            ),
        ] {
            assert_eq!(
                decoded(&hex(coded)).as_deref(),
                Some(plain.as_bytes()),
                "{plain}"
            );
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "0" is 00000 (5 bits): padded with ones it is 0x07.
        assert_eq!(decoded(&[0x07]).as_deref(), Some(&b"0"[..]));
        // Padded with zeros: the padding is not the start of EOS.
        assert_eq!(decoded(&[0x00]), None);
        // A whole byte of padding.
        assert_eq!(decoded(&[0x07, 0xff]), None);
        // EOS itself (30 ones).
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(decoded(&[]).as_deref(), Some(&b""[..]));
    }

    /// Against loona-hpack's decoder (a lookup per bit in maps built from
    /// the RFC's table of codes): the same strings, the same refusals.
    #[test]
    fn it_agrees_with_another_decoder_on_random_input() {
        let mut reference = loona_hpack::huffman::HuffmanDecoder::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut valid = 0;
        for n in 0..20_000 {
            let len = n % 24;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly short codes (printable text), some long ones.
                    if seed.is_multiple_of(4) {
                        (seed >> 8) as u8
                    } else {
                        (seed >> 8) as u8 & 0x7f
                    }
                })
                .collect();
            let ours = decoded(&bytes);
            valid += usize::from(ours.is_some());
            assert_eq!(ours, reference.decode(&bytes).ok(), "{bytes:02x?}");
        }
        assert!(valid > 1_000, "only {valid} valid strings were tried");
    }
}
