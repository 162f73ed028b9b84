//! The pipeline: the passes in order, as one straight-line function, with the verifier
//! between steps. Each rung can be printed by name (`ladder dump --stage NAME`).

use std::fmt::Write;

use super::decompose::{decompose, decompose_keeping, DecomposeError};
use super::functionalize::{functionalize, Functional, FunctionalizeError, OutputAlias};
use super::simplify::{simplify, SimplifyError, SimplifyOptions};
use crate::ir::verify::{verify, Stage, VerifyErrors};
use crate::ir::Graph;

/// The rungs that can be printed, top to bottom.
pub const STAGES: &[&str] = &["parsed", "functional", "prims", "simplified", "recovered", "kernels"];

/// Why lowering failed.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("unknown stage `{0}` (stages: {stages})", stages = STAGES.join(", "))]
    UnknownStage(String),
    #[error("functionalize: {0}")]
    Functionalize(#[from] FunctionalizeError),
    #[error("decompose: {0}")]
    Decompose(#[from] DecomposeError),
    #[error("simplify: {0}")]
    Simplify(#[from] SimplifyError),
    #[error("recover: {0}")]
    Recover(String),
    #[error("schedule: {0}")]
    Schedule(#[from] crate::sched::ScheduleError),
    #[error("{pass} produced an invalid graph (a bug in the pass): {errors}")]
    Invalid { pass: &'static str, errors: VerifyErrors },
}

/// Every rung of one lowering.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub parsed: Graph,
    pub functional: Functional,
    /// The functional graph in prims (same inputs and outputs, same epilogue).
    pub prims: Graph,
    /// The prims graph simplified (identities, constant folding, CSE, DCE); same signature.
    pub simplified: Graph,
}

fn check(pass: &'static str, g: &Graph, stage: Stage) -> Result<(), PipelineError> {
    verify(g, stage).map_err(|errors| PipelineError::Invalid { pass, errors })
}

/// Runs the passes in order, verifying after each.
pub fn lower(g: &Graph) -> Result<Lowered, PipelineError> {
    lower_keeping(g, &[])
}

/// [`lower`] with the high-level ops in `keep` left whole by decomposition (see
/// [`decompose_keeping`]); with any, `prims` and `simplified` are graphs of the `Recovered`
/// rung.
pub fn lower_keeping(g: &Graph, keep: &[crate::ops::OpKind]) -> Result<Lowered, PipelineError> {
    check("input", g, Stage::HighLevel)?;
    let functional = functionalize(g)?;
    check("functionalize", &functional.graph, Stage::Functional)?;
    let prims = decompose_keeping(&functional.graph, keep)?;
    let stage = if keep.is_empty() { Stage::Prims } else { Stage::Recovered };
    check("decompose", &prims, stage)?;
    let simplified = simplify(&prims, &SimplifyOptions::default())?.graph;
    check("simplify", &simplified, stage)?;
    Ok(Lowered { parsed: g.clone(), functional, prims, simplified })
}

/// The lowering native mode starts from: [`lower_keeping`] the ops of
/// [`crate::recover::KEPT`], which recovery then joins with the ops it puts back.
pub fn lower_native(g: &Graph) -> Result<Lowered, PipelineError> {
    lower_keeping(g, crate::recover::KEPT)
}

/// The text of one rung of `g`'s lowering; runs the passes only as far as that rung.
pub fn dump(g: &Graph, stage: &str, options: &crate::text::PrintOptions) -> Result<String, PipelineError> {
    check("input", g, Stage::HighLevel)?;
    match stage {
        "parsed" => Ok(crate::text::print_with(g, options)),
        "functional" => {
            let functional = functionalize(g)?;
            check("functionalize", &functional.graph, Stage::Functional)?;
            Ok(functional_text(&functional, options))
        }
        "prims" => {
            let functional = functionalize(g)?;
            check("functionalize", &functional.graph, Stage::Functional)?;
            let prims = decompose(&functional.graph)?;
            check("decompose", &prims, Stage::Prims)?;
            Ok(crate::text::print_with(&prims, options))
        }
        "simplified" => Ok(crate::text::print_with(&lower(g)?.simplified, options)),
        "recovered" => {
            Ok(crate::text::print_with(&crate::recover::recover(&lower_native(g)?.simplified)?.graph, options))
        }
        "kernels" => {
            let lowered = lower(g)?;
            let program = crate::sched::schedule(&lowered.simplified)?;
            Ok(program_text(&program, &lowered.functional))
        }
        _ => Err(PipelineError::UnknownStage(stage.to_string())),
    }
}

/// A kernel program's text, with the functional graph's epilogue as `;` comment lines after it
/// (the program's outputs are the functional graph's, so mutated inputs are extra outputs).
pub fn program_text(p: &crate::kernel::Program, f: &Functional) -> String {
    let mut out = p.to_string();
    for m in &f.epilogue.mutations {
        let _ = writeln!(
            out,
            "; epilogue: copy output `{}` into input `{}`",
            f.graph.outputs()[m.output].name,
            f.graph.input_name(m.input)
        );
    }
    out
}

/// A functional graph's text, with its epilogue as `;` comment lines after it.
pub fn functional_text(f: &Functional, options: &crate::text::PrintOptions) -> String {
    let mut out = crate::text::print_with(&f.graph, options);
    for m in &f.epilogue.mutations {
        let _ = writeln!(
            out,
            "; epilogue: copy output `{}` into input `{}`",
            f.graph.outputs()[m.output].name,
            f.graph.input_name(m.input)
        );
    }
    for (i, a) in f.epilogue.output_aliases.iter().enumerate() {
        let name = &f.graph.outputs()[i].name;
        match a {
            OutputAlias::None => {}
            OutputAlias::Input(k) => {
                let _ = writeln!(out, "; alias: output `{name}` aliases input `{}`", f.graph.input_name(*k));
            }
            OutputAlias::Intermediate => {
                let _ = writeln!(out, "; alias: output `{name}` aliases an intermediate");
            }
        }
    }
    out
}
