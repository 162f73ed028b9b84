//! Shape values: the `i64` tensors exporters compute sizes with, kept symbolic at import.
//!
//! `Shape` and `Size` of a tensor with symbolic dims give a [`SymList`]: a 0-d or 1-d list
//! whose elements are numbers or size expressions (`crate::ir::Dim`). The arithmetic
//! exporters wrap models in stays on such lists: `Gather`, `Slice`, `Concat`,
//! `Unsqueeze`/`Squeeze`, `Reshape` to 0-d or 1-d, `Cast` (to integers, and to floats:
//! the elements are still whole numbers), `Add`/`Sub`/`Mul`, integer `Div` and `Mod` (floor
//! quotient and remainder by a positive constant, or exact division), `Max`/`Min`,
//! `Neg`/`Abs`, the comparisons (decided with the size algebra's proofs, every symbol being at
//! least 1), `Where`, `Not` and `ReduceProd`/`ReduceSum`. `Reshape`, `Expand`,
//! `ConstantOfShape`, `Range`, `Slice`, `Tile` and the other shape-taking ops read the lists
//! as shapes, so `Range(0, seq)` is an `iota` of length `seq` and `x[:, :seq]` a slice with a
//! symbolic bound. Where a list is used as tensor data (position ids, a length to divide by),
//! `Importer::materialize` makes it a `dim_values` node: the sizes are evaluated when the
//! plan runs. An op the rules here cannot decide (a comparison the algebra cannot prove, a
//! quotient that is not exact) converts as ordinary data instead, so its result is right but
//! no longer a shape.

use super::build::{bin, bin_scalar, dim_err, dims_attr, int, invalid, one, unsupported, Outs};
use super::import::{a_int, a_ints, Importer, NResult, Slot, SymInt, SymList};
use super::proto::NodeProto;
use super::tensor::dtype_of;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, SizeExpr};
use crate::ops::OpKind;

/// A list element as a signed size expression.
fn expr(x: &SymInt) -> NResult<SizeExpr> {
    match x {
        SymInt::I(n) => Ok(SizeExpr::constant(*n)),
        SymInt::D(d) => SizeExpr::from_dim(d).map_err(dim_err),
    }
}

/// A size expression as a list element: a number when it is constant.
fn elem(e: &SizeExpr) -> NResult<SymInt> {
    match e.as_const() {
        Some(n) => Ok(SymInt::I(n)),
        None => e.to_dim().map(SymInt::D).map_err(dim_err),
    }
}

/// `a op b` on list elements, or `None` when the algebra cannot express it (the op then
/// converts as data). `float` lists hold whole numbers whose quotients are real.
fn arith(op: &str, a: &SymInt, b: &SymInt, float: bool) -> NResult<Option<SymInt>> {
    use SymInt::I;
    let overflow = || NodeError::Invalid(format!("{op} of sizes {a:?} and {b:?} overflows"));
    if let (I(x), I(y)) = (a, b) {
        let r = match op {
            "Add" => x.checked_add(*y),
            "Sub" => x.checked_sub(*y),
            "Mul" => x.checked_mul(*y),
            "Div" if *y == 0 => return invalid("integer division by zero in a shape computation"),
            "Div" if float && x % y != 0 => return Ok(None),
            "Div" => x.checked_div(*y),
            "Mod" if *y == 0 => return invalid("integer modulo by zero in a shape computation"),
            "Mod" => x.checked_rem(*y).map(|r| if r != 0 && ((r < 0) != (*y < 0)) { r + y } else { r }),
            "Max" => Some(*x.max(y)),
            "Min" => Some(*x.min(y)),
            _ => return Ok(None),
        };
        return r.map(|v| Some(I(v))).ok_or_else(overflow);
    }
    let (x, y) = (expr(a)?, expr(b)?);
    let r = match op {
        "Add" => x.add(&y),
        "Sub" => x.sub(&y),
        "Mul" => x.mul(&y),
        "Max" => x.max(&y),
        "Min" => x.min(&y),
        "Div" | "Mod" => {
            // A size divided by a positive constant (floor and truncation agree on sizes), or
            // an exact quotient of sizes.
            let (Ok(n), Ok(d)) = (x.to_dim(), y.to_dim()) else { return Ok(None) };
            let q = match (d.as_const(), float) {
                (Some(0), _) => return invalid("division by zero in a shape computation"),
                (Some(_), false) => n.floor_div(&d),
                _ => n.div_exact(&d),
            };
            let r = match (op, q) {
                ("Div", Ok(q)) => Ok(q),
                ("Mod", Ok(_)) if !float => n.rem(&d),
                _ => return Ok(None),
            };
            return r.map(|q| Some(SymInt::from_dim(&q))).or(Ok(None));
        }
        _ => return Ok(None),
    };
    match r {
        Ok(e) => elem(&e).map(Some),
        Err(crate::ir::DimError::TooComplex) => Err(dim_err(crate::ir::DimError::TooComplex)),
        Err(_) => Ok(None),
    }
}

/// `a op b` for a comparison, when the algebra decides it.
fn compare(op: &str, a: &SymInt, b: &SymInt) -> NResult<Option<bool>> {
    let (x, y) = (expr(a)?, expr(b)?);
    // x <= y, decided: constants directly, sizes by the algebra's proofs.
    let le = |x: &SizeExpr, y: &SizeExpr| -> NResult<Option<bool>> {
        let d = y.sub(x).map_err(dim_err)?;
        if let Some(c) = d.as_const() {
            return Ok(Some(c >= 0));
        }
        let zero = Dim::new(0);
        Ok(match d.to_dim() {
            Ok(d) => zero.prove_le(&d),
            Err(_) => None,
        }
        .or_else(|| {
            // y - x provably negative: x - y - 1 >= 0.
            let neg = x.sub(y).ok()?.sub(&SizeExpr::constant(1)).ok()?.to_dim().ok()?;
            zero.prove_le(&neg).filter(|&b| b).map(|_| false)
        }))
    };
    let one = SizeExpr::constant(1);
    Ok(match op {
        "Equal" => {
            if x == y {
                Some(true)
            } else {
                // Unequal when one is provably below the other.
                let lt = le(&x.add(&one).map_err(dim_err)?, &y)?;
                let gt = le(&y.add(&one).map_err(dim_err)?, &x)?;
                (lt == Some(true) || gt == Some(true)).then_some(false)
            }
        }
        "Less" => le(&x.add(&one).map_err(dim_err)?, &y)?,
        "LessOrEqual" => le(&x, &y)?,
        "Greater" => le(&y.add(&one).map_err(dim_err)?, &x)?,
        "GreaterOrEqual" => le(&y, &x)?,
        _ => None,
    })
}

/// The list `Shape`/`Size` give, or a constant when it has no symbol.
pub(super) fn shape_list(imp: &mut Importer, s: SymList, node: &NodeProto) -> NResult<Outs> {
    if s.is_static() {
        let name = node.output.first().cloned().unwrap_or_default();
        let v = imp.materialize(&Slot::Syms(s), &name)?;
        return one(v);
    }
    Ok(vec![Some(Slot::Syms(s))])
}

/// Ops on shape lists. `None` when no input is such a list, or when the result cannot stay
/// one: the op then converts normally, reading the lists as data.
pub(super) fn convert_syms(imp: &mut Importer, node: &NodeProto) -> NResult<Option<Outs>> {
    let op = node.op_type.as_str();
    let unary = matches!(
        op,
        "Identity"
            | "Cast"
            | "Gather"
            | "Unsqueeze"
            | "Squeeze"
            | "Reshape"
            | "Slice"
            | "ReduceProd"
            | "ReduceSum"
            | "Neg"
            | "Abs"
            | "Not"
    );
    let joins = matches!(
        op,
        "Concat"
            | "Add"
            | "Sub"
            | "Mul"
            | "Div"
            | "Mod"
            | "Max"
            | "Min"
            | "Equal"
            | "Less"
            | "Greater"
            | "LessOrEqual"
            | "GreaterOrEqual"
            | "Where"
    );
    if !unary && !joins {
        return Ok(None);
    }
    let reads = if unary { 1 } else { node.input.len() };
    let mut any = false;
    for i in 0..reads {
        if let Some(Slot::Syms(_)) = imp.slot(node, i)? {
            any = true;
        }
    }
    if !any {
        return Ok(None);
    }
    // Every input read as a list (a symbolic one or a small constant), or data.
    let mut lists = Vec::with_capacity(reads);
    for i in 0..reads {
        match imp.size_input(node, i)? {
            Some(s) => lists.push(s),
            None if imp.slot(node, i)?.is_none() && op == "Concat" => {}
            None => return Ok(None),
        }
    }
    let syms = |s: SymList| Ok(Some(vec![Some(Slot::Syms(s))]));
    let mut pending = lists.clone().into_iter();
    let mut next = || pending.next().ok_or_else(|| NodeError::Invalid(format!("{op} needs more inputs")));
    match op {
        "Identity" => syms(next()?),
        "Cast" => {
            let mut s = next()?;
            let to = a_int(node, "to", 0) as i32;
            match dtype_of(to) {
                Some(d) if d.is_int() || d.is_float() => {
                    s.dtype = d;
                    syms(s)
                }
                _ => Ok(None),
            }
        }
        "Gather" => {
            let s = next()?;
            let idx = match imp.sym_input(node, 1)? {
                Some(i) if i.is_static() => i,
                _ => return Ok(None),
            };
            if s.scalar || super::build::norm_axis(a_int(node, "axis", 0), 1)? != 0 {
                return invalid("Gather on a shape list needs axis 0 of a 1-D list");
            }
            let n = s.elems.len() as i64;
            let mut out = Vec::with_capacity(idx.elems.len());
            for e in &idx.elems {
                let SymInt::I(i) = e else { return Ok(None) };
                let j = if *i < 0 { i + n } else { *i };
                if j < 0 || j >= n {
                    return Err(NodeError::IndexOutOfRange { index: *i, axis: 0, size: n as u64 });
                }
                out.push(s.elems[j as usize].clone());
            }
            syms(SymList { elems: out, scalar: idx.scalar, dtype: s.dtype })
        }
        "Unsqueeze" => {
            let s = next()?;
            if !s.scalar {
                return Ok(None);
            }
            syms(SymList { scalar: false, ..s })
        }
        "Squeeze" => {
            let s = next()?;
            if s.scalar || s.elems.len() != 1 {
                return Ok(None);
            }
            syms(SymList { scalar: true, ..s })
        }
        "Reshape" => {
            let s = next()?;
            let target = match imp.sym_input(node, 1)? {
                Some(t) if t.is_static() => t,
                _ => return Ok(None),
            };
            match target.elems.as_slice() {
                [] if s.elems.len() == 1 => syms(SymList { scalar: true, ..s }),
                [SymInt::I(-1)] => syms(SymList { scalar: false, ..s }),
                [SymInt::I(n)] if *n as usize == s.elems.len() => syms(SymList { scalar: false, ..s }),
                _ => Ok(None),
            }
        }
        "Concat" => {
            let mut elems = Vec::new();
            let mut dtype = DType::I64;
            for s in lists {
                if s.scalar {
                    return invalid("Concat of a scalar");
                }
                dtype = s.dtype;
                elems.extend(s.elems);
            }
            syms(SymList { elems, scalar: false, dtype })
        }
        "Slice" => {
            let s = next()?;
            let known = |imp: &mut Importer, i: usize, name: &str| -> NResult<Option<Vec<i64>>> {
                match imp.sym_input(node, i)? {
                    Some(l) if l.is_static() => Ok(Some(
                        l.elems.iter().filter_map(|e| if let SymInt::I(n) = e { Some(*n) } else { None }).collect(),
                    )),
                    Some(_) => Ok(None),
                    None if imp.slot(node, i)?.is_none() => Ok(a_ints(node, name)),
                    None => Ok(None),
                }
            };
            let (Some(starts), Some(ends)) = (known(imp, 1, "starts")?, known(imp, 2, "ends")?) else {
                return Ok(None);
            };
            let steps = match known(imp, 4, "steps")? {
                Some(st) => st,
                None if imp.slot(node, 4)?.is_none() => vec![1],
                None => return Ok(None),
            };
            if starts.len() != 1 || ends.len() != 1 || steps.len() != 1 || s.scalar || steps[0] == 0 {
                return Ok(None);
            }
            // Python slicing of the (static-length) list.
            let n = s.elems.len() as i64;
            let step = steps[0];
            let norm = |x: i64, lo: i64, hi: i64| (if x < 0 { x.saturating_add(n) } else { x }).clamp(lo, hi);
            let mut elems = Vec::new();
            if step > 0 {
                let (mut i, e) = (norm(starts[0], 0, n), norm(ends[0], 0, n));
                while i < e {
                    elems.push(s.elems[i as usize].clone());
                    i += step;
                }
            } else {
                let (mut i, e) = (norm(starts[0], -1, n - 1), norm(ends[0], -1, n - 1));
                while i > e {
                    elems.push(s.elems[i as usize].clone());
                    i += step;
                }
            }
            syms(SymList { elems, ..s })
        }
        "ReduceProd" | "ReduceSum" => {
            let s = next()?;
            let (op2, mut acc) = if op == "ReduceProd" { ("Mul", SymInt::I(1)) } else { ("Add", SymInt::I(0)) };
            for e in &s.elems {
                match arith(op2, &acc, e, s.dtype.is_float())? {
                    Some(r) => acc = r,
                    None => return Ok(None),
                }
            }
            let keep = a_int(node, "keepdims", 1) != 0;
            syms(SymList { elems: vec![acc], scalar: !keep || s.scalar, dtype: s.dtype })
        }
        "Neg" | "Abs" | "Not" => {
            let s = next()?;
            let mut elems = Vec::with_capacity(s.elems.len());
            for e in &s.elems {
                let r = match (op, e) {
                    ("Not", SymInt::I(b)) => SymInt::I(i64::from(*b == 0)),
                    ("Not", _) => return Ok(None),
                    ("Neg", _) => match arith("Sub", &SymInt::I(0), e, s.dtype.is_float())? {
                        Some(r) => r,
                        None => return Ok(None),
                    },
                    (_, SymInt::I(n)) => {
                        SymInt::I(n.checked_abs().ok_or_else(|| NodeError::Invalid("overflow".into()))?)
                    }
                    (_, SymInt::D(d)) if d.lower_bound().is_some_and(|l| l >= 0) => e.clone(),
                    _ => return Ok(None),
                };
                elems.push(r);
            }
            syms(SymList { elems, ..s })
        }
        "Where" => {
            let (c, a, b) = (next()?, next()?, next()?);
            let n = c.elems.len().max(a.elems.len()).max(b.elems.len());
            let fits = |s: &SymList| s.elems.len() == n || s.elems.len() == 1;
            if !fits(&c) || !fits(&a) || !fits(&b) {
                return invalid("shape lists of different lengths");
            }
            let pick = |s: &SymList, i: usize| s.elems[if s.elems.len() == 1 { 0 } else { i }].clone();
            let mut elems = Vec::with_capacity(n);
            for i in 0..n {
                let SymInt::I(t) = pick(&c, i) else { return Ok(None) };
                elems.push(if t != 0 { pick(&a, i) } else { pick(&b, i) });
            }
            let scalar = c.scalar && a.scalar && b.scalar;
            syms(SymList { elems, scalar, dtype: a.dtype })
        }
        _ => {
            // Elementwise binary ops, broadcasting one-element lists.
            let (a, b) = (next()?, next()?);
            let n = a.elems.len().max(b.elems.len());
            if !(a.elems.len() == n || a.elems.len() == 1) || !(b.elems.len() == n || b.elems.len() == 1) {
                return invalid("shape lists of different lengths");
            }
            let pick = |s: &SymList, i: usize| s.elems[if s.elems.len() == 1 { 0 } else { i }].clone();
            let comparison = matches!(op, "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual");
            let float = a.dtype.is_float() || b.dtype.is_float();
            let mut elems = Vec::with_capacity(n);
            for i in 0..n {
                let (x, y) = (pick(&a, i), pick(&b, i));
                let r = if comparison {
                    compare(op, &x, &y)?.map(|t| SymInt::I(i64::from(t)))
                } else {
                    arith(op, &x, &y, float)?
                };
                match r {
                    Some(r) => elems.push(r),
                    None => return Ok(None),
                }
            }
            let dtype = if comparison { DType::Bool } else { a.dtype };
            syms(SymList { elems, scalar: a.scalar && b.scalar, dtype })
        }
    }
}

/// `Range(start, limit, delta)`: an `iota` of the result's length, scaled and shifted. The
/// bounds may be sizes (`Range(0, seq)`): the length is then `max(ceil((limit - start) /
/// delta), 0)` in the size algebra, and a symbolic start is added as data.
pub(super) fn range(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let dtype_in = |imp: &mut Importer, i: usize| -> NResult<DType> {
        Ok(match imp.slot(node, i)? {
            Some(Slot::Syms(s)) => s.dtype,
            Some(Slot::Val(v)) => imp.ty(v).dtype,
            None => return invalid(format!("input {i} is required")),
        })
    };
    let dtype = dtype_in(imp, 0)?;
    let scalar = |imp: &mut Importer, i: usize| -> NResult<Option<SymInt>> {
        Ok(match imp.sym_input(node, i)? {
            Some(s) if s.elems.len() == 1 => Some(s.elems[0].clone()),
            Some(_) => return invalid(format!("input {i} must hold one element")),
            None => match imp.float_input(node, i)? {
                // A whole-number float is a size like any other.
                Some(Ok(x)) if x.fract() == 0.0 && x.abs() < 9.0e15 => Some(SymInt::I(x as i64)),
                _ => None,
            },
        })
    };
    let (start, limit, delta) = (scalar(imp, 0)?, scalar(imp, 1)?, scalar(imp, 2)?);
    if let (Some(SymInt::I(_)), Some(SymInt::I(_)), Some(SymInt::I(_))) | (None, _, _) | (_, None, _) | (_, _, None) =
        (&start, &limit, &delta)
    {
        return range_constant(imp, node, dtype);
    }
    let (Some(start), Some(limit), Some(SymInt::I(delta))) = (start, limit, delta) else {
        return unsupported("Range with a symbolic delta");
    };
    if delta == 0 {
        return invalid("delta is 0");
    }
    // ceil((limit - start) / delta), clamped at 0.
    let span = expr(&limit)?.sub(&expr(&start)?).map_err(dim_err)?;
    let (span, step) = if delta > 0 {
        (span, delta as u64)
    } else {
        (SizeExpr::constant(0).sub(&span).map_err(dim_err)?, delta.unsigned_abs())
    };
    let len = span
        .add(&SizeExpr::constant(step as i64 - 1))
        .and_then(|s| s.floor_div(step))
        .and_then(|s| s.max(&SizeExpr::constant(0)))
        .and_then(|s| s.to_dim())
        .map_err(dim_err)?;
    let iota = imp.emit(
        OpKind::Iota,
        &[],
        &[("shape", dims_attr(&[len])), ("axis", int(0)), ("dtype", AttrValue::DType(dtype))],
    )?;
    let scaled = if delta != 1 { bin_scalar(imp, OpKind::Mul, iota, delta as f64)? } else { iota };
    let shifted = match start {
        SymInt::I(0) => scaled,
        SymInt::I(s) => bin_scalar(imp, OpKind::Add, scaled, s as f64)?,
        s @ SymInt::D(_) => {
            let name = node.input.first().cloned().unwrap_or_default();
            let v = imp.materialize(&Slot::Syms(SymList { elems: vec![s], scalar: true, dtype }), &name)?;
            bin(imp, OpKind::Add, scaled, v)?
        }
    };
    one(shifted)
}

/// `Range` with every input a constant (or not known at import: an error).
fn range_constant(imp: &mut Importer, node: &NodeProto, dtype: DType) -> NResult<Outs> {
    let known = |imp: &mut Importer, i: usize| -> NResult<Option<f64>> {
        Ok(match imp.float_input(node, i)? {
            Some(Ok(x)) => Some(x),
            _ => None,
        })
    };
    let (start, limit, delta) = (known(imp, 0)?, known(imp, 1)?, known(imp, 2)?);
    let (Some(start), Some(limit), Some(delta)) = (start, limit, delta) else {
        let input = [start, limit, delta].iter().position(Option::is_none).unwrap_or(0);
        return Err(NodeError::NeedsValue { input, what: ["the start", "the limit", "the delta"][input].into() });
    };
    if delta == 0.0 {
        return invalid("delta is 0");
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    let max = imp.opts.limits.max_tensor_bytes / dtype.size_bytes() as u64;
    if n.is_nan() || n > max as f64 {
        return Err(NodeError::Tensor(Box::new(super::ImportError::Limit {
            what: "the result of Range".into(),
            size: (n as u64).saturating_mul(dtype.size_bytes() as u64),
            limit: "max_tensor_bytes",
            max: imp.opts.limits.max_tensor_bytes,
        })));
    }
    let n = n as u64;
    let iota = imp.emit(
        OpKind::Iota,
        &[],
        &[("shape", dims_attr(&[Dim::new(n)])), ("axis", int(0)), ("dtype", AttrValue::DType(dtype))],
    )?;
    let m = if delta != 1.0 { bin_scalar(imp, OpKind::Mul, iota, delta)? } else { iota };
    one(if start != 0.0 { bin_scalar(imp, OpKind::Add, m, start)? } else { m })
}
