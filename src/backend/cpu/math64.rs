//! f64 `exp` and `ln` over [`Arith`], for a backend with no f64 library to call: the Vulkan
//! device (`GLSL.std.450`'s `Exp` and `Log` are 16- and 32-bit only). The CPU's compiled
//! kernels call the host's f64 functions instead.
//!
//! - `exp`: `x = n·ln2 + r` (Cody–Waite, `ln2` in two parts, the first with 32 trailing zero
//!   bits so `n·hi` is exact), `e^r = 1 + r + r²·P(r)` with `P` Taylor's to `r^13/13!` on
//!   `|r| ≤ ln2/2` (truncation under 1e-17), scaled by `2^n` in two steps so subnormal
//!   results round once; 0 below -746 and infinity above 710.
//! - `ln`: `x = 2^e·(1 + f)` with `1 + f` in `[√½, √2)` (subnormals scaled by `2^54` first),
//!   `s = f/(2 + f)`, `ln(1 + f) = f - s·(f - R)` where `R = 2s²/3 + 2s⁴/5 + …` (the atanh
//!   series to `s^22`), plus `e·ln2` in two parts; `ln 0 = -inf`, negative arguments NaN.
//!
//! Max error against the host's functions, measured by this module's tests (every
//! 2^40-th f64 bit pattern over the finite range, and the special values): exp 1 ULP, ln 1
//! ULP, with or without FMA contraction.

use super::math::{clamp, poly, scale_pow2, Arith, Cmp};

/// `ln 2` in two parts: the first with 32 trailing zero bits.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

/// `1/13!, 1/12!, …, 1/2!`: Horner's order.
const EXP_TAYLOR: [f64; 12] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// `e^x` in f64 (`a` computing in f64).
pub fn exp<A: Arith>(a: &mut A, x: A::F) -> A::F {
    debug_assert_eq!(a.bits(), 64);
    let x = clamp(a, x, -746.0, 710.0);
    let log2e = a.f(std::f64::consts::LOG2_E);
    let t = a.mul(x, log2e);
    let n = a.round(t);
    let (hi, lo) = (a.f(-LN2_HI), a.f(-LN2_LO));
    let nh = a.mul(n, hi);
    let r = a.add(x, nh);
    let r = a.mul_add(n, lo, r);
    let p = poly(a, r, &EXP_TAYLOR);
    let r2 = a.mul(r, r);
    let y = a.mul_add(r2, p, r);
    let one = a.f(1.0);
    let y = a.add(one, y);
    scale_pow2(a, y, n)
}

/// `2/23, 2/21, …, 2/3`: Horner's order.
const ATANH_SERIES: [f64; 11] = [
    2.0 / 23.0,
    2.0 / 21.0,
    2.0 / 19.0,
    2.0 / 17.0,
    2.0 / 15.0,
    2.0 / 13.0,
    2.0 / 11.0,
    2.0 / 9.0,
    2.0 / 7.0,
    2.0 / 5.0,
    2.0 / 3.0,
];

/// `ln x` in f64 (`a` computing in f64).
pub fn ln<A: Arith>(a: &mut A, x: A::F) -> A::F {
    debug_assert_eq!(a.bits(), 64);
    let min_normal = a.f(f64::MIN_POSITIVE);
    let tiny = a.cmp(Cmp::Lt, x, min_normal);
    let scale = a.f(18_014_398_509_481_984.0); // 2^54
    let xs = a.mul(x, scale);
    let xs = a.select(tiny, xs, x);
    // xs = 2^e · m, m in [1, 2).
    let bits = a.to_bits(xs);
    let e = a.sra(bits, 52);
    let c2047 = a.i(0x7ff);
    let e = a.iand(e, c2047);
    let c1023 = a.i(1023);
    let e = a.isub(e, c1023);
    let (c54, zero_i) = (a.i(54), a.i(0));
    let shift = a.iselect(tiny, c54, zero_i);
    let e = a.isub(e, shift);
    let mmask = a.i(0x000f_ffff_ffff_ffff);
    let one_bits = a.i(0x3ff0_0000_0000_0000);
    let mb = a.iand(bits, mmask);
    let mb = a.ior(mb, one_bits);
    let m = a.bits_to_float(mb);
    // Into [√½, √2).
    let sqrt2 = a.f(std::f64::consts::SQRT_2);
    let big = a.cmp(Cmp::Gt, m, sqrt2);
    let half = a.f(0.5);
    let mh = a.mul(m, half);
    let m = a.select(big, mh, m);
    let one_i = a.i(1);
    let inc = a.iselect(big, one_i, zero_i);
    let e = a.iadd(e, inc);
    let one = a.f(1.0);
    let f = a.sub(m, one);
    let two = a.f(2.0);
    let den = a.add(two, f);
    let s = a.div(f, den);
    let z = a.mul(s, s);
    let q = poly(a, z, &ATANH_SERIES);
    let r = a.mul(z, q);
    let fr = a.sub(f, r);
    let sfr = a.mul(s, fr);
    let l1p = a.sub(f, sfr);
    let ef = a.int_to_float(e);
    let lo = a.f(LN2_LO);
    let low = a.mul_add(ef, lo, l1p);
    let hi = a.f(LN2_HI);
    let eh = a.mul(ef, hi);
    let l = a.add(eh, low);
    // ln 0 = -inf, ln inf = inf, negative or NaN: NaN.
    let zero = a.f(0.0);
    let is_zero = a.cmp(Cmp::Eq, x, zero);
    let ninf = a.f(f64::NEG_INFINITY);
    let l = a.select(is_zero, ninf, l);
    let inf = a.f(f64::INFINITY);
    let is_inf = a.cmp(Cmp::Eq, x, inf);
    let l = a.select(is_inf, inf, l);
    let neg = a.cmp(Cmp::Lt, x, zero);
    let nan_in = a.cmp(Cmp::Uno, x, x);
    let bad = a.or(neg, nan_in);
    let nan = a.f(f64::NAN);
    a.select(bad, nan, l)
}

#[cfg(test)]
mod tests {
    use super::super::math::Soft64;

    fn ulp(got: f64, want: f64) -> u64 {
        fn ord(x: f64) -> i128 {
            let b = x.to_bits() as i64 as i128;
            if b < 0 {
                i64::MIN as i128 - b
            } else {
                b
            }
        }
        if got.is_nan() || want.is_nan() {
            return if got.is_nan() && want.is_nan() { 0 } else { u64::MAX };
        }
        (ord(got) - ord(want)).unsigned_abs() as u64
    }

    /// Every 2^40-th bit pattern of each sign (finite and not), the specials, and the ends of
    /// `exp`'s range.
    fn arguments() -> Vec<f64> {
        let mut xs: Vec<f64> = (0..(1u64 << 23))
            .flat_map(|k| {
                let b = (k << 40) | (k.wrapping_mul(0x9e37_79b9) & 0xff_ffff_ffff);
                [f64::from_bits(b), -f64::from_bits(b)]
            })
            .collect();
        xs.extend([0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE]);
        xs.extend([709.78, 709.782712893384, 709.7827128933841, -745.1332191019411, -745.1332191019412, -746.0]);
        xs.extend([5e-324, 1.0 + f64::EPSILON, 1.0 - f64::EPSILON / 2.0, std::f64::consts::SQRT_2]);
        xs
    }

    #[test]
    fn exp_and_ln_are_within_one_ulp_of_the_host() {
        for fma in [false, true] {
            let a = &mut Soft64 { fma };
            let (mut worst_exp, mut worst_ln) = ((0, 0.0), (0, 0.0));
            for x in arguments() {
                let e = ulp(super::exp(a, x), x.exp());
                let l = ulp(super::ln(a, x), x.ln());
                if e > worst_exp.0 {
                    worst_exp = (e, x);
                }
                if l > worst_ln.0 {
                    worst_ln = (l, x);
                }
            }
            assert!(worst_exp.0 <= 1, "exp (fma {fma}): {} ulp at {:e}", worst_exp.0, worst_exp.1);
            assert!(worst_ln.0 <= 1, "ln (fma {fma}): {} ulp at {:e}", worst_ln.0, worst_ln.1);
        }
    }
}
