//! The library kernel for recovered attention (`scaled_dot_product_attention`, causal or not,
//! with an optional additive f32 or bool mask) on f32: flash-style, never materialising a row
//! of S scores.
//!
//! Per batch element (head) and block of query rows ([`block_rows`]), the keys are visited in
//! tiles of [`KEYS`]: the tile's scaled scores through the GEMM (`scale * q_blk k_tile^T` into
//! a `rows × KEYS` scratch), per row the mask and the causal `-inf` bias, then an online
//! softmax (a running maximum `m` and sum `l` per row: when a tile raises `m`, the row's sum
//! and its output so far are rescaled by `exp(m_old - m_new)`; the tile's weights are
//! `exp(score - m_new)`), and the tile's `P V` accumulated into the block's output through the
//! GEMM (`read_dst`). At the end each output row is divided by its `l`. Memory: one
//! `rows × min(S, KEYS)` score tile and three `rows` vectors per thread, whatever S is (the
//! `gemm` crate's packing buffers aside, which its tile sizes bound), kept by the thread
//! between calls ([`scratch_bytes`] reports them): a warm run allocates none of it, and a
//! short sequence no longer zeroes (and faults in) a 512 KiB tile per call.
//!
//! With `causal`, tiles wholly above the diagonal of a block (keys `j >= i_end`) are skipped
//! (about half the work), and only the tile holding the diagonal is masked per element. The
//! op's meaning (`crate::ops::norm`) reaches past the diagonal, though: a masked score is
//! `score + (-inf)`, which is NaN when the score is NaN or `+inf`, and a masked key's weight is
//! an exact 0 that still multiplies its value row (`0 * inf` is NaN). So a block skips only
//! when nothing there can be non-finite: its queries, the head's keys and values from `i_end`
//! on (the last non-finite key/value row per head is found once, by the head's first block
//! that asks), the float mask's entries there (`-inf` allowed) and the scale; otherwise it
//! visits every tile.
//!
//! The op's edge cases, as the interpreter gives them: a row with a NaN or `+inf` score
//! (masked or not) is NaN; a row whose scores are all `-inf` gives zeros with `safe_softmax`,
//! NaN without; no keys at all (S = 0) gives zeros; with D = 0 every score is 0 (whatever the
//! scale); a non-finite value reaches every other row through its weight (NaN or ±inf in
//! that column, also under a 0 weight).
//!
//! The mask is read in place through strides over the scores' `[batch..., L, S]` (0 along
//! broadcast dims): no `[B, H, L, S]` copy is made. Bool masks are one byte per element, as
//! the runtime stores them (nonzero = attend).
//!
//! Blocks run on rayon workers when `threads > 1` (causal ones longest first). A block's
//! per-row passes (mask, maximum, exp, rescale) are compiled for AVX-512 and AVX2 and picked
//! at run time, as in `super::rows`.
//!
//! Tile sizes, measured against the kernel this one replaced (per block of 64 rows the scores
//! against all visible keys through one GEMM, a softmax per row, then `P V`), single-threaded
//! thread CPU time of the kernel alone, interleaved, median ms, on the 2-core development
//! machine (AVX-512), heads of `[512 or 4096, 64]`, 8 heads:
//!
//! | case | previous | 64 rows × 128 keys | 64 × 512 | 256 × 512 (chosen plain) |
//! |---|---|---|---|---|
//! | S = 512 | 3.79 | 3.81 | 3.38 | 3.02 |
//! | S = 512 causal | 2.37 | 2.37 | 2.19 (chosen causal) | 2.84 |
//! | S = 4096 | 241 | 278 | 219 | 198 |
//! | S = 4096 causal | 127 | - | 116 | 113 (128 × 512: 110, chosen) |
//!
//! Bigger tiles amortise the GEMM's packing and per-call work; causal blocks stay small
//! because the masked half of the diagonal tile grows with the block. This kernel is faster
//! in every case measured single-threaded, so the previous one is gone. Whole plans, `ladder
//! bench --backend cpu --threads 1,2` on the W5 shapes (wall clock, median ms, best of three
//! alternating rounds on the shared machine, whose second core was often busy: the 2-thread
//! causal figures are within its noise):
//!
//! | workload | 1 thread: previous → this | 2 threads: previous → this |
//! |---|---|---|
//! | W5_attn_8x512x64 | 3.88 → 3.01 | 2.04 → 1.63 |
//! | W5_attn_causal | 2.33 → 2.19 | 1.22 → 1.65 (min 1.15 → 1.11) |
//! | W5_attn_S4096 | 252 → 196 | 130 → 102 |
//!
//! `peak_bytes` of W5_attn_S4096: 0.66 MB at 1 thread, 1.3 MB at 2, against 512 MiB for its
//! materialised scores. `tests/alloc/attention_kernel.rs` checks this kernel against the
//! interpreter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;
use smallvec::SmallVec;

use super::activation::exp_with;
use super::gemm::{Gemm2d, KernelError};
use super::packed::baseline_gemm;

/// Keys per tile.
pub const KEYS: usize = 512;

/// Query rows per task: [`BLOCK_PLAIN`] without `causal`; with it [`BLOCK_CAUSAL`] (the
/// diagonal tile's masked half grows with the block), or twice that above
/// [`CAUSAL_LONG`] rows, where that waste is small; halved (down to [`BLOCK_CAUSAL`]) while
/// there are fewer than 4 tasks per thread.
pub const BLOCK_PLAIN: usize = 256;
pub const BLOCK_CAUSAL: usize = 64;
pub const CAUSAL_LONG: usize = 2048;

/// Query rows per task for these sizes (see [`BLOCK_PLAIN`]).
pub fn block_rows(nb: usize, l: usize, causal: bool, threads: usize) -> usize {
    let mut rows = match (causal, l > CAUSAL_LONG) {
        (false, _) => BLOCK_PLAIN,
        (true, false) => BLOCK_CAUSAL,
        (true, true) => 2 * BLOCK_CAUSAL,
    };
    while rows > BLOCK_CAUSAL && threads > 1 && nb.saturating_mul(l.div_ceil(rows)) < 4 * threads {
        rows /= 2;
    }
    rows
}

/// Shapes: q `[nb, l, d]`, k `[nb, s, d]`, v `[nb, s, dv]`, out `[nb, l, dv]` (leading dims
/// flattened into `nb`).
pub struct Dims {
    pub nb: usize,
    pub l: usize,
    pub s: usize,
    pub d: usize,
    pub dv: usize,
}

/// The values of an attention mask: added to the scaled scores (f32), or attend where true
/// (bools one byte each, nonzero = true).
#[derive(Clone, Copy)]
pub enum MaskValues<'a> {
    Float(&'a [f32]),
    Bool(&'a [u8]),
}

impl MaskValues<'_> {
    fn len(&self) -> usize {
        match self {
            MaskValues::Float(x) => x.len(),
            MaskValues::Bool(x) => x.len(),
        }
    }
}

/// A mask broadcast to the scores `[batch..., L, S]` through strides.
pub struct Mask<'a> {
    values: MaskValues<'a>,
    /// (size, element stride) of each batch dim of the scores, outermost first.
    batch: SmallVec<[(usize, usize); 4]>,
    /// Element strides along L and S (0 where broadcast).
    row: usize,
    col: usize,
}

impl<'a> Mask<'a> {
    /// `values` of shape `shape`, broadcast to `[batch..., l, s]` (numpy rules; the mask may
    /// not have more dims than the scores). A shape that does not broadcast, or values of
    /// the wrong length, are typed errors.
    pub fn broadcast(
        values: MaskValues<'a>,
        shape: &[usize],
        batch: &[usize],
        l: usize,
        s: usize,
    ) -> Result<Mask<'a>, KernelError> {
        let target: SmallVec<[usize; 6]> = batch.iter().copied().chain([l, s]).collect();
        let strides = crate::ops::util::broadcast_strides(shape, &target)
            .ok_or_else(|| KernelError::Shape(format!("mask of shape {shape:?} does not broadcast to {target:?}")))?;
        // `broadcast_strides` checked that the product does not overflow.
        let numel: usize = shape.iter().product();
        if values.len() != numel {
            return Err(KernelError::Len { name: "mask", got: values.len(), want: numel });
        }
        let r = target.len();
        Ok(Mask {
            values,
            batch: batch.iter().copied().zip(strides[..r - 2].iter().copied()).collect(),
            row: strides[r - 2],
            col: strides[r - 1],
        })
    }

    /// Element offset of batch element `b`'s `[L, S]` matrix.
    fn base(&self, mut b: usize) -> usize {
        let mut at = 0;
        for &(n, stride) in self.batch.iter().rev() {
            if n > 0 {
                at += (b % n) * stride;
                b /= n;
            }
        }
        at
    }
}

/// The mask entries of one score row within a tile.
#[derive(Clone, Copy)]
enum MaskRow<'a> {
    None,
    Float(&'a [f32]),
    FloatAll(f32),
    Bool(&'a [u8]),
    BoolAll(bool),
}

/// `out = attention(q, k, v, mask)` (see the module docs).
#[allow(clippy::too_many_arguments)]
pub fn attention_f32(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&Mask>,
    out: &mut [f32],
    dims: &Dims,
    scale: f32,
    causal: bool,
    safe: bool,
    threads: usize,
) -> Result<(), KernelError> {
    let Dims { nb, l, s, d, dv } = *dims;
    let need = |name: &'static str, got: usize, want: Option<usize>| match want {
        Some(want) if got == want => Ok(()),
        Some(want) => Err(KernelError::Len { name, got, want }),
        None => Err(KernelError::Shape(format!("attention operand `{name}` has too many elements"))),
    };
    let prod = |a: usize, b: usize, c: usize| a.checked_mul(b).and_then(|x| x.checked_mul(c));
    need("q", q.len(), prod(nb, l, d))?;
    need("k", k.len(), prod(nb, s, d))?;
    need("v", v.len(), prod(nb, s, dv))?;
    need("out", out.len(), prod(nb, l, dv))?;
    if let Some(m) = mask {
        let batch: usize = m.batch.iter().map(|&(n, _)| n).product();
        if batch != nb {
            return Err(KernelError::Shape(format!("mask broadcast over {batch} batch elements, not {nb}")));
        }
    }
    if out.is_empty() {
        return Ok(());
    }
    // Causal blocks may skip the keys past their diagonal only if no key or value row there
    // is non-finite: the last such row per head, found by the first block of the head that
    // asks (the head's keys and values are then in cache for its blocks).
    let last_bad: Vec<OnceLock<Option<usize>>> =
        if causal { (0..nb).map(|_| OnceLock::new()).collect() } else { Vec::new() };
    let ctx = Ctx { q, k, v, mask, l, s, d, dv, scale, causal, safe, last_bad: &last_bad };
    // Tasks: (batch element, first row, its output rows).
    let bl = block_rows(nb, l, causal, threads);
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(nb * l.div_ceil(bl));
    for (b, ob) in out.chunks_mut(l * dv).enumerate() {
        for (blk, o) in ob.chunks_mut(bl * dv).enumerate() {
            tasks.push((b, blk * bl, o));
        }
    }
    if threads > 1 && tasks.len() > 1 {
        // Causal blocks late in a head have the most keys: start those first.
        if causal {
            tasks.reverse();
        }
        tasks
            .into_par_iter()
            .with_max_len(1)
            .for_each(|(b, i0, o)| with_scratch(bl.min(l), s.min(KEYS), |sc| block(&ctx, b, i0, o, sc)));
    } else {
        with_scratch(bl.min(l), s.min(KEYS), |sc| {
            for (b, i0, o) in tasks {
                block(&ctx, b, i0, o, sc);
            }
        });
    }
    Ok(())
}

/// Per-worker memory: the score tile and the running statistics of a block's rows.
struct Scratch {
    p: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    /// The row has met a NaN or `+inf` score: its output is NaN.
    bad: Vec<bool>,
}

/// Bytes held by every thread's attention scratch (see [`scratch_bytes`]).
static SCRATCH_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes the attention kernel keeps as per-thread scratch between calls (score tiles and row
/// statistics), over all threads: part of a run's working memory that the run itself no
/// longer allocates once warm.
pub fn scratch_bytes() -> usize {
    SCRATCH_BYTES.load(Ordering::Relaxed)
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch { p: Vec::new(), m: Vec::new(), l: Vec::new(), bad: Vec::new() }
    }

    fn bytes(&self) -> usize {
        self.p.capacity() * 4 + (self.m.capacity() + self.l.capacity()) * 4 + self.bad.capacity()
    }

    /// Room for `rows` rows of `keys` scores (nothing relies on the contents).
    fn reserve(&mut self, rows: usize, keys: usize) {
        let before = self.bytes();
        if self.p.len() < rows * keys {
            self.p.resize(rows * keys, 0.0);
        }
        if self.m.len() < rows {
            self.m.resize(rows, 0.0);
            self.l.resize(rows, 0.0);
            self.bad.resize(rows, false);
        }
        SCRATCH_BYTES.fetch_add(self.bytes() - before, Ordering::Relaxed);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        SCRATCH_BYTES.fetch_sub(self.bytes(), Ordering::Relaxed);
    }
}

thread_local! {
    /// Each thread's scratch, kept between calls: a warm run allocates nothing here, and a
    /// short sequence does not zero (and fault in) a large tile per call.
    static SCRATCH: std::cell::RefCell<Scratch> =
        const { std::cell::RefCell::new(Scratch::new()) };
}

/// Runs `f` with this thread's scratch, grown to `rows` rows of `keys` scores (a fresh one
/// if the thread's is in use further up its stack).
fn with_scratch<R>(rows: usize, keys: usize, f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut sc) => {
            sc.reserve(rows, keys);
            f(&mut sc)
        }
        Err(_) => {
            let mut sc = Scratch::new();
            sc.reserve(rows, keys);
            f(&mut sc)
        }
    })
}

struct Ctx<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a Mask<'a>>,
    l: usize,
    s: usize,
    d: usize,
    dv: usize,
    scale: f32,
    causal: bool,
    safe: bool,
    last_bad: &'a [OnceLock<Option<usize>>],
}

/// Rows `i0..` of batch element `b` into `o` (`rows × dv`, `dv > 0`), `exp` with fused
/// multiply-adds where the target has them (a call to `fmaf` per step where it has not, many
/// times slower: W5 at the x86-64 baseline level 67 -> 20 ms, one thread, Zen 4 masked).
#[inline(always)]
fn block_generic(ctx: &Ctx, b: usize, i0: usize, o: &mut [f32], sc: &mut Scratch) {
    ctx.block::<{ super::rows::PORTABLE_FMA }>(b, i0, o, sc)
}

/// [`block_generic`] with fused multiply-adds, for the AVX-512 and AVX2 variants.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block_fused(ctx: &Ctx, b: usize, i0: usize, o: &mut [f32], sc: &mut Scratch) {
    ctx.block::<true>(b, i0, o, sc)
}

impl Ctx<'_> {
    #[inline(always)]
    fn block<const FMA: bool>(&self, b: usize, i0: usize, o: &mut [f32], sc: &mut Scratch) {
        let Ctx { l, s, d, dv, .. } = *self;
        let rows = o.len() / dv;
        let i1 = i0 + rows;
        let qb = &self.q[(b * l + i0) * d..(b * l + i1) * d];
        let kh = &self.k[b * s * d..(b + 1) * s * d];
        let vh = &self.v[b * s * dv..(b + 1) * s * dv];
        let mbase = self.mask.map(|m| m.base(b));
        let kend = if self.causal && i1 < s && self.may_skip(b, i0, i1, qb, mbase) { i1 } else { s };
        let (m, lsum, bad) = (&mut sc.m[..rows], &mut sc.l[..rows], &mut sc.bad[..rows]);
        m.fill(f32::NEG_INFINITY);
        lsum.fill(0.0);
        bad.fill(false);
        o.fill(0.0);
        let p = &mut sc.p;
        let mut j0 = 0;
        while j0 < kend {
            let tn = KEYS.min(kend - j0);
            if d > 0 {
                let g = Gemm2d { m: rows, n: tn, k: d, a_rs: d, a_cs: 1, b_rs: 1, b_cs: d, ldc: tn };
                // SAFETY: q_blk is `rows × d` row-major, the key tile `tn × d` row-major read
                // transposed (`rhs[p, j] = k[j0 + j, p]`), `p` holds `rows × KEYS` (written
                // as `rows × tn`, row stride `tn`) and is distinct from both; every index stays
                // within those extents.
                unsafe {
                    // The x86-64 baseline level has a kernel of its own (`super::packed`).
                    if !baseline_gemm(&g, qb.as_ptr(), kh[j0 * d..].as_ptr(), p.as_mut_ptr(), self.scale, false, 1) {
                        gemm::gemm(
                            rows,
                            tn,
                            d,
                            p.as_mut_ptr(),
                            1,
                            tn as isize,
                            false,
                            qb.as_ptr(),
                            1,
                            d as isize,
                            kh[j0 * d..].as_ptr(),
                            d as isize,
                            1,
                            0.0,
                            self.scale,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    }
                };
            }
            for r in 0..rows {
                let i = i0 + r;
                let row = &mut p[r * tn..(r + 1) * tn];
                if bad[r] {
                    row.fill(0.0);
                    continue;
                }
                let visible = if self.causal { (i + 1).saturating_sub(j0).min(tn) } else { tn };
                let mrow = self.mask_row(mbase, i, j0, tn);
                let args = RowArgs { zero: d == 0, mask: mrow, visible };
                let (mt, poisoned) = prepare_row(row, &args);
                if poisoned {
                    bad[r] = true;
                    row.fill(0.0);
                    continue;
                }
                let mn = m[r].max(mt);
                if mn == f32::NEG_INFINITY {
                    // Nothing to attend so far: weights 0 (still multiplying the values).
                    row.fill(0.0);
                    continue;
                }
                if m[r] == f32::NEG_INFINITY {
                    // The row's first weights: its sum and output so far are 0 (the output
                    // NaN where a non-finite value met a 0 weight): nothing to rescale.
                    lsum[r] = exp_sum::<FMA>(row, mn);
                } else {
                    let alpha = if mn == m[r] { 1.0 } else { exp_with::<FMA>(m[r] - mn) };
                    if alpha != 1.0 {
                        scale_row(&mut o[r * dv..(r + 1) * dv], alpha);
                    }
                    lsum[r] = lsum[r] * alpha + exp_sum::<FMA>(row, mn);
                }
                m[r] = mn;
            }
            let g = Gemm2d { m: rows, n: dv, k: tn, a_rs: tn, a_cs: 1, b_rs: dv, b_cs: 1, ldc: dv };
            // SAFETY: `p` holds the `rows × tn` weights with row stride `tn`, the value tile
            // is `tn × dv` row-major, `o` is `rows × dv` row-major and distinct from both.
            unsafe {
                if !baseline_gemm(&g, p.as_ptr(), vh[j0 * dv..].as_ptr(), o.as_mut_ptr(), 1.0, true, 1) {
                    gemm::gemm(
                        rows,
                        dv,
                        tn,
                        o.as_mut_ptr(),
                        1,
                        dv as isize,
                        true,
                        p.as_ptr(),
                        1,
                        tn as isize,
                        vh[j0 * dv..].as_ptr(),
                        1,
                        dv as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            };
            j0 += tn;
        }
        for (r, orow) in o.chunks_exact_mut(dv).enumerate() {
            if bad[r] {
                orow.fill(f32::NAN);
            } else if m[r] == f32::NEG_INFINITY {
                // Nothing to attend: zeros with the safe softmax or without keys, else NaN.
                orow.fill(if self.safe || s == 0 { 0.0 } else { f32::NAN });
            } else {
                let sum = lsum[r];
                orow.iter_mut().for_each(|x| *x /= sum);
            }
        }
    }

    /// Whether rows `i0..i1` may skip keys `i1..`: nothing there can make a score NaN or
    /// `+inf` or a value non-finite (see the module docs).
    #[inline(always)]
    fn may_skip(&self, b: usize, i0: usize, i1: usize, qb: &[f32], mbase: Option<usize>) -> bool {
        let (s, d, dv) = (self.s, self.d, self.dv);
        let scan = || {
            dispatch_last_nonfinite(&self.k[b * s * d..(b + 1) * s * d], d, &self.v[b * s * dv..(b + 1) * s * dv], dv)
        };
        if self.last_bad.get(b).and_then(|c| *c.get_or_init(scan)).is_some_and(|j| j >= i1) {
            return false;
        }
        if self.d > 0 && (!self.scale.is_finite() || !all_finite(qb)) {
            return false;
        }
        let (Some(mask), Some(base)) = (self.mask, mbase) else { return true };
        let MaskValues::Float(vals) = mask.values else { return true };
        (i0..i1).all(|i| {
            let at = base + i * mask.row;
            if mask.col == 0 {
                !poisons(vals[at])
            } else {
                !vals[at + i1..at + self.s].iter().any(|&x| poisons(x))
            }
        })
    }

    #[inline(always)]
    fn mask_row(&self, base: Option<usize>, i: usize, j0: usize, tn: usize) -> MaskRow<'_> {
        let (Some(mask), Some(base)) = (self.mask, base) else { return MaskRow::None };
        let at = base + i * mask.row;
        match (mask.values, mask.col) {
            (MaskValues::Float(x), 0) => MaskRow::FloatAll(x[at]),
            (MaskValues::Float(x), _) => MaskRow::Float(&x[at + j0..at + j0 + tn]),
            (MaskValues::Bool(x), 0) => MaskRow::BoolAll(x[at] != 0),
            (MaskValues::Bool(x), _) => MaskRow::Bool(&x[at + j0..at + j0 + tn]),
        }
    }
}

/// A float mask entry that makes a masked score NaN (`NaN`, `+inf`).
fn poisons(x: f32) -> bool {
    x.is_nan() || x == f32::INFINITY
}

/// How one tile row's scores are formed.
struct RowArgs<'a> {
    /// D = 0: every score is 0.
    zero: bool,
    mask: MaskRow<'a>,
    /// Keys `visible..` of the row are causally masked.
    visible: usize,
}

const LANES: usize = 16;

/// Turns a row of raw products into scores (scale, mask, causal bias) and returns their
/// maximum and whether any is NaN or `+inf`.
#[inline(always)]
fn prepare_row(row: &mut [f32], a: &RowArgs) -> (f32, bool) {
    if a.zero {
        row.fill(0.0);
    }
    match a.mask {
        MaskRow::None => {}
        MaskRow::Float(m) => row.iter_mut().zip(m).for_each(|(x, &b)| *x += b),
        MaskRow::FloatAll(b) => row.iter_mut().for_each(|x| *x += b),
        MaskRow::Bool(m) => {
            row.iter_mut().zip(m).for_each(|(x, &b)| *x = if b != 0 { *x } else { *x + f32::NEG_INFINITY })
        }
        MaskRow::BoolAll(true) => {}
        MaskRow::BoolAll(false) => row.iter_mut().for_each(|x| *x += f32::NEG_INFINITY),
    }
    if a.visible < row.len() {
        row[a.visible..].iter_mut().for_each(|x| *x += f32::NEG_INFINITY);
    }
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut nf = [0u32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            // A NaN never replaces the maximum (the row is poisoned then anyway).
            mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
            nf[j] |= u32::from(c[j].is_nan() | (c[j] == f32::INFINITY));
        }
    }
    let mut max = super::rows::tree_reduce(mx, f32::max);
    let mut poisoned = nf.iter().any(|&x| x != 0);
    for &x in chunks.remainder() {
        max = max.max(x);
        poisoned |= x.is_nan() | (x == f32::INFINITY);
    }
    (max, poisoned)
}

/// `row = exp(row - max)`, returning the sum (`exp` with fused multiply-adds or not).
#[inline(always)]
fn exp_sum<const FMA: bool>(row: &mut [f32], max: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            let e = exp_with::<FMA>(c[j] - max);
            c[j] = e;
            acc[j] += e;
        }
    }
    let mut sum = super::rows::tree_reduce(acc, |a, b| a + b);
    for x in chunks.into_remainder() {
        *x = exp_with::<FMA>(*x - max);
        sum += *x;
    }
    sum
}

#[inline(always)]
fn scale_row(row: &mut [f32], alpha: f32) {
    row.iter_mut().for_each(|x| *x *= alpha);
}

/// Whether every element is finite.
#[inline(always)]
fn all_finite(x: &[f32]) -> bool {
    // The largest magnitude's bits (an integer reduction, which vectorizes) below inf's.
    x.iter().fold(0u32, |acc, v| acc.max(v.to_bits() & 0x7fff_ffff)) < 0x7f80_0000
}

/// The last row `j` with a non-finite element in `k[j]` (`d` wide) or `v[j]` (`dv` wide).
#[inline(always)]
fn last_nonfinite_row(k: &[f32], d: usize, v: &[f32], dv: usize) -> Option<usize> {
    if all_finite(k) && all_finite(v) {
        return None;
    }
    let s = k.len().checked_div(d).unwrap_or_else(|| v.len() / dv.max(1));
    (0..s).rev().find(|&j| !all_finite(&k[j * d..(j + 1) * d]) || !all_finite(&v[j * dv..(j + 1) * dv]))
}

/// `$dispatch` picks `$avx512` or `$avx2` (each `$fused` compiled for those features) where
/// the CPU has them, else runs `$generic` (`$fused` itself where it is not given).
macro_rules! multiversion {
    ($dispatch:ident, $avx512:ident, $avx2:ident, $generic:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        multiversion!($dispatch, $avx512, $avx2, $generic, $generic, ($($arg: $ty),*) -> $ret);
    };
    (
        $dispatch:ident,
        $avx512:ident,
        $avx2:ident,
        $generic:ident,
        $fused:ident,
        ($($arg:ident: $ty:ty),*) -> $ret:ty
    ) => {
        fn $dispatch($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                if super::has_avx512() {
                    // SAFETY: the CPU has every feature the variant is compiled for.
                    return unsafe { $avx512($($arg),*) };
                }
                if super::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { $avx2($($arg),*) };
                }
            }
            $generic($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn $avx512($($arg: $ty),*) -> $ret {
            $fused($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($arg: $ty),*) -> $ret {
            $fused($($arg),*)
        }
    };
}

multiversion!(
    dispatch_last_nonfinite,
    last_nonfinite_avx512,
    last_nonfinite_avx2,
    last_nonfinite_row,
    (k: &[f32], d: usize, v: &[f32], dv: usize) -> Option<usize>
);
multiversion!(
    block,
    block_avx512,
    block_avx2,
    block_generic,
    block_fused,
    (ctx: &Ctx, b: usize, i0: usize, o: &mut [f32], sc: &mut Scratch) -> ()
);
