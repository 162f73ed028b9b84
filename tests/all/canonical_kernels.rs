//! Kernels compiled once per canonical form (`backend/cpu/exec/canon.rs`): a long graph's
//! repeated kernels share one compiled entry, each step calling it with its own buffers,
//! and the plan computes what the reference executor computes.

use ladder::{compile, CompileOptions, Tensor};

/// `(kernel steps, compiled kernels)` from a plan's explanation.
fn counts(explanation: &str) -> (usize, usize) {
    let line = explanation.lines().find(|l| l.starts_with("native code: ")).expect("a native-code line");
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[2].parse().unwrap(), words[6].parse().unwrap())
}

/// Largest `|a - b| / (|b| + 1)`; non-finite values must match exactly.
fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let mut worst: f64 = 0.0;
    for (p, q) in a.to_f64_vec().into_iter().zip(b.to_f64_vec()) {
        if !(p.is_finite() && q.is_finite()) {
            assert!((p.is_nan() && q.is_nan()) || p == q, "{p} vs {q}");
            continue;
        }
        worst = worst.max((p - q).abs() / (q.abs() + 1.0));
    }
    worst
}

/// A chain of row reductions and a stack of encoder blocks: most of their kernel steps share
/// code, and the plans (1 and 2 threads) agree with the reference executor.
#[test]
fn repeated_kernels_share_one_compiled_entry() {
    for (name, at_most) in [("C2_rows_1k", 16), ("C3_encoder_1k", 24)] {
        let w = ladder::bench::compile_workload(name).unwrap();
        let want = compile(&w.graph, &CompileOptions::reference()).unwrap().run(&w.inputs).unwrap();
        for threads in [1, 2] {
            let plan = compile(&w.graph, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
            let (steps, compiled) = counts(plan.explanation());
            assert!(compiled <= at_most && steps >= 3 * compiled, "{name}: {steps} steps, {compiled} compiled");
            let got = plan.run(&w.inputs).unwrap();
            for (a, b) in got.outputs.iter().zip(&want.outputs) {
                let err = max_rel(a, b);
                assert!(err <= 1e-4, "{name}, threads={threads}: max rel {err}");
            }
        }
    }
}

/// Two kernels that differ only in which buffers coincide (`x · x + y` and `x · y + y`) have
/// different canonical forms, and each computes its own result.
#[test]
fn kernels_that_differ_in_aliasing_do_not_share() {
    let g = ladder::text::parse(
        "graph g(%x: f32[4, 8], %y: f32[4, 8]) {
  %a = mul(%x, %x)
  %b = add(%a, %y)
  %s = reduce_sum(%b) {axes=[1]}
  %c = mul(%x, %y)
  %d = add(%c, %y)
  %t = reduce_sum(%d) {axes=[1]}
  %u = add(%s, %t)
  return %u, %s, %t
}",
    )
    .unwrap();
    let x = Tensor::from_f32(&[4, 8], (0..32).map(|i| i as f32 * 0.25 - 3.0).collect()).unwrap();
    let y = Tensor::from_f32(&[4, 8], (0..32).map(|i| (i % 7) as f32 - 2.5).collect()).unwrap();
    let inputs = [x, y];
    let want = ladder::interp::run(&g, &inputs, &ladder::interp::Options::default()).unwrap();
    let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
    let got = plan.run(&inputs).unwrap();
    for (a, b) in got.outputs.iter().zip(&want.outputs) {
        assert!(max_rel(a, b) <= 1e-6, "{}", plan.explanation());
    }
    // The two sums differ (the shared code, misused, would give them equal).
    assert!(!got.outputs[1].bit_eq(&got.outputs[2]));
}
