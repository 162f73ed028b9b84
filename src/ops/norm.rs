//! High-level normalisation, attention and loss ops: `softmax`, `log_softmax`, `layer_norm`,
//! `rms_norm`, `batch_norm`, `group_norm`, `scaled_dot_product_attention`, `cross_entropy`,
//! `mse_loss`.
//!
//! These are composite ops: each one computes every element in f64 from its (already
//! dtype-rounded) inputs and rounds the result once to the output dtype. They define the ideal
//! answer that their decompositions into prims are measured against; precise mode returns the
//! unrounded f64 values, so an f32-mode result is exactly the precise result rounded to f32.
//!
//! Float-only: every float operand of one op must have the same dtype as the first one
//! (`mse_loss`, which broadcasts like an elementwise op, promotes instead). Integer class
//! targets (`cross_entropy`) are i32 or i64; an attention mask is bool or the query's dtype.
//!
//! Semantic choices (PyTorch's, checked against its CPU kernels):
//! - `softmax`/`log_softmax` are max-subtracted: `m = max(row)` (NaN-propagating),
//!   `softmax = exp(x - m) / Σ exp(x - m)`, `log_softmax = (x - m) - ln Σ exp(x - m)`. So a NaN
//!   anywhere in a row makes the whole row NaN; a row holding `+inf` is NaN throughout
//!   (`exp(inf - inf)` is NaN and poisons the sum, so `softmax([inf, 1]) = [nan, nan]`, as
//!   torch's kernels give); an all-`-inf` row is NaN; `-inf` entries among finite ones give 0
//!   (`-inf` for `log_softmax`). Logits of 1e4 magnitude are exact. An empty axis gives an
//!   empty result. The axis must exist (a rank-0 input is an axis error).
//! - `layer_norm` normalises over dims `axis..rank` (ONNX LayerNormalization), two-pass in f64
//!   with the biased variance (divide by N): `(x - mean) / sqrt(var + eps) * weight + bias`.
//!   `weight` and `bias` have shape `x.shape[axis..]`. Over a size-1 span the result is `bias`
//!   (0 without one). `rms_norm` is `x / sqrt(mean(x²) + eps) * weight` over the same span.
//!   In every norm `eps` must be finite and at least 0 (an attribute error otherwise).
//! - `batch_norm` is inference mode: `(x - running_mean[c]) / sqrt(running_var[c] + eps) *
//!   weight[c] + bias[c]` for `x: [N, C, ...]`; stats, weight and bias are `[C]`. Optional
//!   arguments are positional: a bias needs a weight before it (pass ones).
//! - `group_norm` splits the C channels of `x: [N, C, ...]` into `groups` groups of C/groups
//!   channels and normalises each (sample, group) over its channels and spatial positions
//!   (biased variance), then applies the per-channel `weight`/`bias` `[C]`. C must be static and
//!   divisible by `groups`.
//! - `scaled_dot_product_attention(q [..., L, D], k [..., S, D], v [..., S, Dv], mask?)` gives
//!   `[..., L, Dv]`; the leading dims of q, k, v broadcast, and the mask broadcasts to
//!   `[..., L, S]` without growing it. Scores are `(q·k) * scale` (`scale` NaN means
//!   `1/sqrt(D)`; with D = 0 every score is 0). Masks are additive biases, as in PyTorch's math
//!   path: a float mask is added, a false bool-mask entry and (with `causal`) every position
//!   `j > i` (the top-left-aligned lower triangle of the L×S matrix) add `-inf`; causal and a
//!   mask may be combined. The scores then go through softmax as above, except that with
//!   `safe_softmax` (the default) a row whose every score is `-inf` (nothing to attend) gives
//!   an all-zero output row: PyTorch's math path uses `_safe_softmax` since 2.5 (older
//!   versions gave NaN). With `safe_softmax=false` such a row is NaN, as plain softmax gives
//!   (ONNX `Attention`). S = 0 gives zeros either way (an empty sum).
//!   Fuel: `L*S*(D+Dv)` per batch element.
//! - `cross_entropy(logits, target)`: logits `[N, C, d...]` (class dim 1) with target
//!   `[N, d...]`, or logits `[C]` with a scalar target. Per element, `nll = -log_softmax[t]`;
//!   with label smoothing ε > 0 the loss is `(1-ε)·nll + (ε/C)·(-Σ_c log_softmax[c])`.
//!   Targets equal to `ignore_index` contribute exactly 0 and are left out of the mean's count
//!   (all ignored: the mean is NaN, as in PyTorch). Any other target outside `[0, C)` is an
//!   `IndexOutOfRange` error. `reduction` is "none" (target's shape), "mean" or "sum" (scalar).
//! - `mse_loss(a, b)`: `(a - b)²` after broadcasting, reduced like `cross_entropy` ("mean" of
//!   an empty tensor is NaN, "sum" is 0).

use super::util::{
    bool_attr, broadcast_concrete, broadcast_shapes, broadcast_view, expect_float, expect_index, expect_min_rank,
    float_attr, int_attr, normalize_axis,
};
use super::{Arity, Native, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, Shape, TensorType};

#[allow(clippy::too_many_arguments)]
const fn high(
    kind: OpKind,
    name: &'static str,
    arity: Arity,
    attrs: &'static [AttrSpec],
    infer: super::InferFn,
    eval: super::EvalFn,
    doc: &'static str,
) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung: Rung::High,
        arity,
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

const REDUCTION: AttrSpec = AttrSpec::optional("reduction", AttrKind::Str, AttrDefault::Str("mean"));

pub static SPECS: &[OpSpec] = &[
    high(
        OpKind::Softmax,
        "softmax",
        Arity::Exactly(1),
        &[int_attr("axis", -1)],
        infer_softmax,
        eval_softmax,
        "exp(x - max) / sum(exp(x - max)) along `axis` (a NaN or +inf in a row makes the row NaN)",
    )
    .with_native(Native::Recovered),
    high(
        OpKind::LogSoftmax,
        "log_softmax",
        Arity::Exactly(1),
        &[int_attr("axis", -1)],
        infer_softmax,
        eval_softmax,
        "(x - max) - log(sum(exp(x - max))) along `axis`",
    )
    .with_native(Native::Recovered),
    high(
        OpKind::LayerNorm,
        "layer_norm",
        Arity::Between(1, 3),
        &[int_attr("axis", -1), float_attr("eps", 1e-5)],
        infer_layer_norm,
        eval_layer_norm,
        "(x - mean) / sqrt(var + eps) * weight + bias over dims axis..rank (biased variance)",
    )
    .with_native(Native::Recovered),
    high(
        OpKind::RmsNorm,
        "rms_norm",
        Arity::Between(1, 2),
        &[int_attr("axis", -1), float_attr("eps", 1e-6)],
        infer_layer_norm,
        eval_layer_norm,
        "x / sqrt(mean(x^2) + eps) * weight over dims axis..rank",
    )
    .with_native(Native::Recovered),
    high(
        OpKind::BatchNorm,
        "batch_norm",
        Arity::Between(3, 5),
        &[float_attr("eps", 1e-5)],
        infer_batch_norm,
        eval_batch_norm,
        "inference batch norm of x [N, C, ...] with running_mean, running_var, weight?, bias? [C]",
    ),
    high(
        OpKind::GroupNorm,
        "group_norm",
        Arity::Between(1, 3),
        &[AttrSpec::required("groups", AttrKind::Int), float_attr("eps", 1e-5)],
        infer_group_norm,
        eval_group_norm,
        "normalise x [N, C, ...] over groups of C/groups channels, then per-channel weight?, bias?",
    ),
    high(
        OpKind::ScaledDotProductAttention,
        "scaled_dot_product_attention",
        Arity::Between(3, 4),
        &[bool_attr("causal", false), float_attr("scale", f64::NAN), bool_attr("safe_softmax", true)],
        infer_attention,
        eval_attention,
        "softmax(q k^T * scale + mask) v; bool mask true = attend; scale NaN = 1/sqrt(D); safe_softmax: all-masked rows give 0, else NaN",
    )
    .with_native(Native::Recovered),
    high(
        OpKind::CrossEntropy,
        "cross_entropy",
        Arity::Exactly(2),
        &[REDUCTION, int_attr("ignore_index", -100), float_attr("label_smoothing", 0.0)],
        infer_cross_entropy,
        eval_cross_entropy,
        "PyTorch cross entropy of logits [N, C, ...] (class dim 1) against integer targets",
    ),
    high(
        OpKind::MseLoss,
        "mse_loss",
        Arity::Exactly(2),
        &[REDUCTION],
        infer_mse_loss,
        eval_mse_loss,
        "(a - b)^2 after broadcasting, reduced by `reduction` (none, mean, sum)",
    ),
];

// ---------------------------------------------------------------------------------------------
// Shared checks

/// A loss reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    None,
    Mean,
    Sum,
}

fn reduction(attrs: &Attrs) -> Result<Reduction, OpError> {
    match attrs.str("reduction") {
        "none" => Ok(Reduction::None),
        "mean" => Ok(Reduction::Mean),
        "sum" => Ok(Reduction::Sum),
        other => Err(OpError::AttrValue {
            name: "reduction",
            problem: format!("must be \"none\", \"mean\" or \"sum\", got {other:?}"),
        }),
    }
}

/// Fails unless argument `arg` has exactly `dtype` (that of argument 0).
fn expect_dtype(arg: usize, ty: &TensorType, dtype: DType) -> Result<(), OpError> {
    if ty.dtype == dtype {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: ty.dtype, expected: format!("{dtype}, the dtype of argument 0") })
    }
}

/// Fails unless argument `arg` (described by `what`) has shape `want`.
fn expect_shape(arg: usize, what: &str, ty: &TensorType, want: &Shape) -> Result<(), OpError> {
    if ty.shape == *want {
        Ok(())
    } else {
        Err(OpError::Shape(format!("argument {arg} ({what}) has shape {}, expected {want}", ty.shape)))
    }
}

/// An `OpError` found while evaluating (attributes are checked by `infer`, so this only
/// happens for a graph that bypassed it).
fn invalid(e: OpError) -> EvalError {
    EvalError::Invalid(e.to_string())
}

/// Checks that a runtime parameter vector has the length its shape rule promised.
fn check_len(what: &str, got: usize, want: usize) -> Result<(), EvalError> {
    if got == want {
        Ok(())
    } else {
        Err(EvalError::Invalid(format!("{what} has {got} elements, expected {want}")))
    }
}

/// NaN-propagating maximum (like `torch.maximum`).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Max-subtracted softmax (or log-softmax) of the `n` values `get(0..n)`, written with `put`.
fn softmax_row(n: usize, log: bool, get: impl Fn(usize) -> f64, mut put: impl FnMut(usize, f64)) {
    let m = (0..n).map(&get).fold(f64::NEG_INFINITY, nan_max);
    let sum: f64 = super::util::sum_f64((0..n).map(|k| (get(k) - m).exp()));
    let log_sum = sum.ln();
    for k in 0..n {
        let shifted = get(k) - m;
        put(k, if log { shifted - log_sum } else { shifted.exp() / sum });
    }
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

fn infer_softmax(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    expect_float(0, args[0])?;
    normalize_axis(attrs.int("axis"), args[0].rank())?;
    Ok(args[0].clone())
}

fn eval_softmax(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let axis = normalize_axis(attrs.int("axis"), shape.len()).map_err(invalid)?;
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let xs = x.floats();
    let mut ys = vec![0.0; xs.len()];
    let log = kind == OpKind::LogSoftmax;
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            softmax_row(n, log, |k| xs[at(k)], |k, y| ys[at(k)] = y);
        }
    }
    Ok(View::from_floats(ctx, out.dtype, shape, ys))
}

// ---------------------------------------------------------------------------------------------
// layer_norm, rms_norm

/// `eps` keeps the denominator away from 0: a finite value at least 0. A negative one makes
/// `var + eps` cancel towards 0 (or below, a NaN), where two correct evaluations of the
/// variance that differ in their last bits give results far apart: no tolerance can bound
/// the decomposition against the reference there. Exporters write small positive values.
fn check_eps(attrs: &Attrs) -> Result<(), OpError> {
    let eps = attrs.float("eps");
    if eps >= 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(OpError::AttrValue { name: "eps", problem: format!("must be finite and at least 0, got {eps}") })
    }
}

fn infer_layer_norm(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    expect_float(0, x)?;
    check_eps(attrs)?;
    let axis = normalize_axis(attrs.int("axis"), x.rank())?;
    let normalized: Shape = x.shape.dims()[axis..].iter().cloned().collect();
    for (i, (a, what)) in args.iter().zip(["input", "weight", "bias"]).enumerate().skip(1) {
        expect_dtype(i, a, x.dtype)?;
        expect_shape(i, what, a, &normalized)?;
    }
    Ok(x.clone())
}

fn eval_layer_norm(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let axis = normalize_axis(attrs.int("axis"), shape.len()).map_err(invalid)?;
    let eps = attrs.float("eps");
    let n: usize = shape[axis..].iter().product();
    let weight = args.get(1).map(View::floats);
    let bias = args.get(2).map(View::floats);
    for (what, p) in [("weight", &weight), ("bias", &bias)] {
        if let Some(p) = p {
            check_len(what, p.len(), n)?;
        }
    }
    let xs = x.floats();
    let mut ys = vec![0.0; xs.len()];
    if n > 0 {
        for (row, dst) in xs.chunks(n).zip(ys.chunks_mut(n)) {
            let count = n as f64;
            if kind == OpKind::RmsNorm {
                let ms = super::util::sum_f64(row.iter().map(|v| v * v)) / count;
                let denom = (ms + eps).sqrt();
                for (j, (y, v)) in dst.iter_mut().zip(row).enumerate() {
                    *y = v / denom * weight.as_ref().map_or(1.0, |w| w[j]);
                }
            } else {
                standardize(row, dst, eps, weight.as_deref(), bias.as_deref(), |j| j);
            }
        }
    }
    Ok(View::from_floats(ctx, out.dtype, shape, ys))
}

/// `dst = (row - mean) / sqrt(var + eps) * weight + bias` with the biased two-pass variance of
/// `row`, in f64; element `j` takes its affine parameters at `param(j)` (its own position for
/// layer_norm, its channel for group_norm).
fn standardize(
    row: &[f64],
    dst: &mut [f64],
    eps: f64,
    weight: Option<&[f64]>,
    bias: Option<&[f64]>,
    param: impl Fn(usize) -> usize,
) {
    let count = row.len() as f64;
    let mean = super::util::sum_f64(row.iter().copied()) / count;
    let var = super::util::sum_f64(row.iter().map(|v| (v - mean) * (v - mean))) / count;
    let denom = (var + eps).sqrt();
    for (j, (y, v)) in dst.iter_mut().zip(row).enumerate() {
        let mut r = (v - mean) / denom;
        if let Some(w) = weight {
            r *= w[param(j)];
        }
        if let Some(b) = bias {
            r += b[param(j)];
        }
        *y = r;
    }
}

// ---------------------------------------------------------------------------------------------
// batch_norm, group_norm

/// The `[C]` shape of per-channel parameters of `x: [N, C, ...]`.
fn channel_shape(x: &TensorType) -> Shape {
    std::iter::once(x.shape.dims()[1].clone()).collect()
}

fn infer_batch_norm(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    expect_float(0, x)?;
    check_eps(attrs)?;
    expect_min_rank(0, x, 2)?;
    let c = channel_shape(x);
    let names = ["input", "running_mean", "running_var", "weight", "bias"];
    for (i, (a, what)) in args.iter().zip(names).enumerate().skip(1) {
        expect_dtype(i, a, x.dtype)?;
        expect_shape(i, what, a, &c)?;
    }
    Ok(x.clone())
}

fn eval_batch_norm(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let eps = attrs.float("eps");
    let c = *shape.get(1).ok_or_else(|| EvalError::Invalid("batch_norm needs rank >= 2".into()))?;
    let inner: usize = shape[2..].iter().product();
    let params: Vec<Vec<f64>> = args[1..].iter().map(View::floats).collect();
    for p in &params {
        check_len("a per-channel parameter", p.len(), c)?;
    }
    let (mean, var) = (&params[0], &params[1]);
    let (weight, bias) = (params.get(2), params.get(3));
    let xs = x.floats();
    let mut ys = vec![0.0; xs.len()];
    for (flat, (y, v)) in ys.iter_mut().zip(&xs).enumerate() {
        let ch = (flat / inner) % c;
        let mut r = (v - mean[ch]) / (var[ch] + eps).sqrt();
        if let Some(w) = weight {
            r *= w[ch];
        }
        if let Some(b) = bias {
            r += b[ch];
        }
        *y = r;
    }
    Ok(View::from_floats(ctx, out.dtype, shape, ys))
}

fn infer_group_norm(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    expect_float(0, x)?;
    check_eps(attrs)?;
    expect_min_rank(0, x, 2)?;
    let groups = attrs.int("groups");
    if groups <= 0 {
        return Err(OpError::AttrValue { name: "groups", problem: format!("must be positive, got {groups}") });
    }
    let c = x.shape.dims()[1]
        .as_const()
        .ok_or_else(|| OpError::Shape(format!("group_norm needs a static channel dim, got {}", x.shape.dims()[1])))?;
    if c % groups as u64 != 0 {
        return Err(OpError::AttrValue {
            name: "groups",
            problem: format!("{c} channels do not divide into {groups} groups"),
        });
    }
    let cs = channel_shape(x);
    for (i, (a, what)) in args.iter().zip(["input", "weight", "bias"]).enumerate().skip(1) {
        expect_dtype(i, a, x.dtype)?;
        expect_shape(i, what, a, &cs)?;
    }
    Ok(x.clone())
}

fn eval_group_norm(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let shape = x.shape().to_vec();
    let eps = attrs.float("eps");
    let c = *shape.get(1).ok_or_else(|| EvalError::Invalid("group_norm needs rank >= 2".into()))?;
    let groups = usize::try_from(attrs.int("groups")).unwrap_or(0);
    if groups == 0 || c % groups != 0 {
        return Err(EvalError::Invalid(format!("{c} channels do not divide into {} groups", attrs.int("groups"))));
    }
    let inner: usize = shape[2..].iter().product();
    let weight = args.get(1).map(View::floats);
    let bias = args.get(2).map(View::floats);
    for (what, p) in [("weight", &weight), ("bias", &bias)] {
        if let Some(p) = p {
            check_len(what, p.len(), c)?;
        }
    }
    let xs = x.floats();
    let mut ys = vec![0.0; xs.len()];
    let block = (c / groups) * inner;
    if block > 0 {
        for (gi, (row, dst)) in xs.chunks(block).zip(ys.chunks_mut(block)).enumerate() {
            let first_channel = (gi % groups) * (c / groups);
            standardize(row, dst, eps, weight.as_deref(), bias.as_deref(), |j| first_channel + j / inner);
        }
    }
    Ok(View::from_floats(ctx, out.dtype, shape, ys))
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention

/// All but the last two dims.
fn batch_dims(ty: &TensorType) -> Shape {
    ty.shape.dims()[..ty.rank() - 2].iter().cloned().collect()
}

fn infer_attention(_: OpKind, _: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (q, k, v) = (args[0], args[1], args[2]);
    expect_float(0, q)?;
    for (i, a) in [q, k, v].into_iter().enumerate() {
        expect_dtype(i, a, q.dtype)?;
        expect_min_rank(i, a, 2)?;
    }
    let last = |t: &TensorType, from_end: usize| t.shape.dims()[t.rank() - from_end].clone();
    let (l, d) = (last(q, 2), last(q, 1));
    let (s, dk) = (last(k, 2), last(k, 1));
    let (sv, dv) = (last(v, 2), last(v, 1));
    if d != dk {
        return Err(OpError::Shape(format!("query head dim {d} differs from key head dim {dk}")));
    }
    if s != sv {
        return Err(OpError::Shape(format!("key length {s} differs from value length {sv}")));
    }
    let batch = broadcast_shapes(&broadcast_shapes(&batch_dims(q), &batch_dims(k))?, &batch_dims(v))?;
    if let Some(mask) = args.get(3) {
        if !mask.dtype.is_bool() && mask.dtype != q.dtype {
            return Err(OpError::DType { arg: 3, got: mask.dtype, expected: format!("bool or {}", q.dtype) });
        }
        let scores: Shape = batch.dims().iter().cloned().chain([l.clone(), s]).collect();
        if broadcast_shapes(&mask.shape, &scores).ok().as_ref() != Some(&scores) {
            return Err(OpError::Shape(format!("mask of shape {} does not broadcast to {scores}", mask.shape)));
        }
    }
    let out: Shape = batch.dims().iter().cloned().chain([l, dv]).collect();
    Ok(TensorType::new(q.dtype, out))
}

/// The additive bias of an attention mask.
enum MaskBias {
    None,
    Bool(Vec<bool>),
    Float(Vec<f64>),
}

fn eval_attention(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let (q, k, v) = (&args[0], &args[1], &args[2]);
    for a in [q, k, v] {
        if a.rank() < 2 {
            return Err(EvalError::Invalid("attention operands need rank >= 2".into()));
        }
    }
    let tail = |a: &View| {
        let r = a.rank();
        (a.shape()[r - 2], a.shape()[r - 1])
    };
    let ((l, d), (s, dk), (sv, dv)) = (tail(q), tail(k), tail(v));
    if d != dk || s != sv {
        return Err(EvalError::Invalid("attention operand shapes disagree".into()));
    }
    let lead = |a: &View| a.shape()[..a.rank() - 2].to_vec();
    let batch = broadcast_concrete(&broadcast_concrete(&lead(q), &lead(k))?, &lead(v))?;
    let with = |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
    let qs = broadcast_view(q, &with(l, d))?.floats();
    let ks = broadcast_view(k, &with(s, d))?.floats();
    let vs = broadcast_view(v, &with(s, dv))?.floats();
    let mask = match args.get(3) {
        None => MaskBias::None,
        Some(m) => {
            let m = broadcast_view(m, &with(l, s))?;
            if m.dtype().is_bool() {
                MaskBias::Bool(m.bools())
            } else {
                MaskBias::Float(m.floats())
            }
        }
    };
    let nb: usize = batch.iter().product();
    let work = [nb, l, s, d.saturating_add(dv)].iter().fold(1u64, |acc, &x| acc.saturating_mul(x as u64));
    ctx.charge(work)?;

    let causal = attrs.bool("causal");
    let safe = attrs.bool("safe_softmax");
    let scale = match attrs.float("scale") {
        sc if sc.is_nan() => 1.0 / (d as f64).sqrt(),
        sc => sc,
    };
    let mut ys = vec![0.0; nb * l * dv];
    let mut scores = vec![0.0; s];
    let mut probs = vec![0.0; s];
    for b in 0..nb {
        for i in 0..l {
            let qrow = &qs[(b * l + i) * d..(b * l + i + 1) * d];
            for (j, sc) in scores.iter_mut().enumerate() {
                let krow = &ks[(b * s + j) * d..(b * s + j + 1) * d];
                let dot: f64 = super::util::sum_f64(qrow.iter().zip(krow).map(|(x, y)| x * y));
                let mut score = if d == 0 { 0.0 } else { dot * scale };
                let at = (b * l + i) * s + j;
                match &mask {
                    MaskBias::None => {}
                    MaskBias::Bool(m) if !m[at] => score += f64::NEG_INFINITY,
                    MaskBias::Bool(_) => {}
                    MaskBias::Float(m) => score += m[at],
                }
                if causal && j > i {
                    score += f64::NEG_INFINITY;
                }
                *sc = score;
            }
            let dst = &mut ys[(b * l + i) * dv..(b * l + i + 1) * dv];
            // `_safe_softmax`: a row with nothing to attend (every score -inf) gives zeros;
            // plain softmax makes it NaN. An empty row (S = 0) sums to zeros either way.
            if s == 0 || (safe && scores.iter().all(|&x| x == f64::NEG_INFINITY)) {
                continue;
            }
            softmax_row(s, false, |j| scores[j], |j, p| probs[j] = p);
            for (e, y) in dst.iter_mut().enumerate() {
                *y = super::util::sum_f64(probs.iter().enumerate().map(|(j, p)| p * vs[(b * s + j) * dv + e]));
            }
        }
    }
    Ok(View::from_floats(ctx, out.dtype, with(l, dv), ys))
}

// ---------------------------------------------------------------------------------------------
// cross_entropy, mse_loss

fn check_label_smoothing(attrs: &Attrs) -> Result<f64, OpError> {
    let eps = attrs.float("label_smoothing");
    if (0.0..=1.0).contains(&eps) {
        Ok(eps)
    } else {
        Err(OpError::AttrValue { name: "label_smoothing", problem: format!("must be in [0, 1], got {eps}") })
    }
}

fn infer_cross_entropy(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let (logits, target) = (args[0], args[1]);
    expect_float(0, logits)?;
    expect_index(1, target).map_err(|_| OpError::DType {
        arg: 1,
        got: target.dtype,
        expected: "an integer type of class indices (i32 or i64)".into(),
    })?;
    expect_min_rank(0, logits, 1)?;
    let red = reduction(attrs)?;
    check_label_smoothing(attrs)?;
    let dims = logits.shape.dims();
    let want: Shape = if dims.len() == 1 {
        Shape::scalar()
    } else {
        dims.iter().enumerate().filter(|&(i, _)| i != 1).map(|(_, d)| d.clone()).collect()
    };
    if target.shape != want {
        return Err(OpError::Shape(format!(
            "target has shape {}, expected {want} (logits {} without the class dim)",
            target.shape, logits.shape
        )));
    }
    let shape = if red == Reduction::None { want } else { Shape::scalar() };
    Ok(TensorType::new(logits.dtype, shape))
}

/// Reduces per-element losses; `count` is the divisor of the mean.
fn reduce(red: Reduction, losses: Vec<f64>, count: usize) -> Vec<f64> {
    match red {
        Reduction::None => losses,
        Reduction::Sum => vec![super::util::sum_f64(losses.iter().copied())],
        Reduction::Mean => vec![super::util::sum_f64(losses.iter().copied()) / count as f64],
    }
}

fn eval_cross_entropy(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let (logits, target) = (&args[0], &args[1]);
    let red = reduction(attrs).map_err(invalid)?;
    let smoothing = check_label_smoothing(attrs).map_err(invalid)?;
    let ignore = attrs.int("ignore_index");
    let shape = logits.shape();
    let (nb, c, inner) = match shape.len() {
        0 => return Err(EvalError::Invalid("cross_entropy logits need rank >= 1".into())),
        1 => (1, shape[0], 1),
        _ => (shape[0], shape[1], shape[2..].iter().product()),
    };
    let xs = logits.floats();
    let ts = target.ints();
    check_len("target", ts.len(), nb * inner)?;
    let mut losses = vec![0.0; ts.len()];
    let mut count = 0usize;
    let mut logp = vec![0.0; c];
    for b in 0..nb {
        for i in 0..inner {
            let t = ts[b * inner + i];
            if t == ignore {
                continue;
            }
            let cls =
                usize::try_from(t).ok().filter(|&u| u < c).ok_or(EvalError::IndexOutOfRange { index: t, size: c })?;
            softmax_row(c, true, |k| xs[(b * c + k) * inner + i], |k, y| logp[k] = y);
            let mut loss = -logp[cls];
            if smoothing > 0.0 {
                let smooth = -super::util::sum_f64(logp.iter().copied());
                loss = (1.0 - smoothing) * loss + smoothing / c as f64 * smooth;
            }
            losses[b * inner + i] = loss;
            count += 1;
        }
    }
    let out_shape: Vec<usize> = if red == Reduction::None { target.shape().to_vec() } else { Vec::new() };
    Ok(View::from_floats(ctx, out.dtype, out_shape, reduce(red, losses, count)))
}

fn infer_mse_loss(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    expect_float(0, args[0])?;
    expect_float(1, args[1])?;
    let red = reduction(attrs)?;
    let shape = broadcast_shapes(&args[0].shape, &args[1].shape)?;
    let dtype = DType::promote(args[0].dtype, args[1].dtype);
    Ok(TensorType::new(dtype, if red == Reduction::None { shape } else { Shape::scalar() }))
}

fn eval_mse_loss(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let red = reduction(attrs).map_err(invalid)?;
    let shape = broadcast_concrete(args[0].shape(), args[1].shape())?;
    let a = broadcast_view(&args[0], &shape)?.floats();
    let b = broadcast_view(&args[1], &shape)?.floats();
    let losses: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).collect();
    let count = losses.len();
    let out_shape: Vec<usize> = if red == Reduction::None { shape } else { Vec::new() };
    Ok(View::from_floats(ctx, out.dtype, out_shape, reduce(red, losses, count)))
}
