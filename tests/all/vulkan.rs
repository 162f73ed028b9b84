//! The Vulkan backend against the reference, on whatever Vulkan device the machine has (CI:
//! Mesa's lavapipe, with the Khronos validation layer on: `LADDER_VULKAN_VALIDATION=1`).
//!
//! Where no device exists each test says it was skipped and returns, unless
//! `LADDER_REQUIRE_VULKAN=1` (set by `.ci/run`), which makes a missing device, validation
//! layer or `spirv-val` a failure.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::{self, spirv};
use ladder::frontend::onnx::conformance::compare;
use ladder::gen::{random_graph, seeded_bytes, GenConfig, Source};
use ladder::kernel::BufferKind;
use ladder::ops::Rung;
use ladder::{compile, CompileError, CompileOptions, Graph, Tensor};

pub(crate) fn required() -> bool {
    std::env::var("LADDER_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// Whether the tests can run; says why not (or fails, where a device is required).
pub(crate) fn device(test: &str) -> bool {
    match vulkan::available() {
        Ok(_) => true,
        Err(e) if !required() => {
            eprintln!("{test}: skipped: {e}");
            false
        }
        Err(e) => panic!("{test}: LADDER_REQUIRE_VULKAN=1 but {e}"),
    }
}

/// No validation message since the last call (where the layer is on).
pub(crate) fn clean(what: &str) {
    let messages = vulkan::take_validation_messages();
    assert!(messages.is_empty(), "{what}: the validation layer reported:\n{}", messages.join("\n"));
}

pub(crate) fn parse(src: &str) -> Graph {
    ladder::text::parse(src).unwrap()
}

pub(crate) fn run_both(g: &Graph, inputs: &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>) {
    let want = compile(g, &CompileOptions::reference()).unwrap().run(inputs).unwrap().outputs;
    let plan = compile(g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{e}\n{}", ladder::text::print(g)));
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("{e}\n{}", plan.program().unwrap())).outputs;
    clean("run");
    (want, got)
}

pub(crate) fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_f32(shape, v).unwrap()
}

/// `plan` and `reference` on `inputs`: the same outputs (see `agree`), and no validation message.
pub(crate) fn same_as_reference(plan: &ladder::Plan, reference: &ladder::Plan, inputs: &[Tensor], what: &str) {
    let want = reference.run(inputs).unwrap().outputs;
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}")).outputs;
    clean(what);
    agree(&got, &want, what);
}

/// Every output within the conformance tolerance (floats) or equal (integers, bools).
pub(crate) fn agree(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(compare(g, w), None, "{what}: got {g}, want {w}");
    }
}

/// Runs both plans on `inputs` (products summed over at most `depth` terms: matmuls,
/// convolutions): NaN where the
/// reference has NaN, the same infinities, and finite results within the bound of two sums of
/// the same terms in the same order, each rounding once or twice per step:
/// `(depth + 2) ε Σ|a b|` (the sums of absolute terms from the reference plan on the inputs'
/// absolute values), plus a subnormal step per term. No validation message.
pub(crate) fn within_product_bound(
    plan: &ladder::Plan,
    reference: &ladder::Plan,
    inputs: &[Tensor],
    depth: usize,
    what: &str,
) {
    let want = reference.run(inputs).unwrap_or_else(|e| panic!("{what}: reference: {e}")).outputs;
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}")).outputs;
    clean(what);
    let absolute: Vec<Tensor> =
        inputs.iter().map(|t| f32s(t.shape(), t.as_f32().unwrap().iter().map(|v| v.abs()).collect())).collect();
    let magnitude = reference.run(&absolute).unwrap().outputs;
    assert_eq!(got.len(), want.len(), "{what}");
    for (o, ((g, w), m)) in got.iter().zip(&want).zip(&magnitude).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what}: output {o}");
        let (gs, ws, ms) = (g.as_f32().unwrap(), w.as_f32().unwrap(), m.as_f32().unwrap());
        for (i, ((&a, &b), &mag)) in gs.iter().zip(ws).zip(ms).enumerate() {
            let bound = (depth as f32 + 2.0) * f32::EPSILON * mag + depth as f32 * f32::from_bits(1);
            let ok = match (a.is_nan(), b.is_nan()) {
                (_, true) => a.is_nan(),
                (true, false) => false,
                _ if b.is_infinite() => a == b,
                _ => (a - b).abs() <= bound,
            };
            assert!(ok, "{what}: output {o}, element {i}: got {a}, want {b} (within {bound})");
        }
    }
}

/// Whether `spirv-val` can be run (a failure where `LADDER_REQUIRE_VULKAN=1` says it must).
pub(crate) fn spirv_val() -> bool {
    let there = std::process::Command::new("spirv-val").arg("--version").output().is_ok();
    assert!(there || !required(), "LADDER_REQUIRE_VULKAN=1 but spirv-val is not installed (Debian: spirv-tools)");
    there
}

/// Every shader `program` runs on the device (its kernels and the kernels its library steps
/// are written as: `vulkan::step_kernels`) passes `spirv-val` for Vulkan 1.2; returns how many
/// were validated (none where spirv-val is missing and not required).
pub(crate) fn validate_shaders(program: &ladder::kernel::Program, what: &str) -> usize {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if !spirv_val() {
        return 0;
    }
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ladder-vulkan-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut shaders = 0;
    for step in 0..program.steps.len() {
        let kernels = vulkan::step_kernels(program, step).unwrap_or_else(|e| panic!("{what}: step {step}: {e}"));
        // Each kernel as lowered normally, with its constants pooled, and with them pooled and
        // every other buffer in the run's arena (`bindings.rs`).
        let everything: Vec<bool> =
            program.buffers.iter().map(|(_, b)| !matches!(b.kind, BufferKind::Const(_))).collect();
        let places = [
            ("", spirv::Placement::default()),
            ("_pooled", spirv::Placement { pool: true, arena: Vec::new() }),
            ("_arena", spirv::Placement { pool: true, arena: everything }),
        ];
        for (k, (suffix, place)) in kernels.iter().flat_map(|k| places.iter().map(move |p| (k, p))) {
            let shader =
                spirv::lower(k, program, true, place).unwrap_or_else(|e| panic!("{what}: kernel {}: {e:?}", k.name));
            let path = dir.join(format!("{}{suffix}.spv", k.name));
            let bytes: Vec<u8> = shader.words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(&path, bytes).unwrap();
            let out = std::process::Command::new("spirv-val")
                .arg("--target-env")
                .arg("vulkan1.2")
                .arg(&path)
                .output()
                .unwrap();
            assert!(out.status.success(), "{what}, kernel {}: {}\n{k:?}", k.name, String::from_utf8_lossy(&out.stderr));
            shaders += 1;
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    shaders
}

/// Softmax, a layer norm and a sum over rows: kernels with max, sum and sum-exp
/// accumulators, at sizes that change between runs of one plan (one command buffer each,
/// replayed when the sizes repeat).
#[test]
fn row_kernels_match_the_reference_across_sizes() {
    if !device("row_kernels_match_the_reference_across_sizes") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[n, k], %w: f32[k], %b: f32[k]) {
  %s = softmax(%x) {axis=-1}
  %l = layer_norm(%x, %w, %b) {axis=-1, eps=1e-5}
  %t = sum(%x) {axes=[1]}
  %m = log_softmax(%x) {axis=0}
  return %s, %l, %t, %m
}",
    );
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    let mut rng = ladder::models::Rng::new(9);
    for (n, k) in [(3, 7), (64, 129), (3, 7), (1, 1), (200, 33), (5, 0)] {
        let x = ladder::models::random_tensor(&mut rng, ladder::DType::F32, &[n, k]).unwrap();
        let w = ladder::models::random_tensor(&mut rng, ladder::DType::F32, &[k]).unwrap();
        let b = ladder::models::random_tensor(&mut rng, ladder::DType::F32, &[k]).unwrap();
        same_as_reference(&plan, &reference, &[x, w, b], &format!("[{n}, {k}]"));
    }
}

/// The prims' special values: `max`/`min` propagate NaN and order -0 < +0, infinities pass
/// through sums and the sum-exp of a row of `-inf` or `+inf` is NaN, an empty sum is +0,
/// float to int conversion saturates (NaN to 0), int division truncates and wraps.
#[test]
fn special_values_keep_the_prims_meaning() {
    if !device("special_values_keep_the_prims_meaning") {
        return;
    }
    let g = parse(
        "graph g(%a: f32[8], %b: f32[8], %r: f32[3, 4]) {
  %mx = max(%a, %b)
  %mn = min(%a, %b)
  %s = softmax(%r) {axis=-1}
  %i = convert_element_type(%a) {dtype=i32}
  %l = convert_element_type(%b) {dtype=i64}
  return %mx, %mn, %s, %i, %l
}",
    );
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let a = f32s(&[8], vec![nan, 1.0, -0.0, 0.0, -inf, 3e9, -3e9, 2.5]);
    let b = f32s(&[8], vec![1.0, nan, 0.0, -0.0, 5.0, 1e20, -1e20, -2.5]);
    let r = f32s(&[3, 4], vec![-inf, -inf, -inf, -inf, inf, 1.0, 2.0, 3.0, 1e30, -1e30, 0.0, nan]);
    let (want, got) = run_both(&g, &[a, b, r]);
    for (g, w) in got.iter().zip(&want) {
        assert!(g.bit_eq(w) || compare(g, w).is_none(), "got {g}, want {w}");
    }
    // max/min and the conversions exactly, signed zeros included.
    for k in [0, 1, 3, 4] {
        assert!(got[k].bit_eq(&want[k]), "output {k}: got {}, want {}", got[k], want[k]);
    }
}

/// Integer kernels: wrapping arithmetic, division by -1 and truncation, an argmax (NaN
/// first); a division by zero is a run-time error, as on the other backends.
#[test]
fn integer_kernels_and_run_time_errors() {
    if !device("integer_kernels_and_run_time_errors") {
        return;
    }
    let g = parse(
        "graph g(%a: i32[6], %b: i32[6], %x: f32[2, 5]) {
  %d = div(%a, %b)
  %m = rem(%a, %b)
  %s = add(%a, %b)
  %p = mul(%a, %b)
  %k = argmax(%x) {axis=1, keepdim=false}
  return %d, %m, %s, %p, %k
}",
    );
    let ints = |v: Vec<i64>| Tensor::from_ints(ladder::DType::I32, &[6], v).unwrap();
    let a = ints(vec![i32::MIN as i64, 7, -7, 7, i32::MAX as i64, 0]);
    let b = ints(vec![-1, 2, 2, -2, 2, 5]);
    let x = f32s(&[2, 5], vec![1.0, 3.0, f32::NAN, 3.0, 9.0, -1.0, 4.0, 4.0, -f32::INFINITY, 2.0]);
    let (want, got) = run_both(&g, &[a.clone(), b, x.clone()]);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g.bit_eq(w), "output {k}: got {g}, want {w}");
    }
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    let zero = ints(vec![1, 1, 0, 1, 1, 1]);
    let err = plan.run(&[a, zero, x]).unwrap_err().to_string();
    clean("division by zero");
    assert!(err.contains("division by zero"), "{err}");
}

/// `pow` by a constant small integer (GPT-2's `x³`), and `gather` with negative and
/// out-of-range indices.
#[test]
fn pow_by_small_integers_and_gather() {
    if !device("pow_by_small_integers_and_gather") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[9]) {
  %p = full() {shape=[9], value=3.0}
  %q = full() {shape=[9], value=-2.0}
  %z = full() {shape=[9], value=0.0}
  %a = pow(%x, %p)
  %b = pow(%x, %q)
  %c = pow(%x, %z)
  return %a, %b, %c
}",
    );
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = f32s(&[9], vec![2.0, -1.5, 0.0, -0.0, inf, -inf, nan, 1e-20, 3e12]);
    let (want, got) = run_both(&g, &[x]);
    agree(&got, &want, "pow");
    let gather = parse(
        "graph g(%t: f32[4, 3], %i: i64[2, 3]) {
  %y = gather(%t, %i) {axis=0}
  return %y
}",
    );
    let t = f32s(&[4, 3], (0..12).map(|v| v as f32).collect());
    let ok = Tensor::from_i64(&[2, 3], vec![3, 0, -1, -4, 2, 1]).unwrap();
    let (want, got) = run_both(&gather, &[t.clone(), ok]);
    assert!(got[0].bit_eq(&want[0]), "got {}, want {}", got[0], want[0]);
    let plan = compile(&gather, &CompileOptions::vulkan()).unwrap();
    for bad in [vec![4, 0, 0, 0, 0, 0], vec![0, 0, 0, 0, 0, -5]] {
        let err = plan.run(&[t.clone(), Tensor::from_i64(&[2, 3], bad).unwrap()]).unwrap_err().to_string();
        clean("gather out of range");
        assert!(err.contains("outside its buffer"), "{err}");
    }
}

/// A program with a step the backend does not run (here a padded convolution of an input
/// of symbolic size, whose computed loads need constant strides) is refused when the plan is
/// built, naming the step and why; nothing runs partly.
#[test]
fn programs_with_library_steps_are_refused_with_the_step() {
    if !device("programs_with_library_steps_are_refused_with_the_step") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[1, 2, h, 8], %w: f32[3, 2, 3, 3]) {\n  %c = conv(%x, %w) {stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1}\n  return %c\n}\n",
    );
    match compile(&g, &CompileOptions::vulkan()) {
        Err(CompileError::Unsupported { backend: "vulkan", reason }) => assert!(
            reason.contains("step 0 is a conv call")
                && reason.contains("a padded convolution of an input of symbolic size"),
            "{reason}"
        ),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// A kernel reading more inputs than a shader may bind on the device (lavapipe: 32, counting
/// the size table and status word) runs with them in the run's arena: the host copies each
/// input to its offset there, and the kernel reads the offsets from its size table.
#[test]
fn kernels_reading_too_many_inputs_read_them_from_the_arena() {
    if !device("kernels_reading_too_many_inputs_read_them_from_the_arena") {
        return;
    }
    let n = 40;
    let params: Vec<String> = (0..n).map(|k| format!("%x{k}: f32[m]")).collect();
    let mut body = String::from("  %s0 = add(%x0, %x1)\n");
    for k in 2..n {
        body += &format!("  %s{} = add(%s{}, %x{k})\n", k - 1, k - 2);
    }
    let g = parse(&format!("graph g({}) {{\n{body}  return %s{}\n}}", params.join(", "), n - 2));
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{e}"));
    let lavapipe = vulkan::VulkanDevice::process().unwrap().name().contains("llvmpipe");
    assert!(!lavapipe || plan.explanation().contains("share the run's arena"), "{}", plan.explanation());
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for m in [4usize, 33, 1] {
        let inputs: Vec<Tensor> = (0..n).map(|k| f32s(&[m], (0..m).map(|i| (k * 100 + i) as f32).collect())).collect();
        let want = reference.run(&inputs).unwrap().outputs;
        agree(&plan.run(&inputs).unwrap().outputs, &want, &format!("many inputs, m = {m}"));
    }
    clean("many inputs");
}

/// A kernel reading more constants than a shader may bind (36 of them here, of four dtypes,
/// packed ones among them, plus its input and output: lavapipe binds 32) runs with the
/// constants packed into one binding per storage type, each at its offset, and agrees with
/// the reference.
#[test]
fn kernels_reading_many_constants_pool_them() {
    if !device("kernels_reading_many_constants_pool_them") {
        return;
    }
    let mut text = String::new();
    let mut body = String::from("  %s0 = neg(%x)\n");
    let mut last = 0;
    // `%s{n+1} = expr` with PREV standing for `%s{n}`.
    fn step(body: &mut String, last: &mut usize, expr: String) {
        *last += 1;
        *body += &format!("  %s{} = {}\n", *last, expr.replace("PREV", &format!("%s{}", *last - 1)));
    }
    for k in 0..12 {
        text += &format!("blob @f{k}: f32[5] = [{}, 0.5, -1.0, 2.0, -0.25]\n", k as f32 * 0.125);
        body += &format!("  %f{k} = const @f{k}\n");
        step(&mut body, &mut last, format!("add(PREV, %f{k})"));
    }
    for k in 0..8 {
        let v: Vec<&str> = (0..5).map(|i| if (i + k) % 3 == 0 { "true" } else { "false" }).collect();
        text += &format!("blob @b{k}: bool[5] = [{}]\n", v.join(", "));
        body += &format!("  %b{k} = const @b{k}\n  %h{k} = mul(%s{last}, %half)\n");
        step(&mut body, &mut last, format!("where(%b{k}, PREV, %h{k})"));
    }
    for k in 0..8 {
        text += &format!("blob @g{k}: f16[5] = [{}, 1.5, -0.75, 3.0, 0.001]\n", k as f32 - 3.5);
        body += &format!("  %g{k} = const @g{k}\n  %gf{k} = convert_element_type(%g{k}) {{dtype=f32}}\n");
        step(&mut body, &mut last, format!("add(PREV, %gf{k})"));
    }
    for k in 0..8 {
        text += &format!("blob @i{k}: i64[5] = [{}, -3, 7, 0, 1099511627776]\n", k * 1000 - 4000);
        body += &format!("  %i{k} = const @i{k}\n  %if{k} = convert_element_type(%i{k}) {{dtype=f32}}\n");
        step(&mut body, &mut last, format!("sub(PREV, %if{k})"));
    }
    let src = format!("{text}graph g(%x: f32[5], %half: f32[]) {{\n{body}  return %s{last}\n}}\n");
    let g = parse(&src);
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{e}"));
    assert!(validate_shaders(plan.program().unwrap(), "many constants") > 0 || !required());
    let inputs = [f32s(&[5], vec![1.0, -2.0, f32::INFINITY, 0.0, 3.5]), f32s(&[], vec![0.5])];
    let want = compile(&g, &CompileOptions::reference()).unwrap().run(&inputs).unwrap().outputs;
    agree(&plan.run(&inputs).unwrap().outputs, &want, "many constants");
    clean("many constants");
}

/// A fused kernel writing more outputs than a shader may bind, pooling its constants is not
/// enough: its buffers move to the run's arena (one device buffer, offsets in the size
/// tables), where the input upload, the output readback and the other kernels reading them
/// find them too; at two sizes of one plan, against the reference.
#[test]
fn kernels_binding_too_many_buffers_use_the_arena() {
    if !device("kernels_binding_too_many_buffers_use_the_arena") {
        return;
    }
    let (mut body, mut outs) = wide_chain();
    body += "  %c = gt(%a7, %y)\n  %i = convert_element_type(%a3) {dtype=i64}\n";
    body += "  %h = convert_element_type(%a9) {dtype=f16}\n  %s = sum(%a39) {axes=[0]}\n";
    body += "  %m = reduce_max(%a20) {axes=[0]}\n";
    outs.extend(["%c", "%i", "%h", "%s", "%m"].map(String::from));
    let src = format!("graph g(%x: f32[n], %y: f32[n]) {{\n{body}  return {}\n}}\n", outs.join(", "));
    let g = parse(&src);
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.explanation().contains("share the run's arena"), "{}", plan.explanation());
    assert!(validate_shaders(plan.program().unwrap(), "arena") > 0 || !required());
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for n in [7usize, 1, 300, 0, 7] {
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1.5).collect();
        let mut y: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        if n > 2 {
            y[1] = f32::NAN;
            y[2] = f32::NEG_INFINITY;
        }
        let inputs = [f32s(&[n], x), f32s(&[n], y)];
        let want = reference.run(&inputs).unwrap().outputs;
        agree(&plan.run(&inputs).unwrap().outputs, &want, &format!("arena, n = {n}"));
    }
    clean("arena");
}

/// A chain of 40 elementwise ops of `%x` and `%y`, each result returned (`%a0` to `%a39`):
/// one fused kernel writing more buffers than a shader binds, so they live in the run's arena.
/// The graph's body and its returned values.
pub(crate) fn wide_chain() -> (String, Vec<String>) {
    let mut body = String::from("  %a0 = add(%x, %y)\n");
    let mut outs = vec!["%a0".to_string()];
    for k in 1..40 {
        let op = ["mul", "add", "sub", "max"][k % 4];
        body += &format!("  %a{k} = {op}(%a{}, %x)\n", k - 1);
        outs.push(format!("%a{k}"));
    }
    (body, outs)
}

/// The memory plan: temporaries whose lifetimes do not meet share memory (buffers bound
/// into one block at offsets from `kernel::memory`), and a chain of matmuls, softmaxes and
/// sums, each step reading the last, still matches the reference, at sizes that change and
/// repeat (replays of recorded commands over the shared memory).
#[test]
fn temporaries_share_memory_by_lifetime() {
    if !device("temporaries_share_memory_by_lifetime") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[n, k], %w: f32[k, k]) {
  %a = matmul(%x, %w)
  %b = softmax(%a) {axis=-1}
  %c = matmul(%b, %w)
  %d = softmax(%c) {axis=0}
  %e = matmul(%d, %w)
  %f = log_softmax(%e) {axis=-1}
  %g = matmul(%f, %w)
  %h = sum(%g) {axes=[1]}
  return %g, %h
}",
    );
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for (n, k) in [(5usize, 8usize), (64, 33), (5, 8), (1, 1)] {
        let x: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0).collect();
        let w: Vec<f32> = (0..k * k).map(|i| ((i * 104_729) % 89) as f32 / 44.0 - 1.0).collect();
        let inputs = [f32s(&[n, k], x), f32s(&[k, k], w)];
        let report = plan.memory_report(&inputs).unwrap();
        assert!(report.temporaries >= 6, "{report:?}");
        assert!(report.arena_bytes < report.naive_bytes, "{report:?}");
        let want = reference.run(&inputs).unwrap().outputs;
        agree(&plan.run(&inputs).unwrap().outputs, &want, &format!("memory plan, {n}x{k}"));
    }
    clean("memory plan");
}

/// Device-local memory with staging (the default on a discrete GPU, chosen here on whatever
/// device there is): constants and pools uploaded once, inputs and `dim_values` results
/// copied in and outputs copied out by the recorded commands; temporaries in the memory
/// plan's block and members of the arena device-local too. Each program agrees with the
/// reference at sizes that change and repeat.
#[test]
fn staged_device_local_memory_matches_the_reference() {
    if !device("staged_device_local_memory_matches_the_reference") {
        return;
    }
    let staged = CompileOptions::vulkan_on(vulkan::VulkanDevice::process().unwrap().with_staging(true));
    let mut many = String::from("  %a0 = add(%x, %y)\n");
    for k in 1..36 {
        many += &format!("  %a{k} = mul(%a{}, %x)\n", k - 1);
    }
    let outs: Vec<String> = (0..36).map(|k| format!("%a{k}")).collect();
    let programs = [
        // The memory plan's temporaries, a constant, an input and sizes as data returned.
        "blob @c: f32[3] = [1.5, -2.0, 0.25]
graph g(%x: f32[n, 3], %y: f32[n, 3]) {
  %c = const @c
  %w = mul(%y, %c)
  %a = matmul(%x, %w) {transpose_b=true}
  %s = softmax(%a) {axis=-1}
  %t = matmul(%s, %x)
  %d = dim_values() {dims=[n, 3, 2*n]}
  %df = convert_element_type(%d) {dtype=f32}
  %u = sum(%t) {axes=[0]}
  %v = add(%u, %df)
  return %t, %v, %c, %x, %d
}"
        .to_string(),
        // A kernel binding too many buffers: its results in the arena.
        format!("graph g(%x: f32[n, 3], %y: f32[n, 3]) {{\n{many}  return {}\n}}", outs.join(", ")),
    ];
    for src in &programs {
        let g = parse(src);
        let plan = compile(&g, &staged).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            plan.explanation().contains("device-local memory, inputs and outputs staged"),
            "{}",
            plan.explanation()
        );
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        for n in [4usize, 1, 37, 4, 0] {
            let x: Vec<f32> = (0..n * 3).map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0).collect();
            let y: Vec<f32> = (0..n * 3).map(|i| ((i * 104_729) % 89) as f32 / 44.0 - 1.0).collect();
            let inputs = [f32s(&[n, 3], x), f32s(&[n, 3], y)];
            let want = reference.run(&inputs).unwrap().outputs;
            agree(&plan.run(&inputs).unwrap().outputs, &want, &format!("staged, n = {n}: {src}"));
        }
    }
    clean("staged");
}

/// A buffer a kernel binds that is larger than the device binds at once
/// (`maxStorageBufferRange`: lavapipe's is 128 MiB) is refused at run time as unsupported,
/// naming the kernel and the binding, not failed as a wrong program; a device that binds it
/// runs it.
#[test]
fn a_buffer_larger_than_the_device_binds_is_unsupported() {
    if !device("a_buffer_larger_than_the_device_binds_is_unsupported") {
        return;
    }
    let g = parse("graph g(%x: f32[n]) {\n  %y = neg(%x)\n  return %y\n}\n");
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    let n = (128 << 20) / 4 + 16;
    let lavapipe = vulkan::VulkanDevice::process().unwrap().name().contains("llvmpipe");
    match plan.run(&[f32s(&[n], vec![1.0; n])]) {
        Err(e @ ladder::RunError::Step { error: ladder::kernel::eval::ExecError::Unsupported { .. }, .. }) => {
            let e = e.to_string();
            assert!(e.contains("binding b0 of 134217792 bytes") && e.contains("binds at once"), "{e}");
        }
        Err(e) => panic!("expected a refusal as unsupported, got: {e}"),
        Ok(out) => {
            assert!(!lavapipe, "lavapipe binds at most 128 MiB, yet a run bound more");
            assert_eq!(out.outputs[0].numel(), n);
        }
    }
    clean("a buffer larger than the device binds");
}

/// Matmuls with transposes and broadcast batch dims (sizes below, at and past whole 8 × 8
/// blocks: the blocked kernel and both remainder kernels), and the encoder example (matmuls
/// with epilogue kernels, softmax, layer norms, gelu), against the reference across sizes.
#[test]
fn matmuls_and_the_example_encoder_match_the_reference() {
    if !device("matmuls_and_the_example_encoder_match_the_reference") {
        return;
    }
    let g = parse(
        "graph g(%a: f32[b, m, k], %b: f32[k, n], %c: f32[b, n, k], %d: f32[1, m, k]) {
  %x = matmul(%a, %b)
  %y = matmul(%a, %c) {transpose_b=true}
  %z = matmul(%d, %a) {transpose_b=true}
  %w = matmul(%a, %d) {transpose_a=true}
  return %x, %y, %z, %w
}",
    );
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    let mut rng = ladder::models::Rng::new(4);
    for (b, m, k, n) in [(2, 3, 5, 4), (1, 17, 64, 9), (3, 1, 1, 1), (2, 4, 0, 3), (2, 24, 7, 16), (1, 9, 3, 33)] {
        let t = |rng: &mut ladder::models::Rng, s: &[usize]| {
            ladder::models::random_tensor(rng, ladder::DType::F32, s).unwrap()
        };
        let inputs = [t(&mut rng, &[b, m, k]), t(&mut rng, &[k, n]), t(&mut rng, &[b, n, k]), t(&mut rng, &[1, m, k])];
        same_as_reference(&plan, &reference, &inputs, &format!("b={b} m={m} k={k} n={n}"));
    }
    let encoder = ladder::models::example_encoder().unwrap();
    let plan = compile(&encoder, &CompileOptions::vulkan()).unwrap();
    let reference = compile(&encoder, &CompileOptions::reference()).unwrap();
    for seq in [1, 7, 64] {
        let inputs: Vec<Tensor> = encoder
            .inputs()
            .iter()
            .map(|&v| {
                let dims: Vec<usize> =
                    encoder.ty(v).shape.dims().iter().map(|d| d.as_const().map_or(seq, |c| c as usize)).collect();
                ladder::models::random_tensor(&mut rng, encoder.ty(v).dtype, &dims).unwrap()
            })
            .collect();
        same_as_reference(&plan, &reference, &inputs, &format!("encoder, seq {seq}"));
    }
}

/// Random prims graphs, lowered as the backend lowers them: every program it accepts runs and
/// agrees with the reference executor (floats within the conformance tolerance, integers and
/// bools exactly), and every shader it generates passes `spirv-val` for Vulkan 1.2.
#[test]
fn random_programs_agree_with_the_reference_and_validate() {
    if !device("random_programs_agree_with_the_reference_and_validate") {
        return;
    }
    let (mut ran, mut refused, mut shaders) = (0, 0, 0);
    let mut why = std::collections::BTreeMap::new();
    let mut ops_run = std::collections::HashSet::new();
    for seed in 0..300u64 {
        let bytes = seeded_bytes(seed, 4000);
        let cfg = GenConfig { attempts: 120, rungs: vec![Rung::Prim, Rung::High], ..GenConfig::default() };
        let g = random_graph(&mut Source::new(&bytes), &cfg);
        let Ok(reference) = compile(&g, &CompileOptions::reference()) else { continue };
        let plan = match compile(&g, &CompileOptions::vulkan()) {
            Ok(p) => p,
            Err(CompileError::Unsupported { reason, .. }) => {
                refused += 1;
                // The reason without the step and kernel it names.
                let what = reason.rsplit(": ").next().unwrap_or(&reason).to_string();
                let what =
                    if what.contains(" call;") { what.split(" call;").next().unwrap_or("").to_string() } else { what };
                *why.entry(what).or_insert(0usize) += 1;
                continue;
            }
            Err(e) => panic!("seed {seed}: {e}"),
        };
        shaders += validate_shaders(plan.program().unwrap(), &format!("seed {seed}"));
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[2500..]));
        let Ok(want) = reference.run(&inputs) else { continue };
        let got = match plan.run(&inputs) {
            Ok(got) => got,
            // A power the device does not have yet, found at run time: a refusal, said so.
            Err(e @ ladder::RunError::Step { error: ladder::kernel::eval::ExecError::Unsupported { .. }, .. }) => {
                assert!(e.to_string().contains("not on the Vulkan device yet"), "{e}");
                refused += 1;
                *why.entry("pow at run time".to_string()).or_insert(0usize) += 1;
                continue;
            }
            Err(e) => panic!("seed {seed}: the reference ran, vulkan failed: {e}\n{}", ladder::text::print(&g)),
        };
        clean(&format!("seed {seed}"));
        ran += 1;
        if let Ok(lowered) = ladder::passes::lower(&g) {
            ops_run.extend(lowered.simplified.nodes().map(|(_, n)| n.op));
        }
        for (w, o) in want.outputs.iter().zip(&got.outputs) {
            let exact = !w.dtype().is_float();
            let ok = if exact { w.bit_eq(o) } else { compare(o, w).is_none() };
            assert!(ok, "seed {seed}: got {o}, want {w}\n{}", plan.program().unwrap());
        }
    }
    eprintln!("{ran} programs ran on the device, {refused} refused, {shaders} shaders validated; refused for: {why:?}");
    assert!(ran >= 100, "only {ran} random programs ran ({refused} refused)");
    // What `ladder ops` claims for the device, seen running: every such prim the generator
    // makes (sizes as data and iotas come from shape ops it rarely lowers to) was in a
    // program that ran.
    let missing: Vec<&str> = ladder::ops::all_specs()
        .filter(|s| {
            matches!(s.rung, Rung::Prim | Rung::Opaque) && vulkan::runs_op(s.kind) && !ops_run.contains(&s.kind)
        })
        .map(|s| s.name)
        // Gathers and scatter_adds run from tensors of static shape only, which generated
        // graphs rarely have, and convolutions are opaque ops, which these are drawn without:
        // `vulkan_library.rs` runs them.
        .filter(|n| !["dim_values", "iota", "gather", "scatter_add", "conv"].contains(n))
        .collect();
    assert!(missing.is_empty(), "prims claimed for vulkan that no program ran: {missing:?}");
}

/// The real-model corpus on the device, each data set against onnxruntime's outputs with
/// ONNX's tolerance (the node tests' runner): every model runs there (BERT and GPT-2, the
/// CRNN with its convolutions and LSTM, the YOLO-style detector, the LSTM, the voice model
/// with its reflection pad), from both exporters; a model refused for a step the device
/// lacks would be listed, never wrong.
#[test]
fn the_corpus_runs_on_the_device_where_its_steps_are_there() {
    if !device("the_corpus_runs_on_the_device_where_its_steps_are_there") {
        return;
    }
    use ladder::frontend::onnx::conformance::{cases, run_case, Verdict};
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut passed = Vec::new();
    for case in cases(&root).unwrap() {
        let r = run_case(&case, &ladder::frontend::onnx::ImportOptions::default(), &CompileOptions::vulkan());
        clean(&r.name);
        match r.verdict {
            Verdict::Passed => passed.push(r.name),
            Verdict::Unsupported => eprintln!("{}: refused: {}", r.name, r.reason),
            _ => panic!("{}: {:?}: {}", r.name, r.verdict, r.reason),
        }
    }
    passed.sort();
    let all = [
        "bert_dynamo",
        "bert_ts",
        "crnn_anondims",
        "crnn_dynamo",
        "crnn_ts",
        "gpt2_dynamo",
        "gpt2_ts",
        "lstm_ts",
        "vad_dynamo",
        "vad_ts",
        "yolo_dynamo",
        "yolo_ts",
    ];
    assert_eq!(passed, all, "the models that ran");
}

/// i32 values widened to i64 and compared with constants in either order (constants inside
/// and outside the i32 range, values at its ends), and gathers with i32 indices in range,
/// negative and out of range: the widening's comparisons are the reference's (Mesa 22's NIR
/// folds a sign extension compared with a constant wrongly; the lowering does not give it one).
#[test]
fn widened_i32_compares_and_i32_gathers() {
    if !device("widened_i32_compares_and_i32_gathers") {
        return;
    }
    let consts = [0.0, 6.0, -5.0, -2147483648.0, 2147483647.0, 3e9, -3e9];
    let mut src = String::from("graph g(%x: i32[7]) {\n  %v = convert_element_type(%x) {dtype=i64}\n");
    let mut outs = Vec::new();
    for (k, c) in consts.iter().enumerate() {
        src += &format!("  %c{k} = full() {{shape=[7], value={c:?}, dtype=i64}}\n");
        for op in ["lt", "le", "gt", "ge", "eq", "ne"] {
            src += &format!("  %{op}{k} = {op}(%v, %c{k})\n  %r{op}{k} = {op}(%c{k}, %v)\n");
            outs.extend([format!("%{op}{k}"), format!("%r{op}{k}")]);
        }
    }
    src += &format!("  return {}\n}}", outs.join(", "));
    let g = parse(&src);
    let x = Tensor::from_ints(ladder::DType::I32, &[7], vec![i32::MIN as i64, -6, -5, 0, 6, 7, i32::MAX as i64]);
    let (want, got) = run_both(&g, &[x.unwrap()]);
    for ((g, w), name) in got.iter().zip(&want).zip(&outs) {
        assert!(g.bit_eq(w), "{name}: got {g}, want {w}");
    }
    let gather = parse(
        "graph g(%t: f32[4, 3], %i: i32[2, 3]) {
  %y = gather(%t, %i) {axis=0}
  return %y
}",
    );
    let t = f32s(&[4, 3], (0..12).map(|v| v as f32).collect());
    let ints = |v: Vec<i64>| Tensor::from_ints(ladder::DType::I32, &[2, 3], v).unwrap();
    let (want, got) = run_both(&gather, &[t.clone(), ints(vec![3, 0, -1, -4, 2, 1])]);
    assert!(got[0].bit_eq(&want[0]), "got {}, want {}", got[0], want[0]);
    let plan = compile(&gather, &CompileOptions::vulkan()).unwrap();
    for bad in [vec![4, 0, 0, 0, 0, 0], vec![0, 0, 0, 0, 0, -5], vec![0, i32::MIN as i64, 0, 0, 0, 0]] {
        let err = plan.run(&[t.clone(), ints(bad)]).unwrap_err().to_string();
        clean("i32 gather out of range");
        assert!(err.contains("outside its buffer"), "{err}");
    }
}

/// An embedder's own instance, device and queue, made with ash as a program that owns its
/// device would: Vulkan 1.2, the first device with a compute queue and `shaderInt64`
/// (enabled), and with `LADDER_VULKAN_VALIDATION=1` the validation layer with the embedder's
/// own messenger, whose messages land in `EMBEDDER_MESSAGES`.
struct Embedder {
    entry: ash::Entry,
    instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, ash::vk::DebugUtilsMessengerEXT)>,
    physical: ash::vk::PhysicalDevice,
    device: ash::Device,
    family: u32,
    queue: ash::vk::Queue,
}

static EMBEDDER_MESSAGES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

unsafe extern "system" fn embedder_message(
    _severity: ash::vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: ash::vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const ash::vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut std::ffi::c_void,
) -> ash::vk::Bool32 {
    // SAFETY: the layer passes valid callback data whose message is a C string.
    let text = unsafe { data.as_ref() }
        .filter(|d| !d.p_message.is_null())
        .map(|d| unsafe { std::ffi::CStr::from_ptr(d.p_message) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    EMBEDDER_MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).push(text);
    ash::vk::FALSE
}

impl Embedder {
    /// `Err` says why there is no device.
    fn new(validation: bool) -> Result<Embedder, String> {
        use ash::vk;
        // SAFETY: loading the system's Vulkan loader.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default().application_name(c"embedder").api_version(vk::API_VERSION_1_2);
        let layers = [c"VK_LAYER_KHRONOS_validation".as_ptr()];
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut info = vk::InstanceCreateInfo::default().application_info(&app);
        if validation {
            info = info.enabled_layer_names(&layers).enabled_extension_names(&extensions);
        }
        // SAFETY: the create info outlives the call; `Drop` destroys what is made.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| format!("no Vulkan 1.2 driver answered (vkCreateInstance: {e:?})"))?;
        let debug = validation.then(|| {
            let d = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION,
                )
                .pfn_user_callback(Some(embedder_message));
            let m = unsafe { d.create_debug_utils_messenger(&info, None) }.unwrap();
            (d, m)
        });
        let found = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default().into_iter().find_map(|p| {
            let props = unsafe { instance.get_physical_device_properties(p) };
            let features = unsafe { instance.get_physical_device_features(p) };
            let families = unsafe { instance.get_physical_device_queue_family_properties(p) };
            let family = families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))?;
            (props.api_version >= vk::API_VERSION_1_2 && features.shader_int64 == vk::TRUE)
                .then_some((p, family as u32))
        });
        let destroy = |why: String| {
            unsafe {
                if let Some((d, m)) = &debug {
                    d.destroy_debug_utils_messenger(*m, None);
                }
                instance.destroy_instance(None);
            }
            why
        };
        let (physical, family) =
            found.ok_or_else(|| destroy("no Vulkan 1.2 device with a compute queue and shaderInt64".into()))?;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
        let features = Self::features();
        let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_features(&features);
        let device = unsafe { instance.create_device(physical, &info, None) }
            .map_err(|e| destroy(format!("vkCreateDevice: {e:?}")))?;
        let queue = unsafe { device.get_device_queue(family, 0) };
        Ok(Embedder { entry, instance, debug, physical, device, family, queue })
    }

    fn features() -> ash::vk::PhysicalDeviceFeatures {
        ash::vk::PhysicalDeviceFeatures::default().shader_int64(true)
    }

    fn external(&self) -> vulkan::ExternalDevice {
        vulkan::ExternalDevice {
            entry: self.entry.clone(),
            instance: self.instance.clone(),
            physical_device: self.physical,
            device: self.device.clone(),
            enabled_features: Self::features(),
            queue_family_index: self.family,
            queue: self.queue,
        }
    }
}

impl Drop for Embedder {
    fn drop(&mut self) {
        // SAFETY: every plan on the device was dropped before the embedder.
        unsafe {
            self.device.destroy_device(None);
            if let Some((d, m)) = self.debug.take() {
                d.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// The embedder's device, or `None` (skipped, said why) where there is no Vulkan driver.
fn embedder(test: &str, validation: bool) -> Option<Embedder> {
    match Embedder::new(validation) {
        Ok(e) => Some(e),
        Err(why) if !required() => {
            eprintln!("{test}: skipped: {why}");
            None
        }
        Err(why) => panic!("{test}: LADDER_REQUIRE_VULKAN=1 but {why}"),
    }
}

/// A program that owns its Vulkan device hands it to ladder: plans compiled with
/// `CompileOptions::vulkan_on` run there (at two batch sizes) and match the reference; ladder
/// destroys what it made when the plan goes and leaves the device to the embedder, which
/// still uses it and destroys it, with the validation layer (the embedder's own messenger)
/// reporting nothing, leaked objects at `vkDestroyDevice` included.
#[test]
fn an_embedders_device_runs_plans_and_stays_the_embedders() {
    let validation = std::env::var("LADDER_VULKAN_VALIDATION").is_ok_and(|v| v == "1");
    let Some(own) = embedder("an_embedders_device_runs_plans_and_stays_the_embedders", validation) else {
        return;
    };
    EMBEDDER_MESSAGES.lock().unwrap().clear();
    // SAFETY: the embedder's live objects, dropped after every plan below.
    let device = unsafe { vulkan::VulkanDevice::from_external(own.external()) }.unwrap();
    assert!(device.is_external());
    assert!(!vulkan::VulkanDevice::process().is_ok_and(|d| d.is_external()));
    let g = parse(
        "graph g(%x: f32[n, 8], %w: f32[8, 5]) {
  %m = matmul(%x, %w)
  %s = softmax(%m) {axis=-1}
  return %s
}",
    );
    let plan = compile(&g, &CompileOptions::vulkan_on(device.clone())).unwrap();
    assert!(plan.explanation().contains(device.name()), "{}", plan.explanation());
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    let mut rng = ladder::models::Rng::new(3);
    for n in [3, 17, 3] {
        let x = ladder::models::random_tensor(&mut rng, ladder::DType::F32, &[n, 8]).unwrap();
        let w = ladder::models::random_tensor(&mut rng, ladder::DType::F32, &[8, 5]).unwrap();
        same_as_reference(&plan, &reference, &[x, w], &format!("the embedder's device, n = {n}"));
    }
    // The queue's lock is the one runs take: held here, free again once dropped.
    drop(device.lock_queue());
    drop(plan);
    drop(device);
    // The device is still the embedder's and works.
    unsafe {
        let fence = own.device.create_fence(&ash::vk::FenceCreateInfo::default(), None).unwrap();
        own.device.destroy_fence(fence, None);
        own.device.device_wait_idle().unwrap();
    }
    drop(own);
    let messages = std::mem::take(&mut *EMBEDDER_MESSAGES.lock().unwrap());
    assert!(messages.is_empty(), "the embedder's validation layer reported:\n{}", messages.join("\n"));
}

/// A device that lacks what ladder's shaders need is refused with every missing thing named:
/// `shaderInt64` not enabled when it was created, a queue family that does not exist, a null
/// queue.
#[test]
fn an_embedders_device_without_what_ladder_needs_is_refused_naming_it() {
    let Some(own) = embedder("an_embedders_device_without_what_ladder_needs_is_refused_naming_it", false) else {
        return;
    };
    let ext = vulkan::ExternalDevice {
        enabled_features: ash::vk::PhysicalDeviceFeatures::default(),
        queue_family_index: 99,
        queue: ash::vk::Queue::null(),
        ..own.external()
    };
    // SAFETY: the embedder's live objects; nothing is made on them.
    match unsafe { vulkan::VulkanDevice::from_external(ext) } {
        Err(vulkan::VulkanError::Unsuitable { device, missing }) => {
            let text = missing.join("; ");
            assert!(!device.is_empty());
            assert_eq!(missing.len(), 3, "{text}");
            assert!(text.contains("shaderInt64") && text.contains("not enabled"), "{text}");
            assert!(text.contains("family 99 does not exist"), "{text}");
            assert!(text.contains("null"), "{text}");
        }
        other => panic!("an unsuitable device was taken: {other:?}"),
    }
    // With what it needs, the same device is taken.
    let ok = unsafe { vulkan::VulkanDevice::from_external(own.external()) };
    assert!(ok.is_ok(), "{ok:?}");
}

/// The device's floors for `ladder bench --backend vulkan`, measured on it: the FMA shader
/// passes `spirv-val`, the copy and FMA rates come back positive with the work they counted and
/// no validation message, and the bench's floor of a copy-bound workload is its io bytes at
/// the copy rate, of a FLOP-bound one its FLOPs at the FMA rate.
#[test]
fn the_devices_floors_are_measured_on_it() {
    use ladder::backend::vulkan::floors;
    if !device("the_devices_floors_are_measured_on_it") {
        return;
    }
    let words = floors::fma_shader().unwrap();
    if std::process::Command::new("spirv-val").arg("--version").output().is_ok() {
        let path = std::env::temp_dir().join(format!("ladder-fma-floor-{}.spv", std::process::id()));
        std::fs::write(&path, words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let out = std::process::Command::new("spirv-val").args(["--target-env", "vulkan1.2"]).arg(&path).output();
        let _ = std::fs::remove_file(&path);
        let out = out.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    } else {
        assert!(!required(), "LADDER_REQUIRE_VULKAN=1 but spirv-val is not installed (Debian: spirv-tools)");
    }
    let d = vulkan::VulkanDevice::process().unwrap();
    let copy = floors::copy_rate(&d, 1 << 20, 3).unwrap();
    assert_eq!(copy.work, 2.0 * (1u64 << 20) as f64);
    assert!(copy.per_second.is_finite() && copy.per_second > 0.0, "{copy:?}");
    let fma = floors::fma_rate(&d, 3).unwrap();
    // At least 16 rounds of 12 chains over 4096 groups of 64 invocations.
    assert!(fma.work >= (4096 * 64 * 12 * 2 * 16) as f64, "{fma:?}");
    assert!(fma.per_second.is_finite() && fma.per_second > 0.0, "{fma:?}");
    clean("the floors");
    let mut f = ladder::bench::Floors::default();
    let w1 = ladder::bench::workload("W1_gelu_16K").unwrap();
    let w0 = ladder::bench::workload("W0_sgemm_1024").unwrap();
    let (t1, t0) = (f.device_floor_us(&w1).unwrap(), f.device_floor_us(&w0).unwrap());
    let m = f.device_measured().unwrap();
    assert_eq!(m.device, d.name());
    assert_eq!(t1, w1.io_bytes as f64 / m.copy_bytes_per_s * 1e6);
    assert_eq!(t0, w0.flops / m.fma_flops_per_s * 1e6);
    clean("the bench's floors");
}

/// `ladder bench --backend vulkan`: the device's floors in the footer and a copy-bound
/// workload's floor its io bytes at the footer's copy rate, on lavapipe a workload with a
/// buffer larger than the device binds noted and left out, and JSON rows with the same keys as
/// the CPU's.
#[cfg(feature = "cli")]
#[test]
fn bench_reports_fractions_of_the_devices_floors() {
    if !device("bench_reports_fractions_of_the_devices_floors") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_ladder");
    let bench = |args: &[&str]| {
        let out = std::process::Command::new(exe).arg("bench").args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let common = ["--workload", "W9", "--threads", "1", "--runs", "2"];
    let (table, _) = bench(&["--backend", "vulkan", "--workload", "W9,W1_gelu_16K", "--threads", "1", "--runs", "2"]);
    assert!(table.contains("W9_call_overhead_add16") && table.contains("floor/t"), "{table}");
    assert!(table.contains("the device's copy rate: ") && table.contains("the device's f32 FMA rate: "), "{table}");
    // W1's floor is its io bytes at the copy rate the footer gives (both as printed).
    let gb_per_s: f64 =
        table.split("the device's copy rate: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let row: Vec<f64> = table
        .lines()
        .find(|l| l.starts_with("W1_gelu_16K "))
        .unwrap_or_else(|| panic!("{table}"))
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(f64::NAN))
        .collect();
    let (median_us, floor_us, ratio) = (row[1], row[4], row[5]);
    let want = ladder::bench::workload("W1_gelu_16K").unwrap().io_bytes as f64 / (gb_per_s * 1e3);
    assert!((floor_us - want).abs() <= 0.05 + want * 1e-3, "floor {floor_us} us, want {want}: {table}");
    assert!((ratio - floor_us / median_us).abs() <= 2e-3 + ratio * 0.02, "{table}");
    if vulkan::VulkanDevice::process().unwrap().name().contains("llvmpipe") {
        let (_, notes) =
            bench(&["--backend", "vulkan", "--workload", "W5_attn_S4096", "--threads", "1", "--runs", "1"]);
        assert!(
            notes.contains("W5_attn_S4096: not run on the vulkan backend") && notes.contains("binds at once"),
            "{notes}"
        );
    }
    let keys = |text: &str| -> Vec<Vec<String>> {
        let rows: serde_json::Value = serde_json::from_str(text).unwrap();
        rows.as_array().unwrap().iter().map(|r| r.as_object().unwrap().keys().cloned().collect()).collect()
    };
    let json = bench(&[&["--backend", "vulkan", "--json"][..], &common].concat()).0;
    let cpu = keys(&bench(&["--backend", "cpu", "--json", "--workload", "W9", "--threads", "1", "--runs", "2"]).0);
    assert_eq!(keys(&json).len(), 1);
    assert_eq!(keys(&json), cpu);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(rows[0]["backend"], "vulkan");
    assert!(rows[0]["floor_ratio"].as_f64().is_some_and(|r| r > 0.0), "{rows}");
}
