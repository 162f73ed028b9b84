//! Arbitrary bytes as a differential test of the CPU backend: the first byte picks a
//! high-level op, the next `STRUCTURE_BYTES` are `ladder::numerics` case bytes (argument types,
//! shapes, attributes and the first data set), and every further `DATA_SET_BYTES` draw another
//! data set (size-symbol values and adversarial data) for the same graph. The case is lowered to
//! prims and compiled once into a native plan (Cranelift kernels, GEMM, the reference executor
//! for graph breaks), cached by the graph's text, and run on every data set; an output outside
//! the tolerance table against the op's precise interpreter reference, or a failed compile or
//! run, panics with a ready-to-paste file test. The check is `ladder::fuzzing::check_native`;
//! `tests/all/fuzz_native.rs` and `tests/all/cpu_numerics.rs` run it bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ladder::fuzzing::check_native(data);
});
