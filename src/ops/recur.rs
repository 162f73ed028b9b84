//! High-level recurrences: `lstm`.
//!
//! `lstm(xw [S, B, 4H], r [4H, H], h0 [B, H], c0 [B, H]) {reverse}` runs an LSTM layer's
//! recurrence over a sequence whose input projections are already computed: `xw[t]` is
//! `x[t]·Wᵀ` plus both biases, gate blocks in ONNX's order (input, output, forget, cell).
//! Step by step, in sequence order (from the last step back with `reverse`), with `h`, `c`
//! starting at `h0`, `c0`:
//!
//! ```text
//! g = xw[t] + h·rᵀ                       [B, 4H]
//! i = σ(g[:, 0:H])   o = σ(g[:, H:2H])   f = σ(g[:, 2H:3H])   c̃ = tanh(g[:, 3H:4H])
//! c = f·c + i·c̃      h = o·tanh(c)
//! out[t, 0] = h      out[t, 1] = c       out: [S, 2, B, H]
//! ```
//!
//! So `out[:, 0]` is ONNX's `Y` for one direction, and the final states are `out[last, 0]`
//! and `out[last, 1]` (`last` is step 0 with `reverse`). The three activations are the
//! defaults of ONNX, PyTorch and Keras; an importer unrolls any other cell (peepholes, clip,
//! other activations, per-example lengths) into prims itself.
//!
//! Like the norm family, the op is composite: the whole recurrence runs in f64 from the
//! (dtype-rounded) inputs, and every result is rounded once; so the decomposition, which
//! rounds the state to the dtype at every step, is measured against an answer whose state
//! never was. `σ` is the stable sigmoid of `nn.rs`. NaN and infinities propagate as the
//! formulas say (a NaN gate poisons its row's state from then on).
//!
//! All four operands are floats of one dtype; `H` must be static; `S` and `B` may be symbolic.
//! Fuel: `S·B·4H·(H + 1)`.

use super::nn::sigmoid;
use super::util::{bool_attr, expect_float, expect_rank};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{Attrs, Dim, Shape, TensorType};

pub static SPECS: &[OpSpec] = &[OpSpec {
    kind: OpKind::Lstm,
    name: "lstm",
    rung: Rung::High,
    arity: Arity::Exactly(4),
    attrs: &[bool_attr("reverse", false)],
    infer: infer_lstm,
    eval: eval_lstm,
    explicit: None,
    mutates: false,
    aliases: false,
    native: super::Native::Kept,
    doc: "LSTM recurrence over precomputed input projections xw [S,B,4H] (gates i,o,f,c), r [4H,H], h0, c0 [B,H] -> [S,2,B,H] (h and c per step)",
}];

fn shape_err(arg: usize, what: &str, got: &Shape, want: &str) -> OpError {
    OpError::Shape(format!("argument {arg} ({what}) has shape {got}, expected {want}"))
}

fn infer_lstm(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (xw, r) = (args[0], args[1]);
    expect_float(0, xw)?;
    for (i, a) in args.iter().enumerate().skip(1) {
        if a.dtype != xw.dtype {
            return Err(OpError::DType { arg: i, got: a.dtype, expected: xw.dtype.to_string() });
        }
    }
    expect_rank(0, xw, 3)?;
    expect_rank(1, r, 2)?;
    let hidden = r.shape.dims()[1].clone();
    let Some(h) = hidden.as_const() else {
        return Err(shape_err(1, "r", &r.shape, "a static hidden size [4H, H]"));
    };
    let gates = h.checked_mul(4).ok_or_else(|| OpError::Shape(format!("hidden size {h} overflows")))?;
    if r.shape.dims()[0] != Dim::new(gates) {
        return Err(shape_err(1, "r", &r.shape, &format!("[{gates}, {h}]")));
    }
    let (steps, batch) = (xw.shape.dims()[0].clone(), xw.shape.dims()[1].clone());
    if xw.shape.dims()[2] != Dim::new(gates) {
        return Err(shape_err(0, "xw", &xw.shape, &format!("[S, B, {gates}]")));
    }
    let state: Shape = [batch.clone(), hidden.clone()].into_iter().collect();
    for (i, what) in [(2, "h0"), (3, "c0")] {
        if args[i].shape != state {
            return Err(shape_err(i, what, &args[i].shape, &state.to_string()));
        }
    }
    Ok(TensorType::new(xw.dtype, [steps, Dim::new(2), batch, hidden].into_iter().collect()))
}

fn eval_lstm(_: OpKind, ctx: &mut EvalCtx, attrs: &Attrs, args: &[View], out: &TensorType) -> Result<View, EvalError> {
    let xs = args[0].shape();
    let (steps, batch, gates) = (xs[0], xs[1], xs[2]);
    let hidden = gates / 4;
    let work = [steps, batch, gates, hidden + 1].iter().fold(1u64, |w, &d| w.saturating_mul(d as u64));
    ctx.charge(work)?;
    let (xw, r) = (args[0].floats(), args[1].floats());
    let (mut h, mut c) = (args[2].floats(), args[3].floats());
    let mut ys = vec![0.0; steps * 2 * batch * hidden];
    let mut g = vec![0.0; gates];
    for k in 0..steps {
        let t = if attrs.bool("reverse") { steps - 1 - k } else { k };
        for b in 0..batch {
            let hb = &h[b * hidden..][..hidden];
            for (j, gj) in g.iter_mut().enumerate() {
                let row = &r[j * hidden..][..hidden];
                *gj = xw[(t * batch + b) * gates + j] + row.iter().zip(hb).map(|(w, x)| w * x).sum::<f64>();
            }
            for j in 0..hidden {
                let (i, o, f) = (sigmoid(g[j]), sigmoid(g[hidden + j]), sigmoid(g[2 * hidden + j]));
                let cand = g[3 * hidden + j].tanh();
                let cn = f * c[b * hidden + j] + i * cand;
                c[b * hidden + j] = cn;
                h[b * hidden + j] = o * cn.tanh();
            }
            let at = |s: usize| ((t * 2 + s) * batch + b) * hidden;
            ys[at(0)..at(0) + hidden].copy_from_slice(&h[b * hidden..][..hidden]);
            ys[at(1)..at(1) + hidden].copy_from_slice(&c[b * hidden..][..hidden]);
        }
    }
    let shape = vec![steps, 2, batch, hidden];
    Ok(View::from_floats(ctx, out.dtype, shape, ys))
}
