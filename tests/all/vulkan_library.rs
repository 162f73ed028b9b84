//! The library steps the Vulkan backend writes as generated kernels (convolutions, `pad`,
//! `rev`, `scatter_add`, `gather`, per-channel post-ops) against the reference plan, on
//! random and special values and awkward shapes, each plan's every shader through
//! `spirv-val`. Skipped where there is no device, as in `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::VulkanDevice;
use ladder::kernel::Step;
use ladder::models::Rng;
use ladder::{compile, CompileOptions, DType, Graph, Plan, Tensor};

use crate::vulkan::{agree, clean, device, parse, validate_shaders, within_product_bound};

/// The Vulkan plan and the reference plan of `g`, with every shader of the first validated.
fn plans(g: &Graph, what: &str) -> (Plan, Plan) {
    plans_with(g, &CompileOptions::vulkan(), what)
}

/// [`plans`] with the Vulkan plan compiled with `options`.
fn plans_with(g: &Graph, options: &CompileOptions, what: &str) -> (Plan, Plan) {
    let plan = compile(g, options).unwrap_or_else(|e| panic!("{what}: {e}\n{}", ladder::text::print(g)));
    validate_shaders(plan.program().unwrap(), what);
    (plan, compile(g, &CompileOptions::reference()).unwrap())
}

/// Values for adversarial inputs: infinities, NaN, signed zeros, subnormal and huge values
/// (the last two only with [`values`]' `huge`).
const SPECIAL: [f32; 8] = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0, 0.0, 1e-40, 1e30, -1e30];

/// `shape` of uniform values in [-1, 1), a quarter of them (with `special`) from [`SPECIAL`],
/// its huge values only with `huge`.
fn some_values(rng: &mut Rng, shape: &[usize], special: bool, huge: bool) -> Tensor {
    let n = shape.iter().product();
    let pool = if huge { &SPECIAL[..] } else { &SPECIAL[..6] };
    let v = (0..n)
        .map(|_| match rng.below(8) {
            0 | 1 if special => pool[rng.below(pool.len() as u64) as usize],
            _ => rng.uniform_bits(24) as f32,
        })
        .collect();
    Tensor::from_f32(shape, v).unwrap()
}

/// [`some_values`] with huge values among the special ones.
fn values(rng: &mut Rng, shape: &[usize], special: bool) -> Tensor {
    some_values(rng, shape, special, true)
}

/// Runs both plans; floats within the conformance tolerance (NaN with NaN), or bit for bit.
fn check(plan: &Plan, reference: &Plan, inputs: &[Tensor], exact: bool, what: &str) {
    let want = reference.run(inputs).unwrap_or_else(|e| panic!("{what}: reference: {e}")).outputs;
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}")).outputs;
    clean(what);
    if exact {
        for (g, w) in got.iter().zip(&want) {
            assert!(same_values(g, w), "{what}: got {g}, want {w}");
        }
    } else {
        agree(&got, &want, what);
    }
}

/// Equal bit for bit (signed zeros included), except that any NaN equals any NaN (the
/// prims leave a NaN's sign and payload unspecified).
fn same_values(got: &Tensor, want: &Tensor) -> bool {
    match (got.as_f32(), want.as_f32()) {
        (Some(g), Some(w)) => {
            got.shape() == want.shape()
                && g.iter().zip(w).all(|(a, b)| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits())
        }
        _ => got.bit_eq(want),
    }
}

/// One convolution of [`convolutions_match_the_reference`]: the types of `x` (its symbols `n`,
/// then `h` and `w`), the weight and the bias, the attributes, and the sizes of `x`'s symbols
/// per run.
#[derive(Clone, Copy)]
struct ConvCase {
    x: &'static str,
    w: &'static str,
    bias: &'static str,
    attrs: &'static str,
    runs: &'static [&'static [usize]],
}

/// Convolutions: 1-D, 2-D and 3-D, groups and depthwise, strides, dilations, uneven and oversized
/// padding (windows of padding alone), pointwise, unpadded ones over symbolic spatial sizes,
/// size-1 and empty batches; a bias and ReLU after them folded into the step (its post-op);
/// random inputs, then infinities, NaN, ±0 and subnormal inputs and weights, and huge
/// inputs.
#[test]
fn convolutions_match_the_reference() {
    if !device("convolutions_match_the_reference") {
        return;
    }
    let d = VulkanDevice::process().unwrap();
    convolutions_on(&CompileOptions::vulkan_on(d.with_library_shaders(false)), false);
}

/// [`convolutions_match_the_reference`] through the library GEMM shader where it takes them
/// (1-D and 2-D, at least 16 output channels per group; the others through the generated
/// kernels).
#[test]
fn convolutions_match_the_reference_through_the_library_gemm() {
    if !device("convolutions_match_the_reference_through_the_library_gemm") {
        return;
    }
    let d = VulkanDevice::process().unwrap();
    convolutions_on(&CompileOptions::vulkan_on(d.with_library_shaders(true)), true);
}

/// The convolutions of [`convolutions_match_the_reference`] compiled with `options`;
/// `library`: each 1-D and 2-D one runs as the library GEMM.
fn convolutions_on(options: &CompileOptions, library: bool) {
    let cases = [
        ConvCase {
            x: "f32[n, 4, 7, 9]",
            w: "f32[32, 2, 3, 2]",
            bias: "f32[32, 1, 1]",
            attrs: "stride=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=2",
            runs: &[&[2], &[1], &[0]],
        },
        ConvCase {
            x: "f32[n, 3, 5, 5]",
            w: "f32[3, 1, 3, 3]",
            bias: "f32[3, 1, 1]",
            attrs: "stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=3",
            runs: &[&[3]],
        },
        ConvCase {
            x: "f32[n, 2, 6, 5]",
            w: "f32[4, 2, 1, 1]",
            bias: "f32[4, 1, 1]",
            attrs: "stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1",
            runs: &[&[2]],
        },
        ConvCase {
            x: "f32[n, 3, h, w]",
            w: "f32[16, 3, 2, 3]",
            bias: "f32[16, 1, 1]",
            attrs: "stride=[1, 2], padding=[0, 0, 0, 0], dilation=[2, 1], groups=1",
            runs: &[&[2, 5, 7], &[1, 3, 3], &[3, 9, 4], &[0, 4, 4]],
        },
        ConvCase {
            x: "f32[n, 2, 11]",
            w: "f32[32, 1, 3]",
            bias: "f32[32, 1]",
            attrs: "stride=[3], padding=[2, 4], dilation=[2], groups=2",
            runs: &[&[2]],
        },
        ConvCase {
            x: "f32[n, 1, 1, 1]",
            w: "f32[2, 1, 1, 1]",
            bias: "f32[2, 1, 1]",
            attrs: "stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1",
            runs: &[&[1]],
        },
        ConvCase {
            x: "f32[n, 2, 2, 3]",
            w: "f32[16, 2, 3, 3]",
            bias: "f32[16, 1, 1]",
            attrs: "stride=[2, 3], padding=[3, 0, 2, 4], dilation=[1, 1], groups=1",
            runs: &[&[2]],
        },
        ConvCase {
            x: "f32[n, 6, 4, 4]",
            w: "f32[6, 1, 2, 2]",
            bias: "f32[6, 1, 1]",
            attrs: "stride=[2, 2], padding=[0, 1, 1, 0], dilation=[2, 1], groups=6",
            runs: &[&[2]],
        },
        // Past a block of 8 output channels per group (the blocked kernel and the remainder
        // kernel), padded and not, symbolic sizes too.
        ConvCase {
            x: "f32[n, 4, 6, 5]",
            w: "f32[20, 2, 3, 3]",
            bias: "f32[20, 1, 1]",
            attrs: "stride=[1, 2], padding=[1, 1, 2, 0], dilation=[1, 1], groups=2",
            runs: &[&[2], &[1]],
        },
        ConvCase {
            x: "f32[n, 3, h, w]",
            w: "f32[16, 3, 3, 3]",
            bias: "f32[16, 1, 1]",
            attrs: "stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1",
            runs: &[&[2, 5, 7], &[1, 3, 3], &[0, 4, 4]],
        },
        // Past the library GEMM's 64 x 64 tiles and its 16-value steps of `k`.
        ConvCase {
            x: "f32[n, 20, 12, 12]",
            w: "f32[70, 20, 3, 3]",
            bias: "f32[70, 1, 1]",
            attrs: "stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1",
            runs: &[&[2]],
        },
        ConvCase {
            x: "f32[n, 2, 3, 4, 5]",
            w: "f32[4, 1, 2, 2, 3]",
            bias: "f32[4, 1, 1, 1]",
            attrs: "stride=[1, 2, 1], padding=[1, 0, 1, 0, 1, 1], dilation=[1, 1, 2], groups=2",
            runs: &[&[2]],
        },
    ];
    let mut rng = Rng::new(31);
    let mut posts = 0;
    for ConvCase { x, w, bias: b, attrs, runs } in cases {
        // The convolution with a bias and ReLU after it (its post-op), and alone.
        for tail in ["%a = add(%c, %b)\n  %r = relu(%a)\n  return %r", "return %c"] {
            let g =
                parse(&format!("graph g(%x: {x}, %w: {w}, %b: {b}) {{\n  %c = conv(%x, %w) {{{attrs}}}\n  {tail}\n}}"));
            let (plan, reference) = plans_with(&g, options, x);
            // Through the shader: 1-D and 2-D, at least 16 output channels per group.
            let first = |t: &str| -> u64 { t[4..].split(',').next().unwrap().trim_end_matches(']').parse().unwrap() };
            let groups: u64 = attrs.rsplit("groups=").next().unwrap().parse().unwrap();
            let wide = first(w) / groups >= 16 && x.matches(',').count() < 4;
            let shown = plan.explanation().contains("library GEMM");
            assert_eq!(shown, library && wide, "{x} * {w}: {}", plan.explanation());
            let program = plan.program().unwrap();
            posts += program.steps.iter().filter(|s| matches!(s, Step::Conv(c) if c.post.is_some())).count();
            let shape = |t: &str, sizes: &[usize]| -> Vec<usize> {
                let inner = &t[t.find('[').unwrap() + 1..t.len() - 1];
                let mut symbols = sizes.iter();
                inner.split(", ").map(|d| d.parse().unwrap_or_else(|_| *symbols.next().unwrap())).collect()
            };
            for sizes in runs {
                for (special_x, special_w) in [(false, false), (true, false), (false, true), (true, true)] {
                    // Huge inputs, not huge weights: a product of two huge values overflows
                    // to ±inf on the device, where the reference adds the exact product.
                    let inputs = [
                        values(&mut rng, &shape(x, sizes), special_x),
                        some_values(&mut rng, &shape(w, &[]), special_w, false),
                        values(&mut rng, &shape(b, &[]), false),
                    ];
                    let what = format!("{x} * {w} {{{attrs}}} {tail} at {sizes:?}");
                    within_product_bound(&plan, &reference, &inputs, shape(w, &[])[1..].iter().product(), &what);
                }
            }
        }
    }
    assert_eq!(posts, cases.len(), "only {posts} convolutions took their bias and ReLU as their post-op");
}

/// `pad` on every dtype the device holds: edges and interior padding, negative edges that
/// crop (down to nothing), NaN, infinite and negative-zero pad values, a pad of an empty
/// tensor, and a symbolic dim padded and cropped; `rev` along several axes with a symbolic
/// leading dim; all bit for bit.
#[test]
fn pads_and_reversals_match_the_reference_exactly() {
    if !device("pads_and_reversals_match_the_reference_exactly") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[3, 4], %i: i32[2, 3], %l: i64[5], %b: bool[2, 3], %s: f32[n, 3], %e: f32[0, 2]) {
  %p0 = pad(%x) {low=[1, -1], high=[2, 0], interior=[1, 2], value=nan}
  %p1 = pad(%x) {low=[-2, 3], high=[-1, -4], value=-inf}
  %p2 = pad(%i) {low=[0, 1], high=[1, 0], interior=[2, 0], value=-7.9}
  %p3 = pad(%l) {low=[2], high=[-3], interior=[1], value=3e30}
  %p4 = pad(%b) {low=[1, 0], high=[0, 1], value=0.5}
  %p5 = pad(%s) {low=[-1, 2], high=[3, -1], value=-0.0}
  %p6 = pad(%e) {low=[1, 1], high=[0, 1], value=2.5}
  %p7 = pad(%x) {low=[-3, 0], high=[0, 0], value=1.0}
  %r0 = rev(%x) {axes=[0, 1]}
  %r1 = rev(%s) {axes=[1]}
  %r2 = rev(%i) {axes=[0]}
  %r3 = rev(%b) {axes=[-1]}
  %r4 = rev(%l) {axes=[0]}
  return %p0, %p1, %p2, %p3, %p4, %p5, %p6, %p7, %r0, %r1, %r2, %r3, %r4
}",
    );
    let (plan, reference) = plans(&g, "pads and reversals");
    let mut rng = Rng::new(5);
    for n in [3, 1, 2] {
        let inputs = [
            values(&mut rng, &[3, 4], true),
            Tensor::from_ints(DType::I32, &[2, 3], vec![i32::MIN.into(), -1, 0, 1, 7, i32::MAX.into()]).unwrap(),
            Tensor::from_i64(&[5], vec![i64::MIN, -2, 0, 5, i64::MAX]).unwrap(),
            Tensor::from_bool(&[2, 3], vec![true, false, false, true, true, false]).unwrap(),
            values(&mut rng, &[n, 3], true),
            Tensor::from_f32(&[0, 2], vec![]).unwrap(),
        ];
        check(&plan, &reference, &inputs, true, &format!("n = {n}"));
    }
}

/// `scatter_add` with colliding indices (the f32 sums in the reference's order: `1e8 + 1 -
/// 1e8` is not `1`), negative indices, an index smaller than `x` off the axis, i32 and i64
/// values that wrap, and special values; an index outside the axis fails the run as on the
/// reference. `gather` with an index of symbolic shape: a position past `x` fails the run too.
#[test]
fn scatters_and_gathers_match_the_reference() {
    if !device("scatters_and_gathers_match_the_reference") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[3, 4], %i: i64[3, 3], %s: f32[3, 3], %y: i32[2, 5], %j: i32[2, 4], %t: i32[2, 4]) {
  %a = scatter_add(%x, %i, %s) {axis=1}
  %b = scatter_add(%y, %j, %t) {axis=0}
  return %a, %b
}",
    );
    let (plan, reference) = plans(&g, "scatter_add");
    let x =
        Tensor::from_f32(&[3, 4], vec![0.0, -0.0, 1.0, 2.0, f32::NAN, 5.0, -0.0, 1e8, 3.0, 4.0, f32::INFINITY, -1.0])
            .unwrap();
    let i = Tensor::from_i64(&[3, 3], vec![1, 1, 1, -1, 0, -4, 3, 3, 2]).unwrap();
    let s = Tensor::from_f32(&[3, 3], vec![1e8, 1.0, -1e8, 1.0, -0.0, 2.0, -0.0, 1e-40, f32::NEG_INFINITY]).unwrap();
    let y = Tensor::from_ints(DType::I32, &[2, 5], vec![i32::MAX.into(), 0, -3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
    let j = Tensor::from_ints(DType::I32, &[2, 4], vec![0, 0, 1, -1, 1, 0, -2, 1]).unwrap();
    let t = Tensor::from_ints(DType::I32, &[2, 4], vec![1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let inputs = [x, i, s, y, j, t];
    check(&plan, &reference, &inputs, true, "scatter_add");
    let mut rng = Rng::new(8);
    for _ in 0..4 {
        let mut random = inputs.clone();
        random[0] = values(&mut rng, &[3, 4], true);
        random[2] = values(&mut rng, &[3, 3], true);
        random[1] = Tensor::from_i64(&[3, 3], (0..9).map(|_| rng.below(8) as i64 - 4).collect()).unwrap();
        check(&plan, &reference, &random, true, "scatter_add, random");
    }
    for bad in [4, -5] {
        let mut inputs = inputs.clone();
        inputs[1] = Tensor::from_i64(&[3, 3], vec![0, 0, 0, 0, bad, 0, 0, 0, 0]).unwrap();
        assert!(reference.run(&inputs).is_err());
        let err = plan.run(&inputs).unwrap_err().to_string();
        clean("scatter_add out of range");
        assert!(err.contains("outside its buffer"), "{err}");
    }
    let g = parse(
        "graph g(%x: f32[4, 3], %i: i64[2, m]) {
  %y = gather(%x, %i) {axis=0}
  return %y
}",
    );
    let (plan, reference) = plans(&g, "gather");
    let x = values(&mut rng, &[4, 3], true);
    let ok = Tensor::from_i64(&[2, 3], vec![3, 0, -1, -4, 2, 1]).unwrap();
    check(&plan, &reference, &[x.clone(), ok], true, "gather");
    let wide = Tensor::from_i64(&[2, 4], vec![0; 8]).unwrap();
    assert!(reference.run(&[x.clone(), wide.clone()]).is_err());
    let err = plan.run(&[x, wide]).unwrap_err().to_string();
    clean("gather past x");
    assert!(err.contains("outside its buffer"), "{err}");
}

/// A bias and ReLU after a library step other than a convolution (a pad, a cat) folded into
/// it as its post-op, which the device runs as a kernel of its own over the result, in place.
#[test]
fn post_ops_of_other_library_steps_match_the_reference() {
    if !device("post_ops_of_other_library_steps_match_the_reference") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[2, 3, 4, 4], %y: f32[2, 2, 4, 4], %b: f32[3, 1, 1], %c: f32[5, 1, 1]) {
  %p = pad(%x) {low=[0, 0, 1, 0], high=[0, 0, -1, 2], value=-2.0}
  %q = add(%p, %b)
  %r = relu(%q)
  %k = cat(%x, %y) {axis=1}
  %s = add(%k, %c)
  %t = relu(%s)
  return %r, %t
}",
    );
    let (plan, reference) = plans(&g, "posts");
    let posts =
        plan.program().unwrap().steps.iter().filter(|s| matches!(s, Step::Library(l) if l.post.is_some())).count();
    assert!(posts >= 1, "no library step took a post-op:\n{}", plan.program().unwrap());
    let mut rng = Rng::new(12);
    for special in [false, true] {
        let inputs = [
            values(&mut rng, &[2, 3, 4, 4], special),
            values(&mut rng, &[2, 2, 4, 4], special),
            values(&mut rng, &[3, 1, 1], special),
            values(&mut rng, &[5, 1, 1], special),
        ];
        check(&plan, &reference, &inputs, true, "posts");
    }
}
