//! The CPU backend's convolution: the library kernel behind `kernel::Step::Conv`.
//!
//! [`conv`] computes the `conv` op (`crate::ops::linalg`) over dense row-major buffers:
//! `x [B, C, s...]`, `w [O, C/groups, k...]`, any number of spatial dims (1, 2 and 3 are what
//! the op allows), stride, dilation, ONNX-style padding `[begin..., end...]` of literal zeros,
//! groups. Three algorithms, picked by [`ConvGeom::algorithm`]:
//! - **pointwise** (every kernel dim 1, stride 1, no padding): each group is one GEMM
//!   `w_g [O/g, C/g] @ x_g [C/g, P]` straight on the input, no copy;
//! - **im2col**: each (batch, group) copies its input windows into a `[C/g * K, P]` scratch
//!   matrix (rows ordered channel-major then kernel positions row-major, padding as zeros)
//!   and runs one GEMM `w_g @ cols` into the output's `[O/g, P]` rows;
//! - **direct**: per output plane, accumulate `w * shifted input row` over channels and
//!   kernel positions (vectorized along the output row). Used when the per-output reduction
//!   `C/g * K` is short (depthwise convolutions and the like), where a GEMM with so little
//!   depth runs far below its peak; see `benches/gemm.rs` for the measured crossover.
//!
//! `P` is the number of output positions, `K` the kernel size. The [`Epilogue`]'s `bias` is
//! per output channel (`conv2d`'s bias), applied per output tile with the activation and
//! residual like matmul's. Scratch: [`ConvGeom::scratch_len`] elements for the im2col path;
//! pass a slice at least that long and nothing is allocated here (the `gemm` crate still
//! allocates its packing buffers); pass `None` and the scratch is allocated per call.
//!
//! Numerics: im2col and pointwise accumulate as the GEMM does (reassociated); direct
//! accumulates each output in the interpreter's order (channels, then kernel positions) with
//! two roundings per step. Padding takes part like the interpreter's literal zeros: a
//! non-finite weight against padding gives NaN (`0 * inf`); with a finite weight, skipping
//! padded positions cannot change any sum (an accumulator that starts at +0 never becomes -0).

use rayon::prelude::*;
use smallvec::SmallVec;

use super::gemm::{check_activation, run_gemm, Element, Epilogue, Gemm2d, KernelError, Operands, SendPtr, Tile};
use crate::kernel::ConvCall;

type Dims = SmallVec<[usize; 4]>;

/// How a convolution is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvAlgo {
    Pointwise,
    Im2col,
    Direct,
    /// The channel-blocked direct kernel (`super::conv_blocked`; f32, one or two spatial
    /// dims, finite weights): where it does not apply, the algorithm
    /// [`ConvGeom::unblocked_algorithm`] picks runs instead.
    Blocked,
}

/// `C/g * K` at or below which the direct kernel is used (when pointwise does not apply).
pub const DIRECT_MAX_DEPTH: usize = 16;

/// Output channels per group from which the channel-blocked kernel is used (it computes
/// blocks of `conv_blocked::CB`; depthwise convolutions take the direct kernel).
pub const BLOCKED_MIN_CHANNELS: usize = 4;

/// The geometry of one convolution, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    pub batch: usize,
    pub in_ch: usize,
    pub out_ch: usize,
    pub groups: usize,
    pub in_sp: Dims,
    pub k_sp: Dims,
    pub out_sp: Dims,
    pub stride: Dims,
    pub dilation: Dims,
    pub pad_b: Dims,
    pub pad_e: Dims,
}

fn shape_err(msg: String) -> KernelError {
    KernelError::Shape(msg)
}

fn check_len(name: &'static str, got: usize, want: Option<usize>) -> Result<(), KernelError> {
    match want {
        Some(want) if got == want => Ok(()),
        want => Err(KernelError::Len { name, got, want: want.unwrap_or(usize::MAX) }),
    }
}

/// A per-spatial-dim list: `[]` means all `empty`, else exactly `n` entries >= `min`.
fn list(name: &str, v: &[i64], n: usize, min: i64, empty: usize) -> Result<Dims, KernelError> {
    if v.is_empty() {
        return Ok(Dims::from_elem(empty, n));
    }
    if v.len() != n {
        return Err(shape_err(format!("conv {name} needs {n} entries, got {}", v.len())));
    }
    v.iter()
        .map(|&x| {
            if x < min {
                Err(shape_err(format!("conv {name} entries must be at least {min}, got {x}")))
            } else {
                usize::try_from(x).map_err(|_| shape_err(format!("conv {name} entry {x} is too large")))
            }
        })
        .collect()
}

impl ConvGeom {
    /// Checks shapes and attributes (the `conv` op's conventions: `[]` stride/dilation mean
    /// all 1, `[]` padding all 0, else `[begin..., end...]`).
    pub fn new(
        x_shape: &[usize],
        w_shape: &[usize],
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        groups: i64,
    ) -> Result<ConvGeom, KernelError> {
        let r = x_shape.len();
        if r < 3 || w_shape.len() != r {
            return Err(shape_err(format!("conv operands of shapes {x_shape:?} and {w_shape:?}")));
        }
        let n = r - 2;
        if n > 8 {
            return Err(shape_err(format!("conv supports at most 8 spatial dims, got {n}")));
        }
        if groups < 1 {
            return Err(shape_err(format!("conv groups must be at least 1, got {groups}")));
        }
        let groups = groups as usize;
        let (batch, in_ch, out_ch, cg) = (x_shape[0], x_shape[1], w_shape[0], w_shape[1]);
        if cg.checked_mul(groups) != Some(in_ch) || out_ch % groups != 0 {
            return Err(shape_err(format!("channels {in_ch} and weight {w_shape:?} do not fit {groups} groups")));
        }
        let stride = list("stride", stride, n, 1, 1)?;
        let dilation = list("dilation", dilation, n, 1, 1)?;
        let pads = list("padding", padding, 2 * n, 0, 0)?;
        let (pad_b, pad_e): (Dims, Dims) = (pads[..n].into(), pads[n..].into());
        let in_sp: Dims = x_shape[2..].into();
        let k_sp: Dims = w_shape[2..].into();
        let mut out_sp = Dims::new();
        for d in 0..n {
            if k_sp[d] == 0 {
                return Err(shape_err("conv kernel size must be at least 1".into()));
            }
            let eff = dilation[d] as i128 * (k_sp[d] as i128 - 1) + 1;
            let padded = in_sp[d] as i128 + pad_b[d] as i128 + pad_e[d] as i128;
            let o = (padded - eff).div_euclid(stride[d] as i128) + 1;
            if o < 0 {
                return Err(shape_err(format!(
                    "a window of extent {eff} does not fit the padded input of length {padded}"
                )));
            }
            out_sp.push(usize::try_from(o).map_err(|_| shape_err("conv output length overflows".into()))?);
        }
        let geom = ConvGeom { batch, in_ch, out_ch, groups, in_sp, k_sp, out_sp, stride, dilation, pad_b, pad_e };
        let sizes = [geom.x_len(), geom.w_len(), geom.out_len_checked(), geom.depth().checked_mul(geom.positions())];
        if sizes.iter().any(Option::is_none) {
            return Err(shape_err(format!("conv of {x_shape:?} with {w_shape:?} has too many elements")));
        }
        Ok(geom)
    }

    /// The geometry of a kernel-IR conv step.
    pub fn from_call(x_shape: &[usize], w_shape: &[usize], call: &ConvCall) -> Result<ConvGeom, KernelError> {
        ConvGeom::new(x_shape, w_shape, &call.stride, &call.padding, &call.dilation, call.groups)
    }

    /// Checks the lengths of an input and an output against the geometry.
    pub fn check_lens(&self, x_len: usize, out_len: usize) -> Result<(), KernelError> {
        check_len("x", x_len, self.x_len())?;
        check_len("out", out_len, self.out_len_checked())
    }

    /// Checks the length of an input against the geometry.
    pub fn check_x(&self, x_len: usize) -> Result<(), KernelError> {
        check_len("x", x_len, self.x_len())
    }

    fn x_len(&self) -> Option<usize> {
        [self.batch, self.in_ch].iter().chain(&self.in_sp).try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    fn w_len(&self) -> Option<usize> {
        [self.out_ch, self.in_ch / self.groups].iter().chain(&self.k_sp).try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    fn out_len_checked(&self) -> Option<usize> {
        [self.batch, self.out_ch].iter().chain(&self.out_sp).try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    pub fn out_shape(&self) -> Vec<usize> {
        [self.batch, self.out_ch].iter().chain(&self.out_sp).copied().collect()
    }

    pub fn out_len(&self) -> usize {
        self.out_shape().iter().product()
    }

    /// Output positions per channel (`P`).
    pub fn positions(&self) -> usize {
        self.out_sp.iter().product()
    }

    /// Kernel positions (`K`).
    pub fn kernel_positions(&self) -> usize {
        self.k_sp.iter().product()
    }

    /// The reduction length of one output (`C/g * K`).
    pub fn depth(&self) -> usize {
        self.in_ch / self.groups * self.kernel_positions()
    }

    /// `2 * outputs * depth`.
    pub fn flops(&self) -> f64 {
        2.0 * self.out_len() as f64 * self.depth() as f64
    }

    /// The algorithm [`conv`] uses.
    pub fn algorithm(&self) -> ConvAlgo {
        let unit = |v: &Dims| v.iter().all(|&s| s == 1);
        let zero = |v: &Dims| v.iter().all(|&s| s == 0);
        if unit(&self.k_sp) && unit(&self.stride) && zero(&self.pad_b) && zero(&self.pad_e) {
            ConvAlgo::Pointwise
        } else if self.in_sp.len() <= 2 && self.out_ch / self.groups >= BLOCKED_MIN_CHANNELS {
            ConvAlgo::Blocked
        } else {
            self.unblocked_algorithm()
        }
    }

    /// The algorithm without the blocked kernel (for other element types, non-finite
    /// weights, a tile hook).
    pub fn unblocked_algorithm(&self) -> ConvAlgo {
        if self.depth() <= DIRECT_MAX_DEPTH {
            ConvAlgo::Direct
        } else {
            ConvAlgo::Im2col
        }
    }

    /// Independent (batch, group) GEMMs.
    fn tasks(&self) -> usize {
        self.batch * self.groups
    }

    /// Workers that each need their own im2col scratch.
    fn im2col_workers(&self, threads: usize) -> usize {
        let tasks = self.tasks();
        if threads > 1 && tasks >= threads && (tasks.is_multiple_of(threads) || tasks >= 4 * threads) {
            threads
        } else {
            1
        }
    }

    /// Scratch elements [`conv`] needs with `algo` on `threads` threads.
    pub fn scratch_len_for(&self, algo: ConvAlgo, threads: usize) -> usize {
        match algo {
            ConvAlgo::Im2col => self.depth() * self.positions() * self.im2col_workers(threads.max(1)),
            ConvAlgo::Blocked => super::conv_blocked::packed_len(self),
            _ => 0,
        }
    }

    /// Scratch elements [`conv`] needs on `threads` threads.
    pub fn scratch_len(&self, threads: usize) -> usize {
        self.scratch_len_for(self.algorithm(), threads)
    }
}

/// `out = epilogue(conv(x, w))` with the `conv` op's semantics (see the module docs).
pub fn conv<T: Element>(
    geom: &ConvGeom,
    x: &[T],
    w: &[T],
    out: &mut [T],
    scratch: Option<&mut [T]>,
    threads: usize,
    epilogue: &Epilogue<'_, T>,
) -> Result<(), KernelError> {
    conv_with(geom, geom.algorithm(), x, w, out, scratch, threads, epilogue)
}

/// [`conv`] with a chosen algorithm (`Pointwise` only where it applies).
#[allow(clippy::too_many_arguments)]
pub fn conv_with<T: Element>(
    geom: &ConvGeom,
    algo: ConvAlgo,
    x: &[T],
    w: &[T],
    out: &mut [T],
    scratch: Option<&mut [T]>,
    threads: usize,
    epilogue: &Epilogue<'_, T>,
) -> Result<(), KernelError> {
    geom.check_lens(x.len(), out.len())?;
    check_len("w", w.len(), geom.w_len())?;
    if let Some(b) = epilogue.bias {
        check_len("bias", b.len(), Some(geom.out_ch))?;
    }
    if let Some(r) = epilogue.residual {
        check_len("residual", r.len(), Some(out.len()))?;
    }
    check_activation::<T>(&epilogue.activation)?;
    if algo == ConvAlgo::Pointwise && geom.algorithm() != ConvAlgo::Pointwise {
        return Err(KernelError::Unsupported(
            "the pointwise algorithm needs 1x..x1 kernels, stride 1, no padding".into(),
        ));
    }
    let threads = threads.max(1);
    if out.is_empty() {
        return Ok(());
    }
    let mut scratch = scratch;
    let algo = match algo {
        ConvAlgo::Blocked if T::conv_blocked(geom, x, w, out, scratch.as_deref_mut(), threads, epilogue) => {
            return Ok(())
        }
        ConvAlgo::Blocked => {
            // Its scratch (packed weights) is not the fallback's: that allocates its own.
            scratch = None;
            geom.unblocked_algorithm()
        }
        a => a,
    };
    match algo {
        ConvAlgo::Blocked => unreachable!("replaced above"),
        ConvAlgo::Direct => {
            direct(geom, x, w, out, threads, epilogue);
            Ok(())
        }
        ConvAlgo::Pointwise => {
            pointwise(geom, x, w, out, threads, epilogue);
            Ok(())
        }
        ConvAlgo::Im2col => {
            let need = geom.scratch_len_for(algo, threads);
            let mut owned = Vec::new();
            let scratch = match scratch {
                Some(s) if s.len() >= need => &mut s[..need],
                Some(s) => return Err(KernelError::Len { name: "scratch", got: s.len(), want: need }),
                None => {
                    owned.resize(need, T::zero());
                    &mut owned[..]
                }
            };
            im2col_conv(geom, x, w, out, scratch, threads, epilogue);
            Ok(())
        }
    }
}

/// Operands of the GEMM for (batch, group) task `t`: `w_g [O/g, C/g*K]` times `b` (the
/// cols matrix or the input itself) into the output rows of that batch and group.
fn task_operands<T: Element>(
    geom: &ConvGeom,
    t: usize,
    w: SendPtr<T>,
    b: *const T,
    out: SendPtr<T>,
    epi: &Epilogue<'_, T>,
) -> Operands<T> {
    let (bi, grp) = (t / geom.groups, t % geom.groups);
    let og = geom.out_ch / geom.groups;
    let row0 = bi * geom.out_ch + grp * og;
    let c_off = row0 * geom.positions();
    Operands {
        a: w.get().wrapping_add(grp * og * geom.depth()),
        b,
        c: out.get().wrapping_add(c_off),
        col_bias: None,
        row_bias: epi.bias.map(|b| b.as_ptr().wrapping_add(grp * og)),
        res: epi.residual.map(|r| r.as_ptr().wrapping_add(c_off)),
        row_base: row0,
    }
}

fn task_gemm(geom: &ConvGeom) -> Gemm2d {
    let (og, depth, p) = (geom.out_ch / geom.groups, geom.depth(), geom.positions());
    Gemm2d { m: og, n: p, k: depth, a_rs: depth, a_cs: 1, b_rs: p, b_cs: 1, ldc: p }
}

fn pointwise<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], out: &mut [T], threads: usize, epi: &Epilogue<'_, T>) {
    let g = task_gemm(geom);
    let (wp, op, xp) = (SendPtr(w.as_ptr() as *mut T), SendPtr(out.as_mut_ptr()), SendPtr(x.as_ptr() as *mut T));
    let cg = geom.in_ch / geom.groups;
    let p = geom.positions();
    let operands = |t: usize| {
        let (bi, grp) = (t / geom.groups, t % geom.groups);
        let b = xp.get().wrapping_add((bi * geom.in_ch + grp * cg) * p) as *const T;
        task_operands(geom, t, wp, b, op, epi)
    };
    // SAFETY: lengths were checked against the geometry; tasks write disjoint output rows.
    unsafe { run_gemm(&g, geom.tasks(), &operands, threads, &epi.activation, epi.hook, epi.whole_rows, None) }
}

fn im2col_conv<T: Element>(
    geom: &ConvGeom,
    x: &[T],
    w: &[T],
    out: &mut [T],
    scratch: &mut [T],
    threads: usize,
    epi: &Epilogue<'_, T>,
) {
    let g = task_gemm(geom);
    let chunk = geom.depth() * geom.positions();
    let workers = geom.im2col_workers(threads);
    let (wp, op) = (SendPtr(w.as_ptr() as *mut T), SendPtr(out.as_mut_ptr()));
    let tasks = geom.tasks();
    let run_task = |t: usize, cols: &mut [T], threads: usize| {
        im2col(geom, x, t, cols, threads);
        let cp = SendPtr(cols.as_mut_ptr());
        let operands = |_: usize| task_operands(geom, t, wp, cp.get(), op, epi);
        // SAFETY: lengths were checked against the geometry; each task writes its own rows.
        unsafe { run_gemm(&g, 1, &operands, threads, &epi.activation, epi.hook, epi.whole_rows, None) }
    };
    if workers == 1 {
        for t in 0..tasks {
            run_task(t, &mut scratch[..chunk], threads);
        }
    } else {
        let per = tasks.div_ceil(workers);
        scratch.par_chunks_mut(chunk.max(1)).take(workers).enumerate().for_each(|(wi, cols)| {
            for t in wi * per..((wi + 1) * per).min(tasks) {
                run_task(t, cols, 1);
            }
        });
    }
}

/// Fills `cols [C/g * K, P]` for (batch, group) task `t`.
fn im2col<T: Element>(geom: &ConvGeom, x: &[T], t: usize, cols: &mut [T], threads: usize) {
    let (bi, grp) = (t / geom.groups, t % geom.groups);
    let cg = geom.in_ch / geom.groups;
    let kpos = geom.kernel_positions();
    let p = geom.positions();
    let in_prod: usize = geom.in_sp.iter().product();
    let x_base = (bi * geom.in_ch + grp * cg) * in_prod;
    let fill = |row: usize, dst: &mut [T]| {
        let (ci, kf) = (row / kpos, row % kpos);
        let plane = &x[x_base + ci * in_prod..x_base + (ci + 1) * in_prod];
        let kidx = unravel(kf, &geom.k_sp);
        for_each_row(geom, &kidx, plane, |o_outer, src| {
            let ow = *geom.out_sp.last().unwrap_or(&1);
            let seg = &mut dst[o_outer * ow..(o_outer + 1) * ow];
            match src {
                None => seg.fill(T::zero()),
                Some((row_in, lo, hi, first, s)) => {
                    seg[..lo].fill(T::zero());
                    seg[hi..].fill(T::zero());
                    if s == 1 {
                        seg[lo..hi].copy_from_slice(&row_in[first..first + (hi - lo)]);
                    } else {
                        for (j, v) in seg[lo..hi].iter_mut().enumerate() {
                            *v = row_in[first + j * s];
                        }
                    }
                }
            }
        });
    };
    if threads > 1 && cols.len() >= 64 * 1024 {
        cols.par_chunks_mut(p.max(1)).enumerate().for_each(|(row, dst)| fill(row, dst));
    } else {
        for (row, dst) in cols.chunks_mut(p.max(1)).enumerate() {
            fill(row, dst);
        }
    }
}

fn unravel(mut flat: usize, dims: &[usize]) -> Dims {
    let mut idx = Dims::from_elem(0, dims.len());
    for d in (0..dims.len()).rev() {
        idx[d] = flat % dims[d];
        flat /= dims[d];
    }
    idx
}

/// A source row of the input for one output row: the input row, the valid output range
/// `lo..hi` along the last dim, the input index for output `lo`, and the stride.
type SrcRow<'a, T> = Option<(&'a [T], usize, usize, usize, usize)>;

/// For kernel position `kidx`, calls `f(o_outer, src)` for every output row (every index of
/// all output dims but the last, flattened): `src` is `None` when the row lies in padding.
fn for_each_row<'a, T>(geom: &ConvGeom, kidx: &[usize], plane: &'a [T], mut f: impl FnMut(usize, SrcRow<'a, T>)) {
    let n = geom.out_sp.len();
    let last = n - 1;
    let (ow, iw) = (geom.out_sp[last], geom.in_sp[last]);
    let (s, dil, pb) = (geom.stride[last], geom.dilation[last], geom.pad_b[last]);
    // Valid outputs along the last dim: 0 <= o*s + k*dil - pb < iw.
    let off = (kidx[last] * dil) as isize - pb as isize;
    let lo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(s) };
    let hi = if (iw as isize) <= off { 0 } else { ((iw as isize - off) as usize).div_ceil(s).min(ow) };
    let (lo, hi) = (lo.min(ow), hi.max(lo.min(ow)));
    let outer: usize = geom.out_sp[..last].iter().product();
    for o_outer in 0..outer {
        // The input row index, over all dims but the last (row-major).
        let (mut rem, mut in_row, mut inside, mut stride_in) = (o_outer, 0usize, true, 1usize);
        for d in (0..last).rev() {
            let o = rem % geom.out_sp[d];
            rem /= geom.out_sp[d];
            let i = (o * geom.stride[d] + kidx[d] * geom.dilation[d]) as isize - geom.pad_b[d] as isize;
            if i < 0 || i >= geom.in_sp[d] as isize {
                inside = false;
                break;
            }
            in_row += i as usize * stride_in;
            stride_in *= geom.in_sp[d];
        }
        let in_row = in_row * iw;
        let src = if inside && lo < hi {
            let first = (lo * s) as isize + off;
            Some((&plane[in_row..in_row + iw], lo, hi, first as usize, s))
        } else if inside {
            Some((&plane[in_row..in_row + iw], 0, 0, 0, s))
        } else {
            None
        };
        f(o_outer, src);
    }
}

/// The direct kernel: one task per (batch, output channel) plane.
fn direct<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], out: &mut [T], threads: usize, epi: &Epilogue<'_, T>) {
    let p = geom.positions();
    let planes = geom.batch * geom.out_ch;
    let work = |plane_idx: usize, dst: &mut [T]| {
        direct_plane(geom, x, w, plane_idx, dst);
        plane_epilogue(geom, plane_idx, dst, epi);
    };
    if threads > 1 && planes > 1 {
        out.par_chunks_mut(p.max(1)).enumerate().for_each(|(i, dst)| work(i, dst));
    } else {
        for (i, dst) in out.chunks_mut(p.max(1)).enumerate() {
            work(i, dst);
        }
    }
}

fn plane_epilogue<T: Element>(geom: &ConvGeom, plane_idx: usize, dst: &mut [T], epi: &Epilogue<'_, T>) {
    if let Some(bias) = epi.bias {
        let b = bias[plane_idx % geom.out_ch];
        for v in dst.iter_mut() {
            *v = v.add(b);
        }
    }
    // The activation was checked for T before any work began.
    let _ = T::activate(&epi.activation, dst);
    if let Some(res) = epi.residual {
        let r = &res[plane_idx * dst.len()..(plane_idx + 1) * dst.len()];
        for (v, &rv) in dst.iter_mut().zip(r) {
            *v = v.add(rv);
        }
    }
    if let Some(h) = epi.hook {
        h(Tile::from_row(plane_idx, dst));
    }
}

fn direct_plane<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], plane_idx: usize, dst: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::has_avx512() {
            // SAFETY: the CPU has every feature the variant is compiled for.
            return unsafe { direct_plane_avx512(geom, x, w, plane_idx, dst) };
        }
        if super::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { direct_plane_avx2(geom, x, w, plane_idx, dst) };
        }
    }
    direct_plane_generic(geom, x, w, plane_idx, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2")]
unsafe fn direct_plane_avx512<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], plane_idx: usize, dst: &mut [T]) {
    direct_plane_generic(geom, x, w, plane_idx, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn direct_plane_avx2<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], plane_idx: usize, dst: &mut [T]) {
    direct_plane_generic(geom, x, w, plane_idx, dst)
}

/// Elements of the row buffer [`depthwise_plane`] keeps on the stack (`kh` padded rows).
const DEPTHWISE_ROWS: usize = 4096;

/// Whether [`depthwise_plane`] computes `geom`'s planes: one input channel per group, two
/// spatial dims, stride and dilation 1, and `kh` padded input rows that fit its row buffer.
fn depthwise_applies(geom: &ConvGeom) -> bool {
    let ones = |v: &Dims| v.iter().all(|&s| s == 1);
    geom.in_sp.len() == 2
        && geom.in_ch == geom.groups
        && ones(&geom.stride)
        && ones(&geom.dilation)
        && geom.k_sp[0] * (geom.in_sp[1] + geom.pad_b[1] + geom.pad_e[1]) <= DEPTHWISE_ROWS
        && geom.out_sp[1] + geom.k_sp[1] == geom.in_sp[1] + geom.pad_b[1] + geom.pad_e[1] + 1
}

/// One output plane of a depthwise convolution ([`depthwise_applies`]). Each output row
/// copies its `kh` input rows, padding included as literal zeros (rows wholly in the padding
/// are zeros), into a row buffer, so every column runs one loop the compiler vectorizes:
/// `out[c] += row[c + j] * w` tap by tap. The taps go in the interpreter's order (kernel
/// row, then column) with two roundings each, from `+0`, as [`direct_plane_generic`] does,
/// so the same bits; padding taking part as zeros is the op's own meaning (`0 * inf` is NaN).
#[inline(always)]
fn depthwise_plane<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], plane_idx: usize, dst: &mut [T]) {
    let (bi, oc) = (plane_idx / geom.out_ch, plane_idx % geom.out_ch);
    let og = geom.out_ch / geom.groups;
    let (ih, iw) = (geom.in_sp[0], geom.in_sp[1]);
    let (kh, kw) = (geom.k_sp[0], geom.k_sp[1]);
    let (oh, ow) = (geom.out_sp[0], geom.out_sp[1]);
    let (pt, pl) = (geom.pad_b[0], geom.pad_b[1]);
    let pw = iw + pl + geom.pad_e[1];
    let plane = &x[(bi * geom.in_ch + oc / og) * ih * iw..][..ih * iw];
    let taps = &w[oc * kh * kw..][..kh * kw];
    // A ring of the `kh` padded input rows the current output row reads: padded row `r`
    // (input row `r - pt`) lives in slot `r % kh`, and each output row loads one new row.
    let mut ring: SmallVec<[T; DEPTHWISE_ROWS]> = SmallVec::from_elem(T::zero(), kh * pw);
    let mut rows: SmallVec<[usize; 16]> = SmallVec::from_elem(0, kh);
    let mut loaded = 0;
    for (oy, out) in dst.chunks_exact_mut(ow).take(oh).enumerate() {
        while loaded < oy + kh {
            let slot = &mut ring[(loaded % kh) * pw..][..pw];
            match loaded.checked_sub(pt).filter(|&iy| iy < ih) {
                Some(iy) => slot[pl..pl + iw].copy_from_slice(&plane[iy * iw..(iy + 1) * iw]),
                None => slot[pl..pl + iw].fill(T::zero()),
            }
            loaded += 1;
        }
        // Where each kernel row's padded input row starts in the ring.
        for (ky, at) in rows.iter_mut().enumerate() {
            *at = ((oy + ky) % kh) * pw;
        }
        let rows = (&ring[..], &rows[..], pw);
        // Blocks of columns summed in registers over every tap, wide enough that their
        // independent sums hide the adds' latency; a last block overlaps the one before it
        // and recomputes the same values. Rows narrower than 8 go one column at a time.
        if !depthwise_row::<T, 64>(out, rows, taps, kw)
            && !depthwise_row::<T, 32>(out, rows, taps, kw)
            && !depthwise_row::<T, 8>(out, rows, taps, kw)
        {
            depthwise_row::<T, 1>(out, rows, taps, kw);
        }
    }
}

/// One output row of [`depthwise_plane`] in blocks of `V` columns, the last one overlapping;
/// `false`, having done nothing, when the row is narrower than `V`.
#[inline(always)]
fn depthwise_row<T: Element, const V: usize>(
    out: &mut [T],
    rows: (&[T], &[usize], usize),
    taps: &[T],
    kw: usize,
) -> bool {
    let ow = out.len();
    if ow < V {
        return false;
    }
    let mut c = 0;
    while c < ow {
        let at = c.min(ow - V);
        out[at..at + V].copy_from_slice(&depthwise_block::<T, V>(rows, taps, kw, at));
        c = at + V;
    }
    true
}

/// Columns `c..c + V` of one output row of [`depthwise_plane`]: `rows` is the ring of padded
/// input rows, where each kernel row's row starts, and the padded width.
#[inline(always)]
fn depthwise_block<T: Element, const V: usize>(
    rows: (&[T], &[usize], usize),
    taps: &[T],
    kw: usize,
    c: usize,
) -> [T; V] {
    let (ring, starts, pw) = rows;
    let mut acc = [T::zero(); V];
    for (&at, taps) in starts.iter().zip(taps.chunks_exact(kw)) {
        let row = &ring[at..at + pw];
        for (kx, &wv) in taps.iter().enumerate() {
            let xs = &row[c + kx..c + kx + V];
            for (a, &xv) in acc.iter_mut().zip(xs) {
                *a = T::madd(*a, xv, wv);
            }
        }
    }
    acc
}

#[inline(always)]
fn direct_plane_generic<T: Element>(geom: &ConvGeom, x: &[T], w: &[T], plane_idx: usize, dst: &mut [T]) {
    const V: usize = 16;
    if depthwise_applies(geom) {
        return depthwise_plane(geom, x, w, plane_idx, dst);
    }
    let (bi, oc) = (plane_idx / geom.out_ch, plane_idx % geom.out_ch);
    let cg = geom.in_ch / geom.groups;
    let og = geom.out_ch / geom.groups;
    let grp = oc / og;
    let kpos = geom.kernel_positions();
    let in_prod: usize = geom.in_sp.iter().product();
    let last = geom.out_sp.len() - 1;
    let (ow, iw, kw) = (geom.out_sp[last], geom.in_sp[last], geom.k_sp[last]);
    let (s, dil, pb) = (geom.stride[last], geom.dilation[last], geom.pad_b[last] as isize);
    let out_outer: usize = geom.out_sp[..last].iter().product();
    let k_outer: usize = geom.k_sp[..last].iter().product();
    // Output columns where every tap of the kernel row reads the input (no division for
    // stride 1: a division per row costs as much as a short row).
    let div = |a: isize| if s == 1 { a } else { (a + s as isize - 1).div_euclid(s as isize) };
    let last_tap = ((kw - 1) * dil) as isize;
    let lo_all = div(pb).clamp(0, ow as isize) as usize;
    let hi_all = div(iw as isize + pb - last_tap).clamp(lo_all as isize, ow as isize) as usize;
    let zero_times = |wv: T| T::madd(T::zero(), T::zero(), wv);
    // Taps of one output row, in the interpreter's order (channel, then kernel position):
    // the x offset of the input row (None: the row lies in padding), the column offset
    // `j * dil - pb`, and the weight.
    let mut taps: SmallVec<[(Option<usize>, isize, T); 32]> = SmallVec::new();
    let x_batch = (bi * geom.in_ch + grp * cg) * in_prod;
    for oo in 0..out_outer {
        let o_idx = unravel_small(oo, &geom.out_sp[..last]);
        taps.clear();
        for ci in 0..cg {
            let w_base = (oc * cg + ci) * kpos;
            for ko in 0..k_outer {
                let k_idx = unravel_small(ko, &geom.k_sp[..last]);
                let mut row_in = Some(0usize);
                for d in 0..last {
                    let i = (o_idx[d] * geom.stride[d] + k_idx[d] * geom.dilation[d]) as isize - geom.pad_b[d] as isize;
                    row_in = match row_in {
                        Some(r) if i >= 0 && (i as usize) < geom.in_sp[d] => Some(r * geom.in_sp[d] + i as usize),
                        _ => None,
                    };
                }
                let base = row_in.map(|r| x_batch + ci * in_prod + r * iw);
                for j in 0..kw {
                    taps.push((base, (j * dil) as isize - pb, w[w_base + ko * kw + j]));
                }
            }
        }
        let row_out = &mut dst[oo * ow..(oo + 1) * ow];
        // Interior: blocks of outputs accumulated in registers over all taps (64 at a time
        // keeps four vector accumulators in flight). A last short block may overlap the one
        // before it: it recomputes the same values.
        let width = hi_all - lo_all;
        let mut o = lo_all;
        while hi_all - o >= 64 {
            row_out[o..o + 64].copy_from_slice(&block::<T, 64>(&taps, x, s, o));
            o += 64;
        }
        while hi_all - o >= V {
            row_out[o..o + V].copy_from_slice(&block::<T, V>(&taps, x, s, o));
            o += V;
        }
        if o < hi_all && width >= V {
            let o = hi_all - V;
            row_out[o..o + V].copy_from_slice(&block::<T, V>(&taps, x, s, o));
        } else if o < hi_all && width >= 4 {
            while o < hi_all {
                let b = o.min(hi_all - 4);
                row_out[b..b + 4].copy_from_slice(&block::<T, 4>(&taps, x, s, b));
                o += 4;
            }
        }
        let (lo_in, hi_in) = if width >= 4 { (lo_all, hi_all) } else { (ow, ow) };
        // Borders: one output at a time.
        for o in (0..lo_in.min(ow)).chain(hi_in..ow) {
            let mut acc = T::zero();
            for &(base, joff, wv) in &taps {
                let col = (o * s) as isize + joff;
                match base {
                    Some(b) if col >= 0 && (col as usize) < iw => acc = T::madd(acc, x[b + col as usize], wv),
                    _ if !wv.is_finite() => acc = acc.add(zero_times(wv)),
                    _ => {}
                }
            }
            row_out[o] = acc;
        }
    }
}

/// Outputs `o0..o0 + V` of one row (all inside the input for every tap), accumulated over
/// `taps` in order.
#[inline(always)]
fn block<T: Element, const V: usize>(taps: &[(Option<usize>, isize, T)], x: &[T], s: usize, o0: usize) -> [T; V] {
    let mut acc = [T::zero(); V];
    for &(base, joff, wv) in taps {
        match base {
            Some(b) => {
                let start = (b as isize + (o0 * s) as isize + joff) as usize;
                if s == 1 {
                    let xs = &x[start..start + V];
                    for i in 0..V {
                        acc[i] = T::madd(acc[i], xs[i], wv);
                    }
                } else {
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = T::madd(*a, x[start + i * s], wv);
                    }
                }
            }
            None if !wv.is_finite() => {
                let z = T::madd(T::zero(), T::zero(), wv);
                acc.iter_mut().for_each(|a| *a = a.add(z));
            }
            None => {}
        }
    }
    acc
}

/// `unravel` into a fixed array (no allocation; `dims.len() <= 8`, checked by `ConvGeom`).
#[inline(always)]
fn unravel_small(mut flat: usize, dims: &[usize]) -> [usize; 8] {
    let mut idx = [0usize; 8];
    for d in (0..dims.len()).rev() {
        idx[d] = flat % dims[d];
        flat /= dims[d];
    }
    idx
}
