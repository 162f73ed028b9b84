//! Decompositions of the norm family's high-level ops: `softmax`, `log_softmax`, `layer_norm`,
//! `rms_norm`, `batch_norm`, `group_norm`, `scaled_dot_product_attention`, `cross_entropy`,
//! `mse_loss`.
//!
//! The ops compute in f64 and round once; these decompositions compute in the op's dtype, except
//! that f16 and bf16 operands are widened to f32 for the whole computation and the result is
//! narrowed once at the end (PyTorch's "opmath" rule), since sums and exponentials in half
//! precision would lose most of their digits. Choices worth knowing:
//! - **softmax / log_softmax**: `m = reduce_max(x)` (NaN-propagating), `s = x - m`,
//!   `softmax = exp(s) / Σexp(s)`, `log_softmax = s - log(Σexp(s))`: the op's own formula, so
//!   its NaN/inf rules come out unchanged (a NaN or `+inf` in a row, or an all-`-inf` row, gives
//!   a NaN row because `m - m` is NaN there; other `-inf` entries give 0 / `-inf`).
//! - **layer_norm / rms_norm / group_norm** are two-pass (mean, then mean of squared
//!   deviations). So that `x²` cannot overflow where the op's f64 arithmetic does not (`±1e30`
//!   in f32), each row is first multiplied by `r = 1/s`, `s = max(max|x|, 1)` (`s = 1` when
//!   `max|x|` is infinite, where the op's own inf/NaN rules apply unscaled); the result is
//!   unchanged because `(x·r - mean)/sqrt(var + eps·r²)` equals the unscaled formula for any
//!   `r > 0`, so the rounded reciprocal serves as well as `1/s` itself. (A multiply, not a
//!   divide per element: vector division is several times slower than multiplication.) When
//!   `eps > 0` the scaled `eps·r²` is kept at least the smallest normal number, so that an
//!   exactly constant row gives 0 (not `0 * inf`) even when `eps·r²` underflows.
//! - **Counts** (divisors of means) are a `full` when the reduced dims are static; otherwise
//!   each symbolic dim is counted exactly in i64 (`reduce_sum` of a 1-D `full` of ones) and
//!   the product is converted to the float dtype once.
//! - **batch_norm** folds the per-channel factor first: `(x - mean[c]) * (rsqrt(var[c] + eps) *
//!   weight[c]) + bias[c]`, the parameters broadcast with `broadcast_in_dim` to dim 1.
//! - **scaled_dot_product_attention**: `matmul(q, k, transpose_b)` times the scale (default
//!   `rsqrt(max(D, 1))`, so `D = 0` gives zero scores like the op); masks are *additive*, like
//!   the op: a bool mask adds `where(mask, 0, -inf)` (so a NaN or `+inf` score stays NaN under
//!   a false entry, as in the op, where `where(mask, s, -inf)` would hide it), a float mask is
//!   added, and `causal` adds `where(iota_col > iota_row, -inf, 0)`. Then softmax as above,
//!   `matmul` with `v`, and (with `safe_softmax`) a final `where(row max == -inf, 0, ·)` gives
//!   the op's zero rows for rows with nothing to attend; without it those rows stay NaN.
//! - **cross_entropy**: `log_softmax` over the class dim, `gather` of the targets, a `where` on
//!   `target != ignore_index`, label smoothing with the smoothing term computed only when
//!   `label_smoothing > 0` (like the op), and the reduction; the mean divides by the number of
//!   non-ignored targets, so all ignored gives `0/0 = NaN` as the op. Out-of-range targets: the
//!   op fails with `IndexOutOfRange`; the decomposition makes `gather` fail too: ignored targets
//!   gather a safe index, and a negative target (which `gather` would otherwise count from the
//!   end) is replaced by the dtype's minimum, so the run fails with `IndexOutOfRange` whose
//!   `index` is that minimum rather than the target (a target `>= C` is reported as itself).
//!   When the class dim is not statically positive, the log-probabilities get one padding
//!   column to gather ignored targets from (so all-ignored with `C = 0` works) and targets
//!   `>= C` are replaced by the minimum too.
//! - **mse_loss**: `(a - b)²` reduced; the mean divides by the (broadcast) element count.

use super::{compute_dtype, DecompError, DecompFn, Emitter};
use crate::ir::{AttrValue, DType, Dim, Node, Shape, Value};
use crate::ops::util::normalize_axis;
use crate::ops::OpKind;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    Some(match op {
        OpKind::Softmax => softmax,
        OpKind::LogSoftmax => log_softmax,
        OpKind::LayerNorm => layer_norm,
        OpKind::RmsNorm => rms_norm,
        OpKind::BatchNorm => batch_norm,
        OpKind::GroupNorm => group_norm,
        OpKind::ScaledDotProductAttention => attention,
        OpKind::CrossEntropy => cross_entropy,
        OpKind::MseLoss => mse_loss,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Shared helpers (also used by the linalg family)

pub(super) fn unsupported(op: &'static str, reason: impl Into<String>) -> DecompError {
    DecompError::Unsupported { op, reason: reason.into() }
}

/// `x` converted to its compute dtype.
pub(super) fn widen(e: &mut Emitter, x: Value) -> Result<Value, DecompError> {
    let d = compute_dtype(e.dtype(x));
    e.convert(x, d)
}

/// The node's (normalised) `axis` attribute for an argument of rank `rank`.
fn axis_attr(node: &Node, rank: usize) -> Result<usize, DecompError> {
    normalize_axis(node.attrs.int("axis"), rank).map_err(|error| DecompError::NotExplicit { op: node.op.name(), error })
}

/// The number of elements in `dims`, as a rank-0 tensor of the float `dtype`: a `full` when
/// every dim is static, else the static part times an exact i64 count of each symbolic dim
/// (`reduce_sum` of a 1-D `full` of ones), converted once.
pub(super) fn count(e: &mut Emitter, dims: &[Dim], dtype: DType) -> Result<Value, DecompError> {
    let mut known: u64 = 1;
    let mut symbolic: Option<Value> = None;
    for d in dims {
        match d.as_const() {
            Some(n) => known = known.saturating_mul(n),
            None => {
                let ones = e.full(1.0, DType::I64, &Shape::from_iter([d.clone()]))?;
                let n = e.reduce(OpKind::ReduceSum, ones, &[0], false)?;
                symbolic = Some(match symbolic {
                    None => n,
                    Some(acc) => e.mul(acc, n)?,
                });
            }
        }
    }
    match symbolic {
        None => e.full(known as f64, dtype, &Shape::scalar()),
        Some(n) => {
            let n = if known == 1 { n } else { e.binary_scalar(OpKind::Mul, n, known as f64)? };
            e.convert(n, dtype)
        }
    }
}

/// Mean over `axes` (kept as size 1).
fn mean_keep(e: &mut Emitter, x: Value, axes: &[usize]) -> Result<Value, DecompError> {
    let shape = e.shape(x);
    let dims: Vec<Dim> = axes.iter().map(|&a| shape.dims()[a].clone()).collect();
    let n = count(e, &dims, e.dtype(x))?;
    let s = e.reduce(OpKind::ReduceSum, x, axes, true)?;
    e.div(s, n)
}

/// Max-subtracted softmax (or log-softmax) of `x` along `axis`, in `x`'s dtype.
pub(super) fn softmax_core(e: &mut Emitter, x: Value, axis: usize, log: bool) -> Result<Value, DecompError> {
    Ok(softmax_parts(e, x, axis, log)?.0)
}

/// [`softmax_core`], with the row maximum (keepdim) it subtracted. When the graph keeps the
/// op whole (differentiating in native mode: its library kernel runs the forward and its
/// hand rule the backward, `crate::autodiff::HAND_RULES`) the result is the op's node, and
/// there is no maximum.
fn softmax_parts(e: &mut Emitter, x: Value, axis: usize, log: bool) -> Result<(Value, Option<Value>), DecompError> {
    let op = if log { OpKind::LogSoftmax } else { OpKind::Softmax };
    if e.keeps(op) {
        return Ok((e.kept(op, &[x], &[("axis", AttrValue::Int(axis as i64))])?, None));
    }
    let m = e.reduce(OpKind::ReduceMax, x, &[axis], true)?;
    let s = e.sub(x, m)?;
    let ex = e.unary(OpKind::Exp, s)?;
    let sum = e.reduce(OpKind::ReduceSum, ex, &[axis], true)?;
    let y = if log {
        let l = e.unary(OpKind::Log, sum)?;
        e.sub(s, l)?
    } else {
        e.div(ex, sum)?
    };
    Ok((y, Some(m)))
}

/// `(x - mean) * rsqrt(var + eps)` (`center`) or `x * rsqrt(mean(x²) + eps)` over `axes`,
/// row-scaled so that no square overflows (see the module docs).
fn normalize(e: &mut Emitter, x: Value, axes: &[usize], eps: f64, center: bool) -> Result<Value, DecompError> {
    let dtype = e.dtype(x);
    let ax = e.unary(OpKind::Abs, x)?;
    let a = e.reduce(OpKind::ReduceMax, ax, axes, true)?;
    let a1 = e.binary_scalar(OpKind::Max, a, 1.0)?;
    let inf = e.binary_scalar(OpKind::Eq, a, f64::INFINITY)?;
    let one = e.full_like(1.0, a)?;
    let s = e.select(inf, one, a1)?;
    let r = e.unary(OpKind::Reciprocal, s)?;
    let xs = e.mul(x, r)?;
    let d = if center {
        let mean = mean_keep(e, xs, axes)?;
        e.sub(xs, mean)?
    } else {
        xs
    };
    let sq = e.mul(d, d)?;
    let var = mean_keep(e, sq, axes)?;
    let er = e.binary_scalar(OpKind::Mul, r, eps)?;
    let mut eps_s = e.mul(er, r)?;
    if eps > 0.0 {
        let tiny = if dtype == DType::F64 { f64::MIN_POSITIVE } else { f32::MIN_POSITIVE as f64 };
        eps_s = e.binary_scalar(OpKind::Max, eps_s, tiny)?;
    }
    let ve = e.add(var, eps_s)?;
    let inv = e.unary(OpKind::Rsqrt, ve)?;
    e.mul(d, inv)
}

/// A per-channel `[C]` parameter broadcast along dim 1 of `shape`.
fn per_channel(e: &mut Emitter, p: Value, shape: &Shape) -> Result<Value, DecompError> {
    e.prim(
        OpKind::BroadcastInDim,
        &[p],
        &[
            ("shape", AttrValue::Dims(shape.dims().iter().cloned().map(Some).collect())),
            ("broadcast_dims", AttrValue::Ints(vec![1])),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

fn softmax_like(e: &mut Emitter, node: &Node, args: &[Value], log: bool) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let axis = axis_attr(node, e.rank(x))?;
    let y = softmax_core(e, x, axis, log)?;
    e.convert(y, node.ty.dtype)
}

fn softmax(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    softmax_like(e, node, args, false)
}

fn log_softmax(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    softmax_like(e, node, args, true)
}

// ---------------------------------------------------------------------------------------------
// layer_norm, rms_norm, batch_norm, group_norm

fn layer_norm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let rank = e.rank(x);
    let axes: Vec<usize> = (axis_attr(node, rank)?..rank).collect();
    let mut y = normalize(e, x, &axes, node.attrs.float("eps"), true)?;
    if let Some(&w) = args.get(1) {
        let w = widen(e, w)?;
        y = e.mul(y, w)?;
    }
    if let Some(&b) = args.get(2) {
        let b = widen(e, b)?;
        y = e.add(y, b)?;
    }
    e.convert(y, node.ty.dtype)
}

fn rms_norm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let rank = e.rank(x);
    let axes: Vec<usize> = (axis_attr(node, rank)?..rank).collect();
    let mut y = normalize(e, x, &axes, node.attrs.float("eps"), false)?;
    if let Some(&w) = args.get(1) {
        let w = widen(e, w)?;
        y = e.mul(y, w)?;
    }
    e.convert(y, node.ty.dtype)
}

fn batch_norm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let shape = e.shape(x);
    let mean = widen(e, args[1])?;
    let var = widen(e, args[2])?;
    let ve = e.binary_scalar(OpKind::Add, var, node.attrs.float("eps"))?;
    let mut factor = e.unary(OpKind::Rsqrt, ve)?;
    if let Some(&w) = args.get(3) {
        let w = widen(e, w)?;
        factor = e.mul(factor, w)?;
    }
    let mean = per_channel(e, mean, &shape)?;
    let factor = per_channel(e, factor, &shape)?;
    let d = e.sub(x, mean)?;
    let mut y = e.mul(d, factor)?;
    if let Some(&b) = args.get(4) {
        let b = widen(e, b)?;
        let b = per_channel(e, b, &shape)?;
        y = e.add(y, b)?;
    }
    e.convert(y, node.ty.dtype)
}

fn group_norm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let shape = e.shape(x);
    let dims = shape.dims();
    let groups = node.attrs.int("groups");
    let c = dims[1].as_const().ok_or_else(|| unsupported("group_norm", "the channel dim must be static"))?;
    let g = u64::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| unsupported("group_norm", format!("{c} channels do not divide into {groups} groups")))?;
    let mut block = Dim::new(c / g);
    for d in &dims[2..] {
        block = block.mul(d).map_err(|err| unsupported("group_norm", err.to_string()))?;
    }
    let grouped: Shape = [dims[0].clone(), Dim::new(g), block].into_iter().collect();
    let xg = e.reshape(x, &grouped)?;
    let yg = normalize(e, xg, &[2], node.attrs.float("eps"), true)?;
    let mut y = e.reshape(yg, &shape)?;
    if let Some(&w) = args.get(1) {
        let w = widen(e, w)?;
        let w = per_channel(e, w, &shape)?;
        y = e.mul(y, w)?;
    }
    if let Some(&b) = args.get(2) {
        let b = widen(e, b)?;
        let b = per_channel(e, b, &shape)?;
        y = e.add(y, b)?;
    }
    e.convert(y, node.ty.dtype)
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention

fn attention(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let q = widen(e, args[0])?;
    let k = widen(e, args[1])?;
    let v = widen(e, args[2])?;
    let dtype = e.dtype(q);
    let qs = e.shape(q);
    let (l_dim, d_dim) = (qs.dims()[qs.rank() - 2].clone(), qs.dims()[qs.rank() - 1].clone());
    let ks = e.shape(k);
    let s_dim = ks.dims()[ks.rank() - 2].clone();

    let mut scores = e.matmul(q, k, false, true)?;
    let given = node.attrs.float("scale");
    if d_dim.as_const() != Some(0) {
        let scale = if given.is_nan() {
            match d_dim.as_const() {
                Some(d) => e.full(1.0 / (d as f64).sqrt(), dtype, &Shape::scalar())?,
                None => {
                    let n = count(e, std::slice::from_ref(&d_dim), dtype)?;
                    let n = e.binary_scalar(OpKind::Max, n, 1.0)?;
                    e.unary(OpKind::Rsqrt, n)?
                }
            }
        } else {
            e.full(given, dtype, &Shape::scalar())?
        };
        let scaled = e.mul(scores, scale)?;
        // A symbolic D that is 0 at run time gives zero scores whatever the scale (the op's
        // rule); only a non-finite given scale can turn those zeros into NaN.
        scores = if !given.is_nan() && !given.is_finite() && d_dim.as_const().is_none() {
            let n = count(e, std::slice::from_ref(&d_dim), dtype)?;
            let empty = e.binary_scalar(OpKind::Eq, n, 0.0)?;
            e.select(empty, scores, scaled)?
        } else {
            scaled
        };
    }
    if let Some(&mask) = args.get(3) {
        let bias = if e.dtype(mask).is_bool() {
            let zero = e.full(0.0, dtype, &Shape::scalar())?;
            let ninf = e.full(f64::NEG_INFINITY, dtype, &Shape::scalar())?;
            e.select(mask, zero, ninf)?
        } else {
            widen(e, mask)?
        };
        scores = e.add(scores, bias)?;
    }
    if node.attrs.bool("causal") {
        let ls: Shape = [l_dim, s_dim].into_iter().collect();
        let row = e.iota(&ls, 0, DType::I64)?;
        let col = e.iota(&ls, 1, DType::I64)?;
        let above = e.binary(OpKind::Gt, col, row)?;
        let zero = e.full(0.0, dtype, &Shape::scalar())?;
        let ninf = e.full(f64::NEG_INFINITY, dtype, &Shape::scalar())?;
        let bias = e.select(above, ninf, zero)?;
        scores = e.add(scores, bias)?;
    }
    let axis = e.rank(scores) - 1;
    let (p, m) = softmax_parts(e, scores, axis, false)?;
    let out = e.matmul(p, v, false, false)?;
    if !node.attrs.bool("safe_softmax") {
        // Plain softmax: an all -inf row is NaN already; S = 0 gives the matmul's zeros.
        return e.convert(out, node.ty.dtype);
    }
    // `_safe_softmax`: a row whose every score is -inf (S = 0 included) attends to nothing.
    let m = match m {
        Some(m) => m,
        None => e.reduce(OpKind::ReduceMax, scores, &[axis], true)?,
    };
    let nothing = e.binary_scalar(OpKind::Eq, m, f64::NEG_INFINITY)?;
    let zero = e.full(0.0, dtype, &Shape::scalar())?;
    let out = e.select(nothing, zero, out)?;
    e.convert(out, node.ty.dtype)
}

// ---------------------------------------------------------------------------------------------
// cross_entropy, mse_loss

/// An integer constant of `dtype` (i32 or i64) and `shape`, exact for every value: values
/// beyond f64's 53-bit integers are assembled from two halves in wrapping integer arithmetic.
fn int_const(e: &mut Emitter, value: i64, dtype: DType, shape: &Shape) -> Result<Value, DecompError> {
    if value.unsigned_abs() <= 1 << 53 {
        return e.full(value as f64, dtype, shape);
    }
    let hi = e.full((value >> 32) as f64, dtype, shape)?;
    let lo = e.full((value & 0xffff_ffff) as f64, dtype, shape)?;
    let hi = e.binary_scalar(OpKind::Mul, hi, (1u64 << 32) as f64)?;
    e.add(hi, lo)
}

/// The final reduction of per-element losses: "none", "sum", or "mean" dividing by the count
/// that `count` emits (only called for "mean").
fn reduce_loss(
    e: &mut Emitter,
    node: &Node,
    losses: Value,
    count: impl FnOnce(&mut Emitter) -> Result<Value, DecompError>,
) -> Result<Value, DecompError> {
    let all: Vec<usize> = (0..e.rank(losses)).collect();
    match node.attrs.str("reduction") {
        "none" => e.reshape(losses, &node.ty.shape),
        "sum" => e.reduce(OpKind::ReduceSum, losses, &all, false),
        "mean" => {
            let s = e.reduce(OpKind::ReduceSum, losses, &all, false)?;
            let n = count(e)?;
            e.div(s, n)
        }
        other => Err(unsupported(node.op.name(), format!("unknown reduction {other:?}"))),
    }
}

fn cross_entropy(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let mut logits = widen(e, args[0])?;
    let mut target = args[1];
    let dtype = e.dtype(logits);
    let tdt = e.dtype(target);
    let smoothing = node.attrs.float("label_smoothing");
    let ignore = node.attrs.int("ignore_index");
    // Unbatched `[C]` logits with a scalar target: treat as a batch of one.
    if e.rank(logits) == 1 {
        let c = e.shape(logits).dims()[0].clone();
        logits = e.reshape(logits, &[Dim::new(1), c].into_iter().collect())?;
        target = e.reshape(target, &Shape::from_static(&[1]))?;
    }
    let ls = e.shape(logits);
    let c_dim = ls.dims()[1].clone();
    let tshape = e.shape(target);

    let lsm = softmax_core(e, logits, 1, true)?;

    // Which targets count: `ignore_index` compared exactly, and never equal when it does not
    // fit the target dtype.
    let fits = tdt == DType::I64 || i32::try_from(ignore).is_ok();
    let valid = if fits {
        let ig = int_const(e, ignore, tdt, &tshape)?;
        e.binary(OpKind::Ne, target, ig)?
    } else {
        e.full(1.0, DType::Bool, &tshape)?
    };
    let min = if tdt == DType::I32 { i32::MIN as f64 } else { i64::MIN as f64 };
    let minv = e.full(min, tdt, &tshape)?;
    let neg = e.binary_scalar(OpKind::Lt, target, 0.0)?;
    let static_c = c_dim.as_const().filter(|&c| c > 0);
    let (source, bad, safe) = match static_c {
        Some(_) => (lsm, neg, 0.0),
        None => {
            let n = count(e, std::slice::from_ref(&c_dim), DType::I64)?;
            let n = e.convert(n, tdt)?;
            let big = e.binary(OpKind::Ge, target, n)?;
            let bad = e.binary(OpKind::Or, neg, big)?;
            let r = e.rank(lsm);
            let mut high = vec![0i64; r];
            high[1] = 1;
            let padded =
                e.prim(OpKind::Pad, &[lsm], &[("low", AttrValue::Ints(vec![0; r])), ("high", AttrValue::Ints(high))])?;
            (padded, bad, -1.0)
        }
    };
    let checked = e.select(bad, minv, target)?;
    let safe = e.full(safe, tdt, &tshape)?;
    let idx = e.select(valid, checked, safe)?;
    let idx_shape: Shape =
        tshape.dims()[..1].iter().cloned().chain([Dim::new(1)]).chain(tshape.dims()[1..].iter().cloned()).collect();
    let idx = e.reshape(idx, &idx_shape)?;
    let picked = e.prim(OpKind::Gather, &[source, idx], &[("axis", AttrValue::Int(1))])?;
    let picked = e.reshape(picked, &tshape)?;
    let mut loss = e.unary(OpKind::Neg, picked)?;
    if smoothing > 0.0 {
        let total = e.reduce(OpKind::ReduceSum, lsm, &[1], false)?;
        let smooth = e.unary(OpKind::Neg, total)?;
        let per_class = match c_dim.as_const() {
            Some(c) => e.binary_scalar(OpKind::Mul, smooth, smoothing / c as f64)?,
            None => {
                let n = count(e, std::slice::from_ref(&c_dim), dtype)?;
                let t = e.binary_scalar(OpKind::Mul, smooth, smoothing)?;
                e.div(t, n)?
            }
        };
        let kept = e.binary_scalar(OpKind::Mul, loss, 1.0 - smoothing)?;
        loss = e.add(kept, per_class)?;
    }
    let zero = e.full(0.0, dtype, &Shape::scalar())?;
    let loss = e.select(valid, loss, zero)?;
    // The mean's divisor: the number of non-ignored targets, counted exactly in i64.
    let out = reduce_loss(e, node, loss, |e| {
        let f = e.convert(valid, DType::I64)?;
        let all: Vec<usize> = (0..e.rank(f)).collect();
        let n = e.reduce(OpKind::ReduceSum, f, &all, false)?;
        e.convert(n, dtype)
    })?;
    e.convert(out, node.ty.dtype)
}

fn mse_loss(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let dtype = compute_dtype(node.ty.dtype);
    let a = e.convert(args[0], dtype)?;
    let b = e.convert(args[1], dtype)?;
    let d = e.sub(a, b)?;
    let sq = e.mul(d, d)?;
    let dims = e.shape(sq).dims().to_vec();
    let out = reduce_loss(e, node, sq, |e| count(e, &dims, dtype))?;
    e.convert(out, node.ty.dtype)
}
