//! Plans whose kernels are compiled by the CPU backend's Cranelift code generator: the same
//! runtime, native kernels where supported, agreeing with the reference executor.

use ladder::backend::cpu::jit::CraneliftCompiler;
use ladder::backend::cpu::CpuOptions;
use ladder::models::{example_encoder, random_tensor, Rng};
use ladder::{compile, CompileOptions, DType, Graph, Plan, Tensor};

use crate::common;

fn plans(g: &Graph, threads: usize) -> (Plan, Plan) {
    let reference = compile(g, &CompileOptions::reference()).unwrap();
    let native = CompileOptions {
        kernel_compiler: Some(CraneliftCompiler::shared(CpuOptions::default()).unwrap()),
        threads,
        ..CompileOptions::reference()
    };
    (reference, compile(g, &native).unwrap())
}

/// Largest `|a - b| / (|b| + mean|b|)` over the elements (non-finite values must match).
fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    let scale = y.iter().map(|v| v.abs()).filter(|v| v.is_finite()).sum::<f64>() / y.len().max(1) as f64;
    let mut worst: f64 = 0.0;
    for (p, q) in x.iter().zip(&y) {
        if !q.is_finite() || !p.is_finite() {
            assert!((p.is_nan() && q.is_nan()) || p == q, "{p} vs {q}");
            continue;
        }
        worst = worst.max((p - q).abs() / (q.abs() + scale).max(f64::MIN_POSITIVE));
    }
    worst
}

#[test]
fn the_encoder_runs_natively_close_to_the_reference() {
    let g = example_encoder().unwrap();
    for threads in [1, 3] {
        let (reference, native) = plans(&g, threads);
        let kernels = native.program().unwrap().kernels().count();
        eprintln!("encoder: {} of {kernels} kernels native", native.native_kernels());
        assert_eq!(native.native_kernels(), kernels, "every encoder kernel compiles");
        for seq in [1, 5, 17] {
            let x = random_tensor(&mut Rng::new(seq as u64), DType::F32, &[1, seq, 32]).unwrap();
            let want = reference.run(std::slice::from_ref(&x)).unwrap();
            let got = native.run(std::slice::from_ref(&x)).unwrap();
            let err = max_rel(&got.outputs[0], &want.outputs[0]);
            eprintln!("seq {seq}, threads {threads}: max rel {err:.3e}");
            assert!(err <= 1e-5, "seq {seq}: {err}");
        }
    }
}

#[test]
fn native_kernel_errors_are_typed() {
    let g = ladder::text::parse("graph g(%a: i64[n], %b: i64[n]) {\n  %2 = div(%a, %b)\n  return %2\n}").unwrap();
    let (_, native) = plans(&g, 2);
    assert_eq!(native.native_kernels(), 1);
    let a = Tensor::from_i64(&[4], vec![8, 9, 10, 11]).unwrap();
    let b = Tensor::from_i64(&[4], vec![2, 3, 5, 11]).unwrap();
    assert_eq!(native.run(&[a.clone(), b]).unwrap().outputs[0].to_f64_vec(), vec![4.0, 3.0, 2.0, 1.0]);
    let z = Tensor::from_i64(&[4], vec![2, 3, 0, 11]).unwrap();
    let e = native.run(&[a, z]).unwrap_err();
    assert!(e.to_string().contains("integer division by zero"), "{e}");
}

/// Random prims graphs: every program runs natively where it compiles, without crashing, and
/// integer and bool outputs agree exactly with the reference (floats are not compared here:
/// f32 transcendentals are approximations and reductions may be reassociated).
#[test]
fn random_programs_run_natively_and_agree_on_integers() {
    use ladder::gen::{random_graph, seeded_bytes, GenConfig, Source};
    use ladder::ops::Rung;
    let (mut ran, mut native_kernels, mut compared) = (0, 0, 0);
    for seed in 0..400u64 {
        let bytes = seeded_bytes(seed, 4000);
        let cfg = GenConfig { attempts: 120, rungs: vec![Rung::Prim, Rung::High], ..GenConfig::default() };
        let g = random_graph(&mut Source::new(&bytes), &cfg);
        if ladder::passes::lower(&g).is_err() {
            continue;
        }
        let (reference, native) = plans(&g, 2);
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[2500..]));
        let (Ok(want), got) = (reference.run(&inputs), native.run(&inputs)) else { continue };
        let got = got.unwrap_or_else(|e| panic!("seed {seed}: the native plan failed where the reference ran: {e}"));
        ran += 1;
        native_kernels += native.native_kernels();
        for (w, o) in want.outputs.iter().zip(&got.outputs) {
            assert_eq!(w.shape(), o.shape(), "seed {seed}");
            if !w.dtype().is_float() {
                compared += 1;
                assert!(w.bit_eq(o), "seed {seed}: want {w}, got {o}\n{}", native.program().unwrap());
            }
        }
    }
    eprintln!("{ran} programs, {native_kernels} native kernels, {compared} integer/bool outputs compared");
    assert!(ran > 200 && native_kernels > 200);
}

#[test]
fn one_plan_serves_sizes_in_any_order() {
    // A run state keeps each native kernel's evaluated sizes for the symbol values it last
    // saw: changing sizes between runs (and back, and to an out-of-range input) must redo
    // them. Bitwise exact ops, so the native plan must match the reference exactly.
    let g = ladder::text::parse(
        "graph g(%x: f32[n, k], %y: f32[k]) {
  %b = broadcast_in_dim(%y) {shape=[n, k], broadcast_dims=[1]}
  %m = mul(%x, %b)
  %s = reduce_sum(%m) {axes=[1]}
  %z = max(%m, %x)
  return %s, %z
}",
    )
    .unwrap();
    for threads in [1, 2] {
        let (reference, native) = plans(&g, threads);
        assert!(native.native_kernels() > 0);
        let mut rng = Rng::new(threads as u64);
        for (n, k) in [(3, 5), (70, 33), (3, 5), (1, 1), (70, 33), (0, 4), (3, 5)] {
            let x = random_tensor(&mut rng, DType::F32, &[n, k]).unwrap();
            let y = random_tensor(&mut rng, DType::F32, &[k]).unwrap();
            let inputs = [x, y];
            let (want, got) = (reference.run(&inputs).unwrap(), native.run(&inputs).unwrap());
            for (a, b) in got.outputs.iter().zip(&want.outputs) {
                assert_eq!(a.shape(), b.shape(), "[{n}, {k}]");
                assert!(max_rel(a, b) <= 1e-6, "[{n}, {k}] threads {threads}");
            }
        }
        // A mismatched input is refused every time, and the next good run is right.
        let bad =
            [random_tensor(&mut rng, DType::F32, &[3, 5]).unwrap(), random_tensor(&mut rng, DType::F32, &[4]).unwrap()];
        assert!(native.run(&bad).is_err());
        assert!(native.run(&bad).is_err());
        let x = random_tensor(&mut rng, DType::F32, &[3, 5]).unwrap();
        let y = random_tensor(&mut rng, DType::F32, &[5]).unwrap();
        let inputs = [x, y];
        let (want, got) = (reference.run(&inputs).unwrap(), native.run(&inputs).unwrap());
        assert!(max_rel(&got.outputs[1], &want.outputs[1]) == 0.0);
    }
}

/// A nearest-neighbour upsampling (an innermost loop of 2 under one of 14) and a detector
/// head's move of a short channel dim last (8 under 28) with a sigmoid: the scheduler swaps
/// those loops (`sched::interchange`), and the native kernels, now vectorized with lane-wise
/// strided loads and stores, match the reference executor bit for bit (the copy) and to
/// within the decomposition's rounding (the sigmoid), specials included.
#[test]
fn swapped_short_inner_loops_match_the_reference() {
    let up = common::parse(
        "graph up(%x: f32[2, 16, 10, 14]) {
  %a = reshape(%x) {shape=[2, 16, 10, 1, 14, 1]}
  %b = broadcast_in_dim(%a) {shape=[2, 16, 10, 2, 14, 2], broadcast_dims=[0, 1, 2, 3, 4, 5]}
  %y = reshape(%b) {shape=[2, 16, 20, 28]}
  return %y
}",
    );
    let head = common::parse(
        "graph head(%x: f32[2, 8, 20, 28]) {
  %p = permute(%x) {perm=[0, 2, 3, 1]}
  %y = sigmoid(%p)
  return %y
}",
    );
    for (g, shape, exact) in [(&up, [2usize, 16, 10, 14], true), (&head, [2, 8, 20, 28], false)] {
        let s = ladder::sched::schedule_explained(g).unwrap();
        assert!(s.explanation.contains("swapped with the outer loop"), "{}", s.explanation);
        let mut x = random_tensor(&mut Rng::new(3), DType::F32, &shape).unwrap().to_f64_vec();
        let n = x.len();
        (x[1], x[n / 3], x[n / 2], x[n - 1]) = (f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0);
        let x = Tensor::from_f32(&shape, x.iter().map(|&v| v as f32).collect()).unwrap();
        for threads in [1, 2] {
            let (reference, native) = plans(g, threads);
            assert_eq!(native.native_kernels(), native.program().unwrap().kernels().count());
            let want = reference.run(std::slice::from_ref(&x)).unwrap();
            let got = native.run(std::slice::from_ref(&x)).unwrap();
            if exact {
                assert!(got.outputs[0].bit_eq(&want.outputs[0]), "upsampling differs");
            } else {
                let err = max_rel(&got.outputs[0], &want.outputs[0]);
                assert!(err <= 1e-6, "sigmoid head: max rel {err}");
            }
        }
    }
}
