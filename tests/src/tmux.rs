//! The REPL driven as a person would: `agentx` in a real terminal (a tmux pane on a
//! private tmux server), keys sent with send-keys, the screen read with capture-pane.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::TestEnv;
use crate::fake_model::FakeModel;

/// One pane running `agentx`; the tmux server goes when this is dropped.
pub struct Pane {
    socket: PathBuf,
}

/// Whether tmux is here (else the caller skips, or fails under
/// `AGENTX_TESTS_NO_SKIP`).
pub fn available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Single-quoted for sh.
fn quote(s: &OsStr) -> String {
    format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"))
}

impl Pane {
    /// Starts `agentx ARGS` for `env`, talking to `model`, in a 160×50
    /// terminal. `None` when tmux is missing (and skipping is allowed).
    pub fn start(env: &TestEnv, model: &FakeModel, args: &[&str]) -> Option<Pane> {
        if !available() {
            crate::skip("tmux not found (apt-get install tmux)");
            return None;
        }
        let mut cmd = env.agentx(args);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", crate::TEST_KEY);
        Self::start_command(env, &cmd)
    }

    /// Starts `cmd` (an `env.agentx(..)` command, its environment and folder
    /// as set) in a 160×50 terminal. `None` when tmux is missing.
    pub fn start_command(env: &TestEnv, cmd: &Command) -> Option<Pane> {
        if !available() {
            crate::skip("tmux not found (apt-get install tmux)");
            return None;
        }
        // The pane runs a script that sets exactly this command's
        // environment and folder, then execs agentx.
        let mut script = String::from("#!/bin/sh\n");
        for (key, value) in cmd.get_envs() {
            match value {
                Some(v) => {
                    script.push_str(&format!("export {}={}\n", key.to_string_lossy(), quote(v)))
                }
                None => script.push_str(&format!("unset {}\n", key.to_string_lossy())),
            }
        }
        script.push_str("export TERM=xterm-256color\n");
        if let Some(dir) = cmd.get_current_dir() {
            script.push_str(&format!("cd {}\n", quote(dir.as_os_str())));
        }
        script.push_str(&format!("exec {}", quote(cmd.get_program())));
        for arg in cmd.get_args() {
            script.push(' ');
            script.push_str(&quote(arg));
        }
        script.push('\n');
        // Each pane its own tmux server: one just killed may still be
        // going away.
        static PANES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = PANES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = env.root().to_path_buf();
        let path = root.join(format!("pane-{n}.sh"));
        std::fs::write(&path, script).unwrap();
        let pane = Pane {
            socket: root.join(format!("tmux-{n}.sock")),
        };
        let started = pane
            .tmux(["new-session", "-d", "-x", "160", "-y", "50", "sh"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(started.success(), "tmux did not start");
        // Keep the pane (and its last screen) when agentx exits.
        pane.tmux(["set-option", "-g", "remain-on-exit", "on"])
            .status()
            .unwrap();
        Some(pane)
    }

    fn tmux<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("tmux");
        cmd.arg("-S").arg(&self.socket).args(args);
        cmd
    }

    /// Types `text` (literally), without Enter.
    pub fn type_text(&self, text: &str) {
        let ok = self.tmux(["send-keys", "-l", "--", text]).status().unwrap();
        assert!(ok.success());
    }

    /// Presses one key by tmux name (`Enter`, `C-c`, `Tab`).
    pub fn key(&self, key: &str) {
        let ok = self.tmux(["send-keys", key]).status().unwrap();
        assert!(ok.success());
    }

    /// Types a line and presses Enter.
    pub fn line(&self, text: &str) {
        self.type_text(text);
        self.key("Enter");
    }

    /// The screen and its scrollback, as text.
    pub fn screen(&self) -> String {
        let out = self
            .tmux(["capture-pane", "-p", "-J", "-S", "-1000"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen and its scrollback with the styling escapes tmux keeps
    /// (SGR: bold, colours), to check how text was shown.
    pub fn styled_screen(&self) -> String {
        let out = self
            .tmux(["capture-pane", "-p", "-e", "-J", "-S", "-1000"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `needle` `n` times (the screen when it
    /// did); panics with the screen after 20 s.
    pub fn wait_for_n(&self, needle: &str, n: usize) -> String {
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= n {
                return screen;
            }
            assert!(
                Instant::now() < give_up,
                "the screen never showed {needle:?} {n} time(s):\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// Waits until the screen shows `needle`.
    pub fn wait_for(&self, needle: &str) -> String {
        self.wait_for_n(needle, 1)
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(["kill-server"]).status();
    }
}
