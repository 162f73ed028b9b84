//! The GraphBuilder infers types as it goes and reports a typed error at the faulty call.

use ladder::builder::BuildError;
use ladder::interp::{run, Options};
use ladder::ir::{AttrValue, GraphError};
use ladder::ops::OpError;
use ladder::{DType, Dim, GraphBuilder, OpKind, Shape, Tensor};

fn shape(dims: &[Dim]) -> Shape {
    Shape(dims.iter().cloned().collect())
}

#[test]
fn builds_runs_and_infers_symbolic_types() {
    let mut b = GraphBuilder::new("affine");
    let x = b.input("x", DType::F32, shape(&[Dim::sym("batch"), Dim::new(3)])).unwrap();
    let w = b.constant(Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap()).unwrap();
    let y = b.mul(x, w).unwrap();
    let y = b.add(y, x).unwrap();
    assert_eq!(b.ty(y).to_string(), "f32[batch, 3]");
    let z = b.convert(y, DType::I64).unwrap();
    b.output("z", z).unwrap();
    let g = b.finish().unwrap();
    let out =
        run(&g, &[Tensor::from_f32(&[2, 3], vec![1., 1., 1., 2., 2., 2.]).unwrap()], &Options::default()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![2., 3., 4., 4., 6., 8.]);
    // The built graph prints and parses back to itself.
    assert_eq!(ladder::text::parse(&ladder::text::print(&g)).unwrap(), g);
}

#[test]
fn errors_are_typed_and_leave_the_graph_unchanged() {
    let mut b = GraphBuilder::new("bad");
    let x = b.input("x", DType::F32, Shape::from_static(&[2, 3])).unwrap();
    let y = b.input("y", DType::F32, Shape::from_static(&[4])).unwrap();
    let before = b.graph().len();
    match b.add(x, y) {
        Err(BuildError::Graph(GraphError::Op { op: "add", error: OpError::Broadcast { .. }, .. })) => {}
        other => panic!("expected a broadcast error, got {other:?}"),
    }
    match b.op(OpKind::ConvertElementType, &[x], &[("dtype", AttrValue::Int(3))]) {
        Err(BuildError::Attr { op: "convert_element_type", .. }) => {}
        other => panic!("expected an attribute error, got {other:?}"),
    }
    match b.op(OpKind::Exp, &[x, x], &[]) {
        Err(BuildError::Graph(GraphError::Op { error: OpError::Arity { got: 2, .. }, .. })) => {}
        other => panic!("expected an arity error, got {other:?}"),
    }
    assert_eq!(b.graph().len(), before, "failed calls must not add nodes");
    assert!(matches!(b.input("x", DType::F32, Shape::scalar()), Err(BuildError::Graph(GraphError::DuplicateName(_)))));
    assert!(matches!(b.output("o", ladder::Value::from_u32(99)), Err(BuildError::Graph(GraphError::NoSuchValue(_)))));
}
