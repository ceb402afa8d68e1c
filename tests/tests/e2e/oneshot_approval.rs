//! One-shots tell the truth: about commands nobody approved (the model is told why, the
//! user how to allow them, and the exit status is not 0), and about their changes to the
//! folder, which `undo` names along with the rewind that takes them back.

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, stderr};

#[test]
fn a_one_shot_without_auto_says_the_command_needs_approval_and_exits_1() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["exec", "CALL touch made-by-tool"], "");
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("need approval"), "{err}");
    assert!(err.contains("--auto"), "{err}");
    assert!(!env.work.join("made-by-tool").exists());
    // The model was told it was not run, and why: not that someone declined.
    let requests = model.requests();
    let told = requests
        .iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("function_call_output"))
        .expect("the call's output reached the model");
    assert!(told.contains("approval policy is never"), "{told}");
    assert!(!told.contains("the user declined"), "{told}");

    // With --auto it runs and exits 0.
    let out = env.chat(&model, ["exec", "--auto", "CALL touch made-by-tool"], "");
    assert_code(&out, 0);
    assert!(env.work.join("made-by-tool").exists());
}

#[test]
fn options_that_mean_nothing_for_a_one_shot_are_refused() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["exec", "--on-pending", "retry", "hi"], "");
    assert_code(&out, 2);
    assert!(stderr(&out).contains("one-shot"), "{}", stderr(&out));
    // Without a terminal there is no one to ask.
    let out = env.chat(&model, ["exec", "--approval", "ask", "hi"], "");
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("needs a terminal"),
        "{}",
        stderr(&out)
    );
    assert!(model.requests().is_empty());
}

#[test]
fn undo_after_a_one_shot_says_who_changed_the_folder_and_how_to_take_it_back() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "hello\n"), 0);
    let out = env.chat(
        &model,
        ["exec", "--auto", "CALL echo made > by-one-shot.txt"],
        "",
    );
    assert_code(&out, 0);
    assert!(env.work.join("by-one-shot.txt").exists());
    let out = env.run(["undo", "--yes"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("one-shot oneshot-"), "{err}");
    assert!(err.contains("agentx rewind 2"), "{err}");
    // The hint is right: that rewind takes the one-shot's change back.
    assert_code(&env.run(["rewind", "2", "--yes"]), 0);
    assert!(!env.work.join("by-one-shot.txt").exists());
}

#[test]
fn json_one_shots_carry_a_command_s_output_as_it_comes_and_whole() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(
        &model,
        ["exec", "--json", "--auto", "CALL echo streamed-out"],
        "",
    );
    assert_code(&out, 0);
    let lines: Vec<serde_json::Value> = agentx_tests::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pieces: String = lines
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pieces, "streamed-out\n", "{lines:?}");
    let result = lines.iter().find(|e| e["type"] == "tool_result").unwrap();
    assert!(
        result["output"].as_str().unwrap().contains("streamed-out"),
        "{result}"
    );
}
