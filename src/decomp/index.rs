//! Decompositions of the index family's high-level ops.

use super::DecompFn;
use crate::ops::OpKind;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    let _ = op;
    None
}
