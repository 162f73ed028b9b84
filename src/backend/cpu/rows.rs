//! Library kernels for recovered row ops (`crate::recover`): softmax, log_softmax, layer_norm
//! and rms_norm over the last axis, and gelu, on f32 buffers.
//!
//! Each kernel means exactly what its op means (`crate::ops::norm`, `crate::ops::nn`) up to
//! the op's tolerance (`NUMERICS.md`), NaN and ±inf rules included, and is checked against the
//! interpreter on random and adversarial rows (`tests/all/recover.rs`, `recover_norms.rs`).
//! They are plain loops over 16-wide chunks written so that LLVM vectorizes them, compiled for
//! AVX-512 and AVX2 and picked at run time (the portable build is the same code): the 512-bit
//! vectors Cranelift's x64 backend does not emit. On AVX-512 all four norms run kernels
//! written with intrinsics (`rows/avx512.rs`: the same arithmetic, lane for lane), pipelined
//! across rows; on AVX2 too (`rows/avx2.rs`: 8 lanes, the portable code's bits, sums included:
//! its 16 f32 lanes are two vectors and its 32 f64 statistics lanes eight, reduced in the same
//! tree order, the elements past the last whole chunk added one at a time after them).
//!
//! The AVX2 figures below, and the AVX-512 and onnxruntime 1.32 ones beside them, are medians
//! of alternating rounds in one session on a 2-core AMD EPYC (Zen 5) VM with AVX-512, the AVX2
//! kernels run there under `LADDER_MAX_ISA=avx2`. Those cores issue 512-bit operations as
//! fast as 256-bit ones, so a compute-bound AVX2 loop takes about twice the AVX-512 time;
//! onnxruntime runs its own kernels, which the cap does not reach.
//!
//! - softmax: the row's maximum (NaN ignored here: a NaN then reaches `exp` and the sum, so
//!   the whole row is NaN, as the op says; `+inf` or an all-`-inf` row gives `inf - inf`, NaN
//!   too), then `e = exp(x - max)` written to the output while summing, then the output times
//!   `1 / sum`. One read of the input from memory; the second and third passes run over the
//!   output row while it is in L1. Rows of up to [`PREFETCH_MAX`] elements prefetch the next
//!   row (input for reading, output for writing) during the `exp` pass, so that memory and
//!   arithmetic overlap. On AVX-512, rows of up to 2048 are software-pipelined over each
//!   worker's run of rows (`avx512::softmax_rows`, the same bits): one pass computes row `i`'s
//!   terms and sum, row `i + 1`'s maximum and row `i - 1`'s output, so that no pass waits on
//!   the reduction before it (W2 at [4096, 1024]: 0.96 to 0.76–0.78 ms at one thread). On
//!   AVX2 the same (`avx2::softmax_rows`), each step of four `exp`s taken together
//!   (`avx2::exp_neg_n`, so that four independent chains fill the multiply-add ports): W2 from
//!   2.06 to 1.15 ms at one thread and 1.06–1.11 to 0.55–0.61 at two, against the
//!   auto-vectorized loops (onnxruntime: 1.33 and 0.69; AVX-512: 0.77–0.78 and 0.46–0.57).
//! - log_softmax: the maximum and `sum = Σ exp(x - max)` the same way (nothing written), then
//!   `(x - max) - ln(sum)`, `ln` in f64. `-inf` entries give `-inf`; NaN, `+inf` and all-`-inf`
//!   rows give NaN rows through the sum. Pipelined on AVX-512 and AVX2 as softmax is, at any
//!   row length (`avx512::log_softmax_rows`, `avx2::log_softmax_rows`: nothing is written
//!   before the output; AVX2 at [4096, 1024], one thread: 2.10 to 1.09 ms).
//! - `exp` there is [`exp_neg`]: its argument `x - max` is never above 0, so it needs no
//!   overflow handling. Cody–Waite reduction by ln 2 with FMAs, a degree-6 polynomial on
//!   |r| <= ln2/2 (coefficients fitted on Chebyshev nodes, rounded to f32), and `2^n` built as
//!   the bits `(n + 127) << 23` of a power of two (so results below 2^-126 come out as
//!   correctly rounded subnormals of `p * 2^-126`, and 0 from -87.7 down). Measured over every
//!   f32 in [-88, 0]: at most 0.97 ulp for results of 2^-126 and above, below that within
//!   2^-126 absolute; `exp_neg(0) = 1`, `exp_neg(-inf) = 0`, NaN stays NaN (the test
//!   `exp_neg_stays_within_one_ulp_over_the_softmax_range` in `tests/all/recover_norms.rs`
//!   checks a sweep).
//! - layer_norm: mean and variance in f64 from one pass over the row (sums of `x - x[0]` and
//!   its square: see `layer_norm_stats` for why the shift keeps them exact to well below
//!   f32's precision), then `(x - mean) * rsqrt(var + eps) * w + b` in f32 with the
//!   statistics rounded to f32, which is how the op's prims decomposition computes its output
//!   pass; that pass prefetches the next row. On AVX-512 the rows of a worker's run are
//!   pipelined (`avx512::layer_norm_rows`, the same bits): one pass sums row `i`'s statistics
//!   and writes row `i - 1`'s output, so that no output pass waits on a reduction (W3 at
//!   [4096, 1024]: 0.84 to 0.67 ms at one thread, 0.44 to 0.35 at two). On AVX2 the same for
//!   rows of at least 32 (`avx2::layer_norm_rows`, its 16 f64 accumulators in two passes over
//!   halves of the row's chunks, since with the output's registers they would not fit AVX2's
//!   16): W3 from 1.21–1.24 to 0.72–0.74 ms at one thread and 0.68 to 0.38–0.42 at two
//!   (onnxruntime: 1.69 and 1.02; AVX-512: 0.59–0.63 and 0.33–0.44).
//! - rms_norm: the mean of squares in f64, then `x * rsqrt(ms + eps) * w` in f32 as the op's
//!   decomposition computes its output pass; when `1 / sqrt(ms + eps)` is not a normal f32
//!   (rows of subnormals, rows near the top of the range) the output pass is in f64 instead.
//!   Pipelined on AVX-512 and AVX2 as layer_norm is (`avx512::rms_norm_rows`: [4096, 1024]
//!   from 0.74–0.98 to 0.55–0.58 ms at one thread, against auto-vectorized loops;
//!   `avx2::rms_norm_rows`: 0.84 to 0.65 ms).
//! - gelu: the f32 activation of GEMM epilogues (`super::activation`), erf or tanh form.
//!
//! Rows are split over rayon workers when there are enough of them (at least
//! [`PAR_ELEMS`] elements in all). A call whose input and output together are at least
//! `STREAM_CACHES` times the last-level cache (`SOFTMAX_STREAM_CACHES` for softmax)
//! writes its output with streaming stores (softmax through scratch rows on the stack, so
//! that the output is written once), which saves reading every output line from memory
//! before writing it; each worker fences its stores before the call returns. A streaming
//! store needs a 64-byte aligned address and the allocator's outputs are 16-byte aligned, so
//! a worker's rows are written as one flat run of whole cache lines, a line shared by two
//! rows completed when the second is (`avx512::RowOut`, `avx2::RowOut`): ordinary stores to
//! every row's partial lines made streaming slower than not streaming. Streamed rows have the
//! same bits as cached ones.

use rayon::prelude::*;
use smallvec::SmallVec;

use super::activation::{apply_f32, Activation};
use super::gemm::KernelError;
use crate::ir::Attrs;
use crate::ops::OpKind;

/// Elements gelu copies and activates at a time (16 KiB of f32).
const GELU_PIECE: usize = 4096;

/// Row kernels stream their output when the call's input and output bytes are at least this
/// many times the last-level cache. layer_norm and log_softmax, which write each output once
/// either way: on [16384, 1024] (128 MiB in all, 32 MiB of cache), layer_norm took 3.8 ms at
/// one thread either way and 1.9–2.4 ms streamed against 3.1–3.2 cached at two; on
/// [4096, 1024] (32 MiB, which fits the cache until other tenants' lines push it out)
/// streaming made it slower (0.72–0.92 ms against 0.65–0.70 at one thread).
const STREAM_CACHES: usize = 2;
/// softmax streams from the size of the cache on: cached, it writes its terms to the output
/// and then scales them there, where streamed it keeps the terms in L1 and writes the output
/// once. Median ms, cached / streamed, at one thread: [4096, 1024] 0.75–0.77 / 0.64–0.70;
/// [16384, 1024] 4.5–4.7 / 3.3–3.4.
const SOFTMAX_STREAM_CACHES: usize = 1;

/// Below this many elements a library call stays on the calling thread.
pub const PAR_ELEMS: usize = 1 << 16;

/// Runs recovered op `op` on f32 buffers: `args[0]` is `x`, later args the op's other
/// operands (layer_norm's weight and bias, rms_norm's weight; attention's k, v and an f32
/// mask), `shapes` theirs in the same order, `out` the result. [`run_native`] also takes a
/// bool attention mask.
pub fn run_f32(
    op: OpKind,
    attrs: &Attrs,
    args: &[&[f32]],
    shapes: &[&[usize]],
    out: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    let shape = *shapes.first().ok_or_else(|| KernelError::Shape(format!("{op} without arguments")))?;
    if op == OpKind::ScaledDotProductAttention {
        let operands: SmallVec<[Operand; 4]> = args.iter().map(|&a| Operand::F32(a)).collect();
        return attention(attrs, &operands, shapes, out, threads);
    }
    if op == OpKind::Lstm {
        return super::recur::lstm(attrs, args, shapes, out, threads);
    }
    if op == OpKind::MaxPool2d {
        let x = *args.first().ok_or_else(|| KernelError::Shape("max_pool2d without arguments".into()))?;
        return super::pool::max_pool2d(attrs, x, shape, out, threads);
    }
    let len = KernelError::check_len;
    let numel: usize = shape.iter().product();
    let x = *args.first().ok_or_else(|| KernelError::Shape(format!("{op} without arguments")))?;
    len("x", x.len(), numel)?;
    len("out", out.len(), numel)?;
    let n = shape.last().copied().unwrap_or(1);
    // A call whose input and output together outgrow the last-level cache (twice it, or once
    // for softmax) streams its output past the caches: a consumer would not find it there
    // anyway, and a streaming store does not read each output line before writing it.
    let beyond = |caches: usize| (x.len() + out.len()).saturating_mul(4) >= caches * super::last_level_cache_bytes();
    let stream = beyond(STREAM_CACHES);
    let last_axis = |a: i64| a == -1 || (a >= 0 && a as usize + 1 == shape.len());
    match op {
        OpKind::Softmax | OpKind::LogSoftmax => {
            if !last_axis(attrs.int("axis")) {
                return Err(KernelError::Unsupported(format!("{op} over an axis other than the last")));
            }
            if op == OpKind::Softmax {
                let stream = beyond(SOFTMAX_STREAM_CACHES);
                row_chunks(x, out, n, threads, stream, |x, y| softmax_rows_into(x, y, n, stream));
            } else {
                row_chunks(x, out, n, threads, stream, |x, y| log_softmax_rows_into(x, y, n, stream));
            }
        }
        OpKind::LayerNorm => {
            if !last_axis(attrs.int("axis")) {
                return Err(KernelError::Unsupported("layer_norm over more than the last axis".into()));
            }
            let (w, b) = (args.get(1).copied(), args.get(2).copied());
            if let Some(w) = w {
                len("weight", w.len(), n)?;
            }
            if let Some(b) = b {
                len("bias", b.len(), n)?;
            }
            let eps = attrs.float("eps");
            row_chunks(x, out, n, threads, stream, |xc, yc| layer_norm_rows_into(xc, w, b, yc, n, eps, stream));
        }
        OpKind::RmsNorm => {
            if !last_axis(attrs.int("axis")) {
                return Err(KernelError::Unsupported("rms_norm over more than the last axis".into()));
            }
            let w = args.get(1).copied();
            if let Some(w) = w {
                len("weight", w.len(), n)?;
            }
            let eps = attrs.float("eps");
            row_chunks(x, out, n, threads, false, |xc, yc| rms_norm_rows_into(xc, w, yc, n, eps));
        }
        OpKind::Gelu | OpKind::Silu | OpKind::Sigmoid => {
            let act = Activation::from_op(op, attrs)
                .ok_or_else(|| KernelError::Unsupported(format!("{} as an activation", op.name())))?;
            let chunk = if threads > 1 && numel >= PAR_ELEMS { numel.div_ceil(4 * threads).max(4096) } else { numel };
            if chunk == 0 {
                return Ok(());
            }
            // Copied and activated in L1-sized pieces, so the output is written once and the
            // activation reads it from cache (whole-chunk copies doubled the memory traffic).
            out.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).for_each(|(y, x)| {
                for (y, x) in y.chunks_mut(GELU_PIECE).zip(x.chunks(GELU_PIECE)) {
                    y.copy_from_slice(x);
                    apply_f32(&act, y);
                }
            });
        }
        _ => return Err(KernelError::Unsupported(format!("no library kernel for {op}"))),
    }
    Ok(())
}

/// An operand of a library call as the runtime holds it: f32 values, or bools one byte each
/// (nonzero = true).
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    F32(&'a [f32]),
    Bool(&'a [u8]),
}

/// [`run_f32`] for operands of either kind: attention's mask may be bool; every other operand
/// of every op must be f32.
pub fn run_native(
    op: OpKind,
    attrs: &Attrs,
    args: &[Operand],
    shapes: &[&[usize]],
    out: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    if op == OpKind::ScaledDotProductAttention {
        return attention(attrs, args, shapes, out, threads);
    }
    let floats: SmallVec<[&[f32]; 4]> = args
        .iter()
        .map(|a| match *a {
            Operand::F32(x) => Ok(x),
            Operand::Bool(_) => Err(KernelError::Unsupported(format!("a bool operand of {op}"))),
        })
        .collect::<Result<_, _>>()?;
    run_f32(op, attrs, &floats, shapes, out, threads)
}

/// `scaled_dot_product_attention(q, k, v, mask?)`: q, k, v of one shape `[batch..., ·, ·]`,
/// the mask (f32 or bool) broadcast to the scores `[batch..., L, S]`.
fn attention(
    attrs: &Attrs,
    args: &[Operand],
    shapes: &[&[usize]],
    out: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    let (&[Operand::F32(q), Operand::F32(k), Operand::F32(v), ref mask @ ..], &[sq, sk, sv, ref mask_shape @ ..]) =
        (args, shapes)
    else {
        return Err(KernelError::Shape("attention takes f32 q, k and v and an optional mask".into()));
    };
    if mask.len() > 1 || mask.len() != mask_shape.len() {
        return Err(KernelError::Shape("attention takes f32 q, k and v and an optional mask".into()));
    }
    let r = sq.len();
    if r < 2 || sk.len() != r || sv.len() != r || sq[..r - 2] != sk[..r - 2] || sq[..r - 2] != sv[..r - 2] {
        return Err(KernelError::Shape(format!("attention operands {sq:?}, {sk:?}, {sv:?}")));
    }
    let dims = super::attention::Dims {
        nb: sq[..r - 2].iter().product(),
        l: sq[r - 2],
        s: sk[r - 2],
        d: sq[r - 1],
        dv: sv[r - 1],
    };
    if sk[r - 1] != dims.d || sv[r - 2] != dims.s {
        return Err(KernelError::Shape(format!("attention operands {sq:?}, {sk:?}, {sv:?}")));
    }
    let mask = match (mask.first(), mask_shape.first()) {
        (Some(m), Some(shape)) => {
            let values = match *m {
                Operand::F32(x) => super::attention::MaskValues::Float(x),
                Operand::Bool(x) => super::attention::MaskValues::Bool(x),
            };
            Some(super::attention::Mask::broadcast(values, shape, &sq[..r - 2], dims.l, dims.s)?)
        }
        _ => None,
    };
    let scale = match attrs.float("scale") {
        x if x.is_nan() => 1.0 / (dims.d as f64).sqrt(),
        x => x,
    } as f32;
    let (causal, safe) = (attrs.bool("causal"), attrs.bool("safe_softmax"));
    super::attention::attention_f32(q, k, v, mask.as_ref(), out, &dims, scale, causal, safe, threads)
}

/// `f(x_rows, y_rows)` over runs of whole rows of length `n` (nothing for `n = 0`), over
/// rayon workers when it pays. With `stream` (`f` may use streaming stores), each worker
/// fences its stores when its rows are done, so that they are visible to whoever reads the
/// output after the call.
fn row_chunks(x: &[f32], y: &mut [f32], n: usize, threads: usize, stream: bool, f: impl Fn(&[f32], &mut [f32]) + Sync) {
    if n == 0 || x.is_empty() {
        return;
    }
    let count = x.len() / n;
    let run = |xc: &[f32], yc: &mut [f32]| {
        f(xc, yc);
        if stream {
            store_fence();
        }
    };
    if threads <= 1 || x.len() < PAR_ELEMS || count < 2 {
        return run(x, y);
    }
    let per = count.div_ceil(4 * threads).max(1) * n;
    y.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(|(yc, xc)| run(xc, yc));
}

/// Orders this thread's streaming stores before its later stores (an `sfence`), so that a
/// thread that sees the call finish sees its output.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

macro_rules! multiversion {
    ($dispatch:ident, $avx512:ident, $avx2:ident, $generic:ident, ($($arg:ident: $ty:ty),*)) => {
        fn $dispatch($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if super::has_avx512() {
                    // SAFETY: the CPU has every feature the variant is compiled for.
                    return unsafe { $avx512($($arg),*) };
                }
                if super::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { $avx2($($arg),*) };
                }
            }
            $generic::<PORTABLE_FMA>($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn $avx512($($arg: $ty),*) {
            $generic::<true>($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($arg: $ty),*) {
            $generic::<true>($($arg),*)
        }
    };
}

multiversion!(dispatch_softmax, softmax_avx512, softmax_avx2, softmax_row, (x: &[f32], y: &mut [f32]));
multiversion!(
    dispatch_log_softmax,
    log_softmax_avx512,
    log_softmax_avx2,
    log_softmax_row,
    (x: &[f32], y: &mut [f32])
);
multiversion!(
    dispatch_layer_norm,
    layer_norm_avx512,
    layer_norm_avx2,
    layer_norm_row,
    (x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, y: &mut [f32], eps: f64)
);
multiversion!(
    dispatch_rms_norm,
    rms_norm_avx512,
    rms_norm_avx2,
    rms_norm_row,
    (x: &[f32], w: Option<&[f32]>, y: &mut [f32], eps: f64)
);

/// The softmax of one row (`y` gets it, of the same length), vectorized for the running CPU;
/// with `stream`, the AVX-512 and AVX2 paths write `y` with streaming stores (the caller
/// fences).
fn softmax_into(x: &[f32], y: &mut [f32], stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above).
        return unsafe { avx512::softmax(x, y, stream) };
    } else if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { avx2::softmax(x, y, stream) };
    }
    let _ = stream;
    dispatch_softmax(x, y)
}

/// The softmax of whole rows of `n > 0` (`y` gets them), pipelined across rows where the CPU
/// has AVX-512 or AVX2 and the rows fit the scratch rows (the same bits as [`softmax_into`]).
fn softmax_rows_into(x: &[f32], y: &mut [f32], n: usize, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() && n <= avx512::SCRATCH {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above); 0 < n <= SCRATCH (the
        // caller skips n = 0).
        return unsafe { avx512::softmax_rows(x, y, n, stream) };
    } else if super::has_avx2() && n <= avx2::SCRATCH {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); 0 < n <= SCRATCH.
        return unsafe { avx2::softmax_rows(x, y, n, stream) };
    }
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        softmax_into(xr, yr, stream);
    }
}

/// The log_softmax of whole rows of `n > 0` (`y` gets them), pipelined across rows where the
/// CPU has AVX-512 or AVX2 (the same bits as [`log_softmax_into`]).
fn log_softmax_rows_into(x: &[f32], y: &mut [f32], n: usize, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above); n > 0 (the caller skips
        // n = 0).
        return unsafe { avx512::log_softmax_rows(x, y, n, stream) };
    } else if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); n > 0.
        return unsafe { avx2::log_softmax_rows(x, y, n, stream) };
    }
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        log_softmax_into(xr, yr, stream);
    }
}

/// The log_softmax of one row (`y` gets it, of the same length); `stream` as for softmax.
fn log_softmax_into(x: &[f32], y: &mut [f32], stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above).
        return unsafe { avx512::log_softmax(x, y, stream) };
    } else if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { avx2::log_softmax(x, y, stream) };
    }
    let _ = stream;
    dispatch_log_softmax(x, y)
}

const L: usize = 16;

/// Rows of up to this many elements prefetch the next row while one is computed (two rows of
/// input and output then fit in L1).
pub const PREFETCH_MAX: usize = 2048;

/// `exp_neg`'s floor: arguments below it are taken as it, whose `2^n` is 0.
const EXP_FLOOR: f32 = -88.0;
/// `1.5 * 2^23 + 127`: `d log2(e) + EXP_MAGIC` rounds `d log2(e)` to an integer `n` and holds
/// `n + 127` in its low mantissa bits.
const EXP_MAGIC: f32 = 12_582_912.0 + 127.0;
/// ln 2 as the nearest f32, and the f32 nearest to the rest.
const LN2_HI: f32 = std::f32::consts::LN_2;
const LN2_LO: f32 = -1.904_654_2e-9;
/// `(e^r - 1) / r` on |r| <= ln2/2, highest degree first: a Chebyshev fit rounded to f32
/// (relative error of `1 + r q(r)` 1.0e-8 before rounding).
const EXP_Q: [f32; 6] = [0.001_393_366_7, 0.008_369_169, 0.041_666_463, 0.166_665_05, 0.5, 1.0];

/// ln 2 split for a reduction without fused multiply-adds: `LN2_SHORT` has 9 significant
/// bits, so `n * LN2_SHORT` is exact for every `n` the floor allows.
const LN2_SHORT: f32 = 0.693_359_4;
const LN2_SHORT_LO: f32 = -2.121_944_4e-4;

/// Whether the portable paths' target has fused multiply-add instructions: aarch64 always,
/// x86-64 where ladder is compiled for them. Elsewhere `mul_add` is a call per element
/// (glibc's `fmaf`, emulated in software on CPUs without FMA: the portable softmax ran 90
/// times slower than the AVX2 one), so the portable code multiplies and adds instead, which
/// the compiler vectorizes with SSE.
pub(crate) const PORTABLE_FMA: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

/// `a * b + c`: fused (one rounding) with `FMA`, else a multiply and an add.
#[inline(always)]
pub(crate) fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// [`fmadd`] in f64.
#[inline(always)]
pub(crate) fn fmadd64<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// e^d for d <= 0 (and NaN, which stays NaN); see the module docs for its bound. Valid up
/// to d = 88 (no overflow handling above). The AVX-512 and AVX2 paths' bits.
#[inline(always)]
pub fn exp_neg(d: f32) -> f32 {
    exp_neg_with::<true>(d)
}

/// [`exp_neg`] with fused multiply-adds (`FMA`, the same bits as the vector paths), or
/// without: then the reduction `d - n ln 2` subtracts an `n ln 2` split so that its first
/// product is exact, and every step rounds twice (within 2 ulp of `e^d`, tested).
#[inline(always)]
pub fn exp_neg_with<const FMA: bool>(d: f32) -> f32 {
    let dc = if d < EXP_FLOOR { EXP_FLOOR } else { d };
    let t = fmadd::<FMA>(dc, std::f32::consts::LOG2_E, EXP_MAGIC);
    let n = t - EXP_MAGIC;
    let r = if FMA { n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, dc)) } else { (dc - n * LN2_SHORT) - n * LN2_SHORT_LO };
    let mut q = EXP_Q[0];
    for &c in &EXP_Q[1..] {
        q = fmadd::<FMA>(q, r, c);
    }
    let p = fmadd::<FMA>(r, q, 1.0);
    p * f32::from_bits(t.to_bits() << 23)
}

/// The maximum of a row, NaN ignored (`-inf` for an empty row).
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    #[inline(always)]
    fn max(a: f32, b: f32) -> f32 {
        if b > a {
            b
        } else {
            a
        }
    }
    let mut m = [[f32::NEG_INFINITY; L]; 4];
    let mut xc = x.chunks_exact(4 * L);
    for c in &mut xc {
        for k in 0..4 {
            for j in 0..L {
                m[k][j] = max(m[k][j], c[k * L + j]);
            }
        }
    }
    let mut lanes = m[0];
    for mk in &m[1..] {
        for (l, &v) in lanes.iter_mut().zip(mk) {
            *l = max(*l, v);
        }
    }
    let mut best = tree_reduce(lanes, max);
    for &v in xc.remainder() {
        best = max(best, v);
    }
    best
}

/// Combines `N` (a power of two) partial results pairwise, halving: the combines of each
/// level are independent, so `log2 N` of them are in a row where a left-to-right fold has
/// `N` (for 32 f64 sums, 5 dependent adds instead of 31: on a 1024-element row that fold
/// took as long as the vectorized pass before it).
#[inline(always)]
pub(crate) fn tree_reduce<T: Copy, const N: usize>(mut a: [T; N], f: impl Fn(T, T) -> T) -> T {
    const { assert!(N.is_power_of_two()) };
    let mut w = N;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            a[j] = f(a[j], a[j + w]);
        }
    }
    a[0]
}

/// The sum of a row (16 partial sums).
#[inline(always)]
fn row_sum(x: &[f32]) -> f32 {
    let mut s = [0f32; L];
    let mut xc = x.chunks_exact(L);
    for c in &mut xc {
        for j in 0..L {
            s[j] += c[j];
        }
    }
    let mut total = tree_reduce(s, |a, b| a + b);
    for &v in xc.remainder() {
        total += v;
    }
    total
}

#[inline(always)]
fn softmax_row<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    let max = row_max(x);
    for (&xv, yv) in x.iter().zip(y.iter_mut()) {
        *yv = exp_neg_with::<FMA>(xv - max);
    }
    let r = 1.0 / row_sum(y);
    for v in y.iter_mut() {
        *v *= r;
    }
}

#[inline(always)]
fn log_softmax_row<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    let max = row_max(x);
    for (&xv, yv) in x.iter().zip(y.iter_mut()) {
        *yv = exp_neg_with::<FMA>(xv - max);
    }
    let lse = (row_sum(y) as f64).ln() as f32;
    for (&xv, yv) in x.iter().zip(y.iter_mut()) {
        *yv = (xv - max) - lse;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Independent f64 accumulators in the norms' statistics passes: 32 lanes are four 512-bit
/// (or eight 256-bit) add chains, enough to cover the add latency; 8 lanes left the passes
/// latency-bound at a quarter of the load rate.
pub(crate) const STAT_LANES: usize = 32;

/// `Σ f(v)` over the row in f64, in [`STAT_LANES`] interleaved partial sums.
#[inline(always)]
fn stat_sum(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; STAT_LANES];
    let mut c = x.chunks_exact(STAT_LANES);
    for ch in &mut c {
        for j in 0..STAT_LANES {
            acc[j] += f(ch[j] as f64);
        }
    }
    let mut total = tree_reduce(acc, |a, b| a + b);
    for &v in c.remainder() {
        total += f(v as f64);
    }
    total
}

/// layer_norm's row statistics: the mean and `1 / sqrt(var + eps)`, rounded to f32, from one
/// read of the row in f64: the sums of `d = x - x[0]` and of `d²`, then `mean = x[0] + Σd/n`
/// and `var = Σd²/n - (Σd/n)²`. Shifting by an element of the row bounds the cancellation:
/// `Σd² / (n var) = 1 + (x[0] - mean)² / var <= 1 + n`, so at most `log2(n + 1)` of f64's 53
/// bits are lost (43 left at n = 1024), against the 24 of the f32 result. A non-finite
/// element makes the sums, and so the row, NaN, as the op's two-pass definition does.
#[inline(always)]
fn layer_norm_stats<const FMA: bool>(x: &[f32], eps: f64) -> (f32, f32) {
    let n = x.len() as f64;
    let k = x[0] as f64;
    let (mut s1, mut s2) = ([0f64; STAT_LANES], [0f64; STAT_LANES]);
    let mut c = x.chunks_exact(STAT_LANES);
    for ch in &mut c {
        for j in 0..STAT_LANES {
            let d = ch[j] as f64 - k;
            s1[j] += d;
            s2[j] = fmadd64::<FMA>(d, d, s2[j]);
        }
    }
    layer_norm_finish(s1, s2, c.remainder(), k, n, eps)
}

/// The end of [`layer_norm_stats`], shared with the pipelined kernels so that all
/// give the same bits: the lane sums `s1`, `s2` of the row's whole 32-element chunks reduced,
/// the remaining elements `rest` added one at a time, and the statistics from the sums.
#[inline(always)]
fn layer_norm_finish(
    s1: [f64; STAT_LANES],
    s2: [f64; STAT_LANES],
    rest: &[f32],
    k: f64,
    n: f64,
    eps: f64,
) -> (f32, f32) {
    let (mut t1, mut t2) = (tree_reduce(s1, |a, b| a + b), tree_reduce(s2, |a, b| a + b));
    for &v in rest {
        let d = v as f64 - k;
        t1 += d;
        t2 += d * d;
    }
    let md = t1 / n;
    // Rounding may leave a tiny negative for a constant row; NaN (from a non-finite element)
    // stays NaN (`f64::max` would drop it).
    let var = t2 / n - md * md;
    let var = if var < 0.0 { 0.0 } else { var };
    (((k + md) as f32), (1.0 / (var + eps).sqrt()) as f32)
}

#[inline(always)]
fn layer_norm_row<const FMA: bool>(x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, y: &mut [f32], eps: f64) {
    let n = x.len();
    if n == 0 {
        return;
    }
    // The row's statistics are exact to f64 rounding; the output pass is in f32 (16 lanes),
    // as the op's prims decomposition computes it.
    let (mean, inv) = layer_norm_stats::<FMA>(x, eps);
    let y = &mut y[..n];
    match (w, b) {
        (Some(w), Some(b)) => {
            for (((y, &x), &w), &b) in y.iter_mut().zip(x).zip(&w[..n]).zip(&b[..n]) {
                *y = ((x - mean) * inv) * w + b;
            }
        }
        (Some(w), None) => {
            for ((y, &x), &w) in y.iter_mut().zip(x).zip(&w[..n]) {
                *y = ((x - mean) * inv) * w;
            }
        }
        _ => {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = (x - mean) * inv;
            }
        }
    }
}

/// layer_norm of whole rows of `n > 0` (`y` gets them; `w`, `b` of length `n`), pipelined
/// across rows where the CPU has AVX-512 or AVX2 (the same bits as [`layer_norm_row`]).
fn layer_norm_rows_into(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    y: &mut [f32],
    n: usize,
    eps: f64,
    stream: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above); n > 0 (the caller skips
        // n = 0) and w and b were checked to the row length.
        return unsafe { avx512::layer_norm_rows(x, w, b, y, n, eps, stream) };
    } else if super::has_avx2() && n >= STAT_LANES {
        // Shorter rows, whose statistics are all summed one element at a time, went up to a
        // fifth slower pipelined (2048 rows of 17: 39 to 47 us; of 31, 57 to 60) and take the
        // loops below.
        // SAFETY: the CPU has AVX2 and FMA (checked just above); n > 0, and w and b were
        // checked to the row length.
        return unsafe { avx2::layer_norm_rows(x, w, b, y, n, eps, stream) };
    }
    let _ = stream;
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        dispatch_layer_norm(xr, w, b, yr, eps);
    }
}

#[inline(always)]
fn rms_norm_row<const FMA: bool>(x: &[f32], w: Option<&[f32]>, y: &mut [f32], eps: f64) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let inv = rms_inv(stat_sum(x, |v| v * v), n, eps);
    let inv32 = inv as f32;
    if inv32.is_normal() {
        // The output pass in f32, as the op's prims decomposition computes it.
        let y = &mut y[..n];
        match w {
            Some(w) => {
                for ((y, &x), &w) in y.iter_mut().zip(x).zip(&w[..n]) {
                    *y = (x * inv32) * w;
                }
            }
            None => {
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = x * inv32;
                }
            }
        }
    } else {
        rms_norm_out_f64(x, w, y, inv);
    }
}

/// rms_norm's `1 / sqrt(mean(x²) + eps)` from the row's sum of squares `total` (in f64).
#[inline(always)]
fn rms_inv(total: f64, n: usize, eps: f64) -> f64 {
    1.0 / (total / n as f64 + eps).sqrt()
}

/// rms_norm's output pass in f64, for rows whose `inv` is 0, inf, NaN or below f32's normal
/// range.
fn rms_norm_out_f64(x: &[f32], w: Option<&[f32]>, y: &mut [f32], inv: f64) {
    for i in 0..x.len() {
        let v = x[i] as f64 * inv * w.map_or(1.0, |w| w[i] as f64);
        y[i] = v as f32;
    }
}

/// rms_norm of whole rows of `n > 0` (`y` gets them; `w` of length `n`), pipelined across
/// rows where the CPU has AVX-512 or AVX2 (the same bits as [`rms_norm_row`]).
fn rms_norm_rows_into(x: &[f32], w: Option<&[f32]>, y: &mut [f32], n: usize, eps: f64) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: the CPU has AVX-512F and FMA (checked just above); n > 0 (the caller skips
        // n = 0) and w was checked to the row length.
        return unsafe { avx512::rms_norm_rows(x, w, y, n, eps) };
    } else if super::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); n > 0, and w was checked to
        // the row length.
        return unsafe { avx2::rms_norm_rows(x, w, y, n, eps) };
    }
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        dispatch_rms_norm(xr, w, yr, eps);
    }
}

#[cfg(test)]
mod tests {
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
                assert!(
                    close(p[i], v[i], n, false),
                    "softmax of a row of {n} at {i}: {} portable, {} AVX-512",
                    p[i],
                    v[i]
                );
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
                assert!(
                    (got - want).abs() <= 2.0 * f32::from_bits(1) as f64,
                    "exp_neg({d:e}) = {got:e}, exp = {want:e}"
                );
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
                assert!(
                    close(u[i], f[i], n, false),
                    "softmax of a row of {n} at {i}: {} unfused, {} fused",
                    u[i],
                    f[i]
                );
            }
            log_softmax_row::<true>(&row, &mut f);
            log_softmax_row::<false>(&row, &mut u);
            for i in 0..n {
                assert!(
                    close(u[i], f[i], n, true),
                    "log_softmax of a row of {n} at {i}: {} unfused, {} fused",
                    u[i],
                    f[i]
                );
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
}
