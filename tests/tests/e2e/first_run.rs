//! The first run without a key or a URL: agentx names the ways in and
//! offers a local model server it finds running, saving it when accepted.

use agentx_tests::fake_model::FakeModel;
use agentx_tests::tmux::Pane;
use agentx_tests::{TestEnv, assert_code, stderr};

/// `agentx ARGS` with no key and no URL, probing only `port`.
fn keyless(env: &TestEnv, port: u16, args: &[&str]) -> std::process::Command {
    let mut cmd = env.agentx(args);
    for var in [
        "OPENAI_API_KEY",
        "AGENTX_API_KEY",
        "AGENTX_BASE_URL",
        "AGENTX_PROVIDER",
        "AGENTX_MODEL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("AGENTX_LOCAL_PORTS", port.to_string());
    cmd
}

#[test]
fn without_a_terminal_the_error_names_the_ways_in_and_the_server_running() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.advertise_window(8192);
    let out = keyless(&env, model.addr().port(), &["exec", "hello"])
        .output()
        .unwrap();
    assert_code(&out, 1);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    for way in ["OPENAI_API_KEY", "AGENTX_BASE_URL", "Ollama"] {
        assert!(err.contains(way), "{err}");
    }
    assert!(
        err.contains(&format!(
            "running here: a model server at {} (model fake-model)",
            model.base_url()
        )),
        "{err}"
    );
    assert!(model.requests().is_empty(), "no turn without a choice");
}

#[test]
fn a_port_that_lists_no_models_is_not_offered() {
    let env = TestEnv::new();
    // The fake model without an advertised window answers /v1/models 404,
    // as any web server that is not a model server would.
    let model = FakeModel::start();
    let out = keyless(&env, model.addr().port(), &["exec", "hello"])
        .output()
        .unwrap();
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("none of them answers"), "{err}");
}

#[test]
fn at_a_terminal_the_server_found_is_offered_saved_and_used() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.advertise_window(8192);
    env.write_config("# my settings\napproval = \"never\"\n");
    let cmd = keyless(&env, model.addr().port(), &[]);
    let Some(pane) = Pane::start_command(&env, &cmd) else {
        return;
    };
    pane.wait_for("and save it in");
    pane.line("y");
    pane.wait_for("saved: base_url");
    pane.line("hello there");
    pane.wait_for("echo: hello there");
    let saved = std::fs::read_to_string(env.home.join("config.toml")).unwrap();
    assert!(saved.starts_with("# my settings\n"), "{saved}");
    assert!(
        saved.contains(&format!("base_url = \"{}\"", model.base_url())),
        "{saved}"
    );
    assert!(saved.contains("provider = \"chat\""), "{saved}");
    assert!(saved.contains("model = \"fake-model\""), "{saved}");
    assert_eq!(
        model.requests().last().map(|r| r.path.clone()).as_deref(),
        Some("/v1/chat/completions")
    );
}
