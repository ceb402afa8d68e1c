//! Several clients in one folder (issue 22 §5): rollbacks that race,
//! `clear` under one-shots and other REPLs, and what each client is told.

use serde_json::Value;

use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::{ListCheckpointsRequest, RollbackRequest, Scope, rollback_request};
use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code, channel, json_out, stderr};

fn status(env: &TestEnv) -> Value {
    json_out(&env.run(["status", "--json"]))
}

fn say(env: &TestEnv, model: &FakeModel, lines: &str) -> std::process::Output {
    env.chat(model, ["--approval", "auto"], lines)
}

/// Five `agentx rollback 2` at once: each one that goes through rolls back
/// one turn from what it listed, the others are refused because the
/// conversation moved since, and every one that went through can be undone.
/// (They once stacked: 6 turns became 1, and only one could be undone.)
#[test]
fn rollbacks_at_once_never_stack_and_each_can_be_undone() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&say(&env, &model, "t1\nt2\nt3\nt4\nt5\nt6\n"), 0);
    let before = status(&env);
    assert_eq!(before["turns"], 6);
    let children: Vec<_> = (0..5)
        .map(|_| {
            env.agentx(["rollback", "2"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut done = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => done += 1,
            _ => {
                assert_code(&out, 1);
                assert!(
                    stderr(&out).contains("moved since") && stderr(&out).contains("checkpoints"),
                    "{}",
                    stderr(&out)
                );
            }
        }
    }
    assert!(done >= 1);
    let after = status(&env);
    assert_eq!(after["turns"], 6 - done, "{done} rollback(s) went through");
    for n in 0..done {
        let out = env.run(["rollback", "--undo"]);
        assert_code(&out, 0);
        assert_eq!(status(&env)["turns"], 6 - done + n + 1);
    }
    let undone = status(&env);
    for field in [
        "response_id",
        "turns",
        "usage",
        "checkpoints",
        "transcript_items",
    ] {
        assert_eq!(undone[field], before[field], "{field}");
    }
    let out = env.run(["rollback", "--undo"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("no rollback to undo"),
        "{}",
        stderr(&out)
    );
}

/// The race made certain: a rollback chosen from a listing is refused once
/// another client rolled back after that listing, and changes nothing.
#[tokio::test]
async fn a_rollback_chosen_before_the_conversation_moved_is_refused() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&say(&env, &model, "t1\nt2\nt3\nt4\n"), 0);
    let scope = Some(Scope {
        folder: std::fs::canonicalize(&env.work)
            .unwrap()
            .display()
            .to_string(),
        agent: String::new(),
    });
    let mut sessions = SessionsClient::new(channel(&env.socket()).await);
    let listed = sessions
        .list_checkpoints(ListCheckpointsRequest {
            scope: scope.clone(),
            session_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.checkpoints.len(), 4);
    assert!(!listed.head.is_empty());
    // Another client rolls back in between.
    assert_code(&env.run(["rollback", "2"]), 0);
    let moved = status(&env);
    let refused = sessions
        .rollback(RollbackRequest {
            scope: scope.clone(),
            session_id: String::new(),
            target: Some(rollback_request::Target::CheckpointId(
                listed.checkpoints[1].id.clone(),
            )),
            expect_head: listed.head.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("moved since"),
        "{}",
        refused.message()
    );
    // So is an undo chosen from the old listing.
    let refused = sessions
        .rollback(RollbackRequest {
            scope,
            session_id: String::new(),
            target: Some(rollback_request::Target::Undo(true)),
            expect_head: listed.head,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let now = status(&env);
    for field in [
        "response_id",
        "turns",
        "checkpoints",
        "transcript_items",
        "rollback_backup",
    ] {
        assert_eq!(now[field], moved[field], "{field}");
    }
}
