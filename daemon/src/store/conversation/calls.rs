//! Where a turn's tool calls stand between two saves of the document: one
//! record appended per change (`<id>.calls.jsonl`), folded in at load.
//!
//! A call that starts or finishes costs one small durable append, whatever
//! the number of calls pending, instead of a rewrite of the document with
//! the whole list. Each record carries the document's `calls_epoch`; a save
//! of the document folds every record in and moves to the next epoch, so
//! records the log still holds after a crash are recognised as stale.

use std::io::{self, BufRead as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::{CallState, PendingCall, ToolImage};

use super::ConversationDoc;
use crate::durable;

/// One call's new state.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    epoch: u64,
    index: usize,
    call_id: String,
    state: CallState,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    output: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    images: Vec<ToolImage>,
}

/// How much of the log file holds records of the document's epoch, and
/// how long the file is (a torn or stale tail is cut before the next append).
#[derive(Debug, Default)]
pub struct CallsLog {
    valid: u64,
    on_disk: u64,
    /// The file's name is known durable in its directory (fsynced by this
    /// process since the file was last created): later appends skip that
    /// directory fsync, which would cost each turn's first call as much as
    /// the append itself.
    name_durable: bool,
}

impl CallsLog {
    /// Applies the log at `path` to `doc`'s pending calls: records of its
    /// epoch, in order, up to a torn tail (records of another epoch are
    /// stale: skipped).
    pub fn fold(path: &Path, doc: &mut ConversationDoc) -> io::Result<Self> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e),
        };
        let on_disk = file.metadata()?.len();
        let mut valid = 0;
        let mut reader = io::BufReader::new(file);
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 || line.last() != Some(&b'\n') {
                break;
            }
            let Ok(record) = serde_json::from_slice::<Record>(&line) else {
                break;
            };
            valid += line.len() as u64;
            if record.epoch != doc.calls_epoch {
                continue;
            }
            if let Some(call) = doc.pending_calls.get_mut(record.index)
                && call.call_id == record.call_id
            {
                call.state = record.state;
                call.exit_code = record.exit_code;
                call.output = record.output;
                call.images = record.images;
            }
        }
        Ok(Self {
            valid,
            on_disk,
            name_durable: false,
        })
    }

    /// Records durably that call `index` of `doc` now stands as `call`, and
    /// applies it to `doc`.
    pub fn update(
        &mut self,
        path: &Path,
        doc: &mut ConversationDoc,
        index: usize,
        call: PendingCall,
        sync: durable::Sync,
    ) -> io::Result<()> {
        match doc.pending_calls.get(index) {
            Some(pending) if pending.call_id == call.call_id => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("no pending call {:?} at {index}", call.call_id),
                ));
            }
        }
        let record = Record {
            epoch: doc.calls_epoch,
            index,
            call_id: call.call_id.clone(),
            state: call.state,
            exit_code: call.exit_code,
            output: call.output.clone(),
            images: call.images.clone(),
        };
        let mut line = serde_json::to_vec(&record).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut file = match durable::open_existing_append(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.name_durable = false;
                durable::open_append(path)?
            }
            Err(e) => return Err(e),
        };
        if self.on_disk != self.valid || file.metadata()?.len() != self.valid {
            file.set_len(self.valid)?;
        }
        if let Err(e) = durable::append_as(&mut file, &line, sync) {
            // Not durable: the record is cut off again (best effort), so
            // the log says what memory does; a tail left is cut before the
            // next append and never folded in under a later save's epoch.
            if file.set_len(self.valid).is_ok() {
                self.on_disk = self.valid;
            } else {
                self.on_disk = self.valid + line.len() as u64;
            }
            return Err(e);
        }
        if !self.name_durable
            && let Some(dir) = path.parent()
        {
            // The file may be new: its name must be durable too.
            durable::fsync_dir_as(dir, sync)?;
            self.name_durable = true;
        }
        self.valid += line.len() as u64;
        self.on_disk = self.valid;
        doc.pending_calls[index] = call;
        Ok(())
    }

    /// Whether the next save must move to a new epoch (the log holds bytes).
    pub fn in_use(&self) -> bool {
        self.on_disk > 0
    }

    /// After the document was saved under a new epoch: the records are
    /// folded in, the file is emptied (a failure only leaves stale records,
    /// cut before the next append).
    pub fn saved(&mut self, path: &Path) {
        self.valid = 0;
        match std::fs::OpenOptions::new().write(true).open(path) {
            Ok(file) if file.set_len(0).is_ok() => self.on_disk = 0,
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.on_disk = 0,
            _ => {}
        }
    }
}
