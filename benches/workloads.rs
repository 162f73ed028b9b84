//! The CPU backend's workloads (W0–W9 of `ladder bench`) under criterion: a warm
//! `Plan::run_into` per iteration, at 1 and 2 threads (each in a rayon pool of that size),
//! plus the cold compile of W6 (graph to runnable plan).
//!
//! `cargo bench --bench workloads` (criterion's options after `--`, e.g. `-- W6` to filter).
//! `ladder bench` measures the same workloads with floors and peers' ratios; this is the
//! statistical view (confidence intervals, change against the last run).

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use ladder::bench::{workload, WORKLOADS};
use ladder::{compile, CompileOptions, Outputs};

fn workloads(c: &mut Criterion) {
    for &name in WORKLOADS {
        let Ok(w) = workload(name) else { continue };
        let mut group = c.benchmark_group(name);
        group.sample_size(if w.flops > 1e9 || w.io_bytes > 32 << 20 { 10 } else { 30 });
        for threads in [1usize, 2] {
            let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(threads).build() else { continue };
            let options = CompileOptions::native_cpu(threads).expect("the host has a Cranelift backend");
            let plan = compile(&w.graph, &options).expect("the workload compiles");
            let mut out = Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
            group.bench_function(format!("{threads}t"), |b| {
                // Each batch of iterations runs inside the pool (one hand-off per batch).
                b.iter_custom(|iters| {
                    pool.install(|| {
                        let t = Instant::now();
                        for _ in 0..iters {
                            plan.run_into(&w.inputs, &mut out).expect("the workload runs");
                        }
                        t.elapsed()
                    })
                })
            });
        }
        group.finish();
    }
    if let Ok(w) = workload("W6_encoder_s128_d256") {
        c.bench_function("W6_compile", |b| {
            b.iter(|| compile(&w.graph, &CompileOptions::native_cpu(1).expect("host backend")).expect("compiles"))
        });
    }
}

criterion_group!(benches, workloads);
criterion_main!(benches);
