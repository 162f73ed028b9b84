//! The `interp_vulkan` fuzz target's check (`ladder::fuzzing::check_vulkan`) bounded: the
//! `interp_cpu` seed corpus and generated inputs on the Vulkan device against the interpreter.
//! Programs the device lacks a step for are refused (counted, not run); every one it accepts
//! must agree with the reference on every data set, with the device's library shaders off (a
//! CPU device's default) and on (`Target::VulkanLibrary`). Skipped, saying so, where no device
//! exists, unless `LADDER_REQUIRE_VULKAN=1`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan;
use ladder::fuzzing::{check_native_with, DiffOutcome, PlanCache, Target, DATA_SET_BYTES, STRUCTURE_BYTES};
use ladder::gen::seeded_bytes;

fn device(test: &str) -> bool {
    match vulkan::available() {
        Ok(_) => true,
        Err(e) if !std::env::var("LADDER_REQUIRE_VULKAN").is_ok_and(|v| v == "1") => {
            eprintln!("{test}: skipped: {e}");
            false
        }
        Err(e) => panic!("{test}: LADDER_REQUIRE_VULKAN=1 but {e}"),
    }
}

/// Totals over many inputs.
#[derive(Debug, Default)]
struct Tally {
    inputs: usize,
    refused: usize,
    ran: usize,
    data_sets: usize,
    /// Programs that ran a library shader.
    library: usize,
}

impl Tally {
    fn add(&mut self, o: DiffOutcome) {
        if o.no_case {
            return;
        }
        self.inputs += 1;
        if o.refused {
            self.refused += 1;
        } else {
            self.ran += 1;
            self.data_sets += o.passed;
            self.library += o.library as usize;
        }
    }
}

fn check(data: &[u8], cache: &PlanCache, what: &str) -> DiffOutcome {
    let outcome = check_native_with(data, cache).unwrap_or_else(|f| panic!("{what}: {f}"));
    let messages = vulkan::take_validation_messages();
    assert!(messages.is_empty(), "{what}: the validation layer reported:\n{}", messages.join("\n"));
    outcome
}

#[test]
fn generated_cases_agree_with_the_interpreter_on_the_device() {
    if !device("generated_cases_agree_with_the_interpreter_on_the_device") {
        return;
    }
    for target in [Target::Vulkan, Target::VulkanLibrary] {
        let cache = PlanCache::for_target(64, target);
        let mut tally = Tally::default();
        for structure in 0..40u64 {
            for variant in 0..2u64 {
                let mut bytes = seeded_bytes(0x7C1 << 40 | structure, 1 + STRUCTURE_BYTES + 2 * DATA_SET_BYTES);
                if variant > 0 {
                    let noise = seeded_bytes(0xDA7A << 40 | structure << 8 | variant, 2 * DATA_SET_BYTES);
                    bytes[1 + STRUCTURE_BYTES..].copy_from_slice(&noise);
                }
                tally.add(check(&bytes, &cache, &format!("{target:?}: structure {structure} variant {variant}")));
            }
        }
        println!("fuzz_vulkan {target:?}: {tally:?}, {:?}", cache.stats());
        // The device runs most of the op set's programs (pointwise, reductions, matmuls,
        // gathers): a change that made it refuse them all would pass every check above
        // vacuously.
        assert!(tally.ran * 2 >= tally.inputs, "{target:?}: the device ran too few: {tally:?}");
        assert!(tally.data_sets > tally.ran, "{target:?}: several data sets per program: {tally:?}");
        assert_eq!(tally.library > 0, target == Target::VulkanLibrary, "{target:?}: {tally:?}");
        let stats = cache.stats();
        assert!(stats.compiles <= 40, "{target:?}: a data mutation recompiled: {stats:?}");
    }
}

#[test]
fn the_interp_cpu_seed_corpus_agrees_on_the_device() {
    if !device("the_interp_cpu_seed_corpus_agrees_on_the_device") {
        return;
    }
    let paths = crate::common::seed_corpus("interp_cpu");
    for target in [Target::Vulkan, Target::VulkanLibrary] {
        let cache = PlanCache::for_target(64, target);
        let mut tally = Tally::default();
        for path in &paths {
            tally.add(check(&std::fs::read(path).unwrap(), &cache, &format!("{target:?}: {}", path.display())));
        }
        println!("fuzz_vulkan seeds {target:?}: {tally:?}");
        assert!(tally.ran * 2 >= tally.inputs, "{target:?}: the device ran too few seeds: {tally:?}");
        assert_eq!(tally.library > 0, target == Target::VulkanLibrary, "{target:?}: {tally:?}");
    }
}
