//! The channel-vector convolution (AVX2 and FMA): `lanes.rs` with 256-bit vectors.
//!
//! A vector holds [`LANES`] output channels of one output column, so the blocked packing
//! `[O/CB][C][3][3][CB]` (`CB` = [`LANES`] = 8) is already this kernel's layout and nothing
//! is repacked. A chunk of output columns of one output row keeps `NB * NP` accumulators:
//! two vectors of channels by up to [`P2`] columns, or one by up to [`P1`] (12 registers
//! either way, with the weights and a broadcast input: no spills in 16). With two vectors,
//! each input channel and kernel position loads two weight vectors and broadcasts `NP`
//! input values; with one, a kernel row's three weight vectors stay in registers and each
//! input value is broadcast once for every column that reads it. Either way a column stride
//! of 2 costs nothing, where the blocked kernel's AVX2 rows deinterleave their inputs. The
//! results are transposed in registers (8×8) and each channel's columns stored at once.
//!
//! The bits are the blocked kernel's, as in `lanes.rs`: the same sum per output (input
//! channels, then kernel rows, then kernel columns, one fused multiply-add per tap from 0;
//! kernel rows in the padding skipped), the padding's columns multiplying a 0 as the blocked
//! kernel's masked loads do, and the same epilogue after.
//!
//! Where it runs ([`applies`]) was measured on a 2-core Zen 4 EPYC (AVX2's FMA throughput
//! there is AVX-512's) under `LADDER_MAX_ISA=avx2`, 1 thread, the blocked kernel's AVX2
//! rows against this kernel on one 3×3 convolution with padding 1 (µs, the least of 41
//! alternating runs, the machine shared):
//!
//! - column stride 2, every width: `3 → 8` to 80×112 115 → 81, `8 → 16` to 40×56 134 → 63,
//!   `16 → 32` to 20×28 120 → 60, `32 → 32` to 10×14 58 → 32, `16 → 32` to 20×128
//!   572 → 285, `8 → 8` to 40×128 148 → 100 (the blocked rows deinterleave every input);
//! - column stride 1, `16 → 32` on 20 rows: 14 columns 39 → 35, 28 74 → 64, 40 107 → 86,
//!   56 138 → 111, `48 → 32` on 20×28 205 → 183; but rows of 16, 32 and 48 columns fill
//!   the blocked kernel's blocks of 16 (0.95–1.03 times its speed here), from 64 columns it
//!   is as fast (64: 137 → 138, 128: 272 → 277; a CRNN's rows), and with one vector of 8
//!   channels no faster (`8 → 8` on 20×28 and 20×48: 0.7–1.1 times).
//!
//! Only where AVX-512 is not active: there `lanes.rs` runs (16 channels a vector).

use std::arch::x86_64::*;

use super::super::conv::ConvGeom;
use super::super::gemm::Epilogue;
use super::lanes::{drive, kernel_rows, Chunk, Dst, Kernel};
use super::{Plane, CB};

/// Output channels per vector: the blocked packing's channel block.
pub(super) const LANES: usize = CB;

/// Output columns per chunk at most with two vectors of channels (12 accumulators).
const P2: usize = 6;

/// Output columns per chunk at most with one vector of channels (12 accumulators).
const P1: usize = 12;

/// The widest output row a column stride of 1 takes (stride 2 takes any): from rows of 64
/// the blocked kernel's blocks of 16 columns fit as well (a CRNN's rows of 64 and 128).
pub(super) const MAX_OW_S1: usize = 56;

/// Kernel rows and columns.
const K: usize = 3;

/// Whether this kernel computes the convolution: 2-D, one group, a 3×3 kernel without
/// dilation, output channels a multiple of [`LANES`] with a column stride of 2, or a multiple
/// of `2 * LANES` with a column stride of 1 on rows of at most [`MAX_OW_S1`] columns that
/// are not a whole number of the blocked kernel's blocks of 16, on a CPU with AVX2 and FMA
/// but not AVX-512 (under the ISA cap). The module docs give the measurements.
pub(super) fn applies(g: &ConvGeom, pl: &Plane) -> bool {
    let stride_fits = match pl.sw {
        2 => true,
        1 => pl.ow <= MAX_OW_S1 && !pl.ow.is_multiple_of(16) && g.out_ch.is_multiple_of(2 * LANES),
        _ => false,
    };
    g.groups == 1
        && g.in_sp.len() == 2
        && (pl.kh, pl.kw, pl.dh, pl.dw) == (K, K, 1, 1)
        && stride_fits
        && pl.ow > 0
        && g.out_ch.is_multiple_of(LANES)
        && super::super::has_avx2()
        && !super::super::has_avx512()
}

/// `out = epi(conv(x, w))` with `w` the blocked packing (`[O/8][C][3][3][8]`); the caller
/// checked the lengths and that [`applies`] holds.
pub(super) fn conv(
    g: &ConvGeom,
    pl: &Plane,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    threads: usize,
    epi: &Epilogue<'_, f32>,
) {
    let kernel = Kernel { lanes: LANES, cols: |nb| if nb == 2 { P2 } else { P1 }, inside, border };
    drive(g, pl, x, w, out, threads, epi, &kernel);
}

/// A chunk of `at.np` (1 to [`P2`] with two vectors of channels, to [`P1`] with one)
/// columns whose taps are all inside the input row.
#[target_feature(enable = "avx2,fma")]
unsafe fn inside(pl: &Plane, cg: usize, nb: usize, x: &[f32], w: &[f32], at: &Chunk, dst: &Dst) {
    macro_rules! two {
        ($s:literal) => {
            match at.np {
                6 => taps::<2, $s, 6>(pl, cg, x, w, at, dst),
                5 => taps::<2, $s, 5>(pl, cg, x, w, at, dst),
                4 => taps::<2, $s, 4>(pl, cg, x, w, at, dst),
                3 => taps::<2, $s, 3>(pl, cg, x, w, at, dst),
                2 => taps::<2, $s, 2>(pl, cg, x, w, at, dst),
                _ => taps::<2, $s, 1>(pl, cg, x, w, at, dst),
            }
        };
    }
    macro_rules! one {
        ($s:literal) => {
            match at.np {
                12 => taps_one::<$s, 12>(pl, cg, x, w, at, dst),
                11 => taps_one::<$s, 11>(pl, cg, x, w, at, dst),
                10 => taps_one::<$s, 10>(pl, cg, x, w, at, dst),
                9 => taps_one::<$s, 9>(pl, cg, x, w, at, dst),
                8 => taps_one::<$s, 8>(pl, cg, x, w, at, dst),
                7 => taps_one::<$s, 7>(pl, cg, x, w, at, dst),
                6 => taps_one::<$s, 6>(pl, cg, x, w, at, dst),
                5 => taps_one::<$s, 5>(pl, cg, x, w, at, dst),
                4 => taps_one::<$s, 4>(pl, cg, x, w, at, dst),
                3 => taps_one::<$s, 3>(pl, cg, x, w, at, dst),
                2 => taps_one::<$s, 2>(pl, cg, x, w, at, dst),
                _ => taps_one::<$s, 1>(pl, cg, x, w, at, dst),
            }
        };
    }
    match (nb, pl.sw) {
        (2, 1) => two!(1),
        (2, _) => two!(2),
        (_, 1) => one!(1),
        _ => one!(2),
    }
}

/// [`inside`] for `NB` vectors of channels, column stride `S` and `NP` columns. (Index
/// loops over the accumulators: constant indices once unrolled, which keeps them in
/// registers.)
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn taps<const NB: usize, const S: usize, const NP: usize>(
    pl: &Plane,
    cg: usize,
    x: &[f32],
    w: &[f32],
    at: &Chunk,
    dst: &Dst,
) {
    let w_len = cg * K * K * LANES;
    let plane = pl.ih * pl.iw;
    // Every tap inside: the input columns `lo..lo + (NP - 1) * S + K` of the rows read.
    let lo = at.col * S - pl.pl;
    assert!(at.np == NP && lo + (NP - 1) * S + K <= pl.iw && w.len() >= NB * w_len && x.len() >= cg * plane);
    let (top, k0, k1) = kernel_rows(pl, at.row);
    let mut acc = [[_mm256_setzero_ps(); NP]; NB];
    for ci in 0..cg {
        for khi in k0..k1 {
            let row = x.as_ptr().add(ci * plane + (top + khi as isize) as usize * pl.iw + lo);
            let wk = w.as_ptr().add((ci * K + khi) * K * LANES);
            for kwi in 0..K {
                let mut wv = [_mm256_setzero_ps(); NB];
                for (n, v) in wv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(wk.add(n * w_len + kwi * LANES));
                }
                // Opaque, so the compiler does not keep the broadcasts that the next kernel
                // column reads again (`p * S + kwi` repeats) in registers: with the
                // accumulators that spills them.
                let at_kwi = std::hint::black_box(row.add(kwi));
                for p in 0..NP {
                    let xv = _mm256_broadcast_ss(&*at_kwi.add(p * S));
                    for n in 0..NB {
                        acc[n][p] = _mm256_fmadd_ps(wv[n], xv, acc[n][p]);
                    }
                }
            }
        }
    }
    for n in 0..NB {
        store(&acc[n], n, pl, at, dst);
    }
}

/// [`inside`] for one vector of channels, column stride `S` and `NP` columns: each input
/// value read is broadcast once and multiplied by the weights of every kernel column that
/// reads it (input column `j` is tap `kwi` of output column `(j - kwi) / S`), so the 3
/// weight vectors stay in registers and the broadcasts are fewer than the multiply-adds.
/// Each accumulator still takes its taps in kernel-column order (`j` ascending).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn taps_one<const S: usize, const NP: usize>(
    pl: &Plane,
    cg: usize,
    x: &[f32],
    w: &[f32],
    at: &Chunk,
    dst: &Dst,
) {
    let w_len = cg * K * K * LANES;
    let plane = pl.ih * pl.iw;
    let lo = at.col * S - pl.pl;
    assert!(at.np == NP && lo + (NP - 1) * S + K <= pl.iw && w.len() >= w_len && x.len() >= cg * plane);
    let (top, k0, k1) = kernel_rows(pl, at.row);
    let mut acc = [_mm256_setzero_ps(); NP];
    for ci in 0..cg {
        for khi in k0..k1 {
            let row = x.as_ptr().add(ci * plane + (top + khi as isize) as usize * pl.iw + lo);
            let wk = w.as_ptr().add((ci * K + khi) * K * LANES);
            let wv = [_mm256_loadu_ps(wk), _mm256_loadu_ps(wk.add(LANES)), _mm256_loadu_ps(wk.add(2 * LANES))];
            // (A macro, not a closure: a closure does not inherit the caller's features.)
            macro_rules! bcast {
                ($j:expr) => {
                    _mm256_broadcast_ss(&*row.add($j))
                };
            }
            if S == 1 {
                for j in 0..NP + 2 {
                    let xv = bcast!(j);
                    if j < NP {
                        acc[j] = _mm256_fmadd_ps(wv[0], xv, acc[j]);
                    }
                    if (1..=NP).contains(&j) {
                        acc[j - 1] = _mm256_fmadd_ps(wv[1], xv, acc[j - 1]);
                    }
                    if j >= 2 {
                        acc[j - 2] = _mm256_fmadd_ps(wv[2], xv, acc[j - 2]);
                    }
                }
            } else {
                // Stride 2: the even input column `2q` is tap 0 of column `q` and tap 2 of
                // column `q - 1`, the odd one `2q + 1` tap 1 of column `q`.
                for q in 0..NP {
                    let even = bcast!(2 * q);
                    acc[q] = _mm256_fmadd_ps(wv[0], even, acc[q]);
                    if q > 0 {
                        acc[q - 1] = _mm256_fmadd_ps(wv[2], even, acc[q - 1]);
                    }
                    acc[q] = _mm256_fmadd_ps(wv[1], bcast!(2 * q + 1), acc[q]);
                }
                acc[NP - 1] = _mm256_fmadd_ps(wv[2], bcast!(2 * NP), acc[NP - 1]);
            }
        }
    }
    store(&acc, 0, pl, at, dst);
}

/// One column (`at.np == 1`) with some tap outside the input row: those multiply a 0, as
/// the blocked kernel's masked loads do.
#[target_feature(enable = "avx2,fma")]
unsafe fn border(pl: &Plane, cg: usize, nb: usize, x: &[f32], w: &[f32], at: &Chunk, dst: &Dst) {
    let w_len = cg * K * K * LANES;
    let plane = pl.ih * pl.iw;
    assert!(at.np == 1 && (1..=2).contains(&nb) && w.len() >= nb * w_len && x.len() >= cg * plane);
    let (top, k0, k1) = kernel_rows(pl, at.row);
    let lo = (at.col * pl.sw) as isize - pl.pl as isize;
    let mut acc = [[_mm256_setzero_ps(); 1]; 2];
    for ci in 0..cg {
        for khi in k0..k1 {
            let row = &x[ci * plane + (top + khi as isize) as usize * pl.iw..][..pl.iw];
            let wk = w.as_ptr().add((ci * K + khi) * K * LANES);
            for kwi in 0..K {
                let j = lo + kwi as isize;
                let v = if (0..pl.iw as isize).contains(&j) { row[j as usize] } else { 0.0 };
                let xv = _mm256_set1_ps(v);
                for (n, a) in acc.iter_mut().enumerate().take(nb) {
                    a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(wk.add(n * w_len + kwi * LANES)), xv, a[0]);
                }
            }
        }
    }
    for (n, a) in acc.iter().enumerate().take(nb) {
        store(a, n, pl, at, dst);
    }
}

/// Columns `at.col..at.col + NP` of vector `n`'s channels: column `p` of channel `l` is lane
/// `l` of `acc[p]`; transposed in registers eight columns at a time, each channel's columns
/// of those eight are one store of 8, or of 4, 2 and 1 for fewer.
#[inline(always)]
unsafe fn store<const NP: usize>(acc: &[__m256; NP], n: usize, pl: &Plane, at: &Chunk, dst: &Dst) {
    let mut p0 = 0;
    while p0 < NP {
        let np = (NP - p0).min(LANES);
        let mut rows = [_mm256_setzero_ps(); LANES];
        rows[..np].copy_from_slice(&acc[p0..p0 + np]);
        let cols = transpose(rows);
        for (l, v) in cols.iter().enumerate() {
            let start = at.base + (n * LANES + l) * at.plane + at.row * pl.ow + at.col + p0;
            assert!(start + np <= dst.len);
            // SAFETY: in bounds (just checked); this task owns the row.
            store_first(dst.ptr.get().add(start), np, *v);
        }
        p0 += np;
    }
}

/// Stores the first `n` (1 to 8) lanes of `v` at `p`, writing nothing past them.
#[inline(always)]
unsafe fn store_first(p: *mut f32, n: usize, v: __m256) {
    if n == LANES {
        _mm256_storeu_ps(p, v);
        return;
    }
    let (mut p, mut n, mut v4) = (p, n, _mm256_castps256_ps128(v));
    if n >= 4 {
        _mm_storeu_ps(p, v4);
        (p, n, v4) = (p.add(4), n - 4, _mm256_extractf128_ps::<1>(v));
    }
    if n >= 2 {
        _mm_store_sd(p.cast(), _mm_castps_pd(v4));
        (p, n, v4) = (p.add(2), n - 2, _mm_movehl_ps(v4, v4));
    }
    if n == 1 {
        _mm_store_ss(p, v4);
    }
}

/// The 8×8 transpose of `r` (row `i` of the result is lane `i` of every `r[j]`): 32-bit
/// interleaves of row pairs, 64-bit shuffles of those, then 128-bit halves swapped.
/// (Loops, not `array::from_fn`: a closure does not inherit the caller's target features.)
#[inline(always)]
unsafe fn transpose(r: [__m256; 8]) -> [__m256; 8] {
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4h + 2k + j]: column 2k + j of rows 4h..4h + 4 in its low half, column 2k + j + 4
    // in its high half.
    let mut u = [_mm256_setzero_ps(); 8];
    for h in 0..2 {
        for k in 0..2 {
            let (a, b) = (t[4 * h + k], t[4 * h + 2 + k]);
            u[4 * h + 2 * k] = _mm256_shuffle_ps::<0x44>(a, b);
            u[4 * h + 2 * k + 1] = _mm256_shuffle_ps::<0xee>(a, b);
        }
    }
    let mut out = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        out[i] = _mm256_permute2f128_ps::<0x20>(u[i], u[4 + i]);
        out[4 + i] = _mm256_permute2f128_ps::<0x31>(u[i], u[4 + i]);
    }
    out
}
