//! Recovery: finding, in a simplified prims graph, the clusters that were a high-level op a
//! library kernel runs better than the scheduler's generated loops, and putting the op back.
//!
//! Decomposition exposes structure (fusion, simplification and the backends only see prims);
//! recovery is the other direction, for the structures a hand-written kernel already solves
//! (a softmax row, a layer norm, gelu). It runs after `simplify`, on the `Recovered` rung:
//! prims plus the ops in [`recoverable`], which the scheduler turns into library calls.
//!
//! ## How a rule matches
//!
//! A [`Rule`] names the op it recovers and a *form*: the op applied to arguments of given
//! types, lowered by the pipeline itself (functionalize, decompose, simplify) into a small
//! prims graph. A match is a node whose cone in the model is that prims graph, node for
//! node: same ops, same attributes, same types, same constants, with the form's inputs bound
//! consistently to values of the model (the op's arguments, found by the comparison). So a
//! rule says exactly what it recovers, cannot drift from the decomposition it inverts, and a
//! new decomposition of an op changes its rule with it. A float attribute the form cannot
//! know in advance (layer_norm's `eps`) is built as a sentinel, read off the model where the
//! sentinel sits, and the match is then checked again with the value found.
//!
//! Each rule has an *anchor*: a cheap test of a node (its op, and the path to the main
//! argument `x`) that proposes where to compare. Candidates that pass the anchor and fail the
//! comparison or a side condition are *near-misses*, reported with the reason
//! (`ladder dump MODEL --stage recovered --explain`).
//!
//! A form may take an argument through a `permute` (an exporter's transposed keys): the
//! model's own `permute` there (simplify composes a chain of them into one) binds the argument
//! to the model value under the composed permutation, which the rewrite emits before the op
//! (or an existing `permute` of that value with that permutation is used). A layout op stands
//! in for a layout op, so no work is added.
//!
//! Side conditions: the library kernels take f32 rows over the last axis, so a form is built
//! for `axis = -1` and f32 only. A matched cluster whose inner values (other than cheap
//! sources, layout ops, `abs` and `neg`) are also used outside it is a near-miss: recovering it would
//! compute those values twice.
//!
//! `add` and `mul` commute: where the arguments do not match in order, they are compared
//! swapped (exporters write `0.5 * x` and `x * 0.5` alike), after undoing what the first
//! attempt bound. The swapped order is tried only when the ops of the arguments allow it.
//!
//! Matching is deterministic (nodes in order, rules in order) and bounded: a comparison
//! evaluates at most [`MAX_STEPS`] (form node, model node) pairs (each at most once, but for
//! pairs undone with a failed argument order), forms are built once per rule, variant and
//! argument type, and at most [`MAX_CANDIDATES`] candidates are compared.

mod activation;
mod attention;
mod mode;
mod norm;

pub use mode::Mode;

use std::collections::HashMap;
use std::fmt::Write;

use crate::ir::verify::{verify, Stage};
use cranelift_entity::EntityRef;

use crate::ir::{AttrValue, Attrs, DType, Graph, TensorType, Value};
use crate::ops::OpKind;
use crate::passes::rewrite::Rewriter;
use crate::passes::LowerError;

pub use crate::ops::library::{is_activation, is_library_op, kept, recoverable};

/// The most candidates one graph's recovery compares.
pub const MAX_CANDIDATES: usize = 10_000;

/// The most (form node, model node) pairs one comparison evaluates.
pub const MAX_STEPS: usize = 4096;

/// Reads the types of an op's other arguments off the model at a root (see [`Rule`]).
pub type ArgTypes = fn(&Graph, Value) -> Result<Vec<TensorType>, String>;

/// Whether a library kernel pays at a match with main argument `x` (see [`Rule::worth`]).
pub type Worth = fn(&Graph, Value) -> Result<(), String>;

/// Builds a form's text from the argument types and attribute values (see [`Variant`]).
pub type Template = fn(&[TensorType], &[(&'static str, AttrValue)]) -> String;

/// One way a rule's op can appear: the types of its arguments after `x` (derived from x's
/// type) and its attributes.
pub struct Variant {
    pub extra_args: Vec<TensorType>,
    pub attrs: Vec<(&'static str, AttrValue)>,
    /// A float attribute read off the model (built with [`SENTINEL`] first).
    pub infer: Option<&'static str>,
    /// The form as a graph in the text form instead of the op itself: how an exporter writes
    /// the op (ONNX's `Div`/`Erf`/`Add`/`Mul` GELU, say), as ladder imports it. It gets the
    /// argument types and the attribute values (the inferred one as [`SENTINEL`] first) and
    /// returns the text; its inputs are the op's arguments, in order, and its one output the
    /// op's result.
    pub template: Option<Template>,
}

/// A recovery rule.
pub struct Rule {
    pub name: &'static str,
    pub op: OpKind,
    /// The structure it recovers, for reports.
    pub structure: &'static str,
    /// The main argument `x` of a match rooted at this node, if the node can be a root.
    pub anchor: fn(&Graph, Value) -> Option<Value>,
    /// The forms to compare for an `x` of this type, or why none applies (a near-miss).
    pub variants: fn(&TensorType) -> Result<Vec<Variant>, String>,
    /// The types of the op's arguments after `x`, read from the model at the root, for ops
    /// whose other arguments' types do not follow from `x`'s (attention's k and v); they
    /// replace each variant's `extra_args`. An error is a near-miss.
    pub arg_types: Option<ArgTypes>,
    /// Whether the library kernel pays at a match with main argument `x`, or why not (a
    /// near-miss): for activations whose prims fuse into their neighbours' loops.
    pub worth: Option<Worth>,
}

/// The value a form is built with for an attribute [`Variant::infer`] reads off the model.
pub const SENTINEL: f64 = 0.012_345_678_9;

/// Every rule, in the order they are tried at a node.
pub fn rules() -> Vec<Rule> {
    let mut r = norm::rules();
    r.extend(activation::rules());
    r.extend(attention::rules());
    r
}

/// A recovered cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    pub rule: &'static str,
    pub op: OpKind,
    /// The model value the cluster computed (now the recovered op's result).
    pub root: Value,
    pub args: Vec<Value>,
    /// Per argument, a permutation the rewrite applies to the model value first (an argument
    /// the form takes through a `permute`, see the module docs); `None` for the value itself.
    pub layout: Vec<Option<Vec<i64>>>,
    pub attrs: Vec<(String, AttrValue)>,
    /// Prims nodes the cluster had.
    pub nodes: usize,
}

/// A candidate that did not match, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct NearMiss {
    pub rule: &'static str,
    pub root: Value,
    pub reason: String,
}

/// The result of [`recover`].
#[derive(Clone, Debug)]
pub struct Recovered {
    /// The graph with every match replaced by its op (verifies at the `Recovered` rung).
    pub graph: Graph,
    pub matches: Vec<Match>,
    pub near_misses: Vec<NearMiss>,
}

impl Recovered {
    /// The `--explain` text: every match and near-miss, with values named as in the input.
    pub fn explain(&self, g: &Graph) -> String {
        let name = |v: Value| g.name_of(v).map_or_else(|| v.to_string(), |n| format!("%{n}"));
        let mut out = String::new();
        let _ = writeln!(out, "; recovery: {} match(es), {} near-miss(es)", self.matches.len(), self.near_misses.len());
        for m in &self.matches {
            let args: Vec<String> = m
                .args
                .iter()
                .zip(&m.layout)
                .map(|(&a, p)| match p {
                    None => name(a),
                    Some(p) => format!("permute({}, {p:?})", name(a)),
                })
                .collect();
            let attrs: Vec<String> = m.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(
                out,
                ";   {} = {}({}) {{{}}}: rule `{}`, {} prims",
                name(m.root),
                m.op,
                args.join(", "),
                attrs.join(", "),
                m.rule,
                m.nodes
            );
        }
        for n in &self.near_misses {
            let _ = writeln!(out, ";   near-miss at {}: rule `{}`: {}", name(n.root), n.rule, n.reason);
        }
        out
    }
}

/// Recovers every rule's op in `g` (a simplified prims graph).
pub fn recover(g: &Graph) -> Result<Recovered, LowerError> {
    recover_only(g, recoverable())
}

/// Recovers the ops of `ops` in `g` (a simplified prims graph): the rules for other ops are
/// not tried (a backend without kernels for them leaves their prims to its generated code).
pub fn recover_only(g: &Graph, ops: &[OpKind]) -> Result<Recovered, LowerError> {
    let rules: Vec<Rule> = rules().into_iter().filter(|r| ops.contains(&r.op)).collect();
    let users = users(g);
    let mut forms: HashMap<String, Option<Graph>> = HashMap::new();
    let mut matches = Vec::new();
    let mut near_misses = Vec::new();
    let mut taken = vec![false; g.len()];
    let mut candidates = 0usize;
    // Later nodes first: a cluster's root comes after its inner nodes, and a match marks its
    // nodes taken so that no two matches overlap.
    let values: Vec<Value> = g.nodes().map(|(v, _)| v).collect();
    for &root in values.iter().rev() {
        if taken[root.index()] {
            continue;
        }
        for rule in &rules {
            let Some(x) = (rule.anchor)(g, root) else { continue };
            candidates += 1;
            if candidates > MAX_CANDIDATES {
                break;
            }
            match try_rule(g, &users, rule, root, x, &mut forms) {
                Ok(m) => {
                    for &v in &m.cone {
                        taken[v.index()] = true;
                    }
                    matches.push(m.found);
                    break;
                }
                Err(reason) => near_misses.push(NearMiss { rule: rule.name, root, reason }),
            }
        }
    }
    matches.reverse();
    near_misses.reverse();
    let graph = rewrite(g, &matches)?;
    verify(&graph, Stage::Recovered).map_err(|errors| LowerError::Invalid { pass: "recover", errors })?;
    Ok(Recovered { graph, matches, near_misses })
}

struct Found {
    found: Match,
    cone: Vec<Value>,
}

fn users(g: &Graph) -> Vec<Vec<Value>> {
    let mut u = vec![Vec::new(); g.len()];
    for (v, node) in g.nodes() {
        for &a in &node.args {
            if !u[a.index()].contains(&v) {
                u[a.index()].push(v);
            }
        }
    }
    u
}

/// The form of `op` on arguments of these types, in simplified prims (cached).
fn form<'f>(
    cache: &'f mut HashMap<String, Option<Graph>>,
    op: OpKind,
    types: &[TensorType],
    attrs: &[(&'static str, AttrValue)],
    template: Option<Template>,
) -> Option<&'f Graph> {
    if let Some(text) = template.map(|t| t(types, attrs)) {
        return cache
            .entry(format!("template|{text}"))
            .or_insert_with(|| {
                let t = crate::text::parse(&text).ok()?;
                crate::passes::lower(&t).ok().map(|l| l.simplified)
            })
            .as_ref();
    }
    let key = format!("{op}|{types:?}|{attrs:?}");
    cache
        .entry(key)
        .or_insert_with(|| {
            let mut t = Graph::new("form");
            let args: Vec<Value> = types
                .iter()
                .enumerate()
                .map(|(i, ty)| t.add_input(&format!("a{i}"), ty.clone()).ok())
                .collect::<Option<_>>()?;
            let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
            let attrs = Attrs::resolve(op.spec().attrs, given).ok()?;
            let y = t.add_node(op, &args, attrs).ok()?;
            t.add_output("y", y).ok()?;
            crate::passes::lower(&t).ok().map(|l| l.simplified)
        })
        .as_ref()
}

fn try_rule(
    g: &Graph,
    users: &[Vec<Value>],
    rule: &Rule,
    root: Value,
    x: Value,
    cache: &mut HashMap<String, Option<Graph>>,
) -> Result<Found, String> {
    let xty = g.ty(x).clone();
    let variants = (rule.variants)(&xty)?;
    if let Some(worth) = rule.worth {
        worth(g, x)?;
    }
    let arg_types = match rule.arg_types {
        Some(f) => Some(f(g, root)?),
        None => None,
    };
    let mut first_reason = None;
    for variant in &variants {
        let mut types = vec![xty.clone()];
        types.extend(arg_types.as_ref().unwrap_or(&variant.extra_args).iter().cloned());
        let mut attrs = variant.attrs.clone();
        if let Some(name) = variant.infer {
            attrs.push((name, AttrValue::Float(SENTINEL)));
        }
        let Some(t) = form(cache, rule.op, &types, &attrs, variant.template) else {
            first_reason.get_or_insert_with(|| format!("the {} form does not lower for {xty}", rule.op));
            continue;
        };
        let mut cmp = Compare::new(t, g, variant.infer.is_some());
        let t_root = t.outputs()[0].value;
        if !cmp.eq(t_root, root) {
            first_reason.get_or_insert(cmp.why.unwrap_or_else(|| "the structure differs".into()));
            continue;
        }
        // An inferred attribute: compare again with the value the model holds.
        if let Some(name) = variant.infer {
            let Some(value) = cmp.found else {
                first_reason.get_or_insert_with(|| format!("`{name}` was not found in the cluster"));
                continue;
            };
            attrs.pop();
            attrs.push((name, AttrValue::Float(value)));
            let Some(t) = form(cache, rule.op, &types, &attrs, variant.template) else { continue };
            let mut again = Compare::new(t, g, false);
            if !again.eq(t.outputs()[0].value, root) {
                first_reason.get_or_insert(again.why.unwrap_or_else(|| "the structure differs".into()));
                continue;
            }
            cmp = again;
        }
        let bound: Option<Vec<(Value, Option<Vec<i64>>)>> = cmp.bind.iter().cloned().collect();
        let Some(bound) = bound else {
            first_reason.get_or_insert_with(|| "an argument of the form is unused".into());
            continue;
        };
        // An argument taken through a permute: an existing permute of the value (defined
        // before the root, where the rewrite emits the op) stands in.
        let (args, layout): (Vec<Value>, Vec<Option<Vec<i64>>>) = bound
            .into_iter()
            .map(|(v, perm)| match perm {
                Some(p) => match users[v.index()].iter().find(|&&u| {
                    u.index() < root.index()
                        && g.node(u).op == OpKind::Permute
                        && g.node(u).attrs.get("perm") == Some(&AttrValue::Ints(p.clone()))
                }) {
                    Some(&u) => (u, None),
                    None => (v, Some(p)),
                },
                None => (v, None),
            })
            .unzip();
        // Exclusive: inner values (other than cheap ones) are used only inside the cluster.
        let inside: std::collections::HashSet<Value> = cmp.cone.iter().copied().collect();
        for &v in &cmp.cone {
            if v == root || cheap(g.node(v).op) {
                continue;
            }
            if g.outputs().iter().any(|o| o.value == v) {
                return Err(format!("{v} inside the cluster is a graph output"));
            }
            if let Some(u) = users[v.index()].iter().find(|u| !inside.contains(u)) {
                return Err(format!("{v} inside the cluster is also used by {u} (recovering would compute it twice)"));
            }
        }
        let nodes = cmp.cone.iter().filter(|&&v| !matches!(g.node(v).op, OpKind::Full | OpKind::Const)).count();
        let found = Match {
            rule: rule.name,
            op: rule.op,
            root,
            args,
            layout,
            attrs: attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect(),
            nodes,
        };
        return Ok(Found { found, cone: cmp.cone });
    }
    Err(first_reason.unwrap_or_else(|| "no form applies".into()))
}

/// A one-element constant holding [`SENTINEL`] (rounded to its dtype).
fn is_sentinel(t: &crate::tensor::Tensor) -> bool {
    t.numel() == 1 && t.to_f64_vec()[0] == SENTINEL as f32 as f64
}

/// The value of a one-element float `const` or `full` (rounded to its dtype).
fn scalar_constant(g: &Graph, v: Value) -> Option<f64> {
    let node = g.node(v);
    let ty = g.ty(v);
    if !ty.dtype.is_float() || !ty.shape.dims().iter().all(|d| d.as_const() == Some(1)) {
        return None;
    }
    match node.op {
        OpKind::Const => {
            g.const_blob(v).map(|x| &g.blob(x).tensor).filter(|t| t.numel() == 1).map(|t| t.to_f64_vec()[0])
        }
        OpKind::Full => match node.attrs.get("value") {
            Some(AttrValue::Float(f)) => Some(crate::interp::round_float(ty.dtype, *f)),
            _ => None,
        },
        _ => None,
    }
}

/// Sources, layout ops, and one-instruction sign ops (a layer norm's scaling and a sigmoid
/// both take `abs(x)`): sharing them with the rest of the graph costs nothing worth keeping
/// a cluster unrecovered for (the other user computes them again in its own loop).
fn cheap(op: OpKind) -> bool {
    matches!(
        op,
        OpKind::Full
            | OpKind::Const
            | OpKind::Iota
            | OpKind::BroadcastInDim
            | OpKind::Reshape
            | OpKind::Abs
            | OpKind::Neg
    )
}

/// Structural comparison of a form's cone with a model's.
struct Compare<'a> {
    t: &'a Graph,
    g: &'a Graph,
    /// Each form input's model value, and the permutation applied to it first (if any).
    bind: Vec<Option<(Value, Option<Vec<i64>>)>>,
    memo: HashMap<(Value, Value), bool>,
    /// The keys of `memo` in the order they were added (to undo a failed argument order).
    journal: Vec<(Value, Value)>,
    steps: usize,
    infer: bool,
    found: Option<f64>,
    why: Option<String>,
    cone: Vec<Value>,
}

/// What a [`Compare`] had found at some point, to go back to.
struct Mark {
    bind: Vec<Option<(Value, Option<Vec<i64>>)>>,
    found: Option<f64>,
    why: Option<String>,
    journal: usize,
    cone: usize,
}

impl<'a> Compare<'a> {
    fn new(t: &'a Graph, g: &'a Graph, infer: bool) -> Compare<'a> {
        Compare {
            t,
            g,
            bind: vec![None; t.inputs().len()],
            memo: HashMap::new(),
            journal: Vec::new(),
            steps: 0,
            infer,
            found: None,
            why: None,
            cone: Vec::new(),
        }
    }

    fn fail(&mut self, b: Value, msg: String) -> bool {
        if self.why.is_none() {
            self.why = Some(format!("at {b}: {msg}"));
        }
        false
    }

    /// Binds form input `k` to `b` (through `perm`), or checks an earlier binding agrees.
    fn bind_input(&mut self, k: usize, b: Value, perm: Option<Vec<i64>>) -> bool {
        let show = |v: Value, p: &Option<Vec<i64>>| match p {
            None => v.to_string(),
            Some(p) => format!("permute({v}, {p:?})"),
        };
        match &self.bind[k] {
            None => {
                self.bind[k] = Some((b, perm));
                true
            }
            Some(prev) if *prev == (b, perm.clone()) => true,
            Some((v, p)) => {
                let msg = format!("argument {k} is {} in one place and {} in another", show(*v, p), show(b, &perm));
                self.fail(b, msg)
            }
        }
    }

    /// The form's `permute(input k, p)` against the model's `permute(y, p')` of the same
    /// type: input k is `permute(y, q)` with `q = p' . p^-1` (`None` when `q` is the
    /// identity), and the model's permute joins the cluster.
    fn eq_permuted_input(&mut self, a: Value, b: Value) -> bool {
        let (t, g) = (self.t, self.g);
        let (na, nb) = (t.node(a), g.node(b));
        let input = na.args[0];
        let Some(k) = t.inputs().iter().position(|&i| i == input) else { return false };
        if t.ty(a) != g.ty(b) {
            return self.fail(b, format!("{} has type {}, the form's permute has {}", nb.op, g.ty(b), t.ty(a)));
        }
        if nb.op != OpKind::Permute {
            return self.fail(b, format!("{} where the form takes argument {k} through a permute", nb.op));
        }
        let rank = t.ty(a).shape.rank();
        let (Some(p), Some(pm)) = (permutation(na.attrs.get("perm"), rank), permutation(nb.attrs.get("perm"), rank))
        else {
            return self.fail(b, "a permute whose perm is not a permutation".into());
        };
        let mut inv = vec![0; rank];
        for (i, &pi) in p.iter().enumerate() {
            inv[pi] = i;
        }
        let q: Vec<usize> = (0..rank).map(|i| pm[inv[i]]).collect();
        let y = nb.args[0];
        let (ty, want) = (g.ty(y), t.ty(input));
        let dims: Vec<_> = q.iter().map(|&i| ty.shape.dims().get(i).cloned()).collect();
        if ty.dtype != want.dtype
            || dims.iter().cloned().collect::<Option<Vec<_>>>().as_deref() != Some(want.shape.dims())
        {
            return self.fail(b, format!("argument {k} would be a permute of {y}: {ty}, the form takes {want}"));
        }
        let perm = (q.iter().enumerate().any(|(i, &qi)| i != qi)).then(|| q.iter().map(|&i| i as i64).collect());
        if !self.bind_input(k, y, perm) {
            return false;
        }
        if !self.cone.contains(&b) {
            self.cone.push(b);
        }
        true
    }

    fn eq(&mut self, a: Value, b: Value) -> bool {
        if let Some(&r) = self.memo.get(&(a, b)) {
            return r;
        }
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return self.fail(b, format!("the comparison took more than {MAX_STEPS} steps"));
        }
        let r = self.eq_uncached(a, b);
        self.memo.insert((a, b), r);
        self.journal.push((a, b));
        r
    }

    fn mark(&self) -> Mark {
        Mark {
            bind: self.bind.clone(),
            found: self.found,
            why: self.why.clone(),
            journal: self.journal.len(),
            cone: self.cone.len(),
        }
    }

    /// Undoes everything found since `m` (bindings, results, the cone).
    fn undo(&mut self, m: Mark) {
        for key in self.journal.drain(m.journal..) {
            self.memo.remove(&key);
        }
        self.bind = m.bind;
        self.found = m.found;
        self.why = m.why;
        self.cone.truncate(m.cone);
    }

    /// Form constant `x` against model constant `y` (one element each, of the same type): equal
    /// bits, or the sentinel of an inferred attribute.
    fn eq_scalar(&mut self, x: f64, y: f64, b: Value) -> bool {
        if self.infer && x == SENTINEL as f32 as f64 {
            if self.found.is_some_and(|f| f.to_bits() != y.to_bits()) {
                return self.fail(b, "the inferred attribute has two values".into());
            }
            self.found = Some(y);
        } else if x.to_bits() != y.to_bits() {
            return self.fail(b, "a different constant".into());
        }
        if !self.cone.contains(&b) {
            self.cone.push(b);
        }
        true
    }

    /// Whether form node `a` can match model node `b` as far as their ops say.
    fn plausible(&self, a: Value, b: Value) -> bool {
        let op = self.t.node(a).op;
        op == OpKind::Input || op == self.g.node(b).op
    }

    /// The arguments of an `add` or `mul`, in order or swapped.
    fn eq_commuting(&mut self, a: [Value; 2], b: [Value; 2]) -> bool {
        let straight = self.plausible(a[0], b[0]) && self.plausible(a[1], b[1]);
        let swapped = self.plausible(a[0], b[1]) && self.plausible(a[1], b[0]);
        if straight || !swapped {
            let m = self.mark();
            if self.eq(a[0], b[0]) && self.eq(a[1], b[1]) {
                return true;
            }
            if !swapped {
                return false;
            }
            let why = self.why.take();
            self.undo(m);
            if self.eq(a[0], b[1]) && self.eq(a[1], b[0]) {
                return true;
            }
            self.why = why;
            return false;
        }
        self.eq(a[0], b[1]) && self.eq(a[1], b[0])
    }

    fn eq_uncached(&mut self, a: Value, b: Value) -> bool {
        let (t, g) = (self.t, self.g);
        let (na, nb) = (t.node(a), g.node(b));
        if na.op == OpKind::Permute && t.node(na.args[0]).op == OpKind::Input {
            return self.eq_permuted_input(a, b);
        }
        if na.op == OpKind::Input {
            let Some(k) = t.inputs().iter().position(|&i| i == a) else { return false };
            if t.ty(a) != g.ty(b) {
                return self.fail(b, format!("argument {k} would be {b}: {}, the form takes {}", g.ty(b), t.ty(a)));
            }
            return self.bind_input(k, b, None);
        }
        if t.ty(a) != g.ty(b) {
            return self.fail(b, format!("{} has type {}, the form's {} has {}", nb.op, g.ty(b), na.op, t.ty(a)));
        }
        if na.op != nb.op {
            if let (Some(x), Some(y)) = (scalar_constant(t, a), scalar_constant(g, b)) {
                // A one-element constant as a `const` in one graph and a `full` in the other
                // (constant folding writes `full`s): compared by value.
                return self.eq_scalar(x, y, b);
            }
            return self.fail(b, format!("{} where the form has {}", nb.op, na.op));
        }
        match na.op {
            OpKind::Const if self.infer && t.const_blob(a).is_some_and(|x| is_sentinel(&t.blob(x).tensor)) => {
                let value = g.const_blob(b).map(|y| &g.blob(y).tensor).filter(|v| v.numel() == 1);
                let Some(v) = value.map(|v| v.to_f64_vec()[0]) else {
                    return self.fail(b, "a constant where the form reads a scalar attribute".into());
                };
                if self.found.is_some_and(|f| f.to_bits() != v.to_bits()) {
                    return self.fail(b, "the inferred attribute has two values".into());
                }
                self.found = Some(v);
            }
            OpKind::Const => {
                let same = match (t.const_blob(a), g.const_blob(b)) {
                    (Some(x), Some(y)) => t.blob(x).tensor.bit_eq(&g.blob(y).tensor),
                    _ => false,
                };
                if !same {
                    return self.fail(b, "a different constant".into());
                }
            }
            OpKind::Full
                if self.infer
                    && matches!(na.attrs.get("value"), Some(AttrValue::Float(f))
                        if *f == SENTINEL || *f == SENTINEL as f32 as f64) =>
            {
                let Some(AttrValue::Float(v)) = nb.attrs.get("value") else {
                    return self.fail(b, "full without a float value".into());
                };
                let (v, same_rest) = (
                    *v,
                    na.attrs.get("shape") == nb.attrs.get("shape") && na.attrs.get("dtype") == nb.attrs.get("dtype"),
                );
                if !same_rest {
                    return self.fail(b, "full of another shape or dtype".into());
                }
                if self.found.is_some_and(|f| f.to_bits() != v.to_bits()) {
                    return self.fail(b, "the inferred attribute has two values".into());
                }
                self.found = Some(v);
            }
            _ => {
                if na.attrs != nb.attrs {
                    let text = |a: &Attrs| a.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
                    return self.fail(
                        b,
                        format!("{} {{{}}} where the form has {{{}}}", nb.op, text(&nb.attrs), text(&na.attrs)),
                    );
                }
            }
        }
        if na.args.len() != nb.args.len() {
            return self.fail(b, format!("{} with {} arguments", nb.op, nb.args.len()));
        }
        if let ([a0, a1], [b0, b1], OpKind::Add | OpKind::Mul) = (&na.args[..], &nb.args[..], na.op) {
            if !self.eq_commuting([*a0, *a1], [*b0, *b1]) {
                return false;
            }
        } else {
            for i in 0..na.args.len() {
                if !self.eq(na.args[i], nb.args[i]) {
                    return false;
                }
            }
        }
        if !self.cone.contains(&b) {
            self.cone.push(b);
        }
        true
    }
}

/// `perm` as a permutation of `0..rank`, if it is one.
fn permutation(perm: Option<&AttrValue>, rank: usize) -> Option<Vec<usize>> {
    let Some(AttrValue::Ints(p)) = perm else { return None };
    let p: Vec<usize> = p.iter().map(|&i| usize::try_from(i).ok().filter(|&i| i < rank)).collect::<Option<_>>()?;
    let mut seen = vec![false; rank];
    for &i in &p {
        if std::mem::replace(&mut seen[i], true) {
            return None;
        }
    }
    (p.len() == rank).then_some(p)
}

/// `g` with each match's root computed by its op; the cluster's other nodes become dead and
/// are removed.
fn rewrite(g: &Graph, matches: &[Match]) -> Result<Graph, LowerError> {
    let invalid = |e: crate::ir::GraphError| LowerError::Recover(e.to_string());
    let mut rw = Rewriter::new(g);
    let by_root: HashMap<Value, &Match> = matches.iter().map(|m| (m.root, m)).collect();
    for (v, _) in g.nodes() {
        if g.node(v).op == OpKind::Input {
            continue;
        }
        match by_root.get(&v) {
            Some(m) => {
                let mut args = Vec::with_capacity(m.args.len());
                for (&a, perm) in m.args.iter().zip(&m.layout) {
                    args.push(match perm {
                        None => rw.get(a),
                        Some(p) => rw
                            .emit_with(OpKind::Permute, &[rw.get(a)], &[("perm", AttrValue::Ints(p.clone()))])
                            .map_err(invalid)?,
                    });
                }
                let attrs: Vec<(&str, AttrValue)> = m.attrs.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                let new = rw.emit_with(m.op, &args, &attrs).map_err(invalid)?;
                rw.set(v, new);
            }
            None => {
                rw.copy(v).map_err(invalid)?;
            }
        }
    }
    let out = rw.finish().map_err(invalid)?;
    crate::passes::dce::eliminate_dead_code(&out).map_err(LowerError::from)
}

/// f32 only: the library kernels' element type.
fn f32_rows(ty: &TensorType) -> Result<(), String> {
    if ty.dtype != DType::F32 {
        return Err(format!("{} elements (the library kernel takes f32)", ty.dtype));
    }
    if ty.shape.rank() == 0 {
        return Err("a scalar (the library kernel takes rows)".into());
    }
    Ok(())
}
