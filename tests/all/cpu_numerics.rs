//! Every high-level op, lowered to prims and run on the CPU backend in native mode (Cranelift
//! kernels with their polynomial transcendentals, GEMM, the reference executor for graph
//! breaks), against the op's precise reference under the tolerance table: the differential
//! test of the backend. Fewer cases per op than `tests/all/numerics.rs` (each case compiles a
//! plan); the fuzz target `fuzz/fuzz_targets/interp_cpu.rs` runs the same check unbounded.
//! A failure prints a ready-to-paste file test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ladder::numerics::{check_op_on, high_level_ops, run_on_cpu, CaseResult, FailureKind, Skip};
use ladder::OpKind;

/// Cases that must run and pass on the CPU backend, per op.
const CASES: usize = 100;
const MAX_TRIES: usize = 20 * CASES;

fn case_bytes(op: OpKind, k: usize) -> Vec<u8> {
    // Other seeds than tests/all/numerics.rs uses, so the two suites see different cases.
    ladder::gen::seeded_bytes(0xC0 << 48 | (op as u64) << 32 | k as u64, 16)
}

#[test]
fn every_high_level_op_on_the_cpu_backend_meets_the_tolerance_table() {
    let ops = high_level_ops();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(OpKind, usize, Option<String>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&op) = ops.get(i) else { break };
                let (mut passed, mut failure) = (0, None);
                for k in 0..MAX_TRIES {
                    match check_op_on(op, &case_bytes(op, k), &run_on_cpu) {
                        CaseResult::Passed(_) => passed += 1,
                        CaseResult::Skipped(Skip::NoValidCase | Skip::ReferenceError(_) | Skip::Declined(_)) => {}
                        CaseResult::Failed(f) if matches!(f.kind, FailureKind::NoDecomposition(_)) => {
                            failure = Some(format!("{op}: no decomposition"));
                            break;
                        }
                        CaseResult::Failed(f) => {
                            failure = Some(f.to_string());
                            break;
                        }
                    }
                    if passed >= CASES {
                        break;
                    }
                }
                results.lock().unwrap_or_else(|e| e.into_inner()).push((op, passed, failure));
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut problems = Vec::new();
    for (op, passed, failure) in &results {
        match failure {
            Some(f) => problems.push(format!("{op} on cpu:\n{f}")),
            None if *passed < CASES => problems.push(format!("{op}: only {passed} runnable cases")),
            None => {}
        }
    }
    println!("cpu numerics: {} ops, {} cases passed", results.len(), results.iter().map(|r| r.1).sum::<usize>());
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The check can fail: a backend that is off by a little in one element is caught.
#[test]
fn a_backend_off_by_a_little_is_caught() {
    let off = |g: &ladder::Graph, inputs: &[ladder::Tensor]| {
        let mut out = run_on_cpu(g, inputs)?;
        if let Some(t) = out.first_mut() {
            let mut v = t.as_f32().map(<[f32]>::to_vec).unwrap_or_default();
            if let Some(x) = v.first_mut() {
                *x = *x * 1.001 + 1e-3;
                *t = ladder::Tensor::from_f32(t.shape(), v).map_err(|e| e.to_string())?;
            }
        }
        Ok(out)
    };
    let caught = (0..200)
        .any(|k| matches!(check_op_on(OpKind::Softmax, &case_bytes(OpKind::Softmax, k), &off), CaseResult::Failed(_)));
    assert!(caught, "a perturbed softmax passed 200 cases");
}
