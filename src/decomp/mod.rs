//! Decompositions: every high-level op written in prims.
//!
//! A decomposition is one small function per op (in the file of its family) that receives an
//! [`Emitter`] over the graph being built, the original node (its attributes and its type,
//! which the result must match exactly) and the already-lowered arguments, and returns the
//! value that replaces the node. The emitter only emits prims and opaque ops, in explicit
//! form: its helpers insert the `convert_element_type` and `broadcast_in_dim` nodes that make
//! promotion and broadcasting explicit, and it refuses high-level ops, so a decomposition
//! cannot hand its work back up the ladder.
//!
//! Decompositions are numerically careful where the naive formula is not (max-subtraction in
//! softmax, a sound variance, stable sigmoid and softplus); `tests/all/numerics.rs` holds each
//! to the tolerance table against the op evaluated in f64.

use crate::ir::{AttrValue, Attrs, DType, Dim, Graph, GraphError, Node, Shape, SizeExpr, TensorType, Value};
use crate::ops::util::broadcast_shapes;
use crate::ops::{check_explicit, OpError, OpKind, Rung};

mod index;
mod linalg;
mod nn;
mod norm;
mod recur;
mod reduce;
mod shape;

/// Lowers one high-level node: `(emitter, original node, lowered arguments) -> value`.
pub type DecompFn = fn(&mut Emitter, &Node, &[Value]) -> Result<Value, DecompError>;

/// Why a node could not be decomposed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DecompError {
    #[error("{op} has no decomposition")]
    NoRule { op: &'static str },
    #[error("{op}: {reason}")]
    Unsupported { op: &'static str, reason: String },
    #[error("decomposition emitted {op}, which is not a prim (a bug in the decomposition)")]
    NotPrim { op: &'static str },
    #[error("decomposition emitted {op} in non-explicit form: {error} (a bug in the decomposition)")]
    NotExplicit { op: &'static str, error: OpError },
    #[error("decomposition of {op} produced {got}, but the op's type is {expected} (a bug in the decomposition)")]
    TypeMismatch { op: &'static str, expected: Box<TensorType>, got: Box<TensorType> },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// The decomposition of `op`, if it has one. Prims and opaque ops have none.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    shape::rule(op)
        .or_else(|| reduce::rule(op))
        .or_else(|| index::rule(op))
        .or_else(|| nn::rule(op))
        .or_else(|| norm::rule(op))
        .or_else(|| linalg::rule(op))
        .or_else(|| recur::rule(op))
}

/// The dtype float composites (decompositions and hand derivative rules) compute in: f16
/// and bf16 widen to f32, others are kept.
pub fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Emits explicit prims into a graph.
pub struct Emitter<'g> {
    pub g: &'g mut Graph,
    /// High-level ops the graph keeps whole (`passes::decompose_keeping`): a decomposition
    /// that needs one of them (attention's softmax) emits the op ([`Emitter::kept`]) rather
    /// than its prims. Empty outside decomposition.
    pub keep: &'g [OpKind],
}

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

fn dims(shape: &Shape) -> AttrValue {
    AttrValue::Dims(shape.dims().iter().cloned().map(Some).collect())
}

impl Emitter<'_> {
    pub fn ty(&self, v: Value) -> &TensorType {
        self.g.ty(v)
    }

    pub fn shape(&self, v: Value) -> Shape {
        self.g.ty(v).shape.clone()
    }

    pub fn dtype(&self, v: Value) -> DType {
        self.g.ty(v).dtype
    }

    pub fn rank(&self, v: Value) -> usize {
        self.g.ty(v).rank()
    }

    /// Emits a prim or opaque op, checking it is in explicit form.
    pub fn prim(&mut self, op: OpKind, args: &[Value], attrs: &[(&str, AttrValue)]) -> Result<Value, DecompError> {
        if !matches!(op.rung(), Rung::Prim | Rung::Opaque) {
            return Err(DecompError::NotPrim { op: op.name() });
        }
        let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let attrs = Attrs::resolve(op.spec().attrs, given)
            .map_err(|e| DecompError::NotExplicit { op: op.name(), error: OpError::Attr(e) })?;
        let v = self.g.add_node(op, args, attrs)?;
        let node = self.g.node(v);
        let arg_types: Vec<&TensorType> = node.args.iter().map(|&a| self.g.ty(a)).collect();
        check_explicit(op, &node.attrs, &arg_types)
            .map_err(|error| DecompError::NotExplicit { op: op.name(), error })?;
        Ok(v)
    }

    /// Whether the graph keeps `op` whole (see [`Emitter::keep`]).
    pub fn keeps(&self, op: OpKind) -> bool {
        self.keep.contains(&op)
    }

    /// A node of `op`, one of the high-level ops the graph keeps whole, its type from the
    /// op's shape rule.
    pub fn kept(&mut self, op: OpKind, args: &[Value], attrs: &[(&str, AttrValue)]) -> Result<Value, DecompError> {
        if !self.keeps(op) {
            return Err(DecompError::NotPrim { op: op.name() });
        }
        let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let attrs = Attrs::resolve(op.spec().attrs, given)
            .map_err(|e| DecompError::NotExplicit { op: op.name(), error: OpError::Attr(e) })?;
        Ok(self.g.add_node(op, args, attrs)?)
    }

    /// `x` converted to `dtype` (no node when it already is).
    pub fn convert(&mut self, x: Value, dtype: DType) -> Result<Value, DecompError> {
        if self.dtype(x) == dtype {
            return Ok(x);
        }
        self.prim(OpKind::ConvertElementType, &[x], &[("dtype", AttrValue::DType(dtype))])
    }

    /// `x` broadcast NumPy-style to `shape` (no node when it already has it).
    pub fn broadcast_to(&mut self, x: Value, shape: &Shape) -> Result<Value, DecompError> {
        let xs = self.shape(x);
        if &xs == shape {
            return Ok(x);
        }
        let lead = shape.rank().checked_sub(xs.rank()).ok_or_else(|| DecompError::Unsupported {
            op: "broadcast",
            reason: format!("cannot broadcast {xs} to {shape}"),
        })?;
        let bdims: Vec<usize> = (lead..shape.rank()).collect();
        self.prim(OpKind::BroadcastInDim, &[x], &[("shape", dims(shape)), ("broadcast_dims", ints(&bdims))])
    }

    /// A tensor of `shape` filled with `value`.
    pub fn full(&mut self, value: f64, dtype: DType, shape: &Shape) -> Result<Value, DecompError> {
        self.prim(
            OpKind::Full,
            &[],
            &[("shape", dims(shape)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dtype))],
        )
    }

    /// A tensor like `like` (same shape and dtype) filled with `value`.
    pub fn full_like(&mut self, value: f64, like: Value) -> Result<Value, DecompError> {
        let (dtype, shape) = (self.dtype(like), self.shape(like));
        self.full(value, dtype, &shape)
    }

    pub fn unary(&mut self, op: OpKind, x: Value) -> Result<Value, DecompError> {
        self.prim(op, &[x], &[])
    }

    /// A binary elementwise prim with promotion and broadcasting made explicit.
    pub fn binary(&mut self, op: OpKind, a: Value, b: Value) -> Result<Value, DecompError> {
        let dtype = DType::promote(self.dtype(a), self.dtype(b));
        let shape = broadcast_shapes(&self.shape(a), &self.shape(b))
            .map_err(|error| DecompError::NotExplicit { op: op.name(), error })?;
        let a = self.convert(a, dtype)?;
        let b = self.convert(b, dtype)?;
        let a = self.broadcast_to(a, &shape)?;
        let b = self.broadcast_to(b, &shape)?;
        self.prim(op, &[a, b], &[])
    }

    /// `op(x, c)` for a constant `c` of `x`'s dtype.
    pub fn binary_scalar(&mut self, op: OpKind, x: Value, c: f64) -> Result<Value, DecompError> {
        let k = self.full_like(c, x)?;
        self.prim(op, &[x, k], &[])
    }

    pub fn add(&mut self, a: Value, b: Value) -> Result<Value, DecompError> {
        self.binary(OpKind::Add, a, b)
    }
    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value, DecompError> {
        self.binary(OpKind::Sub, a, b)
    }
    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value, DecompError> {
        self.binary(OpKind::Mul, a, b)
    }
    pub fn div(&mut self, a: Value, b: Value) -> Result<Value, DecompError> {
        self.binary(OpKind::Div, a, b)
    }

    /// `where(cond, a, b)` with promotion and broadcasting made explicit.
    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> Result<Value, DecompError> {
        let dtype = DType::promote(self.dtype(a), self.dtype(b));
        let mut shape = broadcast_shapes(&self.shape(a), &self.shape(b))
            .map_err(|error| DecompError::NotExplicit { op: "where", error })?;
        shape = broadcast_shapes(&shape, &self.shape(cond))
            .map_err(|error| DecompError::NotExplicit { op: "where", error })?;
        let a = self.convert(a, dtype)?;
        let b = self.convert(b, dtype)?;
        let a = self.broadcast_to(a, &shape)?;
        let b = self.broadcast_to(b, &shape)?;
        let c = self.broadcast_to(cond, &shape)?;
        self.prim(OpKind::Where, &[c, a, b], &[])
    }

    /// A reduction prim over `axes` (normalised, distinct), optionally keeping them as 1s.
    pub fn reduce(&mut self, op: OpKind, x: Value, axes: &[usize], keepdim: bool) -> Result<Value, DecompError> {
        let r = self.prim(op, &[x], &[("axes", ints(axes))])?;
        if !keepdim {
            return Ok(r);
        }
        let kept: Shape = self
            .shape(x)
            .dims()
            .iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&i) { Dim::new(1) } else { d.clone() })
            .collect();
        self.reshape(r, &kept)
    }

    /// `x` with a new shape of the same number of elements (no node when unchanged).
    pub fn reshape(&mut self, x: Value, shape: &Shape) -> Result<Value, DecompError> {
        if &self.shape(x) == shape {
            return Ok(x);
        }
        self.prim(OpKind::Reshape, &[x], &[("shape", dims(shape))])
    }

    pub fn permute(&mut self, x: Value, perm: &[usize]) -> Result<Value, DecompError> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.prim(OpKind::Permute, &[x], &[("perm", ints(perm))])
    }

    pub fn slice(&mut self, x: Value, axis: usize, start: i64, end: i64, step: i64) -> Result<Value, DecompError> {
        self.prim(
            OpKind::Slice,
            &[x],
            &[
                ("axis", AttrValue::Int(axis as i64)),
                ("start", AttrValue::Int(start)),
                ("end", AttrValue::Int(end)),
                ("step", AttrValue::Int(step)),
            ],
        )
    }

    /// A slice whose bounds may be size expressions (`crate::ops::shape::slice_range`).
    pub fn slice_sym(
        &mut self,
        x: Value,
        axis: usize,
        start: SizeExpr,
        end: SizeExpr,
        step: i64,
    ) -> Result<Value, DecompError> {
        let size = |e: SizeExpr| match e.as_const() {
            Some(c) => AttrValue::Int(c),
            None => AttrValue::Size(e),
        };
        self.prim(
            OpKind::Slice,
            &[x],
            &[
                ("axis", AttrValue::Int(axis as i64)),
                ("start", size(start)),
                ("end", size(end)),
                ("step", AttrValue::Int(step)),
            ],
        )
    }

    /// Concatenation along `axis`, converting every operand to the promoted dtype.
    pub fn cat(&mut self, xs: &[Value], axis: usize) -> Result<Value, DecompError> {
        let dtype = xs.iter().map(|&x| self.dtype(x)).reduce(DType::promote).unwrap_or(DType::F32);
        let xs = xs.iter().map(|&x| self.convert(x, dtype)).collect::<Result<Vec<_>, _>>()?;
        self.prim(OpKind::Cat, &xs, &[("axis", AttrValue::Int(axis as i64))])
    }

    /// Indices `0..n` along `axis` of a tensor of `shape`.
    pub fn iota(&mut self, shape: &Shape, axis: usize, dtype: DType) -> Result<Value, DecompError> {
        self.prim(
            OpKind::Iota,
            &[],
            &[("shape", dims(shape)), ("axis", AttrValue::Int(axis as i64)), ("dtype", AttrValue::DType(dtype))],
        )
    }

    /// `matmul` with operands converted to their promoted dtype.
    pub fn matmul(&mut self, a: Value, b: Value, transpose_a: bool, transpose_b: bool) -> Result<Value, DecompError> {
        let dtype = DType::promote(self.dtype(a), self.dtype(b));
        let a = self.convert(a, dtype)?;
        let b = self.convert(b, dtype)?;
        self.prim(
            OpKind::Matmul,
            &[a, b],
            &[("transpose_a", AttrValue::Bool(transpose_a)), ("transpose_b", AttrValue::Bool(transpose_b))],
        )
    }
}
