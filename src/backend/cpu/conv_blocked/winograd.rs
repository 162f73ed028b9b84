//! Winograd `F(2×2, 3×3)`: a 3×3, stride-1 convolution with 16 multiplies per 2×2 output
//! tile and input channel instead of 36 (2.25 times fewer), for the layers with enough
//! channels that the transforms cost little beside the products.
//!
//! With `d` a 4×4 input tile, `g` a 3×3 kernel and the matrices of Lavin and Gray (`Bᵀ`,
//! `G`, `Aᵀ` below, entries 0, ±1 and ½), an output tile is `Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d
//! B)] A`. The weight transform `U = G g Gᵀ` is done once per weight ([`Transformed`]); per
//! run, for each output tile row of each image (one task): the input transform `V = Bᵀ d B`
//! of the row's tiles for every input channel (`[16][C][tiles]`, in L2), then for each of
//! the 16 positions a product `M = U · V` (`[O] × [C]` by `[C] × [tiles]`, accumulators in
//! registers: `MR` output channels by `NT` tiles), and the output transform `Aᵀ M A` of each
//! channel's tiles into its two output rows, pooled when a `2 × k` max pooling follows (its
//! band of two rows is exactly a tile row), then the epilogue, as the other kernels do.
//!
//! **Numerics.** Another order and other roundings than the direct kernel's: each output is
//! a sum of the same products, reassociated through the transforms (which are exact in
//! binary apart from rounding), so its error is bounded by a small multiple of the direct
//! sum's, relative to `Σ |w·x|` (the GEMM-based algorithms' bound). Two cases leave that
//! bound and are refused, taking the direct kernel: non-finite values (a transform mixes an
//! `inf` of one input into its tile's neighbours, where `inf − inf` gives NaN, and a NaN
//! into outputs that never read it), refused for weights when they are transformed (as the
//! blocked kernel refuses them) and for inputs by a scan before each run; and magnitudes
//! whose transformed products could overflow where the direct sum does not (an input over
//! `f32::MAX / (324 · C · max |w|)`, also by the scan). The scan reads the input once (about
//! 1% of the convolution's time).
//!
//! **Where.** [`applies`]: 2-D, one group, a 3×3 kernel of stride and dilation 1, at least
//! [`MIN_CHANNELS`] input and output channels, and a pooling only of bands of two rows.
//! Measured on a 2-core Zen 4 EPYC (1 thread, AVX-512), the direct kernel at about 92% of
//! the FMA peak on a CRNN's layers: see the README's convolution section for the figures.
//!
//! One source, compiled per instruction set as the blocked kernel is: AVX-512 (8 channels ×
//! 32 tiles, 16 accumulators), AVX2 (4 × 16, 8) and portable (4 × 8; NEON on aarch64).

use std::ops::Range;

use rayon::prelude::*;

use super::super::conv::ConvGeom;
use super::super::gemm::{Epilogue, SendPtr};
use super::super::pool::RowPool;
use super::{row_epilogue, Plane};

/// Input and output channels the transform needs at least to pay for itself.
pub const MIN_CHANNELS: usize = 16;

/// Tiles a task takes at most (whole tile rows, at least one).
const TASK_TILES: usize = 64;

/// Output channels per group of the transformed weights' layout (every kernel's `MR` is a
/// multiple).
const GROUP: usize = 4;

/// Output channels the transformed weights are padded to a multiple of (the widest `MR`).
const PAD_O: usize = 8;

/// The weights transformed: `U[16][Op / GROUP][C][GROUP]`, `Op` the output channels padded
/// to [`PAD_O`] with zeros, so the `GROUP` channels one input channel multiplies are adjacent.
#[derive(Clone, Debug)]
pub struct Transformed {
    u: Vec<f32>,
    c: usize,
    o: usize,
    op: usize,
    /// `max |w|` over the weights.
    wmax: f32,
}

impl Transformed {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * self.u.len()
    }

    /// The weights `w [O, C, 3, 3]`, from the blocked packing `[O/CB][C][3][3][CB]`
    /// (`cb` = its channel block).
    pub(super) fn new(packed: &[f32], o: usize, c: usize, cb: usize) -> Transformed {
        let op = o.div_ceil(PAD_O) * PAD_O;
        let mut u = vec![0f32; 16 * op * c];
        let mut wmax = 0f32;
        for oc in 0..o {
            for ic in 0..c {
                let base = ((oc / cb) * c + ic) * 9 * cb + oc % cb;
                let g: [f32; 9] = std::array::from_fn(|k| packed[base + k * cb]);
                wmax = g.iter().fold(wmax, |m, v| m.max(v.abs()));
                // G g (4×3), then (G g) Gᵀ (4×4). G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1].
                let mut t = [[0f32; 3]; 4];
                for j in 0..3 {
                    let (a, b, d) = (g[j], g[3 + j], g[6 + j]);
                    t[0][j] = a;
                    t[1][j] = 0.5 * (a + b + d);
                    t[2][j] = 0.5 * (a - b + d);
                    t[3][j] = d;
                }
                for (i, r) in t.iter().enumerate() {
                    let (a, b, d) = (r[0], r[1], r[2]);
                    let row = [a, 0.5 * (a + b + d), 0.5 * (a - b + d), d];
                    for (j, v) in row.into_iter().enumerate() {
                        let k = 4 * i + j;
                        u[((k * (op / GROUP) + oc / GROUP) * c + ic) * GROUP + oc % GROUP] = v;
                    }
                }
            }
        }
        Transformed { u, c, o, op, wmax }
    }
}

/// Whether the Winograd kernel takes `g` (with `pool` after it, if any).
pub(super) fn applies(g: &ConvGeom, pl: &Plane, pool: Option<&RowPool>) -> bool {
    g.in_sp.len() == 2
        && g.groups == 1
        && (pl.kh, pl.kw, pl.sh, pl.sw, pl.dh, pl.dw) == (3, 3, 1, 1, 1, 1)
        && g.in_ch >= MIN_CHANNELS
        && g.out_ch >= MIN_CHANNELS
        && pl.oh > 0
        && pl.ow > 0
        && pool.is_none_or(|p| p.band() == 2 && p.in_cols() == pl.ow)
}

/// Whether every value of `x` is finite and at most `limit` in magnitude.
fn within(x: &[f32], limit: f32) -> bool {
    x.chunks(256).all(|ch| ch.iter().fold(true, |ok, v| ok & (v.abs() <= limit)))
}

/// `out = epi(pool(conv(x, w)))` by Winograd, with `u` from `w`; `false`, having written
/// nothing, where the input is outside what the transforms keep to the direct kernel's
/// error (see the module docs). Lengths were checked by the caller, and [`applies`] holds.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv(
    g: &ConvGeom,
    pl: &Plane,
    x: &[f32],
    u: &Transformed,
    out: &mut [f32],
    threads: usize,
    epi: &Epilogue<'_, f32>,
    pool: Option<&RowPool>,
) -> bool {
    debug_assert!(u.c == g.in_ch && u.o == g.out_ch);
    let limit = (f64::from(f32::MAX) / (324.0 * u.c as f64 * f64::from(u.wmax))).min(f64::from(f32::MAX)) as f32;
    if !within(x, limit) {
        return false;
    }
    let th = pl.oh.div_ceil(2);
    // Tile rows a task takes: about `TASK_TILES` tiles, rows each padded to a vector.
    let mut groups = th.div_ceil((TASK_TILES / pl.ow.div_ceil(2).max(1)).clamp(1, th));
    // With threads, as many tasks as they share evenly where the batch alone does not: two
    // of five rows rather than three of 4, 4 and 2 (YOLO's 20×28 layer on two threads).
    if threads > 1 && !(g.batch * groups).is_multiple_of(threads) {
        groups = (groups / threads * threads).max(threads).min(th);
    }
    let per = th.div_ceil(groups);
    let groups = th.div_ceil(per);
    let tasks = g.batch * groups;
    let job = Job { g, pl: *pl, x, u, out: SendPtr(out.as_mut_ptr()), out_len: out.len(), epi, pool };
    let run = |t: usize| {
        let (b, ty0) = (t / groups, (t % groups) * per);
        SCRATCH.with_borrow_mut(|s| job.dispatch(b, ty0..(ty0 + per).min(th), s))
    };
    if threads > 1 && tasks > 1 {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        (0..tasks).for_each(run);
    }
    true
}

thread_local! {
    /// A task's transformed inputs, products and rows.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What every task reads.
struct Job<'a> {
    g: &'a ConvGeom,
    pl: Plane,
    x: &'a [f32],
    u: &'a Transformed,
    out: SendPtr<f32>,
    out_len: usize,
    epi: &'a Epilogue<'a, f32>,
    pool: Option<&'a RowPool>,
}

impl Job<'_> {
    /// Tile rows `ty` of image `b` on the best path the ISA cap allows.
    fn dispatch(&self, b: usize, ty: Range<usize>, s: &mut Vec<f32>) {
        #[cfg(target_arch = "x86_64")]
        {
            if super::super::has_avx512() {
                // SAFETY: the CPU has every feature the variant is compiled for (checked).
                return unsafe { self.avx512(b, ty, s) };
            }
            if super::super::has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA (checked).
                return unsafe { self.avx2(b, ty, s) };
            }
        }
        // SAFETY: the portable vectors need no CPU feature.
        unsafe { self.tile_row::<Portable, 4>(b, ty, s) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    unsafe fn avx512(&self, b: usize, ty: Range<usize>, s: &mut Vec<f32>) {
        self.tile_row::<x86::Avx512, 8>(b, ty, s)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(&self, b: usize, ty: Range<usize>, s: &mut Vec<f32>) {
        self.tile_row::<x86::Avx2, 4>(b, ty, s)
    }

    /// Output rows `2 ty` and `2 ty + 1` (those that exist) for each `ty` of `tys`, of every
    /// output channel of image `b`: `MR` channels by two vectors of tiles a product step
    /// (one for an odd last), over the tile rows one after the other (each padded to a
    /// vector).
    ///
    /// # Safety
    /// The CPU has `L`'s features.
    #[inline(always)]
    unsafe fn tile_row<L: Lanes, const MR: usize>(&self, b: usize, tys: Range<usize>, s: &mut Vec<f32>) {
        let (pl, c, op) = (&self.pl, self.u.c, self.u.op);
        let n = L::N;
        let tw = pl.ow.div_ceil(2);
        // Tiles a row computes (whole vectors) and all rows; the even and odd input columns
        // of one more vector, for the tiles' right neighbours.
        let twp = tw.div_ceil(n) * n;
        let tl = tys.len() * twp;
        let eo = twp + n;
        // Scratch: V [16][C][tl], M [16][MR][tl], a padded input row [2 eo], its even and
        // odd columns [4][2][eo], the output rows [2][2 twp], a pooled row and the
        // pooling's own row.
        let (vl, ml, pr, el, rl) = (16 * c * tl, 16 * MR * tl, 2 * eo, 8 * eo, 4 * twp);
        let pool_len = self.pool.map_or(0, |p| p.out_cols() + p.in_cols());
        s.resize(vl + ml + pr + el + rl + pool_len, 0.0);
        let (v, rest) = s.split_at_mut(vl);
        let (m, rest) = rest.split_at_mut(ml);
        let (padded, rest) = rest.split_at_mut(pr);
        let (eo_buf, rest) = rest.split_at_mut(el);
        let (rows, pbuf) = rest.split_at_mut(rl);
        let plane = pl.ih * pl.iw;
        let xb = &self.x[b * c * plane..(b + 1) * c * plane];
        for (i, ty) in tys.clone().enumerate() {
            for ci in 0..c {
                let xc = &xb[ci * plane..(ci + 1) * plane];
                input_tiles::<L>(pl, xc, ty, twp, padded, eo_buf, &mut v[ci * tl + i * twp..], c * tl);
            }
        }
        let (vp, mp, up) = (v.as_ptr(), m.as_mut_ptr(), self.u.u.as_ptr());
        for ob in 0..op / MR {
            for k in 0..16 {
                let uk = up.add((k * (op / GROUP) + ob * MR / GROUP) * c * GROUP);
                let vk = vp.add(k * c * tl);
                // Two vectors of tiles at a time, one for an odd last.
                let mut t0 = 0;
                while t0 + 2 * n <= tl {
                    product::<L, MR, 2>(uk, vk, c, tl, t0, mp.add(k * MR * tl + t0));
                    t0 += 2 * n;
                }
                if t0 < tl {
                    product::<L, MR, 1>(uk, vk, c, tl, t0, mp.add(k * MR * tl + t0));
                }
            }
            for r in 0..MR.min(self.g.out_ch.saturating_sub(ob * MR)) {
                for (i, ty) in tys.clone().enumerate() {
                    self.output_rows::<L>(b, ty, ob * MR + r, &m[r * tl + i * twp..], MR * tl, rows, pbuf);
                }
                self.epilogue(b, &tys, ob * MR + r);
            }
        }
    }

    /// The output transform of channel `co`'s tiles (`m[k * kstride + t]`) into its output
    /// rows, pooled if a pooling follows.
    ///
    /// # Safety
    /// The CPU has `L`'s features.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn output_rows<L: Lanes>(
        &self,
        b: usize,
        ty: usize,
        co: usize,
        m: &[f32],
        kstride: usize,
        rows: &mut [f32],
        pbuf: &mut [f32],
    ) {
        let pl = &self.pl;
        let n = L::N;
        let twp = rows.len() / 4;
        assert!(m.len() >= 15 * kstride + twp);
        let (r0, r1) = rows.split_at_mut(2 * twp);
        let (mp, p0, p1) = (m.as_ptr(), r0.as_mut_ptr(), r1.as_mut_ptr());
        // A tile row past the pooled rows (an odd last convolution row) is not needed.
        if self.pool.is_some_and(|p| ty >= p.out_rows()) {
            return;
        }
        let fused = self.pool.and_then(|p| fused_pool(p, pl.ow));
        for t0 in (0..twp).step_by(n) {
            let v: [L::V; 16] = std::array::from_fn(|k| L::load(mp.add(k * kstride + t0)));
            // Aᵀ M: rows 0 + 1 + 2 and 1 − 2 − 3; then the same across the columns.
            let s0: [L::V; 4] = std::array::from_fn(|j| L::add(L::add(v[j], v[4 + j]), v[8 + j]));
            let s1: [L::V; 4] = std::array::from_fn(|j| L::sub(L::sub(v[4 + j], v[8 + j]), v[12 + j]));
            let even0 = L::add(L::add(s0[0], s0[1]), s0[2]);
            let odd0 = L::sub(L::sub(s0[1], s0[2]), s0[3]);
            let even1 = L::add(L::add(s1[0], s1[1]), s1[2]);
            let odd1 = L::sub(L::sub(s1[1], s1[2]), s1[3]);
            match fused {
                None => {
                    L::interleave(even0, odd0, p0.add(2 * t0));
                    L::interleave(even1, odd1, p1.add(2 * t0));
                }
                Some(Fused::Square) => L::store(p0.add(t0), L::max(L::max(even0, odd0), L::max(even1, odd1))),
                Some(Fused::Rows) => L::interleave(L::max(even0, even1), L::max(odd0, odd1), p0.add(2 * t0)),
            }
        }
        if let (Some(_), Some(pool)) = (fused, self.pool) {
            let len = pool.out_cols();
            let start = ((b * self.g.out_ch + co) * pool.out_rows() + ty) * len;
            assert!(start + len <= self.out_len);
            // SAFETY: in bounds (just checked); this task alone writes this row of `co`.
            let o = std::slice::from_raw_parts_mut(self.out.get().add(start), len);
            o.copy_from_slice(&rows[..len]);
            return;
        }
        let (ow, oh) = (pl.ow, pl.oh);
        let n_rows = 2.min(oh - 2 * ty);
        // Row 1 next to row 0, `ow` apart, as the pooling and the output want them.
        rows.copy_within(2 * twp..2 * twp + ow, ow);
        let (dst, start) = match self.pool {
            None => {
                let start = ((b * self.g.out_ch + co) * oh + 2 * ty) * ow;
                (&rows[..n_rows * ow], start)
            }
            Some(pool) => {
                let (pooled, tmp) = pbuf.split_at_mut(pool.out_cols());
                pool.rows(1, 1, &rows[..2 * ow], pooled, tmp);
                let start = ((b * self.g.out_ch + co) * pool.out_rows() + ty) * pool.out_cols();
                (&*pooled, start)
            }
        };
        assert!(start + dst.len() <= self.out_len);
        // SAFETY: in bounds (just checked); this task alone writes these rows of `co`.
        let o = std::slice::from_raw_parts_mut(self.out.get().add(start), dst.len());
        o.copy_from_slice(dst);
    }

    /// The epilogue on channel `co`'s output rows of tile rows `tys` of image `b`: one
    /// contiguous run, still in cache, long enough for whole vectors.
    fn epilogue(&self, b: usize, tys: &Range<usize>, co: usize) {
        let (rows, cols, first, end) = match self.pool {
            None => (self.pl.oh, self.pl.ow, 2 * tys.start, (2 * tys.end).min(self.pl.oh)),
            Some(p) => (p.out_rows(), p.out_cols(), tys.start, tys.end.min(p.out_rows())),
        };
        if self.epi.is_empty() || end <= first {
            return;
        }
        let start = ((b * self.g.out_ch + co) * rows + first) * cols;
        let len = (end - first) * cols;
        assert!(start + len <= self.out_len);
        // SAFETY: in bounds (just checked); this task alone writes these rows of `co`, and
        // has written them.
        let o = unsafe { std::slice::from_raw_parts_mut(self.out.get().add(start), len) };
        row_epilogue(o, co, start, self.epi);
    }
}

/// A pooling the output transform does in registers: `2×2` of stride 2 (one value per
/// tile), or `2×1` of stride `(2, 1)` (one per column of a tile).
#[derive(Clone, Copy)]
enum Fused {
    Square,
    Rows,
}

/// The pooling `pool` (bands of two rows, over rows of `ow` columns) as a [`Fused`] one.
fn fused_pool(pool: &RowPool, ow: usize) -> Option<Fused> {
    match pool.columns() {
        (2, 2, 0, 1) if pool.out_cols() == ow / 2 => Some(Fused::Square),
        (1, 1, 0, 1) if pool.out_cols() == ow => Some(Fused::Rows),
        _ => None,
    }
}

/// The input transform of tile row `ty` of one channel `x [ih, iw]`: `V[k][t]` at
/// `v[k * kstride + t]` for `t < twp` (tiles past the row's read zeros or the row's last
/// columns; their outputs are dropped); `twp` is a multiple of `N`. `padded` holds `2 (twp + N)` values, `eo` 8 times
/// `twp + N`.
///
/// # Safety
/// The CPU has `L`'s features; `v` holds `15 kstride + twp` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn input_tiles<L: Lanes>(
    pl: &Plane,
    x: &[f32],
    ty: usize,
    twp: usize,
    padded: &mut [f32],
    eo: &mut [f32],
    v: &mut [f32],
    kstride: usize,
) {
    let n = L::N;
    let len = twp + n;
    assert!(padded.len() == 2 * len && eo.len() == 8 * len && v.len() >= 15 * kstride + twp);
    // Input row `r` of the tile row is x[2 ty + r − pt], padded: column `j` is its
    // column `j − pl`; `eo[(2r + e) len + t]` is padded column `2t + e`.
    for r in 0..4 {
        let (even, odd) = eo[2 * r * len..(2 * r + 2) * len].split_at_mut(len);
        let Some(iy) = (2 * ty + r).checked_sub(pl.pt).filter(|&i| i < pl.ih) else {
            even.fill(0.0);
            odd.fill(0.0);
            continue;
        };
        let row = &x[iy * pl.iw..(iy + 1) * pl.iw];
        let (ep, op) = (even.as_mut_ptr(), odd.as_mut_ptr());
        // Padded columns 0..2 len are the row's −pl..: read in place where the row holds all
        // of them, else from a copy with the padding's zeros.
        let src = if pl.pl == 0 && row.len() >= 2 * len {
            row.as_ptr()
        } else {
            let lo = pl.pl.min(padded.len());
            let n_in = row.len().min(padded.len() - lo);
            padded[..lo].fill(0.0);
            padded[lo..lo + n_in].copy_from_slice(&row[..n_in]);
            padded[lo + n_in..].fill(0.0);
            padded.as_ptr()
        };
        for t0 in (0..len).step_by(n) {
            let (e, o) = L::deinterleave(src.add(2 * t0));
            L::store(ep.add(t0), e);
            L::store(op.add(t0), o);
        }
    }
    // Bᵀ d down the rows (r0 − r2, r1 + r2, r2 − r1, r1 − r3), for the even and the odd
    // columns, then across: V[4i + j] from columns 2t..2t + 3 = (e[t], o[t], e[t+1], o[t+1]).
    let (ep, vp) = (eo.as_ptr(), v.as_mut_ptr());
    for t0 in (0..twp).step_by(n) {
        // [row][even, odd][at t, at t + 1]
        let d: [[[L::V; 2]; 2]; 4] = std::array::from_fn(|r| {
            std::array::from_fn(|e| std::array::from_fn(|s| L::load(ep.add((2 * r + e) * len + t0 + s))))
        });
        for i in 0..4 {
            let comb = |e: usize, s: usize| {
                let (a, b, c, dd) = (d[0][e][s], d[1][e][s], d[2][e][s], d[3][e][s]);
                match i {
                    0 => L::sub(a, c),
                    1 => L::add(b, c),
                    2 => L::sub(c, b),
                    _ => L::sub(b, dd),
                }
            };
            let (e0, o0, e1, o1) = (comb(0, 0), comb(1, 0), comb(0, 1), comb(1, 1));
            L::store(vp.add(4 * i * kstride + t0), L::sub(e0, e1));
            L::store(vp.add((4 * i + 1) * kstride + t0), L::add(o0, e1));
            L::store(vp.add((4 * i + 2) * kstride + t0), L::sub(e1, o0));
            L::store(vp.add((4 * i + 3) * kstride + t0), L::sub(o0, o1));
        }
    }
}

/// `M[r][t0 + j] = Σ_c U[r][c] V[c][t0 + j]` for `MR` output channels (`uk`:
/// `[MR/GROUP][C][GROUP]`) by `NV` vectors of tiles (`vk`: `[C][twp]`), one fused
/// multiply-add per term in order of `c`, stored at `m + r twp + j`.
///
/// # Safety
/// The CPU has `L`'s features; the pointers hold what is described.
#[inline(always)]
unsafe fn product<L: Lanes, const MR: usize, const NV: usize>(
    uk: *const f32,
    vk: *const f32,
    c: usize,
    twp: usize,
    t0: usize,
    m: *mut f32,
) {
    let mut acc = [[L::zero(); NV]; MR];
    for ci in 0..c {
        let v: [L::V; NV] = std::array::from_fn(|j| L::load(vk.add(ci * twp + t0 + j * L::N)));
        for (r, a) in acc.iter_mut().enumerate() {
            let w = L::splat(*uk.add(((r / GROUP) * c + ci) * GROUP + r % GROUP));
            for j in 0..NV {
                a[j] = L::fma(w, v[j], a[j]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (j, &aj) in a.iter().enumerate() {
            L::store(m.add(r * twp + j * L::N), aj);
        }
    }
}

/// The vector operations the kernel is written in, per instruction set.
trait Lanes {
    /// Lanes.
    const N: usize;
    type V: Copy;
    /// # Safety
    /// The CPU has the set's features (for every method), `p` holds `N` values.
    unsafe fn load(p: *const f32) -> Self::V;
    /// # Safety
    /// As [`Lanes::load`], for writes.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn zero() -> Self::V;
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn splat(x: f32) -> Self::V;
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// `a · b + c`, fused where the set has it.
    ///
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The larger of each pair, as `max_pool2d` takes it (NaN as `f32::max` would not:
    /// the inputs here are finite).
    ///
    /// # Safety
    /// The CPU has the set's features.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// The even and the odd values of the `2N` at `p`.
    ///
    /// # Safety
    /// The CPU has the set's features; `p` holds `2N` values.
    unsafe fn deinterleave(p: *const f32) -> (Self::V, Self::V);
    /// `p[2i] = a[i]`, `p[2i + 1] = b[i]`.
    ///
    /// # Safety
    /// The CPU has the set's features; `p` holds `2N` values.
    unsafe fn interleave(a: Self::V, b: Self::V, p: *mut f32);
}

/// Plain arrays of 4 (SSE or NEON where LLVM vectorizes them), fused multiply-adds where the
/// target has them.
struct Portable;

impl Lanes for Portable {
    const N: usize = 4;
    type V = [f32; 4];
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; 4] {
        p.cast::<[f32; 4]>().read_unaligned()
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; 4]) {
        p.cast::<[f32; 4]>().write_unaligned(v)
    }
    #[inline(always)]
    unsafe fn zero() -> [f32; 4] {
        [0.0; 4]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; 4] {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn add(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|i| a[i] + b[i])
    }
    #[inline(always)]
    unsafe fn sub(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|i| a[i] - b[i])
    }
    #[inline(always)]
    unsafe fn fma(a: [f32; 4], b: [f32; 4], c: [f32; 4]) -> [f32; 4] {
        if cfg!(any(target_arch = "aarch64", target_feature = "fma")) {
            std::array::from_fn(|i| a[i].mul_add(b[i], c[i]))
        } else {
            std::array::from_fn(|i| a[i] * b[i] + c[i])
        }
    }
    #[inline(always)]
    unsafe fn max(a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|i| if a[i] >= b[i] { a[i] } else { b[i] })
    }
    #[inline(always)]
    unsafe fn deinterleave(p: *const f32) -> ([f32; 4], [f32; 4]) {
        let x = p.cast::<[f32; 8]>().read_unaligned();
        ([x[0], x[2], x[4], x[6]], [x[1], x[3], x[5], x[7]])
    }
    #[inline(always)]
    unsafe fn interleave(a: [f32; 4], b: [f32; 4], p: *mut f32) {
        p.cast::<[f32; 8]>().write_unaligned([a[0], b[0], a[1], b[1], a[2], b[2], a[3], b[3]])
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Lanes;

    /// 512-bit vectors.
    pub(super) struct Avx512;

    impl Lanes for Avx512 {
        const N: usize = 16;
        type V = __m512;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m512 {
            _mm512_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn add(a: __m512, b: __m512) -> __m512 {
            _mm512_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: __m512, b: __m512) -> __m512 {
            _mm512_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn max(a: __m512, b: __m512) -> __m512 {
            _mm512_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn deinterleave(p: *const f32) -> (__m512, __m512) {
            let (lo, hi) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
            let ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            (_mm512_permutex2var_ps(lo, ev, hi), _mm512_permutex2var_ps(lo, od, hi))
        }
        #[inline(always)]
        unsafe fn interleave(a: __m512, b: __m512, p: *mut f32) {
            let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            let hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, lo, b));
            _mm512_storeu_ps(p.add(16), _mm512_permutex2var_ps(a, hi, b));
        }
    }

    /// 256-bit vectors.
    pub(super) struct Avx2;

    impl Lanes for Avx2 {
        const N: usize = 8;
        type V = __m256;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: __m256, b: __m256) -> __m256 {
            _mm256_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn max(a: __m256, b: __m256) -> __m256 {
            _mm256_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn deinterleave(p: *const f32) -> (__m256, __m256) {
            // Evens to the low half of each vector, odds to the high, then the halves paired.
            let idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
            let a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p), idx);
            let b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p.add(8)), idx);
            (_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        }
        #[inline(always)]
        unsafe fn interleave(a: __m256, b: __m256, p: *mut f32) {
            let (lo, hi) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            _mm256_storeu_ps(p, _mm256_permute2f128_ps::<0x20>(lo, hi));
            _mm256_storeu_ps(p.add(8), _mm256_permute2f128_ps::<0x31>(lo, hi));
        }
    }
}
