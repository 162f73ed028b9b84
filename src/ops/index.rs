//! Indexing: the prims `gather` and `scatter_add`, and the high-level `embedding`,
//! `masked_fill`, `tril` and `triu`.
//!
//! Semantic choices:
//! - `gather(x, index) {axis}` is `torch.gather`: `index` is i32/i64 of `x`'s rank, with
//!   `index.shape[d] <= x.shape[d]` for every `d != axis` (checked in `infer` when both dims are
//!   static, at run time otherwise); `out[p] = x[p with p[axis] = index[p]]`, of `index`'s shape
//!   and `x`'s dtype (any dtype).
//! - `scatter_add(x, index, src) {axis}`: a copy of `x` where, for every position `p` of
//!   `index`/`src` (same shape, `src` of `x`'s dtype, numeric), `out[p with p[axis] = index[p]]
//!   += src[p]`, accumulated in `x`'s dtype in row-major order of `p` (integers wrap).
//! - Gather/scatter indices may be negative and count from the end (`-size..size`); anything
//!   else is `EvalError::IndexOutOfRange`. `embedding` rejects negative indices, like torch.
//! - `embedding(indices, weight)` is `F.embedding`'s argument order: integer `indices` of any
//!   rank, `weight` of rank 2 `[V, D]` (any dtype); the result is `indices.shape + [D]`.
//! - `masked_fill(x, mask) {value}`: `mask` is bool and broadcasts to `x`'s shape (never
//!   enlarging it); `value` is converted to `x`'s dtype like `convert_element_type` (floats
//!   round, integers truncate toward zero and saturate with NaN → 0, bool is `value != 0`).
//! - `tril`/`triu {diagonal}` act on the last two dims (rank >= 2): `tril` keeps elements with
//!   `col - row <= diagonal`, `triu` those with `col - row >= diagonal`; the rest become zero
//!   (false for bool).

use super::util::{
    broadcast_shapes, broadcast_view, expect_bool, expect_index, expect_min_rank, expect_rank, int_attr,
    normalize_axis, ravel, unravel,
};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrKind, AttrSpec, Attrs, DType, Shape, TensorType};

/// A prim of this family: both take `x`, an index tensor and an `axis`.
const fn prim(
    kind: OpKind,
    name: &'static str,
    arity: usize,
    infer: super::InferFn,
    eval: super::EvalFn,
    doc: &'static str,
) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::Prim,
        arity: Arity::Exactly(arity),
        attrs: AXIS,
        infer,
        eval,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

const fn high(
    kind: OpKind,
    name: &'static str,
    arity: usize,
    attrs: &'static [AttrSpec],
    infer: super::InferFn,
    eval: super::EvalFn,
    doc: &'static str,
) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::High,
        arity: Arity::Exactly(arity),
        attrs,
        infer,
        eval,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

const AXIS: &[AttrSpec] = &[AttrSpec::required("axis", AttrKind::Int)];
const DIAGONAL: &[AttrSpec] = &[int_attr("diagonal", 0)];

pub static SPECS: &[OpSpec] = &[
    prim(
        OpKind::Gather,
        "gather",
        2,
        infer_gather,
        eval_gather,
        "torch.gather: out[p] = x[p with p[axis] = index[p]]; negative indices count from the end",
    ),
    prim(
        OpKind::ScatterAdd,
        "scatter_add",
        3,
        infer_scatter_add,
        eval_scatter_add,
        "copy of x with out[p with p[axis] = index[p]] += src[p], in row-major order",
    ),
    high(
        OpKind::Embedding,
        "embedding",
        2,
        &[],
        infer_embedding,
        eval_embedding,
        "F.embedding(indices, weight): rows of weight [V, D] picked by indices",
    ),
    high(
        OpKind::MaskedFill,
        "masked_fill",
        2,
        &[AttrSpec::required("value", AttrKind::Float)],
        infer_masked_fill,
        eval_masked_fill,
        "x with value where the (broadcast) bool mask is true",
    ),
    high(
        OpKind::Tril,
        "tril",
        1,
        DIAGONAL,
        infer_tri,
        eval_tri,
        "lower triangle of the last two dims (col - row <= diagonal), rest zero",
    ),
    high(
        OpKind::Triu,
        "triu",
        1,
        DIAGONAL,
        infer_tri,
        eval_tri,
        "upper triangle of the last two dims (col - row >= diagonal), rest zero",
    ),
];

/// An index into a dim of `size` as a position in `0..size`. With `negative_ok`, indices in
/// `-size..0` count from the end; anything else out of range is `IndexOutOfRange`.
pub fn normalize_index(index: i64, size: usize, negative_ok: bool) -> Result<usize, EvalError> {
    let s = size as i128;
    let i = index as i128;
    let i = if i < 0 && negative_ok { i + s } else { i };
    if (0..s).contains(&i) {
        Ok(i as usize)
    } else {
        Err(EvalError::IndexOutOfRange { index, size })
    }
}

/// A view's elements in row-major order, in its storage class.
enum Elems {
    F(Vec<f64>),
    I(Vec<i64>),
    B(Vec<bool>),
}

fn elems(x: &View) -> Elems {
    match x.dtype() {
        d if d.is_float() => Elems::F(x.floats()),
        d if d.is_int() => Elems::I(x.ints()),
        _ => Elems::B(x.bools()),
    }
}

/// A new tensor of `dtype` holding `src[pos[i]]` at flat position `i`, or zero where `pos[i]`
/// is `None`.
fn pick(ctx: &EvalCtx, dtype: DType, shape: Vec<usize>, src: &Elems, pos: &[Option<usize>]) -> View {
    match src {
        Elems::F(v) => View::from_floats(ctx, dtype, shape, pos.iter().map(|p| p.map_or(0.0, |p| v[p])).collect()),
        Elems::I(v) => View::from_ints(dtype, shape, pos.iter().map(|p| p.map_or(0, |p| v[p])).collect()),
        Elems::B(v) => View::from_bools(shape, pos.iter().map(|p| p.is_some_and(|p| v[p])).collect()),
    }
}

fn expect_index_dtype(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    expect_index(arg, ty)
}

/// Shared checks of gather and scatter_add: index dtype and rank, and index dims no larger
/// than x's off the axis where both are static. Returns the normalised axis.
fn check_index_arg(attrs: &Attrs, x: &TensorType, index: &TensorType) -> Result<usize, OpError> {
    expect_index_dtype(1, index)?;
    expect_rank(1, index, x.rank())?;
    let axis = normalize_axis(attrs.int("axis"), x.rank())?;
    for (d, (di, dx)) in index.shape.dims().iter().zip(x.shape.dims()).enumerate() {
        if d == axis {
            continue;
        }
        if let (Some(i), Some(n)) = (di.as_const(), dx.as_const()) {
            if i > n {
                return Err(OpError::Shape(format!(
                    "index has size {i} on dim {d} but x has only {n} (index {} vs x {})",
                    index.shape, x.shape
                )));
            }
        }
    }
    Ok(axis)
}

fn infer_gather(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (x, index) = (args[0], args[1]);
    check_index_arg(attrs, x, index)?;
    Ok(TensorType::new(x.dtype, index.shape.clone()))
}

fn infer_scatter_add(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (x, index, src) = (args[0], args[1], args[2]);
    if x.dtype.is_bool() {
        return Err(OpError::DType { arg: 0, got: x.dtype, expected: "a numeric (int or float) type".into() });
    }
    check_index_arg(attrs, x, index)?;
    if src.dtype != x.dtype {
        return Err(OpError::DType { arg: 2, got: src.dtype, expected: format!("{} (x's dtype)", x.dtype) });
    }
    if src.shape != index.shape {
        return Err(OpError::Shape(format!("src has shape {} but index has shape {}", src.shape, index.shape)));
    }
    Ok(x.clone())
}

/// For every position of `index` (row-major), the flat position in `x` it addresses.
fn scatter_positions(x_shape: &[usize], index: &View, axis: usize) -> Result<Vec<usize>, EvalError> {
    let ishape = index.shape();
    if ishape.len() != x_shape.len() || axis >= x_shape.len() {
        return Err(EvalError::Invalid(format!("index of shape {ishape:?} does not fit x of shape {x_shape:?}")));
    }
    for (d, (&i, &n)) in ishape.iter().zip(x_shape).enumerate() {
        if d != axis && i > n {
            return Err(EvalError::Invalid(format!(
                "index has size {i} on dim {d} but x has only {n} (index {ishape:?} vs x {x_shape:?})"
            )));
        }
    }
    let size = x_shape[axis];
    let mut out = Vec::with_capacity(index.numel());
    for (flat, i) in index.ints().into_iter().enumerate() {
        let mut p = unravel(flat, ishape);
        p[axis] = normalize_index(i, size, true)?;
        out.push(ravel(&p, x_shape));
    }
    Ok(out)
}

fn eval_axis(attrs: &Attrs, rank: usize) -> Result<usize, EvalError> {
    normalize_axis(attrs.int("axis"), rank).map_err(|e| EvalError::Invalid(e.to_string()))
}

fn eval_gather(_: OpKind, ctx: &mut EvalCtx, attrs: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let (x, index) = (&args[0], &args[1]);
    let axis = eval_axis(attrs, x.rank())?;
    let pos: Vec<Option<usize>> = scatter_positions(x.shape(), index, axis)?.into_iter().map(Some).collect();
    Ok(pick(ctx, x.dtype(), index.shape().to_vec(), &elems(x), &pos))
}

fn eval_scatter_add(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    _: &TensorType,
) -> Result<View, EvalError> {
    let (x, index, src) = (&args[0], &args[1], &args[2]);
    if src.shape() != index.shape() {
        return Err(EvalError::Invalid(format!(
            "src has shape {:?} but index has shape {:?}",
            src.shape(),
            index.shape()
        )));
    }
    let axis = eval_axis(attrs, x.rank())?;
    let pos = scatter_positions(x.shape(), index, axis)?;
    let dtype = x.dtype();
    let shape = x.shape().to_vec();
    if dtype.is_float() {
        let mut out = x.floats();
        for (q, s) in pos.into_iter().zip(src.floats()) {
            out[q] = ctx.round(dtype, out[q] + s);
        }
        Ok(View::from_floats(ctx, dtype, shape, out))
    } else {
        let mut out = x.ints();
        for (q, s) in pos.into_iter().zip(src.ints()) {
            out[q] = out[q].wrapping_add(s);
        }
        Ok(View::from_ints(dtype, shape, out))
    }
}

fn infer_embedding(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (indices, weight) = (args[0], args[1]);
    expect_index_dtype(0, indices)?;
    expect_rank(1, weight, 2)?;
    let mut shape = indices.shape.clone();
    shape.0.push(weight.shape.dims()[1].clone());
    Ok(TensorType::new(weight.dtype, shape))
}

fn eval_embedding(_: OpKind, ctx: &mut EvalCtx, _: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let (indices, weight) = (&args[0], &args[1]);
    let &[v, d] = weight.shape() else {
        return Err(EvalError::Invalid(format!("embedding weight must have rank 2, got {:?}", weight.shape())));
    };
    let mut pos = Vec::with_capacity(indices.numel() * d);
    for i in indices.ints() {
        let row = normalize_index(i, v, false)?;
        pos.extend((0..d).map(|j| Some(row * d + j)));
    }
    let mut shape = indices.shape().to_vec();
    shape.push(d);
    Ok(pick(ctx, weight.dtype(), shape, &elems(weight), &pos))
}

fn infer_masked_fill(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (x, mask) = (args[0], args[1]);
    expect_bool(1, mask)?;
    let b: Shape = broadcast_shapes(&x.shape, &mask.shape)?;
    if b != x.shape {
        return Err(OpError::Shape(format!(
            "mask of shape {} would broadcast x of shape {} to {b}; masked_fill keeps x's shape",
            mask.shape, x.shape
        )));
    }
    Ok(x.clone())
}

fn eval_masked_fill(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    _: &TensorType,
) -> Result<View, EvalError> {
    let (x, mask) = (&args[0], &args[1]);
    let shape = x.shape().to_vec();
    let mask = broadcast_view(mask, &shape)?.bools();
    let value = attrs.float("value");
    let dtype = x.dtype();
    Ok(match elems(x) {
        Elems::F(v) => {
            let fill = ctx.round(dtype, value);
            View::from_floats(
                ctx,
                dtype,
                shape,
                v.into_iter().zip(mask).map(|(a, m)| if m { fill } else { a }).collect(),
            )
        }
        Elems::I(v) => {
            let fill = crate::interp::float_to_int_as(dtype, value);
            View::from_ints(dtype, shape, v.into_iter().zip(mask).map(|(a, m)| if m { fill } else { a }).collect())
        }
        Elems::B(v) => {
            let fill = value != 0.0;
            View::from_bools(shape, v.into_iter().zip(mask).map(|(a, m)| if m { fill } else { a }).collect())
        }
    })
}

fn infer_tri(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    expect_min_rank(0, args[0], 2)?;
    Ok(args[0].clone())
}

fn eval_tri(kind: OpKind, ctx: &mut EvalCtx, attrs: &Attrs, args: &[View], _: &TensorType) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let rank = shape.len();
    if rank < 2 {
        return Err(EvalError::Invalid(format!("{} needs rank >= 2, got {shape:?}", kind.name())));
    }
    let diagonal = attrs.int("diagonal") as i128;
    let pos: Vec<Option<usize>> = (0..x.numel())
        .map(|flat| {
            let idx = unravel(flat, &shape);
            let offset = idx[rank - 1] as i128 - idx[rank - 2] as i128;
            let keep = if kind == OpKind::Tril { offset <= diagonal } else { offset >= diagonal };
            keep.then_some(flat)
        })
        .collect();
    Ok(pick(ctx, x.dtype(), shape, &elems(x), &pos))
}
