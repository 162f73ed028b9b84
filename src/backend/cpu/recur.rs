//! The `lstm` library kernel: a whole sequence in one call (`crate::ops::recur` defines it).
//!
//! Unrolled into prims, every step of an LSTM is a tiny matmul `[B, H] x [H, 4H]` and a few
//! pointwise kernels, each a separate call with its own overhead, so a 128-step layer of
//! hidden size 32 spent about 1.5 µs a step on calls around 0.1 µs of arithmetic. Here the
//! state stays in L1 across the steps: `rᵀ` is laid out once per call as `H` rows of the
//! four gate blocks (each padded to whole vectors, the row to a multiple of `CHUNK`), and
//! each step, per batch row, accumulates `xw[t] + h·rᵀ` chunk by chunk in registers (one
//! multiply-add chain per column, `k` ascending), then applies the gates: σ and tanh are the
//! epilogue activations' branch-free f32 kernels (`activation.rs`), so the loops vectorize.
//! Batch rows never meet, so threads split them, each running the whole sequence for its
//! rows.
//!
//! One source, compiled three times (AVX-512, AVX2+FMA, and the baseline, which is NEON on
//! aarch64) and picked at run time under the ISA cap; every path uses `mul_add`, so all give
//! the same bits, at any thread count. Scratch is per thread and kept between calls.
//!
//! Measured on a 2-core AVX-512 EPYC (Zen 5) at one thread, `ladder bench --profile` on the
//! corpus LSTM (`B = 2`, `S = 64`, `H = 24`): 23 µs a layer, where the unrolled prims took
//! about 60.

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
    /// `rᵀ` padded, laid out by the calling thread and read by every task.
    static WEIGHTS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// One task's `h` and `c` states and row of gates.
    static STATE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Multiply-adds of the recurrence (`S B 4H H`) below which a call stays on one thread.
pub const PAR_WORK: usize = 1 << 17;

/// `lstm(xw, r, h0, c0)` on f32 buffers, `shapes` theirs, into `out` (`[S, 2, B, H]`). Batch
/// rows are independent for the whole sequence, so with `threads > 1` each task runs every
/// step for its own rows: no synchronisation between steps.
pub fn lstm(
    attrs: &Attrs,
    args: &[&[f32]],
    shapes: &[&[usize]],
    out: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
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
    let len = KernelError::check_len;
    len("xw", xw.len(), steps * batch * gates)?;
    len("r", r.len(), gates * hidden)?;
    len("h0", h0.len(), batch * hidden)?;
    len("c0", c0.len(), batch * hidden)?;
    len("out", out.len(), steps * 2 * batch * hidden)?;
    if out.is_empty() {
        return Ok(());
    }
    let work = steps.saturating_mul(batch).saturating_mul(gates).saturating_mul(hidden);
    let tasks = threads.min(batch).min(work / PAR_WORK).max(1);
    WEIGHTS.with(|w| {
        let mut w = w.borrow_mut();
        let rt = lay_out_weights(r, hidden, &mut w);
        let per = batch.div_ceil(tasks);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let run = |t: usize| {
            let rows = t * per..((t + 1) * per).min(batch);
            STATE.with(|s| {
                // SAFETY: `out` holds `[S, 2, B, H]`; this task writes only its own batch
                // rows, disjoint from every other task's, and the slice outlives the tasks.
                unsafe { run_rows(xw, rt, h0, c0, out_ptr.get(), d, rows, &mut s.borrow_mut()) }
            })
        };
        if tasks == 1 {
            run(0);
        } else {
            use rayon::prelude::*;
            (0..tasks).into_par_iter().for_each(run);
        }
    });
    Ok(())
}

/// A raw pointer tasks may share (each writes a disjoint part).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: used only for disjoint writes, see `lstm`.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Gate blocks are padded to a multiple of this many columns, so the gate loop runs on
/// whole vectors (a hidden size of 24 left an 8-lane remainder of six transcendentals
/// computed one lane at a time).
const LANES: usize = 16;

/// `H` padded to whole vectors, and the padded width of the four gate blocks.
fn widths(hidden: usize) -> (usize, usize) {
    let hp = hidden.div_ceil(LANES) * LANES;
    (hp, (4 * hp).div_ceil(CHUNK) * CHUNK)
}

/// `rᵀ` laid out in `w`: `rt[k][q hp + j] = r[q H + j][k]`, the padding columns zero (so the
/// padding lanes of the state stay 0: `σ(0) 0 + σ(0) tanh(0)`, and the product never reads
/// them).
fn lay_out_weights<'w>(r: &[f32], hd: usize, w: &'w mut Vec<f32>) -> &'w [f32] {
    let (hp, padded) = widths(hd);
    w.clear();
    w.resize(hd * padded, 0.0);
    for k in 0..hd {
        let row = &mut w[k * padded..][..padded];
        for q in 0..4 {
            for j in 0..hd {
                row[q * hp + j] = r[(q * hd + j) * hd + k];
            }
        }
    }
    w
}

/// Every step for batch rows `rows`, their states starting from `h0`, `c0`.
///
/// # Safety
/// `out` points to `S * 2 * B * H` floats, of which this call writes only rows `rows`, and
/// nothing else reads or writes those during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn run_rows(
    xw: &[f32],
    rt: &[f32],
    h0: &[f32],
    c0: &[f32],
    out: *mut f32,
    d: LstmDims,
    rows: std::ops::Range<usize>,
    scratch: &mut Vec<f32>,
) {
    let (hd, (hp, padded)) = (d.hidden, widths(d.hidden));
    let nb = rows.len();
    scratch.clear();
    scratch.resize(2 * nb * hp + padded, 0.0);
    let (h, rest) = scratch.split_at_mut(nb * hp);
    let (c, acc) = rest.split_at_mut(nb * hp);
    for (i, b) in rows.clone().enumerate() {
        h[i * hp..][..hd].copy_from_slice(&h0[b * hd..][..hd]);
        c[i * hp..][..hd].copy_from_slice(&c0[b * hd..][..hd]);
    }
    steps(Task { xw, rt, out, d, b0: rows.start }, h, c, acc);
}

/// One task's share of a call: the operands, the output (see [`run_rows`] for its contract),
/// the sizes, and the task's first batch row.
#[derive(Clone, Copy)]
struct Task<'a> {
    xw: &'a [f32],
    rt: &'a [f32],
    out: *mut f32,
    d: LstmDims,
    b0: usize,
}

#[cfg(target_arch = "x86_64")]
unsafe fn steps(t: Task, h: &mut [f32], c: &mut [f32], acc: &mut [f32]) {
    if super::has_avx512() {
        // SAFETY: the CPU has every feature the variant is compiled for (checked just above);
        // `t.out` as the caller promised.
        return unsafe { steps_avx512(t, h, c, acc) };
    }
    if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); `t.out` as promised.
        return unsafe { steps_avx2(t, h, c, acc) };
    }
    // SAFETY: `t.out` as the caller promised.
    unsafe { steps_generic(t, h, c, acc) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn steps(t: Task, h: &mut [f32], c: &mut [f32], acc: &mut [f32]) {
    // SAFETY: `t.out` as the caller promised.
    unsafe { steps_generic(t, h, c, acc) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn steps_avx512(t: Task, h: &mut [f32], c: &mut [f32], acc: &mut [f32]) {
    // SAFETY: `t.out` as the caller promised.
    unsafe { steps_generic(t, h, c, acc) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn steps_avx2(t: Task, h: &mut [f32], c: &mut [f32], acc: &mut [f32]) {
    // SAFETY: `t.out` as the caller promised.
    unsafe { steps_generic(t, h, c, acc) }
}

/// Every step, in processing order; see the module docs. `h`, `c` hold each batch row's
/// state padded to `hp` lanes, `acc` the four gate blocks of `hp` columns (then zeros).
#[inline(always)]
unsafe fn steps_generic(t: Task, h: &mut [f32], c: &mut [f32], acc: &mut [f32]) {
    let Task { xw, rt, out, d, b0 } = t;
    let (hd, gates, padded) = (d.hidden, 4 * d.hidden, acc.len());
    let hp = hd.div_ceil(LANES) * LANES;
    let nb = h.len() / hp;
    for k in 0..d.steps {
        let t = if d.reverse { d.steps - 1 - k } else { k };
        for lb in 0..nb {
            let b = b0 + lb;
            let x = &xw[(t * d.batch + b) * gates..][..gates];
            for q in 0..4 {
                acc[q * hp..][..hd].copy_from_slice(&x[q * hd..][..hd]);
            }
            let hb = &h[lb * hp..][..hd];
            for (j0, dst) in (0..padded).step_by(CHUNK).zip(acc.chunks_exact_mut(CHUNK)) {
                let mut a: [f32; CHUNK] = dst.try_into().unwrap();
                for (kk, &hv) in hb.iter().enumerate() {
                    let w: &[f32; CHUNK] = rt[kk * padded + j0..][..CHUNK].try_into().unwrap();
                    for l in 0..CHUNK {
                        a[l] = hv.mul_add(w[l], a[l]);
                    }
                }
                dst.copy_from_slice(&a);
            }
            let (gi, rest) = acc.split_at(hp);
            let (go, rest) = rest.split_at(hp);
            let (gf, rest) = rest.split_at(hp);
            let gc = &rest[..hp];
            let cb = &mut c[lb * hp..][..hp];
            let hb = &mut h[lb * hp..][..hp];
            for j in 0..hp {
                let (i, o, f, g) = (sigmoid(gi[j]), sigmoid(go[j]), sigmoid(gf[j]), tanh(gc[j]));
                let cn = f * cb[j] + i * g;
                cb[j] = cn;
                hb[j] = o * tanh(cn);
            }
            let at = |s: usize| ((t * 2 + s) * d.batch + b) * hd;
            // SAFETY: row `b` of step `t` lies inside `out` (the caller's contract) and is
            // this call's alone.
            std::ptr::copy_nonoverlapping(hb.as_ptr(), out.add(at(0)), hd);
            std::ptr::copy_nonoverlapping(cb.as_ptr(), out.add(at(1)), hd);
        }
    }
}
