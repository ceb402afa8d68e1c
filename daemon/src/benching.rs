//! What the benchmarks under `benches/` measure in-process: token counting
//! and composing a compacted context (not a stable API).

pub use crate::turn::compact::{Budget, compose};
pub use crate::turn::tokens::Counter;
