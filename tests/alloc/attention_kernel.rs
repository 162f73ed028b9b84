//! The flash-style attention kernel (`backend::cpu::attention`, reached through
//! `backend::cpu::rows::run_native` as the runtime calls it) against the interpreter running
//! `scaled_dot_product_attention` (the oracle), under the tolerance table (`ladder::numerics`)
//! and, on inputs whose f32 scores cannot leave the range, with the interpreter's exact NaN and
//! infinity pattern: causal or not, safe softmax or not, additive f32 and bool masks of
//! several broadcast shapes, fully masked rows, NaN and ±inf in q, k, v and the mask, scores
//! near 1e30, S across several key tiles and not a multiple of one, size-1 and empty dims,
//! rank 3 and rank 4, one and two threads. Then typed errors for masks that do not broadcast,
//! the kernel's memory (counted by a per-thread allocator: its scratch does not grow with S),
//! and compiled plans with masks against the interpreter.

use ladder::backend::cpu::gemm::KernelError;
use ladder::backend::cpu::rows::{run_native, Operand};
use ladder::kernel::Step;
use ladder::numerics::{compare, CompareCtx};
use ladder::tensor::TensorData;
use ladder::{compile, CompileOptions, Graph, OpKind, Tensor};

use crate::attention_cases::{dims, f32_tensor, graph, inputs, judge, mask_shapes, reference, Case, MaskKind, Profile};
use crate::counting::peak_bytes;

// ---------------------------------------------------------------------------------------------
// Running and checking

/// The op through the native kernel, as the runtime calls it (bool masks as bytes).
fn kernel(g: &Graph, ins: &[Tensor], threads: usize) -> Result<Tensor, KernelError> {
    let y = g.outputs()[0].value;
    let node = g.node(y);
    let bytes: Vec<Vec<u8>> = ins
        .iter()
        .map(|t| match t.data() {
            TensorData::Bool(b) => b.iter().map(|&x| x as u8).collect(),
            _ => Vec::new(),
        })
        .collect();
    let ops: Vec<Operand> = ins
        .iter()
        .zip(&bytes)
        .map(|(t, b)| match t.data() {
            TensorData::F32(x) => Operand::F32(x),
            TensorData::Bool(_) => Operand::Bool(b),
            other => panic!("unexpected operand {:?}", other.dtype()),
        })
        .collect();
    let shapes: Vec<&[usize]> = ins.iter().map(Tensor::shape).collect();
    let out_shape: Vec<usize> = g.ty(y).shape.dims().iter().map(|d| d.as_const().unwrap() as usize).collect();
    let mut out = vec![0f32; out_shape.iter().product()];
    run_native(OpKind::ScaledDotProductAttention, &node.attrs, &ops, &shapes, &mut out, threads)?;
    Ok(f32_tensor(&out_shape, out))
}

/// Checks the kernel on `ins` at 1 or 2 threads against the interpreter ([`judge`]).
fn check(c: &Case, g: &Graph, ins: &[Tensor], profile: Profile, threads: usize, what: &str) {
    let want = reference(g, ins);
    let got = kernel(g, ins, threads).unwrap_or_else(|e| panic!("{what}: kernel refused: {e}\n{c:?}"));
    if let Err(m) = judge(g, ins, profile, &want, &got) {
        panic!("{what}: {m}\n{c:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn the_kernel_matches_the_interpreter_on_random_and_adversarial_inputs() {
    // (batch, L, S, D, Dv): S past one key tile (512) and not a multiple of it, L past one
    // block of query rows, size-1 dims, rank 3 and rank 4.
    let shapes: &[(&[usize], usize, usize, usize, usize)] = &[
        (&[2], 5, 9, 3, 2),
        (&[3], 70, 130, 8, 4),
        (&[1], 1, 1, 1, 1),
        (&[2], 1, 600, 4, 3),
        (&[1], 600, 1, 2, 2),
        (&[1], 65, 1100, 1, 5),
        (&[1], 300, 40, 4, 4),
        (&[2, 3], 17, 33, 4, 4),
        (&[2, 2], 64, 64, 8, 8),
        (&[1, 2], 130, 520, 4, 2),
    ];
    let profiles = [Profile::Plain, Profile::Spiky, Profile::Huge, Profile::Generator];
    let mut compared = 0;
    for (si, &(batch, l, s, d, dv)) in shapes.iter().enumerate() {
        let big = l * s > 20_000;
        let mut masks: Vec<Option<(MaskKind, Vec<usize>)>> = vec![None];
        for (mi, shape) in mask_shapes(batch, l, s).into_iter().enumerate() {
            for kind in [MaskKind::Float, MaskKind::Bool] {
                // Large cases: every other mask shape, alternating kinds.
                if !big || (mi % 2 == 0) == (kind == MaskKind::Float) {
                    masks.push(Some((kind, shape.clone())));
                }
            }
        }
        for (mi, mask) in masks.into_iter().enumerate() {
            for (variant, (causal, safe, scale)) in
                [(false, true, "nan"), (true, true, "0.5"), (false, false, "1.0"), (true, false, "nan")]
                    .into_iter()
                    .enumerate()
            {
                let c = Case { batch: batch.to_vec(), l, s, d, dv, causal, safe, scale, mask: mask.clone() };
                let g = graph(&c);
                for (pi, &profile) in profiles.iter().enumerate() {
                    if big && (pi + variant + mi) % 2 == 1 {
                        continue;
                    }
                    let seed = ((si * 100 + mi) * 10 + variant) as u64 * 10 + pi as u64;
                    let ins = inputs(&c, profile, seed);
                    let threads = 1 + (seed as usize % 2);
                    check(
                        &c,
                        &g,
                        &ins,
                        profile,
                        threads,
                        &format!("shape {si} mask {mi} variant {variant} {profile:?}"),
                    );
                    compared += 1;
                }
            }
        }
    }
    eprintln!("{compared} attention cases compared");
}

#[test]
fn empty_dims_give_the_interpreters_result() {
    // L = 0, S = 0 (zeros, safe or not), D = 0 (every score 0), Dv = 0, a batch dim of 0.
    let shapes: &[(&[usize], usize, usize, usize, usize)] =
        &[(&[2], 0, 5, 3, 2), (&[2], 4, 0, 3, 2), (&[2], 4, 5, 0, 2), (&[2], 4, 5, 3, 0), (&[0, 2], 3, 4, 2, 2)];
    for &(batch, l, s, d, dv) in shapes {
        for causal in [false, true] {
            for safe in [false, true] {
                for mask in [None, Some((MaskKind::Bool, vec![l, s])), Some((MaskKind::Float, dims(batch, l, s)))] {
                    let c = Case { batch: batch.to_vec(), l, s, d, dv, causal, safe, scale: "nan", mask };
                    let g = graph(&c);
                    for threads in [1, 2] {
                        let ins = inputs(&c, Profile::Plain, (l * 100 + s * 10 + d) as u64);
                        check(&c, &g, &ins, Profile::Plain, threads, "empty");
                    }
                }
            }
        }
    }
    // S = 0: zeros whatever safe_softmax says (nothing to sum).
    let c = Case { safe: false, ..Case::new(&[1], (3, 0, 2, 2)) };
    let out = kernel(&graph(&c), &inputs(&c, Profile::Plain, 1), 1).unwrap();
    assert!(out.to_f64_vec().iter().all(|&x| x == 0.0));
}

#[test]
fn fully_masked_rows_are_zero_with_the_safe_softmax_and_nan_without() {
    let (l, s) = (70, 600);
    for kind in [MaskKind::Bool, MaskKind::Float] {
        for safe in [true, false] {
            for causal in [false, true] {
                let c = Case {
                    batch: vec![2],
                    l,
                    s,
                    d: 4,
                    dv: 3,
                    causal,
                    safe,
                    scale: "nan",
                    mask: Some((kind, vec![l, s])),
                };
                let g = graph(&c);
                let mut ins = inputs(&c, Profile::Plain, 7);
                // Rows 0 and 65 attend to nothing; the others to key 0 only (so the causal
                // diagonal leaves them something).
                let n = l * s;
                ins[3] = match kind {
                    MaskKind::Bool => Tensor::new(
                        vec![l, s],
                        TensorData::Bool((0..n).map(|i| i % s == 0 && i / s != 0 && i / s != 65).collect()),
                    )
                    .unwrap(),
                    MaskKind::Float => f32_tensor(
                        &[l, s],
                        (0..n)
                            .map(|i| if i % s == 0 && i / s != 0 && i / s != 65 { 0.5 } else { f32::NEG_INFINITY })
                            .collect(),
                    ),
                };
                for threads in [1, 2] {
                    check(&c, &g, &ins, Profile::Plain, threads, "fully masked");
                    let out = kernel(&g, &ins, threads).unwrap().to_f64_vec();
                    let v = ins[2].to_f64_vec();
                    for b in 0..2 {
                        for i in 0..l {
                            for e in 0..3 {
                                let y = out[(b * l + i) * 3 + e];
                                if i == 0 || i == 65 {
                                    assert!(if safe { y == 0.0 } else { y.is_nan() }, "row {i}: {y} (safe {safe})");
                                } else {
                                    assert_eq!(y, v[b * s * 3 + e], "row {i} attends to key 0 only");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn non_finite_keys_values_and_mask_entries_past_the_diagonal_still_count() {
    // The op adds -inf to a causally masked score (NaN when the score is NaN or +inf) and
    // multiplies a masked key's value row by an exact 0 (NaN for an infinite value): a block
    // may skip the keys past its diagonal only when nothing there is non-finite.
    let (l, s, d, dv) = (300, 300, 4, 3);
    let base = Case { batch: vec![1], l, s, d, dv, causal: true, safe: true, scale: "nan", mask: None };
    let g = graph(&base);
    for threads in [1, 2] {
        // A NaN key at the end: every row's scores include a NaN, so every row is NaN.
        let mut ins = inputs(&base, Profile::Plain, 3);
        let mut k = ins[1].to_f64_vec().into_iter().map(|x| x as f32).collect::<Vec<_>>();
        k[(s - 1) * d + 2] = f32::NAN;
        ins[1] = f32_tensor(&[1, s, d], k);
        check(&base, &g, &ins, Profile::Plain, threads, "future NaN key");
        assert!(kernel(&g, &ins, threads).unwrap().to_f64_vec().iter().all(|x| x.is_nan()));
        // An infinite value at the end, column 1: that column is NaN in every row, the others
        // finite.
        let mut ins = inputs(&base, Profile::Plain, 4);
        let mut v = ins[2].to_f64_vec().into_iter().map(|x| x as f32).collect::<Vec<_>>();
        v[(s - 1) * dv + 1] = f32::INFINITY;
        ins[2] = f32_tensor(&[1, s, dv], v);
        check(&base, &g, &ins, Profile::Plain, threads, "future inf value");
        let out = kernel(&g, &ins, threads).unwrap().to_f64_vec();
        for (i, row) in out.chunks(dv).enumerate() {
            assert!(row[1].is_nan() || (i == s - 1 && row[1] == f64::INFINITY), "row {i}: {row:?}");
            assert!(row[0].is_finite() && row[2].is_finite(), "row {i}: {row:?}");
        }
    }
    // A float mask with +inf past the diagonal of row 5: row 5 is NaN, the others are not.
    let c = Case { mask: Some((MaskKind::Float, vec![l, s])), ..base.clone() };
    let g = graph(&c);
    let mut ins = inputs(&c, Profile::Plain, 5);
    let mut m = vec![0f32; l * s];
    m[5 * s + 250] = f32::INFINITY;
    ins[3] = f32_tensor(&[l, s], m);
    for threads in [1, 2] {
        check(&c, &g, &ins, Profile::Plain, threads, "future +inf mask");
        let out = kernel(&g, &ins, threads).unwrap().to_f64_vec();
        for (i, row) in out.chunks(dv).enumerate() {
            assert_eq!(row.iter().all(|x| x.is_nan()), i == 5, "row {i}: {row:?}");
        }
    }
}

#[test]
fn a_maximum_rising_in_later_key_tiles_rescales_the_output() {
    // Scores rising with the key index (then falling, then rising with a spike): each later
    // tile raises the running maximum, so the sum and the output so far are rescaled.
    let (l, s, d, dv) = (3, 1500, 2, 3);
    for causal in [false, true] {
        let c = Case { batch: vec![2], l, s, d, dv, causal, safe: true, scale: "1.0", mask: None };
        let g = graph(&c);
        let mut ins = inputs(&c, Profile::Plain, 11);
        ins[0] = f32_tensor(&[2, l, d], vec![1.0; 2 * l * d]);
        for shape in 0..3 {
            let k: Vec<f32> = (0..2 * s * d)
                .map(|i| {
                    let j = (i / d) % s;
                    let x = 6.0 * j as f32 / s as f32;
                    match shape {
                        0 => x,
                        1 => 6.0 - x,
                        _ => x + if j == s - 3 { 4.0 } else { 0.0 },
                    }
                })
                .collect();
            ins[1] = f32_tensor(&[2, s, d], k);
            for threads in [1, 2] {
                check(&c, &g, &ins, Profile::Plain, threads, &format!("rising scores {shape}"));
            }
        }
    }
}

#[test]
fn masks_that_do_not_broadcast_are_typed_errors() {
    let c = Case { batch: vec![2, 3], l: 4, s: 5, d: 2, dv: 2, causal: false, safe: true, scale: "nan", mask: None };
    let g = graph(&c);
    let ins = inputs(&c, Profile::Plain, 1);
    let attrs = &g.node(g.outputs()[0].value).attrs;
    let (q, k, v) = (ins[0].to_f64_vec(), ins[1].to_f64_vec(), ins[2].to_f64_vec());
    let f = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
    let (q, k, v) = (f(&q), f(&k), f(&v));
    let mut out = vec![0f32; 2 * 3 * 4 * 2];
    let shapes3: [&[usize]; 3] = [&[2, 3, 4, 2], &[2, 3, 5, 2], &[2, 3, 5, 2]];
    let bad: &[&[usize]] = &[&[4, 6], &[3, 4, 5, 1], &[2, 2, 4, 5], &[1, 2, 3, 4, 5], &[5, 4]];
    for &shape in bad {
        let n: usize = shape.iter().product();
        let fm = vec![0f32; n];
        let bm = vec![1u8; n];
        for m in [Operand::F32(&fm), Operand::Bool(&bm)] {
            let args = [Operand::F32(&q), Operand::F32(&k), Operand::F32(&v), m];
            let shapes = [shapes3[0], shapes3[1], shapes3[2], shape];
            let r = run_native(OpKind::ScaledDotProductAttention, attrs, &args, &shapes, &mut out, 1);
            assert!(matches!(r, Err(KernelError::Shape(_))), "mask {shape:?}: {r:?}");
        }
    }
    // The right shape with the wrong number of values.
    let short = vec![0f32; 19];
    let args = [Operand::F32(&q), Operand::F32(&k), Operand::F32(&v), Operand::F32(&short)];
    let shapes = [shapes3[0], shapes3[1], shapes3[2], &[4, 5]];
    let r = run_native(OpKind::ScaledDotProductAttention, attrs, &args, &shapes, &mut out, 1);
    assert!(matches!(r, Err(KernelError::Len { name: "mask", .. })), "{r:?}");
    // A bool q, and a fifth operand.
    let qb = vec![0u8; q.len()];
    let args = [Operand::Bool(&qb), Operand::F32(&k), Operand::F32(&v)];
    let r = run_native(OpKind::ScaledDotProductAttention, attrs, &args, &shapes3, &mut out, 1);
    assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    let m = vec![0f32; 20];
    let args = [Operand::F32(&q), Operand::F32(&k), Operand::F32(&v), Operand::F32(&m), Operand::F32(&m)];
    let shapes = [shapes3[0], shapes3[1], shapes3[2], &[4, 5], &[4, 5]];
    let r = run_native(OpKind::ScaledDotProductAttention, attrs, &args, &shapes, &mut out, 1);
    assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    // The right mask still runs.
    let args = [Operand::F32(&q), Operand::F32(&k), Operand::F32(&v), Operand::F32(&m)];
    let shapes = [shapes3[0], shapes3[1], shapes3[2], &[4, 5]];
    run_native(OpKind::ScaledDotProductAttention, attrs, &args, &shapes, &mut out, 1).unwrap();
}

/// Peak heap bytes of one warm single-threaded kernel call on `h` heads of `[l, 16]` queries
/// against `s` keys, with a bool `[l, s]` mask when `masked`.
fn kernel_peak(h: usize, l: usize, s: usize, causal: bool, masked: bool) -> usize {
    let mask = masked.then(|| (MaskKind::Bool, vec![l, s]));
    let c = Case { batch: vec![h], l, s, d: 16, dv: 16, causal, safe: true, scale: "nan", mask };
    let g = graph(&c);
    let ins = inputs(&c, Profile::Plain, 9);
    let y = g.outputs()[0].value;
    let node = g.node(y);
    let f = |t: &Tensor| match t.data() {
        TensorData::F32(x) => x.clone(),
        _ => unreachable!(),
    };
    let (q, k, v) = (f(&ins[0]), f(&ins[1]), f(&ins[2]));
    let bm: Vec<u8> = if masked { vec![1; l * s] } else { Vec::new() };
    let mut args = vec![Operand::F32(&q), Operand::F32(&k), Operand::F32(&v)];
    let mut shapes: Vec<&[usize]> = vec![ins[0].shape(), ins[1].shape(), ins[2].shape()];
    if masked {
        args.push(Operand::Bool(&bm));
        shapes.push(ins[3].shape());
    }
    let mut out = vec![0f32; h * l * 16];
    let mut call = || run_native(OpKind::ScaledDotProductAttention, &node.attrs, &args, &shapes, &mut out, 1).unwrap();
    call();
    peak_bytes(call).1
}

#[test]
fn the_kernels_scratch_does_not_grow_with_the_key_length() {
    // Flash-style: no row of S scores, so at a fixed number of queries the scratch is the
    // same for 1024 and 2048 keys (a kernel holding a block's scores against all keys needs
    // 64 × S floats more); with L = S it grows at most linearly (the list of row blocks),
    // far from the 4x of a score matrix.
    for (causal, masked) in [(false, false), (true, false), (false, true), (true, true)] {
        let fixed = [kernel_peak(2, 64, 1024, causal, masked), kernel_peak(2, 64, 2048, causal, masked)];
        assert!(fixed[1] <= fixed[0] + 1024, "L = 64, S = 1024 then 2048: {fixed:?} bytes");
        let square = [kernel_peak(2, 1024, 1024, causal, masked), kernel_peak(2, 2048, 2048, causal, masked)];
        assert!(square[1] <= 2 * square[0] + 1024, "L = S = 1024 then 2048: {square:?} bytes");
        // Bounded by a few tiles, nowhere near one score matrix (2 × 2048² f32 = 32 MiB).
        assert!(square[1] < 4 << 20, "L = S = 2048: {} bytes", square[1]);
        eprintln!("causal {causal} masked {masked}: L=64 {fixed:?}, L=S {square:?} bytes");
    }
}

#[test]
fn compiled_plans_with_masks_match_the_interpreter() {
    // A masked attention in a native plan runs through the library kernel when recovery puts
    // it back (bool masks as bytes), else through its prims; either way it must agree.
    let native = CompileOptions::native_cpu(2).unwrap();
    let cases = [
        (MaskKind::Bool, vec![1, 1, 40, 70], false),
        (MaskKind::Float, vec![2, 1, 1, 70], true),
        (MaskKind::Bool, vec![70], true),
    ];
    for (ci, (kind, shape, causal)) in cases.into_iter().enumerate() {
        let c = Case {
            batch: vec![2, 3],
            l: 40,
            s: 70,
            d: 8,
            dv: 4,
            causal,
            safe: true,
            scale: "nan",
            mask: Some((kind, shape)),
        };
        let g = graph(&c);
        let plan = compile(&g, &native).unwrap();
        let library = plan.program().unwrap().steps.iter().any(
            |st| matches!(st, Step::Library(lib) if lib.op == OpKind::ScaledDotProductAttention && lib.args.len() == 4),
        );
        for seed in 0..6u64 {
            let profile = [Profile::Plain, Profile::Spiky][seed as usize % 2];
            let ins = inputs(&c, profile, ci as u64 * 100 + seed);
            let want = reference(&g, &ins);
            let got = plan.run(&ins).unwrap().outputs.remove(0);
            let ctx = CompareCtx { graph: &g, node: g.outputs()[0].value, inputs: &ins, output: "y" };
            if let Err(m) = compare(OpKind::ScaledDotProductAttention, &want, &got, &ctx) {
                panic!("plan case {ci} seed {seed} (library call: {library}): {m}");
            }
        }
        eprintln!("plan case {ci}: masked library call {library}");
    }
    // Without a mask the op is recovered into the kernel: a causal case over several key
    // tiles and query blocks.
    let c = Case { batch: vec![2], l: 300, s: 700, d: 8, dv: 8, causal: true, safe: true, scale: "nan", mask: None };
    let g = graph(&c);
    let plan = compile(&g, &native).unwrap();
    assert!(
        plan.program()
            .unwrap()
            .steps
            .iter()
            .any(|st| matches!(st, Step::Library(lib) if lib.op == OpKind::ScaledDotProductAttention)),
        "{}",
        plan.explanation()
    );
    for (seed, profile) in [Profile::Plain, Profile::Spiky, Profile::Generator].into_iter().enumerate() {
        let ins = inputs(&c, profile, seed as u64);
        let want = reference(&g, &ins);
        let got = plan.run(&ins).unwrap().outputs.remove(0);
        let ctx = CompareCtx { graph: &g, node: g.outputs()[0].value, inputs: &ins, output: "y" };
        if let Err(m) = compare(OpKind::ScaledDotProductAttention, &want, &got, &ctx) {
            panic!("plan {profile:?}: {m}");
        }
    }
}
