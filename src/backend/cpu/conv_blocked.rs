//! The channel-blocked direct convolution: f32, one or two spatial dims, any stride,
//! dilation, padding and groups.
//!
//! Each step computes a block of [`CB`] output channels by `W` consecutive outputs of one
//! output row in registers: for every input channel and kernel position it loads the `W`
//! inputs the block reads (contiguous for stride 1; every second one, deinterleaved, for
//! stride 2, where one pair of loads per vector serves every kernel column of a row up to 7
//! wide: the evens and odds, moved down a lane per two columns) once and multiplies them by
//! the `CB` weights of that tap, so one load feeds `CB` fused multiply-adds per lane. The
//! weights are packed as `[group][channel block][C/g][kh][kw][CB]` (zeros past the last
//! channel), so a tap's `CB` weights are adjacent: once, when a plan is built, for a constant
//! weight ([`PackedWeights`]), else on each call. That is what a small-channel convolution (a
//! detector's stem, `C` or `O` of 3 to 64) needs: an im2col GEMM there has an `M` (output channels) too small for
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

use super::conv::ConvGeom;
use super::gemm::{Epilogue, SendPtr};
use super::pool::RowPool;

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
    /// `data` regrouped for the channel-vector kernel (rows too narrow for the blocked
    /// kernel, on AVX-512), on its first call. (On AVX2 its 8 lanes are `CB`: `data` as is.)
    lanes: std::sync::OnceLock<Vec<f32>>,
    /// The weights transformed for Winograd (`conv_blocked/winograd.rs`), on its first call.
    wino: std::sync::OnceLock<winograd::Transformed>,
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
        Some(PackedWeights {
            groups,
            out_ch,
            cg,
            k_sp: k_sp.iter().copied().collect(),
            data,
            lanes: std::sync::OnceLock::new(),
            wino: std::sync::OnceLock::new(),
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * (self.data.len() + self.lanes.get().map_or(0, Vec::len))
            + self.wino.get().map_or(0, winograd::Transformed::bytes)
    }

    /// `out = epi(conv(x, w))` by the blocked kernel with these weights, when `g` is the
    /// geometry they were packed for and the blocked kernel is its algorithm; `Ok(false)`,
    /// having done nothing, otherwise (and for a hook, which the blocked kernel does not
    /// call). Lengths are checked as `conv::conv` checks them.
    pub fn conv(
        &self,
        g: &ConvGeom,
        x: &[f32],
        out: &mut [f32],
        threads: usize,
        epi: &Epilogue<'_, f32>,
    ) -> Result<bool, super::gemm::KernelError> {
        self.conv_pooled(g, None, x, out, threads, epi)
    }

    /// [`PackedWeights::conv`] with the convolution's result pooled by `pool` (over planes of
    /// its output size) before the epilogue: `out` then holds the pooled result.
    pub fn conv_pooled(
        &self,
        g: &ConvGeom,
        pool: Option<&RowPool>,
        x: &[f32],
        out: &mut [f32],
        threads: usize,
        epi: &Epilogue<'_, f32>,
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
        match pool {
            None => g.check_lens(x.len(), out.len())?,
            Some(pool) => {
                let planes = g.batch * g.out_ch;
                let plane = pool.out_rows() * pool.out_cols();
                let ow = g.out_sp.last().copied().unwrap_or(1);
                if g.out_sp.len() != 2 || pool.in_cols() != ow || pool.out_rows() * pool.band() > g.out_sp[0] {
                    return Err(super::gemm::KernelError::Shape(format!(
                        "a pooling of {} rows of {} columns does not fit a convolution result of {:?}",
                        pool.out_rows() * pool.band(),
                        pool.in_cols(),
                        g.out_sp
                    )));
                }
                g.check_x(x.len())?;
                if planes.checked_mul(plane) != Some(out.len()) {
                    return Err(super::gemm::KernelError::Len { name: "out", got: out.len(), want: planes * plane });
                }
            }
        }
        if let Some(b) = epi.bias {
            if b.len() != g.out_ch {
                return Err(super::gemm::KernelError::Len { name: "bias", got: b.len(), want: g.out_ch });
            }
        }
        if epi.residual.is_some_and(|r| r.len() != out.len()) || epi.hook.is_some() {
            return Ok(false);
        }
        if let Some(pl) = Plane::of(g).filter(|pl| winograd_enabled() && winograd::applies(g, pl, pool)) {
            let u = self.wino.get_or_init(|| winograd::Transformed::new(&self.data, g.out_ch, self.cg, CB));
            if out.is_empty() || winograd::conv(g, &pl, x, u, out, threads, epi, pool) {
                return Ok(true);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(pl) = Plane::of(g).filter(|pl| pool.is_none() && lanes::applies(g, pl)) {
            let wl = self.lanes.get_or_init(|| lanes::repack(&self.data, g.out_ch, self.cg));
            if !out.is_empty() {
                lanes::conv(g, &pl, x, wl, out, threads, epi);
            }
            return Ok(true);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(pl) = Plane::of(g).filter(|pl| pool.is_none() && lanes256::applies(g, pl)) {
            if !out.is_empty() {
                lanes256::conv(g, &pl, x, &self.data, out, threads, epi);
            }
            return Ok(true);
        }
        if !out.is_empty() {
            blocked(g, x, &self.data, out, threads, epi, pool);
        }
        Ok(true)
    }
}

/// Whether [`PackedWeights::conv`] and [`PackedWeights::conv_pooled`] (with `pool`) run `g`
/// by Winograd `F(2×2, 3×3)` (`conv_blocked/winograd.rs`) when the input is finite and not
/// huge (else by the direct kernels, as for any other geometry).
pub fn winograd(g: &ConvGeom, pool: Option<&RowPool>) -> bool {
    winograd_enabled() && Plane::of(g).is_some_and(|pl| winograd::applies(g, &pl, pool))
}

/// Whether [`PackedWeights::conv`] runs `g` (without a pooling) by the channel-vector kernel
/// (`conv_blocked/lanes.rs`: rows of at most 32 columns, a 3×3 kernel, output channels a
/// multiple of 16, AVX-512; `conv_blocked/lanes256.rs` on AVX2: a 3×3 kernel of column
/// stride 2, or of stride 1 on rows of at most 56 columns, see its `applies`) rather than
/// the blocked one; its results have the same bits.
pub fn channel_vectors(g: &ConvGeom) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        Plane::of(g).is_some_and(|pl| lanes::applies(g, &pl) || lanes256::applies(g, &pl))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = g;
        false
    }
}

/// `out = epilogue(conv(x, w))` with `wp` the weights [`pack`]ed. The caller checked the
/// lengths against `g` and that [`applies`] holds; `epi.hook` must be `None`.
pub fn conv_blocked(g: &ConvGeom, x: &[f32], wp: &[f32], out: &mut [f32], threads: usize, epi: &Epilogue<'_, f32>) {
    blocked(g, x, wp, out, threads, epi, None);
}

thread_local! {
    /// A task's band of convolution rows before they are pooled, and the pooling's row.
    static BAND: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`conv_blocked`], pooled by `pool` before the epilogue when it is given (then `out` holds
/// the pooled result): each task computes a band of the pooling's window rows for its
/// channel block into a scratch that stays in L1 and pools it at once, so the convolution's
/// result is never stored whole; where `pooled.rs` takes the window (a `2×2` or `2×1`
/// window after a stride-1 3-wide kernel, with AVX-512, or with AVX2 and few input
/// channels), each pooled row is pooled in registers and nothing else is stored.
fn blocked(
    g: &ConvGeom,
    x: &[f32],
    wp: &[f32],
    out: &mut [f32],
    threads: usize,
    epi: &Epilogue<'_, f32>,
    pool: Option<&RowPool>,
) {
    let Some(pl) = Plane::of(g) else { return };
    let (og, cg) = (g.out_ch / g.groups, g.in_ch / g.groups);
    let blocks = og.div_ceil(CB);
    let units = g.batch * g.groups * blocks;
    // Rows of `out` (pooled rows with a pooling, each from a band of convolution rows) and
    // their length.
    let (out_rows, band, out_cols) = match pool {
        Some(pool) => (pool.out_rows(), pool.band(), pool.out_cols()),
        None => (pl.oh, 1, pl.ow),
    };
    // A pooling done in registers by the AVX-512 rows, where they take it.
    let fused = pool.and_then(|pool| fused_window(&pl, cg, pool));
    let (rows_per, chunks) = row_chunks(threads, units, out_rows);
    let op = SendPtr(out.as_mut_ptr());
    let out_len = out.len();
    let out_plane = out_rows * out_cols;
    let task = |t: usize| {
        let (unit, chunk) = (t / chunks, t % chunks);
        let (b, rest) = (unit / (g.groups * blocks), unit % (g.groups * blocks));
        let (grp, blk) = (rest / blocks, rest % blocks);
        let rows = chunk * rows_per..((chunk + 1) * rows_per).min(out_rows);
        let x_off = (b * g.in_ch + grp * cg) * pl.ih * pl.iw;
        let w_off = (grp * blocks + blk) * cg * pl.kh * pl.kw * CB;
        let co0 = grp * og + blk * CB;
        let n_ch = CB.min(og - blk * CB);
        let x = &x[x_off..x_off + cg * pl.ih * pl.iw];
        let job = Job { pl, cg, x, wp: &wp[w_off..w_off + cg * pl.kh * pl.kw * CB] };
        // Convolution rows `r..end` into `dst` (row `r + k` of channel `c` at `base + c *
        // plane + k * ow`).
        let conv_rows = |r: usize, end: usize, dst: SendPtr<f32>, dst_len: usize, base: usize, plane: usize| {
            let out = RowOut { out: dst, out_len: dst_len, base, plane, ow: pl.ow, rows: end - r, n_ch };
            run_span(&job, r, out);
        };
        match pool {
            None => {
                let base = (b * g.out_ch + co0) * out_plane + rows.start * pl.ow;
                conv_rows(rows.start, rows.end, op, out_len, base, out_plane);
            }
            Some(_) if let Some(window) = fused => {
                for q in rows.clone() {
                    let base = (b * g.out_ch + co0) * out_plane + q * out_cols;
                    let mut out = RowOut { out: op, out_len, base, plane: out_plane, ow: out_cols, rows: 1, n_ch };
                    fused_row(&job, q, window, &mut out);
                }
            }
            Some(pool) => BAND.with_borrow_mut(|scratch| {
                // Bands of `per` pooled rows at once (about 2 KiB of convolution rows per
                // channel: the scratch stays in L1), pooled in one call and copied out.
                let win = band * pl.ow;
                let per = (BAND_ELEMENTS / win.max(1)).clamp(1, rows.len().max(1));
                scratch.resize(CB * per * (win + out_cols) + pl.ow, 0.0);
                let (conv, rest) = scratch.split_at_mut(CB * per * win);
                let (pooled, tmp) = rest.split_at_mut(CB * per * out_cols);
                let sp = SendPtr(conv.as_mut_ptr());
                let mut i0 = rows.start;
                while i0 < rows.end {
                    // The chunk's channels `k` bands apart: one plane each to pool.
                    let k = per.min(rows.end - i0);
                    let (plane, len) = (k * win, k * out_cols);
                    conv_rows(i0 * band, (i0 + k) * band, sp, conv.len(), 0, plane);
                    pool.rows(k, n_ch, &conv[..n_ch * plane], &mut pooled[..n_ch * len], tmp);
                    for c in 0..n_ch {
                        let start = (b * g.out_ch + co0 + c) * out_plane + i0 * out_cols;
                        assert!(start + len <= out_len);
                        // SAFETY: in bounds (just checked); rows of distinct tasks are
                        // disjoint (each task owns its rows of its channel block).
                        let dst = unsafe { std::slice::from_raw_parts_mut(op.get().add(start), len) };
                        dst.copy_from_slice(&pooled[c * len..][..len]);
                    }
                    i0 += k;
                }
            }),
        }
        // The epilogue on each channel's rows of this task, one contiguous run each: still
        // in cache, and long enough for whole vectors (a row alone may be a few columns).
        if !epi.is_empty() {
            let len = rows.len() * out_cols;
            for c in 0..n_ch {
                let start = (b * g.out_ch + co0 + c) * out_plane + rows.start * out_cols;
                assert!(start + len <= out_len);
                // SAFETY: in bounds (just checked); rows of distinct tasks are disjoint (each
                // task owns its rows of its channel block), and this task's are written.
                let dst = unsafe { std::slice::from_raw_parts_mut(op.get().add(start), len) };
                row_epilogue(dst, co0 + c, start, epi);
            }
        }
    };
    let tasks = units * chunks;
    if threads > 1 && tasks > 1 {
        (0..tasks).into_par_iter().with_max_len(1).for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// The pooling window the x86 rows fuse (`conv_blocked/pooled.rs`); none elsewhere.
#[cfg(target_arch = "x86_64")]
type Fused = pooled::Fuse;
#[cfg(not(target_arch = "x86_64"))]
type Fused = std::convert::Infallible;

/// The window of `pool` to fuse into convolution rows `pl` of `cg` input channels, where a
/// kernel does.
fn fused_window(pl: &Plane, cg: usize, pool: &RowPool) -> Option<Fused> {
    #[cfg(target_arch = "x86_64")]
    {
        pooled::applies(pl, cg, pool)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (pl, cg, pool);
        None
    }
}

/// Pooled row `q` of a channel block by the fused kernel into row 0 of `out`.
fn fused_row(job: &Job<'_>, q: usize, window: Fused, out: &mut RowOut) {
    #[cfg(target_arch = "x86_64")]
    {
        pooled::fused(job, q, window, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (job, q, out);
        match window {}
    }
}

/// How `units` independent units of `rows` output rows each split into tasks for `threads`
/// threads: `(rows per task, tasks per unit)`, enough tasks for the threads to share (4 per
/// thread) in whole rows; one task per unit on one thread. `units` must not be 0.
fn row_chunks(threads: usize, units: usize, rows: usize) -> (usize, usize) {
    let chunks = if threads <= 1 { 1 } else { (4 * threads).div_ceil(units).clamp(1, rows.max(1)) };
    let rows_per = rows.div_ceil(chunks).max(1);
    (rows_per, rows.div_ceil(rows_per).max(1))
}

fn row_epilogue(rows: &mut [f32], co: usize, start: usize, epi: &Epilogue<'_, f32>) {
    match epi.bias {
        Some(bias) => super::activation::add_then_apply_f32(bias[co], &epi.activation, rows),
        None => super::activation::apply_f32(&epi.activation, rows),
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

/// Convolution rows per channel a pooled task computes before pooling them (elements).
const BAND_ELEMENTS: usize = 512;

/// Rows `r..r + out.rows` of a channel block, one or two at a time ([`run_rows`]): two
/// where both read every kernel row (the short-row kernel shares each weight between them).
fn run_span(job: &Job<'_>, r: usize, out: RowOut) {
    let end = r + out.rows;
    let mut r0 = r;
    while r0 < end {
        let n = if r0 + 1 < end && job.pl.full_row(r0) && job.pl.full_row(r0 + 1) { 2 } else { 1 };
        run_rows(job, r0, &mut RowOut { base: out.base + (r0 - r) * out.ow, rows: n, ..out });
        r0 += n;
    }
}

/// Rows `r..r + out.rows` (one or two) of a channel block.
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
                unsafe { x86::row_avx2(job, row_taps(&job.pl, r + k), k, out) };
            }
            return;
        }
    }
    for k in 0..out.rows {
        row_generic(job, row_taps(&job.pl, r + k), k, out);
    }
}

/// The kernel rows `k0..k0 + n` of an output row that fall inside the input: kernel row
/// `k0 + t` reads input row `i0 + t * dh` (the rows inside are consecutive). `Copy`, so a
/// row's list costs nothing to pass around.
#[derive(Clone, Copy, Debug)]
struct Taps {
    k0: usize,
    n: usize,
    i0: usize,
    dh: usize,
}

impl Taps {
    /// The input row kernel row `k0 + t` reads.
    #[inline(always)]
    fn row(self, t: usize) -> usize {
        self.i0 + t * self.dh
    }

    /// `(kernel row, input row)` for each.
    #[inline(always)]
    fn iter(self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.n).map(move |t| (self.k0 + t, self.row(t)))
    }
}

/// Kernel rows inside the input for output row `r`, with the input row each reads.
fn row_taps(pl: &Plane, r: usize) -> Taps {
    let top = r * pl.sh;
    // Kernel row `k` reads `top + k dh - pt`: inside for `k` in `k0..k1`.
    let k0 = if top >= pl.pt { 0 } else { (pl.pt - top).div_ceil(pl.dh) };
    let k1 = (pl.ih + pl.pt).saturating_sub(top).div_ceil(pl.dh).min(pl.kh);
    let n = k1.saturating_sub(k0);
    let i0 = if n > 0 { top + k0 * pl.dh - pl.pt } else { 0 };
    Taps { k0, n, i0, dh: pl.dh }
}

/// The border columns of row `k` (outside `lo..hi`, or every column when that is empty),
/// one at a time.
#[inline(always)]
fn borders<const FMA: bool>(job: &Job<'_>, taps: Taps, k: usize, lo: usize, hi: usize, out: &mut RowOut) {
    let ow = job.pl.ow;
    let (lo, hi) = if hi > lo { (lo, hi) } else { (ow, ow) };
    for c in (0..lo.min(ow)).chain(hi..ow) {
        let acc = column::<FMA>(job, taps, c);
        out.store::<1>(k, c, &acc.map(|v| [v]));
    }
}

/// The portable row (NEON on aarch64, where LLVM vectorizes the blocks of 4).
fn row_generic(job: &Job<'_>, taps: Taps, k: usize, out: &mut RowOut) {
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
fn block_any<const W: usize, const FMA: bool>(job: &Job<'_>, taps: Taps, col: usize) -> [[f32; W]; CB] {
    match job.pl.sw {
        1 => block::<W, FMA, 1>(job, taps, col),
        2 => block::<W, FMA, 2>(job, taps, col),
        _ => block::<W, FMA, 0>(job, taps, col),
    }
}

/// Output columns `col..col + W` (inside the interior) of every channel of the block.
/// `S` is the column stride (0: read `job.pl.sw`).
#[inline(always)]
fn block<const W: usize, const FMA: bool, const S: usize>(job: &Job<'_>, taps: Taps, col: usize) -> [[f32; W]; CB] {
    let pl = &job.pl;
    let sw = if S == 0 { pl.sw } else { S };
    let plane = pl.ih * pl.iw;
    let mut acc = [[0f32; W]; CB];
    for ci in 0..job.cg {
        let xc = &job.x[ci * plane..(ci + 1) * plane];
        for (khi, i) in taps.iter() {
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
fn column<const FMA: bool>(job: &Job<'_>, taps: Taps, col: usize) -> [f32; CB] {
    let pl = &job.pl;
    let plane = pl.ih * pl.iw;
    let mut acc = [0f32; CB];
    for ci in 0..job.cg {
        for (khi, i) in taps.iter() {
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

#[cfg(target_arch = "x86_64")]
mod lanes;
mod winograd;

/// Whether 3×3 stride-1 convolutions may use Winograd (`LADDER_WINOGRAD=0` turns it off,
/// to compare; read once).
fn winograd_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LADDER_WINOGRAD").map_or(true, |v| v != "0"))
}
#[cfg(target_arch = "x86_64")]
mod lanes256;
#[cfg(target_arch = "x86_64")]
mod pooled;
#[cfg(target_arch = "x86_64")]
mod x86;
