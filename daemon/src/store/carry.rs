//! What a fork and a kept-as-fork line carry of their parent conversation:
//! each field of the document named once, so a new field is placed on purpose.
//!
//! Every function here (and [`ConversationDoc::checkpoint`] and a rollback's
//! backup, which do the same for their parts) destructures the document
//! without `..`: adding a field to [`ConversationDoc`] fails to compile until
//! each of them says whether it travels.

use super::conversation::{Checkpoint, ConversationDoc, FORMAT};
use super::fork::ForkOrigin;

/// A new conversation `id` branched from `parent` at checkpoint `cp`,
/// keeping `parent`'s first `keep` checkpoints (the line up to `cp`).
pub fn forked(
    parent: &ConversationDoc,
    cp: &Checkpoint,
    keep: usize,
    id: String,
    now: i64,
) -> ConversationDoc {
    let ConversationDoc {
        // Its own.
        format: _,
        id: parent_id,
        created_at: _,
        updated_at: _,
        // The same place, name and model choice.
        folder,
        agent,
        title,
        model,
        // As the checkpoint had them.
        response_id: _,
        usage: _,
        last_user: _,
        last_assistant: _,
        turns: _,
        journal_items: _,
        journal_bytes: _,
        context: _,
        checkpoints,
        // The parent's open work and history after the checkpoint: not the
        // fork's (the fork starts at a committed point).
        pending_shell: _,
        pending_shell_runs: _,
        pending_calls: _,
        calls_epoch: _,
        unsent: _,
        turn_open: _,
        interrupted: _,
        failed: _,
        cut_short: _,
        rollback: _,
        older_rollbacks: _,
        rollbacks: _,
        // An "always" answer is given to one conversation, not its forks.
        approve_all: _,
        // One-shots cannot be forked (refused before); a fork is a root.
        base: _,
        forked_from: _,
    } = parent;
    ConversationDoc {
        format: FORMAT,
        id,
        folder: folder.clone(),
        agent: agent.clone(),
        title: title.clone(),
        created_at: now,
        updated_at: now,
        response_id: cp.response_id.clone(),
        usage: cp.usage,
        last_user: cp.last_user.clone(),
        last_assistant: cp.last_assistant.clone(),
        pending_shell: String::new(),
        pending_shell_runs: Vec::new(),
        pending_calls: Vec::new(),
        turns: cp.turns,
        approve_all: false,
        journal_items: cp.journal_items,
        journal_bytes: cp.journal_bytes,
        unsent: Vec::new(),
        turn_open: false,
        interrupted: None,
        failed: None,
        cut_short: None,
        checkpoints: checkpoints.iter().take(keep).cloned().collect(),
        calls_epoch: 0,
        rollback: None,
        older_rollbacks: Vec::new(),
        base: None,
        rollbacks: 0,
        forked_from: Some(ForkOrigin {
            id: parent_id.clone(),
            turn: cp.turns,
        }),
        context: cp.context,
        model: model.clone(),
    }
}

/// `parent`'s whole local line as a new conversation `id` titled `title`,
/// forked at `turn` (its turns went elsewhere on another machine).
pub fn kept_line(
    parent: &ConversationDoc,
    id: String,
    title: String,
    turn: u32,
    now: i64,
) -> ConversationDoc {
    let ConversationDoc {
        format,
        id: parent_id,
        created_at: _,
        updated_at,
        title: _,
        // The line itself, as it stands, open work included: this
        // machine's user goes on with it.
        folder,
        agent,
        model,
        response_id,
        usage,
        last_user,
        last_assistant,
        turns,
        journal_items,
        journal_bytes,
        context,
        checkpoints,
        pending_shell,
        pending_shell_runs,
        pending_calls,
        calls_epoch,
        unsent,
        turn_open,
        interrupted,
        failed,
        cut_short,
        approve_all,
        // Rollbacks undo within one conversation's own file: not carried.
        rollback: _,
        older_rollbacks: _,
        rollbacks: _,
        base: _,
        forked_from: _,
    } = parent;
    ConversationDoc {
        format: *format,
        id,
        folder: folder.clone(),
        agent: agent.clone(),
        title,
        created_at: now,
        updated_at: now.max(*updated_at),
        response_id: response_id.clone(),
        usage: *usage,
        last_user: last_user.clone(),
        last_assistant: last_assistant.clone(),
        pending_shell: pending_shell.clone(),
        pending_shell_runs: pending_shell_runs.clone(),
        pending_calls: pending_calls.clone(),
        turns: *turns,
        approve_all: *approve_all,
        journal_items: *journal_items,
        journal_bytes: *journal_bytes,
        unsent: unsent.clone(),
        turn_open: *turn_open,
        interrupted: interrupted.clone(),
        failed: failed.clone(),
        cut_short: cut_short.clone(),
        checkpoints: checkpoints.clone(),
        calls_epoch: *calls_epoch,
        rollback: None,
        older_rollbacks: Vec::new(),
        base: None,
        rollbacks: 0,
        forked_from: Some(ForkOrigin {
            id: parent_id.clone(),
            turn,
        }),
        context: *context,
        model: model.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> ConversationDoc {
        let mut doc = ConversationDoc::new("19a0b1c2d3e-abcdef".into(), "/f".into(), "a".into(), 5);
        doc.title = "t".into();
        doc.model = Some("tiny".into());
        doc.turns = 2;
        doc.approve_all = true;
        doc.pending_shell = "$ ls".into();
        doc.rollbacks = 3;
        let mut cp = doc.checkpoint(6);
        cp.turns = 1;
        cp.context = Some(super::super::conversation::Fill {
            tokens: 42,
            estimated: true,
        });
        doc.checkpoints = vec![cp, doc.checkpoint(7)];
        doc
    }

    #[test]
    fn a_fork_keeps_the_model_and_the_checkpoint_s_context_but_no_open_work() {
        let parent = parent();
        let cp = parent.checkpoints[0].clone();
        let fork = forked(&parent, &cp, 1, "19a0b1c2d3f-abcdef".into(), 9);
        assert_eq!(fork.model.as_deref(), Some("tiny"));
        assert_eq!(fork.context, cp.context);
        assert_eq!(fork.turns, 1);
        assert_eq!(fork.checkpoints.len(), 1);
        assert_eq!(fork.title, "t");
        assert!(!fork.approve_all);
        assert!(fork.pending_shell.is_empty());
        assert_eq!(fork.rollbacks, 0);
        assert_eq!(fork.forked_from.map(|f| f.id), Some(parent.id));
    }

    #[test]
    fn a_kept_line_keeps_everything_but_the_rollbacks() {
        let parent = parent();
        let kept = kept_line(
            &parent,
            "19a0b1c2d3f-abcdef".into(),
            "t (fork)".into(),
            2,
            9,
        );
        assert_eq!(kept.model.as_deref(), Some("tiny"));
        assert!(kept.approve_all);
        assert_eq!(kept.pending_shell, "$ ls");
        assert_eq!(kept.checkpoints.len(), 2);
        assert_eq!(kept.rollbacks, 0);
        assert_eq!(kept.title, "t (fork)");
        assert_eq!(
            kept.forked_from.map(|f| (f.id, f.turn)),
            Some((parent.id, 2))
        );
    }
}
