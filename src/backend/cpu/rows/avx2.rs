//! The row kernels with AVX2 and FMA intrinsics, 8 lanes: softmax, log_softmax, layer_norm and
//! rms_norm with the portable functions' bits, sums included (the portable code's 16 f32 lanes
//! are two vectors here and its 32 f64 statistics lanes eight, each reduced in the same tree
//! order, and the elements past the last whole chunk are added one at a time after the lanes,
//! as there), pipelined across the rows of a worker's run as `avx512.rs` is, and with
//! streaming stores written as whole cache lines ([`RowOut`]). Partial vectors (a row's
//! first elements before a cache line, its last ones) are loaded and stored through lane masks.

use std::arch::x86_64::*;

use super::{EXP_FLOOR, EXP_MAGIC, EXP_Q, L, LN2_HI, LN2_LO, PREFETCH_MAX, STAT_LANES};

/// Lanes of a vector.
const V: usize = 8;
/// f32 in a 64-byte cache line: two vectors, which are also the portable code's 16-lane chunk
/// ([`super::L`]).
const LINE: usize = 16;
const _: () = assert!(L == LINE && STAT_LANES == 2 * LINE);

/// [`super::exp_neg`] on 8 lanes, operation for operation (the same bits).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_neg(d: __m256) -> __m256 {
    exp_neg_n([d])[0]
}

/// [`exp_neg`] of `K` vectors, each step on all of them before the next, so that the
/// out-of-order core finds `K` independent operations together instead of one long chain.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_neg_n<const K: usize>(d: [__m256; K]) -> [__m256; K] {
    let magic = _mm256_set1_ps(EXP_MAGIC);
    let dc = d.map(|d| _mm256_max_ps(_mm256_set1_ps(EXP_FLOOR), d));
    let mut t = dc;
    for t in &mut t {
        *t = _mm256_fmadd_ps(*t, _mm256_set1_ps(std::f32::consts::LOG2_E), magic);
    }
    let mut r = dc;
    for (r, &t) in r.iter_mut().zip(&t) {
        let n = _mm256_sub_ps(t, magic);
        *r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), *r);
        *r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), *r);
    }
    let mut q = [_mm256_set1_ps(EXP_Q[0]); K];
    for &c in &EXP_Q[1..] {
        for (q, &r) in q.iter_mut().zip(&r) {
            *q = _mm256_fmadd_ps(*q, r, _mm256_set1_ps(c));
        }
    }
    let mut out = q;
    for k in 0..K {
        let p = _mm256_fmadd_ps(r[k], q[k], _mm256_set1_ps(1.0));
        out[k] = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(t[k]))));
    }
    out
}

/// The lanes `k` with `lo <= k < hi` (`lo`, `hi` within ±2^31), as the masked loads and stores
/// take them (the sign bit of each 32-bit lane).
#[inline(always)]
unsafe fn lanes(lo: isize, hi: isize) -> __m256i {
    let k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo as i32), k);
    _mm256_andnot_si256(below, _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), k))
}

/// The first `k` lanes (all of them from 8 on).
#[inline(always)]
unsafe fn first(k: usize) -> __m256i {
    lanes(0, k.min(V) as isize)
}

/// The 8 elements at `p`, or with a mask its lanes only (0 elsewhere; the others are not
/// read, so they may lie outside the buffer).
#[inline(always)]
unsafe fn load(p: *const f32, mask: Option<__m256i>) -> __m256 {
    match mask {
        None => _mm256_loadu_ps(p),
        Some(m) => _mm256_maskload_ps(p, m),
    }
}

/// `super::tree_reduce` of 16 lanes by `+`, lanes 0–7 in `s[0]` and 8–15 in `s[1]`: the same
/// additions in the same order.
#[inline(always)]
unsafe fn tree_sum(s: [__m256; 2]) -> f32 {
    let v = _mm256_add_ps(s[0], s[1]);
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
}

/// The largest lane of `m`, which holds no NaN (a maximum's value does not depend on the order).
#[inline(always)]
unsafe fn max_lane(m: __m256) -> f32 {
    let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)))
}

/// `m` raised to the lanes `mask` of the 8 elements at `p` (the others are not read), NaN
/// ignored: `_mm256_max_ps(v, m)` returns `m` where `v` is NaN.
#[inline(always)]
unsafe fn max_into(m: __m256, p: *const f32, mask: Option<__m256i>) -> __m256 {
    let v = match mask {
        None => _mm256_loadu_ps(p),
        Some(k) => {
            _mm256_blendv_ps(_mm256_set1_ps(f32::NEG_INFINITY), _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k))
        }
    };
    _mm256_max_ps(v, m)
}

/// The row maximum, NaN ignored.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_max(x: &[f32]) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut i = 0;
    while i + 4 * V <= n {
        for (k, mk) in m.iter_mut().enumerate() {
            *mk = max_into(*mk, p.add(i + k * V), None);
        }
        i += 4 * V;
    }
    while i < n {
        m[0] = max_into(m[0], p.add(i), (i + V > n).then(|| first(n - i)));
        i += V;
    }
    max_lane(_mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])))
}

/// The terms `exp(x - max)` of the `rem < 16` elements at `x` (the row's last, past its whole
/// 16-element chunks), in the first `rem` places.
#[inline(always)]
unsafe fn tail_terms(x: *const f32, rem: usize, maxv: __m256) -> [f32; LINE] {
    let mut t = [0f32; LINE];
    for h in 0..2 {
        if rem > h * V {
            let e = exp_neg(_mm256_sub_ps(load(x.add(h * V), Some(first(rem - h * V))), maxv));
            _mm256_storeu_ps(t.as_mut_ptr().add(h * V), e);
        }
    }
    t
}

/// `Σ exp(x - max)` over the row, added as `super::row_sum` adds them (16 lanes, then the
/// rest one at a time); with `OUT`, each term is also written to `y` (of x's length). Rows of
/// up to [`PREFETCH_MAX`] prefetch the next row's input, and with `next_y` (the terms go to
/// the output row itself), its output.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum<const OUT: bool>(x: &[f32], max: f32, y: *mut f32, next_y: bool) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let maxv = _mm256_set1_ps(max);
    let prefetch = n <= PREFETCH_MAX;
    let mut s = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + LINE <= n {
        if prefetch {
            next_row(p, y, n + i, !(OUT && next_y));
        }
        let d = [0, V].map(|h| _mm256_sub_ps(_mm256_loadu_ps(p.add(i + h)), maxv));
        for (h, (sh, e)) in s.iter_mut().zip(exp_neg_n(d)).enumerate() {
            if OUT {
                _mm256_storeu_ps(y.add(i + h * V), e);
            }
            *sh = _mm256_add_ps(*sh, e);
        }
        i += LINE;
    }
    let mut total = tree_sum(s);
    if i < n {
        let terms = tail_terms(p.add(i), n - i, maxv);
        for (k, &e) in terms[..n - i].iter().enumerate() {
            if OUT {
                *y.add(i + k) = e;
            }
            total += e;
        }
    }
    total
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

/// Writes `y[i] = f(i)` for the row, 8 lanes at a time (`f` gets the first index and the
/// lanes' mask, `None` for all, and must load only those lanes). With `stream`, a row that is
/// whole cache lines (on a 64-byte boundary, a multiple of 16 long) goes out with streaming
/// stores (the caller fences), any other row with ordinary stores, as `avx512::write_row`.
#[inline(always)]
unsafe fn write_row(y: *mut f32, n: usize, stream: bool, f: impl Fn(isize, Option<__m256i>) -> __m256) {
    let whole = (y as usize).is_multiple_of(64) && n.is_multiple_of(LINE);
    let out = RowOut { y, n, shift: 0, stream: stream && whole, in_place: false };
    out.finish(0, None, true, f);
}

/// A cache line of output: two vectors.
type Line = [__m256; 2];

/// One row of a run of consecutive output rows, written a cache line at a time alongside
/// another pass ([`RowOut::line`]), then finished ([`RowOut::finish`]): `avx512::RowOut` with
/// a line of two vectors. Streamed, the run is written as one flat array of whole lines, each
/// with its two streaming stores back to back (so that no write-combining buffer is left
/// half full for a row's time): a row's lines lie from `shift` (the number of its elements
/// before its first 64-byte boundary) on, and the line a row shares with the next is carried
/// over and stored whole when the next row is finished. The output functions take signed
/// indices, since the carried line's first lanes lie before the row that completes it.
///
/// Not streamed, a row's last partial vector is written as the whole vector ending at the
/// row's end, over elements already written (with the same values: the output is computed
/// element by element), unless the output function reads the row it writes (`in_place`):
/// masked stores cost several times an ordinary one on AMD's cores (2048 rows of 17 with masked
/// tails: layer_norm 52 us, rms_norm 32.5; with whole vectors, 47 and 28.5).
#[derive(Clone, Copy)]
struct RowOut {
    y: *mut f32,
    n: usize,
    shift: usize,
    stream: bool,
    in_place: bool,
}

impl RowOut {
    /// Row `y` of a run of rows of `n`: streamed when asked to, for rows of at least 32
    /// elements (`y` on a 4-byte boundary, as an f32 slice's is).
    #[inline(always)]
    fn new(y: *mut f32, n: usize, stream: bool) -> RowOut {
        let a = y as usize;
        if stream && a.is_multiple_of(4) && n >= 2 * LINE {
            RowOut { y, n, shift: (64 - a % 64) % 64 / 4, stream: true, in_place: false }
        } else {
            RowOut { y, n, shift: 0, stream: false, in_place: false }
        }
    }

    /// The row, its output function reading the row itself (softmax's terms, scaled where
    /// they lie).
    #[inline(always)]
    fn in_place(self) -> RowOut {
        RowOut { in_place: true, ..self }
    }

    /// Writes the line `f(p)`, `f(p + 8)` at `p = i + shift` when it lies wholly in the row.
    /// Without `STREAM` (the row is not streamed, so `shift` is 0), the caller has checked
    /// that it does, and the stores are ordinary ones.
    #[inline(always)]
    unsafe fn line<const STREAM: bool>(&self, i: usize, f: impl Fn(isize, Option<__m256i>) -> __m256) {
        debug_assert!(STREAM || (!self.stream && i + LINE <= self.n));
        let p = if STREAM { i + self.shift } else { i };
        if !STREAM || p + LINE <= self.n {
            let (a, b) = (f(p as isize, None), f((p + V) as isize, None));
            if STREAM && self.stream {
                _mm256_stream_ps(self.y.add(p), a);
                _mm256_stream_ps(self.y.add(p + V), b);
            } else {
                _mm256_storeu_ps(self.y.add(p), a);
                _mm256_storeu_ps(self.y.add(p + V), b);
            }
        }
    }

    /// Writes what [`RowOut::line`] has not, given that it was called for every `i < upto`
    /// (a multiple of 16): the elements before `shift`, completing `carry` (the previous
    /// row's last partial line, which this row's first elements end; `None` for the run's
    /// first row), then the rest of the row. Returns this row's last partial line when
    /// streamed and not `last`, for the next row to complete; otherwise stores it.
    #[inline(always)]
    unsafe fn finish(
        &self,
        upto: usize,
        carry: Option<Line>,
        last: bool,
        f: impl Fn(isize, Option<__m256i>) -> __m256,
    ) -> Option<Line> {
        let (n, shift) = (self.n, self.shift);
        if shift > 0 {
            match carry {
                Some(c) => {
                    // The line's first `t` lanes are the previous row's; lane `j >= t` is this
                    // row's element `j - t`.
                    let t = (LINE - shift) as isize;
                    for (h, ch) in c.into_iter().enumerate() {
                        let at = h as isize * V as isize - t;
                        let mine = lanes(-at, V as isize);
                        let v = _mm256_blendv_ps(ch, f(at, Some(mine)), _mm256_castsi256_ps(mine));
                        _mm256_stream_ps(self.y.wrapping_offset(at), v);
                    }
                }
                None => {
                    for h in 0..shift.div_ceil(V) {
                        let m = first(shift - h * V);
                        _mm256_maskstore_ps(self.y.add(h * V), m, f((h * V) as isize, Some(m)));
                    }
                }
            }
        }
        let mut p = shift + upto.min((n - shift) / LINE * LINE);
        while p + LINE <= n {
            self.line::<true>(p - shift, &f);
            p += LINE;
        }
        if p < n {
            let t = n - p;
            if !self.stream && !self.in_place && n >= V {
                if t > V {
                    _mm256_storeu_ps(self.y.add(p), f(p as isize, None));
                }
                _mm256_storeu_ps(self.y.add(n - V), f((n - V) as isize, None));
                return None;
            }
            let masks = [first(t), first(t.saturating_sub(V))];
            let partial = [f(p as isize, Some(masks[0])), f((p + V) as isize, Some(masks[1]))];
            if self.stream && !last {
                return Some(partial);
            }
            for h in 0..t.div_ceil(V) {
                _mm256_maskstore_ps(self.y.add(p + h * V), masks[h], partial[h]);
            }
        }
        None
    }
}

/// layer_norm of consecutive rows of `n > 0` (`w`, `b` of length `n`): `super::layer_norm_row`
/// row by row, with the same bits, pipelined as `avx512::layer_norm_rows` is: one pass over row
/// `i` sums its statistics (in f64, lane for lane as `super::layer_norm_stats`) and writes row
/// `i - 1`'s output; the last row's output pass follows. With `stream`, the output gets
/// streaming stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX2 and FMA; `n > 0`; `x` and `y` hold whole rows (the rows both hold
/// are computed); `w` and `b`, where given, hold at least `n` elements.
#[target_feature(enable = "avx2,fma")]
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
    let (wp, bp) = (w.map_or(std::ptr::null(), <[f32]>::as_ptr), b.map_or(std::ptr::null(), <[f32]>::as_ptr));
    // A bias without a weight is not applied, as in `super::layer_norm_row`.
    match (w, b) {
        (Some(_), Some(_)) => layer_norm_rows_with::<2>(x, wp, bp, y, n, eps, stream),
        (Some(_), None) => layer_norm_rows_with::<1>(x, wp, bp, y, n, eps, stream),
        _ => layer_norm_rows_with::<0>(x, wp, bp, y, n, eps, stream),
    }
}

/// [`layer_norm_rows`] with `AFFINE` 2 (weight `w` and bias `b`), 1 (weight) or 0 (neither),
/// so that the output pass tests neither (those tests and the one for a previous row to write,
/// made in the loop, took 64 rows of 1024 in L1 from 9.4 us to 13.2).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn layer_norm_rows_with<const AFFINE: u8>(
    x: &[f32],
    w: *const f32,
    b: *const f32,
    y: &mut [f32],
    n: usize,
    eps: f64,
    stream: bool,
) {
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let prefetch = n <= PREFETCH_MAX;
    // Row `r`'s output, `((x - mean) * inv) * w + b`, for the lanes `m` of the 8 elements at
    // `i` (0 elsewhere).
    let normed = |r: usize, (mean, inv): (f32, f32)| {
        let (rx, mv, iv) = (xp.add(r * n), _mm256_set1_ps(mean), _mm256_set1_ps(inv));
        move |i: isize, m: Option<__m256i>| {
            let v = _mm256_mul_ps(_mm256_sub_ps(load(rx.wrapping_offset(i), m), mv), iv);
            match AFFINE {
                2 => _mm256_add_ps(_mm256_mul_ps(v, load(w.wrapping_offset(i), m)), load(b.wrapping_offset(i), m)),
                1 => _mm256_mul_ps(v, load(w.wrapping_offset(i), m)),
                _ => v,
            }
        }
    };
    let mut prev: Option<(f32, f32)> = None;
    let mut carry = None;
    for i in 0..rows {
        let out = prev.map(|stats| (RowOut::new(yp.add((i - 1) * n), n, stream), normed(i - 1, stats)));
        let ahead = prefetch.then(|| (xp.wrapping_add((i + 2) * n), (!stream).then(|| yp.add(i * n))));
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
/// writing the previous row's output `out` on the way (none for a run's first row), and
/// prefetching input two rows on and (given) this row's output, which the next pass writes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn stats_pass<const STREAM: bool>(
    x: *const f32,
    n: usize,
    eps: f64,
    out: Option<(RowOut, impl Fn(isize, Option<__m256i>) -> __m256)>,
    ahead: Option<(*const f32, Option<*mut f32>)>,
    mut carry: Option<Line>,
) -> ((f32, f32), Option<Line>) {
    let k = *x as f64;
    let whole = n / STAT_LANES * STAT_LANES;
    let (lanes1, lanes2) = match &out {
        Some((o, f)) => stats_lanes(x, k, whole, ahead, |c| o.line::<STREAM>(c, f)),
        None => stats_lanes(x, k, whole, ahead, |_| {}),
    };
    if let Some((o, f)) = &out {
        carry = o.finish(whole, carry, false, f);
    }
    let rest = std::slice::from_raw_parts(x.add(whole), n - whole);
    (super::layer_norm_finish(lanes1, lanes2, rest, k, n as f64, eps), carry)
}

/// The 32 lanes of [`stats_pass`]'s sums of `d = x - k` and of `d²` over the row's first
/// `whole` elements, `write(c)` writing the previous row's line at each `c`.
///
/// The lanes are 8 + 8 accumulators, which with the conversions and the output leave too few
/// of AVX2's 16 registers: the pass goes over the row twice, lanes 0–15 of each 32-element
/// chunk and then lanes 16–31 (each lane's sum in the same order), each half writing its
/// lines of output (the row is in L1 by then).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn stats_lanes(
    x: *const f32,
    k: f64,
    whole: usize,
    ahead: Option<(*const f32, Option<*mut f32>)>,
    write: impl Fn(usize),
) -> ([f64; STAT_LANES], [f64; STAT_LANES]) {
    let kv = _mm256_set1_pd(k);
    let (mut lanes1, mut lanes2) = ([0f64; STAT_LANES], [0f64; STAT_LANES]);
    for half in [0, LINE] {
        let (mut s1, mut s2) = ([_mm256_setzero_pd(); 4], [_mm256_setzero_pd(); 4]);
        let mut c = half;
        while c < whole {
            if let Some((xn, yn)) = ahead {
                _mm_prefetch::<_MM_HINT_T0>(xn.wrapping_add(c) as *const i8);
                if let Some(yn) = yn {
                    _mm_prefetch::<_MM_HINT_ET0>(yn.wrapping_add(c) as *const i8);
                }
            }
            for q in 0..4 {
                let d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x.add(c + 4 * q))), kv);
                s1[q] = _mm256_add_pd(s1[q], d);
                s2[q] = _mm256_fmadd_pd(d, d, s2[q]);
            }
            write(c);
            c += STAT_LANES;
        }
        for q in 0..4 {
            _mm256_storeu_pd(lanes1.as_mut_ptr().add(half + 4 * q), s1[q]);
            _mm256_storeu_pd(lanes2.as_mut_ptr().add(half + 4 * q), s2[q]);
        }
    }
    (lanes1, lanes2)
}

/// rms_norm of consecutive rows of `n > 0` (`w` of length `n`): `super::rms_norm_row` row by
/// row, with the same bits, pipelined as [`layer_norm_rows`] is: one pass sums row `i`'s
/// squares (in f64, lane for lane as `super::stat_sum`) and writes row `i - 1`'s output in
/// f32; a row whose `1 / rms` is not a normal f32 gets its output pass in f64 after the pass.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `n > 0`; `x` and `y` hold whole rows (the rows both hold
/// are computed); `w`, where given, holds at least `n` elements.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rms_norm_rows(x: &[f32], w: Option<&[f32]>, y: &mut [f32], n: usize, eps: f64) {
    debug_assert!(n > 0 && w.is_none_or(|w| w.len() >= n));
    match w {
        Some(_) => rms_norm_rows_with::<true>(x, w, y, n, eps),
        None => rms_norm_rows_with::<false>(x, w, y, n, eps),
    }
}

/// [`rms_norm_rows`] with `WEIGHT` telling whether `w` is given, so that the output pass does
/// not test it.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn rms_norm_rows_with<const WEIGHT: bool>(x: &[f32], w: Option<&[f32]>, y: &mut [f32], n: usize, eps: f64) {
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp, wp) = (x.as_ptr(), y.as_mut_ptr(), w.map_or(std::ptr::null(), <[f32]>::as_ptr));
    let prefetch = n <= PREFETCH_MAX;
    let scale = |r: usize, inv: f32| {
        let (rx, inv) = (xp.add(r * n), _mm256_set1_ps(inv));
        move |i: isize, m: Option<__m256i>| {
            let v = _mm256_mul_ps(load(rx.wrapping_offset(i), m), inv);
            if WEIGHT {
                _mm256_mul_ps(v, load(wp.wrapping_offset(i), m))
            } else {
                v
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

/// The sum of the squares of the row at `x` in f64 (`super::stat_sum`'s lanes and order: eight
/// accumulators of four), writing the previous row's output on the way, and prefetching input
/// two rows on and this row's output, which the next pass writes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sumsq_pass(
    x: *const f32,
    n: usize,
    out: Option<(RowOut, impl Fn(isize, Option<__m256i>) -> __m256)>,
    ahead: Option<(*const f32, *mut f32)>,
) -> f64 {
    let whole = n / STAT_LANES * STAT_LANES;
    let lanes = match &out {
        Some((o, f)) => sumsq_lanes(x, whole, ahead, |c| o.line::<false>(c, f)),
        None => sumsq_lanes(x, whole, ahead, |_| {}),
    };
    if let Some((o, f)) = &out {
        o.finish(whole, None, true, f);
    }
    let mut total = super::tree_reduce(lanes, |a, b| a + b);
    for k in whole..n {
        let v = *x.add(k) as f64;
        total += v * v;
    }
    total
}

/// The 32 lanes of [`sumsq_pass`]'s sums over the row's first `whole` elements, `write(c)`
/// writing the previous row's line at each multiple `c` of 16.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sumsq_lanes(
    x: *const f32,
    whole: usize,
    ahead: Option<(*const f32, *mut f32)>,
    write: impl Fn(usize),
) -> [f64; STAT_LANES] {
    let mut acc = [_mm256_setzero_pd(); STAT_LANES / 4];
    let mut c = 0;
    while c < whole {
        if let Some((xn, yn)) = ahead {
            for k in [c, c + LINE] {
                _mm_prefetch::<_MM_HINT_T0>(xn.wrapping_add(k) as *const i8);
                _mm_prefetch::<_MM_HINT_ET0>(yn.wrapping_add(k) as *const i8);
            }
        }
        for (q, a) in acc.iter_mut().enumerate() {
            let v = _mm256_cvtps_pd(_mm_loadu_ps(x.add(c + 4 * q)));
            *a = _mm256_add_pd(*a, _mm256_mul_pd(v, v));
        }
        write(c);
        write(c + LINE);
        c += STAT_LANES;
    }
    let mut lanes = [0f64; STAT_LANES];
    for (q, v) in acc.into_iter().enumerate() {
        _mm256_storeu_pd(lanes.as_mut_ptr().add(q * 4), v);
    }
    lanes
}

/// Rows of up to this many elements keep their `exp` terms in a scratch row on the stack
/// (8 KiB) when the output is streamed.
pub(super) const SCRATCH: usize = 2048;

/// `super::softmax_row` (the same bits); with `stream`, `y` is written once, with streaming
/// stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX2 and FMA. `y` has `x`'s length (else the shorter is used).
#[target_feature(enable = "avx2,fma")]
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
        let r = _mm256_set1_ps(1.0 / exp_sum::<true>(x, max, sp, false));
        // Only lanes below `n`, which exp_sum wrote, are loaded.
        write_row(yp, n, true, |i, m| _mm256_mul_ps(load(sp.wrapping_offset(i), m), r));
        return;
    }
    let r = 1.0 / exp_sum::<true>(x, max, yp, true);
    let rv = _mm256_set1_ps(r);
    let mut i = 0;
    while i + V <= n {
        _mm256_storeu_ps(yp.add(i), _mm256_mul_ps(_mm256_loadu_ps(yp.add(i)), rv));
        i += V;
    }
    for v in &mut y[i..] {
        *v *= r;
    }
}

/// Softmax of consecutive rows of `n` (at most [`SCRATCH`]): [`softmax`] row by row, with the
/// same bits, software-pipelined as `avx512::softmax_rows` is: one pass over row `i` computes
/// its `exp` terms and their sum (with `max_i`, found by the pass before), the maximum of row
/// `i + 1`, and scales row `i - 1`'s terms by `1 / sum_{i-1}` into the output.
///
/// The terms go to the output itself, or with `stream` to two scratch rows in turn, so that
/// the output is written once, with streaming stores (the caller fences).
///
/// # Safety
/// The CPU must have AVX2 and FMA. `0 < n <= SCRATCH`; `x` and `y` hold whole rows (the rows
/// both hold are computed).
#[target_feature(enable = "avx2,fma")]
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
    // A row's output: its terms `t` times `r = 1 / sum`, in place unless streamed.
    let scaled = |t: *const f32, r: __m256| move |i: isize, m| _mm256_mul_ps(load(t.wrapping_offset(i), m), r);
    let out = |i: usize| {
        let o = RowOut::new(yp.add(i * n), n, stream);
        if stream {
            o
        } else {
            o.in_place()
        }
    };
    // Stores of the previous row's output against loads of this row and the next; in place,
    // loads of the previous row's terms against stores of this row's.
    let (g, n4) = (super::page_gap(yp, xp), 4 * n as isize);
    let gaps = [g - n4, g - 2 * n4, -n4];
    let rot = super::rotation(n / LINE * LINE, &gaps[..if stream { 2 } else { 3 }]);
    let mut max = row_max(&x[..n]);
    let (mut r_prev, mut carry) = (_mm256_setzero_ps(), None);
    for i in 0..rows {
        let row = Row {
            x: xp.add(i * n),
            max: _mm256_set1_ps(max),
            terms: terms(i),
            next: xp.add((i + 1).min(rows - 1) * n),
            ahead: Some(xp.wrapping_add((i + 2) * n)),
            prefetch_y: (!stream).then(|| yp.add((i + 1) * n)),
            rot,
        };
        let prev = (i > 0).then(|| (out(i - 1), scaled(terms(i - 1), r_prev)));
        let (sum, next_max) = if stream {
            exp_pass::<true, true>(&row, n, prev, &mut carry)
        } else {
            exp_pass::<true, false>(&row, n, prev, &mut carry)
        };
        max = next_max;
        r_prev = _mm256_set1_ps(1.0 / sum);
    }
    let last = rows - 1;
    out(last).finish(0, carry, true, scaled(terms(last), r_prev));
}

/// log_softmax of consecutive rows of `n > 0`: [`log_softmax`] row by row, with the same
/// bits, pipelined as [`softmax_rows`] is: one pass sums row `i`'s terms (writing none),
/// finds row `i + 1`'s maximum and writes row `i - 1`'s output `(x - max) - ln(sum)`.
///
/// # Safety
/// The CPU must have AVX2 and FMA. `n > 0`; `x` and `y` hold whole rows (the rows both hold
/// are computed).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn log_softmax_rows(x: &[f32], y: &mut [f32], n: usize, stream: bool) {
    debug_assert!(n > 0);
    let rows = x.len().min(y.len()) / n;
    if rows == 0 {
        return;
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let prefetch = n <= PREFETCH_MAX;
    // Row `r`'s output, `(x - max) - lse`.
    let logs = |r: usize, max: f32, lse: f32| {
        let (rx, maxv, lsev) = (xp.add(r * n), _mm256_set1_ps(max), _mm256_set1_ps(lse));
        move |i: isize, m| _mm256_sub_ps(_mm256_sub_ps(load(rx.wrapping_offset(i), m), maxv), lsev)
    };
    let (g, n4) = (super::page_gap(yp, xp), 4 * n as isize);
    let rot = super::rotation(n / LINE * LINE, &[g - n4, g - 2 * n4]);
    let mut max = row_max(&x[..n]);
    let (mut max_prev, mut lse_prev) = (0.0, 0.0);
    let mut carry = None;
    for i in 0..rows {
        let row = Row {
            x: xp.add(i * n),
            max: _mm256_set1_ps(max),
            terms: std::ptr::null_mut(),
            next: xp.add((i + 1).min(rows - 1) * n),
            ahead: prefetch.then(|| xp.wrapping_add((i + 2) * n)),
            prefetch_y: (prefetch && !stream).then(|| yp.add(i * n)),
            rot,
        };
        let prev = (i > 0).then(|| (RowOut::new(yp.add((i - 1) * n), n, stream), logs(i - 1, max_prev, lse_prev)));
        let (sum, next_max) = if stream {
            exp_pass::<false, true>(&row, n, prev, &mut carry)
        } else {
            exp_pass::<false, false>(&row, n, prev, &mut carry)
        };
        (max_prev, lse_prev) = (max, (sum as f64).ln() as f32);
        max = next_max;
    }
    let last = rows - 1;
    RowOut::new(yp.add(last * n), n, stream).finish(0, carry, true, logs(last, max_prev, lse_prev));
}

/// A row of a pipelined softmax or log_softmax pass ([`exp_pass`]), as pointers, since the
/// output row the pass writes and the one it finishes may be the same buffer's neighbours.
struct Row {
    x: *const f32,
    max: __m256,
    /// Where the row's terms go (softmax; log_softmax writes none).
    terms: *mut f32,
    /// The next row, whose maximum the pass finds (a run's last row gives itself, and the
    /// maximum is not used).
    next: *const f32,
    /// The row after next, prefetched (a prefetch never faults, so it may lie past the buffer).
    ahead: Option<*const f32>,
    /// The output row the next pass writes, prefetched for writing.
    prefetch_y: Option<*mut f32>,
    /// The previous row's line written alongside element `i`'s is the one at `i + rot`,
    /// wrapped into the row's whole lines (`super::rotation`).
    rot: usize,
}

impl Row {
    /// Prefetches the line at `i` of the row after next and of the output row the next pass
    /// writes.
    #[inline(always)]
    unsafe fn prefetch(&self, i: usize) {
        if let Some(a) = self.ahead {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(i) as *const i8);
        }
        if let Some(y) = self.prefetch_y {
            _mm_prefetch::<_MM_HINT_ET0>(y.wrapping_add(i) as *const i8);
        }
    }
}

/// One pass of [`softmax_rows`] (`TERMS`: the terms are written) or [`log_softmax_rows`] over
/// `row`: the sum of its terms, added as [`exp_sum`] adds them, and the next row's maximum,
/// writing the previous row's output `prev` on the way (none for a run's first row), with
/// streaming stores where `STREAM` and the row allows ([`RowOut`]). The flags are constants
/// so that the loop tests none of them.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_pass<const TERMS: bool, const STREAM: bool>(
    row: &Row,
    n: usize,
    prev: Option<(RowOut, impl Fn(isize, Option<__m256i>) -> __m256)>,
    carry: &mut Option<Line>,
) -> (f32, f32) {
    let whole = n / LINE * LINE;
    let (s, mx) = match &prev {
        Some((o, f)) => exp_loop::<TERMS>(row, whole, |i| o.line::<STREAM>(super::rotated(i, row.rot, whole), f)),
        None => exp_loop::<TERMS>(row, whole, |_| {}),
    };
    let (mut sum, mut mx) = (tree_sum(s), _mm256_max_ps(mx[0], mx[1]));
    if whole < n {
        // The last `n % 16` terms one at a time after the lanes, as `super::row_sum` adds them.
        let rem = n - whole;
        row.prefetch(whole);
        let terms = tail_terms(row.x.add(whole), rem, row.max);
        for (k, &e) in terms[..rem].iter().enumerate() {
            if TERMS {
                *row.terms.add(whole + k) = e;
            }
            sum += e;
        }
        for h in 0..rem.div_ceil(V) {
            mx = max_into(mx, row.next.add(whole + h * V), Some(first(rem - h * V)));
        }
    }
    if let Some((o, f)) = &prev {
        *carry = o.finish(whole, *carry, false, f);
    }
    (sum, max_lane(mx))
}

/// The 16-element chunks of [`exp_pass`] below `whole`, `write_prev(i)` writing the previous
/// row's line at each `i`. Two chunks at a time, each step of their four `exp`s taken together
/// ([`exp_neg_n`]): one vector's `exp` is a chain of 13 dependent operations, and one or two
/// chains at a time left the multiply-add ports idle for a fifth of a row in L1 (softmax of
/// 64 rows of 1024, in L1: 17.9–18.2 us one vector at a time, 16.6–17.1 two, 16.0–16.3 four,
/// no better at eight).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_loop<const TERMS: bool>(
    row: &Row,
    whole: usize,
    write_prev: impl Fn(usize),
) -> ([__m256; 2], [__m256; 2]) {
    let (mut s, mut mx) = ([_mm256_setzero_ps(); 2], [_mm256_set1_ps(f32::NEG_INFINITY); 2]);
    let mut i = 0;
    while i + 2 * LINE <= whole {
        exp_chunks::<TERMS, 4>(row, i, &mut s, &mut mx);
        write_prev(i);
        write_prev(i + LINE);
        i += 2 * LINE;
    }
    if i < whole {
        exp_chunks::<TERMS, 2>(row, i, &mut s, &mut mx);
        write_prev(i);
    }
    (s, mx)
}

/// The `K / 2` 16-element chunks at `i` of [`exp_loop`] (`K` vectors: lanes 0–7 of each
/// chunk's terms and of the next row's elements go to `s[0]`, `mx[0]`, lanes 8–15 to `s[1]`,
/// `mx[1]`, the chunks in order).
#[inline(always)]
unsafe fn exp_chunks<const TERMS: bool, const K: usize>(
    row: &Row,
    i: usize,
    s: &mut [__m256; 2],
    mx: &mut [__m256; 2],
) {
    let mut d = [_mm256_setzero_ps(); K];
    for (k, d) in d.iter_mut().enumerate() {
        if k % 2 == 0 {
            row.prefetch(i + k * V);
        }
        mx[k % 2] = max_into(mx[k % 2], row.next.add(i + k * V), None);
        *d = _mm256_sub_ps(_mm256_loadu_ps(row.x.add(i + k * V)), row.max);
    }
    let e = exp_neg_n(d);
    for (k, &e) in e.iter().enumerate() {
        if TERMS {
            _mm256_storeu_ps(row.terms.add(i + k * V), e);
        }
        s[k % 2] = _mm256_add_ps(s[k % 2], e);
    }
}

/// `super::log_softmax_row` (the same bits); `stream` as for [`softmax`].
///
/// # Safety
/// As [`softmax`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn log_softmax(x: &[f32], y: &mut [f32], stream: bool) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let max = row_max(x);
    let lse = (exp_sum::<false>(x, max, y.as_mut_ptr(), false) as f64).ln() as f32;
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let (maxv, lsev) = (_mm256_set1_ps(max), _mm256_set1_ps(lse));
    let prefetch = n <= PREFETCH_MAX;
    write_row(yp, n, stream, |i, m| {
        if prefetch && m.is_none() && i.rem_euclid(LINE as isize) == 0 {
            next_row(xp, yp, n + i as usize, stream);
        }
        _mm256_sub_ps(_mm256_sub_ps(load(xp.wrapping_offset(i), m), maxv), lsev)
    });
}
