//! Reduction prims and high-level reductions on the interpreter: hand-computed values,
//! negative axes, keepdim, empty and size-1 dims, NaN/±inf, dtype rules, accumulation in the
//! op's dtype vs precise mode, symbolic shapes, and typed errors.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::ir::{AttrValue, Attrs};
use ladder::ops::{self, OpError};
use ladder::{DType, Dim, OpKind, Shape, Tensor, TensorData, TensorType};

use crate::common::*;

fn precise() -> Options {
    Options { precise: true, ..Default::default() }
}

fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

/// An integer tensor's dtype and exact values.
fn ints(t: &Tensor) -> (DType, Vec<i64>) {
    match t.data() {
        TensorData::I32(v) => (DType::I32, v.iter().map(|&x| x as i64).collect()),
        TensorData::I64(v) => (DType::I64, v.clone()),
        other => panic!("not an integer tensor: {other:?}"),
    }
}

fn bools(t: &Tensor) -> Vec<bool> {
    match t.data() {
        TensorData::Bool(v) => v.clone(),
        other => panic!("not a bool tensor: {other:?}"),
    }
}

/// A one-op graph `%1 = <op>(%x) {attrs}` over one input of type `ty`.
fn unary_graph(ty: &str, op: &str, attrs: &str) -> String {
    format!("graph g(%x: {ty}) {{\n  %1 = {op}(%x) {{{attrs}}}\n  return %1\n}}")
}

/// Runs a one-op graph and returns its output tensor.
fn run_op(ty: &str, op: &str, attrs: &str, x: Tensor) -> Tensor {
    let src = unary_graph(ty, op, attrs);
    run(&src, &[x]).unwrap_or_else(|e| panic!("{e}\n{src}")).outputs.remove(0)
}

fn run_op_precise(ty: &str, op: &str, attrs: &str, x: Tensor) -> Tensor {
    let src = unary_graph(ty, op, attrs);
    interp::run(&parse(&src), &[x], &precise()).unwrap_or_else(|e| panic!("{e}\n{src}")).outputs.remove(0)
}

/// The printed type of `%1` in a one-op graph.
fn infer_ty(ty: &str, op: &str, attrs: &str) -> String {
    let g = parse(&unary_graph(ty, op, attrs));
    g.ty(g.outputs()[0].value).to_string()
}

/// The parse error of a one-op graph; asserts it points at the node's line.
fn parse_err(ty: &str, op: &str, attrs: &str) -> String {
    let err = ladder::text::parse(&unary_graph(ty, op, attrs)).unwrap_err();
    assert_eq!(err.line, 2, "{err}");
    err.message
}

fn ty(dtype: DType, dims: &[Dim]) -> TensorType {
    TensorType::new(dtype, Shape(dims.iter().cloned().collect()))
}

fn infer_op(op: OpKind, attrs: Vec<(&str, AttrValue)>, args: &[TensorType]) -> Result<TensorType, OpError> {
    let attrs = Attrs::resolve(op.spec().attrs, attrs.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
        .expect("attrs resolve");
    let refs: Vec<&TensorType> = args.iter().collect();
    ops::infer(op, &attrs, &refs)
}

const X23: [f32; 6] = [1., 2., 3., 4., 5., 6.];

// --- Prims ---------------------------------------------------------------------------------

#[test]
fn reduce_prims_hand_computed() {
    let x = || f32t(&[2, 3], &X23);
    let t = run_op("f32[2, 3]", "reduce_sum", "axes=[1]", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize][..], vec![6., 15.]));
    let t = run_op("f32[2, 3]", "reduce_sum", "axes=[-2]", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[3usize][..], vec![5., 7., 9.]));
    let t = run_op("f32[2, 3]", "reduce_sum", "axes=[1, 0]", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[][..], vec![21.]));
    let t = run_op("f32[2, 3]", "reduce_prod", "axes=[-1]", x());
    assert_eq!(t.to_f64_vec(), vec![6., 120.]);
    let t = run_op("f32[2, 3]", "reduce_max", "axes=[0]", x());
    assert_eq!(t.to_f64_vec(), vec![4., 5., 6.]);
    let t = run_op("f32[2, 3]", "reduce_min", "axes=[1]", x());
    assert_eq!(t.to_f64_vec(), vec![1., 4.]);
    // An empty axis list is the identity.
    let t = run_op("f32[2, 3]", "reduce_sum", "axes=[]", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 3][..], X23.iter().map(|&v| v as f64).collect()));
    // Size-1 axes.
    let t = run_op("f32[1, 3, 1]", "reduce_max", "axes=[0, 2]", f32t(&[1, 3, 1], &[7., -1., 2.]));
    assert_eq!((t.shape(), t.to_f64_vec()), (&[3usize][..], vec![7., -1., 2.]));
    assert_eq!(
        run_op("i64[2, 3]", "reduce_sum", "axes=[1]", i64t(&[2, 3], &[1, 2, 3, 4, 5, 6])).to_f64_vec(),
        vec![6., 15.]
    );
}

#[test]
fn reduce_prims_over_empty_axes_give_the_identity() {
    let e = || f32t(&[2, 0], &[]);
    assert_eq!(run_op("f32[2, 0]", "reduce_sum", "axes=[1]", e()).to_f64_vec(), vec![0., 0.]);
    assert_eq!(run_op("f32[2, 0]", "reduce_prod", "axes=[1]", e()).to_f64_vec(), vec![1., 1.]);
    assert_eq!(run_op("f32[2, 0]", "reduce_max", "axes=[1]", e()).to_f64_vec(), vec![f64::NEG_INFINITY; 2]);
    assert_eq!(run_op("f32[2, 0]", "reduce_min", "axes=[-1]", e()).to_f64_vec(), vec![f64::INFINITY; 2]);
    let t = run_op("f32[2, 0]", "reduce_sum", "axes=[0]", e());
    assert_eq!(t.shape(), &[0]);
    let t = run_op("i64[0]", "reduce_max", "axes=[0]", i64t(&[0], &[]));
    assert_eq!(ints(&t), (DType::I64, vec![i64::MIN]));
    let t = run_op("i32[0]", "reduce_min", "axes=[0]", i32t(&[0], &[]));
    assert_eq!(ints(&t), (DType::I32, vec![i32::MAX as i64]));
    let t = run_op("i32[0]", "reduce_max", "axes=[0]", i32t(&[0], &[]));
    assert_eq!(ints(&t), (DType::I32, vec![i32::MIN as i64]));
    let t = run_op("i64[0]", "reduce_prod", "axes=[0]", i64t(&[0], &[]));
    assert_eq!(ints(&t), (DType::I64, vec![1]));
    let t = run_op("bool[0]", "reduce_max", "axes=[0]", boolt(&[0], &[]));
    assert_eq!(bools(&t), vec![false]);
    let t = run_op("bool[0]", "reduce_min", "axes=[0]", boolt(&[0], &[]));
    assert_eq!(bools(&t), vec![true]);
}

#[test]
fn reduce_max_min_propagate_nan_and_order_signed_zeros() {
    let x = f32t(&[2, 3], &[1., f32::NAN, 3., f32::NEG_INFINITY, -0.0, 0.0]);
    let mx = run_op("f32[2, 3]", "reduce_max", "axes=[1]", x.clone()).to_f64_vec();
    assert!(mx[0].is_nan());
    assert!(mx[1] == 0.0 && mx[1].is_sign_positive());
    let mn = run_op("f32[2, 3]", "reduce_min", "axes=[1]", x).to_f64_vec();
    assert!(mn[0].is_nan());
    assert_eq!(mn[1], f64::NEG_INFINITY);
    let t = run_op("f32[2]", "reduce_min", "axes=[0]", f32t(&[2], &[0.0, -0.0])).to_f64_vec();
    assert!(t[0] == 0.0 && t[0].is_sign_negative());
    // Sum starts from the first element: the sum of [-0.0] is -0.0; +inf + -inf is NaN.
    let t = run_op("f32[1]", "reduce_sum", "axes=[0]", f32t(&[1], &[-0.0])).to_f64_vec();
    assert!(t[0] == 0.0 && t[0].is_sign_negative());
    let t = run_op("f32[2]", "reduce_sum", "axes=[0]", f32t(&[2], &[f32::INFINITY, f32::NEG_INFINITY])).to_f64_vec();
    assert!(t[0].is_nan());
}

#[test]
fn reduce_prims_on_ints_wrap_and_on_bools_are_any_all() {
    let t = run_op("i32[2]", "reduce_sum", "axes=[0]", i32t(&[2], &[i32::MAX, 1]));
    assert_eq!(ints(&t), (DType::I32, vec![i32::MIN as i64]));
    let t = run_op("i64[2]", "reduce_sum", "axes=[0]", i64t(&[2], &[i64::MAX, 2]));
    assert_eq!(ints(&t), (DType::I64, vec![i64::MIN + 1]));
    let t = run_op("i32[3]", "reduce_prod", "axes=[0]", i32t(&[3], &[65536, 65536, 3]));
    assert_eq!(ints(&t), (DType::I32, vec![0]));
    let b = boolt(&[2, 2], &[true, false, true, true]);
    let t = run_op("bool[2, 2]", "reduce_max", "axes=[1]", b.clone());
    assert_eq!(bools(&t), vec![true, true]);
    let t = run_op("bool[2, 2]", "reduce_min", "axes=[1]", b);
    assert_eq!(bools(&t), vec![false, true]);
    assert!(parse_err("bool[2]", "reduce_sum", "axes=[0]").contains("numeric"));
    assert!(parse_err("bool[2]", "reduce_prod", "axes=[0]").contains("numeric"));
}

#[test]
fn f32_accumulation_differs_from_precise_mode() {
    // 1.0 followed by 1000 tiny terms: each is lost against 1.0 in f32 but not in f64.
    let n = 1000;
    let mut v = vec![1.0f32];
    v.extend(std::iter::repeat_n(1e-8f32, n));
    let x = f32t(&[n + 1], &v);
    let ty = format!("f32[{}]", n + 1);
    let want_precise: f64 = v.iter().fold(0.0f64, |a, &b| a + b as f64);
    for op in ["reduce_sum", "sum"] {
        let attrs = if op == "sum" { "" } else { "axes=[0]" };
        let f32_mode = run_op(&ty, op, attrs, x.clone());
        assert_eq!(f32_mode.dtype(), DType::F32);
        assert_eq!(f32_mode.to_f64_vec(), vec![1.0], "{op}");
        let p = run_op_precise(&ty, op, attrs, x.clone());
        assert_eq!(p.dtype(), DType::F64);
        assert_eq!(p.to_f64_vec(), vec![want_precise], "{op}");
        assert!(want_precise > 1.0 + 0.9e-5);
    }
    // mean is a composite: f64 internally, rounded once, even in f32 mode.
    let m = run_op(&ty, "mean", "", x).to_f64_vec()[0];
    assert_eq!(m, ((want_precise / (n + 1) as f64) as f32) as f64);
}

#[test]
fn reduce_argmax_first_maximum_and_nan() {
    let x = f32t(&[2, 3], &[1., 3., 3., 2., f32::NAN, f32::NAN]);
    let t = run_op("f32[2, 3]", "reduce_argmax", "axis=1", x);
    assert_eq!(ints(&t), (DType::I64, vec![1, 1]));
    let t = run_op("f32[2, 2]", "reduce_argmax", "axis=-2", f32t(&[2, 2], &[1., 5., 4., 5.]));
    assert_eq!(ints(&t), (DType::I64, vec![1, 0]));
    let t = run_op("i32[4]", "reduce_argmax", "axis=0", i32t(&[4], &[-3, 7, 7, 2]));
    assert_eq!(ints(&t), (DType::I64, vec![1]));
    let t = run_op("f32[3]", "reduce_argmax", "axis=0", f32t(&[3], &[f32::NAN, f32::INFINITY, f32::NAN]));
    assert_eq!(ints(&t), (DType::I64, vec![0]));
    // Size-1 axis, and an empty kept dim.
    let t = run_op("f32[2, 1]", "reduce_argmax", "axis=1", f32t(&[2, 1], &[9., 8.]));
    assert_eq!(ints(&t), (DType::I64, vec![0, 0]));
    let t = run_op("f32[0, 3]", "reduce_argmax", "axis=1", f32t(&[0, 3], &[]));
    assert_eq!(t.shape(), &[0]);
    assert_eq!(infer_ty("f32[2, 3]", "reduce_argmax", "axis=0"), "i64[3]");
    // Empty reduced axis: infer error when static, EvalError when symbolic.
    assert!(parse_err("f32[2, 0]", "reduce_argmax", "axis=1").contains("size 0"));
    let err = run(&unary_graph("f32[2, n]", "reduce_argmax", "axis=1"), &[f32t(&[2, 0], &[])]).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::Invalid(_), .. }), "{err}");
    assert!(parse_err("bool[2]", "reduce_argmax", "axis=0").contains("numeric"));
}

#[test]
fn reduce_prims_symbolic_infer() {
    assert_eq!(infer_ty("f32[batch, 4]", "reduce_sum", "axes=[1]"), "f32[batch]");
    assert_eq!(infer_ty("f32[batch, 4]", "reduce_max", "axes=[0]"), "f32[4]");
    assert_eq!(infer_ty("f32[batch, seq, 4]", "reduce_min", "axes=[-1, 0]"), "f32[seq]");
    assert_eq!(infer_ty("i32[batch, 4]", "reduce_prod", "axes=[]"), "i32[batch, 4]");
    assert_eq!(infer_ty("f32[batch, 4]", "reduce_argmax", "axis=0"), "i64[4]");
    // A symbolic reduced axis evaluates at run time.
    let src = unary_graph("f32[batch, 2]", "reduce_sum", "axes=[0]");
    let out = run(&src, &[f32t(&[3, 2], &X23)]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![9., 12.]);
}

// --- High-level ----------------------------------------------------------------------------

#[test]
fn sum_axes_keepdim_and_dtypes() {
    let x = || f32t(&[2, 3], &X23);
    let t = run_op("f32[2, 3]", "sum", "", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[][..], vec![21.]));
    let t = run_op("f32[2, 3]", "sum", "axes=[-1], keepdim=true", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 1][..], vec![6., 15.]));
    let t = run_op("f32[2, 3]", "sum", "keepdim=true", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[1usize, 1][..], vec![21.]));
    let t = run_op("f32[2, 3]", "sum", "axes=[0]", x());
    assert_eq!(t.to_f64_vec(), vec![5., 7., 9.]);
    // Ints and bools sum to i64, without i32 wrapping.
    let t = run_op("i32[2]", "sum", "", i32t(&[2], &[i32::MAX, 1]));
    assert_eq!(ints(&t), (DType::I64, vec![i32::MAX as i64 + 1]));
    let t = run_op("bool[2, 2]", "sum", "axes=[1]", boolt(&[2, 2], &[true, true, false, true]));
    assert_eq!(ints(&t), (DType::I64, vec![2, 1]));
    // Empty: the identity; size-1.
    let t = run_op("f32[3, 0]", "sum", "axes=[1]", f32t(&[3, 0], &[]));
    assert_eq!(t.to_f64_vec(), vec![0., 0., 0.]);
    let t = run_op("f32[1]", "sum", "", f32t(&[1], &[2.5]));
    assert_eq!(t.to_f64_vec(), vec![2.5]);
    assert_eq!(infer_ty("f32[batch, 4]", "sum", "axes=[1]"), "f32[batch]");
    assert_eq!(infer_ty("f32[batch, 4]", "sum", "axes=[1], keepdim=true"), "f32[batch, 1]");
    assert_eq!(infer_ty("f32[batch, 4]", "sum", "keepdim=true"), "f32[1, 1]");
    assert_eq!(infer_ty("bf16[batch, 4]", "sum", "axes=[0]"), "bf16[4]");
    assert_eq!(infer_ty("i32[batch, 4]", "sum", "axes=[0]"), "i64[4]");
    assert_eq!(infer_ty("f32[]", "sum", ""), "f32[]");
}

#[test]
fn prod_hand_computed_and_dtypes() {
    let t = run_op("f32[2, 3]", "prod", "axes=[1]", f32t(&[2, 3], &X23));
    assert_eq!(t.to_f64_vec(), vec![6., 120.]);
    let t = run_op("i32[3]", "prod", "", i32t(&[3], &[65536, 65536, 3]));
    assert_eq!(ints(&t), (DType::I64, vec![3 << 32]));
    let t = run_op("bool[3]", "prod", "", boolt(&[3], &[true, false, true]));
    assert_eq!(ints(&t), (DType::I64, vec![0]));
    let t = run_op("f32[0]", "prod", "", f32t(&[0], &[]));
    assert_eq!(t.to_f64_vec(), vec![1.]);
    let t = run_op("f32[2]", "prod", "", f32t(&[2], &[f32::INFINITY, 0.]));
    assert!(t.to_f64_vec()[0].is_nan());
    let t = run_op_precise("f32[2, 3]", "prod", "axes=[0], keepdim=true", f32t(&[2, 3], &X23));
    assert_eq!((t.shape(), t.to_f64_vec()), (&[1usize, 3][..], vec![4., 10., 18.]));
}

#[test]
fn mean_hand_computed_empty_and_dtype() {
    let t = run_op("f32[2, 2]", "mean", "axes=[1]", f32t(&[2, 2], &[1., 2., 3., 4.]));
    assert_eq!(t.to_f64_vec(), vec![1.5, 3.5]);
    let t = run_op("f32[2, 2]", "mean", "axes=[-2], keepdim=true", f32t(&[2, 2], &[1., 2., 3., 4.]));
    assert_eq!((t.shape(), t.to_f64_vec()), (&[1usize, 2][..], vec![2., 3.]));
    let t = run_op("f32[2, 0]", "mean", "axes=[1]", f32t(&[2, 0], &[]));
    assert!(t.to_f64_vec().iter().all(|v| v.is_nan()));
    let t = run_op("f32[3]", "mean", "", f32t(&[3], &[1., f32::INFINITY, 2.]));
    assert_eq!(t.to_f64_vec(), vec![f64::INFINITY]);
    let t = run_op_precise("f32[3]", "mean", "", f32t(&[3], &[1., 2., 2.]));
    assert_eq!(t.to_f64_vec(), vec![5.0 / 3.0]);
    assert!(parse_err("i64[3]", "mean", "").contains("float"));
    assert_eq!(infer_ty("f16[batch, 4]", "mean", "axes=[0]"), "f16[4]");
}

#[test]
fn var_and_std_corrections_and_small_n() {
    let x = || f32t(&[4], &[1., 2., 3., 4.]);
    // mean 2.5, squared deviations sum to 5.
    assert_close(&run_op("f32[4]", "var", "", x()).to_f64_vec(), &[(5.0f64 / 3.0) as f32 as f64], 0.0);
    assert_eq!(run_op("f32[4]", "var", "correction=0", x()).to_f64_vec(), vec![1.25]);
    assert_close(&run_op("f32[4]", "std", "", x()).to_f64_vec(), &[(5.0f64 / 3.0).sqrt() as f32 as f64], 0.0);
    assert_eq!(run_op_precise("f32[4]", "std", "correction=0", x()).to_f64_vec(), vec![1.25f64.sqrt()]);
    assert_eq!(run_op_precise("f32[4]", "var", "", x()).to_f64_vec(), vec![5.0 / 3.0]);
    // N = 1 with correction 1: 0 / 0.
    let t = run_op("f32[1]", "var", "", f32t(&[1], &[7.]));
    assert!(t.to_f64_vec()[0].is_nan());
    let t = run_op("f32[1]", "std", "correction=0", f32t(&[1], &[7.]));
    assert_eq!(t.to_f64_vec(), vec![0.]);
    // N < correction: positive / 0 = inf.
    assert_eq!(run_op("f32[2]", "var", "correction=3", f32t(&[2], &[1., 3.])).to_f64_vec(), vec![f64::INFINITY]);
    // Empty: NaN. Infinite input: NaN.
    assert!(run_op("f32[0]", "var", "", f32t(&[0], &[])).to_f64_vec()[0].is_nan());
    assert!(run_op("f32[2]", "std", "", f32t(&[2], &[1., f32::INFINITY])).to_f64_vec()[0].is_nan());
    // Per-row with keepdim.
    let t = run_op("f32[2, 3]", "var", "axes=[1], keepdim=true", f32t(&[2, 3], &[1., 2., 3., 2., 4., 6.]));
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 1][..], vec![1., 4.]));
    assert!(parse_err("i32[3]", "std", "").contains("float"));
    assert_eq!(infer_ty("f32[batch, 4]", "std", "axes=[1], keepdim=true"), "f32[batch, 1]");
}

#[test]
fn amax_amin_nan_keepdim_and_empty_errors() {
    let x = f32t(&[2, 3], &[1., f32::NAN, 3., -1., -5., f32::INFINITY]);
    let t = run_op("f32[2, 3]", "amax", "axes=[1]", x.clone()).to_f64_vec();
    assert!(t[0].is_nan());
    assert_eq!(t[1], f64::INFINITY);
    let t = run_op("f32[2, 3]", "amin", "axes=[-1], keepdim=true", x.clone());
    assert_eq!(t.shape(), &[2, 1]);
    let t = t.to_f64_vec();
    assert!(t[0].is_nan());
    assert_eq!(t[1], -5.);
    let t = run_op("f32[2, 3]", "amax", "axes=[0]", x).to_f64_vec();
    assert_eq!((t[0], t[2]), (1., f64::INFINITY));
    assert!(t[1].is_nan());
    let t = run_op("i32[2, 2]", "amax", "", i32t(&[2, 2], &[3, -9, 8, 1]));
    assert_eq!(ints(&t), (DType::I32, vec![8]));
    let t = run_op("bool[2]", "amin", "", boolt(&[2], &[true, false]));
    assert_eq!(bools(&t), vec![false]);
    let t = run_op_precise("f32[1, 3]", "amax", "axes=[0]", f32t(&[1, 3], &[1., 2., 3.]));
    assert_eq!(t.to_f64_vec(), vec![1., 2., 3.]);
    // No identity: an error over a size-0 axis, but a 0 in a kept dim is fine.
    assert!(parse_err("f32[2, 0]", "amax", "axes=[1]").contains("size 0"));
    assert!(parse_err("f32[2, 0]", "amin", "").contains("size 0"));
    let t = run_op("f32[0, 3]", "amax", "axes=[1]", f32t(&[0, 3], &[]));
    assert_eq!(t.shape(), &[0]);
    let err = run(&unary_graph("f32[n, 3]", "amin", "axes=[0]"), &[f32t(&[0, 3], &[])]).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::Invalid(_), .. }), "{err}");
    assert_eq!(infer_ty("f32[batch, 4]", "amax", "axes=[0]"), "f32[4]");
}

#[test]
fn argmax_argmin_first_occurrence_and_nan() {
    let x = || f32t(&[2, 3], &[2., 7., 7., 5., f32::NAN, -1.]);
    let t = run_op("f32[2, 3]", "argmax", "axis=1", x());
    assert_eq!(ints(&t), (DType::I64, vec![1, 1]));
    let t = run_op("f32[2, 3]", "argmin", "axis=-1", x());
    assert_eq!(ints(&t), (DType::I64, vec![0, 1]));
    let t = run_op("f32[2, 3]", "argmin", "axis=0, keepdim=true", x());
    assert_eq!((t.shape(), ints(&t)), (&[1usize, 3][..], (DType::I64, vec![0, 1, 1])));
    let t = run_op("i64[4]", "argmin", "axis=0", i64t(&[4], &[3, -2, 5, -2]));
    assert_eq!(ints(&t), (DType::I64, vec![1]));
    let t = run_op("f32[3]", "argmin", "axis=0", f32t(&[3], &[f32::NEG_INFINITY, f32::NAN, f32::NAN]));
    assert_eq!(ints(&t), (DType::I64, vec![1]));
    let t = run_op_precise("f32[3]", "argmax", "axis=0", f32t(&[3], &[-0.0, 0.0, -1.0]));
    assert_eq!(ints(&t), (DType::I64, vec![0]));
    assert_eq!(infer_ty("f32[batch, 4]", "argmax", "axis=1, keepdim=true"), "i64[batch, 1]");
    assert_eq!(infer_ty("f32[batch, 4]", "argmin", "axis=0"), "i64[4]");
    assert!(parse_err("f32[0, 3]", "argmax", "axis=0").contains("size 0"));
    assert!(parse_err("bool[3]", "argmin", "axis=0").contains("numeric"));
    assert!(parse_err("f32[3]", "argmax", "").contains("`axis` is required"));
    let err = run(&unary_graph("f32[n]", "argmin", "axis=0"), &[f32t(&[0], &[])]).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::Invalid(_), .. }), "{err}");
}

#[test]
fn logsumexp_stable_and_infinities() {
    let ln2 = 2f64.ln();
    let t = run_op("f32[2, 2]", "logsumexp", "axes=[1]", f32t(&[2, 2], &[0., 0., 1000., 1000.]));
    assert_eq!(t.to_f64_vec(), vec![ln2 as f32 as f64, (1000.0 + ln2) as f32 as f64]);
    let t = run_op_precise("f32[2]", "logsumexp", "", f32t(&[2], &[0., 3f32.ln()]));
    assert_close(&t.to_f64_vec(), &[(1.0 + (3f32.ln() as f64).exp()).ln()], 1e-15);
    let ninf = f32::NEG_INFINITY;
    let t = run_op("f32[2, 2]", "logsumexp", "axes=[-1], keepdim=true", f32t(&[2, 2], &[ninf, ninf, ninf, 0.]));
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 1][..], vec![f64::NEG_INFINITY, 0.]));
    let t = run_op("f32[3]", "logsumexp", "", f32t(&[3], &[1., f32::INFINITY, ninf]));
    assert_eq!(t.to_f64_vec(), vec![f64::INFINITY]);
    let t = run_op("f32[3]", "logsumexp", "", f32t(&[3], &[1., f32::NAN, f32::INFINITY]));
    assert!(t.to_f64_vec()[0].is_nan());
    let t = run_op("f32[0]", "logsumexp", "", f32t(&[0], &[]));
    assert_eq!(t.to_f64_vec(), vec![f64::NEG_INFINITY]);
    assert!(parse_err("i64[3]", "logsumexp", "").contains("float"));
    assert_eq!(infer_ty("f32[batch, n]", "logsumexp", "axes=[1]"), "f32[batch]");
}

#[test]
fn every_reduction_runs_in_precise_mode() {
    let x = || f32t(&[2, 3], &X23);
    let cases: [(&str, &str, Vec<f64>); 15] = [
        ("reduce_sum", "axes=[1]", vec![6., 15.]),
        ("reduce_prod", "axes=[1]", vec![6., 120.]),
        ("reduce_max", "axes=[1]", vec![3., 6.]),
        ("reduce_min", "axes=[1]", vec![1., 4.]),
        ("reduce_argmax", "axis=1", vec![2., 2.]),
        ("sum", "axes=[1]", vec![6., 15.]),
        ("mean", "axes=[1]", vec![2., 5.]),
        ("var", "axes=[1]", vec![1., 1.]),
        ("std", "axes=[1]", vec![1., 1.]),
        ("prod", "axes=[1]", vec![6., 120.]),
        ("amax", "axes=[1]", vec![3., 6.]),
        ("amin", "axes=[1]", vec![1., 4.]),
        ("argmax", "axis=1", vec![2., 2.]),
        ("argmin", "axis=1", vec![0., 0.]),
        (
            "logsumexp",
            "axes=[1]",
            vec![(1f64.exp() + 2f64.exp() + 3f64.exp()).ln(), (4f64.exp() + 5f64.exp() + 6f64.exp()).ln()],
        ),
    ];
    for (op, attrs, want) in cases {
        let got = run_op_precise("f32[2, 3]", op, attrs, x()).to_f64_vec();
        assert_close(&got, &want, 1e-12);
    }
}

// --- Errors --------------------------------------------------------------------------------

#[test]
fn bad_attributes_and_arguments_are_typed_errors_at_the_node() {
    let cases = [
        ("f32[2, 3]", "reduce_sum", "axes=[1, -1]", "listed twice"),
        ("f32[2, 3]", "sum", "axes=[0, 0]", "listed twice"),
        ("f32[2, 3]", "reduce_max", "axes=[2]", "out of range"),
        ("f32[2, 3]", "mean", "axes=[-3]", "out of range"),
        ("f32[2, 3]", "argmax", "axis=2", "out of range"),
        ("f32[2, 3]", "reduce_argmax", "axis=-3", "out of range"),
        ("f32[2, 3]", "reduce_sum", "", "`axes` is required"),
        ("f32[2, 3]", "reduce_sum", "axes=1", "must be a int list"),
        ("f32[2, 3]", "var", "correction=0.5", "must be a int"),
        ("f32[2, 3]", "sum", "keepdim=1", "must be a bool"),
        ("f32[2, 3]", "sum", "axis=1", "unknown attribute"),
        ("f32[]", "argmax", "axis=0", "out of range"),
    ];
    for (ty, op, attrs, needle) in cases {
        let msg = parse_err(ty, op, attrs);
        assert!(msg.contains(needle), "{op} {{{attrs}}}: {msg}");
    }
    let err = ladder::text::parse("graph g(%x: f32[2]) {\n  %1 = sum(%x, %x)\n  return %1\n}").unwrap_err();
    assert!(err.message.contains("takes 1 arguments"), "{err}");
    assert_eq!(err.line, 2);
}

#[test]
fn infer_errors_are_typed() {
    let f23 = ty(DType::F32, &[Dim::new(2), Dim::new(3)]);
    let e = infer_op(OpKind::ReduceSum, vec![("axes", AttrValue::Ints(vec![0, -2]))], std::slice::from_ref(&f23))
        .unwrap_err();
    assert!(matches!(e, OpError::AttrValue { name: "axes", .. }), "{e}");
    let e = infer_op(OpKind::Sum, vec![("axes", AttrValue::Ints(vec![5]))], std::slice::from_ref(&f23)).unwrap_err();
    assert_eq!(e, OpError::Axis { axis: 5, rank: 2 });
    let e = infer_op(OpKind::Argmin, vec![("axis", AttrValue::Int(-3))], std::slice::from_ref(&f23)).unwrap_err();
    assert_eq!(e, OpError::Axis { axis: -3, rank: 2 });
    let i = ty(DType::I64, &[Dim::new(2)]);
    let e = infer_op(OpKind::Logsumexp, vec![], &[i]).unwrap_err();
    assert!(matches!(e, OpError::DType { arg: 0, got: DType::I64, .. }), "{e}");
    let b = ty(DType::Bool, &[Dim::new(2)]);
    let e = infer_op(OpKind::ReduceSum, vec![("axes", AttrValue::Ints(vec![0]))], &[b]).unwrap_err();
    assert!(matches!(e, OpError::DType { arg: 0, got: DType::Bool, .. }), "{e}");
    let empty = ty(DType::F32, &[Dim::new(0)]);
    let e = infer_op(OpKind::Amax, vec![], &[empty]).unwrap_err();
    assert!(matches!(e, OpError::Shape(_)), "{e}");
    let e = infer_op(OpKind::Mean, vec![], &[f23.clone(), f23.clone()]).unwrap_err();
    assert!(matches!(e, OpError::Arity { got: 2, .. }), "{e}");
    let sym = ty(DType::F32, &[Dim::sym("batch"), Dim::new(4)]);
    let t =
        infer_op(OpKind::Var, vec![("axes", AttrValue::Ints(vec![-1])), ("keepdim", AttrValue::Bool(true))], &[sym])
            .unwrap();
    assert_eq!(t.to_string(), "f32[batch, 1]");
    assert_eq!(
        ladder::ops::reduce::reduced_shape(&Shape(vec![Dim::sym("b"), Dim::new(3), Dim::new(5)].into()), &[0, 2], true)
            .to_string(),
        "[1, 3, 1]"
    );
}

// --- Scans ---------------------------------------------------------------------------------

#[test]
fn cumsum_hand_computed_rounded_once_and_wrapping() {
    let x = || f32t(&[2, 3], &X23);
    let t = run_op("f32[2, 3]", "cumsum", "axis=1", x());
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 3][..], vec![1., 3., 6., 4., 9., 15.]));
    assert_eq!(run_op("f32[2, 3]", "cumsum", "axis=-1", x()).to_f64_vec(), vec![1., 3., 6., 4., 9., 15.]);
    assert_eq!(run_op("f32[2, 3]", "cumsum", "axis=0", x()).to_f64_vec(), vec![1., 2., 3., 5., 7., 9.]);
    // Each prefix is summed in f64 and rounded once: in f32, 1e8 + 1 rounds back to 1e8, but
    // the third prefix is exactly 1 (a running f32 sum would give 0).
    let t = run_op("f32[3]", "cumsum", "axis=0", f32t(&[3], &[1e8, 1., -1e8]));
    assert_eq!(t.to_f64_vec(), vec![1e8, 1e8, 1.]);
    // f16: spacing 2 at 2048; 2049 rounds to even (2048), 2050 is exact.
    let h = Tensor::from_f64_as(DType::F16, &[3], &[2048., 1., 1.]).unwrap();
    let t = run_op("f16[3]", "cumsum", "axis=0", h);
    assert_eq!((t.dtype(), t.to_f64_vec()), (DType::F16, vec![2048., 2048., 2050.]));
    // Precise mode keeps the f64 sums.
    let t = run_op_precise("f32[3]", "cumsum", "axis=0", f32t(&[3], &[1e8, 1., -1e8]));
    assert_eq!(t.to_f64_vec(), vec![1e8, 1e8 + 1., 1.]);
    // Integers keep their dtype and wrap.
    let t = run_op("i32[3]", "cumsum", "axis=0", i32t(&[3], &[i32::MAX, 1, 1]));
    assert_eq!(ints(&t), (DType::I32, vec![i32::MAX as i64, i32::MIN as i64, i32::MIN as i64 + 1]));
    let t = run_op("i64[2]", "cumsum", "axis=0", i64t(&[2], &[i64::MAX, 1]));
    assert_eq!(ints(&t), (DType::I64, vec![i64::MAX, i64::MIN]));
    // Empty and size-1 axes.
    let t = run_op("f32[2, 0]", "cumsum", "axis=1", f32t(&[2, 0], &[]));
    assert_eq!(t.shape(), &[2, 0]);
    let t = run_op("f32[0, 3]", "cumsum", "axis=1", f32t(&[0, 3], &[]));
    assert_eq!(t.shape(), &[0, 3]);
    let t = run_op("f32[3, 1]", "cumsum", "axis=1", f32t(&[3, 1], &[1., -0., 3.]));
    assert_eq!(t.to_f64_vec(), vec![1., -0., 3.]);
    assert!(t.to_f64_vec()[1].is_sign_negative(), "a size-1 scan is the identity, -0 included");
    // A symbolic axis.
    assert_eq!(infer_ty("f32[n, 4]", "cumsum", "axis=0"), "f32[n, 4]");
}

#[test]
fn cumsum_rejects_bool_scalars_and_bad_axes() {
    for (ty, attrs, needle) in [
        ("bool[3]", "axis=0", "numeric"),
        ("f32[]", "axis=0", "out of range"),
        ("f32[2, 3]", "axis=2", "out of range"),
        ("f32[2, 3]", "axis=-3", "out of range"),
        ("f32[2, 3]", "", "`axis` is required"),
        ("f32[2, 3]", "axes=[1]", "unknown attribute"),
    ] {
        let msg = parse_err(ty, "cumsum", attrs);
        assert!(msg.contains(needle), "cumsum {{{attrs}}} on {ty}: {msg}");
    }
}
