//! Building small ONNX models in test code: prost structs to bytes.
#![allow(dead_code)]

use ladder::frontend::onnx::proto::{
    self, attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use ladder::frontend::onnx::{import, ImportError, ImportOptions, NodeError};
use ladder::{compile, CompileOptions, Graph, Tensor};
use prost::Message;

pub const FLOAT: i32 = 1;
pub const INT32: i32 = 6;
pub const INT64: i32 = 7;
pub const BOOL: i32 = 9;

pub fn tensor_f32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: FLOAT,
        float_data: data.to_vec(),
        ..Default::default()
    }
}

pub fn tensor_raw_f32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: FLOAT,
        raw_data: data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

pub fn tensor_i64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: INT64,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

pub fn tensor_bool(name: &str, dims: &[i64], data: &[bool]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: BOOL,
        int32_data: data.iter().map(|&b| i32::from(b)).collect(),
        ..Default::default()
    }
}

/// A tensor value type; dims given as text: a number is a dim_value, anything else a
/// dim_param, `?` an unknown dim.
pub fn vi(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| proto::tensor_shape_proto::Dimension {
            value: match *d {
                "?" => None,
                d => Some(match d.parse::<i64>() {
                    Ok(n) => dimension::Value::DimValue(n),
                    Err(_) => dimension::Value::DimParam(d.to_string()),
                }),
            },
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        name: format!("{op}_{}", outputs.first().copied().unwrap_or("")),
        ..Default::default()
    }
}

pub fn a_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Int as i32, i: v, ..Default::default() }
}

pub fn a_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Ints as i32, ints: v.to_vec(), ..Default::default() }
}

pub fn a_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Float as i32, f: v, ..Default::default() }
}

pub fn a_str(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::String as i32,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

pub fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Tensor as i32, t: Some(t), ..Default::default() }
}

pub fn a_graph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: AttributeType::Graph as i32, g: Some(g), ..Default::default() }
}

pub fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> GraphProto {
    GraphProto {
        name: "test".into(),
        node: nodes,
        input: inputs,
        output: outputs,
        initializer: inits,
        ..Default::default()
    }
}

pub fn model_proto(g: GraphProto, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: 8,
        producer_name: "ladder-tests".into(),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: opset }],
        graph: Some(g),
        ..Default::default()
    }
}

pub fn encode(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}

/// A one-node model at `opset`; output types are left for ladder to infer (declared f32
/// with unknown shape: ladder ignores declared output types).
pub fn single(
    op: &str,
    inputs: Vec<ValueInfoProto>,
    extra_inputs: &[&str],
    inits: Vec<TensorProto>,
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
    opset: i64,
) -> Vec<u8> {
    let mut names: Vec<&str> = inputs.iter().map(|v| v.name.as_str()).collect();
    names.extend_from_slice(extra_inputs);
    let n = node(op, &names, outputs, attrs);
    let outs = outputs.iter().map(|o| vi(o, FLOAT, &[])).collect();
    encode(&model_proto(graph(vec![n], inputs, outs, inits), opset))
}

// ---------------------------------------------------------------------------------------------
// Running imported models in tests

/// The node error an import must fail with.
pub fn imp_err(bytes: &[u8]) -> NodeError {
    match import(bytes, &ImportOptions::default()) {
        Err(ImportError::Node { error, .. }) => error,
        Err(e) => panic!("expected a node error, got {e}"),
        Ok(_) => panic!("expected a node error, the import succeeded"),
    }
}

/// The name of the run-time value an import must ask for ([`ImportError::NeedsValue`]).
#[allow(dead_code)]
pub fn needs_value(bytes: &[u8]) -> String {
    match import(bytes, &ImportOptions::default()) {
        Err(ImportError::NeedsValue { name, .. }) => name,
        Err(e) => panic!("expected a value to be needed, got {e}"),
        Ok(_) => panic!("expected a value to be needed, the import succeeded"),
    }
}

/// A model run through a session on the CPU backend (specialized on values it depends on).
#[allow(dead_code)]
pub fn session_run(bytes: &[u8], inputs: &[Tensor]) -> Vec<Tensor> {
    let model = ladder::frontend::onnx::decode(bytes, &ImportOptions::default()).unwrap();
    let model = ladder::Model::from_onnx(model, None, ImportOptions::default());
    let session = ladder::Session::new(model, ladder::CompileOptions::native_cpu(1).unwrap()).unwrap();
    session.run(inputs).unwrap().outputs
}

/// `g` compiled for the CPU backend and run.
pub fn cpu(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let plan = compile(g, &CompileOptions::reference()).map_err(|e| e.to_string())?;
    plan.run(inputs).map(|o| o.outputs).map_err(|e| e.to_string())
}

pub fn t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

pub fn ti(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape, v.to_vec()).unwrap()
}

#[track_caller]
pub fn close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-5 + 1e-5 * b.abs() || (a.is_nan() && b.is_nan()), "element {i}: {a} vs {b}\n{g:?}");
    }
}
