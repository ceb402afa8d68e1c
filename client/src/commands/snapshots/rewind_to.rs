//! `agentx rewind --to N`: one rewind for code and conversation — the folder
//! as it was before message N, the conversation as it was before it, or both.

use serde_json::json;

use agentx_shared::proto::{Checkpoint, RollbackRequest, SnapshotInfo, rollback_request};

use super::{Restore, restore_saying, say_err};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// Which halves a rewind puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Halves {
    pub code: bool,
    pub conversation: bool,
}

/// Message N (1 = the last) of a conversation, as a rewind sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The snapshot taken before it.
    pub before: SnapshotInfo,
    /// What the user wrote (whole when a checkpoint kept it, else the
    /// snapshot's label, its first 60 characters).
    pub prompt: String,
    /// The newest checkpoint older than the message: the conversation as
    /// it was before it. `None`: it was the conversation's first.
    pub checkpoint: Option<Checkpoint>,
}

/// The messages of `session` with a snapshot before them, newest first:
/// the numbering `diff N` and `/undo` use.
pub fn messages(session: &str, snaps: &[SnapshotInfo], checkpoints: &[Checkpoint]) -> Vec<Message> {
    let prefix = format!("{session}-");
    let at = |s: &SnapshotInfo| s.created_at.as_ref().map_or(0, |t| t.unix_ms);
    let cp_at = |c: &Checkpoint| c.created_at.as_ref().map_or(0, |t| t.unix_ms);
    snaps
        .iter()
        .filter(|s| s.phase == "before" && s.pair.starts_with(&prefix))
        .map(|before| {
            let taken = at(before);
            // Checkpoints are listed newest first.
            let checkpoint = checkpoints.iter().find(|c| cp_at(c) < taken).cloned();
            let answered = checkpoints
                .iter()
                .rev()
                .find(|c| cp_at(c) >= taken && c.note.is_empty());
            let prompt = answered
                .map(|c| c.last_user_message.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| before.label.clone());
            Message {
                before: before.clone(),
                prompt,
                checkpoint,
            }
        })
        .collect()
}

/// Where each answered message began, newest first, from checkpoints
/// alone (listed newest first): the transcript length of the checkpoint
/// before its answer (0 for the conversation's first).
pub fn answered_starts(checkpoints: &[Checkpoint]) -> Vec<u64> {
    checkpoints
        .iter()
        .enumerate()
        .filter(|(_, c)| c.note.is_empty())
        .map(|(i, _)| checkpoints.get(i + 1).map_or(0, |c| c.transcript_len))
        .collect()
}

/// The messages of conversation `session` ("" = the folder's current one)
/// a rewind can go back before, newest first, and the listing's head.
pub async fn listed(ctx: &Ctx, session: &str) -> CliResult<(String, Vec<Message>, String)> {
    let status = ctx.status(session).await?;
    if status.session_id.is_empty() {
        return Err(CliError::failed(
            "this folder has no conversation to rewind",
        ));
    }
    let session = status.session_id;
    let snaps = ctx.rpc().snapshots_list().await?.snapshots;
    let listed = ctx.rpc().checkpoints(&session).await?;
    let all = messages(&session, &snaps, &listed.checkpoints);
    Ok((session, all, listed.head))
}

/// `agentx rewind --to N [--code|--conversation|--both]`.
pub async fn run(
    ctx: &Ctx,
    n: u32,
    halves: Halves,
    (yes, force, as_json): (bool, bool, bool),
) -> CliResult<()> {
    // N was chosen when the command was typed: the conversation must not
    // move meanwhile (a turn, another rollback).
    let started = *crate::STARTED_MS.get_or_init(agentx_shared::time::now_ms);
    rewind(ctx, "", n, halves, (yes, force, as_json), started)
        .await
        .map(drop)
}

/// Rewinds conversation `session` ("" = current) to before message `n`;
/// refused when the conversation moved after `since_ms` (0: only the
/// listing's head is checked). The message's words when it was done.
pub async fn rewind(
    ctx: &Ctx,
    session: &str,
    n: u32,
    halves: Halves,
    (yes, force, as_json): (bool, bool, bool),
    since_ms: i64,
) -> CliResult<Option<String>> {
    let (session, all, head) = listed(ctx, session).await?;
    let count = all.len();
    let Some(message) = n
        .checked_sub(1)
        .and_then(|i| all.into_iter().nth(i as usize))
    else {
        return Err(CliError::failed(format!(
            "no message {n} of this conversation with a snapshot (it has {count}; 1 is the last)"
        )));
    };
    let shown = crate::show::visible(&message.prompt).into_owned();
    if !as_json {
        eprintln!(
            "rewinding to before message {n}: {}",
            crate::show::one_line(&message.prompt, 60)
        );
    }
    let mut code = "untouched";
    if halves.code {
        let say = if as_json {
            say_err
        } else {
            |l: &str| println!("{l}")
        };
        let applied = restore_saying(
            ctx,
            Restore::RewindId(message.before.id.clone()),
            (yes || as_json, force),
            say,
        )
        .await?;
        if !applied {
            // The user said no: the conversation stays as it is too.
            return Ok(None);
        }
        code = "restored";
    }
    let mut conversation = "untouched";
    if halves.conversation {
        let target = match &message.checkpoint {
            Some(cp) => rollback_request::Target::CheckpointId(cp.id.clone()),
            None => {
                return Err(CliError::failed(format!(
                    "message {n} is this conversation's first: there is no earlier checkpoint to go back to (`agentx new` starts afresh){}",
                    if halves.code {
                        "; the files were put back"
                    } else {
                        ""
                    }
                )));
            }
        };
        ctx.sessions()
            .rollback(RollbackRequest {
                scope: ctx.scope(),
                session_id: session.clone(),
                target: Some(target),
                expect_head: head,
                unchanged_since_ms: since_ms,
            })
            .await
            .map_err(|s| CliError::from_status("rollback", &s))?;
        conversation = "rolled back";
    }
    if as_json {
        println!(
            "{}",
            json!({"message": n, "prompt": message.prompt, "code": code,
                "conversation": conversation, "snapshot_id": message.before.id,
                "checkpoint_id": message.checkpoint.as_ref().map(|c| c.id.clone())})
        );
    } else {
        println!("code {code}, conversation {conversation}; the message was:");
        println!("{shown}");
    }
    Ok(Some(message.prompt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_shared::proto::Timestamp;

    fn snap(id: &str, phase: &str, pair: &str, at: i64, label: &str) -> SnapshotInfo {
        SnapshotInfo {
            id: id.into(),
            phase: phase.into(),
            pair: pair.into(),
            created_at: Some(Timestamp { unix_ms: at }),
            label: label.into(),
            ..Default::default()
        }
    }

    fn cp(id: &str, at: i64, user: &str) -> Checkpoint {
        Checkpoint {
            id: id.into(),
            created_at: Some(Timestamp { unix_ms: at }),
            last_user_message: user.into(),
            ..Default::default()
        }
    }

    #[test]
    fn each_message_pairs_with_the_checkpoint_before_it_and_its_whole_prompt() {
        // Newest first, as agentd lists them.
        let snaps = [
            snap("s4", "after", "c1-30", 35, "second"),
            snap("s3", "before", "c1-30", 30, "second"),
            snap("m", "manual", "", 25, "mine"),
            snap("o", "before", "c2-20", 22, "another conversation"),
            snap("s2", "after", "c1-10", 15, "first"),
            snap("s1", "before", "c1-10", 10, "first"),
        ];
        let cps = [cp("k2", 36, "second, whole"), cp("k1", 16, "first, whole")];
        let found = messages("c1", &snaps, &cps);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].before.id, "s3");
        assert_eq!(found[0].prompt, "second, whole");
        assert_eq!(
            found[0].checkpoint.as_ref().map(|c| c.id.as_str()),
            Some("k1")
        );
        assert_eq!(found[1].before.id, "s1");
        assert_eq!(found[1].checkpoint, None);
        // A message whose turn made no checkpoint keeps its label.
        let found = messages("c1", &snaps, &cps[1..]);
        assert_eq!(found[0].prompt, "second");
    }
}
