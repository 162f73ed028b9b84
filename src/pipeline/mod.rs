//! The one compile path: a graph climbs down the rungs of [`RUNGS`] in order, each rung's
//! result kept, with the verifier after every step. The runtime compiles plans from it,
//! `ladder dump` prints its rungs, and the file tests check them: what `dump` shows is what
//! a plan runs.
//!
//! ```text
//! parsed ─ functional ─ prims ─ [joint] ─ simplified ─ recovered ─ kernels
//!          (passes::lower's steps: functionalize, decompose, simplify, each verified;
//!           joint: autodiff's forward + backward graph, when a loss is given)
//! ```
//!
//! Two modes choose the lowering ([`Mode`]): the native plan's (the default: the ops a
//! library kernel runs whole are kept by decomposition, and recovery puts back the ones it
//! recognizes in prims) and the reference plan's (every op down to prims, nothing recovered:
//! the oracle's lowering). A new rung is one entry in [`RUNGS`], one field of [`Lowering`]
//! and one arm of `Lowering::step`.
//!
//! The `joint` rung is optional: given a [`Differentiate`] (a loss output and the inputs to
//! differentiate; [`lower_with`]), it is the prims graph with the loss's gradients as extra
//! outputs (`crate::autodiff::grad`), and the rungs below lower that graph, so the backward
//! pass is simplified, recovered, fused and compiled like any graph. Without one (what
//! [`lower`] and compiled plans do) it is skipped and the rungs below lower the prims graph.
//! [`dump`] at `joint` differentiates the first output with respect to every float input.
//!
//! The partitioner's split is not a rung: it makes two graphs of one ([`partition`]), the
//! forward (the forward outputs and the values saved for the backward) and the backward (the
//! gradients from the saved values, recomputing the rest). Each is an ordinary prims graph
//! that goes down the rungs on its own; [`SPLIT_STAGES`] names them for [`dump`].

use std::fmt::Write;

use crate::autodiff::{AdError, Joint, Partition, PartitionOptions};
use crate::ir::verify::Stage;
use crate::ir::Graph;
use crate::passes::functionalize::{Epilogue, Functional, OutputAlias};
use crate::passes::LowerError;
use crate::recover::Recovered;
use crate::sched::{ScheduleError, Scheduled};
use crate::text::PrintOptions;

pub mod stats;

pub use crate::recover::Mode;

/// A rung of the ladder, top to bottom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rung {
    /// The graph as written.
    Parsed,
    /// No mutation or aliasing; writes to inputs become an epilogue (printed as comments).
    Functional,
    /// Decomposed (native mode keeps the ops a library kernel runs whole).
    Prims,
    /// The prims graph with a loss's gradients as extra outputs (only when asked for).
    Joint,
    /// Identities, constant folding, CSE, DCE.
    Simplified,
    /// Library-kernel ops put back by pattern (native mode; the reference mode has none).
    Recovered,
    /// The scheduled kernel program a plan runs.
    Kernels,
}

/// A rung and its name (what `ladder dump --stage` and the file tests' `; stage:` take).
#[derive(Clone, Copy, Debug)]
pub struct RungInfo {
    /// The rung.
    pub rung: Rung,
    /// Its name.
    pub name: &'static str,
}

/// Every rung, in the order a graph climbs down them.
pub const RUNGS: &[RungInfo] = &[
    RungInfo { rung: Rung::Parsed, name: "parsed" },
    RungInfo { rung: Rung::Functional, name: "functional" },
    RungInfo { rung: Rung::Prims, name: "prims" },
    RungInfo { rung: Rung::Joint, name: "joint" },
    RungInfo { rung: Rung::Simplified, name: "simplified" },
    RungInfo { rung: Rung::Recovered, name: "recovered" },
    RungInfo { rung: Rung::Kernels, name: "kernels" },
];

/// The rung names, top to bottom.
pub fn rung_names() -> impl Iterator<Item = &'static str> {
    RUNGS.iter().map(|r| r.name)
}

impl Rung {
    /// The rung's name in [`RUNGS`].
    pub fn name(self) -> &'static str {
        RUNGS.iter().find(|r| r.rung == self).map_or("?", |r| r.name)
    }

    /// The rung called `name`, or an error listing the names.
    pub fn from_name(name: &str) -> Result<Rung, PipelineError> {
        RUNGS
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.rung)
            .ok_or_else(|| PipelineError::UnknownRung(name.to_string()))
    }
}

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// No rung has this name.
    #[error(
        "unknown stage `{0}` (stages: {stages})",
        stages = rung_names().chain(SPLIT_STAGES).collect::<Vec<_>>().join(", ")
    )]
    UnknownRung(String),
    /// A graph pass failed (functionalize, decompose, simplify, or the verifier after one).
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// The scheduler could not turn the graph into a kernel program.
    #[error("schedule: {0}")]
    Schedule(#[from] ScheduleError),
    /// The joint graph could not be built (boxed: the error is large, and rare).
    #[error("autodiff: {0}")]
    Autodiff(Box<AdError>),
    /// The joint rung was asked for a graph without outputs.
    #[error("the joint rung differentiates an output, and the graph has none")]
    NoLoss,
}

impl From<AdError> for PipelineError {
    fn from(e: AdError) -> PipelineError {
        PipelineError::Autodiff(Box::new(e))
    }
}

/// What the `joint` rung differentiates: the output named `loss` (a float scalar) with
/// respect to the inputs named in `wrt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Differentiate {
    /// The loss output's name.
    pub loss: String,
    /// The differentiated inputs' names.
    pub wrt: Vec<String>,
}

impl Differentiate {
    /// `g`'s first output with respect to every float input (`None` without outputs).
    pub fn first_output(g: &Graph) -> Option<Differentiate> {
        let loss = g.outputs().first()?.name.clone();
        let wrt =
            (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype.is_float()).map(|i| g.input_name(i)).collect();
        Some(Differentiate { loss, wrt })
    }
}

/// One graph's rungs, as far as it was lowered: `None` past the last rung reached (and
/// `recovered` in the reference mode, which has none).
#[derive(Clone, Debug)]
pub struct Lowering {
    /// Native or reference lowering.
    pub mode: Mode,
    /// The graph as given.
    pub parsed: Graph,
    /// Pure SSA: views and in-place ops rewritten, with the epilogue of mutated inputs.
    pub functional: Option<Functional>,
    /// Every high-level op decomposed into prims (those native mode keeps whole aside).
    pub prims: Option<Graph>,
    /// What the joint rung differentiates, if anything.
    pub differentiate: Option<Differentiate>,
    /// The prims graph and its loss's gradients (when `differentiate` asks for them).
    pub joint: Option<Joint>,
    /// After constant folding, algebraic identities, CSE and dead-code elimination.
    pub simplified: Option<Graph>,
    /// The library ops recovery put back, with its matches (native mode).
    pub recovered: Option<Recovered>,
    /// The kernel program and the scheduler's explanation.
    pub scheduled: Option<Scheduled>,
    /// The last rung reached.
    pub reached: Rung,
}

/// `g` lowered in `mode` down to rung `until` (every rung above it too), verified after
/// every step; no joint rung.
pub fn lower(g: &Graph, mode: Mode, until: Rung) -> Result<Lowering, PipelineError> {
    lower_with(g, mode, until, None)
}

/// [`lower`], with the joint rung differentiating as `differentiate` says (the rungs below
/// it then lower the joint graph).
pub fn lower_with(
    g: &Graph,
    mode: Mode,
    until: Rung,
    differentiate: Option<&Differentiate>,
) -> Result<Lowering, PipelineError> {
    match lower_partial_with(g, mode, until, differentiate) {
        (l, None) => Ok(l),
        (_, Some(e)) => Err(e),
    }
}

/// [`lower`] as far as it goes: the rungs reached (`reached` the last), and what stopped it
/// before `until`, if anything did.
pub fn lower_partial(g: &Graph, mode: Mode, until: Rung) -> (Lowering, Option<PipelineError>) {
    lower_partial_with(g, mode, until, None)
}

/// [`lower_partial`] with the joint rung (see [`lower_with`]).
pub fn lower_partial_with(
    g: &Graph,
    mode: Mode,
    until: Rung,
    differentiate: Option<&Differentiate>,
) -> (Lowering, Option<PipelineError>) {
    let mut l = Lowering {
        mode,
        parsed: g.clone(),
        functional: None,
        prims: None,
        differentiate: differentiate.cloned(),
        joint: None,
        simplified: None,
        recovered: None,
        scheduled: None,
        reached: Rung::Parsed,
    };
    if let Err(e) = crate::passes::lower::check("input", g, Stage::HighLevel) {
        return (l, Some(e.into()));
    }
    for r in RUNGS.iter().skip(1).take_while(|r| r.rung <= until) {
        if let Err(e) = l.step(r.rung) {
            return (l, Some(e));
        }
        l.reached = r.rung;
    }
    (l, None)
}

/// A graph already lowered in `mode` (the `recovered` rung in native mode, `simplified` in
/// reference mode; as [`Lowering::graph`] gives it and an artifact stores it), with the
/// epilogue of the graph it came from, lowered on to `until` (`kernels` at most): the rungs
/// above are not recomputed, and `parsed`, `functional` and `simplified` all hold `g`. `g`
/// is verified at its rung first.
pub fn resume(g: &Graph, mode: Mode, epilogue: Epilogue, until: Rung) -> Result<Lowering, PipelineError> {
    let stage = match mode {
        Mode::Native | Mode::Shaders => Stage::Recovered,
        Mode::Reference => Stage::Prims,
    };
    crate::passes::lower::check("input", g, stage)?;
    let mut l = Lowering {
        mode,
        parsed: g.clone(),
        functional: Some(Functional { graph: g.clone(), epilogue }),
        prims: None,
        differentiate: None,
        joint: None,
        simplified: Some(g.clone()),
        recovered: None,
        scheduled: None,
        reached: Rung::Recovered,
    };
    if until >= Rung::Kernels {
        l.step(Rung::Kernels)?;
        l.reached = Rung::Kernels;
    }
    Ok(l)
}

impl Lowering {
    /// Computes rung `r` from the rungs above it (all reached).
    fn step(&mut self, r: Rung) -> Result<(), PipelineError> {
        match r {
            Rung::Parsed => {}
            Rung::Functional => self.functional = Some(crate::passes::functional(&self.parsed)?),
            Rung::Prims => {
                let functional = self.functional.as_ref().expect("the functional rung is reached first");
                // Differentiating in native mode, ops with a hand derivative stay whole too.
                let keep: Vec<crate::ops::OpKind> = match (&self.differentiate, self.mode) {
                    (Some(_), Mode::Native) => {
                        self.mode.keep().iter().chain(crate::autodiff::HAND_RULES).copied().collect()
                    }
                    _ => self.mode.keep().to_vec(),
                };
                self.prims = Some(crate::passes::lower::prims(functional, &keep)?);
            }
            Rung::Joint => {
                if let Some(d) = &self.differentiate {
                    let prims = self.prims.as_ref().expect("the prims rung is reached first");
                    let wrt: Vec<&str> = d.wrt.iter().map(String::as_str).collect();
                    self.joint = Some(crate::autodiff::grad(prims, &d.loss, &wrt)?);
                }
            }
            Rung::Simplified => {
                let prims = self.prims.as_ref().expect("the prims rung is reached first");
                let graph = self.joint.as_ref().map_or(prims, |j| &j.graph);
                self.simplified = Some(crate::passes::lower::simplified(graph, self.mode.keep())?);
            }
            Rung::Recovered => {
                if self.mode != Mode::Reference {
                    let simplified = self.simplified.as_ref().expect("the simplified rung is reached first");
                    self.recovered = Some(crate::recover::recover_only(simplified, self.mode.recovers())?);
                }
            }
            Rung::Kernels => self.scheduled = Some(crate::sched::schedule_explained(self.graph())?),
        }
        Ok(())
    }

    /// The last graph rung reached: the one a schedule is made from once `simplified` is
    /// reached (the recovered graph in native mode).
    pub fn graph(&self) -> &Graph {
        let reached = match self.reached {
            Rung::Kernels | Rung::Recovered => self.recovered.as_ref().map(|r| &r.graph).or(self.simplified.as_ref()),
            Rung::Simplified => self.simplified.as_ref(),
            Rung::Joint => self.joint.as_ref().map(|j| &j.graph).or(self.prims.as_ref()),
            Rung::Prims => self.prims.as_ref(),
            Rung::Functional => self.functional.as_ref().map(|f| &f.graph),
            Rung::Parsed => None,
        };
        reached.unwrap_or(&self.parsed)
    }

    /// The graph of rung `r` (not `kernels`), when reached; the reference mode's `recovered`
    /// rung is its simplified graph; `joint` is `None` when nothing was differentiated.
    pub fn graph_at(&self, r: Rung) -> Option<&Graph> {
        match r {
            Rung::Parsed => Some(&self.parsed),
            Rung::Functional => self.functional.as_ref().map(|f| &f.graph),
            Rung::Prims => self.prims.as_ref(),
            Rung::Joint => self.joint.as_ref().map(|j| &j.graph),
            Rung::Simplified => self.simplified.as_ref(),
            Rung::Recovered if self.reached >= Rung::Recovered => Some(self.graph()),
            Rung::Recovered | Rung::Kernels => None,
        }
    }

    /// The text of rung `r` (reached): a graph's text form, the functional graph with its
    /// epilogue as comments, or the kernel program with the epilogue as comments.
    pub fn text(&self, r: Rung, options: &PrintOptions) -> Option<String> {
        match r {
            Rung::Functional => self.functional.as_ref().map(|f| functional_text(f, options)),
            Rung::Kernels => {
                let (s, f) = (self.scheduled.as_ref()?, self.functional.as_ref()?);
                Some(program_text(&s.program, f))
            }
            _ => self.graph_at(r).map(|g| crate::text::print_with(g, options)),
        }
    }
}

/// The two graphs the partitioner makes of a joint graph ([`partition`]): stages beside the
/// rungs, printed by [`dump`] and `ladder dump --stage forward|backward`.
pub const SPLIT_STAGES: [&str; 2] = ["forward", "backward"];

/// `g`'s joint graph for `d` (lowered in `mode` down to the joint rung), and its split into
/// a forward and a backward graph as `options` say (`crate::autodiff::partition`), each
/// simplified. Each half is an ordinary graph of prims: [`crate::compile`] compiles it like
/// any other.
pub fn partition(
    g: &Graph,
    mode: Mode,
    d: &Differentiate,
    options: &PartitionOptions,
) -> Result<(Joint, Partition), PipelineError> {
    let l = lower_with(g, mode, Rung::Joint, Some(d))?;
    let joint = l.joint.ok_or(PipelineError::NoLoss)?;
    let mut p = crate::autodiff::partition(&joint, options)?;
    // Each half simplified on its own (simplifying the joint graph first could merge the
    // loss's cotangent with a forward constant, and the split must see which is which).
    p.forward = crate::passes::lower::simplified(&p.forward, mode.keep())?;
    p.backward = crate::passes::lower::simplified(&p.backward, mode.keep())?;
    Ok((joint, p))
}

/// The text of rung `stage` of `g` lowered in `mode`; runs the passes only as far as that
/// rung. At `joint`, the first output is differentiated with respect to every float input
/// ([`Differentiate::first_output`]).
pub fn dump(g: &Graph, mode: Mode, stage: &str, options: &PrintOptions) -> Result<String, PipelineError> {
    if SPLIT_STAGES.contains(&stage) {
        let d = Differentiate::first_output(g).ok_or(PipelineError::NoLoss)?;
        let (_, p) = partition(g, mode, &d, &PartitionOptions::default())?;
        let half = if stage == "forward" { &p.forward } else { &p.backward };
        return Ok(crate::text::print_with(half, options));
    }
    let rung = Rung::from_name(stage)?;
    let differentiate = if rung == Rung::Joint { Differentiate::first_output(g) } else { None };
    if rung == Rung::Joint && differentiate.is_none() {
        return Err(PipelineError::NoLoss);
    }
    let l = lower_with(g, mode, rung, differentiate.as_ref())?;
    Ok(l.text(rung, options).expect("the rung was reached"))
}

/// A kernel program's text, with the functional graph's epilogue as `;` comment lines after it
/// (the program's outputs are the functional graph's, so mutated inputs are extra outputs).
pub fn program_text(p: &crate::kernel::Program, f: &Functional) -> String {
    let mut out = p.to_string();
    epilogue_comments(f, &mut out);
    out
}

/// A functional graph's text, with its epilogue as `;` comment lines after it.
pub fn functional_text(f: &Functional, options: &PrintOptions) -> String {
    let mut out = crate::text::print_with(&f.graph, options);
    epilogue_comments(f, &mut out);
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

fn epilogue_comments(f: &Functional, out: &mut String) {
    for m in &f.epilogue.mutations {
        let _ = writeln!(
            out,
            "; epilogue: copy output `{}` into input `{}`",
            f.graph.outputs()[m.output].name,
            f.graph.input_name(m.input)
        );
    }
}
