//! Activations and other high-level pointwise functions (shape-preserving): `relu`, `gelu`,
//! `silu`, `sigmoid`, `softplus`, `leaky_relu`, `hardsigmoid`, `hardswish`, `elu`, `clamp`,
//! `atan`, and `dropout` in eval mode.
//!
//! Each is computed per element in f64 and rounded once to the result dtype. All are float-only
//! except `relu` and `clamp`, which also take integers (the result keeps the input's dtype).
//! Semantic choices, beyond the torch definitions:
//! - NaN in gives NaN out everywhere. At ±inf each op gives its limit, including where the
//!   textbook formula would make `inf * 0` (`gelu(-inf)`, `silu(-inf)`, `hardswish(-inf)` are
//!   -0); `relu(-0)` is +0.
//! - `gelu` "none" is `x * Φ(x)`, evaluated as `x * 0.5 * erfc(-x / √2)` (equal to
//!   `x * 0.5 * (1 + erf(x / √2))`, without the cancellation for large negative x); "tanh" is
//!   `0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 x³)))`, evaluated as `x * sigmoid(2u)`. Any
//!   other `approximate` is an attribute error.
//! - `sigmoid` uses `1 / (1 + e^-x)` for x >= 0 and `e^x / (1 + e^x)` below, so it never
//!   overflows to NaN. `silu` is `x * sigmoid(x)`.
//! - `softplus` is `x` where `beta * x > threshold`, else `log1p(exp(beta * x)) / beta`,
//!   evaluated as `(log1p(exp(-|z|)) + max(z, 0)) / beta` with `z = beta * x` so that it never
//!   overflows; `beta` must be finite and non-zero.
//! - `clamp` is `min(max(x, min), max)` where a tie keeps `x` (so `clamp(-0, min=0)` is -0, as
//!   PyTorch's kernel): a NaN bound gives NaN, NaN stays NaN, and `min > max` makes every
//!   element `max` (torch). On integers the bounds must be integral (or ±inf, meaning no bound).
//! - `atan` is the arctangent in radians, in `[-π/2, π/2]`: `atan(±inf) = ±π/2`,
//!   `atan(±0) = ±0`.
//! - `dropout` supports eval mode only (the identity, as a copy): `train = true` or `p`
//!   outside [0, 1] is an attribute error.

use super::util::{bool_attr, expect_float, float_attr};
use super::{Arity, Native, OpError, OpKind, OpSpec, Rung};
use crate::interp::{int_cmp, EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, TensorType};

const fn act(kind: OpKind, name: &'static str, attrs: &'static [AttrSpec], doc: &'static str) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::High,
        arity: Arity::Exactly(1),
        attrs,
        infer: infer_activation,
        eval: eval_activation,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

pub static SPECS: &[OpSpec] = &[
    act(OpKind::Relu, "relu", &[], "max(x, 0) (ints too; NaN stays NaN)"),
    act(
        OpKind::Gelu,
        "gelu",
        &[
            AttrSpec::optional("approximate", AttrKind::Str, AttrDefault::Str("none")),
            bool_attr("nan_at_neg_inf", false),
        ],
        "x * Φ(x); approximate=\"tanh\" for the tanh form; -0 at -inf (its limit), or NaN with \
         nan_at_neg_inf=true (what the product computes unfused, as exporters write it)",
    )
    .with_native(Native::Activation),
    act(
        OpKind::Silu,
        "silu",
        &[bool_attr("nan_at_neg_inf", false)],
        "x * sigmoid(x); -0 at -inf (its limit), or NaN with nan_at_neg_inf=true (what the product \
         computes unfused, as exporters write it)",
    )
    .with_native(Native::Activation),
    act(OpKind::Sigmoid, "sigmoid", &[], "1 / (1 + e^-x), stable for large |x|").with_native(Native::Activation),
    act(
        OpKind::Softplus,
        "softplus",
        &[float_attr("beta", 1.0), float_attr("threshold", 20.0)],
        "log(1 + e^(beta*x)) / beta, x where beta*x > threshold",
    ),
    act(OpKind::LeakyRelu, "leaky_relu", &[float_attr("negative_slope", 0.01)], "x > 0 ? x : negative_slope * x"),
    act(OpKind::Hardsigmoid, "hardsigmoid", &[], "relu6(x + 3) / 6"),
    act(OpKind::Hardswish, "hardswish", &[], "x * relu6(x + 3) / 6"),
    act(OpKind::Elu, "elu", &[float_attr("alpha", 1.0)], "x > 0 ? x : alpha * (e^x - 1)"),
    act(
        OpKind::Clamp,
        "clamp",
        &[float_attr("min", f64::NEG_INFINITY), float_attr("max", f64::INFINITY)],
        "min(max(x, min), max) (ints too; min > max gives max)",
    ),
    act(OpKind::Atan, "atan", &[], "arctangent in radians, in [-π/2, π/2] (float only)"),
    act(
        OpKind::Dropout,
        "dropout",
        &[float_attr("p", 0.5), bool_attr("train", false)],
        "identity (eval mode only; train=true is rejected)",
    ),
];

fn attr_err(name: &'static str, problem: String) -> OpError {
    OpError::AttrValue { name, problem }
}

fn infer_activation(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    match kind {
        OpKind::Relu | OpKind::Clamp => {
            if x.dtype.is_bool() {
                return Err(OpError::DType { arg: 0, got: x.dtype, expected: "a numeric (int or float) type".into() });
            }
        }
        _ => expect_float(0, x)?,
    }
    match kind {
        OpKind::Gelu => {
            let a = attrs.str("approximate");
            if a != "none" && a != "tanh" {
                return Err(attr_err("approximate", format!("must be \"none\" or \"tanh\", got {a:?}")));
            }
        }
        OpKind::Softplus => {
            let beta = attrs.float("beta");
            if !beta.is_finite() || beta == 0.0 {
                return Err(attr_err("beta", format!("must be finite and non-zero, got {beta}")));
            }
        }
        OpKind::Clamp if x.dtype.is_int() => {
            for name in ["min", "max"] {
                let v = attrs.float(name);
                if v.is_nan() || (v.is_finite() && v.fract() != 0.0) {
                    return Err(attr_err(name, format!("must be integral (or ±inf) for an integer tensor, got {v}")));
                }
            }
        }
        OpKind::Dropout => {
            let p = attrs.float("p");
            if !(0.0..=1.0).contains(&p) {
                return Err(attr_err("p", format!("must be in [0, 1], got {p}")));
            }
            if attrs.bool("train") {
                return Err(attr_err("train", "training-mode dropout is not supported".into()));
            }
        }
        _ => {}
    }
    Ok(x.clone())
}

/// A numerically stable logistic sigmoid.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// An activation with its attributes read, applicable per element.
#[derive(Clone, Copy, Debug)]
pub struct Activation {
    kind: OpKind,
    a: f64,
    b: f64,
    tanh: bool,
    /// `gelu` and `silu`: NaN at -inf rather than the limit -0.
    nan_at_neg_inf: bool,
}

impl Activation {
    /// The activation of a node of `kind` with `attrs` (already checked by `infer`).
    pub fn new(kind: OpKind, attrs: &Attrs) -> Activation {
        let (mut a, mut b, mut tanh) = (0.0, 0.0, false);
        let nan_at_neg_inf = matches!(kind, OpKind::Gelu | OpKind::Silu) && attrs.bool("nan_at_neg_inf");
        match kind {
            OpKind::Gelu => tanh = attrs.str("approximate") == "tanh",
            OpKind::Softplus => (a, b) = (attrs.float("beta"), attrs.float("threshold")),
            OpKind::LeakyRelu => a = attrs.float("negative_slope"),
            OpKind::Elu => a = attrs.float("alpha"),
            OpKind::Clamp => (a, b) = (attrs.float("min"), attrs.float("max")),
            _ => {}
        }
        Activation { kind, a, b, tanh, nan_at_neg_inf }
    }

    /// The activation of one float value, in f64.
    pub fn apply(&self, x: f64) -> f64 {
        use OpKind::*;
        if x.is_nan() {
            return x;
        }
        if self.nan_at_neg_inf && x == f64::NEG_INFINITY {
            return f64::NAN;
        }
        match self.kind {
            Relu => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            Gelu if x == f64::NEG_INFINITY => -0.0,
            Gelu if self.tanh => {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                x * sigmoid(2.0 * u)
            }
            Gelu => x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2),
            Silu if x == f64::NEG_INFINITY => -0.0,
            Silu => x * sigmoid(x),
            Sigmoid => sigmoid(x),
            Atan => x.atan(),
            Softplus => {
                let (beta, threshold) = (self.a, self.b);
                let z = beta * x;
                if z > threshold {
                    x
                } else {
                    // log(1 + e^z) without overflow for large z.
                    ((-z.abs()).exp().ln_1p() + z.max(0.0)) / beta
                }
            }
            LeakyRelu => {
                if x > 0.0 {
                    x
                } else {
                    x * self.a
                }
            }
            Hardsigmoid => (x + 3.0).clamp(0.0, 6.0) / 6.0,
            Hardswish if x == f64::NEG_INFINITY => -0.0,
            Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            Elu => {
                if x > 0.0 {
                    x
                } else {
                    self.a * x.exp_m1()
                }
            }
            Clamp => {
                let (lo, hi) = (self.a, self.b);
                if lo.is_nan() || hi.is_nan() {
                    f64::NAN
                } else {
                    // Ties keep x (so clamp(-0, min=0) is -0), as PyTorch's kernel does.
                    let y = if x < lo { lo } else { x };
                    if y > hi {
                        hi
                    } else {
                        y
                    }
                }
            }
            _ => x,
        }
    }

    /// The activation of one integer (`relu` and `clamp` only; others return `x`).
    pub fn apply_int(&self, dtype: DType, x: i64) -> i64 {
        match self.kind {
            OpKind::Relu if dtype.is_unsigned() => x,
            OpKind::Relu => x.max(0),
            OpKind::Clamp => {
                // Bounds are integral or infinite (checked by infer); saturate them to the dtype.
                let lo = crate::interp::float_to_int_as(dtype, self.a);
                let hi = crate::interp::float_to_int_as(dtype, self.b);
                let y = if int_cmp(dtype, x, lo).is_lt() { lo } else { x };
                if int_cmp(dtype, y, hi).is_gt() {
                    hi
                } else {
                    y
                }
            }
            _ => x,
        }
    }
}

fn eval_activation(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    if kind == OpKind::Dropout {
        return Ok(x.copy());
    }
    let f = Activation::new(kind, attrs);
    if x.dtype().is_int() {
        let vals = x.ints().into_iter().map(|v| f.apply_int(out.dtype, v)).collect();
        return Ok(View::from_ints(out.dtype, shape, vals));
    }
    let vals = x.floats().into_iter().map(|v| f.apply(v)).collect();
    Ok(View::from_floats(ctx, out.dtype, shape, vals))
}
