//! `ladder compile`: a model lowered once into an artifact (`ladder::artifact`) that `ladder
//! run`, `bench`, `check` and the library's `Model::load` load without importing or lowering
//! it again.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use ladder::artifact::Artifact;
use ladder::pipeline::Mode;
use ladder::Session;

use super::{model, Error};

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// Where to write the artifact (by convention `NAME.ladder`).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Specialize the model for these sizes of its symbolic input dims (repeatable): for a
    /// model that does not compile for symbolic shapes (`ladder info` lists its symbols).
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = super::run::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Store the reference lowering (every op decomposed to prims, nothing recovered into
    /// library kernels) instead of the native one.
    #[arg(long)]
    pub no_recover: bool,
}

pub fn compile(args: &CompileArgs, out: &mut dyn Write) -> Result<(), Error> {
    if let Some(path) = &args.model {
        // The magic is all that is needed: the model itself is read once, below.
        let is_artifact =
            ladder::artifact::file_is_artifact(path).map_err(|source| Error::Read { path: path.clone(), source })?;
        if is_artifact {
            return Err(Error::Arguments(format!("`{}` is already a compiled artifact", path.display())));
        }
    }
    let start = Instant::now();
    let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
    let mode = if args.no_recover { Mode::Reference } else { Mode::Native };
    let source = args
        .model
        .as_ref()
        .and_then(|p| p.file_name())
        .map_or("(built-in example)".into(), |n| n.to_string_lossy().into_owned());
    let artifact =
        Artifact::lower(&g, mode, &source).map_err(|e| Error::Usage(format!("cannot lower the model: {e}")))?;
    let lowered_ms = start.elapsed().as_secs_f64() * 1e3;
    // The artifact is only useful if its plan compiles: check that before writing it.
    let options = super::run::compile_options(ladder::BackendKind::Cpu, !args.no_recover, false, 1)?;
    let start = Instant::now();
    let session = Session::new(ladder::Model::from_artifact(artifact.clone()), options.clone())?;
    if let Some(why) = session.specialized_because() {
        return Err(Error::Arguments(format!(
            "the model needs concrete input sizes to compile ahead of time ({why}): give its symbolic dims with --dim SYMBOL=N"
        )));
    }
    let plan_ms = start.elapsed().as_secs_f64() * 1e3;
    let bytes = artifact.to_bytes();
    std::fs::write(&args.output, &bytes).map_err(|source| Error::Write { path: args.output.clone(), source })?;
    // Start-up both ways, as a program that embeds ladder sees it: the model file read,
    // imported, lowered and compiled, against the artifact read and compiled (medians of 5).
    let median = |f: &dyn Fn() -> Result<(), Error>| -> Result<f64, Error> {
        let mut t = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            f()?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    let from_model = median(&|| {
        let g = model::load_graph_for(args.model.as_deref(), &args.dims)?;
        Session::new(ladder::Model::from_graph(g), options.clone())?;
        Ok(())
    })?;
    let from_artifact = median(&|| {
        let model = ladder::Model::load_with(&args.output, &model::import_options())?;
        Session::new(model, options.clone())?;
        Ok(())
    })?;
    let weights: usize = artifact.graph.blobs().map(|(_, b)| b.tensor.numel() * b.tensor.dtype().size_bytes()).sum();
    writeln!(
        out,
        "wrote {}: {} bytes ({} of weights in {} blobs), format version {}, {} lowering ({} nodes); lowered in {lowered_ms:.1} ms, its plan compiles in {plan_ms:.1} ms",
        args.output.display(),
        bytes.len(),
        weights,
        artifact.graph.blobs().count(),
        ladder::artifact::FORMAT_VERSION,
        if args.no_recover { "reference" } else { "native" },
        artifact.graph.len(),
    )
    .map_err(Error::Stdout)?;
    writeln!(
        out,
        "start-up to a compiled plan: {from_model:.1} ms from the model (read, import, lower, compile), {from_artifact:.1} ms from the artifact (read, compile)"
    )
    .map_err(Error::Stdout)
}
