//! The channel-blocked direct convolution: f32, one or two spatial dims, any stride,
//! dilation, padding and groups.
//!
//! Each step computes a block of [`CB`] output channels by `W` consecutive outputs of one
//! output row in registers: for every input channel and kernel position it loads the `W`
//! inputs the block reads (contiguous for stride 1; every second one, deinterleaved, for
//! stride 2, where one pair of loads per vector serves every kernel column of a row up to 7
//! wide: the evens and odds, moved down a lane per two columns) once and multiplies them by
//! the `CB` weights of that tap, so one load feeds `CB` fused multiply-adds per lane. The weights are packed as
//! `[group][channel block][C/g][kh][kw][CB]` (zeros past the last channel), so a tap's `CB`
//! weights are adjacent: once, when a plan is built, for a constant weight
//! ([`PackedWeights`]), else on each call. That is what a small-channel convolution (a detector's stem, `C`
//! or `O` of 3 to 64) needs: an im2col GEMM there has an `M` (output channels) too small for
//! the GEMM's register tile, and pays for the copy.
//!
//! On x86 a row runs in blocks of up to 48 columns (AVX-512) or 16 (AVX2) whose loads are
//! masked to the input row, so border columns cost nothing extra; for the common 3-wide
//! stride-1 kernel, the kernel columns are unrolled and only a block's first and last
//! vector are masked, their masks held in registers (a block whose middle vector reaches
//! into padding wider than a vector masks every load). The portable path runs the columns
//! where every tap of the kernel row falls inside the input in blocks of 4 (a last short
//! block overlaps the one before it and recomputes the same values) and the rest (the
//! border columns of a padded convolution, and rows narrower than 4) one column at a time
//! with bounds checks. Kernel rows that fall in the padding are skipped: with finite
//! weights that changes no sum, so [`applies`] refuses non-finite weights (`0 * inf` is NaN
//! in the op), which take the other algorithms.
//!
//! One source, compiled three times: with AVX-512 (up to 24 512-bit accumulators), with
//! AVX2 and FMA, and portable (NEON on aarch64, where LLVM vectorizes the same loops). The
//! products are fused multiply-adds where the target has them; the sum runs
//! over input channels, then kernel rows, then kernel columns: another order than the
//! interpreter's, within the op's tolerance as the GEMM-based algorithms are.

use rayon::prelude::*;
use smallvec::SmallVec;

use super::activation::Activation;
use super::conv::ConvGeom;
use super::gemm::{Epilogue, SendPtr};

/// Output channels per block.
pub const CB: usize = 8;

/// A geometry seen as 2-D (a 1-D convolution has one input row).
#[derive(Clone, Copy, Debug)]
struct Plane {
    ih: usize,
    iw: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    oh: usize,
    ow: usize,
}

impl Plane {
    fn of(g: &ConvGeom) -> Option<Plane> {
        match g.in_sp.len() {
            1 => Some(Plane {
                ih: 1,
                iw: g.in_sp[0],
                kh: 1,
                kw: g.k_sp[0],
                sh: 1,
                sw: g.stride[0],
                dh: 1,
                dw: g.dilation[0],
                pt: 0,
                pl: g.pad_b[0],
                oh: 1,
                ow: g.out_sp[0],
            }),
            2 => Some(Plane {
                ih: g.in_sp[0],
                iw: g.in_sp[1],
                kh: g.k_sp[0],
                kw: g.k_sp[1],
                sh: g.stride[0],
                sw: g.stride[1],
                dh: g.dilation[0],
                dw: g.dilation[1],
                pt: g.pad_b[0],
                pl: g.pad_b[1],
                oh: g.out_sp[0],
                ow: g.out_sp[1],
            }),
            _ => None,
        }
    }

    /// Whether output row `r` reads every kernel row inside the input.
    fn full_row(&self, r: usize) -> bool {
        (r * self.sh).checked_sub(self.pt).is_some_and(|i| i + (self.kh - 1) * self.dh < self.ih)
    }

    /// Output columns `lo..hi` whose every kernel-row tap reads inside the input row.
    fn interior(&self) -> (usize, usize) {
        interior_columns(self.iw, self.pl, self.kw, self.sw, self.dw, self.ow)
    }
}

/// Of `ow` windows of `kw` taps (dilation `dw`, stride `sw`) over a row of `iw` with `pl`
/// padding on the left, the columns `lo..hi` whose every tap lies inside the row (`lo == hi`
/// when none does). Shared with the pooling kernel (`pool.rs`).
pub(crate) fn interior_columns(iw: usize, pl: usize, kw: usize, sw: usize, dw: usize, ow: usize) -> (usize, usize) {
    let lo = pl.div_ceil(sw).min(ow);
    let reach = (kw - 1) * dw;
    let hi = match (iw + pl).checked_sub(reach + 1) {
        Some(last) => (last / sw + 1).min(ow),
        None => 0,
    };
    (lo, hi.max(lo))
}

/// Kernel columns at most (a block keeps its per-column load masks in a table).
pub const MAX_KW: usize = 16;

/// Whether the blocked kernel computes this convolution: one or two spatial dims, kernel
/// rows of at most [`MAX_KW`] columns, and finite weights (see the module docs).
pub fn applies(g: &ConvGeom, w: &[f32]) -> bool {
    Plane::of(g).is_some_and(|p| p.kw <= MAX_KW) && w.iter().all(|v| v.is_finite())
}

/// Elements of the packed weights.
pub fn packed_len(g: &ConvGeom) -> usize {
    let og = g.out_ch / g.groups;
    g.groups * og.div_ceil(CB) * CB * (g.in_ch / g.groups) * g.kernel_positions()
}

/// Packs `w [O, C/g, k...]` as `[group][block][C/g][k...][CB]` into `wp` (at least
/// [`packed_len`] long).
pub fn pack(g: &ConvGeom, w: &[f32], wp: &mut [f32]) {
    pack_as(g.groups, g.out_ch / g.groups, g.in_ch / g.groups, g.kernel_positions(), w, wp)
}

/// [`pack`] for `groups` groups of `og` output channels, `cg` input channels and `kpos`
/// kernel positions.
fn pack_as(groups: usize, og: usize, cg: usize, kpos: usize, w: &[f32], wp: &mut [f32]) {
    let blocks = og.div_ceil(CB);
    let mut i = 0;
    for grp in 0..groups {
        for blk in 0..blocks {
            for ci in 0..cg {
                for k in 0..kpos {
                    for c in 0..CB {
                        let co = blk * CB + c;
                        wp[i] = if co < og { w[((grp * og + co) * cg + ci) * kpos + k] } else { 0.0 };
                        i += 1;
                    }
                }
            }
        }
    }
}

/// A constant weight packed once, when a plan is built, for every call of a convolution
/// with its shape and groups (instead of [`pack`] on each call: the finiteness check and the
/// copy cost about 5% of the blocked kernel's time on a CRNN's convolutions).
#[derive(Clone, Debug)]
pub struct PackedWeights {
    groups: usize,
    out_ch: usize,
    cg: usize,
    k_sp: SmallVec<[usize; 2]>,
    data: Vec<f32>,
}

impl PackedWeights {
    /// `w` of shape `w_shape` (`[O, C/g, k...]`, one or two kernel dims) packed for `groups`
    /// groups; `None` where the blocked kernel would not take it (see [`applies`]), or the
    /// shape does not describe `w`.
    pub fn new(w_shape: &[usize], groups: usize, w: &[f32]) -> Option<PackedWeights> {
        let (&out_ch, rest) = w_shape.split_first()?;
        let (&cg, k_sp) = rest.split_first()?;
        let kpos = k_sp.iter().try_fold(1usize, |a, &k| a.checked_mul(k))?;
        let fits = matches!(k_sp.len(), 1 | 2)
            && groups > 0
            && out_ch.is_multiple_of(groups)
            && k_sp.last().is_some_and(|&kw| kw <= MAX_KW)
            && out_ch.checked_mul(cg)?.checked_mul(kpos)? == w.len()
            && w.iter().all(|v| v.is_finite());
        if !fits {
            return None;
        }
        let og = out_ch / groups;
        let mut data = vec![0.0; groups * og.div_ceil(CB) * CB * cg * kpos];
        pack_as(groups, og, cg, kpos, w, &mut data);
        Some(PackedWeights { groups, out_ch, cg, k_sp: k_sp.iter().copied().collect(), data })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * self.data.len()
    }

    /// `out = conv(x, w)` by the blocked kernel with these weights, when `g` is the geometry
    /// they were packed for and the blocked kernel is its algorithm; `Ok(false)`, having
    /// done nothing, otherwise. Lengths are checked as `conv::conv` checks them.
    pub fn conv(
        &self,
        g: &ConvGeom,
        x: &[f32],
        out: &mut [f32],
        threads: usize,
    ) -> Result<bool, super::gemm::KernelError> {
        let fits = g.algorithm() == super::conv::ConvAlgo::Blocked
            && g.groups == self.groups
            && g.out_ch == self.out_ch
            && g.in_ch / g.groups == self.cg
            && g.k_sp[..] == self.k_sp[..]
            && self.data.len() == packed_len(g);
        if !fits {
            return Ok(false);
        }
        g.check_lens(x.len(), out.len())?;
        if !out.is_empty() {
            conv_blocked(g, x, &self.data, out, threads, &Epilogue::none());
        }
        Ok(true)
    }
}

/// `out = epilogue(conv(x, w))` with `wp` the weights [`pack`]ed. The caller checked the
/// lengths against `g` and that [`applies`] holds; `epi.hook` must be `None`.
pub fn conv_blocked(g: &ConvGeom, x: &[f32], wp: &[f32], out: &mut [f32], threads: usize, epi: &Epilogue<'_, f32>) {
    let Some(pl) = Plane::of(g) else { return };
    let (og, cg) = (g.out_ch / g.groups, g.in_ch / g.groups);
    let blocks = og.div_ceil(CB);
    let units = g.batch * g.groups * blocks;
    // Rows per task: enough tasks for the threads to share (4 per thread), whole rows.
    let threads = threads.max(1);
    let chunks = if threads == 1 { 1 } else { (4 * threads).div_ceil(units).clamp(1, pl.oh.max(1)) };
    let rows_per = pl.oh.div_ceil(chunks).max(1);
    let chunks = pl.oh.div_ceil(rows_per).max(1);
    let op = SendPtr(out.as_mut_ptr());
    let out_len = out.len();
    let task = |t: usize| {
        let (unit, chunk) = (t / chunks, t % chunks);
        let (b, rest) = (unit / (g.groups * blocks), unit % (g.groups * blocks));
        let (grp, blk) = (rest / blocks, rest % blocks);
        let rows = chunk * rows_per..((chunk + 1) * rows_per).min(pl.oh);
        let x_off = (b * g.in_ch + grp * cg) * pl.ih * pl.iw;
        let w_off = (grp * blocks + blk) * cg * pl.kh * pl.kw * CB;
        let co0 = grp * og + blk * CB;
        let n_ch = CB.min(og - blk * CB);
        let x = &x[x_off..x_off + cg * pl.ih * pl.iw];
        let job = Job { pl, cg, x, wp: &wp[w_off..w_off + cg * pl.kh * pl.kw * CB] };
        let mut r = rows.start;
        while r < rows.end {
            // Two rows at once where both read every kernel row (the short-row kernel shares
            // each weight between them).
            let n = if r + 1 < rows.end && pl.full_row(r) && pl.full_row(r + 1) { 2 } else { 1 };
            let base = (b * g.out_ch + co0) * pl.oh * pl.ow + r * pl.ow;
            let plane = pl.oh * pl.ow;
            let mut rows_out = RowOut { out: op, out_len, base, plane, ow: pl.ow, rows: n, n_ch };
            run_rows(&job, r, &mut rows_out);
            for c in 0..n_ch {
                let start = base + c * plane;
                assert!(start + n * pl.ow <= out_len);
                // SAFETY: in bounds (just checked); rows of distinct tasks are disjoint (each
                // task owns its rows of its channel block).
                let rows = unsafe { std::slice::from_raw_parts_mut(op.get().add(start), n * pl.ow) };
                row_epilogue(rows, co0 + c, start, epi);
            }
            r += n;
        }
    };
    let tasks = units * chunks;
    if threads > 1 && tasks > 1 {
        (0..tasks).into_par_iter().with_max_len(1).for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

fn row_epilogue(rows: &mut [f32], co: usize, start: usize, epi: &Epilogue<'_, f32>) {
    if let Some(bias) = epi.bias {
        let b = bias[co];
        rows.iter_mut().for_each(|v| *v += b);
    }
    if !matches!(epi.activation, Activation::None) {
        super::activation::apply_f32(&epi.activation, rows);
    }
    if let Some(res) = epi.residual {
        let n = rows.len();
        rows.iter_mut().zip(&res[start..start + n]).for_each(|(v, r)| *v += r);
    }
}

/// What every row of one task reads.
struct Job<'a> {
    pl: Plane,
    cg: usize,
    /// The task's input channels, `[C/g, ih, iw]`.
    x: &'a [f32],
    /// The channel block's packed weights, `[C/g, kh, kw, CB]`.
    wp: &'a [f32],
}

/// Where `rows` (1 or 2) consecutive output rows of a channel block go: row `k` of channel
/// `c` starts at `base + c * plane + k * ow`.
#[derive(Clone, Copy)]
struct RowOut {
    out: SendPtr<f32>,
    out_len: usize,
    base: usize,
    plane: usize,
    ow: usize,
    rows: usize,
    n_ch: usize,
}

impl RowOut {
    /// Columns `col..col + W` of row `k` of every channel.
    #[inline(always)]
    fn store<const W: usize>(&mut self, k: usize, col: usize, acc: &[[f32; W]; CB]) {
        for (c, a) in acc.iter().enumerate().take(self.n_ch) {
            let dst = self.row_ptr(c, k, col, W);
            // SAFETY: in bounds (`row_ptr` checks); this task owns the row.
            unsafe { std::slice::from_raw_parts_mut(dst, W) }.copy_from_slice(a);
        }
    }

    /// Row `k` alone.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn at(&self, k: usize) -> RowOut {
        assert!(k < self.rows);
        RowOut { base: self.base + k * self.ow, rows: 1, ..*self }
    }

    /// Where columns `col..col + n` of row `k` of channel `c` start (checked in bounds).
    #[inline(always)]
    fn row_ptr(&mut self, c: usize, k: usize, col: usize, n: usize) -> *mut f32 {
        let start = self.base + c * self.plane + k * self.ow + col;
        assert!(c < self.n_ch && k < self.rows && col + n <= self.ow && start + n <= self.out_len);
        self.out.get().wrapping_add(start)
    }
}

/// Rows `r..r + out.rows` of a channel block.
fn run_rows(job: &Job<'_>, r: usize, out: &mut RowOut) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::has_avx512() {
            // SAFETY: the CPU has every feature the variant is compiled for.
            return unsafe { x86::rows_avx512(job, r, out) };
        }
        if super::has_avx2() {
            for k in 0..out.rows {
                // SAFETY: the CPU has AVX2 and FMA (checked just above).
                unsafe { x86::row_avx2(job, &row_taps(&job.pl, r + k), k, out) };
            }
            return;
        }
    }
    for k in 0..out.rows {
        row_generic(job, &row_taps(&job.pl, r + k), k, out);
    }
}

/// Kernel rows inside the input for output row `r`, with the input row each reads.
fn row_taps(pl: &Plane, r: usize) -> SmallVec<[(usize, usize); 16]> {
    let mut taps = SmallVec::new();
    for khi in 0..pl.kh {
        let i = (r * pl.sh + khi * pl.dh).checked_sub(pl.pt);
        if let Some(i) = i.filter(|&i| i < pl.ih) {
            taps.push((khi, i));
        }
    }
    taps
}

/// The border columns of row `k` (outside `lo..hi`, or every column when that is empty),
/// one at a time.
#[inline(always)]
fn borders<const FMA: bool>(job: &Job<'_>, taps: &[(usize, usize)], k: usize, lo: usize, hi: usize, out: &mut RowOut) {
    let ow = job.pl.ow;
    let (lo, hi) = if hi > lo { (lo, hi) } else { (ow, ow) };
    for c in (0..lo.min(ow)).chain(hi..ow) {
        let acc = column::<FMA>(job, taps, c);
        out.store::<1>(k, c, &acc.map(|v| [v]));
    }
}

/// The portable row (NEON on aarch64, where LLVM vectorizes the blocks of 4).
fn row_generic(job: &Job<'_>, taps: &[(usize, usize)], k: usize, out: &mut RowOut) {
    let (lo, hi) = job.pl.interior();
    let fma = cfg!(any(target_arch = "aarch64", target_feature = "fma"));
    let hi = if hi - lo >= 4 { hi } else { lo };
    let mut col = lo;
    while col < hi {
        let c = col.min(hi - 4);
        let acc = if fma { block_any::<4, true>(job, taps, c) } else { block_any::<4, false>(job, taps, c) };
        out.store::<4>(k, c, &acc);
        col += 4;
    }
    if fma {
        borders::<true>(job, taps, k, lo, hi, out)
    } else {
        borders::<false>(job, taps, k, lo, hi, out)
    }
}

#[inline(always)]
fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// [`block`] for the stride at hand (1 and 2 specialized).
#[inline(always)]
fn block_any<const W: usize, const FMA: bool>(job: &Job<'_>, taps: &[(usize, usize)], col: usize) -> [[f32; W]; CB] {
    match job.pl.sw {
        1 => block::<W, FMA, 1>(job, taps, col),
        2 => block::<W, FMA, 2>(job, taps, col),
        _ => block::<W, FMA, 0>(job, taps, col),
    }
}

/// Output columns `col..col + W` (inside the interior) of every channel of the block.
/// `S` is the column stride (0: read `job.pl.sw`).
#[inline(always)]
fn block<const W: usize, const FMA: bool, const S: usize>(
    job: &Job<'_>,
    taps: &[(usize, usize)],
    col: usize,
) -> [[f32; W]; CB] {
    let pl = &job.pl;
    let sw = if S == 0 { pl.sw } else { S };
    let plane = pl.ih * pl.iw;
    let mut acc = [[0f32; W]; CB];
    for ci in 0..job.cg {
        let xc = &job.x[ci * plane..(ci + 1) * plane];
        for &(khi, i) in taps {
            let row = &xc[i * pl.iw..(i + 1) * pl.iw];
            let wk = &job.wp[((ci * pl.kh + khi) * pl.kw) * CB..((ci * pl.kh + khi + 1) * pl.kw) * CB];
            for kwi in 0..pl.kw {
                // Inside the row for every column of the block (the interior's definition).
                let start = col * sw + kwi * pl.dw - pl.pl;
                let xs = &row[start..start + (W - 1) * sw + 1];
                let xv: [f32; W] = std::array::from_fn(|l| xs[l * sw]);
                let wv: [f32; CB] = std::array::from_fn(|c| wk[kwi * CB + c]);
                for c in 0..CB {
                    for l in 0..W {
                        acc[c][l] = fma::<FMA>(wv[c], xv[l], acc[c][l]);
                    }
                }
            }
        }
    }
    acc
}

/// One output column of every channel of the block, with bounds checks (border columns).
#[inline(always)]
fn column<const FMA: bool>(job: &Job<'_>, taps: &[(usize, usize)], col: usize) -> [f32; CB] {
    let pl = &job.pl;
    let plane = pl.ih * pl.iw;
    let mut acc = [0f32; CB];
    for ci in 0..job.cg {
        for &(khi, i) in taps {
            let row = &job.x[ci * plane + i * pl.iw..ci * plane + (i + 1) * pl.iw];
            for kwi in 0..pl.kw {
                let Some(j) = (col * pl.sw + kwi * pl.dw).checked_sub(pl.pl).filter(|&j| j < pl.iw) else {
                    continue;
                };
                let base = ((ci * pl.kh + khi) * pl.kw + kwi) * CB;
                let wv = &job.wp[base..base + CB];
                for c in 0..CB {
                    acc[c] = fma::<FMA>(wv[c], row[j], acc[c]);
                }
            }
        }
    }
    acc
}

/// The x86 rows: AVX-512 blocks of up to 48 columns (three 512-bit accumulators per channel:
/// 24 registers), or of two rows of up to 16; AVX2 blocks of 16 columns of 4 channels. A
/// block's last vector is masked to the columns it has, and a block over border columns
/// masks each tap's load to the lanes inside the input (masked-off lanes are not read), so
/// padding costs nothing. Stride 2 deinterleaves two loads; other strides gather.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::low_bits as mask32;
    use super::{row_taps, Job, RowOut, CB, MAX_KW};

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
            block512::<1, 2, S>(job, [&taps[0], &taps[1]], 0, ow, out);
            return;
        }
        for (k, t) in taps.iter().enumerate().take(out.rows) {
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
    fn block_plan(ow: usize) -> impl Iterator<Item = usize> {
        let n = ow.div_ceil(16);
        let (threes, rest): (usize, &[usize]) = match n % 3 {
            0 => (n / 3, &[]),
            2 => (n / 3, &[2]),
            _ if n > 3 => (n / 3 - 1, &[2, 2]),
            _ => (0, &[1]),
        };
        std::iter::repeat_n(3, threes).chain(rest.iter().copied())
    }

    /// Bits `e` of `0..span` whose input element `s0 + e` lies in `0..iw`.
    #[inline(always)]
    fn inside(s0: isize, span: usize, iw: usize) -> u32 {
        let a = (-s0).clamp(0, span as isize) as usize;
        let b = (iw as isize - s0).clamp(0, span as isize) as usize;
        mask32(b) & !mask32(a)
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
        taps: [&[(usize, usize)]; 2],
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
        // Whether vector `v` of a stride-1 block is full and every kernel column's load of it
        // lies inside the row (`dense` masks only the first and last vector: a middle one
        // must be whole, which padding wider than a vector can prevent).
        let whole = |v: usize| {
            let s = s0 + 16 * v as isize;
            cols(v) == 16 && s >= 0 && s + (16 + kw - 1) as isize <= iw as isize
        };
        if S == 2 && pl.dw == 1 && kw <= PAIRED_KW {
            paired::<NV, R>(job, taps, s0, kw, w, &mut acc);
        } else if S == 1 && pl.dw == 1 && kw == DENSE_KW && (1..NV.saturating_sub(1)).all(whole) {
            let edge = u8::from(!whole(0)) | (u8::from(NV > 1 && !whole(NV - 1)) << 1);
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
                for (t, &(khi, _)) in taps[0].iter().enumerate() {
                    let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB);
                    let rows: [*const f32; R] =
                        std::array::from_fn(|k| job.x.as_ptr().add(ci * plane + taps[k][t].1 * iw));
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
        taps: [&[(usize, usize)]; 2],
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
        for ci in 0..job.cg {
            for (t, &(khi, _)) in taps[0].iter().enumerate() {
                let wk = job.wp.as_ptr().add((ci * pl.kh + khi) * KW * CB);
                let rows: [*const f32; R] =
                    std::array::from_fn(|k| job.x.as_ptr().add(ci * plane + taps[k][t].1 * iw).wrapping_offset(s0));
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
        taps: [&[(usize, usize)]; 2],
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
            for (t, &(khi, _)) in taps[0].iter().enumerate() {
                let wk = job.wp.as_ptr().add(((ci * pl.kh + khi) * pl.kw) * CB);
                let mut xe = [[_mm512_setzero_ps(); NV]; R];
                let mut xo = [[_mm512_setzero_ps(); NV]; R];
                let mut ne = [_mm512_setzero_ps(); R];
                let mut no = [_mm512_setzero_ps(); R];
                for k in 0..R {
                    let p = job.x.as_ptr().add(ci * plane + taps[k][t].1 * iw).wrapping_offset(s0);
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
    pub(super) unsafe fn row_avx2(job: &Job<'_>, taps: &[(usize, usize)], k: usize, out: &mut RowOut) {
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
    unsafe fn row256<const S: usize>(job: &Job<'_>, taps: &[(usize, usize)], k: usize, out: &mut RowOut) {
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
        taps: &[(usize, usize)],
        col: usize,
        w: usize,
        c0: usize,
        out: &mut RowOut,
    ) {
        let pl = &job.pl;
        let sw = if S == 0 { pl.sw } else { S };
        // `applies` checked `kw <= MAX_KW`.
        let (iw, kw) = (pl.iw as isize, pl.kw.min(MAX_KW));
        let cols = |v: usize| if v + 1 == NV { w } else { 8 };
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let strided = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(sw as i32));
        let mut acc = [[_mm256_setzero_ps(); NV]; 4];
        let s0 = (col * sw) as isize - pl.pl as isize;
        if S == 2 && pl.dw == 1 && kw <= PAIRED_KW {
            paired256::<NV>(job, taps, s0, kw, w, c0, &mut acc);
        } else if S == 1 && pl.dw == 1 && kw == DENSE_KW {
            // As for the AVX-512 blocks: masks only where a vector is short or would leave the row.
            let whole = |v: usize| {
                let s = s0 + 8 * v as isize;
                cols(v) == 8 && s >= 0 && s + (8 + kw - 1) as isize <= iw
            };
            let edge = u8::from(!whole(0)) | (u8::from(NV > 1 && !whole(NV - 1)) << 1);
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
                    let span = (cols(v) - 1) * sw + 1;
                    let a = (-s).clamp(0, span as isize) as usize;
                    let b = (iw - s).clamp(0, span as isize) as usize;
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
                _mm256_maskstore_ps(dst.add(8 * v), mask8(0, cols(v)), av);
            }
        }
    }

    /// Every kernel tap of [`block256`]'s channels `c0..c0 + 4`, each kernel column's inputs
    /// loaded by the masks computed for it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn unpaired256<const NV: usize, const S: usize>(
        job: &Job<'_>,
        taps: &[(usize, usize)],
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
            for &(khi, i) in taps {
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
                            _ => {
                                _mm256_mask_i32gather_ps::<4>(_mm256_setzero_ps(), pv, strided, _mm256_castsi256_ps(ma))
                            }
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
        taps: &[(usize, usize)],
        s0: isize,
        w: usize,
        c0: usize,
        acc: &mut [[__m256; NV]; 4],
    ) {
        let pl = &job.pl;
        let (plane, iw) = (pl.ih * pl.iw, pl.iw as isize);
        let cols = |v: usize| if v + 1 == NV { w } else { 8 };
        let mask = |kwi: usize, v: usize| {
            let s = s0 + (kwi + 8 * v) as isize;
            let span = cols(v) as isize;
            mask8((-s).clamp(0, span) as usize, (iw - s).clamp(0, span) as usize)
        };
        let first: [__m256i; KW] = std::array::from_fn(|kwi| mask(kwi, 0));
        let last: [__m256i; KW] = std::array::from_fn(|kwi| mask(kwi, NV - 1));
        for ci in 0..job.cg {
            for &(khi, i) in taps {
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
        taps: &[(usize, usize)],
        s0: isize,
        kw: usize,
        w: usize,
        c0: usize,
        acc: &mut [[__m256; NV]; 4],
    ) {
        let pl = &job.pl;
        let (plane, iw) = (pl.ih * pl.iw, pl.iw as isize);
        let inside = |s: isize, span: usize| {
            let a = (-s).clamp(0, span as isize) as usize;
            let b = (iw - s).clamp(0, span as isize) as usize;
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
            for &(khi, i) in taps {
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
}
