//! In-place ops: `add_`, `sub_`, `mul_`, `div_`, `relu_`, `copy_`, `fill_`, `masked_fill_`
//! and `slice_assign_`, PyTorch's trailing-underscore methods.
//!
//! Each writes into the storage of its first argument `x` (through whatever view `x` is, so
//! every alias of that storage sees the write) and returns `x` itself: the result has `x`'s
//! type and *is* `x` after the write, not a copy. Node order is program order, so a use of
//! `x` (or of any view of it) in a later node observes the new values, and a graph input
//! mutated in place comes back changed in `Outcome::inputs_after`.
//!
//! Semantic choices:
//! - Every op reads all of its arguments before writing anything, so `add_(x, x)` doubles `x`
//!   and `copy_(x, v)` with `v` overlapping `x` copies the old values. A failing op (integer
//!   division by zero) writes nothing.
//! - The second argument broadcasts (NumPy rules) to `x`'s shape, but may never enlarge it:
//!   `add_(f32[3], f32[2, 3])` is a typed shape error, as in PyTorch.
//! - Arithmetic (`add_ sub_ mul_ div_`) computes in `DType::promote(x, y)` exactly like the
//!   elementwise prims (`binary_float` / `binary_int`: integers wrap, integer `div_` truncates
//!   and fails on a zero divisor), then converts the result to `x`'s dtype on the write
//!   (floats round; a wider integer wraps to i32). Like PyTorch, a float result cannot be
//!   written into an integer `x` ("result type f32 can't be cast to i64 in place") and
//!   arithmetic on a bool `x` is rejected; both are errors at infer.
//! - `relu_` is `max(x, 0)` with the elementwise `max` rules: NaN stays NaN, -0 becomes +0.
//! - `copy_`, `fill_`, `masked_fill_` and `slice_assign_` accept any dtype combination and
//!   convert the written values to `x`'s dtype the way `convert_element_type` does (floats
//!   round, float → int truncates toward zero and saturates with NaN → 0, → bool is `v != 0`).
//! - `slice_assign_` writes `src` into `x[start:end:step]` along `axis`, with the `slice`
//!   op's Python semantics: a negative `start`/`end` counts from the end, then both clamp to
//!   `0..=dim`; `step >= 1`; an empty slice writes nothing. `src` broadcasts to the slice's
//!   shape. On a symbolic dim the slice must be one the `slice` op accepts there (its size
//!   is then known), so `src` is checked against it at infer.
//! - Writing through a view in which several elements share one storage location (an
//!   expanded or broadcast view) fails with `EvalError::OverlappingWrite`, as in PyTorch.
//!
//! `slice_scatter(x, src)` is `slice_assign_`'s functional twin (PyTorch's `slice_scatter`):
//! a new value equal to `x` with the slice replaced by `src`, touching no storage. It is what
//! functionalization rewrites a write through a slice into.

use super::elementwise::{binary_float, binary_int};
use super::util::{broadcast_shapes, broadcast_view, expect_bool, int_attr, normalize_axis, size_attr};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrKind, AttrSpec, Attrs, DType, Dim, Shape, SizeExpr, TensorType};

const fn inplace(
    kind: OpKind,
    name: &'static str,
    arity: usize,
    attrs: &'static [AttrSpec],
    eval: super::EvalFn,
    doc: &'static str,
) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::High,
        arity: Arity::Exactly(arity),
        attrs,
        infer: infer_inplace,
        eval,
        explicit: None,
        mutates: true,
        aliases: true,
        native: super::Native::Prims,
        doc,
    }
}

const VALUE: &[AttrSpec] = &[AttrSpec::required("value", AttrKind::Float)];
const SLICE: &[AttrSpec] = &[
    AttrSpec::required("axis", AttrKind::Int),
    size_attr("start", 0),
    size_attr("end", i64::MAX),
    int_attr("step", 1),
];

pub static SPECS: &[OpSpec] = &[
    inplace(OpKind::AddInplace, "add_", 2, &[], eval_arith, "x += y in place (y broadcasts to x); returns x"),
    inplace(OpKind::SubInplace, "sub_", 2, &[], eval_arith, "x -= y in place (y broadcasts to x); returns x"),
    inplace(OpKind::MulInplace, "mul_", 2, &[], eval_arith, "x *= y in place (y broadcasts to x); returns x"),
    inplace(
        OpKind::DivInplace,
        "div_",
        2,
        &[],
        eval_arith,
        "x /= y in place (y broadcasts to x; integers truncate); returns x",
    ),
    inplace(OpKind::ReluInplace, "relu_", 1, &[], eval_relu, "x = max(x, 0) in place (NaN stays NaN); returns x"),
    inplace(
        OpKind::CopyInplace,
        "copy_",
        2,
        &[],
        eval_copy,
        "x = src in place (src broadcasts to x, converted to x's dtype); returns x",
    ),
    inplace(OpKind::FillInplace, "fill_", 1, VALUE, eval_fill, "x = value everywhere, in place; returns x"),
    inplace(
        OpKind::MaskedFillInplace,
        "masked_fill_",
        2,
        VALUE,
        eval_masked_fill,
        "x = value where the bool mask (broadcast to x) is true, in place; returns x",
    ),
    inplace(
        OpKind::SliceAssignInplace,
        "slice_assign_",
        2,
        SLICE,
        eval_slice_assign,
        "x[start:end:step] along axis = src in place (src broadcasts to the slice); returns x",
    ),
    OpSpec {
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        ..inplace(
            OpKind::SliceScatter,
            "slice_scatter",
            2,
            SLICE,
            eval_slice_scatter,
            "a copy of x with x[start:end:step] along axis replaced by src (slice_assign_ without mutation)",
        )
    },
];

/// Checks that `src` (argument `arg`) broadcasts to `target` without enlarging it. A `None`
/// target dim is unknown at infer time: any size is accepted there and checked when run.
fn check_broadcasts_into(arg: usize, src: &Shape, target: &[Option<Dim>], full: &Shape) -> Result<(), OpError> {
    let enlarge = || {
        OpError::Shape(format!(
            "argument {arg} of shape {src} would enlarge the destination of shape {full} (an in-place op cannot change its destination's shape)"
        ))
    };
    if src.rank() > target.len() {
        return Err(enlarge());
    }
    let lead = target.len() - src.rank();
    let one = Dim::new(1);
    for (i, d) in src.dims().iter().enumerate() {
        match &target[lead + i] {
            None => {}
            Some(t) if d == t || *d == one => {}
            Some(t) => {
                // Distinguish "does not broadcast at all" from "would enlarge x".
                return if *t == one {
                    Err(enlarge())
                } else {
                    Err(OpError::Broadcast { a: Box::new(full.clone()), b: Box::new(src.clone()) })
                };
            }
        }
    }
    Ok(())
}

fn infer_inplace(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    use OpKind::*;
    let x = args[0];
    let whole: Vec<Option<Dim>> = x.shape.dims().iter().cloned().map(Some).collect();
    match kind {
        AddInplace | SubInplace | MulInplace | DivInplace => {
            let y = args[1];
            if x.dtype.is_bool() {
                return Err(OpError::DType { arg: 0, got: x.dtype, expected: "a numeric (int or float) type".into() });
            }
            // Make sure the shapes broadcast at all before the stricter in-place rule.
            broadcast_shapes(&x.shape, &y.shape)?;
            check_broadcasts_into(1, &y.shape, &whole, &x.shape)?;
            let compute = DType::promote(x.dtype, y.dtype);
            if compute.is_float() && !x.dtype.is_float() {
                return Err(OpError::DType {
                    arg: 1,
                    got: y.dtype,
                    expected: format!(
                        "an integer or bool type (result type {compute} can't be cast to {} in place)",
                        x.dtype
                    ),
                });
            }
        }
        ReluInplace => {
            if x.dtype.is_bool() {
                return Err(OpError::DType { arg: 0, got: x.dtype, expected: "a numeric (int or float) type".into() });
            }
        }
        CopyInplace => {
            broadcast_shapes(&x.shape, &args[1].shape)?;
            check_broadcasts_into(1, &args[1].shape, &whole, &x.shape)?;
        }
        FillInplace => {}
        MaskedFillInplace => {
            expect_bool(1, args[1])?;
            broadcast_shapes(&x.shape, &args[1].shape)?;
            check_broadcasts_into(1, &args[1].shape, &whole, &x.shape)?;
        }
        SliceAssignInplace | SliceScatter => {
            let (axis, start, end, step) = slice_attrs(attrs, x.rank())?;
            let mut target = whole;
            let len = crate::ops::shape::slice_dim(&x.shape.dims()[axis], &start, &end, step)?;
            if step > 1 && !len.is_static() {
                // Writing every step-th element of a symbolic run needs interior padding of a
                // symbolic size, which `pad` does not have.
                return Err(OpError::Shape(format!(
                    "slice {start}:{end}:{step} of a dim of size {} has the symbolic length {len}: a write with step > 1 needs a static size",
                    x.shape.dims()[axis]
                )));
            }
            target[axis] = Some(len);
            let mut shown = x.shape.clone();
            if let Some(len) = &target[axis] {
                shown.0[axis] = len.clone();
            }
            check_broadcasts_into(1, &args[1].shape, &target, &shown)?;
        }
        _ => unreachable!("{kind:?} is not an in-place op"),
    }
    Ok(x.clone())
}

/// `slice_assign_`'s attributes, checked: the normalised axis, start, end and step.
fn slice_attrs(attrs: &Attrs, rank: usize) -> Result<(usize, SizeExpr, SizeExpr, i64), OpError> {
    let axis = normalize_axis(attrs.int("axis"), rank)?;
    let step = attrs.int("step");
    if step < 1 {
        return Err(OpError::AttrValue { name: "step", problem: format!("must be at least 1, got {step}") });
    }
    Ok((axis, attrs.size("start"), attrs.size("end"), step))
}

/// Writes `values` (already of `x`'s shape) through `x` and returns `x`.
fn write_back(ctx: &EvalCtx, x: &View, values: &View) -> Result<View, EvalError> {
    x.write(ctx, values)?;
    Ok(x.clone())
}

fn eval_arith(kind: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let y = broadcast_view(&args[1], &shape)?;
    let op = match kind {
        OpKind::AddInplace => OpKind::Add,
        OpKind::SubInplace => OpKind::Sub,
        OpKind::MulInplace => OpKind::Mul,
        OpKind::DivInplace => OpKind::Div,
        _ => return Err(EvalError::Invalid(format!("{kind:?} is not an in-place arithmetic op"))),
    };
    let compute = DType::promote(x.dtype(), y.dtype());
    let result = if compute.is_float() {
        // Operands are rounded to the compute type first, as in the elementwise prims.
        let xv = x.floats().into_iter().map(|v| ctx.round(compute, v));
        let yv = y.floats().into_iter().map(|v| ctx.round(compute, v));
        let vals = xv.zip(yv).map(|(a, b)| binary_float(op, a, b)).collect();
        View::from_floats(ctx, compute, shape, vals)
    } else {
        let mut vals = Vec::with_capacity(x.numel());
        for (a, b) in x.ints().into_iter().zip(y.ints()) {
            vals.push(binary_int(op, compute, a, b)?);
        }
        View::from_ints(compute, shape, vals)
    };
    write_back(ctx, x, &result)
}

fn eval_relu(_: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let result = if x.dtype().is_float() {
        let vals = x.floats().into_iter().map(|v| binary_float(OpKind::Max, v, 0.0)).collect();
        View::from_floats(ctx, x.dtype(), shape, vals)
    } else {
        let unsigned = x.dtype().is_unsigned();
        View::from_ints(x.dtype(), shape, x.ints().into_iter().map(|v| if unsigned { v } else { v.max(0) }).collect())
    };
    write_back(ctx, x, &result)
}

fn eval_copy(_: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let src = broadcast_view(&args[1], x.shape())?;
    write_back(ctx, x, &src)
}

/// A rank-0 f64 view of `value`, for broadcasting into a write (the write converts it).
fn scalar(ctx: &EvalCtx, value: f64) -> View {
    View::from_floats(ctx, DType::F64, Vec::new(), vec![value])
}

fn eval_fill(_: OpKind, ctx: &mut EvalCtx, attrs: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let src = broadcast_view(&scalar(ctx, attrs.float("value")), x.shape())?;
    write_back(ctx, x, &src)
}

fn eval_masked_fill(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    _: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let mask = broadcast_view(&args[1], &shape)?.bools();
    let value = attrs.float("value");
    let d = x.dtype();
    let result = if d.is_float() {
        let vals = x.floats().into_iter().zip(&mask).map(|(v, &m)| if m { value } else { v }).collect();
        View::from_floats(ctx, d, shape, vals)
    } else if d.is_int() {
        let fill = crate::interp::float_to_int_as(d, value);
        View::from_ints(d, shape, x.ints().into_iter().zip(&mask).map(|(v, &m)| if m { fill } else { v }).collect())
    } else {
        let fill = value != 0.0;
        View::from_bools(shape, x.bools().into_iter().zip(&mask).map(|(v, &m)| if m { fill } else { v }).collect())
    };
    write_back(ctx, x, &result)
}

fn eval_slice_assign(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let (axis, start, end, step) = slice_attrs(attrs, x.rank()).map_err(|e| EvalError::Invalid(e.to_string()))?;
    let n = x.shape()[axis] as u64;
    // On a symbolic axis or with symbolic bounds the shape rule assumed the window fits (as
    // `slice` does); a run where it does not is an error, never a silent clamp.
    let assumed = start.as_const().is_none()
        || end.as_const().is_none()
        || out.shape.dims().get(axis).is_some_and(|d| !d.is_static());
    let start = (ctx.size(&start)?, start.as_const().is_none());
    let end = (ctx.size(&end)?, end.as_const().is_none());
    let (first, len) = crate::ops::shape::slice_concrete(n, start, end, step, assumed).map_err(EvalError::Invalid)?;
    let mut shape = x.shape().to_vec();
    shape[axis] = len as usize;
    let mut strides = x.strides().to_vec();
    let mut offset = x.offset();
    if len > 0 {
        let stride = strides[axis];
        let moved = isize::try_from(first).ok().and_then(|f| f.checked_mul(stride));
        offset = moved
            .and_then(|m| (offset as isize).checked_add(m))
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(|| EvalError::Invalid("slice offset overflows".into()))?;
        if len > 1 {
            strides[axis] = isize::try_from(step)
                .ok()
                .and_then(|s| s.checked_mul(stride))
                .ok_or_else(|| EvalError::Invalid("slice stride overflows".into()))?;
        }
    }
    let dest = x.restride(shape.clone(), strides, offset);
    let src = broadcast_view(&args[1], &shape)?;
    dest.write(ctx, &src)?;
    Ok(x.clone())
}

fn eval_slice_scatter(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let fresh = args[0].copy();
    eval_slice_assign(kind, ctx, attrs, &[fresh, args[1].clone()], out)
}
