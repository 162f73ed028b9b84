//! Arbitrary bytes as a decomposition test: the first byte picks a high-level op, the rest
//! are `ladder::numerics::check_op`'s case bytes (argument types, shapes, attributes and
//! adversarial data). A case whose lowered graph disagrees with the op's precise reference
//! beyond the tolerance table (or fails to lower or run) panics with a ready-to-paste file
//! test. Ops that have no decomposition yet are skipped: `tests/all/numerics.rs` lists them.
//! The same generator runs bounded in `tests/all/numerics.rs` (`cargo test`).
#![no_main]

use ladder::numerics::{check_op, high_level_ops, CaseResult, FailureKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let ops = high_level_ops();
    let op = ops[first as usize % ops.len()];
    if let CaseResult::Failed(f) = check_op(op, rest) {
        if !matches!(f.kind, FailureKind::NoDecomposition(_)) {
            panic!("{f}");
        }
    }
});
