//! GEMM epilogues (`ladder::sched::epilogue`): a kernel that consumes a matmul's output row
//! by row runs per finished row tile inside the GEMM. Which consumers fuse and which do not
//! (with the reason), and fused plans against the reference executor on random and
//! adversarial data, at 1 and 2 threads, with products cut into several row tiles. Then the
//! per-channel post-ops folded into convolutions and poolings, against the interpreter.

use ladder::backend::cpu::jit::CraneliftCompiler;
use ladder::backend::cpu::CpuOptions;
use ladder::kernel::{Program, Step};
use ladder::models::{random_tensor, Rng};
use ladder::{compile, CompileOptions, DType, Graph, Plan, Tensor};

fn parse(text: &str) -> Graph {
    ladder::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn native(g: &Graph, threads: usize) -> Plan {
    let options = CompileOptions {
        kernel_compiler: Some(CraneliftCompiler::shared(CpuOptions::default()).unwrap()),
        threads,
        ..CompileOptions::reference()
    };
    compile(g, &options).unwrap()
}

fn epilogues(p: &Program) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Matmul(m) => m.epilogue.as_ref().map(|k| k.name.clone()),
            _ => None,
        })
        .collect()
}

/// Largest `|a - b| / (|b| + mean|b|)`; non-finite values must match exactly.
/// The tolerance of [`max_rel`] for products: 1e-5 where the GEMM's terms are fused
/// multiply-adds (one rounding each); at the x86-64 baseline level, which has no fused
/// multiply-add, each product rounds before its add (as the `gemm` crate's and onnxruntime's
/// SSE code do), which on these tests' rows of cancelling terms reaches 2.2e-5: 3e-5 there,
/// still within `NUMERICS.md`'s `(n + 2) eps S` for contractions.
fn product_tolerance() -> f64 {
    if ladder::backend::cpu::packed::baseline() {
        3e-5
    } else {
        1e-5
    }
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    let scale = y.iter().map(|v| v.abs()).filter(|v| v.is_finite()).sum::<f64>() / y.len().max(1) as f64;
    let mut worst: f64 = 0.0;
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        if !q.is_finite() || !p.is_finite() {
            assert!((p.is_nan() && q.is_nan()) || p == q, "element {i}: {p} vs {q}");
            continue;
        }
        worst = worst.max((p - q).abs() / (q.abs() + scale).max(f64::MIN_POSITIVE));
    }
    worst
}

/// An MLP block: linear, gelu (its prims: recovery is off), linear, residual add, layer norm.
const MLP: &str =
    "graph mlp(%x: f32[n, 16], %w1: f32[256, 16], %b1: f32[256], %w2: f32[16, 256], %b2: f32[16], %g: f32[16]) {
  %h = linear(%x, %w1, %b1)
  %a = gelu(%h)
  %o = linear(%a, %w2, %b2)
  %r = add(%o, %x)
  %y = layer_norm(%r, %g) {axis=-1, eps=1e-5}
  return %y
}";

#[test]
fn bias_activation_residual_and_norm_run_in_the_gemm() {
    let g = parse(MLP);
    let plan = native(&g, 1);
    let p = plan.program().unwrap();
    // Both consumers (bias + gelu; bias + residual + layer norm) are epilogues: no kernel
    // step is left between the matmuls.
    assert_eq!(epilogues(p).len(), 2, "{p}");
    assert!(!p.steps.iter().any(|s| matches!(s, Step::Kernel(_))), "{p}");
    let text = p.to_string();
    assert!(text.contains(", epilogue k0 per row tile:"), "{text}");
    let explain = plan.explanation();
    assert!(explain.contains("runs as the epilogue of matmul"), "{explain}");

    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for threads in [1, 2] {
        let plan = native(&g, threads);
        // 2048 rows of 256 columns is two row tiles of the first product.
        for n in [1usize, 7, 130, 2048] {
            let mut rng = Rng::new(n as u64 * 31 + threads as u64);
            let mut inputs: Vec<Tensor> = [vec![n, 16], vec![256, 16], vec![256], vec![16, 256], vec![16], vec![16]]
                .iter()
                .map(|s| random_tensor(&mut rng, DType::F32, s).unwrap())
                .collect();
            let want = reference.run(&inputs).unwrap();
            let got = plan.run(&inputs).unwrap();
            let err = max_rel(&got.outputs[0], &want.outputs[0]);
            assert!(err <= product_tolerance(), "n={n} threads={threads}: max rel {err}");
            // Adversarial rows: NaN, ±inf and zeros in x reach the epilogue through the GEMM.
            if n >= 4 {
                let mut x = inputs[0].to_f64_vec();
                for (j, v) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0].iter().enumerate() {
                    let row = (j * 5 + 1) % n;
                    x[row * 16..(row + 1) * 16].fill(*v);
                }
                inputs[0] = Tensor::from_f32(&[n, 16], x.iter().map(|&v| v as f32).collect()).unwrap();
                let want = reference.run(&inputs).unwrap();
                let got = plan.run(&inputs).unwrap();
                let err = max_rel(&got.outputs[0], &want.outputs[0]);
                assert!(err <= product_tolerance(), "n={n} threads={threads} adversarial: max rel {err}");
            }
        }
    }
}

#[test]
fn consumers_that_do_not_read_row_by_row_stay_separate() {
    // The transpose reads the product by columns; the sum over rows reads every row in one
    // iteration: neither can run per row tile.
    let g = parse(
        "graph t(%x: f32[8, 4], %w: f32[4, 6]) {
  %p = matmul(%x, %w)
  %t = transpose(%p) {axis0=0, axis1=1}
  %e = exp(%t)
  %q = matmul(%x, %w)
  %s = sum(%q) {axes=[0]}
  return %e, %s
}",
    );
    let plan = native(&g, 1);
    let p = plan.program().unwrap();
    assert!(epilogues(p).is_empty(), "{p}");
    let explain = plan.explanation();
    assert!(explain.contains("is not the epilogue of matmul"), "{explain}");
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    let mut rng = Rng::new(5);
    let inputs = vec![
        random_tensor(&mut rng, DType::F32, &[8, 4]).unwrap(),
        random_tensor(&mut rng, DType::F32, &[4, 6]).unwrap(),
    ];
    let (want, got) = (reference.run(&inputs).unwrap(), plan.run(&inputs).unwrap());
    for (a, b) in got.outputs.iter().zip(&want.outputs) {
        assert!(max_rel(a, b) <= 1e-5);
    }
}

#[test]
fn a_later_reader_sees_the_whole_product_and_batched_loops_stay_separate() {
    // A product with a size-1 batch dim fuses with its bias + relu consumer and is also read
    // by a later matmul, which sees it whole. With a real batch of 3 the consumer loops over
    // [3, 5]: its outermost loop is not the product's 15 rows, so it stays a step.
    for (batch, fused) in [(1usize, 1usize), (3, 0)] {
        let g = parse(&format!(
            "graph b(%a: f32[{batch}, 5, 4], %b: f32[{batch}, 4, 7], %c: f32[7]) {{
  %p = matmul(%a, %b)
  %cb = broadcast_in_dim(%c) {{shape=[{batch}, 5, 7], broadcast_dims=[2]}}
  %y = add(%p, %cb)
  %z = relu(%y)
  %m = matmul(%p, %p) {{transpose_b=true}}
  return %z, %m
}}"
        ));
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        for threads in [1, 2] {
            let plan = native(&g, threads);
            let p = plan.program().unwrap();
            assert_eq!(epilogues(p).len(), fused, "{p}");
            if fused == 0 {
                let explain = plan.explanation();
                assert!(explain.contains("its outermost loop does not run over"), "{explain}");
            }
            let mut rng = Rng::new(threads as u64);
            let inputs: Vec<Tensor> = [vec![batch, 5, 4], vec![batch, 4, 7], vec![7]]
                .iter()
                .map(|s| random_tensor(&mut rng, DType::F32, s).unwrap())
                .collect();
            let (want, got) = (reference.run(&inputs).unwrap(), plan.run(&inputs).unwrap());
            for (a, b) in got.outputs.iter().zip(&want.outputs) {
                assert!(max_rel(a, b) <= 1e-5, "batch={batch} threads={threads}");
            }
        }
    }
}

#[test]
fn a_recovered_gelu_runs_in_the_gemm_after_its_epilogue() {
    // Native mode recovers gelu into a library call; after the bias kernel it runs on each
    // finished row tile too: linear → gelu is one GEMM call. Also without a bias (gelu on the
    // product itself).
    let g = parse(
        "graph mlp(%x: f32[n, 16], %w1: f32[256, 16], %b1: f32[256], %w2: f32[16, 256]) {
  %h = linear(%x, %w1, %b1)
  %a = gelu(%h)
  %o = linear(%a, %w2)
  %t = gelu(%o) {approximate=\"tanh\"}
  return %t
}",
    );
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for threads in [1, 2] {
        let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
        let p = plan.program().unwrap();
        let fused: Vec<(bool, String)> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Matmul(m) => Some((m.epilogue.is_some(), m.activation.as_ref()?.op.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(fused, vec![(true, "gelu".to_string()), (false, "gelu".to_string())], "{p}");
        assert_eq!(p.steps.len(), 2, "{p}");
        assert!(p.to_string().contains("then library"), "{p}");
        for n in [1usize, 9, 2048] {
            let mut rng = Rng::new(n as u64 + 100 * threads as u64);
            let mut inputs: Vec<Tensor> = [vec![n, 16], vec![256, 16], vec![256], vec![16, 256]]
                .iter()
                .map(|s| random_tensor(&mut rng, DType::F32, s).unwrap())
                .collect();
            if n > 4 {
                let mut x = inputs[0].to_f64_vec();
                x[..16].fill(f64::NAN);
                x[16..32].fill(f64::NEG_INFINITY);
                x[32..48].iter_mut().for_each(|v| *v *= 1e3);
                inputs[0] = Tensor::from_f32(&[n, 16], x.iter().map(|&v| v as f32).collect()).unwrap();
            }
            let want = reference.run(&inputs).unwrap();
            let got = plan.run(&inputs).unwrap();
            let err = max_rel(&got.outputs[0], &want.outputs[0]);
            assert!(err <= product_tolerance(), "n={n} threads={threads}: max rel {err}");
        }
    }
}

/// The kernel steps of `p` that carry an activation: (kernel, op).
fn kernel_activations(p: &Program) -> Vec<(String, String)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Kernel(k) => Some((k.name.clone(), k.activation.as_ref()?.op.to_string())),
            _ => None,
        })
        .collect()
}

/// Random rows with NaN, ±inf and huge values in the first rows (when there are enough).
fn adversarial_rows(rng: &mut Rng, rows: usize, n: usize) -> Tensor {
    let mut x = random_tensor(rng, DType::F32, &[rows, n]).unwrap().to_f64_vec();
    let specials = [f64::NAN, f64::NEG_INFINITY, f64::INFINITY, 3e38, -3e38, 1e-40, -0.0, -9.0, 9.0, -1.0, 1.0];
    for (v, s) in x.iter_mut().zip(specials.iter().cycle()).take(2 * n.min(64)) {
        *v = *s;
    }
    Tensor::from_f32(&[rows, n], x.iter().map(|&v| v as f32).collect()).unwrap()
}

#[test]
fn a_recovered_gelu_runs_on_the_rows_its_kernel_stores() {
    // `x * a + b → gelu` (W1): the kernel stores its rows straight into gelu's result, which
    // runs there in place per range of rows. Wide rows (four rows per range) and narrow ones
    // (thousands per range), both gelu forms, 1 and 2 threads, against the reference executor
    // running the unrecovered prims.
    for (width, form) in [(1024usize, ""), (3, ""), (1024, " {approximate=\"tanh\"}")] {
        let g = parse(&format!(
            "graph w1(%x: f32[n, {width}], %a: f32[{width}], %b: f32[{width}]) {{
  %u = mul(%x, %a)
  %v = add(%u, %b)
  %y = gelu(%v){form}
  return %y
}}"
        ));
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        for threads in [1, 2] {
            let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
            let p = plan.program().unwrap();
            assert_eq!(kernel_activations(p), vec![("k0".to_string(), "gelu".to_string())], "{p}");
            assert_eq!(p.steps.len(), 1, "{p}");
            assert!(p.to_string().contains("then library b4 = gelu(b3)"), "{p}");
            assert!(p.to_string().contains("per range of rows"), "{p}");
            assert!(plan.explanation().contains("gelu b"), "{}", plan.explanation());
            for rows in [0usize, 1, 5, 37, 3000] {
                let mut rng = Rng::new((rows * 7 + width + threads) as u64);
                let inputs = vec![
                    adversarial_rows(&mut rng, rows, width),
                    random_tensor(&mut rng, DType::F32, &[width]).unwrap(),
                    random_tensor(&mut rng, DType::F32, &[width]).unwrap(),
                ];
                let want = reference.run(&inputs).unwrap();
                let got = plan.run(&inputs).unwrap();
                let err = max_rel(&got.outputs[0], &want.outputs[0]);
                assert!(err <= product_tolerance(), "width={width}{form} rows={rows} threads={threads}: max rel {err}");
                // The kernel's own result is never stored: the plan needs no memory of its own.
                assert_eq!(plan.memory_report(&inputs).unwrap().arena_bytes, 0, "{p}");
                if rows == 5 {
                    let labels: Vec<String> = plan.profile(&inputs, 1).unwrap().into_iter().map(|s| s.label).collect();
                    assert_eq!(labels, ["kernel k0 + gelu b4"]);
                }
            }
        }
    }
}

#[test]
fn an_activation_runs_on_the_blocks_of_rows_a_channel_kernel_stores() {
    // A per-channel bias on NCHW (the kernel's loops are [c, h] outside, [w] inside) then SiLU
    // as exporters write it: each outermost iteration stores a whole channel, h rows, and the
    // recovered silu runs on it in place. Against the reference executor on the prims, with
    // NaN, ±inf (the exporter form is NaN at -inf) and huge values.
    let g = parse(
        "graph cbs(%x: f32[6, 9, 7], %b: f32[6, 1, 1]) {
  %bb = broadcast_in_dim(%b) {shape=[6, 9, 7], broadcast_dims=[0, 1, 2]}
  %v = add(%x, %bb)
  %s = sigmoid(%v)
  %y = mul(%v, %s)
  return %y
}",
    );
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for threads in [1, 2] {
        let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
        let p = plan.program().unwrap();
        assert_eq!(kernel_activations(p), vec![("k0".to_string(), "silu".to_string())], "{p}\n{}", plan.explanation());
        let mut rng = Rng::new(threads as u64);
        let x = adversarial_rows(&mut rng, 54, 7);
        let x = Tensor::from_f32(&[6, 9, 7], x.as_f32().unwrap().to_vec()).unwrap();
        let inputs = vec![x, random_tensor(&mut rng, DType::F32, &[6, 1, 1]).unwrap()];
        let (want, got) = (reference.run(&inputs).unwrap(), plan.run(&inputs).unwrap());
        assert!(max_rel(&got.outputs[0], &want.outputs[0]) <= 1e-5, "threads={threads}");
        assert!(got.outputs[0].to_f64_vec().iter().any(|v| v.is_nan()));
    }
}

#[test]
fn a_gelu_whose_argument_is_read_elsewhere_runs_after_its_kernel() {
    // The kernel's result is also returned (or also read by a later kernel): it must exist,
    // so the gelu runs as its own step, and `--explain` says why.
    for ret in ["%y, %v", "%z"] {
        let g = parse(&format!(
            "graph g(%x: f32[n, 8], %a: f32[8]) {{
  %v = mul(%x, %a)
  %y = gelu(%v)
  %s = exp(%v)
  %z = add(%y, %s)
  return {ret}
}}"
        ));
        let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let p = plan.program().unwrap();
        let explain = plan.explanation();
        if ret == "%y, %v" {
            assert!(kernel_activations(p).is_empty(), "{p}");
            assert!(explain.contains("is not a temporary only it reads"), "{explain}");
        } else if kernel_activations(p).is_empty() {
            assert!(explain.contains("does not run in kernel"), "{explain}");
        }
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        let mut rng = Rng::new(5);
        let inputs = vec![adversarial_rows(&mut rng, 40, 8), random_tensor(&mut rng, DType::F32, &[8]).unwrap()];
        let (want, got) = (reference.run(&inputs).unwrap(), plan.run(&inputs).unwrap());
        for (a, b) in got.outputs.iter().zip(&want.outputs) {
            assert!(max_rel(a, b) <= 1e-5, "{ret}");
        }
    }
}

/// Constant weights are packed once when the plan is built, for ladder's own GEMM kernel:
/// plain (`x @ w`) and transposed (`linear`), with a bias kernel and a gelu in the GEMM, on
/// 1, 9 and 300 rows and adversarial values, against the reference executor; turning packing
/// off gives a plan without packed bytes that agrees too.
#[test]
fn constant_weights_are_packed_once_and_agree_with_the_reference() {
    use ladder::backend::cpu::packed::PackedB;
    use ladder::{Dim, GraphBuilder, Shape};
    let mut rng = Rng::new(77);
    let mut b = GraphBuilder::new("packed");
    let x = b.input("x", DType::F32, [Dim::sym("n"), Dim::new(96)].into_iter().collect::<Shape>()).unwrap();
    let w1 = b.named_constant("w1", random_tensor(&mut rng, DType::F32, &[96, 200]).unwrap()).unwrap();
    let w2 = b.named_constant("w2", random_tensor(&mut rng, DType::F32, &[70, 200]).unwrap()).unwrap();
    let b2 = b.named_constant("b2", random_tensor(&mut rng, DType::F32, &[70]).unwrap()).unwrap();
    let h = b.matmul(x, w1).unwrap();
    let h = b.gelu(h, "none").unwrap();
    let y = b.linear(h, w2, Some(b2)).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for threads in [1, 2] {
        let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
        let unpacked =
            compile(&g, &CompileOptions { pack_weights: false, ..CompileOptions::native_cpu(threads).unwrap() })
                .unwrap();
        assert_eq!(unpacked.packed_bytes(), 0);
        if PackedB::available() {
            // 96 x 224 and 200 x 96 (columns padded to whole 32-column panels).
            assert_eq!(plan.packed_bytes(), 4 * (96 * 224 + 200 * 96));
            assert_eq!(plan.explanation().matches("packed once").count(), 2, "{}", plan.explanation());
        }
        for n in [1usize, 9, 300] {
            let mut x = random_tensor(&mut rng, DType::F32, &[n, 96]).unwrap().to_f64_vec();
            if n > 4 {
                x[..96].fill(f64::NAN);
                x[96 + 5] = f64::INFINITY;
                x[2 * 96..3 * 96].iter_mut().for_each(|v| *v *= 1e30);
            }
            let inputs = [Tensor::from_f32(&[n, 96], x.iter().map(|&v| v as f32).collect()).unwrap()];
            let want = reference.run(&inputs).unwrap();
            for p in [&plan, &unpacked] {
                let got = p.run(&inputs).unwrap();
                let err = max_rel(&got.outputs[0], &want.outputs[0]);
                assert!(
                    err <= product_tolerance(),
                    "n={n} threads={threads} packed={}: max rel {err}",
                    p.packed_bytes() > 0
                );
            }
        }
    }
}

/// Constant convolution weights are packed once when the plan is built, for the blocked
/// convolution kernel: the same bits as packing on each call (`pack_weights: false`), for
/// stride 1 and 2, groups and a symbolic batch, at 1 and 2 threads; a
/// weight with a non-finite value is not packed (the blocked kernel refuses it) and still
/// runs, within the tolerance of the reference.
#[test]
fn constant_conv_weights_are_packed_once_with_the_same_bits() {
    use ladder::ir::AttrValue;
    use ladder::{Dim, GraphBuilder, OpKind, Shape};
    let mut rng = Rng::new(78);
    let mut b = GraphBuilder::new("convs");
    let x = b
        .input("x", DType::F32, [Dim::sym("n"), Dim::new(6), Dim::new(9), Dim::new(13)].into_iter().collect::<Shape>())
        .unwrap();
    let w1 = b.named_constant("w1", random_tensor(&mut rng, DType::F32, &[12, 6, 3, 3]).unwrap()).unwrap();
    let w2 = b.named_constant("w2", random_tensor(&mut rng, DType::F32, &[10, 6, 3, 3]).unwrap()).unwrap();
    let mut bad = random_tensor(&mut rng, DType::F32, &[12, 3, 1, 3]).unwrap().to_f64_vec();
    bad[5] = f64::INFINITY;
    let w3 = b.named_constant("w3", Tensor::from_f64_as(DType::F32, &[12, 3, 1, 3], &bad).unwrap()).unwrap();
    let attrs = |stride: i64, pad: i64, groups: i64| {
        vec![
            ("stride", AttrValue::Ints(vec![stride, stride])),
            ("padding", AttrValue::Ints(vec![pad; 4])),
            ("groups", AttrValue::Int(groups)),
        ]
    };
    let a = b.op(OpKind::Conv, &[x, w1], &attrs(1, 1, 1)).unwrap();
    let c = b.op(OpKind::Conv, &[a, w2], &attrs(2, 1, 2)).unwrap();
    let d = b.op(OpKind::Conv, &[a, w3], &attrs(1, 0, 4)).unwrap();
    b.output("c", c).unwrap();
    b.output("d", d).unwrap();
    let g = b.finish().unwrap();
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for threads in [1, 2] {
        let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
        let unpacked =
            compile(&g, &CompileOptions { pack_weights: false, ..CompileOptions::native_cpu(threads).unwrap() })
                .unwrap();
        assert_eq!(unpacked.packed_bytes(), 0);
        // w1 and w2 (12 output channels: 2 blocks of 8; 10 in 2 groups of 5 from 6 channels each:
        // 1 block per group); w3 has an infinity.
        assert_eq!(plan.packed_bytes(), 4 * (16 * 6 * 9 + 2 * 8 * 6 * 9), "{}", plan.explanation());
        assert_eq!(plan.explanation().matches("packed once for the blocked convolution").count(), 2);
        for n in [1usize, 3] {
            let inputs = [random_tensor(&mut rng, DType::F32, &[n, 6, 9, 13]).unwrap()];
            let (got, per_call, want) =
                (plan.run(&inputs).unwrap(), unpacked.run(&inputs).unwrap(), reference.run(&inputs).unwrap());
            for k in 0..2 {
                assert!(got.outputs[k].bit_eq(&per_call.outputs[k]), "output {k}, n={n}, threads={threads}");
                let err = max_rel(&got.outputs[k], &want.outputs[k]);
                assert!(err <= 1e-4, "output {k}, n={n}, threads={threads}: max rel {err}");
            }
        }
    }
}

/// The interpreter's outputs for graph `g`: the oracle for folds the scheduler makes in
/// every plan (the reference executor runs them folded too).
fn oracle(g: &Graph, inputs: &[Tensor]) -> ladder::runtime::Outputs {
    let outcome = ladder::interp::run(g, inputs, &ladder::interp::Options::default()).unwrap();
    ladder::runtime::Outputs { outputs: outcome.outputs, mutated_inputs: Vec::new() }
}

/// The convolutions of `p` with a post-op, as `(output buffer, post-op)` text.
fn conv_posts(p: &Program) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Conv(c) => Some(c.post.as_ref()?.to_string()),
            _ => None,
        })
        .collect()
}

/// A convolution's consumer kernel that adds a per-channel bias (or a constant) and maybe
/// clamps at zero, and that kernel's recovered activation, fold into the convolution: one
/// step, writing the final buffer, with the convolution's own result never stored. Every
/// convolution algorithm (blocked at stride 1 and 2, pointwise, direct depthwise, im2col),
/// 1 and 2 threads, a symbolic batch of 0, 1 and 3, against the interpreter on the graph on the
/// prims, with NaN, ±inf, huge, tiny and -0 values in the input and in the bias.
#[test]
fn bias_and_activation_after_a_convolution_run_inside_it() {
    // (kernel, stride, padding, groups, in channels, out channels)
    let shapes = [(3, 1, 1, 1, 6, 12), (3, 2, 1, 1, 3, 8), (1, 1, 0, 1, 8, 16), (3, 1, 1, 6, 6, 6), (3, 1, 1, 3, 6, 6)];
    // (consumer, expected post-op text)
    let tails = [
        ("%v = add(%c, %bb)\n  %y = relu(%v)", "v + b2[c], max(v, 0)"),
        ("%v = add(%c, %bb)\n  %y = silu(%v)", "v + b2[c], silu {nan_at_neg_inf=false}"),
        (
            "%z = full() {shape=[n, O, 7, 9], value=0.0}\n  %v = add(%c, %z)\n  %s = sigmoid(%v)\n  %y = mul(%v, %s)",
            "v + 0.0, silu",
        ),
        ("%y = relu(%c)", "max(v, 0)"),
    ];
    for (k, stride, pad, groups, cin, cout) in shapes {
        for (tail, want_post) in tails {
            let (ih, iw) = (7 * stride + k - 1 - 2 * pad - (stride - 1), 9 * stride + k - 1 - 2 * pad - (stride - 1));
            let text = format!(
                "graph cb(%x: f32[n, {cin}, {ih}, {iw}], %w: f32[{cout}, {}, {k}, {k}], %b: f32[{cout}, 1, 1]) {{
  %c = conv(%x, %w) {{stride=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], groups={groups}}}
  %bb = broadcast_in_dim(%b) {{shape=[n, {cout}, 7, 9], broadcast_dims=[1, 2, 3]}}
  {}
  return %y
}}",
                cin / groups,
                tail.replace("O", &cout.to_string())
            );
            let g = parse(&text);
            for threads in [1, 2] {
                let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
                let reference = compile(&g, &CompileOptions::reference()).unwrap();
                // Without recovery a SiLU stays prims in the kernel, which then does not fold.
                let ref_posts = conv_posts(reference.program().unwrap()).len();
                assert_eq!(ref_posts, usize::from(!want_post.contains("silu")), "{}", reference.program().unwrap());
                let p = plan.program().unwrap();
                let case = format!("{text}\nthreads={threads}\n{p}\n{}", plan.explanation());
                assert_eq!(p.steps.len(), 1, "{case}");
                let posts = conv_posts(p);
                assert_eq!(posts.len(), 1, "{case}");
                assert!(posts[0].starts_with(want_post), "{} vs {want_post}: {case}", posts[0]);
                assert!(plan.explanation().contains("runs inside conv"), "{case}");
                for n in [0usize, 1, 3] {
                    let mut rng = Rng::new((n * 13 + threads + k * 5 + cout) as u64);
                    let x = adversarial_rows(&mut rng, n * cin * ih, iw);
                    let x = Tensor::from_f32(&[n, cin, ih, iw], x.as_f32().unwrap().to_vec()).unwrap();
                    let mut bias = random_tensor(&mut rng, DType::F32, &[cout, 1, 1]).unwrap().to_f64_vec();
                    for (v, s) in bias.iter_mut().zip([f64::NAN, f64::INFINITY, -0.0, 1e-40, -3e38]) {
                        *v = s;
                    }
                    let inputs = vec![
                        x,
                        random_tensor(&mut rng, DType::F32, &[cout, cin / groups, k, k]).unwrap(),
                        Tensor::from_f64_as(DType::F32, &[cout, 1, 1], &bias).unwrap(),
                    ];
                    let (want, got) = (oracle(&g, &inputs), plan.run(&inputs).unwrap());
                    let err = max_rel(&got.outputs[0], &want.outputs[0]);
                    assert!(err <= 1e-4, "n={n}: max rel {err}\n{case}");
                    // The reference plan folds the post-op too and runs it by its meaning.
                    let folded = reference.run(&inputs).unwrap();
                    let err = max_rel(&folded.outputs[0], &want.outputs[0]);
                    assert!(err <= 1e-4, "n={n}, reference plan: max rel {err}\n{case}");
                    if n == 3 {
                        // Only the final result is stored: no arena bytes for the convolution's.
                        let bytes = plan.memory_report(&inputs).unwrap().arena_bytes;
                        assert_eq!(bytes, 0, "{case}");
                    }
                }
            }
        }
    }
}

/// A convolution whose result is read again (returned, or by a second consumer) keeps it,
/// and its consumers stay separate steps; `--explain` says why.
#[test]
fn a_convolution_result_read_elsewhere_keeps_its_consumer_separate() {
    for ret in ["%y, %c", "%y, %e"] {
        let g = parse(&format!(
            "graph cb(%x: f32[2, 4, 6, 6], %w: f32[8, 4, 3, 3], %b: f32[8, 1, 1]) {{
  %c = conv(%x, %w) {{padding=[1, 1, 1, 1]}}
  %bb = broadcast_in_dim(%b) {{shape=[2, 8, 6, 6], broadcast_dims=[1, 2, 3]}}
  %v = add(%c, %bb)
  %y = relu(%v)
  %e = exp(%c)
  return {ret}
}}"
        ));
        let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let p = plan.program().unwrap();
        assert!(conv_posts(p).is_empty(), "{p}");
        assert!(plan.explanation().contains("does not run inside conv"), "{}", plan.explanation());
        let mut rng = Rng::new(3);
        let inputs: Vec<Tensor> = [vec![2, 4, 6, 6], vec![8, 4, 3, 3], vec![8, 1, 1]]
            .iter()
            .map(|s| random_tensor(&mut rng, DType::F32, s).unwrap())
            .collect();
        let (want, got) = (oracle(&g, &inputs), plan.run(&inputs).unwrap());
        for (a, b) in got.outputs.iter().zip(&want.outputs) {
            assert!(max_rel(a, b) <= 1e-4, "{ret}");
        }
    }
}

/// The library steps of `p` with a post-op, as `(op, post-op)` text.
fn library_posts(p: &Program) -> Vec<(String, String)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Library(l) => Some((l.op.to_string(), l.post.as_ref()?.to_string())),
            _ => None,
        })
        .collect()
}

/// `conv → bias → ReLU → max_pool2d` with a constant bias: the simplifier puts the bias and
/// ReLU after the pooling, and they fold into the pooling step; with the bias an input (not
/// known finite, so it stays before the pooling) it folds into the convolution and the ReLU
/// into the pooling. Symbolic batch and width, 1 and 2 threads, adversarial inputs (NaN, ±inf,
/// -0 and huge values in the input and the bias), against the interpreter on the graph.
#[test]
fn bias_and_relu_after_a_pooling_run_inside_it() {
    use ladder::ir::AttrValue;
    use ladder::{Dim, GraphBuilder, OpKind, Shape};
    for constant_bias in [true, false] {
        let mut rng = Rng::new(41);
        let mut b = GraphBuilder::new("cbrp");
        let x = b
            .input(
                "x",
                DType::F32,
                [Dim::sym("n"), Dim::new(5), Dim::new(8), Dim::sym("w")].into_iter().collect::<Shape>(),
            )
            .unwrap();
        let w = b.named_constant("w", random_tensor(&mut rng, DType::F32, &[12, 5, 3, 3]).unwrap()).unwrap();
        let bias = if constant_bias {
            b.named_constant("b", random_tensor(&mut rng, DType::F32, &[12]).unwrap()).unwrap()
        } else {
            b.input("b", DType::F32, [Dim::new(12)].into_iter().collect::<Shape>()).unwrap()
        };
        let conv = b.op(OpKind::Conv2d, &[x, w, bias], &[("padding", AttrValue::Ints(vec![1; 2]))]).unwrap();
        let r = b.op(OpKind::Relu, &[conv], &[]).unwrap();
        let pooled = b
            .op(
                OpKind::MaxPool2d,
                &[r],
                &[("kernel", AttrValue::Ints(vec![2, 2])), ("stride", AttrValue::Ints(vec![2, 2]))],
            )
            .unwrap();
        b.output("y", pooled).unwrap();
        let g = b.finish().unwrap();
        for threads in [1, 2] {
            let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
            let p = plan.program().unwrap();
            let case = format!("constant bias {constant_bias}, threads={threads}\n{p}\n{}", plan.explanation());
            assert!(!p.steps.iter().any(|s| matches!(s, Step::Kernel(_))), "{case}");
            if constant_bias {
                // The bias and ReLU fold into the pooling, and the pooling into the
                // convolution (`tests/all/conv_pool.rs`).
                assert!(plan.explanation().contains("runs inside max_pool2d"), "{case}");
                assert!(plan.explanation().contains("runs inside conv"), "{case}");
                assert_eq!(p.steps.len(), 1, "{case}");
                let Step::Conv(c) = &p.steps[0] else { panic!("{case}") };
                assert!(c.pool.is_some(), "{case}");
                assert!(c.post.as_ref().is_some_and(|post| post.to_string().ends_with("[c], max(v, 0)")), "{case}");
            } else {
                // The ReLU still moves after the pooling; the bias stays with the convolution.
                assert_eq!(conv_posts(p), ["v + b1[c]"], "{case}");
                assert_eq!(library_posts(p), [("max_pool2d".to_string(), "max(v, 0)".to_string())], "{case}");
            }
            for (n, width) in [(0usize, 6usize), (1, 6), (2, 37)] {
                let xs = adversarial_rows(&mut rng, n * 5 * 8, width);
                let mut inputs = vec![Tensor::from_f32(&[n, 5, 8, width], xs.as_f32().unwrap().to_vec()).unwrap()];
                if !constant_bias {
                    let mut bias = random_tensor(&mut rng, DType::F32, &[12]).unwrap().to_f64_vec();
                    bias[..4].copy_from_slice(&[f64::NAN, f64::NEG_INFINITY, -0.0, 3e38]);
                    inputs.push(Tensor::from_f64_as(DType::F32, &[12], &bias).unwrap());
                }
                let (want, got) = (oracle(&g, &inputs), plan.run(&inputs).unwrap());
                let err = max_rel(&got.outputs[0], &want.outputs[0]);
                assert!(err <= 1e-4, "n={n} width={width}: max rel {err}\n{case}");
            }
        }
    }
}

/// A consumer that reads the convolution in another order (transposed), or adds a value that
/// varies within a channel, is not a per-channel post-op: it stays a kernel step.
#[test]
fn consumers_that_are_not_per_channel_stay_kernels() {
    for consumer in [
        "%t = transpose(%c) {axis0=2, axis1=3}\n  %y = relu(%t)",
        "%r = broadcast_in_dim(%b) {shape=[2, 8, 6, 6], broadcast_dims=[2, 3]}\n  %y = add(%c, %r)",
    ] {
        let g = parse(&format!(
            "graph cb(%x: f32[2, 4, 6, 6], %w: f32[8, 4, 3, 3], %b: f32[6, 1]) {{
  %c = conv(%x, %w) {{padding=[1, 1, 1, 1]}}
  {consumer}
  return %y
}}"
        ));
        let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let p = plan.program().unwrap();
        assert!(conv_posts(p).is_empty(), "{p}");
        assert!(p.steps.iter().any(|s| matches!(s, Step::Kernel(_))), "{p}");
        assert!(plan.explanation().contains("does not run inside conv"), "{}", plan.explanation());
        let mut rng = Rng::new(9);
        let inputs: Vec<Tensor> = [vec![2, 4, 6, 6], vec![8, 4, 3, 3], vec![6, 1]]
            .iter()
            .map(|s| random_tensor(&mut rng, DType::F32, s).unwrap())
            .collect();
        let (want, got) = (oracle(&g, &inputs), plan.run(&inputs).unwrap());
        assert!(max_rel(&got.outputs[0], &want.outputs[0]) <= 1e-4, "{consumer}");
    }
}
