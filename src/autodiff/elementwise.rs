//! Derivatives of the elementwise prims. At the prims rung an elementwise node's operands and
//! result share one shape and dtype, so every cotangent here has its argument's type without
//! any summing; broadcasting is `broadcast_in_dim`'s business (`shape.rs`).
//!
//! Kinks take PyTorch's subgradients: `abs'(0) = 0` (through `sign`), and `max`/`min` give
//! each of two tied operands half the cotangent. `pow`'s derivative in the base is 0 where
//! the exponent is 0 (`x^0` is constant), its derivative in the exponent 0 where the base is
//! 0 (the limit of `y log a`); a negative base gives NaN there, as the function has no real
//! derivative in the exponent.

use smallvec::smallvec;

use super::{Grads, Vjp};
use crate::decomp::{DecompError, Emitter};
use crate::ir::{DType, Value};
use crate::ops::OpKind;

/// `c - x` for a constant `c` of `x`'s dtype.
fn rsub(e: &mut Emitter, c: f64, x: Value) -> Result<Value, DecompError> {
    let k = e.full_like(c, x)?;
    e.sub(k, x)
}

/// The unary math prims: `ct * f'(x)`, written with the result `y` where that is cheaper.
pub(super) fn unary(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    use OpKind::*;
    let (x, y, ct) = (v.arg(0), v.out, v.ct);
    let d = match v.node.op {
        Neg => e.unary(Neg, ct)?,
        Abs => {
            let s = e.unary(Sign, x)?;
            e.mul(ct, s)?
        }
        Exp => e.mul(ct, y)?,
        Exp2 => {
            let t = e.mul(ct, y)?;
            e.binary_scalar(Mul, t, std::f64::consts::LN_2)?
        }
        Log => e.div(ct, x)?,
        Log1p => {
            let t = e.binary_scalar(Add, x, 1.0)?;
            e.div(ct, t)?
        }
        Expm1 => {
            let t = e.binary_scalar(Add, y, 1.0)?;
            e.mul(ct, t)?
        }
        Sqrt => {
            let t = e.binary_scalar(Mul, y, 2.0)?;
            e.div(ct, t)?
        }
        // d/dx x^-1/2 = -y^3 / 2.
        Rsqrt => {
            let y2 = e.mul(y, y)?;
            let y3 = e.mul(y2, y)?;
            let t = e.mul(ct, y3)?;
            e.binary_scalar(Mul, t, -0.5)?
        }
        Reciprocal => {
            let y2 = e.mul(y, y)?;
            let t = e.mul(ct, y2)?;
            e.unary(Neg, t)?
        }
        Sin => {
            let c = e.unary(Cos, x)?;
            e.mul(ct, c)?
        }
        Cos => {
            let s = e.unary(Sin, x)?;
            let t = e.mul(ct, s)?;
            e.unary(Neg, t)?
        }
        Tanh => {
            let y2 = e.mul(y, y)?;
            let t = rsub(e, 1.0, y2)?;
            e.mul(ct, t)?
        }
        // erf'(x) = 2/sqrt(pi) exp(-x^2).
        Erf => {
            let x2 = e.mul(x, x)?;
            let n = e.unary(Neg, x2)?;
            let g = e.unary(Exp, n)?;
            let g = e.binary_scalar(Mul, g, std::f64::consts::FRAC_2_SQRT_PI)?;
            e.mul(ct, g)?
        }
        op => return Err(unexpected(op)),
    };
    Ok(smallvec![Some(d)])
}

/// The binary arithmetic prims.
pub(super) fn binary(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    use OpKind::*;
    let (a, b, y, ct) = (v.arg(0), v.arg(1), v.out, v.ct);
    let (da, db) = match v.node.op {
        Add => (ct, ct),
        Sub => (ct, e.unary(Neg, ct)?),
        Mul => (e.mul(ct, b)?, e.mul(ct, a)?),
        // d/db a/b = -(a/b)/b: `-(ct/b) * y`.
        Div => {
            let da = e.div(ct, b)?;
            let t = e.mul(da, y)?;
            (da, e.unary(Neg, t)?)
        }
        Pow => {
            let zero = e.full_like(0.0, ct)?;
            let bm1 = e.binary_scalar(Sub, b, 1.0)?;
            let p = e.binary(Pow, a, bm1)?;
            let t = e.mul(b, p)?;
            let t = e.mul(ct, t)?;
            let b0 = e.binary(Eq, b, zero)?;
            let da = e.select(b0, zero, t)?;
            let la = e.unary(Log, a)?;
            let t = e.mul(y, la)?;
            let a0 = e.binary(Eq, a, zero)?;
            let t = e.select(a0, zero, t)?;
            (da, e.mul(ct, t)?)
        }
        Max | Min => {
            let (wins_a, wins_b) = if v.node.op == Max { (Gt, Lt) } else { (Lt, Gt) };
            let zero = e.full_like(0.0, ct)?;
            let tie = e.binary(Eq, a, b)?;
            let half = e.binary_scalar(Mul, ct, 0.5)?;
            let shared = e.select(tie, half, zero)?;
            let ca = e.binary(wins_a, a, b)?;
            let cb = e.binary(wins_b, a, b)?;
            (e.select(ca, ct, shared)?, e.select(cb, ct, shared)?)
        }
        // a - trunc(a/b) b: d/db = -trunc(a/b) = -(a - y)/b.
        Rem => {
            let t = e.sub(a, y)?;
            let q = e.div(t, b)?;
            let t = e.mul(ct, q)?;
            (ct, e.unary(Neg, t)?)
        }
        op => return Err(unexpected(op)),
    };
    Ok(smallvec![Some(da), Some(db)])
}

/// `where(c, a, b)`: the cotangent goes to the chosen side; the condition gets none.
pub(super) fn select(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (c, ct) = (v.arg(0), v.ct);
    let zero = e.full_like(0.0, ct)?;
    Ok(smallvec![None, Some(e.select(c, ct, zero)?), Some(e.select(c, zero, ct)?)])
}

/// `convert_element_type`: the cotangent converted back (a float argument only).
pub(super) fn convert(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let dtype = e.dtype(v.arg(0));
    Ok(smallvec![if dtype.is_float() { Some(e.convert(v.ct, dtype)?) } else { None }])
}

/// A table entry that routes an op to a rule that does not handle it: a bug in the table.
pub(super) fn unexpected(op: OpKind) -> DecompError {
    DecompError::Unsupported { op: op.name(), reason: "the derivative table routes it to the wrong rule".into() }
}

/// `gelu`, a high-level op with a hand rule: `ct * (Φ(x) + x φ(x))` with `Φ(x) = gelu(x) / x`
/// read from the forward's result (erf form), or the
/// derivative of `x (1 + tanh u) / 2`, `u = √(2/π) (x + 0.044715 x³)` (tanh form). Derived
/// through the decomposition instead, the accurate tail for negative `x` (a Horner polynomial
/// and a split exponential) leaves a dozen intermediates that the backward reads: materialised
/// tensors, not a fused pass. `tests/all/autodiff.rs` checks this rule against the derived one
/// and against central differences.
pub(super) fn gelu(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    use std::f64::consts::PI;
    use OpKind::*;
    let (x, ct) = (v.arg(0), v.ct);
    // The tanh form's values are formed differently from the decomposition's (`(0.044715 x)
    // x`, not `x²`), so simplification cannot merge the backward into a recomputed forward's
    // interior and keep recovery from running it as a gelu.
    let slope = if v.node.attrs.str("approximate") == "tanh" {
        let c1 = (2.0 / PI).sqrt();
        let w = e.binary_scalar(Mul, x, 0.044715)?;
        let wx = e.mul(w, x)?;
        let inner = e.binary_scalar(Add, wx, 1.0)?;
        let u = e.mul(x, inner)?;
        let u = e.binary_scalar(Mul, u, c1)?;
        let t = e.unary(Tanh, u)?;
        // 0.5 (1 + t) + 0.5 x (1 - t²) c1 (1 + 3 · 0.044715 x²)
        let half = e.binary_scalar(Add, t, 1.0)?;
        let half = e.binary_scalar(Mul, half, 0.5)?;
        let t2 = e.mul(t, t)?;
        let sech2 = rsub(e, 1.0, t2)?;
        let du = e.binary_scalar(Mul, wx, 3.0)?;
        let du = e.binary_scalar(Add, du, 1.0)?;
        let du = e.binary_scalar(Mul, du, 0.5 * c1)?;
        let r = e.mul(sech2, du)?;
        let r = e.mul(x, r)?;
        e.add(half, r)?
    } else {
        // Φ(x) = gelu(x) / x: the forward's own result, so no error function to evaluate
        // again (the forward's library kernel has the accurate tail, where `1 - erf(-x/√2)`
        // cancels), with Φ = 1/2 where `|x|` is below the dtype's epsilon (`0`, where the
        // quotient is not defined, and subnormals, where `gelu(x)` has lost digits: `Φ(x) -
        // 1/2 ≈ 0.4 x` is under half an ulp of 1/2 there). At ±inf the slope is NaN, as the
        // derived one (`x φ(x)` is `∞ · 0`).
        let eps = match e.dtype(x) {
            DType::F64 => f64::EPSILON,
            DType::F16 => 2f64.powi(-10),
            DType::BF16 => 2f64.powi(-7),
            _ => f32::EPSILON as f64,
        };
        let quotient = e.div(v.out, x)?;
        let ax = e.unary(Abs, x)?;
        let small = e.binary_scalar(Lt, ax, eps)?;
        let half = e.full_like(0.5, x)?;
        let cdf = e.select(small, half, quotient)?;
        let hx = e.binary_scalar(Mul, x, -0.5)?;
        let q = e.mul(hx, x)?;
        let pdf = e.unary(Exp, q)?;
        let pdf = e.binary_scalar(Mul, pdf, 1.0 / (2.0 * PI).sqrt())?;
        let xp = e.mul(x, pdf)?;
        e.add(cdf, xp)?
    };
    Ok(smallvec![Some(e.mul(ct, slope)?)])
}
