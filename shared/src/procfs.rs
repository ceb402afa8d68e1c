//! Reads `/proc/PID/stat` in one place: a process's state, parent, session
//! and start time, parsed after the LAST `)` (the command name may hold both).

/// The fields of `/proc/PID/stat` that agentx and agentd use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `T` (stopped), `t` (traced), `Z` (zombie), …
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: i32,
    /// Field 6: the session id.
    pub session: i32,
    /// Field 22: when the process started, in clock ticks since boot (with
    /// the pid, it names one process: pids are reused, start times are not).
    pub start_time: u64,
}

impl Stat {
    /// Whether the process is stopped (`T`, or `t` under a tracer).
    pub fn stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }

    /// Whether the process is a zombie (it runs nothing any more).
    pub fn zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// Process `pid`'s stat, if it runs (or is a zombie) and `/proc` is there.
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// When process `pid` started (clock ticks since boot), if it runs.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Parses the text of a `/proc/PID/stat`: `pid (comm) state ppid …`. The
/// command name may hold spaces and parentheses, `)` and `) ` included, so
/// the fields are read after the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_ascii_whitespace().take(20).collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let mut state = field(3)?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return None;
    };
    Some(Stat {
        state,
        ppid: field(4)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line whose fields after the name are `state 7 8 9 … 21 start`.
    fn line(comm: &str, state: char, start: u64) -> String {
        let middle: Vec<String> = (4..22).map(|n| n.to_string()).collect();
        format!("42 ({comm}) {state} {} {start} 0 0 0\n", middle.join(" "))
    }

    #[test]
    fn fields_are_read_after_the_name() {
        let s = parse_stat(&line("sleep", 'S', 12345)).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'S',
                ppid: 4,
                session: 6,
                start_time: 12345
            }
        );
        assert!(!s.stopped() && !s.zombie());
    }

    #[test]
    fn a_hostile_name_does_not_shift_the_fields() {
        // A command may be named anything up to 15 bytes: here one that
        // looks like the end of the name and a state of its own.
        for comm in ["a) R 1 2 (", ") Z ", "x y", "((", "))", ") ", "a)b"] {
            let s = parse_stat(&line(comm, 'T', 777)).unwrap();
            assert_eq!((s.state, s.ppid, s.session, s.start_time), ('T', 4, 6, 777));
            assert!(s.stopped(), "{comm:?}");
        }
    }

    #[test]
    fn a_truncated_or_garbled_line_is_none() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("42 (x"), None);
        assert_eq!(parse_stat("42 (x) S 1 2"), None);
        assert_eq!(parse_stat(&line("x", 'S', 1).replace(" S ", " SS ")), None);
    }

    #[test]
    fn this_process_is_found() {
        let me = stat(std::process::id()).unwrap();
        assert!(me.start_time > 0);
        assert_eq!(start_time(std::process::id()), Some(me.start_time));
    }
}
