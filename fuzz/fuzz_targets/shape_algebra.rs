//! Arbitrary bytes as a program over the size algebra (`ladder::Dim`): each step builds an
//! expression through `Dim`, through the signed `SizeExpr` and through the text form, and
//! every result must be a typed error or agree with integer arithmetic at the input's symbol
//! values; printed dims parse back; proven comparisons hold. The check is
//! `ladder::fuzzing::check_dims`, which `tests/all/fuzz_dims.rs` also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ladder::fuzzing::check_dims(data);
});
