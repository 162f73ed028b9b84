//! The `lstm` library kernel: a whole sequence in one call (`crate::ops::recur` defines it).
//!
//! Unrolled into prims, every step of an LSTM is a tiny matmul `[B, H] x [H, 4H]` and a few
//! pointwise kernels, each a separate call with its own overhead, so a 128-step layer of
//! hidden size 32 spent about 1.5 µs a step on calls around 0.1 µs of arithmetic. Here the
//! state stays in L1 across the steps: `rᵀ` is laid out once per call as `H` rows of the
//! `4H` gate columns (padded to a multiple of [`CHUNK`]), and each step, per batch row,
//! accumulates `xw[t] + h·rᵀ` chunk by chunk in registers (one multiply-add chain per
//! column, `k` ascending), then applies the gates: σ and tanh are the epilogue activations'
//! branch-free f32 kernels (`activation.rs`), so the loops vectorize.
//!
//! One source, compiled three times (AVX-512, AVX2+FMA, and the baseline, which is NEON on
//! aarch64) and picked at run time under the ISA cap; every path uses `mul_add`, so all give
//! the same bits. Per-call scratch is per thread and kept between calls.

use super::activation::{sigmoid, tanh};
use super::gemm::KernelError;
use crate::ir::Attrs;

/// Gate columns accumulated at once: four AVX-512 registers, eight AVX2 ones.
const CHUNK: usize = 64;

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
pub struct LstmDims {
    pub steps: usize,
    pub batch: usize,
    pub hidden: usize,
    pub reverse: bool,
}

thread_local! {
    /// `rᵀ` padded, then the `h` and `c` states, then one row of gates.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `lstm(xw, r, h0, c0)` on f32 buffers, `shapes` theirs, into `out` (`[S, 2, B, H]`).
pub fn lstm(attrs: &Attrs, args: &[&[f32]], shapes: &[&[usize]], out: &mut [f32]) -> Result<(), KernelError> {
    let [xw, r, h0, c0] = args else {
        return Err(KernelError::Shape(format!("lstm takes 4 operands, got {}", args.len())));
    };
    let (&[steps, batch, gates], &[rg, hidden]) = (shapes[0], shapes[1]) else {
        return Err(KernelError::Shape(format!("lstm operand shapes {shapes:?}")));
    };
    if gates != 4 * hidden || rg != gates {
        return Err(KernelError::Shape(format!("lstm: xw {:?} and r {:?} disagree", shapes[0], shapes[1])));
    }
    let d = LstmDims { steps, batch, hidden, reverse: attrs.bool("reverse") };
    let len = |name: &'static str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(KernelError::Len { name, got, want })
        }
    };
    len("xw", xw.len(), steps * batch * gates)?;
    len("r", r.len(), gates * hidden)?;
    len("h0", h0.len(), batch * hidden)?;
    len("c0", c0.len(), batch * hidden)?;
    len("out", out.len(), steps * 2 * batch * hidden)?;
    if out.is_empty() {
        return Ok(());
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        lstm_f32(xw, r, h0, c0, out, d, &mut s);
    });
    Ok(())
}

/// The kernel proper, with lengths checked by the caller; `scratch` is grown as needed.
pub fn lstm_f32(xw: &[f32], r: &[f32], h0: &[f32], c0: &[f32], out: &mut [f32], d: LstmDims, scratch: &mut Vec<f32>) {
    let (hd, gates) = (d.hidden, 4 * d.hidden);
    let padded = gates.div_ceil(CHUNK) * CHUNK;
    let need = hd * padded + 2 * d.batch * hd + padded;
    if scratch.len() < need {
        scratch.resize(need, 0.0);
    }
    let (rt, rest) = scratch.split_at_mut(hd * padded);
    let (h, rest) = rest.split_at_mut(d.batch * hd);
    let (c, rest) = rest.split_at_mut(d.batch * hd);
    let acc = &mut rest[..padded];
    // rt[k][j] = r[j][k]; the padding columns are zero.
    for k in 0..hd {
        let row = &mut rt[k * padded..][..padded];
        for (j, x) in row.iter_mut().enumerate() {
            *x = if j < gates { r[j * hd + k] } else { 0.0 };
        }
    }
    h.copy_from_slice(h0);
    c.copy_from_slice(c0);
    steps(xw, rt, h, c, acc, out, d);
}

#[cfg(target_arch = "x86_64")]
fn steps(xw: &[f32], rt: &[f32], h: &mut [f32], c: &mut [f32], acc: &mut [f32], out: &mut [f32], d: LstmDims) {
    if super::has_avx512() {
        // SAFETY: the CPU has every feature the variant is compiled for (checked just above).
        return unsafe { steps_avx512(xw, rt, h, c, acc, out, d) };
    }
    if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { steps_avx2(xw, rt, h, c, acc, out, d) };
    }
    steps_generic(xw, rt, h, c, acc, out, d)
}

#[cfg(not(target_arch = "x86_64"))]
fn steps(xw: &[f32], rt: &[f32], h: &mut [f32], c: &mut [f32], acc: &mut [f32], out: &mut [f32], d: LstmDims) {
    steps_generic(xw, rt, h, c, acc, out, d)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn steps_avx512(
    xw: &[f32],
    rt: &[f32],
    h: &mut [f32],
    c: &mut [f32],
    acc: &mut [f32],
    out: &mut [f32],
    d: LstmDims,
) {
    steps_generic(xw, rt, h, c, acc, out, d)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn steps_avx2(
    xw: &[f32],
    rt: &[f32],
    h: &mut [f32],
    c: &mut [f32],
    acc: &mut [f32],
    out: &mut [f32],
    d: LstmDims,
) {
    steps_generic(xw, rt, h, c, acc, out, d)
}

/// Every step, in processing order; see the module docs.
#[inline(always)]
fn steps_generic(xw: &[f32], rt: &[f32], h: &mut [f32], c: &mut [f32], acc: &mut [f32], out: &mut [f32], d: LstmDims) {
    let (hd, gates, padded) = (d.hidden, 4 * d.hidden, acc.len());
    for k in 0..d.steps {
        let t = if d.reverse { d.steps - 1 - k } else { k };
        for b in 0..d.batch {
            let x = &xw[(t * d.batch + b) * gates..][..gates];
            let hb = &h[b * hd..][..hd];
            for (j0, dst) in (0..padded).step_by(CHUNK).zip(acc.chunks_exact_mut(CHUNK)) {
                let mut a = [0.0f32; CHUNK];
                let n = CHUNK.min(gates - j0);
                a[..n].copy_from_slice(&x[j0..j0 + n]);
                for (kk, &hv) in hb.iter().enumerate() {
                    let w: &[f32; CHUNK] = rt[kk * padded + j0..][..CHUNK].try_into().unwrap();
                    for l in 0..CHUNK {
                        a[l] = hv.mul_add(w[l], a[l]);
                    }
                }
                dst.copy_from_slice(&a);
            }
            let (gi, rest) = acc.split_at(hd);
            let (go, rest) = rest.split_at(hd);
            let (gf, rest) = rest.split_at(hd);
            let gc = &rest[..hd];
            let cb = &mut c[b * hd..][..hd];
            let hb = &mut h[b * hd..][..hd];
            for j in 0..hd {
                let (i, o, f, g) = (sigmoid(gi[j]), sigmoid(go[j]), sigmoid(gf[j]), tanh(gc[j]));
                let cn = f * cb[j] + i * g;
                cb[j] = cn;
                hb[j] = o * tanh(cn);
            }
            let at = |s: usize| ((t * 2 + s) * d.batch + b) * hd;
            out[at(0)..at(0) + hd].copy_from_slice(hb);
            out[at(1)..at(1) + hd].copy_from_slice(cb);
        }
    }
}
