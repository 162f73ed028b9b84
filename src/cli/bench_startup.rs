//! `ladder bench MODEL --startup`: the time from a loaded model to its first result, compiling
//! everything first (`Session::new`) against tiered start-up (`Session::new_tiered`: the first
//! result from the reference interpreter while the native plan compiles in the background),
//! when the native tier took over, and the time of one run on each tier.

use std::io::Write;
use std::time::Instant;

use ladder::session::Tier;
use ladder::{BackendKind, CompileOptions, Model, Session, Tensor};

use super::bench::BenchArgs;
use super::run::{compile_options, session_error};
use super::{machine_threads, Error};

/// Repetitions of each start-up by default (medians are reported).
const DEFAULT_REPETITIONS: usize = 5;

/// One thread count's start-up figures, medians over the repetitions (milliseconds).
struct Startup {
    threads: usize,
    compile_first_ms: f64,
    tiered_first_ms: f64,
    /// The tier that gave the tiered session's first result.
    first_tier: &'static str,
    /// When the native plan was ready, from the start; `None` when nothing was tiered.
    native_ready_ms: Option<f64>,
    reference_run_ms: f64,
    native_run_ms: f64,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median time of one run of `session` on `inputs`: at least three runs, more while they
/// fit in about half a second (after one untimed run).
fn run_ms(session: &Session, inputs: &[Tensor]) -> Result<f64, Error> {
    session.run(inputs)?;
    let (mut times, start) = (Vec::new(), Instant::now());
    while times.len() < 3 || (start.elapsed().as_secs_f64() < 0.5 && times.len() < 1000) {
        let t = Instant::now();
        session.run(inputs)?;
        times.push(ms(t));
    }
    Ok(median(times))
}

/// Times `repetitions` start-ups each way, after one untimed start-up each way (the process's
/// one-time costs: thread pools, the code generator's tables).
fn measure(
    model: &Model,
    path: &std::path::Path,
    options: &CompileOptions,
    inputs: &[Tensor],
    repetitions: usize,
) -> Result<Startup, Error> {
    let session_err = |e| session_error(e, Some(path));
    let (mut compile_first, mut tiered_first, mut native_ready) = (Vec::new(), Vec::new(), Vec::new());
    let mut first_tier = "native";
    for rep in 0..=repetitions {
        let m = model.clone();
        let start = Instant::now();
        let s = Session::new(m, options.clone()).map_err(session_err)?;
        s.run(inputs)?;
        let compile_first_ms = ms(start);

        let m = model.clone();
        let start = Instant::now();
        let s = Session::new_tiered(m, options.clone()).map_err(session_err)?;
        let plan = s.plan_for(inputs)?;
        plan.run(inputs).map_err(ladder::session::SessionError::Run)?;
        let tiered_first_ms = ms(start);
        let tiered = s.tier() != Tier::Native || plan.backend() == BackendKind::Interp;
        if let Tier::Failed(why) = s.wait_native() {
            return Err(Error::Usage(format!("the native plan failed to compile in the background: {why}")));
        }
        let native_ready_ms = ms(start);
        if rep == 0 {
            continue;
        }
        compile_first.push(compile_first_ms);
        tiered_first.push(tiered_first_ms);
        if tiered {
            native_ready.push(native_ready_ms);
        }
        if plan.backend() == BackendKind::Interp {
            first_tier = "reference";
        }
    }
    let native = Session::new(model.clone(), options.clone()).map_err(session_err)?;
    let interp =
        CompileOptions { backend: BackendKind::Interp, limits: options.limits.clone(), ..CompileOptions::reference() };
    let reference = Session::new(model.clone(), interp).map_err(session_err)?;
    Ok(Startup {
        threads: options.threads,
        compile_first_ms: median(compile_first),
        tiered_first_ms: median(tiered_first),
        first_tier,
        native_ready_ms: (!native_ready.is_empty()).then(|| median(native_ready)),
        reference_run_ms: run_ms(&reference, inputs)?,
        native_run_ms: run_ms(&native, inputs)?,
    })
}

pub fn bench_startup(args: &BenchArgs, out: &mut dyn Write) -> Result<(), Error> {
    let Some(path) = &args.model else {
        return Err(Error::Arguments("--startup times a model's start-up: give a model file".into()));
    };
    if args.backend.backend() != BackendKind::Cpu {
        return Err(Error::Arguments("--startup compares the CPU backend's tiers: use --backend cpu".into()));
    }
    if args.profile || !args.workloads.is_empty() {
        return Err(Error::Arguments("--startup does not go with --profile or --workload".into()));
    }
    let (model, inputs) = super::bench::model_and_inputs(path, args)?;
    let threads = if args.threads.is_empty() { vec![machine_threads()] } else { args.threads.clone() };
    let repetitions = args.runs.unwrap_or(DEFAULT_REPETITIONS);
    // A corpus case's `model.onnx` is named by its directory.
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let dir = path.parent().and_then(|d| d.file_name()).map(|d| d.to_string_lossy().into_owned());
    let name = match dir {
        Some(dir) if stem == "model" => dir,
        _ => stem,
    };
    let mut results = Vec::new();
    for &t in &threads {
        let mut options = compile_options(BackendKind::Cpu, !args.no_recover, false, t)?;
        options.pack_weights = !args.no_pack_weights;
        let r = super::progress::spin(&format!("start-up of {name} at {t} thread(s)"), || {
            measure(&model, path, &options, &inputs, repetitions)
        })?;
        results.push(r);
    }
    let cell = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
    if args.json {
        let array: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "model": name,
                    "threads": r.threads,
                    "repetitions": repetitions,
                    "compile_first_ms": r.compile_first_ms,
                    "tiered_first_ms": r.tiered_first_ms,
                    "first_tier": r.first_tier,
                    "native_ready_ms": r.native_ready_ms,
                    "reference_run_ms": r.reference_run_ms,
                    "native_run_ms": r.native_run_ms,
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&array).map_err(|e| Error::Usage(e.to_string()))?;
        writeln!(out, "{text}").map_err(Error::Stdout)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<20} {:>3} {:>16} {:>15} {:>10} {:>15} {:>16} {:>13}",
        "model",
        "thr",
        "compile_first_ms",
        "tiered_first_ms",
        "first_tier",
        "native_ready_ms",
        "reference_run_ms",
        "native_run_ms"
    )
    .map_err(Error::Stdout)?;
    for r in &results {
        writeln!(
            out,
            "{:<20} {:>3} {:>16.3} {:>15.3} {:>10} {:>15} {:>16.3} {:>13.3}",
            name,
            r.threads,
            r.compile_first_ms,
            r.tiered_first_ms,
            r.first_tier,
            cell(r.native_ready_ms),
            r.reference_run_ms,
            r.native_run_ms
        )
        .map_err(Error::Stdout)?;
    }
    writeln!(
        out,
        "medians of {repetitions} start-ups each way from the loaded model, one process: compile_first = Session::new \
         then the first run; tiered = Session::new_tiered then the first run (first_tier served it), native_ready = \
         when its native plan took over (- when the model compiles per call: nothing to tier); *_run_ms = one warm run \
         on each tier"
    )
    .map_err(Error::Stdout)?;
    Ok(())
}
