//! Which implementations each operator has: the one place `ladder ops` (and anything else that
//! reports coverage) reads from.
//!
//! - `interp`: the reference interpreter can evaluate it. Every op with a spec row has an
//!   `eval`, so this is true for every op the registry lists.
//! - `decomp`: the op reaches the prims rung: a high-level op has a decomposition rule
//!   (`ladder::decomp::rule`), or is an in-place op that functionalization turns into ops
//!   that do; prims and opaque ops are there already.
//! - `vjp`: a reverse-mode derivative exists: a prim or opaque op has a rule in the table
//!   (`ladder::autodiff::rule`); a high-level op (in-place ones through their functional
//!   forms) lowers, and every op its lowering emits has a rule (`autodiff` derives the
//!   op's backward from its decomposition). What the lowering emits is found by lowering
//!   generated instances of the op (`ladder::numerics::grad::lowered_ops`).
//! - `cpu`: compiled CPU plans run it: every prim and opaque op (natively, or on the reference
//!   kernel executor inside the plan), and every high-level op that lowers to prims.
//! - `cpu_native`: the CPU scheduler puts the op (a prim, an opaque op, or a high-level op
//!   native mode keeps whole: `ladder::ops::library::kept`) in native code: a Cranelift kernel or a
//!   library call (GEMM, conv, the data-movement copies, `lstm`). The rest are
//!   graph breaks that the plan runs on the reference executor (`ladder::sched::compiles`).
//! - `vulkan`: the Vulkan backend runs it: a prim or opaque op it has
//!   (`ladder::backend::vulkan::runs_op`: the kernel prims on f32, i32, i64 and bool values,
//!   `pow` by integer exponents of -4 to 4, `cat`, `pad`, `rev` (static dims from its first
//!   reversed axis on), `gather` and `scatter_add` from tensors of static shape, f32
//!   `matmul` and `conv` (a padded one over an input of static size after the batch)), or a
//!   high-level op that lowers to such ops only. A program outside these limits is refused
//!   there. False in a build without the `vulkan` feature.

use ladder::ops::{all_specs, OpKind, Rung};

/// What exists for one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Coverage {
    pub interp: bool,
    pub decomp: bool,
    pub vjp: bool,
    pub cpu: bool,
    pub cpu_native: bool,
    pub vulkan: bool,
}

/// The implementations `kind` has in this build.
pub fn coverage(kind: OpKind) -> Coverage {
    // `OpKind::spec` treats a missing row as a bug; asking about coverage must not panic.
    let Some(spec) = all_specs().find(|s| s.kind == kind) else { return Coverage::default() };
    let decomp = match spec.rung {
        Rung::High if spec.mutates => ladder::passes::functionalize::functional_forms(kind)
            .iter()
            .all(|&f| f.rung() != Rung::High || ladder::decomp::rule(f).is_some()),
        Rung::High => ladder::decomp::rule(kind).is_some(),
        Rung::Prim | Rung::Opaque | Rung::Source => true,
    };
    let has_rule = |op: OpKind| ladder::autodiff::rule(op).is_some();
    let vjp = match spec.rung {
        Rung::Prim | Rung::Opaque => has_rule(kind),
        Rung::High => {
            decomp && ladder::numerics::grad::lowered_ops(kind).is_some_and(|ops| ops.into_iter().all(has_rule))
        }
        Rung::Source => false,
    };
    let kept = ladder::ops::library::kept().contains(&kind);
    let cpu_native = (spec.rung != Rung::High || kept) && ladder::sched::compiles(kind);
    let vulkan = match spec.rung {
        Rung::Prim | Rung::Source | Rung::Opaque => vulkan_prim(kind),
        Rung::High => {
            decomp && ladder::numerics::grad::lowered_ops(kind).is_some_and(|ops| ops.into_iter().all(vulkan_prim))
        }
    };
    Coverage { interp: true, decomp, vjp, cpu: decomp, cpu_native, vulkan }
}

#[cfg(feature = "vulkan")]
fn vulkan_prim(kind: OpKind) -> bool {
    ladder::backend::vulkan::runs_op(kind)
}

#[cfg(not(feature = "vulkan"))]
fn vulkan_prim(_: OpKind) -> bool {
    false
}
