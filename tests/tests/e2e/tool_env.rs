//! Tool commands run as the caller's terminal would: its variables, its
//! `PATH`, its umask — not agentd's — and that environment is never written.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TEST_KEY, TestEnv, assert_code, stderr};

/// A value agentd must never write anywhere.
const SECRET: &str = "caller-env-secret-4f1c9a";

/// Sets the child's umask before it runs.
fn with_umask(cmd: &mut Command, mask: u32) {
    // SAFETY: umask is async-signal-safe and affects only the child.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
            Ok(())
        });
    }
}

/// `agentx ARGS` against `model` with `vars` set and `umask`, fed `stdin`.
fn command(
    env: &TestEnv,
    model: &FakeModel,
    args: &[&str],
    vars: &[(&str, &str)],
    umask: u32,
) -> Command {
    let mut cmd = env.agentx(args);
    cmd.env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", TEST_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    with_umask(&mut cmd, umask);
    cmd
}

fn run_with_stdin(mut cmd: Command, stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_tool_sees_the_callers_variables_path_and_umask() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // agentd starts first, from a terminal without any of what follows, so
    // only what travels with the turn can reach the tool.
    // agentd's own environment has a variable the caller's does not: the
    // tool must not see it (the caller's environment replaces agentd's).
    let mut start = env.agentx(["daemon", "start"]);
    start.env("AGENTD_ONLY_VAR", "agentd-side-7e2");
    with_umask(&mut start, 0o077);
    assert_code(&start.output().unwrap(), 0);

    let bin = env.root().join("caller-bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("only-on-callers-path");
    std::fs::write(&tool, "#!/bin/sh\necho found-on-path\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());

    let cmd = command(
        &env,
        &model,
        &["--auto"],
        &[
            ("MYVAR", "from-terminal"),
            ("PATH", &path),
            ("CALLER_SECRET", SECRET),
        ],
        0o022,
    );
    let out = run_with_stdin(
        cmd,
        "CALL echo \"[$MYVAR]\" > seen.txt; only-on-callers-path >> seen.txt; umask >> seen.txt; \
         echo \"[${AGENTD_ONLY_VAR-unset}]\" >> seen.txt; touch made.txt\n",
    );
    assert_code(&out, 0);
    // A one-shot that fails is retained for diagnosis: without the caller's
    // environment in it either.
    model.push(Reply::http_error(400, None, "nope"));
    let mut failed = command(
        &env,
        &model,
        &["exec", "--auto", "doomed"],
        &[("CALLER_SECRET", SECRET)],
        0o022,
    );
    failed.stdin(Stdio::null());
    assert_code(&failed.output().unwrap(), 1);
    assert!(
        env.profile_files()
            .iter()
            .any(|p| p.components().any(|c| c.as_os_str() == "oneshots")),
        "no retained one-shot state"
    );
    let seen = std::fs::read_to_string(env.work.join("seen.txt")).unwrap();
    assert_eq!(
        seen,
        "[from-terminal]\nfound-on-path\n0022\n[unset]\n",
        "{}",
        stderr(&out)
    );
    let mode = std::fs::metadata(env.work.join("made.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "the tool's file has the caller's mode");

    // agentd's own files stay private whatever the caller's umask, and the
    // caller's environment is written nowhere (documents, journals, logs).
    assert_code(&env.run(["daemon", "stop"]), 0);
    for file in env.profile_files() {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "caller environment written to {}",
            file.display()
        );
        if file.starts_with(env.home.join("sessions")) {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }
}

#[test]
fn concurrent_one_shots_each_run_with_their_own_environment() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.run(["daemon", "start"]), 0);
    let children: Vec<_> = ["alpha", "beta", "gamma", "delta"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mask = if i % 2 == 0 { 0o022 } else { 0o077 };
            let mut cmd = command(
                &env,
                &model,
                &["exec", "--auto", "CALL echo \"$MYVAR\" > \"$MYVAR.txt\""],
                &[("MYVAR", name)],
                mask,
            );
            cmd.stdin(Stdio::null());
            (name, mask, cmd.spawn().unwrap())
        })
        .collect();
    for (name, mask, child) in children {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
        let file = env.work.join(format!("{name}.txt"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{name}\n"));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !mask, "{name}");
    }
}

/// The variables a tool sees, one `NAME=value` per line (from `env`).
fn tool_env(env: &TestEnv, model: &FakeModel, vars: &[(&str, &str)]) -> String {
    let _ = std::fs::remove_file(env.work.join("env.txt"));
    let mut cmd = command(
        env,
        model,
        &["exec", "--auto", "CALL env > env.txt"],
        vars,
        0o022,
    );
    cmd.stdin(Stdio::null());
    let out = cmd.output().unwrap();
    assert_code(&out, 0);
    std::fs::read_to_string(env.work.join("env.txt")).unwrap()
}

fn names(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        .collect()
}

const SECRETS: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "ghp-7"),
    ("aws_secret_access_key", "aws-7"),
    ("DB_PASSWORD", "pw-7"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/c.json"),
    ("MY_COPY_OF_THE_KEY_VALUE", TEST_KEY),
    ("HARMLESS", "kept-7"),
];

#[test]
fn a_tool_never_sees_the_provider_key_nor_variables_named_like_secrets() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let seen = tool_env(&env, &model, SECRETS);
    assert!(
        !seen.contains(TEST_KEY),
        "the provider key reached a tool:\n{seen}"
    );
    for (name, _) in &SECRETS[..5] {
        assert!(
            !names(&seen).contains(name),
            "{name} reached the tool:\n{seen}"
        );
    }
    assert!(seen.contains("HARMLESS=kept-7"), "{seen}");
    // agentd, started by that client, keeps no key in its own environment.
    for pid in env.daemon_pids() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&environ).contains(TEST_KEY),
            "the key is in agentd's environment"
        );
    }
}

#[test]
fn shell_environment_in_config_means_what_codex_says() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    env.write_config(
        "[shell_environment]\ninherit = \"core\"\nignore_default_excludes = true\n\
         exclude = [\"USER*\"]\nset = { CI = \"1\", DB_PASSWORD = \"set-by-config\" }\n",
    );
    let seen = tool_env(&env, &model, SECRETS);
    let mut got = names(&seen);
    got.sort_unstable();
    // Core variables the test's environment has, minus USER*, plus `set`
    // (PWD and what sh adds itself aside).
    for name in ["CI", "DB_PASSWORD", "HOME", "PATH"] {
        assert!(got.contains(&name), "{name} missing:\n{seen}");
    }
    for name in ["HARMLESS", "GITHUB_TOKEN", "USER", "AGENTX_BASE_URL"] {
        assert!(!got.contains(&name), "{name} got through:\n{seen}");
    }
    assert!(seen.contains("DB_PASSWORD=set-by-config"), "{seen}");
    assert!(!seen.contains(TEST_KEY), "{seen}");
    // include_only keeps just what it names; the key never, even when named.
    env.write_config(
        "[shell_environment]\nignore_default_excludes = true\n\
         include_only = [\"harm*\", \"MY_COPY_*\", \"GITHUB_TOKEN\"]\n",
    );
    let seen = tool_env(&env, &model, SECRETS);
    let mut got = names(&seen);
    // (The sandbox gives every command its private TMPDIR, TMP and TEMP.)
    got.retain(|n| {
        !matches!(
            *n,
            "PWD" | "SHLVL" | "_" | "OLDPWD" | "TMPDIR" | "TMP" | "TEMP"
        )
    });
    got.sort_unstable();
    assert_eq!(got, ["GITHUB_TOKEN", "HARMLESS"], "{seen}");
}
