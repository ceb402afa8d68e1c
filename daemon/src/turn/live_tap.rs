//! A running command's output on its way from its pipe to the turn's events:
//! joined while the events are busy, cut at whole characters, dropped (and counted) when there is no room.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, mpsc};

use super::Event;
use super::live::{LiveBytes, not_shown};

/// Most bytes one live-output event carries: what arrives while the last
/// piece is on its way is joined up to this, the rest dropped and counted.
pub const PIECE: usize = 64 << 10;

/// What the pipe's reader left for the forwarder.
#[derive(Default)]
struct Mailbox {
    bytes: Vec<u8>,
    dropped: usize,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    mailbox: Mutex<Mailbox>,
    notify: Notify,
}

impl Shared {
    fn mailbox(&self) -> std::sync::MutexGuard<'_, Mailbox> {
        self.mailbox.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The reader's end: never waits (a full mailbox counts what it drops).
/// Dropping it tells the forwarder the output has ended.
pub struct Tap {
    shared: Arc<Shared>,
}

/// The forwarder's end.
pub struct Taken {
    shared: Arc<Shared>,
}

/// A tap and its other end.
pub fn tap() -> (Tap, Taken) {
    let shared = Arc::new(Shared::default());
    (
        Tap {
            shared: Arc::clone(&shared),
        },
        Taken { shared },
    )
}

impl Tap {
    /// Leaves `bytes` for the forwarder: what does not fit in [`PIECE`] is dropped and counted.
    pub fn push(&self, bytes: &[u8]) {
        {
            let mut mailbox = self.shared.mailbox();
            let fits = PIECE.saturating_sub(mailbox.bytes.len()).min(bytes.len());
            mailbox.bytes.extend_from_slice(&bytes[..fits]);
            mailbox.dropped += bytes.len() - fits;
        }
        self.shared.notify.notify_one();
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.shared.mailbox().closed = true;
        self.shared.notify.notify_one();
    }
}

impl Taken {
    /// Everything left since the last call (bytes, and how many were
    /// dropped before them); `None` once the tap is gone and all is taken.
    pub async fn next(&mut self) -> Option<(Vec<u8>, usize)> {
        loop {
            {
                let mut mailbox = self.shared.mailbox();
                if !mailbox.bytes.is_empty() || mailbox.dropped > 0 {
                    let dropped = std::mem::take(&mut mailbox.dropped);
                    return Some((std::mem::take(&mut mailbox.bytes), dropped));
                }
                if mailbox.closed {
                    return None;
                }
            }
            // A push between the check and here leaves a permit: no wake is lost.
            self.shared.notify.notified().await;
        }
    }
}

/// Sends what comes out of `taken` as [`Event::ToolOutput`]s of `call_id`,
/// never waiting on a slow or gone client: a piece the events or the live
/// bounds have no room for is dropped unconverted, and the next piece sent
/// says how much was. Ends with the output, or when the events are closed.
pub async fn forward(
    call_id: String,
    mut taken: Taken,
    events: mpsc::Sender<Event>,
    live: LiveBytes,
) {
    // An incomplete character at the end of a piece waits for the rest.
    let mut carry = Vec::new();
    let mut dropped = 0usize;
    while let Some((bytes, lost)) = taken.next().await {
        dropped += lost;
        if lost > 0 {
            // What followed the carried bytes is gone.
            dropped += std::mem::take(&mut carry).len();
        }
        let permit = match events.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                dropped += std::mem::take(&mut carry).len() + bytes.len();
                continue;
            }
            Err(mpsc::error::TrySendError::Closed(())) => return,
        };
        let mut bytes = if carry.is_empty() {
            bytes
        } else {
            let mut joined = std::mem::take(&mut carry);
            joined.extend_from_slice(&bytes);
            joined
        };
        carry = bytes.split_off(whole_characters(&bytes));
        let shown = bytes.len();
        let mut text = text_of(bytes);
        if dropped > 0 {
            text.insert_str(0, &not_shown(dropped));
        }
        let Some(held) = live.take(text.len()) else {
            dropped += shown;
            continue;
        };
        dropped = 0;
        permit.send(Event::ToolOutput {
            call_id: call_id.clone(),
            text,
            _held: held,
        });
    }
    let mut text = text_of(carry);
    if dropped > 0 {
        text.push_str(&not_shown(dropped));
    }
    if text.is_empty() {
        return;
    }
    if let Some(held) = live.take(text.len()) {
        let _ = events.try_send(Event::ToolOutput {
            call_id,
            text,
            _held: held,
        });
    }
}

/// `bytes` as text, invalid sequences replaced.
fn text_of(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The length of `bytes` without a character cut short at its end (a
/// sequence that can never be valid is left to the lossy conversion).
fn whole_characters(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // The last lead byte within a character's length of the end.
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let needs = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needs > back { len - back } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_at_the_end_is_held_back() {
        let text = "añ€𝄞".as_bytes();
        assert_eq!(whole_characters(text), text.len());
        // Cut inside the 4-byte, 3-byte and 2-byte characters.
        assert_eq!(whole_characters(&text[..text.len() - 1]), 6);
        assert_eq!(whole_characters(&text[..5]), 3);
        assert_eq!(whole_characters(&text[..2]), 1);
        assert_eq!(whole_characters(b"abc"), 3);
        assert_eq!(whole_characters(b""), 0);
        // Continuation bytes with no lead: left as they are.
        assert_eq!(whole_characters(&[0x80, 0x80, 0x80, 0x80, 0x80]), 5);
    }

    async fn collect(events: &mut mpsc::Receiver<Event>) -> String {
        let mut all = String::new();
        while let Some(event) = events.recv().await {
            if let Event::ToolOutput { text, .. } = event {
                all.push_str(&text);
            }
        }
        all
    }

    #[tokio::test]
    async fn output_split_inside_characters_arrives_whole() {
        let (tap, taken) = tap();
        let text = "añ€𝄞 ".repeat(1000);
        // Room for an event per byte: nothing is dropped.
        let (tx, mut rx) = mpsc::channel(text.len());
        // Pushed one byte at a time, each byte taken on its own.
        let forwarder = tokio::spawn(forward("c".into(), taken, tx, LiveBytes::default()));
        for byte in text.as_bytes() {
            tap.push(std::slice::from_ref(byte));
            tokio::task::yield_now().await;
        }
        drop(tap);
        let all = collect(&mut rx).await;
        forwarder.await.unwrap();
        assert!(all == text, "{} bytes arrived of {}", all.len(), text.len());
    }

    #[tokio::test]
    async fn pieces_waiting_are_joined_into_one_event() {
        let (tap, taken) = tap();
        let (tx, mut rx) = mpsc::channel(64);
        for _ in 0..8 {
            tap.push(&[b'x'; 1000]);
        }
        drop(tap);
        forward("c".into(), taken, tx, LiveBytes::default()).await;
        let Some(Event::ToolOutput { text, .. }) = rx.recv().await else {
            panic!("no output event");
        };
        assert_eq!(text.len(), 8000, "one event for the eight pieces");
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn what_finds_no_room_is_dropped_and_told() {
        let (tap, taken) = tap();
        // Past one piece's room in the mailbox: dropped as it is pushed.
        tap.push(&vec![b'a'; PIECE + 10]);
        drop(tap);
        let (tx, mut rx) = mpsc::channel(64);
        forward("c".into(), taken, tx, LiveBytes::default()).await;
        let all = collect(&mut rx).await;
        assert!(all.starts_with(&not_shown(10)), "{}", &all[..80]);
        assert_eq!(all.len(), not_shown(10).len() + PIECE);

        // A full event queue: the piece is dropped, and the next one says so.
        let (tap, taken) = super::tap();
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(Event::Notice("busy".into())).unwrap();
        let forwarder = tokio::spawn(forward("c".into(), taken, tx, LiveBytes::default()));
        tap.push(b"lost");
        while !Arc::clone(&tap.shared).mailbox().bytes.is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(matches!(rx.recv().await, Some(Event::Notice(_))));
        tap.push(b"kept");
        drop(tap);
        forwarder.await.unwrap();
        assert_eq!(collect(&mut rx).await, format!("{}kept", not_shown(4)));
    }
}
