//! The attention shader (`shaders/attention_f32.wgsl`): recovered f32
//! `scaled_dot_product_attention` on the device against the interpreter running the op (the
//! oracle) under the tolerance table, and, on inputs whose f32 scores stay in range, with the
//! interpreter's exact NaN and infinity pattern: causal or not, safe softmax or not, the
//! default, an explicit and an infinite scale, f32 and bool masks of every broadcast shape,
//! fully masked rows, NaN and ±inf in q, k, v and the mask, scores near 1e30, key counts around
//! the shader's 64-key tiles, Dv past one pass of 256 columns, size-1 and empty dims, ranks 2
//! to 5, more query rows than one dispatch has workgroups, operands in the run's arena; and
//! the lowering for a device with library shaders recovering attention. Plans here run on the
//! process's device with library shaders on. Skipped where there is no device, as in
//! `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::VulkanDevice;
use ladder::models::Rng;
use ladder::tensor::TensorData;
use ladder::{compile, CompileOptions, Graph, Plan, Tensor};

use crate::attention_cases::{floats, graph, inputs, judge, mask_shapes, reference, Case, MaskKind, Profile};
use crate::vulkan::{agree, clean, device, parse, wide_chain};
use crate::vulkan_rows::{reduces_as, reductions, shaders_reducing};

/// The process's device with library shaders on.
fn shaders() -> CompileOptions {
    CompileOptions::vulkan_on(VulkanDevice::process().unwrap().with_library_shaders(true))
}

/// The plan of `c` on the device, whose explanation says the attention shader runs it.
fn shader_plan(g: &Graph, what: &str) -> Plan {
    shader_plan_on(g, &shaders(), what)
}

/// [`shader_plan`] with `options`.
fn shader_plan_on(g: &Graph, options: &CompileOptions, what: &str) -> Plan {
    let plan = compile(g, options).unwrap_or_else(|e| panic!("{what}: {e}\n{}", ladder::text::print(g)));
    let e = plan.explanation();
    let says = [", 1 of them the attention shader", ", 1 the attention shader"];
    assert!(says.iter().any(|s| e.contains(s)), "{what}: the attention shader does not run it: {e}");
    plan
}

/// `plan` on `ins` against the precise interpreter running `g` ([`judge`]); no validation
/// message.
fn check(g: &Graph, plan: &Plan, ins: &[Tensor], profile: Profile, what: &str) {
    let want = reference(g, ins);
    let got = plan.run(ins).unwrap_or_else(|e| panic!("{what}: {e}")).outputs.remove(0);
    clean(what);
    if let Err(m) = judge(g, ins, profile, &want, &got) {
        panic!("{what}: {m}");
    }
}

/// Every mask shape and kind, causal or not, safe or not, each profile, at key counts around
/// the 64-key tile and a Dv past one 256-column pass.
#[test]
fn the_attention_shader_meets_the_tolerance_table_on_random_and_adversarial_inputs() {
    if !device("the_attention_shader_meets_the_tolerance_table_on_random_and_adversarial_inputs") {
        return;
    }
    let sizes = [
        (&[2usize][..], (5, 63, 16, 8)),
        (&[2, 3][..], (7, 65, 8, 3)),
        (&[1][..], (70, 200, 64, 64)),
        (&[2][..], (3, 64, 4, 300)),
        (&[][..], (9, 1, 1, 1)),
        // By block (32 query rows or more): D and Dv across several staged chunks.
        (&[2, 3][..], (40, 65, 16, 8)),
        (&[1][..], (33, 64, 40, 300)),
        (&[2][..], (64, 33, 70, 70)),
    ];
    let mut compared = 0;
    for (si, &(batch, lsd)) in sizes.iter().enumerate() {
        let mut masks: Vec<Option<(MaskKind, Vec<usize>)>> = vec![None];
        for shape in mask_shapes(batch, lsd.0, lsd.1) {
            masks.push(Some((MaskKind::Float, shape.clone())));
            masks.push(Some((MaskKind::Bool, shape)));
        }
        for (mi, mask) in masks.into_iter().enumerate() {
            let (causal, safe) = (mi % 2 == 1, mi % 3 != 2);
            let scale = ["nan", "0.3", "nan"][mi % 3];
            let c = Case { causal, safe, scale, mask, ..Case::new(batch, lsd) };
            let g = graph(&c);
            for subgroups in reductions() {
                let what = format!("{c:?}, subgroups: {subgroups}");
                let plan = shader_plan_on(&g, &shaders_reducing(subgroups), &what);
                reduces_as(&plan, subgroups, &what);
                for (pi, profile) in
                    [Profile::Plain, Profile::Spiky, Profile::Huge, Profile::Generator].into_iter().enumerate()
                {
                    let seed = (si * 1000 + mi * 10 + pi) as u64;
                    check(&g, &plan, &inputs(&c, profile, seed), profile, &format!("{what} {profile:?}"));
                    compared += 1;
                }
            }
        }
    }
    eprintln!("{compared} cases compared");
}

/// Empty dims (no keys, no query rows, no batch, Dv = 0) at run time through symbolic sizes
/// (a static empty dim folds the op away), D = 0 (zero scores whatever the scale), one query
/// row against one key, and the default, infinite and explicit scales, causal or not, safe or
/// not.
#[test]
fn empty_dims_and_odd_scales_give_the_interpreters_result() {
    if !device("empty_dims_and_odd_scales_give_the_interpreters_result") {
        return;
    }
    for (causal, safe, scale) in
        [(false, true, "nan"), (true, false, "inf"), (false, false, "-inf"), (true, true, "0.5")]
    {
        for d in [8, 0] {
            let g = parse(&format!(
                "graph att(%q: f32[b, l, {d}], %k: f32[b, s, {d}], %v: f32[b, s, dv]) {{\n  \
                 %y = scaled_dot_product_attention(%q, %k, %v) {{causal={causal}, scale={scale}, safe_softmax={safe}}}\n  \
                 return %y\n}}"
            ));
            let what = format!("D = {d}, causal={causal}, safe_softmax={safe}, scale={scale}");
            let plan = shader_plan(&g, &what);
            let sizes = [(2, 4, 0, 8), (2, 0, 5, 8), (0, 4, 5, 8), (2, 4, 5, 0), (1, 1, 1, 1), (2, 3, 70, 5)];
            // By block too.
            let blocks = [(2, 40, 0, 8), (0, 40, 5, 8), (2, 40, 5, 0), (1, 33, 70, 5), (2, 32, 1, 1)];
            for (b, l, s, dv) in sizes.into_iter().chain(blocks) {
                let c = Case { causal, safe, scale, ..Case::new(&[b], (l, s, d, dv)) };
                for profile in [Profile::Plain, Profile::Spiky] {
                    let seed = (b * 1000 + l * 100 + s + dv) as u64;
                    check(&g, &plan, &inputs(&c, profile, seed), profile, &format!("{c:?} {profile:?}"));
                }
            }
        }
    }
}

/// Rows whose every key is masked: zeros with the safe softmax, NaN without, also where a
/// masked key's value is infinite (the 0 weight makes that column NaN in every other row), and
/// a maximum that first appears in a later key tile.
#[test]
fn fully_masked_rows_and_late_maxima_follow_the_op() {
    if !device("fully_masked_rows_and_late_maxima_follow_the_op") {
        return;
    }
    let s = 150;
    for (l, safe) in [(4, true), (4, false), (40, true), (40, false)] {
        for kind in [MaskKind::Float, MaskKind::Bool] {
            let c = Case { safe, mask: Some((kind, vec![l, s])), ..Case::new(&[2], (l, s, 8, 5)) };
            let g = graph(&c);
            for subgroups in reductions() {
                let what = format!("{c:?}, subgroups: {subgroups}");
                let plan = shader_plan_on(&g, &shaders_reducing(subgroups), &what);
                masked_rows(&g, &c, &plan, &what);
            }
        }
    }
}

/// [`fully_masked_rows_and_late_maxima_follow_the_op`]'s checks of `plan` (of `c`, whose
/// graph is `g`: `L` rows, 150 keys, a mask of kind `kind`).
fn masked_rows(g: &Graph, c: &Case, plan: &Plan, what: &str) {
    let (l, s) = (c.l, c.s);
    let kind = c.mask.as_ref().unwrap().0;
    let mut ins = inputs(c, Profile::Plain, 3);
    // Row 0 attends to nothing; row 1 only to the last key (a third tile); the others
    // to everything, the first tile's keys far below the last's.
    let attend = |i: usize, j: usize| match i {
        0 => false,
        1 => j == s - 1,
        _ => true,
    };
    ins[3] = match kind {
        MaskKind::Bool => {
            let bits = (0..l * s).map(|e| attend(e / s, e % s)).collect();
            Tensor::new(vec![l, s], TensorData::Bool(bits)).unwrap()
        }
        MaskKind::Float => {
            let bias = |e: usize| match (attend(e / s, e % s), e % s < 64) {
                (false, _) => f32::NEG_INFINITY,
                (true, true) => -80.0,
                (true, false) => 0.0,
            };
            Tensor::from_f32(&[l, s], (0..l * s).map(bias).collect()).unwrap()
        }
    };
    check(g, plan, &ins, Profile::Plain, what);
    // An infinite value under a masked key.
    let mut v = ins[2].to_f64_vec();
    v[3 * 5 + 2] = f64::INFINITY;
    ins[2] = Tensor::from_f32(&[2, s, 5], v.into_iter().map(|x| x as f32).collect()).unwrap();
    check(g, plan, &ins, Profile::Plain, &format!("{what} with an infinite masked value"));
}

/// More query rows than one dispatch has workgroups (65,535), symbolic sizes that change
/// between runs of one plan, and operands in the run's arena (a plan whose kernels bind more
/// buffers than the device allows puts them there).
#[test]
fn the_attention_shader_covers_many_rows_symbolic_sizes_and_the_arena() {
    if !device("the_attention_shader_covers_many_rows_symbolic_sizes_and_the_arena") {
        return;
    }
    // By row (70,000 workgroups) and by block (66,000 of them).
    for lsd in [(1, 3, 2, 2), (32, 3, 2, 2)] {
        let batch = if lsd.0 == 1 { 70_000 } else { 66_000 };
        let c = Case { causal: true, ..Case::new(&[batch], lsd) };
        let g = graph(&c);
        let what = format!("{batch} batch elements of {} rows", lsd.0);
        let plan = shader_plan(&g, &what);
        check(&g, &plan, &inputs(&c, Profile::Plain, 11), Profile::Plain, &what);
    }

    let g = parse(
        "graph att(%q: f32[h, l, 16], %k: f32[h, s, 16], %v: f32[h, s, 8], %m: bool[l, s]) {\n  \
         %y = scaled_dot_product_attention(%q, %k, %v, %m) {causal=false, scale=nan, safe_softmax=true}\n  \
         return %y\n}",
    );
    let plan = shader_plan(&g, "symbolic sizes");
    for (h, l, s) in [(2, 5, 70), (3, 1, 1), (1, 9, 130), (2, 0, 4), (2, 50, 70), (1, 32, 1)] {
        let c = Case { mask: Some((MaskKind::Bool, vec![l, s])), ..Case::new(&[h], (l, s, 16, 8)) };
        check(&g, &plan, &inputs(&c, Profile::Spiky, (h * 100 + l * 10 + s) as u64), Profile::Spiky, &format!("{c:?}"));
    }

    // Operands a fused kernel writing more buffers than a shader binds put in the run's
    // arena: q (the chain's last value) and a bool mask computed from two of its values; by
    // row (6 query rows) and by block (40).
    for l in [6, 40] {
        let (mut body, mut outs) = wide_chain();
        body += "  %m = gt(%a3, %a9)\n  %att = scaled_dot_product_attention(%a39, %k, %v, %m) \
                 {causal=false, scale=nan, safe_softmax=true}\n";
        outs.extend(["%m", "%att"].map(String::from));
        let g = parse(&format!(
            "graph wide(%x: f32[2, {l}, 8], %y: f32[2, {l}, 8], %k: f32[2, 8, 8], %v: f32[2, 8, 5]) {{\n{body}  return {}\n}}\n",
            outs.join(", ")
        ));
        let what = format!("arena, L = {l}");
        let plan = shader_plan(&g, &what);
        assert!(plan.explanation().contains("share the run's arena"), "{}", plan.explanation());
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        for seed in 0..3 {
            let mut rng = Rng::new(seed);
            let ins: Vec<Tensor> = [vec![2, l, 8], vec![2, l, 8], vec![2, 8, 8], vec![2, 8, 5]]
                .iter()
                .map(|sh| floats(&mut rng, Profile::Plain, sh, 1.0))
                .collect();
            let want = reference.run(&ins).unwrap().outputs;
            let got = plan.run(&ins).unwrap().outputs;
            clean(&what);
            // The chain's values grow past 1e3: attention's inputs are compared, its output held
            // to the reference plan within the op's scale.
            agree(&got[..41], &want[..41], &what);
            close(want.last().unwrap(), got.last().unwrap(), &what);
        }
    }
}

/// `got` within 1e-4 (relative, or absolute below 1) of `want`, finite as it is: for plans
/// whose attention reads computed operands (the tolerance table bounds an op on its inputs).
fn close(want: &Tensor, got: &Tensor, what: &str) {
    assert_eq!(want.shape(), got.shape(), "{what}");
    for (i, (w, g)) in want.to_f64_vec().into_iter().zip(got.to_f64_vec()).enumerate() {
        assert!(w.is_finite() && (w - g).abs() <= 1e-4 * w.abs().max(1.0), "{what}: element {i}: want {w}, got {g}");
    }
}

/// The lowering for a device with library shaders recovers attention as exporters write it
/// too (ONNX's `MatMul`, `Div` by sqrt(D), `Softmax`, `MatMul`), and a plan without recovery
/// or library shaders runs none.
#[test]
fn exported_attention_recovers_for_the_shader_and_only_there() {
    if !device("exported_attention_recovers_for_the_shader_and_only_there") {
        return;
    }
    let g = parse(
        "blob @c: f32[] = [4.0]
graph exported(%q: f32[2, 4, 6, 16], %ki: f32[2, 9, 4, 16], %v: f32[2, 4, 9, 16], %mask: f32[2, 1, 1, 9]) {
  %kt = permute(%ki) {perm=[0, 2, 3, 1]}
  %s = matmul(%q, %kt)
  %c = const @c : f32[]
  %d = div(%s, %c)
  %a = add(%d, %mask)
  %p = softmax(%a) {axis=-1}
  %y = matmul(%p, %v)
  return %y
}",
    );
    let plan = shader_plan(&g, "exported attention");
    let mut rng = Rng::new(9);
    let ins: Vec<Tensor> = [vec![2, 4, 6, 16], vec![2, 9, 4, 16], vec![2, 4, 9, 16], vec![2, 1, 1, 9]]
        .iter()
        .map(|sh| floats(&mut rng, Profile::Plain, sh, 1.0))
        .collect();
    let want = reference(&g, &ins);
    let got = plan.run(&ins).unwrap().outputs.remove(0);
    clean("exported attention");
    close(&want, &got, "exported attention");

    let off = [
        CompileOptions { recover: false, ..shaders() },
        CompileOptions::vulkan_on(VulkanDevice::process().unwrap().with_library_shaders(false)),
    ];
    for options in off {
        let plan = compile(&g, &options).unwrap();
        let e = plan.explanation();
        assert!(!e.contains("attention shader"), "{e}");
    }
}
