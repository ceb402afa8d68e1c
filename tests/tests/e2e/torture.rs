//! kill -9 torture (what was acknowledged must already be durable): a
//! seeded run of answers, shell tool calls, one-shots, snapshots and
//! rewinds, with agentd SIGKILLed at a random instant of every round.
//!
//! After each kill a fresh agentd must show every acknowledged turn (a
//! client that exited 0 and printed the answer) in its conversation, no
//! file quarantined, tool calls paired (the next turn succeeds: the fake
//! model answers an unpaired call with 400), the conversation continuing
//! with the model seeing every earlier turn, and snapshots that still
//! rewind the folder exactly.
//!
//! The seed is fixed (so a failure can be replayed) and printed with the
//! round log when the test fails; `AGENTX_TORTURE_SEED=N` picks another.

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use agentx_shared::rng::Rng;
use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, stderr, stdout, wait_pid_gone};
use agentx_tests::{files, json_out};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const DEFAULT_SEED: u64 = 0x00a9_e47d_2026_0010;
const ROUNDS: usize = 48;
/// Kills that must reach a live agentd for the run to count.
const MIN_KILLS: usize = 40;
/// No single command may take longer than this (a hang is a failure).
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// Prints the seed and what happened when the test fails.
struct Report {
    seed: u64,
    log: Vec<String>,
}

impl Drop for Report {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let tail = self.log.len().saturating_sub(30);
            eprintln!(
                "torture failed with seed {} (replay: AGENTX_TORTURE_SEED={}); last rounds:\n  {}",
                self.seed,
                self.seed,
                self.log[tail..].join("\n  ")
            );
        }
    }
}

/// On failure, copies the profile aside for a post-mortem (declared after
/// the env, so it runs before the env's temp dir goes).
struct KeepProfile<'a>(&'a TestEnv);

impl Drop for KeepProfile<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let kept =
                std::env::temp_dir().join(format!("agentx-torture-profile-{}", std::process::id()));
            let copied = Command::new("cp")
                .arg("-a")
                .arg(&self.0.home)
                .arg(&kept)
                .status()
                .is_ok_and(|s| s.success());
            if copied {
                eprintln!("the profile is kept in {}", kept.display());
            }
        }
    }
}

/// Waits for `child` at most [`COMMAND_LIMIT`]; a hang fails the test.
fn finish(child: Child, what: &str) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(COMMAND_LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            panic!("{what} hung for {COMMAND_LIMIT:?}");
        }
    }
}

/// SIGKILLs every agentd of the profile; true when one was running.
fn kill_agentd(env: &TestEnv) -> bool {
    let pids = env.daemon_pids();
    for &pid in &pids {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    for &pid in &pids {
        assert!(
            wait_pid_gone(pid, Duration::from_secs(5)),
            "agentd {pid} survived SIGKILL"
        );
    }
    !pids.is_empty()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Answer,
    Tool,
    OneShot,
    Snapshot,
    Rewind,
}

/// What the test knows must be true.
#[derive(Default)]
struct Model {
    /// Per conversation: the user messages acknowledged to a client, in order.
    acked: BTreeMap<String, Vec<String>>,
    /// The conversation the REPL continues.
    current: String,
    /// Its completed turns as agentd last reported them.
    turns: u64,
    /// Acknowledged manual snapshots: label and the folder as it was.
    snapshots: Vec<(String, BTreeMap<String, Vec<u8>>)>,
}

/// A conversation's transcript, from `agentx export`.
fn transcript(env: &TestEnv, id: &str) -> Vec<Value> {
    let doc = json_out(&env.run(["export", id, "--format", "json"]));
    doc["conversation"]["transcript"]
        .as_array()
        .unwrap()
        .clone()
}

/// Its user texts, oldest first.
fn user_texts(env: &TestEnv, id: &str) -> Vec<String> {
    transcript(env, id)
        .iter()
        .filter(|e| e["type"] == "user")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Every tool call in a settled conversation has exactly one output.
fn assert_paired(env: &TestEnv, id: &str) {
    let mut calls: HashMap<String, i64> = HashMap::new();
    for entry in transcript(env, id) {
        let call = entry["call_id"].as_str().unwrap_or_default().to_owned();
        match entry["type"].as_str() {
            Some("function_call") => *calls.entry(call).or_default() += 1,
            Some("function_output") => *calls.entry(call).or_default() -= 1,
            _ => {}
        }
    }
    calls.retain(|_, n| *n != 0);
    assert!(calls.is_empty(), "unpaired tool calls in {id}: {calls:?}");
}

/// Plans a rewind to each snapshot `pick`s from the listing (without
/// `--yes`, so nothing changes): each one's manifest must still load.
fn assert_restorable(env: &TestEnv, pick: impl Fn(usize) -> bool) {
    let list = json_out(&env.run(["snapshots", "--json"]));
    for (i, snap) in list.as_array().unwrap().iter().enumerate() {
        if !pick(i) {
            continue;
        }
        let id = snap["id"].as_str().unwrap();
        let out = env.run(["rewind", id]);
        assert!(
            matches!(out.status.code(), Some(0 | 2)) && !stderr(&out).contains("snapshot store"),
            "snapshot {id} ({}) cannot be restored: exit {:?}: {}",
            snap["label"],
            out.status.code(),
            stderr(&out)
        );
    }
}

/// Everything that must hold after a kill, checked against a fresh agentd.
fn verify(env: &TestEnv, model: &Model, acked_snapshot: Option<&str>, round: usize) {
    // The newest snapshot and one more, a different one each round.
    assert_restorable(env, |i| i == 0 || i == (round * 7) % 50);
    let corrupt: Vec<_> = env
        .profile_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect();
    assert!(corrupt.is_empty(), "quarantined after kill -9: {corrupt:?}");

    let sessions = json_out(&env.run(["sessions", "--json"]));
    let turns: HashMap<&str, u64> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["turns"].as_u64().unwrap()))
        .collect();
    for (id, acked) in &model.acked {
        let have = turns.get(id.as_str()).copied();
        assert!(
            have.is_some_and(|t| t >= acked.len() as u64),
            "conversation {id} lost acknowledged turns: {have:?} < {}",
            acked.len()
        );
        // Every acknowledged message is there, in order.
        let texts = user_texts(env, id);
        let mut it = texts.iter();
        for msg in acked {
            assert!(
                it.any(|t| t == msg),
                "acknowledged message {msg:?} missing from {id}: {texts:?}"
            );
        }
    }
    if let Some(label) = acked_snapshot {
        let list = json_out(&env.run(["snapshots", "--json"]));
        assert!(
            list.as_array().unwrap().iter().any(|s| s["label"] == label),
            "acknowledged snapshot {label} is gone: {list}"
        );
    }
}

/// The last line of a REPL's stdout: the final answer of its turn.
fn answer(out: &Output) -> String {
    stdout(out).lines().last().unwrap_or_default().to_owned()
}

/// Settles an interrupted or failed turn (never killed), then records
/// where the conversation stands.
fn settle(
    env: &TestEnv,
    fake: &FakeModel,
    model: &mut Model,
    rng: &mut Rng,
    log: &mut Vec<String>,
) {
    let status = json_out(&env.run(["status", "--json"]));
    let interrupted = status["interrupted"].is_object()
        || !status["pending_tool_calls"].as_array().unwrap().is_empty();
    if interrupted {
        let choice = ["continue", "retry", "new"][rng.below(3) as usize];
        log.push(format!(
            "  settle: --on-pending {choice} ({})",
            status["interrupted"]
        ));
        let out = env.chat(fake, ["--auto", "--on-pending", choice], "");
        assert_code(&out, 0);
        if choice != "new" {
            let st = json_out(&env.run(["status", "--json"]));
            assert!(
                answer(&out).ends_with(&format!("[turns seen: {}]", st["turns"])),
                "settled with {choice}, the model did not see every turn: {}\n{st}",
                stdout(&out)
            );
        }
    } else if status["failed"].is_object() {
        log.push(format!("  settle: retry ({})", status["failed"]));
        let out = env.chat(fake, ["--auto", "retry"], "");
        assert_code(&out, 0);
    }
    let status = json_out(&env.run(["status", "--json"]));
    assert!(
        status["interrupted"].is_null(),
        "still interrupted: {status}"
    );
    assert_eq!(
        status["pending_tool_calls"],
        Value::Array(vec![]),
        "{status}"
    );
    model.current = status["session_id"].as_str().unwrap().to_owned();
    model.turns = status["turns"].as_u64().unwrap();
    if !model.current.is_empty() {
        model.acked.entry(model.current.clone()).or_default();
        assert_paired(env, &model.current);
    }
}

#[test]
fn kill_9_at_random_instants_loses_nothing_acknowledged() {
    let seed = std::env::var("AGENTX_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let mut report = Report {
        seed,
        log: Vec::new(),
    };
    let mut rng = Rng::new(seed);
    let env = TestEnv::new();
    let _keep = KeepProfile(&env);
    let fake = FakeModel::start();
    let mut model = Model::default();
    std::fs::write(env.work.join("keep.txt"), "kept\n").unwrap();
    // Enough files that snapshots and restores take a while to kill into.
    std::fs::create_dir(env.work.join("tree")).unwrap();
    for i in 0..200 {
        std::fs::write(
            env.work.join(format!("tree/t{i:03}")),
            format!("seed {i}\n"),
        )
        .unwrap();
    }

    // Typical duration of each action without a kill, to aim the kills
    // inside it; starts generous and learns from the unkilled rounds.
    let mut typical: HashMap<Action, u64> = HashMap::new();
    let mut kills = 0;
    let started = Instant::now();
    settle(&env, &fake, &mut model, &mut rng, &mut report.log);

    for round in 0..ROUNDS {
        let action = match rng.below(10) {
            0..=2 => Action::Answer,
            3..=5 => Action::Tool,
            6 => Action::OneShot,
            7..=8 => Action::Snapshot,
            _ if model.snapshots.is_empty() => Action::Snapshot,
            _ => Action::Rewind,
        };
        let text = match action {
            Action::Answer => format!("note {round} please"),
            Action::Tool => {
                let file = rng.below(4);
                match rng.below(4) {
                    0 => format!("CALL rm -f f{file}.txt"),
                    1 => format!("CALL for f in tree/*; do echo round {round} > $f; done"),
                    _ => format!("CALL echo round {round} > f{file}.txt"),
                }
            }
            Action::OneShot => format!("quick {round} question"),
            Action::Snapshot => format!("snap-{round}"),
            Action::Rewind => {
                let i = rng.below(model.snapshots.len() as u64) as usize;
                model.snapshots[i].0.clone()
            }
        };
        // The rewind target's index as listed now (1 = newest).
        let rewind_index = (action == Action::Rewind).then(|| {
            let list = json_out(&env.run(["snapshots", "--json"]));
            list.as_array()
                .unwrap()
                .iter()
                .find(|s| s["label"] == text.as_str())
                .map(|s| s["index"].as_u64().unwrap())
        });
        let child = match action {
            Action::Answer | Action::Tool => {
                env.chat_command(&fake, ["--auto"], &format!("{text}\n"))
            }
            Action::OneShot => env.chat_command(&fake, ["exec", "--auto", &text], ""),
            Action::Snapshot => env.chat_command(&fake, ["snapshot", "--label", &text], ""),
            Action::Rewind => match rewind_index.flatten() {
                Some(i) => env.chat_command(&fake, ["rewind", &i.to_string(), "--yes"], ""),
                // Aged out of the last 50: rewind to the newest instead.
                None => env.chat_command(&fake, ["snapshots"], ""),
            },
        };
        let t0 = Instant::now();
        let window = typical.get(&action).copied().unwrap_or(300);
        let delay = rng.below(window + window / 5 + 1);
        std::thread::sleep(Duration::from_millis(delay));
        let killed = kill_agentd(&env);
        kills += usize::from(killed);
        let out = finish(child, &format!("round {round} {action:?}"));
        let elapsed = t0.elapsed().as_millis() as u64;
        let expected = match action {
            Action::Answer | Action::Tool => {
                format!("echo: {text} [turns seen: {}]", model.turns + 1)
            }
            Action::OneShot => format!("echo: {text} [turns seen: "),
            Action::Snapshot => "taken".to_owned(),
            Action::Rewind => String::new(),
        };
        let ok = out.status.success();
        let acked = ok
            && match action {
                Action::Answer | Action::Tool => answer(&out) == expected,
                Action::OneShot => stdout(&out).contains(&expected),
                Action::Snapshot => stdout(&out).contains(&expected),
                Action::Rewind => true,
            };
        report.log.push(format!(
            "round {round}: {action:?} {text:?} kill after {delay} ms (live: {killed}), \
             exit {:?}, acked {acked}: {} | {}",
            out.status.code(),
            stdout(&out).trim(),
            stderr(&out).trim()
        ));
        // A failure is the kill's doing, never the store's.
        for bad in ["snapshot store", "storage error", "corrupt", "No such file"] {
            assert!(
                !stderr(&out).contains(bad),
                "round {round}: {action:?} failed on its own: {}",
                stderr(&out)
            );
        }
        // Exit 0 is a promise: the answer was printed.
        assert!(
            !ok || acked,
            "round {round}: {action:?} exited 0 without its result (wanted {expected:?})\nstdout: {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        );
        if !killed || elapsed < delay {
            // Finished before the kill: a clean duration to aim at.
            let old = typical.get(&action).copied().unwrap_or(elapsed);
            typical.insert(action, (old * 3 + elapsed) / 4);
        } else if !ok {
            // Cut short: it takes longer than `delay`; aim wider next time.
            typical.insert(action, window.max(delay * 2).min(3000));
        }
        if acked && model.current.is_empty() {
            // The turn opened the folder's first conversation.
            let status = json_out(&env.run(["status", "--json"]));
            model.current = status["session_id"].as_str().unwrap().to_owned();
        }
        if acked {
            match action {
                Action::Answer | Action::Tool => {
                    model
                        .acked
                        .entry(model.current.clone())
                        .or_default()
                        .push(text.clone());
                }
                Action::Snapshot => model.snapshots.push((text.clone(), files(&env.work))),
                Action::Rewind if rewind_index.flatten().is_some() => {
                    let want = &model
                        .snapshots
                        .iter()
                        .find(|(label, _)| *label == text)
                        .unwrap()
                        .1;
                    assert_eq!(
                        &files(&env.work),
                        want,
                        "round {round}: rewind to {text} was not exact"
                    );
                }
                _ => {}
            }
        }

        verify(
            &env,
            &model,
            (acked && action == Action::Snapshot).then_some(text.as_str()),
            round,
        );
        settle(&env, &fake, &mut model, &mut rng, &mut report.log);
    }

    // The conversation goes on and sees every turn; snapshots still rewind.
    let before = files(&env.work);
    let out = env.chat(
        &fake,
        ["--auto"],
        "CALL echo last > last.txt && rm -f keep.txt\n",
    );
    assert_code(&out, 0);
    assert_eq!(
        answer(&out),
        format!(
            "echo: CALL echo last > last.txt && rm -f keep.txt [turns seen: {}]",
            model.turns + 1
        )
    );
    let after = files(&env.work);
    assert!(after.contains_key("last.txt") && !after.contains_key("keep.txt"));
    assert_code(&env.run(["undo", "--yes"]), 0);
    assert_eq!(
        files(&env.work),
        before,
        "undo after the torture was not exact"
    );
    assert_code(&env.run(["rewind", "1", "--yes"]), 0);
    assert_eq!(
        files(&env.work),
        after,
        "rewind 1 after the torture was not exact"
    );
    // An acknowledged snapshot from the torture still restores exactly.
    let list = json_out(&env.run(["snapshots", "--json"]));
    if let Some((label, want, index)) = model.snapshots.iter().rev().find_map(|(label, want)| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == label.as_str())
            .map(|s| (label, want, s["index"].as_u64().unwrap()))
    }) {
        assert_code(&env.run(["rewind", &index.to_string(), "--yes"]), 0);
        assert_eq!(&files(&env.work), want, "rewind to {label} was not exact");
    }
    verify(&env, &model, None, 0);
    assert_restorable(&env, |_| true);

    let settled = report
        .log
        .iter()
        .filter(|l| l.starts_with("  settle"))
        .count();
    let acked = report
        .log
        .iter()
        .filter(|l| l.contains("acked true"))
        .count();
    eprintln!(
        "torture: seed {seed}, {ROUNDS} rounds, {kills} kills of a live agentd, \
         {acked} actions acknowledged, {settled} interrupted turns settled, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if std::env::var_os("AGENTX_TORTURE_LOG").is_some() {
        eprintln!("{}", report.log.join("\n"));
    }
    assert!(
        kills >= MIN_KILLS,
        "only {kills} kills reached a live agentd (want {MIN_KILLS})"
    );
}
