//! The CLI over the CPU backend: `dump --stage kernels [--explain]`, `run --backend cpu`,
//! `check`.

use std::process::{Command, Output};

fn ladder(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ladder")).args(args).output().expect("the ladder binary runs")
}

fn ok(args: &[&str]) -> (String, String) {
    let o = ladder(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "ladder {args:?} failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    (out, err)
}

fn fails(args: &[&str], needle: &str) -> String {
    let o = ladder(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "ladder {args:?} should fail");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "ladder {args:?}: stderr lacks {needle:?}:\n{err}");
    err
}

#[test]
fn dump_prints_the_kernel_program_and_its_explanation() {
    // Without recovery: the program the reference plan (and `run --no-recover`) runs.
    let (out, _) = ok(&["dump", "--stage", "kernels", "--no-recover"]);
    assert!(out.contains("kernel k0 outer [seq] {"), "{out}");
    assert!(out.contains("matmul b5 = b3 @ b4^T"), "{out}");
    assert!(out.contains("outputs y="), "{out}");
    assert!(!out.contains("; schedule:") && !out.contains("library"), "{out}");
    let (out, _) = ok(&["dump", "--stage", "kernels", "--no-recover", "--explain"]);
    assert!(out.contains("; schedule: 9 kernels, 8 library calls, 0 graph breaks"), "{out}");
    assert!(out.contains("reads %59 2 times"), "{out}");
    assert!(out.contains("; not fused:"), "{out}");
    // By default: the native plan's program, with what recovery put back first.
    let (out, _) = ok(&["dump", "--stage", "kernels", "--explain"]);
    assert!(out.contains("; recovery: 4 match(es)"), "{out}");
    assert!(out.contains("; schedule: 7 kernels, 10 library calls, 0 graph breaks"), "{out}");
    assert!(out.contains("epilogue k4 per row tile"), "{out}");
    fails(&["dump", "--explain"], "--explain goes with --stage kernels");
}

#[test]
fn run_on_the_cpu_backend_matches_the_interpreter_summary() {
    let (cpu, err) = ok(&["run", "--backend", "cpu", "--dim", "seq=3"]);
    // Recovery turns the layer norms, attention and gelu into library calls (9 kernels
    // without); the bias, residual and layer-norm kernels after three of the matmuls run as
    // their epilogues, and the recovered gelu inside the feed-forward's first GEMM.
    assert!(err.contains("cpu: 13 steps (7 kernels, 3 of them GEMM epilogues, 7 native); arena"), "{err}");
    let (plain, err) = ok(&["run", "--backend", "cpu", "--dim", "seq=3", "--no-recover"]);
    assert!(err.contains("cpu: 14 steps (9 kernels, 3 of them GEMM epilogues, 9 native); arena"), "{err}");
    let (interp, _) = ok(&["run", "--dim", "seq=3"]);
    // Same summary statistics to the printed precision.
    let stats = |s: &str| s.lines().find(|l| l.trim_start().starts_with("min")).map(str::to_string);
    assert_eq!(stats(&cpu), stats(&interp));
    assert_eq!(stats(&plain), stats(&interp));
    fails(&["run", "--backend", "cpu", "--precise"], "--precise is a mode of the interpreter");
}

#[test]
fn check_compares_a_backend_with_the_precise_interpreter() {
    let (out, _) = ok(&["check", "--dim", "seq=4"]);
    assert!(out.starts_with("y: f32[1, 4, 32]  max abs "), "{out}");
    assert!(out.trim_end().ends_with("ok"), "{out}");
    let (out, _) = ok(&["check", "--backend", "interp", "--dim", "seq=2"]);
    assert!(out.contains("ok"), "{out}");
    // f32 results are not exact: a zero tolerance fails, with a non-zero exit.
    let err = fails(&["check", "--rtol", "0", "--dim", "seq=2"], "backend `cpu` disagrees with the interpreter on `y`");
    assert!(err.lines().last().is_some_and(|l| l.starts_with("error: ")), "{err}");
    fails(&["check", "--backend", "gpu"], "[possible values: cpu, interp, vulkan]");
}
