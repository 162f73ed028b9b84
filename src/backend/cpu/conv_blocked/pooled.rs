//! The x86 convolution rows with a following max pooling over two rows done in registers:
//! a CRNN's and a VGG-style network's `conv 3×3 → max_pool 2×2` (or `2×1`).
//!
//! The band path (`blocked` in `conv_blocked.rs`) stores each convolution row into an L1
//! scratch, pools the scratch and copies the pooled rows out; here the two convolution rows
//! of one pooled row are computed together and pooled before anything is stored, so only
//! the pooled result is written. Half a packed channel block ([`HALF`] channels) by two
//! rows by up to three vectors of 16 columns makes 24 accumulators; each input row the two
//! convolution rows read is loaded once per kernel column and multiplied into both (the
//! upper row with kernel row `j`, the lower with `j - 1`). Column borders are masked as in
//! the dense block (`x86.rs`); rows outside the input are skipped.
//!
//! With AVX2 ([`row256`]) the same in 8-lane vectors: [`QUARTER`] channels by two rows by
//! up to two vectors (8 accumulators, a block of 16 columns), the channel block in four
//! passes, for layers of few input channels ([`AVX2_MAX_CG`]; measured on a 2-core Zen 4
//! under `LADDER_MAX_ISA=avx2`, 1 thread: a CRNN's first layer, `1 → 16` channels on
//! `32×256` at batch 2 with its `2×2` pooling, 200 µs banded, 144 µs here).
//!
//! Each convolution output is summed in the blocked kernel's order (input channels, kernel
//! rows, kernel columns, one fused multiply-add each from 0), and the pooling is the op's
//! `max` (NaN-propagating, `+0` over `-0`), so the bits are the band path's. The epilogue
//! (bias, activation) runs after, on the pooled rows, as there.

use std::arch::x86_64::*;

use super::super::low_bits as mask32;
use super::super::pool::{max16_avx512 as max16, max8_avx2 as max8, RowPool};
use super::x86::{block_plan, dense_edges, inside};
use super::{Job, Plane, RowOut, CB};

/// Kernel columns (stride 1, no dilation: the dense block's kernel).
const KW: usize = 3;

/// Output channels per pass: half a packed block, so two rows of three vectors each fit in
/// 24 accumulators.
const HALF: usize = CB / 2;

/// The pooling window this kernel fuses: two rows (stride 2, no padding) by one column
/// (`Rows`) or by two (`Square`, column stride 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Window {
    /// `2×1`, stride `(2, 1)`.
    Rows,
    /// `2×2`, stride 2.
    Square,
}

/// A pooling this kernel fuses: its window, and which rows compute it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fuse {
    /// The pooling window.
    pub window: Window,
    /// AVX-512 rows ([`row`]'s own); else AVX2 ([`row256`]).
    avx512: bool,
}

/// The window to fuse for convolution rows `pl` of `cg` input channels (per group) pooled
/// by `pool`, where this kernel takes them: a `3`-wide kernel at stride 1 without dilation,
/// a pooling of two rows and one or two columns as [`Window`] says, on a CPU with AVX-512
/// (under the ISA cap), or with AVX2 for at most [`AVX2_MAX_CG`] input channels.
pub(super) fn applies(pl: &Plane, cg: usize, pool: &RowPool) -> Option<Fuse> {
    let conv = (pl.kw, pl.sw, pl.dw, pl.sh, pl.dh) == (KW, 1, 1, 1, 1) && pl.kh > 0;
    if !conv || pool.band() != 2 || 2 * pool.out_rows() > pl.oh || pool.in_cols() != pl.ow {
        return None;
    }
    let window = match pool.columns() {
        (1, 1, 0, 1) if pool.out_cols() == pl.ow => Window::Rows,
        (2, 2, 0, 1) if pool.out_cols() == pl.ow / 2 => Window::Square,
        _ => return None,
    };
    let avx512 = super::super::has_avx512();
    (avx512 || (cg <= AVX2_MAX_CG && super::super::has_avx2())).then_some(Fuse { window, avx512 })
}

/// Pooled row `q` (convolution rows `2q` and `2q + 1`) of every channel of the block into
/// row 0 of `out` (whose `ow` is the pooled width), by the rows [`applies`] chose.
pub(super) fn fused(job: &Job<'_>, q: usize, fuse: Fuse, out: &mut RowOut) {
    // SAFETY: `applies` chose the rows for what the CPU has (under the ISA cap).
    unsafe {
        if fuse.avx512 {
            row(job, q, fuse.window, out)
        } else {
            row256(job, q, fuse.window, out)
        }
    }
}

/// Pooled row `q` (convolution rows `2q` and `2q + 1`) of every channel of the block into
/// row 0 of `out` (whose `ow` is the pooled width). The caller checked [`applies`].
///
/// # Safety
/// The CPU has AVX-512 (F, DQ, VL) and FMA.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn row(job: &Job<'_>, q: usize, window: Window, out: &mut RowOut) {
    let pl = &job.pl;
    let rows = Rows::of(pl, q);
    let mut col = 0;
    for nv in block_plan(pl.ow) {
        let w = (16 * nv).min(pl.ow - col);
        for half in 0..out.n_ch.div_ceil(HALF) {
            match nv {
                3 => block::<3>(job, rows, col, w - 32, half * HALF, window, out),
                2 => block::<2>(job, rows, col, w - 16, half * HALF, window, out),
                _ => block::<1>(job, rows, col, w, half * HALF, window, out),
            }
        }
        col += w;
    }
}

/// The input rows of one pooled row: `top + j` for `j` in `j0..j1`.
#[derive(Clone, Copy)]
struct Rows {
    top: isize,
    j0: usize,
    j1: usize,
}

impl Rows {
    /// Those of pooled row `q`: its two convolution rows read input rows `top + j`, `j` in
    /// `0..=kh`, inside the input for `j` in `j0..j1`.
    fn of(pl: &Plane, q: usize) -> Rows {
        let top = (2 * q) as isize - pl.pt as isize;
        let j0 = (-top).max(0) as usize;
        let j1 = ((pl.ih as isize - top).max(0) as usize).min(pl.kh + 1);
        Rows { top, j0, j1 }
    }
}

/// Columns `col..col + 16 * (NV - 1) + w` of channels `c0..c0 + HALF` (those the block
/// has), pooled and stored.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn block<const NV: usize>(
    job: &Job<'_>,
    rows: Rows,
    col: usize,
    w: usize,
    c0: usize,
    window: Window,
    out: &mut RowOut,
) {
    let s0 = col as isize - job.pl.pl as isize;
    let acc = match dense_edges(s0, 16, NV, w, KW, job.pl.iw) {
        Some(0) => sums::<NV, 0>(job, rows, s0, w, c0),
        Some(1) => sums::<NV, 1>(job, rows, s0, w, c0),
        Some(2) => sums::<NV, 2>(job, rows, s0, w, c0),
        Some(_) => sums::<NV, 3>(job, rows, s0, w, c0),
        // Padding wider than a vector: every load masked.
        None => sums::<NV, 4>(job, rows, s0, w, c0),
    };
    let width = 16 * (NV - 1) + w;
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (c, a) in acc.iter().enumerate().take(out.n_ch - c0) {
        let m: [__m512; NV] = std::array::from_fn(|v| max16(a[0][v], a[1][v]));
        match window {
            Window::Rows => {
                let dst = out.row_ptr(c0 + c, 0, col, width);
                for (v, &mv) in m.iter().enumerate() {
                    let n = if v + 1 == NV { w } else { 16 };
                    _mm512_mask_storeu_ps(dst.add(16 * v), mask32(n) as u16, mv);
                }
            }
            Window::Square => {
                // `col` is even (blocks are whole vectors): pooled columns `col / 2..`.
                let n_out = width / 2;
                let dst = out.row_ptr(c0 + c, 0, col / 2, n_out);
                for v in (0..NV).step_by(2) {
                    let hi = if v + 1 < NV { m[v + 1] } else { _mm512_setzero_ps() };
                    let pooled = max16(_mm512_permutex2var_ps(m[v], evens, hi), _mm512_permutex2var_ps(m[v], odds, hi));
                    let n = n_out.saturating_sub(8 * v).min(16);
                    _mm512_mask_storeu_ps(dst.add(8 * v), mask32(n) as u16, pooled);
                }
            }
        }
    }
}

/// The block's two convolution rows, `[channel][row][vector]`, before pooling. `EDGE` as
/// the dense block's (bit 0: the first vector's loads masked, bit 1: the last's), or 4:
/// every load masked.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn sums<const NV: usize, const EDGE: u8>(
    job: &Job<'_>,
    rows: Rows,
    s0: isize,
    w: usize,
    c0: usize,
) -> [[[__m512; NV]; 2]; HALF] {
    let pl = &job.pl;
    let (plane, iw, kh) = (pl.ih * pl.iw, pl.iw, pl.kh);
    let cols = |v: usize| if v + 1 == NV { w } else { 16 };
    let masks: [[__mmask16; NV]; KW] = std::array::from_fn(|kwi| {
        std::array::from_fn(|v| inside(s0 + (kwi + 16 * v) as isize, cols(v), iw) as __mmask16)
    });
    let masked = |v: usize| EDGE & 4 != 0 || (v == 0 && EDGE & 1 != 0) || (v + 1 == NV && EDGE & 2 != 0);
    let mut acc = [[[_mm512_setzero_ps(); NV]; 2]; HALF];
    for ci in 0..job.cg {
        // Weights `[C/g][kh][KW][CB]`: this pass's channels start at `c0`.
        let wc = job.wp.as_ptr().add(ci * kh * KW * CB + c0);
        let xc = job.x.as_ptr().add(ci * plane);
        for j in rows.j0..rows.j1 {
            // Inside the input (`j0..j1`), so `top + j >= 0`.
            let p = xc.add((rows.top + j as isize) as usize * iw).wrapping_offset(s0);
            for (kwi, mk) in masks.iter().enumerate() {
                let xv: [__m512; NV] = std::array::from_fn(|v| {
                    let pv = p.wrapping_add(kwi + 16 * v);
                    if masked(v) {
                        _mm512_maskz_loadu_ps(mk[v], pv)
                    } else {
                        // Inside the row (`dense_edges` checked this vector).
                        _mm512_loadu_ps(pv)
                    }
                });
                // The upper row with kernel row `j`, the lower with `j - 1`.
                if j < kh {
                    fma_half(wc.add((j * KW + kwi) * CB), &xv, &mut acc, 0);
                }
                if j >= 1 {
                    fma_half(wc.add(((j - 1) * KW + kwi) * CB), &xv, &mut acc, 1);
                }
            }
        }
    }
    acc
}

/// `acc[c][k] += wt[c] * xv` for the pass's [`HALF`] channels.
#[inline(always)]
unsafe fn fma_half<const NV: usize>(wt: *const f32, xv: &[__m512; NV], acc: &mut [[[__m512; NV]; 2]; HALF], k: usize) {
    for (c, a) in acc.iter_mut().enumerate() {
        let wb = _mm512_set1_ps(*wt.add(c));
        for v in 0..NV {
            a[k][v] = _mm512_fmadd_ps(wb, xv[v], a[k][v]);
        }
    }
}

/// Output channels per AVX2 pass: two rows of two vectors each make 8 accumulators.
const QUARTER: usize = CB / 4;

/// Most input channels the AVX2 rows fuse: there the band path's stores and separate
/// pooling cost more than the arithmetic (a `1 → 16` layer: 200 µs banded, 144 µs fused);
/// with 16 and more the band path's four channels per pass win (by about 5%).
const AVX2_MAX_CG: usize = 4;

/// [`row`] with AVX2: blocks of 16 columns (two 8-lane vectors; a last short block of one
/// or two), [`QUARTER`] channels at a time.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn row256(job: &Job<'_>, q: usize, window: Window, out: &mut RowOut) {
    let pl = &job.pl;
    let rows = Rows::of(pl, q);
    let mut col = 0;
    while col < pl.ow {
        // `col` stays a multiple of 16: even, as the `2×2` window needs.
        let w = 16.min(pl.ow - col);
        for pass in 0..out.n_ch.div_ceil(QUARTER) {
            if w > 8 {
                block256::<2>(job, rows, col, w - 8, pass * QUARTER, window, out);
            } else {
                block256::<1>(job, rows, col, w, pass * QUARTER, window, out);
            }
        }
        col += w;
    }
}

/// Lanes whose bit is set in `bits` (bit `l`: lane `l`), as a `_mm256_maskload_ps` mask.
#[inline(always)]
unsafe fn lane_mask(bits: u32) -> __m256i {
    let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits as i32), lanes), lanes)
}

/// [`block`] with AVX2: columns `col..col + 8 * (NV - 1) + w` of channels
/// `c0..c0 + QUARTER`, pooled and stored.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn block256<const NV: usize>(
    job: &Job<'_>,
    rows: Rows,
    col: usize,
    w: usize,
    c0: usize,
    window: Window,
    out: &mut RowOut,
) {
    let s0 = col as isize - job.pl.pl as isize;
    let acc = match dense_edges(s0, 8, NV, w, KW, job.pl.iw) {
        Some(0) => sums256::<NV, 0>(job, rows, s0, w, c0),
        Some(1) => sums256::<NV, 1>(job, rows, s0, w, c0),
        Some(2) => sums256::<NV, 2>(job, rows, s0, w, c0),
        Some(_) => sums256::<NV, 3>(job, rows, s0, w, c0),
        None => sums256::<NV, 4>(job, rows, s0, w, c0),
    };
    let width = 8 * (NV - 1) + w;
    for (c, a) in acc.iter().enumerate().take(out.n_ch - c0) {
        let m: [__m256; NV] = std::array::from_fn(|v| max8(a[0][v], a[1][v]));
        match window {
            Window::Rows => {
                let dst = out.row_ptr(c0 + c, 0, col, width);
                for (v, &mv) in m.iter().enumerate() {
                    let n = if v + 1 == NV { w } else { 8 };
                    // Masked only when partial (`vmaskmovps` is microcode on AMD's cores).
                    if n == 8 {
                        _mm256_storeu_ps(dst.add(8 * v), mv);
                    } else {
                        _mm256_maskstore_ps(dst.add(8 * v), lane_mask(mask32(n)), mv);
                    }
                }
            }
            Window::Square => {
                let n_out = width / 2;
                let dst = out.row_ptr(c0 + c, 0, col / 2, n_out);
                let hi = if NV > 1 { m[NV - 1] } else { _mm256_setzero_ps() };
                // [l0 l2 h0 h2 | l4 l6 h4 h6] -> [l0 l2 l4 l6 h0 h2 h4 h6], and the odds.
                let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
                let evens = order(_mm256_shuffle_ps::<0b10_00_10_00>(m[0], hi));
                let odds = order(_mm256_shuffle_ps::<0b11_01_11_01>(m[0], hi));
                if n_out >= 8 {
                    _mm256_storeu_ps(dst, max8(evens, odds));
                } else {
                    _mm256_maskstore_ps(dst, lane_mask(mask32(n_out)), max8(evens, odds));
                }
            }
        }
    }
}

/// [`sums`] with AVX2, for channels `c0..c0 + QUARTER`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums256<const NV: usize, const EDGE: u8>(
    job: &Job<'_>,
    rows: Rows,
    s0: isize,
    w: usize,
    c0: usize,
) -> [[[__m256; NV]; 2]; QUARTER] {
    let pl = &job.pl;
    let (plane, iw, kh) = (pl.ih * pl.iw, pl.iw, pl.kh);
    let cols = |v: usize| if v + 1 == NV { w } else { 8 };
    let masks: [[__m256i; NV]; KW] =
        std::array::from_fn(|kwi| std::array::from_fn(|v| lane_mask(inside(s0 + (kwi + 8 * v) as isize, cols(v), iw))));
    let masked = |v: usize| EDGE & 4 != 0 || (v == 0 && EDGE & 1 != 0) || (v + 1 == NV && EDGE & 2 != 0);
    let mut acc = [[[_mm256_setzero_ps(); NV]; 2]; QUARTER];
    for ci in 0..job.cg {
        let wc = job.wp.as_ptr().add(ci * kh * KW * CB + c0);
        let xc = job.x.as_ptr().add(ci * plane);
        for j in rows.j0..rows.j1 {
            let p = xc.add((rows.top + j as isize) as usize * iw).wrapping_offset(s0);
            for (kwi, mk) in masks.iter().enumerate() {
                let xv: [__m256; NV] = std::array::from_fn(|v| {
                    let pv = p.wrapping_add(kwi + 8 * v);
                    if masked(v) {
                        // Only the masked-in elements are read: inside the row.
                        _mm256_maskload_ps(pv, mk[v])
                    } else {
                        // Inside the row (`dense_edges` checked this vector).
                        _mm256_loadu_ps(pv)
                    }
                });
                if j < kh {
                    fma_quarter(wc.add((j * KW + kwi) * CB), &xv, &mut acc, 0);
                }
                if j >= 1 {
                    fma_quarter(wc.add(((j - 1) * KW + kwi) * CB), &xv, &mut acc, 1);
                }
            }
        }
    }
    acc
}

/// `acc[c][k] += wt[c] * xv` for the pass's [`QUARTER`] channels.
#[inline(always)]
unsafe fn fma_quarter<const NV: usize>(
    wt: *const f32,
    xv: &[__m256; NV],
    acc: &mut [[[__m256; NV]; 2]; QUARTER],
    k: usize,
) {
    for (c, a) in acc.iter_mut().enumerate() {
        let wb = _mm256_set1_ps(*wt.add(c));
        for v in 0..NV {
            a[k][v] = _mm256_fmadd_ps(wb, xv[v], a[k][v]);
        }
    }
}
