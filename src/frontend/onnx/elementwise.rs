//! Elementwise ONNX ops: unary math and activations, binary arithmetic, comparisons and logic,
//! the variadic `Max`/`Min`/`Sum`/`Mean`, `Where`, `Cast`/`CastLike`, `Clip`, `Identity` and
//! `Dropout`.
//!
//! Mapping choices:
//! - Elementwise ops map to ladder's broadcasting high-level forms. `Pow` with an integer base
//!   converts back to the base's type; `Mod` with `fmod=0` is Python's modulo built from `rem`.
//! - `Dropout` is the identity (inference); its mask output is all true.

use super::build::{dims_attr, invalid, one, unsupported, Outs};
use super::import::{a_float, a_int, a_str, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::tensor::{dtype_name, dtype_of};
use super::NodeError;
use crate::ir::{AttrValue, DType};
use crate::ops::OpKind as K;

/// The elementwise ops, by ONNX name.
pub(super) const ELEMENTWISE: &[Row] = &[
    ("Abs", |imp, node, _| unary(imp, node, K::Abs)),
    ("Add", |imp, node, _| binary(imp, node, K::Add)),
    ("And", |imp, node, _| binary(imp, node, K::And)),
    ("Cast", |imp, node, _| cast(imp, node)),
    ("CastLike", |imp, node, _| cast(imp, node)),
    ("Ceil", |imp, node, _| unary(imp, node, K::Ceil)),
    ("Celu", |imp, node, _| celu(imp, node)),
    ("Clip", |imp, node, _| clip(imp, node)),
    ("Cos", |imp, node, _| unary(imp, node, K::Cos)),
    ("Cosh", |imp, node, _| sinh_cosh(imp, node, K::Add)),
    ("Div", |imp, node, _| binary(imp, node, K::Div)),
    ("Dropout", |imp, node, _| dropout(imp, node)),
    ("Elu", |imp, node, _| elu(imp, node)),
    ("Equal", |imp, node, _| binary(imp, node, K::Eq)),
    ("Erf", |imp, node, _| unary(imp, node, K::Erf)),
    ("Exp", |imp, node, _| unary(imp, node, K::Exp)),
    ("Floor", |imp, node, _| unary(imp, node, K::Floor)),
    ("Gelu", |imp, node, _| gelu(imp, node)),
    ("Greater", |imp, node, _| binary(imp, node, K::Gt)),
    ("GreaterOrEqual", |imp, node, _| binary(imp, node, K::Ge)),
    ("HardSigmoid", |imp, node, _| hard_sigmoid(imp, node)),
    ("HardSwish", |imp, node, _| unary(imp, node, K::Hardswish)),
    ("Identity", |imp, node, _| identity(imp, node)),
    ("IsInf", |imp, node, _| is_inf(imp, node)),
    ("IsNaN", |imp, node, _| unary(imp, node, K::IsNan)),
    ("LeakyRelu", |imp, node, _| leaky_relu(imp, node)),
    ("Less", |imp, node, _| binary(imp, node, K::Lt)),
    ("LessOrEqual", |imp, node, _| binary(imp, node, K::Le)),
    ("Log", |imp, node, _| unary(imp, node, K::Log)),
    ("Max", |imp, node, _| variadic(imp, node, K::Max, false)),
    ("Mean", |imp, node, _| variadic(imp, node, K::Add, true)),
    ("Min", |imp, node, _| variadic(imp, node, K::Min, false)),
    ("Mish", |imp, node, _| mish(imp, node)),
    ("Mod", |imp, node, _| modulo(imp, node)),
    ("Mul", |imp, node, _| binary(imp, node, K::Mul)),
    ("Neg", |imp, node, _| unary(imp, node, K::Neg)),
    ("Not", |imp, node, _| unary(imp, node, K::LogicalNot)),
    ("Or", |imp, node, _| binary(imp, node, K::Or)),
    ("PRelu", |imp, node, _| prelu(imp, node)),
    ("Pow", |imp, node, _| pow(imp, node)),
    ("Reciprocal", |imp, node, _| unary(imp, node, K::Reciprocal)),
    ("Relu", |imp, node, _| unary(imp, node, K::Relu)),
    ("Round", |imp, node, _| unary(imp, node, K::Round)),
    ("Selu", |imp, node, _| selu(imp, node)),
    ("Shrink", |imp, node, _| shrink(imp, node)),
    ("Sigmoid", |imp, node, _| unary(imp, node, K::Sigmoid)),
    ("Sign", |imp, node, _| unary(imp, node, K::Sign)),
    ("Sin", |imp, node, _| unary(imp, node, K::Sin)),
    ("Sinh", |imp, node, _| sinh_cosh(imp, node, K::Sub)),
    ("Softplus", |imp, node, _| softplus(imp, node)),
    ("Softsign", |imp, node, _| softsign(imp, node)),
    ("Sqrt", |imp, node, _| unary(imp, node, K::Sqrt)),
    ("Sub", |imp, node, _| binary(imp, node, K::Sub)),
    ("Sum", |imp, node, _| variadic(imp, node, K::Add, false)),
    ("Tan", |imp, node, _| tan(imp, node)),
    ("Tanh", |imp, node, _| unary(imp, node, K::Tanh)),
    ("ThresholdedRelu", |imp, node, _| thresholded_relu(imp, node)),
    ("Where", |imp, node, _| where_op(imp, node)),
    ("Xor", |imp, node, _| binary(imp, node, K::Ne)),
];

// --- Unary ---

/// One ladder op of input 0.
fn unary(imp: &mut Importer, node: &NodeProto, kind: K) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    one(imp.un(kind, x)?)
}

fn softsign(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let a = imp.un(K::Abs, x)?;
    let d = imp.bin_scalar(K::Add, a, 1.0)?;
    one(imp.bin(K::Div, x, d)?)
}

fn mish(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let sp = imp.emit(K::Softplus, &[x], &[("threshold", AttrValue::Float(f64::INFINITY))])?;
    let t = imp.un(K::Tanh, sp)?;
    one(imp.bin(K::Mul, x, t)?)
}

fn tan(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let s = imp.un(K::Sin, x)?;
    let c = imp.un(K::Cos, x)?;
    one(imp.bin(K::Div, s, c)?)
}

/// `Sinh` (`sign` is `sub`) or `Cosh` (`add`).
fn sinh_cosh(imp: &mut Importer, node: &NodeProto, sign: K) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    // (e^x ∓ e^-x) / 2
    let e = imp.un(K::Exp, x)?;
    let n = imp.un(K::Neg, x)?;
    let en = imp.un(K::Exp, n)?;
    let s = imp.bin(sign, e, en)?;
    one(imp.bin_scalar(K::Mul, s, 0.5)?)
}

fn is_inf(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let pos = a_int(node, "detect_positive", 1) != 0;
    let neg = a_int(node, "detect_negative", 1) != 0;
    let p = imp.bin_scalar(K::Eq, x, f64::INFINITY)?;
    let n = imp.bin_scalar(K::Eq, x, f64::NEG_INFINITY)?;
    one(match (pos, neg) {
        (true, true) => imp.bin(K::Or, p, n)?,
        (true, false) => p,
        (false, true) => n,
        (false, false) => imp.bin(K::And, p, n)?,
    })
}

// --- Activations ---

fn leaky_relu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let alpha = a_float(node, "alpha", 0.01);
    one(imp.emit(K::LeakyRelu, &[x], &[("negative_slope", AttrValue::Float(alpha))])?)
}

fn elu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    one(imp.emit(K::Elu, &[x], &[("alpha", AttrValue::Float(a_float(node, "alpha", 1.0)))])?)
}

fn selu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let alpha = a_float(node, "alpha", 1.673_263_192_176_818_8);
    let gamma = a_float(node, "gamma", 1.050_700_987_355_480_5);
    let e = imp.emit(K::Elu, &[x], &[("alpha", AttrValue::Float(alpha))])?;
    one(imp.bin_scalar(K::Mul, e, gamma)?)
}

fn celu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    // alpha * elu(x / alpha)
    let x = imp.input(node, 0)?;
    let alpha = a_float(node, "alpha", 1.0);
    let s = imp.bin_scalar(K::Div, x, alpha)?;
    let e = imp.emit(K::Elu, &[s], &[])?;
    one(imp.bin_scalar(K::Mul, e, alpha)?)
}

fn thresholded_relu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let c = imp.bin_scalar(K::Gt, x, a_float(node, "alpha", 1.0))?;
    let z = imp.scalar(imp.dtype_of_v(x), 0.0)?;
    one(imp.emit(K::Where, &[c, x, z], &[])?)
}

fn shrink(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let (bias, lambd) = (a_float(node, "bias", 0.0), a_float(node, "lambd", 0.5));
    let lo = imp.bin_scalar(K::Lt, x, -lambd)?;
    let hi = imp.bin_scalar(K::Gt, x, lambd)?;
    let xp = imp.bin_scalar(K::Add, x, bias)?;
    let xm = imp.bin_scalar(K::Sub, x, bias)?;
    let z = imp.scalar(imp.dtype_of_v(x), 0.0)?;
    let inner = imp.emit(K::Where, &[hi, xm, z], &[])?;
    one(imp.emit(K::Where, &[lo, xp, inner], &[])?)
}

fn softplus(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    one(imp.emit(K::Softplus, &[x], &[("threshold", AttrValue::Float(f64::INFINITY))])?)
}

fn hard_sigmoid(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let (alpha, beta) = (a_float(node, "alpha", 0.2), a_float(node, "beta", 0.5));
    let m = imp.bin_scalar(K::Mul, x, alpha)?;
    let a = imp.bin_scalar(K::Add, m, beta)?;
    one(imp.emit(K::Clamp, &[a], &[("min", AttrValue::Float(0.0)), ("max", AttrValue::Float(1.0))])?)
}

fn gelu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let approx = a_str(node, "approximate", "none");
    one(imp.emit(K::Gelu, &[x], &[("approximate", AttrValue::Str(approx))])?)
}

fn prelu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let slope = imp.input(node, 1)?;
    let neg = imp.bin_scalar(K::Lt, x, 0.0)?;
    let m = imp.bin(K::Mul, x, slope)?;
    one(imp.emit(K::Where, &[neg, m, x], &[])?)
}

// --- Binary and variadic ---

/// One ladder op of inputs 0 and 1.
fn binary(imp: &mut Importer, node: &NodeProto, kind: K) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    one(imp.bin(kind, a, b)?)
}

fn pow(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    let dt = imp.dtype_of_v(a);
    let r = imp.bin(K::Pow, a, b)?;
    one(imp.convert_to(r, dt)?)
}

fn modulo(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    let r = imp.bin(K::Rem, a, b)?;
    if a_int(node, "fmod", 0) != 0 {
        return one(r);
    }
    // Python modulo: the result takes the divisor's sign.
    let nz = imp.bin_scalar(K::Ne, r, 0.0)?;
    let rn = imp.bin_scalar(K::Lt, r, 0.0)?;
    let bn = imp.bin_scalar(K::Lt, b, 0.0)?;
    let differ = imp.bin(K::Ne, rn, bn)?;
    let fix = imp.bin(K::And, nz, differ)?;
    let rb = imp.bin(K::Add, r, b)?;
    one(imp.emit(K::Where, &[fix, rb, r], &[])?)
}

/// `kind` folded over the present inputs; `mean` divides the sum by their count.
fn variadic(imp: &mut Importer, node: &NodeProto, kind: K, mean: bool) -> NResult<Outs> {
    let n = node.input.iter().filter(|s| !s.is_empty()).count();
    if n == 0 {
        return invalid("needs at least one input");
    }
    let mut acc = imp.input(node, 0)?;
    for i in 1..node.input.len() {
        if let Some(v) = imp.opt_input(node, i)? {
            acc = imp.bin(kind, acc, v)?;
        }
    }
    if mean && n > 1 {
        acc = imp.bin_scalar(K::Div, acc, n as f64)?;
    }
    one(acc)
}

fn where_op(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let c = imp.input(node, 0)?;
    let a = imp.input(node, 1)?;
    let b = imp.input(node, 2)?;
    one(imp.emit(K::Where, &[c, a, b], &[])?)
}

// --- Conversions and pass-throughs ---

fn cast(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dtype = if node.op_type == "Cast" {
        let to = a_int(node, "to", 0) as i32;
        dtype_of(to).ok_or_else(|| NodeError::Unsupported(format!("cast to element type {}", dtype_name(to))))?
    } else {
        let like = imp.input(node, 1)?;
        imp.dtype_of_v(like)
    };
    one(imp.convert_to(x, dtype)?)
}

fn clip(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let (lo, hi) = if imp.opset < 11 {
        (Some(Ok(a_float(node, "min", f64::NEG_INFINITY))), Some(Ok(a_float(node, "max", f64::INFINITY))))
    } else {
        (imp.float_input(node, 1)?, imp.float_input(node, 2)?)
    };
    let all_const = lo.as_ref().is_none_or(Result::is_ok) && hi.as_ref().is_none_or(Result::is_ok);
    if all_const {
        let lo = lo.and_then(Result::ok).unwrap_or(f64::NEG_INFINITY);
        let hi = hi.and_then(Result::ok).unwrap_or(f64::INFINITY);
        return one(imp.emit(K::Clamp, &[x], &[("min", AttrValue::Float(lo)), ("max", AttrValue::Float(hi))])?);
    }
    let dt = imp.dtype_of_v(x);
    let mut r = x;
    for (bound, kind) in [(lo, K::Max), (hi, K::Min)] {
        let b = match bound {
            None => continue,
            Some(Ok(f)) => imp.scalar(dt, f)?,
            Some(Err(v)) => v,
        };
        r = imp.bin(kind, r, b)?;
    }
    one(r)
}

fn identity(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let s = imp.slot(node, 0)?.ok_or_else(|| NodeError::Invalid("input 0 is required".into()))?;
    Ok(vec![Some(s)])
}

fn dropout(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    if let Some(t) = imp.float_input(node, 2)? {
        if !matches!(t, Ok(v) if v == 0.0) {
            return unsupported("Dropout in training mode");
        }
    }
    let mut outs = vec![Some(Slot::Val(x))];
    if node.output.get(1).is_some_and(|s| !s.is_empty()) {
        let shape = imp.shape_of(x);
        let m = imp.emit(
            K::Full,
            &[],
            &[("shape", dims_attr(&shape)), ("value", AttrValue::Float(1.0)), ("dtype", AttrValue::DType(DType::Bool))],
        )?;
        outs.push(Some(Slot::Val(m)));
    }
    Ok(outs)
}
