//! `ladder dump`: print a model in the text form, or draw it as a Graphviz graph.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ladder::pipeline::{Differentiate, Lowering, Mode, Rung};
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
#[command(after_help = "Example: ladder dump --stage kernels --format dot > encoder.dot")]
pub struct DumpArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// Print `elided` instead of the data of blobs with more than N elements (such text is
    /// for reading only: it does not parse). Use a large N to print everything.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub elide: usize,
    /// The rung to print: `parsed` (as written), `functional` (no mutation or aliasing; the
    /// epilogue as comments), `prims` (decomposed), `joint` (the prims graph with a loss's
    /// gradients as extra outputs: see `--loss`), `simplified`, `recovered` (library-kernel
    /// ops put back by pattern), or `kernels` (the scheduled kernel program). Or one half of
    /// the joint graph as the partitioner splits it: `forward` (the forward outputs, then the
    /// values saved for the backward as outputs `saved_*`) or `backward` (the gradients from
    /// the saved values and inputs, recomputing the rest); see `--partition`.
    #[arg(long, value_name = "NAME", default_value = "parsed")]
    pub stage: String,
    /// With `--stage forward|backward`: how the joint graph is split. `min-cut` saves the
    /// fewest bytes (a minimum cut; matmul, conv, shrinking reductions and library ops are
    /// never recomputed), `save-all` saves every forward value the backward reads,
    /// `recompute-all` saves only inputs and what may not be recomputed. With `--explain`,
    /// each saved value and why, and the bytes and FLOPs of all three.
    #[arg(long, value_name = "POLICY", default_value = "min-cut", value_parser = ["min-cut", "save-all", "recompute-all"])]
    pub partition: String,
    /// With `--stage forward|backward`: values (by name) the partition must save.
    #[arg(long, value_name = "VALUE,...", value_delimiter = ',')]
    pub save: Vec<String>,
    /// With `--stage forward|backward`: values (by name) to recompute wherever something else
    /// can be saved instead.
    #[arg(long, value_name = "VALUE,...", value_delimiter = ',')]
    pub recompute: Vec<String>,
    /// Differentiate this output (a float scalar; the first output when omitted): the
    /// `joint` stage, and the stages below it, then carry the gradients of this loss as extra
    /// outputs named `grad_<input>`. Goes with `--stage joint` or a later stage.
    #[arg(long, value_name = "OUTPUT")]
    pub loss: Option<String>,
    /// The inputs to differentiate, comma-separated (every float input when omitted). Goes
    /// with `--stage joint` or a later stage.
    #[arg(long, value_name = "INPUT,...", value_delimiter = ',')]
    pub wrt: Vec<String>,
    /// Print node counts per op (rows) and per rung (columns) instead of the graph.
    #[arg(long)]
    pub stats: bool,
    /// With `--stage recovered`: every op recovery put back and every near-miss, with why.
    /// With `--stage kernels`: that too, then why the scheduler formed the kernels it did
    /// (what each covers and reads, what is materialised and why, why neighbours are not
    /// fused).
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
    /// Lower without recovery, as the reference plan and `run --no-recover` do (every op
    /// decomposed to prims) instead of as the native plan does (the default: `lstm` and
    /// `max_pool2d` kept whole, library kernels for softmax, norms, gelu, silu, sigmoid and
    /// attention recovered). There is no `recovered` stage then.
    #[arg(long)]
    pub no_recover: bool,
    /// `text` (the text form), `dot` (a Graphviz digraph of the stage: values and their
    /// uses; at `--stage kernels` buffers and steps, each kernel a cluster, recovered library
    /// ops coloured) or `svg` (the digraph rendered by Graphviz's `dot`, which must be on PATH).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Text)]
    pub format: Format,
}

/// What the `joint` rung differentiates: `--loss` and `--wrt`, each defaulting (the first
/// output, every float input) when the other is given or the stage is `joint`.
fn differentiate(args: &DumpArgs, g: &ladder::Graph, rung: Rung) -> Result<Option<Differentiate>, Error> {
    let asked = args.loss.is_some() || !args.wrt.is_empty();
    if !asked && rung != Rung::Joint {
        return Ok(None);
    }
    let Some(default) = Differentiate::first_output(g) else {
        return Err(Error::Usage("the model has no output to differentiate".into()));
    };
    let loss = args.loss.clone().unwrap_or(default.loss);
    let wrt = if args.wrt.is_empty() { default.wrt } else { args.wrt.clone() };
    Ok(Some(Differentiate { loss, wrt }))
}

/// `g` lowered down to `rung` in the mode the arguments choose.
fn lowered(args: &DumpArgs, g: &ladder::Graph, rung: Rung) -> Result<Lowering, Error> {
    let mode = if args.no_recover { Mode::Reference } else { Mode::Native };
    let differentiate = differentiate(args, g, rung)?;
    ladder::pipeline::lower_with(g, mode, rung, differentiate.as_ref())
        .map_err(|e| Error::Usage(format!("cannot lower the model to stage `{}`: {e}", rung.name())))
}

pub fn dump(args: &DumpArgs, out: &mut dyn Write) -> Result<(), Error> {
    let split = ladder::pipeline::SPLIT_STAGES.contains(&args.stage.as_str());
    let partition_flags = args.partition != "min-cut" || !args.save.is_empty() || !args.recompute.is_empty();
    if partition_flags && !split {
        return Err(Error::Arguments("--partition, --save and --recompute go with --stage forward|backward".into()));
    }
    if split {
        return dump_split(args, out);
    }
    let rung = Rung::from_name(&args.stage).map_err(|e| Error::Arguments(e.to_string()))?;
    if args.format != Format::Text {
        let flag = [("--stats", args.stats), ("--explain", args.explain), ("--clif", args.clif), ("--asm", args.asm)]
            .into_iter()
            .find_map(|(flag, on)| on.then_some(flag));
        if let Some(flag) = flag {
            return Err(Error::Arguments(format!("{flag} goes with --format text")));
        }
    }
    if args.no_recover && rung == Rung::Recovered {
        return Err(Error::Arguments("--no-recover has no `recovered` stage".into()));
    }
    if (args.clif || args.asm) && rung != Rung::Kernels {
        return Err(Error::Arguments("--clif and --asm go with --stage kernels".into()));
    }
    if (args.loss.is_some() || !args.wrt.is_empty()) && (rung < Rung::Joint || args.stats) {
        return Err(Error::Arguments("--loss and --wrt go with --stage joint or a later stage".into()));
    }
    if args.explain && !matches!(rung, Rung::Kernels | Rung::Recovered) {
        return Err(Error::Arguments("--explain goes with --stage kernels, recovered, forward or backward".into()));
    }
    let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
    if args.stats {
        let mode = if args.no_recover { Mode::Reference } else { Mode::Native };
        return out.write_all(ladder::pipeline::stats::stats_table(&g, mode).as_bytes()).map_err(Error::Stdout);
    }
    let l = lowered(args, &g, rung)?;
    if args.format != Format::Text {
        return draw(args, &l, rung, out);
    }
    let scheduled = l.scheduled.as_ref();
    let text = match scheduled {
        Some(s) if args.clif || args.asm => {
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
            text
        }
        _ => {
            let options = PrintOptions { elide_blobs_over: Some(args.elide) };
            let mut text = l.text(rung, &options).unwrap_or_default();
            if args.explain {
                // What recovery put back, then (at `kernels`) how the schedule was formed:
                // the explanation a plan keeps.
                if let (Some(r), Some(simplified)) = (&l.recovered, &l.simplified) {
                    text.push_str(&r.explain(simplified));
                }
                if let Some(s) = scheduled {
                    text.push_str(&s.explanation);
                }
            }
            text
        }
    };
    out.write_all(text.as_bytes()).map_err(Error::Stdout)
}

/// `--stage forward|backward`: the joint graph (as `--loss` and `--wrt` say) split by the
/// partitioner, one half printed or drawn; `--explain` adds the partition's report.
fn dump_split(args: &DumpArgs, out: &mut dyn Write) -> Result<(), Error> {
    let flag = [("--stats", args.stats), ("--clif", args.clif), ("--asm", args.asm)]
        .into_iter()
        .find_map(|(flag, on)| on.then_some(flag));
    if let Some(flag) = flag {
        return Err(Error::Arguments(format!("{flag} does not go with --stage {}", args.stage)));
    }
    if args.explain && args.format != Format::Text {
        return Err(Error::Arguments("--explain goes with --format text".into()));
    }
    let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
    let d = differentiate(args, &g, Rung::Joint)?.ok_or_else(|| Error::Usage("nothing to differentiate".into()))?;
    let mode = if args.no_recover { Mode::Reference } else { Mode::Native };
    let options = ladder::autodiff::PartitionOptions {
        policy: ladder::autodiff::Policy::from_name(&args.partition).unwrap_or_default(),
        must_save: args.save.clone(),
        prefer_recompute: args.recompute.clone(),
        dims: args.dims.clone(),
        ..Default::default()
    };
    let (joint, p) = ladder::pipeline::partition(&g, mode, &d, &options)
        .map_err(|e| Error::Usage(format!("cannot split the model's joint graph: {e}")))?;
    let half = if args.stage == "forward" { &p.forward } else { &p.backward };
    let bytes = match args.format {
        Format::Text => {
            let mut text = ladder::text::print_with(half, &PrintOptions { elide_blobs_over: Some(args.elide) });
            if args.explain {
                text.push_str(&p.explain(&joint));
            }
            text.into_bytes()
        }
        Format::Dot | Format::Svg => {
            use ladder::dot::{graph_to_dot_with, DotOptions};
            let title = format!("{}: {} ({})", g.name, args.stage, args.partition);
            let dot = graph_to_dot_with(half, &DotOptions { title: Some(title), mark_recovered: false });
            if args.format == Format::Svg {
                render_svg(&dot)?
            } else {
                dot.into_bytes()
            }
        }
    };
    out.write_all(&bytes).map_err(Error::Stdout)
}

/// `--format dot|svg`: the stage's graph (or program) as DOT, rendered to SVG for `svg`.
fn draw(args: &DumpArgs, l: &Lowering, rung: Rung, out: &mut dyn Write) -> Result<(), Error> {
    use ladder::dot::{graph_to_dot_with, program_to_dot_with, DotOptions};
    let title = format!("{}: {}", l.parsed.name, args.stage);
    let title = if args.no_recover { format!("{title} (no recovery)") } else { title };
    let dot = match (&l.scheduled, l.graph_at(rung)) {
        (Some(s), _) => program_to_dot_with(&s.program, &DotOptions { title: Some(title), mark_recovered: true }),
        (None, Some(graph)) => {
            let options = DotOptions { title: Some(title), mark_recovered: rung == Rung::Recovered };
            graph_to_dot_with(graph, &options)
        }
        (None, None) => return Err(Error::Usage(format!("nothing to draw at stage `{}`", args.stage))),
    };
    let bytes = match args.format {
        Format::Svg => render_svg(&dot)?,
        Format::Dot | Format::Text => dot.into_bytes(),
    };
    out.write_all(&bytes).map_err(Error::Stdout)
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
