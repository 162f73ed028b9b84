//! The runtime: input guards, the epilogue of in-place graphs, concurrent runs of one plan,
//! arena reuse, symbolic sizes without recompiling, memory planning, and the native kernel seam.

use std::sync::Arc;

use ladder::backend::cpu::jit::{KernelCompiler, NativeKernel};
use ladder::interp::{self, Options};
use ladder::kernel::eval::GuardError;
use ladder::kernel::{Kernel, Program, Step};
use ladder::models::{example_encoder, random_tensor, Rng};
use ladder::runtime::{Declined, MemoryReport, RunError};
use ladder::{compile, BackendKind, CompileOptions, DType, Dim, Graph, Plan, Tensor};

use crate::common::{f32t, parse};

fn cpu(g: &Graph) -> Plan {
    compile(g, &CompileOptions::reference()).unwrap_or_else(|e| panic!("compile: {e}"))
}

/// What the plan must compute: the interpreter on the same lowered graph, bit for bit.
fn reference(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let lowered = ladder::passes::lower(g).unwrap();
    interp::run(&lowered.simplified, inputs, &Options::default()).unwrap().outputs
}

fn assert_bitwise(got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(g.bit_eq(w), "got {g}, want {w}");
    }
}

const TWO_INPUTS: &str = "graph g(%x: f32[n, 4], %y: f32[n], %z: f32[2*n]) {
  %3 = reduce_sum(%x) {axes=[1]}
  %4 = add(%3, %y)
  %5 = reduce_sum(%z) {axes=[0]}
  return %4, %5
}";

#[test]
fn guards_reject_bad_inputs_with_typed_errors_naming_the_input() {
    let plan = cpu(&parse(TWO_INPUTS));
    let x = f32t(&[2, 4], &[1.0; 8]);
    let y = f32t(&[2], &[1.0, 2.0]);
    let z = f32t(&[4], &[1.0; 4]);
    let ok = plan.run(&[x.clone(), y.clone(), z.clone()]).unwrap();
    assert_eq!(ok.outputs[0].as_f32(), Some(&[5.0f32, 6.0][..]));
    assert_eq!(ok.outputs[1].as_f32(), Some(&[4.0f32][..]));

    let err = |inputs: &[Tensor]| match plan.run(inputs) {
        Err(RunError::Guard(e)) => e,
        other => panic!("expected a guard error, got {other:?}"),
    };
    assert_eq!(err(&[x.clone(), y.clone()]), GuardError::InputCount { expected: 3, got: 2 });
    let xi = Tensor::from_i64(&[2, 4], vec![1; 8]).unwrap();
    assert!(
        matches!(err(&[xi, y.clone(), z.clone()]), GuardError::DType { name, expected: DType::F32, got: DType::I64 } if name == "x")
    );
    let flat = f32t(&[8], &[1.0; 8]);
    assert!(matches!(err(&[flat, y.clone(), z.clone()]), GuardError::Rank { name, rank: 2, .. } if name == "x"));
    let wide = f32t(&[2, 5], &[1.0; 10]);
    let e = err(&[wide, y.clone(), z.clone()]);
    assert!(matches!(&e, GuardError::Dim { name, axis: 1, .. } if name == "x"), "{e}");
    assert!(e.to_string().contains("input `x` must have shape [n, 4], got [2, 5]"), "{e}");
    let y3 = f32t(&[3], &[1.0; 3]);
    let e = err(&[x.clone(), y3, z.clone()]);
    assert!(
        matches!(&e, GuardError::SymbolConflict { name, symbol, bound: 2, got: 3, .. } if name == "y" && symbol == "n"),
        "{e}"
    );
    // A compound dim is checked once the symbol is bound: `2*n` with n = 2 must be 4.
    let z5 = f32t(&[5], &[1.0; 5]);
    let e = err(&[x, y, z5]);
    assert!(matches!(&e, GuardError::Dim { name, axis: 0, dim, .. } if name == "z" && dim == "2*n"), "{e}");
}

/// Borrowed inputs (`TensorView`) meet the same guards as tensors, with the same typed
/// errors, on every backend; a view whose shape does not hold its buffer is refused when it is
/// made.
#[test]
fn views_are_guarded_as_tensors_are_on_every_backend() {
    let g = parse(TWO_INPUTS);
    let (x, y, z) = ([1.0f32; 8], [1.0f32, 2.0], [1.0f32; 4]);
    let view = |d: &'static [f32], s: &'static [usize]| ladder::TensorView::new(d, s).unwrap();
    let x: &'static [f32] = Box::leak(Box::new(x));
    let (y, z): (&'static [f32], &'static [f32]) = (Box::leak(Box::new(y)), Box::leak(Box::new(z)));
    let interpreter = CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() };
    for options in [interpreter, CompileOptions::reference(), CompileOptions::native_cpu(2).unwrap()] {
        let plan = compile(&g, &options).unwrap();
        let ok = plan.run_views(&[view(x, &[2, 4]), view(y, &[2]), view(z, &[4])]).unwrap();
        assert_eq!(ok.outputs[0].as_f32(), Some(&[5.0f32, 6.0][..]), "{:?}", plan.backend());
        assert_eq!(ok.outputs[1].as_f32(), Some(&[4.0f32][..]));
        let err = |inputs: &[ladder::TensorView]| match plan.run_views(inputs) {
            Err(RunError::Guard(e)) => e,
            other => panic!("expected a guard error, got {other:?}"),
        };
        assert_eq!(err(&[view(x, &[2, 4]), view(y, &[2])]), GuardError::InputCount { expected: 3, got: 2 });
        let xi = [1i64; 8];
        let e = err(&[ladder::TensorView::new(&xi, &[2, 4]).unwrap(), view(y, &[2]), view(z, &[4])]);
        assert!(
            matches!(e, GuardError::DType { ref name, expected: DType::F32, got: DType::I64 } if name == "x"),
            "{e}"
        );
        let e = err(&[view(x, &[8]), view(y, &[2]), view(z, &[4])]);
        assert!(matches!(e, GuardError::Rank { ref name, rank: 2, .. } if name == "x"), "{e}");
        let e = err(&[view(x, &[4, 2]), view(y, &[2]), view(z, &[4])]);
        assert!(e.to_string().contains("input `x` must have shape [n, 4], got [4, 2]"), "{e}");
    }
    assert!(matches!(
        ladder::TensorView::new(&[1.0f32; 6], &[4, 2]),
        Err(ladder::tensor::TensorError::LengthMismatch { expected: 8, got: 6, .. })
    ));
    assert!(matches!(
        ladder::TensorView::new(&[0u8; 0], &[usize::MAX, 2]),
        Err(ladder::tensor::TensorError::TooLarge { .. })
    ));
    // A view of a tensor and the tensor's copy back are the tensor, empty and scalar included.
    for t in [
        f32t(&[2, 0], &[]),
        Tensor::from_i64(&[], vec![-7]).unwrap(),
        Tensor::from_bool(&[3], vec![true, false, true]).unwrap(),
    ] {
        let v = ladder::TensorView::from(&t);
        assert_eq!((v.dtype(), v.shape(), v.numel()), (t.dtype(), t.shape(), t.numel()));
        assert!(v.to_tensor().bit_eq(&t));
    }
}

#[test]
fn the_epilogue_returns_mutated_inputs_and_run_in_place_writes_them_back() {
    let g = parse(
        "graph g(%x: f32[3], %y: f32[3]) {
  %2 = add_(%x, %y)
  %3 = mul(%x, %y)
  return %3
}",
    );
    let x = f32t(&[3], &[1.0, 2.0, 3.0]);
    let y = f32t(&[3], &[10.0, 20.0, 30.0]);
    for backend in [BackendKind::Cpu, BackendKind::Interp] {
        let plan = compile(&g, &CompileOptions { backend, ..CompileOptions::reference() }).unwrap();
        let out = plan.run(&[x.clone(), y.clone()]).unwrap();
        assert_eq!(out.outputs.len(), 1, "{backend:?}");
        // mul reads x after the in-place add.
        assert_eq!(out.outputs[0].as_f32(), Some(&[110.0f32, 440.0, 990.0][..]), "{backend:?}");
        assert_eq!(out.mutated_inputs.len(), 1);
        assert_eq!(out.mutated_inputs[0].0, 0);
        assert_eq!(out.mutated_inputs[0].1.as_f32(), Some(&[11.0f32, 22.0, 33.0][..]));
        let mut inputs = vec![x.clone(), y.clone()];
        let outs = plan.run_in_place(&mut inputs).unwrap();
        assert_eq!(outs[0].as_f32(), Some(&[110.0f32, 440.0, 990.0][..]));
        assert_eq!(inputs[0].as_f32(), Some(&[11.0f32, 22.0, 33.0][..]));
        assert_eq!(inputs[1].as_f32(), Some(&[10.0f32, 20.0, 30.0][..]));
    }
}

fn encoder_input(seq: usize, seed: u64) -> Tensor {
    random_tensor(&mut Rng::new(seed), DType::F32, &[1, seq, 32]).unwrap()
}

#[test]
fn one_plan_runs_from_four_threads_at_once() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Plan>();
    let g = example_encoder().unwrap();
    let plan = cpu(&g);
    let cases: Vec<(Tensor, Vec<Tensor>)> = (0..8)
        .map(|k| {
            let x = encoder_input(1 + k % 5, k as u64);
            let want = reference(&g, std::slice::from_ref(&x));
            (x, want)
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (plan, cases) = (&plan, &cases);
            s.spawn(move || {
                for round in 0..3 {
                    for (k, (x, want)) in cases.iter().enumerate() {
                        if (k + t + round) % 2 == 0 {
                            let got = plan.run(std::slice::from_ref(x)).unwrap();
                            assert_bitwise(&got.outputs, want);
                        }
                    }
                }
            });
        }
    });
    // At most one arena per concurrent run state, grown at most once per distinct size order.
    assert!(plan.arenas_allocated() <= 4 * 5, "{} arenas", plan.arenas_allocated());
}

#[test]
fn arenas_are_reused_across_runs() {
    let g = example_encoder().unwrap();
    let plan = cpu(&g);
    plan.run(&[encoder_input(4, 1)]).unwrap();
    assert_eq!(plan.arenas_allocated(), 1);
    for seed in 2..5 {
        plan.run(&[encoder_input(4, seed)]).unwrap();
    }
    assert_eq!(plan.arenas_allocated(), 1, "runs of the same size reuse the arena");
    plan.run(&[encoder_input(2, 9)]).unwrap();
    assert_eq!(plan.arenas_allocated(), 1, "a smaller run fits the arena it has");
    plan.run(&[encoder_input(9, 9)]).unwrap();
    assert_eq!(plan.arenas_allocated(), 2, "a larger run grows it once");
    plan.run(&[encoder_input(9, 10)]).unwrap();
    assert_eq!(plan.arenas_allocated(), 2);
}

#[test]
fn one_plan_serves_every_batch_size() {
    let g = parse(
        "graph mlp(%x: f32[batch, 8], %w: f32[4, 8], %b: f32[4]) {
  %h = linear(%x, %w, %b)
  %s = softmax(%h) {axis=-1}
  %m = mean(%s) {axes=[0]}
  return %s, %m
}",
    );
    let plan = cpu(&g);
    let mut rng = Rng::new(3);
    let w = random_tensor(&mut rng, DType::F32, &[4, 8]).unwrap();
    let b = random_tensor(&mut rng, DType::F32, &[4]).unwrap();
    for batch in [1, 3, 7] {
        let x = random_tensor(&mut rng, DType::F32, &[batch, 8]).unwrap();
        let inputs = [x, w.clone(), b.clone()];
        let got = plan.run(&inputs).unwrap();
        assert_eq!(got.outputs[0].shape(), &[batch, 4]);
        assert_bitwise(&got.outputs, &reference(&g, &inputs));
    }
    // Batch 0: empty rows, and the mean over no rows is NaN.
    let x0 = Tensor::zeros(DType::F32, &[0, 8]).unwrap();
    let inputs = [x0, w, b];
    let got = plan.run(&inputs).unwrap();
    assert_eq!(got.outputs[0].shape(), &[0, 4]);
    assert_bitwise(&got.outputs, &reference(&g, &inputs));
}

#[test]
fn the_arena_is_smaller_than_the_temporaries() {
    let plan = cpu(&example_encoder().unwrap());
    for seq in [1, 8, 64] {
        let MemoryReport { arena_bytes, naive_bytes, temporaries } =
            plan.memory_report(&[encoder_input(seq, 0)]).unwrap();
        eprintln!("encoder seq {seq}: arena {arena_bytes} bytes, {temporaries} temporaries of {naive_bytes} bytes");
        assert!(arena_bytes < naive_bytes, "seq {seq}: arena {arena_bytes}, naive {naive_bytes}");
        // The two attention matrices (scores and probabilities) are live together.
        assert!(arena_bytes >= 2 * 4 * 4 * seq * seq, "seq {seq}: arena {arena_bytes}");
    }
}

#[test]
fn runs_fail_with_typed_errors() {
    // Integer division by zero inside a kernel.
    let g = parse("graph g(%a: i64[2], %b: i64[2]) {\n  %2 = div(%a, %b)\n  return %2\n}");
    let plan = cpu(&g);
    let a = Tensor::from_i64(&[2], vec![1, 2]).unwrap();
    let b = Tensor::from_i64(&[2], vec![1, 0]).unwrap();
    let e = plan.run(&[a, b]).unwrap_err();
    assert!(matches!(e, RunError::Step { .. }), "{e:?}");
    assert!(e.to_string().contains("integer division by zero"), "{e}");
    // A symbolic slice of an input smaller than the graph assumes (`x[-3:]` of 2 elements).
    let g = parse("graph g(%x: f32[n]) {\n  %1 = slice(%x) {axis=0, start=-3}\n  %2 = exp(%1)\n  return %2\n}");
    let plan = cpu(&g);
    assert_eq!(plan.run(&[f32t(&[4], &[0.0; 4])]).unwrap().outputs[0].shape(), &[3]);
    let e = plan.run(&[f32t(&[2], &[0.0; 2])]).unwrap_err();
    assert!(matches!(e, RunError::Assumption(_)), "{e:?}");
    assert!(e.to_string().contains("elements -1..2 of 2, out of range"), "{e}");
    // An arena over the limit.
    let g = parse("graph g(%x: f32[n]) {\n  %1 = exp(%x)\n  %2 = exp(%1)\n  return %2\n}");
    let plan = compile(
        &g,
        &CompileOptions {
            limits: ladder::Limits { max_run_bytes: 16, ..Default::default() },
            ..CompileOptions::reference()
        },
    )
    .unwrap();
    let e = plan.run(&[f32t(&[100], &[0.0; 100])]).unwrap_err();
    assert!(matches!(e, RunError::TooLarge { .. }), "{e:?}");
    // Outputs count too: one output of 2^31 f32 (8 GiB) is over the default limit (4 GiB) and
    // refused before anything is allocated, natively and on the reference executor (the
    // interpreter has its own element limit).
    let g =
        parse("graph g(%x: f32[1]) {\n  %c = full() {shape=[2147483648], value=1.0}\n  %y = cos(%c)\n  return %y\n}");
    for options in [CompileOptions::default(), CompileOptions::reference()] {
        assert_eq!(options.limits.max_run_bytes, 1 << 32);
        let plan = compile(&g, &options).unwrap();
        let e = plan.run(&[f32t(&[1], &[0.0])]).unwrap_err();
        assert!(matches!(e, RunError::TooLarge { need: 8589934592, limit: 4294967296 }), "{e:?}");
        assert!(e.to_string().contains("`Limits::max_run_bytes`"), "{e}");
    }
    // Under a raised limit the same check passes; a small output runs under a limit that fits it.
    let g = parse("graph g(%x: f32[4]) {\n  %y = exp(%x)\n  return %y\n}");
    let plan = compile(
        &g,
        &CompileOptions {
            limits: ladder::Limits { max_run_bytes: 16, ..Default::default() },
            ..CompileOptions::default()
        },
    )
    .unwrap();
    assert_eq!(plan.run(&[f32t(&[4], &[0.0; 4])]).unwrap().outputs[0].to_f64_vec(), vec![1.0; 4]);
    let plan = compile(
        &g,
        &CompileOptions {
            limits: ladder::Limits { max_run_bytes: 15, ..Default::default() },
            ..CompileOptions::default()
        },
    )
    .unwrap();
    assert!(matches!(plan.run(&[f32t(&[4], &[0.0; 4])]), Err(RunError::TooLarge { need: 16, limit: 15 })));
}

// ---------------------------------------------------------------------------------------------
// The native seam, with a hand-written "compiled" kernel.
// ---------------------------------------------------------------------------------------------

/// `out[i] = in[i] + in[i]` over the outermost loop range, for `y = add(x, x)` on `f32[n]`
/// (buffer 0 is the input, buffer 1 the output).
unsafe extern "C" fn double_f32(bufs: *const *mut u8, dims: *const i64, begin: i64, end: i64) {
    // SAFETY: the runtime passes one base address per buffer and the kernel's dim table.
    unsafe {
        let n = *dims;
        assert!(end <= n);
        let x = *bufs as *const f32;
        let y = *bufs.add(1) as *mut f32;
        // Outer loop over rows (split across threads), inner loop over the 2 columns.
        for i in begin..end {
            for j in 0..2 {
                let at = (2 * i + j) as usize;
                *y.add(at) = *x.add(at) + *x.add(at);
            }
        }
    }
}

struct Doubler;

impl KernelCompiler for Doubler {
    fn compile(&self, kernel: &Kernel, program: &Program) -> Result<NativeKernel, Declined> {
        let expected = "kernel k0 outer [n] {  ; %1\n  stage 0 inner [2]\n    r0 = load b0[2*o0 + i0]\n    r1 = add r0, r0 : f32\n    store b1[2*o0 + i0] = r1\n}\n";
        if kernel.to_string() != expected || program.buffers.len() != 2 {
            return Err(Declined::Unsupported(format!("not the kernel this test compiles:\n{kernel}")));
        }
        Ok(NativeKernel { entry: double_f32, dims: kernel.dim_table(), owner: Arc::new(()), take_error: None })
    }
}

#[test]
fn native_kernels_plug_in_per_kernel_and_split_over_threads() {
    // Rows are the outer loop (threads), the innermost axis the stage's loop (SIMD).
    let g = parse("graph g(%x: f32[n, 2]) {\n  %1 = add(%x, %x)\n  return %1\n}");
    assert_eq!(cpu(&g).native_kernels(), 0);
    let options =
        CompileOptions { kernel_compiler: Some(Arc::new(Doubler)), threads: 3, ..CompileOptions::reference() };
    let plan = compile(&g, &options).unwrap();
    assert_eq!(plan.native_kernels(), 1);
    let Some(Step::Kernel(k)) = plan.program().map(|p| &p.steps[0]) else { panic!("one kernel") };
    assert_eq!(k.dim_table(), vec![Dim::sym("n")]);
    for n in [0, 1, 5, 100] {
        let x = f32t(&[n, 2], &(0..2 * n).map(|i| i as f32 * 0.5).collect::<Vec<_>>());
        let got = plan.run(std::slice::from_ref(&x)).unwrap();
        assert_bitwise(&got.outputs, &reference(&g, &[x]));
    }
    // A kernel the compiler refuses runs on the reference executor.
    let g2 = parse("graph g(%x: f32[n]) {\n  %1 = mul(%x, %x)\n  return %1\n}");
    let plan2 = compile(&g2, &options).unwrap();
    assert_eq!(plan2.native_kernels(), 0);
    let [fallback] = plan2.fallbacks() else { panic!("one fallback: {:?}", plan2.fallbacks()) };
    assert!(matches!(&fallback.why, Declined::Unsupported(m) if m.contains("not the kernel")), "{fallback:?}");
    assert!(plan.fallbacks().is_empty());
    let x = f32t(&[3], &[1.0, 2.0, 3.0]);
    assert_eq!(plan2.run(&[x]).unwrap().outputs[0].as_f32(), Some(&[1.0f32, 4.0, 9.0][..]));
}

#[test]
fn outputs_that_are_inputs_constants_duplicates_or_bools_come_back_whole() {
    // Slots a kernel cannot write in place: an input returned as is, a buffer returned
    // twice (after CSE), a bool result. Reused tensors of the wrong shape or dtype are replaced.
    let g = ladder::text::parse(
        "graph odd(%x: f32[n, 3]) {
  %e = exp(%x)
  %f = exp(%x)
  %b = isnan(%e)
  return %x, %e, %f, %b
}",
    )
    .unwrap();
    for options in [ladder::CompileOptions::reference(), ladder::CompileOptions::native_cpu(2).unwrap()] {
        let plan = ladder::compile(&g, &options).unwrap();
        let mut out = ladder::Outputs {
            outputs: vec![ladder::Tensor::from_i64(&[1], vec![7]).unwrap(); 4],
            mutated_inputs: Vec::new(),
        };
        for n in [2usize, 5] {
            let x = ladder::Tensor::from_f32(&[n, 3], (0..3 * n).map(|i| i as f32 - 4.0).collect()).unwrap();
            plan.run_into(std::slice::from_ref(&x), &mut out).unwrap();
            // The same plan returning fresh tensors (native exp is not bit-exact to the
            // interpreter's; the differential tests cover that).
            let want = plan.run(std::slice::from_ref(&x)).unwrap().outputs;
            assert!(want[0].bit_eq(&x) && want[1].bit_eq(&want[2]));
            assert_eq!(out.outputs.len(), want.len());
            for (k, (a, b)) in out.outputs.iter().zip(&want).enumerate() {
                assert!(a.bit_eq(b), "output {k} at n = {n}: {a} vs {b}");
            }
        }
    }
}

/// Native runs on two threads long enough to get helper workers (`runtime::HELP_AFTER_NS`:
/// the pool's other worker spins for queued work during the run; 25M multiply-adds take
/// longer on any CPU), from four threads at once,
/// so that helpers of one run pick up the work of others: every run gives the bits of a run
/// alone.
#[test]
fn threaded_runs_with_helpers_from_four_threads_at_once() {
    let src = "graph g(%a: f32[256, 384], %b: f32[384, 256]) {
  %c = matmul(%a, %b) : f32[256, 256]
  %d = tanh(%c) : f32[256, 256]
  %e = reduce_sum(%d) {axes=[1]} : f32[256]
  return %d, %e
}";
    let g = parse(src);
    let plan = compile(&g, &CompileOptions::native_cpu(2).unwrap()).unwrap();
    let cases: Vec<(Vec<Tensor>, Vec<Tensor>)> = (0..4u64)
        .map(|k| {
            let mut rng = Rng::new(k);
            let ins = vec![
                random_tensor(&mut rng, DType::F32, &[256, 384]).unwrap(),
                random_tensor(&mut rng, DType::F32, &[384, 256]).unwrap(),
            ];
            let want = plan.run(&ins).unwrap().outputs;
            (ins, want)
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (plan, cases) = (&plan, &cases);
            s.spawn(move || {
                for round in 0..4 {
                    let (ins, want) = &cases[(t + round) % cases.len()];
                    let got = plan.run(ins).unwrap().outputs;
                    assert_bitwise(&got, want);
                }
            });
        }
    });
}
