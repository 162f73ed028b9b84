//! Spatial and signal ONNX ops on small models built in code: Resize/Upsample, N-d pooling,
//! LpPool, LRN, MaxUnpool, CenterCropPad, GridSample, AffineGrid, DFT, STFT, the window ops
//! and MelWeightMatrix. Hand-computed values on the interpreter, and the typed errors for bad
//! models.

use ladder::frontend::onnx::proto::{AttributeProto, TensorProto};
use ladder::frontend::onnx::{import, ImportError, ImportOptions, NodeError};
use ladder::interp::{self, Options};
use ladder::{Graph, Tensor};

use crate::onnx_build::*;

fn imp(bytes: &[u8]) -> Graph {
    import(bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// Runs on the interpreter, and checks the CPU backend (lowered to prims, scheduled into
/// kernels) agrees.
fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let want = interp::run(g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}")).outputs;
    let plan = ladder::compile(g, &ladder::CompileOptions::reference()).unwrap_or_else(|e| panic!("compile: {e}"));
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("cpu run failed: {e}")).outputs;
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        close(a, b.shape(), &b.to_f64_vec());
    }
    want
}

#[track_caller]
fn close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = (a - b).abs() <= 1e-5 + 1e-5 * b.abs() || (a.is_nan() && b.is_nan()) || a == b;
        assert!(ok, "element {i}: {a} vs {b}\n{g:?}");
    }
}

fn dims(d: &[usize]) -> Vec<String> {
    d.iter().map(|x| x.to_string()).collect()
}

/// One node over one f32 input `x` of shape `xd`, with initializers fed as the next inputs.
fn node1(
    op: &str,
    xd: &[usize],
    inits: Vec<TensorProto>,
    extra: &[&str],
    attrs: Vec<AttributeProto>,
    opset: i64,
) -> Result<Graph, ImportError> {
    let d = dims(xd);
    let d: Vec<&str> = d.iter().map(String::as_str).collect();
    import(&single(op, vec![vi("x", FLOAT, &d)], extra, inits, &["y"], attrs, opset), &ImportOptions::default())
}

fn ok1(
    op: &str,
    xd: &[usize],
    inits: Vec<TensorProto>,
    extra: &[&str],
    attrs: Vec<AttributeProto>,
    opset: i64,
) -> Graph {
    node1(op, xd, inits, extra, attrs, opset).unwrap_or_else(|e| panic!("import failed: {e}"))
}

#[track_caller]
fn node_err(r: Result<Graph, ImportError>) -> NodeError {
    match r {
        Err(ImportError::Node { error, .. }) => error,
        Err(e) => panic!("expected a node error, got {e}"),
        Ok(_) => panic!("expected a node error, got a graph"),
    }
}

fn scales(v: &[f32]) -> TensorProto {
    tensor_f32("scales", &[v.len() as i64], v)
}

fn sizes(v: &[i64]) -> TensorProto {
    tensor_i64("sizes", &[v.len() as i64], v)
}

// --- Resize ---------------------------------------------------------------------------------

#[test]
fn resize_linear_half_pixel() {
    let g = ok1(
        "Resize",
        &[1, 1, 1, 2],
        vec![scales(&[1., 1., 1., 2.])],
        &["", "scales"],
        vec![a_str("mode", "linear")],
        19,
    );
    // Sources -0.25, 0.25, 0.75, 1.25 between 1 and 3 (edges clamp).
    close(&run(&g, &[t(&[1, 1, 1, 2], &[1., 3.])])[0], &[1, 1, 1, 4], &[1., 1.5, 2.5, 3.]);
    // align_corners: 0, 1/3, 2/3, 1 of the way.
    let g = ok1(
        "Resize",
        &[1, 1, 1, 2],
        vec![scales(&[1., 1., 1., 2.])],
        &["", "scales"],
        vec![a_str("mode", "linear"), a_str("coordinate_transformation_mode", "align_corners")],
        19,
    );
    close(&run(&g, &[t(&[1, 1, 1, 2], &[1., 4.])])[0], &[1, 1, 1, 4], &[1., 2., 3., 4.]);
}

#[test]
fn resize_nearest_modes_and_sizes() {
    // 3 -> 2 asymmetric: sources 0 and 1.5.
    let mk = |nm: &str| {
        ok1(
            "Resize",
            &[1, 3],
            vec![sizes(&[1, 2])],
            &["", "", "sizes"],
            vec![a_str("coordinate_transformation_mode", "asymmetric"), a_str("nearest_mode", nm)],
            19,
        )
    };
    let x = t(&[1, 3], &[10., 20., 30.]);
    close(&run(&mk("round_prefer_floor"), std::slice::from_ref(&x))[0], &[1, 2], &[10., 20.]);
    close(&run(&mk("round_prefer_ceil"), std::slice::from_ref(&x))[0], &[1, 2], &[10., 30.]);
    close(&run(&mk("floor"), std::slice::from_ref(&x))[0], &[1, 2], &[10., 20.]);
    close(&run(&mk("ceil"), &[x])[0], &[1, 2], &[10., 30.]);
    // Nearest copies exactly: NaN and infinities pass through.
    let g = ok1("Resize", &[1, 3], vec![scales(&[1., 2.])], &["", "scales"], vec![], 19);
    let x = t(&[1, 3], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    close(
        &run(&g, &[x])[0],
        &[1, 6],
        &[f64::NAN, f64::NAN, f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY],
    );
}

#[test]
fn resize_axes_keep_aspect_ratio_and_integers() {
    // sizes [3, 6] on axes [0, 1] of a 2x2 with not_larger: scale min(1.5, 3) = 1.5 -> 3x3.
    let g = ok1(
        "Resize",
        &[2, 2],
        vec![sizes(&[3, 6])],
        &["", "", "sizes"],
        vec![a_ints("axes", &[0, 1]), a_str("keep_aspect_ratio_policy", "not_larger")],
        19,
    );
    let out = &run(&g, &[t(&[2, 2], &[1., 2., 3., 4.])])[0];
    assert_eq!(out.shape(), &[3, 3]);
    // An i64 tensor resized by nearest stays i64 and exact.
    let bytes = single(
        "Resize",
        vec![vi("x", INT64, &["1", "2"])],
        &["", "scales"],
        vec![scales(&[1., 2.])],
        &["y"],
        vec![],
        19,
    );
    let g = imp(&bytes);
    let got = &run(&g, &[ti(&[1, 2], &[i64::MAX, -7])])[0];
    assert!(got.bit_eq(&ti(&[1, 4], &[i64::MAX, i64::MAX, -7, -7])), "{got:?}");
}

#[test]
fn resize_cubic_constant_and_extrapolation() {
    // Cubic weights sum to 1: a constant image stays constant.
    let g = ok1(
        "Resize",
        &[1, 1, 2, 2],
        vec![scales(&[1., 1., 2., 2.])],
        &["", "scales"],
        vec![a_str("mode", "cubic")],
        19,
    );
    close(&run(&g, &[t(&[1, 1, 2, 2], &[5.; 4])])[0], &[1, 1, 4, 4], &[5.; 16]);
    // Antialiased downscaling of a constant too.
    let g = ok1(
        "Resize",
        &[1, 1, 4, 4],
        vec![scales(&[1., 1., 0.5, 0.5])],
        &["", "scales"],
        vec![a_str("mode", "cubic"), a_int("antialias", 1)],
        19,
    );
    close(&run(&g, &[t(&[1, 1, 4, 4], &[2.; 16])])[0], &[1, 1, 2, 2], &[2.; 4]);
    // tf_crop_and_resize: roi [0, 2] on the last axis maps 0, 1, 2; 2 is outside -> 9.
    let g = ok1(
        "Resize",
        &[1, 2],
        vec![tensor_f32("roi", &[4], &[0., 0., 1., 2.]), sizes(&[1, 3])],
        &["roi", "", "sizes"],
        vec![
            a_str("mode", "linear"),
            a_str("coordinate_transformation_mode", "tf_crop_and_resize"),
            a_float("extrapolation_value", 9.),
        ],
        19,
    );
    close(&run(&g, &[t(&[1, 2], &[1., 3.])])[0], &[1, 3], &[1., 3., 9.]);
    // A size-1 axis resized up by linear repeats its value.
    let g = ok1("Resize", &[1, 1], vec![sizes(&[3, 1])], &["", "", "sizes"], vec![a_str("mode", "linear")], 19);
    close(&run(&g, &[t(&[1, 1], &[4.])])[0], &[3, 1], &[4., 4., 4.]);
}

#[test]
fn upsample_and_resize_10_repeat() {
    let g = ok1("Upsample", &[1, 2], vec![scales(&[1., 3.])], &["scales"], vec![], 9);
    close(&run(&g, &[t(&[1, 2], &[1., 2.])])[0], &[1, 6], &[1., 1., 1., 2., 2., 2.]);
    let g = ok1("Resize", &[1, 2], vec![scales(&[1., 2.])], &["scales"], vec![a_str("mode", "linear")], 10);
    // Resize-10 linear is asymmetric: sources 0, 0.5, 1, 1.5.
    close(&run(&g, &[t(&[1, 2], &[1., 3.])])[0], &[1, 4], &[1., 2., 3., 3.]);
}

#[test]
fn resize_bad_models_are_typed_errors() {
    // Scales as run-time data.
    let bytes =
        single("Resize", vec![vi("x", FLOAT, &["1", "2"]), vi("s", FLOAT, &["2"])], &[], vec![], &["y"], vec![], 19);
    let bytes = {
        // inputs x, "", s
        let mut m = <ladder::frontend::onnx::proto::ModelProto as prost::Message>::decode(bytes.as_slice()).unwrap();
        let n = &mut m.graph.as_mut().unwrap().node[0];
        n.input = vec!["x".into(), String::new(), "s".into()];
        prost::Message::encode_to_vec(&m)
    };
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::NeedsValue { name, .. } if name == "s"), "{e}");
    // Wrong number of scales.
    let e = node_err(node1("Resize", &[1, 2], vec![scales(&[2.])], &["", "scales"], vec![], 19));
    assert!(matches!(&e, NodeError::Invalid(m) if m.contains("scales")), "{e}");
    // Non-positive and non-finite scales.
    for s in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let e = node_err(node1("Resize", &[1, 2], vec![scales(&[1., s])], &["", "scales"], vec![], 19));
        assert!(matches!(e, NodeError::Invalid(_) | NodeError::Unsupported(_)), "{e}");
    }
    // Negative and absurd sizes.
    let e = node_err(node1("Resize", &[1, 2], vec![sizes(&[1, -3])], &["", "", "sizes"], vec![], 19));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = import(
        &single(
            "Resize",
            vec![vi("x", FLOAT, &["1", "2"])],
            &["", "", "sizes"],
            vec![sizes(&[1, 4_000_000_000])],
            &["y"],
            vec![],
            19,
        ),
        &ImportOptions {
            limits: ladder::Limits { max_tensor_bytes: 1 << 20, ..Default::default() },
            ..ImportOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(&e, ImportError::Limit { .. } | ImportError::Node { .. }), "{e}");
    // Antialiasing by a tiny factor needs too many taps.
    let e = node_err(node1(
        "Resize",
        &[1, 4],
        vec![scales(&[1., 1e-6])],
        &["", "scales"],
        vec![a_str("mode", "linear"), a_int("antialias", 1)],
        19,
    ));
    assert!(matches!(&e, NodeError::Unsupported(m) if m.contains("taps")), "{e}");
    // Unknown modes; linear on integers.
    let e =
        node_err(node1("Resize", &[1, 2], vec![scales(&[1., 2.])], &["", "scales"], vec![a_str("mode", "area")], 19));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let bytes = single(
        "Resize",
        vec![vi("x", INT64, &["1", "2"])],
        &["", "scales"],
        vec![scales(&[1., 2.])],
        &["y"],
        vec![a_str("mode", "linear")],
        19,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::Unsupported(_), .. }), "{e}");
}

// --- Pooling ----------------------------------------------------------------------------------

#[test]
fn pools_3d() {
    let x = t(&[1, 1, 2, 2, 2], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    let g = ok1("MaxPool", &[1, 1, 2, 2, 2], vec![], &[], vec![a_ints("kernel_shape", &[2, 2, 2])], 22);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 1, 1, 1], &[7.]);
    let g = ok1("AveragePool", &[1, 1, 2, 2, 2], vec![], &[], vec![a_ints("kernel_shape", &[2, 2, 2])], 22);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 1, 1, 1], &[3.5]);
    // Pads 1 and stride 2: each window holds one element.
    let attrs = |inc: i64| {
        vec![
            a_ints("kernel_shape", &[2, 2, 2]),
            a_ints("strides", &[2, 2, 2]),
            a_ints("pads", &[1, 1, 1, 1, 1, 1]),
            a_int("count_include_pad", inc),
        ]
    };
    let g = ok1("AveragePool", &[1, 1, 2, 2, 2], vec![], &[], attrs(0), 22);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2, 2, 2], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    let g = ok1("AveragePool", &[1, 1, 2, 2, 2], vec![], &[], attrs(1), 22);
    let want: Vec<f64> = (0..8).map(|v| v as f64 / 8.).collect();
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2, 2, 2], &want);
    // Max pooling propagates NaN.
    let g = ok1("MaxPool", &[1, 1, 2, 2, 2], vec![], &[], vec![a_ints("kernel_shape", &[2, 2, 2])], 22);
    let xn = t(&[1, 1, 2, 2, 2], &[0., 1., f32::NAN, 3., 4., 5., 6., 7.]);
    close(&run(&g, &[xn])[0], &[1, 1, 1, 1, 1], &[f64::NAN]);
    // ceil_mode adds a last window over the edge.
    let g = ok1(
        "MaxPool",
        &[1, 1, 1, 1, 3],
        vec![],
        &[],
        vec![a_ints("kernel_shape", &[1, 1, 2]), a_ints("strides", &[1, 1, 2]), a_int("ceil_mode", 1)],
        22,
    );
    close(&run(&g, &[t(&[1, 1, 1, 1, 3], &[1., 5., 3.])])[0], &[1, 1, 1, 1, 2], &[5., 3.]);
}

#[test]
fn average_pool_asymmetric_and_dilated() {
    let g = ok1(
        "AveragePool",
        &[1, 1, 1, 3],
        vec![],
        &[],
        vec![a_ints("kernel_shape", &[1, 2]), a_ints("pads", &[0, 1, 0, 0])],
        22,
    );
    close(&run(&g, &[t(&[1, 1, 1, 3], &[1., 2., 3.])])[0], &[1, 1, 1, 3], &[1., 1.5, 2.5]);
    let g = ok1(
        "AveragePool",
        &[1, 1, 1, 4],
        vec![],
        &[],
        vec![a_ints("kernel_shape", &[1, 2]), a_ints("dilations", &[1, 2])],
        22,
    );
    close(&run(&g, &[t(&[1, 1, 1, 4], &[1., 2., 3., 4.])])[0], &[1, 1, 1, 2], &[2., 3.]);
}

#[test]
fn lp_pool_lrn() {
    let x = t(&[1, 1, 3], &[3., -4., 0.]);
    let g = ok1("LpPool", &[1, 1, 3], vec![], &[], vec![a_ints("kernel_shape", &[2]), a_int("p", 2)], 22);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2], &[5., 4.]);
    let g = ok1("LpPool", &[1, 1, 3], vec![], &[], vec![a_ints("kernel_shape", &[2]), a_int("p", 1)], 22);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2], &[7., 4.]);
    let g = ok1("LpPool", &[1, 1, 3], vec![], &[], vec![a_ints("kernel_shape", &[2]), a_int("p", 3)], 22);
    close(&run(&g, &[x])[0], &[1, 1, 2], &[91f64.cbrt(), 4.]);
    // LRN over 2 channels, size 2: windows [c, c+2).
    let g = ok1(
        "LRN",
        &[1, 2, 1, 1],
        vec![],
        &[],
        vec![a_int("size", 2), a_float("alpha", 2.), a_float("beta", 1.), a_float("bias", 1.)],
        13,
    );
    close(&run(&g, &[t(&[1, 2, 1, 1], &[1., 2.])])[0], &[1, 2, 1, 1], &[1. / 6., 0.4]);
}

#[test]
fn pool_bad_models_are_typed_errors() {
    let e = node_err(node1("MaxPool", &[1, 1, 2, 2, 2], vec![], &[], vec![a_ints("kernel_shape", &[2, 2])], 22));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = node_err(node1("AveragePool", &[1, 1, 2, 2, 2], vec![], &[], vec![a_ints("kernel_shape", &[2, 0, 2])], 22));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = node_err(node1("LpPool", &[1, 1, 2], vec![], &[], vec![a_ints("kernel_shape", &[1 << 40])], 22));
    assert!(matches!(e, NodeError::Unsupported(_)), "{e}");
    let e = node_err(node1("LpPool", &[1, 1, 2], vec![], &[], vec![a_ints("kernel_shape", &[1]), a_int("p", 0)], 22));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = node_err(node1("LRN", &[1, 2, 1, 1], vec![], &[], vec![a_int("size", 0)], 13));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    // A symbolic spatial dim.
    let bytes = single(
        "MaxPool",
        vec![vi("x", FLOAT, &["1", "1", "2", "2", "d"])],
        &[],
        vec![],
        &["y"],
        vec![a_ints("kernel_shape", &[2, 2, 2])],
        22,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::NeedsStatic(_), .. }), "{e}");
}

// --- MaxUnpool, CenterCropPad ----------------------------------------------------------------

#[test]
fn max_unpool() {
    let mk = |out_shape: Option<&[i64]>| {
        let inputs = vec![vi("x", FLOAT, &["1", "1", "1", "2"]), vi("i", INT64, &["1", "1", "1", "2"])];
        let mut inits = vec![];
        let mut extra = vec![];
        if let Some(s) = out_shape {
            inits.push(tensor_i64("shape", &[4], s));
            extra.push("shape");
        }
        imp(&single(
            "MaxUnpool",
            inputs,
            &extra,
            inits,
            &["y"],
            vec![a_ints("kernel_shape", &[1, 2]), a_ints("strides", &[1, 2])],
            22,
        ))
    };
    let x = t(&[1, 1, 1, 2], &[5., 7.]);
    close(&run(&mk(None), &[x.clone(), ti(&[1, 1, 1, 2], &[1, 2])])[0], &[1, 1, 1, 4], &[0., 5., 7., 0.]);
    // A repeated index holding one value (overlapping windows) keeps that value.
    close(
        &run(&mk(None), &[t(&[1, 1, 1, 2], &[5., 5.]), ti(&[1, 1, 1, 2], &[1, 1])])[0],
        &[1, 1, 1, 4],
        &[0., 5., 0., 0.],
    );
    close(
        &run(&mk(Some(&[1, 1, 1, 5])), &[x.clone(), ti(&[1, 1, 1, 2], &[1, 2])])[0],
        &[1, 1, 1, 5],
        &[0., 5., 7., 0., 0.],
    );
    // An index outside the output is a run-time error, not a panic.
    assert!(interp::run(&mk(None), &[x, ti(&[1, 1, 1, 2], &[1, 9])], &Options::default()).is_err());
    // output_shape smaller than the inferred shape.
    let bytes = single(
        "MaxUnpool",
        vec![vi("x", FLOAT, &["1", "1", "1", "2"]), vi("i", INT64, &["1", "1", "1", "2"])],
        &["shape"],
        vec![tensor_i64("shape", &[4], &[1, 1, 1, 3])],
        &["y"],
        vec![a_ints("kernel_shape", &[1, 2]), a_ints("strides", &[1, 2])],
        22,
    );
    assert!(import(&bytes, &ImportOptions::default()).is_err());
}

#[test]
fn center_crop_pad() {
    let g = ok1("CenterCropPad", &[5], vec![tensor_i64("s", &[1], &[3])], &["s"], vec![], 18);
    close(&run(&g, &[t(&[5], &[1., 2., 3., 4., 5.])])[0], &[3], &[2., 3., 4.]);
    let g = ok1("CenterCropPad", &[5], vec![tensor_i64("s", &[1], &[4])], &["s"], vec![], 18);
    close(&run(&g, &[t(&[5], &[1., 2., 3., 4., 5.])])[0], &[4], &[1., 2., 3., 4.]);
    let g = ok1("CenterCropPad", &[2], vec![tensor_i64("s", &[1], &[5])], &["s"], vec![], 18);
    close(&run(&g, &[t(&[2], &[1., 2.])])[0], &[5], &[0., 1., 2., 0., 0.]);
    // Crop one axis and pad another, by negative axes.
    let g = ok1(
        "CenterCropPad",
        &[2, 3],
        vec![tensor_i64("s", &[2], &[4, 1])],
        &["s"],
        vec![a_ints("axes", &[-2, -1])],
        18,
    );
    close(&run(&g, &[t(&[2, 3], &[1., 2., 3., 4., 5., 6.])])[0], &[4, 1], &[0., 2., 5., 0.]);
    let e = node_err(node1("CenterCropPad", &[2], vec![tensor_i64("s", &[1], &[-1])], &["s"], vec![], 18));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = node_err(node1("CenterCropPad", &[2], vec![tensor_i64("s", &[2], &[1, 1])], &["s"], vec![], 18));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

// --- GridSample, AffineGrid --------------------------------------------------------------------

fn grid_sample(mode: &str, pad: &str, align: i64, points: &[(f32, f32)]) -> Vec<f64> {
    let n = points.len();
    let bytes = single(
        "GridSample",
        vec![vi("x", FLOAT, &["1", "1", "2", "2"]), vi("g", FLOAT, &["1", "1", &n.to_string(), "2"])],
        &[],
        vec![],
        &["y"],
        vec![a_str("mode", mode), a_str("padding_mode", pad), a_int("align_corners", align)],
        22,
    );
    let g = imp(&bytes);
    let grid: Vec<f32> = points.iter().flat_map(|&(x, y)| [x, y]).collect();
    let out = &run(&g, &[t(&[1, 1, 2, 2], &[1., 2., 3., 4.]), t(&[1, 1, n, 2], &grid)])[0];
    assert_eq!(out.shape(), &[1, 1, 1, n]);
    out.to_f64_vec()
}

#[test]
fn grid_sample_modes_and_padding() {
    // align_corners: -1 and 1 are the pixel centres of the corners.
    let pts = [(-1., -1.), (1., 1.), (0., 0.), (1., -1.)];
    assert_eq!(grid_sample("linear", "zeros", 1, &pts), vec![1., 4., 2.5, 2.]);
    // Outside: zeros reads 0, border clamps, reflection mirrors (x = 2 -> 0, y = 0.5).
    let out = [(3., 0.)];
    assert_eq!(grid_sample("linear", "zeros", 1, &out), vec![0.]);
    assert_eq!(grid_sample("linear", "border", 1, &out), vec![3.]);
    assert_eq!(grid_sample("linear", "reflection", 1, &out), vec![2.]);
    // Nearest rounds (0.55, 0.55) to pixel (1, 1).
    assert_eq!(grid_sample("nearest", "zeros", 1, &[(0.1, 0.1)]), vec![4.]);
    // Not aligned: (-0.5, -0.5) is the centre of pixel (0, 0).
    assert_eq!(grid_sample("linear", "zeros", 0, &[(-0.5, -0.5), (0., 0.)]), vec![1., 2.5]);
    // Cubic interpolates a plane exactly at pixel centres.
    let c = grid_sample("cubic", "border", 1, &[(-1., -1.), (1., 1.)]);
    close(&t(&[2], &[c[0] as f32, c[1] as f32]), &[2], &[1., 4.]);
}

#[test]
fn grid_sample_bad_models() {
    let bytes = single(
        "GridSample",
        vec![vi("x", FLOAT, &["1", "1", "2", "2"]), vi("g", FLOAT, &["1", "1", "1", "3"])],
        &[],
        vec![],
        &["y"],
        vec![],
        22,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::Invalid(_), .. }), "{e}");
    let bytes = single(
        "GridSample",
        vec![vi("x", FLOAT, &["1", "1", "2", "2", "2"]), vi("g", FLOAT, &["1", "1", "1", "1", "3"])],
        &[],
        vec![],
        &["y"],
        vec![a_str("mode", "cubic")],
        22,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::Unsupported(_), .. }), "{e}");
}

#[test]
fn affine_grid() {
    let mk = |align: i64| {
        imp(&single(
            "AffineGrid",
            vec![vi("theta", FLOAT, &["1", "2", "3"])],
            &["size"],
            vec![tensor_i64("size", &[4], &[1, 1, 2, 2])],
            &["y"],
            vec![a_int("align_corners", align)],
            20,
        ))
    };
    let id = t(&[1, 2, 3], &[1., 0., 0., 0., 1., 0.]);
    close(&run(&mk(1), std::slice::from_ref(&id))[0], &[1, 2, 2, 2], &[-1., -1., 1., -1., -1., 1., 1., 1.]);
    close(&run(&mk(0), &[id])[0], &[1, 2, 2, 2], &[-0.5, -0.5, 0.5, -0.5, -0.5, 0.5, 0.5, 0.5]);
    let bytes = single(
        "AffineGrid",
        vec![vi("theta", FLOAT, &["1", "3", "3"])],
        &["size"],
        vec![tensor_i64("size", &[4], &[1, 1, 2, 2])],
        &["y"],
        vec![],
        20,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::Invalid(_), .. }), "{e}");
}

// --- DFT, STFT, windows, MelWeightMatrix ------------------------------------------------------

#[test]
fn dft_forward_inverse_and_onesided() {
    let mk = |c: usize, attrs: Vec<AttributeProto>, len: Option<i64>| {
        let mut inits = vec![];
        let mut extra = vec![];
        if let Some(n) = len {
            inits.push(tensor_i64("n", &[], &[n]));
            extra.push("n");
        }
        ok1("DFT", &[1, 4, c], inits, &extra, attrs, 19)
    };
    // An impulse at 1: bins e^{-iπk/2}.
    let x = t(&[1, 4, 1], &[0., 1., 0., 0.]);
    close(&run(&mk(1, vec![], None), std::slice::from_ref(&x))[0], &[1, 4, 2], &[1., 0., 0., -1., -1., 0., 0., 1.]);
    close(
        &run(&mk(1, vec![a_int("onesided", 1)], None), std::slice::from_ref(&x))[0],
        &[1, 3, 2],
        &[1., 0., 0., -1., -1., 0.],
    );
    // Zero-padded to 8: bin 2 of the impulse is e^{-iπ/2}.
    let y = &run(&mk(1, vec![], Some(8)), std::slice::from_ref(&x))[0];
    assert_eq!(y.shape(), &[1, 8, 2]);
    close(&t(&[2], &[y.to_f64_vec()[4] as f32, y.to_f64_vec()[5] as f32]), &[2], &[0., -1.]);
    // Inverse of the spectrum gives the impulse back.
    let spec = t(&[1, 4, 2], &[1., 0., 0., -1., -1., 0., 0., 1.]);
    close(&run(&mk(2, vec![a_int("inverse", 1)], None), &[spec])[0], &[1, 4, 2], &[0., 0., 1., 0., 0., 0., 0., 0.]);
    // One-sided inverse from the first 3 bins.
    let half = t(&[1, 3, 2], &[1., 0., 0., -1., -1., 0.]);
    let g = ok1("DFT", &[1, 3, 2], vec![], &[], vec![a_int("inverse", 1), a_int("onesided", 1)], 19);
    close(&run(&g, &[half])[0], &[1, 4, 1], &[0., 1., 0., 0.]);
    // The complex-pair axis cannot be transformed.
    let e = node_err(node1("DFT", &[1, 4, 1], vec![], &[], vec![a_int("axis", 2)], 19));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = node_err(node1("DFT", &[1, 4, 3], vec![], &[], vec![], 19));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    // Opset 20 takes the axis as an input.
    let g = ok1("DFT", &[4, 1, 1], vec![tensor_i64("axis", &[], &[0])], &["", "axis"], vec![], 20);
    close(&run(&g, &[t(&[4, 1, 1], &[1., 1., 1., 1.])])[0], &[4, 1, 2], &[4., 0., 0., 0., 0., 0., 0., 0.]);
}

#[test]
fn stft_frames() {
    let g = ok1(
        "STFT",
        &[1, 4, 1],
        vec![tensor_i64("step", &[], &[2]), tensor_i64("len", &[], &[2])],
        &["step", "", "len"],
        vec![],
        17,
    );
    // Frames [1, 2] and [3, 4]: bins (sum, difference).
    close(&run(&g, &[t(&[1, 4, 1], &[1., 2., 3., 4.])])[0], &[1, 2, 2, 2], &[3., 0., -1., 0., 7., 0., -1., 0.]);
    let g = ok1(
        "STFT",
        &[1, 4, 1],
        vec![tensor_i64("step", &[], &[2]), tensor_f32("w", &[2], &[1., 0.])],
        &["step", "w"],
        vec![],
        17,
    );
    close(&run(&g, &[t(&[1, 4, 1], &[1., 2., 3., 4.])])[0], &[1, 2, 2, 2], &[1., 0., 1., 0., 3., 0., 3., 0.]);
    let e = node_err(node1("STFT", &[1, 4, 1], vec![tensor_i64("step", &[], &[0])], &["step"], vec![], 17));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
}

fn window(op: &str, size: i64, periodic: i64) -> Result<Graph, ImportError> {
    let bytes = encode(&model_proto(
        graph(
            vec![node(op, &["n"], &["y"], vec![a_int("periodic", periodic)])],
            vec![],
            vec![vi("y", FLOAT, &[])],
            vec![tensor_i64("n", &[], &[size])],
        ),
        17,
    ));
    import(
        &bytes,
        &ImportOptions {
            limits: ladder::Limits { max_tensor_bytes: 1 << 20, ..Default::default() },
            ..ImportOptions::default()
        },
    )
}

#[test]
fn windows_and_mel() {
    close(&run(&window("HannWindow", 4, 1).unwrap(), &[])[0], &[4], &[0., 0.5, 1., 0.5]);
    close(&run(&window("HannWindow", 4, 0).unwrap(), &[])[0], &[4], &[0., 0.75, 0.75, 0.]);
    close(&run(&window("HammingWindow", 2, 1).unwrap(), &[])[0], &[2], &[4. / 46., 1.]);
    close(&run(&window("BlackmanWindow", 2, 1).unwrap(), &[])[0], &[2], &[0., 1.]);
    close(&run(&window("HannWindow", 0, 1).unwrap(), &[])[0], &[0], &[]);
    let e = node_err(window("HannWindow", -1, 1));
    assert!(matches!(e, NodeError::Invalid(_)), "{e}");
    let e = window("HannWindow", 1 << 40, 1).unwrap_err();
    assert!(matches!(e, ImportError::Limit { .. }), "{e}");
    // 3 mel bins of an 8-point DFT at 8 kHz over 0..4 kHz: band edges at bins 0, 0, 0, 1, 2.
    let ints = [("bins", 3i64), ("len", 8), ("rate", 8000)];
    let mut inits: Vec<TensorProto> = ints.iter().map(|(n, v)| tensor_i64(n, &[], &[*v])).collect();
    inits.push(tensor_f32("lo", &[], &[0.]));
    inits.push(tensor_f32("hi", &[], &[4000.]));
    let bytes = encode(&model_proto(
        graph(
            vec![node("MelWeightMatrix", &["bins", "len", "rate", "lo", "hi"], &["y"], vec![])],
            vec![],
            vec![vi("y", FLOAT, &[])],
            inits,
        ),
        17,
    ));
    let mut want = vec![0.; 15];
    want[0] = 1.;
    want[1] = 1.;
    want[5] = 1.;
    close(&run(&imp(&bytes), &[])[0], &[5, 3], &want);
}

#[test]
fn max_pool_indices() {
    let mk = |order: i64| {
        imp(&single(
            "MaxPool",
            vec![vi("x", FLOAT, &["1", "2", "2", "2"])],
            &[],
            vec![],
            &["y", "i"],
            vec![a_ints("kernel_shape", &[2, 2]), a_int("storage_order", order)],
            22,
        ))
    };
    let x = t(&[1, 2, 2, 2], &[1., 4., 3., 2., 5., 5., 5., 5.]);
    let out = run(&mk(0), std::slice::from_ref(&x));
    close(&out[0], &[1, 2, 1, 1], &[4., 5.]);
    assert!(out[1].bit_eq(&ti(&[1, 2, 1, 1], &[1, 4])), "{:?}", out[1]);
    // Column-major: (h, w) = (0, 1) is 0 + 1 * H.
    let out = run(&mk(1), &[x]);
    assert!(out[1].bit_eq(&ti(&[1, 2, 1, 1], &[2, 4])), "{:?}", out[1]);
    // Padding is never picked: pads of 1 on the top and left, stride 2.
    let g = imp(&single(
        "MaxPool",
        vec![vi("x", FLOAT, &["1", "1", "2", "2"])],
        &[],
        vec![],
        &["y", "i"],
        vec![a_ints("kernel_shape", &[2, 2]), a_ints("strides", &[2, 2]), a_ints("pads", &[1, 1, 0, 0])],
        22,
    ));
    let out = run(&g, &[t(&[1, 1, 2, 2], &[-1., -2., -3., -4.])]);
    close(&out[0], &[1, 1, 1, 1], &[-1.]);
    assert!(out[1].bit_eq(&ti(&[1, 1, 1, 1], &[0])), "{:?}", out[1]);
}

#[test]
fn col2im() {
    // A 1x3 image from blocks of 1x2 with stride 1: columns [a, b] at 0 and [c, d] at 1 -> a, b + c, d.
    let mk = |pads: &[i64]| {
        imp(&single(
            "Col2Im",
            vec![vi("x", FLOAT, &["1", "2", &(if pads.is_empty() { 2 } else { 4 }).to_string()])],
            &["img", "blk"],
            vec![tensor_i64("img", &[2], &[1, 3]), tensor_i64("blk", &[2], &[1, 2])],
            &["y"],
            if pads.is_empty() { vec![] } else { vec![a_ints("pads", pads)] },
            18,
        ))
    };
    // Rows are the block offsets (k = 0, 1), columns the blocks.
    close(&run(&mk(&[]), &[t(&[1, 2, 2], &[1., 3., 2., 4.])])[0], &[1, 1, 1, 3], &[1., 5., 4.]);
    // Pads of 1 left and right: 4 blocks, the outer halves fall in the padding.
    let x = t(&[1, 2, 4], &[10., 1., 3., 5., 2., 4., 6., 20.]);
    close(&run(&mk(&[0, 1, 0, 1]), &[x])[0], &[1, 1, 1, 3], &[3., 7., 11.]);
    // Block counts that do not match the input.
    let bytes = single(
        "Col2Im",
        vec![vi("x", FLOAT, &["1", "2", "3"])],
        &["img", "blk"],
        vec![tensor_i64("img", &[2], &[1, 3]), tensor_i64("blk", &[2], &[1, 2])],
        &["y"],
        vec![],
        18,
    );
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::Node { error: NodeError::Invalid(_), .. }), "{e}");
}

#[test]
fn roi_align() {
    let mk = |mode: &str, ratio: i64| {
        import(
            &single(
                "RoiAlign",
                vec![vi("x", FLOAT, &["2", "1", "2", "2"]), vi("rois", FLOAT, &["2", "4"]), vi("b", INT64, &["2"])],
                &[],
                vec![],
                &["y"],
                vec![
                    a_str("mode", mode),
                    a_int("sampling_ratio", ratio),
                    a_str("coordinate_transformation_mode", "output_half_pixel"),
                ],
                22,
            ),
            &ImportOptions::default(),
        )
    };
    let x = t(&[2, 1, 2, 2], &[1., 2., 3., 4., 10., 20., 30., 40.]);
    // One sample at (0.5, 0.5) of image 1, and a region past the image (weight 0).
    let rois = t(&[2, 4], &[0., 0., 1., 1., 5., 5., 6., 6.]);
    let b = ti(&[2], &[1, 0]);
    let g = mk("avg", 1).unwrap();
    close(&run(&g, &[x.clone(), rois.clone(), b.clone()])[0], &[2, 1, 1, 1], &[25., 0.]);
    // Max: the largest weighted corner, 0.25 * 40.
    let g = mk("max", 1).unwrap();
    close(&run(&g, &[x, rois, b])[0], &[2, 1, 1, 1], &[10., 0.]);
    let e = node_err(mk("avg", 0));
    assert!(matches!(&e, NodeError::Unsupported(m) if m.contains("sampling_ratio")), "{e}");
}

#[test]
fn deform_conv() {
    let bytes = single(
        "DeformConv",
        vec![vi("x", FLOAT, &["1", "1", "3", "3"]), vi("off", FLOAT, &["1", "8", "2", "2"])],
        &["w", "b", "m"],
        vec![
            tensor_f32("w", &[1, 1, 2, 2], &[1.; 4]),
            tensor_f32("b", &[1], &[1.]),
            tensor_f32("m", &[1, 4, 2, 2], &[0.5; 16]),
        ],
        &["y"],
        vec![a_ints("kernel_shape", &[2, 2])],
        22,
    );
    // Reorder the inputs to X, W, offset, B, mask.
    let mut m = <ladder::frontend::onnx::proto::ModelProto as prost::Message>::decode(bytes.as_slice()).unwrap();
    m.graph.as_mut().unwrap().node[0].input = ["x", "w", "off", "b", "m"].iter().map(|s| s.to_string()).collect();
    let g = imp(&prost::Message::encode_to_vec(&m));
    let x = t(&[1, 1, 3, 3], &[0., 1., 2., 3., 4., 5., 6., 7., 8.]);
    // Zero offsets: a plain 2x2 sum (halved by the mask) plus the bias.
    let zero = t(&[1, 8, 2, 2], &[0.; 32]);
    close(&run(&g, &[x.clone(), zero])[0], &[1, 1, 2, 2], &[5., 7., 11., 13.]);
    // Every tap moved one column right: the last column reads zeros.
    let mut off = vec![0f32; 32];
    for k in 0..4 {
        for p in 0..4 {
            off[(k * 2 + 1) * 4 + p] = 1.;
        }
    }
    close(&run(&g, &[x, t(&[1, 8, 2, 2], &off)])[0], &[1, 1, 2, 2], &[7., 4.5, 13., 7.5]);
}
