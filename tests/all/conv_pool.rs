//! A `max_pool2d` of a convolution's result folded into the convolution
//! (`kernel::ConvPool`): the blocked kernel pooling each band of finished rows against the
//! convolution then the pooling, bit for bit; and in plans, which poolings fold (with the
//! reason where one does not), against the interpreter on the graph, on adversarial data,
//! symbolic sizes and 1 and 2 threads, with the kernel's fallbacks (overlapping or padded
//! windows, weights known only at run time) included.

use ladder::backend::cpu::conv::ConvGeom;
use ladder::backend::cpu::conv_blocked::PackedWeights;
use ladder::backend::cpu::gemm::Epilogue;
use ladder::backend::cpu::pool::{max_pool2d, RowPool};
use ladder::ir::{AttrValue, Attrs};
use ladder::kernel::Step;
use ladder::models::{random_tensor, Rng};
use ladder::{compile, CompileOptions, DType, Dim, GraphBuilder, OpKind, Shape, Tensor};

/// f32 values in [-1, 1], every seventh one NaN, ±inf, ±0, huge or tiny.
fn adversarial(rng: &mut Rng, n: usize) -> Vec<f32> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3e38, -3e38, 1e-40];
    let base = random_tensor(rng, DType::F32, &[n]).unwrap();
    let mut v = base.as_f32().unwrap().to_vec();
    for (i, x) in v.iter_mut().enumerate().filter(|(i, _)| i % 7 == 3) {
        *x = specials[(i / 7) % specials.len()];
    }
    v
}

fn pool_attrs(kernel: [i64; 2], stride: [i64; 2], padding: [i64; 2], ceil_mode: bool) -> Attrs {
    let given = vec![
        ("kernel".to_string(), AttrValue::Ints(kernel.to_vec())),
        ("stride".to_string(), AttrValue::Ints(stride.to_vec())),
        ("padding".to_string(), AttrValue::Ints(padding.to_vec())),
        ("ceil_mode".to_string(), AttrValue::Bool(ceil_mode)),
    ];
    Attrs::resolve(OpKind::MaxPool2d.spec().attrs, given).unwrap()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The fused kernel (`PackedWeights::conv_pooled`) gives the bits of the blocked convolution
/// followed by `max_pool2d`, and with a bias the bits of adding it after the pooling, for
/// every band-shaped pooling (windows as tall as their stride, any width and column stride),
/// stride-1 and stride-2 convolutions, channel counts that leave a partial block, 1 and 2
/// threads and batches of 1 and 3, on adversarial inputs (`2×2` and `2×1` windows after a
/// stride-1 `3×3` convolution pool in registers, `conv_blocked/pooled.rs`: on AVX-512, and
/// under `LADDER_MAX_ISA=avx2` for up to 4 input channels).
#[test]
fn a_fused_pooling_gives_the_bits_of_the_convolution_then_the_pooling() {
    // (in channels, out channels, height, width, kernel, stride, padding)
    // Rows of 100 columns take blocks of 48, 48 and 4 in the kernel that pools in registers
    // (AVX-512); a padding of 18 reaches past a whole vector, where every load is masked.
    // One input channel on 37 columns: AVX2 blocks of 16, 16 and 5, an odd last column.
    let convs = [
        (3, 8, 9, 13, 3, 1, 1),
        (5, 12, 8, 40, 3, 1, 1),
        (4, 20, 11, 17, 3, 2, 1),
        (16, 32, 6, 64, 3, 1, 1),
        (2, 8, 5, 100, 3, 1, 1),
        (3, 8, 6, 14, 3, 1, 18),
        (1, 16, 8, 37, 3, 1, 1),
    ];
    let pools = [([2, 2], [2, 2]), ([2, 1], [2, 1]), ([3, 3], [3, 3]), ([2, 3], [2, 1]), ([1, 2], [1, 2])];
    let mut rng = Rng::new(17);
    let mut checked = 0;
    for (cin, cout, h, w, k, s, p) in convs {
        let weights = random_tensor(&mut rng, DType::F32, &[cout, cin, k, k]).unwrap();
        let packed = PackedWeights::new(&[cout, cin, k, k], 1, weights.as_f32().unwrap()).unwrap();
        let bias: Vec<f32> = (0..cout).map(|c| [0.5, -0.0, f32::NAN, 3e38, -1.25][c % 5]).collect();
        for batch in [1usize, 3] {
            let x = adversarial(&mut rng, batch * cin * h * w);
            let (si, pi) = (s as i64, p as i64);
            let g = ConvGeom::new(&[batch, cin, h, w], &[cout, cin, k, k], &[si, si], &[pi; 4], &[1, 1], 1).unwrap();
            let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
            let mut whole = vec![0.0; g.out_len()];
            assert!(packed.conv(&g, &x, &mut whole, 1, &Epilogue::none()).unwrap());
            for (kernel, stride) in pools {
                let attrs = pool_attrs(kernel, stride, [0, 0], false);
                let rows = RowPool::new(&attrs, oh, ow).unwrap().expect("band-shaped windows");
                let mut want = vec![0.0; batch * cout * rows.out_rows() * rows.out_cols()];
                max_pool2d(&attrs, &whole, &[batch, cout, oh, ow], &mut want, 1).unwrap();
                let biased: Vec<f32> = want
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + bias[(i / (rows.out_rows() * rows.out_cols())) % cout])
                    .collect();
                for threads in [1, 2] {
                    let case = format!("conv {cin}->{cout} {h}x{w} k{k} s{s}, pool {kernel:?}/{stride:?}, n={batch}, threads={threads}");
                    let mut got = vec![f32::NAN; want.len()];
                    assert!(packed.conv_pooled(&g, Some(&rows), &x, &mut got, threads, &Epilogue::none()).unwrap());
                    assert!(same_bits(&got, &want), "{case}");
                    let epi = Epilogue { bias: Some(&bias), ..Epilogue::none() };
                    assert!(packed.conv_pooled(&g, Some(&rows), &x, &mut got, threads, &epi).unwrap());
                    assert!(same_bits(&got, &biased), "{case}, with a bias");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, convs.len() * 2 * 5 * 2);
}

/// Windows that overlap down the rows, reach into padding rows, or round up (`ceil_mode`)
/// are not bands: `RowPool::new` says so and the plan pools the whole result instead. A
/// pooling that does not fit the convolution's result is a typed error, not a panic.
#[test]
fn windows_that_are_not_bands_are_refused() {
    for (kernel, stride, padding, ceil) in
        [([3, 3], [2, 2], [0, 0], false), ([2, 2], [2, 2], [1, 1], false), ([2, 2], [2, 2], [0, 0], true)]
    {
        let attrs = pool_attrs(kernel, stride, padding, ceil);
        assert!(RowPool::new(&attrs, 9, 9).unwrap().is_none(), "{kernel:?} {stride:?} {padding:?} {ceil}");
    }
    let mut rng = Rng::new(5);
    let weights = random_tensor(&mut rng, DType::F32, &[8, 2, 3, 3]).unwrap();
    let packed = PackedWeights::new(&[8, 2, 3, 3], 1, weights.as_f32().unwrap()).unwrap();
    let g = ConvGeom::new(&[1, 2, 6, 6], &[8, 2, 3, 3], &[1, 1], &[1; 4], &[1, 1], 1).unwrap();
    let x = vec![1.0; 72];
    // Planned for 8 columns, run on a result of 6; and an output of the wrong length.
    let rows = RowPool::new(&pool_attrs([2, 2], [2, 2], [0, 0], false), 6, 8).unwrap().unwrap();
    assert!(packed.conv_pooled(&g, Some(&rows), &x, &mut vec![0.0; 8 * 12], 1, &Epilogue::none()).is_err());
    let rows = RowPool::new(&pool_attrs([2, 2], [2, 2], [0, 0], false), 6, 6).unwrap().unwrap();
    assert!(packed.conv_pooled(&g, Some(&rows), &x, &mut vec![0.0; 8 * 9 + 1], 1, &Epilogue::none()).is_err());
}

/// `conv → max_pool2d → bias → ReLU` (the bias and ReLU a constant bias lets the simplifier
/// move past the pooling) is one step: the convolution with the pooling and the post-op,
/// writing the final buffer, with no arena bytes for the convolution's result. Against the
/// interpreter on the graph for pooling windows the kernel fuses and ones it pools whole
/// (windows that overlap down the rows, ceil mode), constant weights and weights given at
/// run time, a blocked, a pointwise and a depthwise convolution, a symbolic batch (0, 1, 3)
/// and width, and 1 and 2 threads; the reference plan, which folds the same way, too.
#[test]
fn a_pooling_of_a_convolution_runs_inside_it() {
    // (in channels, out channels, kernel, groups)
    let convs = [(5, 12, 3, 1), (6, 16, 1, 1), (6, 6, 3, 6)];
    let pools = [
        ([2, 2], [2, 2], [0, 0], false),
        ([2, 1], [2, 1], [0, 0], false),
        ([3, 3], [2, 2], [0, 0], false),
        ([2, 2], [2, 2], [0, 0], true),
    ];
    let mut rng = Rng::new(23);
    for (cin, cout, k, groups) in convs {
        for (kernel, stride, padding, ceil) in pools {
            for constant_weights in [true, false] {
                let mut b = GraphBuilder::new("cp");
                let dims = [Dim::sym("n"), Dim::new(cin as u64), Dim::new(9), Dim::sym("w")];
                let x = b.input("x", DType::F32, dims.into_iter().collect::<Shape>()).unwrap();
                let w_shape = [cout, cin / groups, k, k];
                let w = if constant_weights {
                    b.named_constant("w", random_tensor(&mut rng, DType::F32, &w_shape).unwrap()).unwrap()
                } else {
                    let shape: Shape = w_shape.iter().map(|&d| Dim::new(d as u64)).collect();
                    b.input("w", DType::F32, shape).unwrap()
                };
                let bias = b.named_constant("b", random_tensor(&mut rng, DType::F32, &[cout]).unwrap()).unwrap();
                let pad = (k / 2) as i64;
                let conv = b
                    .op(
                        OpKind::Conv2d,
                        &[x, w, bias],
                        &[("padding", AttrValue::Ints(vec![pad; 2])), ("groups", AttrValue::Int(groups as i64))],
                    )
                    .unwrap();
                let r = b.op(OpKind::Relu, &[conv], &[]).unwrap();
                let attrs = [
                    ("kernel", AttrValue::Ints(kernel.to_vec())),
                    ("stride", AttrValue::Ints(stride.to_vec())),
                    ("padding", AttrValue::Ints(padding.to_vec())),
                    ("ceil_mode", AttrValue::Bool(ceil)),
                ];
                let pooled = b.op(OpKind::MaxPool2d, &[r], &attrs).unwrap();
                b.output("y", pooled).unwrap();
                let g = b.finish().unwrap();
                let reference = compile(&g, &CompileOptions::reference()).unwrap();
                for threads in [1, 2] {
                    let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
                    let p = plan.program().unwrap();
                    let case = format!(
                        "conv {cin}->{cout} k{k} g{groups}, pool {kernel:?}/{stride:?}/{padding:?} ceil={ceil}, \
                         constant weights {constant_weights}, threads={threads}\n{p}\n{}",
                        plan.explanation()
                    );
                    assert_eq!(p.steps.len(), 1, "{case}");
                    let Step::Conv(c) = &p.steps[0] else { panic!("{case}") };
                    assert!(c.pool.is_some(), "{case}");
                    assert!(c.post.as_ref().is_some_and(|post| post.to_string().ends_with("[c], max(v, 0)")), "{case}");
                    assert!(plan.explanation().contains("runs inside conv"), "{case}");
                    assert!(p.to_string().contains(", then max_pool2d {kernel="), "{case}");
                    for (n, width) in [(0usize, 7usize), (1, 7), (3, 20)] {
                        let xs = adversarial(&mut rng, n * cin * 9 * width);
                        let mut inputs = vec![Tensor::from_f32(&[n, cin, 9, width], xs).unwrap()];
                        if !constant_weights {
                            inputs.push(random_tensor(&mut rng, DType::F32, &w_shape).unwrap());
                        }
                        let want = ladder::interp::run(&g, &inputs, &ladder::interp::Options::default()).unwrap();
                        for (which, got) in
                            [("native", plan.run(&inputs).unwrap()), ("reference", reference.run(&inputs).unwrap())]
                        {
                            let (a, e) = (got.outputs[0].to_f64_vec(), want.outputs[0].to_f64_vec());
                            assert_eq!(got.outputs[0].shape(), want.outputs[0].shape(), "{which} n={n}: {case}");
                            let scale = e.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum::<f64>()
                                / e.len().max(1) as f64;
                            for (i, (a, e)) in a.iter().zip(&e).enumerate() {
                                let ok = if e.is_finite() {
                                    (a - e).abs() <= 1e-4 * (e.abs() + scale)
                                } else {
                                    a == e || (a.is_nan() && e.is_nan())
                                };
                                assert!(ok, "{which} n={n} width={width} element {i}: {a} vs {e}\n{case}");
                            }
                        }
                        if n == 3 {
                            // Only the pooled result is stored, and it is the output.
                            assert_eq!(plan.memory_report(&inputs).unwrap().arena_bytes, 0, "{case}");
                        }
                    }
                }
            }
        }
    }
}

/// A convolution whose result is read again, or that keeps a post-op of its own (a bias
/// given at run time stays before the pooling), keeps its pooling a step of its own, and
/// `--explain` says why.
#[test]
fn a_pooling_stays_separate_where_the_convolution_result_is_needed() {
    let cases = [
        (
            "graph c(%x: f32[1, 3, 8, 8], %w: f32[8, 3, 3, 3]) {
  %c = conv(%x, %w) {padding=[1, 1, 1, 1]}
  %p = max_pool2d(%c) {kernel=[2, 2], stride=[2, 2]}
  return %p, %c
}",
            "is not a temporary only these steps use",
        ),
        (
            "graph c(%x: f32[1, 3, 8, 8], %w: f32[8, 3, 3, 3], %b: f32[8]) {
  %c = conv2d(%x, %w, %b) {padding=[1, 1]}
  %p = max_pool2d(%c) {kernel=[2, 2], stride=[2, 2]}
  return %p
}",
            "has a post-op of its own",
        ),
    ];
    let mut rng = Rng::new(2);
    for (text, why) in cases {
        let g = ladder::text::parse(text).unwrap();
        let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
        let p = plan.program().unwrap();
        assert!(p.steps.iter().any(|s| matches!(s, Step::Library(l) if l.op == OpKind::MaxPool2d)), "{p}");
        assert!(plan.explanation().contains(why), "{}", plan.explanation());
        let inputs: Vec<Tensor> = g
            .inputs()
            .iter()
            .map(|&v| {
                let shape: Vec<usize> = g.ty(v).shape.as_static().unwrap().iter().map(|&d| d as usize).collect();
                random_tensor(&mut rng, DType::F32, &shape).unwrap()
            })
            .collect();
        let want = ladder::interp::run(&g, &inputs, &ladder::interp::Options::default()).unwrap();
        let got = plan.run(&inputs).unwrap();
        for (a, b) in got.outputs.iter().zip(&want.outputs) {
            let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
            assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs())), "{text}");
        }
    }
}

/// Equal bits, or both NaN (which NaN a sum ends in depends on which operand an
/// instruction propagates).
fn same_values(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// The channel-vector kernel on AVX2 (`conv_blocked/lanes256.rs`, 8 channels a vector; run
/// under `LADDER_MAX_ISA=avx2`, as CI does) gives the blocked kernel's values bit for bit:
/// column strides 1 and 2 (a row stride of 1 with a column stride of 2 too), rows of 1 to
/// 112 columns (whole and partial chunks of 6 and 12 columns, border columns, rows reaching
/// into padding of 0 to 2), 8, 16, 24, 32 and 48 output channels (one vector, two, two and
/// one), 1 and 2 threads, batches of 1 and 2, with no epilogue and with a bias, a ReLU and a
/// residual, on adversarial inputs. On AVX-512 the 16-channel kernel takes its cases (and
/// must agree the same way); at stride 1 a row of 57 or 32 columns, 8 or 24 channels, at any
/// stride 12 channels or a 5×5 kernel stay with the blocked kernel.
#[test]
fn channel_vectors_on_avx2_give_the_blocked_kernels_values() {
    use ladder::backend::cpu::activation::Activation;
    use ladder::backend::cpu::conv_blocked::{channel_vectors, conv_blocked, pack, packed_len};
    use ladder::backend::cpu::isa::{active, Isa};
    // (in channels, out channels, height, width, (row stride, column stride), padding,
    // kernel 3×3, whether the AVX2 kernel takes it)
    let convs = [
        (3, 8, 9, 224, (2, 2), 1, 3, true),
        (8, 16, 6, 57, (2, 2), 1, 3, true),
        (5, 24, 7, 30, (2, 2), 0, 3, true),
        (16, 32, 5, 27, (2, 2), 1, 3, true),
        (4, 8, 5, 5, (2, 2), 2, 3, true),
        (3, 16, 4, 1, (2, 2), 1, 3, true),
        (6, 24, 5, 41, (1, 2), 1, 3, true),
        (8, 16, 5, 56, (1, 1), 1, 3, true),
        (7, 32, 4, 28, (1, 1), 1, 3, true),
        (2, 16, 3, 2, (1, 1), 2, 3, true),
        (4, 32, 6, 25, (1, 1), 0, 3, true),
        (6, 48, 5, 13, (1, 1), 1, 3, true),
        (3, 16, 3, 57, (1, 1), 1, 3, false),
        (4, 16, 4, 32, (1, 1), 1, 3, false),
        (8, 8, 5, 20, (1, 1), 1, 3, false),
        (6, 24, 6, 13, (1, 1), 1, 3, false),
        (3, 12, 5, 20, (2, 2), 1, 3, false),
        (3, 16, 7, 9, (1, 1), 2, 5, false),
    ];
    let mut rng = Rng::new(31);
    let mut took = 0;
    for (cin, cout, h, w, (sh, sw), p, k, avx2_takes) in convs {
        let w_shape = [cout, cin, k, k];
        let weights = random_tensor(&mut rng, DType::F32, &w_shape).unwrap();
        let weights = weights.as_f32().unwrap();
        let packed = PackedWeights::new(&w_shape, 1, weights).unwrap();
        let bias: Vec<f32> = (0..cout).map(|c| [0.5, -0.0, f32::NAN, 3e38, -1.25][c % 5]).collect();
        for batch in [1usize, 2] {
            let x = adversarial(&mut rng, batch * cin * h * w);
            let (si, pi) = ([sh as i64, sw as i64], p as i64);
            let g = ConvGeom::new(&[batch, cin, h, w], &w_shape, &si, &[pi; 4], &[1, 1], 1).unwrap();
            let ow = g.out_sp[1];
            let want_vectors = match active() {
                Isa::Avx512 => k == 3 && cout % 16 == 0 && ow <= 32,
                Isa::Avx2 => avx2_takes,
                _ => false,
            };
            let case = format!("conv {cin}->{cout} {h}x{w} s{sh},{sw} p{p} k{k}, n={batch}");
            assert_eq!(channel_vectors(&g), want_vectors, "{case}");
            took += usize::from(channel_vectors(&g));
            let res = adversarial(&mut rng, g.out_len());
            let mut wp = vec![0.0; packed_len(&g)];
            pack(&g, weights, &mut wp);
            let epis = [
                Epilogue::none(),
                Epilogue { bias: Some(&bias), activation: Activation::Relu, residual: Some(&res), ..Epilogue::none() },
            ];
            for threads in [1, 2] {
                for (e, epi) in epis.iter().enumerate() {
                    let case = format!("{case}, threads={threads}, epilogue {e}");
                    let mut want = vec![f32::NAN; g.out_len()];
                    conv_blocked(&g, &x, &wp, &mut want, threads, epi);
                    let mut got = vec![f32::NAN; g.out_len()];
                    assert!(packed.conv(&g, &x, &mut got, threads, epi).unwrap(), "{case}");
                    assert!(same_values(&got, &want), "{case}");
                }
            }
        }
    }
    assert_eq!(took > 0, active() >= Isa::Avx2);
}

/// Rows of at most 32 columns run by the channel-vector kernel (AVX-512; output channels a
/// multiple of 16, a 3×3 kernel; on AVX2 the 8-channel one) give the blocked kernel's
/// values bit for bit (the same sums
/// in the same order, the padding's taps multiplying a 0): rows of 1 to 32 columns, strides 1
/// and 2, padding 0 to 2, one or more vectors of channels (an odd count leaves a single
/// one), rows reaching into the padding, 1 and 2 threads, batches of 1 and 2, with and
/// without a bias, on adversarial inputs. Wider rows, other kernels and pooled results stay
/// with the blocked kernel.
#[test]
fn narrow_rows_by_channel_vectors_give_the_blocked_kernels_values() {
    use ladder::backend::cpu::conv_blocked::{channel_vectors, conv_blocked, pack, packed_len};
    use ladder::backend::cpu::isa::{active, Isa};
    // (in channels, out channels, height, width, stride, padding)
    let convs = [
        (16, 32, 40, 56, 2, 1),
        (3, 16, 9, 13, 1, 1),
        (5, 48, 7, 20, 2, 1),
        (8, 16, 5, 32, 1, 1),
        (4, 32, 6, 1, 1, 1),
        (4, 16, 3, 3, 1, 0),
        (6, 32, 8, 17, 2, 0),
        (6, 16, 8, 9, 1, 2),
        (2, 16, 1, 7, 1, 1),
        (7, 64, 4, 30, 1, 1),
    ];
    let mut rng = Rng::new(29);
    let mut took = 0;
    for (cin, cout, h, w, s, p) in convs {
        let weights = random_tensor(&mut rng, DType::F32, &[cout, cin, 3, 3]).unwrap();
        let weights = weights.as_f32().unwrap();
        let packed = PackedWeights::new(&[cout, cin, 3, 3], 1, weights).unwrap();
        let bias: Vec<f32> = (0..cout).map(|c| [0.5, -0.0, f32::NAN, 3e38, -1.25][c % 5]).collect();
        for batch in [1usize, 2] {
            let x = adversarial(&mut rng, batch * cin * h * w);
            let (si, pi) = (s as i64, p as i64);
            let g = ConvGeom::new(&[batch, cin, h, w], &[cout, cin, 3, 3], &[si, si], &[pi; 4], &[1, 1], 1).unwrap();
            let ow = g.out_sp[1];
            assert!(ow <= 32, "conv {cin}->{cout} {h}x{w}");
            if active() != Isa::Avx2 {
                assert_eq!(channel_vectors(&g), active() >= Isa::Avx512, "conv {cin}->{cout} {h}x{w}");
            }
            took += usize::from(channel_vectors(&g));
            let mut wp = vec![0.0; packed_len(&g)];
            pack(&g, weights, &mut wp);
            for threads in [1, 2] {
                for epi in [Epilogue::none(), Epilogue { bias: Some(&bias), ..Epilogue::none() }] {
                    let case = format!(
                        "conv {cin}->{cout} {h}x{w} s{s} p{p}, n={batch}, threads={threads}, bias={}",
                        epi.bias.is_some()
                    );
                    let mut want = vec![f32::NAN; g.out_len()];
                    conv_blocked(&g, &x, &wp, &mut want, threads, &epi);
                    let mut got = vec![f32::NAN; g.out_len()];
                    assert!(packed.conv(&g, &x, &mut got, threads, &epi).unwrap(), "{case}");
                    assert!(same_values(&got, &want), "{case}");
                }
            }
        }
    }
    assert_eq!(took > 0, active() >= Isa::Avx2);
    // Rows of 33 columns, a 5×5 kernel, 24 output channels: the blocked kernel on AVX-512
    // (the AVX2 kernel's cases are in the test above).
    for (w_shape, x_shape, pad) in
        [([16, 4, 3, 3], [1, 4, 5, 33], 1), ([16, 4, 5, 5], [1, 4, 8, 8], 2), ([24, 4, 3, 3], [1, 4, 8, 8], 1)]
    {
        let g = ConvGeom::new(&x_shape, &w_shape, &[1, 1], &[pad; 4], &[1, 1], 1).unwrap();
        assert!(!channel_vectors(&g) || active() == Isa::Avx2, "{w_shape:?} on {x_shape:?}");
    }
}
