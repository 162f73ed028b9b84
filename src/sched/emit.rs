//! Building one kernel from a group of roots (the values the kernel stores).
//!
//! Every root is computed at its own index: its axes become the kernel's outer loops or the
//! inner loops of its store stage. Which axes are outer is decided per root before emission
//! (see [`domain`]): the axes the first reduction reachable from the root is needed at (so a
//! softmax row is one outer point), or every axis when no reduction is reachable. All roots of
//! a kernel must agree on the outer loops.
//!
//! Values are then emitted on demand, depth first from each root, at an index vector:
//! - a buffered value (graph input, constant, materialised value, library or break result) is
//!   a load at its flat offset;
//! - pointwise prims emit their instruction on their arguments at the same index; layout prims
//!   map the index and emit their argument (a reshape of a buffered value is a flat load);
//! - a reduction needed once per outer point becomes a stage of its own (inner loops over the
//!   reduced axes, one accumulator) whose result register later stages read.
//!
//! Values whose index uses no inner loop variable are *scalars*: computed once per outer
//! point. They are collected into loop-free stages by level (a scalar's level is the number
//! of reductions it depends on in sequence), so each reduction stage comes after the scalars
//! it reads and before those that read it: `max`, then `exp(x - max)`'s sum, then the scale,
//! then the store stage.
//!
//! ## The fused sum of exponentials
//!
//! Before the stages are ordered, a stage summing `exp(x - c)` is fused into the stage of the
//! maximum `c` comes from, as a `sumexp` accumulator (`emit/sumexp.rs` has the conditions), so
//! softmax and log_softmax read each row twice and logsumexp once.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::affine::{arg_index, ravel, reshape_index, Aff, Ix, MapFail, IV};
use crate::interp::{float_to_int_as, round_float};
use crate::ir::{DType, Dim, Graph, Value};
use crate::kernel::{Accumulator, BufferId, Index, Instr, Kernel, ReduceOp, Reg, Scalar, Stage, Var};
use crate::ops::util::{normalize_axes, normalize_axis};
use crate::ops::OpKind;

mod sumexp;
use sumexp::fuse_sum_exp;

/// The most different indices one value may be needed at in one kernel before it is
/// materialised instead (each index recomputes it).
pub(crate) const MAX_DEMANDS: usize = 16;
/// A computed value broadcast to at least this many times its size, and costing at least
/// [`HOIST_COST`] instructions, is materialised instead of recomputed per broadcast index
/// (`Em::worth_hoisting`).
pub(crate) const HOIST_FACTOR: u64 = 8;
pub(crate) const HOIST_COST: usize = 3;

/// The most stages of one kernel a computed value may be recomputed in before it is
/// materialised instead.
pub(crate) const MAX_STAGES: usize = 8;

/// The most instructions one kernel may have before the value being emitted is materialised.
pub(crate) const MAX_INSTRS: usize = 20_000;

/// The most instructions two kernels may have together for the scheduler to merge them. A
/// kernel that long is compute-bound already (its loads and stores are a few of its
/// instructions), while each merge emits the merged kernel again: without a bound, merging the
/// pieces of a long chain one by one costs the square of its length. Real models' kernels
/// have well under a hundred.
pub const MAX_MERGED_INSTRS: usize = 1024;

/// Deepest nesting of computed values in one kernel (a chain of pointwise ops is this deep):
/// emission recurses once per level, so a deeper chain is split by materialising the value at
/// this depth, which bounds the stack however long the chain.
pub(crate) const MAX_DEPTH: usize = 128;

/// Why a group could not be emitted as one kernel.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fail {
    /// These values must be materialised (given buffers), for these reasons.
    Materialise(Vec<(Value, String)>),
    /// The roots need different outer loops.
    Domains(String),
    /// Size arithmetic overflowed, or the graph is not what the scheduler expects.
    Error(String),
}

fn need(v: Value, reason: String) -> Fail {
    Fail::Materialise(vec![(v, reason)])
}

impl From<crate::ir::DimError> for Fail {
    fn from(e: crate::ir::DimError) -> Fail {
        Fail::Error(format!("size arithmetic: {e}"))
    }
}

/// What the emitter needs to know about the rest of the program.
pub(crate) struct Ctx<'a> {
    pub g: &'a Graph,
    /// The storage a buffered value is read from (a value whose buffer holds it), or `None`
    /// for values that are computed inside kernels.
    pub storage: &'a dyn Fn(Value) -> Option<Value>,
    /// Why `v` must not be computed in this kernel too (another kernel computes it and it is
    /// not cheap to recompute), if so.
    pub shared: &'a dyn Fn(Value) -> Option<String>,
}

/// An emitted kernel. Its buffer ids are *storage values* (`BufferId::from_u32(value)`),
/// renumbered when the program is assembled.
#[derive(Clone, Debug)]
pub(crate) struct Emitted {
    pub kernel: Kernel,
    /// Storage values loaded, with the number of stages loading each.
    pub reads: BTreeMap<Value, usize>,
    /// Values the kernel needs materialised first, and why; when not empty, the kernel was
    /// built as if they were, and is not final.
    pub needs: Vec<(Value, String)>,
    /// Those of `needs` materialised only because they sit [`MAX_DEPTH`] computations deep:
    /// where a long chain is cut, whatever else is materialised.
    pub deep: Vec<Value>,
}

fn buf(v: Value) -> BufferId {
    BufferId::from_u32(v.as_u32())
}

fn is_one(d: &Dim) -> bool {
    d.as_const() == Some(1)
}

/// The reduced axes of a reduction node (normalised, ascending).
pub(crate) fn reduced_axes(g: &Graph, v: Value) -> Vec<usize> {
    let node = g.node(v);
    let rank = g.ty(node.args[0]).rank();
    if node.op == OpKind::ReduceArgmax {
        normalize_axis(node.attrs.int("axis"), rank).map(|a| vec![a]).unwrap_or_default()
    } else {
        normalize_axes(node.attrs.ints("axes"), rank, false).unwrap_or_default()
    }
}

/// The index a root is stored at before its axes are assigned to loops: one variable per
/// axis, except axes of static size 1, which are 0.
fn root_index(g: &Graph, r: Value) -> Ix {
    g.ty(r)
        .shape
        .dims()
        .iter()
        .enumerate()
        .map(|(k, d)| if is_one(d) { Aff::zero() } else { Aff::var(IV::Root(k as u32)) })
        .collect()
}

/// The outer loops of a root: the root axes (in order) its first reachable reduction is needed
/// at, or all its non-unit axes. Returns the axis list.
pub(crate) fn domain(ctx: &Ctx, roots: &[Value], r: Value) -> Vec<usize> {
    let ix = root_index(ctx.g, r);
    let mut seen: HashSet<(Value, Ix)> = HashSet::new();
    let mut budget = 10_000usize;
    let found = walk(ctx, roots, r, ix.clone(), &mut seen, &mut budget, true);
    match found {
        Some(demand) => {
            let mut axes = Vec::new();
            for a in &demand {
                for v in a.vars() {
                    if let IV::Root(k) = v {
                        if !axes.contains(&(k as usize)) {
                            axes.push(k as usize);
                        }
                    }
                }
            }
            axes
        }
        None => (0..ix.len()).filter(|&k| ix[k] != Aff::zero()).collect(),
    }
}

/// Depth-first search from `v` at `ix` for the first reduction computed inline; returns the
/// index it is needed at. Arguments are searched in order, each fully before the next; the
/// search keeps its own stack, so a long chain of elementwise ops cannot overflow the thread's.
/// It goes no deeper than emission computes inline ([`MAX_DEPTH`]: a value nested deeper is
/// materialised), so a root's search costs at most that much of a long chain, not the chain.
fn walk(
    ctx: &Ctx,
    roots: &[Value],
    v: Value,
    ix: Ix,
    seen: &mut HashSet<(Value, Ix)>,
    budget: &mut usize,
    is_start: bool,
) -> Option<Ix> {
    let mut stack = vec![(v, ix, is_start, 0usize)];
    while let Some((v, ix, is_start, depth)) = stack.pop() {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        if !is_start && (ctx.storage)(v).is_some_and(|s| !roots.contains(&s)) {
            continue;
        }
        if depth >= MAX_DEPTH && !roots.contains(&v) {
            continue;
        }
        if !seen.insert((v, ix.clone())) {
            continue;
        }
        let node = ctx.g.node(v);
        match node.op {
            op if op.is_reduction() => return Some(ix),
            op if op.is_elementwise() => {
                stack.extend(node.args.iter().rev().map(|&a| (a, ix.clone(), false, depth + 1)))
            }
            OpKind::BroadcastInDim | OpKind::Permute | OpKind::Slice | OpKind::Reshape => {
                if let Ok(aix) = arg_index(ctx.g, node, &ix) {
                    stack.push((node.args[0], aix, false, depth + 1));
                }
            }
            _ => {}
        }
    }
    None
}

struct StageB {
    inner: Vec<Dim>,
    accs: Vec<Accumulator>,
    body: Vec<Instr>,
    /// For reduction stages: the level (1 + the highest level of the scalars it reads).
    level: Option<u32>,
    /// Fused into another stage (see [`fuse_sum_exp`]): not part of the kernel.
    fused: bool,
}

struct Em<'a, 'c> {
    ctx: &'a Ctx<'c>,
    roots: &'a [Value],
    reg_dtype: Vec<DType>,
    /// Level of scalar registers (computed once per outer point) and reduction results.
    level: HashMap<Reg, u32>,
    scalars: Vec<(Instr, u32)>,
    stages: Vec<StageB>,
    cache: HashMap<(Value, Ix, Option<u32>), Reg>,
    demands: HashMap<Value, HashSet<Ix>>,
    /// The stages computing each value ([`MAX_STAGES`]).
    stages_of: HashMap<Value, BTreeSet<u32>>,
    covers: BTreeSet<Value>,
    n_instrs: usize,
    /// How many `value` calls computing a value are on the stack ([`MAX_DEPTH`]).
    depth: usize,
    /// Values found to need a buffer during this emission, treated as buffered from then on.
    assumed: HashSet<Value>,
    failures: Vec<(Value, String)>,
    /// Values refused for their depth ([`MAX_DEPTH`]).
    deep: HashSet<Value>,
}

fn operands(i: &Instr) -> Vec<Reg> {
    match i {
        Instr::Load { .. } | Instr::Const { .. } | Instr::LoopVar { .. } => vec![],
        Instr::LoadAt { index, .. } => vec![*index],
        Instr::Unary { x, .. } | Instr::Convert { x, .. } => vec![*x],
        Instr::Binary { a, b, .. } => vec![*a, *b],
        Instr::Select { cond, a, b, .. } => vec![*cond, *a, *b],
        Instr::Accumulate { x, index, .. } => std::iter::once(*x).chain(*index).collect(),
        Instr::Store { value, .. } => vec![*value],
    }
}

fn to_var(v: IV) -> Result<Var, Fail> {
    match v {
        IV::Outer(j) => Ok(Var::Outer(j)),
        IV::Inner(_, j) => Ok(Var::Inner(j)),
        IV::Root(_) => Err(Fail::Error("a root variable survived loop assignment".into())),
    }
}

fn to_index(a: &Aff) -> Result<Index, Fail> {
    Ok(Index {
        offset: a.c.clone(),
        terms: a.terms.iter().map(|(v, k)| Ok((to_var(*v)?, k.clone()))).collect::<Result<_, Fail>>()?,
    })
}

fn reduce_op(op: OpKind) -> ReduceOp {
    match op {
        OpKind::ReduceSum => ReduceOp::Sum,
        OpKind::ReduceProd => ReduceOp::Prod,
        OpKind::ReduceMax => ReduceOp::Max,
        OpKind::ReduceMin => ReduceOp::Min,
        _ => ReduceOp::Argmax,
    }
}

impl Em<'_, '_> {
    /// The buffer `v` is loaded from: its storage, unless this kernel stores that itself.
    fn buffered(&self, v: Value) -> Option<Value> {
        if self.assumed.contains(&v) {
            return Some(v);
        }
        (self.ctx.storage)(v).filter(|s| !self.roots.contains(s))
    }

    /// Whether emission may go on as if `u` were materialised.
    fn can_assume(&self, u: Value) -> bool {
        !self.roots.contains(&u) && !self.assumed.contains(&u) && (self.ctx.storage)(u).is_none()
    }

    fn new_reg(&mut self, dtype: DType) -> Reg {
        self.reg_dtype.push(dtype);
        Reg::from_u32(self.reg_dtype.len() as u32 - 1)
    }

    /// Appends an instruction defining a new register of `dtype` at `place`.
    fn push(&mut self, place: Option<u32>, dtype: DType, make: impl FnOnce(Reg) -> Instr) -> Result<Reg, Fail> {
        let r = self.new_reg(dtype);
        let instr = make(r);
        self.append(place, instr)?;
        Ok(r)
    }

    fn append(&mut self, place: Option<u32>, instr: Instr) -> Result<(), Fail> {
        self.n_instrs += 1;
        match place {
            None => {
                let lvl = operands(&instr).iter().map(|r| self.level.get(r).copied().unwrap_or(0)).max().unwrap_or(0);
                if let Some(d) = instr.dst() {
                    self.level.insert(d, lvl);
                }
                self.scalars.push((instr, lvl));
            }
            Some(s) => self.stages[s as usize].body.push(instr),
        }
        Ok(())
    }

    fn load(&mut self, store: Value, flat: Aff, place: Option<u32>, dtype: DType) -> Result<Reg, Fail> {
        let index = to_index(&flat)?;
        self.push(place, dtype, |dst| Instr::Load { dst, buf: buf(store), index })
    }

    fn value(&mut self, v: Value, ix: Ix, sid: u32) -> Result<Reg, Fail> {
        let g = self.ctx.g;
        let node = g.node(v);
        let dtype = node.ty.dtype;
        if node.op == OpKind::Full {
            let key = (v, Vec::new(), None);
            if let Some(&r) = self.cache.get(&key) {
                return Ok(r);
            }
            let x = node.attrs.float("value");
            let value = if dtype.is_float() {
                Scalar::Float(round_float(dtype, x))
            } else if dtype.is_int() {
                Scalar::Int(float_to_int_as(dtype, x))
            } else {
                Scalar::Bool(x != 0.0)
            };
            self.covers.insert(v);
            let r = self.push(None, dtype, |dst| Instr::Const { dst, value, dtype })?;
            self.cache.insert(key, r);
            return Ok(r);
        }
        let place = if ix.iter().any(Aff::has_inner) { Some(sid) } else { None };
        let key = (v, ix.clone(), place);
        if let Some(&r) = self.cache.get(&key) {
            return Ok(r);
        }
        let shape = node.ty.shape.dims().to_vec();
        let r = match self.buffered(v) {
            // A buffered value is only loaded: its demands cost one load each, never a recompute.
            Some(store) => self.load(store, ravel(&ix, &shape)?, place, dtype)?,
            None => {
                let d = self.demands.entry(v).or_default();
                d.insert(ix.clone());
                if d.len() > MAX_DEMANDS {
                    return Err(need(
                        v,
                        format!("it is needed at more than {MAX_DEMANDS} different indices in one kernel"),
                    ));
                }
                if let Some(s) = place {
                    let in_stages = self.stages_of.entry(v).or_default();
                    in_stages.insert(s);
                    if in_stages.len() > MAX_STAGES && !self.roots.contains(&v) {
                        return Err(need(
                            v,
                            format!("it would be recomputed in more than {MAX_STAGES} stages of one kernel"),
                        ));
                    }
                }
                if self.n_instrs > MAX_INSTRS {
                    return Err(need(v, format!("the kernel computing it would exceed {MAX_INSTRS} instructions")));
                }
                if self.depth >= MAX_DEPTH && !self.roots.contains(&v) {
                    self.deep.insert(v);
                    return Err(need(v, format!("it is nested {MAX_DEPTH} computations deep in one kernel")));
                }
                if !self.roots.contains(&v) {
                    if let Some(reason) = (self.ctx.shared)(v) {
                        return Err(need(v, reason));
                    }
                }
                self.covers.insert(v);
                loop {
                    self.depth += 1;
                    let computed = self.compute(v, ix.clone(), sid, place);
                    self.depth -= 1;
                    match computed {
                        Ok(r) => break r,
                        // A value this one needs must be materialised: assume it is (load it)
                        // and go on, so that one emission finds every such value.
                        Err(Fail::Materialise(list)) if list.len() == 1 && self.can_assume(list[0].0) => {
                            let (u, reason) = list.into_iter().next().ok_or(Fail::Error("empty".into()))?;
                            self.assumed.insert(u);
                            self.failures.push((u, reason));
                            if u == v {
                                self.covers.remove(&v);
                                break self.load(v, ravel(&ix, &shape)?, place, dtype)?;
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        self.cache.insert(key, r);
        Ok(r)
    }

    fn compute(&mut self, v: Value, ix: Ix, sid: u32, place: Option<u32>) -> Result<Reg, Fail> {
        let g = self.ctx.g;
        let node = g.node(v);
        let dtype = node.ty.dtype;
        let op = node.op;
        match op {
            OpKind::ConvertElementType => {
                let x = self.value(node.args[0], ix, sid)?;
                self.push(place, dtype, |dst| Instr::Convert { dst, x, dtype })
            }
            OpKind::Where => {
                let cond = self.value(node.args[0], ix.clone(), sid)?;
                let a = self.value(node.args[1], ix.clone(), sid)?;
                let b = self.value(node.args[2], ix, sid)?;
                self.push(place, dtype, |dst| Instr::Select { dst, cond, a, b, dtype })
            }
            op if op.is_elementwise() && node.args.len() == 1 => {
                let x = self.value(node.args[0], ix, sid)?;
                self.push(place, dtype, |dst| Instr::Unary { dst, op, x, dtype })
            }
            op if op.is_elementwise() && node.args.len() == 2 => {
                let a = self.value(node.args[0], ix.clone(), sid)?;
                let b = self.value(node.args[1], ix, sid)?;
                self.push(place, dtype, |dst| Instr::Binary { dst, op, a, b, dtype })
            }
            OpKind::Iota => self.iota(v, ix, place),
            OpKind::BroadcastInDim | OpKind::Permute | OpKind::Slice => {
                if op == OpKind::BroadcastInDim {
                    if let Some(reason) = self.worth_hoisting(v) {
                        return Err(need(node.args[0], reason));
                    }
                }
                let aix = arg_index(g, node, &ix).map_err(|e| match e {
                    MapFail::Dim(e) => Fail::from(e),
                    MapFail::NotAffine => Fail::Error(format!("{op} {v} has an index it cannot map")),
                })?;
                self.value(node.args[0], aix, sid)
            }
            OpKind::Reshape => {
                let a = node.args[0];
                if let Some(store) = self.buffered(a) {
                    // The argument is a dense buffer: the same flat offset.
                    let flat = ravel(&ix, node.ty.shape.dims())?;
                    return self.load(store, flat, place, dtype);
                }
                let from = g.ty(a).shape.dims().to_vec();
                match reshape_index(&from, node.ty.shape.dims(), &ix) {
                    Ok(aix) => self.value(a, aix, sid),
                    Err(MapFail::Dim(e)) => Err(e.into()),
                    Err(MapFail::NotAffine) => Err(need(
                        a,
                        format!(
                            "reshape {v} ({} to {}) merges dims of the computed value {a}: reading it in place would \
                             need a division, not an affine index",
                            g.ty(a).shape,
                            node.ty.shape
                        ),
                    )),
                }
            }
            op if op.is_reduction() => self.reduction(v, ix, place),
            _ => Err(Fail::Error(format!("{v} = {op} has no buffer and cannot be computed in a kernel"))),
        }
    }

    /// Why the argument of broadcast `v` should be computed once into a buffer rather than
    /// at every index of the broadcast, if it should: the broadcast repeats it at least
    /// [`HOIST_FACTOR`] times (a symbolic dim counts as that much) and it costs at least
    /// [`HOIST_COST`] computing instructions, none a reduction (the per-row statistics of
    /// softmax and layer_norm stay in their kernel). BERT's attention mask, `where` of a
    /// converted i64 input broadcast over heads and query rows, was recomputed, unvectorized,
    /// for every score: two thirds of the model's time.
    fn worth_hoisting(&self, v: Value) -> Option<String> {
        let g = self.ctx.g;
        let node = g.node(v);
        let a = node.args[0];
        if self.buffered(a).is_some() || !self.can_assume(a) {
            return None;
        }
        let (from, to) = (g.ty(a).shape.dims(), node.ty.shape.dims());
        let mapped: Vec<usize> = node
            .attrs
            .ints("broadcast_dims")
            .iter()
            .map(|&d| normalize_axis(d, to.len()).unwrap_or(usize::MAX))
            .collect();
        let mut factor: u64 = 1;
        for (j, d) in to.iter().enumerate() {
            let repeated = match mapped.iter().position(|&m| m == j) {
                None => true,
                Some(k) => from.get(k).is_some_and(|f| f.as_const() == Some(1)) && d.as_const() != Some(1),
            };
            if repeated {
                factor = factor.saturating_mul(d.as_const().unwrap_or(HOIST_FACTOR));
            }
        }
        if factor < HOIST_FACTOR {
            return None;
        }
        // The computing instructions of `a`'s cone inside this kernel (bounded walk).
        let (mut cost, mut stack, mut seen) = (0usize, vec![a], std::collections::BTreeSet::new());
        while let Some(u) = stack.pop() {
            if !seen.insert(u) || self.buffered(u).is_some() || seen.len() > 64 {
                continue;
            }
            let n = g.node(u);
            match n.op {
                op if op.is_reduction() => return None,
                OpKind::Full | OpKind::Iota => {}
                OpKind::BroadcastInDim | OpKind::Permute | OpKind::Slice | OpKind::Reshape => {}
                _ => cost += 1,
            }
            stack.extend(n.args.iter().copied());
        }
        (cost >= HOIST_COST).then(|| {
            format!(
                "broadcast {v} repeats it {}{factor} times and it costs {cost} instructions: computed once instead",
                if to.iter().any(|d| d.as_const().is_none()) { "at least " } else { "" }
            )
        })
    }

    fn iota(&mut self, v: Value, ix: Ix, place: Option<u32>) -> Result<Reg, Fail> {
        let node = self.ctx.g.node(v);
        let dtype = node.ty.dtype;
        let axis =
            normalize_axis(node.attrs.int("axis"), ix.len()).map_err(|e| Fail::Error(format!("iota {v}: {e}")))?;
        let a = &ix[axis];
        if let Some(var) = a.single_var() {
            let var = to_var(var)?;
            return self.push(place, dtype, |dst| Instr::LoopVar { dst, var, dtype });
        }
        let statics: Option<Vec<(IV, i64)>> =
            a.terms.iter().map(|(v, k)| k.as_const().and_then(|k| i64::try_from(k).ok()).map(|k| (*v, k))).collect();
        let (Some(terms), Some(c)) = (statics, a.c.as_const().and_then(|c| i64::try_from(c).ok())) else {
            return Err(need(v, "it is an iota needed at an index with symbolic coefficients".into()));
        };
        let i64c = |em: &mut Self, x: i64| {
            em.push(place, DType::I64, |dst| Instr::Const { dst, value: Scalar::Int(x), dtype: DType::I64 })
        };
        let mut acc = i64c(self, c)?;
        for (var, k) in terms {
            let var = to_var(var)?;
            let lv = self.push(place, DType::I64, |dst| Instr::LoopVar { dst, var, dtype: DType::I64 })?;
            let kr = i64c(self, k)?;
            let t = self.push(place, DType::I64, |dst| Instr::Binary {
                dst,
                op: OpKind::Mul,
                a: lv,
                b: kr,
                dtype: DType::I64,
            })?;
            acc = self.push(place, DType::I64, |dst| Instr::Binary {
                dst,
                op: OpKind::Add,
                a: acc,
                b: t,
                dtype: DType::I64,
            })?;
        }
        if dtype == DType::I64 {
            return Ok(acc);
        }
        self.push(place, dtype, |dst| Instr::Convert { dst, x: acc, dtype })
    }

    fn reduction(&mut self, v: Value, ix: Ix, place: Option<u32>) -> Result<Reg, Fail> {
        if place.is_some() {
            return Err(need(
                v,
                "it is a reduction needed at an index that varies inside its consumer's loops, not once per outer \
                 point of the kernel"
                    .into(),
            ));
        }
        let g = self.ctx.g;
        let node = g.node(v);
        let arg = node.args[0];
        let ashape = g.ty(arg).shape.dims().to_vec();
        let adtype = g.ty(arg).dtype;
        let axes = reduced_axes(g, v);
        let sid = self.stages.len() as u32;
        self.stages.push(StageB { inner: Vec::new(), accs: Vec::new(), body: Vec::new(), level: None, fused: false });
        let op = reduce_op(node.op);
        if ashape.iter().any(|d| d.as_const() == Some(0)) {
            // Statically nothing to reduce (a non-empty result means the empty dims are
            // reduced): the accumulator keeps its identity, and nothing of the argument is
            // computed, since every index of it would be out of range.
            // The stage still feeds its accumulator (a zero of its dtype, at position 0), so
            // every accumulator has a feed; its loop never runs.
            self.stages[sid as usize].inner = vec![Dim::new(0)];
            let zero = match adtype {
                d if d.is_float() => Scalar::Float(0.0),
                d if d.is_int() => Scalar::Int(0),
                _ => Scalar::Bool(false),
            };
            let x = self.push(Some(sid), adtype, |dst| Instr::Const { dst, value: zero, dtype: adtype })?;
            let index = if op == ReduceOp::Argmax {
                let i64 = DType::I64;
                Some(self.push(Some(sid), i64, |dst| Instr::Const { dst, value: Scalar::Int(0), dtype: i64 })?)
            } else {
                None
            };
            self.append(Some(sid), Instr::Accumulate { acc: 0, x, index })?;
            let result = self.new_reg(node.ty.dtype);
            let stage = &mut self.stages[sid as usize];
            stage.accs = vec![Accumulator { op, dtype: adtype, result }];
            stage.level = Some(1);
            self.level.insert(result, 1);
            return Ok(result);
        }
        let mut aix = Vec::with_capacity(ashape.len());
        let mut kept = ix.into_iter();
        let mut pos_var = None;
        for (k, d) in ashape.iter().enumerate() {
            if axes.contains(&k) {
                if is_one(d) {
                    aix.push(Aff::zero());
                } else {
                    let j = self.stages[sid as usize].inner.len() as u32;
                    self.stages[sid as usize].inner.push(d.clone());
                    aix.push(Aff::var(IV::Inner(sid, j)));
                    pos_var = Some(Var::Inner(j));
                }
            } else {
                aix.push(kept.next().ok_or_else(|| Fail::Error(format!("reduction {v}: index rank mismatch")))?);
            }
        }
        let x = self.value(arg, aix, sid)?;
        let index = if op == ReduceOp::Argmax {
            Some(match pos_var {
                Some(var) => self.push(Some(sid), DType::I64, |dst| Instr::LoopVar { dst, var, dtype: DType::I64 })?,
                None => {
                    self.push(None, DType::I64, |dst| Instr::Const { dst, value: Scalar::Int(0), dtype: DType::I64 })?
                }
            })
        } else {
            None
        };
        self.append(Some(sid), Instr::Accumulate { acc: 0, x, index })?;
        let result = self.new_reg(node.ty.dtype);
        let stage = &self.stages[sid as usize];
        let level =
            1 + stage.body.iter().flat_map(operands).filter_map(|r| self.level.get(&r).copied()).max().unwrap_or(0);
        let stage = &mut self.stages[sid as usize];
        stage.accs = vec![Accumulator { op, dtype: adtype, result }];
        stage.level = Some(level);
        self.level.insert(result, level);
        Ok(result)
    }
}

/// Emits the kernel computing and storing `roots` (values with buffers).
pub(crate) fn emit(ctx: &Ctx, roots: &[Value], name: &str) -> Result<Emitted, Fail> {
    let g = ctx.g;
    let mut em = Em {
        ctx,
        roots,
        reg_dtype: Vec::new(),
        level: HashMap::new(),
        scalars: Vec::new(),
        stages: Vec::new(),
        cache: HashMap::new(),
        demands: HashMap::new(),
        stages_of: HashMap::new(),
        covers: BTreeSet::new(),
        n_instrs: 0,
        depth: 0,
        assumed: HashSet::new(),
        failures: Vec::new(),
        deep: HashSet::new(),
    };
    // The outer loops: every root must agree.
    let mut outer: Option<(Value, Vec<Dim>)> = None;
    let mut plans = Vec::with_capacity(roots.len());
    for &r in roots {
        let axes = domain(ctx, roots, r);
        let shape = g.ty(r).shape.dims().to_vec();
        let dims: Vec<Dim> = axes.iter().map(|&k| shape[k].clone()).collect();
        match &outer {
            None => outer = Some((r, dims)),
            Some((first, o)) if *o != dims => {
                return Err(Fail::Domains(format!(
                    "{r} would loop over [{}] outside, {first} over [{}]",
                    dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
                    o.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                )))
            }
            Some(_) => {}
        }
        plans.push((r, axes));
    }
    let outer_dims = outer.map(|(_, d)| d).unwrap_or_default();
    let empty = |r: &Value| g.ty(*r).shape.dims().iter().any(|d| d.as_const() == Some(0));
    if roots.iter().any(empty) {
        if !roots.iter().all(empty) {
            return Err(Fail::Domains("some roots are statically empty and some are not".into()));
        }
        // Nothing to store: a kernel with an empty loop.
        let kernel = Kernel {
            name: name.to_string(),
            outer: vec![Dim::new(0)],
            stages: Vec::new(),
            n_regs: 0,
            covers: roots.to_vec(),
            activation: None,
        };
        return Ok(Emitted { kernel, reads: BTreeMap::new(), needs: Vec::new(), deep: Vec::new() });
    }
    let mut store_stages = Vec::new();
    for (r, axes) in plans {
        let base = root_index(g, r);
        let sid = em.stages.len() as u32;
        em.stages.push(StageB { inner: Vec::new(), accs: Vec::new(), body: Vec::new(), level: None, fused: false });
        let shape = g.ty(r).shape.dims().to_vec();
        let mut ix = Vec::with_capacity(base.len());
        for (k, a) in base.iter().enumerate() {
            if *a == Aff::zero() {
                ix.push(Aff::zero());
            } else if let Some(j) = axes.iter().position(|&x| x == k) {
                ix.push(Aff::var(IV::Outer(j as u32)));
            } else {
                let j = em.stages[sid as usize].inner.len() as u32;
                em.stages[sid as usize].inner.push(shape[k].clone());
                ix.push(Aff::var(IV::Inner(sid, j)));
            }
        }
        let place = if ix.iter().any(Aff::has_inner) { Some(sid) } else { None };
        let store = (ctx.storage)(r).ok_or_else(|| Fail::Error(format!("root {r} has no buffer")))?;
        let value = em.value(r, ix.clone(), sid)?;
        let index = to_index(&ravel(&ix, &shape)?)?;
        em.append(place, Instr::Store { buf: buf(store), index, value })?;
        store_stages.push(sid);
    }
    fuse_sum_exp(&mut em);
    // Assemble: scalars by level, reductions after the scalars they read, stores last.
    let max_level = em
        .scalars
        .iter()
        .map(|(_, l)| *l)
        .chain(em.stages.iter().filter_map(|s| s.level.map(|l| l.saturating_sub(1))))
        .max()
        .unwrap_or(0);
    let mut by_level: Vec<Vec<Instr>> = vec![Vec::new(); max_level as usize + 1];
    for (i, l) in std::mem::take(&mut em.scalars) {
        by_level[l as usize].push(i);
    }
    let mut stages: Vec<Stage> = Vec::new();
    let finish = |s: &StageB| Stage { inner: s.inner.clone(), accumulators: s.accs.clone(), body: s.body.clone() };
    for (l, body) in by_level.into_iter().enumerate() {
        if !body.is_empty() {
            stages.push(Stage { inner: Vec::new(), accumulators: Vec::new(), body });
        }
        for s in &em.stages {
            if s.level == Some(l as u32 + 1) && !s.fused {
                stages.push(finish(s));
            }
        }
    }
    for sid in store_stages {
        let s = &em.stages[sid as usize];
        if !s.body.is_empty() {
            stages.push(finish(s));
        }
    }
    let n_regs = renumber(&mut stages);
    let mut reads: BTreeMap<Value, usize> = BTreeMap::new();
    for s in &stages {
        let mut seen = BTreeSet::new();
        for i in &s.body {
            if let Instr::Load { buf, .. } = i {
                seen.insert(Value::from_u32(buf.as_u32()));
            }
        }
        for v in seen {
            *reads.entry(v).or_default() += 1;
        }
    }
    let kernel = Kernel {
        name: name.to_string(),
        outer: outer_dims,
        stages,
        n_regs,
        covers: em.covers.iter().copied().collect(),
        activation: None,
    };
    let deep = em.failures.iter().map(|f| f.0).filter(|u| em.deep.contains(u)).collect();
    Ok(Emitted { kernel, reads, needs: em.failures, deep })
}

/// Renumbers registers in program order (each stage's body, then its accumulator results);
/// returns the register count.
fn renumber(stages: &mut [Stage]) -> u32 {
    let mut map: HashMap<Reg, Reg> = HashMap::new();
    let mut next = 0u32;
    let mut def = |r: Reg, map: &mut HashMap<Reg, Reg>| {
        map.insert(r, Reg::from_u32(next));
        next += 1;
    };
    for stage in stages.iter() {
        for i in &stage.body {
            if let Some(d) = i.dst() {
                def(d, &mut map);
            }
        }
        for a in &stage.accumulators {
            def(a.result, &mut map);
        }
    }
    let m = |r: &mut Reg| *r = map[r];
    for stage in stages.iter_mut() {
        for a in &mut stage.accumulators {
            m(&mut a.result);
        }
        for i in &mut stage.body {
            match i {
                Instr::Load { dst, .. } | Instr::Const { dst, .. } | Instr::LoopVar { dst, .. } => m(dst),
                Instr::LoadAt { dst, index, .. } => {
                    m(dst);
                    m(index);
                }
                Instr::Unary { dst, x, .. } | Instr::Convert { dst, x, .. } => {
                    m(dst);
                    m(x);
                }
                Instr::Binary { dst, a, b, .. } => {
                    m(dst);
                    m(a);
                    m(b);
                }
                Instr::Select { dst, cond, a, b, .. } => {
                    m(dst);
                    m(cond);
                    m(a);
                    m(b);
                }
                Instr::Accumulate { x, index, .. } => {
                    m(x);
                    if let Some(i) = index {
                        m(i);
                    }
                }
                Instr::Store { value, .. } => m(value),
            }
        }
    }
    next
}
