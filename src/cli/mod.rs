//! The `ladder` command line: argument definitions, the error type, and dispatch. Each
//! subcommand lives in its own file; `model` loads what they all work on.

mod bench;
mod bench_startup;
mod bench_steps;
mod check;
mod compile;
mod conformance;
mod coverage;
mod dump;
mod info;
mod model;
mod npy;
mod ops;
mod progress;
mod run;
mod train;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use ladder::interp::InterpError;

/// ladder: a tensor-graph compiler and runtime.
#[derive(Parser, Debug)]
#[command(name = "ladder", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Let ONNX models read tensor data kept in files beside them (external data). Only plain
    /// relative paths inside the model's folder are read, within the import size limits
    #[arg(long, global = true)]
    allow_external_data: bool,
    /// Tight limits for models from people you do not control (`Limits::untrusted`): 256 MiB
    /// of file and tensor data, 64 MiB per tensor, 65536 nodes, subgraphs 4 deep, 1 GiB per
    /// run, and for the interpreter 2^24 elements per value and about a second of work.
    /// Without it, limits that admit real models (`Limits::default`)
    #[arg(long, global = true)]
    untrusted: bool,
    /// Set one limit (repeatable), after --untrusted if given: e.g. `--limit max_nodes=100000`.
    /// NAME is one of max_file_bytes, max_tensor_bytes, max_nodes, max_depth,
    /// max_fold_elements, max_elements, max_run_bytes, fuel. An error from a limit reached names
    /// it
    #[arg(long = "limit", value_name = "NAME=VALUE", global = true, value_parser = parse_limit)]
    limits: Vec<(String, u64)>,
    /// No progress display and no notes on stderr (errors still print). Progress is only ever
    /// drawn when stderr is a terminal
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List every operator: rung, arity, attributes, and which implementations exist.
    Ops(ops::OpsArgs),
    /// Run a model (compiled for the CPU by default) and summarise (or save) its outputs.
    Run(run::RunArgs),
    /// Print a model in the text form, or draw it as a Graphviz graph (`--format dot|svg`).
    Dump(dump::DumpArgs),
    /// Run a model on a backend and on the interpreter (precise mode) and compare the outputs.
    Check(check::CheckArgs),
    /// Lower a model once and write it as an artifact (`-o model.ladder`) that every command
    /// loads without importing or lowering it again.
    Compile(compile::CompileArgs),
    /// Describe an ONNX model: inputs, outputs, opsets, op histogram, what ladder supports.
    Info(info::InfoArgs),
    /// Run the ONNX backend node tests (a folder of cases) and count passes.
    Conformance(conformance::ConformanceArgs),
    /// Time the built-in workloads (W0–W7, W9) or a model against floors measured in the same run,
    /// or (`--compile`) how compile time grows with graph size, or (`--startup`) a model's time
    /// to its first result with and without tiered start-up.
    Bench(bench::BenchArgs),
    /// Train a built-in model on synthetic data (forward, backward and optimizer as compiled
    /// plans), one line per epoch.
    Train(train::TrainArgs),
}

/// Why a command failed. Every variant prints as one clear message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read `{path}`: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write `{path}`: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("{0}")]
    Load(#[from] ladder::session::LoadError),
    #[error("{path}: {error}")]
    Onnx { path: PathBuf, error: Box<ladder::frontend::onnx::ImportError> },
    #[error("{0}")]
    Session(Box<ladder::session::SessionError>),
    #[error("`{path}` is not a usable .npy file: {message}")]
    Npy { path: PathBuf, message: String },
    #[error("input `{name}` (from `{path}`): {message}")]
    Input { name: String, path: PathBuf, message: String },
    #[error("the run failed: {0}")]
    Run(#[from] InterpError),
    #[error("{0}")]
    Usage(String),
    /// Arguments that do not go together or name nothing in the model (exit status 2, as
    /// clap's own usage errors).
    #[error("{0}")]
    Arguments(String),
    /// Writing to stdout failed (a closed pipe ends the program quietly).
    #[error("cannot write to stdout: {0}")]
    Stdout(io::Error),
}

impl From<ladder::session::SessionError> for Error {
    fn from(e: ladder::session::SessionError) -> Error {
        Error::Session(Box::new(e))
    }
}

/// Where a command runs a model.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendArg {
    /// Compiled plans on the CPU: Cranelift kernels, library kernels (softmax, norms,
    /// activations, attention, convolution, max pooling, LSTM) and GEMM, over threads. The
    /// fast path.
    Cpu,
    /// The reference interpreter: every op exactly as specified, on one thread. The oracle
    /// the other backends are checked against; slow.
    Interp,
    /// Generated kernels as SPIR-V compute shaders on a Vulkan device (lavapipe included),
    /// on f32, f16, bf16, integer and bool values, and f64 where the device has
    /// shaderFloat64, with matmul, convolution, cat, pad, rev, gather and scatter_add written
    /// as such kernels; on a GPU (or with LADDER_VULKAN_LIBRARY=1) f32 matmuls and
    /// convolutions run as a tiled GEMM shader (split along k for few rows), softmax,
    /// log_softmax, layer_norm and rms_norm as a row shader, and attention as an attention
    /// shader (online softmax, no stored scores), reducing on subgroup operations where the
    /// device has them (LADDER_VULKAN_SUBGROUPS=0: in workgroup memory). f32 pow with an exponent other than an integer of -4 to 4 needs f64 on
    /// the device. A program with a step the device lacks is refused with the step that stops
    /// it.
    Vulkan,
}

impl BackendArg {
    pub fn backend(self) -> ladder::BackendKind {
        match self {
            BackendArg::Cpu => ladder::BackendKind::Cpu,
            BackendArg::Interp => ladder::BackendKind::Interp,
            BackendArg::Vulkan => ladder::BackendKind::Vulkan,
        }
    }

    pub fn name(self) -> &'static str {
        self.backend().name()
    }
}

/// The machine's threads (what `--threads` defaults to where a command runs one model).
pub fn machine_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Writes a note to stderr (where everything that is not the command's result goes).
fn note(message: &str) {
    if progress::quiet() {
        return;
    }
    let _ = writeln!(io::stderr(), "note: {message}");
}

/// `NAME=VALUE` for `--limit`: a field of `ladder::Limits` and a non-negative integer.
fn parse_limit(s: &str) -> Result<(String, u64), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    ladder::Limits::default().get(name).ok_or_else(|| ladder::limits::UnknownLimit(name.to_string()).to_string())?;
    let value = value.trim().parse::<u64>().map_err(|e| format!("`{value}` for {name}: {e}"))?;
    Ok((name.to_string(), value))
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    progress::set_quiet(cli.quiet);
    let mut limits = if cli.untrusted { ladder::Limits::untrusted() } else { ladder::Limits::default() };
    for (name, value) in &cli.limits {
        // parse_limit accepted only names of Limits.
        limits.set(name, *value).expect("a limit's name checked by the argument parser");
    }
    model::set_import_options(ladder::frontend::onnx::ImportOptions {
        limits,
        allow_external_data: cli.allow_external_data,
        ..Default::default()
    });
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let result = match cli.command {
        Command::Ops(args) => ops::ops(&args, &mut out),
        Command::Run(args) => run::run(&args, &mut out),
        Command::Dump(args) => dump::dump(&args, &mut out),
        Command::Check(args) => check::check(&args, &mut out),
        Command::Compile(args) => compile::compile(&args, &mut out),
        Command::Info(args) => info::info(&args, &mut out),
        Command::Conformance(args) => conformance::conformance(&args, &mut out),
        Command::Bench(args) => bench::bench(&args, &mut out),
        Command::Train(args) => train::train(&args, &mut out),
    }
    .and_then(|()| out.flush().map_err(Error::Stdout));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Stdout(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e @ Error::Arguments(_)) => {
            let _ = out.flush();
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            // Drop buffered stdout quietly: a second error while flushing would only repeat
            // this one.
            let _ = out.flush();
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}
