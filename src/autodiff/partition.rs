//! The partitioner: splits a joint graph ([`Joint`]) into a forward graph and a backward
//! graph, choosing which forward values the backward reads from memory (*saved*) and which it
//! computes again (*recomputed*).
//!
//! ## The cut
//!
//! As in PyTorch's AOTAutograd (`min_cut_rematerialization_partition`), the choice is a
//! minimum cut of a flow network built from the joint graph:
//!
//! - each value `v` the backward could read is split into `v_in -> v_out`, with the bytes a
//!   saved `v` costs as capacity; every use `v -> u` is an edge `v_out -> u_in` of infinite
//!   capacity;
//! - the *source* feeds every input (held by the caller for the whole step, so saving one is
//!   free: capacity 0) and every forward value whose recomputation is banned (a value only
//!   the backward needs is computed there once, whatever its op);
//! - every value that depends on the loss's cotangent ([`Joint::seed`]) is backward work and
//!   drains to the *sink*.
//!
//! Every path from the source to the sink must cross the cut, so the values cut (`v_in` on
//! the source side, `v_out` on the sink side) are enough for the backward to compute every
//! gradient, recomputing what lies between them and the backward's own nodes; a minimum cut
//! saves the fewest bytes. Of the minimum cuts, the one nearest the sink is taken: the same
//! bytes with the least recomputation (`maxflow::Network::min_cut`).
//!
//! ## What is never recomputed (the fusion-aware cost)
//!
//! Recomputing an elementwise or layout chain in the backward is nearly free: it fuses into
//! the backward kernel that reads its result, so it costs no memory traffic of its own. So
//! capacities are bytes only, and what is not nearly free is banned instead: `matmul` and
//! `conv` (their FLOPs), reductions that shrink their input by [`SHRINK_BAN`] or more (their
//! result is small to save and costly to recompute: a full pass over the input), and every
//! op above the prims (a library kernel kept whole: attention, `lstm`, pooling, softmax) but
//! the elementwise ones with a hand derivative (`super::HAND_RULES`: gelu). ladder has no
//! random ops; one would be banned as not repeatable.
//!
//! ## Overrides and baselines
//!
//! [`PartitionOptions::must_save`] forces a value to be saved; [`PartitionOptions::prefer_recompute`]
//! makes saving it cost [`PREFER_RECOMPUTE`] times its bytes, so it is saved only where
//! nothing else will do. [`Policy::SaveAll`] is AOTAutograd's default partition (the forward
//! computes what the forward outputs need and saves every such value the backward reads) and
//! [`Policy::RecomputeAll`] saves only inputs and values whose recomputation is banned; the
//! [`Report`] gives all three side by side.
//!
//! Byte counts of symbolic shapes use the sizes in [`PartitionOptions::dims`], and
//! [`PartitionOptions::symbol_hint`] for other symbols.

use std::collections::HashSet;

use cranelift_entity::EntityRef;

use super::maxflow::{Network, INF};
use super::{AdError, Joint};
use crate::ir::verify::{verify, Stage};
use crate::ir::{Graph, Value};
use crate::ops::{OpKind, Rung};
use crate::passes::rewrite::Rewriter;

/// A reduction whose input has at least this many times its result's elements is not
/// recomputed.
pub const SHRINK_BAN: u64 = 4;

/// How much more a [`PartitionOptions::prefer_recompute`] value costs to save, per byte.
pub const PREFER_RECOMPUTE: u64 = 1 << 20;

/// Which partition to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// The minimum cut (see the module docs).
    #[default]
    MinCut,
    /// Save every value the forward outputs need that the backward reads; recompute nothing
    /// the forward computed.
    SaveAll,
    /// Save only inputs and values whose recomputation is banned; recompute the rest.
    RecomputeAll,
}

impl Policy {
    pub const NAMES: [&'static str; 3] = ["min-cut", "save-all", "recompute-all"];

    pub fn name(self) -> &'static str {
        match self {
            Policy::MinCut => "min-cut",
            Policy::SaveAll => "save-all",
            Policy::RecomputeAll => "recompute-all",
        }
    }

    pub fn from_name(name: &str) -> Option<Policy> {
        [Policy::MinCut, Policy::SaveAll, Policy::RecomputeAll].into_iter().find(|p| p.name() == name)
    }
}

/// How to partition.
#[derive(Clone, Debug)]
pub struct PartitionOptions {
    pub policy: Policy,
    /// Values (by name) that must be saved (one the backward does not read, or that depends
    /// on the loss's cotangent, is not: there is nothing to save).
    pub must_save: Vec<String>,
    /// Values (by name) to recompute wherever anything else can be saved instead.
    pub prefer_recompute: Vec<String>,
    /// Sizes of symbols, for byte and FLOP counts.
    pub dims: Vec<(String, u64)>,
    /// The size of a symbol not in `dims`.
    pub symbol_hint: u64,
}

impl Default for PartitionOptions {
    fn default() -> PartitionOptions {
        PartitionOptions {
            policy: Policy::MinCut,
            must_save: Vec::new(),
            prefer_recompute: Vec::new(),
            dims: Vec::new(),
            symbol_hint: 64,
        }
    }
}

/// Why a value was saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// An input: the caller holds it for the whole step.
    Input,
    /// Its op is not recomputed (see the module docs).
    Banned(String),
    /// [`PartitionOptions::must_save`].
    Asked,
    /// Saving it is cheaper than what recomputing it would need saved instead: `frontier`
    /// (the nearest inputs and banned values above it, `frontier_bytes` of them not inputs).
    Cheaper { frontier: Vec<String>, frontier_bytes: u64 },
    /// The policy saves it ([`Policy::SaveAll`]).
    Policy,
    /// An input the backward reads only for the size of this symbol (runs bind symbols from
    /// their inputs' dims).
    Symbol(String),
}

/// A saved value.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The value in the joint graph.
    pub value: Value,
    /// Its name as a forward output and backward input (an input keeps its own name).
    pub name: String,
    pub bytes: u64,
    pub is_input: bool,
    pub why: Why,
}

/// The cost of one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Saved values that are not inputs, and their bytes.
    pub saved_values: usize,
    pub saved_bytes: u64,
    /// Inputs the backward reads (free: the caller holds them).
    pub saved_inputs: usize,
    /// Forward values the backward computes again, and their FLOPs.
    pub recomputed_values: usize,
    pub recompute_flops: u64,
}

/// The chosen partition's costs beside the two baselines'.
#[derive(Clone, Debug)]
pub struct Report {
    pub policy: Policy,
    pub chosen: Costs,
    pub save_all: Costs,
    pub recompute_all: Costs,
}

/// A joint graph split in two.
#[derive(Clone, Debug)]
pub struct Partition {
    /// Inputs: the joint graph's. Outputs: the joint graph's forward outputs, then the saved
    /// values that are not inputs (named as in [`Saved::name`]).
    pub forward: Graph,
    /// Inputs: the saved inputs (their own names), then the forward's saved outputs in order.
    /// Outputs: the gradients, named as in the joint graph.
    pub backward: Graph,
    /// Every saved value, inputs first, then in the order of the forward's saved outputs.
    pub saved: Vec<Saved>,
    /// Forward values the backward computes again (joint-graph values).
    pub recomputed: Vec<Value>,
    pub report: Report,
}

impl Partition {
    /// One line per saved value and a summary of the recomputed ones: why each was saved.
    pub fn explain(&self, joint: &Joint) -> String {
        let g = &joint.graph;
        let mut s = String::new();
        let r = &self.report;
        let values = |n: usize| if n == 1 { "1 value".to_string() } else { format!("{n} values") };
        s.push_str(&format!(
            "; partition ({}): {} saved ({} bytes) and {} of the inputs; {} recomputed ({} FLOPs)\n",
            r.policy.name(),
            values(r.chosen.saved_values),
            r.chosen.saved_bytes,
            r.chosen.saved_inputs,
            values(r.chosen.recomputed_values),
            r.chosen.recompute_flops
        ));
        for (name, c) in [("save-all", r.save_all), ("recompute-all", r.recompute_all)] {
            s.push_str(&format!(
                ";   {name}: {} saved ({} bytes), {} recomputed ({} FLOPs)\n",
                values(c.saved_values),
                c.saved_bytes,
                values(c.recomputed_values),
                c.recompute_flops
            ));
        }
        for sv in &self.saved {
            let why = match &sv.why {
                Why::Input => "an input: the caller holds it".to_string(),
                Why::Banned(op) => format!("`{op}` is not recomputed"),
                Why::Asked => "asked for (must save)".to_string(),
                Why::Policy => "the policy saves what the backward reads".to_string(),
                Why::Symbol(sym) => format!("an input: the backward's shapes need the size `{sym}`"),
                Why::Cheaper { frontier, frontier_bytes } => format!(
                    "cheaper than recomputing it from {} ({} bytes to save)",
                    if frontier.is_empty() { "constants".to_string() } else { frontier.join(", ") },
                    frontier_bytes
                ),
            };
            s.push_str(&format!("; saved {} = {} ({} bytes): {why}\n", sv.name, g.display_value(sv.value), sv.bytes));
        }
        if !self.recomputed.is_empty() {
            let names: Vec<String> = self.recomputed.iter().map(|&v| g.display_value(v)).collect();
            s.push_str(&format!("; recomputed: {}\n", names.join(", ")));
        }
        s
    }
}

/// Per-value facts about a joint graph the policies share.
struct Facts<'a> {
    g: &'a Graph,
    /// Depends on the loss's cotangent: backward work.
    tangent: Vec<bool>,
    /// Needed by a forward output.
    forward: Vec<bool>,
    /// The users of each value.
    users: Vec<Vec<Value>>,
    bytes: Vec<u64>,
    flops: Vec<u64>,
    /// Why recomputing the value is banned, if it is.
    banned: Vec<Option<String>>,
    is_input: Vec<bool>,
    /// Computed from no input (constants, `full`, `iota` and what they feed): free to
    /// compute anywhere, never saved.
    constant: Vec<bool>,
}

impl<'a> Facts<'a> {
    fn new(joint: &'a Joint, options: &PartitionOptions) -> Facts<'a> {
        let g = &joint.graph;
        let n = g.len();
        let mut tangent = vec![false; n];
        let mut users = vec![Vec::new(); n];
        for (v, node) in g.nodes() {
            for &a in &node.args {
                users[a.index()].push(v);
            }
            tangent[v.index()] = Some(v) == joint.seed || node.args.iter().any(|a| tangent[a.index()]);
        }
        let mut forward = vec![false; n];
        for o in &g.outputs()[..joint.n_forward] {
            forward[o.value.index()] = true;
        }
        for v in g.values().collect::<Vec<_>>().into_iter().rev() {
            if forward[v.index()] {
                for &a in &g.node(v).args {
                    forward[a.index()] = true;
                }
            }
        }
        let lookup = |s: &str| Some(options.dims.iter().find(|(n, _)| n == s).map_or(options.symbol_hint, |d| d.1));
        let numel = |v: Value| -> u64 {
            g.ty(v).shape.dims().iter().fold(1u64, |acc, d| acc.saturating_mul(d.eval(&lookup).unwrap_or(u64::MAX)))
        };
        let mut bytes = vec![0; n];
        let mut flops = vec![0; n];
        let mut banned = vec![None; n];
        let mut is_input = vec![false; n];
        for (v, node) in g.nodes() {
            let out = numel(v);
            bytes[v.index()] = out.saturating_mul(node.ty.dtype.size_bytes() as u64);
            is_input[v.index()] = node.op == OpKind::Input;
            let first = node.args.first().map_or(0, |&a| numel(a));
            flops[v.index()] = match node.op {
                OpKind::Matmul => {
                    let k = node
                        .args
                        .first()
                        .and_then(|&a| g.ty(a).shape.dims().last())
                        .map_or(1, |d| d.eval(&lookup).unwrap_or(u64::MAX));
                    out.saturating_mul(k).saturating_mul(2)
                }
                OpKind::Conv => {
                    // Each output element reads one weight row (C_in / groups × kernel).
                    let w = node.args.get(1).map_or(0, |&w| numel(w));
                    let c_out = node
                        .args
                        .get(1)
                        .and_then(|&w| g.ty(w).shape.dims().first())
                        .map_or(1, |d| d.eval(&lookup).unwrap_or(1).max(1));
                    out.saturating_mul(w / c_out).saturating_mul(2)
                }
                OpKind::Input | OpKind::Const => 0,
                _ => out.max(first),
            };
            banned[v.index()] = match node.op {
                OpKind::Input | OpKind::Const => None,
                OpKind::Matmul | OpKind::Conv => Some(node.op.name().to_string()),
                OpKind::ReduceSum
                | OpKind::ReduceProd
                | OpKind::ReduceMax
                | OpKind::ReduceMin
                | OpKind::ReduceArgmax
                    if first >= out.saturating_mul(SHRINK_BAN) =>
                {
                    Some(format!("{} (shrinks {first} elements to {out})", node.op.name()))
                }
                op if op.rung() != Rung::Prim
                    && !(super::HAND_RULES.contains(&op) && crate::ops::library::is_activation(op)) =>
                {
                    Some(op.name().to_string())
                }
                _ => None,
            };
        }
        let mut constant = vec![false; n];
        for (v, node) in g.nodes() {
            constant[v.index()] = node.op != OpKind::Input && node.args.iter().all(|a| constant[a.index()]);
        }
        Facts { g, tangent, forward, users, bytes, flops, banned, is_input, constant }
    }

    /// Values the backward reads or recomputes: non-tangent values some tangent value (or a
    /// gradient output) reaches through non-tangent values.
    fn backward_needs(&self, joint: &Joint) -> Vec<bool> {
        let mut needed = vec![false; self.g.len()];
        for o in &self.g.outputs()[joint.n_forward..] {
            needed[o.value.index()] = true;
        }
        for v in self.g.values().collect::<Vec<_>>().into_iter().rev() {
            if needed[v.index()] || self.tangent[v.index()] {
                needed[v.index()] = true;
                for &a in &self.g.node(v).args {
                    needed[a.index()] = true;
                }
            }
        }
        needed
    }
}

/// A plan: which joint values are saved.
fn plan(joint: &Joint, facts: &Facts, options: &PartitionOptions, policy: Policy) -> Result<Vec<bool>, AdError> {
    let g = facts.g;
    let n = g.len();
    let needed = facts.backward_needs(joint);
    let by_name = |names: &[String]| -> Result<HashSet<usize>, AdError> {
        names
            .iter()
            .map(|name| g.value_by_name(name).map(|v| v.index()).ok_or_else(|| AdError::NoSuchValue(name.clone())))
            .collect()
    };
    let must = by_name(&options.must_save)?;
    let prefer = by_name(&options.prefer_recompute)?;
    // Candidates: non-tangent values the backward needs.
    let candidate = |i: usize| needed[i] && !facts.tangent[i] && !facts.constant[i];
    let mut saved = vec![false; n];
    match policy {
        Policy::SaveAll => {
            // Forward values (and inputs) read by a backward node.
            for (v, node) in g.nodes() {
                if facts.forward[v.index()] || !needed[v.index()] {
                    continue;
                }
                for &a in &node.args {
                    if (facts.forward[a.index()] || facts.is_input[a.index()]) && !facts.constant[a.index()] {
                        saved[a.index()] = true;
                    }
                }
            }
            for o in &g.outputs()[joint.n_forward..] {
                let i = o.value.index();
                if (facts.forward[i] || facts.is_input[i]) && !facts.constant[i] {
                    saved[i] = true;
                }
            }
        }
        Policy::RecomputeAll => {
            // Walk up from the backward through recomputable values; save where it stops.
            for v in g.values().collect::<Vec<_>>().into_iter().rev() {
                let i = v.index();
                let stop = facts.is_input[i] || (facts.banned[i].is_some() && facts.forward[i]) || must.contains(&i);
                if candidate(i) && stop {
                    saved[i] = true;
                }
            }
            // Of these, `backward_values` keeps the ones the backward reads.
        }
        Policy::MinCut => {
            let mut net = Network::new(2 * n + 2);
            let (source, sink) = (2 * n, 2 * n + 1);
            let (vin, vout) = (|i: usize| 2 * i, |i: usize| 2 * i + 1);
            let mut caps = vec![0u64; n];
            // Capacities are `bytes * scale + 1`: with `scale` above the number of values, a
            // cut of fewer bytes always costs less, whatever the number of values.
            let scale = n as u64 + 1;
            for v in g.values() {
                let i = v.index();
                // Constants are computed wherever they are read: not in the network.
                if !needed[i] || facts.constant[i] {
                    continue;
                }
                if facts.tangent[i] {
                    net.add_edge(vin(i), sink, INF);
                    continue;
                }
                let cap = if facts.is_input[i] {
                    0
                } else if prefer.contains(&i) {
                    facts.bytes[i].saturating_mul(scale).saturating_mul(PREFER_RECOMPUTE).max(1)
                } else {
                    // Bytes first; of two cuts of equal bytes, the one of fewer values.
                    facts.bytes[i].saturating_mul(scale).saturating_add(1)
                };
                net.add_edge(vin(i), vout(i), cap);
                caps[i] = cap;
                if facts.is_input[i] || (facts.banned[i].is_some() && facts.forward[i]) || must.contains(&i) {
                    net.add_edge(source, vin(i), INF);
                }
                if must.contains(&i) {
                    net.add_edge(vout(i), sink, INF);
                }
                for &u in &facts.users[i] {
                    if needed[u.index()] {
                        net.add_edge(vout(i), vin(u.index()), INF);
                    }
                }
                if g.outputs()[joint.n_forward..].iter().any(|o| o.value == v) {
                    // A gradient that is a forward value (an input's own gradient passing
                    // through) must reach the backward.
                    net.add_edge(vout(i), sink, INF);
                }
            }
            let cut = net.min_cut(source, sink);
            let mut capacity = 0u64;
            for i in 0..n {
                saved[i] = candidate(i) && cut.source_side[vin(i)] && !cut.source_side[vout(i)];
                if saved[i] {
                    capacity = capacity.saturating_add(caps[i]);
                }
            }
            // The values cut are exactly the cut's finite edges.
            debug_assert!(cut.flow >= INF || capacity == cut.flow, "cut {capacity} against flow {}", cut.flow);
        }
    }
    for &i in &must {
        if candidate(i) {
            saved[i] = true;
        }
    }
    Ok(saved)
}

/// The values the backward computes, given what is saved: (tangent and recomputed values,
/// in joint order), and the saved values it reads.
fn backward_values(joint: &Joint, facts: &Facts, saved: &[bool]) -> (Vec<Value>, Vec<bool>) {
    let g = facts.g;
    let mut live = vec![false; g.len()];
    let mut reads = vec![false; g.len()];
    for o in &g.outputs()[joint.n_forward..] {
        if saved[o.value.index()] {
            reads[o.value.index()] = true;
        } else {
            live[o.value.index()] = true;
        }
    }
    let values: Vec<Value> = g.values().collect();
    for &v in values.iter().rev() {
        if !live[v.index()] {
            continue;
        }
        for &a in &g.node(v).args {
            if saved[a.index()] {
                reads[a.index()] = true;
            } else {
                live[a.index()] = true;
            }
        }
    }
    (values.into_iter().filter(|v| live[v.index()]).collect(), reads)
}

/// The values the forward computes: what its outputs and the saved values need.
fn forward_values(joint: &Joint, facts: &Facts, saved: &[bool], reads: &[bool]) -> Vec<bool> {
    let g = facts.g;
    let mut live = vec![false; g.len()];
    for o in &g.outputs()[..joint.n_forward] {
        live[o.value.index()] = true;
    }
    for i in 0..g.len() {
        live[i] |= saved[i] && reads[i];
    }
    for v in g.values().collect::<Vec<_>>().into_iter().rev() {
        if live[v.index()] {
            for &a in &g.node(v).args {
                live[a.index()] = true;
            }
        }
    }
    live
}

/// Values both passes compute: the backward's recomputation (constants and inputs aside).
fn recomputed(facts: &Facts, computed: &[Value], in_forward: &[bool]) -> Vec<Value> {
    computed
        .iter()
        .copied()
        .filter(|&v| in_forward[v.index()] && !facts.is_input[v.index()] && !facts.constant[v.index()])
        .collect()
}

fn costs(facts: &Facts, saved: &[bool], recomputed: &[Value], reads: &[bool]) -> Costs {
    let mut c = Costs::default();
    for i in 0..saved.len() {
        if !(saved[i] && reads[i]) {
            continue;
        }
        if facts.is_input[i] {
            c.saved_inputs += 1;
        } else {
            c.saved_values += 1;
            c.saved_bytes = c.saved_bytes.saturating_add(facts.bytes[i]);
        }
    }
    c.recomputed_values = recomputed.len();
    c.recompute_flops = recomputed.iter().fold(0u64, |acc, v| acc.saturating_add(facts.flops[v.index()]));
    c
}

/// One policy's plan: what is saved, what the backward computes (joint order), which saved
/// values it reads, what it recomputes, and the costs.
struct Evaluated {
    saved: Vec<bool>,
    computed: Vec<Value>,
    reads: Vec<bool>,
    /// What the forward computes (its outputs' and the saved values' ancestors).
    in_forward: Vec<bool>,
    again: Vec<Value>,
    costs: Costs,
}

/// Splits `joint` as `options` say (see the module docs).
pub fn partition(joint: &Joint, options: &PartitionOptions) -> Result<Partition, AdError> {
    let facts = Facts::new(joint, options);
    let g = &joint.graph;
    let evaluate = |policy: Policy| -> Result<Evaluated, AdError> {
        let saved = plan(joint, &facts, options, policy)?;
        let (computed, reads) = backward_values(joint, &facts, &saved);
        let in_forward = forward_values(joint, &facts, &saved, &reads);
        let again = recomputed(&facts, &computed, &in_forward);
        let costs = costs(&facts, &saved, &again, &reads);
        Ok(Evaluated { saved, computed, reads, in_forward, again, costs })
    };
    let Evaluated { saved, computed, reads, in_forward, again, costs: chosen } = evaluate(options.policy)?;
    let save_all = evaluate(Policy::SaveAll)?.costs;
    let recompute_all = evaluate(Policy::RecomputeAll)?.costs;
    let must: HashSet<&str> = options.must_save.iter().map(String::as_str).collect();

    // The saved values: inputs first, then the rest in joint order.
    let mut list: Vec<Saved> = Vec::new();
    let mut taken: HashSet<String> = (0..g.inputs().len()).map(|i| g.input_name(i)).collect();
    taken.extend(g.outputs().iter().map(|o| o.name.clone()));
    for pass_inputs in [true, false] {
        for v in g.values() {
            let i = v.index();
            if !(saved[i] && reads[i]) || facts.is_input[i] != pass_inputs {
                continue;
            }
            let name = if facts.is_input[i] {
                g.input_name(g.inputs().iter().position(|&x| x == v).unwrap_or(0))
            } else {
                let base = format!("saved_{}", g.name_of(v).map_or_else(|| v.index().to_string(), str::to_string));
                let name = super::unique_name(g, &base, |_, n| taken.contains(n));
                taken.insert(name.clone());
                name
            };
            let why = if facts.is_input[i] {
                Why::Input
            } else if g.name_of(v).is_some_and(|n| must.contains(n)) {
                Why::Asked
            } else if let (Some(op), true) = (&facts.banned[i], facts.forward[i]) {
                Why::Banned(op.clone())
            } else if options.policy == Policy::SaveAll {
                Why::Policy
            } else {
                let (frontier, frontier_bytes) = frontier(&facts, v);
                Why::Cheaper { frontier, frontier_bytes }
            };
            list.push(Saved { value: v, name, bytes: facts.bytes[i], is_input: facts.is_input[i], why });
        }
    }

    bind_symbols(&facts, &mut list, &computed);
    let forward = forward_graph(joint, &list, &in_forward)?;
    let backward = backward_graph(joint, &list, &computed)?;
    let stage = if verify(g, Stage::Prims).is_ok() { Stage::Prims } else { Stage::Recovered };
    verify(&forward, stage).map_err(AdError::Invalid)?;
    verify(&backward, stage).map_err(AdError::Invalid)?;
    Ok(Partition {
        forward,
        backward,
        saved: list,
        recomputed: again,
        report: Report { policy: options.policy, chosen, save_all, recompute_all },
    })
}

/// Adds to `saved` an input for each symbol the backward's values use that no saved value's
/// shape binds (a run binds symbols from its inputs' dims), and puts the inputs first in
/// input order.
fn bind_symbols(facts: &Facts, saved: &mut Vec<Saved>, computed: &[Value]) {
    let g = facts.g;
    let mut bound: HashSet<String> = HashSet::new();
    for s in saved.iter() {
        bound.extend(g.ty(s.value).shape.dims().iter().filter_map(|d| d.as_symbol()).map(|s| s.to_string()));
    }
    let mut needed: Vec<String> = Vec::new();
    for &v in computed.iter().chain(saved.iter().map(|s| &s.value)) {
        for d in g.ty(v).shape.dims() {
            for sym in d.symbols() {
                let sym = sym.to_string();
                if !bound.contains(&sym) && !needed.contains(&sym) {
                    needed.push(sym);
                }
            }
        }
    }
    for sym in needed {
        if bound.contains(&sym) {
            continue;
        }
        let carrier =
            g.inputs().iter().enumerate().find(|(_, &x)| {
                g.ty(x).shape.dims().iter().any(|d| d.as_symbol().is_some_and(|s| s.to_string() == sym))
            });
        if let Some((i, &x)) = carrier {
            bound.extend(g.ty(x).shape.dims().iter().filter_map(|d| d.as_symbol()).map(|s| s.to_string()));
            saved.push(Saved {
                value: x,
                name: g.input_name(i),
                bytes: facts.bytes[x.index()],
                is_input: true,
                why: Why::Symbol(sym),
            });
        }
    }
    saved.sort_by_key(|s| (!s.is_input, s.value.index()));
}

/// The nearest inputs and banned values above `v` through recomputable values, and the bytes
/// of those that are not inputs.
fn frontier(facts: &Facts, v: Value) -> (Vec<String>, u64) {
    let g = facts.g;
    let mut seen = HashSet::new();
    let mut stack: Vec<Value> = g.node(v).args.to_vec();
    let (mut names, mut bytes) = (Vec::new(), 0u64);
    while let Some(a) = stack.pop() {
        if !seen.insert(a) {
            continue;
        }
        let i = a.index();
        if facts.is_input[i] || (facts.banned[i].is_some() && facts.forward[i]) {
            names.push(g.display_value(a));
            if !facts.is_input[i] {
                bytes = bytes.saturating_add(facts.bytes[i]);
            }
        } else {
            stack.extend(g.node(a).args.iter().copied());
        }
    }
    names.sort();
    (names, bytes)
}

/// The forward graph: the joint graph's forward outputs and the saved values that are not
/// inputs, computed from the inputs; `live` is what it computes (`forward_values`).
fn forward_graph(joint: &Joint, saved: &[Saved], live: &[bool]) -> Result<Graph, AdError> {
    let g = &joint.graph;
    let mut rw = Rewriter::new(g);
    rw.new.name = format!("{}_forward", g.name);
    let values: Vec<Value> = g.values().collect();
    for &v in &values {
        if live[v.index()] && g.node(v).op != OpKind::Input {
            rw.copy(v)?;
        }
    }
    let outputs: Vec<(&str, Value)> = g.outputs()[..joint.n_forward]
        .iter()
        .map(|o| (o.name.as_str(), rw.get(o.value)))
        .chain(saved.iter().filter(|s| !s.is_input).map(|s| (s.name.as_str(), rw.get(s.value))))
        .collect();
    let mut out = rw.new;
    for (name, v) in outputs {
        out.add_output(name, v)?;
    }
    Ok(crate::passes::eliminate_dead_code(&out)?)
}

/// The backward graph: the gradients from the saved values, computing `computed` (joint
/// order).
fn backward_graph(joint: &Joint, saved: &[Saved], computed: &[Value]) -> Result<Graph, AdError> {
    let g = &joint.graph;
    let mut rw = Rewriter::without_inputs(g);
    rw.new.name = format!("{}_backward", g.name);
    for s in saved {
        rw.add_input(s.value, &s.name)?;
    }
    for &v in computed {
        if g.node(v).op == OpKind::Input {
            // Every input the backward reads is saved (free): one that is not is a bug here.
            return Err(AdError::Unsaved(g.display_value(v)));
        }
        rw.copy(v)?;
    }
    let outputs: Vec<(&str, Value)> =
        g.outputs()[joint.n_forward..].iter().map(|o| (o.name.as_str(), rw.get(o.value))).collect();
    let mut out = rw.new;
    for (name, v) in outputs {
        out.add_output(name, v)?;
    }
    Ok(crate::passes::eliminate_dead_code(&out)?)
}
