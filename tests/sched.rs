//! Scheduler decisions: what is materialised and why, merging, graph-break grouping, and
//! determinism; every program is also run against the interpreter, bit for bit.

mod common;

use common::{f32t, parse};
use ladder::interp::{run, Options};
use ladder::kernel::eval::run_program;
use ladder::kernel::{Program, Step};
use ladder::models::example_encoder;
use ladder::sched::{schedule, schedule_explained, Scheduled};
use ladder::{Graph, Tensor};

fn sched(src: &str) -> (Graph, Scheduled) {
    let g = parse(src);
    let s = schedule_explained(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    (g, s)
}

fn kernels(p: &Program) -> usize {
    p.steps.iter().filter(|s| matches!(s, Step::Kernel(_))).count()
}

fn breaks(p: &Program) -> Vec<&ladder::kernel::InterpCall> {
    p.steps.iter().filter_map(|s| if let Step::Interp(c) = s { Some(c) } else { None }).collect()
}

fn agrees(g: &Graph, p: &Program, inputs: &[Tensor]) {
    let want = run(g, inputs, &Options::default()).unwrap().outputs;
    let got = run_program(p, g, inputs).unwrap_or_else(|e| panic!("{e}\n{p}"));
    for (w, o) in want.iter().zip(&got) {
        assert!(w.bit_eq(o), "want {w}, got {o}\n{p}");
    }
}

#[test]
fn a_reduction_needed_inside_the_loops_is_materialised() {
    // Row sums broadcast along columns and column maxima broadcast along rows: the kernel
    // loops over rows outside, so the column maxima vary inside its loop.
    let (g, s) = sched(
        "graph g(%x: f32[3, 4]) {
  %1 = reduce_sum(%x) {axes=[1]} : f32[3]
  %2 = reduce_max(%x) {axes=[0]} : f32[4]
  %3 = broadcast_in_dim(%1) {shape=[3, 4], broadcast_dims=[0]} : f32[3, 4]
  %4 = broadcast_in_dim(%2) {shape=[3, 4], broadcast_dims=[1]} : f32[3, 4]
  %5 = add(%3, %4) : f32[3, 4]
  return %5
}",
    );
    assert_eq!(kernels(&s.program), 2, "{}", s.program);
    assert!(
        s.explanation.contains("%2: it is a reduction needed at an index that varies inside its consumer's loops"),
        "{}",
        s.explanation
    );
    let x = f32t(&[3, 4], &[1.0, -2.0, 3.5, 0.25, 9.0, 8.0, -7.0, 6.0, 0.0, 1e-3, -1e3, 2.0]);
    agrees(&g, &s.program, &[x]);
}

const CHAIN: &str = "graph g(%x: f32[n, 4]) {
  %1 = exp(%x) : f32[n, 4]
  %2 = neg(%1) : f32[n, 4]
  %3 = exp(%2) : f32[n, 4]
  %4 = sin(%3) : f32[n, 4]
  %5 = cos(%4) : f32[n, 4]
  %6 = tanh(%5) : f32[n, 4]
  %7 = abs(%6) : f32[n, 4]
  %8 = sqrt(%7) : f32[n, 4]
  %9 = exp(%8) : f32[n, 4]
  %10 = log(%9) : f32[n, 4]
  %11 = reduce_sum(%10) {axes=[1]} : f32[n]
  %12 = mul(%10, %10) : f32[n, 4]
  return %11, %12
}";

#[test]
fn an_expensive_value_needed_by_two_kernels_is_stored_once() {
    let (g, s) = sched(CHAIN);
    assert!(
        s.explanation.contains("%10: it is needed by the kernels of %11, %12 and costs 10 instructions"),
        "{}",
        s.explanation
    );
    // Stored by the kernel of %12 (same loops), read by the reduction's kernel.
    assert_eq!(kernels(&s.program), 2, "{}", s.program);
    assert!(s.explanation.contains("stores %10 %12"), "{}", s.explanation);
    agrees(&g, &s.program, &[f32t(&[2, 4], &[0.5, -1.0, 2.0, 3.0, 0.0, -0.0, 1e-8, 7.0])]);
}

#[test]
fn a_cheap_value_needed_by_two_kernels_is_recomputed() {
    let src = CHAIN.replace("%10 = log(%9)", "%10 = log(%x)");
    // Only `log(x)` feeds both: one instruction, recomputed in each kernel, never stored.
    let (g, s) = sched(&src);
    assert_eq!(kernels(&s.program), 2, "{}", s.program);
    assert!(!s.explanation.contains("%10:"), "{}", s.explanation);
    assert!(s.program.buffers.values().all(|b| b.value != Some(ladder::Value::from_u32(10))));
    agrees(&g, &s.program, &[f32t(&[1, 4], &[0.5, 1.0, 2.0, 3.0])]);
}

#[test]
fn adjacent_graph_breaks_are_one_break_unless_that_makes_a_cycle() {
    let (g, s) = sched(
        "graph g(%x: f32[4]) {
  %1 = exp(%x) : f32[4]
  %2 = rev(%1) {axes=[0]} : f32[4]
  %3 = cat(%2, %1) {axis=0} : f32[8]
  %4 = mul(%3, %3) : f32[8]
  return %4
}",
    );
    let b = breaks(&s.program);
    assert_eq!(b.len(), 1, "{}", s.program);
    assert_eq!(b[0].reason, "cat, rev are not compiled by the kernel backends");
    assert_eq!(b[0].graph.len(), 3, "one input and two ops:\n{}", s.program);
    agrees(&g, &s.program, &[f32t(&[4], &[0.0, 1.0, -1.0, 2.0])]);

    // rev -> kernel -> cat, where cat also reads rev: joining them would be a cycle.
    let (g, s) = sched(
        "graph g(%x: f32[4]) {
  %1 = rev(%x) {axes=[0]} : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = cat(%1, %2) {axis=0} : f32[8]
  return %3
}",
    );
    assert_eq!(breaks(&s.program).len(), 2, "{}", s.program);
    agrees(&g, &s.program, &[f32t(&[4], &[0.0, 1.0, -1.0, 2.0])]);
}

#[test]
fn a_graph_break_binds_its_sizes_from_a_graph_input_when_its_own_inputs_cannot() {
    // The break reads `x[1:]` of shape [n - 1]: `n` is passed in through `x` itself.
    let (g, s) = sched(
        "graph g(%x: f32[n]) {
  %1 = slice(%x) {axis=0, start=1} : f32[n - 1]
  %2 = exp(%1) : f32[n - 1]
  %3 = rev(%2) {axes=[0]} : f32[n - 1]
  return %3
}",
    );
    let b = breaks(&s.program);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].args.len(), 2, "the exp result and the size carrier x:\n{}", s.program);
    for n in [1, 2, 5] {
        agrees(&g, &s.program, &[f32t(&[n], &(0..n).map(|i| i as f32).collect::<Vec<_>>())]);
    }
}

#[test]
fn scheduling_is_deterministic() {
    let g = ladder::passes::lower(&example_encoder().unwrap()).unwrap().simplified;
    let a = schedule_explained(&g).unwrap();
    let b = schedule_explained(&g).unwrap();
    assert_eq!(a.program.to_string(), b.program.to_string());
    assert_eq!(a.explanation, b.explanation);
}

#[test]
fn the_encoder_is_nine_kernels_around_eight_matmuls() {
    let g = ladder::passes::lower(&example_encoder().unwrap()).unwrap().simplified;
    let s = schedule_explained(&g).unwrap();
    let p = &s.program;
    assert_eq!(kernels(p), 9, "{p}");
    assert_eq!(p.steps.iter().filter(|s| matches!(s, Step::Matmul(_))).count(), 8);
    assert!(breaks(p).is_empty());
    // Each layer norm is one kernel of three reductions; the attention softmax one kernel of
    // one reduction stage (the maximum and the fused sum of exponentials) that also stores the
    // row maximum (%64) for the masking after the second matmul.
    let reductions = |k: &ladder::kernel::Kernel| k.stages.iter().filter(|s| !s.accumulators.is_empty()).count();
    let ks: Vec<&ladder::kernel::Kernel> =
        p.steps.iter().filter_map(|s| if let Step::Kernel(k) = s { Some(k) } else { None }).collect();
    assert_eq!(ks.iter().map(|k| reductions(k)).collect::<Vec<_>>(), vec![3, 0, 0, 0, 1, 0, 3, 0, 0]);
    assert!(s.explanation.contains("k4: outer [4, seq], 4 stages (1 reduction); stores %64 %71"), "{}", s.explanation);
    assert!(s.explanation.contains("k0: outer [seq], 8 stages (3 reductions); stores %ln1"), "{}", s.explanation);
    assert!(s.explanation.contains("reads %x 4 times"), "{}", s.explanation);
    assert!(schedule(&example_encoder().unwrap()).is_err(), "high-level graphs are lowered first");
}

#[test]
fn a_deep_stack_schedules_into_a_fixed_number_of_steps_per_layer() {
    use ladder::ir::{AttrValue, Dim, Shape};
    use ladder::models::{random_tensor, Rng};
    use ladder::{DType, GraphBuilder, OpKind};
    let layers = 64;
    let mut rng = Rng::new(1);
    let mut b = GraphBuilder::new("deep");
    let shape = Shape(vec![Dim::sym("batch"), Dim::new(8)].into());
    let mut x = b.input("x", DType::F32, shape).unwrap();
    for l in 0..layers {
        let w = b.named_constant(&format!("w{l}"), random_tensor(&mut rng, DType::F32, &[8]).unwrap()).unwrap();
        let bias = b.named_constant(&format!("b{l}"), random_tensor(&mut rng, DType::F32, &[8]).unwrap()).unwrap();
        let n = b.layer_norm(x, w, bias, 1e-5).unwrap();
        let m = b.named_constant(&format!("m{l}"), random_tensor(&mut rng, DType::F32, &[8, 8]).unwrap()).unwrap();
        let h = b.linear(n, m, None).unwrap();
        let s = b.op(OpKind::Softmax, &[h], &[("axis", AttrValue::Int(-1))]).unwrap();
        x = b.add(x, s).unwrap();
    }
    b.output("y", x).unwrap();
    let g = ladder::passes::lower(&b.finish().unwrap()).unwrap().simplified;
    let p = schedule(&g).unwrap();
    // The first layer norm, then per layer the matmul and one kernel computing the softmax,
    // the residual add and the next layer's norm (storing the residual and the norm).
    assert_eq!(p.steps.len(), 2 * layers + 1, "{p}");
    let x = random_tensor(&mut rng, DType::F32, &[2, 8]).unwrap();
    agrees(&g, &p, &[x]);
}
