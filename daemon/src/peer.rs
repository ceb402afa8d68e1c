//! Per-RPC peer check: the caller's uid (SO_PEERCRED) must equal the
//! daemon's, and it must not be a sandboxed tool command (nor started by
//! one), otherwise PERMISSION_DENIED. Also counts RPCs for `status`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

/// The process id of the client that sent `request` (SO_PEERCRED), if the
/// kernel gave one.
pub fn pid_of<T>(request: &Request<T>) -> Option<u32> {
    request
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|info| info.peer_cred)
        .and_then(|cred| cred.pid())
        .and_then(|pid| u32::try_from(pid).ok())
}

/// What the walk up `/proc` reads of a process.
trait Procs {
    /// Its parent and start time.
    fn stat(&self, pid: u32) -> Option<(u32, u64)>;
    /// Whether it is a confined tool supervisor.
    fn is_supervisor(&self, pid: u32) -> bool;
}

/// The live `/proc`.
struct LiveProcs;

impl Procs for LiveProcs {
    fn stat(&self, pid: u32) -> Option<(u32, u64)> {
        let stat = agentx_shared::procfs::stat(pid)?;
        Some((u32::try_from(stat.ppid).ok()?, stat.start_time))
    }

    fn is_supervisor(&self, pid: u32) -> bool {
        let marker = format!("{}\0", agentx_shared::sandbox::CONFINED_SUPERVISOR);
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.starts_with(marker.as_bytes()))
    }
}

/// How many processes known to be outside every sandbox are kept.
const OUTSIDE_KEPT: usize = 64;

/// Processes found outside every sandbox, by pid and start time (pids are
/// reused, start times are not), most recently useful first. A walk up
/// from a new client stops at the first of them: their ancestors were
/// checked when they were found, and a process never gains an ancestor.
/// The clients themselves are not kept (each connects once or twice);
/// their shells, terminals and session managers are.
#[derive(Default)]
pub struct Outside(Mutex<VecDeque<(u32, u64)>>);

impl Outside {
    fn knows(&self, process: (u32, u64)) -> bool {
        let Ok(mut known) = self.0.lock() else {
            return false;
        };
        let Some(at) = known.iter().position(|&p| p == process) else {
            return false;
        };
        if let Some(hit) = known.remove(at) {
            known.push_front(hit);
        }
        true
    }

    fn learn(&self, processes: &[(u32, u64)]) {
        if let Ok(mut known) = self.0.lock() {
            for &p in processes {
                if !known.contains(&p) {
                    known.push_front(p);
                }
            }
            known.truncate(OUTSIDE_KEPT);
        }
    }
}

/// Whether process `pid` runs under a confined tool supervisor: one of
/// its ancestors is one. Whatever a command starts stays below its
/// supervisor (a child subreaper) while the supervisor lives. A walk that
/// reaches agentd, init or a process known to be outside teaches its
/// ancestors to `outside`.
fn sandboxed(procs: &impl Procs, pid: u32, me: u32, outside: &Outside) -> bool {
    let mut seen = Vec::new();
    let mut pid = pid;
    // Bounded: a walk never loops on a pid reused meanwhile.
    for _ in 0..64 {
        if pid <= 1 || pid == me {
            outside.learn(seen.get(1..).unwrap_or_default());
            return false;
        }
        let Some((parent, started)) = procs.stat(pid) else {
            return false;
        };
        if outside.knows((pid, started)) {
            outside.learn(seen.get(1..).unwrap_or_default());
            return false;
        }
        if procs.is_supervisor(pid) {
            return true;
        }
        seen.push((pid, started));
        pid = parent;
    }
    false
}

/// Whether a connection's peer runs under a confined tool supervisor,
/// found at its first RPC and kept for the connection's others (one walk
/// up `/proc` per connection, not per call). Sound because a process never
/// gains an ancestor: one outside every sandbox when it connected stays
/// outside, and one inside stays below its supervisor (a subreaper).
#[derive(Clone, Default)]
pub struct Verdict(Arc<OnceLock<bool>>);

#[derive(Clone)]
pub struct PeerCheck {
    uid: u32,
    served: Arc<AtomicU64>,
    outside: Arc<Outside>,
}

impl PeerCheck {
    pub fn new(uid: u32, served: Arc<AtomicU64>) -> Self {
        Self {
            uid,
            served,
            outside: Arc::default(),
        }
    }
}

/// Whether the peer of `request` is a sandboxed command (kept per
/// connection when the connection carries a [`Verdict`]).
fn is_sandboxed<T>(request: &Request<T>, outside: &Outside) -> bool {
    let me = std::process::id();
    let walk = || pid_of(request).is_some_and(|pid| sandboxed(&LiveProcs, pid, me, outside));
    match request.extensions().get::<Verdict>() {
        Some(Verdict(known)) => *known.get_or_init(walk),
        None => walk(),
    }
}

impl tonic::service::Interceptor for PeerCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let peer_uid = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .map(|cred| cred.uid());
        match peer_uid {
            Some(uid) if uid == self.uid && is_sandboxed(&request, &self.outside) => {
                tracing::warn!("refused an RPC from a sandboxed tool command");
                Err(Status::permission_denied(
                    "a command in agentx's sandbox may not call agentd",
                ))
            }
            Some(uid) if uid == self.uid => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Ok(request)
            }
            Some(uid) => {
                tracing::warn!(peer_uid = uid, "refused an RPC from another user");
                Err(Status::permission_denied(format!(
                    "agentd serves uid {} only; this client runs as uid {uid}",
                    self.uid
                )))
            }
            None => Err(Status::permission_denied(
                "agentd could not identify the caller (no peer credentials)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection's verdict, once found, stands for its later calls
    /// (the walk up `/proc` is not made again).
    #[test]
    fn a_connections_verdict_is_found_once_and_kept() {
        let verdict = Verdict::default();
        let mut first = Request::new(());
        first.extensions_mut().insert(verdict.clone());
        // No peer credentials: the walk finds no sandbox.
        assert!(!is_sandboxed(&first, &Outside::default()));
        assert_eq!(verdict.0.get(), Some(&false));

        let confined = Verdict::default();
        let _ = confined.0.set(true);
        let mut later = Request::new(());
        later.extensions_mut().insert(confined);
        assert!(is_sandboxed(&later, &Outside::default()));
    }

    /// A process tree: pid → (parent, start time, is a supervisor), and
    /// the reads the walks made.
    #[derive(Default)]
    struct Tree {
        procs: std::collections::HashMap<u32, (u32, u64, bool)>,
        reads: std::cell::Cell<usize>,
    }

    impl Tree {
        fn add(&mut self, pid: u32, parent: u32, supervisor: bool) {
            self.procs
                .insert(pid, (parent, u64::from(pid) * 10, supervisor));
        }
    }

    impl Procs for Tree {
        fn stat(&self, pid: u32) -> Option<(u32, u64)> {
            self.reads.set(self.reads.get() + 1);
            self.procs
                .get(&pid)
                .map(|&(parent, started, _)| (parent, started))
        }

        fn is_supervisor(&self, pid: u32) -> bool {
            self.reads.set(self.reads.get() + 1);
            self.procs.get(&pid).is_some_and(|p| p.2)
        }
    }

    /// init 1 → session 10 → shell 20 → clients 30, 31; agentd 50 (below
    /// the session) → supervisor 60 → command 70 → its child 80.
    fn tree() -> Tree {
        let mut t = Tree::default();
        for (pid, parent, supervisor) in [
            (10, 1, false),
            (20, 10, false),
            (30, 20, false),
            (31, 20, false),
            (50, 10, false),
            (60, 50, true),
            (70, 60, false),
            (80, 70, false),
        ] {
            t.add(pid, parent, supervisor);
        }
        t
    }

    #[test]
    fn a_walk_stops_at_an_ancestor_known_to_be_outside() {
        let t = tree();
        let outside = Outside::default();
        assert!(!sandboxed(&t, 30, 50, &outside));
        let first = t.reads.replace(0);
        assert_eq!(first, 6, "30, 20 and 10: a stat and a cmdline each");
        assert!(!sandboxed(&t, 31, 50, &outside));
        assert_eq!(
            t.reads.get(),
            3,
            "31 in full, then 20's stat finds it known"
        );
        // The clients themselves are not kept.
        assert!(!outside.knows((30, 300)));
    }

    #[test]
    fn a_sandboxed_command_is_found_whatever_is_known() {
        let t = tree();
        let outside = Outside::default();
        // Everything above agentd, and agentd's other children, known.
        assert!(!sandboxed(&t, 30, 50, &outside));
        outside.learn(&[(50, 500), (10, 100)]);
        assert!(sandboxed(&t, 80, 50, &outside));
        assert!(sandboxed(&t, 70, 50, &outside));
        assert!(!outside.knows((70, 700)) && !outside.knows((60, 600)));
    }

    #[test]
    fn a_reused_pid_or_an_unfinished_walk_teaches_nothing() {
        let mut t = tree();
        let outside = Outside::default();
        assert!(!sandboxed(&t, 30, 50, &outside));
        // The shell 20 exits and its pid is reused by a supervisor's child.
        t.procs.insert(20, (60, 999, false));
        assert!(
            sandboxed(&t, 31, 50, &outside),
            "20 is not the shell it was"
        );
        // A walk that loses its way (a parent gone) learns nothing.
        let mut t = tree();
        let outside = Outside::default();
        t.procs.remove(&10);
        t.add(40, 20, false);
        t.add(41, 40, false);
        assert!(!sandboxed(&t, 41, 50, &outside));
        assert!(outside.0.lock().unwrap().is_empty());
    }

    #[test]
    fn the_known_are_bounded_and_the_useful_stay() {
        let outside = Outside::default();
        outside.learn(&[(1000, 1)]);
        for pid in 0..OUTSIDE_KEPT as u32 * 2 {
            outside.learn(&[(pid + 2000, 1)]);
            assert!(outside.knows((1000, 1)), "a hit keeps it");
        }
        assert_eq!(outside.0.lock().unwrap().len(), OUTSIDE_KEPT);
    }
}
