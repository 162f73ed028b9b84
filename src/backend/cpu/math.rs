//! Inline approximations of the transcendental prims, written once over [`Arith`].
//!
//! Each function here is generic over an [`Arith`]: [`Soft32`]/[`Soft64`] run it on plain
//! Rust scalars (the testable reference, and what `tests/all/cpu_codegen.rs` sweeps for its
//! max-ULP table), and the code generator's emitter runs the *same* function to emit
//! Cranelift instructions on scalars or F32X4 vectors. So the polynomial the JIT runs is, by
//! construction, the one tested here; with the same contraction setting the two agree bit for
//! bit.
//!
//! Contraction: `mul_add` is a fused multiply-add when the emitter allows contraction (and
//! the ISA has FMA), else a multiply then an add. Both settings are within the stated error.
//!
//! Algorithms (f32 unless said):
//! - `exp`: Cody–Waite reduction `x = n·ln2 + r`, Cephes' degree-5 polynomial, scaling by
//!   `2^n` in two steps so subnormal results round once. `exp2`: `n = round(x)`, Taylor
//!   degree 7 of `2^f` on `[-1/2, 1/2]`.
//! - `log`: Cephes' `logf` (mantissa in `[√½, √2)`, degree-8 polynomial); subnormals are
//!   scaled by `2^23` first. `log1p(x) = log(u)·x/(u-1)` with `u = 1+x` (Goldberg's trick).
//! - `expm1`: `2^n·q + (2^n - 1)` with `q = expm1(r)` by Taylor on `|r| ≤ ln2/2`.
//! - `tanh(x) = sign(x)·e/(e+2)`, `e = expm1(2|x|)`; `erf`: odd polynomial in `x²` below 1,
//!   `1 - exp(-x²)·R(x)` on `[1, 4]` (Chebyshev fit), 1 beyond.
//! - `sin`/`cos`: Cody–Waite reduction by π/4 in five parts and Cephes' two polynomials, for
//!   `|x| ≤ TRIG_FAST_LIMIT`; beyond it (and for inf/NaN) the exact f64 function is called
//!   (a cold path: per element, but only for those arguments).
//! - `sum_exp_step`/`sum_exp_rescale`/`sum_exp_finish`: the online `Σ exp(x - max)` of the
//!   kernel IR's `sumexp` accumulators (a running maximum and a running sum rescaled when it
//!   grows; one `exp_or_zero` of `-|x - m|` per value, every term at most 1).
//! - `pow` (f32): computed in f64 as `2^(y·log2|x|)` (log2 by the atanh series, 2^f by Taylor,
//!   both to ~1e-13), with C's special cases (negative base with integer exponent, zeros,
//!   infinities, NaN, `pow(x, 0) = pow(1, y) = 1`), then rounded once to f32.
//!
//! Max error against the f64 function rounded to f32, measured by
//! `tests/all/cpu_codegen.rs::approximation_ulp_table_over_the_f32_range` (every 1024th f32 bit
//! pattern plus special values, with and without FMA; NaN for NaN, signed zeros and
//! infinities exact): exp 1, exp2 1, log 1, log1p 2, expm1 1, tanh 2, erf 2, sin 2, cos 2
//! ULP; sqrt 0 (native); rsqrt (`1/sqrt`, two roundings) 1; pow 1 (on a grid of bases × 9
//! exponents). Subnormal results are included (no flush to zero).

/// The comparisons the approximations need. `Ne` is true for unordered operands, the others
/// are false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Either operand is NaN.
    Uno,
}

/// A function an approximation falls back to for arguments its fast path does not cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slow {
    Sin,
    Cos,
}

/// The arithmetic an approximation is written in: floats `F`, integers of the same width `I`
/// (i32 for f32, i64 for f64), and lane masks `M`.
pub trait Arith {
    type F: Copy;
    type I: Copy;
    type M: Copy;
    /// Bits of the float type (32 or 64).
    fn bits(&self) -> u32;
    fn f(&mut self, c: f64) -> Self::F;
    fn i(&mut self, c: i64) -> Self::I;
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b + c`, fused when the emitter contracts.
    fn mul_add(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn neg(&mut self, a: Self::F) -> Self::F;
    fn abs(&mut self, a: Self::F) -> Self::F;
    /// Round to nearest, ties to even.
    fn round(&mut self, a: Self::F) -> Self::F;
    fn trunc(&mut self, a: Self::F) -> Self::F;
    fn cmp(&mut self, cc: Cmp, a: Self::F, b: Self::F) -> Self::M;
    fn select(&mut self, m: Self::M, a: Self::F, b: Self::F) -> Self::F;
    fn iselect(&mut self, m: Self::M, a: Self::I, b: Self::I) -> Self::I;
    fn and(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn or(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn not(&mut self, a: Self::M) -> Self::M;
    fn to_bits(&mut self, a: Self::F) -> Self::I;
    fn bits_to_float(&mut self, a: Self::I) -> Self::F;
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ixor(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn shl(&mut self, a: Self::I, n: u32) -> Self::I;
    /// Arithmetic shift right.
    fn sra(&mut self, a: Self::I, n: u32) -> Self::I;
    /// Signed integer comparison.
    fn icmp(&mut self, cc: Cmp, a: Self::I, b: Self::I) -> Self::M;
    /// Exact conversion of a small integer.
    fn int_to_float(&mut self, a: Self::I) -> Self::F;
    /// Truncating conversion (saturating; NaN gives 0).
    fn float_to_int(&mut self, a: Self::F) -> Self::I;
    /// `slow(x)` where `m` is set, `fast` elsewhere.
    fn fallback(&mut self, which: Slow, m: Self::M, x: Self::F, fast: Self::F) -> Self::F;
}

/// Plain-Rust f32 arithmetic.
#[derive(Clone, Copy, Debug)]
pub struct Soft32 {
    /// Contract `mul_add` into one fused operation.
    pub fma: bool,
}

/// Plain-Rust f64 arithmetic.
#[derive(Clone, Copy, Debug)]
pub struct Soft64 {
    pub fma: bool,
}

macro_rules! soft_impl {
    ($name:ident, $f:ty, $i:ty, $u:ty, $bits:expr) => {
        impl Arith for $name {
            type F = $f;
            type I = $i;
            type M = bool;
            fn bits(&self) -> u32 {
                $bits
            }
            fn f(&mut self, c: f64) -> $f {
                c as $f
            }
            fn i(&mut self, c: i64) -> $i {
                c as $i
            }
            fn add(&mut self, a: $f, b: $f) -> $f {
                a + b
            }
            fn sub(&mut self, a: $f, b: $f) -> $f {
                a - b
            }
            fn mul(&mut self, a: $f, b: $f) -> $f {
                a * b
            }
            fn div(&mut self, a: $f, b: $f) -> $f {
                a / b
            }
            fn mul_add(&mut self, a: $f, b: $f, c: $f) -> $f {
                if self.fma {
                    a.mul_add(b, c)
                } else {
                    a * b + c
                }
            }
            fn neg(&mut self, a: $f) -> $f {
                -a
            }
            fn abs(&mut self, a: $f) -> $f {
                a.abs()
            }
            fn round(&mut self, a: $f) -> $f {
                a.round_ties_even()
            }
            fn trunc(&mut self, a: $f) -> $f {
                a.trunc()
            }
            fn cmp(&mut self, cc: Cmp, a: $f, b: $f) -> bool {
                match cc {
                    Cmp::Eq => a == b,
                    Cmp::Ne => a != b,
                    Cmp::Lt => a < b,
                    Cmp::Le => a <= b,
                    Cmp::Gt => a > b,
                    Cmp::Ge => a >= b,
                    Cmp::Uno => a.is_nan() || b.is_nan(),
                }
            }
            fn select(&mut self, m: bool, a: $f, b: $f) -> $f {
                if m {
                    a
                } else {
                    b
                }
            }
            fn iselect(&mut self, m: bool, a: $i, b: $i) -> $i {
                if m {
                    a
                } else {
                    b
                }
            }
            fn and(&mut self, a: bool, b: bool) -> bool {
                a && b
            }
            fn or(&mut self, a: bool, b: bool) -> bool {
                a || b
            }
            fn not(&mut self, a: bool) -> bool {
                !a
            }
            fn to_bits(&mut self, a: $f) -> $i {
                a.to_bits() as $i
            }
            fn bits_to_float(&mut self, a: $i) -> $f {
                <$f>::from_bits(a as $u)
            }
            fn iadd(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_add(b)
            }
            fn isub(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_sub(b)
            }
            fn iand(&mut self, a: $i, b: $i) -> $i {
                a & b
            }
            fn ior(&mut self, a: $i, b: $i) -> $i {
                a | b
            }
            fn ixor(&mut self, a: $i, b: $i) -> $i {
                a ^ b
            }
            fn shl(&mut self, a: $i, n: u32) -> $i {
                a.wrapping_shl(n)
            }
            fn sra(&mut self, a: $i, n: u32) -> $i {
                a.wrapping_shr(n)
            }
            fn icmp(&mut self, cc: Cmp, a: $i, b: $i) -> bool {
                match cc {
                    Cmp::Eq => a == b,
                    Cmp::Ne => a != b,
                    Cmp::Lt => a < b,
                    Cmp::Le => a <= b,
                    Cmp::Gt => a > b,
                    Cmp::Ge => a >= b,
                    Cmp::Uno => a != b,
                }
            }
            fn int_to_float(&mut self, a: $i) -> $f {
                a as $f
            }
            fn float_to_int(&mut self, a: $f) -> $i {
                a as $i
            }
            fn fallback(&mut self, which: Slow, m: bool, x: $f, fast: $f) -> $f {
                if m {
                    match which {
                        Slow::Sin => (x as f64).sin() as $f,
                        Slow::Cos => (x as f64).cos() as $f,
                    }
                } else {
                    fast
                }
            }
        }
    };
}

soft_impl!(Soft32, f32, i32, u32, 32);
soft_impl!(Soft64, f64, i64, u64, 64);

/// The exact functions the cold paths call (f64 reference, rounded to f32).
pub extern "C" fn slow_sin_f32(x: f32) -> f32 {
    (x as f64).sin() as f32
}

pub extern "C" fn slow_cos_f32(x: f32) -> f32 {
    (x as f64).cos() as f32
}

/// `|x|` beyond which `sin`/`cos` call the exact function.
pub const TRIG_FAST_LIMIT: f64 = 8192.0;

/// Horner's rule, highest coefficient first.
pub fn poly<A: Arith>(a: &mut A, x: A::F, coeffs: &[f64]) -> A::F {
    let mut acc = a.f(coeffs[0]);
    for &c in &coeffs[1..] {
        let c = a.f(c);
        acc = a.mul_add(acc, x, c);
    }
    acc
}

/// `max(lo, min(x, hi))` that keeps NaN.
pub(super) fn clamp<A: Arith>(a: &mut A, x: A::F, lo: f64, hi: f64) -> A::F {
    let (lo, hi) = (a.f(lo), a.f(hi));
    let above = a.cmp(Cmp::Gt, x, hi);
    let x = a.select(above, hi, x);
    let below = a.cmp(Cmp::Lt, x, lo);
    a.select(below, lo, x)
}

/// `y · 2^n` for an integer-valued `n` in `[-150, 129]` (f32), rounding once.
pub(super) fn scale_pow2<A: Arith>(a: &mut A, y: A::F, n: A::F) -> A::F {
    let (mant, bias) = if a.bits() == 32 { (23, 127) } else { (52, 1023) };
    let ni = a.float_to_int(n);
    let n1 = a.sra(ni, 1);
    let n2 = a.isub(ni, n1);
    let bias = a.i(bias);
    let e1 = a.iadd(n1, bias);
    let e1 = a.shl(e1, mant);
    let s1 = a.bits_to_float(e1);
    let e2 = a.iadd(n2, bias);
    let e2 = a.shl(e2, mant);
    let s2 = a.bits_to_float(e2);
    let y = a.mul(y, s1);
    a.mul(y, s2)
}

/// `x`'s sign bit moved onto `r` (`r` must be non-negative).
fn with_sign_of<A: Arith>(a: &mut A, r: A::F, x: A::F) -> A::F {
    let sign = a.i(if a.bits() == 32 { i32::MIN as i64 } else { i64::MIN });
    let xb = a.to_bits(x);
    let s = a.iand(xb, sign);
    let rb = a.to_bits(r);
    let rb = a.ixor(rb, s);
    a.bits_to_float(rb)
}

const LOG2E: f64 = std::f64::consts::LOG2_E;
const LN2_HI: f64 = 0.693359375;
const LN2_LO: f64 = -2.12194440e-4;
const EXP_P: [f64; 6] =
    [1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1];

/// `x = n·ln2 + r` with `n` integral (as a float) and `|r| ≤ ln2/2`.
fn reduce_ln2<A: Arith>(a: &mut A, x: A::F) -> (A::F, A::F) {
    let log2e = a.f(LOG2E);
    let t = a.mul(x, log2e);
    let n = a.round(t);
    let (hi, lo) = (a.f(-LN2_HI), a.f(-LN2_LO));
    let r = a.mul_add(n, hi, x);
    let r = a.mul_add(n, lo, r);
    (n, r)
}

/// `e^x` (f32). Below -104 the result is 0 (it rounds to 0 there), selected without going
/// through the scaling: a subnormal intermediate costs a microcode assist of about a hundred
/// cycles per lane on x86, and `-inf` arguments (masked scores) are common.
pub fn exp<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let (lo, zero) = (a.f(-104.0), a.f(0.0));
    let tiny = a.cmp(Cmp::Lt, x, lo);
    let x = a.select(tiny, zero, x);
    let x = clamp(a, x, -104.0, 89.0);
    let y = exp_reduced(a, x);
    a.select(tiny, zero, y)
}

/// [`exp`] of an `x` already clamped to `[-104, 89]` (or NaN).
fn exp_reduced<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let (n, r) = reduce_ln2(a, x);
    let z = a.mul(r, r);
    let p = poly(a, r, &EXP_P);
    let y = a.mul_add(p, z, r);
    let one = a.f(1.0);
    let y = a.add(y, one);
    scale_pow2(a, y, n)
}

const EXP2_P: [f64; 8] = [
    1.5252733804059838e-05,
    0.00015403530393381606,
    0.0013333558146428441,
    0.009618129107628477,
    0.055504108664821576,
    0.2402265069591007,
    std::f64::consts::LN_2,
    1.0,
];

/// `2^x` (f32).
pub fn exp2<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let x = clamp(a, x, -151.0, 129.0);
    let n = a.round(x);
    let f = a.sub(x, n);
    let y = poly(a, f, &EXP2_P);
    scale_pow2(a, y, n)
}

const LOG_P: [f64; 9] = [
    7.0376836292E-2,
    -1.1514610310E-1,
    1.1676998740E-1,
    -1.2420140846E-1,
    1.4249322787E-1,
    -1.6668057665E-1,
    2.0000714765E-1,
    -2.4999993993E-1,
    3.3333331174E-1,
];

/// `ln x` (f32).
pub fn log<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let min_normal = a.f(f32::MIN_POSITIVE as f64);
    let tiny = a.cmp(Cmp::Lt, x, min_normal);
    let scale = a.f(8388608.0);
    let xs = a.mul(x, scale);
    let xs = a.select(tiny, xs, x);
    let bits = a.to_bits(xs);
    let raw = a.sra(bits, 23);
    let m255 = a.i(0xff);
    let raw = a.iand(raw, m255);
    let (c126, c149) = (a.i(126), a.i(149));
    let bias = a.iselect(tiny, c149, c126);
    let e = a.isub(raw, bias);
    let mant_mask = a.i(0x007f_ffff);
    let half_bits = a.i(0x3f00_0000);
    let mb = a.iand(bits, mant_mask);
    let mb = a.ior(mb, half_bits);
    let m = a.bits_to_float(mb);
    let sqrthf = a.f(std::f64::consts::FRAC_1_SQRT_2);
    let small = a.cmp(Cmp::Lt, m, sqrthf);
    let (one_i, zero_i) = (a.i(1), a.i(0));
    let dec = a.iselect(small, one_i, zero_i);
    let e = a.isub(e, dec);
    let m2 = a.add(m, m);
    let m = a.select(small, m2, m);
    let one = a.f(1.0);
    let m = a.sub(m, one);
    let ef = a.int_to_float(e);
    let z = a.mul(m, m);
    let p = poly(a, m, &LOG_P);
    let pm = a.mul(p, m);
    let y = a.mul(pm, z);
    let lo = a.f(LN2_LO);
    let y = a.mul_add(ef, lo, y);
    let mhalf = a.f(-0.5);
    let y = a.mul_add(z, mhalf, y);
    let r = a.add(m, y);
    let hi = a.f(LN2_HI);
    let r = a.mul_add(ef, hi, r);
    // Special values: +inf, ±0, negatives and NaN.
    let inf = a.f(f64::INFINITY);
    let is_inf = a.cmp(Cmp::Eq, x, inf);
    let r = a.select(is_inf, inf, r);
    let zero = a.f(0.0);
    let is_zero = a.cmp(Cmp::Eq, x, zero);
    let ninf = a.f(f64::NEG_INFINITY);
    let r = a.select(is_zero, ninf, r);
    let nonneg = a.cmp(Cmp::Ge, x, zero);
    let nan = a.f(f64::NAN);
    a.select(nonneg, r, nan)
}

/// `ln(1 + x)` (f32).
pub fn log1p<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let one = a.f(1.0);
    let u = a.add(one, x);
    let d = a.sub(u, one);
    let lu = log(a, u);
    let q = a.div(x, d);
    let r = a.mul(lu, q);
    let zero = a.f(0.0);
    let exact = a.cmp(Cmp::Eq, d, zero);
    let r = a.select(exact, x, r);
    let inf = a.f(f64::INFINITY);
    let is_inf = a.cmp(Cmp::Eq, x, inf);
    a.select(is_inf, inf, r)
}

/// Taylor coefficients of `(e^r - 1 - r) / r²`, highest first.
const EXPM1_Q: [f64; 7] =
    [1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0];

/// `e^x - 1` (f32).
pub fn expm1<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let xc = clamp(a, x, -18.0, 89.0);
    let (n, r) = reduce_ln2(a, xc);
    let q = poly(a, r, &EXPM1_Q);
    let half = a.f(0.5);
    let q = a.mul_add(q, r, half);
    let z = a.mul(r, r);
    let p = a.mul_add(q, z, r); // expm1(r)
                                // Small n: 2^n·p + (2^n - 1), both exact or rounded once.
    let c25 = a.f(25.0);
    let big = a.cmp(Cmp::Gt, n, c25);
    let ns = a.select(big, c25, n);
    let one = a.f(1.0);
    let t = scale_pow2(a, one, ns);
    let tm1 = a.sub(t, one);
    let small = a.mul_add(t, p, tm1);
    // Large n: 2^n·(p + 1), the -1 is below half an ulp.
    let p1 = a.add(p, one);
    let large = scale_pow2(a, p1, n);
    let r = a.select(big, large, small);
    // Keep the sign of zero.
    let zero = a.f(0.0);
    let is_zero = a.cmp(Cmp::Eq, x, zero);
    a.select(is_zero, x, r)
}

/// `tanh x` (f32).
pub fn tanh<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let ax = a.abs(x);
    let ax = clamp(a, ax, 0.0, 10.0);
    let two_ax = a.add(ax, ax);
    let e = expm1(a, two_ax);
    let two = a.f(2.0);
    let d = a.add(e, two);
    let r = a.div(e, d);
    with_sign_of(a, r, x)
}

const ERF_SMALL: [f64; 7] = [
    7.875875062685488e-05,
    -0.000801686428716587,
    0.005189087423433974,
    -0.026854212010626412,
    0.11283594715160218,
    -0.37612626666720334,
    1.1283791658483509,
];

/// `erfc(x)·e^(x²)` on `[1, 4]` as a polynomial in `u = (x - 2.5) / 1.5`.
const ERF_BIG: [f64; 11] = [
    9.294974299015793e-05,
    -0.0002451864515133294,
    0.00037647727472474865,
    -0.0009162726026454354,
    0.002418384229153226,
    -0.005611233636598291,
    0.012486699636311478,
    -0.026997937418435286,
    0.05611062799448661,
    -0.11152139054306885,
    0.2108063640611436,
];

/// `erf x` (f32).
pub fn erf<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let ax = a.abs(x);
    let t = a.mul(ax, ax);
    let ps = poly(a, t, &ERF_SMALL);
    let small = a.mul(ps, ax);
    let axc = clamp(a, ax, 1.0, 4.0);
    let (c25, inv15) = (a.f(-2.5), a.f(1.0 / 1.5));
    let u = a.add(axc, c25);
    let u = a.mul(u, inv15);
    let rb = poly(a, u, &ERF_BIG);
    let sq = a.mul(axc, axc);
    let nsq = a.neg(sq);
    let e = exp(a, nsq);
    let one = a.f(1.0);
    let erfc = a.mul(e, rb);
    let big = a.sub(one, erfc);
    let lt1 = a.cmp(Cmp::Lt, ax, one);
    let r = a.select(lt1, small, big);
    with_sign_of(a, r, x)
}

const FOPI: f64 = 1.27323954473516;
/// π/4 in five parts: the first four have at most 10 significant bits, so `y·DPk` is exact
/// for the octant counts `y < 2^14` the fast path sees, and the subtractions cancel exactly.
const DP: [f64; 5] =
    [0.78515625, 0.00024199485778808594, -8.149072527885437e-08, 3.041122909053229e-11, -2.5726557318392178e-14];
const SIN_P: [f64; 3] = [-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1];
const COS_P: [f64; 3] = [2.443315711809948E-005, -1.388731625493765E-003, 4.166664568298827E-002];

/// `sin x` (`cos = false`) or `cos x` (f32).
pub fn sin_cos<A: Arith>(a: &mut A, x: A::F, cos: bool) -> A::F {
    let ax = a.abs(x);
    let limit = a.f(TRIG_FAST_LIMIT);
    let fast = a.cmp(Cmp::Le, ax, limit);
    let axc = a.select(fast, ax, limit);
    let fopi = a.f(FOPI);
    let jf = a.mul(axc, fopi);
    let j = a.float_to_int(jf);
    let one_i = a.i(1);
    let j = a.iadd(j, one_i);
    let not1 = a.i(!1);
    let j = a.iand(j, not1);
    let y = a.int_to_float(j);
    let mut r = axc;
    for dp in DP {
        let d = a.f(-dp);
        r = a.mul_add(y, d, r);
    }
    let z = a.mul(r, r);
    // sin polynomial: r + r·z·P(z)
    let ps = poly(a, z, &SIN_P);
    let ps = a.mul(ps, z);
    let sinp = a.mul_add(ps, r, r);
    // cos polynomial: 1 - z/2 + z²·Q(z)
    let pc = poly(a, z, &COS_P);
    let z2 = a.mul(z, z);
    let one = a.f(1.0);
    let mhalf = a.f(-0.5);
    let base = a.mul_add(z, mhalf, one);
    let cosp = a.mul_add(pc, z2, base);
    // Octant j ∈ {0, 2, 4, 6}: bit 2 picks the other polynomial, bit 4 (and for cos, bit 2)
    // flips the sign.
    let (c2, c4, zero_i) = (a.i(2), a.i(4), a.i(0));
    let b2 = a.iand(j, c2);
    let b4 = a.iand(j, c4);
    let b2_set = a.icmp(Cmp::Ne, b2, zero_i);
    let b4_set = a.icmp(Cmp::Ne, b4, zero_i);
    let r = if cos { a.select(b2_set, sinp, cosp) } else { a.select(b2_set, cosp, sinp) };
    let flip = if cos {
        // cos: negative in octants 2 and 4: b2 xor b4.
        let nb4 = a.not(b4_set);
        let nb2 = a.not(b2_set);
        let x1 = a.and(b2_set, nb4);
        let x2 = a.and(b4_set, nb2);
        a.or(x1, x2)
    } else {
        b4_set
    };
    let nr = a.neg(r);
    let r = a.select(flip, nr, r);
    let r = if cos { r } else { with_sign_of(a, r, x) };
    let slow = a.not(fast);
    a.fallback(if cos { Slow::Cos } else { Slow::Sin }, slow, x, r)
}

/// `sin x` (f32).
pub fn sin<A: Arith>(a: &mut A, x: A::F) -> A::F {
    sin_cos(a, x, false)
}

/// `cos x` (f32).
pub fn cos<A: Arith>(a: &mut A, x: A::F) -> A::F {
    sin_cos(a, x, true)
}

/// `2^f` for `|f| ≤ 1/2` to ~1e-15: Taylor coefficients `ln2^k / k!`, highest first.
const EXP2_P64: [f64; 13] = [
    1.3691488853904128e-12,
    2.5678435993488206e-11,
    4.4455382718708116e-10,
    7.054911620801123e-09,
    1.01780860092397e-07,
    1.321548679014431e-06,
    1.5252733804059841e-05,
    0.0001540353039338161,
    0.0013333558146428443,
    0.009618129107628477,
    0.05550410866482158,
    0.24022650695910072,
    std::f64::consts::LN_2,
];

/// `x^y` in f64 to ~1e-12 relative (used for f32 `pow`, rounded once at the end), with C's
/// special cases.
pub fn pow64<A: Arith>(a: &mut A, x: A::F, y: A::F) -> A::F {
    let ax = a.abs(x);
    // ax = m · 2^e with m in [√½, √2).
    let bits = a.to_bits(ax);
    let e = a.sra(bits, 52);
    let c2047 = a.i(0x7ff);
    let e = a.iand(e, c2047);
    let c1023 = a.i(1023);
    let e = a.isub(e, c1023);
    let mmask = a.i(0x000f_ffff_ffff_ffff);
    let one_bits = a.i(0x3ff0_0000_0000_0000);
    let mb = a.iand(bits, mmask);
    let mb = a.ior(mb, one_bits);
    let m = a.bits_to_float(mb);
    let sqrt2 = a.f(std::f64::consts::SQRT_2);
    let big = a.cmp(Cmp::Gt, m, sqrt2);
    let half = a.f(0.5);
    let mh = a.mul(m, half);
    let m = a.select(big, mh, m);
    let (one_i, zero_i) = (a.i(1), a.i(0));
    let inc = a.iselect(big, one_i, zero_i);
    let e = a.iadd(e, inc);
    // ln m = 2·atanh(s), s = (m-1)/(m+1): 2s·(1 + s²/3 + s⁴/5 + …).
    let one = a.f(1.0);
    let num = a.sub(m, one);
    let den = a.add(m, one);
    let s = a.div(num, den);
    let s2 = a.mul(s, s);
    let series: [f64; 8] = [1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0];
    let q = poly(a, s2, &series);
    let two_log2e = a.f(2.0 * LOG2E);
    let s_scaled = a.mul(s, two_log2e);
    let log2m = a.mul(s_scaled, q);
    let ef = a.int_to_float(e);
    let l = a.add(ef, log2m);
    // log2 of 0 and inf (NaN propagates on its own).
    let zero = a.f(0.0);
    let inf = a.f(f64::INFINITY);
    let ninf = a.f(f64::NEG_INFINITY);
    let is_zero = a.cmp(Cmp::Eq, ax, zero);
    let l = a.select(is_zero, ninf, l);
    let is_inf = a.cmp(Cmp::Eq, ax, inf);
    let l = a.select(is_inf, inf, l);
    // 2^(y·l).
    let t = a.mul(y, l);
    let t = clamp(a, t, -1000.0, 1000.0);
    let n = a.round(t);
    let f = a.sub(t, n);
    let p = poly(a, f, &EXP2_P64);
    let p = a.mul_add(p, f, one);
    let r = scale_pow2(a, p, n);
    // Sign and special cases.
    let yt = a.trunc(y);
    let yint = a.cmp(Cmp::Eq, yt, y);
    let yh = a.mul(y, half);
    let yht = a.trunc(yh);
    let yh_frac = a.cmp(Cmp::Ne, yht, yh);
    let yodd = a.and(yint, yh_frac);
    let xbits = a.to_bits(x);
    let zero_bits = a.i(0);
    let xneg_sign = a.icmp(Cmp::Lt, xbits, zero_bits);
    let flip = a.and(xneg_sign, yodd);
    let nr = a.neg(r);
    let r = a.select(flip, nr, r);
    let xlt0 = a.cmp(Cmp::Lt, x, zero);
    let ynotint = a.not(yint);
    let xfinite = a.cmp(Cmp::Ne, ax, inf);
    let bad = a.and(xlt0, ynotint);
    let bad = a.and(bad, xfinite);
    let nan = a.f(f64::NAN);
    let r = a.select(bad, nan, r);
    let any_nan = a.cmp(Cmp::Uno, x, y);
    let r = a.select(any_nan, nan, r);
    let ay = a.abs(y);
    let yinf = a.cmp(Cmp::Eq, ay, inf);
    let xone = a.cmp(Cmp::Eq, x, one);
    let axone = a.cmp(Cmp::Eq, ax, one);
    let c = a.or(xone, yinf);
    let unit = a.and(axone, c);
    let r = a.select(unit, one, r);
    let y0 = a.cmp(Cmp::Eq, y, zero);
    a.select(y0, one, r)
}

/// Scalar f32 entry points (the reference the JIT code matches bit for bit with the same
/// contraction setting).
pub mod scalar {
    use super::*;

    pub fn exp_f32(x: f32, fma: bool) -> f32 {
        super::exp(&mut Soft32 { fma }, x)
    }
    pub fn exp2_f32(x: f32, fma: bool) -> f32 {
        super::exp2(&mut Soft32 { fma }, x)
    }
    pub fn log_f32(x: f32, fma: bool) -> f32 {
        super::log(&mut Soft32 { fma }, x)
    }
    pub fn log1p_f32(x: f32, fma: bool) -> f32 {
        super::log1p(&mut Soft32 { fma }, x)
    }
    pub fn expm1_f32(x: f32, fma: bool) -> f32 {
        super::expm1(&mut Soft32 { fma }, x)
    }
    pub fn tanh_f32(x: f32, fma: bool) -> f32 {
        super::tanh(&mut Soft32 { fma }, x)
    }
    pub fn erf_f32(x: f32, fma: bool) -> f32 {
        super::erf(&mut Soft32 { fma }, x)
    }
    pub fn sin_f32(x: f32, fma: bool) -> f32 {
        super::sin(&mut Soft32 { fma }, x)
    }
    pub fn cos_f32(x: f32, fma: bool) -> f32 {
        super::cos(&mut Soft32 { fma }, x)
    }
    pub fn sqrt_f32(x: f32) -> f32 {
        x.sqrt()
    }
    pub fn rsqrt_f32(x: f32) -> f32 {
        1.0 / x.sqrt()
    }
    pub fn pow_f32(x: f32, y: f32, fma: bool) -> f32 {
        super::pow64(&mut Soft64 { fma }, x as f64, y as f64) as f32
    }
}

/// `e^x` for `x ≤ 0`, with NaN giving 0 (the exponential of the online `Σ exp(x - max)`
/// below, whose arguments are never positive and are NaN only where the term must vanish):
/// [`exp`] with its upper clamp dropped and a lower clamp that also catches NaN.
pub fn exp_or_zero<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let (lo, zero) = (a.f(-104.0), a.f(0.0));
    let above = a.cmp(Cmp::Ge, x, lo);
    // As in [`exp`]: the zero results are selected, not scaled down through subnormals.
    let x = a.select(above, x, zero);
    let y = exp_reduced(a, x);
    a.select(above, y, zero)
}

/// The online `Σ exp(x - max)` of a `sumexp` accumulator (the kernel IR's docs), one value at a
/// time: the state is the running maximum `m` (the NaN-propagating `max`, from `-inf`; a stage
/// with a `max` accumulator fed the same values shares it) and `s`, the sum of `exp(y - m)`
/// over the values `y` seen (from 0). This step returns the new `s` for the value `x`, given the
/// maximum `m` *before* `x`: a larger `x` rescales the sum, `s·exp(m - x) + 1`; any other adds
/// `exp(x - m)`; so one exponential per value, of `-|x - m|`, and every term stays at most 1.
/// `exp0` is [`exp_or_zero`] of the lane type. Special values: NaN differences (equal
/// infinities, a NaN `x` or `m`) add 0, so `s` is always finite; the maximum itself tells
/// [`sum_exp_finish`] what the result is then. While `m` is `-inf`, `s` stays 0, and the first
/// larger value makes it `0·0 + 1`.
pub fn sum_exp_step<A: Arith, E: FnMut(&mut A, A::F) -> A::F + ?Sized>(
    a: &mut A,
    m: A::F,
    s: A::F,
    x: A::F,
    exp0: &mut E,
) -> A::F {
    // `-|x - m|`: the difference with its sign bit set.
    let d = a.sub(x, m);
    let d = a.to_bits(d);
    let sign = a.i(if a.bits() == 32 { i32::MIN as i64 } else { i64::MIN });
    let d = a.ior(d, sign);
    let d = a.bits_to_float(d);
    let e = exp0(a, d);
    let one = a.f(1.0);
    // `m > x` is the comparison the `max` update makes (one compare for both when shared).
    let below = a.cmp(Cmp::Gt, m, x);
    let grown = a.mul_add(s, e, one);
    let kept = a.add(s, e);
    a.select(below, kept, grown)
}

/// [`sum_exp_step`] where `x` is known not to exceed `m` (or is NaN): `s + exp(x - m)`.
pub fn sum_exp_add<A: Arith, E: FnMut(&mut A, A::F) -> A::F + ?Sized>(
    a: &mut A,
    m: A::F,
    s: A::F,
    x: A::F,
    exp0: &mut E,
) -> A::F {
    let d = a.sub(x, m);
    let e = exp0(a, d);
    a.add(s, e)
}

/// A partial sum `s` of [`sum_exp_step`] (over some of the values, with their maximum `mi`)
/// rescaled to the maximum `m` of all the values: `s·exp(mi - m)`, exactly `s` where
/// `mi = m` (equal infinities included). The partial sums of a row, rescaled and added, give
/// its sum; `m` must be the NaN-propagating maximum of the `mi` (where it is NaN, the result
/// is left to [`sum_exp_finish`]).
pub fn sum_exp_rescale<A: Arith, E: FnMut(&mut A, A::F) -> A::F + ?Sized>(
    a: &mut A,
    mi: A::F,
    s: A::F,
    m: A::F,
    exp0: &mut E,
) -> A::F {
    let d = a.sub(mi, m);
    let w = exp0(a, d);
    let ws = a.mul(s, w);
    let same = a.cmp(Cmp::Eq, mi, m);
    a.select(same, s, ws)
}

/// The accumulator's result from the final state (`empty`: no value was fed): `s` where the
/// maximum is finite; where it is not, what the two stages it stands for compute: NaN for a
/// NaN maximum (a NaN was fed); for `+inf`, NaN (`exp(inf - inf)` is a term), or `+inf` with
/// the finite shift (`exp(inf - 0)` is); for `-inf`, NaN for a non-empty range
/// (`exp(-inf - -inf)`) and `+0` for an empty one, or 0 with the finite shift.
pub fn sum_exp_finish<A: Arith>(a: &mut A, m: A::F, s: A::F, empty: A::M, finite_shift: bool) -> A::F {
    let inf = a.f(f64::INFINITY);
    let zero = a.f(0.0);
    let nan = a.f(f64::NAN);
    let am = a.abs(m);
    let finite = a.cmp(Cmp::Lt, am, inf);
    let pos = a.cmp(Cmp::Gt, m, zero);
    let beyond = if finite_shift {
        a.select(pos, inf, zero)
    } else {
        let low = a.select(empty, zero, nan);
        a.select(pos, nan, low)
    };
    let r = a.select(finite, s, beyond);
    let m_nan = a.cmp(Cmp::Uno, m, m);
    a.select(m_nan, nan, r)
}

/// The IR's `max` (`max = true`) or `min`: NaN propagates (as the canonical NaN) and
/// -0 < +0. Branch-free; on x64 vectors two `maxps` (`minps`), an AND (OR) and a blend.
pub fn max_min<A: Arith>(a: &mut A, x: A::F, y: A::F, max: bool) -> A::F {
    // Both orders of x86's `maxps`/`minps` (`y < x ? x : y` and `x < y ? x : y`: written as
    // these selects, Cranelift's x64 backend emits the one instruction for each on vectors).
    // For ordered, unequal operands both give the answer; equal ones differ at most in the
    // sign of zero, each order giving one operand, so AND of the bits gives +0 for max and OR
    // gives -0 for min; a NaN operand makes the result NaN whatever they gave. The choices
    // are selects on the bits (conditional moves on scalars, blends on vectors), never
    // branches on floats.
    let pick = |a: &mut A, p: A::F, q: A::F| {
        let m = if max { a.cmp(Cmp::Lt, q, p) } else { a.cmp(Cmp::Lt, p, q) };
        let r = a.select(m, p, q);
        a.to_bits(r)
    };
    let (xy, yx) = (pick(a, x, y), pick(a, y, x));
    let both = if max { a.iand(xy, yx) } else { a.ior(xy, yx) };
    let uno = a.cmp(Cmp::Uno, x, y);
    let nan = a.f(f64::NAN);
    let nan = a.to_bits(nan);
    let r = a.iselect(uno, nan, both);
    a.bits_to_float(r)
}

/// [`max_min`] with `k` a constant that is not NaN, nor -0 for max, nor +0 for min: x86's
/// `maxps` (`minps`) order `k < x ? x : k` (`x < k ? x : k`) is then the answer for every
/// ordered `x` (an `x` equal to `k` is `k`, of the same bits, or a zero of the right sign), and
/// a NaN `x` gives NaN. Three instructions a vector on x64 (relu is `max(x, 0)`).
pub fn max_min_const<A: Arith>(a: &mut A, x: A::F, k: A::F, max: bool) -> A::F {
    let m = if max { a.cmp(Cmp::Lt, k, x) } else { a.cmp(Cmp::Lt, x, k) };
    let r = a.select(m, x, k);
    let uno = a.cmp(Cmp::Uno, x, x);
    let nan = a.f(f64::NAN);
    a.select(uno, nan, r)
}

/// The IR's `sign`: ±1, with ±0 and NaN returned as they are.
pub fn sign<A: Arith>(a: &mut A, x: A::F) -> A::F {
    let one = a.f(1.0);
    let s = with_sign_of(a, one, x);
    let zero = a.f(0.0);
    let is_zero = a.cmp(Cmp::Eq, x, zero);
    let is_nan = a.cmp(Cmp::Uno, x, x);
    let keep = a.or(is_zero, is_nan);
    a.select(keep, x, s)
}
