//! Arbitrary bytes as a differential test of the CPU backend: the first byte picks a
//! high-level op, the rest are `ladder::numerics` case bytes (argument types, shapes,
//! attributes and adversarial data). The case is lowered to prims and run as a native plan
//! (Cranelift kernels, GEMM, the reference executor for graph breaks); an output outside the
//! tolerance table against the op's precise interpreter reference, or a failed compile or run,
//! panics with a ready-to-paste file test. `tests/all/cpu_numerics.rs` runs the same check
//! bounded.
#![no_main]

use ladder::numerics::{check_op_on, high_level_ops, run_on_cpu, CaseResult};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let ops = high_level_ops();
    let op = ops[first as usize % ops.len()];
    if let CaseResult::Failed(f) = check_op_on(op, rest, &run_on_cpu) {
        panic!("{f}");
    }
});
