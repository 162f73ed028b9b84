//! The graph passes in order (functionalize, decompose, simplify), as one straight-line
//! function with the verifier after each. The whole compile path, which goes on to recovery
//! and scheduling, is [`crate::pipeline`]; this is its first part, and what recovery uses to
//! lower its templates.

use super::decompose::{decompose_keeping, DecomposeError};
use super::functionalize::{functionalize, Functional, FunctionalizeError};
use super::simplify::{simplify, SimplifyError, SimplifyOptions};
use crate::ir::verify::{verify, Stage, VerifyErrors};
use crate::ir::Graph;

/// Why lowering failed.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("functionalize: {0}")]
    Functionalize(#[from] FunctionalizeError),
    #[error("decompose: {0}")]
    Decompose(#[from] DecomposeError),
    #[error("simplify: {0}")]
    Simplify(#[from] SimplifyError),
    #[error("recover: {0}")]
    Recover(String),
    #[error("{pass} produced an invalid graph (a bug in the pass): {errors}")]
    Invalid { pass: &'static str, errors: VerifyErrors },
}

/// Every graph rung of one lowering.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub parsed: Graph,
    pub functional: Functional,
    /// The functional graph in prims (same inputs and outputs, same epilogue).
    pub prims: Graph,
    /// The prims graph simplified (identities, constant folding, CSE, DCE); same signature.
    pub simplified: Graph,
}

/// `g` verified at `stage`, or why not, blaming `pass`.
pub(crate) fn check(pass: &'static str, g: &Graph, stage: Stage) -> Result<(), LowerError> {
    verify(g, stage).map_err(|errors| LowerError::Invalid { pass, errors })
}

/// `g` (verified as a high-level graph) functionalized, the result verified.
pub fn functional(g: &Graph) -> Result<Functional, LowerError> {
    check("input", g, Stage::HighLevel)?;
    let functional = functionalize(g)?;
    check("functionalize", &functional.graph, Stage::Functional)?;
    Ok(functional)
}

/// Runs the passes in order, verifying after each.
pub fn lower(g: &Graph) -> Result<Lowered, LowerError> {
    lower_keeping(g, &[])
}

/// [`lower`] with the high-level ops in `keep` left whole by decomposition (see
/// [`decompose_keeping`]); with any, `prims` and `simplified` are graphs of the `Recovered`
/// rung.
pub fn lower_keeping(g: &Graph, keep: &[crate::ops::OpKind]) -> Result<Lowered, LowerError> {
    let functional = functional(g)?;
    let prims = prims(&functional, keep)?;
    let simplified = simplified(&prims, keep)?;
    Ok(Lowered { parsed: g.clone(), functional, prims, simplified })
}

/// The functional graph decomposed (keeping the ops in `keep`), the result verified.
pub fn prims(functional: &Functional, keep: &[crate::ops::OpKind]) -> Result<Graph, LowerError> {
    let prims = decompose_keeping(&functional.graph, keep)?;
    check("decompose", &prims, rung_of(keep))?;
    Ok(prims)
}

/// The prims graph simplified, the result verified (`keep` as given to [`prims`]).
pub fn simplified(prims: &Graph, keep: &[crate::ops::OpKind]) -> Result<Graph, LowerError> {
    let simplified = simplify(prims, &SimplifyOptions::default())?.graph;
    check("simplify", &simplified, rung_of(keep))?;
    Ok(simplified)
}

/// The rung a graph is verified at after decomposition: prims, or the `Recovered` rung when
/// some high-level ops are kept whole.
fn rung_of(keep: &[crate::ops::OpKind]) -> Stage {
    if keep.is_empty() {
        Stage::Prims
    } else {
        Stage::Recovered
    }
}
