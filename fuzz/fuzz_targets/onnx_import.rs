//! Arbitrary bytes as an ONNX model: importing gives a graph or a typed error, never a panic
//! or an unbounded allocation; imported graphs verify, round-trip through the text form and
//! run on the interpreter (tight limits, zero inputs) without panicking.
//! The checks are `ladder::fuzzing::check_onnx`, which `tests/all/onnx_fuzz_seeds.rs` also
//! runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ladder::fuzzing::check_onnx(data);
});
