//! Which high-level ops the native plan runs as library kernels: facts about ops that the
//! verifier (the `Recovered` rung), decomposition, recovery, the scheduler and the runtime all
//! ask, kept beside the op table so that none of them has to ask a layer above it.

use super::OpKind;

/// The high-level ops recovery puts back (each has a CPU library kernel for f32 rows).
pub const RECOVERABLE: &[OpKind] = &[
    OpKind::Softmax,
    OpKind::LogSoftmax,
    OpKind::LayerNorm,
    OpKind::RmsNorm,
    OpKind::Gelu,
    OpKind::Silu,
    OpKind::Sigmoid,
    OpKind::ScaledDotProductAttention,
];

/// High-level ops that native mode never decomposes: a library kernel runs each one whole.
/// `lstm` decomposes into its recurrence unrolled step by step (twenty-odd prims a step), which
/// recovery would have to match one step after another; the importer knows it is an LSTM, so
/// native mode keeps the op instead (`crate::passes::lower_keeping`). `max_pool2d` decomposes
/// into strided slices and `max`es, which a fused kernel runs four lanes at a time; its
/// library kernel runs the whole pooling at the machine's vector width.
pub const KEPT: &[OpKind] = &[OpKind::Lstm, OpKind::MaxPool2d];

/// Whether `op` is a high-level op the `Recovered` rung allows: recovered, or kept whole.
pub fn is_library_op(op: OpKind) -> bool {
    RECOVERABLE.contains(&op) || KEPT.contains(&op)
}

/// Whether `op` is one of the recovered elementwise activations: a library call that may run
/// fused after the kernel or matmul that produces its argument (`Kernel::activation`).
pub fn is_activation(op: OpKind) -> bool {
    matches!(op, OpKind::Gelu | OpKind::Silu | OpKind::Sigmoid)
}
