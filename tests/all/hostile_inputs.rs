//! Small hostile inputs (issue 21): each must give a typed error quickly or run correctly.
//! Elapsed times are printed, never asserted; a hang fails by the test runner's timeout, and a
//! missing typed error fails by its variant or message.
//!
//! The cases tested elsewhere, beside the code they exercise:
//! - dead values freed after their last use on the interpreter:
//!   `tests/alloc/runtime_alloc.rs` (`the_interpreter_frees_values_after_their_last_use`,
//!   which counts the live bytes);
//! - a 2^31-element output of a text graph on the CPU and reference executors:
//!   `runtime::runs_fail_with_typed_errors`;
//! - nested ONNX loops under one node budget: `onnx_recur::nested_loops_share_one_node_budget`;
//! - pooling windows of `i64::MAX` taps: `decomp_linalg::huge_pool_windows_are_refused`;
//! - FIFOs and devices as models, external data or inputs:
//!   `onnx_hostile::fifos_are_refused_not_waited_on`, `cli::errors_exit_non_zero_with_a_message`;
//! - deep dims and unbounded size arithmetic: `dim_algebra::hostile_sizes_are_bounded`,
//!   `text_errors::many_named_values_parse_and_names_stay_unique`.

use std::time::Instant;

use ladder::frontend::onnx::{decode, ImportOptions};
use ladder::interp::{EvalError, InterpError};
use ladder::session::SessionError;
use ladder::{BackendKind, CompileOptions, Model, RunError, Session, Tensor};

use crate::common::*;
use crate::onnx_build::*;

/// Parses `src`, printing how long it took.
fn timed_parse(what: &str, src: &str) -> Result<ladder::Graph, ladder::text::ParseError> {
    let start = Instant::now();
    let out = ladder::text::parse(src);
    eprintln!("{what}: {} bytes parsed in {:?}", src.len(), start.elapsed());
    out
}

fn one_input(dim: &str) -> String {
    format!("graph g(%x: f32[{dim}]) {{\n  return %x\n}}\n")
}

#[track_caller]
fn too_complex(what: &str, src: &str) {
    match timed_parse(what, src) {
        Err(e) => assert!(e.message.contains("too complex"), "{what}: {e}"),
        Ok(_) => panic!("{what} parsed"),
    }
}

/// The file of about 480 bytes: a size that is the product of eight sums of 26
/// symbols (which would expand to billions of terms); and sums, products and a `min` of
/// hundreds of symbols (a `min` compares each new argument with the others once: when every
/// call compared all pairs, the 5 KB `min` below took 10 s to parse in a debug build).
#[test]
fn sums_and_products_of_many_symbols_are_too_complex() {
    let sum26 = format!("({})", (b'a'..=b'z').map(|c| (c as char).to_string()).collect::<Vec<_>>().join("+"));
    let src = one_input(&[sum26.as_str(); 8].join("*"));
    assert!((450..=500).contains(&src.len()), "{} bytes", src.len());
    too_complex("eight factors of 26 symbols", &src);
    let names: Vec<String> = (0..500).map(|i| format!("s{i}")).collect();
    too_complex("a sum of 500 symbols", &one_input(&names.join(" + ")));
    too_complex("a product of 500 symbols", &one_input(&names.join("*")));
    too_complex("a min of 500 sums", &one_input(&format!("min({})", names.join(" + 1, "))));
    // Within the bounds the same shapes parse: 64 terms, 8 factors.
    let g = timed_parse("a sum of 63 symbols", &one_input(&names[..63].join(" + "))).unwrap();
    assert_eq!(g.ty(g.inputs()[0]).shape.dims()[0].eval(&|_| Some(1)), Ok(63));
    assert!(timed_parse("a product of 8 symbols", &one_input(&names[..8].join("*"))).is_ok());
}

/// 100 KB sums of symbols parse in one pass: each `+` adds to an expression of at most 64
/// terms (or stops at the 65th).
#[test]
fn a_100_kb_sum_of_symbols_parses_in_one_pass() {
    let names: Vec<String> = (0..26).map(|i| format!("{}", (b'a' + i) as char)).collect();
    let mut terms = Vec::new();
    while terms.len() * 4 < 100_000 {
        terms.push(names[terms.len() % 26].as_str());
    }
    let src = one_input(&terms.join(" + "));
    assert!(src.len() >= 100_000);
    let g = timed_parse("100 KB sum of 26 symbols", &src).unwrap();
    let d = g.ty(g.inputs()[0]).shape.dims()[0].clone();
    assert_eq!(d.eval(&|_| Some(1)), Ok(terms.len() as u64), "{d}");
    assert_eq!(d.symbols().len(), 26);
    let src = one_input(&vec!["n"; 25_000].join(" + "));
    let g = timed_parse("100 KB sum of one symbol", &src).unwrap();
    assert_eq!(g.ty(g.inputs()[0]).to_string(), "f32[25000*n]");
    // Distinct symbols stop at the 65th term.
    let distinct: Vec<String> = (0..15_000).map(|i| format!("s{i}")).collect();
    too_complex("100 KB sum of distinct symbols", &one_input(&distinct.join(" + ")));
}

/// A chain of `n` unary ops over `%x`, its values named (`%v0`, `%v1`, ...) or numbered.
fn chain(n: usize, named: bool) -> String {
    let mut src = String::from("graph g(%x: f32[2]) {\n");
    let mut prev = "%x".to_string();
    for i in 0..n {
        let name = if named { format!("%v{i}") } else { format!("%{}", i + 1) };
        src.push_str(&format!("  {name} = neg({prev})\n"));
        prev = name;
    }
    src.push_str(&format!("  return {prev}\n}}\n"));
    src
}

/// 32,000 named values parse as numbered ones do: names are looked up in the graph's index,
/// not by a scan per use.
#[test]
fn named_values_parse_like_numbered_ones() {
    let n = 32_000;
    let numbered = timed_parse("32k numbered values", &chain(n, false)).unwrap();
    let named = timed_parse("32k named values", &chain(n, true)).unwrap();
    assert_eq!((numbered.len(), named.len()), (n + 1, n + 1));
    assert_eq!(named.value_by_name(&format!("v{}", n - 1)), Some(named.outputs()[0].value));
    let x = f32t(&[2], &[1.0, -2.0]);
    assert_eq!(run1(&chain(n, true), std::slice::from_ref(&x)), run1(&chain(n, false), &[x]));
}

/// Runs `f` on a thread with a small stack (a worker's, an embedder's), so that recursion as
/// deep as its input overflows (aborting the test process) instead of passing on the main
/// thread's larger stack: 256 KiB
/// in an optimised build (the parser's 64 levels of nesting fit in 128 KiB there), 512 KiB in
/// a debug build, whose frames are several times larger (64 levels need more than 256 KiB).
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(if cfg!(debug_assertions) { 512 << 10 } else { 256 << 10 })
        .spawn(f)
        .unwrap()
        .join()
        .expect("the thread panicked")
}

/// About 9,500 nested parentheses (or `min(` calls) in a dim, in a shape or an attribute: a
/// typed error at the nesting limit, on a small stack.
#[test]
fn deeply_nested_dims_are_errors_on_a_small_stack() {
    let depth = 9_500;
    let cases = [
        ("parentheses in a shape", one_input(&format!("{}n{}", "(".repeat(depth), ")".repeat(depth)))),
        ("min calls in a shape", one_input(&format!("{}n{}", "min(".repeat(depth), ")".repeat(depth)))),
        (
            "parentheses in a size attribute",
            format!(
                "graph g(%x: f32[n]) {{\n  %1 = slice(%x) {{axis=0, start=0, end={}n{}}}\n  return %1\n}}\n",
                "(".repeat(depth),
                ")".repeat(depth)
            ),
        ),
        ("an unclosed run of parentheses", one_input(&"(".repeat(depth))),
    ];
    for (what, src) in cases {
        let e = on_small_stack(move || timed_parse(what, &src).map(|_| ())).unwrap_err();
        assert!(e.message.contains("dim nested deeper than 64 levels"), "{what}: {e}");
    }
}

/// An ONNX model whose output is `cos` of a constant of `n` elements (`ConstantOfShape`).
fn cos_of_constant(n: i64) -> Model {
    let bytes = encode(&model_proto(
        graph(
            vec![
                node("ConstantOfShape", &["shape"], &["c"], vec![a_tensor("value", tensor_f32("", &[1], &[1.0]))]),
                node("Cos", &["c"], &["y"], vec![]),
            ],
            vec![],
            vec![vi("y", FLOAT, &[])],
            vec![tensor_i64("shape", &[1], &[n])],
        ),
        17,
    ));
    Model::from_onnx(decode(&bytes, &ImportOptions::default()).unwrap(), None, ImportOptions::default())
}

fn run_model(model: Model, options: CompileOptions) -> Result<Vec<Tensor>, Box<SessionError>> {
    let start = Instant::now();
    let out = match Session::new(model, options) {
        Ok(session) => session.run(&[]).map(|o| o.outputs),
        Err(e) => Err(e),
    };
    eprintln!("a session's run: {:?}", start.elapsed());
    out.map_err(Box::new)
}

/// Outputs of 2^30 and 2^31 f32 elements (4 and 8 GiB): on the CPU backend the run's memory
/// is checked against `CompileOptions::max_run_bytes` (4 GiB by default) before anything is
/// allocated, and allocations are fallible (`RunError::OutOfMemory` where the system refuses);
/// the interpreter refuses a result of more than `max_elements` (2^28). Typed errors, not
/// an abort.
#[test]
fn huge_onnx_outputs_are_typed_errors() {
    let e = run_model(cos_of_constant(1 << 31), CompileOptions::default()).unwrap_err();
    assert!(matches!(*e, SessionError::Run(RunError::TooLarge { need: 8589934592, limit: 4294967296 })), "{e}");
    // 2^30 elements fit the default limit exactly; under a smaller one they are refused the
    // same way.
    let options = CompileOptions {
        limits: ladder::Limits { max_run_bytes: 1 << 30, ..Default::default() },
        ..CompileOptions::default()
    };
    let e = run_model(cos_of_constant(1 << 30), options).unwrap_err();
    assert!(matches!(*e, SessionError::Run(RunError::TooLarge { need: 4294967296, limit: 1073741824 })), "{e}");
    for n in [1i64 << 30, 1 << 31] {
        let interp = CompileOptions { backend: BackendKind::Interp, ..CompileOptions::default() };
        let e = run_model(cos_of_constant(n), interp).unwrap_err();
        let too_large = |e: &InterpError| matches!(e, InterpError::Eval { error: EvalError::TooLarge { elements, limit: 268435456 }, .. } if *elements == n as u64);
        assert!(matches!(&*e, SessionError::Run(RunError::Interp(ie)) if too_large(ie)), "{e}");
    }
    // A small one runs.
    let out = run_model(cos_of_constant(3), CompileOptions::default()).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![f64::from(1f32.cos()); 3]);
}

/// The 95-byte file: `max_pool2d` with a big window compiles for the CPU quickly, kept
/// whole (native mode) or decomposed into one strided slice per kernel offset of each spatial
/// dim (the reference plan, whose scheduler once took minutes over thousands of `max`es), and
/// agrees with the interpreter. Kernel sizes summing past 4096 (4096 x 1) have no
/// decomposition: a typed error there.
#[test]
fn a_pool_with_a_big_kernel_compiles_quickly() {
    let cases =
        [("[1, 1, 4095, 1]", "[4095, 1]"), ("[1, 1, 2048, 2048]", "[2048, 2048]"), ("[1, 1, 4096, 1]", "[4096, 1]")];
    for (shape, kernel) in cases {
        let src = format!("graph g(%x: f32{shape}) {{\n  %1 = max_pool2d(%x) {{kernel={kernel}}}\n  return %1\n}}\n");
        assert!(src.len() <= 100, "{} bytes", src.len());
        let g = parse(&src);
        let dims: Vec<usize> = g.ty(g.inputs()[0]).shape.as_static().unwrap().iter().map(|&d| d as usize).collect();
        let data: Vec<f32> = (0..dims.iter().product()).map(|i: usize| ((i * 7919) % 4093) as f32 - 2000.0).collect();
        let x = f32t(&dims, &data);
        let want = run1(&src, std::slice::from_ref(&x));
        assert_eq!(want, vec![2092.0]);
        for (what, options) in [("native", CompileOptions::default()), ("reference", CompileOptions::reference())] {
            let start = Instant::now();
            let plan = ladder::compile(&g, &options);
            eprintln!("{what} plan of max_pool2d {kernel} compiled in {:?}", start.elapsed());
            match plan {
                Ok(plan) => {
                    let got = plan.run(std::slice::from_ref(&x)).unwrap().outputs;
                    assert_eq!(got[0].to_f64_vec(), want, "{what} {kernel}");
                }
                Err(e) if what == "reference" && kernel == "[4096, 1]" => {
                    assert!(e.to_string().contains("kernel sizes may sum to at most 4096"), "{e}")
                }
                Err(e) => panic!("{what} {kernel}: {e}"),
            }
        }
    }
}
