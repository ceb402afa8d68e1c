//! Nothing a tool command starts outlives agentd: not its background jobs,
//! not their children, whether agentd is killed (`kill -9` included) or
//! stopped.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, stderr, stdout, wait_pid_gone};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::Value;

/// A background job that would touch `late` two seconds on, its pid in
/// `bgpid`, while the command itself sleeps on.
const COMMAND: &str = "sh -c 'sleep 2; touch late' & echo $! > bgpid; sleep 30";

/// Starts a turn whose tool runs [`COMMAND`]; returns the client and the
/// background job's pid once it runs.
fn start_tool(env: &TestEnv, model: &FakeModel) -> (Child, i32) {
    let client = env.chat_command(model, ["--auto"], &format!("CALL {COMMAND}\n"));
    let pid = read_pid(&env.work.join("bgpid"));
    assert!(
        kill(Pid::from_raw(pid), None).is_ok(),
        "{pid} is not running"
    );
    (client, pid)
}

fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.ends_with('\n')
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "the tool never wrote {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The background job must be gone at once, and its `touch` never run.
fn assert_never_late(env: &TestEnv, pid: i32) {
    assert!(
        wait_pid_gone(pid, Duration::from_secs(1)),
        "the tool's background job {pid} was not killed at once"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !env.work.join("late").exists(),
        "a process of the tool ran on after agentd"
    );
}

#[test]
fn killing_agentd_kills_everything_its_tool_started() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let (client, pid) = start_tool(&env, &model);
    env.kill_daemons();
    assert_never_late(&env, pid);
    let _ = client.wait_with_output();
}

#[test]
fn stopping_agentd_kills_everything_its_tool_started_at_once() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let (client, pid) = start_tool(&env, &model);
    let stop = std::thread::spawn({
        let mut stop = env.agentx(["daemon", "stop"]);
        move || stop.output().unwrap()
    });
    // Killed at once, not when the drain gives up on the turn (4 s).
    assert_never_late(&env, pid);
    assert_code(&stop.join().unwrap(), 0);
    let out = client.wait_with_output().unwrap();
    assert_code(&out, 3);
    assert!(
        stderr(&out).contains("agentd stopped during the turn; it is kept as interrupted"),
        "{}",
        stderr(&out)
    );

    // The kill is recorded: the call finished as killed by the stop (with
    // what it printed), the turn interrupted; `agentx` will offer to
    // continue, and the model will be told what happened.
    let out = env.run(["status", "--json"]);
    assert_code(&out, 0);
    let st: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let call = &st["pending_tool_calls"][0];
    assert_eq!(call["state"], "finished", "{st}");
    assert!(
        call["output"]
            .as_str()
            .is_some_and(|o| o.starts_with("killed: agentd stopped")),
        "{st}"
    );
    assert_eq!(
        st["interrupted"]["message"], "agentd stopped during the turn",
        "{st}"
    );

    // The folder was snapshotted after the kill: undo takes back what the
    // tool wrote before it died, and leaves alone what the user wrote since
    // (without that snapshot, undo could not tell the two apart).
    assert!(env.work.join("bgpid").exists());
    std::fs::write(env.work.join("mine.txt"), "written after the stop\n").unwrap();
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 0);
    assert!(
        !env.work.join("bgpid").exists(),
        "undo left the killed tool's file: {}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(env.work.join("mine.txt"))
            .ok()
            .as_deref(),
        Some("written after the stop\n"),
        "undo took back a file the user wrote after the turn: {}",
        stderr(&out)
    );
}

/// Long commands run to their end however busy agentd is: four one-shots
/// each run a 30 s command while other clients keep asking for status and
/// running one-shots in other folders. (A supervisor forked on a tokio thread got its death
/// signal when that thread retired, 10 s idle, and killed its command.)
#[test]
fn long_commands_run_to_their_end_while_agentd_serves_others() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let others: Vec<std::path::PathBuf> = (0..3)
        .map(|i| {
            let dir = env.root().join(format!("other{i}"));
            std::fs::create_dir(&dir).unwrap();
            dir
        })
        .collect();
    let shots: Vec<Child> = (0..4)
        .map(|_| {
            env.chat_command(
                &model,
                ["exec", "--auto", "--json", "CALL sleep 30; echo SURVIVED"],
                "",
            )
        })
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let model_ref = &model;
    let outputs = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                for dir in &others {
                    let dir = dir.to_str().unwrap();
                    let out = env
                        .agentx(["-C", dir, "status", "--json"])
                        .output()
                        .unwrap();
                    assert_code(&out, 0);
                    // A turn: the conversation store's actor moves work
                    // between agentd's threads.
                    let out = env.chat(model_ref, ["-C", dir, "exec", "hi"], "");
                    assert_code(&out, 0);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let outputs: Vec<_> = shots
            .into_iter()
            .map(|shot| shot.wait_with_output().unwrap())
            .collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        outputs
    });
    for out in outputs {
        assert_code(&out, 0);
        let result = stdout(&out)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["type"] == "tool_result")
            .unwrap_or_else(|| panic!("no tool result: {}", stdout(&out)));
        assert_eq!(result["exit_code"], 0, "{result}");
        assert!(
            result["output"]
                .as_str()
                .is_some_and(|o| o.contains("SURVIVED")),
            "{result}"
        );
    }
}
