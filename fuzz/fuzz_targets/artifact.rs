//! Arbitrary bytes as a compiled artifact: reading gives an artifact or a typed error, never a
//! panic; what reads writes back the same and its graph runs on the interpreter.
//! The checks are `ladder::fuzzing::check_artifact`, which `tests/all/artifact.rs` also runs
//! over the seed corpus (`fuzz/corpus/artifact`) and mutations of it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ladder::fuzzing::check_artifact(data);
});
