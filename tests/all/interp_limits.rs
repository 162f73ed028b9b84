//! The interpreter checks its inputs against the graph's declared types and binds size
//! symbols, and untrusted graphs cannot make it run forever or allocate without bound.

use ladder::interp::{run, EvalError, InterpError, Options};

use crate::common::*;

const SYM: &str = "graph g(%a: f32[batch, 2], %b: f32[batch, 2]) {\n  %2 = add(%a, %b)\n  return %2\n}";

#[test]
fn symbols_bind_from_inputs_and_must_agree() {
    let g = parse(SYM);
    let ok = run(&g, &[f32t(&[3, 2], &[0.; 6]), f32t(&[3, 2], &[1.; 6])], &Options::default()).unwrap();
    assert_eq!(ok.outputs[0].shape(), &[3, 2]);
    let err = run(&g, &[f32t(&[3, 2], &[0.; 6]), f32t(&[4, 2], &[1.; 8])], &Options::default()).unwrap_err();
    assert_eq!(err, InterpError::SymbolConflict { name: "b".into(), dim: 0, symbol: "batch".into(), bound: 3, got: 4 });
}

#[test]
fn input_count_dtype_and_shape_are_checked() {
    let g = parse(SYM);
    let opts = Options::default();
    assert_eq!(
        run(&g, &[f32t(&[1, 2], &[0.; 2])], &opts).unwrap_err(),
        InterpError::InputCount { expected: 2, got: 1 }
    );
    let err = run(&g, &[f32t(&[1, 2], &[0.; 2]), i64t(&[1, 2], &[0; 2])], &opts).unwrap_err();
    assert!(matches!(err, InterpError::InputDType { ref name, .. } if name == "b"), "{err}");
    let err = run(&g, &[f32t(&[1, 3], &[0.; 3]), f32t(&[1, 2], &[0.; 2])], &opts).unwrap_err();
    assert!(err.to_string().contains("input `a` must have shape [batch, 2], got [1, 3]"), "{err}");
    let err = run(&g, &[f32t(&[2], &[0.; 2]), f32t(&[1, 2], &[0.; 2])], &opts).unwrap_err();
    assert!(matches!(err, InterpError::InputShape { .. }), "{err}");
}

#[test]
fn compound_symbolic_input_dims_are_checked_after_binding() {
    let g = parse("graph g(%a: f32[n], %b: f32[2*n + 1]) {\n  return %b\n}");
    let opts = Options::default();
    assert!(run(&g, &[f32t(&[2], &[0.; 2]), f32t(&[5], &[0.; 5])], &opts).is_ok());
    let err = run(&g, &[f32t(&[2], &[0.; 2]), f32t(&[4], &[0.; 4])], &opts).unwrap_err();
    assert!(err.to_string().contains("2*n + 1"), "{err}");
}

#[test]
fn oversized_results_fail_before_allocating() {
    // [100000, 1] + [1, 100000] would be 10^10 elements: refused from the shape alone.
    let g = parse("graph g(%a: f32[n, 1], %b: f32[1, n]) {\n  %2 = add(%a, %b)\n  return %2\n}");
    let a = ladder::Tensor::zeros(ladder::DType::F32, &[100_000, 1]).unwrap();
    let b = ladder::Tensor::zeros(ladder::DType::F32, &[1, 100_000]).unwrap();
    let err = run(&g, &[a, b], &Options::default()).unwrap_err();
    assert!(
        matches!(err, InterpError::Eval { error: EvalError::TooLarge { elements: 10_000_000_000, .. }, .. }),
        "{err}"
    );
}

#[test]
fn fuel_bounds_the_work_of_a_run() {
    let mut text = String::from("graph g(%x: f32[1000]) {\n");
    let mut prev = "x".to_string();
    for i in 0..50 {
        text.push_str(&format!("  %t{i} = add(%{prev}, %{prev})\n"));
        prev = format!("t{i}");
    }
    text.push_str(&format!("  return %{prev}\n}}\n"));
    let g = parse(&text);
    let x = f32t(&[1000], &[1.0; 1000]);
    assert!(run(&g, std::slice::from_ref(&x), &Options::default()).is_ok());
    let err = run(&g, &[x], &Options { fuel: 20_000, ..Options::default() }).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::OutOfFuel, .. }), "{err}");
}

/// A chain of `n` adds over `f32[len]`, each reading the one before, and a graph where every
/// one of them stays alive to the end (each is an output).
fn chains(n: usize, len: usize) -> (String, String) {
    let mut dead = format!("graph g(%x: f32[{len}]) {{\n");
    for i in 0..n {
        let prev = if i == 0 { "x".to_string() } else { format!("t{}", i - 1) };
        dead.push_str(&format!("  %t{i} = add(%{prev}, %x)\n"));
    }
    let live = format!("{dead}  return {}\n}}\n", (0..n).map(|i| format!("%t{i}")).collect::<Vec<_>>().join(", "));
    dead.push_str(&format!("  return %t{}\n}}\n", n - 1));
    (dead, live)
}

#[test]
fn live_values_are_bounded_and_dead_ones_are_not_counted() {
    // Eight values of 4096 elements, at 8 bytes each, 32 KiB apiece; a bound of 100 KiB admits
    // the chain, whose values die as the next is made, and refuses the graph that keeps all.
    let (dead, live) = chains(8, 4096);
    let x = f32t(&[4096], &[1.0; 4096]);
    let limits = ladder::Limits { max_run_bytes: 100 << 10, ..ladder::Limits::default() };
    let opts = Options::from_limits(false, &limits);
    let out = run(&parse(&dead), std::slice::from_ref(&x), &opts).unwrap();
    assert_eq!(out.outputs[0].as_f32().unwrap()[0], 9.0);
    let err = run(&parse(&live), &[x], &opts).unwrap_err();
    assert!(
        matches!(err, InterpError::Eval { error: EvalError::LiveTooLarge { bytes: 131072, limit: 102400 }, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("`Limits::max_run_bytes` = 102400"), "{err}");
}

#[test]
fn values_nothing_needs_are_not_computed_and_their_errors_are_not_the_runs() {
    // `%last` reads past the end of an empty axis (as an exported LSTM's unused final state
    // does at some sizes), but nothing uses it: the run is `%y` alone, as on every backend,
    // and the dead `fill_` into the input is still made (the input is read back).
    let src = "graph g(%x: f32[n, 2]) {\n  %last = select(%x) {axis=0, index=-1}\n  \
               %y = add(%x, %x)\n  %f = fill_(%x) {value=7}\n  return %y\n}";
    let g = parse(src);
    let empty = f32t(&[0, 2], &[]);
    let out = run(&g, std::slice::from_ref(&empty), &Options::default()).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 2]);
    let x = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let out = run(&g, std::slice::from_ref(&x), &Options::default()).unwrap();
    assert_eq!(out.outputs[0].as_f32().unwrap(), &[2., 4., 6., 8.]);
    assert_eq!(out.inputs_after[0].as_f32().unwrap(), &[7.; 4], "the in-place fill still runs");
    // The same graph with `%last` returned fails, naming the value and the op.
    let live = src.replace("return %y", "return %y, %last");
    let err = run(&parse(&live), &[empty], &Options::default()).unwrap_err();
    assert!(err.to_string().contains("%last = select"), "{err}");
}

#[test]
fn untrusted_limits_refuse_a_large_matmul_before_computing() {
    // 2048³ multiply-adds: under the default fuel it would run (for about half a minute);
    // under `Limits::untrusted` the matmul is charged its work first and refused at once.
    let g = parse("graph g(%a: f32[2048, 2048], %b: f32[2048, 2048]) {\n  %c = matmul(%a, %b)\n  return %c\n}");
    let a = ladder::Tensor::zeros(ladder::DType::F32, &[2048, 2048]).unwrap();
    let opts = Options::from_limits(false, &ladder::Limits::untrusted());
    let err = run(&g, &[a.clone(), a], &opts).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::OutOfFuel, .. }), "{err}");
    assert!(err.to_string().contains("Limits::fuel"), "{err}");
    // A 64³ product fits the same limits.
    let small = parse("graph g(%a: f32[64, 64], %b: f32[64, 64]) {\n  %c = matmul(%a, %b)\n  return %c\n}");
    let a = f32t(&[64, 64], &[1.0; 64 * 64]);
    let out = run(&small, &[a.clone(), a], &opts).unwrap();
    assert_eq!(out.outputs[0].as_f32().unwrap()[0], 64.0);
}

#[test]
fn the_runtime_takes_its_limits_from_compile_options() {
    // The interpreter backend's plans use the options' limits for fuel and elements.
    use ladder::{BackendKind, CompileOptions};
    let g = parse("graph g(%a: f32[256, 256], %b: f32[256, 256]) {\n  %c = matmul(%a, %b)\n  return %c\n}");
    let a = f32t(&[256, 256], &[0.5; 256 * 256]);
    let tight = ladder::Limits { fuel: 1 << 20, ..ladder::Limits::default() };
    for (limits, ok) in [(ladder::Limits::default(), true), (tight, false)] {
        let options = CompileOptions { backend: BackendKind::Interp, limits, ..CompileOptions::reference() };
        let plan = ladder::compile(&g, &options).unwrap();
        let result = plan.run(&[a.clone(), a.clone()]);
        assert_eq!(result.is_ok(), ok, "{:?}", result.err());
        if let Err(e) = result {
            assert!(e.to_string().contains("Limits::fuel"), "{e}");
        }
    }
}

#[test]
fn the_parser_keeps_to_its_limits_and_names_them() {
    use ladder::text::parse_with;
    let (dead, _) = chains(10, 4);
    let limits = |f: fn(&mut ladder::Limits)| {
        let mut l = ladder::Limits::default();
        f(&mut l);
        l
    };
    assert!(parse_with(&dead, &limits(|l| l.max_nodes = 10)).is_ok());
    let e = parse_with(&dead, &limits(|l| l.max_nodes = 9)).unwrap_err();
    assert!(e.message.contains("`Limits::max_nodes` = 9") && e.line == 11, "{e}");
    let e = parse_with(&dead, &limits(|l| l.max_file_bytes = 100)).unwrap_err();
    assert!(e.message.contains("`Limits::max_file_bytes` = 100"), "{e}");
    let blob = "blob @w: f32[4] = [1, 2, 3, 4]\ngraph g() {\n  %0 = const @w : f32[4]\n  return %0\n}\n";
    assert!(parse_with(blob, &limits(|l| l.max_tensor_bytes = 16)).is_ok());
    let e = parse_with(blob, &limits(|l| l.max_tensor_bytes = 15)).unwrap_err();
    assert!(e.message.contains("`Limits::max_tensor_bytes` = 15") && e.line == 1, "{e}");
    // A declared size whose bytes overflow is the same error, not a wrap.
    let huge = "blob @w: f64[4611686018427387904] = [1]\ngraph g() {\n  %0 = const @w : f64[4611686018427387904]\n  return %0\n}\n";
    let e = parse_with(huge, &ladder::Limits::default()).unwrap_err();
    assert!(e.message.contains("max_tensor_bytes"), "{e}");
}
