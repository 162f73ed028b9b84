//! Reverse-mode autodiff (`ladder::autodiff`) against central finite differences in f64
//! (`ladder::numerics::grad`): every prim and opaque op on small graphs of several shapes
//! (size-1 dims, broadcasts, symbolic dims), every high-level op through its decomposition on
//! generated cases, the joint graph's structure and errors, and the CPU backend's compiled
//! plan of a joint graph against the interpreter.

use std::collections::BTreeSet;

use ladder::autodiff::{grad, AdError};
use ladder::gen::seeded_bytes;
use ladder::interp::{self, Options};
use ladder::numerics::grad::{grad_domain, grad_tolerance, to_f64, GradCase, GradFailure, Kinks, Rng};
use ladder::numerics::{generate_case, high_level_ops};
use ladder::ops::{all_specs, library, OpKind, Rung};
use ladder::{DType, Graph, Tensor};

use super::common::parse;

/// Sizes the symbols of the test graphs take.
fn bind(s: &str) -> Option<u64> {
    Some(match s {
        "batch" => 2,
        _ => 3,
    })
}

/// Inputs for `g`: `given` by name, f64 inputs drawn from `op`'s domain for their position,
/// bools at random.
fn inputs_for(g: &Graph, op: OpKind, given: &[(&str, Tensor)], rng: &mut Rng) -> Vec<Tensor> {
    (0..g.inputs().len())
        .map(|i| {
            let name = g.input_name(i);
            if let Some((_, t)) = given.iter().find(|(n, _)| *n == name) {
                return t.clone();
            }
            let ty = g.ty(g.inputs()[i]);
            let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.eval(&bind).unwrap() as usize).collect();
            match ty.dtype {
                DType::F64 => rng.tensor(grad_domain(op, i), &shape),
                DType::Bool => {
                    let n = shape.iter().product();
                    Tensor::from_bool(&shape, (0..n).map(|_| rng.below(2) == 1).collect()).unwrap()
                }
                d => panic!("input {name} of dtype {d} needs given data"),
            }
        })
        .collect()
}

/// Checks the gradients of graph text `src` (the op under test `op`) with respect to every
/// f64 input, on two data sets; returns the ops the graph uses.
fn check_src(op: OpKind, src: &str, given: &[(&str, Tensor)]) -> BTreeSet<OpKind> {
    let g = parse(src);
    let wrt: Vec<usize> = (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype == DType::F64).collect();
    for seed in 0..2 {
        let mut rng = Rng::new(seed);
        let inputs = inputs_for(&g, op, given, &mut rng);
        let case = GradCase::new(&g, &inputs, &wrt, seed).unwrap_or_else(|e| panic!("{op}: {e}\n{src}"));
        let joint = case.joint(&[]).unwrap_or_else(|e| panic!("{op}: {e}\n{src}"));
        let check = case.compare(&joint, grad_tolerance(op), Kinks::Compare).unwrap_or_else(|e| {
            panic!("{op} (seed {seed}): {e}\n{src}\njoint:\n{}", ladder::text::print(&joint.graph))
        });
        if std::env::var("LADDER_GRAD_MARGINS").is_ok() {
            eprintln!("WORST {op} {:e}", check.worst);
        }
        assert!(check.compared > 0 || wrt.iter().all(|&i| inputs[i].numel() == 0), "{op}: nothing compared\n{src}");
    }
    g.nodes().map(|(_, n)| n.op).collect()
}

fn one(op: OpKind, ty: &str, body: &str) -> BTreeSet<OpKind> {
    check_src(op, &format!("graph t(%x: {ty}) {{\n{body}\n  return %y\n}}"), &[])
}

const SHAPES: &[&str] = &["f64[]", "f64[1]", "f64[3]", "f64[2, 3]", "f64[2, 1, 3]", "f64[batch, 2]"];

fn unary_and_binary_cases() -> BTreeSet<OpKind> {
    use OpKind::*;
    let mut seen = BTreeSet::new();
    let unary = [
        Neg, Abs, Exp, Exp2, Log, Log1p, Expm1, Sqrt, Rsqrt, Reciprocal, Sin, Cos, Tanh, Erf, Floor, Ceil, Round, Sign,
    ];
    for op in unary {
        for ty in SHAPES {
            seen.extend(one(op, ty, &format!("  %y = {}(%x)", op.name())));
        }
    }
    for op in [Add, Sub, Mul, Div, Pow, Max, Min, Rem] {
        for ty in SHAPES {
            let src = format!("graph t(%a: {ty}, %b: {ty}) {{\n  %y = {}(%a, %b)\n  return %y\n}}", op.name());
            seen.extend(check_src(op, &src, &[]));
        }
        // Both operands one value: the two cotangents accumulate.
        if op != Rem {
            seen.extend(one(op, "f64[2, 3]", &format!("  %y = {}(%x, %x)", op.name())));
        }
    }
    seen
}

#[test]
fn elementwise_prims_match_finite_differences() {
    let seen = unary_and_binary_cases();
    assert!(seen.contains(&OpKind::Erf) && seen.contains(&OpKind::Rem));
}

#[test]
fn ties_share_the_cotangent() {
    // A two-way tie is where central differences give exactly one half to each side.
    let x = Tensor::from_f64_as(DType::F64, &[2, 2], &[1.5, 1.5, -0.5, 0.25]).unwrap();
    let y = Tensor::from_f64_as(DType::F64, &[2, 2], &[1.5, 0.5, -0.5, 0.75]).unwrap();
    for op in ["max", "min"] {
        let src = format!("graph t(%x: f64[2, 2], %z: f64[2, 2]) {{\n  %y = {op}(%x, %z)\n  return %y\n}}");
        check_src(OpKind::Max, &src, &[("x", x.clone()), ("z", y.clone())]);
    }
    let src = "graph t(%x: f64[2, 2]) {\n  %y = reduce_max(%x) {axes=[1]}\n  return %y\n}";
    check_src(OpKind::ReduceMax, src, &[("x", x.clone())]);
    let src = "graph t(%x: f64[2, 2]) {\n  %y = reduce_min(%x) {axes=[0, 1]}\n  return %y\n}";
    let x = Tensor::from_f64_as(DType::F64, &[2, 2], &[-1.0, 0.5, -1.0, 2.0]).unwrap();
    check_src(OpKind::ReduceMin, src, &[("x", x)]);
}

/// Graphs for every other prim and opaque op: (op under test, graph text, given data).
/// A checked graph: the op under test, the graph's text, data given by input name.
type Case = (OpKind, String, Vec<(&'static str, Tensor)>);

fn structural_cases() -> Vec<Case> {
    use OpKind::*;
    let i64t = |shape: &[usize], v: &[i64]| Tensor::from_i64(shape, v.to_vec()).unwrap();
    let g1 = |ty: &str, body: &str| format!("graph t(%x: {ty}) {{\n{body}\n  return %y\n}}");
    let mut cases: Vec<Case> = vec![
        (Where, "graph t(%c: bool[2, 3], %a: f64[2, 3], %b: f64[2, 3]) {\n  %y = where(%c, %a, %b)\n  return %y\n}".into(), vec![]),
        // Comparisons, logic and isnan choose; they pass no gradient themselves.
        (
            Gt,
            "graph t(%a: f64[2, 3], %b: f64[2, 3]) {\n  %c = gt(%a, %b)\n  %d = le(%a, %b)\n  %e = and(%c, %d)\n  \
             %f = or(%e, %c)\n  %g = logical_not(%f)\n  %n = isnan(%a)\n  %h = or(%g, %n)\n  %k = eq(%a, %b)\n  \
             %l = ne(%a, %b)\n  %m = and(%k, %l)\n  %o = or(%h, %m)\n  %p = lt(%a, %b)\n  %q = ge(%a, %b)\n  \
             %r = and(%p, %q)\n  %s = or(%o, %r)\n  %y = where(%s, %a, %b)\n  return %y\n}"
                .into(),
            vec![],
        ),
        (ConvertElementType, g1("f64[2, 3]", "  %y = convert_element_type(%x) {dtype=f32}"), vec![]),
        (
            ConvertElementType,
            g1("f64[2, 3]", "  %i = convert_element_type(%x) {dtype=i32}\n  %f = convert_element_type(%i) {dtype=f64}\n  %y = mul(%f, %x)"),
            vec![],
        ),
        (BroadcastInDim, g1("f64[3]", "  %y = broadcast_in_dim(%x) {shape=[2, 3], broadcast_dims=[1]}"), vec![]),
        (BroadcastInDim, g1("f64[2, 1]", "  %y = broadcast_in_dim(%x) {shape=[2, 4, 5], broadcast_dims=[0, 2]}"), vec![]),
        (BroadcastInDim, g1("f64[]", "  %y = broadcast_in_dim(%x) {shape=[2, 2], broadcast_dims=[]}"), vec![]),
        (BroadcastInDim, g1("f64[1, 1]", "  %y = broadcast_in_dim(%x) {shape=[1, 3], broadcast_dims=[0, 1]}"), vec![]),
        (
            BroadcastInDim,
            "graph t(%x: f64[1, 2], %z: f64[batch, 2]) {\n  %b = broadcast_in_dim(%x) {shape=[batch, 2], broadcast_dims=[0, 1]}\n  \
             %y = mul(%b, %z)\n  return %y\n}"
                .into(),
            vec![],
        ),
        (Reshape, g1("f64[2, 3]", "  %y = reshape(%x) {shape=[3, 1, 2]}"), vec![]),
        (Reshape, g1("f64[]", "  %y = reshape(%x) {shape=[1, 1]}"), vec![]),
        (Reshape, g1("f64[batch, 2]", "  %y = reshape(%x) {shape=[2, batch]}"), vec![]),
        (Permute, g1("f64[2, 3, 4]", "  %y = permute(%x) {perm=[2, 0, 1]}"), vec![]),
        (Slice, g1("f64[5]", "  %y = slice(%x) {axis=0, start=1, end=4, step=2}"), vec![]),
        (Slice, g1("f64[3, 4]", "  %y = slice(%x) {axis=1, start=-3}"), vec![]),
        (Slice, g1("f64[2, 7]", "  %y = slice(%x) {axis=-1, start=0, end=7, step=3}"), vec![]),
        (Slice, g1("f64[batch, 3]", "  %y = slice(%x) {axis=0, start=1}"), vec![]),
        (Slice, g1("f64[seq, 2]", "  %y = slice(%x) {axis=0, start=1, end=-1}"), vec![]),
        (
            Slice,
            g1("f64[4]", "  %e = slice(%x) {axis=0, start=3, end=1}\n  %s = reduce_sum(%e) {axes=[0]}\n  %y = add(%s, %s)"),
            vec![],
        ),
        (Pad, g1("f64[3]", "  %y = pad(%x) {low=[1], high=[2], interior=[1], value=0.5}"), vec![]),
        (Pad, g1("f64[3, 4]", "  %y = pad(%x) {low=[-1, 0], high=[0, -2], interior=[0, 2]}"), vec![]),
        (Pad, g1("f64[batch, 2]", "  %y = pad(%x) {low=[1, 0], high=[0, 1]}"), vec![]),
        (
            Cat,
            "graph t(%a: f64[2, 1], %b: f64[2, 3], %c: f64[2, 2]) {\n  %y = cat(%a, %b, %c) {axis=1}\n  return %y\n}".into(),
            vec![],
        ),
        (
            Cat,
            "graph t(%a: f64[batch, 2], %b: f64[1, 2], %c: f64[seq, 2]) {\n  %y = cat(%a, %b, %c, %a) {axis=0}\n  return %y\n}"
                .into(),
            vec![],
        ),
        (Rev, g1("f64[2, 3]", "  %y = rev(%x) {axes=[0, 1]}"), vec![]),
        (
            Iota,
            g1("f64[2, 3]", "  %i = iota() {shape=[2, 3], axis=1, dtype=f64}\n  %f = full() {shape=[2, 3], value=0.5, dtype=f64}\n  %j = add(%i, %f)\n  %y = mul(%x, %j)"),
            vec![],
        ),
        (
            DimValues,
            g1(
                "f64[batch, 2]",
                "  %d = dim_values() {dims=[batch], dtype=f64}\n  \
                 %b = broadcast_in_dim(%d) {shape=[batch, 2], broadcast_dims=[0]}\n  %y = mul(%x, %b)",
            ),
            vec![],
        ),
        (ReduceSum, g1("f64[2, 3, 4]", "  %y = reduce_sum(%x) {axes=[0, 2]}"), vec![]),
        (ReduceSum, g1("f64[2, 3]", "  %y = reduce_sum(%x) {axes=[]}"), vec![]),
        (ReduceSum, g1("f64[batch, 3]", "  %y = reduce_sum(%x) {axes=[-2]}"), vec![]),
        (ReduceProd, g1("f64[2, 3]", "  %y = reduce_prod(%x) {axes=[1]}"), vec![]),
        (ReduceProd, g1("f64[2, 1, 3]", "  %y = reduce_prod(%x) {axes=[0, 1, 2]}"), vec![]),
        // Zeros: none, one and two in a group (a product is linear in each element, so
        // central differences are exact there).
        (
            ReduceProd,
            g1("f64[3, 3]", "  %y = reduce_prod(%x) {axes=[1]}"),
            vec![("x", Tensor::from_f64_as(DType::F64, &[3, 3], &[1.5, -2.0, 0.5, 0.0, 2.0, 3.0, 0.0, 0.0, 1.0]).unwrap())],
        ),
        (ReduceMax, g1("f64[2, 3]", "  %y = reduce_max(%x) {axes=[1]}"), vec![]),
        (ReduceMax, g1("f64[batch, 4]", "  %y = reduce_max(%x) {axes=[0, 1]}"), vec![]),
        (ReduceMin, g1("f64[3, 2]", "  %y = reduce_min(%x) {axes=[0]}"), vec![]),
        (
            ReduceArgmax,
            g1("f64[2, 3]", "  %i = reduce_argmax(%x) {axis=1}\n  %f = convert_element_type(%i) {dtype=f64}\n  %m = reduce_max(%x) {axes=[1]}\n  %y = mul(%f, %m)"),
            vec![],
        ),
        (
            Gather,
            "graph t(%x: f64[3, 4], %i: i64[2, 4]) {\n  %y = gather(%x, %i) {axis=0}\n  return %y\n}".into(),
            vec![("i", i64t(&[2, 4], &[0, 2, -1, 1, 2, 2, 0, 1]))],
        ),
        (
            Gather,
            "graph t(%x: f64[3, 4], %i: i64[3, 2]) {\n  %y = gather(%x, %i) {axis=1}\n  return %y\n}".into(),
            vec![("i", i64t(&[3, 2], &[3, 3, 0, -4, 1, 2]))],
        ),
        (
            ScatterAdd,
            "graph t(%x: f64[3, 4], %i: i64[2, 4], %s: f64[2, 4]) {\n  %y = scatter_add(%x, %i, %s) {axis=0}\n  return %y\n}"
                .into(),
            vec![("i", i64t(&[2, 4], &[0, 2, -1, 1, 0, 2, 0, 1]))],
        ),
    ];
    let matmuls = [
        ("f64[2, 3]", "f64[3, 4]", "transpose_a=false, transpose_b=false"),
        ("f64[3, 2]", "f64[3, 4]", "transpose_a=true, transpose_b=false"),
        ("f64[2, 3]", "f64[4, 3]", "transpose_a=false, transpose_b=true"),
        ("f64[3, 2]", "f64[4, 3]", "transpose_a=true, transpose_b=true"),
        ("f64[2, 2, 3]", "f64[3, 4]", "transpose_a=false, transpose_b=false"),
        ("f64[1, 2, 3]", "f64[2, 3, 4]", "transpose_a=false, transpose_b=false"),
        ("f64[2, 1, 3, 2]", "f64[3, 4, 3]", "transpose_a=true, transpose_b=true"),
        ("f64[batch, 2, 3]", "f64[3, 1]", "transpose_a=false, transpose_b=false"),
        // A matrix shared by a batch: its gradient is one product over the flattened rows.
        ("f64[2, 2, 3]", "f64[4, 3]", "transpose_a=false, transpose_b=true"),
        ("f64[2, 3, 2, 3]", "f64[3, 4]", "transpose_a=false, transpose_b=false"),
        ("f64[batch, seq, 3]", "f64[2, 3]", "transpose_a=false, transpose_b=true"),
        ("f64[2, 0, 3]", "f64[3, 4]", "transpose_a=false, transpose_b=false"),
        ("f64[2, 3, 2]", "f64[3, 4]", "transpose_a=true, transpose_b=false"),
    ];
    for (a, b, flags) in matmuls {
        let src = format!("graph t(%a: {a}, %b: {b}) {{\n  %y = matmul(%a, %b) {{{flags}}}\n  return %y\n}}");
        cases.push((Matmul, src, vec![]));
    }
    let convs = [
        ("f64[1, 2, 5]", "f64[3, 2, 2]", "stride=[], padding=[], dilation=[], groups=1"),
        ("f64[2, 2, 7]", "f64[2, 2, 3]", "stride=[3], padding=[2, 1], dilation=[1], groups=1"),
        ("f64[1, 4, 6]", "f64[4, 2, 2]", "stride=[2], padding=[0, 3], dilation=[2], groups=2"),
        ("f64[2, 2, 5, 4]", "f64[4, 1, 3, 2]", "stride=[2, 1], padding=[1, 0, 1, 1], dilation=[1, 2], groups=2"),
        (
            "f64[1, 1, 3, 3, 3]",
            "f64[2, 1, 2, 1, 2]",
            "stride=[1, 2, 1], padding=[0, 1, 0, 1, 0, 1], dilation=[], groups=1",
        ),
        ("f64[batch, 2, 6]", "f64[3, 2, 3]", "stride=[1], padding=[1, 1], dilation=[1], groups=1"),
        // A pad larger than the window (the transposed convolution crops).
        ("f64[1, 1, 3]", "f64[1, 1, 2]", "stride=[1], padding=[3, 0], dilation=[1], groups=1"),
    ];
    for (x, w, attrs) in convs {
        let src = format!("graph t(%x: {x}, %w: {w}) {{\n  %y = conv(%x, %w) {{{attrs}}}\n  return %y\n}}");
        cases.push((Conv, src, vec![]));
    }
    // A symbolic length: the input's derivative only (the weight's needs static lengths).
    cases.push((
        Conv,
        "graph t(%x: f64[1, 2, seq], %v: f32[2, 1, 2]) {\n  %w = convert_element_type(%v) {dtype=f64}\n  \
         %y = conv(%x, %w) {stride=[1], padding=[0, 1], dilation=[2], groups=2}\n  return %y\n}"
            .into(),
        vec![("v", Tensor::from_f32(&[2, 1, 2], vec![0.5, -1.25, 1.5, 0.75]).unwrap())],
    ));
    cases
}

#[test]
fn shape_reduction_index_and_opaque_prims_match_finite_differences() {
    for (op, src, given) in structural_cases() {
        check_src(op, &src, &given);
    }
}

/// Every prim and opaque op appears in a checked graph and has a rule.
#[test]
fn every_prim_and_opaque_op_is_checked() {
    let mut seen = BTreeSet::new();
    for (_, src, _) in structural_cases() {
        seen.extend(parse(&src).nodes().map(|(_, n)| n.op));
    }
    use OpKind::*;
    seen.extend([
        Neg, Abs, Exp, Exp2, Log, Log1p, Expm1, Sqrt, Rsqrt, Reciprocal, Sin, Cos, Tanh, Erf, Floor, Ceil, Round, Sign,
        Add, Sub, Mul, Div, Pow, Max, Min, Rem,
    ]);
    let missing: Vec<&str> = all_specs()
        .filter(|s| matches!(s.rung, Rung::Prim | Rung::Opaque))
        // A custom kernel has no derivative by design (`tests/all/custom.rs` checks the error).
        .filter(|s| s.kind != Custom)
        .filter(|s| !seen.contains(&s.kind) || ladder::autodiff::rule(s.kind).is_none())
        .map(|s| s.name)
        .collect();
    assert!(missing.is_empty(), "prims and opaque ops without a checked rule: {missing:?}");
}

/// Generated single-op cases of `op` (made f64) with smooth data, until `want` were checked
/// or 200 seeds tried: how many were checked, and why some were not checkable.
fn check_high_level(op: OpKind, keep: &[OpKind], want: usize) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut unfit = Vec::new();
    for seed in 0..200 {
        if checked >= want {
            break;
        }
        let Some(case) = generate_case(op, &seeded_bytes(seed, 64)) else { continue };
        // Infinite or NaN attributes (a slope of -inf, a bound of NaN) are left out: the
        // branch a `where` does not take is then infinite, and its derivative's `0 · inf` is
        // NaN, as in any autodiff through a select.
        let node = case.graph.node(case.node);
        if node.attrs.iter().any(|(_, a)| matches!(a, ladder::ir::AttrValue::Float(x) if !x.is_finite())) {
            continue;
        }
        let Some(g) = to_f64(&case.graph) else { continue };
        let mut rng = Rng::new(seed);
        let inputs: Vec<Tensor> = (0..g.inputs().len())
            .map(|i| {
                let t = &case.inputs[i];
                if t.dtype().is_float() {
                    rng.tensor(grad_domain(op, i), t.shape())
                } else {
                    t.clone()
                }
            })
            .collect();
        let wrt: Vec<usize> = (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype == DType::F64).collect();
        let case = match GradCase::new(&g, &inputs, &wrt, seed) {
            Ok(c) => c,
            Err(GradFailure::Unfit(why)) => {
                unfit.push(why);
                continue;
            }
            Err(e) => panic!("{op} seed {seed}: {e}"),
        };
        match case.check(keep, grad_tolerance(op), Kinks::Compare) {
            Ok(c) => {
                checked += 1;
                if std::env::var("LADDER_GRAD_MARGINS").is_ok() {
                    eprintln!("WORST {op} {:e}", c.worst);
                }
            }
            Err(e) => panic!(
                "{op} seed {seed}: {e}\n{}\ninputs: {:?}",
                ladder::text::print(&case.loss_graph),
                case.inputs.iter().map(|t| t.to_f64_vec()).collect::<Vec<_>>()
            ),
        }
    }
    (checked, unfit)
}

/// Every high-level op with a float result, through its decomposition, on generated cases:
/// random attributes, dtypes made f64, static and symbolic shapes.
#[test]
fn high_level_ops_match_finite_differences_through_their_decompositions() {
    let mut thin = Vec::new();
    for op in high_level_ops() {
        let (checked, unfit) = check_high_level(op, &[], 6);
        if checked < 6 {
            thin.push(format!("{op}: {checked} checked; unfit: {:?}", &unfit[..unfit.len().min(3)]));
        }
    }
    // Ops whose results are indices have no float output to differentiate.
    thin.retain(|line| !line.starts_with("argmax:") && !line.starts_with("argmin:"));
    assert!(thin.is_empty(), "high-level ops checked on fewer than 6 cases:\n{}", thin.join("\n"));
}

/// The ops native lowering keeps whole (`max_pool2d`, `lstm`) are differentiated through
/// their decompositions while the forward keeps the op.
#[test]
fn kept_ops_are_differentiated_through_their_decompositions() {
    for &op in library::kept() {
        let (checked, _) = check_high_level(op, library::kept(), 6);
        assert!(checked >= 6, "{op}: only {checked} cases checked");
    }
    let src = "graph t(%x: f64[1, 1, 4, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    let g = parse(src);
    let mut rng = Rng::new(7);
    let case = GradCase::new(&g, &inputs_for(&g, OpKind::MaxPool2d, &[], &mut rng), &[0], 7).unwrap();
    let joint = case.joint(library::kept()).unwrap();
    let ops: Vec<OpKind> = joint.graph.nodes().map(|(_, n)| n.op).collect();
    assert_eq!(ops.iter().filter(|&&o| o == OpKind::MaxPool2d).count(), 1, "{}", ladder::text::print(&joint.graph));
    assert!(ops.contains(&OpKind::ReduceMax) || ops.contains(&OpKind::Max), "{}", ladder::text::print(&joint.graph));
}

fn prims(src: &str) -> Graph {
    let g = parse(src);
    ladder::passes::lower(&g).unwrap().prims
}

#[test]
fn the_joint_graph_has_forward_outputs_then_gradients() {
    let g = prims(
        "graph t(%x: f32[2, 3], %w: f32[3], %k: i64[2]) {\n  %h = mul(%x, %w)\n  %t = tanh(%h)\n  \
         %l = sum(%t)\n  return %l, %t\n}",
    );
    let joint = grad(&g, "l", &["w", "x"]).unwrap();
    let names: Vec<&str> = joint.graph.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["l", "t", "grad_w", "grad_x"]);
    assert_eq!((joint.loss, joint.wrt.clone(), joint.n_forward), (0, vec![1, 0], 2));
    assert_eq!(joint.graph.ty(joint.graph.outputs()[2].value), g.ty(g.inputs()[1]));
    ladder::ir::verify::verify(&joint.graph, ladder::ir::verify::Stage::Prims).unwrap();
    // Dead-code free: every node feeds an output.
    let again = ladder::passes::eliminate_dead_code(&joint.graph).unwrap();
    assert_eq!(again.len(), joint.graph.len());
    // A gradient's name that an output already has gets a suffix.
    let g = prims("graph t(%x: f32[2]) {\n  %l = sum(%x)\n  %grad_x = neg(%x)\n  return %l, %grad_x\n}");
    let joint = grad(&g, "l", &["x"]).unwrap();
    assert_eq!(joint.graph.outputs()[2].name, "grad_x_1");
    // An input the loss does not use gets zeros; so does one reached only through integers.
    let g = prims(
        "graph t(%x: f32[2], %u: f32[2]) {\n  %i = convert_element_type(%u) {dtype=i32}\n  \
         %f = convert_element_type(%i) {dtype=f32}\n  %p = mul(%x, %f)\n  %l = sum(%p)\n  return %l\n}",
    );
    let joint = grad(&g, "l", &["u", "x"]).unwrap();
    let x = Tensor::from_f32(&[2], vec![1.5, -2.0]).unwrap();
    let u = Tensor::from_f32(&[2], vec![3.7, -1.2]).unwrap();
    let out = interp::run(&joint.graph, &[x, u], &Options::default()).unwrap();
    assert_eq!(out.outputs[1].to_f64_vec(), [0.0, 0.0]);
    assert_eq!(out.outputs[2].to_f64_vec(), [3.0, -1.0]);
}

/// A weight shared by every batch element of a linear layer (`x [B, S, K] @ w`) gets its
/// gradient as one product over the `B·S` rows, never a product per batch element summed
/// after; with the weight batched too, the per-element products are summed as before.
#[test]
fn a_shared_weight_gets_its_gradient_as_one_product() {
    for (w, flags, dw) in [("f32[4, 5]", "", [4, 5]), ("f32[5, 4]", " {transpose_b=true}", [5, 4])] {
        let g = prims(&format!(
            "graph t(%x: f32[2, 3, 4], %w: {w}) {{\n  %h = matmul(%x, %w){flags}\n  %l = sum(%h)\n  return %l\n}}"
        ));
        let joint = grad(&g, "l", &["w"]).unwrap();
        let jg = &joint.graph;
        let grad_w = jg.outputs()[1].value;
        assert_eq!(jg.ty(grad_w).shape.as_static().unwrap(), dw.map(|d| d as u64));
        let products: Vec<_> = jg.nodes().filter(|(_, n)| n.op == OpKind::Matmul).collect();
        assert_eq!(products.len(), 2, "the forward's product and the gradient's:\n{}", ladder::text::print(jg));
        let (_, back) = products[1];
        let rows = |v| jg.ty(v).shape.as_static().unwrap()[0];
        assert!(back.args.iter().all(|&a| jg.ty(a).shape.rank() == 2 && rows(a) == 6), "{}", ladder::text::print(jg));
        // No sum over the batch of per-element products (the loss's own sum is to a scalar).
        assert!(
            jg.nodes().all(|(_, n)| n.op != OpKind::ReduceSum || n.ty.shape.rank() == 0),
            "{}",
            ladder::text::print(jg)
        );
        // The same gradient as the per-element products summed (the interpreter on both).
        let x = Tensor::from_f32(&[2, 3, 4], (0..24).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap();
        let wv = Tensor::from_f32(&[dw[0], dw[1]], (0..20).map(|i| (i as f32 * 0.91).cos()).collect()).unwrap();
        let out = interp::run(jg, &[x.clone(), wv], &Options::default()).unwrap();
        let xs = x.to_f64_vec();
        let want: Vec<f64> = (0..20)
            .map(|e| {
                // d sum / d w[k, n] (or w[n, k]) = Σ over the rows of x[row, k].
                let k = if flags.is_empty() { e / 5 } else { e % 4 };
                (0..6).map(|row| xs[row * 4 + k]).sum::<f64>()
            })
            .collect();
        let got = out.outputs[1].to_f64_vec();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} against {want:?}");
        }
    }
    // A batched weight keeps its per-element products.
    let g =
        prims("graph t(%x: f32[2, 3, 4], %w: f32[2, 4, 5]) {\n  %h = matmul(%x, %w)\n  %l = sum(%h)\n  return %l\n}");
    let joint = grad(&g, "l", &["w"]).unwrap();
    assert_eq!(joint.graph.ty(joint.graph.outputs()[1].value).shape.as_static().unwrap(), [2, 4, 5]);
}

#[test]
fn bad_requests_are_typed_errors() {
    let g = prims(
        "graph t(%x: f32[2], %k: i64[2]) {\n  %s = sum(%x)\n  %h = convert_element_type(%s) {dtype=f16}\n  \
         %y = neg(%x)\n  %c = sum(%k)\n  return %s, %y, %c, %h\n}",
    );
    assert!(matches!(grad(&g, "nope", &["x"]), Err(AdError::NoSuchOutput(_))));
    assert!(matches!(grad(&g, "s", &["nope"]), Err(AdError::NoSuchInput(_))));
    assert!(matches!(grad(&g, "s", &["x", "x"]), Err(AdError::DuplicateInput(_))));
    assert!(matches!(grad(&g, "y", &["x"]), Err(AdError::BadLoss { .. })));
    assert!(matches!(grad(&g, "c", &["x"]), Err(AdError::BadLoss { .. })));
    assert!(matches!(grad(&g, "s", &["k"]), Err(AdError::NotFloat { .. })));
    // An f16 loss is fine: the gradient comes back in the input's dtype.
    let joint = grad(&g, "h", &["x"]).unwrap();
    assert_eq!(joint.graph.ty(joint.graph.outputs()[4].value).dtype, DType::F32);
    // A graph that is not at the prims rung.
    let high = parse("graph t(%x: f32[2]) {\n  %s = sum(%x)\n  return %s\n}");
    assert!(matches!(grad(&high, "s", &["x"]), Err(AdError::NotPrims(_))));
    // A symbolic strided convolution has no weight derivative: a typed error, not a panic.
    let g = prims(
        "graph t(%x: f32[1, 1, n], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {stride=[2]}\n  %s = sum(%y)\n  return %s\n}",
    );
    let err = grad(&g, "s", &["w"]).unwrap_err();
    assert!(matches!(err, AdError::Rule { .. }), "{err}");
    assert!(err.to_string().contains("stride"), "{err}");
}

/// The checker fails on a wrong derivative: the joint graph's gradient negated.
#[test]
fn the_checker_rejects_a_wrong_gradient() {
    let g = parse("graph t(%a: f64[2, 3], %b: f64[2, 3]) {\n  %y = mul(%a, %b)\n  return %y\n}");
    let mut rng = Rng::new(3);
    let inputs = inputs_for(&g, OpKind::Mul, &[], &mut rng);
    let case = GradCase::new(&g, &inputs, &[0, 1], 3).unwrap();
    let joint = case.joint(&[]).unwrap();
    case.compare(&joint, grad_tolerance(OpKind::Mul), Kinks::Compare).unwrap();
    // Negate the gradient of `a`: route its output through a `neg`.
    let text = ladder::text::print(&joint.graph);
    let value = joint.graph.display_value(joint.graph.outputs()[joint.grad_output(0)].value);
    let ret = text.lines().find(|l| l.trim_start().starts_with("return ")).unwrap();
    let wrong_ret = ret.replace(&format!("{value} as grad_a"), "%wrong as grad_a");
    assert_ne!(ret, wrong_ret);
    let mut wrong = joint.clone();
    wrong.graph = parse(&text.replace(ret, &format!("  %wrong = neg({value})\n{wrong_ret}")));
    let err = case.compare(&wrong, grad_tolerance(OpKind::Mul), Kinks::Compare).unwrap_err();
    assert!(matches!(err, GradFailure::Mismatch { .. }), "{err}");
}

/// The CPU backend's compiled plan of a joint graph agrees with the interpreter.
#[test]
fn compiled_joint_graphs_match_the_interpreter() {
    let models = [
        // A two-layer perceptron with a gelu and a layer norm, mean squared error.
        "graph mlp(%x: f32[4, 8], %w1: f32[16, 8], %b1: f32[16], %w2: f32[3, 16], %t: f32[4, 3], \
         %g: f32[16], %c: f32[16]) {\n  %h = linear(%x, %w1, %b1)\n  %a = gelu(%h)\n  \
         %n = layer_norm(%a, %g, %c) {axis=-1}\n  %y = linear(%n, %w2)\n  \
         %l = mse_loss(%y, %t)\n  return %l\n}",
        // A convolution, relu, pooling and softmax cross entropy.
        "graph cnn(%x: f32[2, 3, 6, 6], %w: f32[4, 3, 3, 3], %k: i64[2]) {\n  \
         %c = conv2d(%x, %w) {padding=[1, 1]}\n  %r = relu(%c)\n  %p = max_pool2d(%r) {kernel=[2, 2]}\n  \
         %f = flatten(%p) {start=1}\n  %s = slice(%f) {axis=1, start=0, end=5}\n  %l = cross_entropy(%s, %k)\n  return %l\n}",
        // Attention with a softmax over a causal mask.
        "graph attn(%q: f32[1, 2, 4, 8], %k: f32[1, 2, 4, 8], %v: f32[1, 2, 4, 8]) {\n  \
         %o = scaled_dot_product_attention(%q, %k, %v) {causal=true}\n  %l = mean(%o)\n  return %l\n}",
    ];
    for src in models {
        let g = parse(src);
        let lowered = ladder::passes::lower::lower_keeping(&g, library::kept()).unwrap();
        let wrt: Vec<String> =
            (0..g.inputs().len()).filter(|&i| g.ty(g.inputs()[i]).dtype.is_float()).map(|i| g.input_name(i)).collect();
        let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
        let joint = grad(&lowered.prims, "l", &wrt).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let mut rng = Rng::new(11);
        let inputs: Vec<Tensor> = g
            .inputs()
            .iter()
            .map(|&v| {
                let ty = g.ty(v);
                let shape: Vec<usize> = ty.shape.as_static().unwrap().iter().map(|&d| d as usize).collect();
                if ty.dtype.is_float() {
                    let t = rng.tensor(ladder::numerics::grad::Domain::Any, &shape);
                    Tensor::from_f64_as(ty.dtype, &shape, &t.to_f64_vec()).unwrap()
                } else {
                    let n = shape.iter().product();
                    Tensor::from_i64(&shape, (0..n).map(|_| rng.below(5) as i64).collect()).unwrap()
                }
            })
            .collect();
        let want = interp::run(&joint.graph, &inputs, &Options { precise: true, ..Options::default() }).unwrap();
        let plan =
            ladder::compile(&joint.graph, &ladder::CompileOptions::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let got = plan.run(&inputs).unwrap_or_else(|e| panic!("{e}\n{src}"));
        for (i, (w, o)) in want.outputs.iter().zip(got.outputs.iter()).enumerate() {
            let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
            let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for (k, (a, b)) in w.iter().zip(&o).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + scale),
                    "{}: output {i} element {k}: interpreter {a}, compiled {b}",
                    g.name
                );
            }
        }
    }
}

/// The `grad` fuzz target's check, bounded: random graphs of every rung against central
/// differences (400 seeds: graphs with constants past `MAX_CONSTANT` are skipped).
#[test]
fn random_graphs_match_finite_differences() {
    let (mut checked, mut compared, mut kinks) = (0, 0, 0);
    for seed in 0..400 {
        let bytes = seeded_bytes(seed, 600);
        match ladder::numerics::grad::check_random_graph(&bytes) {
            Ok(Some(c)) => {
                checked += 1;
                compared += c.compared;
                kinks += c.kinks;
            }
            Ok(None) => {}
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(checked >= 100 && compared >= 800, "only {checked} graphs ({compared} elements) checked");
    // Skipping is for the odd kink a random graph lands on, not a way around comparing.
    assert!(kinks * 20 <= compared, "{kinks} elements skipped as kinks, {compared} compared");
}

/// Found by the `grad` fuzz target: beside a constant of 1e30 (`x0 -= 1e30`, then
/// `sin(x0)`), a central difference's step is lost to rounding, so the difference says 0
/// where the derivative is `cos(x0 - 1e30)`. Graphs with float constants past
/// `MAX_CONSTANT` are not checkable by differences, and the check says so instead of
/// reporting a defect.
#[test]
fn huge_constants_make_a_graph_unfit_for_differences() {
    let bytes = [0x3f, 0xff, 0x79, 0xff, 0x16, 0xff, 0x93, 0xff, 0x70, 0x70, 0x21, 0x64, 0x0a, 0x38];
    let result = ladder::numerics::grad::check_random_graph(&bytes);
    assert!(matches!(result, Ok(None)), "{:?}", result.map(|c| c.map(|c| c.compared)));
}

/// Found by the `grad` fuzz target: `rem(x0, 1e-40)` is a sawtooth of period `1e-40`, so its
/// derivative is 1 where every central difference (a step of `1e-5`) averages it to 0. Graphs
/// with non-zero float constants below `MIN_CONSTANT` are not checkable by differences either.
#[test]
fn tiny_constants_make_a_graph_unfit_for_differences() {
    let bytes = [0x03, 0x00, 0x00, 0x09, 0x5b, 0x5e, 0x01, 0x41, 0x23, 0x2b, 0x7a, 0x6b, 0x08];
    let result = ladder::numerics::grad::check_random_graph(&bytes);
    assert!(matches!(result, Ok(None)), "{:?}", result.map(|c| c.map(|c| c.compared)));
}

/// The `grad` fuzz target's corpus (`fuzz/corpus/grad`: seeds and the cases campaigns
/// found), each a graph that checks or is reported unfit, never a defect.
#[test]
fn the_grad_corpus_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/grad");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    assert!(paths.len() >= 2, "{} corpus files", paths.len());
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        if let Err(e) = ladder::numerics::grad::check_random_graph(&data) {
            panic!("{}: {e}", path.display());
        }
    }
}

/// `gelu`'s hand rule (`ladder::autodiff::HAND_RULES`) against the rule derived from its
/// decomposition, in f64 over a wide range (the accurate tail included), and against central
/// differences with the op kept whole.
#[test]
fn gelu_hand_rule_matches_the_derived_one() {
    assert!(ladder::autodiff::HAND_RULES.contains(&OpKind::Gelu));
    let xs: Vec<f64> = (-120..=120).map(|k| k as f64 / 10.0).chain([1e-3, -1e-3, 0.0, -30.0, 30.0]).collect();
    let n = xs.len();
    for approximate in ["none", "tanh"] {
        let src = format!(
            "graph g(%x: f64[{n}], %r: f64[{n}]) {{\n  %y = gelu(%x) {{approximate=\"{approximate}\"}}\n  \
             %p = mul(%y, %r)\n  %l = sum(%p)\n  return %l\n}}"
        );
        let g = parse(&src);
        let f = ladder::passes::functionalize(&g).unwrap();
        let kept = ladder::passes::lower::prims(&f, &[OpKind::Gelu]).unwrap();
        assert!(kept.nodes().any(|(_, n)| n.op == OpKind::Gelu));
        let derived = ladder::passes::lower(&g).unwrap().prims;
        let mut rng = Rng::new(3);
        let r = rng.tensor(ladder::numerics::grad::Domain::Any, &[n]);
        let inputs = [Tensor::from_f64_as(DType::F64, &[n], &xs).unwrap(), r];
        let run = |prims: &Graph| {
            let joint = grad(prims, "l", &["x"]).unwrap();
            let out = interp::run(&joint.graph, &inputs, &Options::default()).unwrap();
            out.outputs[joint.grad_output(0)].to_f64_vec()
        };
        let (hand, want) = (run(&kept), run(&derived));
        for (i, (a, b)) in hand.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{approximate} at x = {}: hand {a}, derived {b}", xs[i]);
        }
    }
    // f32 at the special points: Φ = 1/2 at zero and on subnormals (the quotient's limit),
    // NaN at ±inf (as `x φ(x)` is there) and for NaN.
    let xs = [0.0f32, -0.0, 1e-40, -1e-40, 3.0, -3.0, -12.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let g = parse("graph g(%x: f32[10]) {\n  %y = gelu(%x)\n  %l = sum(%y)\n  return %l\n}");
    let f = ladder::passes::functionalize(&g).unwrap();
    let kept = ladder::passes::lower::prims(&f, &[OpKind::Gelu]).unwrap();
    let joint = grad(&kept, "l", &["x"]).unwrap();
    let out = interp::run(&joint.graph, &[Tensor::from_f32(&[10], xs.to_vec()).unwrap()], &Options::default()).unwrap();
    let slope = out.outputs[joint.grad_output(0)].to_f64_vec();
    let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    let pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    for (i, &x) in xs.iter().enumerate() {
        let x = x as f64;
        if !x.is_finite() {
            assert!(slope[i].is_nan(), "slope at {x}: {}", slope[i]);
            continue;
        }
        let want = phi(x) + x * pdf(x);
        assert!(
            (slope[i] - want).abs() <= 4.0 * f32::EPSILON as f64 * want.abs().max(1e-30),
            "slope at {x}: {} against {want}",
            slope[i]
        );
    }
    let (checked, _) = check_high_level(OpKind::Gelu, &[OpKind::Gelu], 6);
    assert!(checked >= 6, "gelu with its hand rule: only {checked} cases checked");
}

/// The gradient of input `wrt` of `g`'s loss `l` on `inputs`, from the joint graph of `prims`.
fn joint_gradient(prims: &Graph, inputs: &[Tensor], wrt: &str) -> Vec<f64> {
    let joint = grad(prims, "l", &[wrt]).unwrap();
    let out = interp::run(&joint.graph, inputs, &Options::default()).unwrap();
    out.outputs[joint.grad_output(0)].to_f64_vec()
}

/// Whether `a` and `b` agree to `1e-12` relative (NaN agreeing with NaN).
fn agree(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-12 * (1.0 + b.abs())
}

/// `softmax`'s and `log_softmax`'s hand rules against the rules derived from their
/// decompositions, in f64 over every axis of rows with huge spreads, tiny values, `-inf`
/// entries and a row of nothing but `-inf`; then against central differences with the op kept
/// whole.
#[test]
fn softmax_hand_rules_match_the_derived_ones() {
    let kept_ops = [OpKind::Softmax, OpKind::LogSoftmax];
    assert!(kept_ops.iter().all(|op| ladder::autodiff::HAND_RULES.contains(op)));
    let ninf = f64::NEG_INFINITY;
    #[rustfmt::skip]
    let xs = [
        0.5, -1.0, 2.0, 0.1, -0.3,
        1e3, 999.0, -1e3, 0.0, 1e-300,
        ninf, 0.2, ninf, 3.0, -2.0,
        ninf, ninf, ninf, ninf, ninf,
    ];
    let mut rng = Rng::new(5);
    let r = rng.tensor(ladder::numerics::grad::Domain::Any, &[4, 5]);
    let inputs = [Tensor::from_f64_as(DType::F64, &[4, 5], &xs).unwrap(), r];
    for (op, kind) in [("softmax", OpKind::Softmax), ("log_softmax", OpKind::LogSoftmax)] {
        for axis in [0, 1, -1] {
            let src = format!(
                "graph g(%x: f64[4, 5], %r: f64[4, 5]) {{\n  %y = {op}(%x) {{axis={axis}}}\n  \
                 %p = mul(%y, %r)\n  %l = sum(%p)\n  return %l\n}}"
            );
            let g = parse(&src);
            let f = ladder::passes::functionalize(&g).unwrap();
            let kept = ladder::passes::lower::prims(&f, &kept_ops).unwrap();
            assert!(kept.nodes().any(|(_, n)| n.op == kind));
            let derived = ladder::passes::lower(&g).unwrap().prims;
            let (hand, want) = (joint_gradient(&kept, &inputs, "x"), joint_gradient(&derived, &inputs, "x"));
            let finite = hand.iter().filter(|d| d.is_finite()).count();
            assert!(finite >= 10, "{op} axis {axis}: only {finite} finite derivatives");
            for (i, (&a, &b)) in hand.iter().zip(&want).enumerate() {
                assert!(agree(a, b), "{op} axis {axis} at x = {}: hand {a}, derived {b}", xs[i]);
            }
        }
        let (checked, _) = check_high_level(kind, &kept_ops, 6);
        assert!(checked >= 6, "{op} with its hand rule: only {checked} cases checked");
    }
}

/// Differentiating in native mode keeps `softmax` whole inside the decompositions that use
/// one: attention's scores go through the `softmax` op (its library kernel forward, its hand
/// rule backward), and the gradients of `q`, `k`, `v` and a float mask equal those derived
/// through the decomposition's prims, causal and not, with the safe softmax's empty rows.
#[test]
fn attention_with_its_softmax_kept_matches_the_derived_gradient() {
    let kept_ops = [OpKind::Softmax, OpKind::LogSoftmax];
    let mut rng = Rng::new(11);
    let any = ladder::numerics::grad::Domain::Any;
    let mut mask = rng.tensor(any, &[4, 5]).to_f64_vec();
    mask[13] = f64::NEG_INFINITY;
    let qkv = [rng.tensor(any, &[2, 4, 3]), rng.tensor(any, &[2, 5, 3]), rng.tensor(any, &[2, 5, 3])];
    let weights = rng.tensor(any, &[2, 4, 3]);
    let mut empty = mask.clone();
    empty[5..10].fill(f64::NEG_INFINITY);
    // With a row that attends to nothing (all -inf; zeros with the safe softmax) the
    // gradients that row reaches are NaN both ways: its softmax is 0/0, and the matmuls'
    // backward carries that into `k` and `v`. (PyTorch's `_safe_softmax` backward gives zeros
    // there; the decomposition does not.)
    let cases = [
        ("causal=true, safe_softmax=false", &mask, true),
        ("safe_softmax=false", &mask, true),
        ("safe_softmax=true", &mask, true),
        ("causal=true", &mask, true),
        ("safe_softmax=true", &empty, false),
    ];
    for (attrs, mask, finite) in cases {
        let mut inputs = qkv.to_vec();
        inputs.push(Tensor::from_f64_as(DType::F64, &[4, 5], mask).unwrap());
        inputs.push(weights.clone());
        let src = format!(
            "graph g(%q: f64[2, 4, 3], %k: f64[2, 5, 3], %v: f64[2, 5, 3], %m: f64[4, 5], %r: f64[2, 4, 3]) {{\n  \
             %o = scaled_dot_product_attention(%q, %k, %v, %m) {{{attrs}}}\n  %p = mul(%o, %r)\n  \
             %l = sum(%p)\n  return %l\n}}"
        );
        let g = parse(&src);
        let f = ladder::passes::functionalize(&g).unwrap();
        let kept = ladder::passes::lower::prims(&f, &kept_ops).unwrap();
        assert!(kept.nodes().any(|(_, n)| n.op == OpKind::Softmax), "{attrs}: no softmax kept");
        let derived = ladder::passes::lower(&g).unwrap().prims;
        assert!(!derived.nodes().any(|(_, n)| n.op == OpKind::Softmax));
        for wrt in ["q", "k", "v", "m"] {
            let (hand, want) = (joint_gradient(&kept, &inputs, wrt), joint_gradient(&derived, &inputs, wrt));
            let n = hand.iter().filter(|d| d.is_finite()).count();
            assert!(if finite { n >= 8 } else { n < hand.len() }, "{attrs}, {wrt}: {hand:?}");
            for (i, (&a, &b)) in hand.iter().zip(&want).enumerate() {
                assert!(agree(a, b), "{attrs}, d/d{wrt}[{i}]: kept {a}, derived {b}");
            }
        }
    }
}

/// A convolution's own sum can lose an element's change as an `add` can: `conv(x, x)` with
/// `x = [1e100, 1, 2, 3]` is `x₀²` whatever the small elements do, so the loss
/// `conv(x, x) - x₀²` is 0 at every point of a difference while its derivative in `x₁` is 2.
/// Compared strictly that is a mismatch; on random graphs it is counted as a kink (the
/// bilinear move `conv(Δx, x̄) + conv(x̄, Δx)` is not 0 where the convolution's move is), and
/// the element whose change survives is still compared.
#[test]
fn a_change_lost_in_a_convolutions_sum_is_a_kink() {
    for (op, src) in [("conv", "%c = conv(%x, %x)"), ("matmul", "%c = matmul(%x, %x) {transpose_b=true}")] {
        let text = format!(
            "graph t(%x: f64[1, 1, 4]) {{\n  {src}\n  %x0 = slice(%x) {{axis=2, start=0, end=1}}\n  \
             %sq = mul(%x0, %x0)\n  %d = sub(%c, %sq)\n  %l = sum(%d)\n  return %l as loss\n}}"
        );
        let x = Tensor::new(vec![1, 1, 4], ladder::TensorData::F64(vec![1e100, 1.0, 2.0, 3.0])).unwrap();
        let case = GradCase { loss_graph: parse(&text), inputs: vec![x], wrt: vec![0] };
        let joint = case.joint(&[]).unwrap();
        let ad = case.gradients(&joint).unwrap();
        assert_eq!(ad[0][1..], [2.0, 4.0, 6.0], "{op}");
        let tolerance = grad_tolerance(OpKind::Conv);
        let strict = case.compare(&joint, tolerance, Kinks::Compare).unwrap_err();
        assert!(matches!(strict, GradFailure::Mismatch { element: 1, .. }), "{op}: {strict}");
        let check = case.compare(&joint, tolerance, Kinks::Skip).unwrap();
        assert_eq!((check.compared, check.kinks), (1, 3), "{op}");
    }
}

/// `erf(7)` is 1 in f64 at every point of a difference, while its derivative is
/// `2/√π e⁻⁴⁹`: times a weight of `1e30`, under a `cos`, the derivative is of order `1e8`
/// and the quotient 0.
/// Compared strictly that is a mismatch; on random graphs it is counted as a kink (the
/// argument moves, the result is flat), and the element whose change survives is still
/// compared.
#[test]
fn a_change_a_saturated_op_rounds_away_is_a_kink() {
    let text = "graph t(%x: f64[2], %w: f64[2]) {\n  %k = erf(%x)\n  %p = mul(%k, %w)\n  %c = cos(%p)\n  \
                %l = sum(%c)\n  return %l as loss\n}";
    let x = Tensor::new(vec![2], ladder::TensorData::F64(vec![7.0, 0.5])).unwrap();
    let w = Tensor::new(vec![2], ladder::TensorData::F64(vec![1e30, 1.0])).unwrap();
    let case = GradCase { loss_graph: parse(text), inputs: vec![x, w], wrt: vec![0] };
    let joint = case.joint(&[]).unwrap();
    let ad = case.gradients(&joint).unwrap();
    let want = -(1e30f64).sin() * 2.0 / std::f64::consts::PI.sqrt() * (-49f64).exp() * 1e30;
    assert!((ad[0][0] / want - 1.0).abs() < 1e-12 && want.abs() > 1e6, "{} vs {want}", ad[0][0]);
    let tolerance = grad_tolerance(OpKind::Erf);
    let strict = case.compare(&joint, tolerance, Kinks::Compare).unwrap_err();
    assert!(matches!(strict, GradFailure::Mismatch { element: 0, .. }), "{strict}");
    let check = case.compare(&joint, tolerance, Kinks::Skip).unwrap();
    assert_eq!((check.compared, check.kinks), (1, 1));
}

/// A softmax is unchanged when every score moves by the same amount, so the derivative in
/// a shift `x` of all scores is 0; its backward computes that 0 as `Σ p (g - Σ p g)` with `g`
/// of order `1e30` here (the values the softmax weighs), and leaves the rounding of those
/// terms, ~`1e14`, which the `cos` after it passes on. The scores `x + b` are exact in the
/// binade of `x` (`b` in quarters), so the forward is bit for bit the same at every point of
/// the difference (the quotient is 0). Compared strictly that is a mismatch; on random
/// graphs the element is skipped: with the loss's weights scaled by a number near 1 the
/// derivative does not scale with them (it is rounding), which a rule, linear in its
/// cotangent, always does.
#[test]
fn a_derivative_that_is_the_rounding_of_its_backward_is_skipped() {
    let text = "graph t(%x: f64[], %b: f64[4], %v: f64[4]) {\n  \
                %xb = broadcast_in_dim(%x) {shape=[4], broadcast_dims=[]}\n  %s = add(%b, %xb)\n  \
                %p = softmax(%s) {axis=0}\n  %pv = mul(%p, %v)\n  %o = sum(%pv)\n  %c = cos(%o)\n  \
                return %c\n}";
    let x = Tensor::new(vec![], ladder::TensorData::F64(vec![1000.375])).unwrap();
    let b = Tensor::new(vec![4], ladder::TensorData::F64(vec![0.75, 0.25, 0.5, 0.0])).unwrap();
    let v = Tensor::new(vec![4], ladder::TensorData::F64(vec![3.1e30, 1.7e30, -2.2e30, 0.9e30])).unwrap();
    let case = GradCase::new(&parse(text), &[x, b, v], &[0], 5).unwrap();
    let joint = case.joint(&[]).unwrap();
    let ad = case.gradients(&joint).unwrap()[0][0];
    assert!(ad.abs() > 1.0, "the backward's rounding is visible: {ad}");
    let tolerance = grad_tolerance(OpKind::Softmax);
    let strict = case.compare(&joint, tolerance, Kinks::Compare).unwrap_err();
    assert!(matches!(strict, GradFailure::Mismatch { element: 0, fd, .. } if fd == 0.0), "{strict}");
    let check = case.compare(&joint, tolerance, Kinks::Skip).unwrap();
    assert_eq!((check.compared, check.kinks), (0, 1));
}

/// `max(cos(1000 x) + 0.1 x, 1 - 1e-12)` at `x = 0`: the first argument is the maximum only
/// at the point itself (it is 1 there, and below the constant a hundredth of the step away),
/// so the derivative is its slope, 0.1, and both quotients (`h` and `h / 4`) are 0. Compared
/// strictly that is a mismatch; on random graphs it is a kink at the point: the derivatives
/// at both points of the difference agree with the quotient (a wrong rule would be wrong
/// there too).
#[test]
fn a_maximum_that_switches_at_the_point_is_a_kink() {
    let text = "graph t(%x: f64[1], %s: f64[1], %m: f64[1], %c: f64[1]) {\n  %a = mul(%x, %s)\n  %b = cos(%a)\n  \
                %t = mul(%x, %m)\n  %f = add(%b, %t)\n  %y = max(%f, %c)\n  %l = sum(%y)\n  return %l as loss\n}";
    let one = |v: f64| Tensor::new(vec![1], ladder::TensorData::F64(vec![v])).unwrap();
    let inputs = vec![one(0.0), one(1000.0), one(0.1), one(1.0 - 1e-12)];
    let case = GradCase { loss_graph: parse(text), inputs, wrt: vec![0] };
    let joint = case.joint(&[]).unwrap();
    assert_eq!(case.gradients(&joint).unwrap()[0], [0.1]);
    let tolerance = grad_tolerance(OpKind::Max);
    let strict = case.compare(&joint, tolerance, Kinks::Compare).unwrap_err();
    assert!(matches!(strict, GradFailure::Mismatch { element: 0, fd, .. } if fd == 0.0), "{strict}");
    let check = case.compare(&joint, tolerance, Kinks::Skip).unwrap();
    assert_eq!((check.compared, check.kinks), (0, 1));
}
