//! The one thread that starts every tool supervisor and MCP server. It lives
//! as long as agentd, so a child's death signal fires only when agentd dies.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
//! not the process: a supervisor forked on a tokio thread (a blocking-pool
//! thread retires after 10 s idle; `block_in_place` hands a worker over to
//! that pool) would be told agentd died while agentd runs on, and kill its
//! command halfway. This thread blocks on its queue for agentd's whole life.

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc;

use tokio::sync::oneshot;

/// A command to start, the runtime its child is registered with, and where
/// the child (or why it could not start) goes.
struct Request {
    command: std::process::Command,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<tokio::process::Child>>,
}

/// The spawner's queue; its receiving thread never ends (the sender is
/// never dropped), so the thread lives until the process does.
static QUEUE: OnceLock<mpsc::Sender<Request>> = OnceLock::new();

/// Starts `command` from the spawner thread; the child is registered with
/// the current runtime. The command (and the pipe ends it holds) is dropped
/// on that thread once the child runs.
pub(crate) async fn spawn(command: std::process::Command) -> io::Result<tokio::process::Child> {
    let (reply, answer) = oneshot::channel();
    let request = Request {
        command,
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    queue()
        .send(request)
        .map_err(|_| io::Error::other("agentd's tool spawner thread could not be started"))?;
    answer
        .await
        .map_err(|_| io::Error::other("agentd's tool spawner thread is gone"))?
}

fn queue() -> &'static mpsc::Sender<Request> {
    QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        // Should the thread not start, `rx` is dropped and every send fails
        // with a clear error instead of a command forked elsewhere.
        let _ = std::thread::Builder::new()
            .name("agentd-spawner".into())
            .spawn(move || serve(rx));
        tx
    })
}

fn serve(requests: mpsc::Receiver<Request>) {
    while let Ok(Request {
        command,
        runtime,
        reply,
    }) = requests.recv()
    {
        let _entered = runtime.enter();
        let mut command = tokio::process::Command::from(command);
        let spawned = command.spawn();
        // The command keeps its copies of the pipe ends the child got:
        // dropped here, before the caller reads, or the output never ends.
        drop(command);
        // A caller that went away: its supervisor is told to kill the
        // command (the runtime reaps it), never left running unwatched.
        if let Err(Ok(child)) = reply.send(spawned)
            && let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}
