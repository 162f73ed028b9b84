//! Derivatives of the opaque ops, written with the opaque ops themselves, so a backward pass
//! runs on the same GEMM and convolution kernels as the forward.
//!
//! `matmul`: `dA = dY Bᵀ`, `dB = Aᵀ dY` with the transposes folded into the flags, then
//! summed back over batch dims the operand was broadcast along ([`sum_to`]); a matrix `B`
//! shared by a batched `A` gets `dB` as one product over the batch rows flattened.
//!
//! `conv` (`x [B, C, L...]`, `w [O, C/G, K...]`, stride `s`, dilation `d`, pads `pb`/`pe`,
//! groups `G`; output length `Lo`), both as convolutions with padding done by `pad` (which
//! may crop):
//! - `dx` is the transposed convolution: the cotangent with `s - 1` zeros between elements,
//!   padded by `(K-1) d - pb` before and `L + pb - (Lo-1) s - 1` after, convolved (stride 1,
//!   dilation `d`) with the weight flipped in space and with in- and out-channels swapped
//!   within each group (`[G, O/G, C/G, K] → [G, C/G, O/G, K] → [C, O/G, K]`).
//! - `dw` is the correlation of the input with the cotangent over the batch: the batch plays
//!   the channels' part and the channels the batch's (`x → [C/G, G·B, L]` padded by `pb`
//!   before and `(K-1) d + (Lo-1) s + 1 - L - pb` after, `dy → [O, B, Lo]`), convolved with
//!   stride `d` and dilation `s` in `G` groups, giving `[C/G, O, K]`, permuted to
//!   `[O, C/G, K]`.
//!
//! The pads need `L` and `Lo` as numbers, or stride 1 (then they are `(K-1) d - pe` and `pe`
//! whatever the length); `dw` also needs static output lengths (they become a kernel size),
//! and is built only when the weight needs a gradient. Otherwise the rule fails with a typed
//! error.

use smallvec::smallvec;

use super::shape::{ints, sum_to};
use super::{Grads, Vjp};
use crate::decomp::{DecompError, Emitter};
use crate::ir::{AttrValue, Dim, Shape, Value};
use crate::ops::OpKind;

pub(super) fn matmul(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (a, b, ct) = (v.arg(0), v.arg(1), v.ct);
    let (ta, tb) = (v.node.attrs.bool("transpose_a"), v.node.attrs.bool("transpose_b"));
    let da = if ta { e.matmul(b, ct, tb, true)? } else { e.matmul(ct, b, false, !tb)? };
    let (a_shape, b_shape) = (e.shape(a), e.shape(b));
    let db = match if b_shape.rank() == 2 { batch_folded(e, a, ct, ta)? } else { None } {
        // `Σ_i aᵢᵀ dYᵢ` as `a'ᵀ dY'` over the batch rows flattened into one (or its transpose).
        Some((a2, ct2)) if tb => e.matmul(ct2, a2, true, false)?,
        Some((a2, ct2)) => e.matmul(a2, ct2, true, false)?,
        None => {
            let db = if tb { e.matmul(ct, a, true, ta)? } else { e.matmul(a, ct, !ta, false)? };
            sum_to(e, db, &b_shape)?
        }
    };
    Ok(smallvec![Some(sum_to(e, da, &a_shape)?), Some(db)])
}

/// For `a @ B` with `B` a matrix shared by every batch element of `a [..., M, K]` (not
/// transposed): `a` and `dY [..., M, N]` viewed as `[n M, K]` and `[n M, N]`, `n` the batch
/// elements, so `dB`'s sum over the batch is the one product `a'ᵀ dY'` with `n M` as its
/// inner dimension (a linear layer's weight gradient as one GEMM, as PyTorch forms it,
/// rather than a product per batch element summed after). `None` where `a` is a matrix, a
/// vector or transposed. The caller checks that `B` is a matrix.
fn batch_folded(e: &mut Emitter, a: Value, ct: Value, ta: bool) -> Result<Option<(Value, Value)>, DecompError> {
    let (a_shape, ct_shape) = (e.shape(a), e.shape(ct));
    let r = a_shape.rank();
    if ta || r < 3 || ct_shape.rank() != r {
        return Ok(None);
    }
    let rows = a_shape.dims()[..r - 1].iter().try_fold(Dim::new(1), |n, d| n.mul(d));
    let Ok(rows) = rows else { return Ok(None) };
    let (k, n) = (a_shape.dims()[r - 1].clone(), ct_shape.dims()[r - 1].clone());
    let a2 = e.reshape(a, &[rows.clone(), k].into_iter().collect::<Shape>())?;
    let ct2 = e.reshape(ct, &[rows, n].into_iter().collect::<Shape>())?;
    Ok(Some((a2, ct2)))
}

fn unsupported(reason: impl Into<String>) -> DecompError {
    DecompError::Unsupported { op: "conv", reason: reason.into() }
}

/// A conv attribute list: `[]` means `n` copies of `default`.
fn list(v: &Vjp, name: &str, n: usize, default: i64) -> Vec<i64> {
    let l = v.node.attrs.ints(name);
    if l.is_empty() {
        vec![default; n]
    } else {
        l.to_vec()
    }
}

fn reshape_to(e: &mut Emitter, x: Value, dims: Vec<Dim>) -> Result<Value, DecompError> {
    e.reshape(x, &dims.into_iter().collect::<Shape>())
}

fn pad_spatial(e: &mut Emitter, x: Value, low: &[i64], high: &[i64], interior: &[i64]) -> Result<Value, DecompError> {
    if low.iter().chain(high).chain(interior).all(|&p| p == 0) {
        return Ok(x);
    }
    let edge = |p: &[i64]| ints([0, 0].into_iter().chain(p.iter().copied()));
    e.prim(
        OpKind::Pad,
        &[x],
        &[("low", edge(low)), ("high", edge(high)), ("interior", edge(interior)), ("value", AttrValue::Float(0.0))],
    )
}

fn conv_op(
    e: &mut Emitter,
    x: Value,
    w: Value,
    stride: &[i64],
    dilation: &[i64],
    groups: u64,
) -> Result<Value, DecompError> {
    e.prim(
        OpKind::Conv,
        &[x, w],
        &[
            ("stride", ints(stride.iter().copied())),
            ("padding", ints(std::iter::repeat_n(0, 2 * stride.len()))),
            ("dilation", ints(dilation.iter().copied())),
            ("groups", AttrValue::Int(groups as i64)),
        ],
    )
}

pub(super) fn conv(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (x, w, ct) = (v.arg(0), v.arg(1), v.ct);
    let (xs, ws, ys) = (e.shape(x), e.shape(w), e.shape(v.out));
    let n = xs.rank() - 2;
    let (stride, dilation) = (list(v, "stride", n, 1), list(v, "dilation", n, 1));
    let padding = list(v, "padding", 2 * n, 0);
    let (pb, pe) = padding.split_at(n);
    let groups = v.node.attrs.int("groups") as u64;
    if ys.dims().iter().any(|d| d.as_const() == Some(0)) {
        return Ok(smallvec![None, None]);
    }
    let g = Dim::new(groups);
    let div = |d: &Dim| d.div_exact(&g).map_err(|err| unsupported(err.to_string()));
    let (batch, c, o) = (xs.dims()[0].clone(), xs.dims()[1].clone(), ws.dims()[0].clone());
    let (c_g, o_g) = (div(&c)?, div(&o)?);
    let spatial = |s: &Shape| s.dims()[2..].to_vec();
    let (len, out_len, kernel) = (spatial(&xs), spatial(&ys), spatial(&ws));

    // Per spatial axis: the transposed convolution's pads (dx) and the input's pads (dw).
    let mut dx_low = Vec::with_capacity(n);
    let mut dx_high = Vec::with_capacity(n);
    let mut dw_high = Vec::with_capacity(n);
    for i in 0..n {
        let k = kernel[i].as_const().ok_or_else(|| unsupported("kernel dims must be static"))? as i64;
        let extent = (k - 1) * dilation[i];
        dx_low.push(extent - pb[i]);
        match (len[i].as_const(), out_len[i].as_const()) {
            (Some(l), Some(lo)) => {
                let (l, lo) = (l as i64, lo as i64);
                dx_high.push(l + pb[i] - (lo - 1) * stride[i] - 1);
                dw_high.push(extent + (lo - 1) * stride[i] + 1 - l - pb[i]);
            }
            _ if stride[i] == 1 => {
                dx_high.push(extent - pe[i]);
                dw_high.push(pe[i]);
            }
            _ => return Err(unsupported("a symbolic spatial dim with stride > 1 has no derivative rule")),
        }
    }

    // dx: the cotangent dilated and padded, against the flipped, regrouped weight.
    let interior: Vec<i64> = stride.iter().map(|s| s - 1).collect();
    let ct_padded = pad_spatial(e, ct, &dx_low, &dx_high, &interior)?;
    let wg = reshape_to(e, w, [g.clone(), o_g.clone(), c_g.clone()].into_iter().chain(kernel.clone()).collect())?;
    let perm: Vec<usize> = [0, 2, 1].into_iter().chain(3..3 + n).collect();
    let wg = e.permute(wg, &perm)?;
    let wt = reshape_to(e, wg, [c.clone(), o_g.clone()].into_iter().chain(kernel.clone()).collect())?;
    let wt = e.prim(OpKind::Rev, &[wt], &[("axes", ints((2..2 + n as i64).collect::<Vec<_>>()))])?;
    let dx = conv_op(e, ct_padded, wt, &vec![1; n], &dilation, groups)?;
    if !v.wants(1) {
        return Ok(smallvec![Some(dx), None]);
    }

    // dw: channels as the batch, the batch as channels.
    if out_len.iter().any(|d| d.as_const().is_none()) {
        return Err(unsupported("the weight's derivative needs static output lengths"));
    }
    let x_padded = pad_spatial(e, x, pb, &dw_high, &vec![0; n])?;
    let padded_len = spatial(&e.shape(x_padded));
    let xg = reshape_to(
        e,
        x_padded,
        [batch.clone(), g.clone(), c_g.clone()].into_iter().chain(padded_len.clone()).collect(),
    )?;
    let perm: Vec<usize> = [2, 1, 0].into_iter().chain(3..3 + n).collect();
    let xg = e.permute(xg, &perm)?;
    let gb = g.mul(&batch).map_err(|err| unsupported(err.to_string()))?;
    let xt = reshape_to(e, xg, [c_g.clone(), gb].into_iter().chain(padded_len).collect())?;
    let cg = reshape_to(e, ct, [batch.clone(), g.clone(), o_g.clone()].into_iter().chain(out_len.clone()).collect())?;
    let perm: Vec<usize> = [1, 2, 0].into_iter().chain(3..3 + n).collect();
    let cg = e.permute(cg, &perm)?;
    let ctt = reshape_to(e, cg, [o.clone(), batch].into_iter().chain(out_len).collect())?;
    let dw = conv_op(e, xt, ctt, &dilation, &stride, groups)?;
    let perm: Vec<usize> = [1, 0].into_iter().chain(2..2 + n).collect();
    let dw = e.permute(dw, &perm)?;
    Ok(smallvec![Some(dx), Some(dw)])
}
