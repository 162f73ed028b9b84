//! ONNX recurrences, unrolled at import: `RNN`, `GRU`, `LSTM`, `Scan`, and the
//! `ai.onnx.preview` `FlexAttention` (with its modifier subgraphs inlined); the subgraph
//! helpers and the unroll budget that `control.rs` (`If`, `Loop`, the optional ops) shares.
//!
//! Mapping choices:
//! - `RNN`/`GRU`/`LSTM` unroll over the static sequence length: the input projection of all
//!   steps is one `matmul` (`X·Wᵀ + Wb`); each step adds `H·Rᵀ + Rb` and applies the gates
//!   with ladder's elementwise ops. Gate orders are ONNX's (`z r h` for GRU, `i o f c` for
//!   LSTM, peepholes `i o f`). `direction` reverse/bidirectional runs the second pass from
//!   the last step; `layout` 1 permutes X, Y, Y_h and Y_c. `activations` (with
//!   `activation_alpha`/`activation_beta` consumed in order by the functions that take them:
//!   Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu), `clip` (applied to
//!   every activation's input), `linear_before_reset` and `input_forget` (f = 1 - i) follow
//!   the spec. `sequence_lens` must be known at import: a batch entry past its length keeps
//!   its state and outputs zeros in Y (Y_h/Y_c hold the last valid step). The number of
//!   steps (length × directions) is capped at [`MAX_STEPS`] before anything is built.
//! - `Scan` (opset 8 with its batch axis, and 9+) and `Loop` inline their body once per
//!   iteration, binding the body's inputs to the current state and slices; the trip count
//!   must be known at import (a `Loop` needs a constant `M` or conditions that fold to
//!   constants at every iteration) and is capped at [`MAX_STEPS`]. Scan outputs are stacked
//!   (along `scan_output_axes`, reversed for `scan_output_directions` 1). A `Loop` that runs
//!   no iteration and has scan outputs is unsupported (their shape would come from the body).
//! - `FlexAttention` without modifiers, when the softmax precision is the input's, is one
//!   `scaled_dot_product_attention` (grouped-query heads broadcast as `[B, kv, g, L, D]`);
//!   otherwise the function body is spelled out: `Q·sqrt(scale)`, `K·sqrt(scale)` (K and V
//!   expanded to the query heads), `matmul`, conversion to `softmax_precision`, `score_mod`
//!   inlined, `softmax`, `prob_mod` inlined, `matmul` with V in that precision, and
//!   conversion back.
//! - `OptionalHasElement` is a constant: true for a tensor input, false for an absent one;
//!   `OptionalGetElement` of a tensor is that tensor. Optional and sequence values are not
//!   represented.

use super::build::{
    bin, bin_scalar, convert, dims_attr, dtype, int, invalid, norm_axis, permute, reshape, shape, unsupported, Outs,
};
use super::import::{a_float, a_int, a_str, attr, Importer, NResult, Slot};
use super::ops::{Convert, Row};
use super::proto::{GraphProto, NodeProto};
use super::tensor::dtype_of;
use super::{ImportError, NodeError};
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;
use crate::tensor::Tensor;

/// Most unrolled steps (sequence steps × directions, or loop iterations) one node may expand to.
pub const MAX_STEPS: u64 = 4096;

/// The control-flow and recurrent ops of the default domain, by ONNX name.
pub(super) const RECUR: &[Row] = &[
    ("GRU", |imp, node, _| recurrent(imp, node, Cell::Gru)),
    ("If", super::control::if_node),
    ("LSTM", |imp, node, _| recurrent(imp, node, Cell::Lstm)),
    ("Loop", super::control::loop_node),
    ("OptionalGetElement", |imp, node, _| super::control::optional(imp, node)),
    ("OptionalHasElement", |imp, node, _| super::control::optional(imp, node)),
    ("RNN", |imp, node, _| recurrent(imp, node, Cell::Rnn)),
    ("Scan", scan),
];

/// The domain of [`PREVIEW`].
const PREVIEW_DOMAIN: &str = "ai.onnx.preview";

/// The ops of the `ai.onnx.preview` domain, by name.
pub(super) const PREVIEW: &[Row] = &[("FlexAttention", flex_attention)];

/// The converter of `op_type` in a non-default `domain`, if the importer converts it.
pub(super) fn converter_in(domain: &str, op_type: &str) -> Option<Convert> {
    if domain != PREVIEW_DOMAIN {
        return None;
    }
    PREVIEW.iter().find(|(name, _)| *name == op_type).map(|&(_, convert)| convert)
}

/// The ops of non-default domains the importer converts.
pub fn is_supported_in(domain: &str, op_type: &str) -> bool {
    converter_in(domain, op_type).is_some()
}

pub(super) fn select(imp: &mut Importer, v: Value, axis: usize, index: u64) -> NResult<Value> {
    imp.emit(K::Select, &[v], &[("axis", int(axis as i64)), ("index", int(index as i64))])
}

/// `v[start..end]` along `axis`.
pub(super) fn slice(imp: &mut Importer, v: Value, axis: usize, start: u64, end: u64) -> NResult<Value> {
    imp.emit(K::Slice, &[v], &[("axis", int(axis as i64)), ("start", int(start as i64)), ("end", int(end as i64))])
}

pub(super) fn stack(imp: &mut Importer, vs: &[Value], axis: usize) -> NResult<Value> {
    imp.emit(K::Stack, vs, &[("axis", int(axis as i64))])
}

pub(super) fn matmul_bt(imp: &mut Importer, a: Value, b: Value) -> NResult<Value> {
    imp.emit(K::Matmul, &[a, b], &[("transpose_b", AttrValue::Bool(true))])
}

pub(super) fn full(imp: &mut Importer, d: &[Dim], value: f64, dt: DType) -> NResult<Value> {
    imp.emit(
        K::Full,
        &[],
        &[("shape", dims_attr(d)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dt))],
    )
}

pub(super) fn static_dim(d: &Dim, what: &str) -> NResult<u64> {
    d.as_const().ok_or_else(|| NodeError::NeedsStatic(format!("{what} is the symbolic size `{d}`")))
}

pub(super) fn wants(node: &NodeProto, i: usize) -> bool {
    node.output.get(i).is_some_and(|s| !s.is_empty())
}

pub(super) fn check_steps(steps: u64, what: &str) -> NResult<()> {
    if steps > MAX_STEPS {
        return unsupported(format!("{what} unrolls to {steps} steps, above the limit of {MAX_STEPS}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Inlined subgraphs

/// Nodes in `g`, nested subgraphs included.
pub(super) fn body_nodes(g: &GraphProto) -> u64 {
    g.node
        .iter()
        .map(|n| 1 + n.attribute.iter().flat_map(|a| a.g.iter().chain(a.graphs.iter())).map(body_nodes).sum::<u64>())
        .sum()
}

/// Checks an unrolling of `body` over `iterations` against [`MAX_STEPS`] and the importer's
/// node limit, before any of it is built; and, for the whole import, that the nodes built so
/// far and one more copy of the body stay under that limit (loops nested in loops multiply
/// their bodies, which no single loop's count shows).
pub(super) fn check_unroll(imp: &Importer, iterations: u64, body: &GraphProto, what: &str) -> NResult<()> {
    check_steps(iterations, what)?;
    let per = body_nodes(body).max(1);
    let total = iterations.saturating_mul(per);
    let max = imp.opts.limits.max_nodes;
    if total > max {
        return unsupported(format!(
            "{what} unrolls its body to {total} nodes, above {}",
            crate::limits::named("max_nodes", max)
        ));
    }
    let built = imp.g.len() as u64;
    if built.saturating_add(per) > max {
        return unsupported(format!(
            "{what}: the import has built {built} nodes, and another copy of its body would pass {}",
            crate::limits::named("max_nodes", max)
        ));
    }
    Ok(())
}

/// The subgraph attribute `name` of `node`.
pub(super) fn graph_attr<'m>(node: &'m NodeProto, name: &str) -> Option<&'m GraphProto> {
    attr(node, name).and_then(|a| a.g.as_ref())
}

/// Every name an inlined run of `g` binds: its inputs and its nodes' outputs, nested
/// subgraphs included.
pub(super) fn bound_names(g: &GraphProto, out: &mut Vec<String>) {
    out.extend(g.input.iter().map(|i| i.name.clone()));
    for n in &g.node {
        out.extend(n.output.iter().filter(|s| !s.is_empty()).cloned());
        for a in &n.attribute {
            for sub in a.g.iter().chain(a.graphs.iter()) {
                bound_names(sub, out);
            }
        }
    }
}

/// Runs `g` with its inputs bound to `inputs` and returns its outputs. Names the run binds
/// are restored afterwards, so each iteration of an unrolled body starts afresh and the
/// outer scope sees none of them.
pub(super) fn run_body<'m>(
    imp: &mut Importer<'m>,
    g: &'m GraphProto,
    inputs: &[Slot],
    depth: u32,
) -> NResult<Vec<Slot>> {
    if depth + 2 > imp.opts.limits.max_depth {
        return Err(NodeError::Subgraph(Box::new(ImportError::TooDeep {
            what: "subgraphs",
            depth: depth + 2,
            bound: "`Limits::max_depth`",
            limit: imp.opts.limits.max_depth,
        })));
    }
    if g.input.len() != inputs.len() {
        return invalid(format!("the body `{}` has {} inputs, expected {}", g.name, g.input.len(), inputs.len()));
    }
    let mut names = Vec::new();
    bound_names(g, &mut names);
    let saved: Vec<(String, Option<Slot>)> = names.into_iter().map(|n| (n.clone(), imp.binding(&n))).collect();
    for (i, s) in g.input.iter().zip(inputs) {
        imp.set_binding(&i.name, Some(s.clone()));
    }
    imp.add_initializers(g);
    let result = (|| {
        imp.run_nodes(&g.node, depth + 1).map_err(|e| NodeError::Subgraph(Box::new(e)))?;
        g.output.iter().map(|o| imp.lookup(&o.name)).collect::<NResult<Vec<Slot>>>()
    })();
    for (n, s) in saved.into_iter().rev() {
        imp.set_binding(&n, s);
    }
    result
}

pub(super) fn value_of(imp: &mut Importer, s: &Slot, what: &str) -> NResult<Value> {
    imp.materialize(s, what)
}

// ---------------------------------------------------------------------------------------------
// RNN, GRU, LSTM

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> u64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn defaults(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of the recurrent ops, with its parameters.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

fn parse_acts(node: &NodeProto, cell: Cell, dirs: usize) -> NResult<Vec<Act>> {
    let names: Vec<String> = match attr(node, "activations") {
        Some(a) if !a.strings.is_empty() => a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        _ => (0..dirs).flat_map(|_| cell.defaults().iter().map(|s| s.to_string())).collect(),
    };
    let per = cell.defaults().len();
    if names.len() != per * dirs {
        return invalid(format!("`activations` has {} functions, expected {}", names.len(), per * dirs));
    }
    let alphas: Vec<f32> = attr(node, "activation_alpha").map(|a| a.floats.clone()).unwrap_or_default();
    let betas: Vec<f32> = attr(node, "activation_beta").map(|a| a.floats.clone()).unwrap_or_default();
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    let mut alpha = |d: f64| ai.next().map_or(d, |&x| f64::from(x));
    let mut beta = |d: f64| bi.next().map_or(d, |&x| f64::from(x));
    names
        .iter()
        .map(|n| {
            Ok(match n.to_ascii_lowercase().as_str() {
                "relu" => Act::Relu,
                "tanh" => Act::Tanh,
                "sigmoid" => Act::Sigmoid,
                "affine" => Act::Affine(alpha(1.0), beta(0.0)),
                "leakyrelu" => Act::LeakyRelu(alpha(0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(alpha(1.0)),
                "scaledtanh" => Act::ScaledTanh(alpha(1.0), beta(1.0)),
                "hardsigmoid" => Act::HardSigmoid(alpha(0.2), beta(0.5)),
                "elu" => Act::Elu(alpha(1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                _ => return unsupported(format!("activation function `{n}`")),
            })
        })
        .collect()
}

fn apply_act(imp: &mut Importer, act: Act, clip: Option<f64>, x: Value) -> NResult<Value> {
    let x = match clip {
        Some(c) => imp.emit(K::Clamp, &[x], &[("min", AttrValue::Float(-c)), ("max", AttrValue::Float(c))])?,
        None => x,
    };
    match act {
        Act::Relu => imp.emit(K::Relu, &[x], &[]),
        Act::Tanh => imp.emit(K::Tanh, &[x], &[]),
        Act::Sigmoid => imp.emit(K::Sigmoid, &[x], &[]),
        Act::Affine(a, b) => {
            let m = bin_scalar(imp, K::Mul, x, a)?;
            bin_scalar(imp, K::Add, m, b)
        }
        Act::LeakyRelu(a) => imp.emit(K::LeakyRelu, &[x], &[("negative_slope", AttrValue::Float(a))]),
        Act::ThresholdedRelu(a) => {
            let c = bin_scalar(imp, K::Gt, x, a)?;
            let z = imp.scalar(dtype(imp, x), 0.0)?;
            imp.emit(K::Where, &[c, x, z], &[])
        }
        Act::ScaledTanh(a, b) => {
            let m = bin_scalar(imp, K::Mul, x, b)?;
            let t = imp.emit(K::Tanh, &[m], &[])?;
            bin_scalar(imp, K::Mul, t, a)
        }
        Act::HardSigmoid(a, b) => {
            let m = bin_scalar(imp, K::Mul, x, a)?;
            let s = bin_scalar(imp, K::Add, m, b)?;
            imp.emit(K::Clamp, &[s], &[("min", AttrValue::Float(0.0)), ("max", AttrValue::Float(1.0))])
        }
        Act::Elu(a) => imp.emit(K::Elu, &[x], &[("alpha", AttrValue::Float(a))]),
        Act::Softsign => {
            let a = imp.emit(K::Abs, &[x], &[])?;
            let d = bin_scalar(imp, K::Add, a, 1.0)?;
            bin(imp, K::Div, x, d)
        }
        Act::Softplus => imp.emit(K::Softplus, &[x], &[("threshold", AttrValue::Float(f64::INFINITY))]),
    }
}

/// One direction's weights: `W [G*H, I]`, `R [G*H, H]`, the biases `Wb`, `Rb [G*H]`, and the
/// LSTM peepholes `[3*H]`.
struct DirWeights {
    r: Value,
    rb: Option<Value>,
    p: Option<Value>,
}

/// `RNN`, `GRU` and `LSTM`.
pub fn recurrent(imp: &mut Importer, node: &NodeProto, cell: Cell) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let r = imp.input(node, 2)?;
    let b = imp.opt_input(node, 3)?;
    let lens = imp.ints_input(node, 4, "sequence_lens")?;
    let h0 = imp.opt_input(node, 5)?;
    let (c0, p) = if cell == Cell::Lstm { (imp.opt_input(node, 6)?, imp.opt_input(node, 7)?) } else { (None, None) };
    let layout = a_int(node, "layout", 0);
    if !(0..=1).contains(&layout) {
        return invalid(format!("layout {layout} (0 or 1)"));
    }
    let direction = a_str(node, "direction", "forward");
    let dirs: usize = match direction.as_str() {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        d => return invalid(format!("direction `{d}`")),
    };
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("X must be a float tensor, got {dt}"));
    }
    let (xs, ws, rs) = (shape(imp, x), shape(imp, w), shape(imp, r));
    if xs.len() != 3 || ws.len() != 3 || rs.len() != 3 {
        return invalid("X, W and R must be 3-D");
    }
    let (s_dim, b_dim) = if layout == 0 { (&xs[0], &xs[1]) } else { (&xs[1], &xs[0]) };
    let hidden = static_dim(&rs[2], "the hidden size")?;
    if let Some(a) = attr(node, "hidden_size") {
        if a.i != hidden as i64 {
            return invalid(format!("hidden_size {} disagrees with R's last dim {hidden}", a.i));
        }
    }
    let gh = hidden.checked_mul(cell.gates()).ok_or_else(|| NodeError::Invalid("hidden size overflow".into()))?;
    for (what, s) in [("W", &ws), ("R", &rs)] {
        if s[0].as_const().is_some_and(|d| d != dirs as u64) || s[1].as_const().is_some_and(|d| d != gh) {
            return invalid(format!("{what} has shape {s:?}, expected [{dirs}, {gh}, ..]"));
        }
    }
    let clip = match attr(node, "clip") {
        Some(a) if a.f > 0.0 => Some(f64::from(a.f)),
        Some(a) => return invalid(format!("clip must be positive, got {}", a.f)),
        None => None,
    };
    let acts = parse_acts(node, cell, dirs)?;
    let input_forget = cell == Cell::Lstm && a_int(node, "input_forget", 0) != 0;
    let linear_before_reset = cell == Cell::Gru && a_int(node, "linear_before_reset", 0) != 0;
    // The cell every exporter writes runs as one `lstm` op per direction (a library kernel in
    // native mode), over a sequence length that may stay symbolic; any other is unrolled
    // here, which needs the length.
    let whole_cell = cell == Cell::Lstm
        && clip.is_none()
        && p.is_none()
        && !input_forget
        && acts.chunks(3).all(|a| matches!(a, [Act::Sigmoid, Act::Tanh, Act::Tanh]));
    let unrolled = !whole_cell || lens.is_some();
    let steps = match s_dim.as_const() {
        Some(n) => Some(n),
        None if !unrolled => None,
        None => Some(static_dim(s_dim, "the sequence length")?),
    };
    if let (Some(n), true) = (steps, unrolled) {
        check_steps(n.saturating_mul(dirs as u64), &node.op_type)?;
    }

    // Lengths known at import: a per-step mask where some entry stops early.
    let lens = match lens {
        None => None,
        Some(l) => {
            let steps = static_dim(s_dim, "the sequence length (with sequence_lens)")?;
            let batch = static_dim(b_dim, "the batch size (with sequence_lens)")?;
            if l.len() as u64 != batch {
                return invalid(format!("sequence_lens has {} entries for a batch of {batch}", l.len()));
            }
            if let Some(&bad) = l.iter().find(|&&n| n < 0 || n as u64 > steps) {
                return invalid(format!("sequence length {bad} is outside 0..={steps}"));
            }
            if l.iter().all(|&n| n as u64 == steps) {
                None
            } else {
                Some(l)
            }
        }
    };
    let mask_at = |imp: &mut Importer, t: u64| -> NResult<Option<Value>> {
        match &lens {
            None => Ok(None),
            Some(l) => {
                let m: Vec<bool> = l.iter().map(|&n| (t as i64) < n).collect();
                let t = Tensor::from_bool(&[m.len(), 1], m).map_err(|e| NodeError::Invalid(e.to_string()))?;
                Ok(Some(imp.constant("seq_mask", t)))
            }
        }
    };

    // X as [S, B, I], then the input projection of every step at once.
    let x = if layout == 1 { permute(imp, x, &[1, 0, 2])? } else { x };
    let xs = shape(imp, x);
    let sb = xs[0].mul(&xs[1]).map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))?;
    let x2 = reshape(imp, x, &[sb, xs[2].clone()])?;
    let state_dims = [b_dim.clone(), Dim::new(hidden)];
    // Initial states are [dirs, B, H] (layout 0) or [B, dirs, H] (layout 1).
    let state_axis = if layout == 0 { 0 } else { 1 };

    let mut ys = Vec::with_capacity(dirs);
    let mut hs_final = Vec::with_capacity(dirs);
    let mut cs_final = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let reverse = direction == "reverse" || d == 1;
        let wd = select(imp, w, 0, d as u64)?;
        let rd = select(imp, r, 0, d as u64)?;
        let (wb, rb) = match b {
            Some(b) => {
                let bd = select(imp, b, 0, d as u64)?;
                (Some(slice(imp, bd, 0, 0, gh)?), Some(slice(imp, bd, 0, gh, 2 * gh)?))
            }
            None => (None, None),
        };
        let pd = match p {
            Some(p) => Some(select(imp, p, 0, d as u64)?),
            None => None,
        };
        let whole = whole_cell && lens.is_none() && steps != Some(0);
        let bias = match (wb, rb) {
            (Some(wb), Some(rb)) if whole => Some(bin(imp, K::Add, wb, rb)?),
            _ => wb,
        };
        let xw = matmul_bt(imp, x2, wd)?;
        let xw = match bias {
            Some(b) => bin(imp, K::Add, xw, b)?,
            None => xw,
        };
        let xw = reshape(imp, xw, &[xs[0].clone(), xs[1].clone(), Dim::new(gh)])?;
        let mut h = match h0 {
            Some(h0) => select(imp, h0, state_axis, d as u64)?,
            None => full(imp, &state_dims, 0.0, dt)?,
        };
        let mut c = match c0 {
            Some(c0) => select(imp, c0, state_axis, d as u64)?,
            None if cell == Cell::Lstm => full(imp, &state_dims, 0.0, dt)?,
            None => h,
        };
        if whole {
            let seq = imp.emit(K::Lstm, &[xw, rd, h, c], &[("reverse", AttrValue::Bool(reverse))])?;
            let (hs, cs) = (select(imp, seq, 1, 0)?, select(imp, seq, 1, 1)?);
            // The final states: step 0 in reverse, else the last step (-1: S may be symbolic).
            let last = [("axis", int(0)), ("index", int(if reverse { 0 } else { -1 }))];
            hs_final.push(imp.emit(K::Select, &[hs], &last)?);
            cs_final.push(imp.emit(K::Select, &[cs], &last)?);
            ys.push(hs);
            continue;
        }
        let steps = steps.ok_or_else(|| NodeError::NeedsStatic(format!("the sequence length is `{s_dim}`")))?;
        let wts = DirWeights { r: rd, rb, p: pd };
        let acts_d = &acts[d * cell.defaults().len()..(d + 1) * cell.defaults().len()];
        let mut outs: Vec<Option<Value>> = vec![None; steps as usize];
        let zero = if lens.is_some() { Some(full(imp, &state_dims, 0.0, dt)?) } else { None };
        for k in 0..steps {
            let t = if reverse { steps - 1 - k } else { k };
            let xt = select(imp, xw, 0, t)?;
            let (hn, cn) = match cell {
                Cell::Rnn => (rnn_step(imp, &wts, acts_d, clip, xt, h)?, c),
                Cell::Gru => (gru_step(imp, &wts, acts_d, clip, linear_before_reset, hidden, xt, h)?, c),
                Cell::Lstm => lstm_step(imp, &wts, acts_d, clip, input_forget, hidden, xt, h, c)?,
            };
            match (mask_at(imp, t)?, zero) {
                (Some(m), Some(z)) => {
                    outs[t as usize] = Some(imp.emit(K::Where, &[m, hn, z], &[])?);
                    h = imp.emit(K::Where, &[m, hn, h], &[])?;
                    if cell == Cell::Lstm {
                        c = imp.emit(K::Where, &[m, cn, c], &[])?;
                    }
                }
                _ => {
                    outs[t as usize] = Some(hn);
                    h = hn;
                    c = cn;
                }
            }
        }
        let outs: Vec<Value> = outs.into_iter().flatten().collect();
        ys.push(if outs.is_empty() {
            full(imp, &[Dim::new(0), b_dim.clone(), Dim::new(hidden)], 0.0, dt)?
        } else {
            stack(imp, &outs, 0)?
        });
        hs_final.push(h);
        cs_final.push(c);
    }
    let mut result = Vec::new();
    // Y [S, dirs, B, H] (layout 0) or [B, S, dirs, H].
    result.push(if wants(node, 0) {
        let y = stack(imp, &ys, 1)?;
        Some(Slot::Val(if layout == 1 { permute(imp, y, &[2, 0, 1, 3])? } else { y }))
    } else {
        None
    });
    let n_states = if cell == Cell::Lstm { 2 } else { 1 };
    for (i, finals) in [hs_final, cs_final].into_iter().enumerate().take(n_states) {
        result.push(if wants(node, i + 1) {
            let s = stack(imp, &finals, state_axis)?;
            Some(Slot::Val(s))
        } else {
            None
        });
    }
    Ok(result)
}

/// `Ht = f(Xt·Wᵀ + Wb + H·Rᵀ + Rb)`, with `xt` holding the input part.
fn rnn_step(
    imp: &mut Importer,
    w: &DirWeights,
    acts: &[Act],
    clip: Option<f64>,
    xt: Value,
    h: Value,
) -> NResult<Value> {
    let hr = matmul_bt(imp, h, w.r)?;
    let hr = match w.rb {
        Some(rb) => bin(imp, K::Add, hr, rb)?,
        None => hr,
    };
    let pre = bin(imp, K::Add, xt, hr)?;
    apply_act(imp, acts[0], clip, pre)
}

#[allow(clippy::too_many_arguments)]
fn gru_step(
    imp: &mut Importer,
    w: &DirWeights,
    acts: &[Act],
    clip: Option<f64>,
    linear_before_reset: bool,
    hidden: u64,
    xt: Value,
    h: Value,
) -> NResult<Value> {
    let hh = hidden;
    let rzr = slice(imp, w.r, 0, 0, 2 * hh)?;
    let rh = slice(imp, w.r, 0, 2 * hh, 3 * hh)?;
    let (rb_zr, rb_h) = match w.rb {
        Some(rb) => (Some(slice(imp, rb, 0, 0, 2 * hh)?), Some(slice(imp, rb, 0, 2 * hh, 3 * hh)?)),
        None => (None, None),
    };
    let hzr = matmul_bt(imp, h, rzr)?;
    let hzr = match rb_zr {
        Some(b) => bin(imp, K::Add, hzr, b)?,
        None => hzr,
    };
    let xz = slice(imp, xt, 1, 0, hh)?;
    let xr = slice(imp, xt, 1, hh, 2 * hh)?;
    let xh = slice(imp, xt, 1, 2 * hh, 3 * hh)?;
    let hz = slice(imp, hzr, 1, 0, hh)?;
    let hr = slice(imp, hzr, 1, hh, 2 * hh)?;
    let zp = bin(imp, K::Add, xz, hz)?;
    let z = apply_act(imp, acts[0], clip, zp)?;
    let rp = bin(imp, K::Add, xr, hr)?;
    let rg = apply_act(imp, acts[0], clip, rp)?;
    let pre = if linear_before_reset {
        let m = matmul_bt(imp, h, rh)?;
        let m = match rb_h {
            Some(b) => bin(imp, K::Add, m, b)?,
            None => m,
        };
        let g = bin(imp, K::Mul, rg, m)?;
        bin(imp, K::Add, xh, g)?
    } else {
        let rhp = bin(imp, K::Mul, rg, h)?;
        let m = matmul_bt(imp, rhp, rh)?;
        let s = bin(imp, K::Add, xh, m)?;
        match rb_h {
            Some(b) => bin(imp, K::Add, s, b)?,
            None => s,
        }
    };
    let cand = apply_act(imp, acts[1], clip, pre)?;
    // (1 - z) * cand + z * h
    let one = imp.scalar(dtype(imp, z), 1.0)?;
    let nz = bin(imp, K::Sub, one, z)?;
    let a = bin(imp, K::Mul, nz, cand)?;
    let zh = bin(imp, K::Mul, z, h)?;
    bin(imp, K::Add, a, zh)
}

#[allow(clippy::too_many_arguments)]
fn lstm_step(
    imp: &mut Importer,
    w: &DirWeights,
    acts: &[Act],
    clip: Option<f64>,
    input_forget: bool,
    hidden: u64,
    xt: Value,
    h: Value,
    c: Value,
) -> NResult<(Value, Value)> {
    let hh = hidden;
    let hr = matmul_bt(imp, h, w.r)?;
    let hr = match w.rb {
        Some(rb) => bin(imp, K::Add, hr, rb)?,
        None => hr,
    };
    let gates = bin(imp, K::Add, xt, hr)?;
    let gate = |imp: &mut Importer, k: u64| slice(imp, gates, 1, k * hh, (k + 1) * hh);
    let (gi, go, gf, gc) = (gate(imp, 0)?, gate(imp, 1)?, gate(imp, 2)?, gate(imp, 3)?);
    let peep = |imp: &mut Importer, k: u64, g: Value, state: Value| -> NResult<Value> {
        match w.p {
            Some(p) => {
                let pk = slice(imp, p, 0, k * hh, (k + 1) * hh)?;
                let m = bin(imp, K::Mul, pk, state)?;
                bin(imp, K::Add, g, m)
            }
            None => Ok(g),
        }
    };
    let ip = peep(imp, 0, gi, c)?;
    let i = apply_act(imp, acts[0], clip, ip)?;
    let f = if input_forget {
        let one = imp.scalar(dtype(imp, i), 1.0)?;
        bin(imp, K::Sub, one, i)?
    } else {
        let fp = peep(imp, 2, gf, c)?;
        apply_act(imp, acts[0], clip, fp)?
    };
    let cand = apply_act(imp, acts[1], clip, gc)?;
    let fc = bin(imp, K::Mul, f, c)?;
    let ic = bin(imp, K::Mul, i, cand)?;
    let cn = bin(imp, K::Add, fc, ic)?;
    let op = peep(imp, 1, go, cn)?;
    let o = apply_act(imp, acts[0], clip, op)?;
    let hc = apply_act(imp, acts[2], None, cn)?;
    let hn = bin(imp, K::Mul, o, hc)?;
    Ok((hn, cn))
}

// ---------------------------------------------------------------------------------------------
// Scan

fn ints_attr(node: &NodeProto, name: &str, n: usize, default: i64) -> NResult<Vec<i64>> {
    match attr(node, name) {
        Some(a) => {
            if a.ints.len() != n {
                return invalid(format!("`{name}` has {} entries, expected {n}", a.ints.len()));
            }
            Ok(a.ints.clone())
        }
        None => Ok(vec![default; n]),
    }
}

/// How a scan's inputs are sliced and its outputs stacked.
struct ScanPlan {
    in_axes: Vec<i64>,
    in_rev: Vec<bool>,
    out_axes: Vec<i64>,
    out_rev: Vec<bool>,
}

/// The unrolled scan over unbatched operands: final states and stacked scan outputs.
fn scan_core<'m>(
    imp: &mut Importer<'m>,
    body: &'m GraphProto,
    depth: u32,
    states: Vec<Value>,
    xs: &[Value],
    plan: &ScanPlan,
) -> NResult<(Vec<Value>, Vec<Value>)> {
    let n_state = states.len();
    let mut len: Option<u64> = None;
    let mut axes = Vec::with_capacity(xs.len());
    for (i, &x) in xs.iter().enumerate() {
        let s = shape(imp, x);
        let a = norm_axis(plan.in_axes[i], s.len())?;
        let n = static_dim(&s[a], "the scan length")?;
        if len.is_some_and(|l| l != n) {
            return invalid(format!("scan inputs have different lengths ({} and {n})", len.unwrap_or(0)));
        }
        len = Some(n);
        axes.push(a);
    }
    let len = len.ok_or_else(|| NodeError::Invalid("Scan needs at least one scan input".into()))?;
    check_unroll(imp, len, body, "Scan")?;
    let n_out = body.output.len().checked_sub(n_state).ok_or_else(|| {
        NodeError::Invalid(format!("the body has {} outputs for {n_state} states", body.output.len()))
    })?;
    if plan.out_axes.len() != n_out || plan.out_rev.len() != n_out {
        return invalid(format!("the scan output attributes do not match the body's {n_out} scan outputs"));
    }
    let mut state: Vec<Slot> = states.into_iter().map(Slot::Val).collect();
    let mut collected: Vec<Vec<Value>> = vec![Vec::with_capacity(len as usize); n_out];
    for t in 0..len {
        let mut inputs = state.clone();
        for (i, &x) in xs.iter().enumerate() {
            let at = if plan.in_rev[i] { len - 1 - t } else { t };
            inputs.push(Slot::Val(select(imp, x, axes[i], at)?));
        }
        let outs = run_body(imp, body, &inputs, depth)?;
        state = outs[..n_state].to_vec();
        for (j, s) in outs[n_state..].iter().enumerate() {
            let v = value_of(imp, s, "a scan output")?;
            collected[j].push(v);
        }
    }
    let finals = state.iter().map(|s| value_of(imp, s, "a scan state")).collect::<NResult<Vec<_>>>()?;
    let mut scans = Vec::with_capacity(n_out);
    for (j, mut vs) in collected.into_iter().enumerate() {
        if vs.is_empty() {
            return unsupported("a Scan over an empty sequence with scan outputs");
        }
        if plan.out_rev[j] {
            vs.reverse();
        }
        let rank = imp.ty(vs[0]).rank();
        let a = norm_axis(plan.out_axes[j], rank + 1)?;
        scans.push(stack(imp, &vs, a)?);
    }
    Ok((finals, scans))
}

pub fn scan<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    let body = graph_attr(node, "body").ok_or_else(|| NodeError::Invalid("`body` is missing".into()))?;
    let m = a_int(node, "num_scan_inputs", 0);
    if m < 1 {
        return invalid(format!("num_scan_inputs must be at least 1, got {m}"));
    }
    let m = m as usize;
    let batched = imp.opset < 9;
    let first = usize::from(batched);
    let n_in = node.input.len().saturating_sub(first);
    let n_state =
        n_in.checked_sub(m).ok_or_else(|| NodeError::Invalid(format!("{n_in} inputs for {m} scan inputs")))?;
    let n_out = body.output.len().saturating_sub(n_state);
    let dir_name = if batched { "directions" } else { "scan_input_directions" };
    let in_rev = ints_attr(node, dir_name, m, 0)?.iter().map(|&d| d != 0).collect();
    let plan = ScanPlan {
        in_axes: if batched { vec![0; m] } else { ints_attr(node, "scan_input_axes", m, 0)? },
        in_rev,
        out_axes: if batched { vec![0; n_out] } else { ints_attr(node, "scan_output_axes", n_out, 0)? },
        out_rev: ints_attr(node, "scan_output_directions", n_out, 0)?.iter().map(|&d| d != 0).collect(),
    };
    let mut args = Vec::with_capacity(n_in);
    for i in 0..n_in {
        args.push(imp.input(node, first + i)?);
    }
    if !batched {
        let (finals, scans) = scan_core(imp, body, depth, args[..n_state].to_vec(), &args[n_state..], &plan)?;
        return Ok(finals.into_iter().chain(scans).map(|v| Some(Slot::Val(v))).collect());
    }
    // Opset 8: every operand has a leading batch axis; the scan axis is 1.
    let batch = match args.first() {
        Some(&a) => match shape(imp, a).first() {
            Some(d) => static_dim(d, "the batch size")?,
            None => return invalid("Scan-8 operands need a batch axis"),
        },
        None => return invalid("Scan needs inputs"),
    };
    if let Some(lens) = imp.ints_input(node, 0, "sequence_lens")? {
        let s = shape(imp, args[n_state]);
        let full_len = s.get(1).and_then(Dim::as_const);
        if lens.iter().any(|&l| Some(l as u64) != full_len || l < 0) {
            return unsupported("Scan-8 with sequence_lens shorter than the sequence");
        }
    }
    let len = shape(imp, args[n_state]).get(1).and_then(Dim::as_const).unwrap_or(0);
    check_unroll(imp, batch.saturating_mul(len).max(batch), body, "Scan over its batch")?;
    let mut per_batch: Vec<Vec<Value>> = Vec::new();
    for bi in 0..batch {
        let states = args[..n_state].iter().map(|&a| select(imp, a, 0, bi)).collect::<NResult<Vec<_>>>()?;
        let xs = args[n_state..].iter().map(|&a| select(imp, a, 0, bi)).collect::<NResult<Vec<_>>>()?;
        let (finals, scans) = scan_core(imp, body, depth, states, &xs, &plan)?;
        per_batch.push(finals.into_iter().chain(scans).collect());
    }
    let n = per_batch.first().map_or(0, Vec::len);
    let mut outs = Vec::with_capacity(n);
    for j in 0..n {
        let vs: Vec<Value> = per_batch.iter().map(|p| p[j]).collect();
        outs.push(Some(Slot::Val(stack(imp, &vs, 0)?)));
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// FlexAttention

pub fn flex_attention<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    let q = imp.input(node, 0)?;
    let k = imp.input(node, 1)?;
    let v = imp.input(node, 2)?;
    let (qs, ks, vs) = (shape(imp, q), shape(imp, k), shape(imp, v));
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return invalid("Q, K and V must be 4-D");
    }
    let dt = dtype(imp, q);
    if !dt.is_float() {
        return unsupported(format!("FlexAttention on {dt}"));
    }
    let precision = match attr(node, "softmax_precision") {
        Some(a) => dtype_of(a.i as i32)
            .filter(|d| d.is_float())
            .ok_or_else(|| NodeError::Invalid(format!("softmax_precision {}", a.i)))?,
        None if dt == DType::F64 => DType::F64,
        None => DType::F32,
    };
    let scale = match attr(node, "scale") {
        Some(_) => a_float(node, "scale", 1.0),
        None => {
            let d = static_dim(&qs[3], "the head size (for the default scale)")?;
            1.0 / (d as f64).sqrt()
        }
    };
    let hq = static_dim(&qs[1], "the query head count")?;
    let hkv = static_dim(&ks[1], "the key/value head count")?;
    if hkv == 0 || hq % hkv != 0 {
        return invalid(format!("{hq} query heads are not a multiple of {hkv} key/value heads"));
    }
    let group = hq / hkv;
    let score_mod = graph_attr(node, "score_mod");
    let prob_mod = graph_attr(node, "prob_mod");
    if score_mod.is_none() && prob_mod.is_none() && precision == dt {
        let (qg, kg, vg) = if group > 1 {
            let g5 = |s: &[Dim], mid: u64| vec![s[0].clone(), Dim::new(hkv), Dim::new(mid), s[2].clone(), s[3].clone()];
            (reshape(imp, q, &g5(&qs, group))?, reshape(imp, k, &g5(&ks, 1))?, reshape(imp, v, &g5(&vs, 1))?)
        } else {
            (q, k, v)
        };
        let y = imp.emit(
            K::ScaledDotProductAttention,
            &[qg, kg, vg],
            &[
                ("causal", AttrValue::Bool(false)),
                ("scale", AttrValue::Float(scale)),
                ("safe_softmax", AttrValue::Bool(false)),
            ],
        )?;
        let ys = shape(imp, y);
        let out = [qs[0].clone(), qs[1].clone(), qs[2].clone(), ys[ys.len() - 1].clone()];
        return Ok(vec![Some(Slot::Val(reshape(imp, y, &out)?))]);
    }
    // K and V repeated to the query heads: [B, kv, 1, S, D] -> [B, kv, g, S, D] -> [B, Hq, S, D].
    let align = |imp: &mut Importer, t: Value, s: &[Dim]| -> NResult<Value> {
        if group == 1 {
            return Ok(t);
        }
        let u = reshape(imp, t, &[s[0].clone(), s[1].clone(), Dim::new(1), s[2].clone(), s[3].clone()])?;
        let e = imp.emit(
            K::Expand,
            &[u],
            &[("shape", dims_attr(&[s[0].clone(), s[1].clone(), Dim::new(group), s[2].clone(), s[3].clone()]))],
        )?;
        reshape(imp, e, &[s[0].clone(), Dim::new(hq), s[2].clone(), s[3].clone()])
    };
    let ka = align(imp, k, &ks)?;
    let va = align(imp, v, &vs)?;
    let root = scale.sqrt();
    let qsc = bin_scalar(imp, K::Mul, q, root)?;
    let ksc = bin_scalar(imp, K::Mul, ka, root)?;
    let score = matmul_bt(imp, qsc, ksc)?;
    let mut score = convert(imp, score, precision)?;
    if let Some(g) = score_mod {
        score = modifier(imp, g, score, depth, "score_mod")?;
    }
    let mut prob = imp.emit(K::Softmax, &[score], &[("axis", int(-1))])?;
    if let Some(g) = prob_mod {
        prob = modifier(imp, g, prob, depth, "prob_mod")?;
    }
    let vp = convert(imp, va, precision)?;
    let y = imp.emit(K::Matmul, &[prob, vp], &[])?;
    Ok(vec![Some(Slot::Val(convert(imp, y, dt)?))])
}

/// A one-input, one-output modifier subgraph applied to `x`; the result must keep its type.
fn modifier<'m>(imp: &mut Importer<'m>, g: &'m GraphProto, x: Value, depth: u32, what: &str) -> NResult<Value> {
    if g.output.len() != 1 {
        return invalid(format!("`{what}` must have one output, has {}", g.output.len()));
    }
    let outs = run_body(imp, g, &[Slot::Val(x)], depth)?;
    let y = value_of(imp, &outs[0], what)?;
    if imp.ty(y) != imp.ty(x) {
        return invalid(format!("`{what}` changes its input's type {} to {}", imp.ty(x), imp.ty(y)));
    }
    Ok(y)
}
