//! agentd's one shutdown handle, made by the server and cloned to whoever must notice a stop:
//! requested (signal, RPC, lost socket) → the server stops serving; stopping → turns and tools end.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How far a stop has got; it only ever moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Running,
    /// Someone asked agentd to stop: it serves no new connection.
    Requested,
    /// The socket is gone: running turns end with a record (and an
    /// after-snapshot) and tool commands are killed.
    Stopping,
}

/// One stop, seen by everyone it was cloned to.
#[derive(Clone)]
pub struct Shutdown {
    phase: Arc<watch::Sender<Phase>>,
    /// One receiver per tool command (or supervisor) still alive; it
    /// carries nothing, it is only counted.
    tools: Arc<watch::Sender<()>>,
    /// One receiver per turn in flight, counted the same way.
    turns: Arc<watch::Sender<()>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self {
            phase: Arc::new(watch::Sender::new(Phase::Running)),
            tools: Arc::new(watch::Sender::new(())),
            turns: Arc::new(watch::Sender::new(())),
        }
    }
}

impl Shutdown {
    /// Asks agentd to stop (again: nothing more happens).
    pub fn request(&self) {
        self.advance(Phase::Requested);
    }

    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        *self.phase.borrow() >= Phase::Requested
    }

    /// Resolves once a stop is asked for.
    pub async fn wait_requested(&self) {
        self.wait_for(Phase::Requested).await;
    }

    /// Running turns and tool commands end now (the server, once it no
    /// longer accepts connections).
    pub fn begin_stopping(&self) {
        self.advance(Phase::Stopping);
    }

    /// Whether running turns and tools are to end.
    pub fn stopping(&self) -> bool {
        *self.phase.borrow() == Phase::Stopping
    }

    /// Resolves once running turns and tools are to end.
    pub async fn wait_stopping(&self) {
        self.wait_for(Phase::Stopping).await;
    }

    /// What a tool command holds while it (or its supervisor) is alive.
    pub fn tool(&self) -> ToolStop {
        ToolStop {
            phase: self.phase.subscribe(),
            _alive: self.tools.subscribe(),
        }
    }

    /// What a turn holds from its start to its end (see [`Shutdown::turns`]).
    pub fn turn(&self) -> TurnHeld {
        TurnHeld {
            _alive: self.turns.subscribe(),
        }
    }

    /// How many turns are in flight now.
    pub fn turns(&self) -> usize {
        self.turns.receiver_count()
    }

    /// Waits (at most `bound`) until every [`ToolStop`] is dropped: `false`
    /// if some were still held at the bound.
    pub async fn tools_gone(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        while self.tools.receiver_count() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    fn advance(&self, to: Phase) {
        self.phase.send_if_modified(|phase| {
            let moved = *phase < to;
            if moved {
                *phase = to;
            }
            moved
        });
    }

    async fn wait_for(&self, at_least: Phase) {
        let mut rx = self.phase.subscribe();
        // The sender lives as long as `self`: this never fails.
        let _ = rx.wait_for(|phase| *phase >= at_least).await;
    }
}

/// A turn in flight, counted until dropped.
pub struct TurnHeld {
    _alive: watch::Receiver<()>,
}

/// A tool command's view of the stop; counted as alive until dropped.
#[derive(Clone)]
pub struct ToolStop {
    phase: watch::Receiver<Phase>,
    _alive: watch::Receiver<()>,
}

impl ToolStop {
    /// Whether the command must end (or not start).
    pub fn stopping(&self) -> bool {
        *self.phase.borrow() == Phase::Stopping
    }

    /// Resolves once the command must end; `false` if nobody can stop
    /// agentd any more (the handle is gone).
    pub async fn wait(&mut self) -> bool {
        self.phase
            .wait_for(|phase| *phase == Phase::Stopping)
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_moves_forward_only_and_waits_for_tools_to_go() {
        let shutdown = Shutdown::default();
        let seen = shutdown.clone();
        assert!(!seen.requested() && !seen.stopping());
        shutdown.request();
        seen.wait_requested().await;
        assert!(seen.requested() && !seen.stopping());
        let mut tool = seen.tool();
        assert!(!tool.stopping());
        assert!(!shutdown.tools_gone(Duration::ZERO).await);
        shutdown.begin_stopping();
        shutdown.request();
        assert!(tool.wait().await && tool.stopping() && seen.stopping());
        seen.wait_stopping().await;
        drop(tool);
        assert!(shutdown.tools_gone(Duration::ZERO).await);
    }
}
