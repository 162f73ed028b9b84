//! Activations applied in library-kernel epilogues (GEMM and conv output tiles).
//!
//! Each activation means exactly what the op of the same name means
//! (`crate::ops::nn::Activation::apply`, `crate::ops::elementwise::unary_float` for `tanh`):
//! the value computed in f64 and rounded once. f64 buffers use those reference formulas
//! directly. f32 buffers use branch-free f32 approximations written so that LLVM vectorizes
//! them; they are compiled for AVX-512 and AVX2 and picked at run time (the portable build is
//! the same code, unvectorized on old CPUs). Measured worst errors against the f64 reference
//! over a sweep of the f32 range (`tests/all/cpu_gemm.rs` checks them): `relu` exact, `tanh`
//! 1.35 ulp (bound 2), `sigmoid` 2.2 (bound 3), `silu` 2.8 (bound 3), `gelu` (erf) 3.3
//! (bound 4; 3.29 in the tail below -1, 3.17 just above -1), with 2^-149 absolute on top for subnormal results; `gelu` "tanh" within
//! `4 + 3|y|` ulp where `y` is the sigmoid argument (`y = 2√(2/π)(x + 0.044715x³)` is
//! rounded in f32 first, as in its prims decomposition).
//! Any other activation op (`leaky_relu`, `elu`, `softplus`, `clamp`, `hardswish`, …) runs
//! the reference formula per element in f64, so it is exact but scalar.
//!
//! Semantic edge cases follow the ops: NaN in gives NaN out; `relu(-0)` is `+0`; `gelu` and
//! `silu` of `-inf` are `-0`.

use crate::ir::Attrs;
use crate::ops::nn::{sigmoid as sigmoid_f64, Activation as OpActivation};
use crate::ops::OpKind;

use super::rows::{fmadd, fmadd64, PORTABLE_FMA};

/// The activation of an epilogue.
#[derive(Clone, Copy, Debug, Default)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// `gelu` with `approximate = "none"`: `x Φ(x)`.
    Gelu,
    /// `gelu` with `approximate = "tanh"`.
    GeluTanh,
    Sigmoid,
    Silu,
    /// The `tanh` prim.
    Tanh,
    /// `gelu` or `silu` with `nan_at_neg_inf`: NaN at -inf, the wrapped activation elsewhere.
    NegInfNan(&'static Activation),
    /// Any other activation op, evaluated per element in f64 by the op's own formula.
    Op(OpActivation),
}

impl Activation {
    /// The epilogue activation for a node `kind` with (resolved) `attrs`, if `kind` is an
    /// elementwise activation an epilogue can apply.
    pub fn from_op(kind: OpKind, attrs: &Attrs) -> Option<Activation> {
        use OpKind::*;
        Some(match kind {
            Relu => Activation::Relu,
            Gelu | Silu if attrs.bool("nan_at_neg_inf") => Activation::NegInfNan(match kind {
                Silu => &Activation::Silu,
                _ if attrs.str("approximate") == "tanh" => &Activation::GeluTanh,
                _ => &Activation::Gelu,
            }),
            Gelu if attrs.str("approximate") == "tanh" => Activation::GeluTanh,
            Gelu => Activation::Gelu,
            Sigmoid => Activation::Sigmoid,
            Silu => Activation::Silu,
            Tanh => Activation::Tanh,
            Softplus | LeakyRelu | Hardsigmoid | Hardswish | Elu | Clamp => {
                Activation::Op(OpActivation::new(kind, attrs))
            }
            _ => return None,
        })
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Activation::None)
    }

    /// The activation of one f64 value: the reference formula.
    pub fn eval_f64(&self, x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        match self {
            Activation::None => x,
            Activation::Relu => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            Activation::Gelu if x == f64::NEG_INFINITY => -0.0,
            Activation::Gelu => x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2),
            Activation::GeluTanh => {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                x * sigmoid_f64(2.0 * u)
            }
            Activation::Sigmoid => sigmoid_f64(x),
            Activation::Silu if x == f64::NEG_INFINITY => -0.0,
            Activation::Silu => x * sigmoid_f64(x),
            Activation::Tanh => crate::ops::elementwise::unary_float(OpKind::Tanh, x),
            Activation::NegInfNan(_) if x == f64::NEG_INFINITY => f64::NAN,
            Activation::NegInfNan(base) => base.eval_f64(x),
            Activation::Op(op) => op.apply(x),
        }
    }

    /// The activation of one f32 value through the fast f32 path (what [`apply_f32`] computes).
    pub fn eval_f32(&self, x: f32) -> f32 {
        let mut v = [x];
        apply_f32(self, &mut v);
        v[0]
    }
}

/// Applies `act` to every element of `xs` in place (f64: the reference formulas).
pub fn apply_f64(act: &Activation, xs: &mut [f64]) {
    if act.is_none() {
        return;
    }
    for x in xs {
        *x = act.eval_f64(*x);
    }
}

/// Applies `act` to every element of `xs` in place, vectorized where the CPU allows.
pub fn apply_f32(act: &Activation, xs: &mut [f32]) {
    match act {
        Activation::None => {}
        Activation::Op(op) => {
            for x in xs {
                *x = op.apply(*x as f64) as f32;
            }
        }
        _ => dispatch(None, act, xs),
    }
}

/// `xs[i] = act(xs[i] + addend)`, the sum rounded to f32 (the `add` prim), vectorized where
/// the CPU allows: a convolution's bias and activation on a finished run of one channel.
pub fn add_then_apply_f32(addend: f32, act: &Activation, xs: &mut [f32]) {
    match act {
        Activation::Op(_) => {
            xs.iter_mut().for_each(|x| *x += addend);
            apply_f32(act, xs);
        }
        _ => dispatch(Some(addend), act, xs),
    }
}

/// `xs[i] += addend`, inlined into each target-feature copy.
#[inline(always)]
fn add_in_place(addend: Option<f32>, xs: &mut [f32]) {
    if let Some(b) = addend {
        for x in xs.iter_mut() {
            *x += b;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "x86_64")]
fn dispatch(addend: Option<f32>, act: &Activation, xs: &mut [f32]) {
    if super::has_avx512() {
        // SAFETY: the CPU has every feature `apply_avx512` is compiled for (checked just
        // above; AVX2 comes with AVX-512F). Without `popcnt` the per-vector counts of the
        // gelu gathering are emulated with byte shuffles, which made the body 4x slower.
        unsafe { apply_avx512(addend, act, xs) }
    } else if super::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and POPCNT (checked just above: the avx2 level has
        // all three).
        unsafe { apply_avx2(addend, act, xs) }
    } else {
        add_in_place(addend, xs);
        apply_generic::<PORTABLE_FMA>(act, xs)
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn dispatch(addend: Option<f32>, act: &Activation, xs: &mut [f32]) {
    add_in_place(addend, xs);
    apply_generic::<PORTABLE_FMA>(act, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma,popcnt")]
unsafe fn apply_avx512(addend: Option<f32>, act: &Activation, xs: &mut [f32]) {
    add_in_place(addend, xs);
    match act {
        Activation::Gelu => x86::gelu_erf_avx512(xs),
        _ => apply_generic::<true>(act, xs),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn apply_avx2(addend: Option<f32>, act: &Activation, xs: &mut [f32]) {
    add_in_place(addend, xs);
    match act {
        Activation::Gelu => x86::gelu_erf_avx2(xs),
        _ => apply_generic::<true>(act, xs),
    }
}

/// `xs[i] = f(xs[i])` as a plain loop around an `#[inline(always)]` function, so the kernel
/// is inlined into each target-feature copy and vectorized there (passing the function as a
/// value leaves a call per element).
macro_rules! map {
    ($xs:expr, $f:ident) => {
        for x in $xs.iter_mut() {
            *x = $f(*x);
        }
    };
}

/// `x[i] = f(x[i])` for `f` in [`silu`] and [`gelu_tanh`] by chunks of 16: a chunk whose
/// sigmoid arguments are all above -80 (the common case) skips the second exp and division
/// the far tail needs. A last partial chunk runs as a whole one, padded with zeros on the
/// stack: one vector pass rather than a scalar call per element (short rows, such as a
/// convolution's epilogue on 28 columns, are mostly remainder).
macro_rules! chunked_times_sigmoid {
    ($xs:expr, $arg:expr, $full:ident) => {{
        // A macro rather than a closure: a closure is not compiled with the target features
        // of the function around it, and its body would not vectorize.
        macro_rules! chunk {
            ($ch:expr) => {{
                let ch: &mut [f32; 16] = $ch;
                let mut above = true;
                for &x in ch.iter() {
                    let y: f32 = $arg(x);
                    above &= y > -80.0 || y.is_nan();
                }
                if above {
                    for x in ch.iter_mut() {
                        *x = select_nan(*x, times_sigmoid_above_80(*x, $arg(*x)));
                    }
                } else {
                    for x in ch.iter_mut() {
                        *x = $full(*x);
                    }
                }
            }};
        }
        let (whole, rest) = $xs.as_chunks_mut::<16>();
        for ch in whole {
            chunk!(ch);
        }
        if !rest.is_empty() {
            let mut padded = [0.0f32; 16];
            padded[..rest.len()].copy_from_slice(rest);
            chunk!(&mut padded);
            rest.copy_from_slice(&padded[..rest.len()]);
        }
    }};
}

#[inline(always)]
fn apply_generic<const FMA: bool>(act: &Activation, xs: &mut [f32]) {
    match act {
        Activation::None => {}
        Activation::Relu => map!(xs, relu),
        Activation::Gelu => gelu_erf_slice::<FMA>(xs),
        Activation::GeluTanh => chunked_times_sigmoid!(xs, gelu_tanh_arg, gelu_tanh),
        Activation::Sigmoid => map!(xs, sigmoid),
        Activation::Silu => chunked_times_sigmoid!(xs, |x: f32| x, silu),
        Activation::Tanh => map!(xs, tanh),
        Activation::NegInfNan(base) => {
            // Chunks checked for a -inf without a store (a loop storing `x` back where it is
            // not -inf becomes masked stores, microcode on AMD's AVX2), the rare one fixed.
            for ch in xs.chunks_mut(16) {
                let mut any = false;
                for &x in ch.iter() {
                    any |= x == f32::NEG_INFINITY;
                }
                if any {
                    ch.iter_mut().filter(|x| **x == f32::NEG_INFINITY).for_each(|x| *x = f32::NAN);
                }
            }
            apply_generic::<FMA>(base, xs)
        }
        Activation::Op(op) => {
            for x in xs.iter_mut() {
                *x = op.apply(*x as f64) as f32;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// f32 kernels. Branch-free (both sides of every choice are computed and one is selected) so
// that the loops above vectorize. Polynomials use `mul_add`: one rounding per step, the same
// bits on every target with FMA. The portable path of a target without it (x86-64 below AVX2,
// where `mul_add` is a call to glibc's `fmaf` per element) runs gelu with separate multiplies
// and adds, its body in f64 (`FMA = false`: measured body 0.90 / 2.10 ulp for x > 0 / x < 0,
// tail 1.07 / 3.23, within the same bounds); the other activations keep `mul_add` there.
// ---------------------------------------------------------------------------------------------

/// An f64 table rounded to f32 at compile time.
const fn to_f32<const N: usize>(a: [f64; N]) -> [f32; N] {
    let mut out = [0f32; N];
    let mut i = 0;
    while i < N {
        out[i] = a[i] as f32;
        i += 1;
    }
    out
}

/// 1.5 * 2^23: adding and subtracting it rounds an f32 of magnitude below 2^22 to an integer
/// (ties to even).
const ROUND_MAGIC: f32 = 12_582_912.0;

#[inline(always)]
fn round_int(x: f32) -> f32 {
    (x + ROUND_MAGIC) - ROUND_MAGIC
}

#[inline(always)]
fn floor_small(x: f32) -> f32 {
    let r = round_int(x);
    if r > x {
        r - 1.0
    } else {
        r
    }
}

/// `x` where it is NaN (quieted, its payload kept), else `y`. The NaN arm sets the quiet
/// bit rather than returning `x` itself, so that a loop storing the result over `x` stores a
/// computed value in both arms: with `x` LLVM makes the store conditional, a masked store
/// (`vmaskmovps`) on AVX2, which AMD's cores run as microcode (silu on AVX2 took 2.5 times
/// its AVX-512 time on a Zen 4, where AVX-512's masked stores are plain stores with a mask).
#[inline(always)]
fn select_nan(x: f32, y: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(x.to_bits() | 0x0040_0000)
    } else {
        y
    }
}

#[inline(always)]
fn relu(x: f32) -> f32 {
    // NaN is kept (quieted), -0 becomes +0 (`max` may give either zero; `+ 0.0` makes it +0).
    // Not `if x > 0 { x } else { 0 }`: a loop storing `x` back unchanged becomes masked
    // stores on AVX2 (see `select_nan`).
    select_nan(x, x.max(0.0) + 0.0)
}

/// 2^k for k in [-126, 127] (other k give some other float, never a panic).
#[inline(always)]
fn pow2i(k: i32) -> f32 {
    f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// ln 2 in two parts for [`exp`]: 355/512 (9 bits, so `n * EXP_LN2_HI` is exact) and the rest.
const EXP_LN2_HI: f32 = 0.693_359_4;
const EXP_LN2_LO: f32 = -2.121_944_4e-4;

/// e^x: Cody–Waite reduction by ln 2 (the high part has 9 bits, so `n * LN2_HI` is exact),
/// a degree-7 Taylor polynomial on |r| <= ln2/2, and a two-step scale so that subnormal
/// results round once. Below -104 the result is 0, above 89 it is inf.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    exp_with::<true>(x)
}

/// [`exp`] with fused multiply-adds (`FMA`) or a multiply and an add each step (the
/// reduction's first product is exact either way).
#[inline(always)]
pub(crate) fn exp_with<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = EXP_LN2_HI;
    const LN2_LO: f32 = EXP_LN2_LO;
    let xc = if x < -104.0 { 0.0 } else { x.min(89.0) };
    // n = round(x log2 e), and its integer value read from the bits of n + ROUND_MAGIC.
    let t = fmadd::<FMA>(xc, LOG2E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let r = fmadd::<FMA>(-n, LN2_LO, fmadd::<FMA>(-n, LN2_HI, xc));
    let q = fmadd::<FMA>(r, 1.0 / 5040.0, 1.0 / 720.0);
    let q = fmadd::<FMA>(r, q, 1.0 / 120.0);
    let q = fmadd::<FMA>(r, q, 1.0 / 24.0);
    let q = fmadd::<FMA>(r, q, 1.0 / 6.0);
    let q = fmadd::<FMA>(r, q, 0.5);
    let p = 1.0 + fmadd::<FMA>(r * r, q, r);
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    // Below -104 the result is 0, selected rather than scaled down through subnormals (a
    // microcode assist per lane on x86; `-inf` arguments are common in masked attention).
    let y = p * pow2i(n1) * pow2i(n2);
    select_nan(x, if x < -104.0 { 0.0 } else { y })
}

#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    // Taylor coefficients of tanh (x^1, x^3, ..., x^23): below |x| = 0.55 the series is
    // exact to 4e-11; above, 1 - 2/(e^2a + 1) loses nothing to cancellation.
    const C: [f32; 12] = to_f32([
        1.0,
        -0.3333333333333333,
        0.13333333333333333,
        -0.05396825396825397,
        0.021869488536155203,
        -0.008863235529902197,
        0.003592128036572481,
        -0.0014558343870513183,
        0.000590027440945586,
        -0.00023912911424355248,
        9.691537956929451e-05,
        -3.927832388331683e-05,
    ]);
    let a = x.abs();
    let x2 = x * x;
    let mut p = C[11];
    for &c in C[..11].iter().rev() {
        p = p * x2 + c;
    }
    let small = x * p;
    let e = exp(2.0 * a);
    let big = 1.0 - 2.0 / (e + 1.0);
    let big = if x < 0.0 { -big } else { big };
    select_nan(x, if a < 0.55 { small } else { big })
}

#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let d = 1.0 + e;
    // `1 / d` or `e / d`: the numerator chosen first, one division.
    select_nan(x, (if x >= 0.0 { 1.0 } else { e }) / d)
}

/// `x * sigmoid(y)` for a `y` of the sign of `x`, `e = e^-|y|`: `x / (1 + e)` for `y >= 0`,
/// `x e / (1 + e)` down to `y = -80`; below, the small factor is split as
/// `((x h) / (1 + e)) h` with `h = e^(-|y|/2)`, so a subnormal result rounds once, and `x` is
/// clamped to the lowest finite f32 so that `x = -inf` gives `-0`.
#[inline(always)]
fn times_sigmoid(x: f32, y: f32) -> f32 {
    let e = exp(-y.abs());
    let d = 1.0 + e;
    let pos = x / d;
    // Where x e/d is a normal f32, one exp is more accurate than two; below, h splits it.
    let mid = (x * e) / d;
    let h = exp(-0.5 * y.abs());
    let tiny = ((x.max(f32::MIN) * h) / d) * h;
    if y >= 0.0 {
        pos
    } else if y > -80.0 {
        mid
    } else {
        tiny
    }
}

#[inline(always)]
fn silu(x: f32) -> f32 {
    select_nan(x, times_sigmoid(x, x))
}

/// [`times_sigmoid`] for `y > -80` (or NaN): `x / (1 + e)` or `(x e) / (1 + e)`, the
/// numerator chosen first; one exp and one division, the same bits.
#[inline(always)]
fn times_sigmoid_above_80(x: f32, y: f32) -> f32 {
    let e = exp(-y.abs());
    (if y >= 0.0 { x } else { x * e }) / (1.0 + e)
}

/// The sigmoid argument of the tanh gelu, `2 sqrt(2/pi) (x + 0.044715 x^3)`, as its
/// decomposition rounds it.
#[inline(always)]
fn gelu_tanh_arg(x: f32) -> f32 {
    // 2 sqrt(2/pi), and times 0.044715.
    const C1: f64 = 2.0 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;
    const C1F: f32 = C1 as f32;
    const C2F: f32 = (C1 * 0.044715) as f32;
    x * (C1F + C2F * (x * x))
}

#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    // |x| >= 2^43 overflows x^3; y is then ±inf with x's sign, which still selects right.
    select_nan(x, times_sigmoid(x, gelu_tanh_arg(x)))
}

/// `x Φ(x)`. For |x| < 1, `x/2 (1 + erf(x/√2))` with a fitted polynomial for erf (relative
/// error 7e-10 on |z| <= 1/√2). For |x| >= 1, `a Φ(-a) = G(a) e^(-a²/2)` with `a = min(|x|, 40)`
/// and `G` the polynomial in `3/(3+a)` of the prims decomposition (`crate::decomp::nn`),
/// evaluated in f32, `e^(-a²/2)` computed as `e^(-a_hi²/2) e^(-(a-a_hi)(a+a_hi)/2)` with
/// `a_hi` on a 1/128 grid so that `a_hi²` is exact (for a < 32; beyond, the result is 0
/// anyway); then `gelu(x) = x - aΦ(-a)` for `x >= 1` and `-aΦ(-a)` for `x <= -1`. At most
/// 3.29 ulp from the exact value over the tail (measured), under an ulp on the body. Used
/// per element only by tests: slices go through [`gelu_erf_slice`].
#[inline(always)]
#[cfg_attr(not(test), allow(dead_code))]
fn gelu_erf(x: f32) -> f32 {
    gelu_erf_with::<true>(x)
}

/// [`gelu_erf`] with or without fused multiply-adds (see [`gelu_erf_slice`]).
#[inline(always)]
#[cfg_attr(not(test), allow(dead_code))]
fn gelu_erf_with<const FMA: bool>(x: f32) -> f32 {
    let tail = gelu_erf_tail::<FMA>(x);
    select_nan(x, if x.abs() < 1.0 { gelu_erf_body::<FMA>(x) } else { tail })
}

/// Elements per block of [`gelu_erf_slice`] (a block's tail arguments stay in L1).
const GELU_BLOCK: usize = 256;

/// [`gelu_erf`] over a slice, computing the tail only where it is needed: per block, the
/// arguments with `|x| >= 1` are gathered (a branch-free compaction), the body runs over the
/// whole block and the tail over the gathered ones, which are then written back. Same
/// formulas, so the same bits as [`gelu_erf`]; on normally distributed data about a third of
/// the elements take the tail.
#[inline(always)]
fn gelu_erf_slice<const FMA: bool>(xs: &mut [f32]) {
    let (mut at, mut tail) = ([0u16; GELU_BLOCK], [0f32; GELU_BLOCK]);
    for block in xs.chunks_mut(GELU_BLOCK) {
        let mut n = 0usize;
        for (i, &x) in block.iter().enumerate() {
            (at[n], tail[n]) = (i as u16, x);
            n += usize::from(x.abs() >= 1.0);
        }
        for x in block.iter_mut() {
            *x = select_nan(*x, gelu_erf_body::<FMA>(*x));
        }
        // Whole vectors only: the lanes past `n` hold earlier blocks' arguments (or zeros),
        // computed and never written back; a scalar remainder cost as much as the vectors.
        for t in tail[..n.next_multiple_of(16)].iter_mut() {
            *t = gelu_erf_tail::<FMA>(*t);
        }
        for (&i, &t) in at[..n].iter().zip(&tail[..n]) {
            block[i as usize] = t;
        }
    }
}

/// `x/2 (1 + erf(x/√2))`: the body of [`gelu_erf`], for |x| < 1. `erf(z)/z` is a degree-5
/// polynomial in `t = z²` on `[0, 1/2]`, fitted for relative error (7.1e-10 before its
/// coefficients are rounded to f32; the Taylor series needs 10 terms for that).
#[inline(always)]
fn gelu_erf_body<const FMA: bool>(x: f32) -> f32 {
    const ERF: [f32; 6] = GELU_BODY_ERF;
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    if !FMA {
        // Without FMA each f32 step would round twice, and near -1, where `1 + z p` cancels
        // to a third, that reached 3.6 ulp: the same coefficients in f64 instead.
        let (z, x) = (z as f64, x as f64);
        let z2 = z * z;
        let mut p = ERF[5] as f64;
        for &c in ERF[..5].iter().rev() {
            p = p * z2 + c as f64;
        }
        return ((0.5 * x) * (z * p + 1.0)) as f32;
    }
    let z2 = z * z;
    let mut p = ERF[5];
    for &c in ERF[..5].iter().rev() {
        p = p.mul_add(z2, c);
    }
    (0.5 * x) * z.mul_add(p, 1.0)
}

/// The coefficients of [`gelu_erf_body`]'s polynomial, lowest degree first.
const GELU_BODY_ERF: [f32; 6] = to_f32([
    1.128_379_166_292_868_2,
    -0.376_126_275_081_034_9,
    0.112_835_273_785_174_41,
    -0.026_843_582_070_100_187,
    0.005_135_806_421_662_736,
    -0.000_692_779_458_616_753_2,
]);

/// `G(v)`, `v = 3/(3+a)`, of the prims decomposition's gelu tail (`crate::decomp::nn`),
/// highest degree first.
const GELU_TAIL: [f64; 12] = [
    0.054_964_895_033_101_98,
    -0.158_263_812_243_354_15,
    0.045_791_904_360_226_27,
    0.268_741_678_256_337_05,
    -0.244_923_933_623_043_7,
    0.035_228_682_967_014_84,
    -0.156_254_495_336_475_12,
    -0.110_198_640_936_482_77,
    -0.089_739_947_897_050_43,
    -0.044_236_079_562_874_266,
    -4.219_610_526_076_18e-6,
    0.398_942_362_912_014_2,
];

/// `x - aΦ(-a)` for `x >= 1`, `-aΦ(-a)` for `x <= -1` (`a = |x|`): the tail of [`gelu_erf`].
/// `G`'s Horner steps run in f32 but for the last three in f64 (with `v` refined to f64 by a
/// Newton step): the early steps' rounding is damped by `v^k <= 0.75^k`, the late ones' is
/// not. Measured (every 7th f32): 1.14 ulp for x >= 1 (where `t <= 0.17 x` is a correction)
/// and 3.29 ulp for x <= -1 (where it is the result). Before the Horner steps were fused
/// multiply-adds, all-f64 `G` gave 2.91 at about 1.3x the cost of the whole slice, all-f32
/// 5.06 at 0.9x.
#[inline(always)]
fn gelu_erf_tail<const FMA: bool>(x: f32) -> f32 {
    const TAIL: [f32; 12] = to_f32(GELU_TAIL);
    const WIDE: usize = 3;
    let ac = x.abs().min(40.0);
    let v = 3.0 / (3.0 + ac);
    let mut g = TAIL[0];
    for &c in &TAIL[1..12 - WIDE] {
        g = fmadd::<FMA>(g, v, c);
    }
    // v to about 2^-46 in f64: the f32 quotient refined by one Newton step.
    let (d, v64) = (3.0 + ac as f64, v as f64);
    let v64 = v64 + v64 * ((3.0 - d * v64) * (1.0 / 3.0));
    let mut g64 = g as f64;
    for &c in &GELU_TAIL[12 - WIDE..] {
        g64 = fmadd64::<FMA>(g64, v64, c);
    }
    tail_finish::<FMA>(x, ac, g64 as f32)
}

/// `x - G e^(-a²/2)` (x > 0) or `-G e^(-a²/2)`, `a = min(|x|, 40)`, with `a²` split exactly.
/// The small factor `e^rest`, `|rest| < (1/128)(2a)/2 <= 0.32`, is a degree-6 Taylor
/// polynomial (relative error below 7e-8 at 0.32, below 3e-13 at 0.1, i.e. wherever
/// `a <= 13` and the result is a normal f32); the large one goes through [`exp`].
#[inline(always)]
fn tail_finish<const FMA: bool>(x: f32, ac: f32, g: f32) -> f32 {
    let a_hi = floor_small(ac * 128.0) * (1.0 / 128.0);
    let rest = -0.5 * ((ac - a_hi) * (ac + a_hi));
    let mut e: f32 = 1.0 / 720.0;
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        e = fmadd::<FMA>(e, rest, c);
    }
    let t = (g * e) * exp_with::<FMA>(-0.5 * (a_hi * a_hi));
    if x > 0.0 {
        x - t
    } else {
        -t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got == w || (got.is_nan() && want.is_nan()) {
            return 0.0;
        }
        let ulp = if w == 0.0 || !w.is_finite() {
            f32::from_bits(1) as f64
        } else {
            let b = w.abs().to_bits();
            (f32::from_bits(b + 1) as f64 - f32::from_bits(b) as f64).abs()
        };
        (got as f64 - want).abs() / ulp
    }

    /// gelu per element as the slice kernels `apply_f32` picks compute it: fused on the
    /// AVX paths and where the portable build has FMA, else without (under
    /// `LADDER_MAX_ISA=sse4.1` or `portable` on x86-64).
    fn gelu_of_the_path(x: f32) -> f32 {
        #[cfg(target_arch = "x86_64")]
        let vector = super::super::has_avx2();
        #[cfg(not(target_arch = "x86_64"))]
        let vector = false;
        if vector || PORTABLE_FMA {
            gelu_erf(x)
        } else {
            gelu_erf_with::<false>(x)
        }
    }

    #[test]
    fn gelu_over_a_slice_is_gelu_per_element() {
        // Blocks of every fill (no tail, all tail, mixed), specials, and a ragged last block.
        let mut xs: Vec<f32> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for k in 0..3 * GELU_BLOCK + 37 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32;
            xs.push(match k / GELU_BLOCK {
                0 => u * 1.8 - 0.9,
                1 => (u * 12.0 - 6.0).clamp(-6.0, 6.0) * if u < 0.5 { 1.0 } else { 7.0 },
                _ => u * 80.0 - 40.0,
            });
        }
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0, -1.0, 0.0, -0.0, f32::MAX, f32::MIN]);
        xs.extend([f32::MIN_POSITIVE, 1e-40, -1e-40, 0.999_999_94, -0.999_999_94, 40.0, -40.0, 1e30]);
        let want: Vec<f32> = xs.iter().map(|&x| gelu_of_the_path(x)).collect();
        let mut got = xs.clone();
        apply_f32(&Activation::Gelu, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "gelu({}) = {g}, want {w}", xs[i]);
        }
    }

    #[test]
    fn chunked_silu_and_tanh_gelu_are_the_per_element_functions() {
        // Chunks of 16 all above -80 (one exp), chunks with a lane in the far tail (the full
        // formula for the chunk), specials, and a ragged end; every path against the
        // per-element function, bit for bit.
        let mut xs: Vec<f32> = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for k in 0..16 * 40 + 9 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32;
            xs.push(match (k / 16) % 4 {
                0 => u * 16.0 - 8.0,
                1 => u * 170.0 - 120.0,
                2 => -80.0 - u * 30.0,
                _ => f32::from_bits((state >> 32) as u32),
            });
        }
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -80.0, -79.999_99, -80.000_01, 0.0, -0.0]);
        xs.extend([f32::MAX, f32::MIN, -104.0, -1e-40, 1e30, -1e30, -18.5, -18.6]);
        for (act, f) in [(Activation::Silu, silu as fn(f32) -> f32), (Activation::GeluTanh, gelu_tanh)] {
            let mut got = xs.clone();
            apply_f32(&act, &mut got);
            for (i, (g, x)) in got.iter().zip(&xs).enumerate() {
                let w = f(*x);
                assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{act:?}({x}) [{i}] = {g}, want {w}");
            }
        }
    }

    #[test]
    fn gelu_tails_are_accurate() {
        // The tail against the f64 formula, every 31st f32 over 1 <= |x| <= 14 (below -14
        // the result is subnormal or zero; above 14 it is x). Measured with every 7th: 1.11
        // ulp for x >= 1, 3.29 for x <= -1.
        for (sign, bound) in [(1.0f32, 1.5), (-1.0, 3.5)] {
            let (mut worst, mut x) = ((0.0f64, 0.0f32), sign);
            while x.abs() < 14.0 {
                let u = ulps(gelu_erf(x), Activation::Gelu.eval_f64(x as f64));
                if u > worst.0 {
                    worst = (u, x);
                }
                x = f32::from_bits(x.to_bits() + 31);
            }
            assert!(worst.0 <= bound, "gelu tail: {} ulp at {}", worst.0, worst.1);
        }
    }

    #[test]
    fn gelu_slices_match_per_element_bits_densely() {
        // Every 7th f32 of 1e-3 <= |x| < 64 (body, tail, and past the tail's clamp at 40),
        // through the slice kernels (AVX-512 where the CPU has it) against `gelu_erf`.
        for sign in [1.0f32, -1.0] {
            let mut xs = Vec::new();
            let mut x = 1e-3 * sign;
            while x.abs() < 64.0 {
                xs.push(x);
                x = f32::from_bits(x.to_bits() + 7);
            }
            let mut got = xs.clone();
            apply_f32(&Activation::Gelu, &mut got);
            for (&x, &g) in xs.iter().zip(&got) {
                let want = gelu_of_the_path(x);
                assert_eq!(g.to_bits(), want.to_bits(), "gelu({x:e}) = {g:e}, want {want:e}");
            }
        }
    }

    #[test]
    fn gelu_body_is_accurate() {
        // The body against the f64 formula, every 61st f32 over 1e-6 <= |x| < 1 (below, the
        // result is x/2 to within rounding). Measured: 1.67 ulp for x > 0, 3.14 for x < 0
        // (near -1, where 1 + erf(x/√2) cancels); the Taylor series it replaced gave 1.72, 3.43.
        for (sign, bound) in [(1.0f32, 2.0), (-1.0, 3.5)] {
            let (mut worst, mut x) = ((0.0f64, 0.0f32), 1e-6 * sign);
            while x.abs() < 1.0 {
                let u = ulps(gelu_erf(x), Activation::Gelu.eval_f64(x as f64));
                if u > worst.0 {
                    worst = (u, x);
                }
                x = f32::from_bits(x.to_bits() + 61);
            }
            assert!(worst.0 <= bound, "gelu body: {} ulp at {}", worst.0, worst.1);
        }
    }

    /// The portable path where the target has no FMA multiplies and adds: the body and the
    /// tail over the sweeps above stay within the same bounds, and `exp` keeps its edges.
    #[test]
    fn gelu_without_fma_stays_within_its_bounds() {
        let gelu = gelu_erf_with::<false>;
        for (sign, body, tail) in [(1.0f32, 2.0, 1.5), (-1.0, 3.5, 3.5)] {
            for (start, end, step, bound) in [(1e-6, 1.0, 61, body), (1.0, 14.0, 31, tail)] {
                let (mut worst, mut x) = ((0.0f64, 0.0f32), start * sign);
                while x.abs() < end {
                    let u = ulps(gelu(x), Activation::Gelu.eval_f64(x as f64));
                    if u > worst.0 {
                        worst = (u, x);
                    }
                    x = f32::from_bits(x.to_bits() + step);
                }
                assert!(worst.0 <= bound, "gelu without FMA: {} ulp at {}", worst.0, worst.1);
            }
        }
        let mut xs = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 40.0, -40.0, 1e30, -1e30, 1e-40];
        xs.extend((0..4 * GELU_BLOCK).map(|k| k as f32 * 0.37 - 300.0));
        let mut got = xs.clone();
        gelu_erf_slice::<false>(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            assert!(g.to_bits() == gelu(x).to_bits() || (g.is_nan() && x.is_nan()), "gelu({x}) = {g}");
            let want = Activation::Gelu.eval_f64(x as f64);
            assert!(ulps(g, want) <= 4.0 || (g.is_nan() && want.is_nan()), "gelu({x}) = {g}, want {want}");
        }
        for &x in &[-103.0f32, -90.0, -20.0, -1.0, -1e-3, 1e-3, 0.5, 1.0, 10.0, 80.0, 88.7] {
            let u = ulps(exp_with::<false>(x), (x as f64).exp());
            assert!(u <= 2.0, "exp({x}) without FMA: {u} ulp");
        }
        assert_eq!(exp_with::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_with::<false>(89.0), f32::INFINITY);
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(89.0), f32::INFINITY);
        for &x in &[-103.0f32, -90.0, -20.0, -1.0, -1e-3, 1e-3, 0.5, 1.0, 10.0, 80.0, 88.7] {
            let u = ulps(exp(x), (x as f64).exp());
            assert!(u <= 2.0, "exp({x}): {u} ulp");
        }
    }
}
