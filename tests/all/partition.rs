//! The partitioner (`ladder::autodiff::partition`): every policy's forward and backward graphs
//! recompute the joint graph's outputs bit for bit (on MLP, transformer and convolution
//! blocks, and on random graphs), the minimum cut never saves more than save-all and saves
//! less where recomputation pays, overrides and errors, and the compiled pair against the
//! interpreter.

use ladder::autodiff::{grad, partition, AdError, Joint, PartitionOptions, Policy, Why};
use ladder::gen::{random_graph, seeded_bytes, GenConfig, Source};
use ladder::interp::{self, Options};
use ladder::numerics::grad::{check_partition, to_f64, Domain, GradCase, Rng};
use ladder::{Graph, Tensor};

use super::common::parse;

/// A two-layer perceptron: linear, gelu, linear, mean squared error.
const MLP: &str = "graph mlp(%x: f32[8, 32], %w1: f32[64, 32], %b1: f32[64], %w2: f32[10, 64], %t: f32[8, 10]) {
  %h = linear(%x, %w1, %b1)
  %a = gelu(%h)
  %y = linear(%a, %w2)
  %l = mse_loss(%y, %t)
  return %l
}";

/// A pre-norm transformer block: attention and a gelu MLP, each with a residual.
const BLOCK: &str = "graph block(%x: f32[2, 8, 16], %g1: f32[16], %c1: f32[16], %wq: f32[16, 16], %wk: f32[16, 16], \
  %wv: f32[16, 16], %wo: f32[16, 16], %g2: f32[16], %c2: f32[16], %w1: f32[32, 16], %w2: f32[16, 32]) {
  %n = layer_norm(%x, %g1, %c1) {axis=-1}
  %q = linear(%n, %wq)
  %k = linear(%n, %wk)
  %v = linear(%n, %wv)
  %q4 = reshape(%q) {shape=[2, 8, 2, 8]}
  %k4 = reshape(%k) {shape=[2, 8, 2, 8]}
  %v4 = reshape(%v) {shape=[2, 8, 2, 8]}
  %qh = permute(%q4) {perm=[0, 2, 1, 3]}
  %kh = permute(%k4) {perm=[0, 2, 1, 3]}
  %vh = permute(%v4) {perm=[0, 2, 1, 3]}
  %o = scaled_dot_product_attention(%qh, %kh, %vh) {causal=true}
  %ot = permute(%o) {perm=[0, 2, 1, 3]}
  %o3 = reshape(%ot) {shape=[2, 8, 16]}
  %p = linear(%o3, %wo)
  %r = add(%x, %p)
  %m = layer_norm(%r, %g2, %c2) {axis=-1}
  %f = linear(%m, %w1)
  %e = gelu(%f)
  %d = linear(%e, %w2)
  %z = add(%r, %d)
  %l = mean(%z)
  return %l
}";

/// A convolution, relu, pooling and softmax cross entropy.
const CNN: &str = "graph cnn(%x: f32[2, 3, 6, 6], %w: f32[4, 3, 3, 3], %k: i64[2]) {
  %c = conv2d(%x, %w) {padding=[1, 1]}
  %r = relu(%c)
  %p = max_pool2d(%r) {kernel=[2, 2]}
  %f = flatten(%p) {start=1}
  %s = slice(%f) {axis=1, start=0, end=5}
  %l = cross_entropy(%s, %k)
  return %l
}";

/// `src` lowered to prims, and its joint graph for `l` with respect to every float input.
fn joint_of(src: &str) -> (Graph, Joint) {
    let g = parse(src);
    let prims = ladder::passes::lower(&g).unwrap().prims;
    let wrt: Vec<String> =
        (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype.is_float()).map(|i| g.input_name(i)).collect();
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let joint = grad(&prims, "l", &wrt).unwrap_or_else(|e| panic!("{e}\n{src}"));
    (g, joint)
}

/// Random inputs for `g` (static shapes): floats from `N(0, 1)`-like data, indices below 4.
fn inputs_for(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            let shape: Vec<usize> = ty.shape.as_static().unwrap().iter().map(|&d| d as usize).collect();
            if ty.dtype.is_float() {
                let t = rng.tensor(Domain::Any, &shape);
                Tensor::from_f64_as(ty.dtype, &shape, &t.to_f64_vec()).unwrap()
            } else {
                let n = shape.iter().product();
                Tensor::from_i64(&shape, (0..n).map(|_| rng.below(4) as i64).collect()).unwrap()
            }
        })
        .collect()
}

#[test]
fn every_policy_recomputes_the_joint_outputs_exactly() {
    for src in [MLP, BLOCK, CNN] {
        let (g, joint) = joint_of(src);
        let costs = check_partition(&joint, &inputs_for(&g, 3)).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        println!("{}: min-cut {:?}\n  save-all {:?}\n  recompute-all {:?}", g.name, costs[0], costs[1], costs[2]);
    }
}

#[test]
fn the_minimum_cut_saves_less_where_recomputation_pays() {
    for src in [MLP, BLOCK] {
        let (g, joint) = joint_of(src);
        let p = partition(&joint, &PartitionOptions::default()).unwrap();
        let r = &p.report;
        assert!(
            r.chosen.saved_bytes < r.save_all.saved_bytes,
            "{}: min-cut saves {} bytes, save-all {}",
            g.name,
            r.chosen.saved_bytes,
            r.save_all.saved_bytes
        );
        // Recomputing everything recomputable saves no more than the cut...
        assert!(r.recompute_all.saved_bytes <= r.chosen.saved_bytes, "{}: {r:?}", g.name);
        // ...and save-all recomputes nothing.
        assert_eq!(r.save_all.recomputed_values, 0, "{}: {r:?}", g.name);
        // Nothing banned is recomputed: no matmul in the backward that the forward also ran.
        for &v in &p.recomputed {
            let op = joint.graph.node(v).op;
            assert!(!matches!(op, ladder::OpKind::Matmul | ladder::OpKind::Conv), "{}: recomputes {op}", g.name);
        }
    }
    // The MLP: gelu's backward needs its input, and the second matmul needs its output. The
    // cut saves the input alone (the gelu is recomputed in the backward, fused into the
    // kernel that reads it); save-all keeps both.
    let (_, joint) = joint_of(MLP);
    let p = partition(&joint, &PartitionOptions::default()).unwrap();
    let activations: Vec<u64> = p.saved.iter().filter(|s| !s.is_input).map(|s| s.bytes).collect();
    assert!(activations.contains(&(8 * 64 * 4)), "{:?}", p.saved);
    assert!(!p.recomputed.is_empty());
    let text = p.explain(&joint);
    for s in &p.saved {
        assert!(text.contains(&format!("saved {} =", s.name)), "{text}");
    }
    assert!(text.contains("save-all:") && text.contains("recomputed:"), "{text}");
}

#[test]
fn random_graphs_partition_exactly() {
    let mut checked = 0;
    for seed in 0..150 {
        let bytes = seeded_bytes(0x9A87 << 32 | seed, 600);
        let g = random_graph(&mut Source::new(&bytes), &GenConfig { odd_names: false, ..GenConfig::default() });
        let Some(g) = to_f64(&g) else { continue };
        let bind = |s: &str| Some(2 + s.len() as u64 % 2);
        let Ok(shapes) = g
            .inputs()
            .iter()
            .map(|&v| g.ty(v).shape.dims().iter().map(|d| d.eval(&bind).map(|n| n as usize)).collect())
            .collect::<Result<Vec<Vec<usize>>, _>>()
        else {
            continue;
        };
        let mut rng = Rng::new(seed);
        let inputs: Vec<Tensor> = g
            .inputs()
            .iter()
            .zip(&shapes)
            .map(|(&v, shape)| {
                let t = rng.tensor(Domain::Any, shape);
                Tensor::from_f64_as(g.ty(v).dtype, shape, &t.to_f64_vec()).unwrap_or(t)
            })
            .collect();
        let wrt: Vec<usize> =
            (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype == ladder::DType::F64).collect();
        let Ok(case) = GradCase::new(&g, &inputs, &wrt, seed) else { continue };
        let Ok(joint) = case.joint(&[]) else { continue };
        check_partition(&joint, &case.inputs)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", ladder::text::print(&g)));
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} random graphs partitioned");
}

#[test]
fn overrides_and_errors() {
    let (_, joint) = joint_of(MLP);
    let base = partition(&joint, &PartitionOptions::default()).unwrap();
    // Forcing a recomputed value to be saved saves it, at no fewer bytes.
    let forced = base.recomputed.iter().find_map(|&v| joint.graph.name_of(v)).map(str::to_string);
    let forced = forced.unwrap_or_else(|| panic!("no named recomputed value: {:?}", base.recomputed));
    let options = PartitionOptions { must_save: vec![forced.clone()], ..PartitionOptions::default() };
    let p = partition(&joint, &options).unwrap();
    let s = p.saved.iter().find(|s| joint.graph.name_of(s.value) == Some(forced.as_str())).unwrap();
    assert_eq!(s.why, Why::Asked);
    assert!(p.report.chosen.saved_bytes >= base.report.chosen.saved_bytes);
    let inputs = inputs_for(&parse(MLP), 5);
    let want = interp::run(&joint.graph, &inputs, &Options::default()).unwrap();
    let fw = interp::run(&p.forward, &inputs, &Options::default()).unwrap();
    assert_eq!(fw.outputs[0].to_f64_vec(), want.outputs[0].to_f64_vec());
    // Preferring to recompute a saved activation moves the cut off it.
    let saved = base.saved.iter().find(|s| !s.is_input && joint.graph.name_of(s.value).is_some());
    if let Some(s) = saved {
        let name = joint.graph.name_of(s.value).unwrap().to_string();
        let options = PartitionOptions { prefer_recompute: vec![name.clone()], ..PartitionOptions::default() };
        let p = partition(&joint, &options).unwrap();
        let still = p.saved.iter().any(|t| t.value == s.value);
        assert!(!still || matches!(s.why, Why::Banned(_)), "{name} is still saved: {:?}", p.saved);
    }
    // Unknown names are typed errors.
    let options = PartitionOptions { must_save: vec!["nope".into()], ..PartitionOptions::default() };
    assert!(matches!(partition(&joint, &options), Err(AdError::NoSuchValue(n)) if n == "nope"));
    // Policy names round-trip.
    for name in Policy::NAMES {
        assert_eq!(Policy::from_name(name).unwrap().name(), name);
    }
}

#[test]
fn a_loss_independent_of_its_inputs_saves_nothing() {
    let g = ladder::passes::lower(&parse("graph t(%x: f32[3], %c: f32[3]) {\n  %l = sum(%c)\n  return %l\n}"))
        .unwrap()
        .prims;
    let joint = grad(&g, "l", &["x"]).unwrap();
    assert!(joint.seed.is_none());
    let p = partition(&joint, &PartitionOptions::default()).unwrap();
    assert!(p.saved.is_empty(), "{:?}", p.saved);
    assert_eq!(p.backward.inputs().len(), 0);
}

#[test]
fn compiled_forward_and_backward_match_the_interpreter() {
    for src in [MLP, BLOCK, CNN] {
        let (g, joint) = joint_of(src);
        let inputs = inputs_for(&g, 9);
        let p = partition(&joint, &PartitionOptions::default()).unwrap();
        let options = ladder::CompileOptions::default();
        let fw_plan = ladder::compile(&p.forward, &options).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let bw_plan = ladder::compile(&p.backward, &options).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let fw = fw_plan.run(&inputs).unwrap();
        let mut saved_outputs = fw.outputs[joint.n_forward..].iter();
        let bw_inputs: Vec<Tensor> = p
            .saved
            .iter()
            .map(|s| match s.is_input {
                true => inputs[joint.graph.inputs().iter().position(|&x| x == s.value).unwrap()].clone(),
                false => saved_outputs.next().unwrap().clone(),
            })
            .collect();
        let bw = bw_plan.run(&bw_inputs).unwrap();
        let want = interp::run(&joint.graph, &inputs, &Options { precise: true, ..Options::default() }).unwrap();
        let got: Vec<&Tensor> = fw.outputs[..joint.n_forward].iter().chain(bw.outputs.iter()).collect();
        for (i, (w, o)) in want.outputs.iter().zip(got).enumerate() {
            let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
            let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for (k, (a, b)) in w.iter().zip(&o).enumerate() {
                assert!((a - b).abs() <= 1e-4 * (1.0 + scale), "{}: output {i} element {k}: {a} against {b}", g.name);
            }
        }
    }
}
