//! `ladder dump`: print a model in the text form.

use std::io::Write;
use std::path::PathBuf;

use ladder::passes::STAGES;
use ladder::text::PrintOptions;

use super::{model, Error};

#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// Print `elided` instead of the data of blobs with more than N elements (such text is
    /// for reading only: it does not parse). Use a large N to print everything.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub elide: usize,
    /// The rung to print: `parsed` (as written), `functional` (no mutation or aliasing; the
    /// epilogue as comments), `prims` (decomposed), `simplified`, `recovered` (library-kernel
    /// ops put back by pattern), or `kernels` (the scheduled kernel program).
    #[arg(long, value_name = "NAME", default_value = "parsed")]
    pub stage: String,
    /// Print node counts per op (rows) and per rung (columns) instead of the graph.
    #[arg(long)]
    pub stats: bool,
    /// With `--stage kernels`: also print why the scheduler formed the kernels it did (what
    /// each covers and reads, what is materialised and why, why neighbours are not fused).
    /// With `--stage recovered`: every op recovery put back and every near-miss, with why.
    #[arg(long)]
    pub explain: bool,
    /// With `--stage kernels`: print each kernel's Cranelift IR as the CPU backend builds it
    /// (before Cranelift's own optimisation), or why the kernel runs on the reference executor.
    #[arg(long)]
    pub clif: bool,
    /// With `--stage kernels`: print each kernel's machine code (Cranelift's listing after
    /// register allocation), or why the kernel runs on the reference executor.
    #[arg(long)]
    pub asm: bool,
    /// Specialize the model for these sizes of its symbolic input dims (repeatable): for
    /// models that compile only for concrete shapes, and to see a rung for given sizes.
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = super::run::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// With `--stage kernels`: schedule the graph recovery produces (library kernels for
    /// softmax, norms, gelu and attention), which is what `--backend cpu` runs, instead of
    /// the plain prims the reference mode runs.
    #[arg(long)]
    pub recover: bool,
}

/// The model lowered and scheduled (from its recovered graph with `recover`), for the
/// `kernels` stage.
fn scheduled(g: &ladder::Graph, recover: bool) -> Result<(ladder::sched::Scheduled, ladder::passes::Lowered), Error> {
    let fail = |e: String| Error::Usage(format!("cannot lower the model to stage `kernels`: {e}"));
    let lowered = ladder::passes::lower(g).map_err(|e| fail(e.to_string()))?;
    let s = if recover {
        let r = ladder::recover::recover(&lowered.simplified).map_err(|e| fail(e.to_string()))?;
        ladder::sched::schedule_explained(&r.graph)
    } else {
        ladder::sched::schedule_explained(&lowered.simplified)
    }
    .map_err(|e| fail(e.to_string()))?;
    Ok((s, lowered))
}

pub fn dump(args: &DumpArgs, out: &mut dyn Write) -> Result<(), Error> {
    if !STAGES.contains(&args.stage.as_str()) {
        return Err(Error::Arguments(format!("unknown stage `{}` (stages: {})", args.stage, STAGES.join(", "))));
    }
    let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
    if args.stats {
        return out.write_all(ladder::passes::stats::stats_table(&g).as_bytes()).map_err(Error::Stdout);
    }
    if args.recover && args.stage != "kernels" {
        return Err(Error::Arguments("--recover goes with --stage kernels".into()));
    }
    if args.clif || args.asm {
        if args.stage != "kernels" {
            return Err(Error::Arguments("--clif and --asm go with --stage kernels".into()));
        }
        let (s, _) = scheduled(&g, args.recover)?;
        let mut text = String::new();
        for k in s.program.kernels() {
            let options = ladder::backend::cpu::CpuOptions::default();
            let code = if args.asm {
                ladder::backend::cpu::asm_text(k, &s.program, options)
            } else {
                ladder::backend::cpu::clif_text(k, &s.program, options)
            };
            match code {
                Ok(clif) => text.push_str(&format!("; kernel {}\n{clif}\n", k.name)),
                Err(e) => text.push_str(&format!("; kernel {}: runs on the reference executor: {e}\n\n", k.name)),
            }
        }
        return out.write_all(text.as_bytes()).map_err(Error::Stdout);
    }
    if args.explain && args.stage == "recovered" {
        let fail = |e: String| Error::Usage(format!("cannot lower the model to stage `recovered`: {e}"));
        let lowered = ladder::passes::lower(&g).map_err(|e| fail(e.to_string()))?;
        let r = ladder::recover::recover(&lowered.simplified).map_err(|e| fail(e.to_string()))?;
        let options = PrintOptions { elide_blobs_over: Some(args.elide) };
        let text = format!("{}{}", ladder::text::print_with(&r.graph, &options), r.explain(&lowered.simplified));
        return out.write_all(text.as_bytes()).map_err(Error::Stdout);
    }
    if args.explain || args.recover {
        if args.stage != "kernels" {
            return Err(Error::Arguments("--explain goes with --stage kernels or --stage recovered".into()));
        }
        let (s, lowered) = scheduled(&g, args.recover)?;
        let text = ladder::passes::pipeline::program_text(&s.program, &lowered.functional);
        let explanation = if args.explain { s.explanation.as_str() } else { "" };
        return out.write_all(format!("{text}{explanation}").as_bytes()).map_err(Error::Stdout);
    }
    let options = PrintOptions { elide_blobs_over: Some(args.elide) };
    let text = ladder::passes::dump(&g, &args.stage, &options)
        .map_err(|e| Error::Usage(format!("cannot lower the model to stage `{}`: {e}", args.stage)))?;
    out.write_all(text.as_bytes()).map_err(Error::Stdout)
}
