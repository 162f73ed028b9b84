//! Elementwise prims on the interpreter: hand-computed expectations, broadcasting, dtype
//! promotion, NaN/±inf/±0 semantics, empty tensors.

use crate::common::*;

#[test]
fn add_broadcasts_size_one_and_missing_dims() {
    let src = "graph g(%a: f32[2, 3], %b: f32[3]) {\n  %2 = add(%a, %b)\n  return %2\n}";
    let got = run1(src, &[f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), f32t(&[3], &[10., 20., 30.])]);
    assert_eq!(got, vec![11., 22., 33., 14., 25., 36.]);
}

#[test]
fn max_min_propagate_nan_and_order_signed_zeros() {
    let src = "graph g(%a: f32[4], %b: f32[4]) {\n  %2 = max(%a, %b)\n  %3 = min(%a, %b)\n  return %2, %3\n}";
    let out =
        run(src, &[f32t(&[4], &[f32::NAN, -0.0, 1.0, f32::NEG_INFINITY]), f32t(&[4], &[1.0, 0.0, f32::NAN, -1.0])])
            .unwrap();
    let mx = out.outputs[0].to_f64_vec();
    let mn = out.outputs[1].to_f64_vec();
    assert!(mx[0].is_nan() && mx[2].is_nan() && mn[0].is_nan() && mn[2].is_nan());
    assert!(mx[1] == 0.0 && mx[1].is_sign_positive());
    assert!(mn[1] == 0.0 && mn[1].is_sign_negative());
    assert_eq!((mx[3], mn[3]), (-1.0, f64::NEG_INFINITY));
}

#[test]
fn f32_arithmetic_rounds_to_f32_but_precise_mode_does_not() {
    let src = "graph g(%a: f32[1], %b: f32[1]) {\n  %2 = add(%a, %b)\n  return %2\n}";
    let inputs = [f32t(&[1], &[1.0]), f32t(&[1], &[1e-8])];
    assert_eq!(run1(src, &inputs), vec![1.0]);
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    let out = ladder::interp::run(&parse(src), &inputs, &precise).unwrap();
    assert_eq!(out.outputs[0].dtype(), ladder::DType::F64);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.0 + 1e-8f32 as f64]);
}

#[test]
fn integer_division_by_zero_is_a_typed_error() {
    let src = "graph g(%a: i64[2], %b: i64[2]) {\n  %2 = div(%a, %b)\n  return %2\n}";
    let err = run(src, &[i64t(&[2], &[1, 2]), i64t(&[2], &[1, 0])]).unwrap_err();
    assert!(
        matches!(err, ladder::interp::InterpError::Eval { error: ladder::interp::EvalError::DivisionByZero, .. }),
        "{err}"
    );
}

#[test]
fn comparisons_with_promotion_and_nan() {
    let src = "graph g(%a: i64[3], %b: f32[3]) {\n  %2 = lt(%a, %b)\n  %3 = ne(%b, %b)\n  return %2, %3\n}";
    let out = run(src, &[i64t(&[3], &[1, 2, 3]), f32t(&[3], &[1.5, f32::NAN, 2.0])]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1., 0., 0.]);
    assert_eq!(out.outputs[1].to_f64_vec(), vec![0., 1., 0.]);
}

#[test]
fn empty_tensors_flow_through() {
    let src = "graph g(%a: f32[0, 3]) {\n  %1 = exp(%a)\n  return %1\n}";
    let out = run(src, &[f32t(&[0, 3], &[])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 3]);
}

#[test]
fn where_and_convert() {
    let src = "graph g(%c: bool[3], %a: f32[3]) {\n  %2 = convert_element_type(%a) {dtype=i32}\n  %3 = where(%c, %a, %2)\n  return %2, %3\n}";
    let out = run(src, &[boolt(&[3], &[true, false, true]), f32t(&[3], &[1.7, -2.7, f32::NAN])]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1., -2., 0.]);
    let w = out.outputs[1].to_f64_vec();
    assert_eq!(&w[..2], &[1.7f32 as f64, -2.0]);
    assert!(w[2].is_nan());
}

#[test]
fn bad_inputs_are_typed_errors() {
    let bad = [
        ("graph g(%a: f32[2], %b: f32[3]) {\n  %2 = add(%a, %b)\n  return %2\n}", "do not broadcast"),
        ("graph g(%a: i64[2]) {\n  %1 = exp(%a)\n  return %1\n}", "float"),
        ("graph g(%a: f32[2]) {\n  %1 = add(%a)\n  return %1\n}", "takes 2 arguments"),
        ("graph g(%a: f32[2]) {\n  %1 = and(%a, %a)\n  return %1\n}", "bool"),
    ];
    for (src, needle) in bad {
        let err = ladder::text::parse(src).unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
        assert_eq!(err.line, 2, "{err}");
    }
}

#[test]
fn float_to_i32_saturates_at_the_i32_range() {
    let src = "graph g(%a: f32[5]) {\n  %1 = convert_element_type(%a) {dtype=i32}\n  return %1\n}";
    let got = run1(src, &[f32t(&[5], &[f32::INFINITY, -1e10, 1e10, f32::NAN, -2.9])]);
    assert_eq!(got, vec![i32::MAX as f64, i32::MIN as f64, i32::MAX as f64, 0.0, -2.0]);
}
