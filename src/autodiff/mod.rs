//! Reverse-mode automatic differentiation over prims: a loss's gradients with respect to
//! chosen inputs, built as one joint graph that computes the forward outputs and the
//! gradients together.
//!
//! ## The rules
//!
//! [`rule`] is the one table: every prim and both opaque ops map to a vector-Jacobian
//! product (`VjpFn`). A rule receives the forward node (its arguments and its result are
//! values of the joint graph) and the cotangent of its result, and returns one cotangent per
//! argument, `None` where the argument gets no contribution. Rules emit prims through
//! [`Emitter`], the emitter the decompositions use, so a backward graph is an ordinary graph
//! of explicit prims that goes down the same pipeline (simplify, recover, schedule) and runs
//! on every executor. The table's rules live in the family files: `elementwise.rs`,
//! `shape.rs` (shape prims and `sum_to`, which sums a cotangent back to a broadcast
//! operand's shape), `reduce.rs` (reductions, gather and scatter) and `linalg.rs` (`matmul`,
//! `conv`).
//!
//! High-level ops have no rules (but those of [`HAND_RULES`]): their backward is derived
//! from their decomposition. When
//! the walk meets a high-level node (a graph at the `Recovered` rung keeps some whole), it
//! emits the node's decomposition beside it and walks back through those prims; the forward
//! node stays, so the forward pass still runs the library kernel. A hand rule for a
//! high-level op belongs in the table only where it is faster than the derived one and a
//! test checks it against the derived one.
//!
//! ## Where the rules are reachable from
//!
//! The design asks that one place hold everything about an operator. The spec row
//! (`crate::ops`) cannot hold the rule: rules emit through the decomposition emitter, which
//! sits above the op table, and the layering forbids the op table naming a layer above it.
//! So autodiff follows decomposition's precedent: decompositions live in `crate::decomp`,
//! reached by `decomp::rule(op)`, and derivatives live here, reached by [`rule`], one match
//! over `OpKind` (a new prim without an arm is a missing rule, which `ladder ops` reports and
//! `tests/all/autodiff.rs` fails on). Nothing else keeps a list: `ladder ops` derives its
//! `vjp` column from [`rule`] and, for high-level ops, from the ops their decompositions emit
//! (`numerics::grad::lowered_ops`).
//!
//! ## Non-differentiable ops (documented choices)
//!
//! - Integer and bool values carry no gradient: only float values are *active* (depend on
//!   an input being differentiated), so no rule is asked about them.
//! - Comparisons, `logical_not`, `isnan`, `and`, `or`, `reduce_argmax`, `iota`, `full` and
//!   `dim_values` have bool, integer or no operands to differentiate: their rules return no
//!   contribution.
//! - `floor`, `ceil`, `round` and `sign` are piecewise constant: zero gradient (no
//!   contribution), also at their jumps.
//! - At kinks a rule picks a subgradient, as PyTorch does: `abs'(0) = 0`; `max`/`min` split
//!   the cotangent equally between tied operands; `reduce_max`/`reduce_min` share it equally
//!   among the tied extremes.
//!
//! ## The walk
//!
//! [`grad`] copies the forward graph, marks the active values (floats reachable from a
//! differentiated input), seeds the loss with ones and walks the nodes backward once,
//! accumulating each value's cotangent as a sum over its uses. A differentiated input the
//! loss does not depend on gets zeros. Every gradient a rule returns must have exactly its
//! argument's type (a mismatch is a bug in the rule, reported as [`AdError::Mismatch`]).
//! Dead code (rules' results no gradient needs) is removed at the end, and the joint graph
//! is verified.

use cranelift_entity::EntityRef;
use smallvec::SmallVec;

use crate::decomp::{DecompError, Emitter};
use crate::ir::verify::{verify, Stage, VerifyErrors};
use crate::ir::{Graph, GraphError, Node, TensorType, Value};
use crate::ops::{OpKind, Rung};
use crate::passes::SimplifyError;

mod elementwise;
mod linalg;
mod maxflow;
mod partition;
mod reduce;
mod shape;

pub use partition::{
    partition, Costs, Partition, PartitionOptions, Policy, Report, Saved, Why, PREFER_RECOMPUTE, SHRINK_BAN,
};

/// One cotangent per argument of a node; `None`: no contribution.
pub type Grads = SmallVec<[Option<Value>; 3]>;

/// What a rule sees: the forward node (arguments and result are joint-graph values) and the
/// cotangent of its result.
pub struct Vjp<'a> {
    /// The forward node.
    pub node: &'a Node,
    /// The node's result.
    pub out: Value,
    /// The cotangent of `out` (same type).
    pub ct: Value,
    /// Which arguments need a cotangent (the active ones). A rule may return cotangents for
    /// the others (they are dropped), but need not: the weight's derivative of a
    /// convolution with symbolic lengths, which has no rule, is asked for only when needed.
    pub wanted: SmallVec<[bool; 3]>,
}

impl Vjp<'_> {
    /// Argument `i` of the forward node.
    pub fn arg(&self, i: usize) -> Value {
        self.node.args[i]
    }

    /// Whether argument `i` needs a cotangent.
    pub fn wants(&self, i: usize) -> bool {
        self.wanted.get(i).copied().unwrap_or(false)
    }
}

/// A vector-Jacobian product: the cotangents of a node's arguments from its result's.
pub type VjpFn = fn(&mut Emitter, &Vjp) -> Result<Grads, DecompError>;

/// The derivative rule of a prim or opaque op: the one table (see the module docs). High-level
/// ops (but [`HAND_RULES`]) and sources have none.
pub fn rule(op: OpKind) -> Option<VjpFn> {
    use OpKind::*;
    let f: VjpFn = match op {
        // Unary math.
        Neg | Abs | Exp | Exp2 | Log | Log1p | Expm1 | Sqrt | Rsqrt | Reciprocal | Sin | Cos | Tanh | Erf => {
            elementwise::unary
        }
        // Piecewise constant, or bool results: no contribution.
        Floor | Ceil | Round | Sign | LogicalNot | IsNan | Eq | Ne | Lt | Le | Gt | Ge | And | Or => none,
        Add | Sub | Mul | Div | Pow | Max | Min | Rem => elementwise::binary,
        Where => elementwise::select,
        ConvertElementType => elementwise::convert,
        BroadcastInDim => shape::broadcast_in_dim,
        Reshape => shape::reshape,
        Permute => shape::permute,
        Slice => shape::slice,
        Pad => shape::pad,
        Cat => shape::cat,
        Rev => shape::rev,
        // No operands.
        Iota | Full | DimValues => none,
        ReduceSum => reduce::sum,
        ReduceProd => reduce::prod,
        ReduceMax | ReduceMin => reduce::extreme,
        ReduceArgmax => none,
        Gather => reduce::gather,
        ScatterAdd => reduce::scatter_add,
        Matmul => linalg::matmul,
        Conv => linalg::conv,
        // High-level ops with a hand rule (see `HAND_RULES`).
        Gelu => elementwise::gelu,
        Softmax => reduce::softmax,
        LogSoftmax => reduce::log_softmax,
        _ => return None,
    };
    Some(f)
}

/// High-level ops with a hand rule in [`rule`]: faster than the rule derived from their
/// decomposition, and checked against it (`tests/all/autodiff.rs`). When a loss is
/// differentiated in native mode the prims rung keeps them whole, so the forward runs their
/// library kernel and the backward their rule. The elementwise ones (gelu) the partitioner
/// may recompute; the row ops (softmax, log_softmax) it saves, as it saves every library
/// kernel's result.
pub const HAND_RULES: &[OpKind] = &[OpKind::Gelu, OpKind::Softmax, OpKind::LogSoftmax];

/// No contribution to any argument.
fn none(_: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    Ok(v.node.args.iter().map(|_| None).collect())
}

/// Why a joint graph could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AdError {
    /// The loss names no output.
    #[error("no output named `{0}`")]
    NoSuchOutput(String),
    /// A differentiated input names no input.
    #[error("no input named `{0}`")]
    NoSuchInput(String),
    /// The same input is asked for twice.
    #[error("input `{0}` is listed twice")]
    DuplicateInput(String),
    /// The loss is not a float scalar.
    #[error("the loss `{name}` is {ty}; it must be a float scalar (rank 0, or every dim 1)")]
    BadLoss { name: String, ty: Box<TensorType> },
    /// A differentiated input is not a float.
    #[error("input `{name}` is {ty}; only float inputs have gradients")]
    NotFloat { name: String, ty: Box<TensorType> },
    /// The graph is not at the prims rung (or the recovered rung).
    #[error("autodiff takes a graph of prims (decompose it first): {0}")]
    NotPrims(VerifyErrors),
    /// A node on the path from an input to the loss has no rule and no decomposition.
    #[error("{value} = {op}: no derivative rule, and no decomposition to derive one from")]
    NoRule { value: String, op: &'static str },
    /// A rule (or a decomposition it derived from) could not emit its prims.
    #[error("{value} = {op}: {error}")]
    Rule { value: String, op: &'static str, error: DecompError },
    /// A rule returned a cotangent of the wrong type: a bug in the rule.
    #[error(
        "{value} = {op}: the cotangent of argument {arg} is {got}, but the argument is {expected} (a bug in the rule)"
    )]
    Mismatch { value: String, op: &'static str, arg: usize, expected: Box<TensorType>, got: Box<TensorType> },
    /// Adding an output failed.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// Dead-code elimination refused the graph.
    #[error("dead-code elimination: {0}")]
    Dce(#[from] SimplifyError),
    /// A partition override names no value.
    #[error("no value named `{0}` in the joint graph")]
    NoSuchValue(String),
    /// The partitioner's backward reads an input it did not save (a bug in the partitioner).
    #[error("the backward graph reads input {0}, which the partition did not save (a bug in the partitioner)")]
    Unsaved(String),
    /// The joint graph does not verify: a bug in a rule.
    #[error("the joint graph is invalid (a bug in autodiff): {0}")]
    Invalid(VerifyErrors),
}

/// A forward graph and the gradients of one of its outputs, in one graph.
#[derive(Clone, Debug)]
pub struct Joint {
    /// Inputs: the forward graph's. Outputs: the forward graph's, in order, then one gradient
    /// per differentiated input, in the order asked, named `grad_<input>` (with a numeric
    /// suffix where that name is taken).
    pub graph: Graph,
    /// The index of the loss among the outputs.
    pub loss: usize,
    /// The differentiated inputs, as indices into the inputs.
    pub wrt: Vec<usize>,
    /// How many forward outputs come before the gradients.
    pub n_forward: usize,
    /// The loss's cotangent (ones), named `<loss>_cotangent`: every value that depends on it
    /// belongs to the backward pass. `None` when the loss depends on no differentiated input
    /// (every gradient is zeros).
    pub seed: Option<Value>,
}

impl Joint {
    /// The index among the joint graph's outputs of the gradient of `wrt[i]`.
    pub fn grad_output(&self, i: usize) -> usize {
        self.n_forward + i
    }
}

/// The joint graph of `g` (a graph of prims, or of the `Recovered` rung) for the gradient of
/// the output named `loss` with respect to the inputs named in `wrt` (see the module docs).
/// Errors are typed: an unknown name, a loss that is not a float scalar, an input that is not
/// a float, a node without a derivative.
pub fn grad(g: &Graph, loss: &str, wrt: &[&str]) -> Result<Joint, AdError> {
    let stage = match verify(g, Stage::Prims) {
        Ok(()) => Stage::Prims,
        Err(_) => {
            verify(g, Stage::Recovered).map_err(AdError::NotPrims)?;
            Stage::Recovered
        }
    };
    let loss_index =
        g.outputs().iter().position(|o| o.name == loss).ok_or_else(|| AdError::NoSuchOutput(loss.to_string()))?;
    let loss_value = g.outputs()[loss_index].value;
    let loss_ty = g.ty(loss_value);
    if !loss_ty.dtype.is_float() || loss_ty.shape.dims().iter().any(|d| d.as_const() != Some(1)) {
        return Err(AdError::BadLoss { name: loss.to_string(), ty: Box::new(loss_ty.clone()) });
    }
    let mut wrt_indices = Vec::with_capacity(wrt.len());
    for &name in wrt {
        let i = (0..g.inputs().len())
            .find(|&i| g.input_name(i) == name)
            .ok_or_else(|| AdError::NoSuchInput(name.to_string()))?;
        if wrt_indices.contains(&i) {
            return Err(AdError::DuplicateInput(name.to_string()));
        }
        let ty = g.ty(g.inputs()[i]);
        if !ty.dtype.is_float() {
            return Err(AdError::NotFloat { name: name.to_string(), ty: Box::new(ty.clone()) });
        }
        wrt_indices.push(i);
    }

    let mut joint = g.clone();
    let mut walk = Walk { active: Vec::new(), ct: Vec::new() };
    for &i in &wrt_indices {
        walk.mark(g.inputs()[i]);
    }
    let forward: Vec<Value> = g.values().collect();
    walk.extend_active(&joint, &forward);
    let mut e = Emitter { g: &mut joint, keep: &[] };
    let mut seed = None;
    if walk.is_active(loss_value) {
        let ones = e.full_like(1.0, loss_value).map_err(|error| rule_error(g, loss_value, error))?;
        // Named, so the partitioner finds it after dead-code elimination renumbers values.
        let name = unique_name(e.g, &format!("{loss}_cotangent"), |g, n| g.value_by_name(n).is_some());
        e.g.set_name(ones, &name)?;
        seed = Some(ones);
        walk.ct_resize(e.g.len());
        walk.ct[loss_value.index()] = Some(ones);
        walk.backward(&mut e, &forward)?;
    }
    let mut grads = Vec::with_capacity(wrt_indices.len());
    for &i in &wrt_indices {
        let x = g.inputs()[i];
        let d = match walk.ct.get(x.index()).copied().flatten() {
            Some(d) => d,
            None => e.full_like(0.0, x).map_err(|error| rule_error(g, x, error))?,
        };
        grads.push(d);
    }
    for (&i, &d) in wrt_indices.iter().zip(&grads) {
        let name =
            unique_name(&joint, &format!("grad_{}", g.input_name(i)), |g, n| g.outputs().iter().any(|o| o.name == n));
        joint.add_output(&name, d)?;
    }
    let seed_name = seed.and_then(|v| joint.name_of(v)).map(str::to_string);
    let graph = crate::passes::eliminate_dead_code(&joint)?;
    verify(&graph, stage).map_err(AdError::Invalid)?;
    let seed = seed_name.and_then(|n| graph.value_by_name(&n));
    Ok(Joint { graph, loss: loss_index, wrt: wrt_indices, n_forward: g.outputs().len(), seed })
}

/// `base`, or `base_1`, `base_2`, ... : the first that `taken` says is free.
fn unique_name(g: &Graph, base: &str, taken: impl Fn(&Graph, &str) -> bool) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while taken(g, &name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

fn rule_error(g: &Graph, v: Value, error: DecompError) -> AdError {
    AdError::Rule { value: g.display_value(v), op: g.node(v).op.name(), error }
}

/// The reverse walk's state, indexed by value: which values are active, and each one's
/// cotangent so far. Both grow as rules and derived decompositions add nodes.
struct Walk {
    active: Vec<bool>,
    ct: Vec<Option<Value>>,
}

impl Walk {
    fn mark(&mut self, v: Value) {
        if self.active.len() <= v.index() {
            self.active.resize(v.index() + 1, false);
        }
        self.active[v.index()] = true;
    }

    fn is_active(&self, v: Value) -> bool {
        self.active.get(v.index()).copied().unwrap_or(false)
    }

    fn ct_resize(&mut self, n: usize) {
        if self.ct.len() < n {
            self.ct.resize(n, None);
        }
    }

    /// Marks, in order, each of `nodes` that is a float computed from an active value.
    fn extend_active(&mut self, g: &Graph, nodes: &[Value]) {
        for &v in nodes {
            let node = g.node(v);
            if node.ty.dtype.is_float() && node.args.iter().any(|&a| self.is_active(a)) {
                self.mark(v);
            }
        }
    }

    /// Adds `d` to the cotangent of `x`.
    fn accumulate(&mut self, e: &mut Emitter, x: Value, d: Value) -> Result<(), DecompError> {
        self.ct_resize(x.index() + 1);
        self.ct[x.index()] = Some(match self.ct[x.index()] {
            Some(prev) => e.add(prev, d)?,
            None => d,
        });
        Ok(())
    }

    /// Walks `nodes` (in forward order) backward, turning each one's cotangent into its
    /// active arguments' cotangents.
    fn backward(&mut self, e: &mut Emitter, nodes: &[Value]) -> Result<(), AdError> {
        for &v in nodes.iter().rev() {
            let Some(ct) = self.ct.get(v.index()).copied().flatten() else { continue };
            let node = e.g.node(v).clone();
            if matches!(node.op, OpKind::Input | OpKind::Const) {
                continue;
            }
            let value = e.g.display_value(v);
            let fail = |error| AdError::Rule { value: value.clone(), op: node.op.name(), error };
            if let Some(f) = rule(node.op) {
                let wanted = node.args.iter().map(|&a| self.is_active(a)).collect();
                let grads = f(e, &Vjp { node: &node, out: v, ct, wanted }).map_err(fail)?;
                for (i, (&a, d)) in node.args.iter().zip(grads).enumerate() {
                    let Some(d) = d else { continue };
                    if !self.is_active(a) {
                        continue;
                    }
                    let (expected, got) = (e.ty(a), e.ty(d));
                    if expected != got {
                        return Err(AdError::Mismatch {
                            value,
                            op: node.op.name(),
                            arg: i,
                            expected: Box::new(expected.clone()),
                            got: Box::new(got.clone()),
                        });
                    }
                    self.accumulate(e, a, d).map_err(fail)?;
                }
            } else if let (Rung::High, Some(decompose)) = (node.op.rung(), crate::decomp::rule(node.op)) {
                // The backward of a high-level op is its decomposition's: emit the
                // decomposition beside the node and walk back through it.
                let first = e.g.len();
                let out = decompose(e, &node, &node.args).map_err(fail)?;
                let emitted: Vec<Value> = (first..e.g.len()).map(Value::new).collect();
                self.extend_active(e.g, &emitted);
                if self.is_active(out) {
                    self.accumulate(e, out, ct).map_err(fail)?;
                }
                self.backward(e, &emitted)?;
            } else {
                return Err(AdError::NoRule { value, op: node.op.name() });
            }
        }
        Ok(())
    }
}
