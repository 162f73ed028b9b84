//! The kernel IR's reference executor agrees bit for bit with the interpreter: for a graph
//! `g`, `run_program(schedule(lower(g).simplified))` equals `interp(lower(g).simplified)` in
//! f32 (op-dtype) mode, on random graphs of every rung and on the built-in encoder.

use ladder::gen::{random_graph, random_tensor, seeded_bytes, GenConfig, Source};
use ladder::interp::{run, Options};
use ladder::kernel::eval::run_program;
use ladder::kernel::{Program, Step};
use ladder::models::{example_encoder, random_tensor as model_tensor, Rng};
use ladder::ops::Rung;
use ladder::passes::lower;
use ladder::sched::schedule;
use ladder::text::print;
use ladder::{Graph, Tensor, TensorData};

/// Bitwise equality, except that any NaN equals any NaN.
fn same(a: &Tensor, b: &Tensor) -> bool {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return false;
    }
    match (a.data(), b.data()) {
        (TensorData::I32(_) | TensorData::I64(_) | TensorData::Bool(_), _) => a.bit_eq(b),
        _ => a
            .to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()),
    }
}

fn check_program(seed: &str, g: &Graph, p: &Program, inputs: &[Tensor]) -> bool {
    let opts = Options { max_elements: 100_000, ..Options::default() };
    let Ok(want) = run(g, inputs, &opts) else { return false };
    let got = run_program(p, g, inputs).unwrap_or_else(|e| panic!("{seed}: program failed: {e}\n{}\n{p}", print(g)));
    assert_eq!(got.len(), want.outputs.len());
    for (i, (w, o)) in want.outputs.iter().zip(&got).enumerate() {
        assert!(same(w, o), "{seed}: output {i} differs:\n want {w}\n  got {o}\n{}\n{p}", print(g));
    }
    true
}

fn check_random(seed: u64, rungs: Vec<Rung>) -> Option<usize> {
    let bytes = seeded_bytes(seed, 4000);
    let cfg = GenConfig { attempts: 120, rungs, ..GenConfig::default() };
    let g = random_graph(&mut Source::new(&bytes), &cfg);
    let lowered = lower(&g).ok()?;
    let s = &lowered.simplified;
    let p = schedule(s).unwrap_or_else(|e| panic!("seed {seed}: schedule failed: {e}\n{}", print(s)));
    let bind = |sym: &str| Some(if sym == "batch" { 2 } else { 3 });
    let mut data = Source::new(&bytes[2500..]);
    let inputs: Vec<Tensor> = s
        .inputs()
        .iter()
        .map(|&v| {
            let ty = s.ty(v);
            let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.eval(&bind).unwrap_or(1) as usize).collect();
            random_tensor(&mut data, ty.dtype, &shape)
        })
        .collect();
    check_program(&format!("seed {seed}"), s, &p, &inputs).then_some(p.steps.len())
}

#[test]
fn random_prims_graphs_run_bitwise_like_the_interpreter() {
    let ran: Vec<usize> = (0..600).filter_map(|s| check_random(s, vec![Rung::Prim])).collect();
    eprintln!("kernels_exact prims: {} graphs, {} steps", ran.len(), ran.iter().sum::<usize>());
    assert!(ran.len() > 300, "only {} graphs compared", ran.len());
}

#[test]
fn random_graphs_of_every_rung_run_bitwise_like_the_interpreter() {
    let all = vec![Rung::High, Rung::Prim, Rung::Opaque];
    let ran: Vec<usize> = (1000..1600).filter_map(|s| check_random(s, all.clone())).collect();
    eprintln!("kernels_exact all rungs: {} graphs, {} steps", ran.len(), ran.iter().sum::<usize>());
    assert!(ran.len() > 300, "only {} graphs compared", ran.len());
}

#[test]
fn the_encoder_runs_bitwise_like_the_interpreter_at_several_lengths() {
    let g = example_encoder().unwrap();
    let lowered = lower(&g).unwrap();
    let p = schedule(&lowered.simplified).unwrap();
    assert!(p.steps.iter().all(|s| !matches!(s, Step::Interp(_))), "the encoder needs no graph break:\n{p}");
    for seq in [1, 3, 7] {
        let x = model_tensor(&mut Rng::new(seq as u64), ladder::DType::F32, &[1, seq, 32]).unwrap();
        assert!(check_program(&format!("seq {seq}"), &lowered.simplified, &p, &[x]));
    }
}
