//! agentd's background work runs at a lower priority than its requests:
//! the search indexer and the threads its index writer starts, and the
//! runtime that reads tool commands' output, are at nice 10 above agentd.

use std::process::Stdio;

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code};

/// Each thread of `pid`: its name and nice value.
fn threads(pid: i32) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the name (which may hold spaces): state is 3rd,
        // nice the 19th of the line.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let nice = after.split(' ').nth(16).unwrap().parse().unwrap();
        out.push((comm.trim().to_owned(), nice));
    }
    out
}

#[test]
fn indexing_and_tool_output_run_below_requests() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let mut cmd = env.agentx(["exec", "--auto", "CALL echo hello"]);
    cmd.env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(Stdio::null());
    assert_code(&cmd.output().unwrap(), 0);
    let pid: i32 = std::fs::read_to_string(env.home.join("agentd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let threads = threads(pid);
    let base = threads
        .iter()
        .find(|(name, _)| name == "agentd")
        .map(|(_, nice)| *nice)
        .unwrap();
    let lowered = (base + 10).min(19);
    for prefix in [
        "search-indexer",
        "thrd-tantivy",
        "segment_updater",
        "agentd-tools",
    ] {
        let named: Vec<_> = threads
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .collect();
        assert!(!named.is_empty(), "no {prefix} thread in {threads:?}");
        for (name, nice) in named {
            assert_eq!(
                *nice, lowered,
                "{name} runs at nice {nice}, agentd at {base}"
            );
        }
    }
    for (name, nice) in threads.iter().filter(|(n, _)| n == "tokio-rt-worker") {
        assert_eq!(*nice, base, "{name} serves requests: at agentd's priority");
    }
}
