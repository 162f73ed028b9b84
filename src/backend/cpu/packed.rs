//! ladder's own f32 GEMM for a right operand known when the plan is built (a weight): the
//! weight is packed once, at compile time, into column panels, and every run multiplies
//! against the packed copy. The `gemm` crate packs both operands on every call; on the
//! transformer shapes ladder runs (`[128, 256] x [256, 768]` and the like) that costs
//! 8–10% of the product, and this kernel runs within 2–3% of the machine's FMA peak there.
//!
//! **Layout.** [`PackedB`] holds `B[k, n]` in blocks of [`KC`] rows (the last one shorter),
//! one after the other; a block holds `ceil(n / NR)` panels of [`NR`] columns, and a panel
//! is the block's `kc` rows of `NR` contiguous values (`B[p, j*NR .. j*NR + NR]`), the last
//! panel zero-padded. So the panels one `k` block of a tile needs are one contiguous run,
//! which the hardware prefetchers stream. A micro-kernel step loads one row of a panel (two
//! 512-bit vectors) and broadcasts one element of each of `MR` rows of `A`, for `2 * MR`
//! fused multiply-adds.
//!
//! **Blocking.** A call computes one output tile (rows x cols, `cols` starting at a panel
//! boundary): for each block of [`KC`] values of `k`, for each panel, for each group of
//! [`MR`] rows. A panel block (`KC x NR`, 128 KiB) stays in L2 while every row group of the
//! tile streams it through L1, as do the tile's rows of `A` (`rows x KC`). The caller bounds
//! `rows`. (Blocks of 256 values of `k`, whose panel blocks fit L1, measured faster on a
//! product alone but slower in W4, where the partial sums go back and forth 4 or 16 times.)
//!
//! **Numerics.** Each output element is one chain of fused multiply-adds over `k` in order,
//! starting from +0: the same value however the output is tiled or threaded, and within one
//! rounding per step of the interpreter's own order (which rounds `acc + a*b` from f64).
//! NaN and ±inf propagate as IEEE arithmetic does (`0 * inf` is NaN).
//!
//! **The x86-64 baseline** (SSE4.1, no AVX2 or FMA: the Atom and Celeron cores of many edge
//! boxes), where the `gemm` crate has only scalar code: [`sse`] walks the same panels 8
//! columns (two 128-bit vectors) at a time by 6 rows, 12 accumulators, each step a multiply
//! and an add (the level has no fused multiply-add: two roundings per term, as the `gemm`
//! crate's code there), over 256 values of `k` at a time so that the panel slice stays in
//! L1. There every f32 product goes through it: a weight packed when the plan is built, any
//! other right operand packed per call into a buffer the thread keeps ([`baseline_gemm`]).
//!
//! The kernels need AVX-512F, or x86-64 at the baseline level without AVX2; [`PackedB::new`]
//! returns `None` elsewhere (AVX2, aarch64, the portable level) and the caller keeps the
//! `gemm` crate.

/// Columns per panel: two 512-bit vectors of f32.
pub const NR: usize = 32;
/// Rows of `A` per micro-kernel call: 24 accumulators, with 2 panel vectors and a broadcast,
/// in 27 of the 32 vector registers. Against 8 rows (16 accumulators), each panel row loaded
/// from L2 feeds 24 fused multiply-adds instead of 16: W4 at one thread 18.5 -> 17.6 ms, at
/// two 9.3 -> 9.0 (medians of three alternating runs).
pub const MR: usize = 12;
/// Values of `k` per block (a `KC x NR` panel block is 128 KiB).
pub const KC: usize = 1024;
/// Columns per block: the partial sums of up to 128 rows (256 KiB) stay in L2 between
/// `k` blocks.
pub const NC: usize = 16 * NR;
/// How many panels ahead the kernel prefetches: a weight too large for the caches streams
/// from memory without stalling the first row group of each panel.
#[cfg(target_arch = "x86_64")]
const PREFETCH_PANELS: usize = 2;

/// A `[k, n]` f32 matrix packed into [`NR`]-column panels (see the module docs).
#[derive(Clone, PartialEq)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB {{ k: {}, n: {}, bytes: {} }}", self.k, self.n, self.bytes())
    }
}

impl PackedB {
    /// Whether this machine runs the packed kernel.
    pub fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            super::has_avx512() || baseline()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Packs `B[p, j] = b[p * rs + j * cs]` for `p < k`, `j < n`. `None` when the machine
    /// lacks the kernel, when `b` is too short for the strides, or when `k` or `n` is 0.
    pub fn new(b: &[f32], k: usize, n: usize, rs: usize, cs: usize) -> Option<PackedB> {
        if !PackedB::available() || k == 0 || n == 0 {
            return None;
        }
        let last = (k - 1).checked_mul(rs)?.checked_add((n - 1).checked_mul(cs)?)?;
        if last >= b.len() {
            return None;
        }
        let width = n.div_ceil(NR) * NR;
        // At most `b.len() + k * (NR - 1)` values: bounded by the constant being packed.
        let mut data = vec![0.0f32; width.checked_mul(k)?];
        // SAFETY: every element addressed is at most `last < b.len()` past `b`'s start.
        unsafe { pack(&mut data, b.as_ptr(), k, n, rs, cs) };
        Some(PackedB { k, n, data })
    }

    /// The right operand of a `matmul` of `b` (shape `shape`, transposed with `transpose`)
    /// packed, when it is one matrix (leading dims all 1): `b[k, n]`, or `b[n, k]` read
    /// transposed. `None` as for [`PackedB::new`], or for a batch of matrices.
    pub fn matmul_operand(b: &[f32], shape: &[usize], transpose: bool) -> Option<PackedB> {
        let rank = shape.len();
        if rank < 2 || shape[..rank - 2].iter().any(|&d| d != 1) {
            return None;
        }
        let (r, c) = (shape[rank - 2], shape[rank - 1]);
        let (k, n, rs, cs) = if transpose { (c, r, 1, c) } else { (r, c, c, 1) };
        PackedB::new(b, k, n, rs, cs)
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held by the packed copy.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    /// `C[i, j] = Σ_p A[i, p] B[p, col0 + j]` for `i < rows`, `j < cols`, where
    /// `A[i, p] = a[i * a_rs + p * a_cs]` and `C[i, j] = c[i * ldc + j]`.
    ///
    /// # Safety
    /// `col0` is a multiple of [`NR`] and `col0 + cols <= n`; every `A` element addressed
    /// (`i < rows`, `p < k`) and every `C` element addressed is in bounds, and `c` does not
    /// overlap `a` or `self`. The machine has the kernel ([`PackedB::available`]), as it does
    /// whenever a `PackedB` exists.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn tile(
        &self,
        rows: usize,
        cols: usize,
        col0: usize,
        a: *const f32,
        a_rs: usize,
        a_cs: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        debug_assert!(col0.is_multiple_of(NR) && col0 + cols <= self.n);
        #[cfg(target_arch = "x86_64")]
        if super::has_avx512() {
            avx512::tile(self, rows, cols, col0, a, a_rs, a_cs, c, ldc);
        } else {
            sse::tile(self, rows, cols, col0, a, a_rs, a_cs, c, ldc, false);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            // Unreachable: `new` packs nothing off x86-64. A plain loop keeps this total.
            for i in 0..rows {
                for j in 0..cols {
                    let (jp, jc) = ((col0 + j) / NR, (col0 + j) % NR);
                    let mut acc = 0.0f32;
                    for p in 0..self.k {
                        acc = (*a.add(i * a_rs + p * a_cs)).mul_add(self.data[(jp * self.k + p) * NR + jc], acc);
                    }
                    *c.add(i * ldc + j) = acc;
                }
            }
        }
    }
}

/// `B[p, j] = b[p * rs + j * cs]` (`p < k`, `j < n`) into `data`, `ceil(n / NR) * NR * k`
/// values laid out as [`PackedB`]'s (the padding columns 0).
///
/// # Safety
/// Every element addressed is in bounds.
unsafe fn pack(data: &mut [f32], b: *const f32, k: usize, n: usize, rs: usize, cs: usize) {
    let width = n.div_ceil(NR) * NR;
    for (kb, block) in data[..width * k].chunks_mut(KC * width).enumerate() {
        let kc = block.len() / width;
        for (jp, panel) in block.chunks_exact_mut(kc * NR).enumerate() {
            let cols = NR.min(n - jp * NR);
            for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
                let at = b.add((kb * KC + p) * rs + jp * NR * cs);
                if cs == 1 {
                    row[..cols].copy_from_slice(std::slice::from_raw_parts(at, cols));
                } else {
                    for (c, v) in row[..cols].iter_mut().enumerate() {
                        *v = *at.add(c * cs);
                    }
                }
                row[cols..].fill(0.0);
            }
        }
    }
}

/// Whether this machine runs x86-64 at the baseline level without AVX2 (under the ISA cap),
/// where every f32 product goes through ladder's own SSE kernel ([`baseline_gemm`]).
pub fn baseline() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !super::has_avx2() && super::isa::active() >= super::isa::Isa::Baseline
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `C[i, j] = scale Σ_p A[i, p] B[p, j]` for `g`'s `m x n` over `k` (with `accumulate`,
/// added to `C`'s values, and `scale` 1), through [`sse`] with `B` packed into a buffer each
/// thread keeps between calls (grown to the largest operand it has packed); with `threads`
/// above 1, column ranges of whole panels on rayon workers. `false`, having done nothing, off
/// the x86-64 baseline level or for `scale != 1` with `accumulate`.
///
/// # Safety
/// As `super::gemm::Element::gemm`: every element addressed is in bounds; `c` does not
/// overlap `a` or `b`.
pub(crate) unsafe fn baseline_gemm(
    g: &super::gemm::Gemm2d,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    scale: f32,
    accumulate: bool,
    threads: usize,
) -> bool {
    if !baseline() || g.k == 0 || g.n == 0 || (accumulate && scale != 1.0) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    gemm_sse(g, a, b, c, scale, accumulate, threads);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (a, b, c, threads);
    true
}

/// [`baseline_gemm`] at any level (x86-64 always has SSE2): `k > 0`, `n > 0`, and `scale` 1
/// where `accumulate`.
///
/// # Safety
/// As [`baseline_gemm`].
#[cfg(target_arch = "x86_64")]
unsafe fn gemm_sse(
    g: &super::gemm::Gemm2d,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    scale: f32,
    accumulate: bool,
    threads: usize,
) {
    let parts = threads.min(g.n / NR);
    if parts > 1 {
        use rayon::prelude::*;
        let per = g.n.div_ceil(parts).next_multiple_of(NR);
        // Addresses as integers, to cross to the workers; the column ranges are disjoint.
        let (a, b, c) = (a as usize, b as usize, c as usize);
        (0..g.n.div_ceil(per)).into_par_iter().for_each(|p| {
            let j0 = p * per;
            let sub = super::gemm::Gemm2d { n: per.min(g.n - j0), ..*g };
            let (bj, cj) = ((b as *const f32).add(j0 * g.b_cs), (c as *mut f32).add(j0));
            // SAFETY: columns `j0..j0 + sub.n` of the caller's operands.
            unsafe { baseline_gemm_here(&sub, a as *const f32, bj, cj, scale, accumulate) };
        });
    } else {
        baseline_gemm_here(g, a, b, c, scale, accumulate);
    }
}

/// [`baseline_gemm`] on this thread, at the baseline level.
///
/// # Safety
/// As [`baseline_gemm`].
#[cfg(target_arch = "x86_64")]
unsafe fn baseline_gemm_here(
    g: &super::gemm::Gemm2d,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    scale: f32,
    accumulate: bool,
) {
    thread_local! {
        static PACKED: std::cell::RefCell<PackedB> = const {
            std::cell::RefCell::new(PackedB { k: 0, n: 0, data: Vec::new() })
        };
    }
    let run = |pb: &mut PackedB| {
        let len = g.n.div_ceil(NR) * NR * g.k;
        if pb.data.len() < len {
            pb.data.resize(len, 0.0);
        }
        pack(&mut pb.data, b, g.k, g.n, g.b_rs, g.b_cs);
        (pb.k, pb.n) = (g.k, g.n);
        sse::tile(pb, g.m, g.n, 0, a, g.a_rs, g.a_cs, c, g.ldc, accumulate);
        if scale != 1.0 {
            for i in 0..g.m {
                for v in std::slice::from_raw_parts_mut(c.add(i * g.ldc), g.n) {
                    *v *= scale;
                }
            }
        }
    };
    PACKED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut pb) => run(&mut pb),
        // Re-entered on this thread (a worker running another range while it waits): a
        // buffer of its own.
        Err(_) => run(&mut PackedB { k: 0, n: 0, data: Vec::new() }),
    });
}

/// The loops the kernels share over a tile of `cols` columns from `col0`: each block of
/// [`NC`] columns, each block of [`KC`] values of `k` in it, each panel of the block:
/// `f(panel, j, p0, kc)`, `panel` the panel's first value of the `k` block `p0..p0 + kc` and
/// `j` its first column in the tile.
///
/// # Safety
/// `col0 + cols <= pb.n`, `col0` a multiple of [`NR`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn panels(pb: &PackedB, cols: usize, col0: usize, mut f: impl FnMut(*const f32, usize, usize, usize)) {
    let (k, width) = (pb.k, pb.n.div_ceil(NR) * NR);
    for jc in (0..cols).step_by(NC) {
        let jend = cols.min(jc + NC);
        let mut p0 = 0;
        while p0 < k {
            let kc = KC.min(k - p0);
            for j in (jc..jend).step_by(NR) {
                f(pb.data.as_ptr().add(p0 * width + (col0 + j) / NR * kc * NR), j, p0, kc);
            }
            p0 += kc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{PackedB, MR, NR, PREFETCH_PANELS};

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn tile(
        pb: &PackedB,
        rows: usize,
        cols: usize,
        col0: usize,
        a: *const f32,
        a_rs: usize,
        a_cs: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        // Each panel of each column block: every row group over `k` values p0..p0+kc.
        super::panels(pb, cols, col0, |panel, j, p0, kc| {
            let first = p0 == 0;
            let a0 = a.wrapping_add(p0 * a_cs);
            let w = NR.min(cols - j);
            let mask = if w == NR { u32::MAX } else { (1u32 << w) - 1 };
            let (m0, m1) = (mask as u16, (mask >> 16) as u16);
            let c0 = c.wrapping_add(j);
            // The first row group prefetches a later panel into L2 (a hint: it never
            // faults, even past the end).
            let ahead = panel.wrapping_add(PREFETCH_PANELS * kc * NR);
            let mut i = 0;
            while i + MR <= rows {
                let pf = if i == 0 { ahead } else { std::ptr::null() };
                let (ai, ci) = (a0.wrapping_add(i * a_rs), c0.wrapping_add(i * ldc));
                micro::<MR>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1);
                i += MR;
            }
            let pf = if i == 0 { ahead } else { std::ptr::null() };
            let (ai, ci) = (a0.wrapping_add(i * a_rs), c0.wrapping_add(i * ldc));
            match rows - i {
                0 => {}
                1 => micro::<1>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                2 => micro::<2>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                3 => micro::<3>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                4 => micro::<4>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                5 => micro::<5>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                6 => micro::<6>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                7 => micro::<7>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                8 => micro::<8>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                9 => micro::<9>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                10 => micro::<10>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
                _ => micro::<11>(kc, ai, a_rs, a_cs, panel, pf, ci, ldc, first, m0, m1),
            }
        });
    }

    /// `R` rows by one panel over `kc` values of `k`: starts from zero (`first`) or from the
    /// stored partial sums, and stores the columns selected by `m0` (first 16) and `m1`
    /// (next 16). Masked lanes are neither loaded nor stored. A non-null `prefetch` is the
    /// panel block to bring into L2 meanwhile.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn micro<const R: usize>(
        kc: usize,
        a: *const f32,
        a_rs: usize,
        a_cs: usize,
        panel: *const f32,
        prefetch: *const f32,
        c: *mut f32,
        ldc: usize,
        first: bool,
        m0: u16,
        m1: u16,
    ) {
        let mut acc0 = [_mm512_setzero_ps(); R];
        let mut acc1 = [_mm512_setzero_ps(); R];
        if !first {
            for r in 0..R {
                let row = c.wrapping_add(r * ldc);
                acc0[r] = _mm512_maskz_loadu_ps(m0, row);
                acc1[r] = _mm512_maskz_loadu_ps(m1, row.wrapping_add(16));
            }
        }
        let (mut b, mut ap) = (panel, a);
        for step in 0..kc {
            if !prefetch.is_null() {
                // One panel row (two cache lines) per step: the whole panel block.
                let line = prefetch.wrapping_add(step * NR) as *const i8;
                _mm_prefetch::<_MM_HINT_T1>(line);
                _mm_prefetch::<_MM_HINT_T1>(line.wrapping_add(64));
            }
            let b0 = _mm512_loadu_ps(b);
            let b1 = _mm512_loadu_ps(b.add(16));
            for r in 0..R {
                let x = _mm512_set1_ps(*ap.wrapping_add(r * a_rs));
                acc0[r] = _mm512_fmadd_ps(x, b0, acc0[r]);
                acc1[r] = _mm512_fmadd_ps(x, b1, acc1[r]);
            }
            b = b.add(NR);
            ap = ap.wrapping_add(a_cs);
        }
        for r in 0..R {
            let row = c.wrapping_add(r * ldc);
            _mm512_mask_storeu_ps(row, m0, acc0[r]);
            _mm512_mask_storeu_ps(row.wrapping_add(16), m1, acc1[r]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod sse {
    use std::arch::x86_64::*;

    use super::{PackedB, NR};

    /// Rows of `A` per micro-kernel call.
    const MR: usize = 6;
    /// Columns per micro-kernel call: a quarter panel, two 128-bit vectors.
    const SLICE: usize = 8;
    /// Values of `k` per micro-kernel call: the slice's panel rows stay in L1 while every
    /// row group of the tile goes over them.
    const KS: usize = 256;

    /// As `avx512::tile`: the same loops over column blocks, `k` blocks and panels, each
    /// panel in slices of 8 columns and its `k` block in runs of [`KS`]; with `accumulate`,
    /// the sums start from `C`'s values instead of zero.
    ///
    /// # Safety
    /// As [`PackedB::tile`] (x86-64 has SSE2 at least).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        pb: &PackedB,
        rows: usize,
        cols: usize,
        col0: usize,
        a: *const f32,
        a_rs: usize,
        a_cs: usize,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        super::panels(pb, cols, col0, |panel, j, p0, kc| {
            let a0 = a.wrapping_add(p0 * a_cs);
            for q in (0..NR).step_by(SLICE) {
                // This slice's columns: 8, or fewer in the tile's last panel.
                let w = (cols - j).saturating_sub(q).min(SLICE);
                if w == 0 {
                    break;
                }
                let c0 = c.wrapping_add(j + q);
                for ks in (0..kc).step_by(KS) {
                    let slice = Slice { panel: panel.add(ks * NR + q), cols: w, steps: KS.min(kc - ks) };
                    let (a1, first) = (a0.wrapping_add(ks * a_cs), !accumulate && p0 == 0 && ks == 0);
                    let mut i = 0;
                    while i < rows {
                        let (ai, ci) = (a1.wrapping_add(i * a_rs), c0.wrapping_add(i * ldc));
                        let args = (ai, a_rs, a_cs, ci, ldc, first);
                        match rows - i {
                            1 => slice.micro::<1>(args),
                            2 => slice.micro::<2>(args),
                            3 => slice.micro::<3>(args),
                            4 => slice.micro::<4>(args),
                            5 => slice.micro::<5>(args),
                            _ => slice.micro::<MR>(args),
                        }
                        i += MR;
                    }
                }
            }
        });
    }

    /// A slice of a panel: its first column's first value, how many of its 8 columns the
    /// tile has, and how many panel rows (values of `k`) a call goes over.
    struct Slice {
        panel: *const f32,
        cols: usize,
        steps: usize,
    }

    /// A micro-kernel call's `A` (rows `a_rs` apart, `k` steps `a_cs` apart), `C` (rows
    /// `ldc` apart) and whether it starts from zero (else from `C`'s partial sums).
    type Args = (*const f32, usize, usize, *mut f32, usize, bool);

    impl Slice {
        /// `R` rows by this slice; the columns past `cols` are neither loaded from `C` nor
        /// stored (through a staging row: SSE has no masked loads or stores).
        #[inline]
        unsafe fn micro<const R: usize>(&self, (a, a_rs, a_cs, c, ldc, first): Args) {
            let mut acc = [[_mm_setzero_ps(); 2]; R];
            let whole = self.cols == SLICE;
            if !first {
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = c.wrapping_add(r * ldc);
                    let mut stage = [0f32; SLICE];
                    let src = if whole {
                        row.cast_const()
                    } else {
                        std::ptr::copy_nonoverlapping(row, stage.as_mut_ptr(), self.cols);
                        stage.as_ptr()
                    };
                    *acc = [_mm_loadu_ps(src), _mm_loadu_ps(src.add(4))];
                }
            }
            let (mut b, mut ap) = (self.panel, a);
            for _ in 0..self.steps {
                // Panel rows are zero-padded to NR columns: both vectors are in bounds.
                let b0 = _mm_loadu_ps(b);
                let b1 = _mm_loadu_ps(b.add(4));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm_set1_ps(*ap.wrapping_add(r * a_rs));
                    acc[0] = _mm_add_ps(acc[0], _mm_mul_ps(x, b0));
                    acc[1] = _mm_add_ps(acc[1], _mm_mul_ps(x, b1));
                }
                b = b.add(NR);
                ap = ap.wrapping_add(a_cs);
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.wrapping_add(r * ldc);
                if whole {
                    _mm_storeu_ps(row, acc[0]);
                    _mm_storeu_ps(row.add(4), acc[1]);
                } else {
                    let mut stage = [0f32; SLICE];
                    _mm_storeu_ps(stage.as_mut_ptr(), acc[0]);
                    _mm_storeu_ps(stage.as_mut_ptr().add(4), acc[1]);
                    std::ptr::copy_nonoverlapping(stage.as_ptr(), row, self.cols);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interpreter's order with one rounding per step (`fused`, as the AVX-512 kernel
    /// computes) or two (a multiply, then an add, as the SSE kernel does).
    #[cfg(target_arch = "x86_64")]
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, fused: bool) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    let (x, y) = (a[i * k + p], b[p * n + j]);
                    acc = if fused { x.mul_add(y, acc) } else { acc + x * y };
                }
                c[i * n + j] = acc;
            }
        }
        c
    }

    /// A tile kernel: [`PackedB::tile`]'s arguments, the packed operand first.
    #[cfg(target_arch = "x86_64")]
    type Tile = unsafe fn(&PackedB, usize, usize, usize, *const f32, usize, usize, *mut f32, usize);

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn tiles_match_a_sequential_chain_bit_for_bit() {
        if !PackedB::available() {
            eprintln!("skipped: neither AVX-512F nor the x86-64 baseline level (under the ISA cap)");
            return;
        }
        let tile: Tile =
            |pb, rows, cols, col0, a, a_rs, a_cs, c, ldc| unsafe { pb.tile(rows, cols, col0, a, a_rs, a_cs, c, ldc) };
        check_tiles(tile, super::super::has_avx512());
    }

    /// The SSE kernel on any x86-64 machine (whatever the dispatch picks): a multiply and an
    /// add per step, in order.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn sse_tiles_match_a_multiply_add_chain_bit_for_bit() {
        let tile: Tile = |pb, rows, cols, col0, a, a_rs, a_cs, c, ldc| unsafe {
            sse::tile(pb, rows, cols, col0, a, a_rs, a_cs, c, ldc, false)
        };
        check_tiles(tile, false);
    }

    /// `B` packed as [`PackedB::new`] packs it, on any machine.
    #[cfg(target_arch = "x86_64")]
    fn packed(b: &[f32], k: usize, n: usize) -> PackedB {
        let mut data = vec![0.0f32; n.div_ceil(NR) * NR * k];
        // SAFETY: `b` holds `k × n` row-major.
        unsafe { pack(&mut data, b.as_ptr(), k, n, n, 1) };
        PackedB { k, n, data }
    }

    /// `tile` against [`reference`] (`fused` or not), whole and in tiles, on shapes that
    /// reach every row tail of the kernels, partial slices and panels, and more than one `k`
    /// block and run.
    #[cfg(target_arch = "x86_64")]
    fn check_tiles(tile: Tile, fused: bool) {
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        // Every row tail (1 to MR - 1 rows after the groups of MR), panels, k blocks.
        for &(m, k, n) in &[
            (1, 1, 1),
            (9, 300, 33),
            (17, 513, 64),
            (8, 256, 31),
            (3, 2, 70),
            (16, 1, 16),
            (23, 40, 45),
            (25, 7, 33),
            (36, 1030, 40),
            (12, 3, 32),
            (34, 2, 17),
            (7, 600, 9),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let pb = packed(&b, k, n);
            let want = reference(&a, &b, m, k, n, fused);
            // Whole, and in tiles of 32 columns and 5 rows.
            let mut c = vec![f32::NAN; m * n];
            unsafe { tile(&pb, m, n, 0, a.as_ptr(), k, 1, c.as_mut_ptr(), n) };
            assert_eq!(
                c.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "{m}x{k}x{n}"
            );
            let mut c = vec![f32::NAN; m * n];
            for i0 in (0..m).step_by(5) {
                for j0 in (0..n).step_by(NR) {
                    let (rows, cols) = (5.min(m - i0), NR.min(n - j0));
                    unsafe {
                        tile(&pb, rows, cols, j0, a.as_ptr().add(i0 * k), k, 1, c.as_mut_ptr().add(i0 * n + j0), n)
                    };
                }
            }
            assert_eq!(
                c.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "{m}x{k}x{n} tiled"
            );
        }
    }

    /// The baseline level's products of operands packed per call: transposed and strided
    /// `B`, a scale, accumulation into `C`, and column ranges split over workers, against the
    /// multiply-add chain.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn per_call_packing_scales_accumulates_and_splits() {
        use crate::backend::cpu::gemm::Gemm2d;
        let mut seed = 11u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool of three");
        for &(m, k, n) in &[(1, 1, 1), (13, 70, 33), (6, 300, 100), (20, 5, 200)] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            // B read transposed from its `[n, k]` copy: B[p, j] = bt[j * k + p].
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let want = reference(&a, &b, m, k, n, false);
            let c0: Vec<f32> = (0..m * n).map(|_| next()).collect();
            for threads in [1, 3] {
                let g = Gemm2d { m, n, k, a_rs: k, a_cs: 1, b_rs: 1, b_cs: k, ldc: n };
                let mut c = vec![f32::NAN; m * n];
                // SAFETY: operands of exactly the extents `g` addresses.
                pool.install(|| unsafe { gemm_sse(&g, a.as_ptr(), bt.as_ptr(), c.as_mut_ptr(), 0.5, false, threads) });
                let scaled: Vec<u32> = want.iter().map(|x| (x * 0.5).to_bits()).collect();
                assert_eq!(c.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), scaled, "{m}x{k}x{n} scaled, {threads}");
                let mut c = c0.clone();
                let g = Gemm2d { b_rs: n, b_cs: 1, ..g };
                // SAFETY: as above.
                pool.install(|| unsafe { gemm_sse(&g, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), 1.0, true, threads) });
                for (i, (&got, &start)) in c.iter().zip(&c0).enumerate() {
                    let (r, j) = (i / n, i % n);
                    let mut acc = start;
                    for p in 0..k {
                        acc += a[r * k + p] * b[p * n + j];
                    }
                    assert_eq!(got.to_bits(), acc.to_bits(), "{m}x{k}x{n} accumulated at {r},{j}, {threads}");
                }
            }
        }
    }

    #[test]
    fn packing_rejects_short_operands() {
        if !PackedB::available() {
            eprintln!("skipped: neither AVX-512F nor the x86-64 baseline level (under the ISA cap)");
            return;
        }
        assert!(PackedB::new(&[1.0; 6], 2, 3, 3, 1).is_some());
        assert!(PackedB::new(&[1.0; 5], 2, 3, 3, 1).is_none());
        assert!(PackedB::new(&[1.0; 6], 3, 2, 1, 3).is_some());
        assert!(PackedB::new(&[], 0, 3, 3, 1).is_none());
        assert!(PackedB::new(&[1.0; 6], usize::MAX, 3, 3, 1).is_none());
    }
}
