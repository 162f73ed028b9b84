//! The ONNX importer: a `.onnx` file (a protobuf `ModelProto`) to a high-level ladder graph.
//!
//! ## What it reads
//! The default domain (`""` / `ai.onnx`) at opsets 7–27 (tested on 11–27), and
//! `ai.onnx.preview::FlexAttention`. Graph inputs become `input`
//! nodes (a `dim_param` becomes a size symbol of that name, an absent dim a fresh symbol
//! `unkN`), initializers become blobs read by `const` nodes (keeping their names), and each
//! ONNX node becomes one or a few ladder ops: see `ops.rs` for the tables, one per op family,
//! and the files of the families for each op's mapping.
//! Ops ladder's contract does not cover are reported together, before anything is converted:
//! [`ImportError::Unsupported`] lists every unsupported op type with its count and opset.
//!
//! Shape computations are evaluated at import: every op whose arguments are all constants and
//! whose result is a small integer or bool tensor (at most `fold_max_elements` elements) is
//! computed with the interpreter's own `eval` and becomes a constant, so `Shape → Gather →
//! Concat → Reshape` chains on static shapes leave only the `reshape`. On symbolic shapes,
//! `Shape`, `Size` and integer arithmetic, `Gather`, `Slice`, `Concat`, `Squeeze`,
//! `Unsqueeze` and `Cast` on their results are tracked as lists of (possibly symbolic) dims,
//! which `Reshape`, `Expand`, `ConstantOfShape`, `Range` and `Tile` accept; using such a list
//! as tensor data is an error naming the symbol.
//!
//! ## Hostile files
//! Every problem with a file is an [`ImportError`], never a panic or an allocation sized by an
//! untrusted number. Before prost decodes anything, `wire.rs` walks the protobuf wire format
//! with the schema of the messages read here: it rejects malformed encodings (truncated
//! fields, bad varints, lengths past the end, groups), nesting deeper than `Limits::max_depth`
//! subgraphs (and messages deeper than prost's own recursion limit), more than
//! `Limits::max_nodes` nodes, and files whose decoded form would take more than
//! `Limits::max_file_bytes` (each
//! message, string and repeated element is charged its in-memory size, so an empty-message
//! flood cannot amplify). Tensors are checked before their data is converted: dims must be
//! non-negative with a product that fits, the data must hold exactly `numel` elements of
//! the declared type, each tensor must fit `Limits::max_tensor_bytes` and all of them together
//! `Limits::max_file_bytes`. Loops unrolled at import count their nodes against
//! `Limits::max_nodes` too. External data is off by default (`allow_external_data`); when on, a
//! location must be a relative path without `..` that stays inside the model's folder, and the
//! bytes read are bounded by the same limits. Constant `Gather` indices are range-checked.

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[path = "onnx.rs"]
pub mod proto;

mod attention;
mod build;
pub mod conformance;
mod control;
mod custom;
mod elementwise;
mod grid;
mod import;
mod index;
mod linalg;
mod nn;
mod ops;
mod quant;
mod recur;
mod reduce;
mod resize;
mod shape_ops;
mod shapes;
mod signal;
mod spatial;
mod tensor;
mod wire;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use import::{import_model, input_types, summarize, ModelSummary, OpCount};
pub use tensor::{dtype_name, dtype_of, elem_type_of, tensor_from_proto, Budget};

use crate::ir::GraphError;
use crate::{Graph, Limits, Tensor};

/// What an import may read and allocate ([`Limits`]: file and tensor bytes, nodes after
/// unrolling, subgraph depth, values folded at import), and what it is told about the model's
/// inputs. The defaults admit real models (up to a 2 GiB protobuf plus external data) and
/// nothing unbounded; `ImportOptions::untrusted()` is for models from anyone.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// The bounds on what the import reads, builds and folds.
    pub limits: Limits,
    /// Read initializers stored outside the model file (`import_file` only; regular files
    /// inside the model's folder only).
    pub allow_external_data: bool,
    /// Concrete sizes for graph inputs, by name: those inputs get these static dims instead of
    /// their symbols, so every shape computation on them is static (a specialized import).
    pub input_shapes: HashMap<String, Vec<u64>>,
    /// Values of tensors computed at run time, by ONNX name, known for this specialization (a
    /// branch condition, a trip count, a shape computed from data): nodes read them as
    /// constants.
    pub known_values: HashMap<String, Arc<Tensor>>,
    /// Import only up to the node that computes this value, and make it the graph's one output
    /// (a probe for a value a later node needs, see [`ImportError::NeedsValue`]).
    pub probe: Option<String>,
}

impl ImportOptions {
    /// The defaults with [`Limits::untrusted`].
    pub fn untrusted() -> ImportOptions {
        ImportOptions { limits: Limits::untrusted(), ..ImportOptions::default() }
    }
}

/// Which node a problem is in: ONNX nodes are named by their position, name and op type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub index: usize,
    pub name: String,
    pub op_type: String,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            write!(f, "node {} ({})", self.index, self.op_type)
        } else {
            write!(f, "node {} `{}` ({})", self.index, self.name, self.op_type)
        }
    }
}

/// An op type ladder cannot import, how often the model uses it, and at which opset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    pub domain: String,
    pub op_type: String,
    pub opset: i64,
    pub count: usize,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.domain.is_empty() || self.domain == "ai.onnx" {
            write!(f, "{} ×{} (opset {})", self.op_type, self.count, self.opset)
        } else if self.opset < 0 {
            write!(f, "{}::{} ×{} (domain not imported)", self.domain, self.op_type, self.count)
        } else {
            write!(f, "{}::{} ×{} (opset {})", self.domain, self.op_type, self.count, self.opset)
        }
    }
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Why one node could not be converted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NodeError {
    /// The node breaks the ONNX spec (bad attribute, wrong input count, ...).
    #[error("{0}")]
    Invalid(String),
    /// A valid use of the op that ladder cannot express (e.g. a mode it does not have).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A constant index (Gather, ...) outside its axis.
    #[error("index {index} is out of range for axis {axis} of size {size}")]
    IndexOutOfRange { index: i64, axis: usize, size: u64 },
    /// A tensor attribute or constant input is malformed.
    #[error("{0}")]
    Tensor(Box<ImportError>),
    /// ladder's shape and dtype rules reject what the node computes.
    #[error("{0}")]
    Graph(Box<GraphError>),
    /// An input name nothing defines (reported as [`ImportError::UndefinedValue`]).
    #[error("input `{0}` is not defined before this node")]
    Undefined(String),
    /// An error inside an inlined subgraph, reported as it is.
    #[error("{0}")]
    Subgraph(Box<ImportError>),
    /// Input `input` must be known when the graph is built (a branch condition, a trip count,
    /// a shape computed from data) but is computed at run time; reported as
    /// [`ImportError::NeedsValue`].
    #[error("{what} (input {input}) is computed at run time; its value must be known to build the graph")]
    NeedsValue { input: usize, what: String },
    /// A symbolic size the conversion needs as a number (the length of an unrolled
    /// recurrence, the input size of a resize): an import for concrete input shapes
    /// ([`ImportOptions::input_shapes`]) converts it.
    #[error("{0}: it must be a static size")]
    NeedsStatic(String),
}

impl From<GraphError> for NodeError {
    fn from(e: GraphError) -> NodeError {
        NodeError::Graph(Box::new(e))
    }
}

/// Why a model could not be imported.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read `{path}`: {message}")]
    Io { path: PathBuf, message: String },
    /// Not a well-formed protobuf (truncated, garbage, or a bad field).
    #[error("not a valid ONNX protobuf: {0}")]
    Decode(String),
    /// A size above one of the import's [`Limits`] (named by `limit`, a field of `Limits`).
    #[error("{what} is {size}, above `Limits::{limit}` = {max}")]
    Limit { what: String, size: u64, limit: &'static str, max: u64 },
    /// Subgraphs (or messages) nested deeper than allowed.
    #[error("{what} nested {depth} deep, above {bound} = {limit}")]
    TooDeep { what: &'static str, depth: u32, bound: &'static str, limit: u32 },
    /// A field the model cannot do without is absent or empty.
    #[error("missing {0}")]
    Missing(String),
    /// A negative dim, or dims whose product overflows.
    #[error("{what}: bad dims {dims:?}: {problem}")]
    BadDims { what: String, dims: Vec<i64>, problem: &'static str },
    /// A tensor whose data disagrees with its type and dims, or that cannot be read.
    #[error("tensor `{name}`: {problem}")]
    BadTensor { name: String, problem: String },
    /// An element type ladder has no dtype for.
    #[error(
        "{what}: element type {elem_type} is not supported (ladder has f32, f64, f16, bf16, i8, i16, i32, i64, u8, u16, u32, u64, bool)"
    )]
    DType { what: String, elem_type: String },
    /// External data that is disabled, or whose location is unsafe or unreadable.
    #[error("tensor `{name}`: external data: {problem}")]
    ExternalData { name: String, problem: String },
    /// The default domain's opset is missing or outside what the importer reads.
    #[error("opset {0} of the default domain is not supported (ladder imports opsets 7 to 27)")]
    Opset(i64),
    /// Op types ladder cannot import: every one of them, with counts.
    #[error("the model uses ops ladder cannot import: {}", list(.0))]
    Unsupported(Vec<UnsupportedOp>),
    /// A graph input, output or value that is not what the graph says.
    #[error("{0}")]
    Graph(String),
    /// A value a node reads that no earlier node, input or initializer defines.
    #[error("{node}: input `{name}` is not defined before it")]
    UndefinedValue { node: NodeRef, name: String },
    /// One node failed to convert.
    #[error("{node}: {error}")]
    Node { node: NodeRef, error: NodeError },
    /// A node needs the value of `name` (computed at run time) to be converted: an import that
    /// knows it ([`ImportOptions::known_values`]) can, and a probe import
    /// ([`ImportOptions::probe`]) computes it.
    #[error("{node}: {what} `{name}` is computed at run time; its value must be known to build the graph")]
    NeedsValue { node: NodeRef, name: String, what: String },
}

/// What a specialized import needs in order to convert a model that the symbolic import
/// could not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needs {
    /// The value of this tensor (by ONNX name), computed from the inputs.
    Value(String),
    /// Concrete input shapes.
    Shapes,
}

impl ImportError {
    /// Whether an import that knows more (concrete input shapes, values computed at run time)
    /// may succeed where this one failed, and what it must know. `None` for errors that no
    /// specialization can mend (an unsupported op type, a malformed file).
    pub fn needs(&self) -> Option<Needs> {
        match self {
            ImportError::NeedsValue { name, .. } => Some(Needs::Value(name.clone())),
            // A conversion that fails on symbolic shapes (a size it needs as a number, shapes
            // the size algebra cannot prove compatible) may succeed on concrete ones.
            ImportError::Node { error, .. } => match error {
                NodeError::Tensor(_) | NodeError::Undefined(_) => None,
                NodeError::Subgraph(e) => e.needs(),
                _ => Some(Needs::Shapes),
            },
            _ => None,
        }
    }
}

/// Imports an ONNX model from its bytes. External data is never read (use [`import_file`]).
pub fn import(bytes: &[u8], options: &ImportOptions) -> Result<Graph, ImportError> {
    let model = decode(bytes, options)?;
    import_model(&model, options, None)
}

/// Imports an ONNX model file. External data, when `options.allow_external_data` is set, is
/// read from files next to it (never outside its folder).
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Graph, ImportError> {
    let bytes = read_bounded(path, &options.limits)?;
    let model = decode(&bytes, options)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    import_model(&model, options, Some(&dir))
}

/// Reads a file, refusing one larger than `limits.max_file_bytes`, or anything but a regular
/// file (a FIFO or a device would block or never end), before reading it.
pub fn read_bounded(path: &Path, limits: &Limits) -> Result<Vec<u8>, ImportError> {
    let io = |e: std::io::Error| ImportError::Io { path: path.into(), message: e.to_string() };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(ImportError::Io { path: path.into(), message: "not a regular file".into() });
    }
    let len = meta.len();
    if len > limits.max_file_bytes {
        return Err(ImportError::Limit {
            what: format!("the size of `{}`", path.display()),
            size: len,
            limit: "max_file_bytes",
            max: limits.max_file_bytes,
        });
    }
    std::fs::read(path).map_err(io)
}

/// Checks the wire format against the limits, then decodes. Safe on any bytes.
pub fn decode(bytes: &[u8], options: &ImportOptions) -> Result<proto::ModelProto, ImportError> {
    wire::check(bytes, wire::Root::Model, options)?;
    <proto::ModelProto as prost::Message>::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))
}

/// Decodes a bare `TensorProto` (the `.pb` files of ONNX's test data), with the same checks.
pub fn decode_tensor(bytes: &[u8], options: &ImportOptions) -> Result<proto::TensorProto, ImportError> {
    wire::check(bytes, wire::Root::Tensor, options)?;
    <proto::TensorProto as prost::Message>::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))
}

/// True when `bytes` look like an ONNX model rather than ladder text: a protobuf whose
/// first field is one a `ModelProto` starts with (ir_version, opset_import or graph).
pub fn looks_like_onnx(bytes: &[u8]) -> bool {
    // Tag of field 1 varint (ir_version) is 0x08; opset_import (8, LEN) is 0x42; graph (7,
    // LEN) is 0x3a; producer_name (2, LEN) is 0x12.
    matches!(bytes.first(), Some(0x08 | 0x42 | 0x3a | 0x12))
}

/// FNV-1a of the .proto the committed `onnx.rs` was generated from (see tools/onnx-protogen).
pub fn proto_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_code_is_current() {
        let proto = include_bytes!("onnx.proto");
        let generated = include_str!("onnx.rs");
        let want = format!("// proto-fnv1a: {:016x}", super::proto_hash(proto));
        assert!(
            generated.lines().take(5).any(|l| l == want),
            "src/frontend/onnx/onnx.rs is stale: run `cargo run --manifest-path tools/onnx-protogen/Cargo.toml`"
        );
    }
}
