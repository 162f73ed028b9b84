//! Arbitrary bytes as a differential test of the Vulkan backend: the `interp_cpu` target's
//! cases (an op byte, `ladder::numerics` structure bytes, then further data sets) compiled for
//! the process's Vulkan device (lavapipe will do), with its library shaders off and on, and
//! checked against the op's precise
//! interpreter reference under the tolerance table. A program with a step the device lacks is
//! refused when it compiles and is not a finding; a wrong result, a validation message or any
//! other compile or run error panics with a ready-to-paste file test. The check is
//! `ladder::fuzzing::check_vulkan`; `tests/all/fuzz_vulkan.rs` runs it bounded. Start it from
//! the `interp_cpu` corpus: `cargo fuzz run interp_vulkan corpus/interp_cpu`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ladder::fuzzing::check_vulkan(data);
});
