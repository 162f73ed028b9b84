//! Indexing ops on the interpreter: gather, scatter_add, embedding, masked_fill, tril, triu.
//! Hand-computed values, negative and out-of-range indices, broadcasting masks, empty and
//! size-1 dims, accumulation order, symbolic shapes, and typed errors at the node's line.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::ir::{AttrValue, Attrs};
use ladder::ops::{self, OpError};
use ladder::{DType, OpKind, Shape, Tensor, TensorData, TensorType};

use crate::common::*;

fn precise() -> Options {
    Options { precise: true, ..Default::default() }
}

fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

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

/// A one-op graph over the given inputs (`%a`, `%b`, `%c` in order).
fn graph(types: &[&str], op: &str, attrs: &str) -> String {
    let names = ["a", "b", "c"];
    let params: Vec<String> = types.iter().zip(names).map(|(t, n)| format!("%{n}: {t}")).collect();
    let args: Vec<String> = names[..types.len()].iter().map(|n| format!("%{n}")).collect();
    format!("graph g({}) {{\n  %r = {op}({}) {{{attrs}}}\n  return %r\n}}", params.join(", "), args.join(", "))
}

fn run_op(types: &[&str], op: &str, attrs: &str, inputs: &[Tensor]) -> Tensor {
    let src = graph(types, op, attrs);
    run(&src, inputs).unwrap_or_else(|e| panic!("{e}\n{src}")).outputs.remove(0)
}

fn run_op_precise(types: &[&str], op: &str, attrs: &str, inputs: &[Tensor]) -> Tensor {
    let src = graph(types, op, attrs);
    interp::run(&parse(&src), inputs, &precise()).unwrap_or_else(|e| panic!("{e}\n{src}")).outputs.remove(0)
}

fn run_err(types: &[&str], op: &str, attrs: &str, inputs: &[Tensor]) -> EvalError {
    match run(&graph(types, op, attrs), inputs) {
        Err(InterpError::Eval { error, .. }) => error,
        other => panic!("expected an eval error, got {other:?}"),
    }
}

fn infer_ty(types: &[&str], op: &str, attrs: &str) -> String {
    let g = parse(&graph(types, op, attrs));
    g.ty(g.outputs()[0].value).to_string()
}

/// The parse error of a one-op graph; asserts it points at the node's line.
fn parse_err(types: &[&str], op: &str, attrs: &str) -> String {
    let err = ladder::text::parse(&graph(types, op, attrs)).unwrap_err();
    assert_eq!(err.line, 2, "{err}");
    err.message
}

fn ty(dtype: DType, dims: &[u64]) -> TensorType {
    TensorType::new(dtype, Shape::from_static(dims))
}

fn infer_op(op: OpKind, attrs: Vec<(&str, AttrValue)>, args: &[TensorType]) -> Result<TensorType, OpError> {
    let attrs = Attrs::resolve(op.spec().attrs, attrs.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
        .expect("attrs resolve");
    let refs: Vec<&TensorType> = args.iter().collect();
    ops::infer(op, &attrs, &refs)
}

// --- gather --------------------------------------------------------------------------------

#[test]
fn gather_hand_computed() {
    let x = || f32t(&[2, 2], &[1., 2., 3., 4.]);
    let t = run_op(&["f32[2, 2]", "i64[2, 2]"], "gather", "axis=1", &[x(), i64t(&[2, 2], &[0, 0, 1, 0])]);
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 2][..], vec![1., 1., 4., 3.]));
    // axis 0 with a smaller index; negative axis and negative indices.
    let t = run_op(&["f32[2, 2]", "i64[1, 2]"], "gather", "axis=0", &[x(), i64t(&[1, 2], &[1, 0])]);
    assert_eq!((t.shape(), t.to_f64_vec()), (&[1usize, 2][..], vec![3., 2.]));
    let t = run_op(&["f32[2, 2]", "i32[2, 3]"], "gather", "axis=-1", &[x(), i32t(&[2, 3], &[-1, -2, 1, -2, 0, -1])]);
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 3][..], vec![2., 1., 2., 3., 3., 4.]));
    // Any dtype of x.
    let t = run_op(&["i64[3]", "i64[4]"], "gather", "axis=0", &[i64t(&[3], &[7, 8, 9]), i64t(&[4], &[2, 2, 0, -2])]);
    assert_eq!(ints(&t), (DType::I64, vec![9, 9, 7, 8]));
    let t = run_op(&["bool[2]", "i64[3]"], "gather", "axis=0", &[boolt(&[2], &[true, false]), i64t(&[3], &[1, 0, 1])]);
    assert_eq!(bools(&t), vec![false, true, false]);
    // Empty index, and a size-1 x dim.
    let t = run_op(&["f32[2, 2]", "i64[2, 0]"], "gather", "axis=1", &[x(), i64t(&[2, 0], &[])]);
    assert_eq!(t.shape(), &[2, 0]);
    let t = run_op(
        &["f32[1, 3]", "i64[1, 2]"],
        "gather",
        "axis=0",
        &[f32t(&[1, 3], &[5., 6., 7.]), i64t(&[1, 2], &[0, -1])],
    );
    assert_eq!(t.to_f64_vec(), vec![5., 6.]);
    let t =
        run_op_precise(&["f32[3]", "i64[2]"], "gather", "axis=0", &[f32t(&[3], &[0.1, 0.2, 0.3]), i64t(&[2], &[2, 0])]);
    assert_eq!(t.to_f64_vec(), vec![0.3f32 as f64, 0.1f32 as f64]);
}

#[test]
fn gather_out_of_range_is_a_typed_runtime_error() {
    let x = || f32t(&[2, 2], &[1., 2., 3., 4.]);
    let e = run_err(&["f32[2, 2]", "i64[2, 1]"], "gather", "axis=1", &[x(), i64t(&[2, 1], &[0, 2])]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: 2, size: 2 });
    let e = run_err(&["f32[2, 2]", "i64[2, 1]"], "gather", "axis=0", &[x(), i64t(&[2, 1], &[-3, 0])]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: -3, size: 2 });
    let e = run_err(&["f32[2, 0]", "i64[2, 1]"], "gather", "axis=1", &[f32t(&[2, 0], &[]), i64t(&[2, 1], &[0, 0])]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: 0, size: 0 });
    let e = run_err(&["f32[2]", "i64[1]"], "gather", "axis=0", &[f32t(&[2], &[1., 2.]), i64t(&[1], &[i64::MIN])]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: i64::MIN, size: 2 });
    // An index larger than x off the axis, only detectable at run time with symbols.
    let src = graph(&["f32[2, n]", "i64[2, m]"], "gather", "axis=0");
    let err = run(&src, &[f32t(&[2, 1], &[1., 2.]), i64t(&[2, 2], &[0, 0, 0, 0])]).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::Invalid(_), .. }), "{err}");
}

#[test]
fn gather_symbolic_and_bad_inputs() {
    assert_eq!(infer_ty(&["f32[batch, 5]", "i64[batch, 3]"], "gather", "axis=1"), "f32[batch, 3]");
    assert_eq!(infer_ty(&["f32[batch, 5]", "i64[k, 5]"], "gather", "axis=0"), "f32[k, 5]");
    let cases: [(&[&str], &str, &str); 6] = [
        (&["f32[2, 2]", "f32[2, 2]"], "axis=1", "i32 or i64"),
        (&["f32[2, 2]", "bool[2, 2]"], "axis=1", "i32 or i64"),
        (&["f32[2, 2]", "i64[2]"], "axis=0", "rank 2"),
        (&["f32[2, 2]", "i64[2, 2]"], "axis=2", "out of range"),
        (&["f32[2, 2]", "i64[3, 1]"], "axis=1", "dim 0"),
        (&["f32[2, 2]", "i64[2, 2]"], "", "`axis` is required"),
    ];
    for (types, attrs, needle) in cases {
        let msg = parse_err(types, "gather", attrs);
        assert!(msg.contains(needle), "{types:?} {attrs}: {msg}");
    }
    let e = infer_op(OpKind::Gather, vec![("axis", AttrValue::Int(0))], &[ty(DType::F32, &[2]), ty(DType::F32, &[2])])
        .unwrap_err();
    assert_eq!(e, OpError::DType { arg: 1, got: DType::F32, expected: "i32 or i64 indices".into() });
    let e = infer_op(OpKind::Gather, vec![("axis", AttrValue::Int(-2))], &[ty(DType::F32, &[2]), ty(DType::I64, &[2])])
        .unwrap_err();
    assert_eq!(e, OpError::Axis { axis: -2, rank: 1 });
    let e = infer_op(OpKind::Gather, vec![("axis", AttrValue::Int(0))], &[ty(DType::F32, &[2])]).unwrap_err();
    assert!(matches!(e, OpError::Arity { got: 1, .. }), "{e}");
}

// --- scatter_add ---------------------------------------------------------------------------

#[test]
fn scatter_add_hand_computed() {
    let types = ["f32[2, 3]", "i64[2, 3]", "f32[2, 3]"];
    let t = run_op(
        &types,
        "scatter_add",
        "axis=1",
        &[
            f32t(&[2, 3], &[0., 0., 0., 10., 10., 10.]),
            i64t(&[2, 3], &[0, 1, 0, 2, 2, -1]),
            f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]),
        ],
    );
    assert_eq!(t.to_f64_vec(), vec![4., 2., 0., 10., 10., 25.]);
    // axis 0, index smaller than x, i64 data.
    let t = run_op(
        &["i64[3, 2]", "i64[2, 1]", "i64[2, 1]"],
        "scatter_add",
        "axis=-2",
        &[i64t(&[3, 2], &[1, 1, 1, 1, 1, 1]), i64t(&[2, 1], &[2, 2]), i64t(&[2, 1], &[5, 7])],
    );
    assert_eq!(ints(&t), (DType::I64, vec![1, 1, 1, 1, 13, 1]));
    let t = run_op(
        &["i32[1]", "i64[2]", "i32[2]"],
        "scatter_add",
        "axis=0",
        &[i32t(&[1], &[i32::MAX]), i64t(&[2], &[0, 0]), i32t(&[2], &[1, 1])],
    );
    assert_eq!(ints(&t), (DType::I32, vec![i32::MIN as i64 + 1]));
    // Empty index: a copy of x.
    let t = run_op(
        &["f32[2]", "i64[0]", "f32[0]"],
        "scatter_add",
        "axis=0",
        &[f32t(&[2], &[1., 2.]), i64t(&[0], &[]), f32t(&[0], &[])],
    );
    assert_eq!(t.to_f64_vec(), vec![1., 2.]);
    assert_eq!(
        infer_ty(&["f32[batch, 4]", "i64[batch, 2]", "f32[batch, 2]"], "scatter_add", "axis=1"),
        "f32[batch, 4]"
    );
}

#[test]
fn scatter_add_accumulates_in_the_dtype_in_row_major_order() {
    let n = 1000;
    let types = ["f32[1]".to_string(), format!("i64[{n}]"), format!("f32[{n}]")];
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    let inputs = [f32t(&[1], &[1.0]), i64t(&[n], &vec![0; n]), f32t(&[n], &vec![1e-8; n])];
    let t = run_op(&types, "scatter_add", "axis=0", &inputs);
    assert_eq!(t.to_f64_vec(), vec![1.0]);
    let want = (0..n).fold(1.0f64, |a, _| a + 1e-8f32 as f64);
    let t = run_op_precise(&types, "scatter_add", "axis=0", &inputs);
    assert_eq!(t.to_f64_vec(), vec![want]);
    // Order matters in f32: 1e8 + 1 - 1e8 is 0, - 1e8 + 1e8 + 1 is 1.
    let t = run_op(
        &["f32[1]", "i64[3]", "f32[3]"],
        "scatter_add",
        "axis=0",
        &[f32t(&[1], &[0.0]), i64t(&[3], &[0, 0, 0]), f32t(&[3], &[1e8, 1.0, -1e8])],
    );
    assert_eq!(t.to_f64_vec(), vec![0.0]);
}

#[test]
fn scatter_add_errors() {
    let e = run_err(
        &["f32[2]", "i64[1]", "f32[1]"],
        "scatter_add",
        "axis=0",
        &[f32t(&[2], &[0., 0.]), i64t(&[1], &[2]), f32t(&[1], &[1.])],
    );
    assert_eq!(e, EvalError::IndexOutOfRange { index: 2, size: 2 });
    let cases: [(&[&str], &str, &str); 6] = [
        (&["f32[2]", "i64[2]", "f64[2]"], "axis=0", "dtype f64"),
        (&["f32[2]", "i64[2]", "f32[3]"], "axis=0", "src has shape"),
        (&["bool[2]", "i64[2]", "bool[2]"], "axis=0", "numeric"),
        (&["f32[2]", "f32[2]", "f32[2]"], "axis=0", "i32 or i64"),
        (&["f32[2, 2]", "i64[2, 3]", "f32[2, 3]"], "axis=0", "dim 1"),
        (&["f32[2]", "i64[2]", "f32[2]"], "axis=1", "out of range"),
    ];
    for (types, attrs, needle) in cases {
        let msg = parse_err(types, "scatter_add", attrs);
        assert!(msg.contains(needle), "{types:?} {attrs}: {msg}");
    }
}

// --- embedding -----------------------------------------------------------------------------

#[test]
fn embedding_hand_computed_and_errors() {
    let w = || f32t(&[3, 2], &[0., 1., 10., 11., 20., 21.]);
    let t = run_op(&["i64[2, 2]", "f32[3, 2]"], "embedding", "", &[i64t(&[2, 2], &[2, 0, 1, 1]), w()]);
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 2, 2][..], vec![20., 21., 0., 1., 10., 11., 10., 11.]));
    let t = run_op(&["i32[]", "f32[3, 2]"], "embedding", "", &[i32t(&[], &[1]), w()]);
    assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize][..], vec![10., 11.]));
    let t = run_op(&["i64[0]", "f32[3, 2]"], "embedding", "", &[i64t(&[0], &[]), w()]);
    assert_eq!(t.shape(), &[0, 2]);
    let t = run_op_precise(&["i64[1]", "f32[3, 2]"], "embedding", "", &[i64t(&[1], &[2]), w()]);
    assert_eq!(t.to_f64_vec(), vec![20., 21.]);
    assert_eq!(infer_ty(&["i64[batch, seq]", "f32[100, 16]"], "embedding", ""), "f32[batch, seq, 16]");
    assert_eq!(infer_ty(&["i32[n]", "bf16[vocab, d]"], "embedding", ""), "bf16[n, d]");

    let e = run_err(&["i64[2]", "f32[3, 2]"], "embedding", "", &[i64t(&[2], &[0, 3]), w()]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: 3, size: 3 });
    let e = run_err(&["i64[1]", "f32[3, 2]"], "embedding", "", &[i64t(&[1], &[-1]), w()]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: -1, size: 3 });
    let e = run_err(&["i64[1]", "f32[0, 2]"], "embedding", "", &[i64t(&[1], &[0]), f32t(&[0, 2], &[])]);
    assert_eq!(e, EvalError::IndexOutOfRange { index: 0, size: 0 });

    assert!(parse_err(&["f32[2]", "f32[3, 2]"], "embedding", "").contains("i32 or i64"));
    assert!(parse_err(&["i64[2]", "f32[3, 2, 1]"], "embedding", "").contains("rank 2"));
    assert!(parse_err(&["i64[2]", "f32[3, 2]"], "embedding", "axis=0").contains("unknown attribute"));
    let e = infer_op(OpKind::Embedding, vec![], &[ty(DType::F32, &[2]), ty(DType::F32, &[3, 2])]).unwrap_err();
    assert!(matches!(e, OpError::DType { arg: 0, got: DType::F32, .. }), "{e}");
    let e = infer_op(OpKind::Embedding, vec![], &[ty(DType::I64, &[2]), ty(DType::F32, &[3])]).unwrap_err();
    assert!(matches!(e, OpError::Rank { arg: 1, got: 1, .. }), "{e}");
}

// --- masked_fill ---------------------------------------------------------------------------

#[test]
fn masked_fill_broadcasts_and_converts_the_value() {
    let x = || f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let t = run_op(&["f32[2, 3]", "bool[3]"], "masked_fill", "value=-1.5", &[x(), boolt(&[3], &[true, false, true])]);
    assert_eq!(t.to_f64_vec(), vec![-1.5, 2., -1.5, -1.5, 5., -1.5]);
    let t = run_op(&["f32[2, 3]", "bool[2, 1]"], "masked_fill", "value=-inf", &[x(), boolt(&[2, 1], &[false, true])]);
    assert_eq!(t.to_f64_vec(), vec![1., 2., 3., f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY]);
    let t = run_op(&["f32[2, 3]", "bool[]"], "masked_fill", "value=nan", &[x(), boolt(&[], &[true])]);
    assert!(t.to_f64_vec().iter().all(|v| v.is_nan()));
    let t = run_op(
        &["f32[2]", "bool[2]"],
        "masked_fill",
        "value=0.1",
        &[f32t(&[2], &[7., 8.]), boolt(&[2], &[false, true])],
    );
    assert_eq!(t.to_f64_vec(), vec![7., 0.1f32 as f64]);
    let t = run_op_precise(
        &["f32[2]", "bool[2]"],
        "masked_fill",
        "value=0.1",
        &[f32t(&[2], &[7., 8.]), boolt(&[2], &[false, true])],
    );
    assert_eq!(t.to_f64_vec(), vec![7., 0.1]);
    // Integer x: the value truncates; bool x: value != 0. An int literal works as a float.
    let t = run_op(
        &["i64[3]", "bool[3]"],
        "masked_fill",
        "value=-2.7",
        &[i64t(&[3], &[1, 2, 3]), boolt(&[3], &[true, false, true])],
    );
    assert_eq!(ints(&t), (DType::I64, vec![-2, 2, -2]));
    let t = run_op(
        &["bool[2]", "bool[2]"],
        "masked_fill",
        "value=1",
        &[boolt(&[2], &[false, false]), boolt(&[2], &[true, false])],
    );
    assert_eq!(bools(&t), vec![true, false]);
    let t =
        run_op(&["f32[0, 3]", "bool[3]"], "masked_fill", "value=1.0", &[f32t(&[0, 3], &[]), boolt(&[3], &[true; 3])]);
    assert_eq!(t.shape(), &[0, 3]);
    assert_eq!(infer_ty(&["f32[batch, 4]", "bool[batch, 1]"], "masked_fill", "value=0.0"), "f32[batch, 4]");

    assert!(parse_err(&["f32[3]", "bool[2, 3]"], "masked_fill", "value=0.0").contains("keeps x's shape"));
    assert!(parse_err(&["f32[1, 3]", "bool[2, 3]"], "masked_fill", "value=0.0").contains("keeps x's shape"));
    assert!(parse_err(&["f32[3]", "bool[2]"], "masked_fill", "value=0.0").contains("do not broadcast"));
    assert!(parse_err(&["f32[3]", "f32[3]"], "masked_fill", "value=0.0").contains("bool"));
    assert!(parse_err(&["f32[3]", "bool[3]"], "masked_fill", "").contains("`value` is required"));
    assert!(parse_err(&["f32[3]", "bool[3]"], "masked_fill", "value=true").contains("must be a float"));
    let e = infer_op(
        OpKind::MaskedFill,
        vec![("value", AttrValue::Float(0.0))],
        &[ty(DType::F32, &[3]), ty(DType::I64, &[3])],
    )
    .unwrap_err();
    assert!(matches!(e, OpError::DType { arg: 1, got: DType::I64, .. }), "{e}");
    let e = infer_op(
        OpKind::MaskedFill,
        vec![("value", AttrValue::Float(0.0))],
        &[ty(DType::F32, &[3]), ty(DType::Bool, &[2, 3])],
    )
    .unwrap_err();
    assert!(matches!(e, OpError::Shape(_)), "{e}");
}

// --- tril / triu ---------------------------------------------------------------------------

#[test]
fn tril_triu_hand_computed() {
    let x = || f32t(&[3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    let ty33 = ["f32[3, 3]"];
    assert_eq!(run_op(&ty33, "tril", "", &[x()]).to_f64_vec(), vec![1., 0., 0., 4., 5., 0., 7., 8., 9.]);
    assert_eq!(run_op(&ty33, "tril", "diagonal=-1", &[x()]).to_f64_vec(), vec![0., 0., 0., 4., 0., 0., 7., 8., 0.]);
    assert_eq!(run_op(&ty33, "tril", "diagonal=1", &[x()]).to_f64_vec(), vec![1., 2., 0., 4., 5., 6., 7., 8., 9.]);
    assert_eq!(run_op(&ty33, "triu", "", &[x()]).to_f64_vec(), vec![1., 2., 3., 0., 5., 6., 0., 0., 9.]);
    assert_eq!(run_op(&ty33, "triu", "diagonal=1", &[x()]).to_f64_vec(), vec![0., 2., 3., 0., 0., 6., 0., 0., 0.]);
    assert_eq!(run_op(&ty33, "triu", "diagonal=-5", &[x()]).to_f64_vec(), x().to_f64_vec());
    assert_eq!(run_op(&ty33, "tril", "diagonal=-3", &[x()]).to_f64_vec(), vec![0.; 9]);
    // Non-square and batched.
    let t = run_op(&["f32[2, 3]"], "triu", "diagonal=-1", &[f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.])]);
    assert_eq!(t.to_f64_vec(), vec![1., 2., 3., 4., 5., 6.]);
    let t = run_op(&["f32[2, 3]"], "tril", "", &[f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.])]);
    assert_eq!(t.to_f64_vec(), vec![1., 0., 0., 4., 5., 0.]);
    let t = run_op(&["i64[2, 2, 2]"], "triu", "", &[i64t(&[2, 2, 2], &[1, 2, 3, 4, 5, 6, 7, 8])]);
    assert_eq!(ints(&t), (DType::I64, vec![1, 2, 0, 4, 5, 6, 0, 8]));
    let t = run_op(&["bool[2, 2]"], "tril", "", &[boolt(&[2, 2], &[true; 4])]);
    assert_eq!(bools(&t), vec![true, false, true, true]);
    // NaN above the diagonal is replaced by zero; NaN kept where kept.
    let t = run_op(&["f32[2, 2]"], "tril", "", &[f32t(&[2, 2], &[f32::NAN, f32::NAN, 1., 2.])]).to_f64_vec();
    assert!(t[0].is_nan());
    assert_eq!(&t[1..], &[0., 1., 2.]);
    let t = run_op(&["f32[0, 3]"], "tril", "", &[f32t(&[0, 3], &[])]);
    assert_eq!(t.shape(), &[0, 3]);
    let t = run_op_precise(&["f32[2, 2]"], "triu", "", &[f32t(&[2, 2], &[0.1, 0.2, 0.3, 0.4])]);
    assert_eq!(t.to_f64_vec(), vec![0.1f32 as f64, 0.2f32 as f64, 0., 0.4f32 as f64]);
    assert_eq!(infer_ty(&["f32[batch, seq, seq]"], "tril", ""), "f32[batch, seq, seq]");

    assert!(parse_err(&["f32[3]"], "tril", "").contains("at least 2"));
    assert!(parse_err(&["f32[3]"], "triu", "").contains("at least 2"));
    assert!(parse_err(&["f32[3, 3]"], "triu", "diagonal=0.5").contains("must be a int"));
    let e = infer_op(OpKind::Tril, vec![], &[ty(DType::F32, &[4])]).unwrap_err();
    assert_eq!(e, OpError::Rank { arg: 0, expected: "at least 2".into(), got: 1 });
}
