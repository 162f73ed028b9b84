//! After warm-up, a run of a plan whose steps are all kernels allocates nothing but the
//! returned outputs: the vector holding them and, per output tensor, its shape and its data.
//! Counted with a global allocator that counts the allocations of the current thread (and its
//! live bytes and their high-water mark, for the interpreter's memory test).

use ladder::backend::cpu::gemm::{matmul, Epilogue};
use ladder::models::{random_tensor, Rng};
use ladder::{compile, CompileOptions, DType, Tensor};

use crate::counting::{allocations, peak_bytes};

/// The interpreter drops each value after its last use: sixteen dead 4 MiB values, and a chain
/// of sixteen 4 MiB temporaries (evaluated in f64, with a result being made while its argument
/// lives), hold a few values' memory at a time, not sixteen.
#[test]
fn the_interpreter_frees_values_after_their_last_use() {
    const MIB4: usize = 1 << 22;
    let mut dead = String::from("graph g(%x: f32[1]) {\n");
    for i in 0..16 {
        dead.push_str(&format!("  %d{i} = full() {{shape=[1048576], value={i}.0}}\n"));
    }
    dead.push_str("  %y = neg(%x)\n  return %y\n}\n");
    let mut chain = String::from("graph g(%x: f32[1]) {\n  %c0 = full() {shape=[1048576], value=1.0}\n");
    for i in 1..16 {
        chain.push_str(&format!("  %c{i} = exp(%c{})\n", i - 1));
    }
    chain.push_str("  %y = sum(%c15) {axes=[0]}\n  return %y\n}\n");
    let x = Tensor::from_f32(&[1], vec![1.0]).unwrap();
    for src in [dead, chain] {
        let g = ladder::text::parse(&src).unwrap();
        let (out, peak) = peak_bytes(|| ladder::interp::run(&g, std::slice::from_ref(&x), &Default::default()));
        out.unwrap();
        assert!(peak < 10 * MIB4, "peak {peak} bytes for\n{src}");
    }
}

#[test]
fn a_warm_run_allocates_only_its_outputs() {
    // layer_norm, softmax and a residual: reductions, broadcasts, several kernels and temps.
    let g = ladder::text::parse(
        "graph block(%x: f32[batch, 16], %w: f32[16], %b: f32[16]) {
  %n = layer_norm(%x, %w, %b) {axis=-1, eps=1e-5}
  %s = softmax(%n) {axis=-1}
  %t = transpose(%s) {axis0=0, axis1=1}
  %m = mean(%t) {axes=[1]}
  %y = add(%s, %x)
  return %y, %m
}",
    )
    .unwrap();
    let plan = compile(&g, &CompileOptions::reference()).unwrap();
    let program = plan.program().unwrap();
    assert!(program.steps.iter().all(|s| matches!(s, ladder::kernel::Step::Kernel(_))), "{program}");
    let mut rng = Rng::new(5);
    let w = random_tensor(&mut rng, DType::F32, &[16]).unwrap();
    let b = random_tensor(&mut rng, DType::F32, &[16]).unwrap();
    for batch in [3, 5] {
        let x = random_tensor(&mut rng, DType::F32, &[batch, 16]).unwrap();
        let inputs = [x, w.clone(), b.clone()];
        let (warm, _) = allocations(|| plan.run(&inputs).unwrap());
        let (out, n) = allocations(|| plan.run(&inputs).unwrap());
        assert_eq!(out.outputs.len(), 2);
        assert!(out.outputs.iter().zip(&warm.outputs).all(|(a, b)| a.bit_eq(b)));
        // The outputs vector, and a shape and a data vector per output.
        assert_eq!(n, 1 + 2 * out.outputs.len(), "batch {batch}: {n} allocations in a warm run");
    }
}

#[test]
fn run_into_reuses_the_outputs_and_allocates_nothing() {
    let g = ladder::text::parse(
        "graph block(%x: f32[batch, 16], %w: f32[16]) {
  %s = softmax(%x) {axis=-1}
  %y = mul(%s, %w)
  %m = mean(%x) {axes=[1]}
  return %y, %m
}",
    )
    .unwrap();
    for options in [CompileOptions::reference(), CompileOptions::native_cpu(1).unwrap()] {
        let plan = compile(&g, &options).unwrap();
        let mut rng = Rng::new(9);
        let w = random_tensor(&mut rng, DType::F32, &[16]).unwrap();
        let mut out = ladder::Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
        for batch in [4, 4, 7, 2] {
            let x = random_tensor(&mut rng, DType::F32, &[batch, 16]).unwrap();
            let inputs = [x, w.clone()];
            let fresh = plan.run(&inputs).unwrap();
            // The first call at a new batch size replaces the tensors; the next reuses them.
            plan.run_into(&inputs, &mut out).unwrap();
            let data = out.outputs[0].as_f32().unwrap().as_ptr();
            let (_, n) = allocations(|| plan.run_into(&inputs, &mut out).unwrap());
            assert_eq!(n, 0, "batch {batch}: a warm run_into allocated {n} times");
            assert_eq!(out.outputs[0].as_f32().unwrap().as_ptr(), data, "the output's storage is reused");
            assert_eq!(out.outputs.len(), 2);
            assert_eq!(out.outputs[0].shape(), &[batch, 16]);
            assert_eq!(out.outputs[1].shape(), &[batch]);
            for (a, b) in out.outputs.iter().zip(&fresh.outputs) {
                assert!(a.bit_eq(b), "run_into and run disagree at batch {batch}");
            }
        }
    }
}

/// Native mode with a matmul: the plan itself allocates nothing, but the `gemm` crate
/// allocates on every call: its per-block "packed yet" flags, and a packing buffer where it
/// packs an operand (on x86-64 not at this shape; on aarch64 it always packs the right
/// operand). Those are the only heap allocations left in a warm native run: at most what a
/// bare call of the library GEMM at the same shape makes, once per GEMM step.
#[test]
fn a_warm_native_run_into_allocates_only_gemm_packing_buffers() {
    // Native mode: Cranelift kernels and the GEMM library (matmul + bias + gelu + residual).
    let g = ladder::text::parse(
        "graph mlp(%x: f32[batch, 64], %w: f32[64, 64], %b: f32[64]) {
  %h = matmul(%x, %w)
  %hb = add(%h, %b)
  %a = gelu(%hb)
  %y = add(%a, %x)
  return %y
}",
    )
    .unwrap();
    let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
    assert!(plan.native_kernels() > 0);
    let mut rng = Rng::new(3);
    let w = random_tensor(&mut rng, DType::F32, &[64, 64]).unwrap();
    let b = random_tensor(&mut rng, DType::F32, &[64]).unwrap();
    let x = random_tensor(&mut rng, DType::F32, &[32, 64]).unwrap();
    let inputs = [x, w, b];
    let mut out = ladder::Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
    plan.run_into(&inputs, &mut out).unwrap();
    plan.run_into(&inputs, &mut out).unwrap();
    let (_, n) = allocations(|| plan.run_into(&inputs, &mut out).unwrap());
    let gemms = plan.program().unwrap().steps.iter().filter(|s| matches!(s, ladder::kernel::Step::Matmul(_))).count();
    assert_eq!(gemms, 1);
    let (a, w) = (inputs[0].as_f32().unwrap(), inputs[1].as_f32().unwrap());
    let mut product = vec![0f32; 32 * 64];
    let bare = || matmul(a, &[32, 64], w, &[64, 64], false, false, &mut product, 1, &Epilogue::none()).unwrap();
    let (_, per_call) = allocations(bare);
    assert!(per_call <= 2, "the gemm crate allocated {per_call} times in one call");
    assert!(
        n <= gemms * per_call,
        "a warm native run_into allocated {n} times with {gemms} GEMM step(s) of {per_call} allocation(s) each"
    );
}

/// Native mode with the data-movement prims as library steps (`cat` of RoPE's rotate_half,
/// `pad`, `rev`, an embedding-style `gather`): a warm `run_into` allocates nothing.
#[test]
fn a_warm_native_run_into_with_copies_allocates_nothing() {
    let g = ladder::text::parse(
        "graph m(%x: f32[batch, 16], %ids: i64[batch, 16], %w: f32[32, 16]) {
  %x1 = slice(%x) {axis=1, start=0, end=8}
  %x2 = slice(%x) {axis=1, start=8}
  %n2 = neg(%x2)
  %r = cat(%n2, %x1) {axis=1}
  %p = pad(%r) {low=[1, -2], high=[0, 3], value=0.5}
  %v = rev(%p) {axes=[0, 1]}
  %e = gather(%w, %ids) {axis=0}
  %y = add(%r, %e)
  return %y, %v
}",
    )
    .unwrap();
    let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
    let program = plan.program().unwrap();
    let copies = program.steps.iter().filter(|s| matches!(s, ladder::kernel::Step::Library(_))).count();
    assert_eq!(copies, 4, "cat, pad, rev and gather are library steps:\n{program}");
    assert!(!program.steps.iter().any(|s| matches!(s, ladder::kernel::Step::Interp(_))), "{program}");
    let mut rng = Rng::new(11);
    let w = random_tensor(&mut rng, DType::F32, &[32, 16]).unwrap();
    let mut out = ladder::Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
    for batch in [4, 4, 9, 1] {
        let x = random_tensor(&mut rng, DType::F32, &[batch, 16]).unwrap();
        let ids = random_tensor(&mut rng, DType::I64, &[batch, 16]).unwrap();
        let inputs = [x, ids, w.clone()];
        let fresh = plan.run(&inputs).unwrap();
        plan.run_into(&inputs, &mut out).unwrap();
        let (_, n) = allocations(|| plan.run_into(&inputs, &mut out).unwrap());
        assert_eq!(n, 0, "batch {batch}: a warm run_into allocated {n} times");
        for (a, b) in out.outputs.iter().zip(&fresh.outputs) {
            assert!(a.bit_eq(b), "run_into and run disagree at batch {batch}");
        }
    }
}

/// Borrowed inputs: a warm `run_views_into` on the caller's own buffers (no `Tensor` made)
/// allocates nothing, on the reference executor and on native code, so the inputs are read
/// where they lie; its outputs are those of `run` on tensors holding the same data.
#[test]
fn a_warm_run_on_borrowed_buffers_copies_and_allocates_nothing() {
    let g = ladder::text::parse(
        "graph block(%x: f32[batch, 16], %w: f32[16], %ids: i64[batch]) {
  %s = softmax(%x) {axis=-1}
  %y = mul(%s, %w)
  %m = mean(%x) {axes=[1]}
  %c = convert_element_type(%ids) {dtype=f32}
  %z = add(%m, %c)
  return %y, %z
}",
    )
    .unwrap();
    for options in [CompileOptions::reference(), CompileOptions::native_cpu(1).unwrap()] {
        let plan = compile(&g, &options).unwrap();
        // The engine's buffers, written in place from frame to frame.
        let mut frame = vec![0f32; 8 * 16];
        let weights: Vec<f32> = (0..16).map(|i| 0.25 * i as f32 - 1.0).collect();
        let mut ids = [0i64; 8];
        let mut out = ladder::Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
        for (tick, batch) in [8usize, 8, 3, 3].into_iter().enumerate() {
            for (i, x) in frame.iter_mut().enumerate() {
                *x = ((i + 7 * tick) as f32 * 0.31).sin() * 4.0;
            }
            for (i, id) in ids.iter_mut().enumerate() {
                *id = (i * tick) as i64 - 3;
            }
            let (x, ids) = (&frame[..batch * 16], &ids[..batch]);
            let (xs, ws, is) = ([batch, 16], [16], [batch]);
            let views = [
                ladder::TensorView::new(x, &xs).unwrap(),
                ladder::TensorView::new(&weights, &ws).unwrap(),
                ladder::TensorView::new(ids, &is).unwrap(),
            ];
            plan.run_views_into(&views, &mut out).unwrap();
            let (_, n) = allocations(|| plan.run_views_into(&views, &mut out).unwrap());
            assert_eq!(n, 0, "tick {tick}: a warm run on borrowed buffers allocated {n} times");
            let owned = [
                Tensor::from_f32(&xs, x.to_vec()).unwrap(),
                Tensor::from_f32(&ws, weights.clone()).unwrap(),
                Tensor::from_i64(&is, ids.to_vec()).unwrap(),
            ];
            let want = plan.run(&owned).unwrap();
            assert_eq!(out.outputs.len(), want.outputs.len());
            for (a, b) in out.outputs.iter().zip(&want.outputs) {
                assert!(a.bit_eq(b), "tick {tick}: views {a} and tensors {b} disagree");
            }
        }
    }
}
