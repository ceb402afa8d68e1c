//! The rule that settles two lines of one conversation (this machine's and the server's):
//! push ours, take theirs, or keep ours as a fork and take theirs. Pure: tested without a server.

/// What to do with a conversation whose line on the server is not the one
/// this machine last shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The server's line is a prefix of ours (or the same): push ours.
    PushOurs,
    /// Ours is a prefix of the server's: take the records it has beyond.
    TakeTheirs,
    /// Both went on from a common start: ours is kept as a fork (new id),
    /// then the conversation takes theirs. Never interleaved.
    ForkOursTakeTheirs,
}

/// The rule, given how many records both lines start with (`shared`) and
/// how long ours (`mine`) and the server's (`theirs`) are.
pub fn decide(shared: u64, mine: u64, theirs: u64) -> Settle {
    if shared == theirs {
        Settle::PushOurs
    } else if shared < mine {
        Settle::ForkOursTakeTheirs
    } else {
        Settle::TakeTheirs
    }
}

#[cfg(test)]
mod tests {
    use super::super::copy::{Record, shared_prefix};
    use super::*;

    fn line(texts: &[&str]) -> Vec<Record> {
        texts
            .iter()
            .enumerate()
            .map(|(n, text)| Record {
                at: n as i64,
                item: serde_json::json!({"type": "user", "text": text}),
            })
            .collect()
    }

    /// The rule for our line and the server's, compared from the start.
    fn decided(ours: &[&str], theirs: &[&str]) -> Settle {
        let local: Vec<(Record, u64)> = line(ours).into_iter().zip(1..).collect();
        let remote = line(theirs);
        let shared = shared_prefix(&local, &remote, 0);
        decide(shared, local.len() as u64, remote.len() as u64)
    }

    #[test]
    fn the_same_line_or_ours_further_is_pushed() {
        assert_eq!(decided(&["a", "b"], &["a", "b"]), Settle::PushOurs);
        assert_eq!(decided(&["a", "b", "c"], &["a"]), Settle::PushOurs);
        assert_eq!(decided(&["a"], &[]), Settle::PushOurs);
    }

    #[test]
    fn theirs_further_is_taken() {
        assert_eq!(decided(&["a"], &["a", "b", "c"]), Settle::TakeTheirs);
        assert_eq!(decided(&[], &["a"]), Settle::TakeTheirs);
    }

    #[test]
    fn both_gone_on_from_one_point_keeps_ours_as_a_fork() {
        assert_eq!(
            decided(&["a", "mine"], &["a", "theirs"]),
            Settle::ForkOursTakeTheirs
        );
        // A rollback here then a turn: same length, different line.
        assert_eq!(
            decided(&["a", "b2"], &["a", "b", "c"]),
            Settle::ForkOursTakeTheirs
        );
        // Nothing shared at all.
        assert_eq!(decided(&["x"], &["y"]), Settle::ForkOursTakeTheirs);
    }
}
