//! Numerics: the tolerance table every decomposition is held to, and the harness that proves
//! decompositions against it on generated cases.
//!
//! The question is always the same: a high-level op's decomposition into prims, run in the
//! op's own dtype (f32 mode: every prim rounds its result), against the high-level op run in
//! the interpreter's precise (f64) mode and rounded to the output dtype. How far apart may they
//! be? [`tolerance`] answers per op; [`compare`] applies the answer element by element and says
//! exactly which element broke which bound; [`check_op`] builds a random single-op case from
//! bytes, lowers it (`functionalize` then `decompose`), runs both sides and compares.
//! NUMERICS.md at the repository root is this table in prose, with the reasoning behind each
//! number.
//!
//! Rules that hold for every op:
//! - Integer and bool results are compared exactly.
//! - A non-finite reference (NaN, ±inf in f64) must be matched exactly: NaN by any NaN, an
//!   infinity by the same infinity.
//! - A finite reference is rounded to the output dtype (`rr`) and the result must be within the
//!   op's bound of it. Bounds are in units of the output dtype: `eps` is its machine epsilon
//!   (2^-23 for f32), `ulp(rr)` the spacing at `rr`, `tiny` its smallest normal (results below
//!   it may be flushed to zero, as GPU backends do).
//! - Where a finite result can only be computed in the dtype by leaving its range on the way
//!   (the squares of a variance of 1e30s, the partial products of a `prod`, a dot product of
//!   1e30s), the element is *excused*: counted, not checked. The precondition is stated per op.

mod bounds;
mod cases;
pub mod grad;

pub use cases::{generate_case, random_data, Case, MAX_ATTEMPTS, MAX_DIM};

use std::fmt::{self, Write as _};

use half::{bf16, f16};

use crate::gen::{random_attr, random_dim, random_dtype, GenConfig, Source};
use crate::interp::{self, round_float, Options};
use crate::ir::verify::{verify, Stage};
use crate::ir::{AttrValue, Attrs, DType, Dim, Graph, Shape, TensorType, Value};
use crate::ops::util::{normalize_axes, normalize_axis, ravel, unravel};
use crate::ops::{all_specs, Arity, OpKind, Rung};
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use crate::tensor::{Tensor, TensorData};
use bounds::{
    attention_bounds, batch_norm_bounds, broadcast_numel, cross_entropy_bounds, dot_length, lstm_bounds, norm_bounds,
    pool_length,
};

// =============================================================================================
// The tolerance table
// =============================================================================================

/// How a decomposed op must agree with its precise reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// Bit-equal in the output dtype (any NaN matches any NaN; `-0` and `+0` differ).
    Exact,
    /// Pointwise: within `ulps` ULPs of the rounded reference, or within an absolute floor of
    /// `max(floor_eps * eps, tiny)` (`floor_eps = 0`: only the flush-to-zero floor).
    Ulp { ulps: u32, floor_eps: f64 },
    /// An error bound computed per element from the op's inputs (reductions, products,
    /// normalisations, attention, losses); see [`BoundKind`].
    Bound(BoundKind),
}

/// The per-element bounds of [`Tolerance::Bound`]. In every formula `n` is the length of the
/// reduction feeding the element; every bound also allows `2 ulp(rr) + tiny`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundKind {
    /// `sum`, `mean`, `cumsum`: `n * eps * S` with `S` the op applied to `|x|` (`Σ|x|`,
    /// `mean(|x|)`, each element's prefix sum; `n` the scanned axis's length). Excused where `S`
    /// over the finite inputs (`n S` for `mean`) exceeds the range.
    Sum,
    /// `prod`: `(n + 1) * eps * |ref|`. Excused unless every partial product (any order) stays
    /// normal: `Π max(|x|, 1) <= max` and `Π min(|x|, 1) >= tiny` (zeros left out).
    Prod,
    /// `bmm`, `linear`, `addmm`, `conv2d`: `(n + 2) * eps * S` with `S` the op on `|inputs|`
    /// (and `|alpha|`, `|beta|`); `n` the inner (accumulation) length. Excused where `S` over
    /// the finite inputs (with `alpha` counted as `max(|alpha|, 1)`) exceeds the range.
    Dot,
    /// `avg_pool2d`, `adaptive_avg_pool2d`: `(n + 1) * eps * S`, `S` the pool of `|x|`, `n` the
    /// window size. Excused where `n S` exceeds the range.
    Pool,
    /// `var`: two-pass error analysis, see NUMERICS.md: `(2(n+3) eps ss + 2n Δ² + 4n tiny) /
    /// (n - c) + 2 eps |ref|` with `Δ = n eps mean|x| + eps max|x - mean|`. Excused where
    /// `16 n max|x|²` exceeds the range.
    Variance,
    /// `std`: the variance bound `B` carried through the square root:
    /// `min(sqrt(B), B / ref) + 2 eps ref`; same excuse as `var`.
    Std,
    /// `logsumexp`: `2 eps (|ref| + n + 2)`.
    Logsumexp,
    /// `softmax`: `2 eps (n + |ln ref| + 2) ref`.
    Softmax,
    /// `log_softmax`: `2 eps (|ref| + n + 2)`.
    LogSoftmax,
    /// `layer_norm`, `group_norm`: first-order analysis of mean, two-pass variance, rsqrt and
    /// affine epilogue per row, see NUMERICS.md. Excused where `16 n max|x|²` exceeds the range
    /// or the rsqrt's relative error `ρ` reaches 1/4.
    LayerNorm,
    /// `rms_norm`: `2 |ref| (ρ + 2 eps)`, `ρ = ((n+2) eps ms + eps |eps_attr| + 4 tiny) /
    /// (2 |ms + eps_attr|) + 2 eps`. Excused where `4 n max|x|²` exceeds the range or `ρ >= 1/4`.
    RmsNorm,
    /// `batch_norm`: `2 (|x̂ w| (ρ + 2 eps) + eps |b| + eps |ref|)`, `ρ` the relative error of
    /// `rsqrt(var + eps_attr)`. Excused where `ρ >= 1/4`.
    BatchNorm,
    /// `scaled_dot_product_attention`: score errors, softmax errors and the `P V` accumulation,
    /// see NUMERICS.md. Excused where a row's scores can exceed the range or their error
    /// reaches 1 (the dtype cannot resolve the softmax).
    Attention,
    /// `cross_entropy`: per target `eps (5 L + 2 (C + 2))` with `L` the loss's magnitude
    /// (smoothing included), summed (plus the reduction's own `N eps Σ L`) for sum/mean.
    /// Excused where a row's `|log p|` (summed over the classes with smoothing, else the
    /// target's) exceeds the range: they are formed in the dtype.
    CrossEntropy,
    /// `mse_loss`: `3 eps |ref|` per element, `(n + 3) eps |ref|` reduced (all terms are
    /// non-negative). Excused where the sum of squares exceeds the range.
    MseLoss,
    /// `lstm`: a first-order error bound carried through the recurrence beside the f64
    /// reference (see `lstm_bounds`). Excused from the first non-finite or overflowing value
    /// of a batch row on, or from the first step whose error bound is itself unbounded.
    Lstm,
}

/// The tolerance of `op`'s decomposition (derivatives: [`grad::grad_tolerance`]). Integer and
/// bool results are always exact, whatever this says. Prims and sources are not decomposed;
/// they get the bound their own evaluation in the dtype meets.
pub fn tolerance(op: OpKind) -> Tolerance {
    use BoundKind as B;
    use OpKind::*;
    use Tolerance::*;
    match op {
        // Data movement, selection and comparisons: no arithmetic, so nothing to round.
        View | Flatten | Transpose | Expand | Squeeze | Unsqueeze | Select | Contiguous | Stack | Split | Chunk
        | SliceScatter | Embedding | MaskedFill | Tril | Triu | Dropout | Amax | Amin | Argmax | Argmin | MaxPool2d => {
            Exact
        }
        // max/min against constants, and one multiply of x by a constant of x's dtype: a
        // single correctly rounded operation is the rounded reference.
        Relu | Clamp | LeakyRelu => Exact,
        // In-place ops: one correctly rounded add/sub/mul/div (then a conversion, where double
        // rounding is innocuous: the wider type has at least 2p+2 bits), or pure copies.
        AddInplace | SubInplace | MulInplace | DivInplace | ReluInplace | CopyInplace | FillInplace
        | MaskedFillInplace | SliceAssignInplace => Exact,
        // Pointwise chains.
        Hardsigmoid | Hardswish => Ulp { ulps: 4, floor_eps: 1.0 },
        Sigmoid | Elu | Atan => Ulp { ulps: 4, floor_eps: 0.0 },
        Silu | Softplus => Ulp { ulps: 8, floor_eps: 0.0 },
        Gelu => Ulp { ulps: 16, floor_eps: 8.0 },
        // Reductions, contractions, normalisations.
        Sum | Mean | ReduceSum | Cumsum => Bound(B::Sum),
        Prod | ReduceProd => Bound(B::Prod),
        Var => Bound(B::Variance),
        Std => Bound(B::Std),
        Logsumexp => Bound(B::Logsumexp),
        Bmm | Linear | Addmm | Conv2d | Matmul | Conv => Bound(B::Dot),
        AvgPool2d | AdaptiveAvgPool2d => Bound(B::Pool),
        Softmax => Bound(B::Softmax),
        LogSoftmax => Bound(B::LogSoftmax),
        LayerNorm | GroupNorm => Bound(B::LayerNorm),
        RmsNorm => Bound(B::RmsNorm),
        BatchNorm => Bound(B::BatchNorm),
        ScaledDotProductAttention => Bound(B::Attention),
        CrossEntropy => Bound(B::CrossEntropy),
        MseLoss => Bound(B::MseLoss),
        Lstm => Bound(B::Lstm),
        // Elementwise prims compute each element in f64 and round once: the rounded reference.
        // Sources, shape and index prims move data.
        _ => Exact,
    }
}

/// Every high-level op, in spec order: what `tests/all/numerics.rs` and the fuzz target cover.
pub fn high_level_ops() -> Vec<OpKind> {
    all_specs().filter(|s| s.rung == Rung::High).map(|s| s.kind).collect()
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tolerance::Exact => f.write_str("exact"),
            Tolerance::Ulp { ulps, floor_eps } if *floor_eps > 0.0 => {
                write!(f, "{ulps} ulp, or |err| <= {floor_eps} eps")
            }
            Tolerance::Ulp { ulps, .. } => write!(f, "{ulps} ulp"),
            Tolerance::Bound(k) => write!(f, "{}", k.formula()),
        }
    }
}

impl BoundKind {
    /// The bound's formula, for messages.
    pub fn formula(self) -> &'static str {
        use BoundKind::*;
        match self {
            Sum => "n eps S, S = op(|x|)",
            Prod => "(n + 1) eps |ref|",
            Dot => "(n + 2) eps S, S = op(|inputs|)",
            Pool => "(n + 1) eps S, S = pool(|x|)",
            Variance => "(2(n+3) eps ss + 2n Δ² + 4n tiny)/(n - c) + 2 eps |ref|",
            Std => "min(sqrt(B_var), B_var/ref) + 2 eps ref",
            Logsumexp => "2 eps (|ref| + n + 2)",
            Softmax => "2 eps (n + |ln ref| + 2) ref",
            LogSoftmax => "2 eps (|ref| + n + 2)",
            LayerNorm => "2 (|w| (|x̂| (ρ + eps) + Δ r) + eps (|x̂ w| + |b| + |ref|))",
            RmsNorm => "2 |ref| (ρ + 2 eps)",
            BatchNorm => "2 (|x̂ w| (ρ + 2 eps) + eps |b| + eps |ref|)",
            Attention => "2 ((2 eps (S + 2) + expm1(2 E) + (S + 1) eps) P + 2 eps ln(S) max|v| + S tiny max|v|)",
            CrossEntropy => "eps (5 L + 2 (C + 2)) per target",
            MseLoss => "(n + 3) eps |ref|",
            Lstm => "2 E, E carried through the steps: gates (H+2) eps S + |r| E_h; σ, tanh by slope and 4 eps; c, h by products",
        }
    }
}

// =============================================================================================
// Facts about float dtypes
// =============================================================================================

/// Machine epsilon of a float dtype (0 for others).
pub fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::EPSILON as f64,
        DType::F64 => f64::EPSILON,
        DType::F16 => f16::EPSILON.to_f64(),
        DType::BF16 => bf16::EPSILON.to_f64(),
        _ => 0.0,
    }
}

/// The smallest positive normal value of a float dtype.
pub fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::MIN_POSITIVE as f64,
        DType::F16 => f16::MIN_POSITIVE.to_f64(),
        DType::BF16 => bf16::MIN_POSITIVE.to_f64(),
        _ => f64::MIN_POSITIVE,
    }
}

/// The largest finite value of a float dtype.
pub fn max_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f32::MAX as f64,
        DType::F16 => f16::MAX.to_f64(),
        DType::BF16 => bf16::MAX.to_f64(),
        _ => f64::MAX,
    }
}

/// Position of `x` (rounded to `dtype`) on its ordered line of values (±0 at 0; NaN: None).
fn ordinal(dtype: DType, x: f64) -> Option<i64> {
    if x.is_nan() {
        return None;
    }
    let (bits, sign): (u64, u64) = match dtype {
        DType::F32 => ((x as f32).to_bits() as u64, 1 << 31),
        DType::F16 => (f16_from_f64(x).to_bits() as u64, 1 << 15),
        DType::BF16 => (bf16_from_f64(x).to_bits() as u64, 1 << 15),
        _ => (x.to_bits(), 1 << 63),
    };
    let mag = (bits & !sign) as i64;
    Some(if bits & sign != 0 { -mag } else { mag })
}

/// Distance in ULPs of `dtype` between two values (`u64::MAX` when either is NaN).
pub fn ulp_distance(dtype: DType, a: f64, b: f64) -> u64 {
    match (ordinal(dtype, a), ordinal(dtype, b)) {
        (Some(x), Some(y)) => (x as i128 - y as i128).unsigned_abs().min(u64::MAX as u128) as u64,
        _ => u64::MAX,
    }
}

/// The spacing of `dtype`'s values at `|x|` (the distance to the next value away from zero).
pub fn ulp_at(dtype: DType, x: f64) -> f64 {
    let a = x.abs();
    match dtype {
        DType::F32 => {
            let v = a as f32;
            if v.is_infinite() {
                return f64::INFINITY;
            }
            f32::from_bits(v.to_bits() + 1) as f64 - v as f64
        }
        DType::F16 => {
            let v = f16_from_f64(a);
            if v.is_infinite() {
                return f64::INFINITY;
            }
            f16::from_bits(v.to_bits() + 1).to_f64() - v.to_f64()
        }
        DType::BF16 => {
            let v = bf16_from_f64(a);
            if v.is_infinite() {
                return f64::INFINITY;
            }
            bf16::from_bits(v.to_bits() + 1).to_f64() - v.to_f64()
        }
        _ => {
            if a.is_infinite() {
                return f64::INFINITY;
            }
            f64::from_bits(a.to_bits() + 1) - a
        }
    }
}

// =============================================================================================
// Comparing one output
// =============================================================================================

/// What [`compare`] needs besides the two tensors: the single-op case that produced them.
#[derive(Clone, Copy)]
pub struct CompareCtx<'a> {
    /// The original (high-level) graph: its inputs, one op node, its outputs.
    pub graph: &'a Graph,
    /// The op node.
    pub node: Value,
    /// The inputs the graph ran on.
    pub inputs: &'a [Tensor],
    /// The name of the output being compared (for messages).
    pub output: &'a str,
}

/// How well one output agreed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Agreement {
    /// Elements compared.
    pub elements: usize,
    /// Finite elements not checked because computing them in the dtype leaves its range.
    pub excused: usize,
    /// Largest ULP distance seen between a finite result and the rounded reference.
    pub max_ulps: u64,
    /// Largest observed error as a fraction of the allowed error (at most 1 when passing;
    /// 0 for exact comparisons).
    pub max_ratio: f64,
}

impl Agreement {
    /// Folds another agreement into this one.
    pub fn merge(&mut self, other: &Agreement) {
        self.elements += other.elements;
        self.excused += other.excused;
        self.max_ulps = self.max_ulps.max(other.max_ulps);
        self.max_ratio = self.max_ratio.max(other.max_ratio);
    }
}

/// Where and how a decomposed result broke its bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub op: OpKind,
    /// The output's name.
    pub output: String,
    pub detail: MismatchDetail,
}

#[derive(Clone, Debug, PartialEq)]
pub enum MismatchDetail {
    /// The results have different shapes or dtypes.
    Type { reference: String, got: String },
    /// One element is out of bounds.
    Element {
        /// Row-major multi-index of the element.
        index: Vec<usize>,
        /// The precise (f64) reference.
        reference: f64,
        /// The reference rounded to the output dtype.
        expected: f64,
        got: f64,
        /// The allowed error, in words and numbers.
        allowed: String,
    },
    /// The bound itself could not be computed (an auxiliary run failed): a harness problem.
    Harness(String),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} output `{}`: ", self.op, self.output)?;
        match &self.detail {
            MismatchDetail::Type { reference, got } => write!(f, "reference is {reference}, decomposed is {got}"),
            MismatchDetail::Element { index, reference, expected, got, allowed } => write!(
                f,
                "element {index:?}: reference {reference:?} (rounded {expected:?}), decomposed {got:?}; allowed {allowed}"
            ),
            MismatchDetail::Harness(m) => write!(f, "could not compute the bound: {m}"),
        }
    }
}

impl std::error::Error for Mismatch {}

/// One element's allowed error, and whether it is checked at all.
#[derive(Clone, Copy, Debug)]
struct ElemBound {
    abs: f64,
    in_range: bool,
}

impl ElemBound {
    fn new(abs: f64, in_range: bool) -> ElemBound {
        ElemBound { abs, in_range }
    }
}

/// Compares a decomposed result `got` with the precise `reference` of output `ctx.output` of
/// `op` (see the module docs for the rules, [`tolerance`] for the table).
pub fn compare(op: OpKind, reference: &Tensor, got: &Tensor, ctx: &CompareCtx) -> Result<Agreement, Mismatch> {
    compare_with(op, tolerance(op), reference, got, ctx)
}

fn compare_with(
    op: OpKind,
    tol: Tolerance,
    reference: &Tensor,
    got: &Tensor,
    ctx: &CompareCtx,
) -> Result<Agreement, Mismatch> {
    let mismatch = |detail| Mismatch { op, output: ctx.output.to_string(), detail };
    let dtype = got.dtype();
    let same_class = reference.dtype() == dtype || (reference.dtype() == DType::F64 && dtype.is_float());
    if reference.shape() != got.shape() || !same_class {
        return Err(mismatch(MismatchDetail::Type {
            reference: format!("{}{:?}", reference.dtype(), reference.shape()),
            got: format!("{}{:?}", dtype, got.shape()),
        }));
    }
    let shape = got.shape().to_vec();
    let mut agreement = Agreement { elements: got.numel(), ..Agreement::default() };
    if !dtype.is_float() {
        let (r, g) = (int_values(reference), int_values(got));
        if let Some(k) = (0..r.len()).find(|&k| r[k] != g[k]) {
            return Err(mismatch(MismatchDetail::Element {
                index: unravel(k, &shape).to_vec(),
                reference: r[k] as f64,
                expected: r[k] as f64,
                got: g[k] as f64,
                allowed: "exact (integer result)".into(),
            }));
        }
        return Ok(agreement);
    }
    let r = reference.to_f64_vec();
    let g = got.to_f64_vec();
    let bounds = match tol {
        Tolerance::Bound(kind) => {
            Some(element_bounds(kind, op, ctx, &r, dtype).map_err(|m| mismatch(MismatchDetail::Harness(m)))?)
        }
        _ => pointwise_range(op, ctx, r.len(), dtype).map_err(|m| mismatch(MismatchDetail::Harness(m)))?,
    };
    let (e, small) = (eps(dtype), tiny(dtype));
    for k in 0..r.len() {
        let (rv, gv) = (r[k], g[k]);
        let fail = |allowed: String| {
            mismatch(MismatchDetail::Element {
                index: unravel(k, &shape).to_vec(),
                reference: rv,
                expected: round_float(dtype, rv),
                got: gv,
                allowed,
            })
        };
        let b = bounds.as_ref().map_or(ElemBound::new(0.0, true), |bs| bs[k]);
        if !b.in_range {
            // Computing this element in the dtype leaves its range on the way: not checked.
            agreement.excused += 1;
            continue;
        }
        if !rv.is_finite() {
            let ok = if rv.is_nan() { gv.is_nan() } else { gv == rv };
            if !ok {
                return Err(fail("exactly the same non-finite value".into()));
            }
            continue;
        }
        let rr = round_float(dtype, rv);
        let bitwise = same_bits(dtype, rr, gv);
        match tol {
            Tolerance::Exact => {
                if !bitwise {
                    return Err(fail("exact (bit-equal in the output dtype)".into()));
                }
            }
            Tolerance::Ulp { ulps, floor_eps } => {
                let d = ulp_distance(dtype, rr, gv);
                let floor = (floor_eps * e).max(small);
                let err = (gv - rr).abs();
                if d > ulps as u64 && !at_most(err, floor) {
                    return Err(fail(format!("{ulps} ulp or |err| <= {floor:e}; off by {d} ulp, |err| = {err:e}")));
                }
                agreement.max_ulps = agreement.max_ulps.max(d);
                let ratio = if d <= ulps as u64 { d as f64 / ulps.max(1) as f64 } else { err / floor };
                agreement.max_ratio = agreement.max_ratio.max(ratio);
            }
            Tolerance::Bound(kind) => {
                if bitwise || gv == rr {
                    continue;
                }
                // A bound that could not be formed (NaN) allows nothing beyond rounding.
                let base = if b.abs.is_nan() { 0.0 } else { b.abs };
                let allowed = base + 2.0 * ulp_at(dtype, rr) + small;
                let err = (gv - rr).abs();
                if !at_most(err, allowed) {
                    return Err(fail(format!(
                        "|err| <= {allowed:e} ({}, plus 2 ulp + tiny); |err| = {err:e}",
                        kind.formula()
                    )));
                }
                agreement.max_ulps = agreement.max_ulps.max(ulp_distance(dtype, rr, gv));
                agreement.max_ratio = agreement.max_ratio.max(err / allowed);
            }
        }
    }
    Ok(agreement)
}

/// `a <= b`, false when either is NaN.
fn at_most(a: f64, b: f64) -> bool {
    matches!(a.partial_cmp(&b), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal))
}

/// Bit equality in `dtype`, any NaN equal to any NaN.
fn same_bits(dtype: DType, a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    match dtype {
        DType::F32 => (a as f32).to_bits() == (b as f32).to_bits(),
        DType::F16 => f16_from_f64(a).to_bits() == f16_from_f64(b).to_bits(),
        DType::BF16 => bf16_from_f64(a).to_bits() == bf16_from_f64(b).to_bits(),
        _ => a.to_bits() == b.to_bits(),
    }
}

fn int_values(t: &Tensor) -> Vec<i64> {
    match t.data() {
        TensorData::Bool(v) => v.iter().map(|&x| x as i64).collect(),
        d => d.ints().unwrap_or_else(|| t.to_f64_vec().into_iter().map(|x| x as i64).collect()),
    }
}

// =============================================================================================
// Per-element bounds
// =============================================================================================

/// The tensor an argument of the op node reads, with its concrete shape.
fn arg_tensor<'a>(ctx: &CompareCtx<'a>, arg: usize) -> Result<&'a Tensor, String> {
    let node = ctx.graph.node(ctx.node);
    let v = *node.args.get(arg).ok_or_else(|| format!("the op has no argument {arg}"))?;
    let i = ctx.graph.inputs().iter().position(|&x| x == v).ok_or_else(|| format!("argument {arg} is not an input"))?;
    ctx.inputs.get(i).ok_or_else(|| format!("input {i} is missing"))
}

fn arg_count(ctx: &CompareCtx) -> usize {
    ctx.graph.node(ctx.node).args.len()
}

/// Runs `g` in precise mode on `inputs` with every numeric input element mapped through `f`
/// (given the input's index), returning output 0.
fn precise_run_mapped(g: &Graph, inputs: &[Tensor], f: &dyn Fn(usize, f64) -> f64) -> Result<Vec<f64>, String> {
    let mapped: Vec<Tensor> = inputs.iter().enumerate().map(|(i, t)| map_numbers(t, |x| f(i, x))).collect();
    let out = interp::run(g, &mapped, &Options { precise: true, ..Options::default() }).map_err(|e| e.to_string())?;
    out.outputs.first().map(Tensor::to_f64_vec).ok_or_else(|| "the graph has no output".to_string())
}

/// A copy of a numeric tensor with `f` applied to each element (integers convert through f64
/// and back, saturating); bool tensors are unchanged.
fn map_numbers(t: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    let data = match t.data() {
        TensorData::I32(v) => TensorData::I32(v.iter().map(|&x| f(x as f64) as i32).collect()),
        TensorData::I64(v) => TensorData::I64(v.iter().map(|&x| f(x as f64) as i64).collect()),
        TensorData::F32(v) => TensorData::F32(v.iter().map(|&x| f(x as f64) as f32).collect()),
        TensorData::F64(v) => TensorData::F64(v.iter().map(|&x| f(x)).collect()),
        TensorData::F16(v) => TensorData::F16(v.iter().map(|x| f16_from_f64(f(x.to_f64()))).collect()),
        TensorData::BF16(v) => TensorData::BF16(v.iter().map(|x| bf16_from_f64(f(x.to_f64()))).collect()),
        d if d.dtype().is_int() => {
            let dt = d.dtype();
            let vals = d.ints().unwrap_or_default().into_iter();
            let mapped = vals.map(|x| crate::interp::float_to_int_as(dt, f(crate::interp::int_to_f64(dt, x))));
            TensorData::from_ints(dt, mapped).unwrap_or_else(|| unreachable!("{dt} is an integer type"))
        }
        other => other.clone(),
    };
    Tensor::new(t.shape().to_vec(), data).unwrap_or_else(|_| t.clone())
}

/// `g` with the op node's float attributes mapped through `f`.
fn with_float_attrs(ctx: &CompareCtx, f: &dyn Fn(&str, f64) -> f64) -> Result<Graph, String> {
    let g = ctx.graph;
    let node = g.node(ctx.node);
    let given: Vec<(String, AttrValue)> = node
        .attrs
        .iter()
        .map(|(n, v)| match v {
            AttrValue::Float(x) => (n.to_string(), AttrValue::Float(f(n, *x))),
            other => (n.to_string(), other.clone()),
        })
        .collect();
    let attrs = Attrs::resolve(node.op.spec().attrs, given).map_err(|e| e.to_string())?;
    single_op_graph(g, node.op, &node.args, attrs)
}

/// A graph with `g`'s inputs and one node `op(args) {attrs}` as its only output.
fn single_op_graph(g: &Graph, op: OpKind, args: &[Value], attrs: Attrs) -> Result<Graph, String> {
    let mut out = Graph::new(&g.name);
    for (i, &v) in g.inputs().iter().enumerate() {
        out.add_input(&g.input_name(i), g.ty(v).clone()).map_err(|e| e.to_string())?;
    }
    let v = out.add_node(op, args, attrs).map_err(|e| e.to_string())?;
    out.add_output("out", v).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The reduced axes of a reduction node (normalised) and the reduction length.
fn reduction_axes(op: OpKind, attrs: &Attrs, shape: &[usize]) -> Result<Vec<usize>, String> {
    let rank = shape.len();
    let axes = match op {
        OpKind::ReduceSum | OpKind::ReduceProd => normalize_axes(attrs.ints("axes"), rank, false),
        OpKind::Cumsum => normalize_axis(attrs.int("axis"), rank).map(|a| vec![a]),
        _ => normalize_axes(attrs.ints("axes"), rank, true),
    };
    axes.map_err(|e| e.to_string())
}

/// For each input element, the flat index of the output element it reduces into, and the
/// number of output elements.
fn reduction_groups(shape: &[usize], axes: &[usize]) -> (Vec<usize>, usize) {
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&i| shape[i]).collect();
    let n_out = kept_shape.iter().product();
    let numel: usize = shape.iter().product();
    let map = (0..numel)
        .map(|flat| {
            let idx = unravel(flat, shape);
            let k: Vec<usize> = kept.iter().map(|&i| idx[i]).collect();
            ravel(&k, &kept_shape)
        })
        .collect();
    (map, n_out)
}

/// Values of each reduction group, in row-major order.
fn grouped(values: &[f64], shape: &[usize], axes: &[usize]) -> Vec<Vec<f64>> {
    let (map, n_out) = reduction_groups(shape, axes);
    let mut groups = vec![Vec::new(); n_out];
    for (x, &o) in values.iter().zip(&map) {
        groups[o].push(*x);
    }
    groups
}

/// The flat index in a tensor of `src` shape that broadcasts (NumPy, aligned right) to
/// position `idx` of a larger shape.
fn broadcast_flat(idx: &[usize], src: &[usize]) -> usize {
    let lead = idx.len().saturating_sub(src.len());
    let skip = src.len().saturating_sub(idx.len());
    let mut flat = 0;
    for (k, &d) in src.iter().enumerate().skip(skip) {
        let i = idx[lead + k - skip];
        flat = flat * d + if d == 1 { 0 } else { i.min(d.saturating_sub(1)) };
    }
    flat
}

/// Mean, sum of squared deviations, mean |x|, max |x - mean| and max |x| of a group, in f64.
struct GroupStats {
    n: f64,
    mean: f64,
    ss: f64,
    mean_abs: f64,
    max_dev: f64,
    max_abs: f64,
}

fn group_stats(g: &[f64]) -> GroupStats {
    let n = g.len() as f64;
    let mean = g.iter().sum::<f64>() / n;
    let ss = g.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
    let mean_abs = g.iter().map(|x| x.abs()).sum::<f64>() / n;
    let max_dev = g.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max);
    let max_abs = g.iter().map(|&x| finite_abs(x)).fold(0.0, f64::max);
    GroupStats { n, mean, ss, mean_abs, max_dev, max_abs }
}

/// `|x|` for finite `x`, 0 for infinities and NaN.
fn finite_abs(x: f64) -> f64 {
    if x.is_finite() {
        x.abs()
    } else {
        0.0
    }
}

fn element_bounds(
    kind: BoundKind,
    op: OpKind,
    ctx: &CompareCtx,
    r: &[f64],
    dtype: DType,
) -> Result<Vec<ElemBound>, String> {
    use BoundKind::*;
    let e = eps(dtype);
    let maxf = max_finite(dtype);
    let node = ctx.graph.node(ctx.node);
    let attrs = &node.attrs;
    let x = arg_tensor(ctx, 0)?;
    let xs = x.shape().to_vec();
    let count = |axes: &[usize]| axes.iter().map(|&a| xs[a]).product::<usize>() as f64;
    match kind {
        Sum | Dot | Pool => {
            let (n, extra) = match kind {
                Sum => (count(&reduction_axes(op, attrs, &xs)?), 0.0),
                Dot => (dot_length(op, ctx)? as f64, 2.0),
                _ => (pool_length(op, ctx)? as f64, 1.0),
            };
            // Averages (mean, pools) pass through a sum n times their size.
            let widen =
                if matches!(op, OpKind::Mean | OpKind::AvgPool2d | OpKind::AdaptiveAvgPool2d) { n } else { 1.0 };
            // The bound's scale: the op on |inputs| (and |alpha|, |beta|).
            let s = if op == OpKind::Addmm {
                let g = with_float_attrs(ctx, &|_, v| v.abs())?;
                precise_run_mapped(&g, ctx.inputs, &|_, v| v.abs())?
            } else {
                precise_run_mapped(ctx.graph, ctx.inputs, &|_, v| v.abs())?
            };
            check_len(&s, r)?;
            // The range: the same over the finite inputs only (an infinite input is not an
            // overflow), with addmm's product `a @ b` counted before `alpha` scales it.
            let range = if op == OpKind::Addmm {
                let g = with_float_attrs(ctx, &|name, v| if name == "alpha" { v.abs().max(1.0) } else { v.abs() })?;
                precise_run_mapped(&g, ctx.inputs, &|_, v| finite_abs(v))?
            } else {
                precise_run_mapped(ctx.graph, ctx.inputs, &|_, v| finite_abs(v))?
            };
            check_len(&range, r)?;
            // addmm's product is rounded before `alpha` scales it: where it is subnormal its
            // rounding is absolute (`tiny eps` a step), and `alpha` scales that too.
            let scaled_floor =
                if op == OpKind::Addmm { (n + extra) * attrs.float("alpha").abs() * tiny(dtype) * e } else { 0.0 };
            Ok(s.iter()
                .zip(&range)
                .map(|(&s, &big)| ElemBound::new((n + extra) * e * s + scaled_floor, big * widen <= maxf))
                .collect())
        }
        Prod => {
            let n = count(&reduction_axes(op, attrs, &xs)?);
            // Bounds on every partial product's magnitude, finite nonzero factors only.
            let hi = precise_run_mapped(ctx.graph, ctx.inputs, &|_, v| finite_abs(v).max(1.0))?;
            let lo = precise_run_mapped(ctx.graph, ctx.inputs, &|_, v| {
                if v == 0.0 || !v.is_finite() {
                    1.0
                } else {
                    v.abs().min(1.0)
                }
            })?;
            check_len(&hi, r)?;
            check_len(&lo, r)?;
            let small = tiny(dtype);
            Ok((0..r.len())
                .map(|k| ElemBound::new((n + 1.0) * e * r[k].abs(), hi[k] <= maxf && lo[k] >= small))
                .collect())
        }
        Variance | Std => {
            let axes = reduction_axes(op, attrs, &xs)?;
            let groups = grouped(&x.to_f64_vec(), &xs, &axes);
            check_len(&groups, r)?;
            let c = attrs.int("correction") as f64;
            Ok(groups
                .iter()
                .zip(r)
                .map(|(g, &rv)| {
                    let s = group_stats(g);
                    let (ess, _) = bounds::ss_error(&s, e, tiny(dtype));
                    let denom = (s.n - c).max(0.0);
                    let bvar = ess / denom;
                    let in_range = 16.0 * s.n * s.max_abs * s.max_abs <= maxf;
                    let abs = if kind == Variance {
                        bvar + 2.0 * e * rv.abs()
                    } else {
                        let through_sqrt = if rv > 0.0 { bvar.sqrt().min(bvar / rv) } else { bvar.sqrt() };
                        through_sqrt + 2.0 * e * rv.abs()
                    };
                    ElemBound::new(abs, in_range)
                })
                .collect())
        }
        Logsumexp => {
            let n = count(&reduction_axes(op, attrs, &xs)?);
            Ok(r.iter().map(|&rv| ElemBound::new(2.0 * e * (rv.abs() + n + 2.0), true)).collect())
        }
        Softmax | LogSoftmax => {
            let axis = normalize_axis(attrs.int("axis"), xs.len()).map_err(|e| e.to_string())?;
            let n = xs[axis] as f64;
            Ok(r.iter()
                .map(|&y| {
                    let abs = if kind == Softmax {
                        let l = if y > 0.0 { y.ln().abs() } else { 0.0 };
                        2.0 * e * (n + l + 2.0) * y.abs()
                    } else {
                        2.0 * e * (y.abs() + n + 2.0)
                    };
                    ElemBound::new(abs, true)
                })
                .collect())
        }
        LayerNorm | RmsNorm => norm_bounds(kind, op, ctx, r, dtype),
        BatchNorm => batch_norm_bounds(ctx, r, dtype),
        Attention => attention_bounds(ctx, r, dtype),
        Lstm => lstm_bounds(ctx, r),
        CrossEntropy => cross_entropy_bounds(ctx, r, dtype),
        MseLoss => {
            let (a, b) = (arg_tensor(ctx, 0)?, arg_tensor(ctx, 1)?);
            let n = broadcast_numel(a.shape(), b.shape()) as f64;
            let red = attrs.str("reduction");
            Ok(r.iter()
                .map(|&rv| match red {
                    "none" => ElemBound::new(3.0 * e * rv.abs(), rv.abs() <= maxf),
                    "sum" => ElemBound::new((n + 3.0) * e * rv.abs(), rv.abs() <= maxf),
                    _ => ElemBound::new((n + 3.0) * e * rv.abs(), rv.abs() * n <= maxf),
                })
                .collect())
        }
    }
}

/// Range preconditions of pointwise ops: `softplus` scales its input by `beta` first, which
/// may overflow where the result would not (`x = -2^127, beta = -5`).
fn pointwise_range(op: OpKind, ctx: &CompareCtx, len: usize, dtype: DType) -> Result<Option<Vec<ElemBound>>, String> {
    if op != OpKind::Softplus {
        return Ok(None);
    }
    let beta = ctx.graph.node(ctx.node).attrs.float("beta");
    let x = arg_tensor(ctx, 0)?.to_f64_vec();
    if x.len() != len {
        return Err(format!("softplus input has {} elements, the result {len}", x.len()));
    }
    let maxf = max_finite(dtype);
    Ok(Some(x.iter().map(|&v| ElemBound::new(0.0, finite_abs(v * beta) <= maxf)).collect()))
}

fn check_len<T>(v: &[T], r: &[f64]) -> Result<(), String> {
    if v.len() == r.len() {
        Ok(())
    } else {
        Err(format!("auxiliary result has {} elements, the reference {}", v.len(), r.len()))
    }
}

// =============================================================================================
// Checking a case
// =============================================================================================

/// A lowered case: a graph of prims with the original's inputs, whose outputs are the
/// original's outputs in order followed by the final contents of inputs the original mutated.
#[derive(Clone, Debug)]
pub struct Lowering {
    pub graph: Graph,
    /// `(input, output)`: output `output` of `graph` holds input `input`'s final contents.
    pub mutations: Vec<(usize, usize)>,
}

/// Why a graph could not be lowered.
#[derive(Clone, Debug, PartialEq)]
pub enum LowerError {
    /// Some high-level op has no decomposition rule.
    NoDecomposition(String),
    /// Functionalize or decompose failed, or the result does not verify at the prims rung.
    Failed(String),
    /// A decomposition declined the case (`DecompError::Unsupported`).
    Declined(String),
}

/// The pipeline's lowering: `decompose(functionalize(g))`, verified at the prims rung.
pub fn lower_to_prims(g: &Graph) -> Result<Lowering, LowerError> {
    use crate::decomp::DecompError;
    use crate::passes::DecomposeError;
    let f = crate::passes::functionalize(g).map_err(|e| LowerError::Failed(format!("functionalize: {e}")))?;
    let p = crate::passes::decompose(&f.graph).map_err(|e| match &e {
        DecomposeError::Node { error: DecompError::NoRule { .. }, .. } => LowerError::NoDecomposition(e.to_string()),
        DecomposeError::Node { error: DecompError::Unsupported { .. }, .. } => LowerError::Declined(e.to_string()),
        _ => LowerError::Failed(format!("decompose: {e}")),
    })?;
    verify(&p, Stage::Prims).map_err(|e| LowerError::Failed(format!("the prims graph does not verify: {e}")))?;
    let mutations = f.epilogue.mutations.iter().map(|m| (m.input, m.output)).collect();
    Ok(Lowering { graph: p, mutations })
}

/// The outcome of one case.
#[derive(Clone, Debug)]
pub enum CaseResult {
    /// Every output agreed within the table.
    Passed(Agreement),
    Skipped(Skip),
    Failed(Box<Failure>),
}

/// Why a case did not run.
#[derive(Clone, Debug, PartialEq)]
pub enum Skip {
    /// No argument types and attributes the op accepts were found.
    NoValidCase,
    /// The high-level op itself failed on the drawn data (an index out of range, say).
    ReferenceError(String),
    /// The decomposition declined the case with a typed refusal (`DecompError::Unsupported`:
    /// a symbolic size it cannot express, such as a pooling window count that may be
    /// negative for small lengths), as it does for a user's graph.
    Declined(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NoValidCase => write!(f, "no valid case found in {MAX_ATTEMPTS} attempts"),
            Skip::ReferenceError(e) => write!(f, "the reference run failed: {e}"),
            Skip::Declined(m) => write!(f, "the decomposition declined the case: {m}"),
        }
    }
}

/// A failed case, with a file test that reproduces it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub op: OpKind,
    pub kind: FailureKind,
    /// The bytes the case was generated from (`check_op(op, &case_bytes)` reproduces it).
    pub case_bytes: Vec<u8>,
    /// A ready-to-paste file test: comments saying what failed, the graph, a `; run:` line
    /// with the inputs and the rounded reference outputs (and `; tolerance:` for inexact ops).
    pub file_test: String,
    /// The lowered graph's text, when lowering succeeded.
    pub lowered: Option<String>,
}

#[derive(Clone, Debug)]
pub enum FailureKind {
    NoDecomposition(String),
    Lowering(String),
    /// The lowered graph failed to run where the original ran.
    Run(String),
    Mismatch(Mismatch),
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::NoDecomposition(m) => write!(f, "no decomposition: {m}"),
            FailureKind::Lowering(m) => write!(f, "lowering failed: {m}"),
            FailureKind::Run(m) => write!(f, "the lowered graph failed to run: {m}"),
            FailureKind::Mismatch(m) => write!(f, "mismatch: {m}"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex: String = self.case_bytes.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(f, "{} failed: {}", self.op, self.kind)?;
        writeln!(f, "case bytes: {hex}")?;
        writeln!(f, "---- file test ----")?;
        f.write_str(&self.file_test)?;
        if let Some(l) = &self.lowered {
            writeln!(f, "---- lowered graph ----")?;
            f.write_str(l)?;
        }
        Ok(())
    }
}

/// Generates a case for `op` from `case_bytes`, runs it in precise mode and lowered to prims
/// in the op's dtype, and compares every output (and every mutated input) with the table.
pub fn check_op(op: OpKind, case_bytes: &[u8]) -> CaseResult {
    check_op_with(op, case_bytes, &lower_to_prims)
}

/// [`check_op`] with another lowering (a hand-written decomposition under test, say).
pub fn check_op_with(
    op: OpKind,
    case_bytes: &[u8],
    lower: &dyn Fn(&Graph) -> Result<Lowering, LowerError>,
) -> CaseResult {
    let Some(case) = generate_case(op, case_bytes) else { return CaseResult::Skipped(Skip::NoValidCase) };
    check_case(&case, case_bytes, lower, &run_on_interp)
}

/// Runs a lowered graph: its outputs, or why not.
pub type Executor<'a> = &'a dyn Fn(&Graph, &[Tensor]) -> Result<Vec<Tensor>, String>;

/// The interpreter in the graph's dtypes (what [`check_op`] runs the lowered graph on).
pub fn run_on_interp(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    interp::run(g, inputs, &Options::default()).map(|o| o.outputs).map_err(|e| e.to_string())
}

/// The CPU backend: a plan compiled in native mode (Cranelift kernels, GEMM) on one thread.
pub fn run_on_cpu(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let options = crate::runtime::CompileOptions::native_cpu(1).map_err(|e| format!("cpu backend: {e}"))?;
    let plan = crate::runtime::compile(g, &options).map_err(|e| format!("compile: {e}"))?;
    plan.run(inputs).map(|o| o.outputs).map_err(|e| e.to_string())
}

/// [`check_op`] with the lowered graph run by `exec` (the CPU backend, say).
pub fn check_op_on(op: OpKind, case_bytes: &[u8], exec: Executor) -> CaseResult {
    let Some(case) = generate_case(op, case_bytes) else { return CaseResult::Skipped(Skip::NoValidCase) };
    check_case(&case, case_bytes, &lower_to_prims, exec)
}

/// Runs and compares one generated case: `lower` makes the prims graph, `exec` runs it.
pub fn check_case(
    case: &Case,
    case_bytes: &[u8],
    lower: &dyn Fn(&Graph) -> Result<Lowering, LowerError>,
    exec: Executor,
) -> CaseResult {
    let op = case.op;
    let precise = Options { precise: true, ..Options::default() };
    let reference = match interp::run(&case.graph, &case.inputs, &precise) {
        Ok(o) => o,
        Err(e) => return CaseResult::Skipped(Skip::ReferenceError(e.to_string())),
    };
    // What to compare: (name, precise reference, index of the lowered output).
    let mut expected: Vec<(String, Tensor, usize)> = case
        .graph
        .outputs()
        .iter()
        .zip(&reference.outputs)
        .enumerate()
        .map(|(i, (o, t))| (o.name.clone(), t.clone(), i))
        .collect();
    let fail = |kind: FailureKind, lowered: Option<String>| {
        let file_test = file_test_text(case, &reference.outputs, &kind);
        CaseResult::Failed(Box::new(Failure { op, kind, case_bytes: case_bytes.to_vec(), file_test, lowered }))
    };
    let lowering = match lower(&case.graph) {
        Ok(l) => l,
        Err(LowerError::NoDecomposition(m)) => return fail(FailureKind::NoDecomposition(m), None),
        Err(LowerError::Failed(m)) => return fail(FailureKind::Lowering(m), None),
        Err(LowerError::Declined(m)) => return CaseResult::Skipped(Skip::Declined(m)),
    };
    let lowered_text = || Some(crate::text::print(&lowering.graph)); // only a failure prints it
    for &(input, output) in &lowering.mutations {
        let name = format!("{}.mutated", case.graph.input_name(input));
        expected.push((name, reference.inputs_after[input].clone(), output));
    }
    let got = match exec(&lowering.graph, &case.inputs) {
        Ok(o) => o,
        Err(e) => return fail(FailureKind::Run(e), lowered_text()),
    };
    let mut agreement = Agreement::default();
    for (name, want, index) in &expected {
        let Some(have) = got.get(*index) else {
            let m = format!("the lowered graph has no output {index} (`{name}`)");
            return fail(FailureKind::Lowering(m), lowered_text());
        };
        let ctx = CompareCtx { graph: &case.graph, node: case.node, inputs: &case.inputs, output: name };
        match compare(op, want, have, &ctx) {
            Ok(a) => agreement.merge(&a),
            Err(m) => return fail(FailureKind::Mismatch(m), lowered_text()),
        }
    }
    CaseResult::Passed(agreement)
}

// =============================================================================================
// The file test of a case
// =============================================================================================

fn fmt_float(x: f64, f32_like: bool) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if f32_like {
        format!("{:?}", x as f32)
    } else {
        format!("{x:?}")
    }
}

/// A tensor as a file-test literal: nested brackets where they express the shape, otherwise
/// `dtype[dims] [flat values]`.
pub fn tensor_literal(t: &Tensor) -> String {
    let f32_like = matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16);
    let elems: Vec<String> = match t.data() {
        TensorData::U64(v) => v.iter().map(|x| x.to_string()).collect(),
        d if d.dtype().is_int() => int_values(t).iter().map(|x| x.to_string()).collect(),
        TensorData::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
        _ => t.to_f64_vec().iter().map(|&x| fmt_float(x, f32_like)).collect(),
    };
    let shape = t.shape();
    let nestable = shape.is_empty() || shape[..shape.len() - 1].iter().all(|&d| d > 0);
    if !nestable {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        return format!("{}[{}] [{}]", t.dtype(), dims.join(", "), elems.join(", "));
    }
    fn nest(shape: &[usize], elems: &[String]) -> String {
        match shape.split_first() {
            None => elems[0].clone(),
            Some((&n, rest)) => {
                let size: usize = rest.iter().product();
                let parts: Vec<String> = (0..n).map(|i| nest(rest, &elems[i * size..(i + 1) * size])).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    nest(shape, &elems)
}

/// The precise reference rounded to `dtype`, as a tensor of that dtype.
fn rounded_tensor(t: &Tensor, dtype: DType) -> Tensor {
    if !dtype.is_float() || t.dtype() == dtype {
        return t.clone();
    }
    let v = t.to_f64_vec();
    let data = match dtype {
        DType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F16 => TensorData::F16(v.iter().map(|&x| f16_from_f64(x)).collect()),
        DType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16_from_f64(x)).collect()),
        _ => TensorData::F64(v),
    };
    Tensor::new(t.shape().to_vec(), data).unwrap_or_else(|_| t.clone())
}

/// The ready-to-paste file test of a case: what failed (comment lines that are not
/// directives), a `; run:` line with the inputs and the reference outputs rounded to their
/// dtypes, `; tolerance:` for ops that are not exact, and the graph.
fn file_test_text(case: &Case, reference: &[Tensor], kind: &FailureKind) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "; Found by the numerics harness (src/numerics.rs) for {}:", case.op);
    for line in kind.to_string().lines() {
        let _ = writeln!(out, "; | {line}");
    }
    let _ = writeln!(out, "; The reference below is the op in precise (f64) mode, rounded to the output dtype.");
    let outs: Vec<Tensor> = case
        .graph
        .outputs()
        .iter()
        .zip(reference)
        .map(|(o, t)| rounded_tensor(t, case.graph.ty(o.value).dtype))
        .collect();
    if !matches!(tolerance(case.op), Tolerance::Exact) && outs.iter().any(|t| t.dtype().is_float()) {
        let tol = file_tolerance(case.op, &outs);
        let _ = writeln!(out, "; tolerance: {tol:e}");
    }
    let ins: Vec<String> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{}={}", case.graph.input_name(i), tensor_literal(t)))
        .collect();
    let refs: Vec<String> = outs.iter().map(tensor_literal).collect();
    let _ = writeln!(out, "; run: {} => {}", ins.join(" "), refs.join(", "));
    out.push_str(&crate::text::print(&case.graph));
    out
}

/// A file-test tolerance (`|got - want| <= tol + tol |want|`) no looser than needed for an
/// evaluation in the dtype: the ULP allowance (or `1e-3` for bound-based ops, where the bound
/// depends on the inputs) at the largest reference value.
fn file_tolerance(op: OpKind, outs: &[Tensor]) -> f64 {
    let dtype = outs.iter().map(Tensor::dtype).find(|d| d.is_float()).unwrap_or(DType::F32);
    match tolerance(op) {
        Tolerance::Ulp { ulps, floor_eps } => (ulps as f64 * eps(dtype)).max(floor_eps * eps(dtype)),
        _ => 1e-3_f64.max(8.0 * eps(dtype)),
    }
}
