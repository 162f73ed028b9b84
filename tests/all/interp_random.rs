//! Random graphs on random data: the interpreter never panics, and every op's result agrees
//! with its own shape rule (an `Internal` error would mean `infer` and `eval` disagree).

use std::panic::{catch_unwind, AssertUnwindSafe};

use ladder::gen::{random_graph, random_tensor, seeded_bytes, GenConfig, Source};
use ladder::interp::{run, InterpError, Options};
use ladder::text::print;

/// Runs one generated graph; returns the ops of its nodes when it ran to completion.
fn check(seed: u64) -> Option<Vec<ladder::OpKind>> {
    let bytes = seeded_bytes(seed, 1200);
    let mut src = Source::new(&bytes);
    let g = random_graph(&mut src, &GenConfig::default());
    let mut data = Source::new(&bytes[600..]);
    let bind = |s: &str| {
        Some(match s {
            "batch" => 2,
            "seq" => 3,
            _ => 1,
        })
    };
    let inputs: Vec<_> = g
        .inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.eval(&bind).unwrap_or(1) as usize).collect();
            random_tensor(&mut data, ty.dtype, &shape)
        })
        .collect();
    let options = Options { fuel: 10_000_000, max_elements: 100_000, ..Options::default() };
    for precise in [false, true] {
        let opts = Options { precise, ..options.clone() };
        let result = catch_unwind(AssertUnwindSafe(|| run(&g, &inputs, &opts)));
        match result {
            Err(_) => panic!("interpreter panicked on seed {seed} (precise={precise}):\n{}", print(&g)),
            Ok(Err(e @ InterpError::Internal { .. })) => {
                panic!("infer/eval disagree on seed {seed}: {e}\n{}", print(&g))
            }
            Ok(Err(_)) => return None,
            Ok(Ok(out)) => assert_eq!(out.outputs.len(), g.outputs().len()),
        }
    }
    Some(g.nodes().map(|(_, n)| n.op).collect())
}

#[test]
fn random_graphs_run_without_panics_or_type_disagreements() {
    let runs: Vec<Vec<ladder::OpKind>> = (0..1500).filter_map(check).collect();
    let completed = runs.len();
    let nodes: usize = runs.iter().map(Vec::len).sum();
    let distinct: std::collections::BTreeSet<_> = runs.iter().flatten().collect();
    eprintln!(
        "interp_random: {completed} of 1500 random graphs ran to completion, {nodes} nodes, {} distinct ops",
        distinct.len()
    );
    // The generator must reach most of the op set, or this test says little.
    assert!(distinct.len() >= 80, "only {} distinct ops ran: {distinct:?}", distinct.len());
    // Most graphs should run to completion; runtime errors (index out of range, division by
    // zero) are legitimate for some.
    assert!(completed > 900, "only {completed} of 1500 graphs ran to completion");
}
