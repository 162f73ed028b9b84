//! Library kernels for recovered row ops (`crate::recover`): softmax and layer_norm over the
//! last axis, and gelu, on f32 buffers.
//!
//! Each kernel means exactly what its op means (`crate::ops::norm`, `crate::ops::nn`) up to
//! the op's tolerance (`NUMERICS.md`), NaN and ±inf rules included, and is checked against the
//! interpreter on random and adversarial rows (`tests/recover.rs`). They are plain loops over
//! 16-wide chunks written so that LLVM vectorizes them, compiled for AVX-512 and AVX2 and
//! picked at run time (the portable build is the same code): the 512-bit vectors Cranelift's
//! x64 backend does not emit.
//!
//! - softmax: the row's maximum (NaN ignored here: a NaN then reaches `exp` and the sum, so
//!   the whole row is NaN, as the op says; `+inf` or an all-`-inf` row gives `inf - inf`, NaN
//!   too), then `e = exp(x - max)` written to the output while summing, then the output times
//!   `1 / sum`. One read of the input from memory; the second and third passes run over the
//!   output row while it is in L1.
//! - layer_norm: mean and variance in f64 (two passes over the row, from L1 after the first),
//!   then `(x - mean) * rsqrt(var + eps) * w + b` in f32 with the statistics rounded to f32,
//!   which is how the op's prims decomposition computes its output pass.
//! - gelu: the f32 activation of GEMM epilogues (`super::activation`), erf or tanh form.
//!
//! Rows are split over rayon workers when there are enough of them (at least
//! [`PAR_ELEMS`] elements in all).

use rayon::prelude::*;
use smallvec::SmallVec;

use super::activation::{apply_f32, exp, Activation};
use super::gemm::KernelError;
use crate::ir::Attrs;
use crate::ops::OpKind;

/// Below this many elements a library call stays on the calling thread.
pub const PAR_ELEMS: usize = 1 << 16;

/// Runs recovered op `op` on f32 buffers: `args[0]` is `x`, later args the op's other
/// operands (layer_norm's weight and bias; attention's k, v and an f32 mask), `shapes` theirs in
/// the same order, `out` the result. [`run_native`] also takes a bool attention mask.
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
    let len = |what: &'static str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(KernelError::Len { name: what, got, want })
        }
    };
    let numel: usize = shape.iter().product();
    let x = *args.first().ok_or_else(|| KernelError::Shape(format!("{op} without arguments")))?;
    len("x", x.len(), numel)?;
    len("out", out.len(), numel)?;
    let n = shape.last().copied().unwrap_or(1);
    let last_axis = |a: i64| a == -1 || (a >= 0 && a as usize + 1 == shape.len());
    match op {
        OpKind::Softmax => {
            if !last_axis(attrs.int("axis")) {
                return Err(KernelError::Unsupported("softmax over an axis other than the last".into()));
            }
            rows(x, out, n, threads, dispatch_softmax);
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
            rows(x, out, n, threads, |xr, yr| dispatch_layer_norm(xr, w, b, yr, eps));
        }
        OpKind::Gelu => {
            let act = if attrs.str("approximate") == "tanh" { Activation::GeluTanh } else { Activation::Gelu };
            let chunk = if threads > 1 && numel >= PAR_ELEMS { numel.div_ceil(4 * threads).max(4096) } else { numel };
            if chunk == 0 {
                return Ok(());
            }
            out.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).for_each(|(y, x)| {
                y.copy_from_slice(x);
                apply_f32(&act, y);
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

/// `f(x_row, y_row)` for every row of length `n`, over rayon workers when it pays.
fn rows(x: &[f32], y: &mut [f32], n: usize, threads: usize, f: impl Fn(&[f32], &mut [f32]) + Sync) {
    if n == 0 || x.is_empty() {
        return;
    }
    let count = x.len() / n;
    if threads <= 1 || x.len() < PAR_ELEMS || count < 2 {
        for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
            f(xr, yr);
        }
        return;
    }
    let per = count.div_ceil(4 * threads).max(1) * n;
    y.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(|(yc, xc)| {
        for (xr, yr) in xc.chunks_exact(n).zip(yc.chunks_exact_mut(n)) {
            f(xr, yr);
        }
    });
}

macro_rules! multiversion {
    ($dispatch:ident, $avx512:ident, $avx2:ident, $generic:ident, ($($arg:ident: $ty:ty),*)) => {
        fn $dispatch($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { $avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { $avx2($($arg),*) };
                }
            }
            $generic($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
        unsafe fn $avx512($($arg: $ty),*) {
            $generic($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($arg: $ty),*) {
            $generic($($arg),*)
        }
    };
}

multiversion!(dispatch_softmax, softmax_avx512, softmax_avx2, softmax_row, (x: &[f32], y: &mut [f32]));
multiversion!(
    dispatch_layer_norm,
    layer_norm_avx512,
    layer_norm_avx2,
    layer_norm_row,
    (x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, y: &mut [f32], eps: f64)
);

const L: usize = 16;

#[inline(always)]
fn softmax_row(x: &[f32], y: &mut [f32]) {
    let mut m = [f32::NEG_INFINITY; L];
    let mut xc = x.chunks_exact(L);
    for c in &mut xc {
        for j in 0..L {
            m[j] = m[j].max(c[j]);
        }
    }
    let mut max = m.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in xc.remainder() {
        max = max.max(v);
    }
    let mut s = [0f32; L];
    let mut yc = y.chunks_exact_mut(L);
    let mut xc = x.chunks_exact(L);
    for (xs, ys) in (&mut xc).zip(&mut yc) {
        for j in 0..L {
            let e = exp(xs[j] - max);
            ys[j] = e;
            s[j] += e;
        }
    }
    let mut sum: f32 = s.iter().sum();
    for (&xv, yv) in xc.remainder().iter().zip(yc.into_remainder()) {
        let e = exp(xv - max);
        *yv = e;
        sum += e;
    }
    let r = 1.0 / sum;
    for v in y.iter_mut() {
        *v *= r;
    }
}

#[inline(always)]
fn layer_norm_row(x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, y: &mut [f32], eps: f64) {
    let n = x.len();
    if n == 0 {
        return;
    }
    const D: usize = 8;
    let mut acc = [0f64; D];
    let mut c = x.chunks_exact(D);
    for ch in &mut c {
        for j in 0..D {
            acc[j] += ch[j] as f64;
        }
    }
    let mut total: f64 = acc.iter().sum();
    for &v in c.remainder() {
        total += v as f64;
    }
    let mean = total / n as f64;
    let mut acc = [0f64; D];
    let mut c = x.chunks_exact(D);
    for ch in &mut c {
        for j in 0..D {
            let d = ch[j] as f64 - mean;
            acc[j] += d * d;
        }
    }
    let mut total: f64 = acc.iter().sum();
    for &v in c.remainder() {
        let d = v as f64 - mean;
        total += d * d;
    }
    let var = total / n as f64;
    // The row's statistics are exact to f64 rounding; the output pass is in f32 (16 lanes),
    // as the op's prims decomposition computes it.
    let inv = (1.0 / (var + eps).sqrt()) as f32;
    let mean = mean as f32;
    match (w, b) {
        (Some(w), Some(b)) => {
            for i in 0..n {
                y[i] = ((x[i] - mean) * inv) * w[i] + b[i];
            }
        }
        (Some(w), None) => {
            for i in 0..n {
                y[i] = ((x[i] - mean) * inv) * w[i];
            }
        }
        _ => {
            for i in 0..n {
                y[i] = (x[i] - mean) * inv;
            }
        }
    }
}
