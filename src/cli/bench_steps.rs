//! `ladder bench --compile`: how long the compile workloads C1–C4 take to compile for the CPU
//! backend (see `ladder::bench::time_compile`), with the scaling exponent of each family; and
//! `ladder bench --train`: the training steps T1–T2 (`ladder::bench::time_train`); as tables
//! or as JSON.

use std::io::Write;

use ladder::bench::{self, BackendKind, CompileMeasurement};

use super::bench::BenchArgs;
use super::{machine_threads, Error};

pub fn bench_compile(args: &BenchArgs, native: bench::Native, out: &mut dyn Write) -> Result<(), Error> {
    let refuse = |what: &str| Err(Error::Arguments(format!("--compile times the built-in compile workloads: {what}")));
    if args.model.is_some() {
        return refuse("it does not take a model");
    }
    if !args.inputs.is_empty() || !args.dims.is_empty() {
        return refuse("--input and --dim do not apply");
    }
    if args.profile {
        return refuse("--profile times the steps of a run, not compilation");
    }
    if args.backend.backend() != BackendKind::Cpu {
        return refuse("it compiles for the cpu backend (the interpreter compiles nothing)");
    }
    let names = bench::select_compile(&args.workloads).map_err(|e| Error::Arguments(e.to_string()))?;
    let threads = if args.threads.is_empty() { vec![machine_threads()] } else { args.threads.clone() };
    let mut results: Vec<CompileMeasurement> = Vec::new();
    for name in names {
        let w = super::progress::spin(&format!("building {name}"), || bench::compile_workload(name))
            .map_err(|e| Error::Usage(e.to_string()))?;
        for &t in &threads {
            let m = super::progress::spin(&format!("compiling {name} at {t} thread(s)"), || {
                bench::time_compile(&w, t, args.runs, native)
            })
            .map_err(|e| Error::Usage(e.to_string()))?;
            results.push(m);
            if !args.json {
                if results.len() == 1 {
                    writeln!(
                        out,
                        "{:<16} {:>3} {:>7} {:>6} {:>11} {:>4} {:>8} {:>7} {:>8} {:>8}",
                        "workload",
                        "thr",
                        "nodes",
                        "steps",
                        "compile_ms",
                        "runs",
                        "us/node",
                        "x_time",
                        "exponent",
                        "heap_MB"
                    )
                    .map_err(Error::Stdout)?;
                }
                // Each row is printed as it is measured, against the smallest size so far.
                let bases = bench::scaling_bases(&results);
                let m = &results[results.len() - 1];
                let scaling = m.scaling(&results[bases[results.len() - 1]]);
                let (ratio, exponent) = match scaling {
                    Some((r, e)) => (format!("{r:7.2}"), format!("{e:8.2}")),
                    None => (format!("{:>7}", "-"), format!("{:>8}", "-")),
                };
                let heap = m.heap_peak_bytes.map_or_else(|| "-".to_string(), |b| format!("{:.1}", b as f64 / 1e6));
                writeln!(
                    out,
                    "{:<16} {:>3} {:>7} {:>6} {:>11.1} {:>4} {:>8.1} {} {} {:>8}",
                    m.workload,
                    m.threads,
                    m.nodes,
                    m.steps,
                    m.median_ms(),
                    m.timing.runs,
                    m.us_per_node(),
                    ratio,
                    exponent,
                    heap
                )
                .map_err(Error::Stdout)?;
                out.flush().map_err(Error::Stdout)?;
            }
        }
    }
    if args.json {
        let bases = bench::scaling_bases(&results);
        let array: Vec<serde_json::Value> = results
            .iter()
            .zip(&bases)
            .map(|(m, &b)| m.to_json((!std::ptr::eq(m, &results[b])).then(|| &results[b])))
            .collect();
        let text = serde_json::to_string_pretty(&array).map_err(|e| Error::Usage(e.to_string()))?;
        writeln!(out, "{text}").map_err(Error::Stdout)?;
    } else {
        writeln!(
            out,
            "compile_ms = median time of ladder::compile for the cpu backend in native mode (lowering, recovery, \
             scheduling, Cranelift, weight packing); steps = the plan's steps"
        )
        .map_err(Error::Stdout)?;
        writeln!(
            out,
            "x_time = time / time of the family's smallest size measured; exponent = log(x_time) / log(node \
             ratio): 1.0 is linear, 2.0 quadratic"
        )
        .map_err(Error::Stdout)?;
        writeln!(out, "heap_MB = the heap's high-water mark during one compilation (JIT code memory not counted)")
            .map_err(Error::Stdout)?;
    }
    Ok(())
}

pub fn bench_train(args: &BenchArgs, out: &mut dyn Write) -> Result<(), Error> {
    let refuse = |what: &str| Err(Error::Arguments(format!("--train times the built-in training steps: {what}")));
    if args.model.is_some() {
        return refuse("it does not take a model");
    }
    if !args.inputs.is_empty() || !args.dims.is_empty() || args.no_recover || args.no_pack_weights {
        return refuse("--input, --dim, --no-recover and --no-pack-weights do not apply");
    }
    if args.profile && args.json {
        return Err(Error::Arguments("--profile prints a table; it does not go with --json".into()));
    }
    if args.backend.backend() != BackendKind::Cpu {
        return refuse("it runs on the cpu backend");
    }
    let names = bench::select_train(&args.workloads).map_err(|e| Error::Arguments(e.to_string()))?;
    let threads = if args.threads.is_empty() { vec![1, 2] } else { args.threads.clone() };
    let mut results = Vec::new();
    for name in names {
        for &t in &threads {
            let m =
                super::progress::spin(&format!("{name} at {t} thread(s)"), || bench::time_train(name, t, args.runs))
                    .map_err(|e| Error::Usage(e.to_string()))?;
            if !args.json {
                if results.is_empty() {
                    writeln!(
                        out,
                        "{:<34} {:>3} {:>11} {:>11} {:>12} {:>14} {:>12} {:>21}",
                        "workload",
                        "thr",
                        "median_ms",
                        "compile_ms",
                        "saved_bytes",
                        "save_all_bytes",
                        "peak_bytes",
                        "loss first -> last"
                    )
                    .map_err(Error::Stdout)?;
                }
                let peak = m.peak_bytes.map_or_else(|| "-".to_string(), |b| b.to_string());
                writeln!(
                    out,
                    "{:<34} {:>3} {:>11.2} {:>11.1} {:>12} {:>14} {:>12} {:>10.4} -> {:.4}",
                    m.workload,
                    m.threads,
                    m.timing.median_us / 1e3,
                    m.compile_ms,
                    m.saved_bytes,
                    m.save_all_bytes,
                    peak,
                    m.first_loss,
                    m.last_loss
                )
                .map_err(Error::Stdout)?;
                out.flush().map_err(Error::Stdout)?;
            }
            if args.profile {
                let runs = args.runs.unwrap_or(20);
                let p = super::progress::spin(&format!("profiling {name} at {t} thread(s)"), || {
                    bench::profile_train(name, t, runs)
                })
                .map_err(|e| Error::Usage(e.to_string()))?;
                let total: f64 = p.forward.iter().chain(&p.update).map(|s| s.median_us).sum();
                for (plan, steps) in [("forward plan", &p.forward), ("update plan (backward, then Adam)", &p.update)] {
                    let sum: f64 = steps.iter().map(|s| s.median_us).sum();
                    writeln!(out, "  {plan}: {sum:.1} us").map_err(Error::Stdout)?;
                    for s in steps {
                        let share = if total > 0.0 { 100.0 * s.median_us / total } else { 0.0 };
                        writeln!(out, "    {:<44} {:>12.1} {:>5.1}%", s.label, s.median_us, share)
                            .map_err(Error::Stdout)?;
                    }
                }
            }
            results.push(m);
        }
    }
    if args.json {
        let array: Vec<serde_json::Value> = results.iter().map(bench::TrainMeasurement::to_json).collect();
        let text = serde_json::to_string_pretty(&array).map_err(|e| Error::Usage(e.to_string()))?;
        writeln!(out, "{text}").map_err(Error::Stdout)?;
    } else {
        writeln!(
            out,
            "one step = forward, backward and Adam as compiled plans; saved_bytes = activations the partitioner's \
             minimum cut keeps between forward and backward (save_all_bytes: keeping every forward value the \
             backward reads); peak_bytes = the heap's high-water mark during a warm step above what was live \
             before it; PyTorch eager on T2: tools/bench_train_torch.py"
        )
        .map_err(Error::Stdout)?;
    }
    Ok(())
}
