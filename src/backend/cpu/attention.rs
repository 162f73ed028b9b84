//! The library kernel for recovered attention (`scaled_dot_product_attention` without a mask
//! argument, causal or not) on f32: blocked, never materialising the L×S score matrix.
//!
//! Per batch element (head) and block of [`BLOCK`] query rows: the scores of the block
//! against the keys it may see (all S, or with `causal` only keys `j < i_end`: whole tiles past
//! the diagonal are skipped, about half the work) through the GEMM kernel, then per row the
//! scale, the causal `-inf` bias, and a softmax written in place (exp of the max-subtracted
//! scores; a row with nothing to attend gives zeros with `safe_softmax`, NaN without), then the
//! block's output through the GEMM kernel again. Memory: one `BLOCK × S` score tile per task.
//! Blocks run on rayon workers when `threads > 1`. The op's meaning is in `crate::ops::norm`;
//! `tests/recover.rs` checks this kernel against the interpreter.

use rayon::prelude::*;

use super::gemm::{matmul_f32, Epilogue, KernelError};

/// Query rows per task.
pub const BLOCK: usize = 64;

/// Shapes: q `[nb, l, d]`, k `[nb, s, d]`, v `[nb, s, dv]`, out `[nb, l, dv]` (leading dims
/// flattened into `nb`).
pub struct Dims {
    pub nb: usize,
    pub l: usize,
    pub s: usize,
    pub d: usize,
    pub dv: usize,
}

#[allow(clippy::too_many_arguments)]
pub fn attention_f32(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    dims: &Dims,
    scale: f32,
    causal: bool,
    safe: bool,
    threads: usize,
) -> Result<(), KernelError> {
    let Dims { nb, l, s, d, dv } = *dims;
    let need = |name: &'static str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(KernelError::Len { name, got, want })
        }
    };
    need("q", q.len(), nb * l * d)?;
    need("k", k.len(), nb * s * d)?;
    need("v", v.len(), nb * s * dv)?;
    need("out", out.len(), nb * l * dv)?;
    if out.is_empty() {
        return Ok(());
    }
    // Tasks: (batch element, first row, its output rows).
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
    for (b, ob) in out.chunks_mut(l * dv).enumerate() {
        for (blk, o) in ob.chunks_mut(BLOCK * dv).enumerate() {
            tasks.push((b, blk * BLOCK, o));
        }
    }
    let run = |(b, i0, o): (usize, usize, &mut [f32])| -> Result<(), KernelError> {
        let rows = o.len() / dv.max(1);
        let rows = if dv == 0 { BLOCK.min(l - i0) } else { rows };
        let i1 = i0 + rows;
        let kend = if causal { s.min(i1) } else { s };
        let qb = &q[(b * l + i0) * d..(b * l + i1) * d];
        let kb = &k[b * s * d..(b * s + kend) * d];
        let vb = &v[b * s * dv..(b * s + kend) * dv];
        let mut p = vec![0f32; rows * kend];
        if d > 0 && kend > 0 {
            matmul_f32(qb, &[rows, d], kb, &[kend, d], false, true, &mut p, 1, &Epilogue::none())?;
        }
        let mut empty = vec![false; rows];
        let mut scaled = vec![0f32; kend];
        for (r, row) in p.chunks_mut(kend.max(1)).enumerate().take(rows) {
            let i = i0 + r;
            let row = &mut row[..kend];
            let visible = if causal { (i + 1).min(kend) } else { kend };
            let t = &mut scaled[..visible];
            if d == 0 {
                t.fill(0.0);
            } else {
                for (y, &x) in t.iter_mut().zip(row.iter()) {
                    *y = x * scale;
                }
            }
            row[visible..].fill(0.0);
            if visible == 0 || t.iter().all(|&x| x == f32::NEG_INFINITY) {
                // Nothing to attend: zeros (safe softmax, or no keys at all), else NaN.
                let fill = if safe || s == 0 { 0.0 } else { f32::NAN };
                row.fill(fill);
                empty[r] = true;
                continue;
            }
            super::rows::softmax_into(t, &mut row[..visible]);
        }
        if dv > 0 {
            if kend > 0 {
                matmul_f32(&p, &[rows, kend], vb, &[kend, dv], false, false, o, 1, &Epilogue::none())?;
            } else {
                o.iter_mut().for_each(|x| *x = 0.0);
            }
            for (r, e) in empty.iter().enumerate() {
                if *e && (safe || s == 0) {
                    o[r * dv..(r + 1) * dv].iter_mut().for_each(|x| *x = 0.0);
                }
            }
        }
        Ok(())
    };
    if threads > 1 && tasks.len() > 1 {
        tasks.into_par_iter().map(run).collect::<Result<Vec<()>, _>>()?;
    } else {
        for t in tasks {
            run(t)?;
        }
    }
    Ok(())
}
