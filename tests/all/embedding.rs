//! What an embedding program relies on: one compiled plan served from many threads at once
//! gives every caller the outputs it gives alone, and no page of the process is writable and
//! executable at the same time while plans compile and their generated code runs (W^X, as
//! `backend::cpu` promises).

use ladder::models::{example_encoder, random_tensor, Rng};
use ladder::{compile, CompileOptions, DType, Plan, Tensor};

/// Runs per thread, and threads, of [`one_plan_serves_eight_threads_a_thousand_runs_each`].
const RUNS: usize = 1000;
const THREADS: usize = 8;

fn native_plan(threads: usize) -> Plan {
    let plan = compile(&example_encoder().unwrap(), &CompileOptions::native_cpu(threads).unwrap()).unwrap();
    // The check is about generated code: the plan must have some.
    assert!(plan.native_kernels() > 0, "the encoder compiles to native kernels");
    plan
}

/// Inputs of several sequence lengths (so concurrent runs need arenas of different sizes),
/// each with the plan's outputs for it from one run alone.
fn cases(plan: &Plan) -> Vec<(Tensor, Vec<Tensor>)> {
    (0..6)
        .map(|k| {
            let x = random_tensor(&mut Rng::new(100 + k as u64), DType::F32, &[1, 1 + 3 * k, 32]).unwrap();
            let alone = plan.run(std::slice::from_ref(&x)).unwrap().outputs;
            (x, alone)
        })
        .collect()
}

fn same_bits(got: &[Tensor], want: &[Tensor]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g.bit_eq(w))
}

#[test]
fn one_plan_serves_eight_threads_a_thousand_runs_each() {
    // Two threads inside each run as well, so the callers also share the plan's worker pool.
    let plan = native_plan(2);
    let cases = cases(&plan);
    let mismatches: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (plan, cases) = (&plan, &cases);
                s.spawn(move || {
                    (0..RUNS)
                        .filter(|&i| {
                            let (x, want) = &cases[(t + i) % cases.len()];
                            let got = plan.run(std::slice::from_ref(x)).unwrap().outputs;
                            !same_bits(&got, want)
                        })
                        .count()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(mismatches, 0, "of {} concurrent runs, {mismatches} differ from the same run alone", THREADS * RUNS);
}

/// A mapping of `maps` (the text of `/proc/PID/maps`) whose permissions allow both writing
/// and executing, and how many anonymous executable mappings come before it (all of them
/// when there is none).
fn writable_and_executable(maps: &str) -> (Option<String>, usize) {
    let mut anonymous_code = 0;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let perms = fields.nth(1).unwrap_or("");
        if perms.contains('w') && perms.contains('x') {
            return (Some(line.to_string()), anonymous_code);
        }
        // Address, perms, offset, device, inode, then a path (none for anonymous memory).
        if perms.contains('x') && fields.nth(3).is_none() {
            anonymous_code += 1;
        }
    }
    (None, anonymous_code)
}

#[cfg(target_os = "linux")]
#[test]
fn no_page_is_writable_and_executable_while_plans_compile_and_run() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let plan = native_plan(1);
    let cases = cases(&plan);
    let done = AtomicBool::new(false);
    let (checks, most_code) = std::thread::scope(|s| {
        // Generated code running.
        let runner = s.spawn(|| {
            for i in 0..200 {
                let (x, want) = &cases[i % cases.len()];
                assert!(same_bits(&plan.run(std::slice::from_ref(x)).unwrap().outputs, want));
            }
        });
        // Code being written: cranelift-jit fills fresh pages, then makes them executable.
        let compiler = s.spawn(|| {
            for _ in 0..4 {
                drop(native_plan(1));
            }
        });
        let watcher = s.spawn(|| {
            let (mut checks, mut most_code) = (0usize, 0usize);
            while !done.load(Ordering::Relaxed) || checks == 0 {
                let (bad, code) = writable_and_executable(&std::fs::read_to_string("/proc/self/maps").unwrap());
                assert!(bad.is_none(), "a mapping is writable and executable: {}", bad.unwrap_or_default());
                most_code = most_code.max(code);
                checks += 1;
            }
            (checks, most_code)
        });
        runner.join().unwrap();
        compiler.join().unwrap();
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap()
    });
    eprintln!("{checks} reads, {most_code} anonymous code mappings at most");
    // Not vacuous: the maps were read while generated code was mapped.
    assert!(checks > 0 && most_code > 0, "{checks} reads of the maps, at most {most_code} anonymous code mappings");
}

#[test]
fn the_maps_scan_finds_a_writable_executable_mapping() {
    let maps = "5581f0a00000-5581f0a3c000 r--p 00000000 08:01 1234 /usr/bin/game\n\
                7f3a10000000-7f3a10001000 r-xp 00000000 00:00 0 \n\
                7f3a10001000-7f3a10002000 rw-p 00000000 00:00 0 \n\
                7ffd5e9f2000-7ffd5e9f4000 r-xp 00000000 00:00 0                          [vdso]\n";
    assert_eq!(writable_and_executable(maps), (None, 1));
    let bad = format!("{maps}7f3a10002000-7f3a10003000 rwxp 00000000 00:00 0 \n");
    let (found, _) = writable_and_executable(&bad);
    assert!(found.is_some_and(|l| l.contains("rwxp")));
}
