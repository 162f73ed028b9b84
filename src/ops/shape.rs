//! Shape prims (`broadcast_in_dim`, `reshape`, `permute`, `slice`, `pad`, `cat`, `rev`,
//! `iota`, `full`) and the high-level views and assembly ops built on them (`view`,
//! `flatten`, `transpose`, `expand`, `squeeze`, `unsqueeze`, `select`, `contiguous`,
//! `stack`, `split`, `chunk`).
//!
//! Semantic choices:
//! - View ops return strided views that share their argument's storage (`aliases: true`):
//!   `broadcast_in_dim` and `expand` use stride 0, `slice` an offset and a multiplied stride,
//!   `permute`/`transpose` permuted strides, `select`/`split`/`chunk` an offset.
//!   `view` never copies: it aliases when the argument's strides allow (PyTorch's
//!   `computeStride` rule) and fails with `EvalError::NotViewable` otherwise. `reshape` and
//!   `flatten` always make a new value (PyTorch leaves "view or copy" unspecified; ladder
//!   fixes it so that whether a mutation is seen never depends on run-time strides, which
//!   lets functionalization decide aliasing statically). `rev`, `pad`, `cat`, `stack` and
//!   `contiguous` always copy.
//! - `broadcast_in_dim` is StableHLO's: operand dim `i` becomes output dim
//!   `broadcast_dims[i]` (strictly increasing after normalising negative entries), and must
//!   be 1 or equal to it. `expand` is PyTorch's: `-1` keeps a dim, new leading dims may be
//!   added, size-1 dims stretch.
//! - `reshape`/`view` accept one `-1`, inferred as `numel / known` by exact (possibly
//!   symbolic) division; `0` elements with a `-1` is an error, since any size would do.
//! - `slice` follows Python: negative `start`/`end` count from the end, then clamp to
//!   `[0, dim]`; `step >= 1`; the size is `ceil((end - start) / step)`, at least 0. On a
//!   symbolic dim only `step = 1` with `start` of either sign and `end` negative or absent is
//!   supported (`seq[1:]` is `seq - 1`), assuming the dim is large enough; a run where it is
//!   not fails with a typed error rather than clamping to a shape the graph did not declare.
//! - `pad` is StableHLO's: negative `low`/`high` crop, `interior[i]` copies of `value` go
//!   between neighbouring elements. `value` (and `full`'s `value`) converts like
//!   `convert_element_type`: float→int truncates and saturates, NaN→0, →bool is `value != 0`.
//! - `cat`/`stack` promote dtypes at the high rung; at the prims rung `cat`'s operands must
//!   share one dtype.
//! - `iota` counts along one axis in any numeric dtype (rounded to it, so large indices in
//!   f16 round); bool is rejected.
//! - `squeeze` without axes drops every dim that is statically 1 (a symbolic dim is kept even
//!   when it is 1 at run time); listed axes must be statically 1.
//! - `select` counts a negative index from the end; out of range is an infer error on a static
//!   dim and `EvalError::IndexOutOfRange` at run time on a symbolic one.
//! - `split` and `chunk` (PyTorch's: pieces of `ceil(dim / chunks)`, the last possibly
//!   smaller, possibly fewer than `chunks` pieces; a 0 dim gives `chunks` empty pieces) return
//!   one piece, named by `index` (negative counts from the last piece); both need a static dim.
//! - Empty tensors (a 0 dim) work everywhere.

use super::util::{
    broadcast_view, dims_attr_to_shape, float_attr, int_attr, normalize_axes, normalize_axis, normalize_insert_axis,
    promote_all, ravel, size_attr, unravel,
};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{contiguous_strides, EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, Dim, Shape, SizeExpr, TensorType};

const fn row(
    kind: OpKind,
    name: &'static str,
    rung: Rung,
    arity: Arity,
    attrs: &'static [AttrSpec],
    aliases: bool,
    doc: &'static str,
) -> OpSpec {
    OpSpec { aliases, ..OpSpec::plain(kind, name, rung, arity, attrs, infer_shape_op, eval_shape_op, doc) }
}

const ONE: Arity = Arity::Exactly(1);

pub static SPECS: &[OpSpec] = &[
    row(
        OpKind::BroadcastInDim,
        "broadcast_in_dim",
        Rung::Prim,
        ONE,
        &[AttrSpec::required("shape", AttrKind::Dims), AttrSpec::required("broadcast_dims", AttrKind::Ints)],
        true,
        "broadcast to `shape`; operand dim i becomes dim broadcast_dims[i] (a stride-0 view)",
    ),
    OpSpec {
        explicit: Some(explicit_reshape),
        ..row(
            OpKind::Reshape,
            "reshape",
            Rung::Prim,
            ONE,
            &[AttrSpec::required("shape", AttrKind::Dims)],
            false,
            "same elements in a new shape (one -1 is inferred); a new value, never an alias",
        )
    },
    row(
        OpKind::Permute,
        "permute",
        Rung::Prim,
        ONE,
        &[AttrSpec::required("perm", AttrKind::Ints)],
        true,
        "reorder axes: result dim i is argument dim perm[i] (a view)",
    ),
    row(
        OpKind::Slice,
        "slice",
        Rung::Prim,
        ONE,
        &[
            AttrSpec::required("axis", AttrKind::Int),
            size_attr("start", 0),
            size_attr("end", i64::MAX),
            int_attr("step", 1),
        ],
        true,
        "x[start:end:step] along one axis, Python semantics (a view); start and end may be size expressions (then assumed in range)",
    ),
    row(
        OpKind::Pad,
        "pad",
        Rung::Prim,
        ONE,
        &[
            AttrSpec::required("low", AttrKind::Ints),
            AttrSpec::required("high", AttrKind::Ints),
            AttrSpec::optional("interior", AttrKind::Ints, AttrDefault::Empty),
            float_attr("value", 0.0),
        ],
        false,
        "pad each axis with `value`: low/high at the edges (negative crops), interior between elements",
    ),
    OpSpec {
        explicit: Some(explicit_cat),
        ..row(
            OpKind::Cat,
            "cat",
            Rung::Prim,
            Arity::AtLeast(1),
            &[int_attr("axis", 0)],
            false,
            "concatenate along an existing axis (dtypes promote)",
        )
    },
    row(
        OpKind::Rev,
        "rev",
        Rung::Prim,
        ONE,
        &[AttrSpec::required("axes", AttrKind::Ints)],
        false,
        "reverse the order of elements along the given axes (a copy)",
    ),
    row(
        OpKind::Iota,
        "iota",
        Rung::Prim,
        Arity::Exactly(0),
        &[
            AttrSpec::required("shape", AttrKind::Dims),
            AttrSpec::required("axis", AttrKind::Int),
            AttrSpec::optional("dtype", AttrKind::DType, AttrDefault::DType(DType::I64)),
        ],
        false,
        "a tensor whose value is its index along `axis`",
    ),
    row(
        OpKind::Full,
        "full",
        Rung::Prim,
        Arity::Exactly(0),
        &[
            AttrSpec::required("shape", AttrKind::Dims),
            AttrSpec::required("value", AttrKind::Float),
            AttrSpec::optional("dtype", AttrKind::DType, AttrDefault::DType(DType::F32)),
        ],
        false,
        "a tensor filled with `value` (converted like convert_element_type)",
    ),
    row(
        OpKind::DimValues,
        "dim_values",
        Rung::Prim,
        Arity::Exactly(0),
        &[
            AttrSpec::required("dims", AttrKind::Dims),
            AttrSpec::optional("dtype", AttrKind::DType, AttrDefault::DType(DType::I64)),
        ],
        false,
        "the values of size expressions as a 1-d tensor, evaluated with the run's symbols (sizes as data)",
    ),
    row(
        OpKind::View,
        "view",
        Rung::High,
        ONE,
        &[AttrSpec::required("shape", AttrKind::Dims)],
        true,
        "reshape that must not copy (one -1 is inferred); fails at run time if strides forbid it",
    ),
    row(
        OpKind::Flatten,
        "flatten",
        Rung::High,
        ONE,
        &[int_attr("start", 0), int_attr("end", -1)],
        false,
        "merge dims start..=end into one (a new value, never an alias)",
    ),
    row(
        OpKind::Transpose,
        "transpose",
        Rung::High,
        ONE,
        &[AttrSpec::required("axis0", AttrKind::Int), AttrSpec::required("axis1", AttrKind::Int)],
        true,
        "swap two axes (a view)",
    ),
    row(
        OpKind::Expand,
        "expand",
        Rung::High,
        ONE,
        &[AttrSpec::required("shape", AttrKind::Dims)],
        true,
        "PyTorch expand: size-1 dims stretch, -1 keeps a dim, new leading dims (a stride-0 view)",
    ),
    row(
        OpKind::Squeeze,
        "squeeze",
        Rung::High,
        ONE,
        &[AttrSpec::optional("axes", AttrKind::Ints, AttrDefault::Empty)],
        true,
        "drop size-1 dims: the listed ones, or every statically-1 dim (a view)",
    ),
    row(
        OpKind::Unsqueeze,
        "unsqueeze",
        Rung::High,
        ONE,
        &[AttrSpec::required("axis", AttrKind::Int)],
        true,
        "insert a size-1 dim at `axis` (a view)",
    ),
    row(
        OpKind::Select,
        "select",
        Rung::High,
        ONE,
        &[AttrSpec::required("axis", AttrKind::Int), AttrSpec::required("index", AttrKind::Int)],
        true,
        "x[..., index, ...]: pick one index along `axis`, removing it (a view)",
    ),
    row(OpKind::Contiguous, "contiguous", Rung::High, ONE, &[], false, "a contiguous copy"),
    row(
        OpKind::Stack,
        "stack",
        Rung::High,
        Arity::AtLeast(1),
        &[int_attr("axis", 0)],
        false,
        "join equal-shaped tensors along a new axis (dtypes promote)",
    ),
    row(
        OpKind::Split,
        "split",
        Rung::High,
        ONE,
        &[
            AttrSpec::required("axis", AttrKind::Int),
            AttrSpec::required("sizes", AttrKind::Ints),
            AttrSpec::required("index", AttrKind::Int),
        ],
        true,
        "piece `index` of splitting `axis` into pieces of the given sizes (a view)",
    ),
    row(
        OpKind::Chunk,
        "chunk",
        Rung::High,
        ONE,
        &[
            AttrSpec::required("axis", AttrKind::Int),
            AttrSpec::required("chunks", AttrKind::Int),
            AttrSpec::required("index", AttrKind::Int),
        ],
        true,
        "piece `index` of PyTorch chunk: pieces of ceil(dim / chunks), the last smaller (a view)",
    ),
];

// ---------------------------------------------------------------------------------------------
// Shape rules
// ---------------------------------------------------------------------------------------------

fn infer_shape_op(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    use OpKind::*;
    let same_dtype = |shape: Shape| Ok(TensorType::new(args[0].dtype, shape));
    match kind {
        BroadcastInDim => same_dtype(infer_broadcast_in_dim(attrs, args[0])?),
        Reshape | View => same_dtype(infer_reshape(attrs.dims("shape"), &args[0].shape)?),
        Permute => {
            let perm = normalize_perm(attrs.ints("perm"), args[0].rank())?;
            same_dtype(perm.iter().map(|&p| args[0].shape.0[p].clone()).collect())
        }
        Slice => {
            let x = &args[0].shape;
            let axis = normalize_axis(attrs.int("axis"), x.rank())?;
            let mut dims = x.0.clone();
            dims[axis] = slice_dim(&x.0[axis], &attrs.size("start"), &attrs.size("end"), attrs.int("step"))?;
            same_dtype(Shape(dims))
        }
        Pad => same_dtype(infer_pad(attrs, &args[0].shape)?),
        Cat | Stack => infer_join(kind, attrs, args),
        Rev => {
            normalize_axes(attrs.ints("axes"), args[0].rank(), false)?;
            same_dtype(args[0].shape.clone())
        }
        Iota => {
            let shape = dims_attr_to_shape("shape", attrs.dims("shape"))?;
            normalize_axis(attrs.int("axis"), shape.rank())?;
            let dtype = attrs.dtype("dtype");
            if dtype.is_bool() {
                return Err(attr_err("dtype", "iota needs a numeric dtype, not bool"));
            }
            Ok(TensorType::new(dtype, shape))
        }
        Full => Ok(TensorType::new(attrs.dtype("dtype"), dims_attr_to_shape("shape", attrs.dims("shape"))?)),
        DimValues => {
            let dims = attrs.dims("dims");
            if dims.iter().any(Option::is_none) {
                return Err(attr_err("dims", "must hold sizes, not -1"));
            }
            let dtype = attrs.dtype("dtype");
            if dtype.is_bool() {
                return Err(attr_err("dtype", "dim_values needs a numeric dtype, not bool"));
            }
            Ok(TensorType::new(dtype, Shape::from_static(&[dims.len() as u64])))
        }
        Flatten => {
            let (start, end) = flatten_range(attrs, args[0].rank())?;
            let x = &args[0].shape.0;
            if x.is_empty() {
                return same_dtype(Shape::from_static(&[1]));
            }
            let mut merged = Dim::new(1);
            for d in &x[start..=end] {
                merged = merged.mul(d)?;
            }
            let mut dims = x[..start].to_vec();
            dims.push(merged);
            dims.extend_from_slice(&x[end + 1..]);
            same_dtype(dims.into_iter().collect())
        }
        Transpose => {
            let rank = args[0].rank();
            let (a, b) = (normalize_axis(attrs.int("axis0"), rank)?, normalize_axis(attrs.int("axis1"), rank)?);
            let mut dims = args[0].shape.0.clone();
            dims.swap(a, b);
            same_dtype(Shape(dims))
        }
        Expand => same_dtype(infer_expand(attrs.dims("shape"), &args[0].shape)?),
        Squeeze => {
            let x = &args[0].shape;
            let drop = squeeze_axes(attrs.ints("axes"), x)?;
            same_dtype(x.0.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, d)| d.clone()).collect())
        }
        Unsqueeze => {
            let axis = normalize_insert_axis(attrs.int("axis"), args[0].rank())?;
            let mut dims = args[0].shape.0.clone();
            dims.insert(axis, Dim::new(1));
            same_dtype(Shape(dims))
        }
        Select => {
            let x = &args[0].shape;
            let axis = normalize_axis(attrs.int("axis"), x.rank())?;
            let index = attrs.int("index");
            if let Some(n) = x.0[axis].as_const() {
                normalize_index(index, n).ok_or_else(|| OpError::AttrValue {
                    name: "index",
                    problem: format!("index {index} is out of range for a dim of size {n}"),
                })?;
            }
            let mut dims = x.0.clone();
            dims.remove(axis);
            same_dtype(Shape(dims))
        }
        Contiguous => same_dtype(args[0].shape.clone()),
        Split | Chunk => {
            let x = &args[0].shape;
            let axis = normalize_axis(attrs.int("axis"), x.rank())?;
            let (_, size) = piece(kind, attrs, &x.0[axis], axis)?;
            let mut dims = x.0.clone();
            dims[axis] = Dim::new(size);
            same_dtype(Shape(dims))
        }
        _ => unreachable!("{kind:?} is not a shape op"),
    }
}

/// A dim that must be static for `what`, or a typed error naming the axis.
fn static_dim(d: &Dim, axis: usize, what: &str) -> Result<u64, OpError> {
    d.as_const().ok_or_else(|| OpError::Shape(format!("{what} needs a static size, but axis {axis} has size {d}")))
}

fn attr_err(name: &'static str, problem: impl Into<String>) -> OpError {
    OpError::AttrValue { name, problem: problem.into() }
}

fn infer_broadcast_in_dim(attrs: &Attrs, x: &TensorType) -> Result<Shape, OpError> {
    let shape = dims_attr_to_shape("shape", attrs.dims("shape"))?;
    let bdims = attrs.ints("broadcast_dims");
    if bdims.len() != x.rank() {
        return Err(attr_err(
            "broadcast_dims",
            format!("has {} entries but the operand has rank {}", bdims.len(), x.rank()),
        ));
    }
    let out: Vec<usize> = bdims.iter().map(|&b| normalize_axis(b, shape.rank())).collect::<Result<_, _>>()?;
    if out.windows(2).any(|w| w[0] >= w[1]) {
        return Err(attr_err("broadcast_dims", format!("{bdims:?} is not strictly increasing")));
    }
    for (i, &o) in out.iter().enumerate() {
        let (d, t) = (&x.shape.0[i], &shape.0[o]);
        if d != t && d.as_const() != Some(1) {
            return Err(OpError::Shape(format!(
                "operand dim {i} (size {d}) cannot broadcast to result dim {o} (size {t})"
            )));
        }
    }
    Ok(shape)
}

/// The result shape of reshape/view: at most one `-1`, inferred by exact division.
fn infer_reshape(target: &[Option<Dim>], x: &Shape) -> Result<Shape, OpError> {
    let numel = x.numel()?;
    let mut known = Dim::new(1);
    let mut infer_at = None;
    for (i, d) in target.iter().enumerate() {
        match d {
            Some(d) => known = known.mul(d)?,
            None if infer_at.is_some() => return Err(attr_err("shape", "at most one entry may be -1")),
            None => infer_at = Some(i),
        }
    }
    let mut dims: Vec<Dim> = Vec::with_capacity(target.len());
    for d in target {
        match d {
            Some(d) => dims.push(d.clone()),
            None => {
                if known.as_const() == Some(0) {
                    return Err(OpError::Shape(format!(
                        "cannot infer the -1 in a reshape of {x} to a shape with a 0 dim: any size would fit"
                    )));
                }
                let inferred = numel.div_exact(&known).map_err(|_| {
                    OpError::Shape(format!("cannot reshape {x} ({numel} elements) into a multiple of {known}"))
                })?;
                dims.push(inferred);
            }
        }
    }
    let out: Shape = dims.into_iter().collect();
    let out_numel = out.numel()?;
    if out_numel != numel {
        return Err(OpError::Shape(format!("cannot reshape {x} ({numel} elements) into {out} ({out_numel} elements)")));
    }
    Ok(out)
}

fn explicit_reshape(attrs: &Attrs, _: &[&TensorType]) -> Result<(), OpError> {
    if attrs.dims("shape").iter().any(Option::is_none) {
        return Err(OpError::NotExplicit("reshape's shape must not contain -1".into()));
    }
    Ok(())
}

fn explicit_cat(_: &Attrs, args: &[&TensorType]) -> Result<(), OpError> {
    for (i, a) in args.iter().enumerate().skip(1) {
        if a.dtype != args[0].dtype {
            return Err(OpError::NotExplicit(format!("argument {i} is {}, argument 0 is {}", a.dtype, args[0].dtype)));
        }
    }
    Ok(())
}

/// A permutation attribute normalised to `0..rank`.
fn normalize_perm(perm: &[i64], rank: usize) -> Result<Vec<usize>, OpError> {
    if perm.len() != rank {
        return Err(attr_err("perm", format!("has {} entries but the argument has rank {rank}", perm.len())));
    }
    let mut out = Vec::with_capacity(rank);
    for &p in perm {
        let n = normalize_axis(p, rank)?;
        if out.contains(&n) {
            return Err(attr_err("perm", format!("{perm:?} is not a permutation (axis {p} appears twice)")));
        }
        out.push(n);
    }
    Ok(out)
}

/// Python slice bounds on a static dim: (start, size).
fn slice_bounds(n: u64, start: i64, end: i64, step: i64) -> (u64, u64) {
    let n = n.min(i64::MAX as u64) as i64;
    let clamp = |v: i64| if v < 0 { v.saturating_add(n).max(0) } else { v.min(n) };
    let (s, e) = (clamp(start), clamp(end));
    let size = if e > s { (e - s - 1) / step + 1 } else { 0 };
    (s as u64, size as u64)
}

/// `start:end:step` on a dim of concrete size `n`, the bounds evaluated with this run's
/// symbols: (first, len). Constant bounds on a static dim follow Python (clamped). When the
/// graph's shape rule assumed the slice in range ([`slice_range`]: the dim or a bound is
/// symbolic), the bounds are placed as it places them (a constant negative bound from the
/// end, a symbolic one from the front) and must lie inside the dim unless the slice is
/// exactly empty (its unclamped length 0, as the shape rule's is); the error says so.
pub(crate) fn slice_concrete(
    n: u64,
    start: (i64, bool),
    end: (i64, bool),
    step: i64,
    assumed: bool,
) -> Result<(u64, u64), String> {
    if step < 1 {
        return Err(format!("slice step must be at least 1, got {step}"));
    }
    if !assumed {
        let (first, len) = slice_bounds(n, start.0, end.0, step);
        return Ok((if len == 0 { 0 } else { first }, len));
    }
    let ni = n.min(i64::MAX as u64) as i128;
    let place = |(b, symbolic): (i64, bool)| match b {
        i64::MAX if !symbolic => ni,
        b if b < 0 && !symbolic => ni + b as i128,
        b => b as i128,
    };
    let (first, stop) = (place(start), place(end));
    let step = step as i128;
    let len = (stop - first + step - 1).div_euclid(step);
    // Empty: exactly (the shape rule's length is 0 too), or with constant bounds counted
    // from the same side, whose length does not depend on the dim: the shape rule makes them
    // statically empty when they cross.
    let from_end = |(b, symbolic): (i64, bool)| !symbolic && (b == i64::MAX || b < 0);
    if len == 0 || (len < 0 && !start.1 && !end.1 && from_end(start) == from_end(end)) {
        return Ok((0, 0));
    }
    if len < 0 || !(0..=ni).contains(&first) || !(0..=ni).contains(&stop) {
        return Err(format!(
            "slice {}:{}:{step} of a dim of size {n} is shorter than the graph assumes \
             (the symbolic dim is too small, or a symbolic bound is out of range)",
            start.0, end.0
        ));
    }
    Ok((first as u64, len as u64))
}

/// Where a slice lies along its axis: its first index and its number of elements.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SliceRange {
    pub first: Dim,
    pub len: Dim,
}

/// The range `start:end:step` selects on a dim of size `n` (the rule `slice`, `slice_scatter`
/// and `slice_assign_` share). Constant bounds on a static dim follow Python: a negative
/// bound counts from the end and an out-of-range one is clamped. Otherwise nothing is
/// clamped: `i64::MAX` is the end, a negative constant counts from the end, and anything
/// else (a constant, or a size expression) counts from the front; the slice is assumed to lie inside the dim, and a run where it does not is an
/// error (the interpreter's `slice` checks it; compiled kernels check every access against
/// its buffer).
pub(crate) fn slice_range(n: &Dim, start: &SizeExpr, end: &SizeExpr, step: i64) -> Result<SliceRange, OpError> {
    if step < 1 {
        return Err(attr_err("step", format!("must be at least 1, got {step}")));
    }
    if let (Some(n), Some(s), Some(e)) = (n.as_const(), start.as_const(), end.as_const()) {
        let (first, len) = slice_bounds(n, s, e, step);
        return Ok(SliceRange { first: Dim::new(if len == 0 { 0 } else { first }), len: Dim::new(len) });
    }
    let place = |b: &SizeExpr| -> Result<SizeExpr, OpError> {
        match b.as_const() {
            Some(i64::MAX) => Ok(SizeExpr::from_dim(n)?),
            Some(c) if c < 0 => Ok(SizeExpr::from_dim(n)?.add(b)?),
            // A non-negative constant, or a size expression: counted from the front (a size
            // expression that is negative at run time is out of range).
            _ => Ok(b.clone()),
        }
    };
    let (first, stop) = (place(start)?, place(end)?);
    let len = stop.sub(&first)?.add(&SizeExpr::constant(step - 1))?.floor_div(step as u64)?;
    if len.as_const().is_some_and(|l| l <= 0) {
        // Statically empty, as in Python.
        return Ok(SliceRange { first: Dim::new(0), len: Dim::new(0) });
    }
    let static_needed = || {
        OpError::Shape(format!(
            "slice {start}:{end}:{step} of a dim of size {n} needs a static size (its start {first} or its length {len} \
             may be negative)"
        ))
    };
    // The dim is assumed large enough for the slice: its length may fall below zero only
    // through its constant term (`seq - 3`), never decrease as the symbols grow (`5 - seq`).
    let growing = len.sub(&SizeExpr::constant(len.constant_term()))?;
    if growing.to_dim().ok().and_then(|d| d.lower_bound()).is_none_or(|l| l < 0) {
        return Err(static_needed());
    }
    let first = first.to_dim().map_err(|_| static_needed())?;
    let len = len.to_dim().map_err(|_| static_needed())?;
    Ok(SliceRange { first, len })
}

/// The size of `slice` along its axis (see [`slice_range`]).
pub(crate) fn slice_dim(d: &Dim, start: &SizeExpr, end: &SizeExpr, step: i64) -> Result<Dim, OpError> {
    Ok(slice_range(d, start, end, step)?.len)
}

/// Per-axis (low, high, interior) of `pad`, checked against the rank.
fn pad_config(attrs: &Attrs, rank: usize) -> Result<Vec<(i64, i64, i64)>, OpError> {
    let (low, high, interior) = (attrs.ints("low"), attrs.ints("high"), attrs.ints("interior"));
    for (name, list) in [("low", low), ("high", high)] {
        if list.len() != rank {
            return Err(attr_err(name, format!("has {} entries but the argument has rank {rank}", list.len())));
        }
    }
    if !interior.is_empty() && interior.len() != rank {
        return Err(attr_err("interior", format!("has {} entries but the argument has rank {rank}", interior.len())));
    }
    if let Some(&i) = interior.iter().find(|&&i| i < 0) {
        return Err(attr_err("interior", format!("entries must be >= 0, got {i}")));
    }
    Ok((0..rank).map(|i| (low[i], high[i], interior.get(i).copied().unwrap_or(0))).collect())
}

/// Padded size of a static dim, or `None` when it would be negative.
fn padded_size(n: u64, (low, high, interior): (i64, i64, i64)) -> Option<u64> {
    let n = i128::from(n);
    let size = n + (n - 1).max(0) * i128::from(interior) + i128::from(low) + i128::from(high);
    u64::try_from(size).ok()
}

fn infer_pad(attrs: &Attrs, x: &Shape) -> Result<Shape, OpError> {
    let cfg = pad_config(attrs, x.rank())?;
    let mut out = Vec::with_capacity(x.rank());
    for (axis, (d, &c)) in x.0.iter().zip(&cfg).enumerate() {
        let (low, high, interior) = c;
        let dim = match d.as_const() {
            Some(n) => Dim::new(padded_size(n, c).ok_or_else(|| {
                OpError::Shape(format!("padding axis {axis} (size {n}) by {low}, {high} leaves a negative size"))
            })?),
            None => {
                if interior != 0 {
                    static_dim(d, axis, "interior padding")?;
                }
                let add = |a: &Dim, v: i64| {
                    if v >= 0 {
                        a.add(&Dim::new(v as u64))
                    } else {
                        a.sub(&Dim::new(v.unsigned_abs()))
                    }
                };
                add(&add(d, low)?, high)?
            }
        };
        out.push(dim);
    }
    Ok(out.into_iter().collect())
}

/// `cat` and `stack`: equal ranks, equal shapes off the axis (all of them for stack), promoted dtype.
fn infer_join(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let first = &args[0].shape;
    let rank = first.rank();
    let axis = if kind == OpKind::Stack {
        normalize_insert_axis(attrs.int("axis"), rank)?
    } else {
        normalize_axis(attrs.int("axis"), rank)?
    };
    let mut total = Dim::new(0);
    for (i, a) in args.iter().enumerate() {
        if a.rank() != rank {
            return Err(OpError::Rank { arg: i, expected: rank.to_string(), got: a.rank() });
        }
        for (j, (d, f)) in a.shape.0.iter().zip(&first.0).enumerate() {
            if d != f && (kind == OpKind::Stack || j != axis) {
                return Err(OpError::Shape(format!(
                    "argument {i} has shape {}, argument 0 has {first}: they differ at axis {j}",
                    a.shape
                )));
            }
        }
        if kind == OpKind::Cat {
            total = total.add(&a.shape.0[axis])?;
        }
    }
    let mut dims = first.0.clone();
    if kind == OpKind::Cat {
        dims[axis] = total;
    } else {
        dims.insert(axis, Dim::new(args.len() as u64));
    }
    Ok(TensorType::new(promote_all(args), Shape(dims)))
}

/// `flatten`'s inclusive axis range (rank 0 counts as rank 1).
fn flatten_range(attrs: &Attrs, rank: usize) -> Result<(usize, usize), OpError> {
    let r = rank.max(1);
    let (start, end) = (normalize_axis(attrs.int("start"), r)?, normalize_axis(attrs.int("end"), r)?);
    if start > end {
        return Err(attr_err("start", format!("start axis {start} comes after end axis {end}")));
    }
    Ok((start, end))
}

fn infer_expand(target: &[Option<Dim>], x: &Shape) -> Result<Shape, OpError> {
    if target.len() < x.rank() {
        return Err(attr_err(
            "shape",
            format!("has {} entries, fewer than the argument's rank {}", target.len(), x.rank()),
        ));
    }
    let lead = target.len() - x.rank();
    let mut out = Vec::with_capacity(target.len());
    for (i, t) in target.iter().enumerate() {
        let dim = match (i.checked_sub(lead).map(|j| &x.0[j]), t) {
            (None, None) => return Err(attr_err("shape", format!("-1 at new leading dim {i}"))),
            (None, Some(t)) => t.clone(),
            (Some(d), None) => d.clone(),
            (Some(d), Some(t)) if d == t => t.clone(),
            (Some(d), Some(t)) if d.as_const() == Some(1) => t.clone(),
            (Some(d), Some(t)) => {
                return Err(OpError::Shape(format!("cannot expand {x}: dim {} has size {d}, not 1 or {t}", i - lead)))
            }
        };
        out.push(dim);
    }
    Ok(out.into_iter().collect())
}

/// The axes `squeeze` drops, sorted.
fn squeeze_axes(axes: &[i64], x: &Shape) -> Result<Vec<usize>, OpError> {
    if axes.is_empty() {
        return Ok((0..x.rank()).filter(|&i| x.0[i].as_const() == Some(1)).collect());
    }
    let axes = normalize_axes(axes, x.rank(), false)?;
    for &a in &axes {
        if x.0[a].as_const() != Some(1) {
            return Err(OpError::Shape(format!("cannot squeeze axis {a} of {x}: its size is not statically 1")));
        }
    }
    Ok(axes)
}

/// A Python-style index in `-n..n` as an index in `0..n`.
fn normalize_index(index: i64, n: u64) -> Option<u64> {
    let n = i128::from(n);
    let i = i128::from(index);
    let i = if i < 0 { i + n } else { i };
    (0..n).contains(&i).then_some(i as u64)
}

/// The piece `split`/`chunk` returns along an axis of size `dim`: (start, size).
pub(crate) fn piece(kind: OpKind, attrs: &Attrs, dim: &Dim, axis: usize) -> Result<(u64, u64), OpError> {
    let name = kind.name();
    let n = static_dim(dim, axis, name)?;
    let index = attrs.int("index");
    let missing = |count: u64| attr_err("index", format!("piece {index} does not exist: {name} gives {count} pieces"));
    if kind == OpKind::Split {
        let sizes = attrs.ints("sizes");
        if let Some(&s) = sizes.iter().find(|&&s| s < 0) {
            return Err(attr_err("sizes", format!("sizes must be >= 0, got {s}")));
        }
        let sizes: Vec<u64> = sizes.iter().map(|&s| s as u64).collect();
        let total = sizes.iter().try_fold(0u64, |acc, &s| acc.checked_add(s));
        if total != Some(n) {
            return Err(attr_err("sizes", format!("{sizes:?} do not add up to the size {n} of axis {axis}")));
        }
        let k = normalize_index(index, sizes.len() as u64).ok_or_else(|| missing(sizes.len() as u64))? as usize;
        return Ok((sizes[..k].iter().sum(), sizes[k]));
    }
    let chunks = attrs.int("chunks");
    if chunks < 1 {
        return Err(attr_err("chunks", format!("must be at least 1, got {chunks}")));
    }
    let chunks = chunks as u64;
    // Pieces of `size` (the last one shorter); a 0 dim gives `chunks` empty pieces.
    let (size, count) = if n == 0 {
        (0, chunks)
    } else {
        let size = n.div_ceil(chunks);
        (size, n.div_ceil(size))
    };
    let k = normalize_index(index, count).ok_or_else(|| missing(count))?;
    let start = k * size;
    Ok((start, size.min(n - start)))
}

// ---------------------------------------------------------------------------------------------
// Meaning
// ---------------------------------------------------------------------------------------------

fn eval_shape_op(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let invalid = |e: OpError| EvalError::Invalid(e.to_string());
    match kind {
        OpKind::BroadcastInDim => {
            let x = &args[0];
            let shape = out_dims(ctx, out)?;
            let bdims: Vec<usize> = attrs
                .ints("broadcast_dims")
                .iter()
                .map(|&b| normalize_axis(b, shape.len()))
                .collect::<Result<_, _>>()
                .map_err(invalid)?;
            if bdims.len() != x.rank() {
                return Err(EvalError::Invalid(format!("broadcast_dims {bdims:?} do not fit {:?}", x.shape())));
            }
            let mut strides = vec![0isize; shape.len()];
            for (i, &o) in bdims.iter().enumerate() {
                let d = x.shape()[i];
                if d == shape[o] {
                    strides[o] = x.strides()[i];
                } else if d != 1 {
                    return Err(EvalError::Invalid(format!("cannot broadcast {:?} to {shape:?}", x.shape())));
                }
            }
            Ok(x.restride(shape, strides, x.offset()))
        }
        OpKind::Reshape | OpKind::View | OpKind::Flatten => {
            let x = &args[0];
            let shape = out_dims(ctx, out)?;
            if shape.iter().product::<usize>() != x.numel() {
                return Err(EvalError::Invalid(format!("cannot reshape {:?} into {shape:?}", x.shape())));
            }
            if kind != OpKind::View {
                let c = x.copy();
                let strides = contiguous_strides(&shape);
                return Ok(c.restride(shape, strides, 0));
            }
            match view_strides(x.shape(), x.strides(), &shape) {
                Some(strides) => Ok(x.restride(shape, strides, x.offset())),
                None => Err(EvalError::NotViewable {
                    shape: x.shape().to_vec(),
                    strides: x.strides().to_vec(),
                    target: shape,
                }),
            }
        }
        OpKind::Permute | OpKind::Transpose => {
            let x = &args[0];
            let perm = if kind == OpKind::Permute {
                normalize_perm(attrs.ints("perm"), x.rank()).map_err(invalid)?
            } else {
                let a = normalize_axis(attrs.int("axis0"), x.rank()).map_err(invalid)?;
                let b = normalize_axis(attrs.int("axis1"), x.rank()).map_err(invalid)?;
                let mut p: Vec<usize> = (0..x.rank()).collect();
                p.swap(a, b);
                p
            };
            let shape = perm.iter().map(|&p| x.shape()[p]).collect();
            let strides = perm.iter().map(|&p| x.strides()[p]).collect();
            Ok(x.restride(shape, strides, x.offset()))
        }
        OpKind::Slice => {
            let x = &args[0];
            let axis = normalize_axis(attrs.int("axis"), x.rank()).map_err(invalid)?;
            let step = attrs.int("step");
            if step < 1 {
                return Err(EvalError::Invalid(format!("slice step must be at least 1, got {step}")));
            }
            let (start, end) = (attrs.size("start"), attrs.size("end"));
            let assumed = start.as_const().is_none()
                || end.as_const().is_none()
                || out.shape.dims().get(axis).is_some_and(|d| !d.is_static());
            let start = (ctx.size(&start)?, start.as_const().is_none());
            let end = (ctx.size(&end)?, end.as_const().is_none());
            let (first, size) =
                slice_concrete(x.shape()[axis] as u64, start, end, step, assumed).map_err(EvalError::Invalid)?;
            if let Some(expected) = ctx.out_shape.as_ref().and_then(|s| s.get(axis)) {
                if *expected as u64 != size {
                    return Err(EvalError::Invalid(format!(
                        "slice {}:{}:{step} of a dim of size {} has {size} elements, but the graph assumed {expected} \
                         (the symbolic dim is too small)",
                        start.0,
                        end.0,
                        x.shape()[axis]
                    )));
                }
            }
            sub_view(x, axis, first as usize, size as usize, step as isize)
        }
        OpKind::Select => {
            let x = &args[0];
            let axis = normalize_axis(attrs.int("axis"), x.rank()).map_err(invalid)?;
            let index = attrs.int("index");
            let size = x.shape()[axis];
            let i = normalize_index(index, size as u64).ok_or(EvalError::IndexOutOfRange { index, size })?;
            let v = sub_view(x, axis, i as usize, 1, 1)?;
            let mut shape = v.shape().to_vec();
            let mut strides = v.strides().to_vec();
            shape.remove(axis);
            strides.remove(axis);
            Ok(v.restride(shape, strides, v.offset()))
        }
        OpKind::Split | OpKind::Chunk => {
            let x = &args[0];
            let axis = normalize_axis(attrs.int("axis"), x.rank()).map_err(invalid)?;
            let (start, size) = piece(kind, attrs, &Dim::new(x.shape()[axis] as u64), axis).map_err(invalid)?;
            sub_view(x, axis, start as usize, size as usize, 1)
        }
        OpKind::Expand => broadcast_view(&args[0], &out_dims(ctx, out)?),
        OpKind::Squeeze | OpKind::Unsqueeze => {
            // Only size-1 dims come or go, so a view always exists.
            let x = &args[0];
            let shape = out_dims(ctx, out)?;
            let strides = view_strides(x.shape(), x.strides(), &shape)
                .ok_or_else(|| EvalError::Invalid(format!("cannot view {:?} as {shape:?}", x.shape())))?;
            Ok(x.restride(shape, strides, x.offset()))
        }
        OpKind::Contiguous => Ok(args[0].copy()),
        OpKind::Iota => {
            let shape = out_dims(ctx, out)?;
            let axis = normalize_axis(attrs.int("axis"), shape.len()).map_err(invalid)?;
            let n: usize = shape.iter().product();
            let idx: Vec<usize> = (0..n).map(|f| unravel(f, &shape)[axis]).collect();
            if out.dtype.is_float() {
                Ok(View::from_floats(ctx, out.dtype, shape, idx.into_iter().map(|i| i as f64).collect()))
            } else {
                Ok(View::from_ints(out.dtype, shape, idx.into_iter().map(|i| i as i64).collect()))
            }
        }
        OpKind::Full => {
            let shape = out_dims(ctx, out)?;
            let n = shape.iter().product();
            Ok(View::from_f64_as(ctx, out.dtype, shape, vec![attrs.float("value"); n]))
        }
        OpKind::DimValues => {
            let lookup = |s: &str| ctx.symbols.get(s).copied();
            let mut values = Vec::new();
            for d in attrs.dims("dims").iter().flatten() {
                let v = d.eval(&lookup).map_err(|e| EvalError::Invalid(format!("dim_values: size `{d}`: {e}")))?;
                values.push(i64::try_from(v).map_err(|_| EvalError::Invalid(format!("dim_values: {v} overflows")))?);
            }
            let shape = vec![values.len()];
            if out.dtype.is_float() {
                Ok(View::from_floats(ctx, out.dtype, shape, values.into_iter().map(|v| v as f64).collect()))
            } else {
                Ok(View::from_ints(out.dtype, shape, values))
            }
        }
        OpKind::Cat | OpKind::Stack => {
            let rank = args[0].rank();
            let axis = if kind == OpKind::Stack {
                normalize_insert_axis(attrs.int("axis"), rank)
            } else {
                normalize_axis(attrs.int("axis"), rank)
            }
            .map_err(invalid)?;
            // Both copy, for each index of the dims before `axis`, one block from every argument
            // in turn: a block is the argument's dims from `axis` on (for cat, with its own size).
            let outer: usize = args[0].shape()[..axis].iter().product();
            let blocks: Vec<usize> = args.iter().map(|a| a.shape()[axis..].iter().product()).collect();
            let shape = out_dims(ctx, out)?;
            let mut plan = Plan::with_capacity(shape.iter().product());
            for o in 0..outer {
                for (k, &b) in blocks.iter().enumerate() {
                    plan.extend((o * b..(o + 1) * b).map(|i| Some((k, i))));
                }
            }
            Ok(copy_op(ctx, out.dtype, shape, args, 0.0, &plan))
        }
        OpKind::Rev => {
            let x = &args[0];
            let axes = normalize_axes(attrs.ints("axes"), x.rank(), false).map_err(invalid)?;
            let shape = x.shape().to_vec();
            let n = x.numel();
            let plan: Plan = (0..n)
                .map(|f| {
                    let mut idx = unravel(f, &shape);
                    for &a in &axes {
                        idx[a] = shape[a] - 1 - idx[a];
                    }
                    Some((0, ravel(&idx, &shape)))
                })
                .collect();
            Ok(copy_op(ctx, out.dtype, shape, args, 0.0, &plan))
        }
        OpKind::Pad => {
            let x = &args[0];
            let cfg = pad_config(attrs, x.rank()).map_err(invalid)?;
            let in_shape = x.shape().to_vec();
            let mut shape = Vec::with_capacity(in_shape.len());
            for (&d, &c) in in_shape.iter().zip(&cfg) {
                let size = padded_size(d as u64, c)
                    .ok_or_else(|| EvalError::Invalid(format!("padding {in_shape:?} leaves a negative size")))?;
                shape.push(size as usize);
            }
            // Every argument element lands at low + i * (interior + 1) on each axis, unless
            // that is cropped away.
            let mut plan: Plan = vec![None; shape.iter().product()];
            'element: for f in 0..x.numel() {
                let idx = unravel(f, &in_shape);
                let mut o = Vec::with_capacity(idx.len());
                for ((&i, &(low, _, interior)), &size) in idx.iter().zip(&cfg).zip(&shape) {
                    let p = i128::from(low) + i as i128 * (i128::from(interior) + 1);
                    if p < 0 || p >= size as i128 {
                        continue 'element;
                    }
                    o.push(p as usize);
                }
                plan[ravel(&o, &shape)] = Some((0, f));
            }
            Ok(copy_op(ctx, out.dtype, shape, args, attrs.float("value"), &plan))
        }
        _ => unreachable!("{kind:?} is not a shape op"),
    }
}

/// The concrete result shape: static from the type, else as bound by the run loop.
fn out_dims(ctx: &EvalCtx, out: &TensorType) -> Result<Vec<usize>, EvalError> {
    if let Some(dims) = out.shape.as_static() {
        return Ok(dims.into_iter().map(|d| d as usize).collect());
    }
    match &ctx.out_shape {
        Some(s) if s.len() == out.rank() => Ok(s.clone()),
        _ => Err(EvalError::Invalid(format!("result shape {} has unbound symbols", out.shape))),
    }
}

/// `size` elements along `axis` starting at `start`, every `step`-th.
fn sub_view(x: &View, axis: usize, start: usize, size: usize, step: isize) -> Result<View, EvalError> {
    let stride = x.strides()[axis];
    let offset = if size == 0 {
        Some(x.offset() as isize)
    } else {
        (start as isize).checked_mul(stride).and_then(|d| d.checked_add(x.offset() as isize))
    };
    let offset = offset
        .and_then(|o| usize::try_from(o).ok())
        .ok_or_else(|| EvalError::Invalid("view offset out of range".into()))?;
    let mut shape = x.shape().to_vec();
    let mut strides = x.strides().to_vec();
    shape[axis] = size;
    strides[axis] = stride.saturating_mul(step);
    Ok(x.restride(shape, strides, offset))
}

/// Strides that view a tensor of `shape`/`strides` as `target` (same element count) without
/// copying, or `None` when no such strides exist. PyTorch's `computeStride`: each run of
/// dims that is contiguous with itself may be split or merged freely.
fn view_strides(shape: &[usize], strides: &[isize], target: &[usize]) -> Option<Vec<isize>> {
    if shape.iter().product::<usize>() <= 1 {
        // No element, or one: any strides address it.
        return Some(contiguous_strides(target));
    }
    let mut out = vec![0isize; target.len()];
    let mut view_d = target.len();
    let mut chunk_base = *strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..shape.len()).rev() {
        tensor_numel *= shape[d];
        let chunk_ends =
            d == 0 || (shape[d - 1] != 1 && strides[d - 1] != (tensor_numel as isize).wrapping_mul(chunk_base));
        if chunk_ends {
            while view_d > 0 && (view_numel < tensor_numel || target[view_d - 1] == 1) {
                view_d -= 1;
                out[view_d] = (view_numel as isize).wrapping_mul(chunk_base);
                view_numel *= target[view_d];
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == 0).then_some(out)
}

/// Where each element of a copying op's result comes from: `Some((argument, flat index))`,
/// or `None` for the fill value.
type Plan = Vec<Option<(usize, usize)>>;

/// Runs a copying op: reads the arguments in the result dtype's class (floats, integers or
/// bools, so promotion converts as `convert_element_type` does) and gathers them per `plan`;
/// `fill` converts like `convert_element_type`.
fn copy_op(ctx: &EvalCtx, dtype: DType, shape: Vec<usize>, args: &[View], fill: f64, plan: &Plan) -> View {
    fn gather<T: Copy>(parts: &[Vec<T>], plan: &Plan, fill: T) -> Vec<T> {
        plan.iter().map(|src| src.map_or(fill, |(k, i)| parts[k][i])).collect()
    }
    if dtype.is_float() {
        let parts: Vec<Vec<f64>> = args.iter().map(View::floats).collect();
        View::from_floats(ctx, dtype, shape, gather(&parts, plan, fill))
    } else if dtype.is_int() {
        let parts: Vec<Vec<i64>> = args.iter().map(View::ints).collect();
        View::from_ints(dtype, shape, gather(&parts, plan, crate::interp::float_to_int_as(dtype, fill)))
    } else {
        let parts: Vec<Vec<bool>> = args.iter().map(View::bools).collect();
        View::from_bools(shape, gather(&parts, plan, fill != 0.0))
    }
}
