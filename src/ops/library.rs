//! Which high-level ops the native plan runs as library kernels, read off the spec rows
//! ([`OpSpec::native`](super::OpSpec::native)): the questions the verifier (the `Recovered`
//! rung), decomposition, recovery, the scheduler and the backends ask, answered here so that
//! none of them keeps a list of op names of its own.

use std::sync::OnceLock;

use super::{all_specs, Native, OpKind};

fn ops_where(native: fn(Native) -> bool) -> Vec<OpKind> {
    all_specs().filter(|s| native(s.native)).map(|s| s.kind).collect()
}

/// The high-level ops recovery puts back (each has a CPU library kernel for f32 rows), in
/// op-table order: the rows marked [`Native::Recovered`] or [`Native::Activation`].
pub fn recoverable() -> &'static [OpKind] {
    static OPS: OnceLock<Vec<OpKind>> = OnceLock::new();
    OPS.get_or_init(|| ops_where(|n| matches!(n, Native::Recovered | Native::Activation)))
}

/// High-level ops that native mode never decomposes: a library kernel runs each one whole
/// (the rows marked [`Native::Kept`]). `lstm` decomposes into its recurrence unrolled step by
/// step (twenty-odd prims a step), which recovery would have to match one step after another;
/// the importer knows it is an LSTM, so native mode keeps the op instead
/// (`crate::passes::lower_keeping`). `max_pool2d` decomposes into strided slices and `max`es,
/// which a fused kernel runs four lanes at a time; its library kernel runs the whole pooling at
/// the machine's vector width.
pub fn kept() -> &'static [OpKind] {
    static OPS: OnceLock<Vec<OpKind>> = OnceLock::new();
    OPS.get_or_init(|| ops_where(|n| n == Native::Kept))
}

/// Whether `op` is a high-level op the `Recovered` rung allows: recovered, or kept whole.
pub fn is_library_op(op: OpKind) -> bool {
    op.spec().native != Native::Prims
}

/// Whether `op` is one of the recovered elementwise activations: a library call that may run
/// fused after the kernel or matmul that produces its argument (`Kernel::activation`).
pub fn is_activation(op: OpKind) -> bool {
    op.spec().native == Native::Activation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_sets_are_read_off_the_rows() {
        assert_eq!(
            recoverable(),
            &[
                OpKind::Gelu,
                OpKind::Silu,
                OpKind::Sigmoid,
                OpKind::Softmax,
                OpKind::LogSoftmax,
                OpKind::LayerNorm,
                OpKind::RmsNorm,
                OpKind::ScaledDotProductAttention,
            ]
        );
        assert_eq!(kept(), &[OpKind::MaxPool2d, OpKind::Lstm]);
        assert!(is_activation(OpKind::Gelu) && !is_activation(OpKind::Softmax) && !is_activation(OpKind::Relu));
        assert!(is_library_op(OpKind::Lstm) && is_library_op(OpKind::Softmax) && !is_library_op(OpKind::Add));
        // Only high-level ops go to library kernels by their row: prims are what the rest
        // lowers to.
        for s in all_specs().filter(|s| s.native != Native::Prims) {
            assert_eq!(s.rung, super::super::Rung::High, "{} runs as a library op but is not high-level", s.name);
        }
    }
}
