//! `ladder bench`: time the built-in workloads (W0–W7, W9) or a model against floors measured in
//! the same run (see `ladder::bench`), with `--compile` how long graphs of 1k to 100k nodes
//! take to compile (C1–C4), with `--train` training steps (T1–T2), or with `--startup` a
//! model's time to its first result with and without tiered start-up, as a table or as JSON.

use std::io::Write;
use std::path::PathBuf;

use ladder::bench::{self, BackendKind, Floors, Measurement};

use super::run::{parse_dim, parse_input, prepare_inputs, RunArgs};
use super::{model, note, BackendArg, Error};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); without one, the built-in workloads W0–W7
    /// and W9.
    pub model: Option<PathBuf>,
    /// Read input NAME from a .npy file (repeatable); other inputs are generated from --seed.
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Thread counts to measure (comma-separated or repeated) [default: 1,2; with --compile and
    /// --startup: the machine's threads, what a plan compiles its kernels on].
    #[arg(long, value_name = "N", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Time compilation instead of runs: the compile workloads C1–C4 (an elementwise chain, a
    /// chain of row reductions and broadcasts, encoder stacks and ResNet stacks, of 1k to 100k
    /// nodes), each compiled by `ladder::compile` for the CPU backend in native mode (lowering,
    /// recovery, scheduling, Cranelift code generation, weight packing: what `compile_ms`
    /// reports for the W workloads). Prints nodes, the median compile time, microseconds per
    /// node, time ratio and scaling exponent against the family's smallest size measured (1.0
    /// is linear), and the heap's high-water mark during one compilation (the JIT's code memory
    /// not counted). All of them take a minute or two; --workload picks some.
    #[arg(long)]
    pub compile: bool,
    /// Time training steps instead of runs: one step (forward, backward, Adam update, as
    /// `ladder train` runs it) of T1 (an MLP, batch 64, 256→512→10) and T2 (the transformer of
    /// `ladder train --task transformer`: 2 layers, d 128, seq 64, batch 8). Prints the median
    /// step time, the bytes saved between forward and backward by the partitioner against
    /// saving everything, and the heap's high-water mark during a step. PyTorch eager on the
    /// same step: tools/bench_train_torch.py.
    #[arg(long, conflicts_with = "compile")]
    pub train: bool,
    /// Time a model's start-up instead of its runs: from the loaded model to the first result
    /// compiling everything first (`Session::new`), and tiered (`Session::new_tiered`: the
    /// first result from the reference interpreter while the native plan compiles on a
    /// background thread); when the native plan took over; and one warm run on each tier.
    /// Medians of --runs start-ups each way (default 5, after one untimed), at each --threads
    /// count (default: the machine's threads). onnxruntime's session creation plus first run
    /// on the real-model corpus: tools/corpus/bench.py --startup.
    #[arg(long, conflicts_with_all = ["compile", "train"], requires = "model")]
    pub startup: bool,
    /// Timed runs per measurement (default: at least 10 runs and 0.5 s, fewer for slow runs;
    /// with --compile: as many as fit in about 3 s after a warm-up, 3 to 10, or a single one
    /// when it takes over 2 s; with --startup: start-ups each way, default 5).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub runs: Option<usize>,
    /// Print a JSON array of results instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only the built-in workloads whose names start with these prefixes (e.g. W1,W6; with
    /// --compile, e.g. C1,C3_encoder_1k).
    #[arg(long = "workload", value_name = "PREFIX", value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Where to run. With `vulkan`, the floors are the device's own, measured in the same run:
    /// the io bytes at its copy rate (vkCmdCopyBuffer), or the FLOPs at its f32 FMA rate; a
    /// workload the device cannot run (a step it lacks, or a buffer larger than it binds at
    /// once) is noted and skipped.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// Seed for generated model inputs.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Size of a symbolic input dim of the model (repeatable).
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// With `--backend cpu`: run softmax, log_softmax, layer_norm, rms_norm, gelu, silu, sigmoid
    /// and attention as generated kernels instead of recovering them into library kernels (to
    /// compare the two).
    #[arg(long)]
    pub no_recover: bool,
    /// With `--backend cpu`: multiply by constant weights through the `gemm` crate instead of
    /// packing them for ladder's own GEMM kernel when the plan is built (to compare the two).
    #[arg(long)]
    pub no_pack_weights: bool,
    /// With `--backend cpu`: after each measurement, the median time of every step of the plan
    /// (kernels, GEMMs with their epilogues, library calls, graph breaks) and its share; with
    /// `--train`, of the forward plan's steps and the update plan's (backward, then Adam).
    #[arg(long)]
    pub profile: bool,
}

pub fn bench(args: &BenchArgs, out: &mut dyn Write) -> Result<(), Error> {
    let backend = args.backend.backend();
    if args.threads.contains(&0) {
        return Err(Error::Arguments("--threads must be at least 1".into()));
    }
    let native = bench::Native { recover: !args.no_recover, pack_weights: !args.no_pack_weights };
    if args.compile {
        return super::bench_steps::bench_compile(args, native, out);
    }
    if args.train {
        return super::bench_steps::bench_train(args, out);
    }
    if args.startup {
        return super::bench_startup::bench_startup(args, out);
    }
    let threads = if args.threads.is_empty() { vec![1, 2] } else { args.threads.clone() };
    let usage = |e: bench::BenchError| Error::Usage(e.to_string());
    let mut work = Vec::new();
    match &args.model {
        Some(path) => {
            if !args.workloads.is_empty() {
                return Err(Error::Arguments(
                    "--workload selects built-in workloads; it does not apply to a model".into(),
                ));
            }
            let (model, inputs) = model_and_inputs(path, args)?;
            // The graph for every shape, or the one specialized for these inputs (their shapes
            // and the values the model's graph depends on).
            let interp = super::run::compile_options(BackendKind::Interp, false, false, 1)?;
            let lowered = model.artifact().cloned();
            let g = super::run::session(model, Some(path), interp)?.plan_for(&inputs)?.graph().clone();
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
            let mut w = bench::model_workload(&name, g, inputs).map_err(usage)?;
            w.lowered = lowered;
            work.push(w);
        }
        None => {
            if !args.inputs.is_empty() || !args.dims.is_empty() {
                return Err(Error::Arguments("--input and --dim apply to a model file only".into()));
            }
            for name in bench::select(&args.workloads).map_err(|e| Error::Arguments(e.to_string()))? {
                work.push(bench::workload(name).map_err(usage)?);
            }
        }
    }
    if backend != BackendKind::Cpu && args.profile {
        return Err(Error::Arguments("--profile times the steps of a CPU plan: use --backend cpu".into()));
    }
    if args.profile && args.json {
        return Err(Error::Arguments("--profile prints a table; it does not go with --json".into()));
    }
    if backend == BackendKind::Interp {
        note("the interpreter is single-threaded: --threads only sizes the pool it runs in");
    }
    let mut floors = Floors::default();
    if backend == BackendKind::Vulkan {
        // The device's floors first: a machine without a device stops here, with the reason.
        super::progress::spin("measuring the Vulkan device's copy and FMA rates", || {
            floors.device_floors().map(|_| ())
        })
        .map_err(usage)?;
    }
    let mut results: Vec<Measurement> = Vec::new();
    for w in &work {
        for &threads in &threads {
            let m = super::progress::spin(&format!("{} at {threads} thread(s)", w.name), || {
                bench::run(w, backend, threads, args.runs, &mut floors, native)
            });
            let m = match m {
                Err(bench::BenchError::Unsupported(reason)) => {
                    note(&format!("{}: not run on the {} backend: {reason}", w.name, backend.name()));
                    break;
                }
                m => m.map_err(usage)?,
            };
            if !args.json {
                if results.is_empty() {
                    writeln!(
                        out,
                        "{:<26} {:>3} {:>12} {:>9} {:>9} {:>12} {:>8} {:>11} {:>12}",
                        "workload",
                        "thr",
                        "median_us",
                        "GB/s",
                        "GFLOP/s",
                        "floor_us",
                        "floor/t",
                        "compile_ms",
                        "peak_bytes"
                    )
                    .map_err(Error::Stdout)?;
                }
                let gflops = if m.flops > 0.0 { format!("{:9.1}", m.gflops()) } else { format!("{:>9}", "-") };
                let peak = m.peak_bytes.map_or_else(|| "-".to_string(), |b| b.to_string());
                writeln!(
                    out,
                    "{:<26} {:>3} {:>12.1} {:>9.2} {} {:>12.1} {:>8.3} {:>11.3} {:>12}",
                    m.workload,
                    m.threads,
                    m.timing.median_us,
                    m.gbps(),
                    gflops,
                    m.floor_us,
                    m.floor_ratio,
                    m.compile_ms,
                    peak
                )
                .map_err(Error::Stdout)?;
                out.flush().map_err(Error::Stdout)?;
            }
            if args.profile && backend == BackendKind::Cpu && !args.json {
                let steps = super::progress::spin(&format!("profiling {} at {threads} thread(s)", w.name), || {
                    bench::profile(w, threads, args.runs.unwrap_or(20), native)
                })
                .map_err(usage)?;
                let total: f64 = steps.iter().map(|s| s.median_us).sum();
                for s in &steps {
                    let share = if total > 0.0 { 100.0 * s.median_us / total } else { 0.0 };
                    writeln!(out, "    {:<44} {:>12.1} {:>5.1}%", s.label, s.median_us, share)
                        .map_err(Error::Stdout)?;
                }
            }
            results.push(m);
        }
    }
    if args.json {
        let array: Vec<serde_json::Value> = results.iter().map(Measurement::to_json).collect();
        let text = serde_json::to_string_pretty(&array).map_err(|e| Error::Usage(e.to_string()))?;
        writeln!(out, "{text}").map_err(Error::Stdout)?;
    } else if let Some(f) = floors.device_measured() {
        writeln!(
            out,
            "floor/t = floor_ratio (floor time / ladder time); floors on the Vulkan device {}, measured in this run: \
             the io bytes at its copy rate, or the FLOPs at its f32 FMA rate",
            f.device
        )
        .map_err(Error::Stdout)?;
        writeln!(
            out,
            "the device's copy rate: {:.2} GB/s (vkCmdCopyBuffer of {} MiB between buffers of the memory \
             plans use; bytes read + written; {}, median of {})",
            f.copy_bytes_per_s / 1e9,
            f.copy_bytes >> 20,
            f.clock,
            f.runs
        )
        .map_err(Error::Stdout)?;
        writeln!(
            out,
            "the device's f32 FMA rate: {:.1} GFLOP/s ({} independent FMA chains in each of {} invocations; {}, \
             median of {})",
            f.fma_flops_per_s / 1e9,
            f.fma_chains,
            f.fma_invocations,
            f.clock,
            f.runs
        )
        .map_err(Error::Stdout)?;
        writeln!(
            out,
            "peak_bytes = host memory of one warm run beyond inputs and outputs (heap high-water mark; device \
             buffers not counted)"
        )
        .map_err(Error::Stdout)?;
    } else {
        let rates: Vec<String> =
            floors.gemm_measured().iter().map(|(t, g)| format!("{g:.0} GFLOP/s at {t} thread(s)")).collect();
        let rates = if rates.is_empty() { String::new() } else { format!(": {}", rates.join(", ")) };
        let own = ladder::backend::cpu::packed::baseline();
        let gemm = if own { "ladder's own SSE kernel's" } else { "the gemm crate's" };
        writeln!(
            out,
            "floor/t = floor_ratio (floor time / ladder time); floors: a copy of the io bytes, or the FLOPs at \
             {gemm} 1024^3 sgemm rate{rates}"
        )
        .map_err(Error::Stdout)?;
        if !floors.fma_measured().is_empty() {
            let peaks: Vec<String> =
                floors.fma_measured().iter().map(|(t, g)| format!("{g:.0} GFLOP/s at {t} thread(s)")).collect();
            // The x86-64 baseline level has no fused multiply-add: its peak is of multiplies and adds.
            let chains = if own {
                "multiply-add peak (independent SSE multiply and add"
            } else {
                "FMA peak (independent vector FMA"
            };
            writeln!(out, "the machine's f32 {chains} chains): {}", peaks.join(", ")).map_err(Error::Stdout)?;
        }
        writeln!(
            out,
            "peak_bytes = working memory of one warm run beyond inputs and outputs (arena + heap high-water mark)"
        )
        .map_err(Error::Stdout)?;
        use ladder::backend::cpu::isa;
        let products = if own {
            "f32 products ladder's own SSE kernel (the gemm crate has only scalar code there)".to_string()
        } else {
            format!("the gemm crate {} (it detects the CPU itself)", isa::gemm_crate_isa().name())
        };
        writeln!(
            out,
            "paths: ladder's kernels {} (CPU {}, cap {}: {}); {products}",
            isa::active().name(),
            isa::detected().name(),
            isa::max_isa().name(),
            isa::ENV,
        )
        .map_err(Error::Stdout)?;
        for m in results.iter().filter(|m| m.scores_bytes > 0) {
            if let Some(peak) = m.peak_bytes {
                writeln!(
                    out,
                    "{} at {} thread(s): peak_bytes {peak} = {:.5} x the {} bytes of its materialised f32 scores",
                    m.workload,
                    m.threads,
                    peak as f64 / m.scores_bytes as f64,
                    m.scores_bytes
                )
                .map_err(Error::Stdout)?;
            }
        }
    }
    Ok(())
}

/// The model at `path` and its inputs as `ladder run` would make them from `args` (`--input`,
/// `--dim`, `--seed`).
pub(super) fn model_and_inputs(
    path: &std::path::Path,
    args: &BenchArgs,
) -> Result<(ladder::Model, Vec<ladder::Tensor>), Error> {
    let model = model::load(Some(path))?;
    let declared = model.inputs().map_err(|error| Error::Onnx { path: path.to_path_buf(), error: Box::new(error) })?;
    let run_args = RunArgs {
        model: Some(path.to_path_buf()),
        inputs: args.inputs.clone(),
        backend: Some(args.backend),
        threads: None,
        out: None,
        seed: args.seed,
        dims: args.dims.clone(),
        precise: false,
        no_recover: args.no_recover,
    };
    let inputs = prepare_inputs(&declared, &run_args)?;
    Ok((model, inputs))
}
