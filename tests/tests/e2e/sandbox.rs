//! The command sandbox: in workspace-write a tool command changes only the
//! folder and its private TMPDIR, never the profile, and reaches no TCP
//! host; read-only and danger-full-access do what they say; a kernel that
//! cannot confine is never a silent downgrade; the user alone escalates.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, json_out, skip, stderr, stdout};
use serde_json::Value;

/// Whether agentd's kernel can enforce workspace-write (Landlock ABI 4);
/// says why not (a skip, a failure in CI) when it cannot.
fn landlock(env: &TestEnv) -> bool {
    let status = json_out(&env.run(["status", "--json"]));
    let abi = status["sandbox"]["landlock_abi"].as_u64().unwrap_or(0);
    if abi < 4 {
        skip(&format!(
            "the kernel offers Landlock ABI {abi}; the sandbox needs 4"
        ));
        return false;
    }
    true
}

/// `agentx exec --json --auto ARGS "CALL command"`: its output and the
/// tool call's result event.
fn exec(env: &TestEnv, model: &FakeModel, args: &[&str], command: &str) -> (Output, Value) {
    let call = format!("CALL {command}");
    let mut all = vec!["exec", "--json", "--auto"];
    all.extend_from_slice(args);
    all.push(&call);
    let out = env.chat(model, all, "");
    let result = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "tool_result")
        .unwrap_or(Value::Null);
    (out, result)
}

fn output_of(result: &Value) -> String {
    result["output"].as_str().unwrap_or_default().to_owned()
}

/// A directory next to the folder, with `victim.txt` in it.
fn outside(env: &TestEnv) -> PathBuf {
    let dir = env.root().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("victim.txt"), "original\n").unwrap();
    dir
}

/// The TMPDIR a command printed as `tmp=PATH`.
fn tmpdir_said(output: &str) -> PathBuf {
    output
        .lines()
        .find_map(|l| l.strip_prefix("tmp="))
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{e}>"))
}

#[test]
fn writes_outside_the_folder_are_denied_however_they_are_made() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let out_dir = outside(&env);
    std::os::unix::fs::symlink(&out_dir, env.work.join("link")).unwrap();
    std::fs::write(env.work.join("inside.txt"), "inside\n").unwrap();
    let abs = out_dir.display().to_string();
    let command = format!(
        "echo x > {abs}/absolute.txt; echo x > ../outside/relative.txt; \
         echo x > link/via-link.txt; rm -f link/victim.txt; echo more >> link/victim.txt; \
         truncate -s 0 ../outside/victim.txt; ln ../outside/victim.txt hard.txt; echo pwned >> hard.txt; \
         mv inside.txt ../outside/moved.txt; mv inside.txt link/; mkdir ../outside/made; \
         echo ok > written-inside.txt; echo done"
    );
    let (out, result) = exec(&env, &model, &[], &command);
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("Permission denied"), "{output}");
    assert!(output.contains("done"), "{output}");
    // Nothing outside changed, by any of the ways.
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["victim.txt"], "{output}");
    assert_eq!(read(&out_dir.join("victim.txt")), "original\n", "{output}");
    // Inside, it worked; the hard link to outside was never made.
    assert_eq!(read(&env.work.join("written-inside.txt")), "ok\n");
    assert_eq!(read(&env.work.join("inside.txt")), "inside\n");
    let hard = std::fs::read_to_string(env.work.join("hard.txt")).unwrap_or_default();
    assert!(!hard.contains("original"), "{hard}");
}

#[test]
fn the_profile_can_be_neither_read_nor_written() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    env.write_config("# profile-secret-3b1e\n");
    if !landlock(&env) {
        return;
    }
    let profile = env.home.display().to_string();
    let command = format!(
        "cat {profile}/config.toml; cat {profile}/sessions/*/*/*.json | head -c 300; \
         echo x > {profile}/planted; echo x > {profile}/config.toml; \
         cp {profile}/config.toml stolen.txt; echo done"
    );
    let (out, result) = exec(&env, &model, &[], &command);
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("done"), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    assert!(!output.contains("profile-secret"), "{output}");
    assert!(!env.home.join("planted").exists());
    assert_eq!(
        read(&env.home.join("config.toml")),
        "# profile-secret-3b1e\n"
    );
    let copied = agentx_tests::files(&env.work);
    assert!(
        !copied
            .values()
            .any(|b| String::from_utf8_lossy(b).contains("profile-secret")),
        "{:?}",
        copied.keys()
    );
}

/// A python3 line that connects to `port` on loopback and says how it went.
fn connect(port: u16) -> String {
    format!(
        "python3 -c \"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), 5)\n \
         print('connected')\nexcept OSError as e:\n print('refused:', e)\""
    )
}

/// Whether the listener got a connection (it is non-blocking; the command
/// has ended, so any connection it made is queued by now).
fn accepted(listener: &TcpListener) -> bool {
    match listener.accept() {
        Ok((mut stream, _)) => {
            let _ = stream.read(&mut [0u8; 1]);
            true
        }
        Err(_) => false,
    }
}

#[test]
fn tcp_is_denied_unless_the_network_is_allowed() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (out, result) = exec(&env, &model, &[], &connect(port));
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("refused"), "{output}");
    assert!(!accepted(&listener), "{output}");

    env.write_config("sandbox_network = true\n");
    let (out, result) = exec(&env, &model, &[], &connect(port));
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("connected"), "{output}");
    assert!(accepted(&listener), "{output}");
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["sandbox"]["network"], true, "{status}");
}

#[test]
fn tmpdir_is_private_writable_and_removed_after_the_turn() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let (out, result) = exec(
        &env,
        &model,
        &[],
        "echo \"tmp=$TMPDIR\"; echo hi > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"; \
         echo x > /tmp/agentx-sandbox-escape-$$ || echo shared-tmp-denied",
    );
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("\nhi\n"), "{output}");
    assert!(output.contains("shared-tmp-denied"), "{output}");
    let tmpdir = tmpdir_said(&output);
    assert!(
        tmpdir.display().to_string().contains("agentx-tmp-"),
        "{output}"
    );
    assert!(!tmpdir.exists(), "{} is still there", tmpdir.display());
}

#[test]
fn a_killed_agentds_tmpdir_goes_at_the_next_start() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    // The command fills its TMPDIR, says where it is, and runs on.
    let mut client = env.chat_command(
        &model,
        [
            "exec",
            "--auto",
            "CALL mkdir \"$TMPDIR/build\" && echo x > \"$TMPDIR/build/o.o\" && \
             chmod 500 \"$TMPDIR/build\" && echo \"$TMPDIR\" > said && mv said where; sleep 60",
        ],
        "",
    );
    let said = env.work.join("where");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !said.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let tmpdir = PathBuf::from(read(&said).trim());
    assert!(tmpdir.join("build/o.o").exists(), "{}", tmpdir.display());
    assert!(tmpdir.starts_with(env.root()), "{}", tmpdir.display());

    env.kill_daemons();
    let _ = client.kill();
    let _ = client.wait();
    assert!(tmpdir.exists(), "nothing was left to remove");

    // The profile's next agentd removes what the killed one left.
    assert_code(&env.run(["status", "--json"]), 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmpdir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!tmpdir.exists(), "{} is still there", tmpdir.display());
    // Turns make theirs beside it again.
    let (out, result) = exec(&env, &model, &[], "echo \"tmp=$TMPDIR\"");
    assert_code(&out, 0);
    let output = output_of(&result);
    assert_eq!(tmpdir_said(&output).parent(), tmpdir.parent(), "{output}");
}

#[test]
fn read_only_writes_nothing_but_tmpdir() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let (out, result) = exec(
        &env,
        &model,
        &["--sandbox", "read-only"],
        "cat /etc/passwd >/dev/null && echo read-ok; echo x > made.txt; \
         echo hi > \"$TMPDIR/f\" && echo tmp-ok",
    );
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("read-ok"), "{output}");
    assert!(output.contains("tmp-ok"), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    assert!(!env.work.join("made.txt").exists());
}

#[test]
fn danger_full_access_writes_outside() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let out_dir = outside(&env);
    let (out, result) = exec(
        &env,
        &model,
        &["--sandbox", "danger-full-access"],
        "echo changed > ../outside/victim.txt",
    );
    assert_code(&out, 0);
    assert_eq!(read(&out_dir.join("victim.txt")), "changed\n", "{result}");
}

#[test]
fn a_kernel_that_cannot_confine_is_never_a_silent_downgrade() {
    let mut env = TestEnv::new();
    let model = FakeModel::start();
    // agentd acts as if the kernel had no Landlock.
    env.extra_env
        .push(("AGENTX_SANDBOX_ABI".into(), "0".into()));
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["sandbox"]["mode"], "workspace-write", "{status}");
    assert_eq!(status["sandbox"]["enforced"], false, "{status}");

    // --auto: refused, in one line naming the way out; the one-shot fails.
    let (out, result) = exec(&env, &model, &[], "touch ran.txt");
    assert_code(&out, 1);
    assert!(!env.work.join("ran.txt").exists());
    assert!(!stderr(&out).contains("need approval"), "{}", stderr(&out));
    let output = output_of(&result);
    assert!(
        output.contains("--sandbox danger-full-access"),
        "{output}\n{}",
        stderr(&out)
    );
    assert_eq!(output.lines().count(), 1, "{output}");

    // Ask: the question says it would run unconfined; a no runs nothing.
    let out = env.chat(&model, ["--approval", "ask"], "CALL touch ran.txt\nn\n");
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("would run unconfined"),
        "{}",
        stderr(&out)
    );
    assert!(!env.work.join("ran.txt").exists());

    // The user may choose to run commands unconfined.
    let (out, _) = exec(
        &env,
        &model,
        &["--sandbox", "danger-full-access"],
        "touch ran.txt",
    );
    assert_code(&out, 0);
    assert!(env.work.join("ran.txt").exists());
}

#[test]
fn only_the_user_lets_a_denied_command_run_outside_the_sandbox() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let out_dir = outside(&env);
    // Ask: yes to run it, then yes to run it again outside the sandbox.
    let out = env.chat(
        &model,
        ["--approval", "ask"],
        "CALL echo escalated > ../outside/victim.txt\ny\ny\n",
    );
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("run it again outside the sandbox"),
        "{}",
        stderr(&out)
    );
    assert_eq!(read(&out_dir.join("victim.txt")), "escalated\n");
    // Auto never escalates.
    let (out, result) = exec(&env, &model, &[], "echo auto > ../outside/victim.txt");
    assert_code(&out, 0);
    assert!(output_of(&result).contains("Permission denied"), "{result}");
    assert_eq!(read(&out_dir.join("victim.txt")), "escalated\n");
}

#[test]
fn undo_takes_back_everything_a_sandboxed_command_did() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    let out_dir = outside(&env);
    std::fs::write(env.work.join("a.txt"), "a\n").unwrap();
    std::fs::write(env.work.join("b.txt"), "b\n").unwrap();
    let before = agentx_tests::files(&env.work);
    let out = env.chat(
        &model,
        ["--auto"],
        "CALL echo changed > a.txt; rm b.txt; mkdir -p sub && echo new > sub/c.txt; \
         echo x > ../outside/victim.txt; echo x > ../outside/new.txt\n",
    );
    assert_code(&out, 0);
    assert_ne!(agentx_tests::files(&env.work), before);
    assert_code(&env.run(["undo", "--yes"]), 0);
    assert_eq!(agentx_tests::files(&env.work), before);
    assert!(!env.work.join("sub").exists());
    // What undo cannot see, the command could not touch.
    assert_eq!(read(&out_dir.join("victim.txt")), "original\n");
    assert!(!out_dir.join("new.txt").exists());
}

#[test]
fn a_sandboxed_command_cannot_drive_agentd_through_its_socket() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    if !landlock(&env) {
        return;
    }
    // The socket is reachable by path (Landlock does not cover connecting
    // to one): agentd itself refuses a caller below a confined supervisor.
    let agentx = agentx_tests::agentx_bin().display().to_string();
    let command = format!("{agentx} status --json; echo \"rc=$?\"");
    let (out, result) = exec(&env, &model, &[], &command);
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("may not call agentd"), "{output}");
    assert!(!output.contains("rc=0"), "{output}");
    let (out, result) = exec(&env, &model, &["--sandbox", "danger-full-access"], &command);
    assert_code(&out, 0);
    let output = output_of(&result);
    assert!(output.contains("rc=0"), "{output}");
}

#[test]
fn status_reports_the_mode_and_whether_it_is_enforced() {
    let env = TestEnv::new();
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["sandbox"]["mode"], "workspace-write", "{status}");
    assert_eq!(status["sandbox"]["network"], false, "{status}");
    let enforced = status["sandbox"]["landlock_abi"].as_u64().unwrap_or(0) >= 4;
    assert_eq!(status["sandbox"]["enforced"], enforced, "{status}");

    let status = json_out(&env.run(["status", "--json", "--sandbox", "read-only"]));
    assert_eq!(status["sandbox"]["mode"], "read-only", "{status}");

    env.write_config(
        "sandbox_mode = \"danger-full-access\"\n[sandbox_workspace_write]\nwritable_roots = [\"/srv\"]\n",
    );
    let status = json_out(&env.run(["status", "--json"]));
    assert_eq!(status["sandbox"]["mode"], "danger-full-access", "{status}");
    assert_eq!(status["sandbox"]["enforced"], false, "{status}");
    assert_eq!(status["sandbox"]["writable_roots"][0], "/srv", "{status}");

    // /sandbox changes it for the rest of the chat.
    let model = FakeModel::start();
    let out = env.chat(&model, [] as [&str; 0], "/sandbox read-only\n/status\n");
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("sandbox: read-only"), "{text}");
    assert!(text.contains("sandbox       read-only"), "{text}");
}
