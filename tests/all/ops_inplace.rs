//! In-place ops on the interpreter: writes through the first argument, aliasing (later uses
//! and graph inputs observe the write), broadcasting into the destination, dtype rules,
//! NaN/±inf, empty tensors, slices, overlapping views, and every bad-input class.

use ladder::interp::{EvalCtx, EvalError, InterpError, Options, View};
use ladder::ir::{AttrValue, Attrs, DType, Shape, TensorType};
use ladder::ops::util::broadcast_view;
use ladder::ops::{OpError, OpKind, Rung};

use crate::common::*;

const ALL: [OpKind; 9] = [
    OpKind::AddInplace,
    OpKind::SubInplace,
    OpKind::MulInplace,
    OpKind::DivInplace,
    OpKind::ReluInplace,
    OpKind::CopyInplace,
    OpKind::FillInplace,
    OpKind::MaskedFillInplace,
    OpKind::SliceAssignInplace,
];

/// Runs `src` and returns (outputs, inputs_after) as f64 vectors.
fn run_all(src: &str, inputs: &[ladder::Tensor]) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let out = run(src, inputs).unwrap_or_else(|e| panic!("run failed: {e}\n{src}"));
    (out.outputs.iter().map(|t| t.to_f64_vec()).collect(), out.inputs_after.iter().map(|t| t.to_f64_vec()).collect())
}

/// The parse error of `src`, which must fail on line `line` with `needle` in its message.
fn parse_err(src: &str, line: usize, needle: &str) {
    let err = ladder::text::parse(src).unwrap_err();
    assert!(err.message.contains(needle), "expected `{needle}` in: {err}\n{src}");
    assert_eq!(err.line, line, "{err}\n{src}");
}

fn attrs(op: OpKind, given: &[(&str, AttrValue)]) -> Attrs {
    Attrs::resolve(op.spec().attrs, given.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()).unwrap()
}

fn ctx() -> EvalCtx {
    EvalCtx::new(false, 1 << 30)
}

/// Calls an op's eval directly on views (to write through views the graph cannot make yet).
fn eval(op: OpKind, a: &Attrs, args: &[View]) -> Result<View, EvalError> {
    let ty = TensorType::new(args[0].dtype(), Shape::from_static(&[]));
    (op.spec().eval)(op, &mut ctx(), a, args, &ty)
}

fn fview(shape: &[usize], v: &[f64]) -> View {
    View::from_floats(&ctx(), DType::F32, shape.to_vec(), v.to_vec())
}

#[test]
fn specs_are_high_level_mutating_and_aliasing() {
    for op in ALL {
        let s = op.spec();
        assert_eq!(s.rung, Rung::High, "{}", s.name);
        assert!(s.mutates && s.aliases, "{}", s.name);
        assert!(!op.is_view(), "{}", s.name);
        assert!(s.name.ends_with('_'), "{}", s.name);
        assert_eq!(OpKind::from_name(s.name), Some(op));
    }
}

#[test]
fn add_writes_into_its_input_and_later_uses_see_the_new_value() {
    // The old %x, used after the mutation, holds the new values: 2*2, 3*3, ...
    let src = "graph g(%x: f32[2, 2], %one: f32[]) {\n  %2 = add_(%x, %one)\n  %3 = mul(%x, %x)\n  return %2, %3\n}";
    let (outs, after) = run_all(src, &[f32t(&[2, 2], &[1., 2., 3., 4.]), f32t(&[], &[1.])]);
    assert_eq!(outs[0], vec![2., 3., 4., 5.]);
    assert_eq!(outs[1], vec![4., 9., 16., 25.]);
    assert_eq!(after[0], vec![2., 3., 4., 5.], "the graph input is mutated in place");
    assert_eq!(after[1], vec![1.]);
}

#[test]
fn uses_before_the_mutation_see_the_old_value() {
    let src =
        "graph g(%x: f32[3]) {\n  %1 = mul(%x, %x)\n  %2 = fill_(%x) {value=7}\n  %3 = add(%1, %x)\n  return %1, %3\n}";
    let (outs, after) = run_all(src, &[f32t(&[3], &[1., 2., 3.])]);
    assert_eq!(outs[0], vec![1., 4., 9.]);
    assert_eq!(outs[1], vec![8., 11., 16.]);
    assert_eq!(after[0], vec![7., 7., 7.]);
}

#[test]
fn the_result_is_the_argument_so_chained_writes_accumulate() {
    let src = "graph g(%x: f32[2], %y: f32[2]) {\n  %2 = add_(%x, %y)\n  %3 = mul_(%2, %y)\n  return %x, %2, %3\n}";
    let (outs, after) = run_all(src, &[f32t(&[2], &[1., 2.]), f32t(&[2], &[10., 100.])]);
    // (1 + 10) * 10, (2 + 100) * 100; %x, %2 and %3 are one storage.
    for o in &outs {
        assert_eq!(o, &vec![110., 10200.]);
    }
    assert_eq!(after[0], vec![110., 10200.]);
    assert_eq!(after[1], vec![10., 100.]);
}

#[test]
fn reads_happen_before_writes() {
    let src = "graph g(%x: f32[3]) {\n  %1 = add_(%x, %x)\n  return %1\n}";
    assert_eq!(run1(src, &[f32t(&[3], &[1., -2., 0.5])]), vec![2., -4., 1.]);
    let src = "graph g(%x: f32[3]) {\n  %1 = mul_(%x, %x)\n  %2 = sub_(%x, %x)\n  return %1\n}";
    assert_eq!(run1(src, &[f32t(&[3], &[3., -2., 0.5])]), vec![0., 0., 0.]);
}

#[test]
fn arithmetic_broadcasts_the_second_argument() {
    let src =
        "graph g(%x: f32[2, 3], %y: f32[3], %z: f32[2, 1]) {\n  %3 = sub_(%x, %y)\n  %4 = div_(%x, %z)\n  return %4\n}";
    let got = run1(
        src,
        &[f32t(&[2, 3], &[11., 22., 33., 14., 25., 36.]), f32t(&[3], &[1., 2., 3.]), f32t(&[2, 1], &[2., 4.])],
    );
    assert_eq!(got, vec![5., 10., 15., 3.25, 5.75, 8.25]);
}

#[test]
fn arithmetic_follows_ieee_for_nan_and_inf() {
    let src = "graph g(%x: f32[4], %y: f32[4]) {\n  %2 = div_(%x, %y)\n  return %2\n}";
    let got = run1(src, &[f32t(&[4], &[1., -1., 0., f32::INFINITY]), f32t(&[4], &[0., 0., 0., f32::NAN])]);
    assert_eq!(&got[..2], &[f64::INFINITY, f64::NEG_INFINITY]);
    assert!(got[2].is_nan() && got[3].is_nan());
    let src = "graph g(%x: f32[2], %y: f32[2]) {\n  %2 = add_(%x, %y)\n  return %2\n}";
    let got = run1(src, &[f32t(&[2], &[f32::INFINITY, -0.0]), f32t(&[2], &[f32::NEG_INFINITY, -0.0])]);
    assert!(got[0].is_nan());
    assert!(got[1] == 0.0 && got[1].is_sign_negative());
}

#[test]
fn f32_destination_rounds_and_precise_mode_does_not() {
    // Computed in f64 (promote(f32, f64)), rounded to f32 on the write.
    let src = "graph g(%x: f32[1], %y: f64[1]) {\n  %2 = add_(%x, %y)\n  return %2\n}";
    let inputs = [f32t(&[1], &[1.0]), ladder::Tensor::new(vec![1], ladder::TensorData::F64(vec![1e-8])).unwrap()];
    let out = run(src, &inputs).unwrap();
    assert_eq!(out.outputs[0].dtype(), DType::F32);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.0]);
    let precise = Options { precise: true, ..Default::default() };
    let out = ladder::interp::run(&parse(src), &inputs, &precise).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.0 + 1e-8]);
    assert_eq!(out.inputs_after[0].to_f64_vec(), vec![1.0 + 1e-8]);
}

#[test]
fn integer_arithmetic_wraps_truncates_and_converts_to_the_destination() {
    // i32 += i64 computes in i64 and wraps back to i32.
    let src = "graph g(%x: i32[3], %y: i64[3]) {\n  %2 = add_(%x, %y)\n  return %2\n}";
    let x = ladder::Tensor::new(vec![3], ladder::TensorData::I32(vec![i32::MAX, -5, 7])).unwrap();
    let out = run(src, &[x, i64t(&[3], &[1, 3, 1 << 32])]).unwrap();
    assert_eq!(out.outputs[0].dtype(), DType::I32);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![i32::MIN as f64, -2., 7.]);
    // Integer div_ truncates toward zero; a bool operand counts as 0/1.
    let src =
        "graph g(%x: i64[4], %y: i64[4], %b: bool[4]) {\n  %3 = div_(%x, %y)\n  %4 = mul_(%x, %b)\n  return %4\n}";
    let got =
        run1(src, &[i64t(&[4], &[7, -7, 7, -7]), i64t(&[4], &[2, 2, -2, -2]), boolt(&[4], &[true, true, false, true])]);
    assert_eq!(got, vec![3., -3., 0., 3.]);
    // A float x with an integer y computes in the float type.
    let src = "graph g(%x: f32[2], %y: i64[2]) {\n  %2 = div_(%x, %y)\n  return %2\n}";
    assert_eq!(run1(src, &[f32t(&[2], &[1., 3.]), i64t(&[2], &[2, 4])]), vec![0.5, 0.75]);
}

#[test]
fn integer_division_by_zero_fails_and_writes_nothing() {
    let src = "graph g(%x: i64[2], %y: i64[2]) {\n  %2 = div_(%x, %y)\n  return %2\n}";
    let err = run(src, &[i64t(&[2], &[4, 6]), i64t(&[2], &[2, 0])]).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::DivisionByZero, .. }), "{err}");
    let x = View::from_ints(DType::I64, vec![2], vec![4, 6]);
    let y = View::from_ints(DType::I64, vec![2], vec![2, 0]);
    let e = eval(OpKind::DivInplace, &Attrs::empty(), &[x.clone(), y]).unwrap_err();
    assert_eq!(e, EvalError::DivisionByZero);
    assert_eq!(x.ints(), vec![4, 6], "nothing was written");
}

#[test]
fn relu_clamps_negatives_keeps_nan_and_works_on_integers() {
    let src = "graph g(%x: f32[6]) {\n  %1 = relu_(%x)\n  return %x\n}";
    let got = run1(src, &[f32t(&[6], &[-1., 2., f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -0.0])]);
    assert_eq!(got[..2], [0., 2.]);
    assert!(got[2].is_nan());
    assert_eq!(got[3..5], [0., f64::INFINITY]);
    assert!(got[5] == 0.0 && got[5].is_sign_positive(), "relu(-0) is +0");
    let src = "graph g(%x: i32[3]) {\n  %1 = relu_(%x)\n  return %1\n}";
    let x = ladder::Tensor::new(vec![3], ladder::TensorData::I32(vec![-3, 0, 5])).unwrap();
    assert_eq!(run1(src, &[x]), vec![0., 0., 5.]);
}

#[test]
fn copy_broadcasts_and_converts_like_convert_element_type() {
    let src = "graph g(%x: i64[2, 3], %s: f32[3]) {\n  %2 = copy_(%x, %s)\n  return %x\n}";
    let got = run1(src, &[i64t(&[2, 3], &[9; 6]), f32t(&[3], &[2.9, -2.9, f32::NAN])]);
    assert_eq!(got, vec![2., -2., 0., 2., -2., 0.]);
    let src = "graph g(%x: bool[3], %s: i64[3]) {\n  %2 = copy_(%x, %s)\n  return %x\n}";
    assert_eq!(run1(src, &[boolt(&[3], &[true; 3]), i64t(&[3], &[0, 5, -1])]), vec![0., 1., 1.]);
    let src = "graph g(%x: f32[2], %s: f64[]) {\n  %2 = copy_(%x, %s)\n  return %x\n}";
    let s = ladder::Tensor::new(vec![], ladder::TensorData::F64(vec![0.1])).unwrap();
    assert_eq!(run1(src, &[f32t(&[2], &[0., 0.]), s]), vec![0.1f32 as f64; 2]);
}

#[test]
fn fill_converts_its_value_to_the_destination_dtype() {
    let src = "graph g(%a: f32[2], %b: i64[2], %c: bool[2]) {\n  %3 = fill_(%a) {value=0.1}\n  %4 = fill_(%b) {value=-2.7}\n  %5 = fill_(%c) {value=nan}\n  return %3, %4, %5\n}";
    let out = run(src, &[f32t(&[2], &[5., 5.]), i64t(&[2], &[5, 5]), boolt(&[2], &[false, false])]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![0.1f32 as f64; 2]);
    assert_eq!(out.outputs[1].to_f64_vec(), vec![-2.; 2]);
    assert_eq!(out.outputs[2].to_f64_vec(), vec![1.; 2], "NaN != 0 is true");
    let src = "graph g(%a: f32[2]) {\n  %1 = fill_(%a) {value=-inf}\n  return %1\n}";
    assert_eq!(run1(src, &[f32t(&[2], &[5., 5.])]), vec![f64::NEG_INFINITY; 2]);
}

#[test]
fn masked_fill_writes_where_the_broadcast_mask_is_true() {
    let src = "graph g(%x: f32[2, 3], %m: bool[3]) {\n  %2 = masked_fill_(%x, %m) {value=nan}\n  return %x\n}";
    let got = run1(src, &[f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), boolt(&[3], &[true, false, true])]);
    assert!(got[0].is_nan() && got[2].is_nan() && got[3].is_nan() && got[5].is_nan());
    assert_eq!((got[1], got[4]), (2., 5.));
    let src = "graph g(%x: i64[2, 2], %m: bool[2, 1]) {\n  %2 = masked_fill_(%x, %m) {value=-1}\n  return %x\n}";
    assert_eq!(run1(src, &[i64t(&[2, 2], &[1, 2, 3, 4]), boolt(&[2, 1], &[false, true])]), vec![1., 2., -1., -1.]);
    let src = "graph g(%x: bool[3], %m: bool[]) {\n  %2 = masked_fill_(%x, %m) {value=0}\n  return %x\n}";
    assert_eq!(run1(src, &[boolt(&[3], &[true, false, true]), boolt(&[], &[true])]), vec![0., 0., 0.]);
}

#[test]
fn slice_assign_uses_python_slice_semantics() {
    let base = [0., 1., 2., 3., 4., 5.];
    let case = |attrs: &str, src_shape: &str, src: &[f32], src_dims: &[usize]| -> Vec<f64> {
        let text = format!(
            "graph g(%x: f32[6], %s: f32[{src_shape}]) {{\n  %2 = slice_assign_(%x, %s) {{{attrs}}}\n  return %x\n}}"
        );
        run1(&text, &[f32t(&[6], &base.map(|v| v as f32)), f32t(src_dims, src)])
    };
    assert_eq!(case("axis=0, start=1, end=3", "2", &[10., 20.], &[2]), vec![0., 10., 20., 3., 4., 5.]);
    // Negative bounds count from the end; the slice [-2:] is the last two.
    assert_eq!(case("axis=-1, start=-2", "2", &[10., 20.], &[2]), vec![0., 1., 2., 3., 10., 20.]);
    // Step 2 from 1 to the end: indices 1, 3, 5.
    assert_eq!(case("axis=0, start=1, step=2", "3", &[7., 8., 9.], &[3]), vec![0., 7., 2., 8., 4., 9.]);
    // Bounds clamp: start -100 is 0, end 100 is 6; step 4: indices 0, 4.
    assert_eq!(case("axis=0, start=-100, end=100, step=4", "2", &[7., 8.], &[2]), vec![7., 1., 2., 3., 8., 5.]);
    // A scalar source broadcasts over the slice.
    assert_eq!(case("axis=0, end=-3", "", &[9.], &[]), vec![9., 9., 9., 3., 4., 5.]);
    // Empty slices (end before start, or start past the end) write nothing.
    assert_eq!(case("axis=0, start=4, end=2", "0", &[], &[0]), base.to_vec());
    assert_eq!(case("axis=0, start=10", "1", &[9.], &[1]), base.to_vec());
}

#[test]
fn slice_assign_on_an_inner_axis_broadcasts_src() {
    let src = "graph g(%x: f32[2, 4], %s: f32[2, 1]) {\n  %2 = slice_assign_(%x, %s) {axis=1, start=1, end=4, step=2}\n  return %x\n}";
    let got = run1(src, &[f32t(&[2, 4], &[0., 1., 2., 3., 4., 5., 6., 7.]), f32t(&[2, 1], &[-1., -2.])]);
    assert_eq!(got, vec![0., -1., 2., -1., 4., -2., 6., -2.]);
    // Converted to the destination dtype.
    let src = "graph g(%x: i64[3], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=1}\n  return %x\n}";
    assert_eq!(run1(src, &[i64t(&[3], &[0, 0, 0]), f32t(&[1], &[-3.9])]), vec![0., -3., -3.]);
}

#[test]
fn empty_tensors_work() {
    let src = "graph g(%x: f32[0, 3], %y: f32[3]) {\n  %2 = add_(%x, %y)\n  %3 = relu_(%x)\n  %4 = fill_(%x) {value=1}\n  %5 = slice_assign_(%x, %y) {axis=0}\n  return %x\n}";
    let out = run(src, &[f32t(&[0, 3], &[]), f32t(&[3], &[1., 2., 3.])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 3]);
    assert_eq!(out.inputs_after[0].shape(), &[0, 3]);
}

#[test]
fn writes_go_through_views_to_every_alias() {
    // A column view (stride 2) of a 2x2 base: writing through it changes the base.
    let base = fview(&[2, 2], &[1., 2., 3., 4.]);
    let col = base.restride(vec![2], vec![2], 1);
    let r = eval(OpKind::AddInplace, &Attrs::empty(), &[col.clone(), fview(&[], &[10.])]).unwrap();
    assert!(r.shares_storage(&base));
    assert_eq!(base.floats(), vec![1., 12., 3., 14.]);
    assert_eq!(r.floats(), vec![12., 14.]);
    // slice_assign_ through a transposed view: x^T[1, :] = [7, 8] writes base column 1.
    let t = base.restride(vec![2, 2], vec![1, 2], 0);
    let a = attrs(OpKind::SliceAssignInplace, &[("axis", AttrValue::Int(0)), ("start", AttrValue::Int(1))]);
    eval(OpKind::SliceAssignInplace, &a, &[t, fview(&[2], &[7., 8.])]).unwrap();
    assert_eq!(base.floats(), vec![1., 7., 3., 8.]);
}

#[test]
fn writing_into_an_overlapping_view_is_an_error() {
    let small = fview(&[1, 3], &[1., 2., 3.]);
    let expanded = broadcast_view(&small, &[2, 3]).unwrap();
    let y = fview(&[2, 3], &[1.; 6]);
    for (op, a, args) in [
        (OpKind::AddInplace, Attrs::empty(), vec![expanded.clone(), y.clone()]),
        (OpKind::ReluInplace, Attrs::empty(), vec![expanded.clone()]),
        (OpKind::CopyInplace, Attrs::empty(), vec![expanded.clone(), y.clone()]),
        (OpKind::FillInplace, attrs(OpKind::FillInplace, &[("value", AttrValue::Float(0.))]), vec![expanded.clone()]),
    ] {
        assert_eq!(eval(op, &a, &args).unwrap_err(), EvalError::OverlappingWrite, "{op:?}");
    }
    // Slicing one row of the expanded view has no overlap and is allowed.
    let a = attrs(OpKind::SliceAssignInplace, &[("axis", AttrValue::Int(0)), ("end", AttrValue::Int(1))]);
    eval(OpKind::SliceAssignInplace, &a, &[expanded.clone(), fview(&[3], &[7., 8., 9.])]).unwrap();
    assert_eq!(small.floats(), vec![7., 8., 9.]);
    let a = attrs(OpKind::SliceAssignInplace, &[("axis", AttrValue::Int(1)), ("end", AttrValue::Int(1))]);
    let e = eval(OpKind::SliceAssignInplace, &a, &[expanded, fview(&[2, 1], &[0., 0.])]).unwrap_err();
    assert_eq!(e, EvalError::OverlappingWrite);
}

#[test]
fn infer_handles_symbolic_dims() {
    let g = parse(
        "graph g(%x: f32[batch, 4], %y: f32[4], %z: f32[batch, 1], %m: bool[batch, 4]) {\n  %4 = add_(%x, %y)\n  %5 = mul_(%x, %z)\n  %6 = masked_fill_(%x, %m) {value=1}\n  %7 = slice_assign_(%x, %z) {axis=0}\n  %8 = slice_assign_(%x, %z) {axis=1, start=1, end=3}\n  return %4, %5, %6, %7, %8\n}",
    );
    for o in g.outputs() {
        assert_eq!(g.ty(o.value).to_string(), "f32[batch, 4]");
    }
    parse_err(
        "graph g(%x: f32[batch, 4], %y: f32[n, 4]) {\n  %2 = add_(%x, %y)\n  return %2\n}",
        2,
        "do not broadcast",
    );
    parse_err("graph g(%x: f32[1, 4], %y: f32[batch, 4]) {\n  %2 = copy_(%x, %y)\n  return %2\n}", 2, "enlarge");
    // On a symbolic dim the slice's length is known from the dim (here `n - 1`, as for the
    // `slice` op), so a source that cannot fit it is refused at the node.
    parse_err(
        "graph g(%x: f32[n], %s: f32[2]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=1}\n  return %x\n}",
        2,
        "do not broadcast",
    );
    let src = "graph g(%x: f32[n], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=1}\n  return %x\n}";
    assert_eq!(run1(src, &[f32t(&[3], &[0., 0., 0.]), f32t(&[1], &[7.])]), vec![0., 7., 7.]);
    // A window the graph assumes fits (`1:3` of `n`) fails at run time when it does not,
    // as `slice` does, rather than silently clamping.
    let src =
        "graph g(%x: f32[n], %s: f32[2]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=1, end=3}\n  return %x\n}";
    assert_eq!(run1(src, &[f32t(&[4], &[0.; 4]), f32t(&[2], &[1., 2.])]), vec![0., 1., 2., 0.]);
    let err = run(src, &[f32t(&[2], &[0.; 2]), f32t(&[2], &[1., 2.])]).unwrap_err();
    assert!(err.to_string().contains("shorter than the graph assumes"), "{err}");
}

#[test]
fn bad_inputs_are_typed_errors_at_the_node() {
    let cases: &[(&str, &str)] = &[
        // The second argument may not enlarge x.
        ("graph g(%x: f32[3], %y: f32[2, 3]) {\n  %2 = add_(%x, %y)\n  return %2\n}", "would enlarge"),
        ("graph g(%x: f32[1], %y: f32[3]) {\n  %2 = sub_(%x, %y)\n  return %2\n}", "would enlarge"),
        ("graph g(%x: f32[2], %y: f32[3]) {\n  %2 = mul_(%x, %y)\n  return %2\n}", "do not broadcast"),
        ("graph g(%x: f32[2], %s: f32[3]) {\n  %2 = copy_(%x, %s)\n  return %2\n}", "do not broadcast"),
        // A float result cannot be written into an integer x.
        (
            "graph g(%x: i64[2], %y: f32[2]) {\n  %2 = add_(%x, %y)\n  return %2\n}",
            "result type f32 can't be cast to i64 in place",
        ),
        (
            "graph g(%x: i32[2], %y: f64[]) {\n  %2 = div_(%x, %y)\n  return %2\n}",
            "result type f64 can't be cast to i32 in place",
        ),
        // Bool x for arithmetic and relu.
        ("graph g(%x: bool[2], %y: bool[2]) {\n  %2 = add_(%x, %y)\n  return %2\n}", "numeric"),
        ("graph g(%x: bool[2]) {\n  %1 = relu_(%x)\n  return %1\n}", "numeric"),
        // The mask must be bool and must not enlarge x.
        ("graph g(%x: f32[2], %m: f32[2]) {\n  %2 = masked_fill_(%x, %m) {value=0}\n  return %2\n}", "expected bool"),
        (
            "graph g(%x: f32[2], %m: bool[3, 2]) {\n  %2 = masked_fill_(%x, %m) {value=0}\n  return %2\n}",
            "would enlarge",
        ),
        // Attributes.
        ("graph g(%x: f32[2]) {\n  %1 = fill_(%x)\n  return %1\n}", "`value` is required"),
        ("graph g(%x: f32[2]) {\n  %1 = fill_(%x) {value=true}\n  return %1\n}", "must be a float"),
        ("graph g(%x: f32[2], %m: bool[2]) {\n  %2 = masked_fill_(%x, %m)\n  return %2\n}", "`value` is required"),
        ("graph g(%x: f32[2], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s)\n  return %2\n}", "`axis` is required"),
        (
            "graph g(%x: f32[2], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s) {axis=1}\n  return %2\n}",
            "axis 1 is out of range for rank 1",
        ),
        (
            "graph g(%x: f32[], %s: f32[]) {\n  %2 = slice_assign_(%x, %s) {axis=0}\n  return %2\n}",
            "out of range for rank 0",
        ),
        (
            "graph g(%x: f32[4], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s) {axis=0, step=0}\n  return %2\n}",
            "must be at least 1",
        ),
        (
            "graph g(%x: f32[4], %s: f32[1]) {\n  %2 = slice_assign_(%x, %s) {axis=0, step=-1}\n  return %2\n}",
            "must be at least 1",
        ),
        // src must broadcast to the slice's shape (here [2]).
        (
            "graph g(%x: f32[4], %s: f32[3]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=2}\n  return %2\n}",
            "do not broadcast",
        ),
        (
            "graph g(%x: f32[4], %s: f32[2, 2]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=2}\n  return %2\n}",
            "would enlarge",
        ),
        (
            "graph g(%x: f32[4], %s: f32[2]) {\n  %2 = slice_assign_(%x, %s) {axis=0, start=4}\n  return %2\n}",
            "do not broadcast",
        ),
        // Arity.
        ("graph g(%x: f32[2]) {\n  %1 = add_(%x)\n  return %1\n}", "takes 2 arguments, got 1"),
        ("graph g(%x: f32[2]) {\n  %1 = relu_(%x, %x)\n  return %1\n}", "takes 1 arguments, got 2"),
        ("graph g(%x: f32[2]) {\n  %1 = copy_(%x)\n  return %1\n}", "takes 2 arguments, got 1"),
    ];
    for (src, needle) in cases {
        parse_err(src, 2, needle);
    }
}

#[test]
fn errors_are_typed_op_errors() {
    let t = |d: DType, dims: &[u64]| TensorType::new(d, Shape::from_static(dims));
    let (x, y) = (t(DType::I64, &[2]), t(DType::F32, &[2]));
    let e = ladder::ops::infer(OpKind::AddInplace, &Attrs::empty(), &[&x, &y]).unwrap_err();
    assert!(matches!(e, OpError::DType { arg: 1, got: DType::F32, .. }), "{e}");
    let (x, y) = (t(DType::F32, &[3]), t(DType::F32, &[2, 3]));
    let e = ladder::ops::infer(OpKind::CopyInplace, &Attrs::empty(), &[&x, &y]).unwrap_err();
    assert!(matches!(e, OpError::Shape(_)), "{e}");
    let a = attrs(OpKind::SliceAssignInplace, &[("axis", AttrValue::Int(0)), ("step", AttrValue::Int(0))]);
    let e = ladder::ops::infer(OpKind::SliceAssignInplace, &a, &[&x, &x]).unwrap_err();
    assert!(matches!(e, OpError::AttrValue { name: "step", .. }), "{e}");
    // The result type is always x's type, whatever y's dtype.
    let (x, y) = (t(DType::F16, &[2, 2]), t(DType::F64, &[2]));
    assert_eq!(ladder::ops::infer(OpKind::MulInplace, &Attrs::empty(), &[&x, &y]).unwrap(), x);
}

#[test]
fn every_op_runs_in_precise_mode() {
    let src = "graph g(%x: f32[3], %y: f32[3], %m: bool[3], %s: f32[]) {\n  %4 = add_(%x, %y)\n  %5 = sub_(%x, %y)\n  %6 = mul_(%x, %y)\n  %7 = div_(%x, %y)\n  %8 = relu_(%x)\n  %9 = masked_fill_(%x, %m) {value=0.1}\n  %10 = slice_assign_(%x, %s) {axis=0, start=2}\n  %11 = copy_(%y, %x)\n  %12 = fill_(%m) {value=1}\n  return %x, %y, %m\n}";
    let precise = Options { precise: true, ..Default::default() };
    let out = ladder::interp::run(
        &parse(src),
        &[
            f32t(&[3], &[1., -8., 3.]),
            f32t(&[3], &[3., 3., 0.5]),
            boolt(&[3], &[true, false, false]),
            f32t(&[], &[0.5]),
        ],
        &precise,
    )
    .unwrap();
    // ((x + y - y) * y / y) = x; relu; masked_fill 0.1 in f64 (no f32 rounding); x[2:] = 0.5; y = x.
    let want = vec![0.1, 0., 0.5];
    assert_eq!(out.outputs[0].dtype(), DType::F64);
    assert_eq!(out.outputs[0].to_f64_vec(), want);
    assert_eq!(out.outputs[1].to_f64_vec(), want);
    assert_eq!(out.outputs[2].to_f64_vec(), vec![1., 1., 1.]);
    assert_eq!(out.inputs_after[0].to_f64_vec(), want);
}
