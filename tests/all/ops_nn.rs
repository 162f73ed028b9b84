//! Activations on the interpreter: values at 0, ±1, ±inf, NaN and large |x|, both gelu forms,
//! integer relu/clamp, dropout in eval mode, symbolic shapes, and typed errors at the node's
//! line.

use ladder::interp::Options;

use crate::common;
use crate::common::*;

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// Runs `op(%x) {attrs}` on a 1-D f32 input and returns the result.
fn act(op: &str, attrs: &str, x: &[f32]) -> Vec<f64> {
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    let src = format!("graph g(%x: f32[{}]) {{\n  %y = {op}(%x){attrs}\n  return %y\n}}", x.len());
    run1(&src, &[f32t(&[x.len()], x)])
}

/// The same in precise mode.
fn act_precise(op: &str, attrs: &str, x: &[f32]) -> Vec<f64> {
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    let src = format!("graph g(%x: f32[{}]) {{\n  %y = {op}(%x){attrs}\n  return %y\n}}", x.len());
    let opts = Options { precise: true, ..Default::default() };
    let out = ladder::interp::run(&parse(&src), &[f32t(&[x.len()], x)], &opts).unwrap();
    assert_eq!(out.outputs[0].dtype(), ladder::DType::F64);
    out.outputs[0].to_f64_vec()
}

/// Asserts that `src` fails to parse at line 2 with a message containing `needle`.
fn assert_bad(src: &str, needle: &str) {
    let err = match ladder::text::parse(src) {
        Ok(_) => panic!("expected an error containing {needle:?}\n{src}"),
        Err(e) => e,
    };
    assert!(err.to_string().contains(needle), "{err}\nwanted {needle:?}\n{src}");
    assert_eq!(err.line, 2, "{err}");
}

fn bad_one(op: &str, attrs: &str, ty: &str, needle: &str) {
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    assert_bad(&format!("graph g(%x: {ty}) {{\n  %y = {op}(%x){attrs}\n  return %y\n}}"), needle);
}

fn is_neg_zero(x: f64) -> bool {
    x == 0.0 && x.is_sign_negative()
}

#[test]
fn relu_floats_and_ints() {
    let got = act("relu", "", &[-1., 0., 1., INF, -INF, NAN, -0.]);
    assert_close(&got, &[0., 0., 1., f64::INFINITY, 0., f64::NAN, 0.], 0.);
    assert!(got[6].is_sign_positive(), "relu(-0) is +0");
    let src = "graph g(%x: i64[3]) {\n  %y = relu(%x)\n  return %y\n}";
    let out = run(src, &[i64t(&[3], &[-3, 0, 5])]).unwrap();
    assert_eq!(out.outputs[0].dtype(), ladder::DType::I64);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![0., 0., 5.]);
}

#[test]
fn gelu_exact_form() {
    let x = [-3., -1., -0.5, 0., 0.5, 1., 2., 3.];
    let want = [
        -0.00404969409489031,
        -0.15865525393145707,
        -0.15426876936299344,
        0.,
        0.34573123063700656,
        0.8413447460685429,
        1.9544997361036416,
        2.99595030590511,
    ];
    assert_close(&act("gelu", "", &x), &want, 1e-6);
    assert_close(&act("gelu", "approximate=\"none\"", &x), &want, 1e-6);
    assert_close(&act_precise("gelu", "", &x), &want, 1e-15);
    let got = act("gelu", "", &[INF, -INF, NAN, -1000., 1000.]);
    assert_close(&got, &[f64::INFINITY, 0., f64::NAN, 0., 1000.], 0.);
    assert!(is_neg_zero(got[1]) && is_neg_zero(got[3]));
    // Far in the negative tail x * Φ(x) is tiny but not zero: gelu(-10) ≈ -7.6e-23.
    let tail = act_precise("gelu", "", &[-10.])[0];
    assert!((tail - -7.619853024160593e-23).abs() < 1e-33, "{tail}");
}

#[test]
fn gelu_tanh_form() {
    let x = [-3., -1., -0.5, 0., 0.5, 1., 2., 3.];
    let want = [
        -0.0036373920817729943,
        -0.15880800939172324,
        -0.15428599017485606,
        0.,
        0.34571400982514394,
        0.8411919906082768,
        1.954597694087775,
        2.996362607918227,
    ];
    assert_close(&act("gelu", "approximate=\"tanh\"", &x), &want, 1e-6);
    assert_close(&act_precise("gelu", "approximate=\"tanh\"", &x), &want, 1e-14);
    let got = act("gelu", "approximate=\"tanh\"", &[INF, -INF, NAN, -1000., 1000.]);
    assert_close(&got, &[f64::INFINITY, 0., f64::NAN, 0., 1000.], 0.);
    assert!(is_neg_zero(got[1]));
}

#[test]
fn sigmoid_and_silu() {
    let x = [0., 1., -1., INF, -INF, NAN, -1000., 1000.];
    let s = act("sigmoid", "", &x);
    assert_close(&s, &[0.5, 0.7310585786300049, 0.2689414213699951, 1., 0., f64::NAN, 0., 1.], 1e-7);
    assert_eq!(s[6], 0.);
    assert_close(&act_precise("sigmoid", "", &[1.]), &[0.7310585786300049], 1e-16);
    let got = act("silu", "", &x);
    assert_close(&got, &[0., 0.7310585786300049, -0.2689414213699951, f64::INFINITY, 0., f64::NAN, 0., 1000.], 1e-7);
    assert!(is_neg_zero(got[4]) && is_neg_zero(got[6]));
    assert_close(&act_precise("silu", "", &[-1.]), &[-0.2689414213699951], 1e-16);
}

#[test]
fn softplus_default_and_beta_threshold() {
    let x = [0., 1., -1., 1000., -1000., INF, -INF, NAN, 20., 21.];
    let want = [
        std::f64::consts::LN_2,
        1.3132616875182228,
        0.31326168751822286,
        1000.,
        0.,
        f64::INFINITY,
        0.,
        f64::NAN,
        // 20 is not above the threshold: log1p(e^20) = 20 + 2.06e-9, which rounds to 20 in f32.
        20.,
        21.,
    ];
    assert_close(&act("softplus", "", &x), &want, 1e-6);
    assert_close(&act_precise("softplus", "", &[20.]), &[20.000000002061153], 1e-12);
    // beta = 2, threshold = 1: x = 1 is linear (2 > 1); x = 0.25 gives log1p(e^0.5) / 2.
    assert_close(&act("softplus", "beta=2.0, threshold=1.0", &[1., 0.25]), &[1., 0.48703849209005334], 1e-7);
}

#[test]
fn leaky_relu_elu_hardsigmoid_hardswish() {
    let x = [-2., 0., 3., -INF, NAN, INF];
    assert_close(&act("leaky_relu", "", &x), &[-0.02, 0., 3., f64::NEG_INFINITY, f64::NAN, f64::INFINITY], 1e-8);
    assert_close(&act("leaky_relu", "negative_slope=0.2", &[-2., 5.]), &[-0.4, 5.], 1e-7);
    let e = [-1., 0., 1., -INF, NAN, INF];
    assert_close(&act("elu", "", &e), &[-0.6321205588285577, 0., 1., -1., f64::NAN, f64::INFINITY], 1e-7);
    assert_close(&act("elu", "alpha=2", &[-1., -INF]), &[-1.2642411176571153, -2.], 1e-7);
    assert_close(&act_precise("elu", "", &[-1.]), &[-0.6321205588285577], 1e-16);
    let h = [-4., -3., -1., 0., 1., 3., 4., INF, -INF, NAN];
    let hs = act("hardsigmoid", "", &h);
    assert_close(&hs, &[0., 0., 2. / 6., 0.5, 4. / 6., 1., 1., 1., 0., f64::NAN], 1e-7);
    let hw = act("hardswish", "", &h);
    assert_close(&hw, &[0., 0., -2. / 6., 0., 4. / 6., 3., 4., f64::INFINITY, 0., f64::NAN], 1e-7);
    assert!(is_neg_zero(hw[8]), "hardswish(-inf) is -0, like hardswish(-4)");
    assert_close(&act_precise("hardswish", "", &[1.]), &[4. / 6.], 1e-16);
}

#[test]
fn clamp_floats() {
    let x = [-5., 0., 1.5, 5., NAN, -INF, INF];
    let got = act("clamp", "min=-1, max=2", &x);
    assert_close(&got, &[-1., 0., 1.5, 2., f64::NAN, -1., 2.], 0.);
    // One-sided bounds (defaults are ±inf).
    assert_close(&act("clamp", "min=0", &x), &[0., 0., 1.5, 5., f64::NAN, 0., f64::INFINITY], 0.);
    assert_close(&act("clamp", "max=0.5", &x), &[-5., 0., 0.5, 0.5, f64::NAN, f64::NEG_INFINITY, 0.5], 0.);
    // min > max: every element is max (NaN stays NaN).
    assert_close(&act("clamp", "min=3, max=1", &x), &[1., 1., 1., 1., f64::NAN, 1., 1.], 0.);
    // A NaN bound gives NaN.
    assert!(act("clamp", "min=nan", &[1., 2.]).iter().all(|v| v.is_nan()));
    assert_close(&act_precise("clamp", "min=-1, max=2", &[-5., 0.25]), &[-1., 0.25], 0.);
}

#[test]
fn clamp_integers() {
    let src = "graph g(%x: i64[4]) {\n  %y = clamp(%x) {min=-1, max=3}\n  return %y\n}";
    let out = run(src, &[i64t(&[4], &[-5, 0, 7, 3])]).unwrap();
    assert_eq!(out.outputs[0].dtype(), ladder::DType::I64);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![-1., 0., 3., 3.]);
    let src = "graph g(%x: i64[3]) {\n  %y = clamp(%x) {max=3}\n  return %y\n}";
    assert_eq!(run1(src, &[i64t(&[3], &[i64::MIN, 0, i64::MAX])]), vec![i64::MIN as f64, 0., 3.]);
    let src = "graph g(%x: i64[3]) {\n  %y = clamp(%x) {min=5, max=2}\n  return %y\n}";
    assert_eq!(run1(src, &[i64t(&[3], &[-5, 3, 9])]), vec![2., 2., 2.]);
    bad_one("clamp", "min=0.5", "i64[3]", "integral");
    bad_one("clamp", "max=nan", "i64[3]", "integral");
    bad_one("clamp", "", "bool[3]", "numeric");
}

#[test]
fn dropout_is_identity_in_eval_mode() {
    let x = [1., -2., NAN, INF];
    assert_close(&act("dropout", "", &x), &[1., -2., f64::NAN, f64::INFINITY], 0.);
    assert_close(&act("dropout", "p=0.3", &x), &[1., -2., f64::NAN, f64::INFINITY], 0.);
    assert_close(&act("dropout", "p=1.0", &x), &[1., -2., f64::NAN, f64::INFINITY], 0.);
    assert_close(&act_precise("dropout", "p=0.3", &x), &[1., -2., f64::NAN, f64::INFINITY], 0.);
    bad_one("dropout", "train=true", "f32[3]", "not supported");
    bad_one("dropout", "p=1.5", "f32[3]", "[0, 1]");
    bad_one("dropout", "p=-0.1", "f32[3]", "[0, 1]");
    bad_one("dropout", "p=nan", "f32[3]", "[0, 1]");
}

#[test]
fn shapes_are_preserved_including_symbolic_and_empty() {
    for op in [
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "softplus",
        "leaky_relu",
        "hardsigmoid",
        "hardswish",
        "elu",
        "clamp",
        "dropout",
    ] {
        let src = format!("graph g(%x: f32[batch, 8]) {{\n  %y = {op}(%x)\n  return %y\n}}");
        let g = parse(&src);
        assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f32[batch, 8]", "{op}");
        let src = format!("graph g(%x: f16[0, 3]) {{\n  %y = {op}(%x)\n  return %y\n}}");
        let g = parse(&src);
        assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f16[0, 3]", "{op}");
        let out = ladder::interp::run(
            &g,
            &[ladder::Tensor::zeros(ladder::DType::F16, &[0, 3]).unwrap()],
            &Options::default(),
        )
        .unwrap();
        assert_eq!(out.outputs[0].shape(), &[0, 3], "{op}");
    }
}

#[test]
fn bf16_results_round_once() {
    // sigmoid(1) = 0.7310585786..., which bf16 (8 significant bits) holds as 0.73046875.
    let src = "graph g(%x: f32[1]) {\n  %c = convert_element_type(%x) {dtype=bf16}\n  %y = sigmoid(%c)\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1], &[1.])]), vec![0.73046875]);
}

#[test]
fn bad_inputs_are_typed_errors() {
    bad_one("gelu", "approximate=\"exact\"", "f32[3]", "approximate");
    bad_one("gelu", "approximate=\"Tanh\"", "f32[3]", "\"none\" or \"tanh\"");
    bad_one("gelu", "approximate=1", "f32[3]", "approximate");
    bad_one("gelu", "", "i64[3]", "float");
    bad_one("sigmoid", "", "bool[3]", "float");
    bad_one("relu", "", "bool[3]", "numeric");
    bad_one("softplus", "beta=0.0", "f32[3]", "beta");
    bad_one("softplus", "beta=inf", "f32[3]", "beta");
    bad_one("elu", "alpha=[1]", "f32[3]", "alpha");
    bad_one("leaky_relu", "slope=0.1", "f32[3]", "unknown attribute");
    assert_bad("graph g(%x: f32[3]) {\n  %y = relu(%x, %x)\n  return %y\n}", "takes 1 arguments");
}

#[test]
fn softplus_never_overflows_and_clamp_ties_keep_x() {
    let src =
        "graph g(%x: f64[3]) {\n  %1 = softplus(%x) {threshold=1000.0}\n  %2 = clamp(%x) {min=0.0}\n  return %1, %2\n}";
    let out =
        common::run(src, &[ladder::Tensor::new(vec![3], ladder::TensorData::F64(vec![800.0, -700.0, -0.0])).unwrap()])
            .unwrap();
    let sp = out.outputs[0].to_f64_vec();
    assert_eq!(sp[0], 800.0);
    assert!(sp[1] > 0.0 && sp[1] < 1e-300, "{}", sp[1]);
    assert_eq!(sp[2], std::f64::consts::LN_2);
    let c = out.outputs[1].to_f64_vec();
    assert_eq!(c[0], 800.0);
    assert_eq!(c[1], 0.0);
    assert!(c[2] == 0.0 && c[2].is_sign_negative(), "clamp(-0, min=0) keeps -0");
}
