//! What one commit changes in a conversation, grouped by what it is about
//! (transcript, turn, shell runs, settings, accounting, checkpoint), and how each part applies.

use agentx_shared::conversation::{Item, PendingCall, Usage};

use crate::store::conversation::{ConversationDoc, Fill, Marker, ShellRun, title_from};

/// What to do with a field that can be set or emptied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Update<T> {
    /// Leave it as it is.
    #[default]
    Keep,
    Set(T),
    /// Empty it.
    Clear,
}

impl<T> Update<T> {
    /// `Set` a value, or `Clear` when there is none.
    pub fn set_or_clear(value: Option<T>) -> Self {
        match value {
            Some(v) => Self::Set(v),
            None => Self::Clear,
        }
    }

    pub fn apply(self, field: &mut Option<T>) {
        match self {
            Self::Keep => {}
            Self::Set(v) => *field = Some(v),
            Self::Clear => *field = None,
        }
    }
}

/// A set of field updates applied (and made durable) in one step.
#[derive(Default, Debug)]
pub struct Change {
    pub transcript: TranscriptChange,
    pub turn: TurnChange,
    pub shell: ShellChange,
    pub settings: SettingsChange,
    pub accounting: AccountingChange,
    /// Record a checkpoint of the resulting state (a successful turn) and
    /// make it the folder+agent's shared checkpoint.
    pub checkpoint: Option<NewCheckpoint>,
}

/// The transcript and how far the model server holds it.
#[derive(Default, Debug)]
pub struct TranscriptChange {
    /// Items added to the journal.
    pub append: Vec<Item>,
    /// The items no successful response has acknowledged yet (what a retry sends).
    pub unsent: Option<Vec<Item>>,
    /// The response the server's copy of the transcript ends at.
    pub response_id: Update<String>,
    /// The user's last message (also the title of an untitled conversation).
    pub last_user: Option<String>,
    pub last_assistant: Option<String>,
}

/// The state of the conversation's turn.
#[derive(Default, Debug)]
pub struct TurnChange {
    /// A turn is running (`true`) or has ended (`false`).
    pub open: Option<bool>,
    /// A turn completed: count it.
    pub completed: bool,
    /// The tool calls the model asked for and where each stands.
    pub calls: Option<Vec<PendingCall>>,
    pub interrupted: Update<Marker>,
    pub failed: Update<Marker>,
    /// The answer was (or was not) cut short by the server.
    pub cut_short: Update<Marker>,
}

/// `!command` transcripts waiting to be sent with a message.
#[derive(Default, Debug)]
pub struct ShellChange {
    /// Empty the transcripts of no client in particular (a message took them).
    pub clear_pending: bool,
    /// Add to the transcripts of no client in particular.
    pub add_pending: Option<String>,
    /// Add one client's run.
    pub add_run: Option<ShellRun>,
    /// Positions in `pending_shell_runs` a message took (sent).
    pub take_runs: Vec<usize>,
}

/// The conversation's own settings.
#[derive(Default, Debug)]
pub struct SettingsChange {
    /// A new title (a rename; does not move the conversation in the list).
    pub title: Option<String>,
    /// The conversation's own model (`/model`).
    pub model: Update<String>,
    /// Approve every tool call for the rest of the conversation.
    pub approve_all: Option<bool>,
}

/// What the model server used and holds.
#[derive(Default, Debug)]
pub struct AccountingChange {
    /// Tokens to add to the conversation's usage.
    pub usage: Option<Usage>,
    /// How full the model's context is now.
    pub context: Update<Fill>,
}

/// A checkpoint the change records.
#[derive(Default, Debug)]
pub struct NewCheckpoint {
    /// Said by the checkpoint (a compaction's sizes).
    pub note: Option<String>,
}

impl Change {
    /// A change of the turn's state only.
    pub fn turn(turn: TurnChange) -> Self {
        Self {
            turn,
            ..Self::default()
        }
    }

    /// Forget the server's response chain: the next request sends the whole transcript.
    pub fn new_chain() -> Self {
        Self {
            transcript: TranscriptChange {
                response_id: Update::Clear,
                ..TranscriptChange::default()
            },
            ..Self::default()
        }
    }

    /// A change of the conversation's settings only.
    pub fn settings(settings: SettingsChange) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// A change of the waiting `!command` transcripts only.
    pub fn shell(shell: ShellChange) -> Self {
        Self {
            shell,
            ..Self::default()
        }
    }

    /// Only a title: a rename, which leaves the conversation's place in the list.
    pub(super) fn renames_only(&self) -> bool {
        self.transcript.append.is_empty() && self.settings.title.is_some()
    }
}

impl TurnChange {
    /// A turn starts (or goes on): open, with no marker of a previous end.
    pub fn started() -> Self {
        Self {
            open: Some(true),
            interrupted: Update::Clear,
            failed: Update::Clear,
            ..Self::default()
        }
    }

    /// The turn was cut short (Ctrl-C, a dead client): closed and marked so.
    pub fn interrupted(marker: Marker) -> Self {
        Self {
            open: Some(false),
            interrupted: Update::Set(marker),
            ..Self::default()
        }
    }

    /// The turn failed: closed and marked so.
    pub fn failed(marker: Marker) -> Self {
        Self {
            open: Some(false),
            failed: Update::Set(marker),
            ..Self::default()
        }
    }
}

impl TranscriptChange {
    fn apply(self, doc: &mut ConversationDoc) {
        self.response_id.apply(&mut doc.response_id);
        if let Some(text) = self.last_user {
            if doc.title.is_empty() {
                doc.title = title_from(&text);
            }
            doc.last_user = text;
        }
        if let Some(text) = self.last_assistant {
            doc.last_assistant = text;
        }
        if let Some(unsent) = self.unsent {
            doc.unsent = unsent;
        }
    }
}

impl TurnChange {
    fn apply(self, doc: &mut ConversationDoc) {
        if let Some(calls) = self.calls {
            doc.pending_calls = calls;
        }
        if self.completed {
            doc.turns += 1;
        }
        if let Some(open) = self.open {
            doc.turn_open = open;
        }
        self.interrupted.apply(&mut doc.interrupted);
        self.failed.apply(&mut doc.failed);
        self.cut_short.apply(&mut doc.cut_short);
    }
}

impl ShellChange {
    fn apply(self, doc: &mut ConversationDoc) {
        if self.clear_pending {
            doc.pending_shell.clear();
        }
        if let Some(text) = self.add_pending {
            doc.pending_shell.push_str(&text);
        }
        // Runs are only appended meanwhile, so the positions still hold.
        let mut n = 0;
        doc.pending_shell_runs.retain(|_| {
            n += 1;
            !self.take_runs.contains(&(n - 1))
        });
        doc.pending_shell_runs.extend(self.add_run);
    }
}

impl SettingsChange {
    fn apply(self, doc: &mut ConversationDoc) {
        if let Some(all) = self.approve_all {
            doc.approve_all = all;
        }
        self.model.apply(&mut doc.model);
        if let Some(title) = self.title {
            doc.title = title;
        }
    }
}

impl AccountingChange {
    fn apply(self, doc: &mut ConversationDoc) {
        if let Some(usage) = self.usage {
            doc.usage.add(&usage);
        }
        self.context.apply(&mut doc.context);
    }
}

/// Applies every part but the journal append and the checkpoint to `doc`;
/// returns the checkpoint to record, taken of the resulting state.
pub(super) fn apply(change: Change, doc: &mut ConversationDoc) -> Option<NewCheckpoint> {
    let Change {
        transcript,
        turn,
        shell,
        settings,
        accounting,
        checkpoint,
    } = change;
    transcript.apply(doc);
    turn.apply(doc);
    shell.apply(doc);
    accounting.apply(doc);
    // After the last message: a new title overrides the one taken from it.
    settings.apply(doc);
    checkpoint
}

#[cfg(test)]
mod tests {
    use super::Update;

    #[test]
    fn an_update_keeps_sets_or_clears_its_field() {
        let mut field = Some(1);
        Update::Keep.apply(&mut field);
        assert_eq!(field, Some(1));
        Update::Set(2).apply(&mut field);
        assert_eq!(field, Some(2));
        Update::Clear.apply(&mut field);
        assert_eq!(field, None);
        Update::Keep.apply(&mut field);
        assert_eq!(field, None);
        Update::Set(3).apply(&mut field);
        assert_eq!(field, Some(3));
    }

    #[test]
    fn set_or_clear_follows_the_option() {
        assert_eq!(Update::set_or_clear(Some("m")), Update::Set("m"));
        assert_eq!(Update::set_or_clear(None::<&str>), Update::Clear);
    }
}
