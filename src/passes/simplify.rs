//! Simplification: identities, constant folding, CSE and DCE, run together to a fixpoint.

use super::cse::eliminate_common_subexpressions;
use super::dce::eliminate_dead_code;
use super::fold::{fold_constants, FoldOptions};
use super::identities::apply_identities;
use crate::ir::{Graph, GraphError};

/// Why a graph could not be simplified.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimplifyError {
    #[error("{value} = {op} mutates its argument: simplification needs a pure graph (functionalize it first)")]
    Mutating { value: String, op: &'static str },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Settings of [`simplify`].
#[derive(Clone, Debug)]
pub struct SimplifyOptions {
    /// Rounds of (identities, folding, CSE, DCE) at most.
    pub max_iterations: usize,
    /// Constant folding's bounds, per round.
    pub fold: FoldOptions,
}

impl Default for SimplifyOptions {
    fn default() -> SimplifyOptions {
        SimplifyOptions { max_iterations: 16, fold: FoldOptions::default() }
    }
}

/// Why [`simplify`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// A whole round changed nothing: the graph is a fixpoint of every pass.
    Converged,
    /// `max_iterations` rounds ran and the last one still changed the graph.
    IterationBound,
}

/// A simplified graph and how simplification ended.
#[derive(Clone, Debug)]
pub struct Simplified {
    pub graph: Graph,
    /// Rounds run (the last one, when converged, is the one that changed nothing).
    pub iterations: usize,
    pub stopped: Stopped,
}

/// Runs rounds of `apply_identities`, `fold_constants`, `eliminate_common_subexpressions`
/// and `eliminate_dead_code` until a round leaves the graph unchanged (compared structurally:
/// nodes, names, outputs and blob data) or `max_iterations` rounds have run, and says which.
/// Each pass preserves what the interpreter computes bit for bit (in op-dtype mode), so the
/// whole does. Deliberately not done: anything that changes results in the last bit
/// (reassociation, `x*0 → 0`, `x-x → 0`), and graphs that mutate (refused with
/// `SimplifyError::Mutating`).
pub fn simplify(g: &Graph, options: &SimplifyOptions) -> Result<Simplified, SimplifyError> {
    require_pure(g)?;
    let mut current = g.clone();
    for round in 1..=options.max_iterations {
        let next = apply_identities(&current)?;
        let next = fold_constants(&next, &options.fold)?;
        let next = eliminate_common_subexpressions(&next)?;
        let next = eliminate_dead_code(&next)?;
        if next == current {
            return Ok(Simplified { graph: next, iterations: round, stopped: Stopped::Converged });
        }
        current = next;
    }
    Ok(Simplified { graph: current, iterations: options.max_iterations, stopped: Stopped::IterationBound })
}

/// Refuses a graph with a mutating node: the passes reason about dataflow only.
pub(super) fn require_pure(g: &Graph) -> Result<(), SimplifyError> {
    match g.nodes().find(|(_, n)| n.op.mutates()) {
        Some((v, n)) => Err(SimplifyError::Mutating { value: g.display_value(v), op: n.op.name() }),
        None => Ok(()),
    }
}
