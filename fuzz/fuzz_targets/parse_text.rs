//! Arbitrary bytes as graph text: whatever parses must verify, round-trip through the printer,
//! and run on the interpreter (tight limits, zero inputs) without panicking.
//! The checks are `ladder::fuzzing::check_text`, which `tests/all/fuzz_seeds.rs` also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ladder::fuzzing::check_text(data);
});
