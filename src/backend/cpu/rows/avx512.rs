//! The row kernels with AVX-512 intrinsics: softmax and log_softmax (the portable functions'
//! arithmetic, lane for lane: `exp_neg` bit for bit, the sums in another order), layer_norm
//! and rms_norm (the portable functions' bits), with masked tails, pipelined across the rows
//! of a worker's run, and with streaming stores written as whole cache lines ([`RowOut`]).

use std::arch::x86_64::*;

use super::{EXP_FLOOR, EXP_MAGIC, EXP_Q, LN2_HI, LN2_LO, PREFETCH_MAX};

const W: usize = 16;

#[inline]
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn exp_neg(d: __m512) -> __m512 {
    let dc = _mm512_max_ps(_mm512_set1_ps(EXP_FLOOR), d);
    let magic = _mm512_set1_ps(EXP_MAGIC);
    let t = _mm512_fmadd_ps(dc, _mm512_set1_ps(std::f32::consts::LOG2_E), magic);
    let n = _mm512_sub_ps(t, magic);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), dc);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut q = _mm512_set1_ps(EXP_Q[0]);
    for &c in &EXP_Q[1..] {
        q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(c));
    }
    let p = _mm512_fmadd_ps(r, q, _mm512_set1_ps(1.0));
    _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(t))))
}

/// The lanes of a row's last partial vector of `rem` (< 16) elements.
#[inline]
fn tail(rem: usize) -> __mmask16 {
    ((1u32 << rem) - 1) as __mmask16
}

/// The row maximum, NaN ignored (`_mm512_max_ps(x, m)` returns `m` where `x` is NaN).
#[inline]
#[target_feature(enable = "avx512f,fma")]
unsafe fn row_max(x: &[f32]) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut m = [ninf; 4];
    let mut i = 0;
    while i + 4 * W <= n {
        for (k, mk) in m.iter_mut().enumerate() {
            *mk = _mm512_max_ps(_mm512_loadu_ps(p.add(i + k * W)), *mk);
        }
        i += 4 * W;
    }
    while i + W <= n {
        m[0] = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), m[0]);
        i += W;
    }
    if i < n {
        m[1] = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail(n - i), p.add(i)), m[1]);
    }
    let m = _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3]));
    _mm512_reduce_max_ps(m)
}

/// `Σ exp(x - max)` over the row; with `OUT`, each term is also written to `y` (of x's
/// length). Rows of up to [`PREFETCH_MAX`] prefetch the next row's input, and with
/// `next_y` (the terms go to the output row itself), its output.
#[inline]
#[target_feature(enable = "avx512f,fma")]
unsafe fn exp_sum<const OUT: bool>(x: &[f32], max: f32, y: *mut f32, next_y: bool) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let maxv = _mm512_set1_ps(max);
    let prefetch = n <= PREFETCH_MAX;
    let mut s = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 4 * W <= n {
        if prefetch {
            // The next row starts `n` elements on; a prefetch never faults, so the
            // address may lie past the buffer.
            for k in 0..4 {
                next_row(p, y, n + i + k * W, !(OUT && next_y));
            }
        }
        for (k, sk) in s.iter_mut().enumerate() {
            let e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(p.add(i + k * W)), maxv));
            if OUT {
                _mm512_storeu_ps(y.add(i + k * W), e);
            }
            *sk = _mm512_add_ps(*sk, e);
        }
        i += 4 * W;
    }
    while i + W <= n {
        let e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), maxv));
        if OUT {
            _mm512_storeu_ps(y.add(i), e);
        }
        s[0] = _mm512_add_ps(s[0], e);
        i += W;
    }
    if i < n {
        let m = tail(n - i);
        let e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), maxv));
        if OUT {
            _mm512_mask_storeu_ps(y.add(i), m, e);
        }
        s[1] = _mm512_mask_add_ps(s[1], m, s[1], e);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])))
}

/// Prefetches `x[i]` for reading and, unless the output is streamed, `y[i]` for writing:
/// the next row's, while this one is computed from L1 (a prefetch never faults, so the
/// addresses may lie past the buffers).
#[inline(always)]
unsafe fn next_row(x: *const f32, y: *mut f32, i: usize, stream: bool) {
    _mm_prefetch::<_MM_HINT_T0>(x.wrapping_add(i) as *const i8);
    if !stream {
        _mm_prefetch::<_MM_HINT_ET0>(y.wrapping_add(i) as *const i8);
    }
}

/// Writes `y[i] = f(i)` for the row, 16 lanes at a time (`f` gets the first index and the
/// lanes' mask, and must load only those lanes). With `stream`, a row that is whole cache
/// lines (on a 64-byte boundary, a multiple of 16 long) goes out with streaming stores (the
/// caller fences); any other row with ordinary stores, since mixing the two kinds on a row's
/// partial lines made streaming slower than not streaming at all.
#[inline(always)]
pub(super) unsafe fn write_row(y: *mut f32, n: usize, stream: bool, f: impl Fn(usize, __mmask16) -> __m512) {
    let whole = (y as usize).is_multiple_of(64) && n.is_multiple_of(W);
    let out = RowOut { y, n, shift: 0, stream: stream && whole };
    out.finish(0, None, true, f);
}

/// One row of a run of consecutive output rows, written a whole vector at a time alongside
/// another pass ([`RowOut::full`]), then finished ([`RowOut::finish`]). Streamed, the run is
/// written as one flat array of whole cache lines: a row's vectors lie from `shift` (the
/// number of its elements before its first 64-byte boundary; outputs from the allocator are
/// 16-byte aligned) on, and the line a row shares with the next is carried over and stored
/// whole when the next row is finished. Only the run's first and last partial lines get
/// ordinary stores: ordinary stores to the partial lines of every row made streaming slower
/// than not streaming (measured: 3.7–4.7 ns per 16 elements of softmax against 2.0–2.9 with
/// whole lines).
#[derive(Clone, Copy)]
struct RowOut {
    y: *mut f32,
    n: usize,
    shift: usize,
    stream: bool,
}

impl RowOut {
    /// Row `y` of a run of rows of `n`: streamed when asked to, for rows of at least 32
    /// elements (`y` on a 4-byte boundary, as an f32 slice's is).
    #[inline(always)]
    fn new(y: *mut f32, n: usize, stream: bool) -> RowOut {
        let a = y as usize;
        if stream && a.is_multiple_of(4) && n >= 2 * W {
            RowOut { y, n, shift: (64 - a % 64) % 64 / 4, stream: true }
        } else {
            RowOut { y, n, shift: 0, stream: false }
        }
    }

    /// Writes `f(p)` at `p = i + shift` when the vector there lies wholly in the row.
    #[inline(always)]
    unsafe fn full(&self, i: usize, f: impl FnOnce(usize) -> __m512) {
        let p = i + self.shift;
        if p + W <= self.n {
            let v = f(p);
            if self.stream {
                _mm512_stream_ps(self.y.add(p), v);
            } else {
                _mm512_storeu_ps(self.y.add(p), v);
            }
        }
    }

    /// Writes what [`RowOut::full`] has not, given that it was called for every `i < upto`
    /// (a multiple of 16): the elements before `shift`, completing `carry` (the previous
    /// row's last partial line, which this row's first elements end; `None` for the run's
    /// first row), then the rest of the row. Returns this row's last partial line when
    /// streamed and not `last`, for the next row to complete; otherwise stores it.
    #[inline(always)]
    unsafe fn finish(
        &self,
        upto: usize,
        carry: Option<__m512>,
        last: bool,
        f: impl Fn(usize, __mmask16) -> __m512,
    ) -> Option<__m512> {
        let n = self.n;
        if self.shift > 0 {
            match carry {
                Some(c) => {
                    // The row's first `shift` elements move up to the line's last lanes.
                    let t = W - self.shift;
                    let mine = !tail(t);
                    let up = _mm512_sub_epi32(
                        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                        _mm512_set1_epi32(t as i32),
                    );
                    let head = _mm512_maskz_permutexvar_ps(mine, up, f(0, tail(self.shift)));
                    _mm512_stream_ps(self.y.wrapping_sub(t), _mm512_mask_blend_ps(mine, c, head));
                }
                None => {
                    let m = tail(self.shift);
                    _mm512_mask_storeu_ps(self.y, m, f(0, m));
                }
            }
        }
        let mut p = self.shift + upto.min((n - self.shift) / W * W);
        while p + W <= n {
            self.full(p - self.shift, |p| f(p, 0xffff));
            p += W;
        }
        if p < n {
            let m = tail(n - p);
            let v = f(p, m);
            if self.stream && !last {
                return Some(v);
            }
            _mm512_mask_storeu_ps(self.y.add(p), m, v);
        }
        None
    }
}

/// layer_norm of consecutive rows of `n > 0` (`w`, `b` of length `n`): `super::layer_norm_row`
/// row by row, with the same bits, software-pipelined so that the output pass does not wait
/// on the statistics' reduction. One pass over row `i` sums its statistics (in f64, lane for
/// lane as `super::layer_norm_stats`) and writes row `i - 1`'s output; the last row's output
/// pass follows. With `stream`, the output gets streaming stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX-512F and FMA; `n > 0`; `x` and `y` hold whole rows (the rows both
/// hold are computed); `w` and `b`, where given, hold at least `n` elements.
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn layer_norm_rows(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    y: &mut [f32],
    n: usize,
    eps: f64,
    stream: bool,
) {
    debug_assert!(n > 0 && w.is_none_or(|w| w.len() >= n) && b.is_none_or(|b| b.len() >= n));
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let (wp, bp) = (w.map(<[f32]>::as_ptr), b.map(<[f32]>::as_ptr));
    let prefetch = n <= PREFETCH_MAX;
    // Row `r`'s output, `((x - mean) * inv) * w + b`, for the lanes `m` of the 16 elements at
    // `i` (0 elsewhere).
    let normed = |r: usize, (mean, inv): (f32, f32)| {
        let (rx, mv, iv) = (xp.add(r * n), _mm512_set1_ps(mean), _mm512_set1_ps(inv));
        move |i: usize, m: __mmask16| {
            let v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, rx.add(i)), mv), iv);
            match (wp, bp) {
                (Some(w), Some(b)) => _mm512_add_ps(
                    _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w.add(i))),
                    _mm512_maskz_loadu_ps(m, b.add(i)),
                ),
                (Some(w), None) => _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w.add(i))),
                _ => v,
            }
        }
    };
    let mut prev: Option<(f32, f32)> = None;
    let mut carry = None;
    for i in 0..rows {
        let out = prev.map(|stats| (RowOut::new(yp.add((i - 1) * n), n, stream), normed(i - 1, stats)));
        let ahead = prefetch.then(|| (xp.wrapping_add((i + 2) * n), (!stream).then(|| yp.add(i * n))));
        // Two copies of the pass, so that the plain one has no streaming branch in its loop
        // (it measured 5-10% slower with one).
        let (stats, rest) = if stream {
            stats_pass::<true>(xp.add(i * n), n, eps, out, ahead, carry)
        } else {
            stats_pass::<false>(xp.add(i * n), n, eps, out, ahead, carry)
        };
        (prev, carry) = (Some(stats), rest);
    }
    let last = rows - 1;
    RowOut::new(yp.add(last * n), n, stream).finish(0, carry, true, normed(last, prev.unwrap_or_default()));
}

/// layer_norm's statistics of the row at `x` (`super::layer_norm_stats`, the same bits),
/// writing the previous row's output on the way, and prefetching input two rows on (one row
/// on, W3 took 0.67–0.68 ms at one thread; two rows on, 0.58–0.62; three or four, no better)
/// and (given) this row's output, which the next pass writes.
#[inline(always)]
unsafe fn stats_pass<const STREAM: bool>(
    x: *const f32,
    n: usize,
    eps: f64,
    out: Option<(RowOut, impl Fn(usize, __mmask16) -> __m512)>,
    ahead: Option<(*const f32, Option<*mut f32>)>,
    mut carry: Option<__m512>,
) -> ((f32, f32), Option<__m512>) {
    const LANES: usize = super::STAT_LANES;
    const { assert!(LANES == 2 * W) };
    let k = *x as f64;
    let kv = _mm512_set1_pd(k);
    let (mut s1, mut s2) = ([_mm512_setzero_pd(); 4], [_mm512_setzero_pd(); 4]);
    let mut c = 0;
    while c + LANES <= n {
        if let Some((xn, yn)) = ahead {
            _mm_prefetch::<_MM_HINT_T0>(xn.wrapping_add(c) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(xn.wrapping_add(c + W) as *const i8);
            if let Some(yn) = yn {
                _mm_prefetch::<_MM_HINT_ET0>(yn.wrapping_add(c) as *const i8);
                _mm_prefetch::<_MM_HINT_ET0>(yn.wrapping_add(c + W) as *const i8);
            }
        }
        let (a, b) = (_mm512_loadu_ps(x.add(c)), _mm512_loadu_ps(x.add(c + W)));
        // Lanes 0–7, 8–15, 16–23 and 24–31 of the chunk, as f64.
        let parts = [f64_half::<0>(a), f64_half::<1>(a), f64_half::<0>(b), f64_half::<1>(b)];
        for q in 0..4 {
            let d = _mm512_sub_pd(parts[q], kv);
            s1[q] = _mm512_add_pd(s1[q], d);
            s2[q] = _mm512_fmadd_pd(d, d, s2[q]);
        }
        if let Some((o, f)) = &out {
            if STREAM {
                o.full(c, |p| f(p, 0xffff));
                o.full(c + W, |p| f(p, 0xffff));
            } else {
                _mm512_storeu_ps(o.y.add(c), f(c, 0xffff));
                _mm512_storeu_ps(o.y.add(c + W), f(c + W, 0xffff));
            }
        }
        c += LANES;
    }
    if let Some((o, f)) = &out {
        carry = o.finish(c, carry, false, f);
    }
    let lanes = |v: [__m512d; 4]| {
        let mut a = [0f64; LANES];
        for (q, v) in v.into_iter().enumerate() {
            _mm512_storeu_pd(a.as_mut_ptr().add(q * 8), v);
        }
        a
    };
    let rest = std::slice::from_raw_parts(x.add(c), n - c);
    (super::layer_norm_finish(lanes(s1), lanes(s2), rest, k, n as f64, eps), carry)
}

/// Lanes `8 H .. 8 H + 8` of `v`, converted to f64.
#[inline(always)]
unsafe fn f64_half<const H: i32>(v: __m512) -> __m512d {
    let h = _mm512_extractf64x4_pd::<H>(_mm512_castps_pd(v));
    _mm512_cvtps_pd(_mm256_castpd_ps(h))
}

/// rms_norm of consecutive rows of `n > 0` (`w` of length `n`): `super::rms_norm_row` row by
/// row, with the same bits, pipelined as [`layer_norm_rows`] is: one pass sums row `i`'s
/// squares (in f64, lane for lane as `super::stat_sum`) and writes row `i - 1`'s output in f32;
/// a row whose `1 / rms` is not a normal f32 gets its output pass in f64 after the pass.
///
/// # Safety
/// The CPU must have AVX-512F and FMA; `n > 0`; `x` and `y` hold whole rows (the rows both
/// hold are computed); `w`, where given, holds at least `n` elements.
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn rms_norm_rows(x: &[f32], w: Option<&[f32]>, y: &mut [f32], n: usize, eps: f64) {
    debug_assert!(n > 0 && w.is_none_or(|w| w.len() >= n));
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp, wp) = (x.as_ptr(), y.as_mut_ptr(), w.map(<[f32]>::as_ptr));
    let prefetch = n <= PREFETCH_MAX;
    let scale = |r: usize, inv: f32| {
        let (rx, inv) = (xp.add(r * n), _mm512_set1_ps(inv));
        move |i: usize, m: __mmask16| {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rx.add(i)), inv);
            match wp {
                Some(w) => _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w.add(i))),
                None => v,
            }
        }
    };
    // Row `r`'s output in f64 where its `1 / rms` is not a normal f32.
    let wide = |r: usize, inv: f64| {
        // SAFETY (of the slice): row `r` of `y`, through the pointer the other rows are
        // written through.
        let ry = std::slice::from_raw_parts_mut(yp.add(r * n), n);
        super::rms_norm_out_f64(&x[r * n..(r + 1) * n], w, ry, inv);
    };
    let mut prev: Option<f64> = None;
    for i in 0..rows {
        let out = prev.map(|inv| inv as f32).filter(|inv| inv.is_normal()).map(|inv| scale(i - 1, inv));
        let ahead = prefetch.then(|| (xp.wrapping_add((i + 2) * n), yp.add(i * n)));
        let row_out = RowOut::new(yp.wrapping_add((i.max(1) - 1) * n), n, false);
        let total = sumsq_pass(xp.add(i * n), n, out.map(|f| (row_out, f)), ahead);
        if let Some(inv) = prev.filter(|&inv| !(inv as f32).is_normal()) {
            wide(i - 1, inv);
        }
        prev = Some(super::rms_inv(total, n, eps));
    }
    let (last, inv) = (rows - 1, prev.unwrap_or_default());
    if (inv as f32).is_normal() {
        RowOut::new(yp.add(last * n), n, false).finish(0, None, true, scale(last, inv as f32));
    } else {
        wide(last, inv);
    }
}

/// The sum of the squares of the row at `x` in f64 (`super::stat_sum`'s lanes and order),
/// writing the previous row's output on the way, and prefetching input two rows on and this
/// row's output, which the next pass writes.
#[inline(always)]
unsafe fn sumsq_pass(
    x: *const f32,
    n: usize,
    out: Option<(RowOut, impl Fn(usize, __mmask16) -> __m512)>,
    ahead: Option<(*const f32, *mut f32)>,
) -> f64 {
    const LANES: usize = super::STAT_LANES;
    let mut acc = [_mm512_setzero_pd(); 4];
    let mut c = 0;
    while c + LANES <= n {
        if let Some((xn, yn)) = ahead {
            for k in [c, c + W] {
                _mm_prefetch::<_MM_HINT_T0>(xn.wrapping_add(k) as *const i8);
                _mm_prefetch::<_MM_HINT_ET0>(yn.wrapping_add(k) as *const i8);
            }
        }
        let (a, b) = (_mm512_loadu_ps(x.add(c)), _mm512_loadu_ps(x.add(c + W)));
        let parts = [f64_half::<0>(a), f64_half::<1>(a), f64_half::<0>(b), f64_half::<1>(b)];
        for q in 0..4 {
            acc[q] = _mm512_add_pd(acc[q], _mm512_mul_pd(parts[q], parts[q]));
        }
        if let Some((o, f)) = &out {
            _mm512_storeu_ps(o.y.add(c), f(c, 0xffff));
            _mm512_storeu_ps(o.y.add(c + W), f(c + W, 0xffff));
        }
        c += LANES;
    }
    if let Some((o, f)) = &out {
        o.finish(c, None, true, f);
    }
    let mut lanes = [0f64; LANES];
    for (q, v) in acc.into_iter().enumerate() {
        _mm512_storeu_pd(lanes.as_mut_ptr().add(q * 8), v);
    }
    let mut total = super::tree_reduce(lanes, |a, b| a + b);
    for k in c..n {
        let v = *x.add(k) as f64;
        total += v * v;
    }
    total
}

/// Rows of up to this many elements keep their `exp` terms in a scratch row on the stack
/// (8 KiB) when the output is streamed.
pub(super) const SCRATCH: usize = 2048;

/// With `stream`, `y` is written once, with streaming stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX-512F and FMA. `y` has `x`'s length (else the shorter is used).
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn softmax(x: &[f32], y: &mut [f32], stream: bool) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let max = row_max(x);
    let yp = y.as_mut_ptr();
    if stream && n <= SCRATCH {
        // The terms go to a scratch row that stays in L1, so that the output is written
        // once: writing them to `y` first would read every output line from memory.
        let mut scratch = std::mem::MaybeUninit::<[f32; super::scratch_len(SCRATCH)]>::uninit();
        let [sp, _] = super::scratch_rows(scratch.as_mut_ptr().cast::<f32>(), SCRATCH, [x.as_ptr(), yp]);
        let r = _mm512_set1_ps(1.0 / exp_sum::<true>(x, max, sp, false));
        // Only lanes below `n`, which exp_sum wrote, are loaded.
        write_row(yp, n, true, |i, m| _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sp.add(i)), r));
        return;
    }
    let r = _mm512_set1_ps(1.0 / exp_sum::<true>(x, max, yp, true));
    let mut i = 0;
    while i + W <= n {
        _mm512_storeu_ps(yp.add(i), _mm512_mul_ps(_mm512_loadu_ps(yp.add(i)), r));
        i += W;
    }
    if i < n {
        let m = tail(n - i);
        _mm512_mask_storeu_ps(yp.add(i), m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, yp.add(i)), r));
    }
}

/// Softmax of consecutive rows of `n` (at most [`SCRATCH`]): [`softmax`] row by row, with the
/// same bits, software-pipelined so that no pass waits on a reduction. One pass over row `i`
/// computes its `exp` terms and their sum (with `max_i`, found by the pass before), the maximum
/// of row `i + 1`, and scales row `i - 1`'s terms by `1 / sum_{i-1}` into the output. A row
/// at a time, each of the three passes waited on the reduction before it (the maximum, then
/// the sum), which left the vector units idle for about 30% of a 1024-wide row in L1.
///
/// The terms go to the output itself, or with `stream` to two scratch rows in turn, so that
/// the output is written once, with streaming stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX-512F and FMA. `0 < n <= SCRATCH`; `x` and `y` hold whole rows
/// (the rows both hold are computed).
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn softmax_rows(x: &[f32], y: &mut [f32], n: usize, stream: bool) {
    debug_assert!(n > 0 && n <= SCRATCH);
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let mut scratch = std::mem::MaybeUninit::<[f32; super::scratch_len(SCRATCH)]>::uninit();
    let sp = super::scratch_rows(scratch.as_mut_ptr().cast::<f32>(), SCRATCH, [xp, yp]);
    let terms = |i: usize| if stream { sp[i % 2] } else { yp.add(i * n) };
    // Stores of the previous row's output against loads of this row and the next; in place,
    // loads of the previous row's terms against stores of this row's.
    let (g, n4) = (super::page_gap(yp, xp), 4 * n as isize);
    let gaps = [g - n4, g - 2 * n4, -n4];
    let rot = super::rotation(n / W * W, &gaps[..if stream { 2 } else { 3 }]);
    let mut max = row_max(&x[..n]);
    let mut r_prev = _mm512_setzero_ps();
    let mut carry = None;
    for i in 0..rows {
        let pass = Pass {
            x: xp.add(i * n),
            max: _mm512_set1_ps(max),
            terms: Some(terms(i)),
            next: (i + 1 < rows).then(|| xp.add((i + 1) * n)),
            ahead: Some(xp.wrapping_add((i + 2) * n)),
            prefetch_y: (!stream).then(|| yp.add((i + 1) * n)),
            prev: (i > 0).then(|| Prev::Scale { terms: terms(i - 1).cast_const(), r: r_prev }),
            prev_y: yp.wrapping_add((i.max(1) - 1) * n),
            stream,
            rot,
        };
        let (sum, next_max) = pass.run(n, &mut carry);
        max = next_max;
        r_prev = _mm512_set1_ps(1.0 / sum);
    }
    let last = rows - 1;
    let tp = terms(last);
    RowOut::new(yp.add(last * n), n, stream)
        .finish(0, carry, true, |i, m| _mm512_mul_ps(_mm512_maskz_loadu_ps(m, tp.add(i)), r_prev));
}

/// log_softmax of consecutive rows of `n > 0`: [`log_softmax`] row by row, with the same
/// bits, pipelined as [`softmax_rows`] is: one pass sums row `i`'s terms (writing none),
/// finds row `i + 1`'s maximum and writes row `i - 1`'s output `(x - max) - ln(sum)`.
///
/// # Safety
/// The CPU must have AVX-512F and FMA. `n > 0`; `x` and `y` hold whole rows (the rows both
/// hold are computed).
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn log_softmax_rows(x: &[f32], y: &mut [f32], n: usize, stream: bool) {
    debug_assert!(n > 0);
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let prefetch = n <= PREFETCH_MAX;
    let (g, n4) = (super::page_gap(yp, xp), 4 * n as isize);
    let rot = super::rotation(n / W * W, &[g - n4, g - 2 * n4]);
    let mut max = row_max(&x[..n]);
    let (mut max_prev, mut lse_prev) = (0.0, 0.0);
    let mut carry = None;
    for i in 0..rows {
        let pass = Pass {
            x: xp.add(i * n),
            max: _mm512_set1_ps(max),
            terms: None,
            next: (i + 1 < rows).then(|| xp.add((i + 1) * n)),
            ahead: prefetch.then(|| xp.wrapping_add((i + 2) * n)),
            prefetch_y: (prefetch && !stream).then(|| yp.add(i * n)),
            prev: (i > 0).then(|| Prev::Log {
                x: xp.add((i - 1) * n),
                max: _mm512_set1_ps(max_prev),
                lse: _mm512_set1_ps(lse_prev),
            }),
            prev_y: yp.wrapping_add((i.max(1) - 1) * n),
            stream,
            rot,
        };
        let (sum, next_max) = pass.run(n, &mut carry);
        (max_prev, lse_prev) = (max, (sum as f64).ln() as f32);
        max = next_max;
    }
    let last = (rows - 1) * n;
    let (lx, ly) = (xp.add(last), yp.add(last));
    let (maxv, lsev) = (_mm512_set1_ps(max_prev), _mm512_set1_ps(lse_prev));
    RowOut::new(ly, n, stream)
        .finish(0, carry, true, |i, m| _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, lx.add(i)), maxv), lsev));
}

/// What a pipelined pass writes for the row before its own.
enum Prev {
    /// softmax: the row's terms times `r = 1 / sum`.
    Scale { terms: *const f32, r: __m512 },
    /// log_softmax: `(x - max) - lse`.
    Log { x: *const f32, max: __m512, lse: __m512 },
}

/// One pass of [`softmax_rows`] or [`log_softmax_rows`] over row `x` (pointers, since the
/// output row it writes and the one it finishes may be the same buffer's neighbours).
struct Pass {
    x: *const f32,
    max: __m512,
    /// Where row `x`'s terms go (softmax), if anywhere.
    terms: Option<*mut f32>,
    /// The next row, whose maximum the pass finds.
    next: Option<*const f32>,
    /// The row after next, prefetched (a prefetch never faults, so it may lie past the buffer).
    ahead: Option<*const f32>,
    /// The output row the next pass writes, prefetched for writing.
    prefetch_y: Option<*mut f32>,
    /// The previous row's output, and what goes there.
    prev: Option<Prev>,
    prev_y: *mut f32,
    /// Streaming stores for the previous row's output ([`RowOut`]).
    stream: bool,
    /// The previous row's vector written alongside element `i`'s is the one at `i + rot`,
    /// wrapped into the whole vectors (`super::rotation`).
    rot: usize,
}

impl Pass {
    /// The sum of the row's terms and the next row's maximum, accumulated as [`exp_sum`] and
    /// [`row_max`] accumulate them.
    #[inline(always)]
    unsafe fn run(&self, n: usize, carry: &mut Option<__m512>) -> (f32, f32) {
        let out = RowOut::new(self.prev_y, n, self.stream);
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let (mut s, mut mx) = ([_mm512_setzero_ps(); 4], [ninf; 4]);
        let mut i = 0;
        while i + 4 * W <= n {
            for k in 0..4 {
                self.step(i + k * W, None, out, &mut s[k], &mut mx[k]);
            }
            i += 4 * W;
        }
        while i + W <= n {
            self.step(i, None, out, &mut s[0], &mut mx[0]);
            i += W;
        }
        if i < n {
            self.step(i, Some(tail(n - i)), out, &mut s[1], &mut mx[1]);
        }
        if self.prev.is_some() {
            *carry = out.finish(n / W * W, *carry, false, |p, m| self.prev_vec(p, m));
        }
        let sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
        let mx = _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3]));
        (sum, _mm512_reduce_max_ps(mx))
    }

    /// The 16 elements at `i` (the lanes of `mask` for a row's last partial vector).
    #[inline(always)]
    unsafe fn step(&self, i: usize, mask: Option<__mmask16>, out: RowOut, s: &mut __m512, mx: &mut __m512) {
        if let Some(a) = self.ahead {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(i) as *const i8);
        }
        if let Some(next) = self.next {
            let v = match mask {
                None => _mm512_loadu_ps(next.add(i)),
                Some(m) => _mm512_mask_loadu_ps(_mm512_set1_ps(f32::NEG_INFINITY), m, next.add(i)),
            };
            *mx = _mm512_max_ps(v, *mx);
        }
        if let Some(y) = self.prefetch_y {
            _mm_prefetch::<_MM_HINT_ET0>(y.wrapping_add(i) as *const i8);
        }
        let m = mask.unwrap_or(0xffff);
        let e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, self.x.add(i)), self.max));
        match (mask, self.terms) {
            (None, Some(t)) => _mm512_storeu_ps(t.add(i), e),
            (Some(m), Some(t)) => _mm512_mask_storeu_ps(t.add(i), m, e),
            (_, None) => {}
        }
        *s = match mask {
            None => _mm512_add_ps(*s, e),
            Some(m) => _mm512_mask_add_ps(*s, m, *s, e),
        };
        if self.prev.is_some() && mask.is_none() {
            out.full(super::rotated(i, self.rot, out.n / W * W), |p| self.prev_vec(p, 0xffff));
        }
    }

    /// The previous row's output at `i` (the lanes of `m`).
    #[inline(always)]
    unsafe fn prev_vec(&self, i: usize, m: __mmask16) -> __m512 {
        match self.prev {
            Some(Prev::Scale { terms, r }) => _mm512_mul_ps(_mm512_maskz_loadu_ps(m, terms.add(i)), r),
            Some(Prev::Log { x, max, lse }) => {
                _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x.add(i)), max), lse)
            }
            None => _mm512_setzero_ps(),
        }
    }
}

/// # Safety
/// As [`softmax`].
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn log_softmax(x: &[f32], y: &mut [f32], stream: bool) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let max = row_max(x);
    let lse = (exp_sum::<false>(x, max, y.as_mut_ptr(), false) as f64).ln() as f32;
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let (maxv, lsev) = (_mm512_set1_ps(max), _mm512_set1_ps(lse));
    let prefetch = n <= PREFETCH_MAX;
    write_row(yp, n, stream, |i, m| {
        if prefetch {
            next_row(xp, yp, n + i, stream);
        }
        _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xp.add(i)), maxv), lsev)
    });
}
