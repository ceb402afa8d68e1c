//! Bytes of live output (a running command's output, shown as it comes)
//! queued for clients: bounded per turn and for all turns; over either
//! bound a piece is dropped, never queued, and the client is told how much.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Live bytes one turn may have queued towards its client.
pub const PER_TURN: usize = 128 << 10;
/// Live bytes all turns together may have queued.
pub const ALL_TURNS: usize = 16 << 20;

static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// One turn's share of the live bytes in flight.
#[derive(Debug, Clone, Default)]
pub struct LiveBytes {
    queued: Arc<AtomicUsize>,
}

/// `n` bytes of a piece on their way to the client; given back when the
/// piece is sent or dropped.
#[derive(Debug)]
pub struct Held {
    queued: Arc<AtomicUsize>,
    n: usize,
}

impl LiveBytes {
    /// Room for a piece of `n` bytes, if both bounds allow it.
    pub fn take(&self, n: usize) -> Option<Held> {
        reserve(&self.queued, n, PER_TURN)?;
        if reserve(&QUEUED, n, ALL_TURNS).is_none() {
            self.queued.fetch_sub(n, Ordering::SeqCst);
            return None;
        }
        Some(Held {
            queued: Arc::clone(&self.queued),
            n,
        })
    }
}

/// Adds `n` to `counter` unless that passes `max`.
fn reserve(counter: &AtomicUsize, n: usize, max: usize) -> Option<()> {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
            (now + n <= max).then_some(now + n)
        })
        .ok()
        .map(drop)
}

impl Drop for Held {
    fn drop(&mut self) {
        self.queued.fetch_sub(self.n, Ordering::SeqCst);
        QUEUED.fetch_sub(self.n, Ordering::SeqCst);
    }
}

/// The line that stands for live output a slow client was not sent.
pub fn not_shown(bytes: usize) -> String {
    format!(
        "\n[{bytes} bytes of output not shown as they came: this client read too slowly; \
         the command's result holds its output]\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_gets_its_share_and_gets_it_back() {
        let turn = LiveBytes::default();
        let first = turn.take(PER_TURN - 10).unwrap();
        assert!(turn.take(11).is_none(), "past the turn's bound");
        let small = turn.take(10).unwrap();
        drop(first);
        drop(small);
        assert!(turn.take(PER_TURN).is_some());
    }
}
