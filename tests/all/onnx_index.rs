//! ONNX indexing, scans and assorted math (`src/frontend/onnx/index.rs`): hand-computed values
//! on the interpreter, the same graphs compiled for the CPU backend (which sees only prims),
//! edge cases (NaN, ±inf, empty and size-1 dims, symbolic dims) and bad input as typed errors.

use std::path::Path;

use ladder::frontend::onnx::conformance::{run_case, Verdict};
use ladder::frontend::onnx::{import, ImportOptions, NodeError};
use ladder::interp::{self, Options};
use ladder::{Graph, Tensor};

use crate::onnx_build::*;

fn imp(bytes: &[u8]) -> Graph {
    import(bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// Runs on the interpreter and on the CPU backend; both must agree (floats within 4 ulp-ish,
/// the rest exactly). Returns the interpreter's outputs.
#[track_caller]
fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let a = interp::run(g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}")).outputs;
    let b = cpu(g, inputs).unwrap_or_else(|e| panic!("cpu run failed: {e}"));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.dtype(), y.dtype());
        assert_eq!(x.shape(), y.shape());
        for (p, q) in x.to_f64_vec().iter().zip(y.to_f64_vec()) {
            assert!(
                (p.is_nan() && q.is_nan()) || *p == q || (p - q).abs() <= 1e-6 * p.abs().max(1e-30),
                "interp {p} vs cpu {q}"
            );
        }
    }
    a
}

/// Both backends must fail.
#[track_caller]
fn run_fails(g: &Graph, inputs: &[Tensor]) -> String {
    let Err(a) = interp::run(g, inputs, &Options::default()) else { panic!("the interpreter run should fail") };
    assert!(cpu(g, inputs).is_err(), "the cpu run should fail");
    a.to_string()
}

#[track_caller]
fn close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 + 1e-6 * b.abs() || (a.is_nan() && b.is_nan()) || a == b,
            "element {i}: {a} vs {b}\n{g:?}"
        );
    }
}

#[track_caller]
fn exact(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(), "element {i}: {a} vs {b}\n{g:?}");
    }
}

/// A one-node model: float inputs `ins`, initializers, extra input names, outputs.
#[allow(clippy::too_many_arguments)]
fn model(
    op: &str,
    ins: Vec<ladder::frontend::onnx::proto::ValueInfoProto>,
    inits: Vec<ladder::frontend::onnx::proto::TensorProto>,
    extra: &[&str],
    outs: &[&str],
    attrs: Vec<ladder::frontend::onnx::proto::AttributeProto>,
    opset: i64,
) -> Vec<u8> {
    single(op, ins, extra, inits, outs, attrs, opset)
}

#[test]
fn cumsum_and_cumprod() {
    let axis = |v: i64| tensor_i64("axis", &[], &[v]);
    let g = imp(&model("CumSum", vec![vi("x", FLOAT, &["5"])], vec![axis(0)], &["axis"], &["y"], vec![], 14));
    close(&run(&g, &[t(&[5], &[1., 2., 3., 4., 5.])])[0], &[5], &[1., 3., 6., 10., 15.]);
    // NaN and inf propagate to every later prefix.
    let y = &run(&g, &[t(&[5], &[1., f32::INFINITY, f32::NAN, 2., 3.])])[0];
    close(y, &[5], &[1., f64::INFINITY, f64::NAN, f64::NAN, f64::NAN]);
    let g = imp(&model(
        "CumSum",
        vec![vi("x", FLOAT, &["5"])],
        vec![axis(-1)],
        &["axis"],
        &["y"],
        vec![a_int("exclusive", 1), a_int("reverse", 1)],
        14,
    ));
    close(&run(&g, &[t(&[5], &[1., 2., 3., 4., 5.])])[0], &[5], &[14., 12., 9., 5., 0.]);
    // 2-D along axis 1, int64: exact.
    let g = imp(&model("CumSum", vec![vi("x", INT64, &["2", "3"])], vec![axis(1)], &["axis"], &["y"], vec![], 14));
    exact(&run(&g, &[ti(&[2, 3], &[1, 2, 3, 4, 5, 6])])[0], &[2, 3], &[1., 3., 6., 4., 9., 15.]);
    // A symbolic axis takes the triangular form.
    let g = imp(&model("CumSum", vec![vi("x", FLOAT, &["n"])], vec![axis(0)], &["axis"], &["y"], vec![], 14));
    close(&run(&g, &[t(&[4], &[1., 2., 3., 4.])])[0], &[4], &[1., 3., 6., 10.]);
    close(&run(&g, &[t(&[1], &[7.])])[0], &[1], &[7.]);
    assert_eq!(run(&g, &[t(&[0], &[])])[0].shape(), &[0]);
    // Empty and size-1 static axes.
    let g = imp(&model("CumSum", vec![vi("x", FLOAT, &["2", "0"])], vec![axis(1)], &["axis"], &["y"], vec![], 14));
    assert_eq!(run(&g, &[t(&[2, 0], &[])])[0].shape(), &[2, 0]);
    let g = imp(&model(
        "CumProd",
        vec![vi("x", FLOAT, &["1"])],
        vec![axis(0)],
        &["axis"],
        &["y"],
        vec![a_int("exclusive", 1)],
        26,
    ));
    close(&run(&g, &[t(&[1], &[5.])])[0], &[1], &[1.]);
    let g = imp(&model("CumProd", vec![vi("x", FLOAT, &["2", "3"])], vec![axis(0)], &["axis"], &["y"], vec![], 26));
    close(&run(&g, &[t(&[2, 3], &[1., 2., 3., 4., 5., 6.])])[0], &[2, 3], &[1., 2., 3., 4., 10., 18.]);
    let g = imp(&model(
        "CumProd",
        vec![vi("x", FLOAT, &["4"])],
        vec![axis(0)],
        &["axis"],
        &["y"],
        vec![a_int("reverse", 1)],
        26,
    ));
    close(&run(&g, &[t(&[4], &[1., 2., 3., 4.])])[0], &[4], &[24., 24., 12., 4.]);
    // An axis given at run time is a value the graph depends on: a session specializes on it.
    let m = model("CumSum", vec![vi("x", FLOAT, &["3"]), vi("axis", INT64, &[])], vec![], &[], &["y"], vec![], 14);
    assert_eq!(needs_value(&m), "axis");
    let axis0 = Tensor::from_i64(&[], vec![0]).unwrap();
    close(&session_run(&m, &[t(&[3], &[1., 2., 3.]), axis0])[0], &[3], &[1., 3., 6.]);
    // A bad axis is invalid.
    let e = imp_err(&model("CumSum", vec![vi("x", FLOAT, &["3"])], vec![axis(1)], &["axis"], &["y"], vec![], 14));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

#[test]
fn top_k_orders_nan_first_and_ties_by_index() {
    let k = |v: i64| tensor_i64("k", &[1], &[v]);
    let g = imp(&model("TopK", vec![vi("x", FLOAT, &["5"])], vec![k(3)], &["k"], &["v", "i"], vec![], 11));
    let out = run(&g, &[t(&[5], &[1., 3., f32::NAN, 3., 2.])]);
    close(&out[0], &[3], &[f64::NAN, 3., 3.]);
    exact(&out[1], &[3], &[2., 1., 3.]);
    let g = imp(&model(
        "TopK",
        vec![vi("x", FLOAT, &["5"])],
        vec![k(2)],
        &["k"],
        &["v", "i"],
        vec![a_int("largest", 0)],
        11,
    ));
    let out = run(&g, &[t(&[5], &[1., 3., f32::NAN, -0., 0.])]);
    close(&out[0], &[2], &[-0., 0.]);
    exact(&out[1], &[2], &[3., 4.]);
    // Along axis 0 of a 2-D input, with -inf.
    let g = imp(&model(
        "TopK",
        vec![vi("x", FLOAT, &["3", "2"])],
        vec![k(2)],
        &["k"],
        &["v", "i"],
        vec![a_int("axis", 0)],
        11,
    ));
    let out = run(&g, &[t(&[3, 2], &[f32::NEG_INFINITY, 1., 2., 1., 0., 5.])]);
    close(&out[0], &[2, 2], &[2., 5., 0., 1.]);
    exact(&out[1], &[2, 2], &[1., 2., 2., 0.]);
    // k = 0 gives empty results.
    let g = imp(&model("TopK", vec![vi("x", FLOAT, &["3"])], vec![k(0)], &["k"], &["v", "i"], vec![], 11));
    assert_eq!(run(&g, &[t(&[3], &[1., 2., 3.])])[1].shape(), &[0]);
    // Opset 1-9: k is an attribute.
    let g = imp(&model("TopK", vec![vi("x", FLOAT, &["3"])], vec![], &[], &["v", "i"], vec![a_int("k", 1)], 9));
    close(&run(&g, &[t(&[3], &[1., 9., 3.])])[0], &[1], &[9.]);
    // k larger than the axis, a run-time k, a symbolic axis.
    let e = imp_err(&model("TopK", vec![vi("x", FLOAT, &["3"])], vec![k(4)], &["k"], &["v", "i"], vec![], 11));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let m = model("TopK", vec![vi("x", FLOAT, &["3"]), vi("k", INT64, &["1"])], vec![], &[], &["v", "i"], vec![], 11);
    assert_eq!(needs_value(&m), "k");
    let k2 = Tensor::from_i64(&[1], vec![2]).unwrap();
    close(&session_run(&m, &[t(&[3], &[1., 9., 3.]), k2])[0], &[2], &[9., 3.]);
    let e = imp_err(&model("TopK", vec![vi("x", FLOAT, &["n"])], vec![k(1)], &["k"], &["v", "i"], vec![], 11));
    assert!(matches!(e, NodeError::Unsupported(_)), "{e}");
}

fn scatter_model(red: &str, axis: i64, xd: &[&str], id: &[&str]) -> Graph {
    imp(&model(
        "ScatterElements",
        vec![vi("x", FLOAT, xd), vi("i", INT64, id), vi("u", FLOAT, id)],
        vec![],
        &[],
        &["y"],
        vec![a_str("reduction", red), a_int("axis", axis)],
        18,
    ))
}

#[test]
fn scatter_elements_reductions() {
    let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let i = ti(&[2, 2], &[2, -3, 1, 1]);
    let u = t(&[2, 2], &[10., 20., 30., 40.]);
    let g = scatter_model("none", 1, &["2", "3"], &["2", "2"]);
    // Row 1 writes column 1 twice: undefined in ONNX, an error in ladder.
    let msg = run_fails(&g, &[x.clone(), i.clone(), u.clone()]);
    assert!(msg.contains("out of range"), "{msg}");
    let i1 = ti(&[2, 2], &[2, -3, 1, 0]);
    close(&run(&g, &[x.clone(), i1.clone(), u.clone()])[0], &[2, 3], &[20., 2., 10., 40., 30., 6.]);
    let add = scatter_model("add", 1, &["2", "3"], &["2", "2"]);
    close(&run(&add, &[x.clone(), i.clone(), u.clone()])[0], &[2, 3], &[21., 2., 13., 4., 75., 6.]);
    let mul = scatter_model("mul", 1, &["2", "3"], &["2", "2"]);
    close(&run(&mul, &[x.clone(), i.clone(), u.clone()])[0], &[2, 3], &[20., 2., 30., 4., 6000., 6.]);
    let max = scatter_model("max", 1, &["2", "3"], &["2", "2"]);
    let u2 = t(&[2, 2], &[-10., f32::NAN, 30., 1.]);
    close(&run(&max, &[x.clone(), i.clone(), u2.clone()])[0], &[2, 3], &[f64::NAN, 2., 3., 4., 30., 6.]);
    let min = scatter_model("min", 1, &["2", "3"], &["2", "2"]);
    close(&run(&min, &[x.clone(), i.clone(), u2])[0], &[2, 3], &[f64::NAN, 2., -10., 4., 1., 6.]);
    // Indices smaller than the data off the axis, along axis 0.
    let g = scatter_model("max", 0, &["2", "3"], &["1", "2"]);
    close(&run(&g, &[x.clone(), ti(&[1, 2], &[1, 0]), t(&[1, 2], &[9., 0.])])[0], &[2, 3], &[1., 2., 3., 9., 5., 6.]);
    // Out-of-range indices fail in every mode.
    run_fails(&g, &[x.clone(), ti(&[1, 2], &[2, 0]), t(&[1, 2], &[9., 0.])]);
    let bad = ti(&[2, 2], &[3, 0, 1, 0]);
    for g in [&scatter_model("none", 1, &["2", "3"], &["2", "2"]), &add, &mul] {
        run_fails(g, &[x.clone(), bad.clone(), u.clone()]);
    }
    // Empty updates leave the data alone.
    let g = scatter_model("none", 1, &["2", "3"], &["2", "0"]);
    close(&run(&g, &[x.clone(), ti(&[2, 0], &[]), t(&[2, 0], &[])])[0], &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let g = scatter_model("min", 1, &["2", "3"], &["2", "0"]);
    close(&run(&g, &[x.clone(), ti(&[2, 0], &[]), t(&[2, 0], &[])])[0], &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    // Symbolic data with static updates (the copy mode gathers from cat(updates, data)).
    let g = scatter_model("none", 0, &["n"], &["2"]);
    close(&run(&g, &[t(&[4], &[1., 2., 3., 4.]), ti(&[2], &[3, 0]), t(&[2], &[7., 8.])])[0], &[4], &[8., 2., 3., 7.]);
    // Opset 10 `Scatter`, and a bad reduction.
    let g = imp(&model(
        "Scatter",
        vec![vi("x", FLOAT, &["3"]), vi("i", INT64, &["1"]), vi("u", FLOAT, &["1"])],
        vec![],
        &[],
        &["y"],
        vec![],
        10,
    ));
    close(&run(&g, &[t(&[3], &[1., 2., 3.]), ti(&[1], &[-1]), t(&[1], &[5.])])[0], &[3], &[1., 2., 5.]);
    let e = imp_err(&model(
        "ScatterElements",
        vec![vi("x", FLOAT, &["3"]), vi("i", INT64, &["1"]), vi("u", FLOAT, &["1"])],
        vec![],
        &[],
        &["y"],
        vec![a_str("reduction", "mean")],
        18,
    ));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

#[test]
fn gather_nd_and_scatter_nd() {
    // GatherND: data [2, 2, 2], tuples of 2 -> rows.
    let g = imp(&model(
        "GatherND",
        vec![vi("d", FLOAT, &["2", "2", "2"]), vi("i", INT64, &["2", "2"])],
        vec![],
        &[],
        &["y"],
        vec![],
        13,
    ));
    let d = t(&[2, 2, 2], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    close(&run(&g, &[d.clone(), ti(&[2, 2], &[1, 0, -1, -1])])[0], &[2, 2], &[4., 5., 6., 7.]);
    // A component out of range fails (even where the flat position would exist).
    run_fails(&g, &[d.clone(), ti(&[2, 2], &[0, 2, 0, 0])]);
    // batch_dims = 1.
    let g = imp(&model(
        "GatherND",
        vec![vi("d", FLOAT, &["2", "2", "2"]), vi("i", INT64, &["2", "1"])],
        vec![],
        &[],
        &["y"],
        vec![a_int("batch_dims", 1)],
        13,
    ));
    close(&run(&g, &[d.clone(), ti(&[2, 1], &[1, 0])])[0], &[2, 2], &[2., 3., 4., 5.]);
    // ScatterND: none and add.
    let sm = |red: &str| {
        imp(&model(
            "ScatterND",
            vec![vi("d", FLOAT, &["4"]), vi("i", INT64, &["2", "1"]), vi("u", FLOAT, &["2"])],
            vec![],
            &[],
            &["y"],
            vec![a_str("reduction", red)],
            18,
        ))
    };
    let d4 = t(&[4], &[1., 2., 3., 4.]);
    close(&run(&sm("none"), &[d4.clone(), ti(&[2, 1], &[3, 1]), t(&[2], &[9., 8.])])[0], &[4], &[1., 8., 3., 9.]);
    close(&run(&sm("add"), &[d4.clone(), ti(&[2, 1], &[3, 3]), t(&[2], &[9., 8.])])[0], &[4], &[1., 2., 3., 21.]);
    close(&run(&sm("mul"), &[d4.clone(), ti(&[2, 1], &[-1, 3]), t(&[2], &[2., 3.])])[0], &[4], &[1., 2., 3., 24.]);
    run_fails(&sm("none"), &[d4.clone(), ti(&[2, 1], &[4, 0]), t(&[2], &[9., 8.])]);
    // Updates of the wrong shape.
    let e = imp_err(&model(
        "ScatterND",
        vec![vi("d", FLOAT, &["4"]), vi("i", INT64, &["2", "1"]), vi("u", FLOAT, &["3"])],
        vec![],
        &[],
        &["y"],
        vec![],
        18,
    ));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

#[test]
fn reverse_sequence_and_compress() {
    let g = imp(&model(
        "ReverseSequence",
        vec![vi("x", FLOAT, &["3", "2"]), vi("l", INT64, &["2"])],
        vec![],
        &[],
        &["y"],
        vec![a_int("batch_axis", 1), a_int("time_axis", 0)],
        10,
    ));
    // Column 0 reverses its first 3 steps, column 1 its first 1.
    close(&run(&g, &[t(&[3, 2], &[1., 2., 3., 4., 5., 6.]), ti(&[2], &[3, 1])])[0], &[3, 2], &[5., 2., 3., 4., 1., 6.]);
    let cond = tensor_bool("c", &[3], &[true, false, true]);
    let g = imp(&model(
        "Compress",
        vec![vi("x", FLOAT, &["3", "2"])],
        vec![cond.clone()],
        &["c"],
        &["y"],
        vec![a_int("axis", 0)],
        11,
    ));
    close(&run(&g, &[t(&[3, 2], &[1., 2., 3., 4., 5., 6.])])[0], &[2, 2], &[1., 2., 5., 6.]);
    // Without an axis the input is flattened; a short condition keeps a prefix.
    let g = imp(&model("Compress", vec![vi("x", FLOAT, &["2", "2"])], vec![cond], &["c"], &["y"], vec![], 11));
    close(&run(&g, &[t(&[2, 2], &[1., 2., 3., 4.])])[0], &[2], &[1., 3.]);
    let m = model("Compress", vec![vi("x", FLOAT, &["2"]), vi("c", BOOL, &["2"])], vec![], &[], &["y"], vec![], 11);
    assert_eq!(needs_value(&m), "c");
    let c = Tensor::from_bool(&[2], vec![false, true]).unwrap();
    close(&session_run(&m, &[t(&[2], &[5., 6.]), c])[0], &[1], &[6.]);
    let long = tensor_bool("c", &[3], &[false, false, true]);
    let e = imp_err(&model(
        "Compress",
        vec![vi("x", FLOAT, &["2"])],
        vec![long],
        &["c"],
        &["y"],
        vec![a_int("axis", 0)],
        11,
    ));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

#[test]
fn det_inverse_trig_and_swish() {
    let g = imp(&model("Det", vec![vi("x", FLOAT, &["2", "3", "3"])], vec![], &[], &["y"], vec![], 22));
    let x = t(&[2, 3, 3], &[1., 2., 3., 0., 1., 4., 5., 6., 0., 2., 0., 0., 0., 3., 0., 0., 0., 4.]);
    close(&run(&g, &[x])[0], &[2], &[1., 24.]);
    let g = imp(&model("Det", vec![vi("x", FLOAT, &["1", "1"])], vec![], &[], &["y"], vec![], 22));
    close(&run(&g, &[t(&[1, 1], &[-3.])])[0], &[], &[-3.]);
    let e = imp_err(&model("Det", vec![vi("x", FLOAT, &["5", "5"])], vec![], &[], &["y"], vec![], 22));
    assert!(matches!(e, NodeError::Unsupported(_)), "{e}");
    let e = imp_err(&model("Det", vec![vi("x", FLOAT, &["2", "3"])], vec![], &[], &["y"], vec![], 22));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");

    let xs = [-1.0f32, -0.5, -0.0, 0.0, 1e-6, 0.5, 0.999, 1.0, 1.5, f32::NAN];
    let x = t(&[xs.len()], &xs);
    let f = |op: &str| imp(&model(op, vec![vi("x", FLOAT, &["10"])], vec![], &[], &["y"], vec![], 22));
    type F = fn(f64) -> f64;
    let cases: [(&str, F); 6] = [
        ("Asin", f64::asin),
        ("Acos", f64::acos),
        ("Atan", f64::atan),
        ("Asinh", f64::asinh),
        ("Atanh", f64::atanh),
        ("Acosh", f64::acosh),
    ];
    for (op, func) in cases {
        let got = run(&f(op), std::slice::from_ref(&x))[0].to_f64_vec();
        for (&a, g) in xs.iter().zip(got) {
            let want = func(f64::from(a));
            let ok = (want.is_nan() && g.is_nan())
                || want == g
                || (g - want).abs() <= 4.0 * f64::from(f32::EPSILON) * want.abs().max(f64::from(f32::MIN_POSITIVE));
            assert!(ok, "{op}({a}) = {g}, expected {want}");
            if want == 0.0 {
                assert_eq!(g.is_sign_negative(), want.is_sign_negative(), "{op}({a}) sign");
            }
        }
    }
    // Large and infinite arguments.
    let big = t(&[4], &[1e30, -1e30, f32::INFINITY, f32::NEG_INFINITY]);
    let g4 = |op: &str| imp(&model(op, vec![vi("x", FLOAT, &["4"])], vec![], &[], &["y"], vec![], 22));
    let got = run(&g4("Atan"), std::slice::from_ref(&big))[0].to_f64_vec();
    let h = f64::from(std::f32::consts::FRAC_PI_2);
    assert_eq!(got, vec![h, -h, h, -h]);
    let got = run(&g4("Asinh"), std::slice::from_ref(&big))[0].to_f64_vec();
    assert!(
        (got[0] - 1e30f64.asinh()).abs() < 1e-5 * 70.0 && got[2] == f64::INFINITY && got[3] == f64::NEG_INFINITY,
        "{got:?}"
    );
    let got = run(&g4("Acosh"), std::slice::from_ref(&big))[0].to_f64_vec();
    assert!((got[0] - 1e30f64.acosh()).abs() < 1e-5 * 70.0 && got[1].is_nan() && got[2] == f64::INFINITY, "{got:?}");
    // Integer input is invalid.
    let e = imp_err(&model("Atan", vec![vi("x", INT64, &["2"])], vec![], &[], &["y"], vec![], 22));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");

    let g = imp(&model("Swish", vec![vi("x", FLOAT, &["3"])], vec![], &[], &["y"], vec![a_float("alpha", 2.0)], 24));
    let s = |x: f64| x / (1.0 + (-2.0 * x).exp());
    close(&run(&g, &[t(&[3], &[-1., 0., 2.])])[0], &[3], &[s(-1.), 0., s(2.)]);
}

#[test]
fn pad_with_a_run_time_value_and_training_batch_norm() {
    let bytes = {
        let n = node("Pad", &["x", "p", "v"], &["y"], vec![]);
        encode(&model_proto(
            graph(
                vec![n],
                vec![vi("x", FLOAT, &["2", "2"]), vi("v", FLOAT, &[])],
                vec![vi("y", FLOAT, &[])],
                vec![tensor_i64("p", &[4], &[1, 0, -1, 1])],
            ),
            18,
        ))
    };
    let g = imp(&bytes);
    let y = &run(&g, &[t(&[2, 2], &[1., 2., 3., 4.]), Tensor::scalar_f32(f32::NAN)])[0];
    close(y, &[2, 3], &[f64::NAN, f64::NAN, f64::NAN, 1., 2., f64::NAN]);

    let n = node(
        "BatchNormalization",
        &["x", "s", "b", "m", "v"],
        &["y", "rm", "rv"],
        vec![a_int("training_mode", 1), a_float("momentum", 0.5), a_float("epsilon", 0.0)],
    );
    let ins = vec![
        vi("x", FLOAT, &["2", "1"]),
        vi("s", FLOAT, &["1"]),
        vi("b", FLOAT, &["1"]),
        vi("m", FLOAT, &["1"]),
        vi("v", FLOAT, &["1"]),
    ];
    let outs = vec![vi("y", FLOAT, &[]), vi("rm", FLOAT, &[]), vi("rv", FLOAT, &[])];
    let g = imp(&encode(&model_proto(graph(vec![n], ins, outs, vec![]), 15)));
    // Batch mean 2, variance 1: y = (x - 2) * 3 + 1; running = 0.5 old + 0.5 batch.
    let out = run(&g, &[t(&[2, 1], &[1., 3.]), t(&[1], &[3.]), t(&[1], &[1.]), t(&[1], &[10.]), t(&[1], &[5.])]);
    close(&out[0], &[2, 1], &[-2., 4.]);
    close(&out[1], &[1], &[6.]);
    close(&out[2], &[1], &[3.]);
}

/// The node tests of this slice pass on the CPU backend too (skipped when the ONNX wheel's
/// test data is not installed).
#[test]
fn node_tests_of_this_slice_pass_on_the_cpu_backend() {
    let dir = Path::new("/tmp/ladder-ci-onnx-venv/lib/python3.11/site-packages/onnx/backend/test/data/node");
    if !dir.is_dir() {
        eprintln!("skipped: {} is not installed", dir.display());
        return;
    }
    let prefixes = [
        "test_cumsum",
        "test_cumprod",
        "test_top_k",
        "test_scatter",
        "test_gathernd",
        "test_reversesequence",
        "test_det",
        "test_asin",
        "test_acos",
        "test_atan",
        "test_swish",
        "test_constant_pad",
        "test_batchnorm",
    ];
    let native = ladder::CompileOptions::native_cpu(1).unwrap();
    let mut passed = 0;
    for case in ladder::frontend::onnx::conformance::cases(dir).unwrap() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        if !prefixes.iter().any(|p| name.starts_with(p)) || name.ends_with("_expanded") {
            continue;
        }
        let r = run_case(&case, &ImportOptions::default(), &native);
        assert!(r.verdict != Verdict::Failed, "{name}: {}", r.reason);
        passed += usize::from(r.verdict == Verdict::Passed);
    }
    assert!(passed >= 60, "only {passed} cases passed");
}

/// The `atan` op itself: hand values, signed zero, ±inf, NaN, empty and size-1 tensors, every
/// float dtype through its decomposition (the CPU backend), and typed errors.
#[test]
fn atan_op_contract() {
    use ladder::text::parse;
    let g = parse("graph a(%x: f32[n]) {\n  %y = atan(%x)\n  return %y\n}").unwrap();
    let xs = [0.0f32, -0.0, 1.0, -1.0, 0.5, 2.5, 1e-30, 1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let y = run(&g, &[t(&[xs.len()], &xs)]).remove(0);
    let got = y.to_f64_vec();
    for (&x, g) in xs.iter().zip(got) {
        let want = f64::from((f64::from(x).atan()) as f32);
        assert!((want.is_nan() && g.is_nan()) || want.to_bits() == g.to_bits(), "atan({x}) = {g}, expected {want}");
    }
    assert_eq!(run(&g, &[t(&[0], &[])])[0].shape(), &[0]);
    close(&run(&g, &[t(&[1], &[1.0])])[0], &[1], &[std::f64::consts::FRAC_PI_4]);
    // f64 through the rational form: within 2 ulp of the libm value.
    let g = parse("graph a(%x: f64[4]) {\n  %y = atan(%x)\n  return %y\n}").unwrap();
    let xs = [0.3f64, 0.7, 3.0, -1e-300];
    let x = Tensor::new(vec![4], ladder::TensorData::F64(xs.to_vec())).unwrap();
    let got = run(&g, &[x])[0].to_f64_vec();
    for (&x, g) in xs.iter().zip(got) {
        assert!((g - x.atan()).abs() <= 2.0 * f64::EPSILON * x.atan().abs(), "atan({x}) = {g}");
    }
    // Integer and bool inputs are type errors; so is a second argument.
    for src in [
        "graph a(%x: i64[2]) {\n  %y = atan(%x)\n  return %y\n}",
        "graph a(%x: bool[2]) {\n  %y = atan(%x)\n  return %y\n}",
        "graph a(%x: f32[2]) {\n  %y = atan(%x, %x)\n  return %y\n}",
    ] {
        assert!(parse(src).is_err(), "{src}");
    }
}
