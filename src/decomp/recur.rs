//! Decompositions of the recurrences: `lstm` unrolled step by step.
//!
//! Each step is a `matmul` of the state with `rᵀ`, the gate slices, the stable sigmoid of
//! `nn.rs`, `tanh`, and the state update; the steps' `h` and `c` are concatenated into the
//! `[S, 2, B, H]` result. f16 and bf16 run in f32 (the state kept in f32 between steps) and
//! convert back once, like the activations. The sequence length must be static: unrolling
//! needs the count (an importer that emits `lstm` knows it).

use super::compute_dtype;
use super::nn::sigmoid_of;
use super::{DecompError, DecompFn, Emitter};
use crate::ir::{Dim, Node, Shape, Value};
use crate::ops::OpKind;

/// The most steps one `lstm` unrolls into (each is about twenty prims): the ONNX importer's
/// bound on the steps it unrolls itself. Native mode runs longer sequences whole.
pub const MAX_STEPS: u64 = 4096;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    match op {
        OpKind::Lstm => Some(lstm),
        _ => None,
    }
}

fn lstm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let unsupported = |reason: String| DecompError::Unsupported { op: "lstm", reason };
    let xs = e.shape(args[0]);
    let steps = xs.dims()[0]
        .as_const()
        .ok_or_else(|| unsupported(format!("the sequence length {} is not static", xs.dims()[0])))?;
    if steps > MAX_STEPS {
        return Err(unsupported(format!("{steps} steps (at most {MAX_STEPS} unroll)")));
    }
    let batch = xs.dims()[1].clone();
    let gates = xs.dims()[2].as_const().unwrap_or(0);
    let hidden = (gates / 4) as i64;
    let dt = node.ty.dtype;
    let cdt = compute_dtype(dt);
    let [xw, r, mut h, mut c] = [0, 1, 2, 3].map(|i| args[i]);
    let (xw, r) = (e.convert(xw, cdt)?, e.convert(r, cdt)?);
    h = e.convert(h, cdt)?;
    c = e.convert(c, cdt)?;
    let row: Shape = [batch.clone(), Dim::new(gates)].into_iter().collect();
    let piece: Shape = [Dim::new(1), Dim::new(1), batch, Dim::new(hidden as u64)].into_iter().collect();
    let reverse = node.attrs.bool("reverse");
    let mut outs: Vec<Option<Value>> = vec![None; steps as usize];
    for k in 0..steps {
        let t = if reverse { steps - 1 - k } else { k };
        let xt = e.slice(xw, 0, t as i64, t as i64 + 1, 1)?;
        let xt = e.reshape(xt, &row)?;
        let hr = e.matmul(h, r, false, true)?;
        let g = e.add(xt, hr)?;
        let gate = |e: &mut Emitter, n: i64| e.slice(g, 1, n * hidden, (n + 1) * hidden, 1);
        let (gi, go, gf, gc) = (gate(e, 0)?, gate(e, 1)?, gate(e, 2)?, gate(e, 3)?);
        let i = sigmoid_of(e, gi)?;
        let o = sigmoid_of(e, go)?;
        let f = sigmoid_of(e, gf)?;
        let cand = e.unary(OpKind::Tanh, gc)?;
        let fc = e.mul(f, c)?;
        let ic = e.mul(i, cand)?;
        c = e.add(fc, ic)?;
        let tc = e.unary(OpKind::Tanh, c)?;
        h = e.mul(o, tc)?;
        let (hp, cp) = (e.reshape(h, &piece)?, e.reshape(c, &piece)?);
        outs[t as usize] = Some(e.cat(&[hp, cp], 1)?);
    }
    let out = match outs.into_iter().collect::<Option<Vec<Value>>>() {
        Some(v) if !v.is_empty() => e.cat(&v, 0)?,
        _ => e.full(0.0, cdt, &node.ty.shape)?,
    };
    e.convert(out, dt)
}
