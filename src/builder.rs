//! `GraphBuilder`: the Rust API for making graphs.
//!
//! Every method infers the new value's dtype and shape from the op's rule and returns a typed
//! error when the arguments do not fit, so a mistake surfaces at the line that made it.
//!
//! ```
//! use ladder::{DType, GraphBuilder, Shape, Dim};
//! let mut b = GraphBuilder::new("mlp");
//! let x = b.input("x", DType::F32, Shape(vec![Dim::sym("batch"), Dim::new(4)].into())).unwrap();
//! let h = b.relu(x).unwrap();
//! let y = b.softmax(h, -1).unwrap();
//! b.output("y", y).unwrap();
//! let g = b.finish().unwrap();
//! assert_eq!(g.ty(y).to_string(), "f32[batch, 4]");
//! ```

use std::sync::Arc;

use crate::ir::verify::{verify, Stage, VerifyErrors};
use crate::ir::{AttrValue, Attrs, DType, Graph, GraphError, Shape, TensorType, Value};
use crate::ops::OpKind;
use crate::tensor::Tensor;

/// Why building failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("{op}: {error}")]
    Attr { op: &'static str, error: crate::ir::AttrError },
    #[error(transparent)]
    Verify(#[from] VerifyErrors),
}

/// Builds a graph one op at a time.
pub struct GraphBuilder {
    graph: Graph,
    n_blobs: usize,
}

impl GraphBuilder {
    pub fn new(name: &str) -> GraphBuilder {
        GraphBuilder { graph: Graph::new(name), n_blobs: 0 }
    }

    /// The graph so far (types of values made so far can be read from it).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn ty(&self, v: Value) -> &TensorType {
        self.graph.ty(v)
    }

    pub fn input(&mut self, name: &str, dtype: DType, shape: Shape) -> Result<Value, BuildError> {
        Ok(self.graph.add_input(name, TensorType::new(dtype, shape))?)
    }

    /// A constant; its data goes to the graph's blob store under a fresh name.
    pub fn constant(&mut self, tensor: Tensor) -> Result<Value, BuildError> {
        let mut name = format!("c{}", self.n_blobs);
        while self.graph.blob_by_name(&name).is_some() {
            self.n_blobs += 1;
            name = format!("c{}", self.n_blobs);
        }
        self.n_blobs += 1;
        let id = self.graph.add_blob(&name, Arc::new(tensor))?;
        Ok(self.graph.add_const(id))
    }

    /// A constant under a chosen blob name (weights keep their names).
    pub fn named_constant(&mut self, name: &str, tensor: Tensor) -> Result<Value, BuildError> {
        let id = self.graph.add_blob(name, Arc::new(tensor))?;
        Ok(self.graph.add_const(id))
    }

    /// Any op, with attributes by name; unspecified attributes take their defaults.
    pub fn op(&mut self, op: OpKind, args: &[Value], attrs: &[(&str, AttrValue)]) -> Result<Value, BuildError> {
        let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let attrs =
            Attrs::resolve(op.spec().attrs, given).map_err(|error| BuildError::Attr { op: op.name(), error })?;
        Ok(self.graph.add_node(op, args, attrs)?)
    }

    pub fn name(&mut self, v: Value, name: &str) -> Result<(), BuildError> {
        Ok(self.graph.set_name(v, name)?)
    }

    pub fn output(&mut self, name: &str, v: Value) -> Result<(), BuildError> {
        Ok(self.graph.add_output(name, v)?)
    }

    /// Verifies and returns the graph.
    pub fn finish(self) -> Result<Graph, BuildError> {
        verify(&self.graph, Stage::HighLevel)?;
        Ok(self.graph)
    }

    // Typed shorthands for the common ops.

    pub fn add(&mut self, a: Value, b: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Add, &[a, b], &[])
    }
    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Sub, &[a, b], &[])
    }
    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Mul, &[a, b], &[])
    }
    pub fn div(&mut self, a: Value, b: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Div, &[a, b], &[])
    }
    pub fn exp(&mut self, x: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Exp, &[x], &[])
    }
    pub fn tanh(&mut self, x: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Tanh, &[x], &[])
    }
    pub fn relu(&mut self, x: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Relu, &[x], &[])
    }
    /// `approximate` is "none" (erf form) or "tanh".
    pub fn gelu(&mut self, x: Value, approximate: &str) -> Result<Value, BuildError> {
        self.op(OpKind::Gelu, &[x], &[("approximate", AttrValue::Str(approximate.into()))])
    }
    pub fn softmax(&mut self, x: Value, axis: i64) -> Result<Value, BuildError> {
        self.op(OpKind::Softmax, &[x], &[("axis", AttrValue::Int(axis))])
    }
    pub fn layer_norm(&mut self, x: Value, weight: Value, bias: Value, eps: f64) -> Result<Value, BuildError> {
        self.op(OpKind::LayerNorm, &[x, weight, bias], &[("eps", AttrValue::Float(eps))])
    }
    pub fn matmul(&mut self, a: Value, b: Value) -> Result<Value, BuildError> {
        self.op(OpKind::Matmul, &[a, b], &[])
    }
    /// `y = x @ weight^T + bias` (PyTorch's layout: weight is [out, in]).
    pub fn linear(&mut self, x: Value, weight: Value, bias: Option<Value>) -> Result<Value, BuildError> {
        match bias {
            Some(b) => self.op(OpKind::Linear, &[x, weight, b], &[]),
            None => self.op(OpKind::Linear, &[x, weight], &[]),
        }
    }
    pub fn sum(&mut self, x: Value, axes: &[i64], keepdim: bool) -> Result<Value, BuildError> {
        self.op(OpKind::Sum, &[x], &[("axes", AttrValue::Ints(axes.to_vec())), ("keepdim", AttrValue::Bool(keepdim))])
    }
    pub fn mean(&mut self, x: Value, axes: &[i64], keepdim: bool) -> Result<Value, BuildError> {
        self.op(OpKind::Mean, &[x], &[("axes", AttrValue::Ints(axes.to_vec())), ("keepdim", AttrValue::Bool(keepdim))])
    }
    /// A view with a new shape; one entry may be -1.
    pub fn view(&mut self, x: Value, shape: &[i64]) -> Result<Value, BuildError> {
        self.op(OpKind::View, &[x], &[("shape", AttrValue::Ints(shape.to_vec()))])
    }
    pub fn reshape(&mut self, x: Value, shape: &[i64]) -> Result<Value, BuildError> {
        self.op(OpKind::Reshape, &[x], &[("shape", AttrValue::Ints(shape.to_vec()))])
    }
    pub fn transpose(&mut self, x: Value, axis0: i64, axis1: i64) -> Result<Value, BuildError> {
        self.op(OpKind::Transpose, &[x], &[("axis0", AttrValue::Int(axis0)), ("axis1", AttrValue::Int(axis1))])
    }
    pub fn permute(&mut self, x: Value, perm: &[i64]) -> Result<Value, BuildError> {
        self.op(OpKind::Permute, &[x], &[("perm", AttrValue::Ints(perm.to_vec()))])
    }
    pub fn convert(&mut self, x: Value, dtype: DType) -> Result<Value, BuildError> {
        self.op(OpKind::ConvertElementType, &[x], &[("dtype", AttrValue::DType(dtype))])
    }
    /// `x += y` in place; the result is `x` after the write (it aliases `x`).
    pub fn add_(&mut self, x: Value, y: Value) -> Result<Value, BuildError> {
        self.op(OpKind::AddInplace, &[x, y], &[])
    }
}
