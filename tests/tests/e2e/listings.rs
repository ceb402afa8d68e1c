//! Listings a person reads: columns that line up whatever the widths of
//! their cells (a relative time of days ago beside "just now"), and counts in words (`1 turn`, `2 turns`, `1 file`).

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, stdout};

/// The character column where `needle` starts on each line holding one.
fn columns_of(text: &str, needles: &[&str]) -> Vec<usize> {
    needles
        .iter()
        .map(|n| {
            let line = text
                .lines()
                .find(|l| l.contains(n))
                .unwrap_or_else(|| panic!("no line with {n:?}:\n{text}"));
            line[..line.find(n).unwrap()].chars().count()
        })
        .collect()
}

#[test]
fn sessions_line_up_and_listings_count_in_words() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(
        &env.chat(&model, ["--approval", "never"], "alpha\nalpha two\n"),
        0,
    );
    assert_code(
        &env.chat(&model, ["new", "--approval", "never"], "beta one\n"),
        0,
    );
    // The first one last changed days ago: its relative time is wider
    // than "just now" (its document edited while agentd is stopped).
    assert_code(&env.run(["daemon", "stop"]), 0);
    let doc = env
        .profile_files()
        .into_iter()
        .find(|p| {
            p.extension().is_some_and(|e| e == "json")
                && std::fs::read_to_string(p)
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .is_some_and(|v| v["title"] == "alpha")
        })
        .expect("alpha's document");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&doc).unwrap()).unwrap();
    let days = 3 * 24 * 3600 * 1000;
    value["updated_at"] = (value["updated_at"].as_i64().unwrap() - days).into();
    std::fs::write(&doc, value.to_string()).unwrap();
    std::fs::write(env.work.join("only.txt"), "x").unwrap();
    assert_code(&env.agentx(["snapshot"]).output().unwrap(), 0);

    let out = stdout(&env.run(["sessions"]));
    assert!(out.contains(" 1 turn "), "{out}");
    assert!(out.contains("2 turns"), "{out}");
    assert!(!out.contains("(s)"), "{out}");
    assert!(out.contains("just now"), "{out}");
    let cols = columns_of(&out, &["alpha", "beta one"]);
    assert_eq!(cols[0], cols[1], "titles do not line up:\n{out}");

    let out = stdout(&env.run(["snapshots"]));
    assert!(out.contains(" 1 file "), "{out}");
    assert!(!out.contains("1 files"), "{out}");
}

#[test]
fn status_and_the_banner_say_the_model_provider_and_approval_and_keep_internals_for_verbose() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["--approval", "never"], "hi\n");
    assert_code(&out, 0);
    // The banner (on stderr when scripted).
    let banner = agentx_tests::stderr(&out);
    assert!(
        banner.contains("model fake-model (responses), approval never"),
        "{banner}"
    );
    let plain = stdout(
        &env.agentx(["status"])
            .env("AGENTX_MODEL", "fake-model")
            .output()
            .unwrap(),
    );
    assert!(
        plain.contains("model         fake-model (responses), approval ask"),
        "{plain}"
    );
    assert!(!plain.contains("response id"), "{plain}");
    assert!(!plain.contains("watch "), "{plain}");
    let verbose = stdout(
        &env.agentx(["status", "--verbose"])
            .env("AGENTX_MODEL", "fake-model")
            .output()
            .unwrap(),
    );
    assert!(verbose.contains("response id   resp_"), "{verbose}");
    assert!(verbose.contains("watch "), "{verbose}");
    let json = agentx_tests::json_out(
        &env.agentx(["status", "--json", "--auto"])
            .env("AGENTX_MODEL", "fake-model")
            .output()
            .unwrap(),
    );
    assert_eq!(json["model"], "fake-model", "{json}");
    assert_eq!(json["provider"], "responses", "{json}");
    assert_eq!(json["approval"], "auto", "{json}");
}

#[test]
fn empty_conversations_left_behind_are_neither_listed_nor_kept() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--approval", "never"], "hello\n"), 0);
    let first = agentx_tests::json_out(&env.run(["status", "--json"]))["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Three /new in a row without a word: one empty conversation, the
    // current one, is listed; the others are gone from the profile.
    for _ in 0..3 {
        assert_code(&env.chat(&model, ["new"], ""), 0);
    }
    let listed = agentx_tests::json_out(&env.run(["sessions", "--json"]));
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(ids.contains(&first.as_str()), "{listed}");
    let docs = || {
        env.profile_files()
            .into_iter()
            .filter(|p| {
                p.to_string_lossy().contains("/sessions/")
                    && p.extension().is_some_and(|e| e == "json")
                    && !matches!(
                        p.file_stem().and_then(|s| s.to_str()),
                        Some("current" | "shared")
                    )
            })
            .count()
    };
    assert_eq!(docs(), 2, "{:?}", env.profile_files());
    // Going back to the first one leaves the empty one behind: gone too.
    assert_code(&env.chat(&model, ["resume", first.as_str()], ""), 0);
    let listed = agentx_tests::json_out(&env.run(["sessions", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(docs(), 1, "{:?}", env.profile_files());
    // A conversation with something said in it is never removed this way.
    assert_code(
        &env.chat(&model, ["new", "--approval", "never"], "kept\n"),
        0,
    );
    assert_code(&env.chat(&model, ["resume", first.as_str()], ""), 0);
    let listed = agentx_tests::json_out(&env.run(["sessions", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}

#[test]
fn a_command_s_output_is_shown_as_its_head_and_tail_with_a_true_line_count() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out = env.chat(&model, ["--auto"], "CALL seq 1 20\n");
    assert_code(&out, 0);
    let shown = agentx_tests::stderr(&out);
    // 8 lines by default: the first 4 and the last 4, and how many not.
    assert!(
        shown.contains("  │ 1\n  │ 2\n  │ 3\n  │ 4\n  │ … 12 more lines …\n  │ 17\n"),
        "{shown}"
    );
    assert!(
        shown.contains("  │ 20\n  ↳ exit 0, 20 lines of output"),
        "{shown}"
    );
    // Configurable (0: none).
    let out = env
        .agentx(["--auto"])
        .env("AGENTX_TOOL_OUTPUT_LINES", "0")
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"CALL seq 1 3\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_code(&out, 0);
    let shown = agentx_tests::stderr(&out);
    assert!(!shown.contains("  │"), "{shown}");
    assert!(shown.contains("exit 0, 3 lines of output"), "{shown}");
}

#[test]
fn snapshots_list_a_message_s_before_and_after_as_one_row() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.chat(&model, ["--auto"], "CALL echo x > made.txt\n"), 0);
    assert_code(
        &env.agentx(["snapshot", "--label", "by hand"])
            .output()
            .unwrap(),
        0,
    );
    let out = stdout(&env.run(["snapshots"]));
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with("store:")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[0].trim_start().starts_with('1') && rows[0].contains("by hand"),
        "{out}"
    );
    assert!(rows[1].trim_start().starts_with("3→2"), "{out}");
    assert!(rows[1].contains("1 changed"), "{out}");
    let json = agentx_tests::json_out(&env.run(["snapshots", "--json"]));
    let phases: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["manual", "after", "before"], "{json}");
}

#[test]
fn sessions_are_listed_a_page_at_a_time_numbered_as_resume_counts_them() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    for i in 1..=5 {
        assert_code(
            &env.chat(
                &model,
                ["new", "--approval", "never"],
                &format!("message {i}\n"),
            ),
            0,
        );
    }
    let all = agentx_tests::json_out(&env.run(["sessions", "--json"]));
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = ids(&all);
    assert_eq!(all.len(), 5);
    let page = |p: &str| {
        ids(&agentx_tests::json_out(
            &env.run(["sessions", "--json", "--limit", "2", "--page", p]),
        ))
    };
    assert_eq!(page("1"), all[..2]);
    assert_eq!(page("2"), all[2..4]);
    assert_eq!(page("3"), all[4..]);
    assert!(page("4").is_empty());
    // In text, rows keep the numbers /resume takes, and the footer says
    // how to go on.
    let out = env.run(["sessions", "--limit", "2", "--page", "2"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    let numbers: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" turn"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(numbers, ["3", "4"], "{text}");
    assert!(text.contains("4 of 5 shown; --page 3"), "{text}");
    // --page needs --limit, and starts at 1: usage errors.
    assert_code(&env.run(["sessions", "--page", "2"]), 2);
    assert_code(&env.run(["sessions", "--limit", "2", "--page", "0"]), 2);
}
