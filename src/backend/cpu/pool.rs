//! The `max_pool2d` library kernel (`crate::ops::linalg` defines the op; native mode keeps it
//! whole: `crate::ops::library::kept`).
//!
//! Decomposed, a pooling is a tree of strided slices and `max`es that a Cranelift kernel runs
//! four lanes at a time, deinterleaving every stride-2 load by shuffles and spending five
//! instructions on each NaN-propagating `max`: on a CRNN's 2×2 pools (with the convolution's
//! bias and ReLU applied to every input) about 0.8 ns an output. Here an output row is the
//! `max` of the window's input rows (an elementwise loop into a scratch row in L1), then per
//! kernel column that row read at the column stride; a 2×2, stride-2 window reads its two
//! input rows directly (vertical `max`, then even and odd lanes apart and their `max`), and
//! windows one column wide skip the second pass. The x86 paths are intrinsics, the vector's
//! last partial block masked to the elements it has; other strides, the border columns whose
//! windows reach into the padding, and the portable path (plain loops the compiler vectorizes
//! where the target allows) run one output at a time. `[2, 16, 32, 256]` pooled 2×2 at one
//! thread on a 2-core AVX-512 EPYC: 16 µs, 70% of the copy floor of its input and output
//! (`ladder bench` on the graph alone); the fused Cranelift kernel took about 50.
//!
//! Semantics are the op's, bit for bit: padding never takes part (the op pads with -inf; a
//! window over no input element, possible only on an empty plane, gives -inf), `max`
//! propagates NaN as the canonical NaN (the interpreter's), and orders -0 < +0 (equal values
//! combine by AND of their bits, so +0 wins). The result depends on no order of evaluation,
//! so every path and thread count gives the same bits.
//!
//! Picked at run time under the ISA cap: AVX-512, AVX2, or portable (NEON on aarch64). Output
//! rows are split across threads.

use rayon::prelude::*;

use super::gemm::KernelError;
use crate::ir::Attrs;
use crate::ops::linalg::{pool_geom, PoolGeom};
use crate::ops::OpKind;

/// Outputs below which a call stays on the calling thread.
pub const PAR_OUTPUTS: usize = 1 << 15;

/// The sizes of one call, checked.
#[derive(Clone, Copy, Debug)]
struct Geom {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    dh: usize,
    dw: usize,
}

impl Geom {
    fn new(g: &PoolGeom, h: usize, w: usize) -> Result<Geom, KernelError> {
        let size = |v: u64, what: &str| {
            usize::try_from(v).map_err(|_| KernelError::Shape(format!("max_pool2d {what} {v} is out of range")))
        };
        let windows =
            |d: usize, len: usize| g.windows(d, len).map_err(|e| KernelError::Shape(format!("max_pool2d: {e}")));
        Ok(Geom {
            h,
            w,
            oh: windows(0, h)?,
            ow: windows(1, w)?,
            kh: size(g.kernel[0], "kernel")?,
            kw: size(g.kernel[1], "kernel")?,
            sh: size(g.stride[0], "stride")?,
            sw: size(g.stride[1], "stride")?,
            ph: size(g.padding[0], "padding")?,
            pw: size(g.padding[1], "padding")?,
            dh: size(g.dilation[0], "dilation")?,
            dw: size(g.dilation[1], "dilation")?,
        })
    }

    /// Output columns `lo..hi` whose every window column lies inside the input row.
    fn interior(&self) -> (usize, usize) {
        super::conv_blocked::interior_columns(self.w, self.pw, self.kw, self.sw, self.dw, self.ow)
    }
}

/// `out = max_pool2d(x)` with `x` of shape `shape` (`[C, H, W]` or `[N, C, H, W]`) and the op's
/// attributes.
pub fn max_pool2d(
    attrs: &Attrs,
    x: &[f32],
    shape: &[usize],
    out: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    let pg = pool_geom(OpKind::MaxPool2d, attrs).map_err(|e| KernelError::Shape(format!("max_pool2d: {e}")))?;
    let r = shape.len();
    if !(3..=4).contains(&r) {
        return Err(KernelError::Shape(format!("max_pool2d input of shape {shape:?}")));
    }
    let g = Geom::new(&pg, shape[r - 2], shape[r - 1])?;
    let planes = shape[..r - 2].iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let numel = planes.and_then(|p| p.checked_mul(g.h)).and_then(|p| p.checked_mul(g.w));
    let want = planes.and_then(|p| p.checked_mul(g.oh)).and_then(|p| p.checked_mul(g.ow));
    let (Some(numel), Some(want)) = (numel, want) else {
        return Err(KernelError::Shape(format!("max_pool2d input of shape {shape:?} overflows")));
    };
    KernelError::check_len("x", x.len(), numel)?;
    KernelError::check_len("out", out.len(), want)?;
    if want == 0 {
        return Ok(());
    }
    // Output rows, each `ow` long: `planes * oh` of them, split into tasks of whole rows.
    let rows = want / g.ow;
    let tasks = if threads > 1 && want >= PAR_OUTPUTS { (4 * threads).min(rows) } else { 1 };
    let per = rows.div_ceil(tasks);
    let run = |(t, dst): (usize, &mut [f32])| {
        let mut tmp = vec![0f32; g.w];
        rows_any(&g, x, t * per, dst, &mut tmp);
    };
    if tasks > 1 {
        out.par_chunks_mut(per * g.ow).enumerate().for_each(run);
    } else {
        run((0, out));
    }
    Ok(())
}

/// A `max_pool2d` over an `h × w` plane whose windows neither overlap nor skip rows (kernel
/// height equal to the stride, no padding or dilation down the rows, floor mode): output row
/// `i` reads input rows `i·kh..(i + 1)·kh` alone, so a producer can pool each band of `kh`
/// rows as soon as it has them (the blocked convolution with a folded pooling). Along the
/// row, any window. The same loops as [`max_pool2d`]: the same bits.
#[derive(Clone, Copy, Debug)]
pub struct RowPool {
    /// The geometry of one band: `h = kh` rows giving one output row.
    band: Geom,
    out_rows: usize,
}

impl RowPool {
    /// The pooling `attrs` over planes of `h × w`, or `None` where its windows are not bands.
    pub fn new(attrs: &Attrs, h: usize, w: usize) -> Result<Option<RowPool>, KernelError> {
        let pg = pool_geom(OpKind::MaxPool2d, attrs).map_err(|e| KernelError::Shape(format!("max_pool2d: {e}")))?;
        if pg.kernel[0] != pg.stride[0] || pg.padding[0] != 0 || pg.dilation[0] != 1 || pg.ceil_mode {
            return Ok(None);
        }
        let whole = Geom::new(&pg, h, w)?;
        let band = Geom::new(&pg, whole.kh, w)?;
        Ok(Some(RowPool { band, out_rows: whole.oh }))
    }

    /// Input rows per output row.
    pub fn band(&self) -> usize {
        self.band.kh
    }

    /// Output rows of a plane.
    pub fn out_rows(&self) -> usize {
        self.out_rows
    }

    /// Output columns.
    pub fn out_cols(&self) -> usize {
        self.band.ow
    }

    /// Input columns.
    pub fn in_cols(&self) -> usize {
        self.band.w
    }

    /// The window's columns: `(kernel, stride, padding on the left, dilation)`.
    pub fn columns(&self) -> (usize, usize, usize, usize) {
        (self.band.kw, self.band.sw, self.band.pw, self.band.dw)
    }

    /// `k` output rows of each of `planes` planes into `dst` (`[planes, k, out_cols()]`) from
    /// `x`, their windows' input rows (`[planes, k·band(), in_cols()]`); `tmp` holds
    /// `in_cols()` elements.
    pub fn rows(&self, k: usize, planes: usize, x: &[f32], dst: &mut [f32], tmp: &mut [f32]) {
        let g = Geom { h: k * self.band.kh, oh: k, ..self.band };
        assert!(x.len() == planes * g.h * g.w && dst.len() == planes * k * g.ow && tmp.len() == g.w);
        rows_any(&g, x, 0, dst, tmp);
    }
}

/// Output rows `first..` (as many as `dst` holds) on the best path the ISA cap allows.
fn rows_any(g: &Geom, x: &[f32], first: usize, dst: &mut [f32], tmp: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if super::has_avx512() {
            // SAFETY: the CPU has every feature the variant is compiled for (checked just above).
            return unsafe { rows_generic(g, x, first, dst, tmp, x86::Avx512) };
        }
        if super::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { rows_generic(g, x, first, dst, tmp, x86::Avx2) };
        }
    }
    // SAFETY: the portable path needs no CPU feature.
    unsafe { rows_generic(g, x, first, dst, tmp, Portable) }
}

/// The two loops of an output row, per instruction set.
trait Path: Copy {
    /// `dst[i] = pmax(a[i], b[i])` for `i` in `0..n`.
    ///
    /// # Safety
    /// The CPU has the path's features; `a` and `b` are valid for `n` reads and `dst` for `n`
    /// writes, and `dst` overlaps neither or is `a` (each lane is read before it is written).
    unsafe fn max_into(self, dst: *mut f32, a: *const f32, b: *const f32, n: usize);

    /// Outputs `lo..hi` of a row, all inside (see [`Geom::interior`]), from the row maximum
    /// `src`, for column strides 1 and 2; `false` (nothing written) for other strides.
    ///
    /// # Safety
    /// The CPU has the path's features.
    unsafe fn interior(self, g: &Geom, src: &[f32], out: &mut [f32], lo: usize, hi: usize) -> bool;

    /// `out[j] = max(a[2j], a[2j + 1], b[2j], b[2j + 1])` for every `j` of `out`: a 2×2,
    /// stride-2 window's interior straight from its two input rows; `false` (nothing written)
    /// where the path has no such loop.
    ///
    /// # Safety
    /// The CPU has the path's features; `a` and `b` hold at least `2 out.len()` elements.
    unsafe fn pairs(self, _out: &mut [f32], _a: &[f32], _b: &[f32]) -> bool {
        false
    }
}

/// Plain loops (NEON on aarch64, where the compiler vectorizes `max_into`).
#[derive(Clone, Copy)]
struct Portable;

impl Path for Portable {
    unsafe fn max_into(self, dst: *mut f32, a: *const f32, b: *const f32, n: usize) {
        for i in 0..n {
            // SAFETY: as the caller promised.
            unsafe { *dst.add(i) = pmax(*a.add(i), *b.add(i)) };
        }
    }

    unsafe fn interior(self, _: &Geom, _: &[f32], _: &mut [f32], _: usize, _: usize) -> bool {
        false
    }

    unsafe fn pairs(self, out: &mut [f32], a: &[f32], b: &[f32]) -> bool {
        for (o, (a, b)) in out.iter_mut().zip(a.chunks_exact(2).zip(b.chunks_exact(2))) {
            *o = pmax(pmax(a[0], a[1]), pmax(b[0], b[1]));
        }
        true
    }
}

/// The op's `max` on f32: NaN if either is NaN (the canonical NaN), -0 < +0. Masks rather
/// than branches (the comparisons of pooled data are unpredictable), so loops over it
/// vectorize and scalar code does not mispredict.
#[inline(always)]
fn pmax(a: f32, b: f32) -> f32 {
    let all = |c: bool| 0u32.wrapping_sub(c as u32);
    let (x, y) = (a.to_bits(), b.to_bits());
    let (ga, gb) = (all(a > b), all(b > a));
    // Equal (the bits differ only for ±0, and +0 wins: AND) or unordered (replaced below).
    let m = (x & ga) | (y & gb) | (x & y & !(ga | gb));
    let nan = all(a.is_nan() | b.is_nan());
    f32::from_bits((m & !nan) | (f32::NAN.to_bits() & nan))
}

/// Output rows `first..first + dst.len() / ow` (row `q` is plane `q / oh`, output row `q % oh`).
///
/// # Safety
/// The CPU has `path`'s features.
#[inline(always)]
unsafe fn rows_generic<P: Path>(g: &Geom, x: &[f32], first: usize, dst: &mut [f32], tmp: &mut [f32], path: P) {
    let (plane_len, (lo, hi)) = (g.h * g.w, g.interior());
    for (k, out_row) in dst.chunks_exact_mut(g.ow).enumerate() {
        let q = first + k;
        let (p, i) = (q / g.oh, q % g.oh);
        let plane = &x[p * plane_len..][..plane_len];
        // The kernel's rows inside the input, `count` of them: kernel row `a` reads input row
        // `top + a dh - ph`, inside for `a` in `a0..a1` (at least one, unless the input has
        // no rows: padding is at most half the kernel).
        let top = i * g.sh;
        let a0 = if top >= g.ph { 0 } else { (g.ph - top).div_ceil(g.dh) };
        let a1 = (g.h + g.ph).saturating_sub(top).div_ceil(g.dh).min(g.kh);
        let count = a1.saturating_sub(a0);
        let y = |k: usize| top + (a0 + k) * g.dh - g.ph;
        if count == 2 && g.kw == 2 && g.sw == 2 && g.dw == 1 && hi > lo {
            let (y0, y1) = (y(0), y(1));
            // The common 2×2, stride-2 pooling: no row maximum in between.
            let from = 2 * lo - g.pw;
            let n = (hi - lo).min((g.w - from) / 2);
            let (a, b) = (&plane[y0 * g.w + from..][..2 * n], &plane[y1 * g.w + from..][..2 * n]);
            // SAFETY: as the caller promised; `a` and `b` hold `2 n` elements.
            if unsafe { path.pairs(&mut out_row[lo..lo + n], a, b) } {
                if lo + n < g.ow || lo > 0 {
                    let t = &mut tmp[..g.w];
                    t.copy_from_slice(&plane[y0 * g.w..][..g.w]);
                    for (d, &v) in t.iter_mut().zip(&plane[y1 * g.w..][..g.w]) {
                        *d = pmax(*d, v);
                    }
                    columns(g, t, out_row, (lo, lo + n));
                }
                continue;
            }
        }
        if g.kw == 1 && g.sw == 1 && g.pw == 0 {
            // Windows one column wide: the row maximum is the output row.
            let row = |y: usize| plane[y * g.w..][..g.w].as_ptr();
            let (o, w) = (out_row.as_mut_ptr(), g.w);
            assert!(out_row.len() == w);
            // SAFETY: as the caller promised; every row and the output row hold `w` elements,
            // and the output is disjoint from the input, or (after the first) the first
            // operand. A lone row is `max`ed with itself: a NaN leaves canonical.
            unsafe {
                match count {
                    0 => out_row.fill(f32::NEG_INFINITY),
                    1 => path.max_into(o, row(y(0)), row(y(0)), w),
                    _ => {
                        path.max_into(o, row(y(0)), row(y(1)), w);
                        for k in 2..count {
                            path.max_into(o, o, row(y(k)), w);
                        }
                    }
                }
            }
            continue;
        }
        let src: &[f32] = match count {
            0 => {
                out_row.fill(f32::NEG_INFINITY);
                continue;
            }
            1 => &plane[y(0) * g.w..][..g.w],
            _ => {
                let row = |y: usize| plane[y * g.w..][..g.w].as_ptr();
                let (t, w) = (tmp.as_mut_ptr(), g.w);
                assert!(tmp.len() == w);
                // SAFETY: as the caller promised; every row and `tmp` hold `w` elements, and
                // `tmp` is disjoint from the input, or (after the first) the first operand.
                unsafe {
                    path.max_into(t, row(y(0)), row(y(1)), w);
                    for k in 2..count {
                        path.max_into(t, t, row(y(k)), w);
                    }
                }
                tmp
            }
        };
        // SAFETY: as the caller promised.
        let done = hi > lo && unsafe { path.interior(g, src, out_row, lo, hi) };
        columns(g, src, out_row, if done { (lo, hi) } else { (lo, lo) });
    }
}

/// The outputs of a row outside `skip` (the interior a vector path computed), one at a time.
#[inline(always)]
fn columns(g: &Geom, src: &[f32], out: &mut [f32], skip: (usize, usize)) {
    for j in (0..skip.0).chain(skip.1..g.ow) {
        let mut acc = f32::NEG_INFINITY;
        for b in 0..g.kw {
            if let Some(z) = (j * g.sw + b * g.dw).checked_sub(g.pw).filter(|&z| z < g.w) {
                acc = pmax(acc, src[z]);
            }
        }
        out[j] = acc;
    }
}

/// The x86 paths: the row maximum a vector at a time, and the interior's outputs a vector at
/// a time with every kernel column's reads in registers (stride 2 deinterleaves two loads),
/// the last vector masked to the outputs and elements it has (masked-off lanes are not
/// read).
/// The op's `max` on 16 lanes (AVX-512), for kernels that pool in registers.
#[cfg(target_arch = "x86_64")]
pub(super) use x86::{max16 as max16_avx512, max8 as max8_avx2};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::low_bits as bits;
    use super::{Geom, Path};

    #[derive(Clone, Copy)]
    pub(super) struct Avx512;

    /// The op's `max` on 16 lanes: both orders of `vmaxps` (which returns its second operand
    /// for equal or unordered inputs) ANDed, so +0 beats -0; unordered lanes the canonical NaN.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    pub(in super::super) fn max16(a: __m512, b: __m512) -> __m512 {
        let m = _mm512_and_ps(_mm512_max_ps(a, b), _mm512_max_ps(b, a));
        _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b), _mm512_set1_ps(f32::NAN))
    }

    impl Path for Avx512 {
        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn max_into(self, d: *mut f32, a: *const f32, b: *const f32, n: usize) {
            let mut i = 0;
            while i + 16 <= n {
                // SAFETY: lanes `i..i + 16`, in bounds (the caller's contract).
                unsafe { _mm512_storeu_ps(d.add(i), max16(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)))) };
                i += 16;
            }
            if i < n {
                let m = bits(n - i) as u16;
                // SAFETY: lanes `i..n`, in bounds; the rest masked off.
                unsafe {
                    let v = max16(_mm512_maskz_loadu_ps(m, a.add(i)), _mm512_maskz_loadu_ps(m, b.add(i)));
                    _mm512_mask_storeu_ps(d.add(i), m, v);
                }
            }
        }

        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn interior(self, g: &Geom, src: &[f32], out: &mut [f32], lo: usize, hi: usize) -> bool {
            let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let sw = g.sw;
            if sw != 1 && sw != 2 || hi > out.len() {
                return false;
            }
            let mut j = lo;
            while j < hi {
                let n = (hi - j).min(16);
                let mut acc = _mm512_setzero_ps();
                for b in 0..g.kw {
                    // Inside the row for every output of the interior (its definition):
                    // elements `start..start + (n - 1) sw + 1`.
                    let start = j * sw + b * g.dw - g.pw;
                    let span = (n - 1) * sw + 1;
                    assert!(start + span <= src.len());
                    let p = src.as_ptr().add(start);
                    let m = bits(span);
                    // SAFETY: only the masked-in elements are read, all inside `src`.
                    let v = unsafe {
                        if n == 16 && start + 16 * sw <= src.len() {
                            let a = _mm512_loadu_ps(p);
                            if sw == 1 {
                                a
                            } else {
                                _mm512_permutex2var_ps(a, evens, _mm512_loadu_ps(p.add(16)))
                            }
                        } else if sw == 1 {
                            _mm512_maskz_loadu_ps(m as u16, p)
                        } else {
                            let a = _mm512_maskz_loadu_ps(m as u16, p);
                            let c = _mm512_maskz_loadu_ps((m >> 16) as u16, p.wrapping_add(16));
                            _mm512_permutex2var_ps(a, evens, c)
                        }
                    };
                    acc = if b == 0 { v } else { max16(acc, v) };
                }
                if g.kw == 1 {
                    // A NaN leaves as the canonical NaN, as from a `max`.
                    acc = max16(acc, acc);
                }
                // SAFETY: outputs `j..j + n` lie inside `out` (`hi <= out.len()`).
                unsafe {
                    if n == 16 {
                        _mm512_storeu_ps(out.as_mut_ptr().add(j), acc)
                    } else {
                        _mm512_mask_storeu_ps(out.as_mut_ptr().add(j), bits(n) as u16, acc)
                    }
                };
                j += n;
            }
            true
        }

        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn pairs(self, out: &mut [f32], a: &[f32], b: &[f32]) -> bool {
            let n = out.len();
            assert!(a.len() >= 2 * n && b.len() >= 2 * n);
            let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
            let mut j = 0;
            while j + 16 <= n {
                // SAFETY: elements `2j..2j + 32` of each row and outputs `j..j + 16`, in bounds.
                unsafe {
                    let ld = |p: *const f32| [_mm512_loadu_ps(p.add(2 * j)), _mm512_loadu_ps(p.add(2 * j + 16))];
                    _mm512_storeu_ps(po.add(j), pairs16(ld(pa), ld(pb)));
                }
                j += 16;
            }
            if j < n {
                let m = bits(2 * (n - j));
                // SAFETY: the masked-in elements and outputs are in bounds; the rest are not read.
                unsafe {
                    let ld = |p: *const f32| {
                        [
                            _mm512_maskz_loadu_ps(m as u16, p.add(2 * j)),
                            _mm512_maskz_loadu_ps((m >> 16) as u16, p.wrapping_add(2 * j + 16)),
                        ]
                    };
                    _mm512_mask_storeu_ps(po.add(j), bits(n - j) as u16, pairs16(ld(pa), ld(pb)));
                }
            }
            true
        }
    }

    /// Sixteen outputs of [`Path::pairs`] from 32 elements of each row.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    fn pairs16(a: [__m512; 2], b: [__m512; 2]) -> __m512 {
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let (lo, hi) = (max16(a[0], b[0]), max16(a[1], b[1]));
        max16(_mm512_permutex2var_ps(lo, evens, hi), _mm512_permutex2var_ps(lo, odds, hi))
    }

    #[derive(Clone, Copy)]
    pub(super) struct Avx2;

    /// [`max16`] on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in super::super) fn max8(a: __m256, b: __m256) -> __m256 {
        let m = _mm256_and_ps(_mm256_max_ps(a, b), _mm256_max_ps(b, a));
        _mm256_blendv_ps(m, _mm256_set1_ps(f32::NAN), _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b))
    }

    /// A mask for `_mm256_maskload_ps` with the first `n` lanes (at most 8) set.
    #[inline(always)]
    unsafe fn first(n: usize) -> __m256i {
        const ONES: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
        // SAFETY: `8 - min(n, 8)` keeps the 8 lanes read inside the table.
        unsafe { _mm256_loadu_si256(ONES.as_ptr().add(8 - n.min(8)) as *const __m256i) }
    }

    impl Path for Avx2 {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn max_into(self, d: *mut f32, a: *const f32, b: *const f32, n: usize) {
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: lanes `i..i + 8`, in bounds (the caller's contract).
                unsafe { _mm256_storeu_ps(d.add(i), max8(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)))) };
                i += 8;
            }
            if i < n {
                // SAFETY: lanes `i..n`, in bounds; the rest masked off.
                unsafe {
                    let m = first(n - i);
                    let v = max8(_mm256_maskload_ps(a.add(i), m), _mm256_maskload_ps(b.add(i), m));
                    _mm256_maskstore_ps(d.add(i), m, v);
                }
            }
        }

        #[target_feature(enable = "avx2,fma")]
        unsafe fn pairs(self, out: &mut [f32], a: &[f32], b: &[f32]) -> bool {
            let n = out.len();
            assert!(a.len() >= 2 * n && b.len() >= 2 * n);
            let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
            let mut j = 0;
            while j + 8 <= n {
                // SAFETY: elements `2j..2j + 16` of each row and outputs `j..j + 8`, in bounds.
                unsafe {
                    let lo = max8(_mm256_loadu_ps(pa.add(2 * j)), _mm256_loadu_ps(pb.add(2 * j)));
                    let hi = max8(_mm256_loadu_ps(pa.add(2 * j + 8)), _mm256_loadu_ps(pb.add(2 * j + 8)));
                    // [l0 l2 h0 h2 | l4 l6 h4 h6] -> [l0 l2 l4 l6 h0 h2 h4 h6], and the odds.
                    let order =
                        |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
                    let evens = order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi));
                    let odds = order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi));
                    _mm256_storeu_ps(po.add(j), max8(evens, odds));
                }
                j += 8;
            }
            for j in j..n {
                out[j] = super::pmax(super::pmax(a[2 * j], a[2 * j + 1]), super::pmax(b[2 * j], b[2 * j + 1]));
            }
            true
        }

        #[target_feature(enable = "avx2,fma")]
        unsafe fn interior(self, g: &Geom, src: &[f32], out: &mut [f32], lo: usize, hi: usize) -> bool {
            let sw = g.sw;
            if sw != 1 && sw != 2 || hi > out.len() {
                return false;
            }
            let mut j = lo;
            while j < hi {
                let n = (hi - j).min(8);
                let mut acc = _mm256_setzero_ps();
                for b in 0..g.kw {
                    let start = j * sw + b * g.dw - g.pw;
                    let span = (n - 1) * sw + 1;
                    assert!(start + span <= src.len());
                    let p = src.as_ptr().add(start);
                    // SAFETY: only the masked-in elements are read, all inside `src`.
                    let v = unsafe {
                        let full = n == 8 && start + 8 * sw <= src.len();
                        if sw == 1 {
                            if full {
                                _mm256_loadu_ps(p)
                            } else {
                                _mm256_maskload_ps(p, first(span))
                            }
                        } else {
                            let (a, c) = if full {
                                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                            } else {
                                (
                                    _mm256_maskload_ps(p, first(span)),
                                    _mm256_maskload_ps(p.wrapping_add(8), first(span.saturating_sub(8))),
                                )
                            };
                            // [a0 a2 c0 c2 | a4 a6 c4 c6] -> [a0 a2 a4 a6 c0 c2 c4 c6].
                            let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, c);
                            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(e)))
                        }
                    };
                    acc = if b == 0 { v } else { max8(acc, v) };
                }
                if g.kw == 1 {
                    // A NaN leaves as the canonical NaN, as from a `max`.
                    acc = max8(acc, acc);
                }
                // SAFETY: outputs `j..j + n` lie inside `out` (`hi <= out.len()`).
                unsafe {
                    if n == 8 {
                        _mm256_storeu_ps(out.as_mut_ptr().add(j), acc)
                    } else {
                        _mm256_maskstore_ps(out.as_mut_ptr().add(j), first(n), acc)
                    }
                };
                j += n;
            }
            true
        }
    }
}
