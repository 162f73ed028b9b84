//! Decompositions of the linalg family (bmm, linear, addmm, conv2d, max_pool2d, avg_pool2d,
//! adaptive_avg_pool2d) against the ops themselves.
//!
//! - bmm, linear, conv2d and max_pool2d must agree with the op **bit for bit** in f32 mode
//!   (same accumulation in the opaque matmul/conv, one rounding for the bias; max is exact),
//!   checked on special values too; they are also compared with the f64 reference within the
//!   accumulation error (K u relative of the sum of |products|).
//! - addmm: the op rounds `beta*bias + alpha*p` once, the decomposition up to three times:
//!   `|err| <= 4 u (|beta bias| + |alpha p|)`, stated per test as atol + rtol.
//! - avg_pool2d / adaptive_avg_pool2d: separable f32 sums of a window of kh*kw elements
//!   against the op's f64 sum: `atol = (kh + kw + 4) u max|x|`, `rtol = 4 u`.
//! - Geometry sweeps: every valid pool geometry with kernel 1..3, stride 1..3, padding
//!   0..=k/2, dilation 1..2, both ceil modes, both count_include_pad, H, W in 0..=5.
//!
//! Run with `--nocapture` to see each case's measured error.

use crate::decomp_util::*;

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// Matmul-like accumulation over `k` terms of magnitude <= `m` each, against the f64 result.
fn tol_acc(k: usize, m: f64) -> Tol {
    Tol { atol: (k as f64 + 2.0) * U * m, rtol: 2.0 * U }
}

// ---------------------------------------------------------------------------------------------
// bmm, linear, addmm

#[test]
fn bmm_exact_and_accurate() {
    let mut rng = Rng::new(21);
    let a = f32t(&[3, 2, 5], &rng.vec(30, 2.0));
    let b = f32t(&[3, 5, 4], &rng.vec(60, 2.0));
    let src = graph("%a: f32[3, 2, 5], %b: f32[3, 5, 4]", "bmm(%a, %b)");
    bit_exact("bmm", &src, &[a.clone(), b.clone()]);
    case("bmm", &src, &[a, b], tol_acc(5, 4.0));
    // Special values and empty dims; mixed dtypes promote (f32 @ f64 in f64); ints wrap.
    let a = f32t(&[1, 2, 2], &[INF, 1.0, NAN, 0.0]);
    let b = f32t(&[1, 2, 2], &[0.0, 1.0, 2.0, -0.0]);
    bit_exact("bmm special", &graph("%a: f32[1, 2, 2], %b: f32[1, 2, 2]", "bmm(%a, %b)"), &[a, b]);
    let src = graph("%a: f32[2, 0, 3], %b: f32[2, 3, 4]", "bmm(%a, %b)");
    bit_exact("bmm empty", &src, &[f32t(&[2, 0, 3], &[]), f32t(&[2, 3, 4], &rng.vec(24, 1.0))]);
    let src = graph("%a: f32[1, 2, 0], %b: f32[1, 0, 2]", "bmm(%a, %b)");
    bit_exact("bmm k=0", &src, &[f32t(&[1, 2, 0], &[]), f32t(&[1, 0, 2], &[])]);
    let src = graph("%a: f32[1, 2, 2], %b: f64[1, 2, 1]", "bmm(%a, %b)");
    bit_exact("bmm f32 f64", &src, &[f32t(&[1, 2, 2], &[0.1, 0.2, 0.3, 0.4]), f64t(&[1, 2, 1], &[0.1, 1e-20])]);
    let src = graph("%a: i64[1, 1, 2], %b: i64[1, 2, 1]", "bmm(%a, %b)");
    bit_exact("bmm i64 wrap", &src, &[i64t(&[1, 1, 2], &[i64::MAX, 3]), i64t(&[1, 2, 1], &[2, 5])]);
    let src = graph("%a: f32[n, m, k], %b: f32[n, k, p]", "bmm(%a, %b)");
    let (_, p, _) = lower(&src);
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, m, p]");
    bit_exact("bmm symbolic", &src, &[f32t(&[2, 1, 3], &rng.vec(6, 1.0)), f32t(&[2, 3, 2], &rng.vec(12, 1.0))]);
}

#[test]
fn linear_ranks_bias_and_dtypes() {
    let mut rng = Rng::new(22);
    let w = f32t(&[3, 4], &rng.vec(12, 1.0));
    let bias = f32t(&[3], &[0.5, INF, -1e30]);
    for shape in [vec![4usize], vec![2, 4], vec![2, 3, 4], vec![0, 4]] {
        let n: usize = shape.iter().product();
        let mut xv = rng.vec(n, 3.0);
        if n > 2 {
            xv[1] = NAN;
        }
        let x = f32t(&shape, &xv);
        let dims = shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let sig = format!("%x: f32[{dims}], %w: f32[3, 4], %b: f32[3]");
        let src = graph(&sig, "linear(%x, %w, %b)");
        bit_exact(&format!("linear {shape:?}"), &src, &[x.clone(), w.clone(), bias.clone()]);
        case(&format!("linear {shape:?}"), &src, &[x.clone(), w.clone(), bias.clone()], tol_acc(4, 3.0));
        let sig = format!("%x: f32[{dims}], %w: f32[3, 4]");
        bit_exact(&format!("linear no bias {shape:?}"), &graph(&sig, "linear(%x, %w)"), &[x, w.clone()]);
    }
    // Symbolic leading dims; an f64 bias promotes the product to f64; integers wrap.
    let src = graph("%x: f32[b, s, 4], %w: f32[3, 4], %b: f32[3]", "linear(%x, %w, %b)");
    let (_, p, _) = lower(&src);
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[b, s, 3]");
    bit_exact("linear symbolic", &src, &[f32t(&[2, 1, 4], &rng.vec(8, 1.0)), w.clone(), f32t(&[3], &[1.0, 2.0, 3.0])]);
    let src = graph("%x: f32[2, 4], %w: f32[3, 4], %b: f64[3]", "linear(%x, %w, %b)");
    bit_exact("linear f64 bias", &src, &[f32t(&[2, 4], &rng.vec(8, 1.0)), w, f64t(&[3], &[0.1, 0.2, 0.3])]);
    let src = graph("%x: i64[2], %w: i64[1, 2], %b: i64[1]", "linear(%x, %w, %b)");
    bit_exact("linear i64", &src, &[i64t(&[2], &[i64::MAX, 2]), i64t(&[1, 2], &[2, 3]), i64t(&[1], &[7])]);
}

#[test]
fn addmm_factors_and_special_bias() {
    let mut rng = Rng::new(23);
    let a = f32t(&[2, 3], &rng.vec(6, 2.0));
    let b = f32t(&[3, 2], &rng.vec(6, 2.0));
    let bias = f32t(&[2, 2], &rng.vec(4, 2.0));
    let sig = "%c: f32[2, 2], %a: f32[2, 3], %b: f32[3, 2]";
    let tol = Tol { atol: 8.0 * U * 12.0, rtol: 4.0 * U };
    for (beta, alpha) in [(1.0, 1.0), (0.5, 2.0), (-1.0, 0.25), (0.0, 1.0), (1.0, 0.0), (3.0, -1.5)] {
        let src = graph(sig, &format!("addmm(%c, %a, %b) {{beta={beta}, alpha={alpha}}}"));
        case(&format!("addmm beta={beta} alpha={alpha}"), &src, &[bias.clone(), a.clone(), b.clone()], tol);
    }
    bit_exact("addmm 1 1", &graph(sig, "addmm(%c, %a, %b)"), &[bias.clone(), a.clone(), b.clone()]);
    // beta = 0 ignores a NaN/inf bias entirely; alpha = 0 still gives 0 * inf = NaN.
    let nb = f32t(&[2, 2], &[NAN, INF, -INF, 1.0]);
    let src = graph(sig, "addmm(%c, %a, %b) {beta=0.0, alpha=2.0}");
    case("addmm beta 0 nan bias", &src, &[nb.clone(), a.clone(), b.clone()], tol);
    let ai = f32t(&[2, 3], &[INF, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let src = graph(sig, "addmm(%c, %a, %b) {alpha=0.0}");
    case("addmm alpha 0 inf", &src, &[bias.clone(), ai, b.clone()], tol);
    // Broadcast biases: [2], [1, 2], [], [2, 1].
    for (shape, dims) in [(vec![2usize], "2"), (vec![1, 2], "1, 2"), (vec![], ""), (vec![2, 1], "2, 1")] {
        let n: usize = shape.iter().product();
        let c = f32t(&shape, &rng.vec(n, 1.0));
        let src = graph(&format!("%c: f32[{dims}], %a: f32[2, 3], %b: f32[3, 2]"), "addmm(%c, %a, %b) {beta=2.0}");
        case(&format!("addmm bias {shape:?}"), &src, &[c, a.clone(), b.clone()], tol);
    }
    // Integers: i64 wraps; i32 factors beyond i32's range wrap like the op's arithmetic.
    let src = graph("%c: i64[1, 1], %a: i64[1, 1], %b: i64[1, 1]", "addmm(%c, %a, %b) {beta=3.0, alpha=-2.0}");
    bit_exact("addmm i64", &src, &[i64t(&[1, 1], &[i64::MAX]), i64t(&[1, 1], &[5]), i64t(&[1, 1], &[7])]);
    let src = graph(
        "%c: i32[1, 2], %a: i32[1, 1], %b: i32[1, 2]",
        "addmm(%c, %a, %b) {beta=4294967297.0, alpha=3000000000.0}",
    );
    bit_exact("addmm i32 wrap", &src, &[i32t(&[1, 2], &[5, -7]), i32t(&[1, 1], &[3]), i32t(&[1, 2], &[1, -2])]);
    // Symbolic and empty.
    let src = graph("%c: f32[n], %a: f32[m, k], %b: f32[k, n]", "addmm(%c, %a, %b) {beta=0.5}");
    case("addmm symbolic", &src, &[f32t(&[2], &[1.0, 2.0]), a.clone(), b.clone()], tol);
    let src = graph("%c: f32[2, 2], %a: f32[2, 0], %b: f32[0, 2]", "addmm(%c, %a, %b) {alpha=inf}");
    case("addmm k=0 alpha inf", &src, &[bias, f32t(&[2, 0], &[]), f32t(&[0, 2], &[])], tol);
}

// ---------------------------------------------------------------------------------------------
// conv2d

#[test]
fn conv2d_geometries_and_bias() {
    let mut rng = Rng::new(24);
    let cases: &[(&str, [usize; 4], [usize; 4], &str)] = &[
        ("plain", [1, 2, 5, 5], [3, 2, 3, 3], ""),
        ("padded strided", [2, 2, 6, 5], [4, 2, 3, 2], "stride=[2, 1], padding=[1, 2]"),
        ("dilated", [1, 1, 7, 7], [2, 1, 3, 3], "dilation=[2, 3], padding=[2, 0]"),
        ("groups", [1, 4, 4, 4], [6, 2, 2, 2], "groups=2, stride=[2, 2]"),
        ("depthwise", [2, 3, 3, 3], [3, 1, 1, 1], "groups=3"),
        ("empty out", [1, 1, 2, 2], [1, 1, 3, 3], ""),
        ("empty batch", [0, 2, 4, 4], [1, 2, 2, 2], "padding=[1, 1]"),
    ];
    for (name, xs, ws, attrs) in cases {
        let x = f32t(xs, &rng.vec(xs.iter().product(), 2.0));
        let w = f32t(ws, &rng.vec(ws.iter().product(), 2.0));
        let b = f32t(&[ws[0]], &rng.vec(ws[0], 1.0));
        let d = |s: &[usize; 4]| s.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
        let sig = format!("%x: f32[{}], %w: f32[{}], %b: f32[{}]", d(xs), d(ws), ws[0]);
        let src = graph(&sig, &format!("conv2d(%x, %w, %b){attrs}"));
        bit_exact(&format!("conv2d {name}"), &src, &[x.clone(), w.clone(), b.clone()]);
        let k = ws[1] * ws[2] * ws[3];
        case(&format!("conv2d {name}"), &src, &[x.clone(), w.clone(), b], tol_acc(k, 4.0));
        let sig = format!("%x: f32[{}], %w: f32[{}]", d(xs), d(ws));
        bit_exact(&format!("conv2d {name} no bias"), &graph(&sig, &format!("conv2d(%x, %w){attrs}")), &[x, w]);
    }
    // Special values: zero padding takes part (0 * inf = NaN), NaN and inf propagate.
    let x = f32t(&[1, 1, 2, 2], &[INF, 1.0, NAN, -0.0]);
    let w = f32t(&[1, 1, 2, 2], &[0.0, 1.0, 1.0, 1.0]);
    let src = graph("%x: f32[1, 1, 2, 2], %w: f32[1, 1, 2, 2], %b: f32[1]", "conv2d(%x, %w, %b) {padding=[1, 1]}");
    bit_exact("conv2d special", &src, &[x, w, f32t(&[1], &[-0.0])]);
    // Symbolic batch and (stride 1) spatial dims.
    let src = graph("%x: f32[n, 2, h, w], %w: f32[3, 2, 2, 2], %b: f32[3]", "conv2d(%x, %w, %b) {padding=[1, 0]}");
    let (_, p, _) = lower(&src);
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, 3, h + 1, w - 1]");
    let ins =
        [f32t(&[2, 2, 3, 4], &rng.vec(48, 1.0)), f32t(&[3, 2, 2, 2], &rng.vec(24, 1.0)), f32t(&[3], &[1.0, 2.0, 3.0])];
    bit_exact("conv2d symbolic", &src, &ins);
}

// ---------------------------------------------------------------------------------------------
// Pools

fn pool_src(op: &str, h: usize, w: usize, attrs: &str) -> String {
    graph(&format!("%x: f32[2, 3, {h}, {w}]"), &format!("{op}(%x) {{{attrs}}}"))
}

/// Small pool geometries (attributes, H, W); some are invalid for the op and get skipped.
fn geometries() -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for k in 1..=3u64 {
        for s in 1..=3u64 {
            for p in 0..=k / 2 {
                for dil in 1..=2u64 {
                    for ceil in [false, true] {
                        for (h, w) in [(0usize, 3usize), (1, 1), (2, 5), (3, 3), (4, 2), (5, 5)] {
                            let attrs = format!(
                                "kernel=[{k}, {kw}], stride=[{s}, {sw}], padding=[{p}, {pw}], dilation=[{dil}, 1], ceil_mode={ceil}",
                                kw = 4 - k,
                                sw = 4 - s,
                                pw = p.min((4 - k) / 2),
                            );
                            out.push((attrs, h, w));
                        }
                    }
                }
            }
        }
    }
    out
}

fn valid(src: &str) -> bool {
    ladder::text::parse(src).is_ok()
}

#[test]
fn max_pool2d_sweep_bit_exact() {
    let mut rng = Rng::new(25);
    let mut n = 0;
    for (attrs, h, w) in geometries() {
        let src = pool_src("max_pool2d", h, w, &attrs);
        if !valid(&src) {
            continue;
        }
        let mut v = rng.vec(6 * h * w, 4.0);
        for x in v.iter_mut().step_by(7) {
            *x = [NAN, -INF, INF, -0.0, 0.0][rng.below(5) as usize];
        }
        bit_exact(&format!("max_pool2d {attrs} on {h}x{w}"), &src, &[f32t(&[2, 3, h, w], &v)]);
        n += 1;
    }
    println!("max_pool2d: {n} geometries bit-exact");
    assert!(n > 300, "{n}");
}

#[test]
fn avg_pool2d_sweep() {
    let mut rng = Rng::new(26);
    let mut n = 0;
    let mut st = Stats::default();
    for (attrs, h, w) in geometries() {
        if !attrs.contains("dilation=[1, 1]") {
            continue;
        }
        let attrs = attrs.replace(", dilation=[1, 1]", "");
        for cip in [true, false] {
            let attrs = format!("{attrs}, count_include_pad={cip}");
            let src = pool_src("avg_pool2d", h, w, &attrs);
            if !valid(&src) {
                continue;
            }
            let x = f32t(&[2, 3, h, w], &rng.vec(6 * h * w, 1.7));
            let tol = Tol { atol: 10.0 * U * 1.7, rtol: 4.0 * U };
            st = st.merge(measure(&format!("avg_pool2d {attrs} on {h}x{w}"), &src, &[x], tol));
            n += 1;
        }
    }
    println!(
        "avg_pool2d sweep: {n} geometries, max abs err {:.3e}, max rel {:.2} u, worst {:.3} of tolerance",
        st.max_abs, st.max_rel_u, st.worst
    );
    assert!(n > 150, "{n}");
}

#[test]
fn pools_special_values_unbatched_and_hand_values() {
    // max: NaN wins, -0 < +0, an all-padding window gives -inf (H = 0 with padding).
    let x = f32t(&[1, 2, 2], &[-0.0, 0.0, -INF, -INF]);
    let src = graph("%x: f32[1, 2, 2]", "max_pool2d(%x) {kernel=[1, 2]}");
    bit_exact("max_pool2d signed zero", &src, std::slice::from_ref(&x));
    let (_, p, _) = lower(&src);
    let out = ladder::interp::run(&p, &[x], &Default::default()).unwrap().outputs[0].to_f64_vec();
    assert!(out[0] == 0.0 && out[0].is_sign_positive() && out[1] == f64::NEG_INFINITY, "{out:?}");
    let src = graph("%x: f32[1, 1, 0, 2]", "max_pool2d(%x) {kernel=[2, 1], padding=[1, 0]}");
    bit_exact("max_pool2d all padding", &src, &[f32t(&[1, 1, 0, 2], &[])]);
    let src = graph("%x: f32[1, 1, 0, 2]", "avg_pool2d(%x) {kernel=[2, 1], padding=[1, 0], count_include_pad=false}");
    case("avg_pool2d all padding", &src, &[f32t(&[1, 1, 0, 2], &[])], Tol::EXACT);
    // avg: the op's hand values from its tests.
    let src = graph("%x: f32[1, 1, 2, 2]", "avg_pool2d(%x) {kernel=[2, 2], padding=[1, 1]}");
    let (_, p, _) = lower(&src);
    let out = ladder::interp::run(&p, &[f32t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])], &Default::default()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![0.25, 0.5, 0.75, 1.0]);
    let src = graph("%x: f32[1, 1, 3, 3]", "avg_pool2d(%x) {kernel=[2, 2], ceil_mode=true, count_include_pad=false}");
    let (_, p, _) = lower(&src);
    let x = f32t(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let out = ladder::interp::run(&p, &[x], &Default::default()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![3.0, 4.5, 7.5, 9.0]);
    // avg with special values.
    let x = f32t(&[1, 1, 2, 3], &[INF, 1.0, 2.0, NAN, 3e38, -3e38]);
    let src = graph("%x: f32[1, 1, 2, 3]", "avg_pool2d(%x) {kernel=[1, 2], stride=[1, 1]}");
    case("avg_pool2d special", &src, &[x], Tol { atol: 0.0, rtol: 4.0 * U });
    // Known deviation (documented in src/decomp/linalg.rs): the window sum runs in f32, so two
    // values near f32's max overflow to inf where the op's f64 sum, divided, is finite.
    let x = f32t(&[1, 1, 1, 2], &[3e38, 3e38]);
    let src = graph("%x: f32[1, 1, 1, 2]", "avg_pool2d(%x) {kernel=[1, 2]}");
    let (g, p, _) = lower(&src);
    let op = ladder::interp::run(&g, std::slice::from_ref(&x), &Default::default()).unwrap().outputs[0].to_f64_vec();
    let dec = ladder::interp::run(&p, &[x], &Default::default()).unwrap().outputs[0].to_f64_vec();
    assert_eq!((op[0], dec[0]), (3e38f32 as f64, f64::INFINITY));
    // Unbatched [C, H, W].
    let mut rng = Rng::new(27);
    let x = f32t(&[3, 4, 5], &rng.vec(60, 0.9));
    bit_exact(
        "max_pool2d unbatched",
        &graph("%x: f32[3, 4, 5]", "max_pool2d(%x) {kernel=[2, 3], stride=[1, 2], padding=[1, 1]}"),
        std::slice::from_ref(&x),
    );
    case(
        "avg_pool2d unbatched",
        &graph("%x: f32[3, 4, 5]", "avg_pool2d(%x) {kernel=[3, 2], padding=[1, 1], ceil_mode=true}"),
        std::slice::from_ref(&x),
        Tol { atol: 10.0 * U, rtol: 4.0 * U },
    );
    case(
        "adaptive unbatched",
        &graph("%x: f32[3, 4, 5]", "adaptive_avg_pool2d(%x) {output_size=[3, 2]}"),
        &[x],
        Tol { atol: 10.0 * U, rtol: 4.0 * U },
    );
}

#[test]
fn pools_symbolic_spatial_dims() {
    let mut rng = Rng::new(28);
    let src =
        graph("%x: f32[n, c, h, w]", "max_pool2d(%x) {kernel=[3, 2], stride=[1, 1], padding=[1, 1], dilation=[1, 2]}");
    let (_, p, _) = lower(&src);
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, c, h, w]");
    for (h, w) in [(4usize, 5usize), (1, 1), (2, 3)] {
        let x = f32t(&[2, 2, h, w], &rng.vec(4 * h * w, 1.0));
        bit_exact(&format!("max_pool2d symbolic {h}x{w}"), &src, &[x]);
    }
    for cip in [true, false] {
        let src = graph(
            "%x: f32[n, c, h, w]",
            &format!("avg_pool2d(%x) {{kernel=[3, 2], stride=[1, 1], padding=[1, 1], count_include_pad={cip}}}"),
        );
        let (_, p, _) = lower(&src);
        assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, c, h, w + 1]");
        for (h, w) in [(4usize, 5usize), (1, 1), (0, 2)] {
            let x = f32t(&[2, 2, h, w], &rng.vec(4 * h * w, 0.9));
            case(&format!("avg_pool2d symbolic cip={cip} {h}x{w}"), &src, &[x], Tol { atol: 10.0 * U, rtol: 4.0 * U });
        }
    }
    // Adaptive: output size 1 (global pooling) and 0 work on symbolic dims; others need static.
    let src = graph("%x: f32[n, c, h, w]", "adaptive_avg_pool2d(%x) {output_size=[1, 1]}");
    for (h, w) in [(4usize, 5usize), (1, 1), (0, 3)] {
        let x = f32t(&[2, 2, h, w], &rng.vec(4 * h * w, 0.9));
        case(&format!("adaptive symbolic 1x1 {h}x{w}"), &src, &[x], Tol { atol: 16.0 * U, rtol: 4.0 * U });
    }
    let src = graph("%x: f32[n, c, h, 6]", "adaptive_avg_pool2d(%x) {output_size=[0, 4]}");
    case("adaptive symbolic 0x4", &src, &[f32t(&[1, 2, 3, 6], &rng.vec(36, 1.0))], Tol::EXACT);
    // More than one cell along a symbolic dim is refused by the op's own shape rule.
    let err = ladder::text::parse(&graph("%x: f32[n, c, h, w]", "adaptive_avg_pool2d(%x) {output_size=[2, 1]}"))
        .expect_err("symbolic adaptive pooling to 2 cells must be refused")
        .to_string();
    assert!(err.contains("needs a static input size"), "{err}");
}

#[test]
fn adaptive_avg_pool2d_sweep() {
    let mut rng = Rng::new(29);
    let mut st = Stats::default();
    let mut n = 0;
    for h in 0..=6usize {
        for w in [0usize, 1, 5] {
            for oh in 0..=4u64 {
                for ow in [0u64, 1, 3, 7] {
                    let mut v = rng.vec(2 * h * w, 1.9);
                    if v.len() > 3 {
                        v[3] = [INF, NAN, 1e30, -1e-40][rng.below(4) as usize];
                    }
                    let src = graph(
                        &format!("%x: f32[2, {h}, {w}]"),
                        &format!("adaptive_avg_pool2d(%x) {{output_size=[{oh}, {ow}]}}"),
                    );
                    let tol = Tol { atol: 16.0 * U * 2.0, rtol: 4.0 * U };
                    st = st.merge(measure(
                        &format!("adaptive {h}x{w} -> {oh}x{ow}"),
                        &src,
                        &[f32t(&[2, h, w], &v)],
                        tol,
                    ));
                    n += 1;
                }
            }
        }
    }
    println!(
        "adaptive_avg_pool2d sweep: {n} cases, max abs err {:.3e}, max rel {:.2} u, worst {:.3} of tolerance",
        st.max_abs, st.max_rel_u, st.worst
    );
}

#[test]
fn half_precision_pools_and_linear() {
    let mut rng = Rng::new(30);
    let x = f16t(&[1, 2, 4, 4], &rng.vec(32, 8.0));
    let tol = Tol { atol: 1e-6, rtol: 1.0 / 1024.0 };
    measure(
        "avg_pool2d f16",
        &graph("%x: f16[1, 2, 4, 4]", "avg_pool2d(%x) {kernel=[3, 3], stride=[1, 1], padding=[1, 1]}"),
        std::slice::from_ref(&x),
        tol,
    );
    measure(
        "adaptive f16",
        &graph("%x: f16[1, 2, 4, 4]", "adaptive_avg_pool2d(%x) {output_size=[3, 3]}"),
        std::slice::from_ref(&x),
        tol,
    );
    bit_exact("max_pool2d f16", &graph("%x: f16[1, 2, 4, 4]", "max_pool2d(%x) {kernel=[2, 2]}"), &[x]);
}

/// A pooling window is one slice per tap: one wider than the importer's bound (4096 taps over
/// both dims) is a typed error at once instead of that many nodes (an empty output included),
/// and an extent that cannot fit is refused by the op's shape rule.
#[test]
fn huge_pool_windows_are_refused() {
    for (op, attrs, needle) in [
        (
            "avg_pool2d",
            "{kernel=[9223372036854775807, 1]}",
            "a kernel of 9223372036854775807 with dilation 1 in spatial dim 0 (at most 4096 taps)",
        ),
        (
            "max_pool2d",
            "{kernel=[9223372036854775807, 1]}",
            "a kernel of 9223372036854775807 with dilation 1 in spatial dim 0 (at most 4096 taps)",
        ),
        (
            "avg_pool2d",
            "{kernel=[3000, 3000], padding=[1500, 1500]}",
            "a window of 3000 x 3000 (its kernel sizes may sum to at most 4096: one slice per offset)",
        ),
    ] {
        let e = decompose_err(&graph("%x: f32[1, 1, 4, 4]", &format!("{op}(%x) {attrs}")));
        assert!(e.contains(needle), "{op} {attrs}: {e}");
    }
    let src = graph("%x: f32[1, 1, 4, 4]", "max_pool2d(%x) {kernel=[2, 2], dilation=[9223372036854775807, 1]}");
    let e = ladder::text::parse(&src).unwrap_err().to_string();
    assert!(e.contains("does not fit the padded input"), "{e}");
    // Within the bound it decomposes.
    let (_, p, _) = lower(&graph("%x: f32[1, 1, 40, 40]", "avg_pool2d(%x) {kernel=[40, 40]}"));
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[1, 1, 1, 1]");
}
