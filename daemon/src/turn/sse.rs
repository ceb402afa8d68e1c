//! Server-sent events, decoded in time linear in the bytes received: each
//! byte is looked at once whatever the size of the chunks it arrives in
//! (eventsource-stream re-parsed its whole buffer for every chunk, so one
//! long line sent in small pieces took quadratic time).

/// An event or a line may not grow past this: a model server streams small
/// deltas, and a stream that never ends a line must not eat the memory.
pub const MAX_EVENT: usize = 16 << 20;

/// One dispatched event: its `event:` name (`message` when none was given)
/// and its `data:` lines joined by newlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// Incremental decoder: bytes in, complete events out.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes after the last line end: an incomplete line.
    partial: Vec<u8>,
    /// The last line ended in `\r`: a `\n` right after it belongs to it.
    after_cr: bool,
    /// Past the start of the stream (where a byte-order mark is dropped).
    started: bool,
    /// The longest event or line (0: [`MAX_EVENT`]).
    cap: usize,
    event: String,
    data: String,
}

impl Decoder {
    /// A decoder whose events may grow to `cap` bytes (at least [`MAX_EVENT`]):
    /// a Responses stream repeats the whole answer in its last events.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap: cap.max(MAX_EVENT),
            ..Self::default()
        }
    }

    /// Decodes `bytes`, appending the events they complete to `out`. An
    /// error (an event over [`MAX_EVENT`]) ends the stream.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Event>) -> Result<(), String> {
        if !self.started && !bytes.is_empty() {
            self.started = true;
            bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
        }
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') else {
                self.partial.extend_from_slice(bytes);
                break;
            };
            self.after_cr = bytes[end] == b'\r';
            let line = if self.partial.is_empty() {
                self.line(&bytes[..end], out)
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..end]);
                self.line(&line, out)
            };
            line?;
            bytes = &bytes[end + 1..];
        }
        let cap = if self.cap == 0 { MAX_EVENT } else { self.cap };
        if self.partial.len() + self.data.len() > cap {
            return Err(format!(
                "it sent an event or a line over {} MiB (a line that never ends?)",
                cap >> 20
            ));
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Event>) -> Result<(), String> {
        // Some local servers cut a multibyte character between tokens: a
        // bad byte becomes U+FFFD and the answer is kept.
        let line = String::from_utf8_lossy(line);
        let line = line.as_ref();
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            if !self.data.is_empty() {
                let mut data = std::mem::take(&mut self.data);
                data.pop();
                out.push(Event {
                    event: if event.is_empty() {
                        "message".into()
                    } else {
                        event
                    },
                    data,
                });
            }
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            // Comments (an empty field), `id`, `retry` and unknown fields.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> (Vec<Event>, Option<String>) {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.feed(chunk, &mut out) {
                return (out, Some(e));
            }
        }
        (out, None)
    }

    fn event(event: &str, data: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn fields_line_ends_and_chunk_boundaries() {
        let wire: &[u8] = b"\xef\xbb\xbf: comment\nevent: a\ndata: 1\ndata:2\r\n\r\nid: 7\nretry: 9\ndata\r\rdata: x\n";
        // A bare `data` line is an empty data line; `x` is still open.
        let want = vec![event("a", "1\n2"), event("message", "")];
        assert_eq!(decode(&[wire]), (want.clone(), None));
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(decode(&bytes), (want, None));
        assert_eq!(
            decode(&[b"data: x\r", b"\n", b"\ndata: y\n\n"]),
            (vec![event("message", "x"), event("message", "y")], None)
        );
    }

    #[test]
    fn bad_utf8_is_replaced_and_endless_lines_end_the_stream() {
        let (events, err) = decode(&[b"data: a\n\ndata: b\xff\xe2\x82c\n\n"]);
        assert_eq!(
            events,
            vec![
                event("message", "a"),
                event("message", "b\u{fffd}\u{fffd}c")
            ]
        );
        assert!(err.is_none());
        let big = vec![b'a'; 1 << 20];
        let chunks: Vec<&[u8]> = std::iter::repeat_n(&big[..], 17).collect();
        assert!(decode(&chunks).1.is_some_and(|e| e.contains("MiB")));
    }
}
