//! The graph: an arena of nodes, each defining one SSA value.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cranelift_entity::{entity_impl, PrimaryMap, SecondaryMap};
use smallvec::SmallVec;

use super::{Attrs, DType, Shape};
use crate::ops::{OpError, OpKind};
use crate::tensor::Tensor;

/// An SSA value: the result of the node with the same index. Prints as `%N`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "%");

/// A constant's data, stored once per graph and referenced from `const` nodes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(u32);
entity_impl!(BlobId, "@");

/// The dtype and shape of a value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One operation. `Input` and `Const` nodes are the graph's sources.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: OpKind,
    pub attrs: Attrs,
    pub args: SmallVec<[Value; 4]>,
    /// Inferred when the node was added; the verifier re-infers and compares.
    pub ty: TensorType,
}

/// Named constant data. Large weights live here, not in the text of the graph.
#[derive(Clone, Debug)]
pub struct Blob {
    pub name: String,
    pub tensor: Arc<Tensor>,
}

impl PartialEq for Blob {
    fn eq(&self, other: &Blob) -> bool {
        self.name == other.name && self.tensor.bit_eq(&other.tensor)
    }
}

/// A graph output: a value and the name callers know it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub name: String,
    pub value: Value,
}

/// A dataflow graph of tensor operations.
///
/// **Invariant:** nodes are appended in topological order: every argument of a node is an
/// earlier node. Interpreting or compiling a graph is one forward loop over its nodes, and
/// for graphs with in-place ops that order is also the program order.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub name: String,
    pub(crate) nodes: PrimaryMap<Value, Node>,
    /// Optional names of values (`%x`); unnamed values print as `%N`.
    pub(crate) names: SecondaryMap<Value, Option<Box<str>>>,
    /// `names` inverted: lookups by name in constant time (text with tens of thousands of
    /// named values parsed in quadratic time without it). Kept by [`Graph::set_name`],
    /// [`Graph::add_input`] and `clear_name`.
    by_name: HashMap<Box<str>, Value>,
    pub(crate) inputs: Vec<Value>,
    pub(crate) outputs: Vec<Output>,
    blobs: PrimaryMap<BlobId, Blob>,
    /// Blob ids by name (a model has thousands of weights; looking each up by scanning made
    /// building a plan quadratic in their number). Kept by [`Graph::add_blob`] and
    /// [`Graph::retain_blobs`].
    blob_index: HashMap<Box<str>, BlobId>,
}

/// A node that could not be added, and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("{op} (would be {value}): {error}")]
    Op { op: &'static str, value: Value, error: OpError },
    #[error("argument {arg} of {op} refers to {value}, which is not defined before this node")]
    UndefinedArg { op: &'static str, arg: usize, value: Value },
    #[error("value name `{0}` is used twice")]
    DuplicateName(String),
    #[error("output name `{0}` is used twice")]
    DuplicateOutput(String),
    #[error("blob name `{0}` is used twice")]
    DuplicateBlob(String),
    #[error("{0} is not a value of this graph")]
    NoSuchValue(Value),
    #[error("input and const nodes are made with add_input / add_const, not add_node")]
    SourceOp,
}

impl Graph {
    pub fn new(name: &str) -> Graph {
        Graph {
            name: name.to_string(),
            nodes: PrimaryMap::new(),
            names: SecondaryMap::new(),
            by_name: HashMap::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            blobs: PrimaryMap::new(),
            blob_index: HashMap::new(),
        }
    }

    pub fn node(&self, v: Value) -> &Node {
        &self.nodes[v]
    }

    pub fn get(&self, v: Value) -> Option<&Node> {
        self.nodes.get(v)
    }

    pub fn ty(&self, v: Value) -> &TensorType {
        &self.nodes[v].ty
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every value, in topological (program) order.
    pub fn values(&self) -> impl Iterator<Item = Value> + '_ {
        self.nodes.keys()
    }

    pub fn nodes(&self) -> impl Iterator<Item = (Value, &Node)> + '_ {
        self.nodes.iter()
    }

    pub fn inputs(&self) -> &[Value] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    pub fn blobs(&self) -> impl Iterator<Item = (BlobId, &Blob)> + '_ {
        self.blobs.iter()
    }

    pub fn blob(&self, id: BlobId) -> &Blob {
        &self.blobs[id]
    }

    pub fn blob_by_name(&self, name: &str) -> Option<BlobId> {
        self.blob_index.get(name).copied()
    }

    /// Keeps only the blobs `keep` accepts (renumbering them: callers find blobs by name).
    pub(crate) fn retain_blobs(&mut self, keep: impl Fn(&Blob) -> bool) {
        let old = std::mem::take(&mut self.blobs);
        self.blob_index.clear();
        for (_, b) in old.into_iter() {
            if keep(&b) {
                let id = self.blobs.push(b);
                self.blob_index.insert(self.blobs[id].name.as_str().into(), id);
            }
        }
    }

    pub fn name_of(&self, v: Value) -> Option<&str> {
        self.names.get(v).and_then(|n| n.as_deref())
    }

    pub fn value_by_name(&self, name: &str) -> Option<Value> {
        self.by_name.get(name).copied()
    }

    /// The name an input is passed by (its value name, or its index as text).
    pub fn input_name(&self, index: usize) -> String {
        let v = self.inputs[index];
        self.name_of(v).map_or_else(|| v.as_u32().to_string(), str::to_string)
    }

    /// How `v` is written in the text form: `%name` or `%N`.
    pub fn display_value(&self, v: Value) -> String {
        match self.name_of(v) {
            Some(n) => format!("%{}", crate::text::quote_name(n)),
            None => v.to_string(),
        }
    }

    /// Names (or renames) a value. Names are unique within a graph.
    pub fn set_name(&mut self, v: Value, name: &str) -> Result<(), GraphError> {
        if !self.nodes.is_valid(v) {
            return Err(GraphError::NoSuchValue(v));
        }
        if let Some(other) = self.value_by_name(name) {
            if other != v {
                return Err(GraphError::DuplicateName(name.to_string()));
            }
        }
        self.clear_name(v);
        self.by_name.insert(name.into(), v);
        self.names[v] = Some(name.into());
        Ok(())
    }

    /// Removes `v`'s name, if it has one (it prints as `%N` then).
    pub(crate) fn clear_name(&mut self, v: Value) {
        if let Some(old) = self.names[v].take() {
            self.by_name.remove(&old);
        }
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: &str, ty: TensorType) -> Result<Value, GraphError> {
        if self.value_by_name(name).is_some() {
            return Err(GraphError::DuplicateName(name.to_string()));
        }
        let index = self.inputs.len() as i64;
        let attrs = Attrs::resolve(OpKind::Input.spec().attrs, vec![("index".into(), super::AttrValue::Int(index))])
            .map_err(|e| GraphError::Op { op: "input", value: self.nodes.next_key(), error: OpError::Attr(e) })?;
        let v = self.nodes.push(Node { op: OpKind::Input, attrs, args: SmallVec::new(), ty });
        self.by_name.insert(name.into(), v);
        self.names[v] = Some(name.into());
        self.inputs.push(v);
        Ok(v)
    }

    /// Stores a blob, checking its name is new.
    pub fn add_blob(&mut self, name: &str, tensor: Arc<Tensor>) -> Result<BlobId, GraphError> {
        if self.blob_by_name(name).is_some() {
            return Err(GraphError::DuplicateBlob(name.to_string()));
        }
        let id = self.blobs.push(Blob { name: name.to_string(), tensor });
        self.blob_index.insert(name.into(), id);
        Ok(id)
    }

    /// Adds a `const` node reading a stored blob.
    pub fn add_const(&mut self, blob: BlobId) -> Value {
        let t = &self.blobs[blob].tensor;
        let ty =
            TensorType::new(t.dtype(), Shape::from_static(&t.shape().iter().map(|&d| d as u64).collect::<Vec<_>>()));
        let attrs = Attrs::resolve(
            OpKind::Const.spec().attrs,
            vec![("blob".into(), super::AttrValue::Str(self.blobs[blob].name.clone()))],
        )
        .unwrap_or_default();
        self.nodes.push(Node { op: OpKind::Const, attrs, args: SmallVec::new(), ty })
    }

    /// The blob a `const` node reads.
    pub fn const_blob(&self, v: Value) -> Option<BlobId> {
        let node = &self.nodes[v];
        if node.op != OpKind::Const {
            return None;
        }
        self.blob_by_name(node.attrs.str("blob"))
    }

    /// Adds an operation node, inferring its type. Fails without changing the graph when an
    /// argument is not yet defined or the op rejects its arguments or attributes.
    pub fn add_node(&mut self, op: OpKind, args: &[Value], attrs: Attrs) -> Result<Value, GraphError> {
        if op.spec().rung == crate::ops::Rung::Source {
            return Err(GraphError::SourceOp);
        }
        for (i, &a) in args.iter().enumerate() {
            if !self.nodes.is_valid(a) {
                return Err(GraphError::UndefinedArg { op: op.name(), arg: i, value: a });
            }
        }
        let arg_types: SmallVec<[&TensorType; 4]> = args.iter().map(|&a| &self.nodes[a].ty).collect();
        let next = self.nodes.next_key();
        let ty = crate::ops::infer(op, &attrs, &arg_types);
        drop(arg_types);
        let ty = ty.map_err(|error| GraphError::Op { op: op.name(), value: next, error })?;
        Ok(self.nodes.push(Node { op, attrs, args: args.iter().copied().collect(), ty }))
    }

    /// Adds an output; output names are unique.
    pub fn add_output(&mut self, name: &str, value: Value) -> Result<(), GraphError> {
        if !self.nodes.is_valid(value) {
            return Err(GraphError::NoSuchValue(value));
        }
        if self.outputs.iter().any(|o| o.name == name) {
            return Err(GraphError::DuplicateOutput(name.to_string()));
        }
        self.outputs.push(Output { name: name.to_string(), value });
        Ok(())
    }

    /// The default name of an output of value `v`: its value name, or `out{i}`.
    pub fn default_output_name(&self, v: Value) -> String {
        self.name_of(v).map_or_else(|| format!("out{}", v.as_u32()), str::to_string)
    }
}
