//! The row kernels' tests: every path (AVX-512, AVX2, the portable loops with and without
//! fused multiply-adds) against the others and against f64 references.

use super::*;

/// Rows of random values with specials mixed in (from a fixed LCG).
fn rows() -> Vec<Vec<f32>> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    let mut out = Vec::new();
    for n in [1usize, 2, 15, 16, 17, 63, 64, 65, 130, 2049, 2100] {
        for kind in 0..6 {
            out.push(
                (0..n)
                    .map(|_| {
                        let u = next();
                        let v = (u % 20_000) as f32 / 100.0 - 100.0;
                        match (kind, u % 53) {
                            (1, 0) => f32::NEG_INFINITY,
                            (2, 0) => f32::NAN,
                            (3, 0) => f32::INFINITY,
                            (4, _) => v * 1e3,
                            (5, _) => f32::from_bits(next()),
                            _ => v,
                        }
                    })
                    .collect(),
            );
        }
    }
    out
}

/// Within the tolerance table's bound for softmax (`log`: log_softmax) on a row of `n`,
/// taking `a` as the reference: both come from sums of the same terms in another order.
fn close(a: f32, b: f32, n: usize, log: bool) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    let (a, b, eps, n) = (a as f64, b as f64, f32::EPSILON as f64, n as f64);
    let bound = if log { 2.0 * eps * (a.abs() + n + 2.0) } else { 2.0 * eps * (n + a.ln().abs() + 2.0) * a };
    a == b || (a - b).abs() <= bound + f32::MIN_POSITIVE as f64
}

#[test]
fn layer_norm_stats_match_two_pass_f64() {
    // The one-pass shifted sums against the textbook two passes in f64, on rows where a
    // one-pass formula cancels: a large offset with tiny spread, an outlier first element
    // (the shift), and magnitudes whose squares overflow f32.
    let mut cases: Vec<Vec<f32>> = rows().into_iter().filter(|r| r.iter().all(|v| v.is_finite())).collect();
    for n in [2usize, 3, 1000, 4096] {
        cases.push((0..n).map(|i| 1.0e4 + (i % 11) as f32 * 1e-3).collect());
        cases.push((0..n).map(|i| if i == 0 { 1e6 } else { 1.0 + (i % 3) as f32 * 1e-4 }).collect());
        cases.push((0..n).map(|i| if i % 2 == 0 { 3e38 } else { -3e38 }).collect());
        cases.push(vec![-7.25; n]);
    }
    for row in &cases {
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let want_inv = (1.0 / (var + 1e-5).sqrt()) as f32;
        let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        // Fused (the vector paths' bits) and not (the portable path without FMA).
        for (m, inv) in [layer_norm_stats::<true>(row, 1e-5), layer_norm_stats::<false>(row, 1e-5)] {
            assert!(ulps(m, mean as f32) <= 1, "mean of {:?}…: {m} vs {mean}", &row[..row.len().min(4)]);
            assert!(ulps(inv, want_inv) <= 1, "rsqrt of {:?}…: {inv} vs {want_inv}", &row[..row.len().min(4)]);
        }
    }
    // A non-finite element makes the statistics NaN.
    for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for at in [0, 5] {
            let mut row = vec![1.5f32; 40];
            row[at] = v;
            for (m, inv) in [layer_norm_stats::<true>(&row, 1e-5), layer_norm_stats::<false>(&row, 1e-5)] {
                assert!(inv.is_nan() && (m.is_nan() || m.is_infinite()), "{v} at {at}: {m} {inv}");
            }
        }
    }
}

/// The AVX-512 path and the portable one (what CPUs without AVX2 run) compute the same
/// `exp_neg` bit for bit and the same rows up to the order of their sums.
#[test]
#[cfg(target_arch = "x86_64")]
fn avx512_and_portable_paths_agree() {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};
    if !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma")) {
        return;
    }
    let mut bits = 0x8000_0000u32;
    let (mut d, mut e) = ([0f32; 16], [0f32; 16]);
    while f32::from_bits(bits) >= -100.0 {
        for (k, v) in d.iter_mut().enumerate() {
            *v = f32::from_bits(bits + k as u32 * 3);
        }
        // SAFETY: checked for AVX-512F and FMA above; both arrays hold 16 f32.
        unsafe { _mm512_storeu_ps(e.as_mut_ptr(), avx512::exp_neg(_mm512_loadu_ps(d.as_ptr()))) };
        for k in 0..16 {
            assert_eq!(exp_neg(d[k]).to_bits(), e[k].to_bits(), "exp_neg({})", d[k]);
        }
        bits += 7919 * 16;
    }
    for v in [f32::NAN, f32::NEG_INFINITY, -0.0, 0.0] {
        d[0] = v;
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(e.as_mut_ptr(), avx512::exp_neg(_mm512_loadu_ps(d.as_ptr()))) };
        assert!(exp_neg(v).to_bits() == e[0].to_bits() || (exp_neg(v).is_nan() && e[0].is_nan()), "exp_neg({v})");
    }
    for row in rows() {
        let n = row.len();
        let (mut p, mut v) = (vec![0f32; n], vec![0f32; n]);
        softmax_row::<true>(&row, &mut p);
        // SAFETY: checked for AVX-512F and FMA above.
        unsafe { avx512::softmax(&row, &mut v, false) };
        for i in 0..n {
            assert!(close(p[i], v[i], n, false), "softmax of a row of {n} at {i}: {} portable, {} AVX-512", p[i], v[i]);
        }
        log_softmax_row::<true>(&row, &mut p);
        // SAFETY: as above.
        unsafe { avx512::log_softmax(&row, &mut v, false) };
        for i in 0..n {
            assert!(
                close(p[i], v[i], n, true),
                "log_softmax of a row of {n} at {i}: {} portable, {} AVX-512",
                p[i],
                v[i]
            );
        }
        // layer_norm: the AVX-512 kernel computes the same f64 and f32 operations, so the
        // same bits, with and without weight and bias.
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        for (w, b) in [(None, None), (Some(&w[..]), None), (Some(&w[..]), Some(&b[..]))] {
            layer_norm_row::<true>(&row, w, b, &mut p, 1e-5);
            layer_norm_rows_into(&row, w, b, &mut v, n, 1e-5, false);
            for i in 0..n {
                assert!(
                    p[i].to_bits() == v[i].to_bits() || (p[i].is_nan() && v[i].is_nan()),
                    "layer_norm of a row of {n} at {i}: {} portable, {} AVX-512",
                    p[i],
                    v[i]
                );
            }
        }
    }
}

/// Without fused multiply-adds (the portable path where the target has none), `exp_neg`
/// stays within 2 ulp of `e^d` over the softmax range (and exact at its edges), and the
/// rows agree with the fused ones up to the order of their sums.
#[test]
fn portable_paths_without_fma_stay_close() {
    for v in [0.0f32, -0.0] {
        assert_eq!(exp_neg_with::<false>(v), 1.0);
    }
    assert_eq!(exp_neg_with::<false>(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_neg_with::<false>(-88.0), 0.0);
    assert!(exp_neg_with::<false>(f32::NAN).is_nan());
    let mut bits = 0x8000_0001u32;
    let mut worst = 0f64;
    while f32::from_bits(bits) >= -87.0 {
        let d = f32::from_bits(bits);
        let (got, want) = (exp_neg_with::<false>(d) as f64, (d as f64).exp());
        if want >= f32::MIN_POSITIVE as f64 {
            let ulp = (want as f32).next_up() as f64 - want as f32 as f64;
            worst = worst.max((got - want).abs() / ulp);
        } else {
            // Subnormal results: the scaling by 2^n rounds once more.
            assert!((got - want).abs() <= 2.0 * f32::from_bits(1) as f64, "exp_neg({d:e}) = {got:e}, exp = {want:e}");
        }
        bits += 1013;
    }
    assert!(worst <= 2.0, "exp_neg without FMA: {worst} ulp");
    for row in rows() {
        let n = row.len();
        let (mut f, mut u) = (vec![0f32; n], vec![0f32; n]);
        softmax_row::<true>(&row, &mut f);
        softmax_row::<false>(&row, &mut u);
        for i in 0..n {
            assert!(close(u[i], f[i], n, false), "softmax of a row of {n} at {i}: {} unfused, {} fused", u[i], f[i]);
        }
        log_softmax_row::<true>(&row, &mut f);
        log_softmax_row::<false>(&row, &mut u);
        for i in 0..n {
            assert!(close(u[i], f[i], n, true), "log_softmax of a row of {n} at {i}: {} unfused, {} fused", u[i], f[i]);
        }
    }
}

/// A buffer of `n` f32 whose start is `shift` elements past a 64-byte boundary (streaming
/// stores need the boundary; other shifts take the cached stores).
fn shifted(n: usize, shift: usize) -> (Vec<f32>, usize) {
    let buf = vec![0f32; n + 16 + shift];
    let at = (64 - buf.as_ptr() as usize % 64) % 64 / 4 + shift;
    (buf, at)
}

/// Matrices of the test rows of each length `n`: the rows of that length with `second(n)`
/// put second and `last(n)` last, the first `count` of them for every count (1 to 8), in
/// order and reversed, as `(n, description, matrix)`.
fn matrices(second: fn(usize) -> Vec<f32>, last: fn(usize) -> Vec<f32>) -> Vec<(usize, String, Vec<f32>)> {
    let all = rows();
    let mut out = Vec::new();
    for n in all.iter().map(Vec::len).collect::<std::collections::BTreeSet<_>>() {
        let (second, last) = (second(n), last(n));
        let mut of_n: Vec<&Vec<f32>> = all.iter().filter(|r| r.len() == n).collect();
        of_n.insert(1, &second);
        of_n.push(&last);
        for count in 1..=of_n.len() {
            for reversed in [false, true] {
                let mut picked = of_n[..count].to_vec();
                if reversed {
                    picked.reverse();
                }
                let x = picked.iter().flat_map(|r| r.iter().copied()).collect();
                out.push((n, format!("{count} rows of {n} (reversed {reversed})"), x));
            }
        }
    }
    out
}

/// Asserts that the pipelined kernel's `got` has the bits of the one-row kernel's `want`
/// (any NaN for NaN), naming the first element that differs by row and column.
fn assert_same_rows(got: &[f32], want: &[f32], n: usize, what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what} at row {} col {}: {g} pipelined, {w} one row at a time",
            i / n,
            i % n
        );
    }
}

/// The output-buffer placements of the pipelined tests: cached and streamed, on and off a
/// 64-byte boundary.
const PLACES: [(bool, usize); 4] = [(false, 0), (false, 1), (true, 0), (true, 3)];

/// The rows of a matrix, pipelined (each pass computes one row's terms, the next row's
/// maximum and the previous row's output), come out with the bits the one-row kernels give
/// (softmax and log_softmax): every row kind of the test set (NaN, ±inf, huge and
/// random-bit rows among plain ones, and rows whose maximum is negative or -inf, since a
/// lane outside a partial vector must not take part in the maximum) in every position of
/// matrices of 1 to 8 rows, streamed or not, on and off a 64-byte boundary; rows longer
/// than the scratch rows take the one-row path.
#[test]
fn pipelined_softmax_rows_match_one_row_kernels() {
    type Rows = fn(&[f32], &mut [f32], usize, bool);
    type Row = fn(&[f32], &mut [f32], bool);
    let kernels: [(&str, Rows, Row); 2] =
        [("softmax", softmax_rows_into, softmax_into), ("log_softmax", log_softmax_rows_into, log_softmax_into)];
    let mut compared = 0;
    let negative = |n| (0..n).map(|i| -50.0 - i as f32).collect();
    for (n, what, x) in matrices(negative, |n| vec![f32::NEG_INFINITY; n]) {
        for (op, pipelined, one_row) in kernels {
            let mut want = vec![0f32; x.len()];
            for (xr, yr) in x.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
                one_row(xr, yr, false);
            }
            for (stream, shift) in PLACES {
                let (mut buf, at) = shifted(x.len(), shift);
                let got = &mut buf[at..at + x.len()];
                pipelined(&x, got, n, stream);
                store_fence();
                assert_same_rows(got, &want, n, &format!("{op} of {what}, stream {stream}, shift {shift}"));
                compared += 1;
            }
        }
    }
    assert!(compared >= 800, "{compared} matrices compared");
}

/// layer_norm pipelined over a matrix's rows (each pass sums one row's statistics and
/// writes the previous row's output) gives the bits of the one-row kernel: the row set of
/// [`pipelined_softmax_rows_match_one_row_kernels`] (lengths below, at and above the
/// 32-element statistics chunk) with a row of large offset and tiny spread, with weight
/// and bias, weight alone and neither, streamed or not, on and off a 64-byte boundary.
#[test]
fn pipelined_layer_norm_rows_match_one_row_layer_norm() {
    let mut compared = 0;
    let negative = |n| (0..n).map(|i| -50.0 - i as f32).collect();
    let offset = |n| (0..n).map(|i| 1.0e4 + (i % 11) as f32 * 1e-3).collect();
    for (n, what, x) in matrices(negative, offset) {
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        for (wv, bv) in [(Some(&w[..]), Some(&b[..])), (Some(&w[..]), None), (None, None)] {
            let mut want = vec![0f32; x.len()];
            for (xr, yr) in x.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
                dispatch_layer_norm(xr, wv, bv, yr, 1e-5);
            }
            for (stream, shift) in PLACES {
                let (mut buf, at) = shifted(x.len(), shift);
                let got = &mut buf[at..at + x.len()];
                layer_norm_rows_into(&x, wv, bv, got, n, 1e-5, stream);
                store_fence();
                let (hw, hb) = (wv.is_some(), bv.is_some());
                let what = format!("{what}, weight {hw}, bias {hb}, stream {stream}, shift {shift}");
                assert_same_rows(got, &want, n, &what);
                compared += 1;
            }
        }
    }
    assert!(compared >= 800, "{compared} matrices compared");
}

/// rms_norm pipelined over a matrix's rows gives the bits of the one-row kernel, rows whose
/// `1 / rms` is not a normal f32 (the f64 output pass: a zero row with `eps = 0`, rows of
/// huge values, NaN rows) among them, in every position, with and without a weight.
#[test]
fn pipelined_rms_norm_rows_match_one_row_rms_norm() {
    let (mut compared, mut wide) = (0, 0);
    let huge = |n| (0..n).map(|i| 3e38 * if i % 2 == 0 { 1.0 } else { -0.5 }).collect();
    for (n, what, x) in matrices(|n| vec![0.0; n], huge) {
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        for (wv, eps) in [(Some(&w[..]), 1e-5), (None, 0.0)] {
            let mut want = vec![0f32; x.len()];
            for (xr, yr) in x.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
                dispatch_rms_norm(xr, wv, yr, eps);
                wide += usize::from(!(rms_inv(stat_sum(xr, |v| v * v), n, eps) as f32).is_normal());
            }
            let (mut buf, at) = shifted(x.len(), 1);
            let got = &mut buf[at..at + x.len()];
            rms_norm_rows_into(&x, wv, got, n, eps);
            assert_same_rows(got, &want, n, &format!("{what}, weight {}, eps {eps}", wv.is_some()));
            compared += 1;
        }
    }
    assert!(compared >= 300 && wide >= 100, "{compared} matrices compared, {wide} rows through f64");
}

/// Streaming the output changes where the stores go, never what they store: the rows
/// come out with the same bits as cached stores give, for every row kind of the test set
/// (rows longer than the streaming scratch included), at output addresses on and off a
/// 64-byte boundary, and over two threads with the fence.
#[test]
fn streamed_rows_match_cached_rows() {
    let same = |a: &[f32], b: &[f32], what: &str| {
        for (i, (p, q)) in a.iter().zip(b).enumerate() {
            assert!(
                p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
                "{what} at {i}: {p} cached, {q} streamed"
            );
        }
    };
    for row in rows() {
        let n = row.len();
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        for shift in [0, 1, 4] {
            let (mut cached, c0) = shifted(n, shift);
            let (mut streamed, s0) = shifted(n, shift);
            let (c, s) = (&mut cached[c0..c0 + n], &mut streamed[s0..s0 + n]);
            softmax_into(&row, c, false);
            softmax_into(&row, s, true);
            same(c, s, &format!("softmax of {n}, shift {shift}"));
            log_softmax_into(&row, c, false);
            log_softmax_into(&row, s, true);
            same(c, s, &format!("log_softmax of {n}, shift {shift}"));
            layer_norm_rows_into(&row, Some(&w), Some(&b), c, n, 1e-5, false);
            layer_norm_rows_into(&row, Some(&w), Some(&b), s, n, 1e-5, true);
            same(c, s, &format!("layer_norm of {n}, shift {shift}"));
        }
    }
    // Whole matrices through `row_chunks`, split over two workers (at least PAR_ELEMS elements).
    let (r, n) = (96, 1024);
    let x: Vec<f32> = (0..r * n).map(|i| ((i * 7919) % 2003) as f32 * 0.01 - 10.0).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool of two");
    let (mut cached, c0) = shifted(r * n, 0);
    let (mut streamed, s0) = shifted(r * n, 0);
    let (c, s) = (&mut cached[c0..c0 + r * n], &mut streamed[s0..s0 + r * n]);
    pool.install(|| {
        super::row_chunks(&x, c, n, 2, false, |x, y| softmax_rows_into(x, y, n, false));
        super::row_chunks(&x, s, n, 2, true, |x, y| softmax_rows_into(x, y, n, true));
    });
    same(c, s, "softmax rows over two threads");
    assert!(c.iter().all(|v| *v > 0.0), "every softmax term of these rows is positive");
}

/// Rows of `n` for the AVX2 tests: random values, random bits, and rows that stress the
/// kernels' special cases (±inf, NaN, huge and tiny magnitudes, subnormals, signed zeros,
/// arguments around the `exp` flush, a large offset with a tiny spread, all `-inf`).
#[cfg(target_arch = "x86_64")]
fn stress_rows(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    let inf = f32::INFINITY;
    let fill = |f: &dyn Fn(usize) -> f32| (0..n).map(f).collect::<Vec<f32>>();
    let mut out = vec![
        fill(&|i| if i == 0 { inf } else { i as f32 }),
        fill(&|_| -inf),
        fill(&|i| if i == n / 2 { f32::NAN } else { i as f32 * 0.5 }),
        fill(&|i| if i == n / 2 { -inf } else { i as f32 * 0.5 }),
        fill(&|i| if i == n - 1 { inf } else { 1.0 - i as f32 }),
        fill(&|i| if i % 2 == 0 { -inf } else { i as f32 }),
        fill(&|i| if i % 3 == 0 { 3e38 } else { -3e38 }),
        fill(&|i| [1e-45, -1e-45, 1e-40, 0.0, -0.0][i % 5]),
        fill(&|i| [-0.0, 0.0][i % 2]),
        fill(&|i| [-1e4, 1e4, 9999.5, 1.25e4, -3e4][i % 5]),
        fill(&|i| if i == 0 { 0.0 } else { [-87.0, -87.3, -87.4, -87.7, -88.5, -104.0, -1e30][i % 7] }),
        fill(&|_| 3.4e38),
        fill(&|i| f32::from_bits(0x0080_0000 + i as u32 * 7919)),
        fill(&|i| 1.0e4 + (i % 11) as f32 * 1e-3),
        fill(&|i| if i + 1 == n { -inf } else { -(i as f32) }),
        // Two large values that cancel, in lanes 0 and 20 of the 32 f64 statistics lanes,
        // among small ones: the lanes summed into either before they meet lose their small
        // sums, so that which lanes the tree adds in which order shows in the mean, and so
        // in the output.
        fill(&|i| match i {
            0 => 0.0,
            32 => 1e20,
            52 => -1e20,
            _ => ((i * 7) % 13) as f32 * 0.25 + 1.0,
        }),
    ];
    for kind in 0..3 {
        out.push(
            (0..n)
                .map(|_| {
                    let u = next();
                    match kind {
                        0 => (u % 20_000) as f32 / 100.0 - 100.0,
                        1 => f32::from_bits(u),
                        _ => ((u % 2001) as f32 - 1000.0) * 1e-3,
                    }
                })
                .collect(),
        );
    }
    out
}

/// The AVX2 kernels give the portable code's bits (the one-row functions, compiled here
/// for the baseline target): `exp_neg` over a sweep of its range, then
/// softmax, log_softmax, layer_norm and rms_norm on [`stress_rows`] of lengths around the
/// 8-lane vectors, the 16-element chunks and the 32-element statistics chunks, up to past
/// the scratch rows, one row and whole matrices of them at a time (in order and reversed),
/// streamed or not, on and off a 64-byte boundary.
#[test]
#[cfg(target_arch = "x86_64")]
fn avx2_kernels_give_the_portable_bits() {
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_storeu_ps};
    if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
        return;
    }
    let mut bits = 0x8000_0000u32;
    let (mut d, mut e) = ([0f32; 8], [0f32; 8]);
    while f32::from_bits(bits) >= -100.0 {
        for (k, v) in d.iter_mut().enumerate() {
            *v = f32::from_bits(bits + k as u32 * 3);
        }
        // SAFETY: checked for AVX2 and FMA above; both arrays hold 8 f32.
        unsafe { _mm256_storeu_ps(e.as_mut_ptr(), avx2::exp_neg(_mm256_loadu_ps(d.as_ptr()))) };
        for k in 0..8 {
            assert_eq!(exp_neg(d[k]).to_bits(), e[k].to_bits(), "exp_neg({})", d[k]);
        }
        bits += 7919 * 8;
    }
    // What the output holds before each kernel: no kernel computes it from these rows.
    const STALE: f32 = -7.654_321e7;
    let mut compared = 0;
    for n in [1usize, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 1023, 1024, 1025, 2048, 2049] {
        let rows = stress_rows(n, n as u64);
        let mut matrices: Vec<Vec<f32>> = rows.clone();
        matrices.push(rows.concat());
        matrices.push(rows.iter().rev().flatten().copied().collect());
        let w: Vec<f32> = (0..n).map(|i| [1.0, -2.5, 0.0, 1e-3, 3e4, 0.75][i % 6]).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        for x in &matrices {
            let what = format!("{} rows of {n}", x.len() / n);
            let one_row = |f: &dyn Fn(&[f32], &mut [f32])| {
                let mut want = vec![0f32; x.len()];
                for (xr, yr) in x.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
                    f(xr, yr);
                }
                want
            };
            let softmax = one_row(&|x, y| softmax_row::<true>(x, y));
            let log_softmax = one_row(&|x, y| log_softmax_row::<true>(x, y));
            for (stream, shift) in PLACES {
                let (mut buf, at) = shifted(x.len(), shift);
                let got = &mut buf[at..at + x.len()];
                let how = format!("{what}, stream {stream}, shift {shift}");
                if n <= avx2::SCRATCH {
                    got.fill(STALE);
                    // SAFETY: checked for AVX2 and FMA above; 0 < n <= SCRATCH.
                    unsafe { avx2::softmax_rows(x, got, n, stream) };
                    store_fence();
                    assert_same_rows(got, &softmax, n, &format!("AVX2 softmax of {how}"));
                }
                got.fill(STALE);
                for (xr, yr) in x.chunks_exact(n).zip(got.chunks_exact_mut(n)) {
                    // SAFETY: as above.
                    unsafe { avx2::softmax(xr, yr, stream) };
                }
                store_fence();
                assert_same_rows(got, &softmax, n, &format!("AVX2 one-row softmax of {how}"));
                got.fill(STALE);
                // SAFETY: as above; n > 0.
                unsafe { avx2::log_softmax_rows(x, got, n, stream) };
                store_fence();
                assert_same_rows(got, &log_softmax, n, &format!("AVX2 log_softmax of {how}"));
                got.fill(STALE);
                for (xr, yr) in x.chunks_exact(n).zip(got.chunks_exact_mut(n)) {
                    // SAFETY: as above.
                    unsafe { avx2::log_softmax(xr, yr, stream) };
                }
                store_fence();
                assert_same_rows(got, &log_softmax, n, &format!("AVX2 one-row log_softmax of {how}"));
                for (wv, bv) in [(Some(&w[..]), Some(&b[..])), (Some(&w[..]), None), (None, None)] {
                    let want = one_row(&|x, y| layer_norm_row::<true>(x, wv, bv, y, 1e-5));
                    got.fill(STALE);
                    // SAFETY: as above; w and b hold n elements.
                    unsafe { avx2::layer_norm_rows(x, wv, bv, got, n, 1e-5, stream) };
                    store_fence();
                    let (hw, hb) = (wv.is_some(), bv.is_some());
                    assert_same_rows(got, &want, n, &format!("AVX2 layer_norm of {how}, weight {hw}, bias {hb}"));
                }
                for (wv, eps) in [(Some(&w[..]), 1e-5), (None, 0.0), (Some(&w[..]), 0.0)] {
                    let want = one_row(&|x, y| rms_norm_row::<true>(x, wv, y, eps));
                    got.fill(STALE);
                    // SAFETY: as above; w holds n elements.
                    unsafe { avx2::rms_norm_rows(x, wv, got, n, eps) };
                    let hw = wv.is_some();
                    assert_same_rows(got, &want, n, &format!("AVX2 rms_norm of {how}, weight {hw}, eps {eps}"));
                }
                compared += 1;
            }
        }
    }
    assert!(compared >= 1500, "{compared} placements compared");
}

#[test]
fn last_level_cache_is_reported_in_a_plausible_range() {
    let bytes = crate::backend::cpu::last_level_cache_bytes();
    assert!((256 << 10..=4 << 30).contains(&bytes), "{bytes} bytes");
}

/// The page-offset rules of the pipelined passes: a gap at a page boundary is rotated half
/// a page away where the row allows it (and as far as it allows otherwise), gaps already far
/// from a boundary are left alone, and the scratch rows lie inside their area, half a page
/// apart, away from both the input and the output.
#[test]
#[cfg(target_arch = "x86_64")]
fn rotations_and_scratch_rows_keep_off_page_boundaries() {
    assert_eq!(rotation(1024, &[0]), 512);
    assert_eq!(rotation(1024, &[2048]), 0, "a gap half a page from a boundary stays");
    assert_eq!(rotation(1024, &[-4096 * 7 - 2048]), 0);
    assert_eq!(rotation(64, &[0]), 48, "as far as 64 elements allow: 192 bytes");
    assert_eq!(rotation(16, &[0]), 0, "one line: nothing to rotate");
    assert_eq!(rotation(0, &[0]), 0);
    // Two gaps a quarter page apart: the best rotation leaves both at least 1536 bytes off.
    let rot = rotation(2048, &[0, 1024]);
    let apart = |d: isize| (d.rem_euclid(4096) as usize).min(4096 - d.rem_euclid(4096) as usize);
    assert!(apart(4 * rot as isize) >= 1536 && apart(1024 + 4 * rot as isize) >= 1536, "rotation {rot}");
    for (x_off, y_off) in [(0usize, 0usize), (0, 2048), (1024, 3072), (64, 128)] {
        let mut area = vec![0f32; scratch_len(2048) + 1024];
        let base = area.as_mut_ptr();
        let (x, y) = ((4096 * 3 + x_off) as *const f32, (4096 * 9 + y_off) as *const f32);
        let [a, b] = scratch_rows(base, 2048, [x, y]);
        let (a, b) = (a as usize, b as usize);
        assert!(a >= base as usize && b + 4 * 2048 <= base as usize + 4 * scratch_len(2048), "inside the area");
        assert_eq!(b - a, 4 * 2048 + 2048, "half a page past the first row's end");
        for r in [a, b] {
            for p in [x as usize, y as usize] {
                // 1024 bytes, less the area's start off a 64-byte boundary.
                assert!(apart(r as isize - p as isize) >= 960, "scratch {x_off} {y_off}: {r:#x} near {p:#x}");
            }
        }
    }
}

/// A matrix of `rows` rows of `n` whose first element is `x_page` bytes past a page
/// boundary, and an output `y_page` bytes past one (`y_page % 4 == 0`), in one buffer:
/// `(buffer, x's start, y's start)` as element indices.
#[cfg(target_arch = "x86_64")]
fn paged(rows: usize, n: usize, x_page: usize, y_page: usize) -> (Vec<f32>, usize, usize) {
    let len = rows * n;
    let pages = (4 * len).div_ceil(4096) + 1;
    let buf = vec![0f32; 1024 + pages * 2048 + len + 2048];
    let aligned = (4096 - buf.as_ptr() as usize % 4096) % 4096 / 4;
    (buf, aligned + x_page / 4, aligned + pages * 1024 + y_page / 4)
}

/// softmax and log_softmax pipelined over rows whose input and output sit at page offsets
/// that make the passes rotate their output lines (the input's rows and the output's at the
/// same offset, one row apart, half a page apart, and others) give the one-row kernels' bits,
/// streamed or not, through the dispatched kernel and (where the CPU has it) the AVX2 one:
/// every line of every row is written once, wherever the rotation starts.
#[test]
#[cfg(target_arch = "x86_64")]
fn rotated_row_passes_write_every_line() {
    const STALE: f32 = -7.654_321e7;
    let mut rotated_cases = 0;
    for n in [16usize, 17, 33, 48, 64, 100, 512, 1000, 1024, 2048] {
        let rows = 5;
        let src: Vec<f32> = (0..rows * n).map(|i| ((i * 7919) % 2003) as f32 * 0.013 - 13.0).collect();
        // The one-row kernels' bits: the dispatched ones', and the portable ones' (which the
        // AVX2 kernels give).
        let one_row = |f: &dyn Fn(&[f32], &mut [f32])| {
            let mut want = vec![0f32; rows * n];
            for (xr, yr) in src.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
                f(xr, yr);
            }
            want
        };
        let want = (one_row(&|x, y| softmax_into(x, y, false)), one_row(&|x, y| log_softmax_into(x, y, false)));
        let portable = (one_row(&|x, y| softmax_row::<true>(x, y)), one_row(&|x, y| log_softmax_row::<true>(x, y)));
        let row_bytes = 4 * n % 4096;
        for (x_page, y_page) in [(0, 0), (0, row_bytes), (0, 2 * row_bytes % 4096), (0, 2048), (64, 0), (512, 3072)] {
            let gap = y_page as isize - x_page as isize - 4 * n as isize;
            if rotation(n / 16 * 16, &[gap, gap - 4 * n as isize]) > 0 {
                rotated_cases += 1;
            }
            let (mut buf, xa, ya) = paged(rows, n, x_page, y_page);
            buf[xa..xa + rows * n].copy_from_slice(&src);
            let (x, y) = buf.split_at_mut(ya);
            let (x, y) = (&x[xa..xa + rows * n], &mut y[..rows * n]);
            type Kernel = unsafe fn(&[f32], &mut [f32], usize, bool);
            let mut kernels: Vec<(&str, Kernel, &[f32])> =
                vec![("softmax", softmax_rows_into, &want.0), ("log_softmax", log_softmax_rows_into, &want.1)];
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                kernels.push(("AVX2 softmax", avx2::softmax_rows, &portable.0));
                kernels.push(("AVX2 log_softmax", avx2::log_softmax_rows, &portable.1));
            }
            for (what, kernel, want) in kernels {
                for stream in [false, true] {
                    y.fill(STALE);
                    // SAFETY: the AVX2 kernels only where the CPU has AVX2 and FMA (above);
                    // 0 < n <= SCRATCH; x and y hold whole rows.
                    unsafe { kernel(x, y, n, stream) };
                    store_fence();
                    let how = format!("{what} of {rows} rows of {n}, x at page offset {x_page}, y at {y_page}");
                    assert_same_rows(y, want, n, &format!("{how}, stream {stream}"));
                }
            }
        }
    }
    assert!(rotated_cases >= 20, "{rotated_cases} placements rotate the output lines");
}
