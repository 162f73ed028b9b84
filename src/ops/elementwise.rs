//! Elementwise prims: unary math, binary arithmetic and comparison, `where`, and
//! `convert_element_type`.
//!
//! The scalar meaning of each op is one function (`unary_float`, `binary_float`,
//! `binary_int`), shared by the interpreter and by constant folding. Float semantics are
//! IEEE 754 with these choices stated: `max`/`min` propagate NaN and order -0 < +0; `round`
//! is half-to-even; `rem` is C's fmod (sign of the dividend); `pow` is C's pow; `sign(NaN)`
//! is NaN and `sign(±0)` is ±0. Integer arithmetic wraps in the dtype's width; integer `div`
//! truncates toward zero and, like `rem`, fails on a zero divisor; unsigned types compare,
//! divide, take max/min and convert as unsigned (u64 values are stored as i64 bit patterns,
//! see `interp::view`), `abs` of an unsigned is itself, its `sign` is 0 or 1 and its `neg`
//! wraps (`-1` is the maximum). `and`/`or` are logical on bools and bitwise on integers.
//! Comparisons with NaN are false except `ne`.
//!
//! At the high rung these ops broadcast NumPy-style and promote dtypes (a bool operand of
//! arithmetic promotes to the other operand's type, as in PyTorch); at the prims rung
//! their operands must already agree (`explicit_same_shape_and_dtype`).

use super::util::{broadcast_all, broadcast_concrete, broadcast_view, explicit_same_shape_and_dtype, promote_all};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrKind, AttrSpec, Attrs, DType, TensorType};

/// Which dtypes an elementwise op accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accepts {
    Float,
    /// Integers and floats.
    Numeric,
    /// Bools and integers (logical on bools, bitwise on integers).
    BoolOrInt,
    Any,
}

const fn unary(kind: OpKind, name: &'static str, doc: &'static str, eval: super::EvalFn) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::Prim,
        arity: Arity::Exactly(1),
        attrs: &[],
        infer: infer_elementwise,
        eval,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

const fn binary(kind: OpKind, name: &'static str, doc: &'static str, eval: super::EvalFn) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::Prim,
        arity: Arity::Exactly(2),
        attrs: &[],
        infer: infer_elementwise,
        eval,
        explicit: Some(explicit_same_shape_and_dtype),
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

pub static SPECS: &[OpSpec] = &[
    unary(OpKind::Neg, "neg", "-x", eval_unary),
    unary(OpKind::Abs, "abs", "|x|", eval_unary),
    unary(OpKind::Exp, "exp", "e^x", eval_unary),
    unary(OpKind::Exp2, "exp2", "2^x", eval_unary),
    unary(OpKind::Log, "log", "natural log", eval_unary),
    unary(OpKind::Log1p, "log1p", "log(1 + x), accurate near 0", eval_unary),
    unary(OpKind::Expm1, "expm1", "e^x - 1, accurate near 0", eval_unary),
    unary(OpKind::Sqrt, "sqrt", "square root", eval_unary),
    unary(OpKind::Rsqrt, "rsqrt", "1 / sqrt(x)", eval_unary),
    unary(OpKind::Reciprocal, "reciprocal", "1 / x", eval_unary),
    unary(OpKind::Sin, "sin", "sine", eval_unary),
    unary(OpKind::Cos, "cos", "cosine", eval_unary),
    unary(OpKind::Tanh, "tanh", "hyperbolic tangent", eval_unary),
    unary(OpKind::Erf, "erf", "error function", eval_unary),
    unary(OpKind::Floor, "floor", "round toward -inf", eval_unary),
    unary(OpKind::Ceil, "ceil", "round toward +inf", eval_unary),
    unary(OpKind::Round, "round", "round half to even", eval_unary),
    unary(OpKind::Sign, "sign", "-1, 0 or 1 (NaN stays NaN)", eval_unary),
    unary(OpKind::LogicalNot, "logical_not", "x == 0, as bool", eval_unary),
    unary(OpKind::IsNan, "isnan", "x is NaN, as bool", eval_unary),
    binary(OpKind::Add, "add", "a + b", eval_binary),
    binary(OpKind::Sub, "sub", "a - b", eval_binary),
    binary(OpKind::Mul, "mul", "a * b", eval_binary),
    binary(OpKind::Div, "div", "a / b (integers truncate)", eval_binary),
    binary(OpKind::Pow, "pow", "a ^ b", eval_binary),
    binary(OpKind::Max, "max", "elementwise maximum, NaN-propagating", eval_binary),
    binary(OpKind::Min, "min", "elementwise minimum, NaN-propagating", eval_binary),
    binary(OpKind::Eq, "eq", "a == b", eval_binary),
    binary(OpKind::Ne, "ne", "a != b", eval_binary),
    binary(OpKind::Lt, "lt", "a < b", eval_binary),
    binary(OpKind::Le, "le", "a <= b", eval_binary),
    binary(OpKind::Gt, "gt", "a > b", eval_binary),
    binary(OpKind::Ge, "ge", "a >= b", eval_binary),
    binary(OpKind::And, "and", "logical and of bools, bitwise and of integers", eval_binary),
    binary(OpKind::Or, "or", "logical or of bools, bitwise or of integers", eval_binary),
    binary(OpKind::Rem, "rem", "C fmod: a - trunc(a / b) * b", eval_binary),
    OpSpec {
        kind: OpKind::Where,
        name: "where",
        rung: Rung::Prim,
        arity: Arity::Exactly(3),
        attrs: &[],
        infer: infer_where,
        eval: eval_where,
        explicit: Some(explicit_where),
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc: "cond ? a : b",
    },
    OpSpec {
        kind: OpKind::ConvertElementType,
        name: "convert_element_type",
        rung: Rung::Prim,
        arity: Arity::Exactly(1),
        attrs: &[AttrSpec::required("dtype", AttrKind::DType)],
        infer: infer_convert,
        eval: eval_convert,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc: "change dtype: floats round to nearest, float→int truncates and saturates (NaN→0), →bool is x != 0",
    },
];

fn accepts(kind: OpKind) -> Accepts {
    use OpKind::*;
    match kind {
        Neg | Abs | Sign | Floor | Ceil | Round => Accepts::Numeric,
        LogicalNot | IsNan => Accepts::Any,
        Add | Sub | Mul | Div | Pow | Max | Min | Rem => Accepts::Numeric,
        Eq | Ne | Lt | Le | Gt | Ge => Accepts::Any,
        And | Or => Accepts::BoolOrInt,
        _ => Accepts::Float,
    }
}

fn returns_bool(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(kind, LogicalNot | IsNan | Eq | Ne | Lt | Le | Gt | Ge)
}

fn check_accepts(kind: OpKind, arg: usize, dtype: DType) -> Result<(), OpError> {
    let (ok, expected) = match accepts(kind) {
        Accepts::Float => (dtype.is_float(), "a float type"),
        Accepts::Numeric => (!dtype.is_bool(), "a numeric (int or float) type"),
        Accepts::BoolOrInt => (dtype.is_bool() || dtype.is_int(), "bool or an integer type"),
        Accepts::Any => (true, ""),
    };
    if ok {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: dtype, expected: expected.into() })
    }
}

/// The shape and dtype rule of every unary and binary elementwise op.
pub fn infer_elementwise(kind: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    // A bool operand of arithmetic promotes like PyTorch's (`f32 * bool` is f32); only the
    // type the op computes in must be numeric.
    let promoted = promote_all(args);
    for (i, a) in args.iter().enumerate() {
        let checked =
            if accepts(kind) == Accepts::Numeric && args.len() == 2 && a.dtype.is_bool() { promoted } else { a.dtype };
        check_accepts(kind, i, checked).map_err(|e| match e {
            OpError::DType { arg, expected, .. } => OpError::DType { arg, got: a.dtype, expected },
            e => e,
        })?;
    }
    let shape = broadcast_all(args)?;
    let dtype = if returns_bool(kind) { DType::Bool } else { promote_all(args) };
    Ok(TensorType::new(dtype, shape))
}

fn infer_where(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    super::util::expect_bool(0, args[0])?;
    let shape = broadcast_all(args)?;
    Ok(TensorType::new(DType::promote(args[1].dtype, args[2].dtype), shape))
}

fn explicit_where(attrs: &Attrs, args: &[&TensorType]) -> Result<(), OpError> {
    if args[0].shape != args[1].shape {
        return Err(OpError::NotExplicit(format!("condition has shape {}, values {}", args[0].shape, args[1].shape)));
    }
    explicit_same_shape_and_dtype(attrs, &args[1..])
}

fn infer_convert(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    Ok(TensorType::new(attrs.dtype("dtype"), args[0].shape.clone()))
}

/// The meaning of a unary float op on one value, computed in f64.
pub fn unary_float(kind: OpKind, x: f64) -> f64 {
    use OpKind::*;
    match kind {
        Neg => -x,
        Abs => x.abs(),
        Exp => x.exp(),
        Exp2 => x.exp2(),
        Log => x.ln(),
        Log1p => x.ln_1p(),
        Expm1 => x.exp_m1(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Reciprocal => 1.0 / x,
        Sin => x.sin(),
        Cos => x.cos(),
        Tanh => x.tanh(),
        Erf => libm::erf(x),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Sign => {
            if x.is_nan() || x == 0.0 {
                x
            } else {
                x.signum()
            }
        }
        _ => unreachable!("{kind:?} is not a unary float op"),
    }
}

/// The meaning of a unary op on one stored integer of `dtype` (before wrapping to it); `None`
/// where it is a float-only op.
pub fn unary_int(kind: OpKind, dtype: DType, x: i64) -> Option<i64> {
    use OpKind::*;
    if dtype.is_unsigned() {
        return Some(match kind {
            Neg => x.wrapping_neg(),
            Abs | Floor | Ceil | Round => x,
            Sign => (x != 0) as i64,
            _ => return None,
        });
    }
    Some(match kind {
        Neg => x.wrapping_neg(),
        Abs => x.wrapping_abs(),
        Sign => x.signum(),
        Floor | Ceil | Round => x,
        _ => return None,
    })
}

/// The meaning of a binary float op on two values, computed in f64. Comparisons return 0/1.
pub fn binary_float(kind: OpKind, a: f64, b: f64) -> f64 {
    use OpKind::*;
    let bool_f = |c: bool| if c { 1.0 } else { 0.0 };
    match kind {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Pow => a.powf(b),
        Max => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a == b {
                // -0 < +0: max(-0, +0) is +0.
                if a.is_sign_negative() {
                    b
                } else {
                    a
                }
            } else {
                a.max(b)
            }
        }
        Min => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a == b {
                if a.is_sign_negative() {
                    a
                } else {
                    b
                }
            } else {
                a.min(b)
            }
        }
        Rem => a % b,
        Eq => bool_f(a == b),
        Ne => bool_f(a != b),
        Lt => bool_f(a < b),
        Le => bool_f(a <= b),
        Gt => bool_f(a > b),
        Ge => bool_f(a >= b),
        _ => unreachable!("{kind:?} is not a binary float op"),
    }
}

/// The meaning of a binary op on two stored integers of `dtype` (wrapping; the caller wraps
/// the result to `dtype`). Comparisons return 0/1.
pub fn binary_int(kind: OpKind, dtype: DType, a: i64, b: i64) -> Result<i64, EvalError> {
    use OpKind::*;
    if dtype == DType::U64 {
        return binary_u64(kind, a as u64, b as u64).map(|x| x as i64);
    }
    Ok(match kind {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div => {
            if b == 0 {
                return Err(EvalError::DivisionByZero);
            }
            a.wrapping_div(b)
        }
        Rem => {
            if b == 0 {
                return Err(EvalError::DivisionByZero);
            }
            a.wrapping_rem(b)
        }
        Pow => int_pow(a, b)?,
        Max => a.max(b),
        Min => a.min(b),
        Eq => (a == b) as i64,
        Ne => (a != b) as i64,
        Lt => (a < b) as i64,
        Le => (a <= b) as i64,
        Gt => (a > b) as i64,
        Ge => (a >= b) as i64,
        And => a & b,
        Or => a | b,
        _ => unreachable!("{kind:?} is not a binary integer op"),
    })
}

/// `binary_int` for u64, whose order and division differ from i64's.
fn binary_u64(kind: OpKind, a: u64, b: u64) -> Result<u64, EvalError> {
    use OpKind::*;
    Ok(match kind {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div | Rem if b == 0 => return Err(EvalError::DivisionByZero),
        Div => a / b,
        Rem => a % b,
        Pow => {
            let (mut result, mut base, mut e) = (1u64, a, b);
            while e > 0 {
                if e & 1 == 1 {
                    result = result.wrapping_mul(base);
                }
                base = base.wrapping_mul(base);
                e >>= 1;
            }
            result
        }
        Max => a.max(b),
        Min => a.min(b),
        Eq => (a == b) as u64,
        Ne => (a != b) as u64,
        Lt => (a < b) as u64,
        Le => (a <= b) as u64,
        Gt => (a > b) as u64,
        Ge => (a >= b) as u64,
        And => a & b,
        Or => a | b,
        _ => unreachable!("{kind:?} is not a binary integer op"),
    })
}

/// Integer power with wrapping; a negative exponent gives the truncated reciprocal power
/// (0 unless the base is ±1) and fails for a zero base.
fn int_pow(a: i64, b: i64) -> Result<i64, EvalError> {
    if b < 0 {
        return match a {
            0 => Err(EvalError::DivisionByZero),
            1 => Ok(1),
            -1 => Ok(if b % 2 == 0 { 1 } else { -1 }),
            _ => Ok(0),
        };
    }
    let mut result: i64 = 1;
    let mut base = a;
    let mut e = b as u64;
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    Ok(result)
}

fn eval_unary(kind: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], out: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    match kind {
        OpKind::LogicalNot => Ok(View::from_bools(shape, x.bools().into_iter().map(|b| !b).collect())),
        OpKind::IsNan => {
            let vals = if x.dtype().is_float() {
                x.floats().into_iter().map(f64::is_nan).collect()
            } else {
                vec![false; x.numel()]
            };
            Ok(View::from_bools(shape, vals))
        }
        _ if x.dtype().is_int() => {
            let vals = x.ints().into_iter().map(|v| unary_int(kind, x.dtype(), v).unwrap_or(v)).collect();
            Ok(View::from_ints(out.dtype, shape, vals))
        }
        _ => {
            Ok(View::from_floats(ctx, out.dtype, shape, x.floats().into_iter().map(|v| unary_float(kind, v)).collect()))
        }
    }
}

fn eval_binary(kind: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], out: &TensorType) -> Result<View, EvalError> {
    let shape = broadcast_concrete(args[0].shape(), args[1].shape())?;
    let a = broadcast_view(&args[0], &shape)?;
    let b = broadcast_view(&args[1], &shape)?;
    let compute = DType::promote(a.dtype(), b.dtype());
    if matches!(kind, OpKind::And | OpKind::Or) && compute.is_bool() {
        let vals = a
            .bools()
            .into_iter()
            .zip(b.bools())
            .map(|(x, y)| if kind == OpKind::And { x && y } else { x || y })
            .collect();
        return Ok(View::from_bools(shape, vals));
    }
    if compute.is_float() {
        // Operands are rounded to the compute type first, as a backend would convert them.
        let av: Vec<f64> = a.floats().into_iter().map(|x| ctx.round(compute, x)).collect();
        let bv: Vec<f64> = b.floats().into_iter().map(|x| ctx.round(compute, x)).collect();
        let vals: Vec<f64> = av.into_iter().zip(bv).map(|(x, y)| binary_float(kind, x, y)).collect();
        if out.dtype == DType::Bool {
            return Ok(View::from_bools(shape, vals.into_iter().map(|v| v != 0.0).collect()));
        }
        return Ok(View::from_floats(ctx, out.dtype, shape, vals));
    }
    let mut vals = Vec::with_capacity(a.numel());
    for (x, y) in a.ints().into_iter().zip(b.ints()) {
        vals.push(binary_int(kind, compute, x, y)?);
    }
    if out.dtype == DType::Bool {
        return Ok(View::from_bools(shape, vals.into_iter().map(|v| v != 0).collect()));
    }
    Ok(View::from_ints(out.dtype, shape, vals))
}

fn eval_where(_: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], out: &TensorType) -> Result<View, EvalError> {
    let s = broadcast_concrete(args[0].shape(), args[1].shape())?;
    let shape = broadcast_concrete(&s, args[2].shape())?;
    let cond = broadcast_view(&args[0], &shape)?.bools();
    let a = broadcast_view(&args[1], &shape)?;
    let b = broadcast_view(&args[2], &shape)?;
    if out.dtype.is_float() {
        let vals = cond
            .into_iter()
            .zip(a.floats().into_iter().zip(b.floats()))
            .map(|(c, (x, y))| if c { x } else { y })
            .collect();
        Ok(View::from_floats(ctx, out.dtype, shape, vals))
    } else if out.dtype.is_int() {
        let vals =
            cond.into_iter().zip(a.ints().into_iter().zip(b.ints())).map(|(c, (x, y))| if c { x } else { y }).collect();
        Ok(View::from_ints(out.dtype, shape, vals))
    } else {
        let vals = cond
            .into_iter()
            .zip(a.bools().into_iter().zip(b.bools()))
            .map(|(c, (x, y))| if c { x } else { y })
            .collect();
        Ok(View::from_bools(shape, vals))
    }
}

fn eval_convert(_: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], out: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    Ok(match out.dtype {
        d if d.is_float() => View::from_floats(ctx, d, shape, x.floats()),
        // Floats truncate and saturate at the target's range; integers keep all 64 bits and wrap.
        d if d.is_int() && x.dtype().is_float() => {
            View::from_ints(d, shape, x.floats().into_iter().map(|v| crate::interp::float_to_int_as(d, v)).collect())
        }
        d if d.is_int() => View::from_ints(d, shape, x.ints()),
        _ => View::from_bools(shape, x.bools()),
    })
}
