//! ONNX indexing, scans and assorted math, as compositions of ladder ops.
//!
//! Mapping choices:
//! - `CumSum` (the axis known at import) is ladder's `cumsum` (whose decomposition and
//!   tolerance are `crate::decomp`'s); `exclusive` shifts the input by one first, `reverse`
//!   is `rev` around the scan. `CumProd`, which has no ladder op, is the same scan written
//!   here: on a static axis a log-step scan (Hillis–Steele: `y = y ⊗ shift(y, 2^k)` for
//!   `2^k < n`, the shift a `slice` + `pad` with 1); on a symbolic axis a triangular mask
//!   (`where(j <= i, x[j], 1)` reduced over `j`, in the sequential order). Integers are exact
//!   (wrapping, like the reference); floats are multiplied in a tree of depth `ceil(log2 n)`
//!   on a static axis.
//! - `TopK` (static axis, `k` known at import) ranks every element against every other along
//!   the axis (`n²` comparisons per row, capped by [`DENSE_LIMIT`]): element `j` beats `i` when
//!   it is larger (smaller), or equal with a lower index; NaN is larger than every number and
//!   equal to NaN (NumPy's sort order, as the ONNX reference), `-0 == +0`. The `k` best ranks
//!   are picked as indices, the values gathered. The result is always sorted.
//! - `ScatterElements`/`Scatter`/`ScatterND`: `add` is `scatter_add`. `none` is a copy: each
//!   target's source position is found with `scatter_add` (a count and a position sum) and
//!   gathered from `cat(x, updates)`; a target written twice (ONNX leaves the result
//!   undefined) gets the index `i64::MIN`, so the run fails with `IndexOutOfRange` rather
//!   than picking one. `mul`/`max`/`min` compare every index with every target position along
//!   the axis (static sizes, capped by [`DENSE_LIMIT`]) and reduce the matching updates, then
//!   combine with `x`; `max`/`min` are exact, `mul` multiplies the updates together before
//!   `x` (a different rounding order than the reference's). Out-of-range indices fail at run
//!   time in every mode. `ScatterND`/`GatherND` flatten the indexed dims (static) into one
//!   axis; an index tuple with an out-of-range component becomes `i64::MIN` and fails.
//! - `ReverseSequence` gathers along the time axis at `t < len ? len - 1 - t : t`.
//! - `Compress` needs a constant condition (a `gather` of the kept positions).
//! - `Det` (n <= 4, static) is the Leibniz expansion: a gather of the `n!` permutation
//!   products, `prod`, signs, `sum`.
//! - `Asinh`, `Acosh`, `Atanh` are logarithms (`log1p` where it keeps small arguments
//!   accurate, `log(2|x|)` past `2^(p/2+1)` where squaring would overflow); `Atan` is ladder's `atan`, `Asin(x) = atan(x / sqrt((1-x)(1+x)))`,
//!   `Acos(x) = 2 atan(sqrt((1-x)/(1+x)))`. `Swish` is `x * sigmoid(alpha x)`.
//! - `Pad` with a run-time `constant_value`: pad with 0, then `where` over a padded mask.
//! - `BatchNormalization` in training mode normalises with the batch's mean and (population)
//!   variance and returns the momentum-updated running statistics.

use super::build::{
    bin, bin_scalar, convert as cast, dim_err, dims_attr, dtype, int, ints, invalid, norm_axis, one, reshape, shape,
    unsupported, Outs,
};
use super::import::{a_float, a_int, attr, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;
use crate::tensor::Tensor;

/// Most elements an `n²`-style composition (TopK's ranking, dense scatter reductions) may
/// build for one node.
pub const DENSE_LIMIT: u64 = 1 << 24;

fn un(imp: &mut Importer, op: K, v: Value) -> NResult<Value> {
    imp.emit(op, &[v], &[])
}

fn select(imp: &mut Importer, c: Value, a: Value, b: Value) -> NResult<Value> {
    imp.emit(K::Where, &[c, a, b], &[])
}

fn expand(imp: &mut Importer, v: Value, d: &[Dim]) -> NResult<Value> {
    if shape(imp, v) == d {
        return Ok(v);
    }
    imp.emit(K::Expand, &[v], &[("shape", dims_attr(d))])
}

fn permute(imp: &mut Importer, v: Value, perm: &[usize]) -> NResult<Value> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(v);
    }
    let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    imp.emit(K::Permute, &[v], &[("perm", ints(&p))])
}

fn iota(imp: &mut Importer, d: &[Dim], axis: usize, dt: DType) -> NResult<Value> {
    imp.emit(K::Iota, &[], &[("shape", dims_attr(d)), ("axis", int(axis as i64)), ("dtype", AttrValue::DType(dt))])
}

fn full(imp: &mut Importer, d: &[Dim], value: f64, dt: DType) -> NResult<Value> {
    imp.emit(
        K::Full,
        &[],
        &[("shape", dims_attr(d)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dt))],
    )
}

fn slice(imp: &mut Importer, v: Value, axis: usize, start: i64, end: i64) -> NResult<Value> {
    imp.emit(K::Slice, &[v], &[("axis", int(axis as i64)), ("start", int(start)), ("end", int(end))])
}

fn rev(imp: &mut Importer, v: Value, axis: usize) -> NResult<Value> {
    imp.emit(K::Rev, &[v], &[("axes", ints(&[axis as i64]))])
}

/// `v` padded by `low` before and `high` after along `axis` with `value`.
fn pad_axis(imp: &mut Importer, v: Value, axis: usize, low: i64, high: i64, value: f64) -> NResult<Value> {
    let r = shape(imp, v).len();
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    lo[axis] = low;
    hi[axis] = high;
    imp.emit(K::Pad, &[v], &[("low", ints(&lo)), ("high", ints(&hi)), ("value", AttrValue::Float(value))])
}

/// A reduction over `axes`, keeping them or not; sums and products of integers come back
/// in the input's dtype (ladder's `sum`/`prod` give i64).
fn reduce(imp: &mut Importer, op: K, v: Value, axes: &[usize], keep: bool) -> NResult<Value> {
    let dt = dtype(imp, v);
    let a: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let r = imp.emit(op, &[v], &[("axes", ints(&a)), ("keepdim", AttrValue::Bool(keep))])?;
    if matches!(op, K::Sum | K::Prod) && !dt.is_bool() {
        return cast(imp, r, dt);
    }
    Ok(r)
}

fn static_of(d: &[Dim], what: &str) -> NResult<Vec<u64>> {
    d.iter()
        .map(|x| x.as_const().ok_or_else(|| NodeError::Unsupported(format!("{what} on the symbolic dim {x}"))))
        .collect()
}

fn numel(d: &[Dim]) -> NResult<Dim> {
    d.iter().try_fold(Dim::new(1), |a, x| a.mul(x)).map_err(dim_err)
}

/// Checks that an `n²`-style composition of `elems` elements fits [`DENSE_LIMIT`].
fn dense_fits(elems: &[u64], what: &str) -> NResult<()> {
    let n = elems.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
    match n {
        Some(n) if n <= DENSE_LIMIT => Ok(()),
        _ => unsupported(format!(
            "{what} needs {} intermediate elements (more than {DENSE_LIMIT})",
            n.map_or_else(|| "too many".to_string(), |n| n.to_string())
        )),
    }
}

/// The smallest and largest value of `dt`, as an identity for max / min.
fn lowest(dt: DType) -> f64 {
    match dt {
        DType::I32 => f64::from(i32::MIN),
        DType::I64 => i64::MIN as f64,
        DType::Bool => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

fn highest(dt: DType) -> f64 {
    match dt {
        DType::I32 => f64::from(i32::MAX),
        DType::I64 => i64::MAX as f64,
        DType::Bool => 1.0,
        _ => f64::INFINITY,
    }
}

/// The indexing, scan and math ops of this file, by ONNX name.
pub(super) const INDEX: &[Row] = &[
    ("Acos", |imp, node, _| inverse_trig_node(imp, node)),
    ("Acosh", |imp, node, _| inverse_trig_node(imp, node)),
    ("Asin", |imp, node, _| inverse_trig_node(imp, node)),
    ("Asinh", |imp, node, _| inverse_trig_node(imp, node)),
    ("Atan", |imp, node, _| inverse_trig_node(imp, node)),
    ("Atanh", |imp, node, _| inverse_trig_node(imp, node)),
    ("Compress", |imp, node, _| compress(imp, node)),
    ("CumProd", |imp, node, _| cumulative(imp, node)),
    ("CumSum", |imp, node, _| cumulative(imp, node)),
    ("Det", |imp, node, _| det(imp, node)),
    ("GatherND", |imp, node, _| gather_nd(imp, node)),
    ("ReverseSequence", |imp, node, _| reverse_sequence(imp, node)),
    ("Scatter", |imp, node, _| scatter_elements(imp, node)),
    ("ScatterElements", |imp, node, _| scatter_elements(imp, node)),
    ("ScatterND", |imp, node, _| scatter_nd(imp, node)),
    ("Swish", |imp, node, _| swish(imp, node)),
    ("TopK", |imp, node, _| top_k(imp, node)),
];

// --- Scans ---

fn cumulative(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let d = shape(imp, x);
    let axis =
        imp.ints_input(node, 1, "axis")?.ok_or_else(|| NodeError::Invalid("the axis (input 1) is required".into()))?;
    let [axis] = axis[..] else { return invalid("the axis must hold one value") };
    let axis = norm_axis(axis, d.len())?;
    let dt = dtype(imp, x);
    if dt.is_bool() {
        return invalid(format!("{} of a bool tensor", node.op_type));
    }
    let (op, ident) = if node.op_type == "CumSum" { (K::Add, 0.0) } else { (K::Mul, 1.0) };
    let exclusive = a_int(node, "exclusive", 0) != 0;
    let reverse = a_int(node, "reverse", 0) != 0;
    if d[axis].as_const() == Some(0) {
        return one(x);
    }
    let mut y = if reverse { rev(imp, x, axis)? } else { x };
    if exclusive {
        let s = slice(imp, y, axis, 0, -1)?;
        y = pad_axis(imp, s, axis, 1, 0, ident)?;
    }
    if node.op_type == "CumSum" {
        y = imp.emit(K::Cumsum, &[y], &[("axis", AttrValue::Int(axis as i64))])?;
        return one(if reverse { rev(imp, y, axis)? } else { y });
    }
    y = match d[axis].as_const() {
        Some(n) => {
            let n = n as i64;
            let mut s = 1i64;
            while s < n {
                let part = slice(imp, y, axis, 0, n - s)?;
                let shifted = pad_axis(imp, part, axis, s, 0, ident)?;
                y = bin(imp, op, y, shifted)?;
                s = s.saturating_mul(2);
            }
            y
        }
        None => {
            // out[i] = reduce over j <= i of y[j]: y with an i axis inserted before the axis.
            let n = d[axis].clone();
            let mut wide = d.clone();
            wide.insert(axis, Dim::new(1));
            let yj = reshape(imp, y, &wide)?;
            let mut tri = vec![Dim::new(1); d.len() + 1];
            tri[axis] = n.clone();
            tri[axis + 1] = n;
            let i = iota(imp, &tri, axis, DType::I64)?;
            let j = iota(imp, &tri, axis + 1, DType::I64)?;
            let keep = bin(imp, K::Le, j, i)?;
            let id = imp.scalar(dt, ident)?;
            let m = select(imp, keep, yj, id)?;
            reduce(imp, if op == K::Add { K::Sum } else { K::Prod }, m, &[axis + 1], false)?
        }
    };
    one(if reverse { rev(imp, y, axis)? } else { y })
}

// --- TopK ---

fn top_k(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let d = shape(imp, x);
    if d.is_empty() {
        return invalid("TopK needs an input of rank >= 1");
    }
    let axis = norm_axis(a_int(node, "axis", -1), d.len())?;
    let k = if imp.opset < 10 {
        attr(node, "k").map(|a| a.i).ok_or_else(|| NodeError::Invalid("attribute `k` is required".into()))?
    } else {
        let k = imp.ints_input(node, 1, "k")?.ok_or_else(|| NodeError::Invalid("k (input 1) is required".into()))?;
        let [k] = k[..] else { return invalid("k must hold one value") };
        k
    };
    let largest = a_int(node, "largest", 1) != 0;
    let dt = dtype(imp, x);
    if dt.is_bool() {
        return invalid("TopK of a bool tensor");
    }
    let sd = static_of(&d, "TopK")?;
    let n = sd[axis];
    if k < 0 || k as u64 > n {
        return invalid(format!("k = {k} is outside [0, {n}] (the axis size)"));
    }
    let k = k as u64;
    let rows: u64 = sd.iter().product::<u64>() / n.max(1);
    dense_fits(&[rows, n, n], "TopK's ranking")?;
    // Move the axis last: xt [.., n].
    let r = d.len();
    let mut perm: Vec<usize> = (0..r).filter(|&a| a != axis).collect();
    perm.push(axis);
    let mut inv = vec![0usize; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let xt = permute(imp, x, &perm)?;
    let td = shape(imp, xt);
    let lead = &td[..r - 1];
    let with = |extra: &[Dim]| -> Vec<Dim> { lead.iter().cloned().chain(extra.iter().cloned()).collect() };
    let nd = Dim::new(n);
    let xi = reshape(imp, xt, &with(&[nd.clone(), Dim::new(1)]))?;
    let xj = reshape(imp, xt, &with(&[Dim::new(1), nd.clone()]))?;
    let mut better = bin(imp, if largest { K::Gt } else { K::Lt }, xj, xi)?;
    let mut equal = bin(imp, K::Eq, xj, xi)?;
    if dt.is_float() {
        // NaN sorts above every number and equals NaN.
        let nj = un(imp, K::IsNan, xj)?;
        let ni = un(imp, K::IsNan, xi)?;
        let (a, b) = if largest { (nj, ni) } else { (ni, nj) };
        let not_b = un(imp, K::LogicalNot, b)?;
        let nan_better = bin(imp, K::And, a, not_b)?;
        better = bin(imp, K::Or, better, nan_better)?;
        let both = bin(imp, K::And, nj, ni)?;
        equal = bin(imp, K::Or, equal, both)?;
    }
    let sq = [nd.clone(), nd.clone()];
    let ii = iota(imp, &sq, 0, DType::I64)?;
    let jj = iota(imp, &sq, 1, DType::I64)?;
    let earlier = bin(imp, K::Lt, jj, ii)?;
    let tie = bin(imp, K::And, equal, earlier)?;
    let beats = bin(imp, K::Or, better, tie)?;
    let rank = imp.emit(K::Sum, &[beats], &[("axes", ints(&[r as i64])), ("keepdim", AttrValue::Bool(false))])?;
    // idx[.., q] = the i whose rank is q.
    let rank_row = reshape(imp, rank, &with(&[Dim::new(1), nd.clone()]))?;
    let kd = Dim::new(k);
    let q = iota(imp, &[kd.clone(), Dim::new(1)], 0, DType::I64)?;
    let hit = bin(imp, K::Eq, rank_row, q)?;
    let pos = iota(imp, &[Dim::new(1), nd], 1, DType::I64)?;
    let zero = imp.scalar(DType::I64, 0.0)?;
    let picked = select(imp, hit, pos, zero)?;
    let idx = imp.emit(K::Sum, &[picked], &[("axes", ints(&[r as i64])), ("keepdim", AttrValue::Bool(false))])?;
    let vals = imp.emit(K::Gather, &[xt, idx], &[("axis", int(r as i64 - 1))])?;
    let vals = permute(imp, vals, &inv)?;
    let idx = permute(imp, idx, &inv)?;
    Ok(vec![Some(Slot::Val(vals)), Some(Slot::Val(idx))])
}

// --- Scatter and gather ---

/// `ScatterElements` (and its older name `Scatter`).
fn scatter_elements(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    let upd = imp.input(node, 2)?;
    let axis = norm_axis(a_int(node, "axis", 0), shape(imp, x).len())?;
    let red = super::import::a_str(node, "reduction", "none");
    one(scatter(imp, x, idx, upd, axis, &red)?)
}

/// ONNX ScatterElements on ladder values: `idx` (i32/i64) and `upd` of one shape, along
/// `axis`, with `reduction` none/add/mul/max/min.
fn scatter(imp: &mut Importer, x: Value, idx: Value, upd: Value, axis: usize, red: &str) -> NResult<Value> {
    let dt = dtype(imp, x);
    if !dtype(imp, idx).is_int() {
        return invalid("indices must be int32 or int64");
    }
    if dtype(imp, upd) != dt {
        return invalid(format!("updates are {} but data is {dt}", dtype(imp, upd)));
    }
    let xd = shape(imp, x);
    let id = shape(imp, idx);
    if id != shape(imp, upd) || id.len() != xd.len() {
        return invalid("indices and updates must have one shape, of the data's rank");
    }
    let idx = cast(imp, idx, DType::I64)?;
    match red {
        "add" => {
            if dt.is_bool() {
                return unsupported("a scatter with reduction `add` of bool data");
            }
            imp.emit(K::ScatterAdd, &[x, idx, upd], &[("axis", int(axis as i64))])
        }
        "none" => scatter_copy(imp, x, idx, upd, axis),
        "mul" | "max" | "min" => scatter_dense(imp, x, idx, upd, axis, red),
        r => invalid(format!("unknown reduction `{r}`")),
    }
}

/// How many times each element of `x` is written, as i64 of `x`'s shape (fails on an
/// out-of-range index).
fn scatter_count(imp: &mut Importer, x: Value, idx: Value, axis: usize) -> NResult<Value> {
    let xd = shape(imp, x);
    let id = shape(imp, idx);
    let zeros = full(imp, &xd, 0.0, DType::I64)?;
    let ones = full(imp, &id, 1.0, DType::I64)?;
    imp.emit(K::ScatterAdd, &[zeros, idx, ones], &[("axis", int(axis as i64))])
}

fn scatter_copy(imp: &mut Importer, x: Value, idx: Value, upd: Value, axis: usize) -> NResult<Value> {
    let xd = shape(imp, x);
    let id = shape(imp, idx);
    let nx = numel(&xd)?;
    let nu = numel(&id)?;
    // Source positions (1-based) summed per target, and write counts.
    let src = iota(imp, std::slice::from_ref(&nu), 0, DType::I64)?;
    let src = bin_scalar(imp, K::Add, src, 1.0)?;
    let src = reshape(imp, src, &id)?;
    let zeros = full(imp, &xd, 0.0, DType::I64)?;
    let possum = imp.emit(K::ScatterAdd, &[zeros, idx, src], &[("axis", int(axis as i64))])?;
    let count = scatter_count(imp, x, idx, axis)?;
    let own = iota(imp, std::slice::from_ref(&nx), 0, DType::I64)?;
    let own = reshape(imp, own, &xd)?;
    // Gather from cat(x, updates) (or cat(updates, x)), whichever has a static offset.
    let xf = reshape(imp, x, std::slice::from_ref(&nx))?;
    let uf = reshape(imp, upd, std::slice::from_ref(&nu))?;
    let (table, kept, written) = if let Some(o) = nx.as_const() {
        let t = imp.emit(K::Cat, &[xf, uf], &[("axis", int(0))])?;
        let w = bin_scalar(imp, K::Add, possum, o as f64 - 1.0)?;
        (t, own, w)
    } else if let Some(o) = nu.as_const() {
        let t = imp.emit(K::Cat, &[uf, xf], &[("axis", int(0))])?;
        let k = bin_scalar(imp, K::Add, own, o as f64)?;
        let w = bin_scalar(imp, K::Sub, possum, 1.0)?;
        (t, k, w)
    } else {
        return unsupported("a scatter where both the data and the updates have symbolic sizes");
    };
    let untouched = bin_scalar(imp, K::Eq, count, 0.0)?;
    let twice = bin_scalar(imp, K::Gt, count, 1.0)?;
    let bad = imp.scalar(DType::I64, i64::MIN as f64)?;
    let pos = select(imp, untouched, kept, written)?;
    let pos = select(imp, twice, bad, pos)?;
    let pos = reshape(imp, pos, std::slice::from_ref(&nx))?;
    let g = imp.emit(K::Gather, &[table, pos], &[("axis", int(0))])?;
    reshape(imp, g, &xd)
}

fn scatter_dense(imp: &mut Importer, x: Value, idx: Value, upd: Value, axis: usize, red: &str) -> NResult<Value> {
    let dt = dtype(imp, x);
    if dt.is_bool() && red == "mul" {
        return unsupported("a scatter with reduction `mul` of bool data");
    }
    let xd = shape(imp, x);
    let id = shape(imp, idx);
    let sx = static_of(&xd, "a scatter with reduction")?;
    let si = static_of(&id, "a scatter with reduction")?;
    let n = sx[axis];
    dense_fits(&[si.iter().product::<u64>(), n], "a scatter with reduction mul/max/min")?;
    let r = xd.len();
    let mut perm: Vec<usize> = (0..r).filter(|&a| a != axis).collect();
    perm.push(axis);
    let mut inv = vec![0usize; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let it = permute(imp, idx, &perm)?;
    let ut = permute(imp, upd, &perm)?;
    let xt = permute(imp, x, &perm)?;
    let itd = shape(imp, it);
    let m = itd[r - 1].clone();
    let lead: Vec<Dim> = itd[..r - 1].to_vec();
    let nd = Dim::new(n);
    // Normalised indices (out of range ones match nothing; the count below rejects them).
    let neg = bin_scalar(imp, K::Lt, it, 0.0)?;
    let wrapped = bin_scalar(imp, K::Add, it, n as f64)?;
    let ni = select(imp, neg, wrapped, it)?;
    let mut col = lead.clone();
    col.extend([m.clone(), Dim::new(1)]);
    let ni = reshape(imp, ni, &col)?;
    let uc = reshape(imp, ut, &col)?;
    let targets = iota(imp, std::slice::from_ref(&nd), 0, DType::I64)?;
    let hit = bin(imp, K::Eq, ni, targets)?; // [lead.., m, n]
    let (reducer, combine, ident) = match red {
        "mul" => (K::Prod, K::Mul, 1.0),
        "max" => (K::Amax, K::Max, lowest(dt)),
        _ => (K::Amin, K::Min, highest(dt)),
    };
    let id_v = imp.scalar(dt, ident)?;
    let vals = select(imp, hit, uc, id_v)?;
    let red_v = if reducer == K::Prod {
        reduce(imp, K::Prod, vals, &[r - 1], false)?
    } else if dt.is_bool() {
        // bool max/min: any/all of the matching updates.
        let op = if reducer == K::Amax { K::Amax } else { K::Amin };
        imp.emit(op, &[vals], &[("axes", ints(&[r as i64 - 1])), ("keepdim", AttrValue::Bool(false))])?
    } else if m.as_const() == Some(0) {
        full(imp, &[lead.clone(), vec![nd.clone()]].concat(), ident, dt)?
    } else {
        imp.emit(reducer, &[vals], &[("axes", ints(&[r as i64 - 1])), ("keepdim", AttrValue::Bool(false))])?
    }; // [lead.., n]
       // Pad the leading dims up to x's.
    let xtd = shape(imp, xt);
    let rd = shape(imp, red_v);
    let mut high = vec![0i64; r];
    for a in 0..r - 1 {
        let (Some(big), Some(small)) = (xtd[a].as_const(), rd[a].as_const()) else {
            return unsupported("a scatter with reduction on symbolic dims");
        };
        high[a] = big as i64 - small as i64;
    }
    let red_v = if high.iter().any(|&h| h != 0) {
        imp.emit(
            K::Pad,
            &[red_v],
            &[("low", ints(&vec![0; r])), ("high", ints(&high)), ("value", AttrValue::Float(ident))],
        )?
    } else {
        red_v
    };
    let red_v = permute(imp, red_v, &inv)?;
    let combined = if dt.is_bool() {
        bin(imp, if combine == K::Max { K::Or } else { K::And }, x, red_v)?
    } else {
        let c = bin(imp, combine, x, red_v)?;
        cast(imp, c, dt)?
    };
    // The count rejects out-of-range indices; unwritten elements keep x exactly.
    let count = scatter_count(imp, x, idx, axis)?;
    let written = bin_scalar(imp, K::Gt, count, 0.0)?;
    select(imp, written, combined, x)
}

/// The flat position (over `dims`) of each index tuple along the last axis of `idx`
/// (`[.., q]` → `[..]`, i64); negative components count from the end, a tuple with an
/// out-of-range component becomes `i64::MIN`.
fn flat_index(imp: &mut Importer, idx: Value, dims: &[u64]) -> NResult<Value> {
    let id = shape(imp, idx);
    let r = id.len();
    let idx = cast(imp, idx, DType::I64)?;
    let mut flat: Option<Value> = None;
    let mut bad: Option<Value> = None;
    for (j, &dj) in dims.iter().enumerate() {
        let c = imp.emit(K::Select, &[idx], &[("axis", int(r as i64 - 1)), ("index", int(j as i64))])?;
        let neg = bin_scalar(imp, K::Lt, c, 0.0)?;
        let wrapped = bin_scalar(imp, K::Add, c, dj as f64)?;
        let c = select(imp, neg, wrapped, c)?;
        let lo = bin_scalar(imp, K::Lt, c, 0.0)?;
        let hi = bin_scalar(imp, K::Ge, c, dj as f64)?;
        let out = bin(imp, K::Or, lo, hi)?;
        bad = Some(match bad {
            None => out,
            Some(b) => bin(imp, K::Or, b, out)?,
        });
        flat = Some(match flat {
            None => c,
            Some(f) => {
                let s = bin_scalar(imp, K::Mul, f, dj as f64)?;
                bin(imp, K::Add, s, c)?
            }
        });
    }
    let lead: Vec<Dim> = id[..r - 1].to_vec();
    let (Some(flat), Some(bad)) = (flat, bad) else {
        // q = 0: every tuple addresses the whole data.
        return full(imp, &lead, 0.0, DType::I64);
    };
    let m = imp.scalar(DType::I64, i64::MIN as f64)?;
    select(imp, bad, m, flat)
}

/// The parts of a GatherND/ScatterND operand: batch dims, index-tuple dims, the indexed
/// (static) dims and the trailing dims.
type NdParts = (Vec<Dim>, Vec<Dim>, Vec<u64>, Vec<Dim>);

fn nd_parts(imp: &Importer, data: Value, idx: Value, batch: usize) -> NResult<NdParts> {
    let dd = shape(imp, data);
    let id = shape(imp, idx);
    if id.is_empty() {
        return invalid("indices must have rank >= 1");
    }
    let q = id[id.len() - 1]
        .as_const()
        .ok_or_else(|| NodeError::Unsupported("the last dim of the indices must be static".into()))?
        as usize;
    if batch + q > dd.len() || batch >= id.len() {
        return invalid(format!("index tuples of {q} with {batch} batch dims do not fit data of rank {}", dd.len()));
    }
    if dd[..batch] != id[..batch] {
        return invalid("the batch dims of data and indices differ");
    }
    let idxd = static_of(&dd[batch..batch + q], "GatherND/ScatterND indexing")?;
    Ok((dd[..batch].to_vec(), id[batch..id.len() - 1].to_vec(), idxd, dd[batch + q..].to_vec()))
}

fn gather_nd(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let data = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    if !dtype(imp, idx).is_int() {
        return invalid("indices must be int32 or int64");
    }
    let batch = a_int(node, "batch_dims", 0);
    if batch < 0 {
        return invalid("batch_dims must be >= 0");
    }
    let (bd, md, qd, rd) = nd_parts(imp, data, idx, batch as usize)?;
    let bn = numel(&bd)?;
    let mn = numel(&md)?;
    let rn = numel(&rd)?;
    let p = qd.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).ok_or_else(|| NodeError::Invalid("size".into()))?;
    let d2 = reshape(imp, data, &[bn.clone(), Dim::new(p), rn.clone()])?;
    let f = flat_index(imp, idx, &qd)?;
    let f = reshape(imp, f, &[bn.clone(), mn.clone(), Dim::new(1)])?;
    let f = expand(imp, f, &[bn, mn, rn])?;
    let g = imp.emit(K::Gather, &[d2, f], &[("axis", int(1))])?;
    let out: Vec<Dim> = bd.into_iter().chain(md).chain(rd).collect();
    one(reshape(imp, g, &out)?)
}

fn scatter_nd(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let data = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    let upd = imp.input(node, 2)?;
    if !dtype(imp, idx).is_int() {
        return invalid("indices must be int32 or int64");
    }
    let red = super::import::a_str(node, "reduction", "none");
    let (_, md, qd, rd) = nd_parts(imp, data, idx, 0)?;
    let want: Vec<Dim> = md.iter().chain(&rd).cloned().collect();
    if shape(imp, upd) != want {
        return invalid(format!("updates have shape {:?}, expected {want:?}", shape(imp, upd)));
    }
    let mn = numel(&md)?;
    let rn = numel(&rd)?;
    let p = qd.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).ok_or_else(|| NodeError::Invalid("size".into()))?;
    let d2 = reshape(imp, data, &[Dim::new(p), rn.clone()])?;
    let u2 = reshape(imp, upd, &[mn.clone(), rn.clone()])?;
    let f = flat_index(imp, idx, &qd)?;
    let f = reshape(imp, f, &[mn.clone(), Dim::new(1)])?;
    let f = expand(imp, f, &[mn, rn])?;
    let y = scatter(imp, d2, f, u2, 0, &red)?;
    one(reshape(imp, y, &shape(imp, data))?)
}

fn reverse_sequence(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let lens = imp.input(node, 1)?;
    let d = shape(imp, x);
    if d.len() < 2 {
        return invalid("ReverseSequence needs an input of rank >= 2");
    }
    let b = norm_axis(a_int(node, "batch_axis", 1), d.len())?;
    let t = norm_axis(a_int(node, "time_axis", 0), d.len())?;
    if b == t || !dtype(imp, lens).is_int() || shape(imp, lens) != [d[b].clone()] {
        return invalid("sequence_lens must be integers of shape [batch], batch_axis != time_axis");
    }
    let mut grid = vec![Dim::new(1); d.len()];
    grid[b] = d[b].clone();
    grid[t] = d[t].clone();
    let tt = iota(imp, &grid, t, DType::I64)?;
    let mut lshape = vec![Dim::new(1); d.len()];
    lshape[b] = d[b].clone();
    let l = cast(imp, lens, DType::I64)?;
    let l = reshape(imp, l, &lshape)?;
    let inside = bin(imp, K::Lt, tt, l)?;
    let last = bin_scalar(imp, K::Sub, l, 1.0)?;
    let flipped = bin(imp, K::Sub, last, tt)?;
    let src = select(imp, inside, flipped, tt)?;
    let src = expand(imp, src, &d)?;
    one(imp.emit(K::Gather, &[x, src], &[("axis", int(t as i64))])?)
}

fn compress(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let c = imp.input(node, 1)?;
    let cond = imp.const_of(c).ok_or_else(|| NodeError::NeedsValue { input: 1, what: "the condition".into() })?;
    if cond.shape().len() != 1 {
        return invalid("the condition must be 1-D");
    }
    let (x, axis) = match attr(node, "axis") {
        Some(a) => {
            let axis = norm_axis(a.i, shape(imp, x).len())?;
            (x, axis)
        }
        None => {
            let n = numel(&shape(imp, x))?;
            (reshape(imp, x, &[n])?, 0)
        }
    };
    let d = shape(imp, x);
    let n = d[axis].as_const().ok_or_else(|| NodeError::Unsupported("Compress along a symbolic dim".into()))?;
    let flags = cond.to_f64_vec();
    if flags.iter().skip(n as usize).any(|&f| f != 0.0) {
        return invalid(format!("the condition selects past the axis' {n} elements"));
    }
    let keep: Vec<i64> =
        flags.iter().take(n as usize).enumerate().filter(|(_, &f)| f != 0.0).map(|(i, _)| i as i64).collect();
    let k = keep.len();
    let t = Tensor::from_i64(&[k], keep).map_err(|e| NodeError::Invalid(e.to_string()))?;
    let kept = imp.constant("compress_index", t);
    let mut rshape = vec![Dim::new(1); d.len()];
    rshape[axis] = Dim::new(k as u64);
    let kr = reshape(imp, kept, &rshape)?;
    let mut target = d.clone();
    target[axis] = Dim::new(k as u64);
    let ke = expand(imp, kr, &target)?;
    one(imp.emit(K::Gather, &[x, ke], &[("axis", int(axis as i64))])?)
}

// --- Math ---

/// Every permutation of `0..n` with its sign, in lexicographic order.
fn permutations(n: usize) -> Vec<(Vec<usize>, i64)> {
    fn go(prefix: &mut Vec<usize>, rest: &mut Vec<usize>, out: &mut Vec<(Vec<usize>, i64)>) {
        if rest.is_empty() {
            let inversions = (0..prefix.len())
                .flat_map(|i| (i + 1..prefix.len()).map(move |j| (i, j)))
                .filter(|&(i, j)| prefix[i] > prefix[j])
                .count();
            out.push((prefix.clone(), if inversions % 2 == 0 { 1 } else { -1 }));
            return;
        }
        for k in 0..rest.len() {
            let v = rest.remove(k);
            prefix.push(v);
            go(prefix, rest, out);
            prefix.pop();
            rest.insert(k, v);
        }
    }
    let mut out = Vec::new();
    go(&mut Vec::new(), &mut (0..n).collect(), &mut out);
    out
}

fn det(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let d = shape(imp, x);
    let r = d.len();
    let dt = dtype(imp, x);
    if r < 2 || !dt.is_float() {
        return invalid("Det needs a float input of rank >= 2");
    }
    let (Some(a), Some(b)) = (d[r - 2].as_const(), d[r - 1].as_const()) else {
        return unsupported("Det of a matrix with symbolic dims");
    };
    if a != b {
        return invalid(format!("Det of a non-square {a}x{b} matrix"));
    }
    let n = a as usize;
    if n > 4 {
        return unsupported(format!("Det of a {n}x{n} matrix (the Leibniz expansion goes to 4x4)"));
    }
    let batch: Vec<Dim> = d[..r - 2].to_vec();
    let bn = numel(&batch)?;
    if n == 0 {
        return one(full(imp, &batch, 1.0, dt)?);
    }
    let perms = permutations(n);
    let terms = perms.len();
    let mut table = Vec::with_capacity(terms * n);
    let mut signs = Vec::with_capacity(terms);
    for (p, s) in &perms {
        table.extend(p.iter().enumerate().map(|(i, &j)| (i * n + j) as i64));
        signs.push(*s);
    }
    let flat = reshape(imp, x, &[bn.clone(), Dim::new((n * n) as u64)])?;
    let t = Tensor::from_i64(&[1, terms * n], table).map_err(|e| NodeError::Invalid(e.to_string()))?;
    let tv = imp.constant("det_index", t);
    let tv = expand(imp, tv, &[bn.clone(), Dim::new((terms * n) as u64)])?;
    let g = imp.emit(K::Gather, &[flat, tv], &[("axis", int(1))])?;
    let g = reshape(imp, g, &[bn.clone(), Dim::new(terms as u64), Dim::new(n as u64)])?;
    let prods = reduce(imp, K::Prod, g, &[2], false)?;
    let st = Tensor::from_i64(&[terms], signs).map_err(|e| NodeError::Invalid(e.to_string()))?;
    let sv = imp.constant("det_sign", st);
    let sv = cast(imp, sv, dt)?;
    let signed = bin(imp, K::Mul, prods, sv)?;
    let s = reduce(imp, K::Sum, signed, &[1], false)?;
    one(reshape(imp, s, &batch)?)
}

/// Where `asinh`/`acosh` switch to `log(2|x|)`: `2^(p/2 + 1)` for `p` mantissa bits, past
/// which the dropped `1/(4x²)` is below the dtype's rounding.
fn log_threshold(dt: DType) -> f64 {
    let bits = match dt {
        DType::F64 => 52,
        DType::F16 => 10,
        DType::BF16 => 7,
        _ => 23,
    };
    2f64.powi(bits / 2 + 1)
}

fn swish(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let alpha = a_float(node, "alpha", 1.0);
    let ax = if alpha == 1.0 { x } else { bin_scalar(imp, K::Mul, x, alpha)? };
    let s = un(imp, K::Sigmoid, ax)?;
    one(bin(imp, K::Mul, x, s)?)
}

/// `Asin`, `Acos`, `Atan`, `Asinh`, `Acosh` or `Atanh` of a float input.
fn inverse_trig_node(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let op = node.op_type.as_str();
    let x = imp.input(node, 0)?;
    if !dtype(imp, x).is_float() {
        return invalid(format!("{op} needs a float input"));
    }
    one(inverse_trig(imp, op, x)?)
}

fn inverse_trig(imp: &mut Importer, op: &str, x: Value) -> NResult<Value> {
    let one_minus = |imp: &mut Importer, x: Value| -> NResult<Value> {
        let c = imp.scalar(dtype(imp, x), 1.0)?;
        bin(imp, K::Sub, c, x)
    };
    match op {
        "Atan" => un(imp, K::Atan, x),
        "Asin" => {
            // atan(x / sqrt((1 - x)(1 + x)))
            let a = one_minus(imp, x)?;
            let b = bin_scalar(imp, K::Add, x, 1.0)?;
            let p = bin(imp, K::Mul, a, b)?;
            let s = un(imp, K::Sqrt, p)?;
            let q = bin(imp, K::Div, x, s)?;
            un(imp, K::Atan, q)
        }
        "Acos" => {
            // 2 atan(sqrt((1 - x) / (1 + x)))
            let a = one_minus(imp, x)?;
            let b = bin_scalar(imp, K::Add, x, 1.0)?;
            let q = bin(imp, K::Div, a, b)?;
            let s = un(imp, K::Sqrt, q)?;
            let t = un(imp, K::Atan, s)?;
            bin_scalar(imp, K::Mul, t, 2.0)
        }
        "Asinh" => {
            // sign(x) log1p(|x| + x² / (1 + sqrt(x² + 1)))
            let a = un(imp, K::Abs, x)?;
            let sq = bin(imp, K::Mul, a, a)?;
            let s1 = bin_scalar(imp, K::Add, sq, 1.0)?;
            let r = un(imp, K::Sqrt, s1)?;
            let d = bin_scalar(imp, K::Add, r, 1.0)?;
            let f = bin(imp, K::Div, sq, d)?;
            let arg = bin(imp, K::Add, a, f)?;
            // Past 1/sqrt(eps), asinh(|x|) = log(2|x|) to within rounding (and x² would
            // overflow further on).
            let big = bin_scalar(imp, K::Gt, a, log_threshold(dtype(imp, x)))?;
            let l = un(imp, K::Log1p, arg)?;
            let ln2b = un(imp, K::Log, a)?;
            let ln2b = bin_scalar(imp, K::Add, ln2b, std::f64::consts::LN_2)?;
            let mag = select(imp, big, ln2b, l)?;
            let sg = un(imp, K::Sign, x)?;
            bin(imp, K::Mul, mag, sg)
        }
        "Acosh" => {
            // log(x + sqrt(x - 1) sqrt(x + 1)): NaN below 1, no overflow of x².
            let a = bin_scalar(imp, K::Sub, x, 1.0)?;
            let b = bin_scalar(imp, K::Add, x, 1.0)?;
            let sa = un(imp, K::Sqrt, a)?;
            let sb = un(imp, K::Sqrt, b)?;
            let s = bin(imp, K::Mul, sa, sb)?;
            let arg = bin(imp, K::Add, x, s)?;
            let small = un(imp, K::Log, arg)?;
            let big = bin_scalar(imp, K::Gt, x, log_threshold(dtype(imp, x)))?;
            let l = un(imp, K::Log, x)?;
            let l = bin_scalar(imp, K::Add, l, std::f64::consts::LN_2)?;
            select(imp, big, l, small)
        }
        _ => {
            // Atanh: 0.5 log1p(2x / (1 - x))
            let a = one_minus(imp, x)?;
            let t = bin_scalar(imp, K::Mul, x, 2.0)?;
            let q = bin(imp, K::Div, t, a)?;
            let l = un(imp, K::Log1p, q)?;
            bin_scalar(imp, K::Mul, l, 0.5)
        }
    }
}

// --- Entry points for modes of ops converted in shape_ops.rs (`Pad`) and nn.rs (`BatchNormalization`) ---

/// Constant-mode `Pad` whose `constant_value` is computed at run time (`value`, a scalar).
pub fn pad_runtime_value(imp: &mut Importer, x: Value, low: &[i64], high: &[i64], value: Value) -> NResult<Outs> {
    let dt = dtype(imp, x);
    let d = shape(imp, x);
    let p = imp.emit(K::Pad, &[x], &[("low", ints(low)), ("high", ints(high)), ("value", AttrValue::Float(0.0))])?;
    let ones = full(imp, &d, 1.0, DType::Bool)?;
    let mask =
        imp.emit(K::Pad, &[ones], &[("low", ints(low)), ("high", ints(high)), ("value", AttrValue::Float(0.0))])?;
    let v = cast(imp, value, dt)?;
    if shape(imp, v).iter().any(|d| d.as_const() != Some(1)) {
        return invalid("constant_value must be a scalar");
    }
    let v = reshape(imp, v, &[])?;
    one(select(imp, mask, p, v)?)
}

/// `BatchNormalization` with `training_mode = 1`: batch statistics, running statistics out.
pub fn batch_norm_training(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let b = imp.input(node, 2)?;
    let mean = imp.input(node, 3)?;
    let var = imp.input(node, 4)?;
    let eps = a_float(node, "epsilon", 1e-5);
    let momentum = a_float(node, "momentum", 0.9);
    let r = shape(imp, x).len();
    if r < 2 {
        return invalid("BatchNormalization needs an input of rank >= 2");
    }
    let axes: Vec<i64> = (0..r as i64).filter(|&a| a != 1).collect();
    let bm = imp.emit(K::Mean, &[x], &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(false))])?;
    let bv =
        imp.emit(K::Var, &[x], &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(false)), ("correction", int(0))])?;
    let y = imp.emit(K::BatchNorm, &[x, bm, bv, scale, b], &[("eps", AttrValue::Float(eps))])?;
    let mut outs = vec![Some(Slot::Val(y))];
    let want = |i: usize| node.output.get(i).is_some_and(|s| !s.is_empty());
    for (i, (running, batch)) in [(mean, bm), (var, bv)].into_iter().enumerate() {
        if !want(i + 1) {
            outs.push(None);
            continue;
        }
        let a = bin_scalar(imp, K::Mul, running, momentum)?;
        let c = bin_scalar(imp, K::Mul, batch, 1.0 - momentum)?;
        outs.push(Some(Slot::Val(bin(imp, K::Add, a, c)?)));
    }
    if node.output.iter().skip(3).any(|s| !s.is_empty()) {
        return unsupported("BatchNormalization's saved mean / variance outputs");
    }
    Ok(outs)
}
