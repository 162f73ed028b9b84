//! The reference interpreter: the definition of what every op means, at every rung.
//!
//! It is written for obviousness, not speed: each op reads its arguments as plain row-major
//! vectors, computes, and builds a result; view ops return real strided views over their
//! argument's storage and in-place ops write through them. Nodes run in graph order, which
//! for graphs with mutation is program order.
//!
//! Each op computes in its own dtype: every result is rounded to the result's dtype (f16 and
//! bf16 compute in f32 precision and round on write), and reductions accumulate in it. The
//! `precise` mode skips that rounding, so float ops evaluate in f64: the reference that
//! numerics tests compare decompositions and backends against.
//!
//! Untrusted graphs cannot hang it or make it allocate without bound ([`Options::from_limits`]
//! takes the bounds from [`Limits`]): every node is charged fuel for the elements it touches
//! (and matmuls, convolutions and pools for their multiply-adds or window reads) before it
//! computes, a node whose result would exceed `max_elements`, or take the values alive past
//! `max_bytes`, fails before anything is allocated, and each value is dropped after its last
//! use (so a graph of many large temporaries holds a few at a time).

mod view;

use std::collections::HashMap;

pub use view::{
    contiguous_strides, float_to_int, float_to_int_as, int_cmp, int_limits, int_to_f64, round_float, wrap_int, Data,
    View,
};

use cranelift_entity::EntityRef;

use crate::ir::{Attrs, Dim, DimError, Graph, SizeExpr, Value};
use crate::limits::{named, Limits};
use crate::ops::OpKind;
use crate::tensor::Tensor;

/// Interpreter settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Evaluate float ops in f64 (no rounding to the op's dtype); float outputs come back f64.
    pub precise: bool,
    /// Budget of element-operations for the whole run.
    pub fuel: u64,
    /// Largest number of elements any one value may have.
    pub max_elements: u64,
    /// Most bytes the values alive at once may take, each value counted (a view too) as
    /// [`VALUE_BYTES`] bytes per element; graph inputs and constants are the caller's and are
    /// not counted.
    pub max_bytes: u64,
}

/// Bytes per element the interpreter's live-value accounting charges: its widest storage (f64
/// in precise mode, i64 for integers), so the bound holds whatever the dtype.
pub const VALUE_BYTES: u64 = 8;

impl Default for Options {
    /// [`Options::from_limits`] of [`Limits::default`], not precise.
    fn default() -> Options {
        Options::from_limits(false, &Limits::default())
    }
}

impl Options {
    /// The interpreter's bounds from `limits`: `fuel`, `max_elements` and `max_run_bytes` (as
    /// `max_bytes`).
    pub fn from_limits(precise: bool, limits: &Limits) -> Options {
        Options { precise, fuel: limits.fuel, max_elements: limits.max_elements, max_bytes: limits.max_run_bytes }
    }
}

/// State threaded through op implementations.
#[derive(Debug)]
pub struct EvalCtx {
    pub precise: bool,
    /// The concrete shape of the node being evaluated (its inferred shape with this run's
    /// symbols bound), set by the run loop before each `eval`. Ops whose result shape comes
    /// from attributes that may be symbolic (`full`, `iota`, `reshape`, `expand`) read it.
    pub out_shape: Option<Vec<usize>>,
    /// This run's size symbols and their values: ops whose attributes are size expressions
    /// (`slice` bounds, `dim_values`) evaluate them here.
    pub symbols: HashMap<String, u64>,
    fuel: u64,
}

impl EvalCtx {
    pub fn new(precise: bool, fuel: u64) -> EvalCtx {
        EvalCtx { precise, out_shape: None, symbols: HashMap::new(), fuel }
    }

    /// The value of a size expression with this run's symbols.
    pub fn size(&self, e: &crate::ir::SizeExpr) -> Result<i64, EvalError> {
        e.eval(&|s| self.symbols.get(s).copied()).map_err(|err| EvalError::Invalid(format!("size `{e}`: {err}")))
    }

    /// Spends `n` units of fuel.
    pub fn charge(&mut self, n: u64) -> Result<(), EvalError> {
        self.fuel = self.fuel.checked_sub(n).ok_or(EvalError::OutOfFuel)?;
        Ok(())
    }

    /// Rounds a float result to `dtype` (a no-op in precise mode).
    pub fn round(&self, dtype: crate::ir::DType, x: f64) -> f64 {
        if self.precise {
            x
        } else {
            round_float(dtype, x)
        }
    }
}

/// Why one op failed on its concrete arguments.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("index {index} is out of range for a dim of size {size}")]
    IndexOutOfRange { index: i64, size: usize },
    #[error("in-place write into a view where several elements share one memory location")]
    OverlappingWrite,
    #[error("cannot view a tensor of shape {shape:?} with strides {strides:?} as shape {target:?} without copying")]
    NotViewable { shape: Vec<usize>, strides: Vec<isize>, target: Vec<usize> },
    #[error("the result would have {elements} elements, above {}", named("max_elements", *limit))]
    TooLarge { elements: u64, limit: u64 },
    #[error("the values alive at once would take {bytes} bytes, above {}", named("max_run_bytes", *limit))]
    LiveTooLarge { bytes: u64, limit: u64 },
    #[error("out of fuel: the run needs more work than `Limits::fuel` allows")]
    OutOfFuel,
    #[error("{0}")]
    Invalid(String),
    /// A custom op's compute function failed, panicked or returned a result of another type
    /// than its shape rule inferred (`crate::ops::custom`).
    #[error("custom op `{name}`: {problem}")]
    Custom { name: String, problem: String },
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("the graph has {expected} inputs but {got} were given")]
    InputCount { expected: usize, got: usize },
    #[error("input `{name}` must be {expected}, got {got}")]
    InputDType { name: String, expected: crate::ir::DType, got: crate::ir::DType },
    #[error("input `{name}` must have shape {expected}, got {got:?}")]
    InputShape { name: String, expected: String, got: Vec<usize> },
    #[error("input `{name}`: dim {dim} is {got} but `{symbol}` is already {bound}")]
    SymbolConflict { name: String, dim: usize, symbol: String, bound: u64, got: u64 },
    #[error("{value} = {op}: result shape {shape}: {error}")]
    Shape { value: String, op: &'static str, shape: String, error: DimError },
    #[error("{value} = {op}: {error}")]
    Eval { value: String, op: &'static str, error: EvalError },
    #[error("{value} = {op}: interpreter result {got} disagrees with the inferred type {expected} (a bug in this op)")]
    Internal { value: String, op: &'static str, expected: String, got: String },
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// One tensor per graph output, in order.
    pub outputs: Vec<Tensor>,
    /// The graph inputs after the run: differs from what was passed where the graph mutates
    /// an input in place.
    pub inputs_after: Vec<Tensor>,
}

/// Runs `graph` on `inputs` (one per graph input, in order).
pub fn run(graph: &Graph, inputs: &[Tensor], options: &Options) -> Result<Outcome, InterpError> {
    let bindings = bind_symbols(graph, inputs)?;
    let lookup = |s: &str| bindings.get(s).copied();
    let mut ctx = EvalCtx::new(options.precise, options.fuel);
    ctx.symbols = bindings.clone();
    let mut values: Vec<Option<View>> = Vec::with_capacity(graph.len());
    // Each value is dropped after its last use (the node index that reads it last; a value no
    // node reads, right after it is made), unless it is an input or an output: a graph of
    // many large temporaries holds one or two at a time, not all of them.
    let mut last_use: Vec<usize> = (0..graph.len()).collect();
    // Bytes of the values alive (inputs and constants aside), at VALUE_BYTES per element.
    let mut live: u64 = 0;
    let counted = |op: OpKind| !matches!(op, OpKind::Input | OpKind::Const);
    let needed = needed_values(graph);
    for (v, node) in graph.nodes().filter(|(v, _)| needed[v.index()]) {
        for &a in &node.args {
            last_use[a.index()] = v.index();
        }
    }
    for &v in graph.inputs().iter().chain(graph.outputs().iter().map(|o| &o.value)) {
        last_use[v.index()] = usize::MAX;
    }

    for (v, node) in graph.nodes() {
        if !needed[v.index()] {
            values.push(None);
            continue;
        }
        let value_name = || graph.display_value(v);
        let op = node.op.name();
        let dims: Result<Vec<u64>, DimError> = node.ty.shape.dims().iter().map(|d: &Dim| d.eval(&lookup)).collect();
        let dims = dims.map_err(|error| InterpError::Shape {
            value: value_name(),
            op,
            shape: node.ty.shape.to_string(),
            error,
        })?;
        let eval_err = |error| InterpError::Eval { value: value_name(), op, error };
        let elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).unwrap_or(u64::MAX);
        if elements > options.max_elements {
            return Err(eval_err(EvalError::TooLarge { elements, limit: options.max_elements }));
        }
        if counted(node.op) {
            let bytes = live.saturating_add(elements.saturating_mul(VALUE_BYTES));
            if bytes > options.max_bytes {
                return Err(eval_err(EvalError::LiveTooLarge { bytes, limit: options.max_bytes }));
            }
            live = bytes;
        }
        let result = match node.op {
            OpKind::Input => {
                let index = node.attrs.int("index") as usize;
                View::from_tensor(&inputs[index])
            }
            OpKind::Const => match graph.const_blob(v) {
                Some(blob) => View::from_tensor(&graph.blob(blob).tensor),
                None => {
                    return Err(eval_err(EvalError::Invalid(format!(
                        "const refers to missing blob `{}`",
                        node.attrs.str("blob")
                    ))))
                }
            },
            kind => {
                let args: Vec<View> = node
                    .args
                    .iter()
                    .map(|a| values[a.index()].clone().unwrap_or_else(|| panic!("{a} used before it is defined")))
                    .collect();
                let touched: u64 = args.iter().map(|a| a.numel() as u64).sum::<u64>().saturating_add(elements);
                ctx.charge(touched.max(1)).map_err(eval_err)?;
                ctx.out_shape = Some(dims.iter().map(|&d| d as usize).collect());
                if kind == OpKind::Slice {
                    let x = graph.ty(node.args[0]);
                    if let Ok(axis) = crate::ops::util::normalize_axis(node.attrs.int("axis"), x.shape.rank()) {
                        let n = args[0].shape().get(axis).map_or(0, |&d| d as u64);
                        check_slice_start(&x.shape.dims()[axis], n, &node.attrs, &ctx).map_err(eval_err)?;
                    }
                }
                (kind.spec().eval)(kind, &mut ctx, &node.attrs, &args, &node.ty).map_err(eval_err)?
            }
        };
        let got_shape: Vec<u64> = result.shape().iter().map(|&d| d as u64).collect();
        if got_shape != dims || result.dtype() != node.ty.dtype {
            return Err(InterpError::Internal {
                value: value_name(),
                op,
                expected: format!("{}{:?}", node.ty.dtype, dims),
                got: format!("{}{:?}", result.dtype(), result.shape()),
            });
        }
        values.push(Some(result));
        for &a in node.args.iter().chain(std::iter::once(&v)) {
            if last_use[a.index()] == v.index() {
                if let Some(gone) = values[a.index()].take() {
                    if counted(graph.node(a).op) {
                        live = live.saturating_sub((gone.numel() as u64).saturating_mul(VALUE_BYTES));
                    }
                }
            }
        }
    }

    let finish = |v: &View| {
        if options.precise {
            v.widened_to_f64().to_tensor()
        } else {
            v.to_tensor()
        }
    };
    let get = |v: Value| values[v.index()].as_ref().map(finish).unwrap_or_else(|| panic!("{v} has no value"));
    Ok(Outcome {
        outputs: graph.outputs().iter().map(|o| get(o.value)).collect(),
        inputs_after: graph.inputs().iter().map(|&v| get(v)).collect(),
    })
}

/// Which values a run computes: those the outputs depend on, the inputs (read back after the
/// run), and every in-place op with what it depends on (it writes through its argument).
/// A value nothing needs is never computed, as no backend computes it (they remove dead code
/// first), so an error it would raise (a `select` past the end of an axis a model's unused
/// LSTM state reads at some sizes) is not the run's.
fn needed_values(graph: &Graph) -> Vec<bool> {
    let mut needed = vec![false; graph.len()];
    for &v in graph.inputs().iter().chain(graph.outputs().iter().map(|o| &o.value)) {
        needed[v.index()] = true;
    }
    let nodes: Vec<_> = graph.nodes().collect();
    for (v, node) in nodes.iter().rev() {
        if node.op.mutates() {
            needed[v.index()] = true;
        }
        if needed[v.index()] {
            for &a in &node.args {
                needed[a.index()] = true;
            }
        }
    }
    needed
}

/// Checks inputs against the graph's declared input types and binds every size symbol.
pub fn bind_symbols(graph: &Graph, inputs: &[Tensor]) -> Result<HashMap<String, u64>, InterpError> {
    if inputs.len() != graph.inputs().len() {
        return Err(InterpError::InputCount { expected: graph.inputs().len(), got: inputs.len() });
    }
    let mut bindings: HashMap<String, u64> = HashMap::new();
    let mut deferred = Vec::new();
    for (i, (&v, t)) in graph.inputs().iter().zip(inputs).enumerate() {
        let name = graph.input_name(i);
        let ty = graph.ty(v);
        if t.dtype() != ty.dtype {
            return Err(InterpError::InputDType { name, expected: ty.dtype, got: t.dtype() });
        }
        let shape_err =
            || InterpError::InputShape { name: name.clone(), expected: ty.shape.to_string(), got: t.shape().to_vec() };
        if t.shape().len() != ty.rank() {
            return Err(shape_err());
        }
        for (axis, (dim, &got)) in ty.shape.dims().iter().zip(t.shape()).enumerate() {
            let got = got as u64;
            if let Some(n) = dim.as_const() {
                if n != got {
                    return Err(shape_err());
                }
            } else if let Some(sym) = dim.as_symbol() {
                match bindings.get(sym.as_ref()) {
                    Some(&bound) if bound != got => {
                        return Err(InterpError::SymbolConflict {
                            name,
                            dim: axis,
                            symbol: sym.to_string(),
                            bound,
                            got,
                        })
                    }
                    _ => {
                        bindings.insert(sym.to_string(), got);
                    }
                }
            } else {
                deferred.push((i, axis, dim.clone(), got));
            }
        }
    }
    for (i, _axis, dim, got) in deferred {
        let ok = dim.eval(&|s| bindings.get(s).copied()).is_ok_and(|n| n == got);
        if !ok {
            let v = graph.inputs()[i];
            return Err(InterpError::InputShape {
                name: graph.input_name(i),
                expected: graph.ty(v).shape.to_string(),
                got: inputs[i].shape().to_vec(),
            });
        }
    }
    Ok(bindings)
}

/// For a `slice` (attributes `attrs`) of a dim the graph declares as `dim` and this run
/// binds to `n`: where `dim` is symbolic, the shape rule placed the slice without clamping
/// (`ops::shape::slice_range`), assuming its first index (`n - 4` for `start=-4`) lies inside the dim.
/// A run that breaks that assumption is an error even where clamping would give the count
/// the graph assumed (`start=-4, step=2` on a dim of 3: two elements either way), since what
/// follows was derived from the assumption (a derivative pads by `n - 4`). Statically empty
/// slices and static dims assume nothing.
fn check_slice_start(dim: &Dim, n: u64, attrs: &Attrs, ctx: &EvalCtx) -> Result<(), EvalError> {
    let step = attrs.int("step");
    if dim.is_static() || step < 1 {
        return Ok(());
    }
    let (start, end) = (attrs.size("start"), attrs.size("end"));
    let Ok(range) = crate::ops::shape::slice_range(dim, &start, &end, step) else { return Ok(()) };
    if range.len.as_const() == Some(0) {
        return Ok(());
    }
    let first = SizeExpr::from_dim(&range.first)
        .map_err(|e| EvalError::Invalid(format!("slice start {}: {e}", range.first)))?;
    let at = ctx.size(&first)?;
    // An empty slice reads nothing, wherever it starts (`start=1` of a dim of 0 or 1).
    let empty = SizeExpr::from_dim(&range.len).ok().and_then(|l| ctx.size(&l).ok()).is_some_and(|l| l <= 0);
    if !empty && (at < 0 || at as u64 >= n) {
        let show = |e: &SizeExpr| match e.as_const() {
            Some(i64::MAX) => String::new(),
            Some(c) => c.to_string(),
            None => e.to_string(),
        };
        return Err(EvalError::Invalid(format!(
            "slice {}:{}:{step} of a dim of size {n}: the graph assumed its first element at {} = {at}, \
             outside the dim (the symbolic dim is too small)",
            show(&start),
            show(&end),
            range.first
        )));
    }
    Ok(())
}
