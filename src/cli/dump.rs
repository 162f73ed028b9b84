//! `ladder dump`: print a model in the text form, or draw it as a Graphviz graph.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ladder::passes::STAGES;
use ladder::text::PrintOptions;

use super::{model, Error};

/// What `dump` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The text form (kernel program text at `--stage kernels`).
    Text,
    /// A Graphviz DOT digraph: one node per value (per buffer and step at `--stage kernels`,
    /// each kernel a cluster of its stages).
    Dot,
    /// That digraph rendered to SVG by Graphviz's `dot` program, which must be on PATH.
    Svg,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Example: ladder dump --stage kernels --recover --format dot > encoder.dot")]
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
    /// With `--stage kernels`: schedule the graph native mode lowers (`lstm` and `max_pool2d`
    /// kept whole) and recovery completes (library kernels for softmax, norms, gelu, silu,
    /// sigmoid and attention), which is what `--backend cpu` runs, instead of the plain prims
    /// the reference mode runs.
    #[arg(long)]
    pub recover: bool,
    /// `text` (the text form), `dot` (a Graphviz digraph of the stage: values and their
    /// uses; at `--stage kernels` buffers and steps, each kernel a cluster, recovered library
    /// ops coloured) or `svg` (the digraph rendered by Graphviz's `dot`, which must be on PATH).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    pub format: Format,
}

/// The model lowered and scheduled (from its recovered graph with `recover`), for the
/// `kernels` stage.
fn scheduled(g: &ladder::Graph, recover: bool) -> Result<(ladder::sched::Scheduled, ladder::passes::Lowered), Error> {
    let fail = |e: String| Error::Usage(format!("cannot lower the model to stage `kernels`: {e}"));
    let lowered = if recover { ladder::passes::lower_native(g) } else { ladder::passes::lower(g) }
        .map_err(|e| fail(e.to_string()))?;
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
    if args.format != Format::Text {
        let flag = [("--stats", args.stats), ("--explain", args.explain), ("--clif", args.clif), ("--asm", args.asm)]
            .into_iter()
            .find_map(|(flag, on)| on.then_some(flag));
        if let Some(flag) = flag {
            return Err(Error::Arguments(format!("{flag} goes with --format text")));
        }
    }
    let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
    if args.stats {
        return out.write_all(ladder::passes::stats::stats_table(&g).as_bytes()).map_err(Error::Stdout);
    }
    if args.recover && args.stage != "kernels" {
        return Err(Error::Arguments("--recover goes with --stage kernels".into()));
    }
    if args.format != Format::Text {
        return draw(args, &g, out);
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
        let lowered = ladder::passes::lower_native(&g).map_err(|e| fail(e.to_string()))?;
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

/// `--format dot|svg`: the stage's graph (or program) as DOT, rendered to SVG for `svg`.
fn draw(args: &DumpArgs, g: &ladder::Graph, out: &mut dyn Write) -> Result<(), Error> {
    use ladder::text::dot::{graph_to_dot_with, program_to_dot_with, DotOptions};
    let title = format!("{}: {}", g.name, args.stage);
    let dot = if args.stage == "kernels" {
        let (s, _) = scheduled(g, args.recover)?;
        let title = if args.recover { format!("{title} (recovered)") } else { title };
        program_to_dot_with(&s.program, &DotOptions { title: Some(title), mark_recovered: true })
    } else {
        let graph = stage_graph(g, &args.stage)?;
        let options = DotOptions { title: Some(title), mark_recovered: args.stage == "recovered" };
        graph_to_dot_with(&graph, &options)
    };
    let bytes = match args.format {
        Format::Svg => render_svg(&dot)?,
        Format::Dot | Format::Text => dot.into_bytes(),
    };
    out.write_all(&bytes).map_err(Error::Stdout)
}

/// The graph of rung `stage` (not `kernels`), each pass verified as `ladder::passes::dump`
/// does; runs the passes only as far as that rung.
fn stage_graph(g: &ladder::Graph, stage: &str) -> Result<ladder::Graph, Error> {
    use ladder::ir::verify::{verify, Stage};
    use ladder::passes::PipelineError;
    let check = |pass: &'static str, g: &ladder::Graph, s: Stage| {
        verify(g, s).map_err(|errors| PipelineError::Invalid { pass, errors })
    };
    let lowered = (|| -> Result<ladder::Graph, PipelineError> {
        check("input", g, Stage::HighLevel)?;
        if stage == "parsed" {
            return Ok(g.clone());
        }
        let functional = ladder::passes::functionalize(g)?;
        check("functionalize", &functional.graph, Stage::Functional)?;
        if stage == "functional" {
            return Ok(functional.graph);
        }
        let prims = ladder::passes::decompose(&functional.graph)?;
        check("decompose", &prims, Stage::Prims)?;
        if stage == "prims" {
            return Ok(prims);
        }
        let simplified = ladder::passes::simplify(&prims, &ladder::passes::SimplifyOptions::default())?.graph;
        check("simplify", &simplified, Stage::Prims)?;
        if stage == "simplified" {
            return Ok(simplified);
        }
        // Native mode's rung: recovery on the lowering that keeps `recover::KEPT` whole.
        let native = ladder::passes::lower_native(g)?;
        Ok(ladder::recover::recover(&native.simplified)?.graph)
    })();
    lowered.map_err(|e| Error::Usage(format!("cannot lower the model to stage `{stage}`: {e}")))
}

/// `dot` rendered by Graphviz (`dot -Tsvg`); a usage error (exit status 2) when Graphviz's
/// `dot` is not on PATH.
fn render_svg(dot: &str) -> Result<Vec<u8>, Error> {
    let spawned =
        Command::new("dot").arg("-Tsvg").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::Arguments(
                "--format svg needs Graphviz: its `dot` program is not on PATH; install Graphviz, or use \
                 --format dot and render the DOT text elsewhere"
                    .into(),
            ))
        }
        Err(e) => return Err(Error::Usage(format!("cannot run Graphviz's `dot`: {e}"))),
    };
    let Some(mut stdin) = child.stdin.take() else {
        return Err(Error::Usage("cannot write to Graphviz's `dot`: its input is not a pipe".into()));
    };
    // Writing from another thread while this one reads: `dot` may fill its stdout pipe before
    // it has read all of its input.
    let (written, output) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || stdin.write_all(dot.as_bytes()));
        let output = child.wait_with_output();
        (writer.join(), output)
    });
    let output = output.map_err(|e| Error::Usage(format!("cannot run Graphviz's `dot`: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Error::Usage(format!("Graphviz's `dot -Tsvg` failed ({}): {}", output.status, stderr.trim())));
    }
    match written {
        Ok(Ok(())) => Ok(output.stdout),
        Ok(Err(e)) => Err(Error::Usage(format!("cannot write the graph to Graphviz's `dot`: {e}"))),
        Err(_) => Err(Error::Usage("cannot write the graph to Graphviz's `dot`".into())),
    }
}
