//! ONNX ops to ladder ops: one table per op family, and the dispatcher that looks a node's op
//! type up in them.
//!
//! ## The tables
//! Each family's file holds a table of rows ([`Row`]: the ONNX op type and its [`Convert`]
//! function) beside the conversions it names, sorted by op type:
//!
//! | file             | table         | ops                                                     |
//! |------------------|---------------|---------------------------------------------------------|
//! | `elementwise.rs` | `ELEMENTWISE` | unary math, activations, arithmetic, logic, `Cast`, `Clip` |
//! | `shape_ops.rs`   | `SHAPE`       | constants, shapes, views, data movement, `Gather`, `Pad` |
//! | `reduce.rs`      | `REDUCE`      | `Reduce*`, `ArgMax`/`ArgMin`                            |
//! | `linalg.rs`      | `LINALG`      | `MatMul`, `Gemm`, `Einsum`                              |
//! | `nn.rs`          | `NN`          | convolution, 1-d/2-d pooling, normalisation, softmax, losses |
//! | `spatial.rs`     | `SPATIAL`     | `Resize`, other pools, `LRN`, `MaxUnpool`, `Col2Im`, ... |
//! | `signal.rs`      | `SIGNAL`      | `DFT`, `STFT`, windows, `MelWeightMatrix`               |
//! | `grid.rs`        | `GRID`        | `GridSample`, `AffineGrid`, `RoiAlign`, `DeformConv`    |
//! | `attention.rs`   | `ATTENTION`   | `Attention`, `RotaryEmbedding`, ...                     |
//! | `recur.rs`       | `RECUR`       | `If`, `Loop`, `Scan`, `RNN`/`GRU`/`LSTM`, optionals     |
//! | `index.rs`       | `INDEX`       | scans, `TopK`, scatters, `GatherND`, `Det`, inverse trig |
//! | `quant.rs`       | `QUANT`       | quantization, integer products, bit ops                 |
//!
//! These are the default domain's ops; `recur.rs`'s `PREVIEW` table holds the
//! `ai.onnx.preview` ones (`FlexAttention`). [`is_supported`] (the importer's census of
//! unsupported ops) and [`convert`] read the same tables, merged once into a map, so an op is
//! reported supported exactly when it has a conversion. Before the lookup, `shapes.rs` may
//! keep a node's result a symbolic shape list (`Shape → Gather → Concat` chains). A node of
//! a custom domain whose op type is a registered custom kernel (`crate::ops::custom`)
//! becomes a `custom` node (`custom.rs`).
//!
//! ## Mapping choices worth knowing
//! Each family's file lists its own; across families:
//! - `Reshape`/`Expand`/`ConstantOfShape`/`Range`/`Tile`/`Slice`/`Split`/`Squeeze`/
//!   `Unsqueeze`/`Pad`/`Reduce*` need their shape-like inputs known at import (constant, or
//!   computed from shapes); both the attribute and the input forms are read.
//! - `Resize`/`Upsample`, pooling beyond the 2-d ops (3-d, dilated or asymmetric averages),
//!   `LpPool`, `LRN`, `MaxUnpool`, `CenterCropPad`, `Col2Im`: see `spatial.rs`; `DFT`,
//!   `STFT`, the window ops and `MelWeightMatrix`: see `signal.rs`; `GridSample`,
//!   `AffineGrid`, `RoiAlign`, `DeformConv`: see `grid.rs`.
//! - `If` with a condition known at import inlines the taken branch.
//! - `RNN`/`GRU`/`LSTM` unroll over their static length; `Scan` and `Loop` inline their body
//!   once per iteration; `ai.onnx.preview::FlexAttention` is attention with its modifier
//!   subgraphs inlined; `OptionalHasElement`/`OptionalGetElement` act on plain tensors (all in
//!   `recur.rs`).
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
//!
//! ## Decomposed at import
//! Most ONNX ops become one ladder op. These become several, built here rather than in
//! `src/decomp/` (whose rules the tolerance table of `tests/numerics.rs` holds to account),
//! for the reason given; "follow-up" marks where a ladder op (or another composition) would
//! be the right thing.
//! - The op's own formula in a few elementwise steps (comparisons, `where`, sign fixes,
//!   scalar factors), each rounding as the ONNX reference's steps do: `IsInf`, `Shrink`,
//!   `ThresholdedRelu`, `PRelu`, `Mod` (fmod=0), `Clip` with run-time bounds, `Celu`/`Selu`
//!   (a scaled `elu`), `HardSigmoid` (ONNX's alpha and beta, which ladder's `hardsigmoid`
//!   fixes), `Softsign`, `Mish`, `Swish`, `Pow` (converted back to the base's type),
//!   `Max`/`Min`/`Sum`/`Mean` (binary folds), `Gemm` (`matmul`, then `alpha` and `beta * C`),
//!   `MatMul` of 1-D operands, `ArgMax`/`ArgMin` with `select_last_index`, `Hardmax`,
//!   `EyeLike`, `OneHot` (`iota` compares), `Dropout`'s mask, `Pad` with a run-time value,
//!   `GroupNormalization` with per-group scales, the `LayerNormalization` statistics outputs,
//!   `ReduceL1`/`ReduceSumSquare`/`ReduceLogSum`, `BitShift`/`BitwiseXor`/`BitwiseNot` (exact
//!   in wrapping integer arithmetic).
//! - The ONNX function body, written with ladder ops: `MeanVarianceNormalization`,
//!   `LpNormalization`, `NegativeLogLikelihoodLoss`, `SoftmaxCrossEntropyLoss`, `Attention`
//!   where `scaled_dot_product_attention` does not fit, `RotaryEmbedding`,
//!   `CausalConvWithState`, training-mode `BatchNormalization`, and the quantization ops
//!   (`QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear`, `QLinearMatMul`,
//!   `QLinearConv`; `MatMulInteger` and `ConvInteger` widen to exact integer products).
//! - Shape-only (data movement, no arithmetic): `Flatten`, `Squeeze`, `Unsqueeze`, `Tile`,
//!   `DepthToSpace`, `SpaceToDepth`, `Gather`, `Slice` with a negative step, `Split`, `Pad`
//!   (edge/reflect/wrap), `GatherND`, `ReverseSequence`, `Compress`, `CenterCropPad`, legacy
//!   `Softmax`/`LogSoftmax` (flattened to 2-D), the pools' explicit `pad`s. `Constant`,
//!   `Shape`, `Size`, `ConstantOfShape`, `Range`, the window ops and `MelWeightMatrix` are
//!   constants or `iota`s computed at import.
//! - Sums over taps, windows or positions, with index tables and weights built at import
//!   (the op's definition written out): `Resize`/`Upsample`, `GridSample`,
//!   `RoiAlign`, `DeformConv`, `AffineGrid`, the pools `max_pool2d`/`avg_pool2d` do not cover,
//!   `LpPool`, `LRN`, `Col2Im`, `MaxUnpool`, `ScatterND` and `ScatterElements`/`Scatter`
//!   (none/add, through `scatter_add`), `Det` (Leibniz, n <= 4).
//! - Control flow unrolled or inlined: `If`, `Loop`, `Scan`, `RNN`, `GRU`, `LSTM` (cells other
//!   than the default, which is one `lstm` op per direction), `FlexAttention`,
//!   `LinearAttention`, `OptionalHasElement`/`OptionalGetElement`. Follow-up: a ladder scan op
//!   would keep long sequences from unrolling (`MAX_STEPS` in `recur.rs` caps them today).
//! - Follow-up, numerics: `Sinh`/`Cosh` are `(e^x ∓ e^-x) / 2`, which cancels for `Sinh`
//!   near 0 (`sinh(1e-8)` is 0 in f32); `expm1` would keep it accurate. `Tan` is `sin / cos`.
//!   `ReduceL2` and `LpNormalization` (p = 2) square before summing, so they overflow where
//!   the norm would not (as the ONNX reference does).
//! - Follow-up, a ladder op would be the right thing: `CumProd` (a log-step scan like
//!   ladder's `cumsum`, which `CumSum` maps to), `TopK` (an `n²` ranking under
//!   `DENSE_LIMIT`: a sort), `ScatterElements` with `mul`/`max`/`min` (dense `n²` matching),
//!   `DFT`/`STFT` (an `n²` `matmul` with a constant table: an FFT), `ConvTranspose` (a `conv`
//!   over the input dilated with zeros, `stride^d` times the work), `Einsum` (one broadcast
//!   product over every label before the `sum`; pairwise `matmul` contractions would bound
//!   its size).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::build::{unsupported, Outs};
use super::import::{Importer, NResult};
use super::proto::NodeProto;

/// Converts one node of the op type its row names, returning a slot per output. `depth`
/// counts the subgraphs the node is inlined from, for the ops that inline their own (`If`,
/// `Loop`, `Scan`, `FlexAttention`).
pub(super) type Convert = for<'m> fn(&mut Importer<'m>, &'m NodeProto, u32) -> NResult<Outs>;

/// One row of a family's table: an ONNX op type and its conversion.
pub(super) type Row = (&'static str, Convert);

/// The default domain's tables, one per family.
const TABLES: &[&[Row]] = &[
    super::elementwise::ELEMENTWISE,
    super::shape_ops::SHAPE,
    super::reduce::REDUCE,
    super::linalg::LINALG,
    super::nn::NN,
    super::spatial::SPATIAL,
    super::signal::SIGNAL,
    super::grid::GRID,
    super::attention::ATTENTION,
    super::recur::RECUR,
    super::index::INDEX,
    super::quant::QUANT,
];

/// The default domain's conversions by op type, built from [`TABLES`] on first use.
fn conversions() -> &'static HashMap<&'static str, Convert> {
    static CONVERSIONS: OnceLock<HashMap<&'static str, Convert>> = OnceLock::new();
    CONVERSIONS.get_or_init(|| TABLES.iter().flat_map(|table| table.iter().copied()).collect())
}

/// Whether the importer converts `op_type` of the default domain.
pub fn is_supported(op_type: &str, _opset: i64) -> bool {
    conversions().contains_key(op_type)
}

/// Converts one node; returns a slot per output.
pub fn convert<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    if let Some(outs) = super::shapes::convert_syms(imp, node)? {
        return Ok(outs);
    }
    let op = node.op_type.as_str();
    if let Some(name) = crate::ops::custom::lookup_onnx(&node.domain, op) {
        return super::custom::convert(imp, node, &name);
    }
    let conversion = super::recur::converter_in(&node.domain, op).or_else(|| conversions().get(op).copied());
    match conversion {
        Some(convert) => convert(imp, node, depth),
        None => unsupported(format!("op type {op}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::recur::{is_supported_in, PREVIEW};
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tables_are_sorted_and_names_unique() {
        let mut seen = HashSet::new();
        for table in TABLES.iter().chain([&PREVIEW]) {
            let names: Vec<&str> = table.iter().map(|&(name, _)| name).collect();
            assert!(names.windows(2).all(|w| w[0] < w[1]), "a table is not sorted by name: {names:?}");
        }
        for &(name, _) in TABLES.iter().flat_map(|table| table.iter()) {
            assert!(seen.insert(name), "`{name}` is in two tables");
        }
        assert_eq!(seen.len(), conversions().len());
    }

    #[test]
    fn support_follows_the_tables() {
        for &(name, _) in TABLES.iter().flat_map(|table| table.iter()) {
            assert!(is_supported(name, 21), "{name}");
        }
        assert!(!is_supported("FlexAttention", 21), "FlexAttention is an ai.onnx.preview op");
        assert!(!is_supported("NoSuchOp", 21));
        assert!(is_supported_in("ai.onnx.preview", "FlexAttention"));
        assert!(!is_supported_in("com.example", "FlexAttention"));
        assert!(!is_supported_in("ai.onnx.preview", "Add"));
    }
}
