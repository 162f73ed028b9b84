//! The channel-vector convolution (AVX-512) for rows too narrow for the blocked kernel.
//!
//! The blocked kernel holds 16 columns of one output channel per vector; a row of 28 or 14
//! columns (a detector's later layers) fills its blocks of 48 columns poorly, and a block of
//! one or two vectors reloads the weights for few multiply-adds. Here a vector holds
//! [`LANES`] output channels of one output column: a chunk of [`P`] columns of one output row
//! keeps `NB * P` accumulators (`NB` of 1 or 2 vectors of channels), and for each input
//! channel and kernel position loads `NB` weight vectors and broadcasts `P` input values, so
//! the width of the row no longer matters (measured on a 2-core Zen 5, 1 thread, a YOLO's
//! `16 → 32` stride-2 layer of 28 columns: 41 µs with the blocked kernel, 28 µs here).
//!
//! The weights are the blocked kernel's packing regrouped as `[LANES-block][C][3][3][LANES]`
//! ([`repack`], once per plan, on first use). Each output is summed in the blocked kernel's
//! order (input channels, then kernel rows, then kernel columns, one fused multiply-add per
//! tap from 0), with the padding's taps multiplying a 0 as its masked loads do, and the same
//! epilogue after: the bits are the blocked kernel's. Chunks whose taps all fall inside the
//! input row run with constant offsets; the others (the row's ends, and a last short chunk)
//! read through a table of clamped offsets and zero the taps outside.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::super::conv::ConvGeom;
use super::super::gemm::{Epilogue, SendPtr};
use super::{row_epilogue, Plane, CB};

/// Output channels per vector.
pub(super) const LANES: usize = 16;

/// Output columns per chunk at most: 20 accumulators with two vectors of channels.
const P: usize = 10;

/// The widest output row the kernel takes: from 48 columns the blocked kernel's blocks of
/// three vectors run faster (a CRNN's rows of 64 and 128 columns: 10–30% faster there).
pub(super) const MAX_OW: usize = 32;

/// Kernel rows and columns.
const K: usize = 3;

/// Whether this kernel computes the convolution: 2-D, one group, a 3×3 kernel without
/// dilation, a column stride of 1 or 2, output channels a multiple of [`LANES`], output
/// rows of at most [`MAX_OW`] columns, on a CPU with AVX-512 (under the ISA cap).
pub(super) fn applies(g: &ConvGeom, pl: &Plane) -> bool {
    g.groups == 1
        && g.in_sp.len() == 2
        && (pl.kh, pl.kw, pl.dh, pl.dw) == (K, K, 1, 1)
        && matches!(pl.sw, 1 | 2)
        && g.out_ch.is_multiple_of(LANES)
        && (1..=MAX_OW).contains(&pl.ow)
        && super::super::has_avx512()
}

/// The blocked packing `[O/CB][C][3][3][CB]` of `out_ch` channels regrouped as
/// `[O/LANES][C][3][3][LANES]`.
pub(super) fn repack(data: &[f32], out_ch: usize, cg: usize) -> Vec<f32> {
    let kpos = K * K;
    let mut out = vec![0.0; out_ch * cg * kpos];
    for ob in 0..out_ch / LANES {
        for ci in 0..cg {
            for k in 0..kpos {
                for l in 0..LANES {
                    let blk = ob * (LANES / CB) + l / CB;
                    out[((ob * cg + ci) * kpos + k) * LANES + l] = data[((blk * cg + ci) * kpos + k) * CB + l % CB];
                }
            }
        }
    }
    out
}

/// `out = epi(conv(x, w))` with `wl` the [`repack`]ed weights; the caller checked the
/// lengths and that [`applies`] holds.
pub(super) fn conv(
    g: &ConvGeom,
    pl: &Plane,
    x: &[f32],
    wl: &[f32],
    out: &mut [f32],
    threads: usize,
    epi: &Epilogue<'_, f32>,
) {
    let kernel = Kernel { lanes: LANES, cols: |_| P, inside, border };
    drive(g, pl, x, wl, out, threads, epi, &kernel);
}

/// A chunk kernel: [`inside`] or [`border`] here, their AVX2 versions in `lanes256.rs`.
pub(super) type ChunkFn = unsafe fn(&Plane, usize, usize, &[f32], &[f32], &Chunk, &Dst);

/// What [`drive`] runs: one instruction set's channel-vector kernels.
pub(super) struct Kernel {
    /// Output channels per vector.
    pub lanes: usize,
    /// Columns per chunk at most, for `nb` (1 or 2) vectors of channels.
    pub cols: fn(usize) -> usize,
    /// A chunk whose taps are all inside the input row.
    ///
    /// # Safety
    /// The CPU has the kernel's features.
    pub inside: ChunkFn,
    /// One column with bounds checks.
    ///
    /// # Safety
    /// As `inside`.
    pub border: ChunkFn,
}

/// The channel-vector convolution's tasks, shared by both instruction sets: each takes a
/// pair of channel vectors of one image over a range of output rows, runs the border
/// columns one at a time and the interior in chunks of nearly equal sizes, then the
/// epilogue on each channel's rows. `w` holds `lanes` channels a vector, `[O/lanes][C][3][3]
/// [lanes]`; the caller checked the lengths, and the CPU has the kernel's features.
#[allow(clippy::too_many_arguments)]
pub(super) fn drive(
    g: &ConvGeom,
    pl: &Plane,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    threads: usize,
    epi: &Epilogue<'_, f32>,
    k: &Kernel,
) {
    let (oc, cg, lanes) = (g.out_ch, g.in_ch, k.lanes);
    let vectors = oc / lanes;
    let pairs = vectors.div_ceil(2);
    let units = g.batch * pairs;
    let (rows_per, chunks) = super::row_chunks(threads, units, pl.oh);
    let plane = pl.oh * pl.ow;
    let in_len = cg * pl.ih * pl.iw;
    let w_len = cg * K * K * lanes;
    assert!(w.len() >= vectors * w_len);
    let dst = Dst { ptr: SendPtr(out.as_mut_ptr()), len: out.len() };
    // Columns whose every tap is inside the input row (`lo..hi`) run in chunks of at most
    // `cols(nb)`, of nearly equal sizes; the others one at a time, with bounds checks.
    let (lo, hi) = super::interior_columns(pl.iw, pl.pl, K, pl.sw, 1, pl.ow);
    let task = |t: usize| {
        let (unit, chunk) = (t / chunks, t % chunks);
        let (b, pair) = (unit / pairs, unit % pairs);
        let nb = (vectors - 2 * pair).min(2);
        let n = (hi - lo).div_ceil((k.cols)(nb));
        let rows = chunk * rows_per..((chunk + 1) * rows_per).min(pl.oh);
        let xb = &x[b * in_len..(b + 1) * in_len];
        let wb = &w[2 * pair * w_len..(2 * pair + nb) * w_len];
        let co0 = 2 * pair * lanes;
        let base = (b * oc + co0) * plane;
        for r in rows.clone() {
            for col in (0..lo).chain(hi..pl.ow) {
                let at = Chunk { row: r, col, np: 1, base, plane };
                // SAFETY: the caller checked the CPU; `store` checks every write.
                unsafe { (k.border)(pl, cg, nb, xb, wb, &at, &dst) };
            }
            let mut col = lo;
            for q in 0..n {
                let np = (hi - lo) / n + usize::from(q < (hi - lo) % n);
                let at = Chunk { row: r, col, np, base, plane };
                // SAFETY: as above.
                unsafe { (k.inside)(pl, cg, nb, xb, wb, &at, &dst) };
                col += np;
            }
        }
        // The epilogue on each channel's rows of this task: one contiguous run each.
        if !epi.is_empty() {
            let len = rows.len() * pl.ow;
            for c in 0..nb * lanes {
                let start = base + c * plane + rows.start * pl.ow;
                assert!(start + len <= dst.len);
                // SAFETY: in bounds (just checked); tasks own disjoint rows of disjoint
                // channel blocks, and this task's are written.
                let run = unsafe { std::slice::from_raw_parts_mut(dst.ptr.get().add(start), len) };
                row_epilogue(run, co0 + c, start, epi);
            }
        }
    };
    let tasks = units * chunks;
    if threads <= 1 || tasks == 1 {
        (0..tasks).for_each(task);
    } else {
        (0..tasks).into_par_iter().for_each(task);
    }
}

/// The output, written through a pointer: tasks write disjoint parts of it.
pub(super) struct Dst {
    pub ptr: SendPtr<f32>,
    pub len: usize,
}

/// Where a chunk of output columns goes: columns `col..col + np` of output row `row` of the
/// channels from `base` (channel `c` at `base + c * plane`).
pub(super) struct Chunk {
    pub row: usize,
    pub col: usize,
    pub np: usize,
    pub base: usize,
    pub plane: usize,
}

/// A chunk of `at.np` (1 to [`P`]) columns whose taps are all inside the input row.
#[target_feature(enable = "avx512f")]
unsafe fn inside(pl: &Plane, cg: usize, nb: usize, x: &[f32], w: &[f32], at: &Chunk, dst: &Dst) {
    macro_rules! by_width {
        ($nb:literal, $s:literal) => {
            match at.np {
                10 => taps::<$nb, $s, 10>(pl, cg, x, w, at, dst),
                9 => taps::<$nb, $s, 9>(pl, cg, x, w, at, dst),
                8 => taps::<$nb, $s, 8>(pl, cg, x, w, at, dst),
                7 => taps::<$nb, $s, 7>(pl, cg, x, w, at, dst),
                6 => taps::<$nb, $s, 6>(pl, cg, x, w, at, dst),
                5 => taps::<$nb, $s, 5>(pl, cg, x, w, at, dst),
                4 => taps::<$nb, $s, 4>(pl, cg, x, w, at, dst),
                3 => taps::<$nb, $s, 3>(pl, cg, x, w, at, dst),
                2 => taps::<$nb, $s, 2>(pl, cg, x, w, at, dst),
                _ => taps::<$nb, $s, 1>(pl, cg, x, w, at, dst),
            }
        };
    }
    match (nb, pl.sw) {
        (2, 1) => by_width!(2, 1),
        (2, _) => by_width!(2, 2),
        (_, 1) => by_width!(1, 1),
        _ => by_width!(1, 2),
    }
}

/// The kernel rows inside the input for output row `r`: `k0..k1`, kernel row `k` reading
/// input row `top + k`.
#[inline(always)]
pub(super) fn kernel_rows(pl: &Plane, r: usize) -> (isize, usize, usize) {
    let top = (r * pl.sh) as isize - pl.pt as isize;
    let k0 = (-top).clamp(0, K as isize) as usize;
    let k1 = (pl.ih as isize - top).clamp(k0 as isize, K as isize) as usize;
    (top, k0, k1)
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
    let mut acc = [[_mm512_setzero_ps(); NP]; NB];
    for ci in 0..cg {
        for khi in k0..k1 {
            let row = x.as_ptr().add(ci * plane + (top + khi as isize) as usize * pl.iw + lo);
            let wk = w.as_ptr().add((ci * K + khi) * K * LANES);
            for kwi in 0..K {
                let mut wv = [_mm512_setzero_ps(); NB];
                for (n, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(wk.add(n * w_len + kwi * LANES));
                }
                for p in 0..NP {
                    let xv = _mm512_set1_ps(*row.add(p * S + kwi));
                    for n in 0..NB {
                        acc[n][p] = _mm512_fmadd_ps(wv[n], xv, acc[n][p]);
                    }
                }
            }
        }
    }
    for n in 0..NB {
        store(&acc[n], n, pl, at, dst);
    }
}

/// One column (`at.np == 1`) with some tap outside the input row: those multiply a 0, as
/// the blocked kernel's masked loads do.
#[target_feature(enable = "avx512f")]
unsafe fn border(pl: &Plane, cg: usize, nb: usize, x: &[f32], w: &[f32], at: &Chunk, dst: &Dst) {
    let w_len = cg * K * K * LANES;
    let plane = pl.ih * pl.iw;
    assert!(at.np == 1 && (1..=2).contains(&nb) && w.len() >= nb * w_len && x.len() >= cg * plane);
    let (top, k0, k1) = kernel_rows(pl, at.row);
    let lo = (at.col * pl.sw) as isize - pl.pl as isize;
    let mut acc = [[_mm512_setzero_ps(); 1]; 2];
    for ci in 0..cg {
        for khi in k0..k1 {
            let row = &x[ci * plane + (top + khi as isize) as usize * pl.iw..][..pl.iw];
            let wk = w.as_ptr().add((ci * K + khi) * K * LANES);
            for kwi in 0..K {
                let j = lo + kwi as isize;
                let v = if (0..pl.iw as isize).contains(&j) { row[j as usize] } else { 0.0 };
                let xv = _mm512_set1_ps(v);
                for (n, a) in acc.iter_mut().enumerate().take(nb) {
                    a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(wk.add(n * w_len + kwi * LANES)), xv, a[0]);
                }
            }
        }
    }
    for (n, a) in acc.iter().enumerate().take(nb) {
        store(a, n, pl, at, dst);
    }
}

/// Columns `at.col..at.col + NP` of vector `n`'s channels: column `p` of channel `l` is lane
/// `l` of `acc[p]`; transposed in registers, each channel's `NP` columns are one masked store.
#[inline(always)]
unsafe fn store<const NP: usize>(acc: &[__m512; NP], n: usize, pl: &Plane, at: &Chunk, dst: &Dst) {
    let mut rows = [_mm512_setzero_ps(); LANES];
    rows[..NP].copy_from_slice(acc);
    let cols = transpose(rows);
    let keep = ((1u32 << NP) - 1) as u16;
    for (l, v) in cols.iter().enumerate() {
        let start = at.base + (n * LANES + l) * at.plane + at.row * pl.ow + at.col;
        assert!(start + NP <= dst.len);
        // SAFETY: in bounds (just checked); this task owns the row.
        _mm512_mask_storeu_ps(dst.ptr.get().add(start), keep, *v);
    }
}

/// The 16×16 transpose of `r` (row `i` of the result is lane `i` of every `r[j]`): 32-bit
/// then 64-bit interleaves of row pairs, then two rounds of 128-bit lane shuffles. (Loops,
/// not `array::from_fn`: a closure does not inherit the caller's target features.)
#[inline(always)]
unsafe fn transpose(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4q + k] from t[4q + k / 2] and t[4q + 2 + k / 2]: 64-bit low halves for even k.
    let mut u = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        for h in 0..2 {
            let (a, b) = (_mm512_castps_pd(t[4 * q + h]), _mm512_castps_pd(t[4 * q + 2 + h]));
            u[4 * q + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            u[4 * q + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    }
    // v[8h + k] from u[8h + k % 4] and u[8h + 4 + k % 4]: even 128-bit lanes for k < 4.
    let mut v = [_mm512_setzero_ps(); 16];
    for h in 0..2 {
        for k in 0..4 {
            let (a, b) = (u[8 * h + k], u[8 * h + 4 + k]);
            v[8 * h + k] = _mm512_shuffle_f32x4::<0x88>(a, b);
            v[8 * h + 4 + k] = _mm512_shuffle_f32x4::<0xdd>(a, b);
        }
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        out[i] = _mm512_shuffle_f32x4::<0x88>(v[i], v[8 + i]);
        out[8 + i] = _mm512_shuffle_f32x4::<0xdd>(v[i], v[8 + i]);
    }
    out
}
