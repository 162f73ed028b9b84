//! Which implementations each operator has: the one place `ladder ops` (and anything else that
//! reports coverage) reads from.
//!
//! - `interp`: the reference interpreter can evaluate it. Every op with a spec row has an
//!   `eval`, so this is true for every op the registry lists.
//! - `decomp`: a decomposition into prims exists (prims and opaque ops are their own
//!   decomposition and will report true once the decomposer exists).
//! - `vjp`: a reverse-mode derivative rule exists.
//! - `cpu`, `vulkan`: the backend can execute it.
//!
//! The compilation stages are not built yet, so everything but `interp` is false. Each stage,
//! when it lands, answers here for the ops it covers.

use super::{all_specs, OpKind};

/// What exists for one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Coverage {
    pub interp: bool,
    pub decomp: bool,
    pub vjp: bool,
    pub cpu: bool,
    pub vulkan: bool,
}

/// The implementations `kind` has in this build.
pub fn coverage(kind: OpKind) -> Coverage {
    // `OpKind::spec` treats a missing row as a bug; asking about coverage must not panic.
    let interp = all_specs().any(|s| s.kind == kind);
    Coverage { interp, decomp: false, vjp: false, cpu: false, vulkan: false }
}
