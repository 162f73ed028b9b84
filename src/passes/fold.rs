//! Constant folding: small nodes whose arguments are all constants, evaluated at compile time.

use std::collections::HashMap;
use std::sync::Arc;

use super::rewrite::Rewriter;
use super::simplify::{require_pure, SimplifyError};
use crate::interp::{EvalCtx, View};
use crate::ir::{AttrValue, Attrs, Graph, GraphError, TensorType, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// Bounds on constant folding.
#[derive(Clone, Debug)]
pub struct FoldOptions {
    /// Largest result (in elements) that is folded into a blob.
    pub max_elements: u64,
    /// Element-operations the interpreter may spend in one call of `fold_constants`, counted
    /// as the interpreter's run loop counts them (arguments + result per node, plus what
    /// super-linear ops charge). When it runs out, the remaining nodes stay as they are.
    pub fuel: u64,
    /// Elements that data-movement nodes of constants ([`moves_data`]: a slice or reshape of
    /// a weight) may fold into new blobs past `max_elements`, in total per call, and never
    /// more than the graph's blobs hold: such a result has no more elements than its
    /// largest argument, so folding it copies weights once instead of on every run (and a
    /// matrix product can pack a weight that an LSTM's export slices per direction).
    pub max_moved_elements: u64,
}

impl Default for FoldOptions {
    fn default() -> FoldOptions {
        FoldOptions { max_elements: 4096, fuel: 1 << 22, max_moved_elements: 1 << 22 }
    }
}

/// Whether `op` only moves or selects its arguments' elements, its result no bigger than
/// its arguments together.
fn moves_data(op: OpKind) -> bool {
    matches!(op, OpKind::Reshape | OpKind::Permute | OpKind::Slice | OpKind::Rev | OpKind::Cat)
}

/// What folding knows about a value of the new graph.
enum Known {
    /// A constant with this data.
    Data(Arc<Tensor>),
    /// A static `full` or `iota`: computable on demand, but left as it is unless a folded
    /// node needs its data (the generator is cheaper than a blob).
    Generator,
}

/// Replaces each node whose arguments are all constants (`const`, earlier folded nodes, and
/// static `full`/`iota`) and whose result has a static shape of at most `max_elements`
/// elements by its value, computed with the interpreter's own `eval` of the op in op-dtype
/// (non-precise) mode, so the folded graph computes bit for bit what the interpreter
/// computes for the original. A result whose elements are all bit-identical becomes a `full`
/// (when `full` reproduces it exactly, checked with the interpreter); any other becomes a new
/// blob read by a `const` (the blob is named after the folded value, or `fold<N>`).
/// Deliberately not done: folding `full`/`iota` on their own (only as arguments of a folded
/// node), symbolic-shaped nodes, results over the size bound, nodes whose evaluation fails
/// (integer division by zero stays a run-time error), work past `fuel`, and matching
/// precise mode (a folded f32 node holds f32-rounded data, which a precise run of the
/// original would not have rounded). Refuses graphs that mutate.
pub fn fold_constants(g: &Graph, options: &FoldOptions) -> Result<Graph, SimplifyError> {
    require_pure(g)?;
    let mut rw = Rewriter::new(g);
    let mut known: HashMap<Value, Known> = HashMap::new();
    let mut fuel = options.fuel;
    let mut next_blob = 0usize;
    let blob_elements = g.blobs().map(|(_, b)| b.tensor.numel() as u64).fold(0u64, u64::saturating_add);
    let mut moved_budget = options.max_moved_elements.min(blob_elements);
    for (v, node) in g.nodes() {
        match node.op {
            OpKind::Input => continue,
            OpKind::Const => {
                let nv = rw.copy(v)?;
                if let Some(b) = rw.new.const_blob(nv) {
                    known.insert(nv, Known::Data(Arc::clone(&rw.new.blob(b).tensor)));
                }
                continue;
            }
            OpKind::Full | OpKind::Iota => {
                let nv = rw.copy(v)?;
                if static_numel(&node.ty).is_some() {
                    known.insert(nv, Known::Generator);
                }
                continue;
            }
            _ => {}
        }
        let args: Vec<Value> = node.args.iter().map(|&a| rw.get(a)).collect();
        let numel = static_numel(&node.ty);
        // Past `max_elements`, only weights moved (never a generator made into a blob).
        let moved = moves_data(node.op)
            && numel.is_some_and(|n| n <= moved_budget)
            && args.iter().all(|a| matches!(known.get(a), Some(Known::Data(_))));
        // A custom op is never folded: that would freeze the implementation registered now
        // into the graph (`crate::ops::custom`).
        let foldable = node.op != OpKind::Custom
            && !args.is_empty()
            && args.iter().all(|a| known.contains_key(a))
            && numel.is_some_and(|n| n <= options.max_elements || moved);
        let value = if foldable { fold_node(&mut rw, &mut known, &mut fuel, node, &args)? } else { None };
        match value {
            Some(t) => {
                if numel.is_some_and(|n| n > options.max_elements) {
                    moved_budget -= t.numel() as u64;
                }
                let nv = emit_constant(&mut rw, &t, g.name_of(v), &mut next_blob)?;
                known.insert(nv, Known::Data(Arc::new(t)));
                rw.set(v, nv);
            }
            None => {
                rw.copy(v)?;
            }
        }
    }
    Ok(rw.finish()?)
}

/// The value of `node` on the known arguments `args` (new values), or `None` when it cannot
/// be computed within the fuel or its evaluation fails.
fn fold_node(
    rw: &mut Rewriter,
    known: &mut HashMap<Value, Known>,
    fuel: &mut u64,
    node: &crate::ir::Node,
    args: &[Value],
) -> Result<Option<Tensor>, SimplifyError> {
    let mut data = Vec::with_capacity(args.len());
    for &a in args {
        let t = match known.get(&a) {
            Some(Known::Data(t)) => Arc::clone(t),
            Some(Known::Generator) => {
                let gen = rw.new.node(a);
                let Some(t) = evaluate(gen.op, &gen.attrs, &[], &gen.ty, fuel) else { return Ok(None) };
                let t = Arc::new(t);
                known.insert(a, Known::Data(Arc::clone(&t)));
                t
            }
            None => return Ok(None),
        };
        data.push(t);
    }
    Ok(evaluate(node.op, &node.attrs, &data, &node.ty, fuel))
}

/// A constant node holding `t`: a `full` when every element has the same bits and `full`
/// reproduces them exactly, else a new blob (named like the folded value, or `fold<N>`) and
/// a `const`.
fn emit_constant(
    rw: &mut Rewriter,
    t: &Tensor,
    name: Option<&str>,
    next_blob: &mut usize,
) -> Result<Value, GraphError> {
    if let Some(value) = uniform_value(t) {
        let given = vec![
            ("shape".to_string(), AttrValue::Dims(t.shape().iter().map(|&d| Some((d as u64).into())).collect())),
            ("value".to_string(), AttrValue::Float(value)),
            ("dtype".to_string(), AttrValue::DType(t.dtype())),
        ];
        if let Ok(attrs) = Attrs::resolve(OpKind::Full.spec().attrs, given) {
            let ty = TensorType::new(t.dtype(), crate::ir::Shape::from_static(&shape_u64(t)));
            let mut check_fuel = t.numel() as u64 + 1;
            if evaluate(OpKind::Full, &attrs, &[], &ty, &mut check_fuel).is_some_and(|f| f.bit_eq(t)) {
                return rw.emit(OpKind::Full, &[], attrs);
            }
        }
    }
    let name = match name.filter(|n| rw.new.blob_by_name(n).is_none()) {
        Some(n) => n.to_string(),
        None => fresh_blob_name(rw, next_blob),
    };
    let blob = rw.new.add_blob(&name, Arc::new(t.clone()))?;
    Ok(rw.new.add_const(blob))
}

fn fresh_blob_name(rw: &Rewriter, next_blob: &mut usize) -> String {
    loop {
        let name = format!("fold{next_blob}");
        *next_blob += 1;
        if rw.new.blob_by_name(&name).is_none() {
            return name;
        }
    }
}

fn shape_u64(t: &Tensor) -> Vec<u64> {
    t.shape().iter().map(|&d| d as u64).collect()
}

/// The common value of a non-empty tensor whose elements all have the same bits, as the f64
/// that `full` would be given.
fn uniform_value(t: &Tensor) -> Option<f64> {
    fn all_same<T: Copy>(v: &[T], bits: impl Fn(T) -> u64) -> bool {
        v.first().is_some_and(|&f| v.iter().all(|&x| bits(x) == bits(f)))
    }
    let same = match t.data() {
        TensorData::F32(v) => all_same(v, |x| x.to_bits() as u64),
        TensorData::F64(v) => all_same(v, f64::to_bits),
        TensorData::F16(v) => all_same(v, |x| x.to_bits() as u64),
        TensorData::BF16(v) => all_same(v, |x| x.to_bits() as u64),
        TensorData::I32(v) => all_same(v, |x| x as u64),
        TensorData::I64(v) => all_same(v, |x| x as u64),
        TensorData::Bool(v) => all_same(v, |x| x as u64),
        d => all_same(&d.ints().unwrap_or_default(), |x| x as u64),
    };
    same.then(|| t.to_f64_vec()[0])
}

/// The number of elements of a static type.
fn static_numel(ty: &TensorType) -> Option<u64> {
    ty.shape.as_static()?.into_iter().try_fold(1u64, |acc, d| acc.checked_mul(d))
}

/// Runs one op as the interpreter's run loop does (charge arguments + result, bind the
/// result shape, call the op's `eval`, check the result's type) on contiguous copies of
/// `args`, spending from `fuel`. `None` when it fails or would overspend.
fn evaluate(op: OpKind, attrs: &Attrs, args: &[Arc<Tensor>], ty: &TensorType, fuel: &mut u64) -> Option<Tensor> {
    let dims: Vec<usize> = ty.shape.as_static()?.into_iter().map(|d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    let out = static_numel(ty)?;
    let touched = args.iter().map(|t| t.numel() as u64).sum::<u64>().saturating_add(out).max(1);
    if touched > *fuel {
        return None;
    }
    let mut ctx = EvalCtx::new(false, *fuel);
    ctx.charge(touched).ok()?;
    ctx.out_shape = Some(dims.clone());
    let views: Vec<View> = args.iter().map(|t| View::from_tensor(t)).collect();
    let result = (op.spec().eval)(op, &mut ctx, attrs, &views, ty);
    *fuel = fuel_left(&mut ctx);
    let r = result.ok()?;
    (r.shape() == dims.as_slice() && r.dtype() == ty.dtype).then(|| r.to_tensor())
}

/// The fuel left in `ctx`, which `EvalCtx` does not expose: spent down one power of two at a
/// time from the top (a charge that does not fit changes nothing), which measures it exactly
/// and leaves the context empty.
fn fuel_left(ctx: &mut EvalCtx) -> u64 {
    let mut left = 0u64;
    for bit in (0..64).rev() {
        if ctx.charge(1u64 << bit).is_ok() {
            left += 1u64 << bit;
        }
    }
    left
}
