//! What indexing one commit for search costs at turn 10 and at turn 5,000
//! of a conversation, side by side (both conversations in one index, their
//! commits alternating): incremental indexing keeps it flat. The same
//! commit indexed whole (as before, or after a restart) for comparison.
//! `cargo bench -p agentd --bench search` runs it.

use std::time::Duration;

use agentd::benching::SearchBench;

const SMALL: usize = 0;
const LARGE: usize = 1;
const LONG: usize = 5_000;
const SAMPLES: usize = 41;
const WHOLE_SAMPLES: usize = 5;

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// A directory of this run (in /dev/shm when there is one: the disk's own
/// syncing would hide what indexing costs).
fn scratch() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("agentd-bench-search-{}", std::process::id()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = scratch();
    let _ = std::fs::remove_dir_all(&dir);
    let result = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let started = std::time::Instant::now();
    let mut bench = SearchBench::new(dir, &[9, LONG - 1])?;
    println!(
        "search: indexing one commit (a turn of ~1.5 KB), median of {SAMPLES} (setup {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        // Always turn 10: back to 9 turns (indexed, not measured) first.
        bench.roll_back(SMALL, 9)?;
        small.push(bench.commit(SMALL)?);
        // Turn 5,000 and on (grows by one per sample).
        large.push(bench.commit(LARGE)?);
    }
    let last = bench.turns(LARGE);
    let mut whole = Vec::new();
    for _ in 0..WHOLE_SAMPLES {
        whole.push(bench.commit_whole(LARGE)?);
    }
    if bench.hits("\"parser5000 rs\"") != 1 {
        return Err("turn 5,000 is not found exactly once".into());
    }
    let (small, large, whole) = (median_ms(small), median_ms(large), median_ms(whole));
    println!("  commit at turn 10:              {small:8.2} ms");
    println!(
        "  commit at turn {LONG}..{last}:     {large:8.2} ms  ({:.2}× turn 10)",
        large / small
    );
    println!(
        "  same, conversation indexed whole: {whole:8.2} ms  ({:.0}× turn 10; median of {WHOLE_SAMPLES})",
        whole / small
    );
    Ok(())
}
