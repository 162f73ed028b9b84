//! Functionalization preserves meaning: on random graphs with views and in-place ops, the
//! functional graph's outputs equal the original's bit for bit, its extra outputs equal the
//! inputs the original mutated, and it contains no mutating op.

use ladder::gen::{random_graph, seeded_bytes, GenConfig, Source};
use ladder::interp::{run, Options};
use ladder::ir::verify::{verify, Stage};
use ladder::passes::functionalize;
use ladder::text::print;
use ladder::Tensor;

fn same(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

/// Returns (ran, had a mutation).
fn check(seed: u64) -> (bool, bool) {
    let bytes = seeded_bytes(seed, 1600);
    let cfg = GenConfig { attempts: 60, ..GenConfig::default() };
    let g = random_graph(&mut Source::new(&bytes), &cfg);
    let f = match functionalize(&g) {
        Ok(f) => f,
        Err(ladder::passes::FunctionalizeError::WriteThroughBroadcast { .. }) => return (false, false),
        Err(e) => panic!("seed {seed}: {e}\n{}", print(&g)),
    };
    verify(&f.graph, Stage::Functional)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}\n{}", print(&g), print(&f.graph)));
    let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[800..]));
    let opts = Options { max_elements: 100_000, ..Options::default() };
    let Ok(want) = run(&g, &inputs, &opts) else { return (false, false) };
    let got = run(&f.graph, &inputs, &opts)
        .unwrap_or_else(|e| panic!("seed {seed}: functional graph fails: {e}\n{}\n{}", print(&g), print(&f.graph)));
    let mutated = !f.epilogue.mutations.is_empty();
    for (i, (w, o)) in want.outputs.iter().zip(&got.outputs).enumerate() {
        assert!(same(w, o), "seed {seed}: output {i} differs: {w} vs {o}\n{}\n{}", print(&g), print(&f.graph));
    }
    for (i, after) in want.inputs_after.iter().enumerate() {
        match f.epilogue.mutations.iter().find(|m| m.input == i) {
            Some(m) => assert!(
                same(after, &got.outputs[m.output]),
                "seed {seed}: input {i} after the run differs\n{}\n{}",
                print(&g),
                print(&f.graph)
            ),
            None => assert!(
                same(after, &inputs[i]),
                "seed {seed}: input {i} changed but no mutation was recorded\n{}",
                print(&g)
            ),
        }
    }
    (true, mutated)
}

#[test]
fn random_graphs_functionalize_without_changing_results() {
    let mut ran = 0;
    let mut mutated = 0;
    for seed in 0..2000 {
        let (r, m) = check(seed);
        ran += r as usize;
        mutated += m as usize;
    }
    eprintln!("functionalize: {ran} of 2000 graphs compared, {mutated} with mutated inputs");
    assert!(ran > 1000 && mutated > 100, "too few useful cases: {ran} ran, {mutated} mutated inputs");
}

#[test]
fn functional_forms_list_what_functionalize_emits() {
    use ladder::passes::functionalize::functional_forms;
    use ladder::OpKind;
    // Mixed dtypes and a broadcast source, so every conversion and expansion is exercised.
    let cases = [
        (OpKind::AddInplace, "add_(%x, %y)"),
        (OpKind::SubInplace, "sub_(%x, %y)"),
        (OpKind::MulInplace, "mul_(%x, %y)"),
        (OpKind::DivInplace, "div_(%x, %y)"),
        (OpKind::ReluInplace, "relu_(%x)"),
        (OpKind::CopyInplace, "copy_(%x, %y)"),
        (OpKind::FillInplace, "fill_(%x) {value=2.0}"),
        (OpKind::MaskedFillInplace, "masked_fill_(%x, %m) {value=2.0}"),
        (OpKind::SliceAssignInplace, "slice_assign_(%x, %y) {axis=1, start=1}"),
    ];
    for (op, node) in cases {
        let src = format!("graph g(%x: f32[2, 3], %y: f64[1], %m: bool[3]) {{\n  %r = {node}\n  return %r\n}}");
        let g = ladder::text::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let f = functionalize(&g).unwrap();
        for (_, n) in f.graph.nodes() {
            assert!(
                matches!(n.op, OpKind::Input | OpKind::Const) || functional_forms(op).contains(&n.op),
                "{op:?} was rewritten into {:?}, missing from functional_forms:\n{}",
                n.op,
                print(&f.graph)
            );
        }
        assert!(!functional_forms(op).is_empty());
    }
}

/// Found by the `grad` fuzz target: an `expand` to the shape it already has (`[-1]` of
/// `[seq]`) is the identity, so a write through it lands as it is: not refused as a write
/// through a broadcast.
#[test]
fn a_write_through_an_identity_expand_functionalizes() {
    let src = "graph g(%x0: f64[seq]) {\n  %1 = hardsigmoid(%x0)\n  %2 = expand(%1) {shape=[-1]}\n  \
               %3 = copy_(%2, %2)\n  return %3, %1\n}";
    let g = ladder::text::parse(src).unwrap();
    let f = functionalize(&g).unwrap_or_else(|e| panic!("{e}"));
    verify(&f.graph, Stage::Functional).unwrap();
    let x = Tensor::from_f64_as(ladder::DType::F64, &[4], &[-4.0, -1.0, 0.5, 3.5]).unwrap();
    let want = run(&g, std::slice::from_ref(&x), &Options::default()).unwrap();
    let got = run(&f.graph, &[x], &Options::default()).unwrap();
    for (w, o) in want.outputs.iter().zip(&got.outputs) {
        assert!(same(w, o), "{w} vs {o}\n{}", print(&f.graph));
    }
    // An expansion that broadcasts is still refused.
    let src = "graph g(%x0: f64[1]) {\n  %e = expand(%x0) {shape=[3]}\n  %c = copy_(%e, %e)\n  return %c\n}";
    let g = ladder::text::parse(src).unwrap();
    assert!(matches!(functionalize(&g), Err(ladder::passes::FunctionalizeError::WriteThroughBroadcast { .. })));
}

/// A write through a strided slice of a symbolic length cannot be written back (interior
/// padding of a symbolic size): a typed refusal naming the view, never an ill-typed node;
/// the same write on a static length is written back.
#[test]
fn a_strided_write_of_symbolic_length_is_a_typed_refusal() {
    let src = |dim: &str| {
        format!(
            "graph g(%x: f64[{dim}]) {{\n  %n = neg(%x)\n  %s = slice(%n) {{axis=0, step=2}}\n  %d = div_(%s, %s)\n  return %d, %n\n}}"
        )
    };
    let g = ladder::text::parse(&src("batch")).unwrap();
    match functionalize(&g) {
        Err(e @ ladder::passes::FunctionalizeError::SymbolicStridedWrite { .. }) => {
            let text = e.to_string();
            assert!(text.contains("step 2") && text.contains("(batch + 1) / 2"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    let g = ladder::text::parse(&src("5")).unwrap();
    let f = functionalize(&g).unwrap_or_else(|e| panic!("{e}"));
    verify(&f.graph, Stage::Functional).unwrap();
    let x = Tensor::from_f64_as(ladder::DType::F64, &[5], &[1.0, -2.0, 3.0, 4.0, -5.0]).unwrap();
    let want = run(&g, std::slice::from_ref(&x), &Options::default()).unwrap();
    let got = run(&f.graph, &[x], &Options::default()).unwrap();
    for (w, o) in want.outputs.iter().zip(&got.outputs) {
        assert!(same(w, o), "{w} vs {o}\n{}", print(&f.graph));
    }
}
