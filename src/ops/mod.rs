//! The operator contract: every operator ladder knows, and everything about each one.
//!
//! An operator's facts live in one `OpSpec` row in the file of its family: its text name, its
//! rung, its arity and attributes, its shape-and-dtype rule (`infer`), its meaning (`eval`, the
//! reference interpreter's implementation) and, for prims, the stricter form it must take in a
//! graph at the prims rung (`explicit`). `OpKind` below is the one hand-written list of
//! operators; adding one means a variant here and a row in its family file.
//!
//! ## Rungs
//! - **high-level**: what frontends emit. Broadcasting, views, in-place forms, big fused
//!   meanings (softmax, layer_norm, attention). Decomposed into prims before compilation.
//! - **prim**: the ~50 operations every backend implements. In a high-level graph the
//!   elementwise prims also broadcast NumPy-style and promote dtypes, like their frontend
//!   counterparts; at the prims rung they must be *explicit* (operands of one shape and dtype;
//!   `broadcast_in_dim` and `convert_element_type` spelled out), which the verifier checks.
//! - **opaque**: `matmul` and `conv`, never decomposed; backends call library kernels. So is
//!   `custom`, a kernel registered at run time (`custom.rs`).
//! - **source**: `input` and `const`, which start the graph.

use std::fmt;
use std::sync::OnceLock;

use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrError, AttrSpec, Attrs, DType, DimError, Shape, TensorType};

pub mod custom;
pub mod elementwise;
pub mod index;
pub mod inplace;
pub mod library;
pub mod linalg;
pub mod nn;
pub mod norm;
pub mod recur;
pub mod reduce;
pub mod shape;
pub mod util;

/// Every operator. Grouped by family; the family file holds each one's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    // --- Sources (ir) ---
    Input,
    Const,

    // --- Unary elementwise prims (elementwise.rs) ---
    Neg,
    Abs,
    Exp,
    Exp2,
    Log,
    Log1p,
    Expm1,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sin,
    Cos,
    Tanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Sign,
    LogicalNot,
    IsNan,

    // --- Binary and ternary elementwise prims (elementwise.rs) ---
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Rem,
    Where,
    ConvertElementType,

    // --- Shape prims (shape.rs) ---
    BroadcastInDim,
    Reshape,
    Permute,
    Slice,
    Pad,
    Cat,
    Rev,
    Iota,
    Full,
    DimValues,

    // --- Reduction prims (reduce.rs) ---
    ReduceSum,
    ReduceProd,
    ReduceMax,
    ReduceMin,
    ReduceArgmax,

    // --- Indexing prims (index.rs) ---
    Gather,
    ScatterAdd,

    // --- Opaque (linalg.rs) ---
    Matmul,
    Conv,

    // --- High-level linear algebra, convolution and pooling (linalg.rs) ---
    Bmm,
    Linear,
    Addmm,
    Conv2d,
    MaxPool2d,
    AvgPool2d,
    AdaptiveAvgPool2d,

    // --- High-level activations (nn.rs) ---
    Relu,
    Gelu,
    Silu,
    Sigmoid,
    Softplus,
    LeakyRelu,
    Hardsigmoid,
    Hardswish,
    Elu,
    Clamp,
    Atan,

    // --- High-level normalisation, attention, losses (norm.rs) ---
    Softmax,
    LogSoftmax,
    LayerNorm,
    RmsNorm,
    BatchNorm,
    GroupNorm,
    Dropout,
    ScaledDotProductAttention,
    CrossEntropy,
    MseLoss,

    // --- High-level recurrences (recur.rs) ---
    Lstm,

    // --- High-level reductions (reduce.rs) ---
    Sum,
    Mean,
    Var,
    Std,
    Prod,
    Amax,
    Amin,
    Argmax,
    Argmin,
    Logsumexp,
    Cumsum,

    // --- High-level indexing and assembly (index.rs) ---
    Embedding,
    MaskedFill,
    Tril,
    Triu,

    // --- High-level views and assembly (shape.rs) ---
    View,
    Flatten,
    Transpose,
    Expand,
    Squeeze,
    Unsqueeze,
    Select,
    Contiguous,
    Stack,
    Split,
    Chunk,

    // --- In-place, and the functional twin of slice assignment (inplace.rs) ---
    SliceScatter,
    AddInplace,
    SubInplace,
    MulInplace,
    DivInplace,
    ReluInplace,
    CopyInplace,
    FillInplace,
    MaskedFillInplace,
    SliceAssignInplace,

    // --- Custom kernels, registered at run time (custom.rs) ---
    Custom,
}

/// Where an op sits on the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rung {
    Source,
    High,
    Prim,
    Opaque,
}

impl Rung {
    pub fn name(self) -> &'static str {
        match self {
            Rung::Source => "source",
            Rung::High => "high",
            Rung::Prim => "prim",
            Rung::Opaque => "opaque",
        }
    }
}

/// How many arguments an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    /// Inclusive range: optional trailing arguments (bias, mask, weight).
    Between(usize, usize),
    AtLeast(usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

/// Shape and dtype rule: the result type of an op applied to arguments of these types.
pub type InferFn = fn(OpKind, &Attrs, &[&TensorType]) -> Result<TensorType, OpError>;
/// The reference meaning of an op on concrete tensors.
pub type EvalFn = fn(OpKind, &mut EvalCtx, &Attrs, &[View], &TensorType) -> Result<View, EvalError>;
/// Extra constraints a prim must meet at the prims rung.
pub type ExplicitFn = fn(&Attrs, &[&TensorType]) -> Result<(), OpError>;

/// How the native plan runs an op: as generated kernels over its prims, or through a library
/// kernel. The reference plan always runs the prims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    /// Its prims (its decomposition, for a high-level op), fused into generated kernels; the
    /// scheduler's data-movement prims and the opaque ops go to library kernels of their own.
    Prims,
    /// Decomposed, then put back by recovery from its prims and run by a library kernel (on
    /// f32 rows; other dtypes run the recovered op's reference meaning).
    Recovered,
    /// [`Native::Recovered`], and an elementwise activation: its library call may run fused
    /// after the kernel, matmul or convolution that produces its argument
    /// (`Kernel::activation`, a convolution's post-op).
    Activation,
    /// Never decomposed in native mode: a library kernel runs it whole (its decomposition
    /// would be too long for recovery to match, or slower than the kernel).
    Kept,
}

/// Everything about one operator.
#[derive(Clone, Copy)]
pub struct OpSpec {
    pub kind: OpKind,
    pub name: &'static str,
    pub rung: Rung,
    pub arity: Arity,
    pub attrs: &'static [AttrSpec],
    pub infer: InferFn,
    pub eval: EvalFn,
    /// `None`: the op has no constraints beyond `infer` at the prims rung.
    pub explicit: Option<ExplicitFn>,
    /// True for ops that write into an argument's storage.
    pub mutates: bool,
    /// True for ops whose result may alias an argument (views, and in-place ops' results).
    pub aliases: bool,
    /// How the native plan runs the op (see [`library`]).
    pub native: Native,
    /// One line for `ladder ops`.
    pub doc: &'static str,
}

/// Why an op rejects its arguments or attributes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpError {
    #[error("takes {expected} arguments, got {got}")]
    Arity { expected: Arity, got: usize },
    #[error("argument {arg} must have rank {expected}, got rank {got}")]
    Rank { arg: usize, expected: String, got: usize },
    #[error("argument {arg} has dtype {got}, expected {expected}")]
    DType { arg: usize, got: DType, expected: String },
    #[error("shapes {a} and {b} do not broadcast")]
    Broadcast { a: Box<Shape>, b: Box<Shape> },
    #[error("axis {axis} is out of range for rank {rank}")]
    Axis { axis: i64, rank: usize },
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("bad attribute: {0}")]
    Attr(#[from] AttrError),
    #[error("attribute `{name}`: {problem}")]
    AttrValue { name: &'static str, problem: String },
    #[error("{0}")]
    Dim(#[from] DimError),
    #[error("not in explicit prim form: {0}")]
    NotExplicit(String),
    #[error("no custom op named `{name}` is registered (ops::custom::register)")]
    UnknownCustom { name: String },
    #[error("custom op `{name}`: {problem}")]
    Custom { name: String, problem: String },
}

impl OpSpec {
    /// A row with no constraints at the prims rung beyond `infer`, neither mutating nor
    /// aliasing, run natively as its prims: what most rows are, the rest by struct update.
    #[allow(clippy::too_many_arguments)]
    pub const fn plain(
        kind: OpKind,
        name: &'static str,
        rung: Rung,
        arity: Arity,
        attrs: &'static [AttrSpec],
        infer: InferFn,
        eval: EvalFn,
        doc: &'static str,
    ) -> OpSpec {
        let (explicit, mutates, aliases, native) = (None, false, false, Native::Prims);
        OpSpec { kind, name, rung, arity, attrs, infer, eval, explicit, mutates, aliases, native, doc }
    }

    /// This row, run natively as `native` says.
    pub const fn with_native(self, native: Native) -> OpSpec {
        OpSpec { native, ..self }
    }
}

impl OpKind {
    pub fn spec(self) -> &'static OpSpec {
        table()[self as usize].unwrap_or_else(|| panic!("operator {self:?} has no spec row"))
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn rung(self) -> Rung {
        self.spec().rung
    }

    pub fn from_name(name: &str) -> Option<OpKind> {
        all_specs().find(|s| s.name == name).map(|s| s.kind)
    }

    pub fn is_prim(self) -> bool {
        self.rung() == Rung::Prim
    }

    pub fn mutates(self) -> bool {
        self.spec().mutates
    }

    pub fn is_view(self) -> bool {
        let s = self.spec();
        s.aliases && !s.mutates
    }

    pub fn is_elementwise(self) -> bool {
        use OpKind::*;
        (Neg as usize..=ConvertElementType as usize).contains(&(self as usize))
    }

    pub fn is_reduction(self) -> bool {
        use OpKind::*;
        (ReduceSum as usize..=ReduceArgmax as usize).contains(&(self as usize))
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every spec, family by family.
pub fn all_specs() -> impl Iterator<Item = &'static OpSpec> {
    [
        util::SOURCES,
        elementwise::SPECS,
        shape::SPECS,
        reduce::SPECS,
        index::SPECS,
        linalg::SPECS,
        nn::SPECS,
        norm::SPECS,
        inplace::SPECS,
        // Last among the high-level ops: fuzz seeds name an op by its index in spec order.
        recur::SPECS,
        // After every built-in op, for the same reason.
        custom::SPECS,
    ]
    .into_iter()
    .flatten()
}

/// Spec table indexed by `OpKind as usize`, built once. A missing or duplicated row is a bug
/// in this module, caught by the `every_op_has_one_spec` test.
fn table() -> &'static [Option<&'static OpSpec>] {
    static TABLE: OnceLock<Vec<Option<&'static OpSpec>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut rows: Vec<Option<&'static OpSpec>> = vec![None; OpKind::Custom as usize + 1];
        for s in all_specs() {
            rows[s.kind as usize] = Some(s);
        }
        rows
    })
}

/// The result type of `op` applied to arguments of `args`' types, checking arity first.
pub fn infer(op: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let spec = op.spec();
    if !spec.arity.accepts(args.len()) {
        return Err(OpError::Arity { expected: spec.arity, got: args.len() });
    }
    (spec.infer)(op, attrs, args)
}

/// Checks the prims-rung form of a node (equal shapes and dtypes for elementwise prims, and so
/// on). High-level ops are never explicit.
pub fn check_explicit(op: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<(), OpError> {
    let spec = op.spec();
    match spec.rung {
        Rung::High => Err(OpError::NotExplicit(format!("{} is a high-level op", spec.name))),
        _ => spec.explicit.map_or(Ok(()), |f| f(attrs, args)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_one_spec() {
        let mut seen = std::collections::HashSet::new();
        for s in all_specs() {
            assert!(seen.insert(s.kind), "{:?} has two spec rows", s.kind);
            assert_eq!(OpKind::from_name(s.name), Some(s.kind), "name {} is not unique", s.name);
        }
        assert_eq!(seen.len(), OpKind::Custom as usize + 1, "some op has no spec row");
    }
}
