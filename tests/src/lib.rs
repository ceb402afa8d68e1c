//! Test support for end-to-end tests: a throwaway profile (`AGENTX_HOME` in
//! a temp dir), the real `agentx`/`agentd` binaries, and daemon bookkeeping
//! so no test leaves a daemon running.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod at_server;
pub mod blackhole;
pub mod fake_model;
pub mod postgres;
pub mod schema;
pub mod tmux;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The API key tests hand to agentx; it must never reach a file.
pub const TEST_KEY: &str = "sk-test-7f3a9c1e-never-store-me";

/// Directory holding the built `agentx` and `agentd` (target/debug or
/// target/release), found from the running test executable.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    for name in ["agentx", "agentd"] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: build the workspace first (cargo test --workspace builds it)",
            dir.join(name).display()
        );
    }
    dir
}

pub fn agentx_bin() -> PathBuf {
    bin_dir().join("agentx")
}

pub fn agentd_bin() -> PathBuf {
    bin_dir().join("agentd")
}

/// One isolated world: a profile directory and a folder to chat in.
pub struct TestEnv {
    root: tempfile::TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    /// Extra environment for every command of this env (e.g. the provider).
    pub extra_env: Vec<(String, String)>,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("agentx-e2e-")
            .tempdir()
            .unwrap();
        let home = root.path().join("profile");
        let work = root.path().join("work");
        std::fs::create_dir(&work).unwrap();
        // The temporary directory of every process of this env (agentd puts
        // its turns' private TMPDIRs there): gone with the env, even after
        // the agentd that made them was killed.
        std::fs::create_dir(root.path().join("tmp")).unwrap();
        Self {
            root,
            home,
            work,
            extra_env: Vec::new(),
        }
    }

    /// The temp directory all of this env's files live under.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.home.join("agentd.sock")
    }

    /// An `agentx` command bound to this profile, run in the work folder.
    pub fn agentx<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(agentx_bin());
        self.scrub(&mut cmd);
        cmd.args(args).current_dir(&self.work).stdin(Stdio::null());
        cmd
    }

    /// An `agentd` command bound to this profile.
    pub fn agentd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(agentd_bin());
        self.scrub(&mut cmd);
        cmd.args(args).current_dir("/").stdin(Stdio::null());
        cmd
    }

    fn scrub(&self, cmd: &mut Command) {
        for var in [
            "AGENTX_SOCKET",
            "AGENTX_AGENTD",
            "AGENTX_LOG",
            "RUST_LOG",
            "LISTEN_FDS",
            "LISTEN_PID",
            "NOTIFY_SOCKET",
            "JOURNAL_STREAM",
            "OPENAI_API_KEY",
            "AGENTX_API_KEY",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("AGENTX_HOME", &self.home);
        cmd.env("TMPDIR", self.root().join("tmp"));
        // Fast retries and stall detection, so failure tests take
        // milliseconds; the behaviour is the same as with the defaults.
        cmd.env("AGENTX_RETRY_BASE_MS", "10");
        cmd.env("AGENTX_STREAM_IDLE_MS", "2000");
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
    }

    /// `agentx ARGS` talking to `model` with a test key, fed `stdin`,
    /// run to completion.
    pub fn chat<I, S>(&self, model: &fake_model::FakeModel, args: I, stdin: &str) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.chat_command(model, args, stdin)
            .wait_with_output()
            .unwrap()
    }

    /// [`TestEnv::chat`] with every tool call approved (`--approval auto`).
    pub fn chat_auto(&self, model: &fake_model::FakeModel, stdin: &str) -> Output {
        self.chat(model, ["--approval", "auto"], stdin)
    }

    /// A turn's start as a gRPC client sends it: this env's work folder, the
    /// default agent, `model` as the provider with a test key.
    pub fn turn_start(
        &self,
        model: &fake_model::FakeModel,
        message: &str,
        approval: agentx_shared::proto::ApprovalPolicy,
    ) -> agentx_shared::proto::TurnStart {
        use agentx_shared::proto::{ProviderSettings, Scope, TurnStart};
        TurnStart {
            scope: Some(Scope {
                folder: std::fs::canonicalize(&self.work)
                    .unwrap()
                    .display()
                    .to_string(),
                agent: String::new(),
            }),
            message: message.to_owned(),
            approval: approval as i32,
            provider: Some(ProviderSettings {
                base_url: model.base_url(),
                model: "fake-model".into(),
                api_key: "sk-test".into(),
                ..ProviderSettings::default()
            }),
            ..TurnStart::default()
        }
    }

    /// Writes `<profile>/config.toml` (making the profile, mode 0700).
    pub fn write_config(&self, text: &str) {
        std::fs::create_dir_all(&self.home).unwrap();
        std::fs::set_permissions(
            &self.home,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        std::fs::write(self.home.join("config.toml"), text).unwrap();
    }

    /// The peak resident memory the (one) running agentd reached, in MiB.
    pub fn agentd_peak_mib(&self) -> u64 {
        let pid = self.daemon_pids()[0];
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib >> 10
    }

    /// `agentx status --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        json_out(&self.run(["status", "--json"]))
    }

    /// `agentx sync --json`, which must exit 0, parsed.
    pub fn sync(&self) -> serde_json::Value {
        let out = self.run(["sync", "--json"]);
        assert_code(&out, 0);
        json_out(&out)
    }

    /// Runs `agentx search --json ARGS` until its hits satisfy `ok` (the
    /// indexer works in the background), for at most a minute; returns
    /// that run's output.
    pub fn search_until(&self, args: &[&str], ok: impl Fn(&[serde_json::Value]) -> bool) -> Output {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut all = vec!["search", "--json"];
            all.extend_from_slice(args);
            let out = self.run(&all);
            let hits = json_out(&out);
            if hits.as_array().is_some_and(|hits| ok(hits)) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "search {args:?} never matched: {hits}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Like [`TestEnv::chat`] but returns the running child.
    pub fn chat_command<I, S>(
        &self,
        model: &fake_model::FakeModel,
        args: I,
        stdin: &str,
    ) -> std::process::Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use std::io::Write as _;
        let mut cmd = self.agentx(args);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", TEST_KEY)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        let text = stdin.to_owned();
        std::thread::spawn(move || {
            let _ = input.write_all(text.as_bytes());
        });
        child
    }

    /// Every file under the profile, for secrecy and layout checks.
    pub fn profile_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    walk(&path, out);
                } else if kind.is_file() {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.home, &mut out);
        out.sort();
        out
    }

    /// The files under the profile whose bytes contain `needle` (secrets
    /// and cleared text must be in none).
    pub fn profile_files_containing(&self, needle: &str) -> Vec<PathBuf> {
        self.profile_files()
            .into_iter()
            .filter(|f| {
                std::fs::read(f).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
            })
            .collect()
    }

    /// Runs `agentx ARGS` to completion.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.agentx(args).output().unwrap()
    }

    /// Live agentd processes serving this profile (found through /proc).
    pub fn daemon_pids(&self) -> Vec<i32> {
        let needle = format!("AGENTX_HOME={}", self.home.display());
        let mut pids = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if comm.trim() != "agentd" {
                continue;
            }
            if exited(&entry.path()) {
                continue; // a zombie whose threads are all gone is not running
            }
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            if environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        pids
    }

    /// Waits until exactly `n` daemons serve this profile; returns their pids.
    pub fn wait_daemons(&self, n: usize, timeout: Duration) -> Vec<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let pids = self.daemon_pids();
            if pids.len() == n || Instant::now() > deadline {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills every daemon of this profile.
    pub fn kill_daemons(&self) {
        for pid in self.daemon_pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        self.wait_daemons(0, Duration::from_secs(5));
    }

    /// Makes the temp tree reachable by other users (for the other-uid test).
    pub fn open_root_for_others(&self) {
        std::fs::set_permissions(self.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.kill_daemons();
    }
}

/// Polls `agentx status --json` until `check` accepts it (10 s at most).
pub fn wait_status(env: &TestEnv, check: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = env.run(["status", "--json"]);
        if let Ok(status) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            && (check(&status) || Instant::now() > deadline)
        {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "status never became ready: {}",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A zombie (`/proc/PID` given) whose last thread has exited too: the leader
/// of a multi-threaded process turns `Z` while other threads still hold its
/// files (sockets, locks) open.
fn exited(proc_dir: &Path) -> bool {
    let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
    let zombie = stat
        .split(") ")
        .nth(1)
        .is_some_and(|rest| rest.starts_with('Z'));
    zombie && std::fs::read_dir(proc_dir.join("task")).map_or(0, |d| d.count()) <= 1
}

/// Waits for `pid` to exit (it must not be our child, or must be reaped elsewhere).
pub fn wait_pid_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if kill(Pid::from_raw(pid), None).is_err() {
            return true;
        }
        if exited(Path::new(&format!("/proc/{pid}"))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Reports a test that cannot run here and returns to let it end: libtest
/// counts it as `ok`, so the reason goes straight to stderr (past the
/// output capture) as a visible `SKIPPED: <test>: <why>` line. With
/// `AGENTX_TESTS_NO_SKIP=1` (CI that is known to run as root) a skip fails
/// the test instead.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    assert!(
        std::env::var_os("AGENTX_TESTS_NO_SKIP").is_none(),
        "{test} cannot run here ({why}) and AGENTX_TESTS_NO_SKIP is set"
    );
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: {test}: {why} (cargo test counts it as ok)"
    );
}

/// Whether the tests run as root (mounts, chown, other uids).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The JSON document a successful `--json` command printed.
#[track_caller]
pub fn json_out(out: &Output) -> serde_json::Value {
    assert_code(out, 0);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// Every file under `root` (relative path) with its content.
pub fn files(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// stdout of a finished command as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr of a finished command as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a command's exit code, showing its output when it differs.
#[track_caller]
pub fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// A gRPC channel straight to this env's daemon socket.
pub async fn channel(socket: &Path) -> tonic::transport::Channel {
    agentx_shared::transport::connect(socket).await.unwrap()
}

/// Opens a turn over gRPC on `socket` with `start`, as any client would:
/// the sender for approvals and cancels, and the turn's events.
pub async fn open_turn(
    socket: &Path,
    start: agentx_shared::proto::TurnStart,
) -> (
    tokio::sync::mpsc::Sender<agentx_shared::proto::TurnInput>,
    tonic::Streaming<agentx_shared::proto::TurnEvent>,
) {
    use agentx_shared::proto::{TurnInput, turn_input};
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(TurnInput {
        input: Some(turn_input::Input::Start(start)),
    })
    .await
    .unwrap();
    let events = agentx_shared::proto::turns_client::TurnsClient::new(channel(socket).await)
        .run_turn(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, events)
}
