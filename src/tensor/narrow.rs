//! f64 to f16 and bf16, rounded once to nearest, ties to even.
//!
//! `half`'s own `from_f64` goes through f32 (F16C has no f64 conversion, and its software
//! path drops the low mantissa bits first), which rounds twice: `1 + 2^-11 + 2^-40` becomes
//! `1` (the tie, rounded to even) instead of `1 + 2^-10`. Here the value is first rounded to
//! f32 *to odd* (toward zero, the last bit set where that was inexact), which keeps a tie from
//! forming where there was none: f32's 24 bits are at least twice f16's 11 plus 2, so the
//! second rounding is then the correct one. `clippy.toml` disallows `half`'s versions.

use half::{bf16, f16};

/// `x` rounded to f32 toward zero, with the last bit set where that was inexact. Past f32's
/// range: its largest value (odd), which both half types round to infinity; NaN stays NaN.
pub fn f32_round_to_odd(x: f64) -> f32 {
    let y = x as f32;
    if x.is_nan() || f64::from(y) == x {
        return y;
    }
    let mut bits = y.to_bits();
    if f64::from(y).abs() > x.abs() {
        // Rounded away from zero (infinity included): one step back.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `x` as an f16, correctly rounded.
pub fn f16_from_f64(x: f64) -> f16 {
    f16::from_f32(f32_round_to_odd(x))
}

/// `x` as a bf16, correctly rounded.
pub fn bf16_from_f64(x: f64) -> bf16 {
    bf16::from_f32(f32_round_to_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `r` is `x` correctly rounded, given the value and bits of each finite
    /// neighbour on the grid (via `to_f64` of `bits ± 1`).
    fn correctly_rounded(x: f64, r: f64, below: f64, above: f64, r_even: bool) -> bool {
        let (d, db, da) = ((x - r).abs(), (x - below).abs(), (x - above).abs());
        d < db.min(da) || (d == db.min(da) && (r_even || d == 0.0))
    }

    #[test]
    fn every_tie_and_its_neighbours_round_once() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut checked = 0;
        for i in 0..200_000u64 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // An f16 in its finite range, and a point near the midpoint to its successor.
            let h = f16::from_bits((state >> 48) as u16 & 0x7bfe | (i as u16 & 0x8000));
            let next = f16::from_bits(h.to_bits() + 1);
            let mid = (h.to_f64() + next.to_f64()) / 2.0;
            let nudge = [0.0, 1e-12, -1e-12, 2f64.powi(-40), -(2f64.powi(-40))][(state % 5) as usize];
            let x = mid + nudge * mid.abs().max(2f64.powi(-24));
            let r = f16_from_f64(x);
            let (lo, hi) = (f16::from_bits(r.to_bits().wrapping_sub(1)), f16::from_bits(r.to_bits() + 1));
            let ok = correctly_rounded(x, r.to_f64(), lo.to_f64(), hi.to_f64(), r.to_bits() & 1 == 0);
            assert!(ok || r.is_infinite(), "f16 of {x:e}: {r} ({:#06x})", r.to_bits());
            let b = bf16_from_f64(x);
            let (lo, hi) = (bf16::from_bits(b.to_bits().wrapping_sub(1)), bf16::from_bits(b.to_bits() + 1));
            assert!(
                correctly_rounded(x, b.to_f64(), lo.to_f64(), hi.to_f64(), b.to_bits() & 1 == 0),
                "bf16 of {x:e}: {b}"
            );
            checked += 1;
        }
        assert_eq!(checked, 200_000);
        // The case that rounds twice through f32, each way, and for bf16.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_from_f64(x).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f16_from_f64(-x).to_f64(), -(1.0 + 2f64.powi(-10)));
        assert_eq!(bf16_from_f64(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_f64(), 1.0 + 2f64.powi(-7));
        // Specials, overflow, and below f16's smallest subnormal.
        assert!(f16_from_f64(f64::NAN).is_nan());
        assert_eq!(f16_from_f64(65520.0), f16::INFINITY);
        assert_eq!(f16_from_f64(65519.999), f16::MAX);
        assert_eq!(f16_from_f64(1e300), f16::INFINITY);
        assert_eq!(bf16_from_f64(-1e300), bf16::NEG_INFINITY);
        assert_eq!(f16_from_f64(2f64.powi(-25)).to_bits(), 0);
        assert_eq!(f16_from_f64(2f64.powi(-25) * (1.0 + 1e-15)).to_bits(), 1);
        assert_eq!(f16_from_f64(-0.0).to_bits(), 0x8000);
    }
}
