//! The AVX-512 convolution rows with a following max pooling over two rows done in
//! registers: a CRNN's and a VGG-style network's `conv 3×3 → max_pool 2×2` (or `2×1`).
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
//! Each convolution output is summed in the blocked kernel's order (input channels, kernel
//! rows, kernel columns, one fused multiply-add each from 0), and the pooling is the op's
//! `max` (NaN-propagating, `+0` over `-0`), so the bits are the band path's. The epilogue
//! (bias, activation) runs after, on the pooled rows, as there.

use std::arch::x86_64::*;

use super::super::low_bits as mask32;
use super::super::pool::{max16_avx512 as max16, RowPool};
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

/// The window to fuse for convolution rows `pl` pooled by `pool`, where this kernel takes
/// them: a `3`-wide kernel at stride 1 without dilation, a pooling of two rows and one or
/// two columns as [`Window`] says, on a CPU with AVX-512 (under the ISA cap).
pub(super) fn applies(pl: &Plane, pool: &RowPool) -> Option<Window> {
    let conv = (pl.kw, pl.sw, pl.dw, pl.sh, pl.dh) == (KW, 1, 1, 1, 1) && pl.kh > 0;
    if !conv || pool.band() != 2 || 2 * pool.out_rows() > pl.oh || pool.in_cols() != pl.ow {
        return None;
    }
    let window = match pool.columns() {
        (1, 1, 0, 1) if pool.out_cols() == pl.ow => Window::Rows,
        (2, 2, 0, 1) if pool.out_cols() == pl.ow / 2 => Window::Square,
        _ => return None,
    };
    super::super::has_avx512().then_some(window)
}

/// Pooled row `q` (convolution rows `2q` and `2q + 1`) of every channel of the block into
/// row 0 of `out` (whose `ow` is the pooled width). The caller checked [`applies`].
///
/// # Safety
/// The CPU has AVX-512 (F, DQ, VL) and FMA.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn row(job: &Job<'_>, q: usize, window: Window, out: &mut RowOut) {
    let pl = &job.pl;
    // The two rows read input rows `top + j`, `j` in `0..=kh`, inside for `j` in `j0..j1`.
    let top = (2 * q) as isize - pl.pt as isize;
    let j0 = (-top).max(0) as usize;
    let j1 = ((pl.ih as isize - top).max(0) as usize).min(pl.kh + 1);
    let rows = Rows { top, j0, j1 };
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
