//! The scheduler: a simplified prims graph to a kernel [`Program`].
//!
//! Every node is one of: a source (graph input, constant), a kernel prim (elementwise,
//! `convert_element_type`, `where`, `full`, `iota`; the layout prims `broadcast_in_dim`,
//! `permute`, `slice`, `reshape`; the reductions), a library call (`matmul`, `conv`, the
//! recovered ops, and the data-movement prims `pad`, `cat`, `rev`, `gather`, `scatter_add`,
//! which read materialised operands and write a buffer), or a graph break run by the
//! interpreter (any other op; adjacent ones are grouped into one break unless a path through
//! other steps connects them, which would be a cycle). The data-movement prims are library
//! calls rather than kernel prims because the kernel IR has no guarded load: folding them
//! into a consumer's loads would need indices clamped in registers (`LoadAt`) with static
//! strides.
//!
//! ## Materialised values
//!
//! Kernel prims are computed inside kernels; a value gets a buffer (is *materialised*) when:
//! - it is a graph output, an operand of a library call, or an input of a graph break;
//! - a kernel needs it at an index it cannot reach affinely: the argument of a reshape that
//!   merges dims of a computed value (a reshape of a buffer is always a flat load);
//! - it is a reduction needed at an index that varies inside its consumer's loops (so not once
//!   per outer point of the consumer's kernel);
//! - it is computed in several kernels and is not cheap: recomputing is allowed only for a
//!   pointwise chain of at most [`RECOMPUTE_LIMIT`] instructions with no reduction in it
//!   (within one kernel a value is recomputed in every stage that needs it, whatever it costs:
//!   that is what keeps softmax and layer_norm one kernel each; but in at most
//!   `emit::MAX_STAGES` stages, so that a chain of row reductions, where each stage recomputes
//!   every earlier link of the kernel, is cut every few links instead of costing the square of
//!   its length in instructions);
//! - a broadcast repeats it at least 8 times (a symbolic dim counts as 8) and it costs at least
//!   3 instructions, none a reduction (`emit::HOIST_FACTOR`): computed once, loaded per index;
//! - it is needed at more than 16 indices or in more than 8 stages of one kernel, or its kernel
//!   would get too big, or it is nested deeper than `emit::MAX_DEPTH` computations in one
//!   kernel (so building a kernel never recurses deeper than that, however long a chain of
//!   pointwise ops is).
//!
//! These rules are applied to a fixed point: each materialised value is the root of a kernel
//! and the kernels are built; building one records every value it finds it needs materialised
//! (and goes on as if it were), and a kernel that reaches an expensive value another kernel
//! already computes stops there, so each round costs about the size of the graph and a few
//! rounds settle it (a 12 000-prim stack schedules in a quarter of a second).
//!
//! ## Kernels
//!
//! A kernel computes its roots and everything they need that has no buffer, with layout prims
//! folded into load indices (broadcast is a zero stride, permute permutes strides, slice is an
//! offset and a scaled stride, an affine reshape splits or merges strides) and reductions as
//! stages (see `emit.rs`): softmax is one kernel of two stages over the rows (the maximum and
//! the sum of `exp(x - max)` fused into one online pass, then the output), reading each row
//! twice; layer_norm, whose decomposition has three reductions in sequence (max-abs
//! prescale, mean, variance), is one kernel reading each row four times. A kernel without
//! reductions loops over all axes of its result as outer loops.
//!
//! Two kernels are then *merged* (`merge.rs`) when one reads a value the other stores, both
//! loop over the same outer dims and merging makes no cycle: the producer's roots become extra
//! stores of the consumer (attention's row maximum, needed by the softmax and by the masking
//! after the second matmul, is stored by the softmax kernel). A reshape whose argument is
//! materialised by a kernel and read by nothing but kernels shares that buffer instead of
//! copying it.
//!
//! A kernel computes only the elements its stores need, so an integer division by zero in an
//! element no output depends on is not an error here, while the interpreter, which computes
//! every value whole, reports it.
//!
//! A kernel that consumes a matmul's output row by row right after it becomes the matmul's
//! epilogue, run per finished row tile of the GEMM (`epilogue.rs`).
//!
//! Everything is deterministic (ordered maps, fixed visiting orders) and bounded: at most one
//! materialisation per node, every merge removes a kernel and a refused merge is not retried,
//! and each kernel has limits on indices per value and on instructions.

mod affine;
mod emit;

pub use emit::MAX_MERGED_INSTRS;
pub mod epilogue;
mod interchange;
mod merge;
mod order;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use cranelift_entity::{EntityRef, PrimaryMap};

use crate::ir::verify::{verify, Stage as VStage, VerifyErrors};
use crate::ir::{Graph, Shape, Symbol, Value};
use crate::kernel::{
    Buffer, BufferId, BufferKind, ConvCall, Instr, InterpCall, Kernel, LibraryCall, MatmulCall, Program, Step,
};
use crate::ops::OpKind;
use emit::{emit, Ctx, Emitted, Fail};

/// A pointwise value computed in several kernels is recomputed in each when its chain has at
/// most this many instructions and no reduction; otherwise it is materialised.
pub const RECOMPUTE_LIMIT: u32 = 8;

/// Why a graph could not be scheduled.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("the graph is not in prims form: {0}")]
    NotPrims(VerifyErrors),
    #[error("cannot schedule: {0}")]
    Failed(String),
}

/// A program and the explanation of how it was formed.
#[derive(Clone, Debug)]
pub struct Scheduled {
    pub program: Program,
    /// Every kernel (the nodes it covers, its loops and stages, how often it reads each
    /// buffer), every materialised value and why, and why neighbouring steps were not fused.
    pub explanation: String,
}

/// Schedules a simplified prims graph into a kernel program.
pub fn schedule(g: &Graph) -> Result<Program, ScheduleError> {
    schedule_explained(g).map(|s| s.program)
}

/// The explanation of [`schedule`]'s decisions for `g`.
pub fn explain(g: &Graph) -> Result<String, ScheduleError> {
    schedule_explained(g).map(|s| s.explanation)
}

/// [`schedule`] with its explanation.
pub fn schedule_explained(g: &Graph) -> Result<Scheduled, ScheduleError> {
    verify(g, VStage::Recovered).map_err(ScheduleError::NotPrims)?;
    let mut s = Sched::new(g);
    s.break_groups();
    s.initial_materialise();
    s.settle()?;
    s.share_reshapes();
    s.settle()?;
    s.merge()?;
    let mut scheduled = s.assemble()?;
    let swapped = interchange::interchange(&mut scheduled.program);
    scheduled.explanation.push_str(&swapped);
    let notes = epilogue::fuse(&mut scheduled.program);
    scheduled.explanation.push_str(&notes);
    Ok(scheduled)
}

/// Whether the scheduler computes `op` in kernels or library calls (rather than a graph break
/// run by the interpreter). Sources count as compiled.
pub fn compiles(op: OpKind) -> bool {
    class(op) != Class::Break
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Source,
    Kernel,
    Library,
    Break,
}

fn class(op: OpKind) -> Class {
    use OpKind::*;
    match op {
        Input | Const => Class::Source,
        // A custom kernel runs as a library step calling its registered compute function.
        Matmul | Conv | Custom => Class::Library,
        Pad | Cat | Rev | Gather | ScatterAdd | DimValues => Class::Library,
        op if crate::ops::library::is_library_op(op) => Class::Library,
        BroadcastInDim | Permute | Slice | Reshape | Full | Iota => Class::Kernel,
        op if op.is_elementwise() || op.is_reduction() => Class::Kernel,
        _ => Class::Break,
    }
}

/// `1 stage`, `3 stages`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Per step, the steps it reads from.
type Deps = BTreeMap<Unit, BTreeSet<Unit>>;

struct KGroup {
    roots: Vec<Value>,
    em: Emitted,
}

/// A step being ordered: a kernel group, a library node, or a break group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    Kernel(usize),
    Library(Value),
    Break(usize),
}

struct Sched<'g> {
    g: &'g Graph,
    class: Vec<Class>,
    users: Vec<Vec<Value>>,
    is_output: Vec<bool>,
    /// Break group of each break node.
    brk: Vec<Option<usize>>,
    breaks: Vec<Vec<Value>>,
    /// Materialised kernel values and why.
    mat: BTreeMap<Value, String>,
    /// Reshapes that share their argument's buffer: value → storage value.
    alias: BTreeMap<Value, Value>,
    groups: Vec<KGroup>,
    /// Why a kernel (by its first root) was not merged into a consumer kernel (by first root).
    merge_notes: BTreeMap<(Value, Value), String>,
}

impl<'g> Sched<'g> {
    fn new(g: &'g Graph) -> Sched<'g> {
        let n = g.len();
        let mut users: Vec<Vec<Value>> = vec![Vec::new(); n];
        for (v, node) in g.nodes() {
            for &a in &node.args {
                if !users[a.index()].contains(&v) {
                    users[a.index()].push(v);
                }
            }
        }
        let mut is_output = vec![false; n];
        for o in g.outputs() {
            is_output[o.value.index()] = true;
        }
        Sched {
            g,
            class: g.nodes().map(|(_, node)| class(node.op)).collect(),
            users,
            is_output,
            brk: vec![None; n],
            breaks: Vec::new(),
            mat: BTreeMap::new(),
            alias: BTreeMap::new(),
            groups: Vec::new(),
            merge_notes: BTreeMap::new(),
        }
    }

    fn cls(&self, v: Value) -> Class {
        self.class[v.index()]
    }

    fn name(&self, v: Value) -> String {
        self.g.display_value(v)
    }

    /// Whether break node `b` is read outside its break group.
    fn is_break_result(&self, b: Value) -> bool {
        let gid = self.brk[b.index()];
        self.is_output[b.index()] || self.users[b.index()].iter().any(|u| self.brk[u.index()] != gid || gid.is_none())
    }

    /// The value whose buffer holds `v`, if `v` has one.
    fn storage(&self, v: Value) -> Option<Value> {
        match self.cls(v) {
            Class::Source | Class::Library => Some(v),
            Class::Break => self.is_break_result(v).then_some(v),
            Class::Kernel => match self.alias.get(&v) {
                Some(&a) => Some(a),
                None => self.mat.contains_key(&v).then_some(v),
            },
        }
    }

    /// Whether `x` depends (through arguments) on any value of `set`.
    fn depends_on(&self, x: Value, set: &BTreeSet<Value>) -> bool {
        let mut stack = vec![x];
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            if set.contains(&v) {
                return true;
            }
            if seen.insert(v) {
                stack.extend(self.g.node(v).args.iter().copied());
            }
        }
        false
    }

    /// Whether two sets of break nodes can be one graph break: no path leaves one and comes
    /// back into the other through steps outside both.
    fn can_join(&self, a: &BTreeSet<Value>, b: &BTreeSet<Value>) -> bool {
        let outside = |x: &Value| !a.contains(x) && !b.contains(x);
        let ext = |s: &BTreeSet<Value>| -> Vec<Value> {
            s.iter().flat_map(|&m| self.g.node(m).args.iter().copied()).filter(outside).collect()
        };
        !ext(a).iter().any(|&x| self.depends_on(x, b)) && !ext(b).iter().any(|&x| self.depends_on(x, a))
    }

    /// Groups break nodes: a break node joins the groups of its break arguments, unless a path
    /// through other steps connects them (which would make a cycle).
    fn break_groups(&mut self) {
        for (v, node) in self.g.nodes() {
            if self.cls(v) != Class::Break {
                continue;
            }
            let mut mine: BTreeSet<Value> = BTreeSet::from([v]);
            let mut joined: Vec<usize> = Vec::new();
            for &a in &node.args {
                let Some(ga) = self.brk[a.index()] else { continue };
                if joined.contains(&ga) {
                    continue;
                }
                let theirs: BTreeSet<Value> = self.breaks[ga].iter().copied().collect();
                if self.can_join(&mine, &theirs) {
                    mine.extend(theirs);
                    joined.push(ga);
                }
            }
            let gid = joined.first().copied().unwrap_or(self.breaks.len());
            if gid == self.breaks.len() {
                self.breaks.push(Vec::new());
            }
            for &k in &joined {
                self.breaks[k].clear();
            }
            for &m in &mine {
                self.brk[m.index()] = Some(gid);
            }
            self.breaks[gid] = mine.into_iter().collect();
        }
    }

    fn materialise(&mut self, v: Value, why: String) {
        if self.cls(v) == Class::Kernel {
            self.mat.entry(v).or_insert(why);
        }
    }

    fn initial_materialise(&mut self) {
        for o in self.g.outputs() {
            self.materialise(o.value, "it is a graph output".into());
        }
        for (v, node) in self.g.nodes() {
            match self.cls(v) {
                Class::Library => {
                    for &a in &node.args {
                        let why = format!("it is an operand of {} {} (a library call)", node.op, self.name(v));
                        self.materialise(a, why);
                    }
                }
                Class::Break => {
                    for &a in &node.args {
                        if self.brk[a.index()] != self.brk[v.index()] {
                            let why = format!(
                                "it is an input of the graph break at {} ({} is not compiled)",
                                self.name(v),
                                node.op
                            );
                            self.materialise(a, why);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn emit(&self, roots: &[Value]) -> Result<Emitted, Fail> {
        self.emit_with(roots, &|_| None)
    }

    fn emit_with(&self, roots: &[Value], shared: &dyn Fn(Value) -> Option<String>) -> Result<Emitted, Fail> {
        let storage = |v: Value| self.storage(v);
        let ctx = Ctx { g: self.g, storage: &storage, shared };
        emit(&ctx, roots, "k")
    }

    /// Why `v`, needed by the kernels of `kernels`, is not recomputed in each of them; `None`
    /// when it is cheap enough to recompute.
    fn not_cheap(
        &self,
        v: Value,
        kernels: &[Value],
        memo: &mut HashMap<Value, (u32, Option<Value>)>,
    ) -> Option<String> {
        let (c, red) = self.cost(v, memo, true);
        let kernels =
            format!("the kernels of {}", kernels.iter().map(|&r| self.name(r)).collect::<Vec<_>>().join(", "));
        if red == Some(v) {
            Some(format!("it is a reduction needed by {kernels}"))
        } else if let Some(r) = red {
            Some(format!("it is needed by {kernels} and its computation includes the reduction {}", self.name(r)))
        } else if c > RECOMPUTE_LIMIT {
            Some(format!(
                "it is needed by {kernels} and costs {c} instructions (recomputed only up to {RECOMPUTE_LIMIT})"
            ))
        } else {
            None
        }
    }

    /// Instructions needed to recompute `v` from buffers, and a reduction among them if any.
    fn cost(&self, v: Value, memo: &mut HashMap<Value, (u32, Option<Value>)>, top: bool) -> (u32, Option<Value>) {
        if !top && self.storage(v).is_some() {
            return (0, None);
        }
        if let Some(&c) = memo.get(&v) {
            return c;
        }
        let node = self.g.node(v);
        let mut total: u32 = match node.op {
            op if op.is_elementwise() => 1,
            OpKind::Iota => 1,
            _ => 0,
        };
        let mut red = node.op.is_reduction().then_some(v);
        if self.cls(v) == Class::Kernel {
            for &a in &node.args {
                let (c, r) = self.cost(a, memo, false);
                total = total.saturating_add(c).min(1 << 20);
                red = red.or(r);
            }
        }
        memo.insert(v, (total, red));
        (total, red)
    }

    /// Materialises values until every kernel can be built and no expensive value is computed
    /// in several kernels.
    fn settle(&mut self) -> Result<(), ScheduleError> {
        for _ in 0..=self.g.len() + 1 {
            let roots: Vec<Value> = self.mat.keys().copied().filter(|v| !self.alias.contains_key(v)).collect();
            let mut groups = Vec::with_capacity(roots.len());
            let mut new: BTreeMap<Value, String> = BTreeMap::new();
            // The kernel that first computed each value in this round: a later kernel needing an
            // expensive one stops there (instead of walking its whole computation again).
            let owner: RefCell<HashMap<Value, Value>> = RefCell::new(HashMap::new());
            let memo = RefCell::new(HashMap::new());
            // Where long chains are cut (values materialised for their depth alone).
            let mut cut: Vec<Value> = Vec::new();
            for &r in &roots {
                let shared = |v: Value| {
                    let a = owner.borrow().get(&v).copied()?;
                    self.not_cheap(v, &[a, r], &mut memo.borrow_mut())
                };
                match self.emit_with(&[r], &shared) {
                    Ok(em) => {
                        let mut own = owner.borrow_mut();
                        for &v in &em.kernel.covers {
                            if v != r && self.g.node(v).op != OpKind::Full {
                                own.entry(v).or_insert(r);
                            }
                        }
                        for (value, reason) in &em.needs {
                            if self.mat.contains_key(value) {
                                return Err(ScheduleError::Failed(format!(
                                    "the kernel of {} needs {} materialised ({reason}), but it already is",
                                    self.name(r),
                                    self.name(*value)
                                )));
                            }
                            new.entry(*value).or_insert_with(|| reason.clone());
                        }
                        cut.extend(em.deep.iter().copied());
                        groups.push(KGroup { roots: vec![r], em });
                    }
                    Err(Fail::Materialise(list)) => {
                        for (value, reason) in list {
                            if self.mat.contains_key(&value) {
                                return Err(ScheduleError::Failed(format!(
                                    "the kernel of {} needs {} materialised ({reason}), but it already is",
                                    self.name(r),
                                    self.name(value)
                                )));
                            }
                            new.entry(value).or_insert(reason);
                        }
                    }
                    Err(Fail::Domains(m) | Fail::Error(m)) => {
                        return Err(ScheduleError::Failed(format!("the kernel of {}: {m}", self.name(r))))
                    }
                }
            }
            // A chain is cut once per emission, MAX_DEPTH computations below its root, so
            // rounds that found one cut each would settle a long chain in a number of rounds
            // proportional to its length, each emitting every root (quadratic). Instead, each
            // cut is emitted at once as a root of its own (nothing else taken from it) to find
            // the next cut below it; the next round, with all of them materialised, is the one
            // that decides everything else.
            let mut next = 0;
            let mut seen = BTreeSet::new();
            while let Some(&u) = cut.get(next) {
                next += 1;
                if !seen.insert(u) || self.mat.contains_key(&u) {
                    continue;
                }
                let why = format!("it is nested {} computations deep in one kernel", emit::MAX_DEPTH);
                new.entry(u).or_insert_with(|| why.clone());
                self.mat.insert(u, why);
                if let Ok(em) = self.emit(&[u]) {
                    cut.extend(em.deep.iter().copied());
                }
            }
            if new.is_empty() {
                let mut computed_in: BTreeMap<Value, Vec<Value>> = BTreeMap::new();
                for grp in &groups {
                    for &v in &grp.em.kernel.covers {
                        if !grp.roots.contains(&v) && self.g.node(v).op != OpKind::Full {
                            computed_in.entry(v).or_default().push(grp.roots[0]);
                        }
                    }
                }
                let mut memo = memo.borrow_mut();
                for (v, rs) in computed_in {
                    if rs.len() < 2 {
                        continue;
                    }
                    if let Some(why) = self.not_cheap(v, &rs, &mut memo) {
                        new.insert(v, why);
                    }
                }
                // Materialise the last of a chain: a flagged value whose every user is flagged
                // too is needed only through them.
                let flagged: BTreeSet<Value> = new.keys().copied().collect();
                new.retain(|v, _| !self.users[v.index()].iter().all(|u| flagged.contains(u)));
            }
            if new.is_empty() {
                self.groups = groups;
                return Ok(());
            }
            self.mat.extend(new);
        }
        Err(ScheduleError::Failed("materialisation did not settle".into()))
    }

    /// Reshapes of kernel-stored values that only kernels read share their argument's buffer.
    fn share_reshapes(&mut self) {
        let candidates: Vec<Value> = self.mat.keys().copied().collect();
        for v in candidates {
            let node = self.g.node(v);
            if node.op != OpKind::Reshape {
                continue;
            }
            let a = node.args[0];
            let shared = self.alias.values().any(|&s| s == a);
            let only_kernels = self.users[a.index()].iter().all(|&u| self.cls(u) == Class::Kernel);
            if self.mat.contains_key(&a)
                && !self.alias.contains_key(&a)
                && !shared
                && !self.is_output[a.index()]
                && only_kernels
            {
                self.alias.insert(v, a);
            }
        }
    }

    /// The graph a break group runs in the interpreter, its argument storages, and results.
    fn break_graph(&self, i: usize) -> Result<(Graph, Vec<Value>, Vec<Value>, String), ScheduleError> {
        let members = &self.breaks[i];
        let mut args: Vec<Value> = Vec::new();
        for &m in members {
            for &a in &self.g.node(m).args {
                if self.brk[a.index()] != Some(i) && !args.contains(&a) {
                    args.push(a);
                }
            }
        }
        let results: Vec<Value> = members.iter().copied().filter(|&m| self.is_break_result(m)).collect();
        // Symbols the interpreter must bind from the arguments' shapes.
        let mut bound: BTreeSet<Symbol> = BTreeSet::new();
        for &a in &args {
            for d in self.g.ty(a).shape.dims() {
                if let Some(s) = d.as_symbol() {
                    bound.insert(s.clone());
                }
            }
        }
        let mut needed: BTreeSet<Symbol> = BTreeSet::new();
        for &v in members.iter().chain(&args) {
            needed.extend(self.g.ty(v).shape.symbols());
        }
        for s in needed.difference(&bound.clone()) {
            let carrier = self
                .g
                .inputs()
                .iter()
                .copied()
                .find(|&x| self.g.ty(x).shape.dims().iter().any(|d| d.as_symbol().is_some_and(|t| t == s)));
            if let Some(c) = carrier {
                if !args.contains(&c) {
                    args.push(c);
                }
                bound.insert(s.clone());
            }
        }
        let fail = |e: crate::ir::GraphError| ScheduleError::Failed(format!("building a graph break: {e}"));
        let mut sg = Graph::new("break");
        let mut map: HashMap<Value, Value> = HashMap::new();
        for (k, &a) in args.iter().enumerate() {
            let x = sg.add_input(&format!("in{k}"), self.g.ty(a).clone()).map_err(fail)?;
            map.insert(a, x);
        }
        for &m in members {
            let node = self.g.node(m);
            let margs: Vec<Value> = node.args.iter().map(|a| map[a]).collect();
            let x = sg.add_node(node.op, &margs, node.attrs.clone()).map_err(fail)?;
            map.insert(m, x);
        }
        for (k, &r) in results.iter().enumerate() {
            sg.add_output(&format!("out{k}"), map[&r]).map_err(fail)?;
        }
        let mut ops: Vec<&str> = members.iter().map(|&m| self.g.node(m).op.name()).collect();
        ops.sort();
        ops.dedup();
        let reason = format!(
            "{} not compiled by the kernel backends",
            if ops.len() == 1 { format!("{} is", ops[0]) } else { format!("{} are", ops.join(", ")) }
        );
        let storages = args
            .iter()
            .map(|&a| self.storage(a).ok_or_else(|| ScheduleError::Failed(format!("{a} has no buffer"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((sg, storages, results, reason))
    }

    fn assemble(&self) -> Result<Scheduled, ScheduleError> {
        let g = self.g;
        let (order, deps) = self.order()?;
        let mut buffers: PrimaryMap<BufferId, Buffer> = PrimaryMap::new();
        let mut buf_of: BTreeMap<Value, BufferId> = BTreeMap::new();
        for (n, &v) in g.inputs().iter().enumerate() {
            let ty = g.ty(v);
            let id = buffers.push(Buffer {
                dtype: ty.dtype,
                shape: ty.shape.clone(),
                kind: BufferKind::Input(n),
                value: Some(v),
            });
            buf_of.insert(v, id);
        }
        // The declared shape of a storage: a reshape sharing it is what library calls, graph
        // breaks and outputs read.
        let declared = |s: Value| -> Shape {
            match self.alias.iter().find(|(_, &a)| a == s) {
                Some((&v, _)) => g.ty(v).shape.clone(),
                None => g.ty(s).shape.clone(),
            }
        };
        let mut get = |buffers: &mut PrimaryMap<BufferId, Buffer>, s: Value| -> Result<BufferId, ScheduleError> {
            if let Some(&b) = buf_of.get(&s) {
                return Ok(b);
            }
            let node = g.node(s);
            let kind = match node.op {
                OpKind::Const => BufferKind::Const(node.attrs.str("blob").to_string()),
                OpKind::Input => return Err(ScheduleError::Failed(format!("{s} is an input with no buffer"))),
                _ => BufferKind::Temp,
            };
            let id = buffers.push(Buffer { dtype: node.ty.dtype, shape: declared(s), kind, value: Some(s) });
            buf_of.insert(s, id);
            Ok(id)
        };
        let mut steps = Vec::with_capacity(order.len());
        let mut names: BTreeMap<Unit, String> = BTreeMap::new();
        let mut n_kernels = 0;
        let mut n_breaks = 0;
        for &u in &order {
            match u {
                Unit::Kernel(i) => {
                    let mut k: Kernel = self.groups[i].em.kernel.clone();
                    k.name = format!("k{n_kernels}");
                    names.insert(u, k.name.clone());
                    n_kernels += 1;
                    for stage in &mut k.stages {
                        for instr in &mut stage.body {
                            if let Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } | Instr::Store { buf, .. } =
                                instr
                            {
                                *buf = get(&mut buffers, Value::from_u32(buf.as_u32()))?;
                            }
                        }
                    }
                    innermost_loop_inside(&mut k);
                    steps.push(Step::Kernel(k));
                }
                Unit::Library(v) if !matches!(g.node(v).op, OpKind::Matmul | OpKind::Conv) => {
                    let node = g.node(v);
                    let args = node
                        .args
                        .iter()
                        .map(|&a| {
                            let s = self
                                .storage(a)
                                .ok_or_else(|| ScheduleError::Failed(format!("{v}: operand has no buffer")))?;
                            get(&mut buffers, s)
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let out = get(&mut buffers, v)?;
                    names.insert(u, format!("{} {}", node.op, self.name(v)));
                    steps.push(Step::Library(LibraryCall {
                        op: node.op,
                        attrs: node.attrs.clone(),
                        args,
                        out,
                        post: None,
                    }));
                }
                Unit::Library(v) => {
                    let node = g.node(v);
                    let a = self
                        .storage(node.args[0])
                        .ok_or_else(|| ScheduleError::Failed(format!("{v}: operand has no buffer")))?;
                    let b = self
                        .storage(node.args[1])
                        .ok_or_else(|| ScheduleError::Failed(format!("{v}: operand has no buffer")))?;
                    let (a, b) = (get(&mut buffers, a)?, get(&mut buffers, b)?);
                    let out = get(&mut buffers, v)?;
                    names.insert(u, format!("{} {}", node.op, self.name(v)));
                    steps.push(if node.op == OpKind::Matmul {
                        Step::Matmul(MatmulCall {
                            a,
                            b,
                            out,
                            transpose_a: node.attrs.bool("transpose_a"),
                            transpose_b: node.attrs.bool("transpose_b"),
                            epilogue: None,
                            activation: None,
                        })
                    } else {
                        Step::Conv(ConvCall {
                            x: a,
                            w: b,
                            out,
                            stride: node.attrs.ints("stride").to_vec(),
                            padding: node.attrs.ints("padding").to_vec(),
                            dilation: node.attrs.ints("dilation").to_vec(),
                            groups: node.attrs.int("groups"),
                            pool: None,
                            post: None,
                        })
                    });
                }
                Unit::Break(i) => {
                    let (graph, args, results, reason) = self.break_graph(i)?;
                    names.insert(u, format!("interp{n_breaks}"));
                    n_breaks += 1;
                    let args = args.iter().map(|&a| get(&mut buffers, a)).collect::<Result<Vec<_>, _>>()?;
                    let results = results.iter().map(|&r| get(&mut buffers, r)).collect::<Result<Vec<_>, _>>()?;
                    steps.push(Step::Interp(InterpCall { graph, args, results, reason }));
                }
            }
        }
        let mut outputs = Vec::with_capacity(g.outputs().len());
        for o in g.outputs() {
            let s = self
                .storage(o.value)
                .ok_or_else(|| ScheduleError::Failed(format!("output {} has no buffer", o.name)))?;
            outputs.push((o.name.clone(), get(&mut buffers, s)?));
        }
        let mut symbols: Vec<Symbol> = Vec::new();
        for &v in g.inputs() {
            for s in g.ty(v).shape.symbols() {
                if !symbols.contains(&s) {
                    symbols.push(s);
                }
            }
        }
        for b in buffers.values() {
            for s in b.shape.symbols() {
                if !symbols.contains(&s) {
                    symbols.push(s);
                }
            }
        }
        let program = Program { buffers, steps, outputs, symbols };
        let explanation = self.explanation(&program, &order, &deps, &names);
        Ok(Scheduled { program, explanation })
    }

    fn explanation(&self, p: &Program, order: &[Unit], deps: &Deps, names: &BTreeMap<Unit, String>) -> String {
        let mut out = String::new();
        let count = |f: fn(&Step) -> bool| p.steps.iter().filter(|s| f(s)).count();
        let _ = writeln!(
            out,
            "; schedule: {}, {}, {}, {}",
            plural(count(|s| matches!(s, Step::Kernel(_))), "kernel"),
            plural(count(|s| matches!(s, Step::Matmul(_) | Step::Conv(_) | Step::Library(_))), "library call"),
            plural(count(|s| matches!(s, Step::Interp(_))), "graph break"),
            plural(p.buffers.values().filter(|b| b.kind == BufferKind::Temp).count(), "temporary buffer")
        );
        let list = |vs: &mut dyn Iterator<Item = Value>| vs.map(|v| self.name(v)).collect::<Vec<_>>().join(" ");
        for (&u, step) in order.iter().zip(&p.steps) {
            match (u, step) {
                (Unit::Kernel(i), Step::Kernel(k)) => {
                    let grp = &self.groups[i];
                    let reductions = k.stages.iter().filter(|s| !s.accumulators.is_empty()).count();
                    let outer: Vec<String> = k.outer.iter().map(|d| d.to_string()).collect();
                    let _ = writeln!(
                        out,
                        "; {}: outer [{}], {} ({}); stores {}",
                        k.name,
                        outer.join(", "),
                        plural(k.stages.len(), "stage"),
                        plural(reductions, "reduction"),
                        list(&mut grp.roots.iter().copied())
                    );
                    let _ = writeln!(out, ";   computes {}", list(&mut k.covers.iter().copied()));
                    let reads: Vec<String> = grp
                        .em
                        .reads
                        .iter()
                        .map(|(&v, &n)| {
                            format!("{} {}", self.name(v), if n == 1 { "once".into() } else { format!("{n} times") })
                        })
                        .collect();
                    if !reads.is_empty() {
                        let _ = writeln!(out, ";   reads {} (per outer point, one pass per stage)", reads.join(", "));
                    }
                }
                (Unit::Library(v), _) => {
                    let _ = writeln!(out, "; {}: library call", names[&Unit::Library(v)]);
                }
                (Unit::Break(_), Step::Interp(c)) => {
                    let members: Vec<Value> = match u {
                        Unit::Break(i) => self.breaks[i].clone(),
                        _ => Vec::new(),
                    };
                    let _ = writeln!(
                        out,
                        "; {}: graph break over {}: {}",
                        names[&u],
                        list(&mut members.into_iter()),
                        c.reason
                    );
                }
                _ => {}
            }
        }
        if !self.mat.is_empty() {
            let _ = writeln!(out, "; materialised:");
            for (&v, why) in &self.mat {
                match self.alias.get(&v) {
                    Some(&a) => {
                        let _ = writeln!(
                            out,
                            ";   {}: {why}; it shares the buffer of {} (same elements, reshaped)",
                            self.name(v),
                            self.name(a)
                        );
                    }
                    None => {
                        let _ = writeln!(out, ";   {}: {why}", self.name(v));
                    }
                }
            }
        }
        // Why neighbouring steps were not fused.
        let mut lines = Vec::new();
        let producer_roots = |u: Unit| -> Vec<Value> {
            match u {
                Unit::Kernel(i) => self.groups[i].roots.clone(),
                Unit::Library(v) => vec![v],
                Unit::Break(i) => self.breaks[i].iter().copied().filter(|&m| self.is_break_result(m)).collect(),
            }
        };
        for &c in order {
            for &pu in &deps[&c] {
                let via: Vec<Value> = producer_roots(pu)
                    .into_iter()
                    .filter(|&r| match c {
                        Unit::Kernel(j) => self.groups[j].em.reads.contains_key(&self.storage(r).unwrap_or(r)),
                        Unit::Library(v) => self.g.node(v).args.iter().any(|&a| self.storage(a) == self.storage(r)),
                        Unit::Break(j) => self.breaks[j].iter().any(|&m| self.g.node(m).args.contains(&r)),
                    })
                    .collect();
                let why = match (pu, c) {
                    (Unit::Library(_), _) => "its producer is a library call".to_string(),
                    (Unit::Break(_), _) => "its producer is a graph break (run by the interpreter)".to_string(),
                    (_, Unit::Library(v)) => format!("{} is a library call", self.g.node(v).op),
                    (_, Unit::Break(_)) => "graph breaks read materialised inputs".to_string(),
                    (Unit::Kernel(i), Unit::Kernel(j)) => {
                        let why: Vec<String> = via.iter().filter_map(|v| self.mat.get(v).cloned()).collect();
                        let note = self
                            .merge_notes
                            .get(&(self.groups[i].roots[0], self.groups[j].roots[0]))
                            .map(|n| format!("; not merged: {n}"))
                            .unwrap_or_default();
                        format!("{}{note}", why.join("; "))
                    }
                };
                lines.push(format!(";   {} -> {} (via {}): {why}", names[&pu], names[&c], list(&mut via.into_iter())));
            }
        }
        if !lines.is_empty() {
            let _ = writeln!(out, "; not fused:");
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
        out
    }
}

/// For a pointwise kernel (one stage, no inner loops, no accumulators), moves the innermost
/// outer loop into the stage as its inner loop: the same points in the same order, but now
/// the loop backends vectorize (outer loops are for threads, inner loops for SIMD). Kernels
/// with reductions keep their shape: their stages already loop inside.
fn innermost_loop_inside(k: &mut crate::kernel::Kernel) {
    use crate::kernel::{Instr, Var};
    let [stage] = k.stages.as_mut_slice() else { return };
    if !stage.inner.is_empty() || !stage.accumulators.is_empty() {
        return;
    }
    let Some(extent) = k.outer.pop() else { return };
    let last = k.outer.len() as u32;
    stage.inner.push(extent);
    let move_var = |v: &mut Var| {
        if *v == Var::Outer(last) {
            *v = Var::Inner(0);
        }
    };
    for instr in &mut stage.body {
        match instr {
            Instr::Load { index, .. } | Instr::Store { index, .. } => {
                index.terms.iter_mut().for_each(|(v, _)| move_var(v));
            }
            Instr::LoopVar { var, .. } => move_var(var),
            _ => {}
        }
    }
}
