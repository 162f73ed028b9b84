//! Which implementations each operator has: the one place `ladder ops` (and anything else that
//! reports coverage) reads from.
//!
//! - `interp`: the reference interpreter can evaluate it. Every op with a spec row has an
//!   `eval`, so this is true for every op the registry lists.
//! - `decomp`: the op reaches the prims rung: a high-level op has a decomposition rule
//!   (`crate::decomp::rule`), or is an in-place op that functionalization turns into ops
//!   that do; prims and opaque ops are there already.
//! - `vjp`: a reverse-mode derivative rule exists.
//! - `cpu`, `vulkan`: the backend can execute it.
//!
//! Autodiff and the backends are not built yet, so their columns are false. Each stage, when it
//! lands, answers here for the ops it covers.

use super::{all_specs, OpKind, Rung};

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
    let Some(spec) = all_specs().find(|s| s.kind == kind) else { return Coverage::default() };
    let decomp = match spec.rung {
        Rung::High if spec.mutates => crate::passes::functionalize::functional_forms(kind)
            .iter()
            .all(|&f| f.rung() != Rung::High || crate::decomp::rule(f).is_some()),
        Rung::High => crate::decomp::rule(kind).is_some(),
        Rung::Prim | Rung::Opaque | Rung::Source => true,
    };
    Coverage { interp: true, decomp, vjp: false, cpu: false, vulkan: false }
}
