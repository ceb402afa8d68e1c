//! `agentx diff`: what a message changed, from its before and after snapshots, as a
//! unified diff, per-file counts (`--stat`, `--json`), or since a snapshot (`--since`).

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, json_out, stdout};

fn call(env: &TestEnv, model: &FakeModel, command: &str) {
    assert_code(
        &env.chat(model, ["--auto"], &format!("CALL {command}\n")),
        0,
    );
}

#[test]
fn a_message_s_changes_are_shown_as_a_diff_with_counts() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    std::fs::write(env.work.join("keep.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(env.work.join("gone.txt"), "bye\n").unwrap();
    call(
        &env,
        &model,
        "printf 'one\\n2\\nthree\\nfour\\n' > keep.txt; rm gone.txt; printf 'new\\n' > new.txt; printf 'a\\000b' > blob.bin",
    );
    let out = env.run(["diff"]);
    assert_code(&out, 0);
    let patch = stdout(&out);
    assert!(patch.contains("--- a/keep.txt\n+++ b/keep.txt"), "{patch}");
    assert!(patch.contains("-two\n+2\n"), "{patch}");
    assert!(patch.contains("+four\n"), "{patch}");
    assert!(patch.contains("--- a/gone.txt\n+++ /dev/null"), "{patch}");
    assert!(patch.contains("+new\n"), "{patch}");
    assert!(patch.contains("blob.bin (added): binary file"), "{patch}");
    assert!(!patch.contains('\x1b'), "no color into a pipe: {patch}");

    let diff = json_out(&env.run(["diff", "--json"]));
    // The sides are named by the message, not only by snapshot ids.
    let from = diff["from"].as_str().unwrap();
    assert!(from.starts_with("before message 1 (\"CALL "), "{diff}");
    assert!(
        diff["to"].as_str().unwrap().starts_with("after it"),
        "{diff}"
    );
    let files = diff["files"].clone();
    let by_path = |p: &str| {
        files
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p)
            .unwrap_or_else(|| panic!("{p} not in {files}"))
            .clone()
    };
    assert_eq!(by_path("keep.txt")["added"], 2);
    assert_eq!(by_path("keep.txt")["removed"], 1);
    assert_eq!(by_path("keep.txt")["change"], "modified");
    assert_eq!(by_path("gone.txt")["change"], "deleted");
    assert_eq!(by_path("new.txt")["change"], "added");
    assert_eq!(by_path("blob.bin")["binary"], true);
    assert_eq!(files.as_array().unwrap().len(), 4, "{files}");

    let stat = stdout(&env.run(["diff", "--stat"]));
    assert!(stat.contains("keep.txt | +2 -1 (modified)"), "{stat}");
    assert!(stat.contains("4 files changed, +3 -2"), "{stat}");

    // The next message; `diff 2` is still the first one's.
    call(&env, &model, "printf 'later\\n' >> new.txt");
    let last = stdout(&env.run(["diff"]));
    assert!(last.contains("+later"), "{last}");
    assert!(!last.contains("keep.txt"), "{last}");
    let earlier = stdout(&env.run(["diff", "2"]));
    assert!(earlier.contains("-two"), "{earlier}");

    // Since a snapshot, up to the folder now (a change made by hand too).
    std::fs::write(env.work.join("by-hand.txt"), "typed\n").unwrap();
    let since = stdout(&env.run(["diff", "--since", "4"]));
    assert!(since.contains("+typed"), "{since}");
    assert!(since.contains("+later"), "{since}");
    let out = env.run(["diff", "9"]);
    assert_code(&out, 1);
}
