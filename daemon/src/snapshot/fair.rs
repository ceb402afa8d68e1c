//! The snapshot store's queue of work: first in, first out within a folder,
//! folders served in turn, so one busy folder never holds up another's.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// Work waiting for the store thread, per folder, plus completions (a scan
/// or a restore coming back) that go before anything else.
pub(super) struct Fair<T> {
    urgent: VecDeque<T>,
    queues: HashMap<PathBuf, VecDeque<T>>,
    /// Folders with work waiting, in the order they are served next.
    turns: VecDeque<PathBuf>,
}

impl<T> Default for Fair<T> {
    fn default() -> Self {
        Self {
            urgent: VecDeque::new(),
            queues: HashMap::new(),
            turns: VecDeque::new(),
        }
    }
}

impl<T> Fair<T> {
    /// Queues `item` after the folder's other work.
    pub(super) fn push(&mut self, folder: &Path, item: T) {
        match self.queues.get_mut(folder) {
            Some(queue) => queue.push_back(item),
            None => {
                self.queues
                    .insert(folder.to_path_buf(), VecDeque::from([item]));
                self.turns.push_back(folder.to_path_buf());
            }
        }
    }

    /// Puts `items` (in order) before the folder's other work, and the
    /// folder first in line: what waited for the folder's scan or restore.
    pub(super) fn push_first(&mut self, folder: &Path, items: impl IntoIterator<Item = T>) {
        let mut items: VecDeque<T> = items.into_iter().collect();
        if items.is_empty() {
            return;
        }
        if let Some(queue) = self.queues.remove(folder) {
            items.extend(queue);
        }
        self.queues.insert(folder.to_path_buf(), items);
        self.turns.retain(|f| f != folder);
        self.turns.push_front(folder.to_path_buf());
    }

    /// Queues `item` before any folder's work.
    pub(super) fn push_urgent(&mut self, item: T) {
        self.urgent.push_back(item);
    }

    /// The next item: an urgent one, else the next folder's oldest.
    pub(super) fn pop(&mut self) -> Option<T> {
        if let Some(item) = self.urgent.pop_front() {
            return Some(item);
        }
        let folder = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&folder)?;
        let item = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&folder);
        } else {
            self.turns.push_back(folder);
        }
        item
    }

    /// Takes every item of `folder` that `wanted` picks out of the line
    /// (the rest keep their order).
    pub(super) fn take_out(&mut self, folder: &Path, wanted: impl Fn(&T) -> bool) -> Vec<T> {
        let Some(queue) = self.queues.get_mut(folder) else {
            return Vec::new();
        };
        let (taken, kept): (VecDeque<T>, VecDeque<T>) = queue.drain(..).partition(|i| wanted(i));
        if kept.is_empty() {
            self.queues.remove(folder);
            self.turns.retain(|f| f != folder);
        } else {
            *queue = kept;
        }
        taken.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(fair: &mut Fair<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| fair.pop()).collect()
    }

    #[test]
    fn folders_take_turns_and_each_keeps_its_order() {
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        let mut fair = Fair::default();
        for item in ["a1", "a2", "a3", "a4"] {
            fair.push(a, item);
        }
        fair.push(b, "b1");
        fair.push(b, "b2");
        assert_eq!(drain(&mut fair), ["a1", "b1", "a2", "b2", "a3", "a4"]);
    }

    #[test]
    fn urgent_items_and_returning_work_go_first() {
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        let mut fair = Fair::default();
        fair.push(a, "a1");
        fair.push(b, "b1");
        fair.push(b, "b2");
        fair.push_first(b, ["b-parked1", "b-parked2"]);
        fair.push_urgent("done");
        assert_eq!(
            drain(&mut fair),
            ["done", "b-parked1", "a1", "b-parked2", "b1", "b2"]
        );
    }

    #[test]
    fn take_out_picks_a_folders_items_and_keeps_the_rest_in_line() {
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        let mut fair = Fair::default();
        fair.push(a, "take-a1");
        fair.push(a, "other-a");
        fair.push(b, "take-b");
        fair.push(a, "take-a2");
        let taken = fair.take_out(a, |i| i.starts_with("take"));
        assert_eq!(taken, ["take-a1", "take-a2"]);
        assert_eq!(drain(&mut fair), ["other-a", "take-b"]);
        fair.push(a, "take-a3");
        assert_eq!(fair.take_out(a, |i| i.starts_with("take")), ["take-a3"]);
        assert!(fair.pop().is_none());
    }
}
