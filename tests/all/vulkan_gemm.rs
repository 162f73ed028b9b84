//! The library GEMM shader (`shaders/gemm_f32.wgsl`) against the reference (within the error
//! bound of a sum in order: lavapipe's `fma` is not always fused): transposes,
//! broadcast batch dims, sizes below, at and past its 64 x 64 tiles and its 16-value steps of
//! `k`, empty sides, infinities, NaN, signed zeros and subnormals, more tiles or batch indices than one dispatch holds,
//! operands in the run's arena; every library shader through `spirv-val`. Plans here run on
//! the process's device with library shaders on (`VulkanDevice::with_library_shaders`), which
//! a CPU device such as lavapipe leaves off by default. Skipped where there is no device, as
//! in `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::{self, VulkanDevice};
use ladder::models::Rng;
use ladder::{compile, CompileOptions, Graph, Plan, Tensor};

use crate::vulkan::{agree, device, f32s, parse, spirv_val, wide_chain, within_product_bound};
use crate::vulkan_rows::{reduces_as, reductions, shaders_reducing};

/// The process's device with library shaders on.
fn tiled() -> CompileOptions {
    CompileOptions::vulkan_on(VulkanDevice::process().unwrap().with_library_shaders(true))
}

/// The plan of `g` with the library GEMM (its explanation says so), and the reference plan.
fn plans(g: &Graph, what: &str) -> (Plan, Plan) {
    let plan = compile(g, &tiled()).unwrap_or_else(|e| panic!("{what}: {e}\n{}", ladder::text::print(g)));
    assert!(plan.explanation().contains("the library GEMM"), "{what}: {}", plan.explanation());
    (plan, compile(g, &CompileOptions::reference()).unwrap())
}

/// Infinities, NaN, signed zeros, subnormal values. Not values whose products overflow: the
/// reference's fused steps keep an infinite sum infinite past a huge finite product of the
/// other sign, where a device that rounds the product first (lavapipe) adds two infinities
/// and gets NaN.
const SPECIAL: [f32; 7] = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0, 0.0, 1e-40, -1e-40];

/// `shape` of uniform values in [-1, 1), a quarter of them from [`SPECIAL`] with `special`.
fn values(rng: &mut Rng, shape: &[usize], special: bool) -> Tensor {
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| match rng.below(8) {
            0 | 1 if special => SPECIAL[rng.below(SPECIAL.len() as u64) as usize],
            _ => rng.uniform_bits(24) as f32,
        })
        .collect();
    f32s(shape, v)
}

/// Each library shader passes `spirv-val` for Vulkan 1.2 (naga validated it when it was built).
#[test]
fn library_shaders_pass_spirv_val() {
    if !spirv_val() {
        eprintln!("library_shaders_pass_spirv_val: skipped: no spirv-val");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ladder-library-shaders-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shaders = vulkan::library_shaders();
    let names: Vec<&str> = shaders.iter().map(|(n, _)| n.as_str()).collect();
    let all =
        ["gemm_f32", "gemm_f32_subgroup", "rows_f32", "rows_f32_subgroup", "attention_f32", "attention_f32_subgroup"];
    for want in all {
        assert!(names.contains(&want), "{want} is not among {names:?}");
    }
    for (name, words) in shaders {
        assert_eq!(words.first(), Some(&0x0723_0203), "{name}: not a SPIR-V module");
        let path = dir.join(format!("{name}.spv"));
        std::fs::write(&path, words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let out =
            std::process::Command::new("spirv-val").args(["--target-env", "vulkan1.2"]).arg(&path).output().unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Matmuls with transposes and broadcast batch dims (three of them, one broadcast from each
/// side) at sizes that change between runs of one plan, on random values and on special ones.
#[test]
fn the_library_gemm_matches_the_reference() {
    if !device("the_library_gemm_matches_the_reference") {
        return;
    }
    let g = parse(
        "graph g(%a: f32[b, m, k], %b: f32[k, n], %c: f32[b, n, k], %d: f32[1, m, k], %e: f32[2, 1, b, m, k], %f: f32[1, 3, 1, k, n], %h: f32[n, m]) {
  %x = matmul(%a, %b)
  %y = matmul(%a, %c) {transpose_b=true}
  %z = matmul(%d, %a) {transpose_b=true}
  %w = matmul(%a, %d) {transpose_a=true}
  %v = matmul(%e, %f)
  %u = matmul(%a, %h) {transpose_a=true, transpose_b=true}
  return %x, %y, %z, %w, %v, %u
}",
    );
    let (plan, reference) = plans(&g, "matmuls");
    assert!(plan.explanation().contains(", 6 of them the library GEMM"), "{}", plan.explanation());
    let mut rng = Rng::new(21);
    let sizes = [
        (2, 3, 5, 4),
        (1, 64, 16, 64),
        (1, 65, 17, 63),
        (2, 130, 33, 70),
        (3, 1, 1, 1),
        (2, 4, 0, 3),
        (1, 0, 5, 4),
        (2, 5, 3, 0),
        (1, 7, 200, 129),
        (2, 3, 5, 4),
    ];
    for (i, (b, m, k, n)) in sizes.into_iter().enumerate() {
        let special = i % 2 == 1;
        let inputs = [
            values(&mut rng, &[b, m, k], special),
            values(&mut rng, &[k, n], special),
            values(&mut rng, &[b, n, k], special),
            values(&mut rng, &[1, m, k], special),
            values(&mut rng, &[2, 1, b, m, k], special),
            values(&mut rng, &[1, 3, 1, k, n], special),
            values(&mut rng, &[n, m], special),
        ];
        within_product_bound(
            &plan,
            &reference,
            &inputs,
            k.max(m),
            &format!("b={b} m={m} k={k} n={n}, special values: {special}"),
        );
    }
}

/// Split mode (products of fewer than 16 rows with b transposed: a workgroup per row and 8
/// columns, `k` split across its 128 invocations and the partial sums reduced), both ways the
/// device reduces: a transposed too, broadcast batch dims, `k` below, at and past 128 and
/// empty, column counts around 8, special values, more column groups than one dispatch holds.
#[test]
fn split_mode_matches_the_reference() {
    if !device("split_mode_matches_the_reference") {
        return;
    }
    let g = parse(
        "graph g(%a: f32[b, 3, k], %b: f32[n, k], %c: f32[b, n, k], %d: f32[1, 1, k], %e: f32[2, 1, b, 15, k], %f: f32[1, 3, 1, n, k], %h: f32[n, k], %t: f32[k, 2]) {
  %x = matmul(%a, %b) {transpose_b=true}
  %y = matmul(%a, %c) {transpose_b=true}
  %z = matmul(%d, %c) {transpose_b=true}
  %w = matmul(%e, %f) {transpose_b=true}
  %u = matmul(%a, %h) {transpose_b=true}
  %v = matmul(%t, %b) {transpose_a=true, transpose_b=true}
  return %x, %y, %z, %w, %u, %v
}",
    );
    let sizes = [(2, 5, 4), (1, 128, 8), (1, 129, 9), (2, 300, 7), (3, 1, 1), (2, 0, 3), (1, 5, 0), (1, 1000, 17)];
    for subgroups in reductions() {
        let plan = compile(&g, &shaders_reducing(subgroups)).unwrap();
        assert!(plan.explanation().contains(", 6 of them the library GEMM"), "{}", plan.explanation());
        reduces_as(&plan, subgroups, "split mode");
        let reference = compile(&g, &CompileOptions::reference()).unwrap();
        let mut rng = Rng::new(33);
        for (i, (b, k, n)) in sizes.into_iter().enumerate() {
            let special = i % 2 == 1;
            let inputs = [
                values(&mut rng, &[b, 3, k], special),
                values(&mut rng, &[n, k], special),
                values(&mut rng, &[b, n, k], special),
                values(&mut rng, &[1, 1, k], special),
                values(&mut rng, &[2, 1, b, 15, k], special),
                values(&mut rng, &[1, 3, 1, n, k], special),
                values(&mut rng, &[n, k], special),
                values(&mut rng, &[k, 2], special),
            ];
            let what = format!("b={b} k={k} n={n}, special values: {special}, subgroups: {subgroups}");
            within_product_bound(&plan, &reference, &inputs, k, &what);
        }
        // More column groups than one dispatch's 65,535 workgroups per dimension.
        let wide =
            parse("graph g(%a: f32[1, 7], %b: f32[n, 7]) {\n  %x = matmul(%a, %b) {transpose_b=true}\n  return %x\n}");
        let plan = compile(&wide, &shaders_reducing(subgroups)).unwrap();
        let n = 65_536 * 8 + 13;
        let inputs = [values(&mut rng, &[1, 7], false), values(&mut rng, &[n, 7], true)];
        let reference = compile(&wide, &CompileOptions::reference()).unwrap();
        within_product_bound(&plan, &reference, &inputs, 7, &format!("n={n}, subgroups: {subgroups}"));
    }
}

/// More batch indices, and more row tiles, than one dispatch's 65,535 workgroups per
/// dimension: workgroups loop over the rest.
#[test]
fn the_library_gemm_covers_more_than_one_dispatch_holds() {
    if !device("the_library_gemm_covers_more_than_one_dispatch_holds") {
        return;
    }
    let g = parse(
        "graph g(%a: f32[b, r, 3], %c: f32[b, 3, 2], %t: f32[m, 2], %s: f32[2, 1]) {
  %x = matmul(%a, %c)
  %y = matmul(%t, %s)
  return %x, %y
}",
    );
    let (plan, reference) = plans(&g, "large grids");
    let mut rng = Rng::new(5);
    let (b, m) = (70_000, 65_536 * 64 + 65);
    let inputs = [
        values(&mut rng, &[b, 2, 3], false),
        values(&mut rng, &[b, 3, 2], false),
        values(&mut rng, &[m, 2], true),
        values(&mut rng, &[2, 1], false),
    ];
    within_product_bound(&plan, &reference, &inputs, 3, &format!("b={b}, m={m}"));
}

/// Operands and results in the run's arena (a fused kernel writing more buffers than a shader
/// binds put them there): the GEMM binds the arena and reads each at its offset.
#[test]
fn the_library_gemm_reads_and_writes_the_arena() {
    if !device("the_library_gemm_reads_and_writes_the_arena") {
        return;
    }
    let (mut body, mut outs) = wide_chain();
    body += "  %p = matmul(%a39, %w)\n  %q = matmul(%a5, %a6) {transpose_b=true}\n";
    outs.extend(["%p", "%q"].map(String::from));
    let src =
        format!("graph g(%x: f32[n, 4], %y: f32[n, 4], %w: f32[4, 3]) {{\n{body}  return {}\n}}\n", outs.join(", "));
    let (plan, reference) = plans(&parse(&src), "arena");
    assert!(plan.explanation().contains("share the run's arena"), "{}", plan.explanation());
    let mut rng = Rng::new(8);
    for n in [7usize, 1, 70, 0, 7] {
        let inputs =
            [values(&mut rng, &[n, 4], false), values(&mut rng, &[n, 4], false), values(&mut rng, &[4, 3], false)];
        within_product_bound(&plan, &reference, &inputs, n.max(4), &format!("arena, n = {n}"));
    }
}

/// The default: library shaders on a GPU, generated kernels on a CPU device (where they are
/// faster); `with_library_shaders` overrides it either way, and a plan compiled without them
/// runs matmuls as generated kernels. With them, a product of few rows takes split mode where
/// `b` is transposed and stays generated kernels otherwise.
#[test]
fn library_shaders_default_to_gpus() {
    if !device("library_shaders_default_to_gpus") {
        return;
    }
    let d = VulkanDevice::process().unwrap();
    if std::env::var_os("LADDER_VULKAN_LIBRARY").is_none() && d.name().contains("llvmpipe") {
        assert!(!d.library_shaders(), "{}", d.name());
    }
    assert!(d.clone().with_library_shaders(true).library_shaders());
    assert!(!d.clone().with_library_shaders(false).library_shaders());
    let g = parse("graph g(%a: f32[3, 4], %b: f32[4, 5]) {\n  %x = matmul(%a, %b)\n  return %x\n}");
    let plan = compile(&g, &CompileOptions::vulkan_on(d.clone().with_library_shaders(false))).unwrap();
    assert!(!plan.explanation().contains("library GEMM"), "{}", plan.explanation());
    let reference = compile(&g, &CompileOptions::reference()).unwrap();
    let mut rng = Rng::new(2);
    let inputs = [values(&mut rng, &[3, 4], false), values(&mut rng, &[4, 5], false)];
    agree(&plan.run(&inputs).unwrap().outputs, &reference.run(&inputs).unwrap().outputs, "generated");
    // A product of fewer than 16 rows takes split mode (a 64-row tile would be mostly idle),
    // which reduces across the workgroup, where b is transposed, and stays generated kernels
    // otherwise; 16 or more, or a symbolic count, take the tiles.
    for (rows, few) in [("3", true), ("15", true), ("16", false), ("m", false)] {
        for (b, transposed) in [("%b: f32[4, 5]", false), ("%b: f32[5, 4]", true)] {
            let g = parse(&format!(
                "graph g(%a: f32[{rows}, 4], {b}) {{\n  %x = matmul(%a, %b) {{transpose_b={transposed}}}\n  return %x\n}}"
            ));
            for subgroups in reductions() {
                let plan = compile(&g, &shaders_reducing(subgroups)).unwrap();
                let (e, what) = (plan.explanation(), format!("{rows} rows, b transposed: {transposed}"));
                assert_eq!(e.contains("library GEMM"), !few || transposed, "{what}: {e}");
                reduces_as(&plan, few && transposed && subgroups, &what);
            }
        }
    }
}
