//! The x86 rows: AVX-512 blocks of up to 48 columns (three 512-bit accumulators per channel:
//! 24 registers), or of two rows of up to 16; AVX2 blocks of 16 columns of 4 channels. A
//! block's last vector is masked to the columns it has, and a block over border columns
//! masks each tap's load to the lanes inside the input (masked-off lanes are not read), so
//! padding costs nothing. Stride 2 deinterleaves two loads; other strides gather.

use std::arch::x86_64::*;

use super::super::low_bits as mask32;
use super::{row_taps, Job, RowOut, Taps, CB, MAX_KW};

/// Rows `r..r + out.rows` in blocks of up to 48 columns ([`block_plan`]), or, for two
/// rows of at most 16 columns, both rows at once (one vector per channel and row).
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn rows_avx512(job: &Job<'_>, r: usize, out: &mut RowOut) {
    match job.pl.sw {
        1 => rows512::<1>(job, r, out),
        2 => rows512::<2>(job, r, out),
        _ => rows512::<0>(job, r, out),
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn rows512<const S: usize>(job: &Job<'_>, r: usize, out: &mut RowOut) {
    let pl = &job.pl;
    let ow = pl.ow;
    let taps: [_; 2] = std::array::from_fn(|k| row_taps(pl, r + k.min(out.rows - 1)));
    if out.rows == 2 && ow <= 16 {
        block512::<1, 2, S>(job, taps, 0, ow, out);
        return;
    }
    for (k, &t) in taps.iter().enumerate().take(out.rows) {
        let mut row = out.at(k);
        let mut col = 0;
        for nv in block_plan(ow) {
            let w = (16 * nv).min(ow - col);
            match nv {
                3 => block512::<3, 1, S>(job, [t, t], col, w - 32, &mut row),
                2 => block512::<2, 1, S>(job, [t, t], col, w - 16, &mut row),
                _ => block512::<1, 1, S>(job, [t, t], col, w, &mut row),
            }
            col += w;
        }
    }
}

/// Vectors per block (1 to 3, 16 columns each, the last block possibly short) covering
/// a row of `ow` columns. A block of `NV` vectors loads `CB + NV` values for `CB * NV`
/// multiply-adds per tap, so wider blocks run closer to the FMA peak (measured on a
/// 3x3 kernel with 16 input channels: 48 columns at 93% of it, 32 at 84%, 16 at 72%).
/// So blocks of 48; a remainder of 32 columns is one block, and one of 16 turns the last
/// 48 + 16 into 32 + 32 (faster on rows of 64, measured).
pub(super) fn block_plan(ow: usize) -> impl Iterator<Item = usize> {
    let n = ow.div_ceil(16);
    let (threes, rest): (usize, &[usize]) = match n % 3 {
        0 => (n / 3, &[]),
        2 => (n / 3, &[2]),
        _ if n > 3 => (n / 3 - 1, &[2, 2]),
        _ => (0, &[1]),
    };
    std::iter::repeat_n(3, threes).chain(rest.iter().copied())
}

/// The elements `a..b` of `0..span` whose input element `s0 + e` lies in `0..iw`.
#[inline(always)]
fn span_inside(s0: isize, span: usize, iw: usize) -> (usize, usize) {
    let a = (-s0).clamp(0, span as isize) as usize;
    let b = (iw as isize - s0).clamp(0, span as isize) as usize;
    (a, b)
}

/// [`span_inside`] as bits.
#[inline(always)]
pub(super) fn inside(s0: isize, span: usize, iw: usize) -> u32 {
    let (a, b) = span_inside(s0, span, iw);
    mask32(b) & !mask32(a)
}

/// For a stride-1 block of `nv` vectors of `lanes` columns (the last of `w`), whose first
/// column reads input column `s0`, under a kernel row of `kw` adjacent columns: which of
/// its first (bit 0) and last (bit 1) vectors need masked loads, a vector needing them
/// where it is short or some column's load of it would leave the row of `iw`; `None`
/// where a middle vector would need them too (padding wider than a vector), which
/// [`dense`] does not mask.
#[inline(always)]
pub(super) fn dense_edges(s0: isize, lanes: usize, nv: usize, w: usize, kw: usize, iw: usize) -> Option<u8> {
    let whole = |v: usize| {
        let s = s0 + (lanes * v) as isize;
        (v + 1 < nv || w == lanes) && s >= 0 && s + (lanes + kw - 1) as isize <= iw as isize
    };
    (1..nv.saturating_sub(1)).all(whole).then(|| u8::from(!whole(0)) | (u8::from(nv > 1 && !whole(nv - 1)) << 1))
}

/// Columns `col..col + 16 * (NV - 1) + w` (`1 <= w <= 16`) of rows `0..R` of every
/// channel of the block; `taps[k]` are row `k`'s (with `R = 2`, both rows read every
/// kernel row, so the lists match entry for entry). `S` is the column stride (0: any,
/// gathered). Each kernel column's loads read only the elements inside the input row
/// (masks computed once per block: they do not depend on the channel or kernel row).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn block512<const NV: usize, const R: usize, const S: usize>(
    job: &Job<'_>,
    taps: [Taps; 2],
    col: usize,
    w: usize,
    out: &mut RowOut,
) {
    let pl = &job.pl;
    let sw = if S == 0 { pl.sw } else { S };
    // `applies` checked `kw <= MAX_KW`.
    let (plane, iw, kw) = (pl.ih * pl.iw, pl.iw, pl.kw.min(MAX_KW));
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let strided = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(sw as i32));
    // Columns of each vector.
    let cols = |v: usize| if v + 1 == NV { w } else { 16 };
    let mut acc = [[[_mm512_setzero_ps(); NV]; R]; CB];
    // Stride 2 with adjacent kernel columns: one pair of loads per vector serves every
    // kernel column (`paired`, which makes its own masks); stride 1 with 3 adjacent
    // columns (the common kernel) unrolls them (`dense`).
    let s0 = (col * sw) as isize - pl.pl as isize;
    let edges = if S == 1 && pl.dw == 1 && kw == DENSE_KW { dense_edges(s0, 16, NV, w, kw, iw) } else { None };
    if S == 2 && pl.dw == 1 && kw <= PAIRED_KW {
        paired::<NV, R>(job, taps, s0, kw, w, &mut acc);
    } else if let Some(edge) = edges {
        match edge {
            0 => dense::<NV, R, DENSE_KW, 0>(job, taps, s0, w, &mut acc),
            1 => dense::<NV, R, DENSE_KW, 1>(job, taps, s0, w, &mut acc),
            2 => dense::<NV, R, DENSE_KW, 2>(job, taps, s0, w, &mut acc),
            _ => dense::<NV, R, DENSE_KW, 3>(job, taps, s0, w, &mut acc),
        }
    } else {
        // Per kernel column: the input offset of the block's first column (negative in the
        // left padding).
        let offs: [isize; MAX_KW] = std::array::from_fn(|kwi| s0 + (kwi * pl.dw) as isize);
        let masks = column_masks::<NV, S>(pl, col, w);
        for ci in 0..job.cg {
            for (t, (khi, _)) in taps[0].iter().enumerate() {
                let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB);
                let rows: [*const f32; R] =
                    std::array::from_fn(|k| job.x.as_ptr().add(ci * plane + taps[k].row(t) * iw));
                each_column::<NV, R, S>(&rows, wk, kw, sw, &offs, &masks, evens, strided, &mut acc);
            }
        }
    }
    for (c, a) in acc.iter().enumerate().take(out.n_ch) {
        for (k, ak) in a.iter().enumerate() {
            let dst = out.row_ptr(c, k, col, 16 * (NV - 1) + w);
            for (v, &av) in ak.iter().enumerate() {
                _mm512_mask_storeu_ps(dst.add(16 * v), mask32(cols(v)) as u16, av);
            }
        }
    }
}

/// Kernel columns the stride-1 block unrolls ([`dense`]): 3, the common kernel; its
/// masks for the first and last vector fit the 7 mask registers.
const DENSE_KW: usize = 3;

/// Per kernel column `kwi < kw` and vector `v` of the block of columns
/// `col..col + 16 * (NV - 1) + w`, the elements of the vector's span that are read (bit
/// `e`: element `e`; for a gather, bit `l`: lane `l`): those inside the input row.
#[inline(always)]
fn column_masks<const NV: usize, const S: usize>(pl: &super::Plane, col: usize, w: usize) -> [[u32; NV]; MAX_KW] {
    let sw = if S == 0 { pl.sw } else { S };
    let cols = |v: usize| if v + 1 == NV { w } else { 16 };
    let mut masks = [[0u32; NV]; MAX_KW];
    for (kwi, mk) in masks.iter_mut().enumerate().take(pl.kw.min(MAX_KW)) {
        let s0 = (col * sw + kwi * pl.dw) as isize - pl.pl as isize;
        for (v, m) in mk.iter_mut().enumerate() {
            let s = s0 + (16 * v * sw) as isize;
            *m = if S == 1 || S == 2 {
                inside(s, (cols(v) - 1) * sw + 1, pl.iw)
            } else {
                (0..cols(v)).fold(0, |g, l| {
                    let e = s + (l * sw) as isize;
                    g | (u32::from(e >= 0 && e < pl.iw as isize) << l)
                })
            };
        }
    }
    masks
}

/// One kernel row of one input channel into `acc`: for each kernel column, the `NV`
/// vectors of inputs it reads (masked to the row), times its `CB` weights at `wk`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn each_column<const NV: usize, const R: usize, const S: usize>(
    rows: &[*const f32; R],
    wk: *const f32,
    kw: usize,
    sw: usize,
    offs: &[isize; MAX_KW],
    masks: &[[u32; NV]; MAX_KW],
    evens: __m512i,
    strided: __m512i,
    acc: &mut [[[__m512; NV]; R]; CB],
) {
    for kwi in 0..kw {
        let mut xv = [[_mm512_setzero_ps(); NV]; R];
        for (k, xk) in xv.iter_mut().enumerate() {
            let p = rows[k].wrapping_offset(offs[kwi]);
            for (v, x) in xk.iter_mut().enumerate() {
                // Only the masked-in elements are read: inside the row.
                let pv = p.wrapping_add(16 * v * sw);
                let m = masks[kwi][v];
                *x = match S {
                    1 => _mm512_maskz_loadu_ps(m as u16, pv),
                    2 => {
                        let a = _mm512_maskz_loadu_ps(m as u16, pv);
                        let b = _mm512_maskz_loadu_ps((m >> 16) as u16, pv.wrapping_add(16));
                        _mm512_permutex2var_ps(a, evens, b)
                    }
                    _ => _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), m as u16, strided, pv),
                };
            }
        }
        fma_taps(wk.add(kwi * CB), &xv, acc);
    }
}

/// The stride-1 block for `KW` adjacent kernel columns with the columns unrolled and the
/// loads' masks held in mask registers for the whole block: only the first vector
/// (`EDGE & 1`) and the last (`EDGE & 2`, of `w` columns) are masked; the caller checked
/// that every other vector's loads lie inside the row. The block's first column reads
/// from input column `s0`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn dense<const NV: usize, const R: usize, const KW: usize, const EDGE: u8>(
    job: &Job<'_>,
    taps: [Taps; 2],
    s0: isize,
    w: usize,
    acc: &mut [[[__m512; NV]; R]; CB],
) {
    let pl = &job.pl;
    let (plane, iw) = (pl.ih * pl.iw, pl.iw);
    let cols = |v: usize| if v + 1 == NV { w } else { 16 };
    let mask = |kwi: usize, v: usize| inside(s0 + (kwi + 16 * v) as isize, cols(v), iw) as __mmask16;
    let first: [__mmask16; KW] = std::array::from_fn(|kwi| mask(kwi, 0));
    let last: [__mmask16; KW] = std::array::from_fn(|kwi| mask(kwi, NV - 1));
    // A row's kernel rows are consecutive, `dh` input rows apart: the loops step pointers.
    let (k0, n_taps) = (taps[0].k0, taps[0].n);
    if n_taps == 0 {
        return;
    }
    let (w_step, x_step) = (KW * CB, pl.dh * iw);
    let x0: [*const f32; R] = std::array::from_fn(|k| job.x.as_ptr().add(taps[k].row(0) * iw).wrapping_offset(s0));
    for ci in 0..job.cg {
        let wc = job.wp.as_ptr().add((ci * pl.kh + k0) * KW * CB);
        let xc = ci * plane;
        for t in 0..n_taps {
            let wk = wc.add(t * w_step);
            let rows: [*const f32; R] = std::array::from_fn(|k| x0[k].wrapping_add(xc + t * x_step));
            for kwi in 0..KW {
                let xv: [[__m512; NV]; R] = std::array::from_fn(|k| {
                    std::array::from_fn(|v| {
                        let p = rows[k].wrapping_add(kwi + 16 * v);
                        if v == 0 && EDGE & 1 != 0 {
                            _mm512_maskz_loadu_ps(first[kwi], p)
                        } else if v + 1 == NV && EDGE & 2 != 0 {
                            _mm512_maskz_loadu_ps(last[kwi], p)
                        } else {
                            // Inside the row (the caller checked this vector's masks).
                            _mm512_loadu_ps(p)
                        }
                    })
                });
                fma_taps(wk.add(kwi * CB), &xv, acc);
            }
        }
    }
}

/// `acc[c] += wt[c] * xv` for the block's `CB` channels.
#[inline(always)]
unsafe fn fma_taps<const NV: usize, const R: usize>(
    wt: *const f32,
    xv: &[[__m512; NV]; R],
    acc: &mut [[[__m512; NV]; R]; CB],
) {
    for (c, a) in acc.iter_mut().enumerate() {
        let wb = _mm512_set1_ps(*wt.add(c));
        for k in 0..R {
            for v in 0..NV {
                a[k][v] = _mm512_fmadd_ps(wb, xv[k][v], a[k][v]);
            }
        }
    }
}

/// Longest kernel row the AVX-512 stride-2 block reads through shared loads ([`paired`]).
const PAIRED_KW: usize = 7;

/// The stride-2 block for up to [`PAIRED_KW`] adjacent kernel columns: per vector, the 32
/// input elements from the first column's offset `s0` (masked to the row) are loaded once
/// and split into evens (kernel column 0) and odds (column 1); column `2j + parity` is
/// those moved down `j` lanes, the top lanes taken from the next vector's (for the last
/// vector, from the elements after its span, loaded the same way). Every element read
/// lies inside the row and is one some column needs; the rest are zeros, as with
/// per-column masks.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn paired<const NV: usize, const R: usize>(
    job: &Job<'_>,
    taps: [Taps; 2],
    s0: isize,
    kw: usize,
    w: usize,
    acc: &mut [[[__m512; NV]; R]; CB],
) {
    let pl = &job.pl;
    let (plane, iw) = (pl.ih * pl.iw, pl.iw);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    // The elements from `s0` any column needs, and per vector those of its 32 inside the
    // row (vector NV: the ones after the last vector's span).
    let need = 2 * (16 * (NV - 1) + w - 1) + kw;
    let mask_at = |v: usize| inside(s0 + 32 * v as isize, need.saturating_sub(32 * v).min(32), iw);
    let masks: [u32; NV] = std::array::from_fn(mask_at);
    let extra = if kw > 2 { mask_at(NV) } else { 0 };
    // Evens and odds of the 32 elements at `pv` under mask `m`.
    let split = |pv: *const f32, m: u32| {
        let a = _mm512_maskz_loadu_ps(m as u16, pv);
        let b = _mm512_maskz_loadu_ps((m >> 16) as u16, pv.wrapping_add(16));
        (_mm512_permutex2var_ps(a, evens, b), _mm512_permutex2var_ps(a, odds, b))
    };
    // Lanes `j..16` of `lo` then lanes `0..j` of `hi`.
    let shift = |hi: __m512, lo: __m512, j: usize| {
        let (hi, lo) = (_mm512_castps_si512(hi), _mm512_castps_si512(lo));
        _mm512_castsi512_ps(match j {
            1 => _mm512_alignr_epi32::<1>(hi, lo),
            2 => _mm512_alignr_epi32::<2>(hi, lo),
            _ => _mm512_alignr_epi32::<3>(hi, lo),
        })
    };
    for ci in 0..job.cg {
        for (t, (khi, _)) in taps[0].iter().enumerate() {
            let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB);
            let mut xe = [[_mm512_setzero_ps(); NV]; R];
            let mut xo = [[_mm512_setzero_ps(); NV]; R];
            let mut ne = [_mm512_setzero_ps(); R];
            let mut no = [_mm512_setzero_ps(); R];
            for k in 0..R {
                let p = job.x.as_ptr().add(ci * plane + taps[k].row(t) * iw).wrapping_offset(s0);
                for v in 0..NV {
                    (xe[k][v], xo[k][v]) = split(p.wrapping_add(32 * v), masks[v]);
                }
                if kw > 2 {
                    (ne[k], no[k]) = split(p.wrapping_add(32 * NV), extra);
                }
            }
            fma_taps(wk, &xe, acc);
            if kw > 1 {
                fma_taps(wk.add(CB), &xo, acc);
            }
            for kwi in 2..kw {
                let (src, next) = if kwi % 2 == 0 { (&xe, &ne) } else { (&xo, &no) };
                let x: [[__m512; NV]; R] = std::array::from_fn(|k| {
                    std::array::from_fn(|v| {
                        let hi = if v + 1 < NV { src[k][v + 1] } else { next[k] };
                        shift(hi, src[k][v], kwi / 2)
                    })
                });
                fma_taps(wk.add(kwi * CB), &x, acc);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn row_avx2(job: &Job<'_>, taps: Taps, k: usize, out: &mut RowOut) {
    match job.pl.sw {
        1 => row256::<1>(job, taps, k, out),
        2 => row256::<2>(job, taps, k, out),
        _ => row256::<0>(job, taps, k, out),
    }
}

/// Row `k` in balanced blocks of up to 16 columns: two vectors for each of four channels
/// at a time (eight accumulators), the block's channels in two halves.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn row256<const S: usize>(job: &Job<'_>, taps: Taps, k: usize, out: &mut RowOut) {
    let ow = job.pl.ow;
    let mut row = out.at(k);
    let per = ow.div_ceil(ow.div_ceil(16));
    let mut col = 0;
    while col < ow {
        let w = per.min(ow - col);
        for half in 0..CB.div_ceil(4).min(row.n_ch.div_ceil(4)) {
            if w > 8 {
                block256::<2, S>(job, taps, col, w - 8, half * 4, &mut row);
            } else {
                block256::<1, S>(job, taps, col, w, half * 4, &mut row);
            }
        }
        col += w;
    }
}

/// A mask vector for `_mm256_maskload_ps` with lanes `a..b` (`b <= 8`) set.
#[inline(always)]
unsafe fn mask8(a: usize, b: usize) -> __m256i {
    const ONES: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
    let upto = |n: usize| _mm256_loadu_si256(ONES.as_ptr().add(8 - n.min(8)) as *const __m256i);
    _mm256_andnot_si256(upto(a.min(b)), upto(b))
}

/// The masks of two 8-lane loads for elements `a..b` (`b <= 16`) of 16 consecutive ones.
#[inline(always)]
unsafe fn mask16(a: usize, b: usize) -> [__m256i; 2] {
    [mask8(a.min(8), b.min(8)), mask8(a.max(8) - 8, b.max(8) - 8)]
}

/// Columns `col..col + 8 * (NV - 1) + w` (`1 <= w <= 8`) of channels `c0..c0 + 4` of the
/// block (`S` and the masks as for the AVX-512 blocks; a stride-2 load is two 8-lane
/// loads, deinterleaved).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn block256<const NV: usize, const S: usize>(
    job: &Job<'_>,
    taps: Taps,
    col: usize,
    w: usize,
    c0: usize,
    out: &mut RowOut,
) {
    let pl = &job.pl;
    let sw = if S == 0 { pl.sw } else { S };
    // `applies` checked `kw <= MAX_KW`.
    let (iw, kw) = (pl.iw, pl.kw.min(MAX_KW));
    let cols = |v: usize| if v + 1 == NV { w } else { 8 };
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let strided = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(sw as i32));
    let mut acc = [[_mm256_setzero_ps(); NV]; 4];
    let s0 = (col * sw) as isize - pl.pl as isize;
    let edges = if S == 1 && pl.dw == 1 && kw == DENSE_KW { dense_edges(s0, 8, NV, w, kw, iw) } else { None };
    if S == 2 && pl.dw == 1 && kw <= PAIRED_KW {
        paired256::<NV>(job, taps, s0, kw, w, c0, &mut acc);
    } else if let Some(edge) = edges {
        match edge {
            0 => dense256::<NV, DENSE_KW, 0>(job, taps, s0, w, c0, &mut acc),
            1 => dense256::<NV, DENSE_KW, 1>(job, taps, s0, w, c0, &mut acc),
            2 => dense256::<NV, DENSE_KW, 2>(job, taps, s0, w, c0, &mut acc),
            _ => dense256::<NV, DENSE_KW, 3>(job, taps, s0, w, c0, &mut acc),
        }
    } else {
        // Per kernel column: the input offset of the block's first column, and per vector
        // the masks of the elements read (stride 1: lanes; stride 2: the two loads' lanes;
        // other strides: the gathered lanes).
        let mut offs = [0isize; MAX_KW];
        let mut masks = [[[_mm256_setzero_si256(); 2]; NV]; MAX_KW];
        for kwi in 0..kw {
            let s0 = (col * sw + kwi * pl.dw) as isize - pl.pl as isize;
            offs[kwi] = s0;
            for (v, m) in masks[kwi].iter_mut().enumerate() {
                let s = s0 + (8 * v * sw) as isize;
                let (a, b) = span_inside(s, (cols(v) - 1) * sw + 1, iw);
                *m = match S {
                    1 => [mask8(a, b), _mm256_setzero_si256()],
                    2 => mask16(a, b),
                    _ => [mask8(a.div_ceil(sw), b.div_ceil(sw).max(a.div_ceil(sw))), _mm256_setzero_si256()],
                };
            }
        }
        unpaired256::<NV, S>(job, taps, (kw, sw), &offs, &masks, strided, c0, &mut acc);
    }
    for (c, a) in acc.iter().enumerate().take(out.n_ch.saturating_sub(c0)) {
        let dst = out.row_ptr(c0 + c, 0, col, 8 * (NV - 1) + w);
        for (v, &av) in a.iter().enumerate() {
            // A masked store only for a partial vector: AMD's cores run `vmaskmovps` to
            // memory as microcode (about a fifth of a CRNN layer's time on a Zen 4 when every
            // vector went through it).
            if cols(v) == 8 {
                _mm256_storeu_ps(dst.add(8 * v), av);
            } else {
                _mm256_maskstore_ps(dst.add(8 * v), mask8(0, cols(v)), av);
            }
        }
    }
}

/// Every kernel tap of [`block256`]'s channels `c0..c0 + 4`, each kernel column's inputs
/// loaded by the masks computed for it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn unpaired256<const NV: usize, const S: usize>(
    job: &Job<'_>,
    taps: Taps,
    (kw, sw): (usize, usize),
    offs: &[isize; MAX_KW],
    masks: &[[[__m256i; 2]; NV]; MAX_KW],
    strided: __m256i,
    c0: usize,
    acc: &mut [[__m256; NV]; 4],
) {
    let pl = &job.pl;
    let plane = pl.ih * pl.iw;
    for ci in 0..job.cg {
        for (khi, i) in taps.iter() {
            let row = job.x.as_ptr().add(ci * plane + i * pl.iw);
            let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB + c0);
            for kwi in 0..kw {
                // Only the masked-in elements are read: inside the row.
                let p = row.wrapping_offset(offs[kwi]);
                let mut xv = [_mm256_setzero_ps(); NV];
                for (v, x) in xv.iter_mut().enumerate() {
                    let pv = p.wrapping_add(8 * v * sw);
                    let [ma, mb] = masks[kwi][v];
                    *x = match S {
                        1 => _mm256_maskload_ps(pv, ma),
                        2 => {
                            let lo = _mm256_maskload_ps(pv, ma);
                            let hi = _mm256_maskload_ps(pv.wrapping_add(8), mb);
                            // [l0 l2 h0 h2 | l4 l6 h4 h6] -> [l0 l2 l4 l6 h0 h2 h4 h6].
                            let e = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(e)))
                        }
                        _ => _mm256_mask_i32gather_ps::<4>(_mm256_setzero_ps(), pv, strided, _mm256_castsi256_ps(ma)),
                    };
                }
                fma4(wk.add(kwi * CB), &xv, acc);
            }
        }
    }
}

/// The AVX-512 [`dense`] on 8 lanes, for channels `c0..c0 + 4`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dense256<const NV: usize, const KW: usize, const EDGE: u8>(
    job: &Job<'_>,
    taps: Taps,
    s0: isize,
    w: usize,
    c0: usize,
    acc: &mut [[__m256; NV]; 4],
) {
    let pl = &job.pl;
    let (plane, iw) = (pl.ih * pl.iw, pl.iw);
    let cols = |v: usize| if v + 1 == NV { w } else { 8 };
    let mask = |kwi: usize, v: usize| {
        let (a, b) = span_inside(s0 + (kwi + 8 * v) as isize, cols(v), iw);
        mask8(a, b)
    };
    let first: [__m256i; KW] = std::array::from_fn(|kwi| mask(kwi, 0));
    let last: [__m256i; KW] = std::array::from_fn(|kwi| mask(kwi, NV - 1));
    for ci in 0..job.cg {
        for (khi, i) in taps.iter() {
            let row = job.x.as_ptr().add(ci * plane + i * pl.iw).wrapping_offset(s0);
            let wk = job.wp.as_ptr().add((ci * pl.kh + khi) * KW * CB + c0);
            for kwi in 0..KW {
                let xv: [__m256; NV] = std::array::from_fn(|v| {
                    let p = row.wrapping_add(kwi + 8 * v);
                    if v == 0 && EDGE & 1 != 0 {
                        _mm256_maskload_ps(p, first[kwi])
                    } else if v + 1 == NV && EDGE & 2 != 0 {
                        _mm256_maskload_ps(p, last[kwi])
                    } else {
                        // Inside the row (the caller checked this vector's loads).
                        _mm256_loadu_ps(p)
                    }
                });
                fma4(wk.add(kwi * CB), &xv, acc);
            }
        }
    }
}

/// `acc[c] += wt[c] * xv` for four channels.
#[inline(always)]
unsafe fn fma4<const NV: usize>(wt: *const f32, xv: &[__m256; NV], acc: &mut [[__m256; NV]; 4]) {
    for (c, a) in acc.iter_mut().enumerate() {
        let wb = _mm256_set1_ps(*wt.add(c));
        for v in 0..NV {
            a[v] = _mm256_fmadd_ps(wb, xv[v], a[v]);
        }
    }
}

/// The AVX-512 [`paired`] on 8 lanes, for channels `c0..c0 + 4`: per vector, the 16 input
/// elements from `s0` are loaded once (two masked loads) and split into evens (kernel
/// column 0) and odds (column 1); column `2j + parity` is those rotated down `j` lanes,
/// the top `j` taken from the next vector's (or from the elements after the last span).
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn paired256<const NV: usize>(
    job: &Job<'_>,
    taps: Taps,
    s0: isize,
    kw: usize,
    w: usize,
    c0: usize,
    acc: &mut [[__m256; NV]; 4],
) {
    let pl = &job.pl;
    let (plane, iw) = (pl.ih * pl.iw, pl.iw);
    let inside = |s: isize, span: usize| {
        let (a, b) = span_inside(s, span, iw);
        mask16(a, b)
    };
    // The elements from `s0` any column needs, and per vector those of its 16 inside the
    // row (vector NV: the ones after the last vector's span).
    let need = 2 * (8 * (NV - 1) + w - 1) + kw;
    let mask_at = |v: usize| inside(s0 + 16 * v as isize, need.saturating_sub(16 * v).min(16));
    let masks: [[__m256i; 2]; NV] = std::array::from_fn(mask_at);
    let extra = if kw > 2 { mask_at(NV) } else { [_mm256_setzero_si256(); 2] };
    // Moving down `j` lanes: every lane from `(l + j) mod 8`, the top `j` from the next
    // vector.
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let rots: [__m256i; 4] = std::array::from_fn(|j| {
        _mm256_and_si256(_mm256_add_epi32(lanes, _mm256_set1_epi32(j as i32)), _mm256_set1_epi32(7))
    });
    let tops: [__m256; 4] =
        std::array::from_fn(|j| _mm256_castsi256_ps(_mm256_cmpgt_epi32(lanes, _mm256_set1_epi32(7 - j as i32))));
    // [l0 l2 h0 h2 | l4 l6 h4 h6] -> [l0 l2 l4 l6 h0 h2 h4 h6] (and the same for odds).
    let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
    // Evens and odds of the 16 elements at `pv` under masks `m` (only those are read).
    let split = |pv: *const f32, m: [__m256i; 2]| {
        let lo = _mm256_maskload_ps(pv, m[0]);
        let hi = _mm256_maskload_ps(pv.wrapping_add(8), m[1]);
        (order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)), order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)))
    };
    for ci in 0..job.cg {
        for (khi, i) in taps.iter() {
            let p = job.x.as_ptr().add(ci * plane + i * pl.iw).wrapping_offset(s0);
            let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB + c0);
            let mut xe = [_mm256_setzero_ps(); NV];
            let mut xo = [_mm256_setzero_ps(); NV];
            for v in 0..NV {
                (xe[v], xo[v]) = split(p.wrapping_add(16 * v), masks[v]);
            }
            let (ne, no) = if kw > 2 { split(p.wrapping_add(16 * NV), extra) } else { (xe[0], xo[0]) };
            fma4(wk, &xe, acc);
            if kw > 1 {
                fma4(wk.add(CB), &xo, acc);
            }
            for kwi in 2..kw {
                let (src, next, j) = if kwi % 2 == 0 { (&xe, ne, kwi / 2) } else { (&xo, no, kwi / 2) };
                let x: [__m256; NV] = std::array::from_fn(|v| {
                    let hi = if v + 1 < NV { src[v + 1] } else { next };
                    _mm256_blendv_ps(
                        _mm256_permutevar8x32_ps(src[v], rots[j]),
                        _mm256_permutevar8x32_ps(hi, rots[j]),
                        tops[j],
                    )
                });
                fma4(wk.add(kwi * CB), &x, acc);
            }
        }
    }
}
