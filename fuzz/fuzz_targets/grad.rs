//! Arbitrary bytes as a gradient check: a random graph of any ops (`ladder::gen`), made f64,
//! differentiated by `ladder::autodiff` with respect to every float input and compared with
//! central differences on smooth data (kinks and singular points skipped). A disagreement, or
//! a joint graph that cannot be built or run for a graph that lowers, panics with the graph's
//! text. The check is `ladder::numerics::grad::check_random_graph`; `tests/all/autodiff.rs`
//! runs it bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = ladder::numerics::grad::check_random_graph(data) {
        panic!("{e}");
    }
});
