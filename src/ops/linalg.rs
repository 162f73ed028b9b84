//! Linear algebra, convolution and pooling: the opaque `matmul` and `conv`, and the high-level
//! `bmm`, `linear`, `addmm`, `conv2d`, `max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`.
//!
//! Semantic choices:
//! - **matmul** takes operands of rank >= 2 only (frontends unsqueeze 1-D operands);
//!   `transpose_a`/`transpose_b` swap the last two dims of that operand; leading (batch) dims
//!   broadcast NumPy-style; the inner dims must be equal (symbolically). Numeric dtypes,
//!   promoted at the high rung; at the prims rung both operands must have one dtype. Operands
//!   are first converted to the result dtype; each output element accumulates over `k` in
//!   order, `acc = round(acc + a*b)` (one rounding per step, like an FMA), starting from +0,
//!   so `k = 0` gives zeros. Integers wrap. Precise mode accumulates in f64.
//! - **bmm** is matmul on rank-3 operands with equal (not broadcast) batch dims. **linear**
//!   is `x @ weight^T + bias` (x of rank >= 1), **addmm** is `beta*bias + alpha*(a @ b)`; their
//!   product accumulates like matmul, and the epilogue (bias, alpha, beta) is computed in f64
//!   on the accumulated product and rounded once. addmm ignores the bias entirely when
//!   `beta == 0` (NaN and inf included), as torch does; `alpha == 0` is plain IEEE (`0*inf`
//!   is NaN). For integer dtypes `alpha` and `beta` must be integral.
//! - **conv** (N = 1, 2 or 3 spatial dims): `x [B, C, s...]`, `w [O, C/groups, k...]`,
//!   `stride`/`dilation` `[]` mean all 1, `padding` `[]` means all 0, else
//!   `[begin_0.., end_0..]` as ONNX pads. Output length per spatial dim
//!   `floor((in + pb + pe - dilation*(k-1) - 1) / stride) + 1`; a negative length is an error,
//!   0 is allowed (an empty result; so a window up to `stride` longer than the padded input
//!   gives 0 windows rather than an error). Padding is literal zeros, so they take part in the
//!   accumulation (`0 * inf` is NaN). Accumulation per output element runs over input
//!   channels of the group, then kernel positions row-major, like matmul. Float only.
//!   **conv2d** is conv with symmetric padding `[p_h, p_w]` plus an optional bias `[O]`
//!   added in f64 and rounded once.
//! - Spatial dims may be symbolic: a windowed output's length is then a size expression
//!   (`(n + 1) / 2` for a stride-2, 3-wide window with padding 1); kernel dims must be static;
//!   batch and channel dims may be symbolic.
//! - **Pools** take `[N, C, H, W]` or unbatched `[C, H, W]`, float only, and follow torch:
//!   `stride = []` means the kernel; padding must be at most half the kernel; output length is
//!   as for conv, with `ceil_mode` rounding up but dropping a last window that would start
//!   past the input plus the left padding. **max_pool2d** pads with -inf (a window with no
//!   input element gives -inf), propagates NaN and orders -0 < +0. **avg_pool2d** sums in f64
//!   and divides by the window clipped to the padded input (`count_include_pad`) or to the
//!   input; a window holding no input element gives 0, as torch. **adaptive_avg_pool2d**
//!   averages rows `floor(i*in/out) .. ceil((i+1)*in/out)` in f64; an empty window (input
//!   length 0) gives NaN, the mean of nothing.
//! - Every op here charges fuel for its multiply-adds (or window reads) before computing.

use super::elementwise::binary_float;
use super::util::{
    bool_attr, broadcast_concrete, broadcast_shapes, broadcast_view, expect_float, expect_min_rank, expect_rank,
    float_attr, int_attr, promote_all, unravel,
};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, Dim, DimError, Shape, SizeExpr, TensorType};

const fn ints_attr(name: &'static str, default: &'static [i64]) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Ints, AttrDefault::Ints(default))
}

const fn empty_ints_attr(name: &'static str) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Ints, AttrDefault::Empty)
}

const MATMUL_ATTRS: &[AttrSpec] = &[bool_attr("transpose_a", false), bool_attr("transpose_b", false)];
const CONV_ATTRS: &[AttrSpec] =
    &[empty_ints_attr("stride"), empty_ints_attr("padding"), empty_ints_attr("dilation"), int_attr("groups", 1)];
const ADDMM_ATTRS: &[AttrSpec] = &[float_attr("beta", 1.0), float_attr("alpha", 1.0)];
const CONV2D_ATTRS: &[AttrSpec] = &[
    ints_attr("stride", &[1, 1]),
    ints_attr("padding", &[0, 0]),
    ints_attr("dilation", &[1, 1]),
    int_attr("groups", 1),
];
const MAX_POOL_ATTRS: &[AttrSpec] = &[
    AttrSpec::required("kernel", AttrKind::Ints),
    empty_ints_attr("stride"),
    ints_attr("padding", &[0, 0]),
    ints_attr("dilation", &[1, 1]),
    bool_attr("ceil_mode", false),
];
const AVG_POOL_ATTRS: &[AttrSpec] = &[
    AttrSpec::required("kernel", AttrKind::Ints),
    empty_ints_attr("stride"),
    ints_attr("padding", &[0, 0]),
    bool_attr("ceil_mode", false),
    bool_attr("count_include_pad", true),
];
const ADAPTIVE_POOL_ATTRS: &[AttrSpec] = &[AttrSpec::required("output_size", AttrKind::Ints)];

#[allow(clippy::too_many_arguments)]
const fn spec(
    kind: OpKind,
    name: &'static str,
    rung: Rung,
    arity: Arity,
    attrs: &'static [AttrSpec],
    infer: super::InferFn,
    eval: super::EvalFn,
    doc: &'static str,
) -> OpSpec {
    let explicit: Option<super::ExplicitFn> =
        if matches!(rung, Rung::Opaque) { Some(explicit_equal_dtypes) } else { None };
    OpSpec { explicit, ..OpSpec::plain(kind, name, rung, arity, attrs, infer, eval, doc) }
}

pub static SPECS: &[OpSpec] = &[
    spec(
        OpKind::Matmul,
        "matmul",
        Rung::Opaque,
        Arity::Exactly(2),
        MATMUL_ATTRS,
        infer_matmul,
        eval_matmul,
        "batched matrix product of rank>=2 operands; optional transposes; batch dims broadcast",
    ),
    spec(
        OpKind::Conv,
        "conv",
        Rung::Opaque,
        Arity::Exactly(2),
        CONV_ATTRS,
        infer_conv,
        eval_conv,
        "N-d convolution (N = 1..3), x [B, C, s...] with w [O, C/groups, k...]; ONNX-style pads",
    ),
    spec(
        OpKind::Bmm,
        "bmm",
        Rung::High,
        Arity::Exactly(2),
        &[],
        infer_matmul,
        eval_matmul,
        "batched matrix product of rank-3 operands with equal batch",
    ),
    spec(
        OpKind::Linear,
        "linear",
        Rung::High,
        Arity::Between(2, 3),
        &[],
        infer_matmul,
        eval_matmul,
        "x @ weight^T + bias, weight [out, in], optional bias [out]",
    ),
    spec(
        OpKind::Addmm,
        "addmm",
        Rung::High,
        Arity::Exactly(3),
        ADDMM_ATTRS,
        infer_matmul,
        eval_matmul,
        "beta*bias + alpha*(a @ b) for matrices; bias ignored when beta == 0",
    ),
    spec(
        OpKind::Conv2d,
        "conv2d",
        Rung::High,
        Arity::Between(2, 3),
        CONV2D_ATTRS,
        infer_conv,
        eval_conv,
        "2-d convolution with symmetric padding and optional bias [O] (torch conv2d)",
    ),
    spec(
        OpKind::MaxPool2d,
        "max_pool2d",
        Rung::High,
        Arity::Exactly(1),
        MAX_POOL_ATTRS,
        infer_pool,
        eval_pool,
        "2-d max pooling, -inf padding, NaN-propagating (torch max_pool2d)",
    )
    .with_native(super::Native::Kept),
    spec(
        OpKind::AvgPool2d,
        "avg_pool2d",
        Rung::High,
        Arity::Exactly(1),
        AVG_POOL_ATTRS,
        infer_pool,
        eval_pool,
        "2-d average pooling (torch avg_pool2d divisor rules)",
    ),
    spec(
        OpKind::AdaptiveAvgPool2d,
        "adaptive_avg_pool2d",
        Rung::High,
        Arity::Exactly(1),
        ADAPTIVE_POOL_ATTRS,
        infer_pool,
        eval_pool,
        "2-d adaptive average pooling to output_size (torch window rule)",
    ),
];

// ---------------------------------------------------------------------------------------------
// Shape rules
// ---------------------------------------------------------------------------------------------

fn explicit_equal_dtypes(_: &Attrs, args: &[&TensorType]) -> Result<(), OpError> {
    if let [a, b, ..] = args {
        if a.dtype != b.dtype {
            return Err(OpError::NotExplicit(format!("operands are {} and {}", a.dtype, b.dtype)));
        }
    }
    Ok(())
}

fn expect_numeric(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    if ty.dtype.is_bool() {
        Err(OpError::DType { arg, got: ty.dtype, expected: "a numeric (int or float) type".into() })
    } else {
        Ok(())
    }
}

/// Splits a rank>=2 shape into (batch dims, rows, cols), after an optional transpose.
fn split_matrix(shape: &Shape, transpose: bool) -> (Shape, Dim, Dim) {
    let r = shape.rank();
    let batch: Shape = shape.dims()[..r - 2].iter().cloned().collect();
    let (rows, cols) = (shape.dims()[r - 2].clone(), shape.dims()[r - 1].clone());
    if transpose {
        (batch, cols, rows)
    } else {
        (batch, rows, cols)
    }
}

fn check_inner(k_a: &Dim, k_b: &Dim) -> Result<(), OpError> {
    if k_a == k_b {
        Ok(())
    } else {
        Err(OpError::Shape(format!("inner dims differ: {k_a} (columns of a) and {k_b} (rows of b)")))
    }
}

fn check_integral_scalar(name: &'static str, v: f64) -> Result<(), OpError> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.2e18 {
        Ok(())
    } else {
        Err(OpError::AttrValue { name, problem: format!("must be an integer for integer operands, got {v}") })
    }
}

fn infer_matmul(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    for (i, a) in args.iter().enumerate() {
        expect_numeric(i, a)?;
    }
    let dtype = promote_all(args);
    let shape = match kind {
        OpKind::Matmul => {
            expect_min_rank(0, args[0], 2)?;
            expect_min_rank(1, args[1], 2)?;
            let (a_batch, m, k_a) = split_matrix(&args[0].shape, attrs.bool("transpose_a"));
            let (b_batch, k_b, n) = split_matrix(&args[1].shape, attrs.bool("transpose_b"));
            check_inner(&k_a, &k_b)?;
            let mut batch = broadcast_shapes(&a_batch, &b_batch)?;
            batch.0.push(m);
            batch.0.push(n);
            batch
        }
        OpKind::Bmm => {
            expect_rank(0, args[0], 3)?;
            expect_rank(1, args[1], 3)?;
            let (a, b) = (args[0].shape.dims(), args[1].shape.dims());
            if a[0] != b[0] {
                return Err(OpError::Shape(format!("batch dims differ: {} and {}", a[0], b[0])));
            }
            check_inner(&a[2], &b[1])?;
            Shape::from_iter([a[0].clone(), a[1].clone(), b[2].clone()])
        }
        OpKind::Linear => {
            expect_min_rank(0, args[0], 1)?;
            expect_rank(1, args[1], 2)?;
            let x = args[0].shape.dims();
            let w = args[1].shape.dims();
            let x_in = &x[x.len() - 1];
            if *x_in != w[1] {
                return Err(OpError::Shape(format!("input features {x_in} but weight [out, in] has in = {}", w[1])));
            }
            if let Some(bias) = args.get(2) {
                expect_rank(2, bias, 1)?;
                if bias.shape.dims()[0] != w[0] {
                    return Err(OpError::Shape(format!(
                        "bias has {} entries but weight has {} outputs",
                        bias.shape.dims()[0],
                        w[0]
                    )));
                }
            }
            x[..x.len() - 1].iter().cloned().chain([w[0].clone()]).collect()
        }
        OpKind::Addmm => {
            expect_rank(1, args[1], 2)?;
            expect_rank(2, args[2], 2)?;
            let (a, b) = (args[1].shape.dims(), args[2].shape.dims());
            check_inner(&a[1], &b[0])?;
            let out = Shape::from_iter([a[0].clone(), b[1].clone()]);
            let bias = &args[0].shape;
            if bias.rank() > 2 || broadcast_shapes(bias, &out)? != out {
                return Err(OpError::Shape(format!("bias {bias} does not broadcast to the product's shape {out}")));
            }
            if !dtype.is_float() {
                check_integral_scalar("beta", attrs.float("beta"))?;
                check_integral_scalar("alpha", attrs.float("alpha"))?;
            }
            out
        }
        _ => return Err(OpError::Shape(format!("{kind:?} is not a matmul-family op"))),
    };
    Ok(TensorType::new(dtype, shape))
}

/// Convolution geometry, every list as long as the number of spatial dims.
#[derive(Debug)]
struct ConvGeom {
    stride: Vec<u64>,
    pad_begin: Vec<u64>,
    pad_end: Vec<u64>,
    dilation: Vec<u64>,
    groups: u64,
}

/// A per-spatial-dim list attribute of `n` entries, each at least `min`; `[]` gives
/// `empty` where that is allowed.
fn spatial_list(name: &'static str, v: &[i64], n: usize, min: i64, empty: Option<u64>) -> Result<Vec<u64>, OpError> {
    if v.is_empty() {
        if let Some(d) = empty {
            return Ok(vec![d; n]);
        }
    }
    if v.len() != n {
        return Err(OpError::AttrValue { name, problem: format!("needs {n} entries, got {}", v.len()) });
    }
    v.iter()
        .map(|&x| {
            if x < min {
                Err(OpError::AttrValue { name, problem: format!("entries must be at least {min}, got {x}") })
            } else {
                Ok(x as u64)
            }
        })
        .collect()
}

fn conv_geom(kind: OpKind, attrs: &Attrs, n: usize) -> Result<ConvGeom, OpError> {
    let groups = attrs.int("groups");
    if groups < 1 {
        return Err(OpError::AttrValue { name: "groups", problem: format!("must be at least 1, got {groups}") });
    }
    let (stride, dilation, pad_begin, pad_end) = if kind == OpKind::Conv {
        let stride = spatial_list("stride", attrs.ints("stride"), n, 1, Some(1))?;
        let dilation = spatial_list("dilation", attrs.ints("dilation"), n, 1, Some(1))?;
        let pads = spatial_list("padding", attrs.ints("padding"), 2 * n, 0, Some(0))?;
        (stride, dilation, pads[..n].to_vec(), pads[n..].to_vec())
    } else {
        let stride = spatial_list("stride", attrs.ints("stride"), n, 1, None)?;
        let dilation = spatial_list("dilation", attrs.ints("dilation"), n, 1, None)?;
        let pads = spatial_list("padding", attrs.ints("padding"), n, 0, None)?;
        (stride, dilation, pads.clone(), pads)
    };
    Ok(ConvGeom { stride, pad_begin, pad_end, dilation, groups: groups as u64 })
}

/// Number of windows along one dim of static length `input` (see the module docs).
fn window_count_static(
    input: u64,
    pad_b: u64,
    pad_e: u64,
    dilation: u64,
    kernel: u64,
    stride: u64,
    ceil_mode: bool,
) -> Result<u64, String> {
    if kernel == 0 {
        return Err("kernel size must be at least 1".into());
    }
    let eff = dilation as i128 * (kernel as i128 - 1) + 1;
    let padded = input as i128 + pad_b as i128 + pad_e as i128;
    let num = padded - eff;
    let s = stride.max(1) as i128;
    let mut out = if ceil_mode { (num + s - 1).div_euclid(s) } else { num.div_euclid(s) } + 1;
    if ceil_mode && (out - 1) * s >= input as i128 + pad_b as i128 {
        out -= 1;
    }
    if out < 0 {
        return Err(format!("a window of extent {eff} does not fit the padded input of length {padded}"));
    }
    u64::try_from(out).map_err(|_| "output length overflows".to_string())
}

/// Number of windows along one dim, symbolic when the stride is 1.
fn window_count(
    input: &Dim,
    pad_b: u64,
    pad_e: u64,
    dilation: u64,
    kernel: u64,
    stride: u64,
    ceil_mode: bool,
) -> Result<Dim, OpError> {
    if let Some(n) = input.as_const() {
        return window_count_static(n, pad_b, pad_e, dilation, kernel, stride, ceil_mode)
            .map(Dim::new)
            .map_err(OpError::Shape);
    }
    if kernel == 0 {
        return Err(OpError::Shape("kernel size must be at least 1".into()));
    }
    // floor(num / s) + 1 windows, num = n + pads - extent; in ceil mode ceil(num / s) + 1,
    // but only windows that start inside the input or its leading padding:
    // min(ceil(num / s) + 1, ceil((n + pad_b) / s)).
    let int = |x: u64| i64::try_from(x).map(SizeExpr::constant).map_err(|_| OpError::Dim(DimError::Overflow));
    let eff = dilation.checked_mul(kernel - 1).and_then(|e| e.checked_add(1)).ok_or(DimError::Overflow)?;
    let s = stride.max(1);
    let n = SizeExpr::from_dim(input)?;
    let num = n.add(&int(pad_b)?)?.add(&int(pad_e)?)?.sub(&int(eff)?)?;
    let one = SizeExpr::constant(1);
    let out = if ceil_mode {
        let windows = num.add(&int(s - 1)?)?.floor_div(s)?.add(&one)?;
        let starts = n.add(&int(pad_b)?)?.add(&int(s - 1)?)?.floor_div(s)?;
        windows.min(&starts)?
    } else {
        num.floor_div(s)?.add(&one)?
    };
    out.to_dim().map_err(|_| {
        OpError::Shape(format!(
            "a window of extent {eff} does not fit the padded input of length {input} + {}",
            pad_b + pad_e
        ))
    })
}

fn static_kernel(d: &Dim) -> Result<u64, OpError> {
    d.as_const().ok_or_else(|| OpError::Shape(format!("kernel dim {d} must be static")))
}

fn infer_conv(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    for (i, a) in args.iter().enumerate() {
        expect_float(i, a)?;
    }
    let (x, w) = (args[0], args[1]);
    if kind == OpKind::Conv {
        if !(3..=5).contains(&x.rank()) {
            return Err(OpError::Rank { arg: 0, expected: "3, 4 or 5 (1 to 3 spatial dims)".into(), got: x.rank() });
        }
    } else {
        expect_rank(0, x, 4)?;
    }
    expect_rank(1, w, x.rank())?;
    let n = x.rank() - 2;
    let g = conv_geom(kind, attrs, n)?;
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    let groups = Dim::new(g.groups);
    if wd[1].mul(&groups)? != xd[1] {
        return Err(OpError::Shape(format!(
            "input has {} channels but weight expects {} per group times {} groups",
            xd[1], wd[1], g.groups
        )));
    }
    if wd[0].div_exact(&groups).is_err() {
        return Err(OpError::AttrValue {
            name: "groups",
            problem: format!("{} output channels are not divisible by {} groups", wd[0], g.groups),
        });
    }
    if let Some(bias) = args.get(2) {
        expect_rank(2, bias, 1)?;
        if bias.shape.dims()[0] != wd[0] {
            return Err(OpError::Shape(format!(
                "bias has {} entries but weight has {} output channels",
                bias.shape.dims()[0],
                wd[0]
            )));
        }
    }
    let mut shape: Shape = [xd[0].clone(), wd[0].clone()].into_iter().collect();
    for d in 0..n {
        let k = static_kernel(&wd[2 + d])?;
        shape.0.push(window_count(&xd[2 + d], g.pad_begin[d], g.pad_end[d], g.dilation[d], k, g.stride[d], false)?);
    }
    Ok(TensorType::new(promote_all(args), shape))
}

/// Pooling geometry for the two spatial dims.
#[derive(Debug)]
pub(crate) struct PoolGeom {
    pub kernel: Vec<u64>,
    pub stride: Vec<u64>,
    /// Per spatial dim, on both sides.
    pub padding: Vec<u64>,
    pub dilation: Vec<u64>,
    pub ceil_mode: bool,
}

impl PoolGeom {
    /// Windows along spatial dim `d` (0: rows, 1: columns) of an input `len` long.
    pub(crate) fn windows(&self, d: usize, len: usize) -> Result<usize, String> {
        let p = self.padding[d];
        let o =
            window_count_static(len as u64, p, p, self.dilation[d], self.kernel[d], self.stride[d], self.ceil_mode)?;
        usize::try_from(o).map_err(|e| e.to_string())
    }
}

/// The checked geometry of a `max_pool2d` or `avg_pool2d` (library kernels share it).
pub(crate) fn pool_geom(kind: OpKind, attrs: &Attrs) -> Result<PoolGeom, OpError> {
    let kernel = spatial_list("kernel", attrs.ints("kernel"), 2, 1, None)?;
    let stride = if attrs.ints("stride").is_empty() {
        kernel.clone()
    } else {
        spatial_list("stride", attrs.ints("stride"), 2, 1, None)?
    };
    let padding = spatial_list("padding", attrs.ints("padding"), 2, 0, None)?;
    for (p, k) in padding.iter().zip(&kernel) {
        if *p > k / 2 {
            return Err(OpError::AttrValue {
                name: "padding",
                problem: format!("padding {p} is more than half the kernel size {k}"),
            });
        }
    }
    let dilation = if kind == OpKind::MaxPool2d {
        spatial_list("dilation", attrs.ints("dilation"), 2, 1, None)?
    } else {
        vec![1, 1]
    };
    Ok(PoolGeom { kernel, stride, padding, dilation, ceil_mode: attrs.bool("ceil_mode") })
}

fn infer_pool(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    expect_float(0, x)?;
    if !(3..=4).contains(&x.rank()) {
        return Err(OpError::Rank { arg: 0, expected: "3 or 4 ([C, H, W] or [N, C, H, W])".into(), got: x.rank() });
    }
    let r = x.rank();
    let dims = x.shape.dims();
    let mut shape: Shape = dims[..r - 2].iter().cloned().collect();
    if kind == OpKind::AdaptiveAvgPool2d {
        for (d, o) in spatial_list("output_size", attrs.ints("output_size"), 2, 0, None)?.into_iter().enumerate() {
            // Cell boundaries are floor/ceil of fractions of the input size: a number only
            // for a static size, unless there is at most one cell.
            if o >= 2 && !dims[r - 2 + d].is_static() {
                return Err(OpError::Shape(format!(
                    "adaptive_avg_pool2d to {o} cells needs a static input size, got {}",
                    dims[r - 2 + d]
                )));
            }
            shape.0.push(Dim::new(o));
        }
    } else {
        let g = pool_geom(kind, attrs)?;
        for d in 0..2 {
            shape.0.push(window_count(
                &dims[r - 2 + d],
                g.padding[d],
                g.padding[d],
                g.dilation[d],
                g.kernel[d],
                g.stride[d],
                g.ceil_mode,
            )?);
        }
    }
    Ok(TensorType::new(x.dtype, shape))
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

fn invalid(e: impl ToString) -> EvalError {
    EvalError::Invalid(e.to_string())
}

/// The product of `dims`, saturating, as fuel.
fn work(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
}

/// Computed values of one dtype class.
enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

fn transpose_last2(v: &View) -> View {
    let r = v.rank();
    let mut shape = v.shape().to_vec();
    let mut strides = v.strides().to_vec();
    shape.swap(r - 2, r - 1);
    strides.swap(r - 2, r - 1);
    v.restride(shape, strides, v.offset())
}

/// The flat batch index in `src` (right-aligned, size-1 dims broadcast) of the batch
/// position `idx` of the broadcast batch shape.
fn source_batch(idx: &[usize], src: &[usize]) -> usize {
    let lead = idx.len() - src.len();
    src.iter().enumerate().fold(0, |acc, (i, &d)| acc * d + if d == 1 { 0 } else { idx[lead + i] })
}

/// Operand values converted to the compute dtype.
fn float_operand(ctx: &EvalCtx, v: &View, dtype: DType) -> Vec<f64> {
    v.floats().into_iter().map(|x| ctx.round(dtype, x)).collect()
}

/// Batched `a @ b` (after optional transposes) in `dtype`; returns the result shape and values.
fn batched_matmul(
    ctx: &mut EvalCtx,
    a: &View,
    b: &View,
    ta: bool,
    tb: bool,
    dtype: DType,
) -> Result<(Vec<usize>, Vals), EvalError> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(invalid("matmul operands must have rank >= 2"));
    }
    let a = if ta { transpose_last2(a) } else { a.clone() };
    let b = if tb { transpose_last2(b) } else { b.clone() };
    let (ra, rb) = (a.rank(), b.rank());
    let (a_batch, m, k) = (&a.shape()[..ra - 2], a.shape()[ra - 2], a.shape()[ra - 1]);
    let (b_batch, kb, n) = (&b.shape()[..rb - 2], b.shape()[rb - 2], b.shape()[rb - 1]);
    if k != kb {
        return Err(invalid(format!("inner dims differ: {k} and {kb}")));
    }
    let batch = broadcast_concrete(a_batch, b_batch)?;
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let nb: usize = batch.iter().product();
    if m == 0 || n == 0 || nb == 0 {
        let vals = if dtype.is_float() { Vals::F(Vec::new()) } else { Vals::I(Vec::new()) };
        return Ok((shape, vals));
    }
    ctx.charge(work(&[nb, m, n, k]))?;
    let total = nb * m * n;
    let offsets: Vec<(usize, usize)> = (0..nb)
        .map(|i| {
            let idx = unravel(i, &batch);
            (source_batch(&idx, a_batch) * m * k, source_batch(&idx, b_batch) * k * n)
        })
        .collect();
    if dtype.is_float() {
        let av = float_operand(ctx, &a, dtype);
        let bv = float_operand(ctx, &b, dtype);
        let mut out = vec![0.0; total];
        for (bi, &(ao, bo)) in offsets.iter().enumerate() {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0;
                    for p in 0..k {
                        acc = ctx.round(dtype, acc + av[ao + i * k + p] * bv[bo + p * n + j]);
                    }
                    out[(bi * m + i) * n + j] = acc;
                }
            }
        }
        Ok((shape, Vals::F(out)))
    } else {
        let (av, bv) = (a.ints(), b.ints());
        let mut out = vec![0i64; total];
        for (bi, &(ao, bo)) in offsets.iter().enumerate() {
            for i in 0..m {
                for j in 0..n {
                    let mut acc: i64 = 0;
                    for p in 0..k {
                        acc = acc.wrapping_add(av[ao + i * k + p].wrapping_mul(bv[bo + p * n + j]));
                    }
                    out[(bi * m + i) * n + j] = acc;
                }
            }
        }
        Ok((shape, Vals::I(out)))
    }
}

fn finish(ctx: &EvalCtx, dtype: DType, shape: Vec<usize>, vals: Vals) -> View {
    match vals {
        Vals::F(v) => View::from_floats(ctx, dtype, shape, v),
        Vals::I(v) => View::from_ints(dtype, shape, v),
    }
}

fn eval_matmul(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let dtype = out.dtype;
    match kind {
        OpKind::Matmul => {
            let (ta, tb) = (attrs.bool("transpose_a"), attrs.bool("transpose_b"));
            let (shape, vals) = batched_matmul(ctx, &args[0], &args[1], ta, tb, dtype)?;
            Ok(finish(ctx, dtype, shape, vals))
        }
        OpKind::Bmm => {
            let (shape, vals) = batched_matmul(ctx, &args[0], &args[1], false, false, dtype)?;
            Ok(finish(ctx, dtype, shape, vals))
        }
        OpKind::Linear => {
            let x = &args[0];
            let x2 = if x.rank() == 1 {
                x.restride(vec![1, x.shape()[0]], vec![0, x.strides()[0]], x.offset())
            } else {
                x.clone()
            };
            let (mut shape, vals) = batched_matmul(ctx, &x2, &args[1], false, true, dtype)?;
            if x.rank() == 1 {
                shape.remove(0);
            }
            let out_features = args[1].shape()[0];
            let vals = match (vals, args.get(2)) {
                (vals, None) => vals,
                (Vals::F(mut v), Some(bias)) => {
                    let bv = float_operand(ctx, bias, dtype);
                    for (i, y) in v.iter_mut().enumerate() {
                        *y += bv[i % out_features];
                    }
                    Vals::F(v)
                }
                (Vals::I(mut v), Some(bias)) => {
                    let bv = bias.ints();
                    for (i, y) in v.iter_mut().enumerate() {
                        *y = y.wrapping_add(bv[i % out_features]);
                    }
                    Vals::I(v)
                }
            };
            Ok(finish(ctx, dtype, shape, vals))
        }
        OpKind::Addmm => {
            let (beta, alpha) = (attrs.float("beta"), attrs.float("alpha"));
            let (shape, vals) = batched_matmul(ctx, &args[1], &args[2], false, false, dtype)?;
            let bias = broadcast_view(&args[0], &shape)?;
            let vals = match vals {
                Vals::F(mut v) => {
                    let bv = float_operand(ctx, &bias, dtype);
                    for (y, b) in v.iter_mut().zip(bv) {
                        *y = if beta == 0.0 { alpha * *y } else { beta * b + alpha * *y };
                    }
                    Vals::F(v)
                }
                Vals::I(mut v) => {
                    let (beta, alpha) = (beta as i64, alpha as i64);
                    for (y, b) in v.iter_mut().zip(bias.ints()) {
                        let p = alpha.wrapping_mul(*y);
                        *y = if beta == 0 { p } else { beta.wrapping_mul(b).wrapping_add(p) };
                    }
                    Vals::I(v)
                }
            };
            Ok(finish(ctx, dtype, shape, vals))
        }
        _ => Err(invalid(format!("{kind:?} is not a matmul-family op"))),
    }
}

/// N-d convolution in `dtype`: returns the result shape and values.
fn conv_core(
    ctx: &mut EvalCtx,
    x: &View,
    w: &View,
    g: &ConvGeom,
    dtype: DType,
) -> Result<(Vec<usize>, Vec<f64>), EvalError> {
    let (xs, ws) = (x.shape(), w.shape());
    let n = xs.len() - 2;
    let (batch, channels, out_ch, cg) = (xs[0], xs[1], ws[0], ws[1]);
    let groups = g.groups as usize;
    if cg.checked_mul(groups) != Some(channels) || out_ch % groups != 0 {
        return Err(invalid(format!("channels {channels} and weight {ws:?} do not fit {groups} groups")));
    }
    let (in_sp, k_sp) = (&xs[2..], &ws[2..]);
    let mut shape = vec![batch, out_ch];
    for d in 0..n {
        let o = window_count_static(
            in_sp[d] as u64,
            g.pad_begin[d],
            g.pad_end[d],
            g.dilation[d],
            k_sp[d] as u64,
            g.stride[d],
            false,
        )
        .map_err(invalid)?;
        shape.push(usize::try_from(o).map_err(invalid)?);
    }
    let out_sp = shape[2..].to_vec();
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Ok((shape, Vec::new()));
    }
    let kprod: usize = k_sp.iter().product();
    ctx.charge(work(&[numel, cg, kprod]))?;
    let xv = float_operand(ctx, x, dtype);
    let wv = float_operand(ctx, w, dtype);
    let kernel_idx: Vec<_> = (0..kprod).map(|f| unravel(f, k_sp)).collect();
    let in_prod: usize = in_sp.iter().product();
    let out_prod: usize = out_sp.iter().product();
    let oc_per_group = out_ch / groups;
    let mut out = Vec::with_capacity(numel);
    for flat in 0..numel {
        let sp_flat = flat % out_prod;
        let oc = (flat / out_prod) % out_ch;
        let b = flat / (out_prod * out_ch);
        let o_idx = unravel(sp_flat, &out_sp);
        let group = oc / oc_per_group;
        let mut acc = 0.0;
        for ci in 0..cg {
            let c = group * cg + ci;
            let x_base = (b * channels + c) * in_prod;
            let w_base = (oc * cg + ci) * kprod;
            for (kf, kidx) in kernel_idx.iter().enumerate() {
                let mut pos = 0usize;
                let mut inside = true;
                for d in 0..n {
                    let p = o_idx[d] as i128 * g.stride[d] as i128 + kidx[d] as i128 * g.dilation[d] as i128
                        - g.pad_begin[d] as i128;
                    if p < 0 || p >= in_sp[d] as i128 {
                        inside = false;
                        break;
                    }
                    pos = pos * in_sp[d] + p as usize;
                }
                let xval = if inside { xv[x_base + pos] } else { 0.0 };
                acc = ctx.round(dtype, acc + xval * wv[w_base + kf]);
            }
        }
        out.push(acc);
    }
    Ok((shape, out))
}

fn eval_conv(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let (x, w) = (&args[0], &args[1]);
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(invalid(format!("conv operands of shapes {:?} and {:?}", x.shape(), w.shape())));
    }
    let g = conv_geom(kind, attrs, x.rank() - 2).map_err(invalid)?;
    let (shape, mut vals) = conv_core(ctx, x, w, &g, out.dtype)?;
    if let Some(bias) = args.get(2) {
        let bv = float_operand(ctx, bias, out.dtype);
        let per_channel: usize = shape[2..].iter().product();
        let out_ch = shape[1];
        for (i, y) in vals.iter_mut().enumerate() {
            *y += bv[(i / per_channel) % out_ch];
        }
    }
    Ok(View::from_floats(ctx, out.dtype, shape, vals))
}

fn eval_pool(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let r = x.rank();
    if r < 3 {
        return Err(invalid(format!("pooling input of shape {:?}", x.shape())));
    }
    let (h, w) = (x.shape()[r - 2], x.shape()[r - 1]);
    let lead: usize = x.shape()[..r - 2].iter().product();
    let (oh, ow, window) = if kind == OpKind::AdaptiveAvgPool2d {
        let o = spatial_list("output_size", attrs.ints("output_size"), 2, 0, None).map_err(invalid)?;
        let (oh, ow) = (usize::try_from(o[0]).map_err(invalid)?, usize::try_from(o[1]).map_err(invalid)?);
        // The longest adaptive window along a dim is at most ceil(in/out) + 1.
        let wh = if oh == 0 { 0 } else { h.div_ceil(oh) + 1 };
        let ww = if ow == 0 { 0 } else { w.div_ceil(ow) + 1 };
        (oh, ow, work(&[wh, ww]))
    } else {
        let g = pool_geom(kind, attrs).map_err(invalid)?;
        let count = |d: usize, len: usize| {
            window_count_static(
                len as u64,
                g.padding[d],
                g.padding[d],
                g.dilation[d],
                g.kernel[d],
                g.stride[d],
                g.ceil_mode,
            )
            .map_err(invalid)
            .and_then(|o| usize::try_from(o).map_err(invalid))
        };
        (count(0, h)?, count(1, w)?, g.kernel[0].saturating_mul(g.kernel[1]))
    };
    let mut shape = x.shape()[..r - 2].to_vec();
    shape.extend([oh, ow]);
    let numel = lead * oh * ow;
    if numel == 0 {
        return Ok(View::from_floats(ctx, out.dtype, shape, Vec::new()));
    }
    ctx.charge(work(&[numel]).saturating_mul(window))?;
    let xv = x.floats();
    let mut vals = Vec::with_capacity(numel);
    match kind {
        OpKind::MaxPool2d => {
            let g = pool_geom(kind, attrs).map_err(invalid)?;
            let (kh, kw) = (g.kernel[0] as i128, g.kernel[1] as i128);
            for l in 0..lead {
                let plane = &xv[l * h * w..(l + 1) * h * w];
                for i in 0..oh {
                    for j in 0..ow {
                        let mut best = f64::NEG_INFINITY;
                        for a in 0..kh {
                            let y = i as i128 * g.stride[0] as i128 + a * g.dilation[0] as i128 - g.padding[0] as i128;
                            if y < 0 || y >= h as i128 {
                                continue;
                            }
                            for b in 0..kw {
                                let z =
                                    j as i128 * g.stride[1] as i128 + b * g.dilation[1] as i128 - g.padding[1] as i128;
                                if z < 0 || z >= w as i128 {
                                    continue;
                                }
                                best = binary_float(OpKind::Max, best, plane[y as usize * w + z as usize]);
                            }
                        }
                        vals.push(best);
                    }
                }
            }
        }
        OpKind::AvgPool2d => {
            let g = pool_geom(kind, attrs).map_err(invalid)?;
            let include_pad = attrs.bool("count_include_pad");
            // torch's avg_pool2d window: clipped to the padded input for the divisor, then to
            // the input for the sum.
            let bounds = |o: usize, d: usize, len: usize| {
                let start = o as i128 * g.stride[d] as i128 - g.padding[d] as i128;
                let end = (start + g.kernel[d] as i128).min(len as i128 + g.padding[d] as i128);
                let size = end - start;
                (start.max(0) as usize, end.min(len as i128).max(0) as usize, size)
            };
            for l in 0..lead {
                let plane = &xv[l * h * w..(l + 1) * h * w];
                for i in 0..oh {
                    let (y0, y1, sy) = bounds(i, 0, h);
                    for j in 0..ow {
                        let (z0, z1, sz) = bounds(j, 1, w);
                        if y0 >= y1 || z0 >= z1 {
                            vals.push(0.0);
                            continue;
                        }
                        let mut sum = 0.0;
                        for y in y0..y1 {
                            for z in z0..z1 {
                                sum += plane[y * w + z];
                            }
                        }
                        let divisor = if include_pad { (sy * sz) as f64 } else { ((y1 - y0) * (z1 - z0)) as f64 };
                        vals.push(sum / divisor);
                    }
                }
            }
        }
        _ => {
            let range = |o: usize, out_len: usize, len: usize| ((o * len) / out_len, ((o + 1) * len).div_ceil(out_len));
            for l in 0..lead {
                let plane = &xv[l * h * w..(l + 1) * h * w];
                for i in 0..oh {
                    let (y0, y1) = range(i, oh, h);
                    for j in 0..ow {
                        let (z0, z1) = range(j, ow, w);
                        let mut sum = 0.0;
                        for y in y0..y1 {
                            for z in z0..z1 {
                                sum += plane[y * w + z];
                            }
                        }
                        vals.push(sum / ((y1 - y0) * (z1 - z0)) as f64);
                    }
                }
            }
        }
    }
    Ok(View::from_floats(ctx, out.dtype, shape, vals))
}
