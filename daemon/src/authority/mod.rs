//! Makes grpc-core clients (Python, Ruby, C++, PHP) work: they send a Unix
//! socket's path as `:authority`, which h2 rejects (RST_STREAM PROTOCOL_ERROR)
//! before any service sees the request. This wraps each accepted connection
//! and rewrites, in the bytes the client sends, every request header block
//! whose `:authority` is not a valid URI authority to say `localhost`.
//!
//! Header blocks are HPACK: they are decoded with the client's dynamic table
//! and re-encoded as plain literals (no table on the server's side), so the
//! block's size may change; every other frame passes through untouched.
//! A client's first header block decides: when its `:authority` is usable
//! (tonic, grpc-go, agentx itself), that block and every byte after it go
//! to h2 as they came, with no decoding (a client keeps one authority).
//! That first look (`first_block`) reads only what it needs, with its own
//! Huffman decoder (`huffman`): loona-hpack's full decoder builds its
//! Huffman maps for every string, about 6% of agentd's CPU when a thousand
//! one-shots connect at once.

mod first_block;
mod huffman;

/// Whether a connection's first header block goes on untouched (see
/// `first_block`); for the fuzz targets.
pub(crate) fn first_block_usable(block: &[u8]) -> bool {
    first_block::usable(block)
}

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::{Connected, UdsConnectInfo};

/// The client connection preface (RFC 9113 §3.4), passed through as is.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Frames written here stay within the smallest maximum frame size a peer
/// may announce, so whatever the server announced, they fit.
const MAX_FRAME: usize = 16_384;
/// Largest frame read (the protocol's own limit, 2^24 - 1, is larger).
const MAX_READ_FRAME: usize = 1 << 20;
/// Largest header block accepted, encoded or decoded: HPACK lets a small
/// block name large table entries many times over.
const MAX_BLOCK: usize = 1 << 20;
/// The dynamic table size h2 announces (the protocol default), which the
/// client's encoder may use without waiting for the server's settings.
const TABLE_SIZE: usize = 4096;
/// What an unusable `:authority` becomes.
const LOCALHOST: &[u8] = b"localhost";

/// A server-side connection whose incoming header blocks carry a valid
/// `:authority` (see the module doc).
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            rewriter: Rewriter::default(),
        }
    }
}

impl Connected for AuthorityFix<UnixStream> {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.rewriter.passthrough && this.rewriter.out.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if !this.rewriter.out.is_empty() {
                let n = this.rewriter.out.len().min(buf.remaining());
                buf.put_slice(&this.rewriter.out[..n]);
                this.rewriter.out.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.eof {
                // An incomplete frame at the end goes to h2 as it is: h2
                // reports the connection's end the way it always does.
                let rest = std::mem::take(&mut this.rewriter.input);
                if rest.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.rewriter.out = rest;
                continue;
            }
            let mut chunk = [0u8; 16_384];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.rewriter.eof = true;
            } else {
                this.rewriter.feed(read.filled())?;
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A header block whose HEADERS frame came without END_HEADERS.
struct Pending {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

/// The client-to-server byte stream, frame by frame.
struct Rewriter {
    /// Bytes read and not yet a whole frame.
    input: Vec<u8>,
    /// Bytes ready for h2.
    out: Vec<u8>,
    preface_left: usize,
    pending: Option<Pending>,
    decoder: loona_hpack::Decoder<'static>,
    eof: bool,
    /// A header block was seen.
    seen_block: bool,
    /// The first header block needed no change: bytes pass as they come.
    passthrough: bool,
    /// Header blocks decoded in full.
    #[cfg(test)]
    full_decodes: usize,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(TABLE_SIZE);
        Rewriter {
            input: Vec::new(),
            out: Vec::new(),
            preface_left: PREFACE_LEN,
            pending: None,
            decoder,
            eof: false,
            seen_block: false,
            passthrough: false,
            #[cfg(test)]
            full_decodes: 0,
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

impl Rewriter {
    /// Takes bytes read from the client; whole frames go to `out`.
    fn feed(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.input.extend_from_slice(bytes);
        let mut at = 0;
        if self.preface_left > 0 {
            let n = self.preface_left.min(self.input.len());
            self.out.extend_from_slice(&self.input[..n]);
            self.preface_left -= n;
            at = n;
        }
        while self.preface_left == 0 && !self.passthrough {
            let rest = &self.input[at..];
            let Some(head) = rest.first_chunk::<FRAME_HEADER_LEN>() else {
                break;
            };
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            if len > MAX_READ_FRAME {
                return Err(invalid("an HTTP/2 frame is too large"));
            }
            let Some(frame) = rest.get(..FRAME_HEADER_LEN + len) else {
                break;
            };
            let frame = frame.to_vec();
            at += frame.len();
            self.frame(&frame)?;
        }
        self.input.drain(..at);
        if self.passthrough {
            self.out.append(&mut self.input);
        }
        Ok(())
    }

    /// One whole frame (header and payload).
    fn frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER_LEN..];
        match (kind, self.pending.take()) {
            (HEADERS, None) => {
                let fragment = headers_fragment(flags, payload)?;
                let pending = Pending {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    block: fragment.to_vec(),
                };
                self.block_part(pending, flags)
            }
            (CONTINUATION, Some(mut pending)) if pending.stream == stream => {
                pending.block.extend_from_slice(payload);
                self.block_part(pending, flags)
            }
            (_, Some(_)) => Err(invalid("a header block was interrupted")),
            (_, None) => {
                self.out.extend_from_slice(frame);
                Ok(())
            }
        }
    }

    fn block_part(&mut self, pending: Pending, flags: u8) -> io::Result<()> {
        if pending.block.len() > MAX_BLOCK {
            return Err(invalid("a header block is too large"));
        }
        if flags & END_HEADERS == 0 {
            self.pending = Some(pending);
            return Ok(());
        }
        let first = !std::mem::replace(&mut self.seen_block, true);
        // A first block with a usable authority goes as it came: it keeps
        // h2's table in step with the client's, and so does everything
        // after it, passed untouched.
        let as_it_came = if first && first_block::usable(&pending.block) {
            true
        } else {
            if first {
                tracing::debug!("a connection's first header block is decoded in full");
            }
            let (block, changed) = self.rewrite(&pending.block)?;
            let unchanged_first = first && !changed;
            if !unchanged_first {
                write_block(&mut self.out, pending.stream, pending.end_stream, &block);
            }
            unchanged_first
        };
        if as_it_came {
            write_block(
                &mut self.out,
                pending.stream,
                pending.end_stream,
                &pending.block,
            );
            self.passthrough = true;
        }
        Ok(())
    }

    /// Decodes a header block and encodes it again with a usable authority;
    /// says whether the authority was changed.
    fn rewrite(&mut self, block: &[u8]) -> io::Result<(Vec<u8>, bool)> {
        #[cfg(test)]
        {
            self.full_decodes += 1;
        }
        let mut out = Vec::with_capacity(block.len() + LOCALHOST.len());
        let mut decoded = 0usize;
        let mut changed = false;
        self.decoder
            .decode_with_cb(block, |name, value| {
                decoded += name.len() + value.len();
                if decoded > MAX_BLOCK {
                    return;
                }
                let value: &[u8] =
                    if &*name == b":authority" && Authority::try_from(&*value).is_err() {
                        changed = true;
                        LOCALHOST
                    } else {
                        &value
                    };
                encode_literal(&mut out, &name, value);
            })
            .map_err(|e| invalid(&format!("a header block does not decode: {e:?}")))?;
        if decoded > MAX_BLOCK {
            return Err(invalid("a header block is too large"));
        }
        Ok((out, changed))
    }
}

/// The header block fragment of a HEADERS frame's payload: without its
/// padding and priority fields.
fn headers_fragment(flags: u8, payload: &[u8]) -> io::Result<&[u8]> {
    let mut payload = payload;
    if flags & PADDED != 0 {
        let (&pad, rest) = payload
            .split_first()
            .ok_or_else(|| invalid("a padded HEADERS frame is empty"))?;
        payload = rest
            .get(..rest.len().saturating_sub(usize::from(pad)))
            .filter(|_| usize::from(pad) <= rest.len())
            .ok_or_else(|| invalid("a HEADERS frame's padding is too long"))?;
    }
    if flags & PRIORITY != 0 {
        // Priority signals are deprecated (RFC 9113 §5.3.2) and h2 ignores
        // them: the rewritten frame carries none.
        payload = payload
            .get(5..)
            .ok_or_else(|| invalid("a HEADERS frame's priority is cut short"))?;
    }
    Ok(payload)
}

/// Writes `block` as a HEADERS frame and as many CONTINUATION frames as it
/// needs.
fn write_block(out: &mut Vec<u8>, stream: u32, end_stream: bool, block: &[u8]) {
    let mut chunks = block.chunks(MAX_FRAME).peekable();
    let mut first = true;
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let last = chunks.peek().is_none();
        let (kind, mut flags) = if first {
            (HEADERS, if end_stream { END_STREAM } else { 0 })
        } else {
            (CONTINUATION, 0)
        };
        if last {
            flags |= END_HEADERS;
        }
        let len = chunk.len().to_be_bytes();
        out.extend_from_slice(&len[len.len() - 3..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(chunk);
        first = false;
        if last {
            return;
        }
    }
}

/// An HPACK "literal header field without indexing, new name" (RFC 7541
/// §6.2.2), strings not Huffman-coded.
fn encode_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    encode_string(out, name);
    encode_string(out, value);
}

fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    encode_integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `high` holds the
/// first byte's bits above the prefix.
fn encode_integer(out: &mut Vec<u8>, mut value: usize, n: u32, high: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let len = payload.len().to_be_bytes();
        out.extend_from_slice(&len[len.len() - 3..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// The header lists of the HEADERS blocks in `bytes` (after the preface).
    fn header_lists(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut decoder = loona_hpack::Decoder::new();
        let mut at = PREFACE.len();
        let mut lists = Vec::new();
        let mut block = Vec::new();
        while at < bytes.len() {
            let len = usize::from(bytes[at]) << 16
                | usize::from(bytes[at + 1]) << 8
                | usize::from(bytes[at + 2]);
            let (kind, flags) = (bytes[at + 3], bytes[at + 4]);
            let payload = &bytes[at + 9..at + 9 + len];
            if kind == HEADERS || kind == CONTINUATION {
                block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    lists.push(decoder.decode(&block).unwrap());
                    block.clear();
                }
            }
            at += 9 + len;
        }
        lists
    }

    fn rewritten(input: &[u8], piece: usize) -> Vec<u8> {
        fed(input, piece).out
    }

    fn fed(input: &[u8], piece: usize) -> Rewriter {
        let mut r = Rewriter::default();
        for chunk in input.chunks(piece) {
            r.feed(chunk).unwrap();
        }
        assert!(r.input.is_empty(), "bytes left over");
        r
    }

    fn value<'a>(list: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> &'a [u8] {
        &list.iter().find(|(n, _)| n == name.as_bytes()).unwrap().1
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_even_from_the_dynamic_table() {
        // As grpc-core sends them: the first block adds the authority to
        // the dynamic table, the second names it by its index (62).
        let block = |authority: &[u8]| {
            let mut b = vec![0x83, 0x86, 0x04];
            encode_string(&mut b, b"/agentx.v1.Daemon/Ping");
            b.extend_from_slice(authority);
            encode_literal(&mut b, b"te", b"trailers");
            b
        };
        let mut literal = vec![0x41];
        encode_string(&mut literal, b"/tmp/x/agentd.sock");
        let first = block(&literal);
        let second = block(&[0x80 | 62]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
        input.extend(frame(HEADERS, END_HEADERS, 1, &first));
        input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0"));
        // Split over a CONTINUATION, padded.
        let mut padded = vec![3];
        padded.extend_from_slice(&second[..4]);
        padded.extend_from_slice(&[0, 0, 0]);
        input.extend(frame(HEADERS, PADDED | END_STREAM, 3, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 3, &second[4..]));
        for piece in [1, 7, input.len()] {
            let out = rewritten(&input, piece);
            assert_eq!(&out[..PREFACE.len()], PREFACE);
            let lists = header_lists(&out);
            assert_eq!(lists.len(), 2);
            for list in &lists {
                assert_eq!(value(list, ":authority"), b"localhost");
                assert_eq!(value(list, ":path"), b"/agentx.v1.Daemon/Ping");
                assert_eq!(value(list, "te"), b"trailers");
                assert_eq!(list[0].0, b":method");
            }
            // The DATA frame is passed on as it was.
            assert!(out.windows(5).any(|w| w == b"\0\0\0\0\0"));
        }
    }

    #[test]
    fn a_valid_authority_and_other_frames_are_kept() {
        let mut encoder = loona_hpack::Encoder::new();
        let block = encoder.encode(vec![
            (&b":authority"[..], &b"example.com:80"[..]),
            (&b":path"[..], &b"/x"[..]),
        ]);
        let mut input = PREFACE.to_vec();
        let ping = frame(0x6, 0, 0, b"12345678");
        input.extend(ping.clone());
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
        let out = rewritten(&input, 3);
        assert_eq!(&out[PREFACE.len()..PREFACE.len() + ping.len()], &ping[..]);
        let lists = header_lists(&out);
        assert_eq!(value(&lists[0], ":authority"), b"example.com:80");
        let headers_flags = out[PREFACE.len() + ping.len() + 4];
        assert_eq!(headers_flags, END_HEADERS | END_STREAM);
    }

    /// As tonic sends them: a usable authority in the first block, then
    /// blocks that name the dynamic table; all of it reaches h2 byte for
    /// byte, whatever comes later.
    #[test]
    fn after_a_first_block_with_a_usable_authority_bytes_pass_untouched() {
        let mut encoder = loona_hpack::Encoder::new();
        let request = |encoder: &mut loona_hpack::Encoder<'_>, authority: &[u8]| {
            encoder.encode(vec![
                (&b":method"[..], &b"POST"[..]),
                (&b":authority"[..], authority),
                (&b":path"[..], &b"/agentx.v1.Daemon/Ping"[..]),
                (&b"te"[..], &b"trailers"[..]),
            ])
        };
        let first = request(&mut encoder, b"localhost");
        let second = request(&mut encoder, b"localhost");
        let third = request(&mut encoder, b"/tmp/x/agentd.sock");
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(HEADERS, END_HEADERS, 1, &first));
        input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0"));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &third));
        assert!(second.len() < first.len(), "the second names the table");
        for piece in [1, 7, input.len()] {
            let r = fed(&input, piece);
            assert_eq!(r.out, input, "in pieces of {piece}");
            assert_eq!(r.full_decodes, 0, "the first block was decoded in full");
        }
    }

    #[test]
    fn a_large_block_is_split_into_continuations() {
        let big = vec![b'a'; 40_000];
        let mut block = Vec::new();
        encode_literal(&mut block, b"x-big", &big);
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &block));
        let out = rewritten(&input, 4096);
        let lists = header_lists(&out);
        assert_eq!(value(&lists[0], "x-big"), &big[..]);
        let first_len = usize::from(out[PREFACE.len()]) << 16
            | usize::from(out[PREFACE.len() + 1]) << 8
            | usize::from(out[PREFACE.len() + 2]);
        assert_eq!(first_len, MAX_FRAME);
    }

    #[test]
    fn a_block_that_decodes_to_too_much_is_refused() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut block = encoder.encode(vec![(&b"x-a"[..], &[b'a'; 3000][..])]);
        // Index 62: the entry just added, named again and again.
        block.extend(std::iter::repeat_n(0x80 | 62, 1000));
        let mut r = Rewriter::default();
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &block));
        assert!(r.feed(&input).is_err());
    }
}
