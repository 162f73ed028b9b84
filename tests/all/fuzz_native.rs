//! The `interp_cpu` fuzz target's check (`ladder::fuzzing::check_native`) bounded: its seed
//! corpus, generated inputs whose data sets vary under one structure (the compiled plan must be
//! reused), and the cache's bound.

use ladder::fuzzing::{check_native_with, PlanCache, DATA_SET_BYTES, STRUCTURE_BYTES};
use ladder::gen::seeded_bytes;
use ladder::numerics::{check_op_on, high_level_ops, run_on_cpu, CaseResult};

/// Structures generated, and inputs run per structure (the first, then data mutations).
const STRUCTURES: u64 = 30;
const INPUTS_PER_STRUCTURE: u64 = 3;

fn input(structure: u64, variant: u64) -> Vec<u8> {
    let mut bytes = seeded_bytes(0xD1F << 40 | structure, 1 + STRUCTURE_BYTES + 2 * DATA_SET_BYTES);
    if variant > 0 {
        // A change in the data sets only: the same graph, other values.
        let noise = seeded_bytes(0xDA7A << 40 | structure << 8 | variant, 2 * DATA_SET_BYTES);
        bytes[1 + STRUCTURE_BYTES..].copy_from_slice(&noise);
    }
    bytes
}

#[test]
fn generated_cases_pass_and_reuse_their_plans() {
    let cache = PlanCache::new(64);
    let (mut lookups, mut passed) = (0u64, 0usize);
    for structure in 0..STRUCTURES {
        for variant in 0..INPUTS_PER_STRUCTURE {
            let outcome = check_native_with(&input(structure, variant), &cache).unwrap_or_else(|f| panic!("{f}"));
            lookups += u64::from(!outcome.no_case);
            passed += outcome.passed;
        }
    }
    let stats = cache.stats();
    println!("fuzz_native: {lookups} inputs with a case, {passed} data sets passed, {stats:?}");
    assert!(passed as u64 > lookups, "most inputs check several data sets: {passed} passed of {lookups} inputs");
    assert_eq!(stats.hits + stats.compiles, lookups);
    assert!(stats.compiles <= STRUCTURES, "a data mutation recompiled: {stats:?}");
    assert!(stats.hits >= (INPUTS_PER_STRUCTURE - 1) * stats.compiles, "plans were not reused: {stats:?}");
}

#[test]
fn the_seed_corpus_passes() {
    let paths = crate::common::seed_corpus("interp_cpu");
    assert!(paths.len() >= 65, "the seed corpus has {} files", paths.len());
    let cache = PlanCache::new(64);
    for path in &paths {
        let data = std::fs::read(path).unwrap();
        if let Err(f) = check_native_with(&data, &cache) {
            panic!("{}: {f}", path.display());
        }
    }
}

/// An input no longer than the op byte and the structure bytes is the case the numerics
/// harness builds from those bytes, run on the CPU backend.
#[test]
fn short_inputs_are_the_numerics_cases() {
    let ops = high_level_ops();
    let cache = PlanCache::new(8);
    for k in 0..20u64 {
        let bytes = seeded_bytes(0x5407 << 40 | k, 1 + STRUCTURE_BYTES);
        let op = ops[bytes[0] as usize % ops.len()];
        let old = check_op_on(op, &bytes[1..], &run_on_cpu);
        let new = check_native_with(&bytes, &cache).unwrap_or_else(|f| panic!("{f}"));
        match old {
            CaseResult::Passed(_) => assert_eq!((new.passed, new.skipped), (1, 0), "{op}, input {k}"),
            CaseResult::Skipped(_) => assert!(new.no_case || new.skipped == 1, "{op}, input {k}: {new:?}"),
            CaseResult::Failed(f) => panic!("{f}"),
        }
    }
}

#[test]
fn the_plan_cache_is_bounded() {
    let cache = PlanCache::new(2);
    for structure in 0..6 {
        check_native_with(&input(structure, 0), &cache).unwrap_or_else(|f| panic!("{f}"));
    }
    let stats = cache.stats();
    assert!(stats.entries <= 2, "{stats:?}");
    assert_eq!(stats.evictions, stats.compiles.saturating_sub(2), "{stats:?}");
}
