//! The row shader (`shaders/rows_f32.wgsl`): recovered f32 softmax, log_softmax, layer_norm
//! and rms_norm on the device, against the interpreter running the op (the oracle) under the
//! tolerance table, on random rows and on the adversarial rows the CPU's row kernels are
//! checked on, at row lengths around its 64-lane workgroups, row counts past one dispatch,
//! inputs of rank 1 and 3, operands in the run's arena; and the lowering that plans for a
//! device with library shaders take (`Mode::Shaders`): the row ops recovered, nothing else.
//! Plans here run on the process's device with library shaders on, as in `vulkan_gemm.rs`;
//! the tolerance tests run both ways the shader reduces (on subgroup operations, where the
//! device has them, and in workgroup memory).
//! Skipped where there is no device, as in `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::VulkanDevice;
use ladder::gen::Source;
use ladder::numerics::{compare, random_data, CompareCtx};
use ladder::{compile, CompileOptions, DType, Graph, OpKind, Plan, Tensor};

use crate::recover_norms::{adversarial_rows, params};
use crate::vulkan::{agree, clean, device, parse, required, wide_chain};

/// The process's device with library shaders on.
fn shaders() -> CompileOptions {
    CompileOptions::vulkan_on(VulkanDevice::process().unwrap().with_library_shaders(true))
}

/// The ways the device's library shaders reduce across a workgroup: on subgroup operations
/// (`true`; where it has them, which `LADDER_REQUIRE_VULKAN=1` requires), and in workgroup
/// memory by a tree (`false`).
pub(crate) fn reductions() -> Vec<bool> {
    let d = VulkanDevice::process().unwrap();
    match d.subgroup_size() {
        Some(n) => {
            eprintln!("{}: subgroups of {n}: the library shaders reduce both ways", d.name());
            vec![true, false]
        }
        None if required() => panic!("LADDER_REQUIRE_VULKAN=1 but {} has no subgroup operations", d.name()),
        None => {
            eprintln!("{}: no subgroup operations: the library shaders reduce in workgroup memory only", d.name());
            vec![false]
        }
    }
}

/// The process's device with library shaders on, reducing on subgroup operations where
/// `subgroups`, else in workgroup memory.
pub(crate) fn shaders_reducing(subgroups: bool) -> CompileOptions {
    CompileOptions::vulkan_on(VulkanDevice::process().unwrap().with_library_shaders(true).with_subgroups(subgroups))
}

/// Asserts that `plan`'s explanation says its library shaders reduce on subgroups exactly
/// where `subgroups`.
pub(crate) fn reduces_as(plan: &Plan, subgroups: bool, what: &str) {
    let e = plan.explanation();
    assert_eq!(e.contains("reducing on subgroups of "), subgroups, "{what} (subgroups: {subgroups}): {e}");
}

/// The ops: (op text, attributes, weight and bias count, op).
const OPS: [(&str, &str, usize, OpKind); 8] = [
    ("softmax", "axis=-1", 0, OpKind::Softmax),
    ("log_softmax", "axis=-1", 0, OpKind::LogSoftmax),
    ("layer_norm", "axis=-1, eps=1e-5", 2, OpKind::LayerNorm),
    ("layer_norm", "axis=-1, eps=1e-5", 1, OpKind::LayerNorm),
    ("layer_norm", "axis=-1, eps=0.0", 0, OpKind::LayerNorm),
    ("rms_norm", "axis=-1, eps=1e-6", 1, OpKind::RmsNorm),
    ("rms_norm", "axis=-1, eps=1e-5", 0, OpKind::RmsNorm),
    ("rms_norm", "axis=-1, eps=0.0", 1, OpKind::RmsNorm),
];

/// `op` over `x: f32[lead..., n]` (`lead` dims as written, symbolic ones allowed) with
/// `params` of a weight and a bias `[n]`.
fn graph(op: &str, attrs: &str, params: usize, lead: &str, n: usize) -> Graph {
    let names = ["%w", "%b"];
    let mut sig = format!("%x: f32[{lead}{n}]");
    let mut args = String::from("%x");
    for name in &names[..params] {
        sig += &format!(", {name}: f32[{n}]");
        args += &format!(", {name}");
    }
    parse(&format!("graph one({sig}) {{\n  %y = {op}({args}) {{{attrs}}}\n  return %y\n}}"))
}

/// The plan of `g` on the device, whose explanation says the row shader runs `rows` steps.
fn row_plan(g: &Graph, rows: usize, what: &str) -> Plan {
    row_plan_on(g, rows, &shaders(), what)
}

/// [`row_plan`] with `options`.
fn row_plan_on(g: &Graph, rows: usize, options: &CompileOptions, what: &str) -> Plan {
    let plan = compile(g, options).unwrap_or_else(|e| panic!("{what}: {e}\n{}", ladder::text::print(g)));
    let e = plan.explanation();
    let says = [format!(", {rows} of them the row shader"), format!(", {rows} the row shader")];
    assert!(says.iter().any(|s| e.contains(s.as_str())), "{what}: {e}");
    plan
}

/// `plan` against the precise interpreter running `g` on `inputs`, under `kind`'s tolerance;
/// no validation message.
fn check(g: &Graph, plan: &Plan, kind: OpKind, inputs: &[Tensor], what: &str) {
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    let want = ladder::interp::run(g, inputs, &precise).unwrap().outputs;
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}")).outputs;
    clean(what);
    let ctx = CompareCtx { graph: g, node: g.outputs()[0].value, inputs, output: "y" };
    if let Err(m) = compare(kind, &want[0], &got[0], &ctx) {
        panic!("{what}: {m}\ninput: {:?}", inputs[0]);
    }
}

/// Random rows of lengths around the workgroup's 64 lanes and past a few hundred of them,
/// row counts that change between runs of one plan (symbolic), empty rows and empty inputs.
#[test]
fn the_row_shader_meets_the_tolerance_table_on_random_rows() {
    if !device("the_row_shader_meets_the_tolerance_table_on_random_rows") {
        return;
    }
    let mut compared = 0;
    for subgroups in reductions() {
        let options = shaders_reducing(subgroups);
        for (oi, &(op, attrs, count, kind)) in OPS.iter().enumerate() {
            for n in [1usize, 7, 63, 64, 65, 200, 1024, 2049] {
                let g = graph(op, attrs, count, "r, ", n);
                let what = format!("{op} {{{attrs}}} of {n}");
                let plan = row_plan_on(&g, 1, &options, &what);
                reduces_as(&plan, subgroups, &what);
                for rows in [3usize, 1, 0, 17] {
                    let bytes = ladder::gen::seeded_bytes((oi * 10_000 + n * 10 + rows) as u64, 64);
                    let mut inputs = vec![random_data(&mut Source::new(&bytes), DType::F32, &[rows, n])];
                    inputs.extend(params(n, count));
                    check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} [{rows}, {n}], subgroups: {subgroups}"));
                    compared += 1;
                }
            }
            // Rows of no elements.
            let g = graph(op, attrs, count, "4, ", 0);
            let plan = compile(&g, &options).unwrap();
            let mut inputs = vec![Tensor::from_f32(&[4, 0], vec![]).unwrap()];
            inputs.extend(params(0, count));
            check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} [4, 0], subgroups: {subgroups}"));
        }
    }
    eprintln!("{compared} random cases compared");
}

/// Infinities in every place, NaN, all `-inf`, values near the top of the range, subnormals,
/// cancellation, the `exp` flush, and the weights' zeros and large values.
#[test]
fn the_row_shader_meets_the_tolerance_table_on_adversarial_rows() {
    if !device("the_row_shader_meets_the_tolerance_table_on_adversarial_rows") {
        return;
    }
    for subgroups in reductions() {
        let options = shaders_reducing(subgroups);
        for &(op, attrs, count, kind) in &OPS {
            for n in [1usize, 2, 5, 63, 64, 65, 300, 2049] {
                let rows = adversarial_rows(n);
                let g = graph(op, attrs, count, &format!("{}, ", rows.len()), n);
                let what = format!("{op} {{{attrs}}} adversarial rows of {n}, subgroups: {subgroups}");
                let plan = row_plan_on(&g, 1, &options, &what);
                reduces_as(&plan, subgroups, &what);
                let mut inputs = vec![Tensor::from_f32(&[rows.len(), n], rows.concat()).unwrap()];
                inputs.extend(params(n, count));
                check(&g, &plan, kind, &inputs, &what);
            }
        }
    }
}

/// More rows than one dispatch has workgroups (65,535): workgroups loop over the rest. And
/// inputs of rank 1 (one row) and 3 (rows over two lead dims).
#[test]
fn the_row_shader_covers_more_rows_than_one_dispatch_and_any_rank() {
    if !device("the_row_shader_covers_more_rows_than_one_dispatch_and_any_rank") {
        return;
    }
    for (oi, &(op, attrs, count, kind)) in OPS.iter().enumerate().step_by(2) {
        for (lead, shape) in [("70000, ", vec![70_000, 3]), ("", vec![300]), ("2, 3, ", vec![2, 3, 70])] {
            let n = *shape.last().unwrap();
            let g = graph(op, attrs, count, lead, n);
            let what = format!("{op} {{{attrs}}} {shape:?}");
            let plan = row_plan(&g, 1, &what);
            let bytes = ladder::gen::seeded_bytes(oi as u64 * 7 + shape.len() as u64, 64);
            let mut inputs = vec![random_data(&mut Source::new(&bytes), DType::F32, &shape)];
            inputs.extend(params(n, count));
            check(&g, &plan, kind, &inputs, &what);
        }
    }
}

/// A softmax and a layer norm reading and writing the run's arena (a fused kernel writing
/// more buffers than a shader binds put them there): the shader reads each at its offset.
#[test]
fn the_row_shader_reads_and_writes_the_arena() {
    if !device("the_row_shader_reads_and_writes_the_arena") {
        return;
    }
    let (mut body, mut outs) = wide_chain();
    body += "  %s = softmax(%a39) {axis=-1}\n  %t = layer_norm(%a7, %w, %w) {axis=-1, eps=1e-5}\n";
    outs.extend(["%s", "%t"].map(String::from));
    let src = format!("graph g(%x: f32[n, 4], %y: f32[n, 4], %w: f32[4]) {{\n{body}  return {}\n}}\n", outs.join(", "));
    let g = parse(&src);
    let plan = row_plan(&g, 2, "arena");
    assert!(plan.explanation().contains("share the run's arena"), "{}", plan.explanation());
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    for n in [5usize, 1, 90, 0, 5] {
        let bytes = ladder::gen::seeded_bytes(n as u64, 64);
        let mut src = Source::new(&bytes);
        let inputs = [
            random_data(&mut src, DType::F32, &[n, 4]),
            random_data(&mut src, DType::F32, &[n, 4]),
            Tensor::from_f32(&[4], vec![0.5, -1.0, 2.0, 0.25]).unwrap(),
        ];
        let (got, want) = (plan.run(&inputs).unwrap().outputs, reference.run(&inputs).unwrap().outputs);
        clean("arena");
        agree(&got, &want, &format!("arena, n = {n}"));
    }
}

/// Plans for a device with library shaders recover the row ops and nothing else: a GELU (an
/// activation the CPU backend recovers) and a max pool (which it keeps whole) stay prims for
/// the generated kernels, so the plan still runs on the device. Without recovery the row ops
/// stay prims too; without library shaders, nothing is recovered.
#[test]
fn plans_with_library_shaders_recover_only_the_row_ops() {
    if !device("plans_with_library_shaders_recover_only_the_row_ops") {
        return;
    }
    let g = parse(
        "graph g(%x: f32[2, 3, 8, 8], %v: f32[5, 64]) {
  %p = max_pool2d(%x) {kernel=[2, 2]}
  %g = gelu(%v)
  %s = softmax(%g) {axis=-1}
  %l = log_softmax(%v) {axis=-1}
  return %p, %s, %l
}",
    );
    let plan = row_plan(&g, 2, "pool, gelu and softmaxes");
    let lowered =
        ladder::pipeline::lower(&g, ladder::pipeline::Mode::Shaders, ladder::pipeline::Rung::Recovered).unwrap();
    let ops: Vec<OpKind> = lowered.recovered.unwrap().matches.iter().map(|m| m.op).collect();
    assert_eq!(ops, [OpKind::Softmax, OpKind::LogSoftmax]);
    let bytes = ladder::gen::seeded_bytes(5, 64);
    let mut src = Source::new(&bytes);
    let inputs = [random_data(&mut src, DType::F32, &[2, 3, 8, 8]), random_data(&mut src, DType::F32, &[5, 64])];
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    agree(&plan.run(&inputs).unwrap().outputs, &reference.run(&inputs).unwrap().outputs, "pool, gelu and softmaxes");
    clean("pool, gelu and softmaxes");
    let unrecovered = compile(&g, &CompileOptions { recover: false, ..shaders() }).unwrap();
    assert!(!unrecovered.explanation().contains("row shader"), "{}", unrecovered.explanation());
    let device = VulkanDevice::process().unwrap().with_library_shaders(false);
    let generated = compile(&g, &CompileOptions::vulkan_on(device)).unwrap();
    assert!(!generated.explanation().contains("row shader"), "{}", generated.explanation());
}
