//! The CPU library kernels (`backend::cpu::{gemm, conv, activation}`) against the
//! interpreter's `matmul`, `conv` and activation ops, each run as a one-node graph.
//!
//! Tolerances (u = 2^-24 for f32, 2^-53 for f64):
//! - matmul / conv (GEMM paths): any summation order is within `γ_k Σ_p |a_ip b_pj|` of the
//!   exact sum, so each element must be within `2 k u Σ_p |a_ip b_pj|` of the interpreter's
//!   precise (f64) result, plus one rounding of the result (`u |ref|`); `k` is the reduction
//!   length (`C/g * K` for conv). Non-finite results must match exactly (NaN with NaN, inf
//!   with inf of the same sign).
//! - the plain small-product loop is bitwise equal to the interpreter in f32 mode.
//! - activations: the worst ulp figures stated in `activation.rs`, over a sweep of f32 values.
//! - epilogues: the GEMM bound above for the product, then the activation's bound, then one
//!   rounding per add (bias, residual).

use ladder::backend::cpu::activation::Activation;
use ladder::backend::cpu::conv::{conv, conv_with, ConvAlgo, ConvGeom};
use ladder::backend::cpu::gemm::{matmul, matmul_f32, Epilogue, KernelError, MatmulGeom, Tile, SMALL_WORK, TILE_ELEMS};
use ladder::backend::cpu::packed::PackedB;
use ladder::interp::{self, Options};
use ladder::ir::AttrValue;
use ladder::models::Rng;
use ladder::tensor::TensorData;
use ladder::{DType, Dim, GraphBuilder, OpKind, Shape, Tensor};

const U32: f64 = 1.0 / (1u64 << 24) as f64;

fn shape(dims: &[usize]) -> Shape {
    dims.iter().map(|&d| Dim::new(d as u64)).collect()
}

fn rand_f32(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.uniform_bits(24) as f32).collect()
}

/// Runs `op` on inputs of the given shapes in the interpreter; returns (f32-mode, precise).
fn interp_run(op: OpKind, attrs: &[(&str, AttrValue)], inputs: &[Tensor]) -> (Tensor, Tensor) {
    let mut b = GraphBuilder::new("t");
    let args: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| b.input(&format!("x{i}"), t.dtype(), shape(t.shape())).unwrap())
        .collect();
    let y = b.op(op, &args, attrs).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let f = interp::run(&g, inputs, &Options::default()).unwrap().outputs.remove(0);
    let p = interp::run(&g, inputs, &Options { precise: true, ..Options::default() }).unwrap().outputs.remove(0);
    (f, p)
}

/// Σ_p |a_ip b_pj| for every output of the matmul, via the precise interpreter on |a|, |b|.
fn abs_products(op: OpKind, attrs: &[(&str, AttrValue)], inputs: &[Tensor]) -> Vec<f64> {
    let abs: Vec<Tensor> = inputs
        .iter()
        .map(|t| match t.data() {
            TensorData::F32(v) => Tensor::from_f32(t.shape(), v.iter().map(|x| x.abs()).collect()).unwrap(),
            TensorData::F64(v) => {
                Tensor::new(t.shape().to_vec(), TensorData::F64(v.iter().map(|x| x.abs()).collect())).unwrap()
            }
            _ => t.clone(),
        })
        .collect();
    interp_run(op, attrs, &abs).1.to_f64_vec()
}

/// Checks `got` against `want` within `k_bound * mag + u |want|` per element.
fn check_close(label: &str, got: &[f64], want: &[f64], mag: &[f64], k_bound: f64, u: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let mut worst: f64 = 0.0;
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        if !w.is_finite() || !g.is_finite() {
            let same = (g.is_nan() && w.is_nan()) || g == w;
            assert!(same, "{label}: element {i}: got {g}, want {w}");
            continue;
        }
        let tol = k_bound * mag[i] + u * w.abs() + 1e-45;
        let err = (g - w).abs();
        worst = worst.max(err / tol);
        assert!(err <= tol, "{label}: element {i}: got {g}, want {w}, err {err:e} > tol {tol:e}");
    }
    worst
}

fn mm_attrs(ta: bool, tb: bool) -> Vec<(&'static str, AttrValue)> {
    vec![("transpose_a", AttrValue::Bool(ta)), ("transpose_b", AttrValue::Bool(tb))]
}

/// One matmul case in f32 against the interpreter, at 1 and 2 threads.
fn matmul_case(rng: &mut Rng, a_shape: &[usize], b_shape: &[usize], ta: bool, tb: bool) {
    let a = rand_f32(rng, a_shape.iter().product());
    let b = rand_f32(rng, b_shape.iter().product());
    let inputs = [Tensor::from_f32(a_shape, a.clone()).unwrap(), Tensor::from_f32(b_shape, b.clone()).unwrap()];
    let attrs = mm_attrs(ta, tb);
    let (f32_mode, precise) = interp_run(OpKind::Matmul, &attrs, &inputs);
    let mag = abs_products(OpKind::Matmul, &attrs, &inputs);
    let geom = MatmulGeom::new(a_shape, b_shape, ta, tb).unwrap();
    assert_eq!(geom.out_shape(), precise.shape(), "out shape");
    let k = if ta { a_shape[a_shape.len() - 2] } else { a_shape[a_shape.len() - 1] };
    for threads in [1, 2] {
        let mut out = vec![f32::NAN; geom.out_len()];
        matmul(&a, a_shape, &b, b_shape, ta, tb, &mut out, threads, &Epilogue::none()).unwrap();
        let got: Vec<f64> = out.iter().map(|&x| x as f64).collect();
        let label = format!("matmul {a_shape:?}{} @ {b_shape:?}{} t={threads}", tstr(ta), tstr(tb));
        check_close(&label, &got, &precise.to_f64_vec(), &mag, 2.0 * k as f64 * U32, U32);
        let (m, n, kk) = geom.mnk();
        if m * n * kk <= SMALL_WORK {
            // The plain loop rounds exactly as the interpreter does.
            assert!(f32_mode.bit_eq(&Tensor::from_f32(precise.shape(), out.clone()).unwrap()), "{label}: bitwise");
        }
    }
    packed_case(&a, a_shape, &b, b_shape, ta, tb, &precise.to_f64_vec(), &mag);
}

/// `b` packed as a plan packs a weight (when it is one matrix and the machine has the
/// kernel): the product through the packed kernel is within the same bound, and the same
/// bits at 1 and 2 threads (one fused multiply-add chain per element, however it is tiled).
#[allow(clippy::too_many_arguments)]
fn packed_case(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    ta: bool,
    tb: bool,
    want: &[f64],
    mag: &[f64],
) {
    let Some(pb) = PackedB::matmul_operand(b, b_shape, tb) else { return };
    let k = pb.k();
    let mut first: Option<Vec<f32>> = None;
    for threads in [1, 2] {
        let mut out = vec![f32::NAN; want.len()];
        matmul_f32(a, a_shape, b, b_shape, ta, tb, &mut out, threads, &Epilogue::none(), Some(&pb)).unwrap();
        let got: Vec<f64> = out.iter().map(|&x| x as f64).collect();
        let label = format!("packed {a_shape:?}{} @ {b_shape:?}{} t={threads}", tstr(ta), tstr(tb));
        check_close(&label, &got, want, mag, 2.0 * k as f64 * U32, U32);
        match &first {
            None => first = Some(out),
            Some(f) => {
                assert!(f.iter().zip(&out).all(|(x, y)| x.to_bits() == y.to_bits()), "{label}: thread counts differ")
            }
        }
    }
}

fn tstr(t: bool) -> &'static str {
    if t {
        "ᵀ"
    } else {
        ""
    }
}

#[test]
fn matmul_matches_interpreter_on_edge_shapes() {
    let mut rng = Rng::new(1);
    let dims = [0usize, 1, 2, 3, 7, 16, 33];
    for &m in &dims {
        for &n in &dims {
            for &k in &dims {
                matmul_case(&mut rng, &[m, k], &[k, n], false, false);
            }
        }
    }
}

#[test]
fn matmul_matches_interpreter_on_gemm_sizes_and_transposes() {
    let mut rng = Rng::new(2);
    for &(m, n, k) in &[(64, 64, 64), (100, 130, 70), (1, 300, 200), (300, 1, 90), (257, 129, 31), (8, 8, 1000)] {
        for ta in [false, true] {
            for tb in [false, true] {
                let a_shape = if ta { [k, m] } else { [m, k] };
                let b_shape = if tb { [n, k] } else { [k, n] };
                matmul_case(&mut rng, &a_shape, &b_shape, ta, tb);
            }
        }
    }
}

#[test]
fn packed_matmul_matches_interpreter_across_its_blocks() {
    // Around the kernel's blocks: 12-row groups and their tails, 32-column panels, 512-column
    // tiles, 1024-value `k` blocks, and the tiles of up to 128 rows.
    let mut rng = Rng::new(12);
    for &(m, n, k) in &[
        (9, 33, 1025),
        (130, 545, 40),
        (8, 1100, 3),
        (17, 32, 2049),
        (1, 1024, 300),
        (257, 31, 17),
        (23, 70, 12),
        (37, 600, 5),
    ] {
        matmul_case(&mut rng, &[m, k], &[k, n], false, false);
        matmul_case(&mut rng, &[k, m], &[n, k], true, true);
    }
}

#[test]
fn matmul_batch_broadcasting() {
    let mut rng = Rng::new(3);
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 40, 50], &[2, 3, 50, 60]),
        (&[2, 1, 40, 50], &[3, 50, 60]),
        (&[40, 50], &[4, 50, 60]),
        (&[4, 40, 50], &[50, 60]), // folds the batch into rows
        (&[1, 4, 40, 50], &[1, 1, 50, 60]),
        (&[3, 1, 5, 6], &[1, 2, 6, 7]),
        (&[0, 5, 6], &[6, 7]),
        (&[2, 0, 5, 6], &[1, 6, 7]),
        (&[3, 20, 1], &[3, 1, 20]),
        (&[1, 2, 200, 64], &[1, 2, 64, 150]),
    ];
    for (a, b) in cases {
        matmul_case(&mut rng, a, b, false, false);
        let mut at = a.to_vec();
        let r = at.len();
        at.swap(r - 1, r - 2);
        let mut bt = b.to_vec();
        let r = bt.len();
        bt.swap(r - 1, r - 2);
        matmul_case(&mut rng, &at, &bt, true, true);
    }
}

#[test]
fn matmul_nan_and_inf_propagate() {
    for &(m, n, k) in &[(3, 4, 5), (40, 50, 60)] {
        let mut rng = Rng::new(4);
        let mut a = rand_f32(&mut rng, m * k);
        let mut b = rand_f32(&mut rng, k * n);
        a[k + 2] = f32::NAN; // row 1 of a
        b[3 * n + 1] = f32::INFINITY; // b[3, 1]
        a[2 * k + 3] = 0.0; // a[2, 3] * inf = NaN in output [2, 1]
        b[4 * n + 2] = f32::NEG_INFINITY; // column 2
        let inputs = [Tensor::from_f32(&[m, k], a.clone()).unwrap(), Tensor::from_f32(&[k, n], b.clone()).unwrap()];
        let attrs = mm_attrs(false, false);
        let (_, precise) = interp_run(OpKind::Matmul, &attrs, &inputs);
        let mag = abs_products(OpKind::Matmul, &attrs, &inputs);
        for threads in [1, 2] {
            let mut out = vec![0.0f32; m * n];
            matmul(&a, &[m, k], &b, &[k, n], false, false, &mut out, threads, &Epilogue::none()).unwrap();
            let got: Vec<f64> = out.iter().map(|&x| x as f64).collect();
            let want = precise.to_f64_vec();
            assert!(want.iter().any(|x| x.is_nan()) && want.iter().any(|x| x.is_infinite()));
            check_close("nan/inf", &got, &want, &mag, 2.0 * k as f64 * U32, U32);
        }
        packed_case(&a, &[m, k], &b, &[k, n], false, false, &precise.to_f64_vec(), &mag);
    }
}

#[test]
fn matmul_does_not_read_the_output_and_k0_gives_zeros() {
    for &(m, n) in &[(3, 5), (100, 100)] {
        let mut out = vec![f32::NAN; m * n];
        matmul::<f32>(&[], &[m, 0], &[], &[0, n], false, false, &mut out, 1, &Epilogue::none()).unwrap();
        assert!(out.iter().all(|&x| x == 0.0));
        let bias: Vec<f32> = (0..n).map(|j| j as f32).collect();
        let epi = Epilogue { bias: Some(&bias), ..Epilogue::none() };
        matmul::<f32>(&[], &[m, 0], &[], &[0, n], false, false, &mut out, 2, &epi).unwrap();
        assert!(out.iter().enumerate().all(|(i, &x)| x == (i % n) as f32));
    }
}

#[test]
fn matmul_f64_and_integers() {
    let mut rng = Rng::new(5);
    for &(m, n, k) in &[(3, 4, 5), (50, 60, 70)] {
        let a: Vec<f64> = (0..m * k).map(|_| rng.uniform()).collect();
        let b: Vec<f64> = (0..k * n).map(|_| rng.uniform()).collect();
        let inputs = [
            Tensor::new(vec![m, k], TensorData::F64(a.clone())).unwrap(),
            Tensor::new(vec![k, n], TensorData::F64(b.clone())).unwrap(),
        ];
        let attrs = mm_attrs(false, false);
        let (_, precise) = interp_run(OpKind::Matmul, &attrs, &inputs);
        let mag = abs_products(OpKind::Matmul, &attrs, &inputs);
        let mut out = vec![0.0f64; m * n];
        matmul(&a, &[m, k], &b, &[k, n], false, false, &mut out, 2, &Epilogue::none()).unwrap();
        let u = 1.0 / (1u64 << 53) as f64;
        check_close("f64", &out, &precise.to_f64_vec(), &mag, 2.0 * k as f64 * u, u);

        let ai: Vec<i64> = (0..m * k).map(|i| (i as i64 * 7919) % 2001 - 1000).collect();
        let bi: Vec<i64> = (0..k * n).map(|i| ((i as i64 * 104_729) % 3001 - 1500) * (1 << 40)).collect();
        let inputs = [Tensor::from_i64(&[m, k], ai.clone()).unwrap(), Tensor::from_i64(&[k, n], bi.clone()).unwrap()];
        let (want, _) = interp_run(OpKind::Matmul, &attrs, &inputs);
        let mut out = vec![0i64; m * n];
        matmul(&ai, &[m, k], &bi, &[k, n], false, false, &mut out, 1, &Epilogue::none()).unwrap();
        assert!(want.bit_eq(&Tensor::from_i64(&[m, n], out).unwrap()), "i64 (wrapping)");

        let ai: Vec<i32> = ai.iter().map(|&x| x as i32).collect();
        let bi: Vec<i32> = (0..k * n).map(|i| (i as i32 * 7) % 1_000_003).collect();
        let inputs = [
            Tensor::new(vec![m, k], TensorData::I32(ai.clone())).unwrap(),
            Tensor::new(vec![k, n], TensorData::I32(bi.clone())).unwrap(),
        ];
        let (want, _) = interp_run(OpKind::Matmul, &attrs, &inputs);
        let mut out = vec![0i32; m * n];
        matmul(&ai, &[m, k], &bi, &[k, n], true, false, &mut out, 1, &Epilogue::none()).unwrap_err();
        matmul(&ai, &[m, k], &bi, &[k, n], false, false, &mut out, 1, &Epilogue::none()).unwrap();
        assert!(want.bit_eq(&Tensor::new(vec![m, n], TensorData::I32(out)).unwrap()), "i32 (wrapping)");
    }
}

#[test]
fn matmul_rejects_bad_arguments() {
    let e = |r: Result<(), KernelError>| r.unwrap_err();
    let mut out = vec![0.0f32; 6];
    let a = vec![0.0f32; 6];
    let none = Epilogue::none();
    assert!(matches!(e(matmul(&a, &[6], &a, &[6, 1], false, false, &mut out, 1, &none)), KernelError::Shape(_)));
    assert!(matches!(e(matmul(&a, &[2, 3], &a, &[2, 3], false, false, &mut out, 1, &none)), KernelError::Shape(_)));
    assert!(matches!(
        e(matmul(&a, &[2, 1, 3], &a, &[3, 3, 2], false, false, &mut out, 1, &none)),
        KernelError::Len { .. } | KernelError::Shape(_)
    ));
    assert!(matches!(
        e(matmul(&a, &[2, 3], &a, &[3, 2], false, false, &mut out[..3], 1, &none)),
        KernelError::Len { name: "out", .. }
    ));
    assert!(matches!(
        e(matmul(&a[..5], &[2, 3], &a, &[3, 2], false, false, &mut out[..4], 1, &none)),
        KernelError::Len { name: "a", .. }
    ));
    let bias = [1.0f32; 3];
    let epi = Epilogue { bias: Some(&bias), ..Epilogue::none() };
    assert!(matches!(
        e(matmul(&a, &[2, 3], &a, &[3, 2], false, false, &mut out[..4], 1, &epi)),
        KernelError::Len { name: "bias", .. }
    ));
    assert!(matches!(
        e(matmul(&a, &[2, 2, 3], &a, &[3, 3, 2], false, false, &mut out[..4], 1, &none)),
        KernelError::Shape(_)
    ));
}

/// An activation op, its attributes, and its ulp bound.
type ActCase = (OpKind, Vec<(&'static str, AttrValue)>, f64);

/// Every activation op against `Activation::apply_f32` over a sweep of f32 values, within
/// the bound stated in `activation.rs`.
#[test]
fn activations_match_the_ops() {
    let mut xs: Vec<f32> = Vec::new();
    // A sparse sweep of all bit patterns, plus a dense one where the kernels switch branches.
    let mut bits = 0u32;
    while let Some(next) = bits.checked_add(4099) {
        xs.push(f32::from_bits(bits));
        bits = next;
    }
    for i in -200_000..200_000 {
        xs.push(i as f32 * 1e-4);
        xs.push(i as f32 * 5e-4);
    }
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN, 1e-45, -1e-45]);
    let n = xs.len();
    let cases: Vec<ActCase> = vec![
        (OpKind::Relu, vec![], 0.0),
        (OpKind::Gelu, vec![("approximate", AttrValue::Str("none".into()))], 4.0),
        (OpKind::Gelu, vec![("approximate", AttrValue::Str("tanh".into()))], 4.0),
        (OpKind::Sigmoid, vec![], 3.0),
        (OpKind::Silu, vec![], 3.0),
        (OpKind::Tanh, vec![], 2.0),
        (OpKind::LeakyRelu, vec![("negative_slope", AttrValue::Float(0.1))], 0.0),
        (OpKind::Softplus, vec![], 0.0),
    ];
    let input = Tensor::from_f32(&[n], xs.clone()).unwrap();
    for (kind, attrs, ulp_bound) in cases {
        let (_, want) = interp_run(kind, &attrs, std::slice::from_ref(&input));
        let want = want.to_f64_vec();
        let mut b = GraphBuilder::new("attrs");
        let x = b.input("x", DType::F32, shape(&[1])).unwrap();
        let y = b.op(kind, &[x], &attrs).unwrap();
        let node_attrs = b.graph().node(y).attrs.clone();
        let act = Activation::from_op(kind, &node_attrs).unwrap();
        let mut got = xs.clone();
        ladder::backend::cpu::activation::apply_f32(&act, &mut got);
        let mut worst = (0.0f64, 0.0f32);
        for i in 0..n {
            let (g, w, x) = (got[i], want[i], xs[i]);
            let wf = w as f32;
            if wf.is_nan() || g.is_nan() || wf.is_infinite() || g.is_infinite() {
                assert!((wf.is_nan() && g.is_nan()) || wf == g, "{kind:?} {attrs:?} at {x:e}: got {g:e}, want {w:e}");
                continue;
            }
            // gelu "tanh" gets 3|y| more ulp, y its sigmoid argument (rounded in f32 first).
            let y = 1.5957691 * (x as f64 + 0.044715 * (x as f64).powi(3));
            let extra = if matches!(act, Activation::GeluTanh) { 3.0 * y.abs() } else { 0.0 };
            let ulp = ulp_of(wf);
            let err = (g as f64 - w).abs();
            let tol = (ulp_bound + extra) * ulp + if ulp_bound > 0.0 { 1.5e-45 } else { 0.0 };
            if err / ulp > worst.0 && extra == 0.0 {
                worst = (err / ulp, x);
            }
            assert!(
                err <= tol.max(0.5 * ulp),
                "{kind:?} {attrs:?} at {x:e}: got {g:e}, want {w:e} ({} ulp)",
                err / ulp
            );
        }
        eprintln!("{kind:?}: worst {:.2} ulp at {:e}", worst.0, worst.1);
    }
}

fn ulp_of(x: f32) -> f64 {
    let a = x.abs();
    if a < f32::MIN_POSITIVE {
        return f32::from_bits(1) as f64;
    }
    let b = a.to_bits();
    f32::from_bits(b + 1) as f64 - a as f64
}

/// matmul + bias, activation, residual against the interpreter's ops chained.
#[test]
fn matmul_epilogue_matches_chained_ops() {
    let mut rng = Rng::new(6);
    // The last two are cut into tiles: two column blocks, and two row blocks.
    let shapes =
        [(1, 3, 5, 4), (2, 100, 70, 50), (1, 256, 300, 64), (3, 40, 1030, 20), (1, 300, 1000, 16), (1, 4200, 64, 48)];
    for &(batch, m, n, k) in &shapes {
        for &act_name in &["none", "relu", "gelu", "gelu_tanh", "silu"] {
            let a_shape = [batch, m, k];
            let a = rand_f32(&mut rng, batch * m * k);
            let w = rand_f32(&mut rng, k * n);
            let bias: Vec<f32> = rand_f32(&mut rng, n).iter().map(|x| x * 4.0).collect();
            let res = rand_f32(&mut rng, batch * m * n);
            // Reference: add(act(add(matmul(a, w), bias)), res), precise.
            let mut b = GraphBuilder::new("epi");
            let av = b.input("a", DType::F32, shape(&a_shape)).unwrap();
            let wv = b.input("w", DType::F32, shape(&[k, n])).unwrap();
            let bv = b.input("bias", DType::F32, shape(&[n])).unwrap();
            let rv = b.input("res", DType::F32, shape(&[batch, m, n])).unwrap();
            let p = b.matmul(av, wv).unwrap();
            let p = b.add(p, bv).unwrap();
            let p = match act_name {
                "none" => p,
                "relu" => b.relu(p).unwrap(),
                "gelu" => b.gelu(p, "none").unwrap(),
                "gelu_tanh" => b.gelu(p, "tanh").unwrap(),
                _ => b.op(OpKind::Silu, &[p], &[]).unwrap(),
            };
            let y = b.add(p, rv).unwrap();
            b.output("y", y).unwrap();
            let g = b.finish().unwrap();
            let inputs = [
                Tensor::from_f32(&a_shape, a.clone()).unwrap(),
                Tensor::from_f32(&[k, n], w.clone()).unwrap(),
                Tensor::from_f32(&[n], bias.clone()).unwrap(),
                Tensor::from_f32(&[batch, m, n], res.clone()).unwrap(),
            ];
            let want = interp::run(&g, &inputs, &Options { precise: true, ..Options::default() }).unwrap().outputs[0]
                .to_f64_vec();
            let activation = match act_name {
                "none" => Activation::None,
                "relu" => Activation::Relu,
                "gelu" => Activation::Gelu,
                "gelu_tanh" => Activation::GeluTanh,
                _ => Activation::Silu,
            };
            let mag = abs_products(
                OpKind::Matmul,
                &mm_attrs(false, false),
                &[Tensor::from_f32(&a_shape, a.clone()).unwrap(), Tensor::from_f32(&[k, n], w.clone()).unwrap()],
            );
            let pb = PackedB::new(&w, k, n, n, 1);
            let runs = [(1, false), (2, false), (1, true), (2, true)];
            for (threads, whole_rows, packed) in runs.iter().flat_map(|&(t, r)| [(t, r, None), (t, r, pb.as_ref())]) {
                let calls = std::sync::atomic::AtomicUsize::new(0);
                let seen = std::sync::atomic::AtomicUsize::new(0);
                let hook = |mut t: Tile<'_, f32>| {
                    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    seen.fetch_add(t.rows * t.cols, std::sync::atomic::Ordering::Relaxed);
                    assert!(t.row0 + t.rows <= batch * m && t.col0 + t.cols <= n);
                    assert!(!whole_rows || (t.col0 == 0 && t.cols == n), "a tile of part of a row");
                    let _ = t.row(t.rows - 1);
                };
                let epi =
                    Epilogue { bias: Some(&bias), activation, residual: Some(&res), hook: Some(&hook), whole_rows };
                let mut out = vec![f32::NAN; batch * m * n];
                matmul_f32(&a, &a_shape, &w, &[k, n], false, false, &mut out, threads, &epi, packed).unwrap();
                assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), out.len(), "hook covers the output once");
                let tiles = calls.load(std::sync::atomic::Ordering::Relaxed);
                assert!(tiles >= if m * n > TILE_ELEMS { 2 } else { 1 }, "{tiles} tiles");
                // Tolerance: the GEMM bound (times the activation's slope, at most 1.13 for
                // these), a few ulp of the activation and the two adds, on the result and on
                // the pre-activation value.
                for i in 0..out.len() {
                    let (got, w) = (out[i] as f64, want[i]);
                    let pre = mag[i] + bias[i % n].abs() as f64;
                    let tol =
                        1.2 * 2.0 * k as f64 * U32 * mag[i] + 8.0 * U32 * (w.abs() + pre + res[i].abs() as f64) + 1e-30;
                    assert!(
                        (got - w).abs() <= tol,
                        "{act_name} [{batch},{m},{n},{k}] t={threads} packed={} element {i}: got {got}, want {w}",
                        packed.is_some()
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// conv
// ---------------------------------------------------------------------------------------------

struct ConvCase {
    x: Vec<usize>,
    w: Vec<usize>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    groups: i64,
}

fn conv_attrs(c: &ConvCase) -> Vec<(&'static str, AttrValue)> {
    vec![
        ("stride", AttrValue::Ints(c.stride.clone())),
        ("padding", AttrValue::Ints(c.padding.clone())),
        ("dilation", AttrValue::Ints(c.dilation.clone())),
        ("groups", AttrValue::Int(c.groups)),
    ]
}

fn conv_case(rng: &mut Rng, c: &ConvCase, specials: bool) {
    let mut x = rand_f32(rng, c.x.iter().product());
    let mut w = rand_f32(rng, c.w.iter().product());
    if specials && !x.is_empty() && !w.is_empty() {
        let xl = x.len();
        x[xl / 2] = f32::NAN;
        x[xl / 3] = f32::INFINITY;
        w[0] = f32::INFINITY; // meets padding where there is any: NaN there
    }
    let inputs = [Tensor::from_f32(&c.x, x.clone()).unwrap(), Tensor::from_f32(&c.w, w.clone()).unwrap()];
    let attrs = conv_attrs(c);
    let (_, precise) = interp_run(OpKind::Conv, &attrs, &inputs);
    let mag = abs_products(OpKind::Conv, &attrs, &inputs);
    let geom = ConvGeom::new(&c.x, &c.w, &c.stride, &c.padding, &c.dilation, c.groups).unwrap();
    assert_eq!(geom.out_shape(), precise.shape());
    let depth = geom.depth();
    let mut algos = vec![ConvAlgo::Direct, ConvAlgo::Im2col, ConvAlgo::Blocked];
    if geom.algorithm() == ConvAlgo::Pointwise {
        algos.push(ConvAlgo::Pointwise);
    }
    for algo in algos {
        for threads in [1, 2] {
            let label = format!("conv {:?} * {:?} {:?} {algo:?} t={threads}", c.x, c.w, attrs);
            let mut out = vec![f32::NAN; geom.out_len()];
            let mut scratch = vec![0.0f32; geom.scratch_len_for(algo, threads)];
            conv_with(&geom, algo, &x, &w, &mut out, Some(&mut scratch), threads, &Epilogue::none()).unwrap();
            let got: Vec<f64> = out.iter().map(|&v| v as f64).collect();
            check_close(&label, &got, &precise.to_f64_vec(), &mag, 2.0 * depth as f64 * U32, U32);
            // Without scratch it allocates its own and gives the same answer.
            let mut out2 = vec![0.0f32; geom.out_len()];
            conv_with(&geom, algo, &x, &w, &mut out2, None, threads, &Epilogue::none()).unwrap();
            assert!(out.iter().zip(&out2).all(|(a, b)| a.to_bits() == b.to_bits()), "{label}: scratch");
        }
    }
}

#[test]
fn conv_matches_interpreter() {
    let mut rng = Rng::new(7);
    let v = |s: &[i64]| s.to_vec();
    let cases = vec![
        // conv2d: plain, padded, strided, dilated, grouped, depthwise, asymmetric pads.
        ConvCase {
            x: vec![2, 3, 9, 10],
            w: vec![4, 3, 3, 3],
            stride: v(&[]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 8, 12, 12],
            w: vec![6, 8, 3, 3],
            stride: v(&[1, 1]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 4, 11, 13],
            w: vec![4, 2, 3, 2],
            stride: v(&[2, 3]),
            padding: v(&[1, 0, 2, 1]),
            dilation: v(&[2, 1]),
            groups: 2,
        },
        ConvCase {
            x: vec![1, 6, 10, 10],
            w: vec![6, 1, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 6,
        },
        ConvCase {
            x: vec![1, 4, 7, 7],
            w: vec![8, 4, 1, 1],
            stride: v(&[]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 4, 7, 7],
            w: vec![6, 2, 1, 1],
            stride: v(&[]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 2,
        },
        ConvCase {
            x: vec![1, 2, 5, 5],
            w: vec![3, 2, 1, 1],
            stride: v(&[2, 2]),
            padding: v(&[0, 0, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 16, 20, 20],
            w: vec![32, 16, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 1, 4, 4],
            w: vec![1, 1, 5, 5],
            stride: v(&[]),
            padding: v(&[2, 2, 2, 2]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 1, 3, 3],
            w: vec![2, 1, 2, 2],
            stride: v(&[3, 3]),
            padding: v(&[0, 0, 0, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        // Windows that see only padding, and an empty output.
        ConvCase {
            x: vec![1, 2, 2, 2],
            w: vec![2, 2, 2, 2],
            stride: v(&[]),
            padding: v(&[3, 3, 3, 3]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 2, 2],
            w: vec![2, 2, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![0, 2, 5, 5],
            w: vec![2, 2, 3, 3],
            stride: v(&[]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 1,
        },
        // The channel-blocked kernel's paths: rows wider than one block of 32 (balanced
        // blocks, the last vector masked) with padding on both sides; stride 2 (two loads
        // deinterleaved) and 3 (gathers) into padding; short rows computed two at a time;
        // out channels that are not a multiple of 8; groups of 4 or more outputs; wide and
        // dilated kernels; rows narrower than the kernel's padding.
        ConvCase {
            x: vec![1, 3, 6, 75],
            w: vec![12, 3, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 3, 19, 67],
            w: vec![5, 3, 7, 7],
            stride: v(&[2, 2]),
            padding: v(&[3, 3, 3, 3]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 4, 9, 50],
            w: vec![9, 4, 3, 3],
            stride: v(&[1, 3]),
            padding: v(&[0, 2, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 6, 12, 14],
            w: vec![16, 3, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 2,
        },
        ConvCase {
            x: vec![1, 2, 10, 40],
            w: vec![8, 2, 3, 5],
            stride: v(&[]),
            padding: v(&[2, 4, 2, 4]),
            dilation: v(&[2, 3]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 4, 3],
            w: vec![4, 2, 3, 3],
            stride: v(&[]),
            padding: v(&[2, 2, 2, 2]),
            dilation: v(&[]),
            groups: 1,
        },
        // Stride 2 with up to three adjacent kernel columns (one pair of loads per vector
        // for every column): a last vector of one column; two full vectors whose third
        // column's last lane is the element after the span, inside the row and in the right
        // padding; two rows at once; two- and one-column kernels; several blocks per row.
        ConvCase {
            x: vec![1, 3, 7, 33],
            w: vec![8, 3, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 4, 9, 64],
            w: vec![9, 4, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 3, 5, 32],
            w: vec![8, 3, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[0, 0, 0, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 6, 31],
            w: vec![8, 2, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[1, 0, 0, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 4, 8, 70],
            w: vec![8, 4, 2, 2],
            stride: v(&[2, 2]),
            padding: v(&[0, 0, 0, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 4, 6, 41],
            w: vec![8, 4, 1, 1],
            stride: v(&[2, 2]),
            padding: v(&[0, 0, 0, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 4, 200],
            w: vec![8, 2, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 3, 6, 16],
            w: vec![8, 3, 3, 3],
            stride: v(&[2, 2]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        // Stride 2 with wider kernel rows through the same loads (columns 2j + parity are the
        // evens or odds moved down j lanes): 5 and 7 wide, a full last vector whose top lanes
        // come from past its span, two rows at once, an even width.
        ConvCase {
            x: vec![1, 3, 9, 40],
            w: vec![8, 3, 5, 5],
            stride: v(&[2, 2]),
            padding: v(&[2, 2, 2, 2]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 12, 37],
            w: vec![8, 2, 7, 7],
            stride: v(&[2, 2]),
            padding: v(&[3, 3, 3, 3]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 14, 32],
            w: vec![8, 2, 7, 7],
            stride: v(&[2, 2]),
            padding: v(&[3, 3, 2, 2]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 2, 5, 70],
            w: vec![8, 2, 1, 6],
            stride: v(&[2, 2]),
            padding: v(&[0, 0, 0, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        // Stride 1 with three adjacent kernel columns (columns unrolled, only the first and last
        // vector of a block masked): blocks of 48, 32 and 32 with a last block of one column;
        // blocks wholly inside the row (no padding); a block of 48 ending two columns in,
        // with asymmetric pads; short rows two at a time.
        ConvCase {
            x: vec![1, 5, 5, 97],
            w: vec![10, 5, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 3, 4, 66],
            w: vec![8, 3, 3, 3],
            stride: v(&[]),
            padding: v(&[]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 4, 6, 33],
            w: vec![8, 4, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 2, 0, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 3, 8, 14],
            w: vec![8, 3, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 1,
        },
        // Padding wider than a vector: a block of 48 whose middle vector starts in the left
        // padding (and whose last lies in the right padding).
        ConvCase {
            x: vec![1, 2, 3, 10],
            w: vec![8, 2, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 20, 1, 20]),
            dilation: v(&[]),
            groups: 1,
        },
        // The depthwise path (one input channel per group, stride 1): rows in blocks of 64,
        // 32 and 8 columns with an overlapping last block, a 5-wide kernel with asymmetric
        // pads, rows narrower than one block, two outputs per group, rows wholly in padding.
        ConvCase {
            x: vec![1, 3, 5, 77],
            w: vec![3, 1, 3, 5],
            stride: v(&[]),
            padding: v(&[2, 1, 0, 3]),
            dilation: v(&[]),
            groups: 3,
        },
        ConvCase {
            x: vec![1, 2, 4, 40],
            w: vec![2, 1, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 2,
        },
        ConvCase {
            x: vec![2, 4, 3, 3],
            w: vec![4, 1, 3, 3],
            stride: v(&[]),
            padding: v(&[1, 1, 1, 1]),
            dilation: v(&[]),
            groups: 4,
        },
        ConvCase {
            x: vec![1, 2, 2, 21],
            w: vec![4, 1, 3, 3],
            stride: v(&[]),
            padding: v(&[3, 1, 3, 1]),
            dilation: v(&[]),
            groups: 2,
        },
        ConvCase {
            x: vec![1, 1, 3, 40],
            w: vec![4, 1, 1, 17],
            stride: v(&[]),
            padding: v(&[0, 8, 0, 8]),
            dilation: v(&[]),
            groups: 1,
        },
        ConvCase {
            x: vec![2, 5, 45],
            w: vec![11, 5, 4],
            stride: v(&[2]),
            padding: v(&[3, 0]),
            dilation: v(&[]),
            groups: 1,
        },
        // conv1d and conv3d.
        ConvCase {
            x: vec![2, 3, 30],
            w: vec![4, 3, 5],
            stride: v(&[2]),
            padding: v(&[2, 1]),
            dilation: v(&[2]),
            groups: 1,
        },
        ConvCase {
            x: vec![1, 4, 17],
            w: vec![4, 1, 3],
            stride: v(&[]),
            padding: v(&[1, 1]),
            dilation: v(&[]),
            groups: 4,
        },
        ConvCase {
            x: vec![1, 2, 5, 6, 7],
            w: vec![3, 2, 2, 3, 2],
            stride: v(&[1, 2, 1]),
            padding: v(&[1, 0, 1, 0, 1, 1]),
            dilation: v(&[1, 1, 2]),
            groups: 1,
        },
    ];
    for c in &cases {
        conv_case(&mut rng, c, false);
        conv_case(&mut rng, c, true);
    }
}

#[test]
fn conv_epilogue_and_errors() {
    let mut rng = Rng::new(8);
    let (xs, ws) = ([2usize, 6, 9, 9], [8usize, 3, 3, 3]);
    let x = rand_f32(&mut rng, xs.iter().product());
    let w = rand_f32(&mut rng, ws.iter().product());
    let bias = rand_f32(&mut rng, 8);
    let geom = ConvGeom::new(&xs, &ws, &[], &[1, 1, 1, 1], &[], 2).unwrap();
    let res = rand_f32(&mut rng, geom.out_len());
    // Reference: relu(conv + bias[oc]) + res, computed from the plain conv.
    let mut plain = vec![0.0f32; geom.out_len()];
    conv(&geom, &x, &w, &mut plain, None, 1, &Epilogue::none()).unwrap();
    let p = geom.positions();
    let want: Vec<f32> = plain.iter().enumerate().map(|(i, &v)| (v + bias[(i / p) % 8]).max(0.0) + res[i]).collect();
    for algo in [ConvAlgo::Direct, ConvAlgo::Im2col] {
        for threads in [1, 2] {
            let mut out = vec![0.0f32; geom.out_len()];
            let epi =
                Epilogue { bias: Some(&bias), activation: Activation::Relu, residual: Some(&res), ..Epilogue::none() };
            conv_with(&geom, algo, &x, &w, &mut out, None, threads, &epi).unwrap();
            for i in 0..out.len() {
                let tol = 2.0 * 54.0 * U32 * 60.0;
                assert!((out[i] - want[i]).abs() as f64 <= tol, "{algo:?} t={threads} element {i}");
            }
        }
    }
    let bad = |r: Result<ConvGeom, KernelError>| assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    bad(ConvGeom::new(&[1, 4, 5], &[2, 3, 3], &[], &[], &[], 1)); // channels
    bad(ConvGeom::new(&[1, 4, 5], &[3, 2, 3], &[], &[], &[], 2)); // out channels vs groups
    bad(ConvGeom::new(&[1, 4, 5], &[2, 4, 7], &[], &[], &[], 1)); // window too long
    bad(ConvGeom::new(&[1, 4, 5], &[2, 4, 3], &[0], &[], &[], 1)); // stride 0
    bad(ConvGeom::new(&[1, 4, 5], &[2, 4, 3], &[], &[1], &[], 1)); // padding length
    bad(ConvGeom::new(&[1, 4, 5], &[2, 4, 0], &[], &[], &[], 1)); // empty kernel
    bad(ConvGeom::new(&[1, 4, 5], &[2, 4, 3, 3], &[], &[], &[], 1)); // ranks
    let mut out = vec![0.0f32; geom.out_len()];
    let mut small = vec![0.0f32; 1];
    let r = conv_with(&geom, ConvAlgo::Im2col, &x, &w, &mut out, Some(&mut small), 1, &Epilogue::none());
    assert!(matches!(r, Err(KernelError::Len { name: "scratch", .. })));
    let r = conv_with(&geom, ConvAlgo::Pointwise, &x, &w, &mut out, None, 1, &Epilogue::none());
    assert!(matches!(r, Err(KernelError::Unsupported(_))));
    let r = conv(&geom, &x[1..], &w, &mut out, None, 1, &Epilogue::none());
    assert!(matches!(r, Err(KernelError::Len { name: "x", .. })));
}
