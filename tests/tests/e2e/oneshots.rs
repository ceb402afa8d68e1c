//! One-shots end to end: output and exit codes, --json events, branching
//! from the shared checkpoint without touching it, retained states, and 200
//! at once in one folder (with 20 of them killed mid-turn).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::Duration;

use serde_json::{Value, json};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::json_out;
use agentx_tests::{TestEnv, assert_code, stderr, stdout};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn exec(env: &TestEnv, model: &FakeModel, args: &[&str]) -> Output {
    env.chat(model, [&["exec"], args].concat(), "")
}

/// Every file of the interactive conversation group (one-shot states aside),
/// with its bytes.
fn interactive_files(env: &TestEnv) -> BTreeMap<PathBuf, Vec<u8>> {
    env.profile_files()
        .into_iter()
        .filter(|p| p.starts_with(env.home.join("sessions")))
        .filter(|p| !p.components().any(|c| c.as_os_str() == "oneshots"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn oneshot_dirs(env: &TestEnv) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut stack = vec![env.home.join("sessions")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.parent().is_some_and(|q| q.ends_with("oneshots")) {
                    dirs.push(p);
                } else {
                    stack.push(p);
                }
            }
        }
    }
    dirs
}

#[test]
fn exec_prints_the_answer_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = exec(&env, &model, &["what is up"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: what is up [turns seen: 1]\n");
    let out = env.chat(&model, ["-p", "short form"], "");
    assert_eq!(stdout(&out), "echo: short form [turns seen: 1]\n");
    let out = env.chat(&model, ["exec", "-"], "from stdin\n");
    assert_eq!(stdout(&out), "echo: from stdin\n [turns seen: 1]\n");
    assert!(oneshot_dirs(&env).is_empty());
    assert_eq!(json_out(&env.run(["oneshots", "--json"])), json!([]));
    // One-shots are not conversations.
    assert_eq!(json_out(&env.run(["sessions", "--json"])), json!([]));
}

#[test]
fn exec_json_prints_one_event_per_line_ending_with_the_result() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = exec(&env, &model, &["--json", "hello"]);
    assert_code(&out, 0);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2);
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "completed");
    assert_eq!(result["text"], "echo: hello [turns seen: 1]");
    assert!(
        result["oneshot_id"]
            .as_str()
            .unwrap()
            .starts_with("oneshot-")
    );
    assert_eq!(result["usage"]["total_tokens"], 15);
    let deltas: String = lines
        .iter()
        .filter(|l| l["type"] == "text_delta")
        .map(|l| l["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "echo: hello [turns seen: 1]");
}

#[test]
fn usage_errors_and_failures_have_their_exit_codes() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["exec", "-"], "");
    assert_code(&out, 2);
    let out = env.chat(&model, ["exec"], "");
    assert_code(&out, 2);

    model.push(Reply::http_error(400, None, "nope"));
    let out = exec(&env, &model, &["--json", "doomed"]);
    assert_code(&out, 1);
    let result: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(result["status"], "failed");
    let id = result["oneshot_id"].as_str().unwrap().to_owned();
    // A failed one-shot is kept for diagnosis.
    let list = json_out(&env.run(["oneshots", "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], json!(id));
    assert_eq!(list[0]["status"], "failed");
    assert!(list[0]["reason"].as_str().unwrap().contains("nope"));
    assert!(list[0]["created_at"].is_string());
    let shown = env.run(["oneshots", "show", &id]);
    assert_code(&shown, 0);
    assert!(stdout(&shown).contains("doomed"));
    let out = env.run(["oneshots", "show", "../../etc"]);
    assert_code(&out, 1);
    assert_code(&env.run(["oneshots", "prune"]), 0);
    assert_eq!(json_out(&env.run(["oneshots", "--json"])), json!([]));
    assert!(oneshot_dirs(&env).is_empty());
}

#[test]
fn tools_are_denied_unless_auto() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch made"}),
    });
    // Not run, said so (how to allow it), and not a success.
    let out = exec(&env, &model, &["make it"]);
    assert_code(&out, 1);
    assert!(!env.work.join("made").exists());
    assert!(stderr(&out).contains("need approval"), "{}", stderr(&out));
    model.push(Reply::ToolCall {
        name: "shell".into(),
        arguments: json!({"command": "touch made"}),
    });
    let out = exec(&env, &model, &["--auto", "make it"]);
    assert_code(&out, 0);
    assert!(env.work.join("made").exists());
}

#[test]
fn a_one_shot_branches_from_the_shared_checkpoint_and_changes_nothing() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "one\ntwo\n"), 0);
    let shared = model.stored_response_ids()[1].clone();
    let before = interactive_files(&env);

    let out = exec(&env, &model, &["three"]);
    assert_eq!(stdout(&out), "echo: three [turns seen: 3]\n");
    assert_eq!(
        model.requests().last().unwrap().body["previous_response_id"],
        json!(shared)
    );
    assert_eq!(
        interactive_files(&env),
        before,
        "a one-shot touched interactive state"
    );

    // The interactive conversation goes on from where it was.
    let out = env.chat(&model, Vec::<&str>::new(), "four\n");
    assert_eq!(stdout(&out), "echo: four [turns seen: 3]\n");

    // After a rollback, one-shots branch from the rolled-back state.
    assert_code(&env.run(["rollback", "3"]), 0);
    let out = exec(&env, &model, &["five"]);
    assert_eq!(stdout(&out), "echo: five [turns seen: 2]\n");
}

#[test]
fn a_lost_branch_point_is_rebuilt_from_the_saved_conversation() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, Vec::<&str>::new(), "one\ntwo\n"), 0);
    model.forget_response_ids();
    let out = exec(&env, &model, &["three"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: three [turns seen: 3]\n");
    let body = model.requests().last().unwrap().body.clone();
    assert!(body.get("previous_response_id").is_none());
    assert_eq!(body["input"].as_array().unwrap().len(), 5);
}

#[test]
fn a_folder_without_a_shared_checkpoint_starts_fresh() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = exec(&env, &model, &["alone"]);
    assert_eq!(stdout(&out), "echo: alone [turns seen: 1]\n");
    assert!(
        model.requests()[0]
            .body
            .get("previous_response_id")
            .is_none()
    );
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

#[test]
fn interrupted_one_shots_are_kept_and_never_offered_to_the_repl() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.stall_when_prompt_contains("slow", Duration::from_secs(30));
    let killed = env.chat_command(&model, ["exec", "slow and killed"], "");
    let interrupted = env.chat_command(&model, ["exec", "slow and interrupted"], "");
    assert!(model.wait_for_requests(2, Duration::from_secs(10)));
    kill(pid(&killed), Signal::SIGKILL).unwrap();
    kill(pid(&interrupted), Signal::SIGINT).unwrap();
    let _ = killed.wait_with_output();
    let out = interrupted.wait_with_output().unwrap();
    assert_code(&out, 1);
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let list = loop {
        let list = json_out(&env.run(["oneshots", "--json"]));
        if list
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["status"] == "interrupted")
            || std::time::Instant::now() > deadline
        {
            break list;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    for o in list {
        assert_eq!(o["status"], "interrupted", "{o}");
    }
    // The REPL knows nothing of them.
    let out = env.chat(&model, Vec::<&str>::new(), "hi\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "echo: hi [turns seen: 1]\n");
}

fn fan_out(
    env: &TestEnv,
    model: &FakeModel,
    n: usize,
    slow: usize,
) -> (Vec<(usize, Output)>, Vec<Output>) {
    let mut fast = Vec::new();
    let mut slow_children = Vec::new();
    for i in 0..n {
        if i < slow {
            slow_children.push(env.chat_command(
                model,
                ["exec".to_owned(), format!("slow prompt {i}")],
                "",
            ));
        } else {
            fast.push((
                i,
                env.chat_command(model, ["exec".to_owned(), format!("prompt {i}")], ""),
            ));
        }
    }
    // Kill the slow ones once their requests are in flight.
    if slow > 0 {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while model.open_streams() < slow && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for child in &slow_children {
            kill(pid(child), Signal::SIGKILL).unwrap();
        }
    }
    let fast = fast
        .into_iter()
        .map(|(i, c)| (i, c.wait_with_output().unwrap()))
        .collect();
    let slow = slow_children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    (fast, slow)
}

/// Runs `n` one-shots (the first `slow` of them killed mid-turn) after two
/// interactive turns; checks every property the fan-out must keep.
fn assert_fan_out(env: &TestEnv, model: &FakeModel, n: usize, slow: usize) {
    assert_code(
        &env.chat(model, Vec::<&str>::new(), "base one\nbase two\n"),
        0,
    );
    let before = interactive_files(env);
    model.stall_when_prompt_contains("slow", Duration::from_secs(60));
    let (fast, _slow) = fan_out(env, model, n, slow);
    for (i, out) in &fast {
        assert_code(out, 0);
        // Same branch point for all (two base turns), its own prompt only.
        assert_eq!(
            stdout(out),
            format!("echo: prompt {i} [turns seen: 3]\n"),
            "one-shot {i}"
        );
    }
    assert_eq!(
        interactive_files(env),
        before,
        "one-shots changed interactive state"
    );
    let retained = json_out(&env.run(["oneshots", "--json"]));
    let retained = retained.as_array().unwrap();
    assert_eq!(retained.len(), slow, "{retained:?}");
    for o in retained {
        assert!(
            o["prompt"].as_str().unwrap().starts_with("slow prompt"),
            "{o}"
        );
        assert_eq!(o["status"], "interrupted");
    }
    assert_eq!(oneshot_dirs(env).len(), slow);
}

#[test]
fn two_hundred_at_once_all_succeed_and_share_one_branch_point() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_fan_out(&env, &model, 200, 0);
}

#[test]
fn two_hundred_at_once_with_twenty_killed_keeps_exactly_those_twenty() {
    let mut env = TestEnv::new();
    // The slow ones stall until they are killed: the harness's 2 s idle
    // limit would end them first (as failed) on a loaded machine.
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "600000".into()));
    let model = FakeModel::start();
    assert_fan_out(&env, &model, 200, 20);
}

/// Proves overlap: the fake holds every one-shot's request open until the
/// interactive turn's request arrives, and the interactive turn starts only
/// once all 200 one-shot requests are in. So all of them branched from the
/// two-turn checkpoint (exactly 3 turns seen), and the interactive turn ran
/// while they were in flight.
#[test]
fn an_interactive_turn_during_a_fan_out_completes_normally() {
    let mut env = TestEnv::new();
    // Held streams are silent until released: no stall detection meanwhile.
    env.extra_env
        .push(("AGENTX_STREAM_IDLE_MS".into(), "600000".into()));
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, Vec::<&str>::new(), "base one\nbase two\n"),
        0,
    );
    model.hold_until("echo: prompt ", "echo: during");
    let base = model.requests().len();
    let (during, (fast, _)) = std::thread::scope(|scope| {
        let handle = scope.spawn(|| {
            assert!(
                model.wait_for_requests(base + 200, Duration::from_secs(120)),
                "the one-shots' requests did not all arrive"
            );
            assert_eq!(model.completed_responses(), 2, "a one-shot was not held");
            env.chat(&model, Vec::<&str>::new(), "during\n")
        });
        let result = fan_out(&env, &model, 200, 0);
        (handle.join().unwrap(), result)
    });
    assert_code(&during, 0);
    assert_eq!(stdout(&during), "echo: during [turns seen: 3]\n");
    for (i, out) in &fast {
        assert_code(out, 0);
        // Branched from the two-turn checkpoint; never anything from a
        // sibling or from the interactive turn.
        assert_eq!(
            stdout(out),
            format!("echo: prompt {i} [turns seen: 3]\n"),
            "one-shot {i}"
        );
    }
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["turns"], 3);
    assert!(oneshot_dirs(&env).is_empty());
}

/// A one-shot's state is written without syncs while it runs: a kill -9 of
/// agentd in the middle loses none of it (the kernel holds it), and the
/// next agentd lists it as interrupted, with its prompt.
#[test]
fn a_one_shot_running_when_agentd_is_killed_is_kept_as_interrupted() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.stall_when_prompt_contains("slow", Duration::from_secs(30));
    let running = env.chat_command(&model, ["exec", "slow when agentd dies"], "");
    assert!(model.wait_for_requests(1, Duration::from_secs(10)));
    env.kill_daemons();
    let out = running.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));

    let list = json_out(&env.run(["oneshots", "--json"]));
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["status"], "interrupted", "{}", list[0]);
    let id = list[0]["id"].as_str().unwrap();
    let shown = env.run(["oneshots", "show", id]);
    assert_code(&shown, 0);
    assert!(
        stdout(&shown).contains("slow when agentd dies"),
        "{}",
        stdout(&shown)
    );
}
