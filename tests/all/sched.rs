//! Scheduler decisions: what is materialised and why, merging, the library calls of the
//! data-movement prims, and determinism; every program is also run against the interpreter,
//! bit for bit.

use ladder::interp::{run, Options};
use ladder::kernel::eval::run_program;
use ladder::kernel::{Program, Step};
use ladder::models::example_encoder;
use ladder::sched::{schedule, schedule_explained, Scheduled};
use ladder::{Graph, Tensor};

use crate::common::{f32t, parse};

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

fn library_ops(p: &Program) -> Vec<String> {
    p.steps.iter().filter_map(|s| if let Step::Library(l) = s { Some(l.op.name().to_string()) } else { None }).collect()
}

#[test]
fn data_movement_prims_are_library_calls_in_dependency_order() {
    let (g, s) = sched(
        "graph g(%x: f32[4]) {
  %1 = exp(%x) : f32[4]
  %2 = rev(%1) {axes=[0]} : f32[4]
  %3 = cat(%2, %1) {axis=0} : f32[8]
  %4 = mul(%3, %3) : f32[8]
  return %4
}",
    );
    assert!(breaks(&s.program).is_empty(), "{}", s.program);
    assert_eq!(library_ops(&s.program), ["rev", "cat"], "{}", s.program);
    assert!(s.explanation.contains("; rev %2: library call"), "{}", s.explanation);
    assert!(s.explanation.contains("%1: it is an operand of rev %2 (a library call)"), "{}", s.explanation);
    assert!(s.program.to_string().contains("library b3 = cat(b2, b1) {axis=0}"), "{}", s.program);
    agrees(&g, &s.program, &[f32t(&[4], &[0.0, 1.0, -1.0, 2.0])]);

    // rev -> kernel -> cat, where cat also reads rev: three steps in that order.
    let (g, s) = sched(
        "graph g(%x: f32[4]) {
  %1 = rev(%x) {axes=[0]} : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = cat(%1, %2) {axis=0} : f32[8]
  return %3
}",
    );
    let kinds: Vec<&str> = s
        .program
        .steps
        .iter()
        .map(|s| match s {
            Step::Kernel(_) => "kernel",
            Step::Library(l) => l.op.name(),
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["rev", "kernel", "cat"], "{}", s.program);
    agrees(&g, &s.program, &[f32t(&[4], &[0.0, 1.0, -1.0, 2.0])]);
}

#[test]
fn a_library_copy_takes_its_sizes_from_its_buffers() {
    // The rev reads `exp(x[1:])` of shape [n - 1]: its size comes from that buffer's shape.
    let (g, s) = sched(
        "graph g(%x: f32[n]) {
  %1 = slice(%x) {axis=0, start=1} : f32[n - 1]
  %2 = exp(%1) : f32[n - 1]
  %3 = rev(%2) {axes=[0]} : f32[n - 1]
  return %3
}",
    );
    let libs: Vec<&ladder::kernel::LibraryCall> =
        s.program.steps.iter().filter_map(|s| if let Step::Library(l) = s { Some(l) } else { None }).collect();
    assert_eq!(libs.len(), 1, "{}", s.program);
    assert_eq!(libs[0].args.len(), 1, "the exp result only:\n{}", s.program);
    assert_eq!(s.program.buffers[libs[0].args[0]].shape.to_string(), "[n - 1]", "{}", s.program);
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
    // Nine kernels: six steps of their own and three that run as the epilogues of the
    // out-projection and the two feed-forward matmuls (bias, residual, the next norm).
    assert_eq!(p.kernels().count(), 9, "{p}");
    assert_eq!(kernels(p), 6, "{p}");
    assert_eq!(p.steps.iter().filter(|s| matches!(s, Step::Matmul(m) if m.epilogue.is_some())).count(), 3, "{p}");
    assert_eq!(p.steps.iter().filter(|s| matches!(s, Step::Matmul(_))).count(), 8);
    assert!(breaks(p).is_empty());
    // Each layer norm is one kernel of three reductions; the attention softmax one kernel of
    // one reduction stage (the maximum and the fused sum of exponentials) that also stores the
    // row maximum (%64) for the masking after the second matmul.
    let reductions = |k: &ladder::kernel::Kernel| k.stages.iter().filter(|s| !s.accumulators.is_empty()).count();
    let ks: Vec<&ladder::kernel::Kernel> = p.kernels().collect();
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
    // The first layer norm, then per layer the matmul with one kernel as its epilogue
    // computing the softmax, the residual add and the next layer's norm (storing the residual
    // and the norm).
    assert_eq!(p.steps.len(), layers + 1, "{p}");
    assert_eq!(p.kernels().count(), layers + 1, "{p}");
    let x = random_tensor(&mut rng, DType::F32, &[2, 8]).unwrap();
    agrees(&g, &p, &[x]);
}

/// A pointwise chain far deeper than one kernel's nesting bound (emission recurses once per
/// level) materialises a value every 128 levels, so emission never recurses deeper than that
/// (the chain may still be one kernel storing those values, each computed from the one before),
/// instead of overflowing the stack; the result is the interpreter's, natively too.
#[test]
fn a_very_deep_chain_is_split_into_kernels() {
    let n = 1000;
    let mut src = String::from("graph g(%x: f32[4]) {\n");
    let mut prev = "x".to_string();
    for i in 0..n {
        src.push_str(&format!("  %v{i} = {}(%{prev})\n", if i % 2 == 0 { "abs" } else { "neg" }));
        prev = format!("v{i}");
    }
    src.push_str(&format!("  return %{prev}\n}}\n"));
    let (g, s) = sched(&src);
    let cut = s.explanation.matches("it is nested 128 computations deep in one kernel").count();
    assert_eq!(cut, n / 128, "{}", s.explanation);
    let x = f32t(&[4], &[0.5, -1.0, 3.0, f32::NAN]);
    agrees(&g, &s.program, std::slice::from_ref(&x));
    let plan = ladder::compile(&g, &ladder::CompileOptions::default()).unwrap();
    let want = run(&g, std::slice::from_ref(&x), &Options::default()).unwrap();
    let got = plan.run(&[x]).unwrap();
    assert!(got.outputs[0].bit_eq(&want.outputs[0]), "{:?} vs {:?}", got.outputs[0], want.outputs[0]);
}

/// A computed value broadcast many times over (a mask from a `[b, s]` input, added to
/// `[b, h, s, s]` scores) is materialised once instead of recomputed per score: the score
/// kernel only loads it; a cheap one (a single op) stays fused.
#[test]
fn an_expensive_value_broadcast_many_times_is_computed_once() {
    let src = "graph g(%m: i64[2, 16], %y: f32[2, 4, 16, 16]) {
  %c = convert_element_type(%m) {dtype=f32}
  %one = full() {shape=[2, 16], value=1.0}
  %s = sub(%one, %c)
  %b = convert_element_type(%s) {dtype=bool}
  %big = full() {shape=[2, 16], value=-1e30}
  %w = where(%b, %big, %s)
  %r = reshape(%w) {shape=[2, 1, 1, 16]}
  %wb = broadcast_in_dim(%r) {shape=[2, 4, 16, 16], broadcast_dims=[0, 1, 2, 3]}
  %out = add(%y, %wb)
  %n = neg(%c)
  %nr = reshape(%n) {shape=[2, 1, 1, 16]}
  %nb = broadcast_in_dim(%nr) {shape=[2, 4, 16, 16], broadcast_dims=[0, 1, 2, 3]}
  %out2 = add(%y, %nb)
  return %out, %out2
}";
    let (g, s) = sched(src);
    assert!(s.explanation.contains("computed once instead"), "{}", s.explanation);
    // The kernel storing `out` loads the mask: no convert or select left in it.
    use ladder::kernel::Instr;
    let out = s.program.outputs.iter().find(|(n, _)| n == "out").unwrap().1;
    let stores = |k: &&ladder::kernel::Kernel| {
        k.stages.iter().flat_map(|st| &st.body).any(|i| matches!(i, Instr::Store { buf, .. } if *buf == out))
    };
    let k = s.program.kernels().find(stores).unwrap();
    let body: Vec<&Instr> = k.stages.iter().flat_map(|st| &st.body).collect();
    assert!(!body.iter().any(|i| matches!(i, Instr::Select { .. } | Instr::Convert { .. })), "{}", s.program);
    // The single `neg` stays fused where it is used.
    let out2 = s.program.outputs.iter().find(|(n, _)| n == "out2").unwrap().1;
    let k2 = s
        .program
        .kernels()
        .find(|k| {
            k.stages.iter().flat_map(|st| &st.body).any(|i| matches!(i, Instr::Store { buf, .. } if *buf == out2))
        })
        .unwrap();
    assert!(k2.stages.iter().flat_map(|st| &st.body).any(|i| matches!(i, Instr::Unary { .. })), "{}", s.program);
    let m = Tensor::from_i64(&[2, 16], (0..32).map(|i| i % 3 - 1).collect()).unwrap();
    let y: Vec<f32> = (0..2048).map(|i| (i as f32 - 1000.0) / 9.0).collect();
    agrees(&g, &s.program, &[m, f32t(&[2, 4, 16, 16], &y)]);
}

/// `graph chain(%x: f32[len])` of `n` unary ops, alternately `ops[0]` and `ops[1]`.
fn chain(n: usize, len: usize, ops: [&str; 2]) -> String {
    let mut src = format!("graph chain(%x: f32[{len}]) {{\n");
    let mut prev = "%x".to_string();
    for i in 0..n {
        src.push_str(&format!("  %v{i} = {}({prev})\n", ops[i % 2]));
        prev = format!("%v{i}");
    }
    src.push_str(&format!("  return {prev}\n}}"));
    src
}

/// A long chain of elementwise ops is scheduled without recursion as deep as the chain: on a
/// thread with a 256 KiB stack (1 MiB in a debug build, whose frames are several times larger:
/// the emitter's own recursion is bounded by `MAX_DEPTH` values), where the search for inline
/// reductions once recursed per link (it overflowed a 2 MiB worker's stack at about 10k
/// links); the program agrees with the interpreter.
#[test]
fn a_long_elementwise_chain_does_not_recurse_per_link() {
    let n = 3000;
    let g = parse(&chain(n, 5, ["neg", "abs"]));
    let p = std::thread::Builder::new()
        .stack_size(if cfg!(debug_assertions) { 1 << 20 } else { 256 << 10 })
        .spawn(move || schedule(&g).map(|p| (g, p)))
        .unwrap()
        .join()
        .expect("the scheduler overflowed its stack");
    let (g, p) = p.unwrap();
    agrees(&g, &p, &[f32t(&[5], &[-2.0, -0.0, 0.0, 3.5, f32::NAN])]);
}

/// A long chain is cut into kernels of bounded length: merging the pieces stops at
/// `MAX_MERGED_INSTRS` (each merge emits the merged kernel again, so unbounded merging of a
/// long chain's pieces costs the square of its length), and the chain still agrees with the
/// interpreter.
#[test]
fn a_long_chain_becomes_kernels_of_bounded_length() {
    let n = 5000;
    let g = parse(&chain(n, 3, ["neg", "exp"]));
    let p = schedule(&g).unwrap();
    let sizes: Vec<usize> = p.kernels().map(|k| k.stages.iter().map(|s| s.body.len()).sum()).collect();
    assert!(sizes.len() >= n / ladder::sched::MAX_MERGED_INSTRS, "{sizes:?}");
    // A merged kernel holds at most MAX_MERGED_INSTRS from its parts (renumbering can only
    // shrink it).
    assert!(sizes.iter().all(|&s| s <= ladder::sched::MAX_MERGED_INSTRS), "{sizes:?}");
    // Every link is computed once.
    let covered: usize = p.kernels().map(|k| k.covers.len()).sum();
    assert_eq!(covered, n, "{sizes:?}");
    agrees(&g, &p, &[f32t(&[3], &[-1.0, 0.0, 0.5])]);
}

/// A chain of row reductions and their broadcasts (`h ← 128·softmax-like(h) + x`, eight nodes
/// a link): within a kernel each stage recomputes every earlier link it needs, so a value is
/// recomputed in at most `MAX_STAGES` (8) stages and materialised past that. The kernels then
/// cost a bounded number of instructions per link however long the chain, and the chain agrees
/// with the interpreter.
#[test]
fn a_chain_of_row_reductions_is_cut_every_few_links() {
    use ladder::pipeline::{lower, Mode, Rung};
    let instrs_per_node = |nodes: usize| {
        let w = ladder::bench::Family::Rows.build("rows", nodes).unwrap();
        let lowering = lower(&w.graph, Mode::Native, Rung::Kernels).unwrap();
        let s = lowering.scheduled.as_ref().unwrap();
        assert!(s.explanation.contains("recomputed in more than 8 stages of one kernel"), "{}", s.explanation);
        let instrs: usize = s.program.kernels().map(|k| k.stages.iter().map(|st| st.body.len()).sum::<usize>()).sum();
        if nodes < 200 {
            agrees(lowering.graph(), &s.program, &w.inputs);
        }
        instrs as f64 / w.nodes() as f64
    };
    let (short, long) = (instrs_per_node(120), instrs_per_node(960));
    // About 4 per node (each link recomputed in three stages of its own and a few of the next);
    // without the bound, 7 and more.
    assert!(long <= 5.0, "{long} instructions per node");
    assert!(long <= 1.2 * short, "{short} then {long} instructions per node");
}
