//! Executions per second of the `interp_cpu` fuzz check without the fuzzer: a fixed,
//! seeded stream of inputs shaped like a fuzzer's (a few base inputs, each execution one of
//! them with one byte replaced at a random position), run through
//! `ladder::fuzzing::check_native` (plans cached by structure) or, with `--old`, through
//! `check_op_on(op, bytes, &run_on_cpu)` (a plan compiled per input).
//!
//! `cargo run --release --example fuzz_throughput -- [N] [--old] [--entries E] [--write DIR]`
//! (N inputs, default 2000; a cache of E plans, default the fuzz target's). `--write DIR` saves the inputs as files instead of running them: a fixed
//! corpus for timing the fuzz target itself (`interp_cpu DIR -runs=0` runs each file once).

use std::time::Instant;

use ladder::fuzzing::{check_native_with, PlanCache, DATA_SET_BYTES, GLOBAL_CACHE_ENTRIES, STRUCTURE_BYTES};
use ladder::gen::seeded_bytes;
use ladder::numerics::{check_op_on, high_level_ops, run_on_cpu, CaseResult};

/// Base inputs the stream mutates, and data sets in each.
const BASES: u64 = 16;
const DATA_SETS: usize = 2;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let old = args.iter().any(|a| a == "--old");
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let write_to = args.iter().position(|a| a == "--write").and_then(|i| args.get(i + 1));
    let len = 1 + STRUCTURE_BYTES + DATA_SETS * DATA_SET_BYTES;
    let bases: Vec<Vec<u8>> = (0..BASES).map(|b| seeded_bytes(0xF022 << 32 | b, len)).collect();
    let entries = args.iter().position(|a| a == "--entries").and_then(|i| args.get(i + 1)?.parse().ok());
    let cache = PlanCache::new(entries.unwrap_or(GLOBAL_CACHE_ENTRIES));
    let ops = high_level_ops();
    let (mut failures, mut passed) = (0usize, 0usize);
    let start = Instant::now();
    for k in 0..n {
        let pick = seeded_bytes(k, 8);
        let mut input = bases[(k % BASES) as usize].clone();
        let at = u32::from_le_bytes([pick[0], pick[1], pick[2], pick[3]]) as usize % input.len();
        input[at] = pick[4];
        if let Some(dir) = write_to {
            std::fs::create_dir_all(dir).expect("create the output folder");
            std::fs::write(format!("{dir}/input_{k:05}"), &input).expect("write an input");
            continue;
        }
        if old {
            let op = ops[input[0] as usize % ops.len()];
            match check_op_on(op, &input[1..], &run_on_cpu) {
                CaseResult::Passed(_) => passed += 1,
                CaseResult::Failed(_) => failures += 1,
                CaseResult::Skipped(_) => {}
            }
        } else {
            match check_native_with(&input, &cache) {
                Ok(o) => passed += o.passed,
                Err(_) => failures += 1,
            }
        }
    }
    if let Some(dir) = write_to {
        println!("wrote {n} inputs to {dir}");
        return;
    }
    let secs = start.elapsed().as_secs_f64();
    let mode = if old { "old (a plan per input)" } else { "new (plans cached by structure)" };
    println!("{mode}: {n} executions in {secs:.1} s: {:.0} exec/s", n as f64 / secs);
    println!("data sets passed: {passed}, failing executions: {failures}");
    if !old {
        println!("cache: {:?}", cache.stats());
    }
}
