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
//! The kernel needs AVX-512F (x86-64 only); [`PackedB::new`] returns `None` elsewhere and
//! the caller keeps the `gemm` crate.

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
            super::has_avx512()
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
        for (kb, block) in data.chunks_mut(KC * width).enumerate() {
            let kc = block.len() / width;
            for (jp, panel) in block.chunks_exact_mut(kc * NR).enumerate() {
                let cols = NR.min(n - jp * NR);
                for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
                    let at = (kb * KC + p) * rs + jp * NR * cs;
                    if cs == 1 {
                        row[..cols].copy_from_slice(&b[at..at + cols]);
                    } else {
                        for (c, v) in row[..cols].iter_mut().enumerate() {
                            *v = b[at + c * cs];
                        }
                    }
                }
            }
        }
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
        avx512::tile(self, rows, cols, col0, a, a_rs, a_cs, c, ldc);
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{PackedB, KC, MR, NC, NR, PREFETCH_PANELS};

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
        let (k, width) = (pb.k, pb.n.div_ceil(NR) * NR);
        for jc in (0..cols).step_by(NC) {
            let jend = cols.min(jc + NC);
            let mut p0 = 0;
            while p0 < k {
                let kc = KC.min(k - p0);
                let first = p0 == 0;
                let a0 = a.wrapping_add(p0 * a_cs);
                // Each panel of the column block: every row group over `k` values p0..p0+kc.
                for j in (jc..jend).step_by(NR) {
                    let w = NR.min(cols - j);
                    let mask = if w == NR { u32::MAX } else { (1u32 << w) - 1 };
                    let (m0, m1) = (mask as u16, (mask >> 16) as u16);
                    let panel = pb.data.as_ptr().add(p0 * width + (col0 + j) / NR * kc * NR);
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
                }
                p0 += kc;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The interpreter's order with one rounding per step, as the kernel computes.
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    acc = a[i * k + p].mul_add(b[p * n + j], acc);
                }
                c[i * n + j] = acc;
            }
        }
        c
    }

    #[test]
    fn tiles_match_a_sequential_fma_chain_bit_for_bit() {
        if !PackedB::available() {
            eprintln!("skipped: no AVX-512F on this machine");
            return;
        }
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
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let pb = PackedB::new(&b, k, n, n, 1).expect("packs");
            let want = reference(&a, &b, m, k, n);
            // Whole, and in tiles of 32 columns and 5 rows.
            let mut c = vec![f32::NAN; m * n];
            unsafe { pb.tile(m, n, 0, a.as_ptr(), k, 1, c.as_mut_ptr(), n) };
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
                        pb.tile(rows, cols, j0, a.as_ptr().add(i0 * k), k, 1, c.as_mut_ptr().add(i0 * n + j0), n)
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

    #[test]
    fn packing_rejects_short_operands() {
        if !PackedB::available() {
            eprintln!("skipped: no AVX-512F on this machine");
            return;
        }
        assert!(PackedB::new(&[1.0; 6], 2, 3, 3, 1).is_some());
        assert!(PackedB::new(&[1.0; 5], 2, 3, 3, 1).is_none());
        assert!(PackedB::new(&[1.0; 6], 3, 2, 1, 3).is_some());
        assert!(PackedB::new(&[], 0, 3, 3, 1).is_none());
        assert!(PackedB::new(&[1.0; 6], usize::MAX, 3, 3, 1).is_none());
    }
}
