//! Instruction files stay inside the repository: a link to a file outside
//! it or into /proc is never read, never sent, and `status` says why.

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code};

#[test]
fn an_agents_md_link_out_of_the_folder_is_not_sent_and_status_says_so() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    std::fs::write(env.root().join("secret.txt"), "secret-outside-3c9").unwrap();
    std::os::unix::fs::symlink("../secret.txt", env.work.join("AGENTS.md")).unwrap();
    assert_code(&env.chat(&model, [] as [&str; 0], "hello\n"), 0);
    let sent = model.requests()[0].body["instructions"].to_string();
    assert!(!sent.contains("secret-outside-3c9"), "{sent}");
    let status = env.status();
    assert_eq!(
        status["instruction_files"],
        serde_json::json!([]),
        "{status}"
    );
    let skipped = status["instruction_files_skipped"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        skipped.contains("AGENTS.md") && skipped.contains("outside"),
        "{status}"
    );
    // A link into /proc (agentd's own environment) is refused the same way.
    std::fs::remove_file(env.work.join("AGENTS.md")).unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", env.work.join("AGENTS.md")).unwrap();
    assert_code(&env.chat(&model, [] as [&str; 0], "again\n"), 0);
    let sent = model.requests()[1].body["instructions"].to_string();
    assert!(!sent.contains("PATH="), "{sent}");
    assert!(!sent.contains("AGENTX_HOME"), "{sent}");
}
