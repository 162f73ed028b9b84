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
//! same bits as cached ones. A pipelined softmax or log_softmax pass stores one row while it
//! loads another, so it keeps those stores off the page offsets of its loads (4K aliasing):
//! the scratch rows are placed away from the input and output ([`scratch_rows`]), and the
//! previous row's lines are written rotated against the current row's ([`rotation`]).

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

/// Bytes in the page a load and an earlier store are compared by: a load whose address
/// matches a pending store's in its low 12 bits is held back as if it read that store (4K
/// aliasing), which a pass that stores a row while it loads another at the same page offset
/// pays on every vector.
#[cfg(target_arch = "x86_64")]
const PAGE: usize = 4096;

/// How far a pipelined row pass ([`avx512::softmax_rows`], `avx2::softmax_rows` and the
/// log_softmax ones) rotates the previous row's output within its `whole` elements (those it
/// writes a line at a time alongside the loads): while it loads the current row's elements at
/// `i` it writes the previous row's line at `i + rot`, wrapped. `gaps` are the page-offset
/// differences (in bytes, [`page_gap`]) between a store and a load that meet at the same `i`
/// without the rotation; the rotation, a multiple of 16 elements of at most half a page,
/// keeps the nearest of them farthest from a page boundary (the smallest such rotation). A
/// run of rows a page long whose input and output share their page offset (two large
/// allocations do) otherwise stored every output line at the page offset of the input line
/// the next load read. Streamed, one thread, Zen 4, input and output at the same page
/// offset: softmax of [4096, 1024] 4.0–4.2 ms on the AVX-512 path without the rotation, 1.5–1.7
/// with it (1.4–1.7 at other offsets either way); log_softmax of [16384, 1024] 13.1 ms
/// against 6.6.
#[cfg(target_arch = "x86_64")]
pub(super) fn rotation(whole: usize, gaps: &[isize]) -> usize {
    let apart = |d: isize| {
        let d = d.rem_euclid(PAGE as isize) as usize;
        d.min(PAGE - d)
    };
    let nearest = |rot: usize| gaps.iter().map(|&g| apart(g + 4 * rot as isize)).min().unwrap_or(PAGE);
    let candidates = (0..whole.min(PAGE / 2 / 4 + 1)).step_by(L);
    candidates.max_by_key(|&rot| (nearest(rot), std::cmp::Reverse(rot))).unwrap_or(0)
}

/// `a - b` in bytes (wrapping; only its page offset is used).
#[cfg(target_arch = "x86_64")]
pub(super) fn page_gap(a: *const f32, b: *const f32) -> isize {
    (a as usize).wrapping_sub(b as usize) as isize
}

/// `i + rot` wrapped into `0..whole` (`i < whole`, `rot < whole` or `whole` 0).
#[inline(always)]
#[cfg(target_arch = "x86_64")]
pub(super) fn rotated(i: usize, rot: usize, whole: usize) -> usize {
    let j = i + rot;
    if j >= whole {
        j - whole
    } else {
        j
    }
}

/// The elements of a softmax scratch area ([`scratch_rows`]): two rows of up to `SCRATCH`
/// elements, the second half a page past the end of the first (so that storing one row's
/// terms and loading the other's never meet at a page offset), and a page of slack to place
/// them in.
#[cfg(target_arch = "x86_64")]
pub(super) const fn scratch_len(scratch: usize) -> usize {
    2 * scratch + (PAGE + PAGE / 2) / 4
}

/// Where a pass's two scratch rows go in an area of [`scratch_len`] elements at `base`: at
/// the 64-byte step of the first page that keeps both rows farthest (as page offsets) from
/// the rows the pass loads and streams, `avoid` (the input's first row and the output's).
/// The rows had been one array on the stack, 8 KiB apart (every term stored at the page
/// offset of the other row's term loaded next), wherever the stack put them against the
/// input: `ladder bench`'s W2 (softmax of [4096, 1024], streamed, one thread, Zen 4) under
/// the `avx2` cap took 14.7–15.2 ms, and 2.1–2.6 placed.
#[cfg(target_arch = "x86_64")]
pub(super) fn scratch_rows(base: *mut f32, scratch: usize, avoid: [*const f32; 2]) -> [*mut f32; 2] {
    let second = scratch + PAGE / 2 / 4;
    let apart = |a: usize, b: usize| {
        let d = a.wrapping_sub(b) % PAGE;
        d.min(PAGE - d)
    };
    let distance = |at: usize| {
        let rows = [at, at + second * 4];
        rows.iter().flat_map(|&r| avoid.map(|a| apart(r, a as usize))).min().unwrap_or(PAGE)
    };
    let start = base as usize;
    let best = (0..PAGE / 64).map(|k| start + 64 * k).max_by_key(|&at| (distance(at), usize::MAX - at));
    // `off < PAGE / 4`, so the second row ends within `scratch_len(scratch)` elements.
    let off = (best.unwrap_or(start) - start) / 4;
    [base.wrapping_add(off), base.wrapping_add(off + second)]
}

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
mod tests;
