//! ONNX ops to ladder ops, one conversion per op type.
//!
//! Mapping choices worth knowing:
//! - Elementwise ops map to ladder's broadcasting high-level forms. `Pow` with an integer base
//!   converts back to the base's type; `Mod` with `fmod=0` is Python's modulo built from `rem`.
//! - `MatMul` unsqueezes 1-D operands (ladder's `matmul` needs rank >= 2) and squeezes the
//!   result; `Gemm` is `matmul {transpose_a, transpose_b}` then `alpha`, `beta * C`.
//! - `Gather` (NumPy take) is `reshape` + `expand` of the indices to the data's rank, then
//!   ladder's `gather` (torch.gather), then `reshape`; a constant scalar index is a `select`.
//!   Constant indices are range-checked at import. `GatherElements` is `gather` itself.
//! - `Reshape`/`Expand`/`ConstantOfShape`/`Range`/`Tile`/`Slice`/`Split`/`Squeeze`/
//!   `Unsqueeze`/`Pad`/`Reduce*` need their shape-like inputs known at import (constant, or
//!   computed from shapes); both the attribute and the input forms are read.
//! - `Slice` with a negative step is `rev` + `slice`; on a symbolic dim only step 1 works.
//! - Pools: 1-D and 2-D (`max_pool2d`/`avg_pool2d`, 1-D through an inserted axis; integer
//!   `MaxPool` of up to 32 bits through f64);
//!   asymmetric or large pads become an explicit `pad` (-inf for max, 0 for average with
//!   `count_include_pad`); `auto_pad` SAME_* needs static spatial dims. Other pools (3-D,
//!   dilated averages, asymmetric averages without `count_include_pad`, `MaxPool` with
//!   indices) are `spatial.rs`'s.
//! - `ConvTranspose` is a `conv` of the stride-dilated, padded input (`pad` with interior
//!   padding) with the flipped, regrouped kernel.
//! - `Softmax`/`LogSoftmax`/`Hardmax` before opset 13 flatten to 2-D at `axis` first.
//! - `Reduce*` of integers sum in i64 (ladder's `sum`/`prod`) and convert back.
//! - `Einsum` is a broadcast product summed over the contracted labels; an ellipsis becomes
//!   fresh labels (right-aligned), a label repeated in one operand takes that diagonal first
//!   (the two axes merged and sliced with step n+1).
//! - `Resize`/`Upsample`, pooling beyond the 2-d ops (3-d, dilated or asymmetric averages),
//!   `LpPool`, `LRN`, `MaxUnpool`, `CenterCropPad`, `Col2Im`: see `spatial.rs`; `DFT`,
//!   `STFT`, the window ops and `MelWeightMatrix`: see `signal.rs`; `GridSample`,
//!   `AffineGrid`, `RoiAlign`, `DeformConv`: see `grid.rs`.
//! - `If` with a condition known at import inlines the taken branch.
//! - `RNN`/`GRU`/`LSTM` unroll over their static length; `Scan` and `Loop` inline their body
//!   once per iteration; `ai.onnx.preview::FlexAttention` is attention with its modifier
//!   subgraphs inlined; `OptionalHasElement`/`OptionalGetElement` act on plain tensors (all in
//!   `recur.rs`).
//! - `Dropout` is the identity (inference); its mask output is all true.
//! - `Attention` is `scaled_dot_product_attention` where its semantics fit, else the function
//!   body's matmul/softmax composition; `RotaryEmbedding` is slices and elementwise math;
//!   `CausalConvWithState` is a depthwise `conv` of the state-prefixed input; `LinearAttention`
//!   unrolls its recurrence over a static length (all in `attention.rs`).
//! - Scans, TopK, the scatters, GatherND, ReverseSequence, Compress, Det, the inverse trig
//!   ops, Swish, `Pad` with a run-time value and training-mode `BatchNormalization` are in
//!   `index.rs`, which lists its own choices.
//! - Quantization (`QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear`), the
//!   integer products (`MatMulInteger`, `ConvInteger`, `QLinearMatMul`, `QLinearConv`),
//!   `BitShift` and the `Bitwise*` ops are in `quant.rs`.

use super::build::{dims_attr, int, ints, invalid, one, unsupported, Outs};
use super::import::{a_float, a_int, a_ints, a_str, attr, Importer, NResult, Slot, SymInt, SymList};
use super::proto::NodeProto;
use super::tensor::{dtype_name, dtype_of};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Shape, SizeExpr, Value};
use crate::ops::OpKind;
use crate::tensor::Tensor;

/// The op types the importer converts (default domain).
pub const SUPPORTED: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "AffineGrid",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Attention",
    "AveragePool",
    "BatchNormalization",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "BlackmanWindow",
    "Cast",
    "CastLike",
    "CausalConvWithState",
    "Ceil",
    "Celu",
    "CenterCropPad",
    "Clip",
    "Col2Im",
    "Compress",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "CumProd",
    "CumSum",
    "DFT",
    "DeformConv",
    "DepthToSpace",
    "DequantizeLinear",
    "Det",
    "Div",
    "Dropout",
    "DynamicQuantizeLinear",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "EyeLike",
    "Flatten",
    "Floor",
    "GRU",
    "Gather",
    "GatherElements",
    "GatherND",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "GridSample",
    "GroupNormalization",
    "HammingWindow",
    "HannWindow",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "Identity",
    "If",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LRN",
    "LSTM",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "LinearAttention",
    "Log",
    "LogSoftmax",
    "Loop",
    "LpNormalization",
    "LpPool",
    "MatMul",
    "MatMulInteger",
    "Max",
    "MaxPool",
    "MaxUnpool",
    "Mean",
    "MeanVarianceNormalization",
    "MelWeightMatrix",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "NegativeLogLikelihoodLoss",
    "Not",
    "OneHot",
    "OptionalGetElement",
    "OptionalHasElement",
    "Or",
    "PRelu",
    "Pad",
    "Pow",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
    "RMSNormalization",
    "RNN",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Resize",
    "ReverseSequence",
    "RoiAlign",
    "RotaryEmbedding",
    "Round",
    "STFT",
    "Scan",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Selu",
    "Shape",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Size",
    "Slice",
    "Softmax",
    "SoftmaxCrossEntropyLoss",
    "Softplus",
    "Softsign",
    "SpaceToDepth",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Swish",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "TopK",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Upsample",
    "Where",
    "Xor",
];

pub fn is_supported(op_type: &str, _opset: i64) -> bool {
    SUPPORTED.contains(&op_type)
}

fn dim_err(e: crate::ir::DimError) -> NodeError {
    NodeError::Unsupported(format!("size arithmetic: {e}"))
}

/// Normalises an axis against `rank` (ONNX range `[-rank, rank-1]`).
fn norm_axis(axis: i64, rank: usize) -> NResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

impl Importer<'_> {
    fn shape_of(&self, v: Value) -> Vec<Dim> {
        self.ty(v).shape.dims().to_vec()
    }

    fn rank_of(&self, v: Value) -> usize {
        self.ty(v).rank()
    }

    fn dtype_of_v(&self, v: Value) -> DType {
        self.ty(v).dtype
    }

    fn reshape(&mut self, v: Value, dims: &[Dim]) -> NResult<Value> {
        if self.shape_of(v) == dims {
            return Ok(v);
        }
        self.emit(OpKind::Reshape, &[v], &[("shape", dims_attr(dims))])
    }

    fn convert_to(&mut self, v: Value, dtype: DType) -> NResult<Value> {
        if self.dtype_of_v(v) == dtype {
            return Ok(v);
        }
        self.emit(OpKind::ConvertElementType, &[v], &[("dtype", AttrValue::DType(dtype))])
    }

    fn un(&mut self, op: OpKind, v: Value) -> NResult<Value> {
        self.emit(op, &[v], &[])
    }

    fn bin(&mut self, op: OpKind, a: Value, b: Value) -> NResult<Value> {
        self.emit(op, &[a, b], &[])
    }

    /// `v op c` with `c` a scalar of `v`'s dtype.
    fn bin_scalar(&mut self, op: OpKind, v: Value, c: f64) -> NResult<Value> {
        let s = self.scalar(self.dtype_of_v(v), c)?;
        self.bin(op, v, s)
    }

    /// Inserts size-1 axes at `axes` (positions in the result).
    fn unsqueeze(&mut self, v: Value, axes: &[i64]) -> NResult<Value> {
        let out_rank = self.rank_of(v) + axes.len();
        let mut norm: Vec<usize> = axes.iter().map(|&a| norm_axis(a, out_rank)).collect::<NResult<_>>()?;
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            return invalid(format!("repeated axis in {axes:?}"));
        }
        let mut dims = self.shape_of(v);
        for &a in &norm {
            dims.insert(a, Dim::new(1));
        }
        self.reshape(v, &dims)
    }

    fn squeeze(&mut self, v: Value, axes: &[i64]) -> NResult<Value> {
        self.emit(OpKind::Squeeze, &[v], &[("axes", ints(axes))])
    }

    fn numel_of(&self, dims: &[Dim]) -> NResult<Dim> {
        dims.iter().try_fold(Dim::new(1), |a, d| a.mul(d)).map_err(dim_err)
    }
}

/// Converts one node; returns a slot per output.
pub fn convert<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    if let Some(outs) = super::shapes::convert_syms(imp, node)? {
        return Ok(outs);
    }
    use OpKind as K;
    let op = node.op_type.as_str();
    match op {
        // --- Unary elementwise ---
        "Abs" | "Neg" | "Exp" | "Log" | "Sqrt" | "Erf" | "Floor" | "Ceil" | "Round" | "Sign" | "Sin" | "Cos"
        | "Tanh" | "Reciprocal" | "IsNaN" | "Not" | "Relu" | "Sigmoid" | "Softsign" | "Mish" | "Tan" | "Sinh"
        | "Cosh" => {
            let x = imp.input(node, 0)?;
            let kind = match op {
                "Abs" => K::Abs,
                "Neg" => K::Neg,
                "Exp" => K::Exp,
                "Log" => K::Log,
                "Sqrt" => K::Sqrt,
                "Erf" => K::Erf,
                "Floor" => K::Floor,
                "Ceil" => K::Ceil,
                "Round" => K::Round,
                "Sign" => K::Sign,
                "Sin" => K::Sin,
                "Cos" => K::Cos,
                "Tanh" => K::Tanh,
                "Reciprocal" => K::Reciprocal,
                "IsNaN" => K::IsNan,
                "Not" => K::LogicalNot,
                "Relu" => K::Relu,
                "Sigmoid" => K::Sigmoid,
                "Softsign" => {
                    let a = imp.un(K::Abs, x)?;
                    let d = imp.bin_scalar(K::Add, a, 1.0)?;
                    return one(imp.bin(K::Div, x, d)?);
                }
                "Mish" => {
                    let sp = imp.emit(K::Softplus, &[x], &[("threshold", AttrValue::Float(f64::INFINITY))])?;
                    let t = imp.un(K::Tanh, sp)?;
                    return one(imp.bin(K::Mul, x, t)?);
                }
                "Tan" => {
                    let s = imp.un(K::Sin, x)?;
                    let c = imp.un(K::Cos, x)?;
                    return one(imp.bin(K::Div, s, c)?);
                }
                "Sinh" | "Cosh" => {
                    // (e^x ∓ e^-x) / 2
                    let e = imp.un(K::Exp, x)?;
                    let n = imp.un(K::Neg, x)?;
                    let en = imp.un(K::Exp, n)?;
                    let s = imp.bin(if op == "Sinh" { K::Sub } else { K::Add }, e, en)?;
                    return one(imp.bin_scalar(K::Mul, s, 0.5)?);
                }
                _ => return unsupported(op.to_string()),
            };
            one(imp.un(kind, x)?)
        }
        "IsInf" => {
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
        "LeakyRelu" => {
            let x = imp.input(node, 0)?;
            let alpha = a_float(node, "alpha", 0.01);
            one(imp.emit(K::LeakyRelu, &[x], &[("negative_slope", AttrValue::Float(alpha))])?)
        }
        "Elu" => {
            let x = imp.input(node, 0)?;
            one(imp.emit(K::Elu, &[x], &[("alpha", AttrValue::Float(a_float(node, "alpha", 1.0)))])?)
        }
        "Selu" => {
            let x = imp.input(node, 0)?;
            let alpha = a_float(node, "alpha", 1.673_263_192_176_818_8);
            let gamma = a_float(node, "gamma", 1.050_700_987_355_480_5);
            let e = imp.emit(K::Elu, &[x], &[("alpha", AttrValue::Float(alpha))])?;
            one(imp.bin_scalar(K::Mul, e, gamma)?)
        }
        "Celu" => {
            // alpha * elu(x / alpha)
            let x = imp.input(node, 0)?;
            let alpha = a_float(node, "alpha", 1.0);
            let s = imp.bin_scalar(K::Div, x, alpha)?;
            let e = imp.emit(K::Elu, &[s], &[])?;
            one(imp.bin_scalar(K::Mul, e, alpha)?)
        }
        "ThresholdedRelu" => {
            let x = imp.input(node, 0)?;
            let c = imp.bin_scalar(K::Gt, x, a_float(node, "alpha", 1.0))?;
            let z = imp.scalar(imp.dtype_of_v(x), 0.0)?;
            one(imp.emit(K::Where, &[c, x, z], &[])?)
        }
        "Shrink" => {
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
        "Softplus" => {
            let x = imp.input(node, 0)?;
            one(imp.emit(K::Softplus, &[x], &[("threshold", AttrValue::Float(f64::INFINITY))])?)
        }
        "HardSigmoid" => {
            let x = imp.input(node, 0)?;
            let (alpha, beta) = (a_float(node, "alpha", 0.2), a_float(node, "beta", 0.5));
            let m = imp.bin_scalar(K::Mul, x, alpha)?;
            let a = imp.bin_scalar(K::Add, m, beta)?;
            one(imp.emit(K::Clamp, &[a], &[("min", AttrValue::Float(0.0)), ("max", AttrValue::Float(1.0))])?)
        }
        "HardSwish" => {
            let x = imp.input(node, 0)?;
            one(imp.un(K::Hardswish, x)?)
        }
        "Gelu" => {
            let x = imp.input(node, 0)?;
            let approx = a_str(node, "approximate", "none");
            one(imp.emit(K::Gelu, &[x], &[("approximate", AttrValue::Str(approx))])?)
        }
        "PRelu" => {
            let x = imp.input(node, 0)?;
            let slope = imp.input(node, 1)?;
            let neg = imp.bin_scalar(K::Lt, x, 0.0)?;
            let m = imp.bin(K::Mul, x, slope)?;
            one(imp.emit(K::Where, &[neg, m, x], &[])?)
        }

        // --- Binary elementwise ---
        "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And"
        | "Or" | "Xor" => {
            let a = imp.input(node, 0)?;
            let b = imp.input(node, 1)?;
            let kind = match op {
                "Add" => K::Add,
                "Sub" => K::Sub,
                "Mul" => K::Mul,
                "Div" => K::Div,
                "Equal" => K::Eq,
                "Less" => K::Lt,
                "Greater" => K::Gt,
                "LessOrEqual" => K::Le,
                "GreaterOrEqual" => K::Ge,
                "And" => K::And,
                "Or" => K::Or,
                _ => K::Ne,
            };
            one(imp.bin(kind, a, b)?)
        }
        "Pow" => {
            let a = imp.input(node, 0)?;
            let b = imp.input(node, 1)?;
            let dt = imp.dtype_of_v(a);
            let r = imp.bin(K::Pow, a, b)?;
            one(imp.convert_to(r, dt)?)
        }
        "Mod" => {
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
        "Max" | "Min" | "Sum" | "Mean" => {
            let kind = match op {
                "Max" => K::Max,
                "Min" => K::Min,
                _ => K::Add,
            };
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
            if op == "Mean" && n > 1 {
                acc = imp.bin_scalar(K::Div, acc, n as f64)?;
            }
            one(acc)
        }
        "Where" => {
            let c = imp.input(node, 0)?;
            let a = imp.input(node, 1)?;
            let b = imp.input(node, 2)?;
            one(imp.emit(K::Where, &[c, a, b], &[])?)
        }
        "Cast" | "CastLike" => {
            let x = imp.input(node, 0)?;
            let dtype = if op == "Cast" {
                let to = a_int(node, "to", 0) as i32;
                dtype_of(to)
                    .ok_or_else(|| NodeError::Unsupported(format!("cast to element type {}", dtype_name(to))))?
            } else {
                let like = imp.input(node, 1)?;
                imp.dtype_of_v(like)
            };
            one(imp.convert_to(x, dtype)?)
        }
        "Clip" => {
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
                return one(imp.emit(
                    K::Clamp,
                    &[x],
                    &[("min", AttrValue::Float(lo)), ("max", AttrValue::Float(hi))],
                )?);
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
        "Identity" => {
            let s = imp.slot(node, 0)?.ok_or_else(|| NodeError::Invalid("input 0 is required".into()))?;
            Ok(vec![Some(s)])
        }
        "Dropout" => {
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
                    &[
                        ("shape", dims_attr(&shape)),
                        ("value", AttrValue::Float(1.0)),
                        ("dtype", AttrValue::DType(DType::Bool)),
                    ],
                )?;
                outs.push(Some(Slot::Val(m)));
            }
            Ok(outs)
        }

        // --- Constants and shapes ---
        "Constant" => {
            let name = node.output.first().cloned().unwrap_or_default();
            let t = if let Some(a) = attr(node, "value") {
                let t = a.t.as_ref().ok_or_else(|| NodeError::Invalid("`value` has no tensor".into()))?;
                imp.tensor(t)?
            } else if let Some(a) = attr(node, "value_float") {
                Tensor::scalar_f32(a.f)
            } else if let Some(a) = attr(node, "value_floats") {
                Tensor::from_f32(&[a.floats.len()], a.floats.clone()).map_err(|e| NodeError::Invalid(e.to_string()))?
            } else if let Some(a) = attr(node, "value_int") {
                Tensor::from_i64(&[], vec![a.i]).map_err(|e| NodeError::Invalid(e.to_string()))?
            } else if let Some(a) = attr(node, "value_ints") {
                Tensor::from_i64(&[a.ints.len()], a.ints.clone()).map_err(|e| NodeError::Invalid(e.to_string()))?
            } else {
                return unsupported("a Constant that is not a numeric tensor (string or sparse)");
            };
            one(imp.constant(&name, t))
        }
        "Shape" => {
            let x = imp.input(node, 0)?;
            let dims = imp.shape_of(x);
            let r = dims.len() as i64;
            let clamp = |a: i64| (if a < 0 { a + r } else { a }).clamp(0, r) as usize;
            let start = clamp(a_int(node, "start", 0));
            let end = clamp(a_int(node, "end", r));
            let elems: Vec<SymInt> =
                if start < end { dims[start..end].iter().map(SymInt::from_dim).collect() } else { vec![] };
            super::shapes::shape_list(imp, SymList { elems, scalar: false, dtype: DType::I64 }, node)
        }
        "Size" => {
            let x = imp.input(node, 0)?;
            let n = imp.numel_of(&imp.shape_of(x))?;
            super::shapes::shape_list(
                imp,
                SymList { elems: vec![SymInt::from_dim(&n)], scalar: true, dtype: DType::I64 },
                node,
            )
        }
        "ConstantOfShape" => {
            let shape =
                imp.sym_input(node, 0)?.ok_or_else(|| NodeError::NeedsValue { input: 0, what: "the shape".into() })?;
            let dims = shape
                .elems
                .iter()
                .map(|e| e.to_dim().ok_or_else(|| NodeError::Invalid(format!("negative dim {e:?}"))))
                .collect::<NResult<Vec<_>>>()?;
            let (value, dtype) = match attr(node, "value").and_then(|a| a.t.as_ref()) {
                Some(t) => {
                    let t = imp.tensor(t)?;
                    if t.numel() != 1 {
                        return invalid("`value` must hold one element");
                    }
                    (t.to_f64_vec()[0], t.dtype())
                }
                None => (0.0, DType::F32),
            };
            one(imp.emit(
                K::Full,
                &[],
                &[("shape", dims_attr(&dims)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dtype))],
            )?)
        }
        "Range" => super::shapes::range(imp, node),
        "EyeLike" => {
            let x = imp.input(node, 0)?;
            let shape = imp.shape_of(x);
            if shape.len() != 2 {
                return invalid("EyeLike needs a 2-D input");
            }
            let dtype = match attr(node, "dtype") {
                Some(a) => dtype_of(a.i as i32)
                    .ok_or_else(|| NodeError::Unsupported(format!("element type {}", dtype_name(a.i as i32))))?,
                None => imp.dtype_of_v(x),
            };
            let k = a_int(node, "k", 0);
            let rows = imp.emit(
                K::Iota,
                &[],
                &[("shape", dims_attr(&shape)), ("axis", int(0)), ("dtype", AttrValue::DType(DType::I64))],
            )?;
            let cols = imp.emit(
                K::Iota,
                &[],
                &[("shape", dims_attr(&shape)), ("axis", int(1)), ("dtype", AttrValue::DType(DType::I64))],
            )?;
            let shifted = imp.bin_scalar(K::Add, rows, k as f64)?;
            let eq = imp.bin(K::Eq, shifted, cols)?;
            one(imp.convert_to(eq, dtype)?)
        }

        // --- Shape manipulation ---
        "Reshape" => {
            let x = imp.input(node, 0)?;
            let target = match imp.sym_input(node, 1)? {
                Some(t) => t,
                None if imp.opset < 5 => {
                    let s = a_ints(node, "shape").unwrap_or_default();
                    SymList { elems: s.into_iter().map(SymInt::I).collect(), scalar: false, dtype: DType::I64 }
                }
                None => return Err(NodeError::NeedsValue { input: 1, what: "the shape".into() }),
            };
            let allowzero = a_int(node, "allowzero", 0) != 0;
            let xs = imp.shape_of(x);
            let mut dims = Vec::with_capacity(target.elems.len());
            for (i, e) in target.elems.iter().enumerate() {
                dims.push(match e {
                    SymInt::I(0) if !allowzero => {
                        Some(xs.get(i).cloned().ok_or_else(|| {
                            NodeError::Invalid(format!("0 at {i} copies a dim the input does not have"))
                        })?)
                    }
                    SymInt::I(-1) => None,
                    SymInt::I(n) if *n < 0 => return invalid(format!("shape entry {n}")),
                    e => e.to_dim(),
                });
            }
            one(imp.emit(K::Reshape, &[x], &[("shape", AttrValue::Dims(dims))])?)
        }
        "Flatten" => {
            let x = imp.input(node, 0)?;
            let dims = imp.shape_of(x);
            let r = dims.len() as i64;
            let axis = a_int(node, "axis", 1);
            let axis = if axis < 0 { axis + r } else { axis };
            if !(0..=r).contains(&axis) {
                return invalid(format!("axis {axis} is out of range for rank {r}"));
            }
            let a = imp.numel_of(&dims[..axis as usize])?;
            let b = imp.numel_of(&dims[axis as usize..])?;
            one(imp.reshape(x, &[a, b])?)
        }
        "Transpose" => {
            let x = imp.input(node, 0)?;
            let r = imp.rank_of(x) as i64;
            let perm = a_ints(node, "perm").unwrap_or_else(|| (0..r).rev().collect());
            one(imp.emit(K::Permute, &[x], &[("perm", ints(&perm))])?)
        }
        "Squeeze" => {
            let x = imp.input(node, 0)?;
            let axes = match a_ints(node, "axes") {
                Some(a) => a,
                None => imp.ints_input(node, 1, "axes")?.unwrap_or_default(),
            };
            if axes.is_empty() {
                return one(imp.squeeze(x, &[])?);
            }
            // Drop the listed dims with a reshape, so symbolic dims known to be 1 at run
            // time can be squeezed too.
            let dims = imp.shape_of(x);
            let norm: Vec<usize> = axes.iter().map(|&a| norm_axis(a, dims.len())).collect::<NResult<_>>()?;
            for &a in &norm {
                if dims[a].as_const().is_some_and(|d| d != 1) {
                    return invalid(format!("cannot squeeze axis {a} of size {}", dims[a]));
                }
            }
            let kept: Vec<Dim> =
                dims.iter().enumerate().filter(|(i, _)| !norm.contains(i)).map(|(_, d)| d.clone()).collect();
            if norm.iter().all(|&a| dims[a].as_const() == Some(1)) {
                return one(imp.squeeze(x, &axes)?);
            }
            one(imp.reshape(x, &kept)?)
        }
        "Unsqueeze" => {
            let x = imp.input(node, 0)?;
            let axes = match a_ints(node, "axes") {
                Some(a) => a,
                None => {
                    imp.ints_input(node, 1, "axes")?.ok_or_else(|| NodeError::Invalid("axes are required".into()))?
                }
            };
            one(imp.unsqueeze(x, &axes)?)
        }
        "Concat" => {
            let mut args = Vec::new();
            for i in 0..node.input.len() {
                if let Some(v) = imp.opt_input(node, i)? {
                    args.push(v);
                }
            }
            if args.is_empty() {
                return invalid("needs at least one input");
            }
            let axis = attr(node, "axis").ok_or_else(|| NodeError::Invalid("attribute `axis` is required".into()))?.i;
            one(imp.emit(K::Cat, &args, &[("axis", int(axis))])?)
        }
        "Split" => split(imp, node),
        "Slice" => slice(imp, node),
        "Gather" => gather(imp, node),
        "GatherElements" => {
            let x = imp.input(node, 0)?;
            let idx = imp.input(node, 1)?;
            one(imp.emit(K::Gather, &[x, idx], &[("axis", int(a_int(node, "axis", 0)))])?)
        }
        "Expand" => {
            let x = imp.input(node, 0)?;
            let target =
                imp.sym_input(node, 1)?.ok_or_else(|| NodeError::NeedsValue { input: 1, what: "the shape".into() })?;
            let dims = target
                .elems
                .iter()
                .map(|e| e.to_dim().ok_or_else(|| NodeError::Invalid(format!("negative dim {e:?}"))))
                .collect::<NResult<Vec<_>>>()?;
            let out = crate::ops::util::broadcast_shapes(&imp.ty(x).shape.clone(), &Shape(dims.into()))
                .map_err(|e| NodeError::Invalid(e.to_string()))?;
            if out == imp.ty(x).shape {
                return one(x);
            }
            one(imp.emit(K::Expand, &[x], &[("shape", dims_attr(out.dims()))])?)
        }
        "Tile" => {
            let x = imp.input(node, 0)?;
            let reps =
                imp.ints_input(node, 1, "repeats")?.ok_or_else(|| NodeError::Invalid("repeats are required".into()))?;
            let dims = imp.shape_of(x);
            if reps.len() != dims.len() || reps.iter().any(|&r| r < 0) {
                return invalid(format!("repeats {reps:?} do not fit rank {}", dims.len()));
            }
            if reps.iter().all(|&r| r == 1) {
                return one(x);
            }
            let mut inter = Vec::new();
            let mut big = Vec::new();
            let mut fin = Vec::new();
            for (d, &r) in dims.iter().zip(&reps) {
                inter.push(Dim::new(1));
                inter.push(d.clone());
                big.push(Dim::new(r as u64));
                big.push(d.clone());
                fin.push(d.mul(&Dim::new(r as u64)).map_err(dim_err)?);
            }
            let a = imp.reshape(x, &inter)?;
            let b = imp.emit(K::Expand, &[a], &[("shape", dims_attr(&big))])?;
            one(imp.reshape(b, &fin)?)
        }
        "Pad" => pad(imp, node),
        "Trilu" => {
            let x = imp.input(node, 0)?;
            let k = imp.ints_input(node, 1, "k")?.map_or(0, |v| v.first().copied().unwrap_or(0));
            let kind = if a_int(node, "upper", 1) != 0 { K::Triu } else { K::Tril };
            one(imp.emit(kind, &[x], &[("diagonal", int(k))])?)
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let x = imp.input(node, 0)?;
            let d = imp.shape_of(x);
            if d.len() != 4 {
                return invalid("needs a 4-D input");
            }
            let b = a_int(node, "blocksize", 0);
            if b <= 0 {
                return invalid("blocksize must be positive");
            }
            let bd = Dim::new(b as u64);
            let bb = bd.mul(&bd).map_err(dim_err)?;
            let (n, c, h, w) = (d[0].clone(), d[1].clone(), d[2].clone(), d[3].clone());
            let div = |x: &Dim, y: &Dim| {
                x.div_exact(y).map_err(|_| NodeError::Invalid(format!("{x} is not divisible by {y}")))
            };
            let (inter, perm, fin): (Vec<Dim>, Vec<i64>, Vec<Dim>) = if op == "DepthToSpace" {
                let cb = div(&c, &bb)?;
                let fin = vec![n.clone(), cb.clone(), h.mul(&bd).map_err(dim_err)?, w.mul(&bd).map_err(dim_err)?];
                if a_str(node, "mode", "DCR") == "CRD" {
                    (vec![n, cb, bd.clone(), bd, h, w], vec![0, 1, 4, 2, 5, 3], fin)
                } else {
                    (vec![n, bd.clone(), bd, cb, h, w], vec![0, 3, 4, 1, 5, 2], fin)
                }
            } else {
                let (hb, wb) = (div(&h, &bd)?, div(&w, &bd)?);
                let fin = vec![n.clone(), c.mul(&bb).map_err(dim_err)?, hb.clone(), wb.clone()];
                (vec![n, c, hb, bd.clone(), wb, bd], vec![0, 3, 5, 1, 2, 4], fin)
            };
            let a = imp.reshape(x, &inter)?;
            let p = imp.emit(K::Permute, &[a], &[("perm", ints(&perm))])?;
            one(imp.reshape(p, &fin)?)
        }
        "OneHot" => one_hot(imp, node),
        "Resize" | "Upsample" => super::spatial::resize(imp, node),
        "LpPool" => super::spatial::pool_nd(imp, node),
        "LRN" => super::spatial::lrn(imp, node),
        "MaxUnpool" => super::spatial::max_unpool(imp, node),
        "CenterCropPad" => super::spatial::center_crop_pad(imp, node),
        "Col2Im" => super::spatial::col2im(imp, node),
        "DFT" => super::signal::dft(imp, node),
        "STFT" => super::signal::stft(imp, node),
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => super::signal::window(imp, node),
        "MelWeightMatrix" => super::signal::mel_weight_matrix(imp, node),
        "GridSample" => super::grid::grid_sample(imp, node),
        "AffineGrid" => super::grid::affine_grid(imp, node),
        "RoiAlign" => super::grid::roi_align(imp, node),
        "DeformConv" => super::grid::deform_conv(imp, node),

        // --- Reductions ---
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => reduce(imp, node),
        "ArgMax" | "ArgMin" => {
            let x = imp.input(node, 0)?;
            let r = imp.rank_of(x);
            let axis = norm_axis(a_int(node, "axis", 0), r)?;
            let keep = a_int(node, "keepdims", 1) != 0;
            let kind = if op == "ArgMax" { K::Argmax } else { K::Argmin };
            let attrs = [("axis", int(axis as i64)), ("keepdim", AttrValue::Bool(keep))];
            if a_int(node, "select_last_index", 0) == 0 {
                return one(imp.emit(kind, &[x], &attrs)?);
            }
            let n = imp.shape_of(x)[axis]
                .as_const()
                .ok_or_else(|| NodeError::Unsupported("select_last_index on a symbolic axis".into()))?;
            let rev = imp.emit(K::Rev, &[x], &[("axes", ints(&[axis as i64]))])?;
            let i = imp.emit(kind, &[rev], &attrs)?;
            let last = imp.scalar(DType::I64, n as f64 - 1.0)?;
            one(imp.bin(K::Sub, last, i)?)
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = imp.input(node, 0)?;
            let r = imp.rank_of(x) as i64;
            if r < 3 {
                return invalid("needs an input of rank >= 3");
            }
            let axes: Vec<i64> = (2..r).collect();
            let kind = if op == "GlobalAveragePool" { K::Mean } else { K::Amax };
            one(imp.emit(kind, &[x], &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))])?)
        }

        // --- Linear algebra, convolution, pooling ---
        "MatMul" => {
            let a = imp.input(node, 0)?;
            let b = imp.input(node, 1)?;
            let (ra, rb) = (imp.rank_of(a), imp.rank_of(b));
            if ra == 0 || rb == 0 {
                return invalid("MatMul operands must have rank >= 1");
            }
            let a2 = if ra == 1 { imp.unsqueeze(a, &[0])? } else { a };
            let b2 = if rb == 1 { imp.unsqueeze(b, &[1])? } else { b };
            let mut y = imp.bin(K::Matmul, a2, b2)?;
            if rb == 1 {
                y = imp.squeeze(y, &[-1])?;
            }
            if ra == 1 {
                y = imp.squeeze(y, &[-2 + i64::from(rb == 1)])?;
            }
            one(y)
        }
        "Gemm" => {
            let a = imp.input(node, 0)?;
            let b = imp.input(node, 1)?;
            let (alpha, beta) = (a_float(node, "alpha", 1.0), a_float(node, "beta", 1.0));
            let ta = a_int(node, "transA", 0) != 0;
            let tb = a_int(node, "transB", 0) != 0;
            let mut y = imp.emit(
                K::Matmul,
                &[a, b],
                &[("transpose_a", AttrValue::Bool(ta)), ("transpose_b", AttrValue::Bool(tb))],
            )?;
            if alpha != 1.0 {
                y = imp.bin_scalar(K::Mul, y, alpha)?;
            }
            if let Some(c) = imp.opt_input(node, 2)? {
                if beta != 0.0 {
                    let c = if beta != 1.0 { imp.bin_scalar(K::Mul, c, beta)? } else { c };
                    y = imp.bin(K::Add, y, c)?;
                }
            }
            one(y)
        }
        "Conv" => conv(imp, node),
        "QuantizeLinear" => super::quant::quantize_linear(imp, node),
        "DequantizeLinear" => super::quant::dequantize_linear(imp, node),
        "DynamicQuantizeLinear" => super::quant::dynamic_quantize_linear(imp, node),
        "MatMulInteger" => super::quant::matmul_integer(imp, node),
        "ConvInteger" => super::quant::conv_integer(imp, node),
        "QLinearMatMul" => super::quant::qlinear_matmul(imp, node),
        "QLinearConv" => super::quant::qlinear_conv(imp, node),
        "BitShift" => super::quant::bit_shift(imp, node),
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => super::quant::bitwise(imp, node),
        "ConvTranspose" => conv_transpose(imp, node),
        "MaxPool" | "AveragePool" => pool(imp, node),

        // --- Normalisation ---
        "BatchNormalization" => {
            if a_int(node, "training_mode", 0) != 0 || node.output.iter().skip(1).any(|s| !s.is_empty()) {
                return super::index::batch_norm_training(imp, node);
            }
            let x = imp.input(node, 0)?;
            let scale = imp.input(node, 1)?;
            let b = imp.input(node, 2)?;
            let mean = imp.input(node, 3)?;
            let var = imp.input(node, 4)?;
            let eps = a_float(node, "epsilon", 1e-5);
            one(imp.emit(K::BatchNorm, &[x, mean, var, scale, b], &[("eps", AttrValue::Float(eps))])?)
        }
        "InstanceNormalization" => {
            let x = imp.input(node, 0)?;
            let scale = imp.input(node, 1)?;
            let b = imp.input(node, 2)?;
            let c = imp
                .shape_of(x)
                .get(1)
                .and_then(Dim::as_const)
                .ok_or_else(|| NodeError::Unsupported("InstanceNormalization needs a static channel dim".into()))?;
            let eps = a_float(node, "epsilon", 1e-5);
            one(imp.emit(K::GroupNorm, &[x, scale, b], &[("groups", int(c as i64)), ("eps", AttrValue::Float(eps))])?)
        }
        "GroupNormalization" => {
            let x = imp.input(node, 0)?;
            let mut scale = imp.input(node, 1)?;
            let mut b = imp.input(node, 2)?;
            let groups = a_int(node, "num_groups", 0);
            let eps = a_float(node, "epsilon", 1e-5);
            let c = imp.shape_of(x).get(1).cloned().ok_or_else(|| NodeError::Invalid("rank < 2".into()))?;
            if imp.shape_of(scale) != [c.clone()] {
                // Opset 18: scale and bias per group; repeat them per channel.
                let g = Dim::new(groups.max(1) as u64);
                let per = c.div_exact(&g).map_err(dim_err)?;
                for v in [&mut scale, &mut b] {
                    let r = imp.reshape(*v, &[g.clone(), Dim::new(1)])?;
                    let e = imp.emit(K::Expand, &[r], &[("shape", dims_attr(&[g.clone(), per.clone()]))])?;
                    *v = imp.reshape(e, std::slice::from_ref(&c))?;
                }
            }
            one(imp.emit(K::GroupNorm, &[x, scale, b], &[("groups", int(groups)), ("eps", AttrValue::Float(eps))])?)
        }
        "LayerNormalization" => layer_norm(imp, node),
        "Attention" => super::attention::attention(imp, node),
        "RotaryEmbedding" => super::attention::rotary_embedding(imp, node),
        "CausalConvWithState" => super::attention::causal_conv_with_state(imp, node),
        "LinearAttention" => super::attention::linear_attention(imp, node),
        "RMSNormalization" => {
            let x = imp.input(node, 0)?;
            let scale = imp.input(node, 1)?;
            let xs = imp.shape_of(x);
            let axis = norm_axis(a_int(node, "axis", -1), xs.len())?;
            let attrs = [("axis", int(axis as i64)), ("eps", AttrValue::Float(a_float(node, "epsilon", 1e-5)))];
            if imp.shape_of(scale) == xs[axis..] {
                one(imp.emit(K::RmsNorm, &[x, scale], &attrs)?)
            } else {
                let n = imp.emit(K::RmsNorm, &[x], &attrs)?;
                one(imp.bin(K::Mul, n, scale)?)
            }
        }
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let x = imp.input(node, 0)?;
            let t = imp.input(node, 1)?;
            let w = imp.opt_input(node, 2)?;
            let reduction = a_str(node, "reduction", "mean");
            let ignore = attr(node, "ignore_index").map(|a| a.i);
            let logp = if op == "SoftmaxCrossEntropyLoss" {
                Some(imp.emit(K::LogSoftmax, &[x], &[("axis", int(1))])?)
            } else {
                None
            };
            let loss = nll(imp, logp.unwrap_or(x), t, w, ignore, &reduction)?;
            let mut outs = vec![Some(Slot::Val(loss))];
            if let Some(lp) = logp {
                outs.push(Some(Slot::Val(lp)));
            }
            Ok(outs)
        }
        "LpNormalization" => {
            let x = imp.input(node, 0)?;
            let axis = a_int(node, "axis", -1);
            let p = a_int(node, "p", 2);
            let keep = [("axes", ints(&[axis])), ("keepdim", AttrValue::Bool(true))];
            let norm = match p {
                1 => {
                    let a = imp.un(K::Abs, x)?;
                    imp.emit(K::Sum, &[a], &keep)?
                }
                2 => {
                    let sq = imp.bin(K::Mul, x, x)?;
                    let s = imp.emit(K::Sum, &[sq], &keep)?;
                    imp.un(K::Sqrt, s)?
                }
                _ => return invalid(format!("p = {p} (1 or 2)")),
            };
            // A zero norm gives 0 (ONNX's reference), not NaN.
            let zero = imp.bin_scalar(K::Eq, norm, 0.0)?;
            let q = imp.bin(K::Div, x, norm)?;
            let z = imp.scalar(imp.dtype_of_v(x), 0.0)?;
            one(imp.emit(K::Where, &[zero, z, q], &[])?)
        }
        "MeanVarianceNormalization" => {
            let x = imp.input(node, 0)?;
            let axes = a_ints(node, "axes").unwrap_or_else(|| vec![0, 2, 3]);
            let keep = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))];
            let m = imp.emit(K::Mean, &[x], &keep)?;
            let d = imp.bin(K::Sub, x, m)?;
            let sq = imp.bin(K::Mul, d, d)?;
            let v = imp.emit(K::Mean, &[sq], &keep)?;
            let s = imp.un(K::Sqrt, v)?;
            let s = imp.bin_scalar(K::Add, s, 1e-9)?;
            one(imp.bin(K::Div, d, s)?)
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => softmax(imp, node),
        "Einsum" => einsum(imp, node),
        "If" => if_node(imp, node, depth),
        "RNN" => super::recur::recurrent(imp, node, super::recur::Cell::Rnn),
        "GRU" => super::recur::recurrent(imp, node, super::recur::Cell::Gru),
        "LSTM" => super::recur::recurrent(imp, node, super::recur::Cell::Lstm),
        "Scan" => super::recur::scan(imp, node, depth),
        "Loop" => super::recur::loop_node(imp, node, depth),
        "FlexAttention" if node.domain == "ai.onnx.preview" => super::recur::flex_attention(imp, node, depth),
        "OptionalHasElement" | "OptionalGetElement" => super::recur::optional(imp, node),
        "CumSum" | "CumProd" | "TopK" | "ScatterElements" | "Scatter" | "ScatterND" | "GatherND"
        | "ReverseSequence" | "Compress" | "Det" | "Swish" | "Asin" | "Acos" | "Atan" | "Asinh" | "Acosh" | "Atanh" => {
            super::index::convert(imp, node)
        }
        _ => unsupported(format!("op type {op}")),
    }
}

/// A shape list result: a constant when static, a symbolic list otherwise.
fn split(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let axis = norm_axis(a_int(node, "axis", 0), dims.len())?;
    let n_out = node.output.len();
    let sizes = match imp.ints_input(node, 1, "split")?.or_else(|| a_ints(node, "split")) {
        Some(s) => s,
        None => {
            let d =
                dims[axis].as_const().ok_or_else(|| NodeError::Unsupported("Split of a symbolic dim".into()))? as i64;
            if let Some(k) = attr(node, "num_outputs").map(|a| a.i) {
                if k <= 0 {
                    return invalid("num_outputs must be positive");
                }
                let c = (d + k - 1) / k;
                (0..k).map(|i| (d - i * c).clamp(0, c)).collect()
            } else {
                let k = n_out as i64;
                if k == 0 || d % k != 0 {
                    return invalid(format!("cannot split {d} into {k} equal parts"));
                }
                vec![d / k; n_out]
            }
        }
    };
    if sizes.len() != n_out {
        return invalid(format!("{} split sizes for {n_out} outputs", sizes.len()));
    }
    let mut outs = Vec::with_capacity(n_out);
    for i in 0..n_out {
        let v = imp.emit(
            OpKind::Split,
            &[x],
            &[("axis", int(axis as i64)), ("sizes", ints(&sizes)), ("index", int(i as i64))],
        )?;
        outs.push(Some(Slot::Val(v)));
    }
    Ok(outs)
}

/// A `Slice` bound: a number, or a size (then counted from the front, assumed in range).
fn size_attr(e: &SymInt) -> NResult<AttrValue> {
    match e {
        SymInt::I(n) => Ok(int(*n)),
        SymInt::D(d) => SizeExpr::from_dim(d)
            .map(AttrValue::Size)
            .map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}"))),
    }
}

fn slice(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let r = dims.len();
    let list = |v: Vec<i64>| v.into_iter().map(SymInt::I).collect::<Vec<_>>();
    let bounds = |imp: &mut Importer, i: usize, what: &str| -> NResult<Vec<SymInt>> {
        match imp.sym_input(node, i)? {
            Some(s) => Ok(s.elems),
            None if imp.slot(node, i)?.is_none() => invalid(format!("{what} are required")),
            None => Err(NodeError::NeedsValue { input: i, what: what.to_string() }),
        }
    };
    let (starts, ends, axes, steps) = if imp.opset < 10 {
        (
            list(a_ints(node, "starts").unwrap_or_default()),
            list(a_ints(node, "ends").unwrap_or_default()),
            a_ints(node, "axes"),
            None,
        )
    } else {
        (
            bounds(imp, 1, "starts")?,
            bounds(imp, 2, "ends")?,
            imp.ints_input(node, 3, "axes")?,
            imp.ints_input(node, 4, "steps")?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    let mut y = x;
    let mut seen = Vec::new();
    for i in 0..starts.len() {
        let axis = norm_axis(axes[i], r)?;
        if seen.contains(&axis) {
            return invalid(format!("axis {axis} is sliced twice"));
        }
        seen.push(axis);
        let step = steps[i];
        if step == 0 {
            return invalid("step 0");
        }
        match (dims[axis].as_const(), &starts[i], &ends[i]) {
            (Some(n), SymInt::I(start), SymInt::I(end)) => {
                let (start, end) = (*start, *end);
                let n = n as i128;
                let (mut s, mut e) = (start as i128, end as i128);
                if s < 0 {
                    s += n;
                }
                if e < 0 {
                    e += n;
                }
                if step > 0 {
                    s = s.clamp(0, n);
                    e = e.clamp(0, n);
                    if s == 0 && e == n && step == 1 {
                        continue;
                    }
                    y = imp.emit(
                        OpKind::Slice,
                        &[y],
                        &[
                            ("axis", int(axis as i64)),
                            ("start", int(s as i64)),
                            ("end", int(e.max(s) as i64)),
                            ("step", int(step)),
                        ],
                    )?;
                } else {
                    // (An empty axis has no element to start from: the result is empty.)
                    s = s.clamp(0, (n - 1).max(0));
                    e = e.clamp(-1, n - 1);
                    let st = -(step as i128);
                    let count = if n > 0 && s > e { (s - e + st - 1) / st } else { 0 };
                    if count == 0 {
                        y = imp.emit(
                            OpKind::Slice,
                            &[y],
                            &[("axis", int(axis as i64)), ("start", int(0)), ("end", int(0))],
                        )?;
                        continue;
                    }
                    let rev = imp.emit(OpKind::Rev, &[y], &[("axes", ints(&[axis as i64]))])?;
                    let s2 = n - 1 - s;
                    let e2 = s2 + (count - 1) * st + 1;
                    y = imp.emit(
                        OpKind::Slice,
                        &[rev],
                        &[
                            ("axis", int(axis as i64)),
                            ("start", int(s2 as i64)),
                            ("end", int(e2 as i64)),
                            ("step", int(st as i64)),
                        ],
                    )?;
                }
            }
            (_, start, end) => {
                // A symbolic dim or bound: ladder's slice counts a size bound from the front
                // and assumes the slice in range (checked when the plan runs), where ONNX
                // would clamp.
                if step < 0 {
                    return unsupported(format!("Slice with step {step} on the symbolic dim {}", dims[axis]));
                }
                let end = match end {
                    SymInt::I(e) if *e >= i64::from(i32::MAX) => SymInt::I(i64::MAX),
                    e => e.clone(),
                };
                if matches!((start, &end), (SymInt::I(0), SymInt::I(i64::MAX))) && step == 1 {
                    continue;
                }
                if let SymInt::D(d) = &end {
                    if *d == dims[axis] && matches!(start, SymInt::I(0)) && step == 1 {
                        continue;
                    }
                }
                y = imp.emit(
                    OpKind::Slice,
                    &[y],
                    &[
                        ("axis", int(axis as i64)),
                        ("start", size_attr(start)?),
                        ("end", size_attr(&end)?),
                        ("step", int(step)),
                    ],
                )?;
            }
        }
    }
    one(y)
}

fn gather(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    if r == 0 {
        return invalid("Gather needs data of rank >= 1");
    }
    let axis = norm_axis(a_int(node, "axis", 0), r)?;
    if !imp.dtype_of_v(idx).is_int() {
        return invalid("indices must be int32 or int64");
    }
    if let (Some(t), Some(n)) = (imp.const_of(idx), xs[axis].as_const()) {
        let n = n as i64;
        for i in t.to_f64_vec() {
            let i = i as i64;
            if i < -n || i >= n {
                return Err(NodeError::IndexOutOfRange { index: i, axis, size: n as u64 });
            }
        }
        if t.shape().is_empty() {
            let i = t.to_f64_vec()[0] as i64;
            return one(imp.emit(OpKind::Select, &[x], &[("axis", int(axis as i64)), ("index", int(i))])?);
        }
    }
    let is = imp.shape_of(idx);
    let k = imp.numel_of(&is)?;
    let mut rdims = vec![Dim::new(1); r];
    rdims[axis] = k.clone();
    let idx_r = imp.reshape(idx, &rdims)?;
    let mut target = xs.clone();
    target[axis] = k;
    let idx_b =
        if target == rdims { idx_r } else { imp.emit(OpKind::Expand, &[idx_r], &[("shape", dims_attr(&target))])? };
    let g = imp.emit(OpKind::Gather, &[x, idx_b], &[("axis", int(axis as i64))])?;
    let mut out: Vec<Dim> = xs[..axis].to_vec();
    out.extend(is);
    out.extend_from_slice(&xs[axis + 1..]);
    one(imp.reshape(g, &out)?)
}

fn pad(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = imp.rank_of(x);
    let mode = a_str(node, "mode", "constant");
    let mut run_time_value = None;
    let (pads, value, axes) = if imp.opset < 11 {
        (a_ints(node, "pads").unwrap_or_default(), a_float(node, "value", 0.0), None)
    } else {
        let pads = imp.ints_input(node, 1, "pads")?.ok_or_else(|| NodeError::Invalid("pads are required".into()))?;
        let value = match imp.float_input(node, 2)? {
            None => 0.0,
            Some(Ok(v)) => v,
            Some(Err(v)) => {
                run_time_value = Some(v);
                0.0
            }
        };
        (pads, value, imp.ints_input(node, 3, "axes")?)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| norm_axis(a, r)).collect::<NResult<_>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut low = vec![0i64; r];
    let mut high = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        low[a] = pads[i];
        high[a] = pads[i + axes.len()];
    }
    if let (Some(v), "constant") = (run_time_value, mode.as_str()) {
        return super::index::pad_runtime_value(imp, x, &low, &high, v);
    }
    if mode == "constant" {
        return one(imp.emit(
            OpKind::Pad,
            &[x],
            &[("low", ints(&low)), ("high", ints(&high)), ("value", AttrValue::Float(value))],
        )?);
    }
    // edge / reflect / wrap: per axis, assemble slices. On a symbolic axis the slices count
    // from the end (`n - 1 - p : n - 1` is `-1 - p : -1`) and assume the axis long enough,
    // which the plan checks when it runs.
    let mut y = x;
    for a in 0..r {
        let (l, h) = (low[a], high[a]);
        if l == 0 && h == 0 {
            continue;
        }
        let n = imp.shape_of(y)[a].as_const().map(|n| n as i64);
        if l < 0 || h < 0 || n == Some(0) {
            return unsupported(format!("{mode} padding with negative pads or an empty axis"));
        }
        let sl = |imp: &mut Importer, v: Value, s: i64, e: i64| -> NResult<Value> {
            imp.emit(OpKind::Slice, &[v], &[("axis", int(a as i64)), ("start", int(s)), ("end", int(e))])
        };
        // Position `k` counted from the end: `n - k`, or `-k` on a symbolic axis (`i64::MAX`
        // for the end itself).
        let back = |k: i64| match n {
            Some(n) => n - k,
            None if k == 0 => i64::MAX,
            None => -k,
        };
        let rev = |imp: &mut Importer, v: Value| imp.emit(OpKind::Rev, &[v], &[("axes", ints(&[a as i64]))]);
        let mut parts = Vec::new();
        let piece = |imp: &mut Importer, y: Value, p: i64, left: bool| -> NResult<Option<Value>> {
            if p == 0 {
                return Ok(None);
            }
            Ok(Some(match mode.as_str() {
                "edge" => {
                    let e = if left { sl(imp, y, 0, 1)? } else { sl(imp, y, back(1), back(0))? };
                    let mut shape = imp.shape_of(e);
                    shape[a] = Dim::new(p as u64);
                    imp.emit(OpKind::Expand, &[e], &[("shape", dims_attr(&shape))])?
                }
                "reflect" => {
                    if n.is_some_and(|n| p > n - 1) {
                        return Err(NodeError::Invalid(format!(
                            "reflect padding of {p} on an axis of {}",
                            n.unwrap_or(0)
                        )));
                    }
                    let s = if left { sl(imp, y, 1, p + 1)? } else { sl(imp, y, back(1 + p), back(1))? };
                    rev(imp, s)?
                }
                "wrap" => {
                    if n.is_some_and(|n| p > n) {
                        return Err(NodeError::Invalid(format!(
                            "wrap padding of {p} on an axis of {}",
                            n.unwrap_or(0)
                        )));
                    }
                    if left {
                        sl(imp, y, back(p), back(0))?
                    } else {
                        sl(imp, y, 0, p)?
                    }
                }
                m => return Err(NodeError::Invalid(format!("unknown pad mode `{m}`"))),
            }))
        };
        if let Some(p) = piece(imp, y, l, true)? {
            parts.push(p);
        }
        parts.push(y);
        if let Some(p) = piece(imp, y, h, false)? {
            parts.push(p);
        }
        y = imp.emit(OpKind::Cat, &parts, &[("axis", int(a as i64))])?;
    }
    one(y)
}

fn reduce(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    use OpKind as K;
    let op = node.op_type.as_str();
    let x = imp.input(node, 0)?;
    let dt = imp.dtype_of_v(x);
    let keep = a_int(node, "keepdims", 1) != 0;
    let axes = match a_ints(node, "axes") {
        Some(a) => a,
        None => imp.ints_input(node, 1, "axes")?.unwrap_or_default(),
    };
    if axes.is_empty() && a_int(node, "noop_with_empty_axes", 0) != 0 {
        return one(x);
    }
    let attrs = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(keep))];
    let y = match op {
        "ReduceSum" => imp.emit(K::Sum, &[x], &attrs)?,
        "ReduceMean" => imp.emit(K::Mean, &[x], &attrs)?,
        "ReduceMax" | "ReduceMin" => {
            // The prims have identities (-inf / +inf), as ONNX gives for an empty reduction.
            let r = imp.rank_of(x);
            let mut norm: Vec<usize> = if axes.is_empty() {
                (0..r).collect()
            } else {
                axes.iter().map(|&a| norm_axis(a, r)).collect::<NResult<_>>()?
            };
            norm.sort_unstable();
            norm.dedup();
            let kind = if op == "ReduceMax" { K::ReduceMax } else { K::ReduceMin };
            let axes_i: Vec<i64> = norm.iter().map(|&a| a as i64).collect();
            let y = imp.emit(kind, &[x], &[("axes", ints(&axes_i))])?;
            if keep {
                let mut dims = imp.shape_of(x);
                for &a in &norm {
                    dims[a] = Dim::new(1);
                }
                imp.reshape(y, &dims)?
            } else {
                y
            }
        }
        "ReduceProd" => imp.emit(K::Prod, &[x], &attrs)?,
        "ReduceL1" => {
            let a = imp.un(K::Abs, x)?;
            imp.emit(K::Sum, &[a], &attrs)?
        }
        "ReduceL2" => {
            let sq = imp.bin(K::Mul, x, x)?;
            let s = imp.emit(K::Sum, &[sq], &attrs)?;
            let s = imp.convert_to(s, dt)?;
            if dt.is_float() {
                imp.un(K::Sqrt, s)?
            } else {
                let f = imp.convert_to(s, DType::F64)?;
                let r = imp.un(K::Sqrt, f)?;
                imp.convert_to(r, dt)?
            }
        }
        "ReduceSumSquare" => {
            let sq = imp.bin(K::Mul, x, x)?;
            imp.emit(K::Sum, &[sq], &attrs)?
        }
        "ReduceLogSum" => {
            let s = imp.emit(K::Sum, &[x], &attrs)?;
            imp.un(K::Log, s)?
        }
        _ => imp.emit(K::Logsumexp, &[x], &attrs)?,
    };
    one(imp.convert_to(y, dt)?)
}

/// Explicit (begin.., end..) pads for `auto_pad`, from static input dims.
pub(super) fn auto_pads(
    mode: &str,
    spatial: &[Dim],
    kernel: &[i64],
    strides: &[i64],
    dil: &[i64],
    explicit: Option<Vec<i64>>,
) -> NResult<Vec<i64>> {
    let n = kernel.len();
    match mode {
        "NOTSET" | "" => {
            let p = explicit.unwrap_or_else(|| vec![0; 2 * n]);
            if p.len() != 2 * n {
                return invalid(format!("{} pads for {n} spatial dims", p.len()));
            }
            Ok(p)
        }
        "VALID" => Ok(vec![0; 2 * n]),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut begin = vec![0; n];
            let mut end = vec![0; n];
            for i in 0..n {
                let d = spatial[i].as_const().ok_or_else(|| {
                    NodeError::Unsupported(format!("auto_pad {mode} on the symbolic dim {}", spatial[i]))
                })? as i128;
                let (s, k, dl) = (strides[i] as i128, kernel[i] as i128, dil[i] as i128);
                if s < 1 || k < 1 || dl < 1 {
                    return invalid(format!(
                        "auto_pad {mode} with stride {s}, kernel {k}, dilation {dl} (each must be >= 1)"
                    ));
                }
                // In i128: every term is below 2^64 squared, so nothing overflows.
                let out = (d + s - 1) / s;
                let total = ((out - 1) * s + (k - 1) * dl + 1 - d).max(0);
                let total = i64::try_from(total)
                    .map_err(|_| NodeError::Invalid(format!("auto_pad {mode}: padding overflows")))?;
                let small = total / 2;
                let (b, e) = if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                begin[i] = b;
                end[i] = e;
            }
            begin.extend(end);
            Ok(begin)
        }
        m => invalid(format!("unknown auto_pad `{m}`")),
    }
}

fn conv(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let y = conv_values(imp, node, x, w)?;
    one(add_channel_bias(imp, node, y, 2)?)
}

/// `conv` of `x` and `w` with the node's geometry attributes (no bias).
pub(super) fn conv_values(imp: &mut Importer, node: &NodeProto, x: Value, w: Value) -> NResult<Value> {
    let xs = imp.shape_of(x);
    let ws = imp.shape_of(w);
    if xs.len() < 3 || ws.len() != xs.len() {
        return invalid("Conv needs x [N, C, ...] and w [O, C/group, ...] of the same rank");
    }
    let n = xs.len() - 2;
    let kernel: Vec<i64> = match a_ints(node, "kernel_shape") {
        Some(k) => k,
        None => ws[2..]
            .iter()
            .map(|d| d.as_const().map(|v| v as i64).ok_or_else(|| NodeError::Unsupported("symbolic kernel".into())))
            .collect::<NResult<_>>()?,
    };
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations must have one entry per spatial dim");
    }
    let pads = auto_pads(&a_str(node, "auto_pad", "NOTSET"), &xs[2..], &kernel, &strides, &dil, a_ints(node, "pads"))?;
    let group = a_int(node, "group", 1);
    imp.emit(
        OpKind::Conv,
        &[x, w],
        &[("stride", ints(&strides)), ("padding", ints(&pads)), ("dilation", ints(&dil)), ("groups", int(group))],
    )
}

/// Adds input `i` (a `[C]` bias) along dim 1 of `y`, when present.
fn add_channel_bias(imp: &mut Importer, node: &NodeProto, y: Value, i: usize) -> NResult<Value> {
    let Some(b) = imp.opt_input(node, i)? else { return Ok(y) };
    let r = imp.rank_of(y);
    let mut dims = imp.shape_of(b);
    if dims.len() != 1 {
        return invalid("the bias must be 1-D");
    }
    dims.extend(std::iter::repeat_n(Dim::new(1), r.saturating_sub(2)));
    let b = imp.reshape(b, &dims)?;
    imp.bin(OpKind::Add, y, b)
}

fn conv_transpose(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let xs = imp.shape_of(x);
    let ws = imp.shape_of(w);
    if xs.len() < 3 || ws.len() != xs.len() {
        return invalid("ConvTranspose needs x [N, C, ...] and w [C, O/group, ...] of the same rank");
    }
    let n = xs.len() - 2;
    let wst: Vec<i64> = ws
        .iter()
        .map(|d| d.as_const().map(|v| v as i64).ok_or_else(|| NodeError::Unsupported("a symbolic weight shape".into())))
        .collect::<NResult<_>>()?;
    let kernel = a_ints(node, "kernel_shape").unwrap_or_else(|| wst[2..].to_vec());
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    let out_pad = a_ints(node, "output_padding").unwrap_or_else(|| vec![0; n]);
    let group = a_int(node, "group", 1);
    if kernel.len() != n || strides.len() != n || dil.len() != n || out_pad.len() != n || group <= 0 {
        return invalid("kernel_shape, strides, dilations and output_padding need one entry per spatial dim");
    }
    let auto = a_str(node, "auto_pad", "NOTSET");
    let mut pads = match a_ints(node, "pads") {
        Some(p) if p.len() == 2 * n => p,
        Some(_) => return invalid("pads need two entries per spatial dim"),
        None => vec![0; 2 * n],
    };
    let output_shape = a_ints(node, "output_shape");
    if output_shape.is_some() || auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        for i in 0..n {
            let d = xs[2 + i]
                .as_const()
                .ok_or_else(|| NodeError::Unsupported("output_shape/auto_pad on a symbolic dim".into()))?
                as i64;
            let full = strides[i] * (d - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1;
            let want = match &output_shape {
                Some(o) => {
                    *o.get(o.len().wrapping_sub(n) + i).ok_or_else(|| NodeError::Invalid("output_shape".into()))?
                }
                None => d * strides[i],
            };
            let total = full - want;
            let (b, e) = if auto == "SAME_UPPER" || (output_shape.is_some() && auto != "SAME_LOWER") {
                (total / 2, total - total / 2)
            } else {
                (total - total / 2, total / 2)
            };
            pads[i] = b;
            pads[i + n] = e;
        }
    } else if auto == "VALID" {
        pads = vec![0; 2 * n];
    }
    // Input dilated by the stride, padded by (k-1)*d - pad on each side (+ output_padding).
    let mut low = vec![0i64; n + 2];
    let mut high = vec![0i64; n + 2];
    let mut interior = vec![0i64; n + 2];
    for i in 0..n {
        let k = (kernel[i] - 1) * dil[i];
        low[2 + i] = k - pads[i];
        high[2 + i] = k - pads[i + n] + out_pad[i];
        interior[2 + i] = strides[i] - 1;
    }
    let xp =
        imp.emit(OpKind::Pad, &[x], &[("low", ints(&low)), ("high", ints(&high)), ("interior", ints(&interior))])?;
    // Kernel [C, O/g, k...] -> [O, C/g, k...], spatially flipped.
    let (c, og) = (wst[0], wst[1]);
    if c % group != 0 {
        return invalid("input channels are not divisible by group");
    }
    let cg = c / group;
    let spatial: Vec<Dim> = ws[2..].to_vec();
    let mut d1 = vec![Dim::new(group as u64), Dim::new(cg as u64), Dim::new(og as u64)];
    d1.extend(spatial.iter().cloned());
    let w1 = imp.reshape(w, &d1)?;
    let mut perm = vec![0i64, 2, 1];
    perm.extend((3..3 + n as i64).collect::<Vec<_>>());
    let w2 = imp.emit(OpKind::Permute, &[w1], &[("perm", ints(&perm))])?;
    let mut d3 = vec![Dim::new((group * og) as u64), Dim::new(cg as u64)];
    d3.extend(spatial);
    let w3 = imp.reshape(w2, &d3)?;
    let flip: Vec<i64> = (2..2 + n as i64).collect();
    let wf = imp.emit(OpKind::Rev, &[w3], &[("axes", ints(&flip))])?;
    let y = imp.emit(
        OpKind::Conv,
        &[xp, wf],
        &[("stride", ints(&vec![1; n])), ("dilation", ints(&dil)), ("groups", int(group))],
    )?;
    one(add_channel_bias(imp, node, y, 2)?)
}

fn pool(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let is_max = node.op_type == "MaxPool";
    if is_max && node.output.get(1).is_some_and(|s| !s.is_empty()) {
        return super::spatial::pool_nd(imp, node);
    }
    let x = imp.input(node, 0)?;
    // Integer max pooling runs in f64, exact for integers of up to 32 bits, and converts back.
    let in_dtype = imp.dtype_of_v(x);
    let x = match in_dtype.int_bits() {
        Some(b) if is_max && b <= 32 => imp.convert_to(x, DType::F64)?,
        Some(_) => return unsupported(format!("{} of {in_dtype}", node.op_type)),
        None => x,
    };
    let xs = imp.shape_of(x);
    let n = xs.len().saturating_sub(2);
    if !(1..=2).contains(&n) {
        return super::spatial::pool_nd(imp, node);
    }
    let kernel = a_ints(node, "kernel_shape").ok_or_else(|| NodeError::Invalid("kernel_shape is required".into()))?;
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations need one entry per spatial dim");
    }
    let pads = auto_pads(&a_str(node, "auto_pad", "NOTSET"), &xs[2..], &kernel, &strides, &dil, a_ints(node, "pads"))?;
    let ceil = a_int(node, "ceil_mode", 0) != 0;
    let include_pad = a_int(node, "count_include_pad", 0) != 0;
    if !is_max && dil.iter().any(|&d| d != 1) {
        return super::spatial::pool_nd(imp, node);
    }
    // To 2-d.
    let (mut k2, mut s2, mut d2, mut b2, mut e2) =
        (kernel.clone(), strides.clone(), dil.clone(), pads[..n].to_vec(), pads[n..].to_vec());
    let mut y = x;
    if n == 1 {
        y = imp.unsqueeze(y, &[2])?;
        k2.insert(0, 1);
        s2.insert(0, 1);
        d2.insert(0, 1);
        b2.insert(0, 0);
        e2.insert(0, 0);
    }
    let symmetric = b2 == e2 && b2.iter().zip(&k2).all(|(&p, &k)| p >= 0 && 2 * p <= k);
    let padding = if symmetric {
        b2.clone()
    } else {
        if !is_max && !include_pad {
            return super::spatial::pool_nd(imp, node);
        }
        let mut low = vec![0, 0];
        low.extend(&b2);
        let mut high = vec![0, 0];
        high.extend(&e2);
        let value = if is_max { f64::NEG_INFINITY } else { 0.0 };
        y = imp.emit(
            OpKind::Pad,
            &[y],
            &[("low", ints(&low)), ("high", ints(&high)), ("value", AttrValue::Float(value))],
        )?;
        vec![0, 0]
    };
    y = if is_max {
        imp.emit(
            OpKind::MaxPool2d,
            &[y],
            &[
                ("kernel", ints(&k2)),
                ("stride", ints(&s2)),
                ("padding", ints(&padding)),
                ("dilation", ints(&d2)),
                ("ceil_mode", AttrValue::Bool(ceil)),
            ],
        )?
    } else {
        imp.emit(
            OpKind::AvgPool2d,
            &[y],
            &[
                ("kernel", ints(&k2)),
                ("stride", ints(&s2)),
                ("padding", ints(&padding)),
                ("ceil_mode", AttrValue::Bool(ceil)),
                ("count_include_pad", AttrValue::Bool(include_pad)),
            ],
        )?
    };
    if n == 1 {
        y = imp.squeeze(y, &[2])?;
    }
    one(imp.convert_to(y, in_dtype)?)
}

fn layer_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    use OpKind as K;
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let bias = imp.opt_input(node, 2)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    let axis = norm_axis(a_int(node, "axis", -1), r)?;
    let eps = a_float(node, "epsilon", 1e-5);
    let span = &xs[axis..];
    let fits = |imp: &Importer, v: Value| imp.shape_of(v) == span;
    let attrs = [("axis", int(axis as i64)), ("eps", AttrValue::Float(eps))];
    let y = if fits(imp, scale) && bias.is_none_or(|b| fits(imp, b)) {
        match bias {
            Some(b) => imp.emit(K::LayerNorm, &[x, scale, b], &attrs)?,
            None => imp.emit(K::LayerNorm, &[x, scale], &attrs)?,
        }
    } else {
        let n = imp.emit(K::LayerNorm, &[x], &attrs)?;
        let m = imp.bin(K::Mul, n, scale)?;
        match bias {
            Some(b) => imp.bin(K::Add, m, b)?,
            None => m,
        }
    };
    let mut outs = vec![Some(Slot::Val(y))];
    let want = |i: usize| node.output.get(i).is_some_and(|s| !s.is_empty());
    if want(1) || want(2) {
        let axes: Vec<i64> = (axis as i64..r as i64).collect();
        let keep = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))];
        let mean = imp.emit(K::Mean, &[x], &keep)?;
        outs.push(Some(Slot::Val(mean)));
        if want(2) {
            let var = imp.emit(
                K::Var,
                &[x],
                &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true)), ("correction", int(0))],
            )?;
            let ve = imp.bin_scalar(K::Add, var, eps)?;
            outs.push(Some(Slot::Val(imp.un(K::Rsqrt, ve)?)));
        }
    }
    Ok(outs)
}

fn softmax(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    use OpKind as K;
    let x = imp.input(node, 0)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    let legacy = imp.opset < 13;
    let axis = norm_axis(a_int(node, "axis", if legacy { 1 } else { -1 }), r)?;
    let (v, ax) = if legacy && axis + 1 != r {
        let a = imp.numel_of(&xs[..axis])?;
        let b = imp.numel_of(&xs[axis..])?;
        (imp.reshape(x, &[a, b])?, 1)
    } else {
        (x, axis)
    };
    let y = match node.op_type.as_str() {
        "Softmax" => imp.emit(K::Softmax, &[v], &[("axis", int(ax as i64))])?,
        "LogSoftmax" => imp.emit(K::LogSoftmax, &[v], &[("axis", int(ax as i64))])?,
        _ => {
            let i = imp.emit(K::Argmax, &[v], &[("axis", int(ax as i64)), ("keepdim", AttrValue::Bool(true))])?;
            let shape = imp.shape_of(v);
            let iota = imp.emit(
                K::Iota,
                &[],
                &[("shape", dims_attr(&shape)), ("axis", int(ax as i64)), ("dtype", AttrValue::DType(DType::I64))],
            )?;
            let eq = imp.bin(K::Eq, iota, i)?;
            imp.convert_to(eq, imp.dtype_of_v(x))?
        }
    };
    one(imp.reshape(y, &xs)?)
}

fn one_hot(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    use OpKind as K;
    let idx = imp.input(node, 0)?;
    let depth = match imp.float_input(node, 1)? {
        Some(Ok(d)) if d >= 0.0 && d <= (1u64 << 32) as f64 => d as u64,
        Some(Err(_)) => return Err(NodeError::NeedsValue { input: 1, what: "the depth".into() }),
        _ => return unsupported("OneHot needs a non-negative depth below 2^32"),
    };
    let values = imp.input(node, 2)?;
    if imp.ty(values).shape.numel().ok().and_then(|n| n.as_const()) != Some(2) {
        return invalid("values must hold [off, on]");
    }
    let r = imp.rank_of(idx);
    let axis = norm_axis(a_int(node, "axis", -1), r + 1)?;
    let i64v = imp.convert_to(idx, DType::I64)?;
    let neg = imp.bin_scalar(K::Lt, i64v, 0.0)?;
    let wrapped = imp.bin_scalar(K::Add, i64v, depth as f64)?;
    let norm = imp.emit(K::Where, &[neg, wrapped, i64v], &[])?;
    let u = imp.unsqueeze(norm, &[axis as i64])?;
    let mut shape = vec![Dim::new(1); r + 1];
    shape[axis] = Dim::new(depth);
    let iota = imp.emit(
        K::Iota,
        &[],
        &[("shape", dims_attr(&shape)), ("axis", int(axis as i64)), ("dtype", AttrValue::DType(DType::I64))],
    )?;
    let eq = imp.bin(K::Eq, u, iota)?;
    // off and on as scalars (read at run time when `values` is not a constant).
    let flat = imp.reshape(values, &[Dim::new(2)])?;
    let pick = |imp: &mut Importer, i: i64| -> NResult<Value> {
        let s = imp.emit(K::Slice, &[flat], &[("axis", int(0)), ("start", int(i)), ("end", int(i + 1))])?;
        imp.reshape(s, &[])
    };
    let (off, on) = (pick(imp, 0)?, pick(imp, 1)?);
    one(imp.emit(K::Where, &[eq, on, off], &[])?)
}

fn einsum(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    use OpKind as K;
    let eq: String = a_str(node, "equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let raw: Vec<&str> = lhs.split(',').collect();
    let n_in = node.input.len();
    if raw.len() != n_in {
        return invalid(format!("equation `{eq}` has {} operands for {n_in} inputs", raw.len()));
    }
    let mut operands = Vec::with_capacity(n_in);
    for i in 0..n_in {
        operands.push(imp.input(node, i)?);
    }
    // An ellipsis stands for fresh labels (letters the equation does not use), right-aligned
    // across operands.
    let unused: Vec<char> = ('A'..='Z').chain('a'..='z').filter(|c| !eq.contains(*c)).collect();
    let mut ell_rank = 0usize;
    for (t, &v) in raw.iter().zip(&operands) {
        if t.contains("...") {
            let letters = t.replace("...", "").chars().count();
            let e = imp.rank_of(v).checked_sub(letters).ok_or_else(|| {
                NodeError::Invalid(format!("operand `{t}` has more labels than its rank {}", imp.rank_of(v)))
            })?;
            ell_rank = ell_rank.max(e);
        }
    }
    if ell_rank > unused.len() {
        return unsupported("Einsum with an ellipsis of too many dims");
    }
    let ell: Vec<char> = unused[..ell_rank].to_vec();
    let expand_ell = |t: &str, e: usize| -> Vec<char> {
        match t.split_once("...") {
            Some((a, b)) => a.chars().chain(ell[ell_rank - e..].iter().copied()).chain(b.chars()).collect(),
            None => t.chars().collect(),
        }
    };
    let mut terms: Vec<Vec<char>> = Vec::with_capacity(n_in);
    for (t, &v) in raw.iter().zip(&operands) {
        let e = imp.rank_of(v).saturating_sub(t.replace("...", "").chars().count());
        if t.matches("...").count() > 1 {
            return invalid(format!("operand `{t}` has more than one ellipsis"));
        }
        terms.push(if t.contains("...") { expand_ell(t, e) } else { t.chars().collect() });
    }
    let mut letters: Vec<char> = Vec::new();
    for t in &terms {
        for &c in t {
            if !c.is_ascii_alphabetic() {
                return invalid(format!("bad label `{c}` in `{eq}`"));
            }
            if !letters.contains(&c) {
                letters.push(c);
            }
        }
    }
    let out: Vec<char> = match rhs {
        Some(r) if r.contains("...") => expand_ell(&r, ell_rank),
        Some(r) => r.chars().collect(),
        None => {
            let mut once: Vec<char> = letters
                .iter()
                .copied()
                .filter(|c| !ell.contains(c) && terms.iter().flatten().filter(|x| *x == c).count() == 1)
                .collect();
            once.sort_unstable();
            ell.iter().copied().chain(once).collect()
        }
    };
    if out.iter().any(|c| !letters.contains(c)) {
        return invalid(format!("output label not in the inputs of `{eq}`"));
    }
    // A label repeated in one operand takes the diagonal: the two axes moved last, merged,
    // and sliced with step n+1.
    for (t, v) in terms.iter_mut().zip(operands.iter_mut()) {
        if imp.rank_of(*v) != t.len() {
            return invalid(format!(
                "operand has rank {} but `{}` labels",
                imp.rank_of(*v),
                t.iter().collect::<String>()
            ));
        }
        while let Some((p, q)) =
            (0..t.len()).find_map(|p| t[p + 1..].iter().position(|c| *c == t[p]).map(|j| (p, p + 1 + j)))
        {
            let dims = imp.shape_of(*v);
            let n = dims[p]
                .as_const()
                .ok_or_else(|| NodeError::Unsupported("Einsum diagonal over a symbolic dim".into()))?;
            if dims[q].as_const() != Some(n) {
                return invalid(format!("label `{}` has sizes {} and {}", t[p], dims[p], dims[q]));
            }
            let rest: Vec<usize> = (0..t.len()).filter(|&i| i != p && i != q).collect();
            let perm: Vec<i64> = rest.iter().chain([&p, &q]).map(|&i| i as i64).collect();
            let pv = imp.emit(K::Permute, &[*v], &[("perm", ints(&perm))])?;
            let mut merged: Vec<Dim> = rest.iter().map(|&i| dims[i].clone()).collect();
            let nn = n.checked_mul(n).ok_or_else(|| NodeError::Invalid("diagonal size overflow".into()))?;
            merged.push(Dim::new(nn));
            let r = imp.reshape(pv, &merged)?;
            *v = imp.emit(
                K::Slice,
                &[r],
                &[
                    ("axis", int(rest.len() as i64)),
                    ("start", int(0)),
                    ("end", int(nn as i64)),
                    ("step", int(n as i64 + 1)),
                ],
            )?;
            let c = t[p];
            *t = rest.iter().map(|&i| t[i]).chain([c]).collect();
        }
    }
    let mut acc: Option<Value> = None;
    let mut dtype = DType::F32;
    for (t, &v) in terms.iter().zip(&operands) {
        dtype = imp.dtype_of_v(v);
        let dims = imp.shape_of(v);
        // Permute to the global letter order, then insert size-1 dims for missing letters.
        let order: Vec<usize> = letters.iter().filter_map(|c| t.iter().position(|x| x == c)).collect();
        let perm: Vec<i64> = order.iter().map(|&p| p as i64).collect();
        let p = if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
            v
        } else {
            imp.emit(K::Permute, &[v], &[("perm", ints(&perm))])?
        };
        let mut full = Vec::with_capacity(letters.len());
        for c in &letters {
            match t.iter().position(|x| x == c) {
                Some(pos) => full.push(dims[pos].clone()),
                None => full.push(Dim::new(1)),
            }
        }
        let r = imp.reshape(p, &full)?;
        acc = Some(match acc {
            None => r,
            Some(a) => imp.bin(K::Mul, a, r)?,
        });
    }
    let mut y = acc.ok_or_else(|| NodeError::Invalid("Einsum needs an input".into()))?;
    let reduced: Vec<i64> =
        letters.iter().enumerate().filter(|(_, c)| !out.contains(c)).map(|(i, _)| i as i64).collect();
    if !reduced.is_empty() {
        y = imp.emit(K::Sum, &[y], &[("axes", ints(&reduced))])?;
        y = imp.convert_to(y, dtype)?;
    }
    let kept: Vec<char> = letters.iter().copied().filter(|c| out.contains(c)).collect();
    let perm: Vec<i64> = out.iter().map(|c| kept.iter().position(|x| x == c).unwrap_or(0) as i64).collect();
    if perm.iter().enumerate().any(|(i, &p)| p != i as i64) {
        y = imp.emit(K::Permute, &[y], &[("perm", ints(&perm))])?;
    }
    one(y)
}

fn if_node<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    let c = imp.input(node, 0)?;
    let cond = match imp.const_of(c) {
        Some(t) if t.numel() == 1 => t.to_f64_vec()[0] != 0.0,
        _ => return Err(NodeError::NeedsValue { input: 0, what: "the condition".into() }),
    };
    let branch = if cond { "then_branch" } else { "else_branch" };
    let g = attr(node, branch)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| NodeError::Invalid(format!("`{branch}` is missing")))?;
    if depth + 2 > imp.opts.max_depth {
        return Err(NodeError::Subgraph(Box::new(super::ImportError::TooDeep {
            what: "subgraphs",
            depth: depth + 2,
            limit: imp.opts.max_depth,
        })));
    }
    imp.add_initializers(g);
    imp.run_nodes(&g.node, depth + 1).map_err(|e| NodeError::Subgraph(Box::new(e)))?;
    let mut outs = Vec::with_capacity(g.output.len());
    for o in &g.output {
        outs.push(Some(imp.lookup(&o.name)?));
    }
    Ok(outs)
}

/// Negative log-likelihood of log-probabilities `logp [N, C, d...]` at integer `target
/// [N, d...]`, with optional class weights `[C]` and an ignored class, reduced as ONNX says
/// ("mean" divides by the total weight of the counted targets).
fn nll(
    imp: &mut Importer,
    logp: Value,
    target: Value,
    weight: Option<Value>,
    ignore: Option<i64>,
    reduction: &str,
) -> NResult<Value> {
    use OpKind as K;
    let dt = imp.dtype_of_v(logp);
    let t = imp.convert_to(target, DType::I64)?;
    let (t_safe, valid) = match ignore {
        Some(ii) => {
            let valid = imp.bin_scalar(K::Ne, t, ii as f64)?;
            let zero = imp.scalar(DType::I64, 0.0)?;
            (imp.emit(K::Where, &[valid, t, zero], &[])?, Some(valid))
        }
        None => (t, None),
    };
    let idx = imp.unsqueeze(t_safe, &[1])?;
    let g = imp.emit(K::Gather, &[logp, idx], &[("axis", int(1))])?;
    let g = imp.squeeze(g, &[1])?;
    let mut loss = imp.un(K::Neg, g)?;
    // Per-target weights (1 where no weights are given), 0 where ignored.
    let mut wt: Option<Value> = None;
    if let Some(w) = weight {
        let ts = imp.shape_of(t_safe);
        let k = imp.numel_of(&ts)?;
        let flat = imp.reshape(t_safe, &[k])?;
        let picked = imp.emit(K::Gather, &[w, flat], &[("axis", int(0))])?;
        wt = Some(imp.reshape(picked, &ts)?);
    }
    if let Some(valid) = valid {
        let vf = imp.convert_to(valid, dt)?;
        wt = Some(match wt {
            Some(w) => imp.bin(K::Mul, w, vf)?,
            None => vf,
        });
    }
    if let Some(w) = wt {
        loss = imp.bin(K::Mul, loss, w)?;
    }
    match reduction {
        "none" => Ok(loss),
        "sum" => imp.emit(K::Sum, &[loss], &[]),
        "mean" => match wt {
            None => imp.emit(K::Mean, &[loss], &[]),
            Some(w) => {
                let num = imp.emit(K::Sum, &[loss], &[])?;
                let den = imp.emit(K::Sum, &[w], &[])?;
                imp.bin(K::Div, num, den)
            }
        },
        r => invalid(format!("reduction `{r}`")),
    }
}
