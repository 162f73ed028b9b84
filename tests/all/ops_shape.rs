//! Shape prims and high-level view/assembly ops on the interpreter: hand-computed values,
//! views over non-contiguous inputs (and the copies or `NotViewable` errors they force),
//! symbolic shape rules, empty tensors, and typed errors for bad input.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::ir::verify::{verify, Stage};
use ladder::ir::{AttrValue, Attrs, DimError};
use ladder::ops::{infer, OpError};
use ladder::tensor::narrow::f16_from_f64;
use ladder::{DType, Dim, OpKind, Shape, Tensor, TensorType};

use crate::common::*;

/// A graph with the given signature whose one node `%r = node` (on line 2) is the output.
fn one(sig: &str, node: &str) -> String {
    format!("graph g({sig}) {{\n  %r = {node}\n  return %r\n}}")
}

/// Runs in f32 mode and in precise mode, checks both give the same values (shape ops never
/// change a value) and the precise run's float outputs are f64, and returns the f32-mode outputs.
fn both(src: &str, inputs: &[Tensor]) -> Vec<Tensor> {
    let g = parse(src);
    let fast = interp::run(&g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}\n{src}"));
    let precise = Options { precise: true, ..Default::default() };
    let slow = interp::run(&g, inputs, &precise).unwrap_or_else(|e| panic!("precise run failed: {e}\n{src}"));
    for (f, s) in fast.outputs.iter().zip(&slow.outputs) {
        assert_eq!(f.shape(), s.shape());
        if f.dtype().is_float() {
            assert_eq!(s.dtype(), DType::F64);
        } else {
            assert_eq!(s.dtype(), f.dtype());
        }
        assert_close(&f.to_f64_vec(), &s.to_f64_vec(), 0.0);
    }
    fast.outputs
}

/// `both` for a one-output graph: (shape, values).
fn both1(src: &str, inputs: &[Tensor]) -> (Vec<usize>, Vec<f64>) {
    let out = both(src, inputs);
    (out[0].shape().to_vec(), out[0].to_f64_vec())
}

fn iota_f32(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    f32t(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
}

fn seq(n: usize) -> Vec<f64> {
    (0..n).map(|i| i as f64).collect()
}

/// The printed type of the node named `r`.
fn ty_of(src: &str) -> String {
    let g = parse(src);
    let v = g.value_by_name("r").expect("node %r");
    g.ty(v).to_string()
}

/// Asserts the text fails to parse at line 2 with a message containing `needle`.
fn parse_err(src: &str, needle: &str) {
    let err = ladder::text::parse(src).expect_err(src);
    assert!(err.to_string().contains(needle), "`{err}` does not contain `{needle}`\n{src}");
    assert_eq!(err.line, 2, "{err}");
}

/// Runs and returns the eval error the run fails with.
fn eval_err(src: &str, inputs: &[Tensor]) -> EvalError {
    match run(src, inputs) {
        Err(InterpError::Eval { error, .. }) => error,
        other => panic!("expected an eval error, got {other:?}"),
    }
}

fn ty(dtype: DType, dims: &[&str]) -> TensorType {
    let shape: Shape = dims.iter().map(|d| d.parse::<u64>().map(Dim::new).unwrap_or_else(|_| Dim::sym(d))).collect();
    TensorType::new(dtype, shape)
}

/// The typed error `infer` gives for `op` with these attributes and argument types.
fn infer_err(op: OpKind, attrs: Vec<(&str, AttrValue)>, args: &[TensorType]) -> OpError {
    let given = attrs.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
    let attrs = Attrs::resolve(op.spec().attrs, given).expect("attrs");
    let args: Vec<&TensorType> = args.iter().collect();
    infer(op, &attrs, &args).expect_err("infer should fail")
}

// --- broadcast_in_dim ------------------------------------------------------------------------

#[test]
fn broadcast_in_dim_values() {
    let src = one("%x: f32[3]", "broadcast_in_dim(%x) {shape=[2, 3], broadcast_dims=[1]}");
    assert_eq!(both1(&src, &[f32t(&[3], &[1., 2., 3.])]), (vec![2, 3], vec![1., 2., 3., 1., 2., 3.]));
    // A size-1 operand dim stretches; the new dim is in the middle.
    let src = one("%x: f32[3, 1]", "broadcast_in_dim(%x) {shape=[3, 2, 2], broadcast_dims=[0, -1]}");
    let (shape, vals) = both1(&src, &[f32t(&[3, 1], &[1., 2., 3.])]);
    assert_eq!(shape, vec![3, 2, 2]);
    assert_eq!(vals, vec![1., 1., 1., 1., 2., 2., 2., 2., 3., 3., 3., 3.]);
    // A scalar, and an empty result.
    let src = one("%x: i64[]", "broadcast_in_dim(%x) {shape=[2, 2], broadcast_dims=[]}");
    assert_eq!(both1(&src, &[i64t(&[], &[7])]).1, vec![7., 7., 7., 7.]);
    let src = one("%x: f32[1]", "broadcast_in_dim(%x) {shape=[0, 4], broadcast_dims=[1]}");
    assert_eq!(both1(&src, &[f32t(&[1], &[1.])]), (vec![0, 4], vec![]));
    // Of a transposed (non-contiguous) operand.
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  \
               %r = broadcast_in_dim(%t) {shape=[2, 3, 2], broadcast_dims=[1, 2]}\n  return %r\n}";
    let vals = both1(src, &[iota_f32(&[2, 3])]).1;
    assert_eq!(vals, vec![0., 3., 1., 4., 2., 5., 0., 3., 1., 4., 2., 5.]);
}

#[test]
fn broadcast_in_dim_symbolic() {
    let src = one("%x: f32[batch]", "broadcast_in_dim(%x) {shape=[batch, 3], broadcast_dims=[0]}");
    assert_eq!(ty_of(&src), "f32[batch, 3]");
    assert_eq!(both1(&src, &[f32t(&[2], &[1., 2.])]), (vec![2, 3], vec![1., 1., 1., 2., 2., 2.]));
    // A size-1 operand broadcast to a symbolic dim bound by another input.
    let src = "graph g(%x: f32[1], %y: f32[n]) {\n  %r = broadcast_in_dim(%x) {shape=[n, 2], broadcast_dims=[0]}\n  \
               return %r\n}";
    assert_eq!(ty_of(src), "f32[n, 2]");
    let (shape, vals) = both1(src, &[f32t(&[1], &[5.]), f32t(&[3], &[0., 0., 0.])]);
    assert_eq!((shape, vals), (vec![3, 2], vec![5.; 6]));
}

#[test]
fn broadcast_in_dim_errors() {
    let bad = [
        ("%x: f32[3]", "broadcast_in_dim(%x) {shape=[2, 3], broadcast_dims=[0, 1]}", "has 2 entries"),
        ("%x: f32[2, 3]", "broadcast_in_dim(%x) {shape=[2, 3], broadcast_dims=[1, 0]}", "strictly increasing"),
        ("%x: f32[3]", "broadcast_in_dim(%x) {shape=[2, 3], broadcast_dims=[2]}", "axis 2 is out of range"),
        ("%x: f32[3]", "broadcast_in_dim(%x) {shape=[2, 4], broadcast_dims=[1]}", "cannot broadcast"),
        ("%x: f32[batch]", "broadcast_in_dim(%x) {shape=[seq], broadcast_dims=[0]}", "cannot broadcast"),
        ("%x: f32[3]", "broadcast_in_dim(%x) {shape=[-1, 3], broadcast_dims=[1]}", "-1 is not allowed"),
        ("%x: f32[3]", "broadcast_in_dim(%x) {shape=[3]}", "`broadcast_dims` is required"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
    let e = infer_err(
        OpKind::BroadcastInDim,
        vec![("shape", AttrValue::Ints(vec![2, 4])), ("broadcast_dims", AttrValue::Ints(vec![1]))],
        &[ty(DType::F32, &["3"])],
    );
    assert!(matches!(e, OpError::Shape(_)), "{e:?}");
}

// --- reshape and view --------------------------------------------------------------------------

#[test]
fn reshape_contiguous_and_inferred_dim() {
    let src = one("%x: f32[2, 3]", "reshape(%x) {shape=[3, -1]}");
    assert_eq!(ty_of(&src), "f32[3, 2]");
    assert_eq!(both1(&src, &[iota_f32(&[2, 3])]), (vec![3, 2], seq(6)));
    // Rank 0 to [1, 1] and back; empty tensors.
    let src =
        "graph g(%x: f32[]) {\n  %a = reshape(%x) {shape=[1, 1]}\n  %r = reshape(%a) {shape=[]}\n  return %a, %r\n}";
    let out = both(src, &[f32t(&[], &[4.])]);
    assert_eq!((out[0].shape(), out[1].shape()), (&[1usize, 1][..], &[][..]));
    assert_eq!(out[1].to_f64_vec(), vec![4.]);
    let src = one("%x: f32[0, 3]", "reshape(%x) {shape=[3, -1, 2]}");
    assert_eq!(ty_of(&src), "f32[3, 0, 2]");
    assert_eq!(both1(&src, &[f32t(&[0, 3], &[])]).0, vec![3, 0, 2]);
    // NaN and infinities pass through untouched; bools and ints too.
    let src = one("%x: f32[2, 2]", "reshape(%x) {shape=[4]}");
    let vals = both1(&src, &[f32t(&[2, 2], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0])]).1;
    assert!(vals[0].is_nan() && vals[1] == f64::INFINITY && vals[2] == f64::NEG_INFINITY);
    assert!(vals[3] == 0.0 && vals[3].is_sign_negative());
    let src = one("%x: bool[2, 2]", "reshape(%x) {shape=[4]}");
    assert_eq!(both1(&src, &[boolt(&[2, 2], &[true, false, false, true])]).1, vec![1., 0., 0., 1.]);
}

#[test]
fn reshape_symbolic() {
    let src = one("%x: f32[batch, seq, 4]", "reshape(%x) {shape=[-1, 4]}");
    assert_eq!(ty_of(&src), "f32[batch*seq, 4]");
    assert_eq!(both1(&src, &[iota_f32(&[2, 3, 4])]), (vec![6, 4], seq(24)));
    let src = one("%x: f32[batch, seq, 4]", "reshape(%x) {shape=[batch, -1]}");
    assert_eq!(ty_of(&src), "f32[batch, 4*seq]");
    let src = one("%x: f32[batch, 6]", "reshape(%x) {shape=[batch, 2, 3]}");
    assert_eq!(ty_of(&src), "f32[batch, 2, 3]");
    assert_eq!(both1(&src, &[iota_f32(&[1, 6])]), (vec![1, 2, 3], seq(6)));
    let src = one("%x: f32[batch, seq]", "reshape(%x) {shape=[seq, batch]}");
    assert_eq!(ty_of(&src), "f32[seq, batch]");
}

#[test]
fn reshape_and_view_of_non_contiguous_inputs() {
    // permute [2, 3, 4] by [2, 0, 1]: out[i, j, k] = x[j, k, i] = 12j + 4k + i.
    let permuted: Vec<f64> =
        (0..4).flat_map(|i| (0..2).flat_map(move |j| (0..3).map(move |k| (12 * j + 4 * k + i) as f64))).collect();
    assert_eq!(&permuted[..6], &[0., 4., 8., 12., 16., 20.]);
    let with = |tail: &str| {
        format!("graph g(%x: f32[2, 3, 4]) {{\n  %p = permute(%x) {{perm=[2, 0, 1]}}\n  %r = {tail}\n  return %r\n}}")
    };
    let x = [iota_f32(&[2, 3, 4])];
    assert_eq!(both1(&with("reshape(%p) {shape=[4, 6]}"), &x), (vec![4, 6], permuted.clone()));
    // Merging the two trailing permuted dims is still a view; merging the first two is not.
    assert_eq!(both1(&with("view(%p) {shape=[4, 6]}"), &x), (vec![4, 6], permuted.clone()));
    assert_eq!(both1(&with("reshape(%p) {shape=[8, 3]}"), &x), (vec![8, 3], permuted.clone()));
    assert_eq!(both1(&with("flatten(%p)"), &x), (vec![24], permuted.clone()));
    let err = eval_err(&with("view(%p) {shape=[8, 3]}"), &x);
    assert_eq!(err, EvalError::NotViewable { shape: vec![4, 2, 3], strides: vec![1, 12, 4], target: vec![8, 3] });
    // Splitting a permuted dim is a view.
    assert_eq!(both1(&with("view(%p) {shape=[2, 2, 2, 3]}"), &x).1, permuted);
}

#[test]
fn view_of_a_row_slice_is_allowed() {
    let src = "graph g(%x: f32[4, 3]) {\n  %s = slice(%x) {axis=0, start=1, end=3}\n  %r = view(%s) {shape=[-1]}\n  \
               %e = add(%r, %r)\n  return %r, %e\n}";
    let out = both(src, &[iota_f32(&[4, 3])]);
    assert_eq!(out[0].to_f64_vec(), vec![3., 4., 5., 6., 7., 8.]);
    assert_eq!(out[1].to_f64_vec(), vec![6., 8., 10., 12., 14., 16.]);
}

#[test]
fn reshape_errors() {
    let bad = [
        ("%x: f32[2, 3]", "reshape(%x) {shape=[-1, -1]}", "at most one entry may be -1"),
        ("%x: f32[2, 3]", "reshape(%x) {shape=[4, 2]}", "cannot reshape [2, 3] (6 elements) into [4, 2] (8 elements)"),
        ("%x: f32[2, 3]", "reshape(%x) {shape=[4, -1]}", "into a multiple of 4"),
        ("%x: f32[0, 3]", "reshape(%x) {shape=[0, -1]}", "any size would fit"),
        ("%x: f32[batch, 3]", "reshape(%x) {shape=[2, -1]}", "into a multiple of 2"),
        ("%x: f32[batch, 3]", "reshape(%x) {shape=[seq, 3]}", "cannot reshape"),
        ("%x: f32[2, 3]", "reshape(%x) {shape=[-2, 3]}", "entries >= 0 or -1"),
        ("%x: f32[2, 3]", "view(%x) {shape=[7]}", "cannot reshape"),
        ("%x: f32[2, 3]", "reshape(%x, %x) {shape=[6]}", "takes 1 arguments, got 2"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
    let e = infer_err(OpKind::Reshape, vec![("shape", AttrValue::Ints(vec![-1, -1]))], &[ty(DType::F32, &["6"])]);
    assert!(matches!(e, OpError::AttrValue { name: "shape", .. }), "{e:?}");
    // At the prims rung, reshape must not contain -1.
    let g = parse(&one("%x: f32[2, 3]", "reshape(%x) {shape=[-1]}"));
    let err = verify(&g, Stage::Prims).unwrap_err().to_string();
    assert!(err.contains("not in explicit prim form") && err.contains("-1"), "{err}");
    verify(&parse(&one("%x: f32[2, 3]", "reshape(%x) {shape=[6]}")), Stage::Prims).unwrap();
    // `view` is high-level.
    assert!(verify(&parse(&one("%x: f32[2, 3]", "view(%x) {shape=[6]}")), Stage::Prims).is_err());
}

// --- permute and transpose ---------------------------------------------------------------------

#[test]
fn permute_and_transpose_values() {
    let src = one("%x: f32[2, 3, 4]", "permute(%x) {perm=[-1, 0, 1]}");
    assert_eq!(ty_of(&src), "f32[4, 2, 3]");
    let (shape, vals) = both1(&src, &[iota_f32(&[2, 3, 4])]);
    assert_eq!(shape, vec![4, 2, 3]);
    assert_eq!(&vals[..8], &[0., 4., 8., 12., 16., 20., 1., 5.]);
    let src = one("%x: i64[2, 3]", "transpose(%x) {axis0=-1, axis1=0}");
    assert_eq!(both1(&src, &[i64t(&[2, 3], &[0, 1, 2, 3, 4, 5])]), (vec![3, 2], vec![0., 3., 1., 4., 2., 5.]));
    let src = one("%x: f32[batch, seq, 4]", "transpose(%x) {axis0=1, axis1=2}");
    assert_eq!(ty_of(&src), "f32[batch, 4, seq]");
    let src = one("%x: f32[]", "permute(%x) {perm=[]}");
    assert_eq!(both1(&src, &[f32t(&[], &[3.])]).1, vec![3.]);
    // Permuting twice composes strides.
    let src =
        "graph g(%x: f32[2, 3, 4]) {\n  %a = permute(%x) {perm=[2, 0, 1]}\n  %r = permute(%a) {perm=[1, 2, 0]}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3, 4])]), (vec![2, 3, 4], seq(24)));
}

#[test]
fn transpose_then_contiguous_then_view() {
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %c = contiguous(%t)\n  \
               %r = view(%c) {shape=[6]}\n  return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3])]), (vec![6], vec![0., 3., 1., 4., 2., 5.]));
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = view(%t) {shape=[6]}\n  \
               return %r\n}";
    assert!(matches!(eval_err(src, &[iota_f32(&[2, 3])]), EvalError::NotViewable { .. }));
    // contiguous of a contiguous tensor, and of an empty one.
    let src = one("%x: i64[3]", "contiguous(%x)");
    assert_eq!(both1(&src, &[i64t(&[3], &[4, 5, 6])]).1, vec![4., 5., 6.]);
    let src = one("%x: f32[0, 2]", "contiguous(%x)");
    assert_eq!(both1(&src, &[f32t(&[0, 2], &[])]).0, vec![0, 2]);
}

#[test]
fn permute_and_transpose_errors() {
    let bad = [
        ("%x: f32[2, 3]", "permute(%x) {perm=[0]}", "has 1 entries but the argument has rank 2"),
        ("%x: f32[2, 3]", "permute(%x) {perm=[0, -2]}", "not a permutation"),
        ("%x: f32[2, 3]", "permute(%x) {perm=[0, 2]}", "axis 2 is out of range for rank 2"),
        ("%x: f32[2, 3]", "transpose(%x) {axis0=0, axis1=-3}", "axis -3 is out of range for rank 2"),
        ("%x: f32[2, 3]", "transpose(%x) {axis0=0}", "`axis1` is required"),
        ("%x: f32[2, 3]", "transpose(%x) {axis0=0, axis1=1, dim=2}", "unknown attribute `dim`"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
    let e = infer_err(
        OpKind::Transpose,
        vec![("axis0", AttrValue::Int(2)), ("axis1", AttrValue::Int(0))],
        &[ty(DType::F32, &["2", "3"])],
    );
    assert_eq!(e, OpError::Axis { axis: 2, rank: 2 });
}

// --- slice -------------------------------------------------------------------------------------

#[test]
fn slice_python_semantics() {
    let x = [iota_f32(&[10])];
    let cases: [(&str, Vec<f64>); 7] = [
        ("start=2, end=-1, step=3", vec![2., 5., 8.]),
        ("start=-3", vec![7., 8., 9.]),
        ("start=-100, end=100", seq(10)),
        ("start=7, end=3", vec![]),
        ("end=-20", vec![]),
        ("start=1, step=4", vec![1., 5., 9.]),
        ("start=10", vec![]),
    ];
    for (attrs, want) in cases {
        let src = one("%x: f32[10]", &format!("slice(%x) {{axis=0, {attrs}}}"));
        assert_eq!(ty_of(&src), format!("f32[{}]", want.len()), "{attrs}");
        assert_eq!(both1(&src, &x).1, want, "{attrs}");
    }
    // On an empty axis.
    let src = one("%x: f32[2, 0]", "slice(%x) {axis=1, start=1}");
    assert_eq!(both1(&src, &[f32t(&[2, 0], &[])]).0, vec![2, 0]);
}

#[test]
fn slice_with_step_then_other_ops() {
    // Every other column of [4, 3]: a strided view.
    let cols = vec![0., 2., 3., 5., 6., 8., 9., 11.];
    let with = |tail: &str| {
        format!("graph g(%x: f32[4, 3]) {{\n  %s = slice(%x) {{axis=-1, step=2}}\n  %r = {tail}\n  return %r\n}}")
    };
    let x = [iota_f32(&[4, 3])];
    assert_eq!(both1(&with("reshape(%s) {shape=[8]}"), &x), (vec![8], cols.clone()));
    assert!(matches!(eval_err(&with("view(%s) {shape=[8]}"), &x), EvalError::NotViewable { .. }));
    assert_eq!(both1(&with("add(%s, %s)"), &x).1, cols.iter().map(|v| 2. * v).collect::<Vec<_>>());
    assert_eq!(both1(&with("transpose(%s) {axis0=0, axis1=1}"), &x).1, vec![0., 3., 6., 9., 2., 5., 8., 11.]);
    assert_eq!(both1(&with("select(%s) {axis=0, index=-1}"), &x), (vec![2], vec![9., 11.]));
    assert_eq!(both1(&with("slice(%s) {axis=0, start=1, step=2}"), &x), (vec![2, 2], vec![3., 5., 9., 11.]));
    assert_eq!(both1(&with("rev(%s) {axes=[0, 1]}"), &x).1, vec![11., 9., 8., 6., 5., 3., 2., 0.]);
    // Splitting the strided rows in two is a view; merging them back is not.
    assert_eq!(both1(&with("view(%s) {shape=[2, 2, 2]}"), &x).1, cols);
}

#[test]
fn slice_symbolic() {
    let src = one("%x: f32[seq, 2]", "slice(%x) {axis=0, start=1}");
    assert_eq!(ty_of(&src), "f32[seq - 1, 2]");
    assert_eq!(both1(&src, &[iota_f32(&[3, 2])]), (vec![2, 2], vec![2., 3., 4., 5.]));
    assert_eq!(both1(&src, &[iota_f32(&[1, 2])]).0, vec![0, 2]);
    // seq = 0 makes `seq - 1` negative: the run loop's shape check reports it.
    let err = run(&src, &[f32t(&[0, 2], &[])]).unwrap_err();
    assert!(matches!(err, InterpError::Shape { error: DimError::Negative, .. }), "{err}");

    let cases = [
        ("start=1, end=-1", "f32[seq - 2, 2]"),
        ("start=-2", "f32[2, 2]"),
        ("start=-3, end=-1", "f32[2, 2]"),
        ("start=-1, end=-3", "f32[0, 2]"),
        ("end=-1", "f32[seq - 1, 2]"),
        ("start=0", "f32[seq, 2]"),
    ];
    for (attrs, want) in cases {
        assert_eq!(ty_of(&one("%x: f32[seq, 2]", &format!("slice(%x) {{axis=0, {attrs}}}"))), want, "{attrs}");
    }
    let src = one("%x: f32[seq, 2]", "slice(%x) {axis=0, start=-2}");
    assert_eq!(both1(&src, &[iota_f32(&[3, 2])]).1, vec![2., 3., 4., 5.]);
    // A run where seq is smaller than the graph assumed is a typed error, not a wrong shape.
    let err = eval_err(&src, &[iota_f32(&[1, 2])]);
    assert!(matches!(&err, EvalError::Invalid(m) if m.contains("too small")), "{err}");
    // The count alone does not show it: `start=-4, step=2` assumes seq >= 4, and on 3
    // clamping would give two elements too (what follows, a derivative's padding by
    // `seq - 4`, was derived from the assumption). The run loop checks the start.
    let src = one("%x: f32[seq, 2]", "slice(%x) {axis=0, start=-4, step=2}");
    assert_eq!(ty_of(&src), "f32[2, 2]");
    assert_eq!(both1(&src, &[iota_f32(&[5, 2])]).1, vec![2., 3., 6., 7.]);
    let err = run(&src, &[iota_f32(&[3, 2])]).unwrap_err().to_string();
    assert!(err.contains("seq - 4 = -1") && err.contains("too small"), "{err}");
    // A static axis next to a symbolic one is unaffected.
    let src = one("%x: f32[seq, 5]", "slice(%x) {axis=1, start=1, end=4, step=2}");
    assert_eq!(ty_of(&src), "f32[seq, 2]");
}

#[test]
fn slice_symbolic_bounds() {
    // x[:, :seq] of a static buffer (an exporter's position ids): length seq, assumed to fit.
    let src = "graph g(%pos: f32[1, 6], %ids: i64[b, seq]) {\n  %r = slice(%pos) {axis=1, end=seq}\n  return %r\n}";
    assert_eq!(ty_of(src), "f32[1, seq]");
    let g = parse(src);
    assert_eq!(parse(&ladder::text::print(&g)), g);
    let ids = |n: usize| Tensor::from_i64(&[2, n], vec![0; 2 * n]).unwrap();
    let pos = iota_f32(&[1, 6]);
    let out = both(src, &[pos.clone(), ids(4)]);
    assert_eq!(out[0].to_f64_vec(), seq(4));
    let err = run(src, &[pos.clone(), ids(7)]).unwrap_err().to_string();
    assert!(err.contains("too small") || err.contains("out of range"), "{err}");
    // Bounds that are expressions, with a step: 1 + (seq - 1) / 2 elements from 1.
    let src =
        "graph g(%x: f32[10], %ids: i64[seq]) {\n  %r = slice(%x) {axis=0, start=1, end=seq, step=2}\n  return %r\n}";
    assert_eq!(ty_of(src), "f32[seq / 2]");
    let x = iota_f32(&[10]);
    assert_eq!(both(src, &[x.clone(), Tensor::from_i64(&[7], vec![0; 7]).unwrap()])[0].to_f64_vec(), vec![1., 3., 5.]);
    // A symbolic start past a symbolic end is no silent empty slice.
    let src = "graph g(%x: f32[10], %ids: i64[n, m]) {\n  %r = slice(%x) {axis=0, start=n, end=m}\n  return %r\n}";
    assert!(ladder::text::parse(src).is_err());
}

#[test]
fn slice_errors() {
    let bad = [
        ("%x: f32[4]", "slice(%x) {axis=0, step=0}", "`step`: must be at least 1, got 0"),
        ("%x: f32[4]", "slice(%x) {axis=0, step=-1}", "must be at least 1"),
        ("%x: f32[4]", "slice(%x) {axis=1}", "axis 1 is out of range for rank 1"),
        ("%x: f32[4]", "slice(%x) {start=1}", "`axis` is required"),
        ("%x: f32[seq]", "slice(%x) {axis=0, start=-3, end=2}", "needs a static size"),
        ("%x: f32[4]", "slice(%x) {axis=0, start=1.5}", "must be a size, found a float"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
    let e = infer_err(
        OpKind::Slice,
        vec![("axis", AttrValue::Int(0)), ("start", AttrValue::Int(-3)), ("end", AttrValue::Int(2))],
        &[ty(DType::F32, &["seq"])],
    );
    assert!(matches!(e, OpError::Shape(_)), "{e:?}");
    // A step on a symbolic dim: a ceiling quotient.
    assert_eq!(ty_of(&one("%x: f32[seq]", "slice(%x) {axis=0, step=2}")), "f32[(seq + 1) / 2]");
    // A fixed window from the front (0 <= start <= end) has a static size on a symbolic dim.
    let g = ladder::text::parse(&one("%x: f32[seq]", "slice(%x) {axis=0, start=1, end=3}")).unwrap();
    assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f32[2]");
}

// --- pad ---------------------------------------------------------------------------------------

#[test]
fn pad_values() {
    let x = [f32t(&[3], &[1., 2., 3.])];
    let src = one("%x: f32[3]", "pad(%x) {low=[1], high=[2], interior=[1], value=9}");
    assert_eq!(both1(&src, &x), (vec![8], vec![9., 1., 9., 2., 9., 3., 9., 9.]));
    // Negative low crops after interior padding.
    let src = one("%x: f32[3]", "pad(%x) {low=[-1], high=[0], interior=[1]}");
    assert_eq!(both1(&src, &x).1, vec![0., 2., 0., 3.]);
    let src = one("%x: f32[4]", "pad(%x) {low=[-1], high=[-1]}");
    assert_eq!(both1(&src, &[f32t(&[4], &[1., 2., 3., 4.])]).1, vec![2., 3.]);
    let src = one("%x: f32[2]", "pad(%x) {low=[-2], high=[0]}");
    assert_eq!(both1(&src, &[f32t(&[2], &[1., 2.])]).0, vec![0]);
    // Two axes.
    let src = one("%x: f32[2, 2]", "pad(%x) {low=[1, 0], high=[0, 1], value=-1}");
    let want = vec![-1., -1., -1., 1., 2., -1., 3., 4., -1.];
    assert_eq!(both1(&src, &[f32t(&[2, 2], &[1., 2., 3., 4.])]), (vec![3, 3], want));
    // An empty axis gets only the edges; interior needs two neighbours.
    let src = one("%x: f32[0]", "pad(%x) {low=[1], high=[1], interior=[5], value=4}");
    assert_eq!(both1(&src, &[f32t(&[0], &[])]), (vec![2], vec![4., 4.]));
    let src = one("%x: f32[1]", "pad(%x) {low=[0], high=[0], interior=[5]}");
    assert_eq!(both1(&src, &[f32t(&[1], &[6.])]), (vec![1], vec![6.]));
    // A rank-0 tensor has nothing to pad.
    let src = one("%x: f32[]", "pad(%x) {low=[], high=[]}");
    assert_eq!(both1(&src, &[f32t(&[], &[6.])]), (vec![], vec![6.]));
}

#[test]
fn pad_value_conversion_nan_and_inf() {
    let src = one("%x: i64[1]", "pad(%x) {low=[1], high=[1], value=2.7}");
    assert_eq!(both1(&src, &[i64t(&[1], &[5])]).1, vec![2., 5., 2.]);
    let src = one("%x: i64[1]", "pad(%x) {low=[1], high=[0], value=-2.7}");
    assert_eq!(both1(&src, &[i64t(&[1], &[5])]).1, vec![-2., 5.]);
    let src = one("%x: i64[1]", "pad(%x) {low=[1], high=[0], value=nan}");
    assert_eq!(both1(&src, &[i64t(&[1], &[5])]).1, vec![0., 5.]);
    let src = one("%x: bool[1]", "pad(%x) {low=[1], high=[1], value=0.5}");
    assert_eq!(both1(&src, &[boolt(&[1], &[false])]).1, vec![1., 0., 1.]);
    let src = one("%x: f32[1]", "pad(%x) {low=[1], high=[1], value=-inf}");
    assert_eq!(both1(&src, &[f32t(&[1], &[f32::NAN])]).1[0], f64::NEG_INFINITY);
    let src = one("%x: f32[1]", "pad(%x) {low=[1], high=[0], value=nan}");
    let vals = both1(&src, &[f32t(&[1], &[f32::INFINITY])]).1;
    assert!(vals[0].is_nan() && vals[1] == f64::INFINITY);
    // A value that f32 cannot hold is rounded to f32 (but not in precise mode).
    let src = one("%x: f32[1]", "pad(%x) {low=[1], high=[0], value=0.1}");
    assert_eq!(run1(&src, &[f32t(&[1], &[1.])]), vec![0.1f32 as f64, 1.]);
    let precise = Options { precise: true, ..Default::default() };
    let out = interp::run(&parse(&src), &[f32t(&[1], &[1.])], &precise).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![0.1, 1.]);
}

#[test]
fn pad_symbolic_and_non_contiguous() {
    let src = one("%x: f32[n, 2]", "pad(%x) {low=[1, 0], high=[2, -1]}");
    assert_eq!(ty_of(&src), "f32[n + 3, 1]");
    let (shape, vals) = both1(&src, &[f32t(&[1, 2], &[5., 6.])]);
    assert_eq!((shape, vals), (vec![4, 1], vec![0., 5., 0., 0.]));
    assert_eq!(ty_of(&one("%x: f32[n]", "pad(%x) {low=[-1], high=[0]}")), "f32[n - 1]");
    // Of a transposed input.
    let src = "graph g(%x: f32[2, 2]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  \
               %r = pad(%t) {low=[0, 1], high=[0, 0], value=7}\n  return %r\n}";
    assert_eq!(both1(src, &[f32t(&[2, 2], &[1., 2., 3., 4.])]).1, vec![7., 1., 3., 7., 2., 4.]);
}

#[test]
fn pad_errors() {
    let bad = [
        ("%x: f32[3]", "pad(%x) {low=[1, 1], high=[1]}", "`low`: has 2 entries but the argument has rank 1"),
        ("%x: f32[3]", "pad(%x) {low=[1], high=[]}", "`high`: has 0 entries"),
        ("%x: f32[3]", "pad(%x) {low=[1], high=[1], interior=[1, 1]}", "`interior`: has 2 entries"),
        ("%x: f32[3]", "pad(%x) {low=[1], high=[1], interior=[-1]}", "entries must be >= 0"),
        ("%x: f32[3]", "pad(%x) {low=[-2], high=[-2]}", "leaves a negative size"),
        ("%x: f32[n]", "pad(%x) {low=[0], high=[0], interior=[1]}", "interior padding needs a static size"),
        ("%x: f32[3]", "pad(%x) {low=[0]}", "`high` is required"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- cat and stack -----------------------------------------------------------------------------

#[test]
fn cat_values() {
    let sig = "%a: f32[2, 2], %b: f32[2, 1]";
    let ab = [f32t(&[2, 2], &[1., 2., 3., 4.]), f32t(&[2, 1], &[5., 6.])];
    assert_eq!(both1(&one(sig, "cat(%a, %b) {axis=1}"), &ab), (vec![2, 3], vec![1., 2., 5., 3., 4., 6.]));
    assert_eq!(both1(&one(sig, "cat(%a, %b, %a) {axis=-1}"), &ab).1, vec![1., 2., 5., 1., 2., 3., 4., 6., 3., 4.]);
    let src = one("%a: f32[1, 2], %b: f32[2, 2]", "cat(%a, %b)");
    assert_eq!(both1(&src, &[f32t(&[1, 2], &[1., 2.]), iota_f32(&[2, 2])]), (vec![3, 2], vec![1., 2., 0., 1., 2., 3.]));
    // One argument, and an empty piece.
    assert_eq!(both1(&one("%a: f32[2]", "cat(%a)"), &[f32t(&[2], &[1., 2.])]).1, vec![1., 2.]);
    let src = one("%a: f32[0, 2], %b: f32[1, 2]", "cat(%a, %b)");
    assert_eq!(both1(&src, &[f32t(&[0, 2], &[]), f32t(&[1, 2], &[1., 2.])]), (vec![1, 2], vec![1., 2.]));
    // Non-contiguous arguments.
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  \
               %s = slice(%x) {axis=1, step=2}\n  %u = transpose(%s) {axis0=0, axis1=1}\n  \
               %r = cat(%t, %u)\n  return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3])]), (vec![5, 2], vec![0., 3., 1., 4., 2., 5., 0., 3., 2., 5.]));
}

#[test]
fn cat_promotes_dtypes() {
    let src = one("%a: i64[2], %b: f32[1]", "cat(%a, %b)");
    assert_eq!(ty_of(&src), "f32[3]");
    assert_eq!(both1(&src, &[i64t(&[2], &[1, 2]), f32t(&[1], &[f32::NAN])]).1[..2], [1., 2.]);
    let src = one("%a: bool[1], %b: i64[1]", "cat(%a, %b)");
    assert_eq!(ty_of(&src), "i64[2]");
    assert_eq!(both1(&src, &[boolt(&[1], &[true]), i64t(&[1], &[-4])]).1, vec![1., -4.]);
    let src = one("%a: bool[1], %b: bool[2]", "cat(%a, %b)");
    assert_eq!(both1(&src, &[boolt(&[1], &[true]), boolt(&[2], &[false, true])]).1, vec![1., 0., 1.]);
    // Promotion is high-rung only: at the prims rung the dtypes must agree.
    let err = verify(&parse(&one("%a: i64[2], %b: f32[1]", "cat(%a, %b)")), Stage::Prims).unwrap_err().to_string();
    assert!(err.contains("not in explicit prim form"), "{err}");
    verify(&parse(&one("%a: f32[2], %b: f32[1]", "cat(%a, %b)")), Stage::Prims).unwrap();
}

#[test]
fn cat_symbolic() {
    let src = one("%a: f32[seq, 4], %b: f32[2, 4]", "cat(%a, %b)");
    assert_eq!(ty_of(&src), "f32[seq + 2, 4]");
    let (shape, vals) = both1(&src, &[iota_f32(&[1, 4]), f32t(&[2, 4], &[9.; 8])]);
    assert_eq!(shape, vec![3, 4]);
    assert_eq!(vals, [seq(4), vec![9.; 8]].concat());
    assert_eq!(ty_of(&one("%a: f32[seq, 4], %b: f32[seq, 4]", "cat(%a, %b)")), "f32[2*seq, 4]");
    assert_eq!(ty_of(&one("%a: f32[b, seq], %b: f32[b, 1]", "cat(%a, %b) {axis=1}")), "f32[b, seq + 1]");
}

#[test]
fn cat_errors() {
    let bad = [
        ("%a: f32[2, 2], %b: f32[2]", "cat(%a, %b)", "argument 1 must have rank 2, got rank 1"),
        ("%a: f32[2, 2], %b: f32[2, 3]", "cat(%a, %b)", "they differ at axis 1"),
        ("%a: f32[b, 2], %b: f32[c, 2]", "cat(%a, %b) {axis=1}", "they differ at axis 0"),
        ("%a: f32[2], %b: f32[2]", "cat(%a, %b) {axis=1}", "axis 1 is out of range for rank 1"),
        ("%a: f32[], %b: f32[]", "cat(%a, %b)", "axis 0 is out of range for rank 0"),
        ("%a: f32[2]", "cat()", "takes at least 1 arguments, got 0"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
    let e = infer_err(OpKind::Cat, vec![], &[ty(DType::F32, &["2", "2"]), ty(DType::F32, &["2"])]);
    assert_eq!(e, OpError::Rank { arg: 1, expected: "2".into(), got: 1 });
}

#[test]
fn stack_values_and_errors() {
    let sig = "%a: f32[2], %b: f32[2]";
    let ab = [f32t(&[2], &[1., 2.]), f32t(&[2], &[3., 4.])];
    assert_eq!(both1(&one(sig, "stack(%a, %b)"), &ab), (vec![2, 2], vec![1., 2., 3., 4.]));
    assert_eq!(both1(&one(sig, "stack(%a, %b) {axis=-1}"), &ab), (vec![2, 2], vec![1., 3., 2., 4.]));
    assert_eq!(both1(&one(sig, "stack(%a, %b, %a) {axis=1}"), &ab), (vec![2, 3], vec![1., 3., 1., 2., 4., 2.]));
    // Scalars, empty tensors, promotion, symbolic shapes, a transposed argument.
    let src = one("%a: f32[], %b: i64[]", "stack(%a, %b)");
    assert_eq!(ty_of(&src), "f32[2]");
    assert_eq!(both1(&src, &[f32t(&[], &[0.5]), i64t(&[], &[3])]).1, vec![0.5, 3.]);
    let src = one("%a: f32[0, 2], %b: f32[0, 2]", "stack(%a, %b) {axis=1}");
    assert_eq!(both1(&src, &[f32t(&[0, 2], &[]), f32t(&[0, 2], &[])]).0, vec![0, 2, 2]);
    assert_eq!(ty_of(&one("%a: f32[seq, 4], %b: f32[seq, 4]", "stack(%a, %b) {axis=1}")), "f32[seq, 2, 4]");
    let src = "graph g(%x: f32[2, 2]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = stack(%x, %t) {axis=2}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[f32t(&[2, 2], &[1., 2., 3., 4.])]).1, vec![1., 1., 2., 3., 3., 2., 4., 4.]);
    let bad = [
        ("%a: f32[2], %b: f32[3]", "stack(%a, %b)", "they differ at axis 0"),
        ("%a: f32[2], %b: f32[2, 1]", "stack(%a, %b)", "must have rank 1"),
        ("%a: f32[2], %b: f32[2]", "stack(%a, %b) {axis=2}", "axis 2 is out of range for rank 2"),
        ("%a: f32[2], %b: f32[2]", "stack(%a, %b) {axis=-3}", "out of range"),
        ("%a: f32[2]", "stack()", "takes at least 1 arguments"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- rev ---------------------------------------------------------------------------------------

#[test]
fn rev_values_and_errors() {
    let x = [iota_f32(&[2, 3])];
    assert_eq!(both1(&one("%x: f32[2, 3]", "rev(%x) {axes=[1]}"), &x).1, vec![2., 1., 0., 5., 4., 3.]);
    assert_eq!(both1(&one("%x: f32[2, 3]", "rev(%x) {axes=[0, -1]}"), &x).1, vec![5., 4., 3., 2., 1., 0.]);
    assert_eq!(both1(&one("%x: f32[2, 3]", "rev(%x) {axes=[]}"), &x).1, seq(6));
    let src = one("%x: i64[3]", "rev(%x) {axes=[0]}");
    assert_eq!(both1(&src, &[i64t(&[3], &[i64::MAX, -1, 0])]).1, vec![0., -1., i64::MAX as f64]);
    let src = one("%x: f32[0, 2]", "rev(%x) {axes=[0, 1]}");
    assert_eq!(both1(&src, &[f32t(&[0, 2], &[])]).0, vec![0, 2]);
    assert_eq!(ty_of(&one("%x: f32[seq, 2]", "rev(%x) {axes=[0]}")), "f32[seq, 2]");
    parse_err(&one("%x: f32[2, 3]", "rev(%x) {axes=[1, -1]}"), "axis -1 is listed twice");
    parse_err(&one("%x: f32[2, 3]", "rev(%x) {axes=[2]}"), "axis 2 is out of range for rank 2");
    parse_err(&one("%x: f32[2, 3]", "rev(%x)"), "`axes` is required");
}

// --- iota and full -----------------------------------------------------------------------------

#[test]
fn iota_values() {
    let src = one("", "iota() {shape=[2, 3], axis=1}");
    assert_eq!(ty_of(&src), "i64[2, 3]");
    assert_eq!(both1(&src, &[]).1, vec![0., 1., 2., 0., 1., 2.]);
    let src = one("", "iota() {shape=[2, 3], axis=-2, dtype=f32}");
    assert_eq!(both1(&src, &[]).1, vec![0., 0., 0., 1., 1., 1.]);
    let src = one("", "iota() {shape=[0, 3], axis=1, dtype=i32}");
    assert_eq!(both1(&src, &[]), (vec![0, 3], vec![]));
    // f16 cannot hold 2049: it rounds to even (2048), except in precise mode.
    let src = one("", "iota() {shape=[2050], axis=0, dtype=f16}");
    assert_eq!(run1(&src, &[])[2049], 2048.);
    let precise = Options { precise: true, ..Default::default() };
    assert_eq!(interp::run(&parse(&src), &[], &precise).unwrap().outputs[0].to_f64_vec()[2049], 2049.);
    // A symbolic shape, bound by an input.
    let src = one("%x: f32[n]", "iota() {shape=[n, 2], axis=0}");
    assert_eq!(ty_of(&src), "i64[n, 2]");
    assert_eq!(both1(&src, &[f32t(&[3], &[0.; 3])]), (vec![3, 2], vec![0., 0., 1., 1., 2., 2.]));
    let bad = [
        ("", "iota() {shape=[2], axis=0, dtype=bool}", "numeric dtype"),
        ("", "iota() {shape=[2], axis=1}", "axis 1 is out of range for rank 1"),
        ("", "iota() {shape=[], axis=0}", "out of range for rank 0"),
        ("", "iota() {shape=[-1], axis=0}", "-1 is not allowed"),
        ("%x: f32[2]", "iota(%x) {shape=[2], axis=0}", "takes 0 arguments, got 1"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

#[test]
fn full_values_and_conversion() {
    let src = one("", "full() {shape=[2, 2], value=1.5}");
    assert_eq!(ty_of(&src), "f32[2, 2]");
    assert_eq!(both1(&src, &[]).1, vec![1.5; 4]);
    let cases: [(&str, &str, f64); 8] = [
        ("2.5", "i32", 2.),
        ("-2.5", "i64", -2.),
        ("nan", "i64", 0.),
        ("0", "bool", 0.),
        ("-0.5", "bool", 1.),
        ("nan", "bool", 1.),
        ("inf", "f32", f64::INFINITY),
        ("-inf", "f64", f64::NEG_INFINITY),
    ];
    for (value, dtype, want) in cases {
        let src = one("", &format!("full() {{shape=[1], value={value}, dtype={dtype}}}"));
        assert_eq!(both1(&src, &[]).1, vec![want], "{value} as {dtype}");
    }
    let vals = both1(&one("", "full() {shape=[1], value=nan}"), &[]).1;
    assert!(vals[0].is_nan());
    // Rounded to the dtype, except in precise mode.
    let src = one("", "full() {shape=[1], value=0.1, dtype=f16}");
    assert_eq!(run1(&src, &[]), vec![f16_from_f64(0.1).to_f64()]);
    let precise = Options { precise: true, ..Default::default() };
    assert_eq!(interp::run(&parse(&src), &[], &precise).unwrap().outputs[0].to_f64_vec(), vec![0.1]);
    // Empty and scalar shapes.
    assert_eq!(both1(&one("", "full() {shape=[3, 0], value=1}"), &[]).0, vec![3, 0]);
    assert_eq!(both1(&one("", "full() {shape=[], value=-3, dtype=i64}"), &[]), (vec![], vec![-3.]));
}

#[test]
fn full_symbolic_shapes() {
    let src = one("%x: f32[batch, seq]", "full() {shape=[batch, seq + 1], value=2}");
    assert_eq!(ty_of(&src), "f32[batch, seq + 1]");
    assert_eq!(both1(&src, &[iota_f32(&[2, 1])]), (vec![2, 2], vec![2.; 4]));
    // A symbol no input binds is a typed error at run time.
    let src = one("%x: f32[batch]", "full() {shape=[other], value=2}");
    let err = run(&src, &[f32t(&[1], &[0.])]).unwrap_err();
    assert!(matches!(&err, InterpError::Shape { error: DimError::UnboundSymbol(s), .. } if s == "other"), "{err}");
    let bad = [
        ("", "full() {shape=[2]}", "`value` is required"),
        ("", "full() {value=1}", "`shape` is required"),
        ("", "full() {shape=[2], value=1, dtype=f8}", "must be a dtype"),
        ("", "full() {shape=[-1], value=1}", "-1 is not allowed"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- flatten -----------------------------------------------------------------------------------

#[test]
fn flatten_values_and_shapes() {
    let x = [iota_f32(&[2, 3, 4])];
    assert_eq!(both1(&one("%x: f32[2, 3, 4]", "flatten(%x)"), &x), (vec![24], seq(24)));
    assert_eq!(both1(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=1}"), &x), (vec![2, 12], seq(24)));
    assert_eq!(both1(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=-3, end=-2}"), &x), (vec![6, 4], seq(24)));
    assert_eq!(both1(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=1, end=1}"), &x).0, vec![2, 3, 4]);
    assert_eq!(both1(&one("%x: f32[]", "flatten(%x)"), &[f32t(&[], &[5.])]), (vec![1], vec![5.]));
    assert_eq!(both1(&one("%x: f32[2, 0]", "flatten(%x)"), &[f32t(&[2, 0], &[])]).0, vec![0]);
    assert_eq!(ty_of(&one("%x: f32[batch, seq, 4]", "flatten(%x) {start=1}")), "f32[batch, 4*seq]");
    assert_eq!(ty_of(&one("%x: f32[batch, seq, 4]", "flatten(%x) {end=1}")), "f32[batch*seq, 4]");
    let src = one("%x: f32[batch, seq, 4]", "flatten(%x) {end=1}");
    assert_eq!(both1(&src, &[iota_f32(&[2, 2, 4])]), (vec![4, 4], seq(16)));
    // Of a transposed tensor (a copy).
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = flatten(%t)\n  return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3])]).1, vec![0., 3., 1., 4., 2., 5.]);
    parse_err(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=2, end=1}"), "comes after end axis");
    parse_err(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=3}"), "axis 3 is out of range for rank 3");
    parse_err(&one("%x: f32[]", "flatten(%x) {end=1}"), "axis 1 is out of range for rank 1");
}

// --- expand ------------------------------------------------------------------------------------

#[test]
fn expand_values_and_errors() {
    let src = one("%x: f32[3, 1]", "expand(%x) {shape=[2, -1, 4]}");
    assert_eq!(ty_of(&src), "f32[2, 3, 4]");
    let (shape, vals) = both1(&src, &[f32t(&[3, 1], &[1., 2., 3.])]);
    assert_eq!(shape, vec![2, 3, 4]);
    let block: Vec<f64> = [1., 2., 3.].iter().flat_map(|&v| [v; 4]).collect();
    assert_eq!(vals, [block.clone(), block].concat());
    assert_eq!(both1(&one("%x: f32[1]", "expand(%x) {shape=[0]}"), &[f32t(&[1], &[1.])]).0, vec![0]);
    assert_eq!(both1(&one("%x: f32[]", "expand(%x) {shape=[2]}"), &[f32t(&[], &[6.])]).1, vec![6., 6.]);
    // Symbolic: a size-1 dim stretched to a symbol, -1 keeping a symbolic dim.
    let src = "graph g(%x: f32[1, 2], %y: f32[batch]) {\n  %r = expand(%x) {shape=[batch, -1]}\n  return %r\n}";
    assert_eq!(ty_of(src), "f32[batch, 2]");
    assert_eq!(both1(src, &[f32t(&[1, 2], &[1., 2.]), f32t(&[3], &[0.; 3])]).1, vec![1., 2., 1., 2., 1., 2.]);
    assert_eq!(ty_of(&one("%x: f32[seq, 1]", "expand(%x) {shape=[2, -1, 5]}")), "f32[2, seq, 5]");
    // Expanding a transposed tensor.
    let src = "graph g(%x: f32[1, 2]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = expand(%t) {shape=[2, 3]}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[f32t(&[1, 2], &[1., 2.])]).1, vec![1., 1., 1., 2., 2., 2.]);
    let bad = [
        ("%x: f32[3, 1]", "expand(%x) {shape=[-1, 3, 4]}", "-1 at new leading dim 0"),
        ("%x: f32[3, 1]", "expand(%x) {shape=[2, 4]}", "cannot expand [3, 1]: dim 0 has size 3, not 1 or 2"),
        ("%x: f32[3, 1]", "expand(%x) {shape=[4]}", "fewer than the argument's rank 2"),
        ("%x: f32[seq]", "expand(%x) {shape=[batch]}", "cannot expand"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- squeeze and unsqueeze ---------------------------------------------------------------------

#[test]
fn squeeze_and_unsqueeze() {
    let x = [f32t(&[1, 3, 1], &[1., 2., 3.])];
    assert_eq!(both1(&one("%x: f32[1, 3, 1]", "squeeze(%x)"), &x), (vec![3], vec![1., 2., 3.]));
    assert_eq!(both1(&one("%x: f32[1, 3, 1]", "squeeze(%x) {axes=[-1]}"), &x).0, vec![1, 3]);
    assert_eq!(both1(&one("%x: f32[1, 1]", "squeeze(%x)"), &[f32t(&[1, 1], &[4.])]), (vec![], vec![4.]));
    assert_eq!(both1(&one("%x: f32[0, 1]", "squeeze(%x)"), &[f32t(&[0, 1], &[])]).0, vec![0]);
    assert_eq!(ty_of(&one("%x: f32[batch, 1, seq]", "squeeze(%x)")), "f32[batch, seq]");
    // A symbolic dim that is 1 at run time stays.
    let src = one("%x: f32[batch, 3, 1]", "squeeze(%x)");
    assert_eq!(ty_of(&src), "f32[batch, 3]");
    assert_eq!(both1(&src, &[f32t(&[1, 3, 1], &[1., 2., 3.])]).0, vec![1, 3]);
    // Squeezing a strided view.
    let src = "graph g(%x: f32[4, 3]) {\n  %s = slice(%x) {axis=1, start=1, end=2}\n  %r = squeeze(%s) {axes=[1]}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[4, 3])]), (vec![4], vec![1., 4., 7., 10.]));

    let x = [iota_f32(&[2, 3])];
    assert_eq!(both1(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=-1}"), &x), (vec![2, 3, 1], seq(6)));
    assert_eq!(both1(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=1}"), &x), (vec![2, 1, 3], seq(6)));
    assert_eq!(both1(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=-3}"), &x).0, vec![1, 2, 3]);
    assert_eq!(both1(&one("%x: f32[]", "unsqueeze(%x) {axis=0}"), &[f32t(&[], &[2.])]), (vec![1], vec![2.]));
    assert_eq!(ty_of(&one("%x: f32[seq]", "unsqueeze(%x) {axis=0}")), "f32[1, seq]");
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = unsqueeze(%t) {axis=1}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3])]), (vec![3, 1, 2], vec![0., 3., 1., 4., 2., 5.]));

    let bad = [
        ("%x: f32[1, 3]", "squeeze(%x) {axes=[1]}", "cannot squeeze axis 1 of [1, 3]: its size is not statically 1"),
        ("%x: f32[batch]", "squeeze(%x) {axes=[0]}", "not statically 1"),
        ("%x: f32[1, 3]", "squeeze(%x) {axes=[2]}", "axis 2 is out of range"),
        ("%x: f32[1, 1]", "squeeze(%x) {axes=[0, -2]}", "listed twice"),
        ("%x: f32[2, 3]", "unsqueeze(%x) {axis=3}", "axis 3 is out of range for rank 3"),
        ("%x: f32[2, 3]", "unsqueeze(%x) {axis=-4}", "axis -4 is out of range for rank 3"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- select ------------------------------------------------------------------------------------

#[test]
fn select_values_and_errors() {
    let x = [iota_f32(&[2, 3])];
    assert_eq!(both1(&one("%x: f32[2, 3]", "select(%x) {axis=1, index=-1}"), &x), (vec![2], vec![2., 5.]));
    assert_eq!(both1(&one("%x: f32[2, 3]", "select(%x) {axis=0, index=1}"), &x), (vec![3], vec![3., 4., 5.]));
    assert_eq!(both1(&one("%x: f32[3]", "select(%x) {axis=0, index=2}"), &[iota_f32(&[3])]), (vec![], vec![2.]));
    assert_eq!(both1(&one("%x: f32[2, 0]", "select(%x) {axis=0, index=1}"), &[f32t(&[2, 0], &[])]).0, vec![0]);
    // Of a transposed tensor.
    let src =
        "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = select(%t) {axis=1, index=1}\n  \
               return %r\n}";
    assert_eq!(both1(src, &[iota_f32(&[2, 3])]).1, vec![3., 4., 5.]);
    // Symbolic: checked at run time.
    let src = one("%x: f32[seq, 2]", "select(%x) {axis=0, index=-2}");
    assert_eq!(ty_of(&src), "f32[2]");
    assert_eq!(both1(&src, &[iota_f32(&[3, 2])]).1, vec![2., 3.]);
    assert_eq!(eval_err(&src, &[iota_f32(&[1, 2])]), EvalError::IndexOutOfRange { index: -2, size: 1 });
    let bad = [
        ("%x: f32[2, 3]", "select(%x) {axis=1, index=3}", "`index`: index 3 is out of range for a dim of size 3"),
        ("%x: f32[2, 3]", "select(%x) {axis=1, index=-4}", "out of range"),
        ("%x: f32[2, 0]", "select(%x) {axis=1, index=0}", "out of range for a dim of size 0"),
        ("%x: f32[2, 3]", "select(%x) {axis=2, index=0}", "axis 2 is out of range for rank 2"),
        ("%x: f32[]", "select(%x) {axis=0, index=0}", "out of range for rank 0"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- split and chunk ---------------------------------------------------------------------------

#[test]
fn split_values_and_errors() {
    let x = [iota_f32(&[5])];
    let split =
        |sizes: &str, index: i64| one("%x: f32[5]", &format!("split(%x) {{axis=0, sizes={sizes}, index={index}}}"));
    assert_eq!(both1(&split("[2, 3]", 0), &x).1, vec![0., 1.]);
    assert_eq!(both1(&split("[2, 3]", 1), &x).1, vec![2., 3., 4.]);
    assert_eq!(both1(&split("[2, 0, 3]", -2), &x).0, vec![0]);
    assert_eq!(both1(&split("[5]", 0), &x).1, seq(5));
    // Of a transposed tensor, then an elementwise op.
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  \
               %s = split(%t) {axis=0, sizes=[1, 2], index=1}\n  %r = add(%s, %s)\n  return %s, %r\n}";
    let out = both(src, &[iota_f32(&[2, 3])]);
    assert_eq!((out[0].shape(), out[0].to_f64_vec()), (&[2usize, 2][..], vec![1., 4., 2., 5.]));
    assert_eq!(out[1].to_f64_vec(), vec![2., 8., 4., 10.]);
    assert_eq!(ty_of(&one("%x: f32[seq, 4]", "split(%x) {axis=1, sizes=[1, 3], index=1}")), "f32[seq, 3]");
    let bad = [
        ("%x: f32[5]", "split(%x) {axis=0, sizes=[2, 2], index=0}", "do not add up to the size 5"),
        ("%x: f32[5]", "split(%x) {axis=0, sizes=[6, -1], index=0}", "sizes must be >= 0, got -1"),
        ("%x: f32[5]", "split(%x) {axis=0, sizes=[2, 3], index=2}", "piece 2 does not exist: split gives 2 pieces"),
        ("%x: f32[seq]", "split(%x) {axis=0, sizes=[2, 3], index=0}", "split needs a static size"),
        ("%x: f32[5]", "split(%x) {axis=1, sizes=[5], index=0}", "axis 1 is out of range"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

#[test]
fn chunk_values_and_errors() {
    let x = [iota_f32(&[5])];
    let chunk =
        |chunks: i64, index: i64| one("%x: f32[5]", &format!("chunk(%x) {{axis=0, chunks={chunks}, index={index}}}"));
    // 5 in 3 chunks: sizes 2, 2, 1.
    assert_eq!(both1(&chunk(3, 0), &x).1, vec![0., 1.]);
    assert_eq!(both1(&chunk(3, 1), &x).1, vec![2., 3.]);
    assert_eq!(both1(&chunk(3, 2), &x).1, vec![4.]);
    assert_eq!(both1(&chunk(3, -1), &x).1, vec![4.]);
    // 5 in 4 chunks: sizes 2, 2, 1, so only three pieces.
    assert_eq!(both1(&chunk(4, 2), &x).1, vec![4.]);
    parse_err(&chunk(4, 3), "piece 3 does not exist: chunk gives 3 pieces");
    // 6 in 4 chunks: sizes 2, 2, 2. More chunks than elements: size 1 each.
    assert_eq!(both1(&one("%x: f32[6]", "chunk(%x) {axis=0, chunks=4, index=2}"), &[iota_f32(&[6])]).1, vec![4., 5.]);
    assert_eq!(both1(&chunk(9, 4), &x).1, vec![4.]);
    // An empty dim gives `chunks` empty pieces.
    let src = one("%x: f32[0, 2]", "chunk(%x) {axis=0, chunks=3, index=2}");
    assert_eq!(both1(&src, &[f32t(&[0, 2], &[])]).0, vec![0, 2]);
    let src = one("%x: f32[0]", "chunk(%x) {axis=0, chunks=1000000000000, index=-1}");
    assert_eq!(both1(&src, &[f32t(&[0], &[])]).0, vec![0]);
    // Along the last axis of a 2-d tensor.
    let src = one("%x: f32[2, 3]", "chunk(%x) {axis=-1, chunks=2, index=1}");
    assert_eq!(both1(&src, &[iota_f32(&[2, 3])]), (vec![2, 1], vec![2., 5.]));
    let bad = [
        ("%x: f32[5]", "chunk(%x) {axis=0, chunks=0, index=0}", "`chunks`: must be at least 1, got 0"),
        ("%x: f32[seq]", "chunk(%x) {axis=0, chunks=2, index=0}", "chunk needs a static size"),
        ("%x: f32[5]", "chunk(%x) {axis=0, chunks=2, index=-3}", "piece -3 does not exist"),
    ];
    for (sig, node, needle) in bad {
        parse_err(&one(sig, node), needle);
    }
}

// --- the contract ------------------------------------------------------------------------------

#[test]
fn spec_rows_declare_views_and_rungs() {
    use OpKind::*;
    for k in [BroadcastInDim, Permute, Slice, View, Transpose, Expand, Squeeze, Unsqueeze, Select, Split, Chunk] {
        assert!(k.is_view(), "{k} should be a view");
    }
    // reshape and flatten never alias, so whether a later mutation is seen never depends on
    // run-time strides.
    for k in [Reshape, Flatten, Pad, Cat, Rev, Iota, Full, Contiguous, Stack] {
        assert!(!k.spec().aliases && !k.mutates(), "{k} should copy");
    }
    for k in [BroadcastInDim, Reshape, Permute, Slice, Pad, Cat, Rev, Iota, Full] {
        assert!(k.is_prim(), "{k}");
    }
    for k in [View, Flatten, Transpose, Expand, Squeeze, Unsqueeze, Select, Contiguous, Stack, Split, Chunk] {
        assert_eq!(k.rung(), ladder::ops::Rung::High, "{k}");
    }
}

#[test]
fn printed_graphs_round_trip() {
    let src = "graph g(%x: f32[batch, seq, 4]) {\n  %a = reshape(%x) {shape=[-1, 4]}\n  \
               %b = slice(%x) {axis=1, start=1}\n  %c = cat(%b, %b) {axis=1}\n  %d = pad(%a) {low=[1, 0], high=[0, 0]}\n  \
               %e = full() {shape=[batch, 2], value=0.5, dtype=f16}\n  return %a, %c, %d, %e\n}";
    let g = parse(src);
    let printed = ladder::text::print(&g);
    assert!(printed.contains("f32[batch*seq, 4]") && printed.contains("f32[batch, 2*seq - 2, 4]"), "{printed}");
    assert_eq!(parse(&printed), g);
}
