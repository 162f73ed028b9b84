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
