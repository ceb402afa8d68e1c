//! Any gRPC client in any language: the Python example (grpcio with default
//! options, stubs generated from proto/ at run time) lists a conversation
//! that `agentx` made and continues it, and `agentx` then sees that turn.
//! grpc-core sends the socket path as `:authority`; agentd must accept it.

use std::path::PathBuf;
use std::process::{Command, Output};

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TEST_KEY, TestEnv, assert_code, json_out, skip, stderr, stdout};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv `.ci/run` makes, or None (and a printed skip) when it is missing.
fn python() -> Option<PathBuf> {
    let python = repo().join(".venv-tests/bin/python");
    if python.exists() {
        Some(python)
    } else {
        skip(&format!(
            "{} is missing: run the venv step of .ci/run",
            python.display()
        ));
        None
    }
}

/// `examples/python/agentx_client.py ARGS` against `env`'s daemon.
fn client(python: &PathBuf, env: &TestEnv, model: &FakeModel, args: &[&str]) -> Output {
    Command::new(python)
        .arg(repo().join("examples/python/agentx_client.py"))
        .args(args)
        .env_remove("AGENTX_SOCKET")
        .env("AGENTX_HOME", &env.home)
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", TEST_KEY)
        .env("TMPDIR", env.root().join("tmp"))
        .current_dir(&env.work)
        .output()
        .unwrap()
}

#[test]
fn a_conversation_started_by_agentx_is_continued_by_the_python_client() {
    let Some(python) = python() else { return };
    let mut env = TestEnv::new();
    env.extra_env
        .push(("AGENTX_LOG".into(), "agentd::authority=debug".into()));
    let model = FakeModel::start();
    let out = env.chat(&model, ["--approval", "never"], "hello from rust\n");
    assert_code(&out, 0);
    let sessions = json_out(&env.run(["sessions", "--json"]));
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    // agentx's own connections (tonic) pass on their first header block
    // as it came, read without a full HPACK decoder; grpc-core's are
    // decoded in full (their `:authority` is rewritten).
    let full_decodes = || {
        std::fs::read_to_string(env.home.join("log/agentd.log"))
            .unwrap()
            .matches("first header block is decoded in full")
            .count()
    };
    assert_eq!(
        full_decodes(),
        0,
        "an agentx connection was decoded in full"
    );

    let out = client(&python, &env, &model, &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(full_decodes(), 1, "the python client's connection");
    assert_eq!(stdout(&out).trim(), format!("{id}\t1\thello from rust"));

    let out = client(&python, &env, &model, &["turn", &id, "hello from python"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "echo: hello from python [turns seen: 2]"
    );

    let sessions = json_out(&env.run(["sessions", "--json"]));
    assert_eq!(sessions.as_array().unwrap().len(), 1);
    assert_eq!(sessions[0]["turns"], 2);
    // agentx resumes it with the Python turn in it.
    let out = env.chat(&model, Vec::<&str>::new(), "back in rust\n");
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "echo: back in rust [turns seen: 3]");
    assert!(
        stderr(&out).contains("hello from python"),
        "{}",
        stderr(&out)
    );
    // The stubs it generated went with it.
    let left: Vec<_> = std::fs::read_dir(env.root().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("agentx-stubs-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn python_reflection_and_health_work_with_default_options() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.run(["daemon", "start"]), 0);
    let out = client(&python, &env, &model, &["services"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for service in [
        "agentx.v1.Turns",
        "agentx.v1.Sessions",
        "grpc.health.v1.Health",
    ] {
        assert!(
            text.lines().any(|l| l == service),
            "{service} not in {text}"
        );
    }
    assert!(text.lines().any(|l| l == "health: SERVING"), "{text}");
}
