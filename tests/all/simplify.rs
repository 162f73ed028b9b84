//! Simplification preserves meaning exactly: on random graphs (prims and opaque ops, the same
//! with identity patterns appended, all-constant versions of them, functionalized high-level
//! graphs with views, and decomposed graphs) every pass and `simplify` give outputs that equal
//! the original's bit for bit (NaN equals NaN) on adversarial data. Also: `simplify` reaches a
//! fixpoint, the rewrites that would be wrong (`x*0`, `x-x`, `x+0.0`, ...) are not made, graphs
//! that mutate are refused, and folding respects its size and fuel bounds.

use std::sync::Arc;

use ladder::gen::{random_graph, seeded_bytes, GenConfig, Source};
use ladder::interp::{run, Options};
use ladder::ir::verify::{verify, Stage};
use ladder::ir::{AttrValue, Attrs};
use ladder::ops::Rung;
use ladder::passes::{
    apply_identities, eliminate_common_subexpressions, eliminate_dead_code, fold_constants, functionalize, simplify,
    FoldOptions, SimplifyError, SimplifyOptions, Stopped,
};
use ladder::text::print;
use ladder::{DType, Dim, Graph, OpKind, Shape, Tensor, TensorData, Value};

use crate::common;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// Bit-equal, except that any NaN equals any NaN.
fn same(a: &Tensor, b: &Tensor) -> bool {
    if !a.dtype().is_float() {
        return a.bit_eq(b);
    }
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

type Pass = fn(&Graph) -> Result<Graph, SimplifyError>;

fn fold_default(g: &Graph) -> Result<Graph, SimplifyError> {
    fold_constants(g, &FoldOptions::default())
}

fn simplify_default(g: &Graph) -> Result<Graph, SimplifyError> {
    simplify(g, &SimplifyOptions::default()).map(|s| s.graph)
}

const PASSES: &[(&str, Pass)] = &[
    ("dce", eliminate_dead_code),
    ("cse", eliminate_common_subexpressions),
    ("fold", fold_default),
    ("identities", apply_identities),
    ("simplify", simplify_default),
];

/// How often each pass changed a graph, over a whole property test.
#[derive(Default, Debug)]
struct Tally {
    compared: usize,
    changed: [usize; 5],
    nodes_before: usize,
    nodes_after: usize,
}

/// Runs every pass on `g`, verifies each result at `g`'s rung, and compares each result's
/// outputs with `g`'s on `inputs`, bit for bit. Skips graphs the interpreter cannot run.
fn check_all(label: &str, g: &Graph, inputs: &[Tensor], tally: &mut Tally) {
    let stage = if verify(g, Stage::Prims).is_ok() { Stage::Prims } else { Stage::Functional };
    verify(g, stage).unwrap_or_else(|e| panic!("{label}: the input graph is invalid: {e}\n{}", print(g)));
    let opts = Options { max_elements: 100_000, ..Options::default() };
    let Ok(want) = run(g, inputs, &opts) else { return };
    tally.compared += 1;
    for (k, (name, pass)) in PASSES.iter().enumerate() {
        let p = pass(g).unwrap_or_else(|e| panic!("{label}: {name} failed: {e}\n{}", print(g)));
        verify(&p, stage)
            .unwrap_or_else(|e| panic!("{label}: {name} made an invalid graph: {e}\n{}\n{}", print(g), print(&p)));
        assert_eq!(p.inputs().len(), g.inputs().len(), "{label}: {name} changed the inputs");
        let names = |g: &Graph| g.outputs().iter().map(|o| o.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&p), names(g), "{label}: {name} changed the outputs' names");
        let got = run(&p, inputs, &opts).unwrap_or_else(|e| {
            panic!("{label}: {name}'s graph fails where the original runs: {e}\n{}\n{}", print(g), print(&p))
        });
        for (i, (w, o)) in want.outputs.iter().zip(&got.outputs).enumerate() {
            assert!(
                same(w, o),
                "{label}: {name}: output {i} differs: {w} vs {o}\noriginal:\n{}\n{name}:\n{}",
                print(g),
                print(&p)
            );
        }
        if print(&p) != print(g) {
            tally.changed[k] += 1;
        }
        if *name == "simplify" {
            tally.nodes_before += g.len();
            tally.nodes_after += p.len();
        }
    }
}

fn prim_config() -> GenConfig {
    GenConfig { attempts: 40, rungs: vec![Rung::Prim, Rung::Opaque], ..GenConfig::default() }
}

// ---------------------------------------------------------------------------------------------
// Identity patterns appended to a graph
// ---------------------------------------------------------------------------------------------

fn attrs(op: OpKind, given: &[(&str, AttrValue)]) -> Option<Attrs> {
    Attrs::resolve(op.spec().attrs, given.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()).ok()
}

fn node(g: &mut Graph, op: OpKind, args: &[Value], given: &[(&str, AttrValue)]) -> Option<Value> {
    g.add_node(op, args, attrs(op, given)?).ok()
}

fn dims(shape: &Shape) -> AttrValue {
    AttrValue::Dims(shape.dims().iter().cloned().map(Some).collect())
}

fn full(g: &mut Graph, value: f64, dtype: DType, shape: &Shape) -> Option<Value> {
    node(
        g,
        OpKind::Full,
        &[],
        &[("shape", dims(shape)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dtype))],
    )
}

fn perm_of(src: &mut Source, rank: usize) -> Vec<i64> {
    let mut p: Vec<i64> = (0..rank as i64).collect();
    for i in (1..rank).rev() {
        p.swap(i, src.below(i + 1));
    }
    p
}

/// Appends one random pattern applied to `v` (identities the passes should remove, and
/// look-alikes they must keep), returning its result.
fn pattern(g: &mut Graph, src: &mut Source, v: Value, views: bool, blobs: &mut usize) -> Option<Value> {
    use OpKind::*;
    let ty = g.ty(v).clone();
    let (t, s) = (ty.dtype, ty.shape.clone());
    let scalar = Shape::scalar();
    // A constant operand: scalar (broadcast at the high rung) or of v's shape (explicit).
    let constant = |g: &mut Graph, src: &mut Source, value: f64| {
        let shape = if src.bool() { scalar.clone() } else { s.clone() };
        full(g, value, t, &shape)
    };
    match src.below(20) {
        0 => {
            let one = constant(g, src, 1.0)?;
            if src.bool() {
                node(g, Mul, &[v, one], &[])
            } else {
                node(g, Mul, &[one, v], &[])
            }
        }
        1 => {
            let one = constant(g, src, 1.0)?;
            node(g, Div, &[v, one], &[])
        }
        2 => {
            let z = constant(g, src, -0.0)?;
            if src.bool() {
                node(g, Add, &[v, z], &[])
            } else {
                node(g, Add, &[z, v], &[])
            }
        }
        3 => {
            let z = constant(g, src, 0.0)?;
            node(g, Sub, &[v, z], &[])
        }
        4 => {
            // Look-alikes that must stay: x + 0.0, x - (-0.0), 0 - x, x * 0, x - x, x / x.
            let value = src.choose(&[0.0, -0.0]);
            let c = constant(g, src, value)?;
            match src.below(6) {
                0 => node(g, Add, &[v, c], &[]),
                1 => node(g, Sub, &[v, c], &[]),
                2 => node(g, Sub, &[c, v], &[]),
                3 => node(g, Mul, &[v, c], &[]),
                4 => node(g, Sub, &[v, v], &[]),
                _ => node(g, Div, &[v, v], &[]),
            }
        }
        5 => {
            let n = node(g, Neg, &[v], &[])?;
            node(g, Neg, &[n], &[])
        }
        6 => {
            let flat = node(g, Reshape, &[v], &[("shape", AttrValue::Ints(vec![-1]))])?;
            node(g, Reshape, &[flat], &[("shape", dims(&s))])
        }
        7 => node(g, Reshape, &[v], &[("shape", dims(&s))]),
        8 => {
            let p = perm_of(src, s.rank());
            let q = perm_of(src, s.rank());
            let a = node(g, Permute, &[v], &[("perm", AttrValue::Ints(p))])?;
            node(g, Permute, &[a], &[("perm", AttrValue::Ints(q))])
        }
        9 => {
            let p = perm_of(src, s.rank());
            let a = node(g, Permute, &[v], &[("perm", AttrValue::Ints(p.clone()))])?;
            let mut inverse = vec![0i64; p.len()];
            for (i, &x) in p.iter().enumerate() {
                inverse[x as usize] = i as i64;
            }
            node(g, Permute, &[a], &[("perm", AttrValue::Ints(inverse))])
        }
        10 => {
            let r = s.rank() as i64;
            let mut s1: Vec<Dim> = vec![Dim::new(1)];
            s1.extend(s.dims().iter().cloned());
            let s1: Shape = s1.into_iter().collect();
            let a = node(
                g,
                BroadcastInDim,
                &[v],
                &[("shape", dims(&s1)), ("broadcast_dims", AttrValue::Ints((1..=r).collect()))],
            )?;
            let mut s2: Vec<Dim> = vec![Dim::new(src.below(3) as u64 + 1)];
            s2.extend(s1.dims().iter().cloned());
            let s2: Shape = s2.into_iter().collect();
            let d = if src.bool() {
                (1..=r + 1).collect()
            } else {
                (0..=r).map(|i| if i == 0 { 1 } else { i + 1 }).collect()
            };
            node(g, BroadcastInDim, &[a], &[("shape", dims(&s2)), ("broadcast_dims", AttrValue::Ints(d))])
        }
        11 => node(
            g,
            BroadcastInDim,
            &[v],
            &[("shape", dims(&s)), ("broadcast_dims", AttrValue::Ints((0..s.rank() as i64).collect()))],
        ),
        12 | 13 => {
            let t1 = src.choose(&DType::ALL);
            let t2 = if src.bool() { t } else { src.choose(&DType::ALL) };
            let a = node(g, ConvertElementType, &[v], &[("dtype", AttrValue::DType(t1))])?;
            node(g, ConvertElementType, &[a], &[("dtype", AttrValue::DType(t2))])
        }
        14 => node(g, ConvertElementType, &[v], &[("dtype", AttrValue::DType(t))]),
        15 if s.rank() > 0 => {
            let axis = src.below(s.rank()) as i64 - if src.bool() { s.rank() as i64 } else { 0 };
            let end = src.choose(&[i64::MAX, 4, 9]);
            node(g, Slice, &[v], &[("axis", AttrValue::Int(axis)), ("end", AttrValue::Int(end))])
        }
        16 => {
            // An all-ones blob of v's (static) shape.
            let shape: Vec<usize> = s.as_static()?.into_iter().map(|d| d as usize).collect();
            let n: usize = shape.iter().product();
            let data = match t {
                DType::F32 => TensorData::F32(vec![1.0; n]),
                DType::F64 => TensorData::F64(vec![1.0; n]),
                DType::I64 => TensorData::I64(vec![1; n]),
                DType::I32 => TensorData::I32(vec![1; n]),
                _ => return None,
            };
            *blobs += 1;
            let b = g.add_blob(&format!("ones{blobs}"), Arc::new(Tensor::new(shape, data).ok()?)).ok()?;
            let c = g.add_const(b);
            node(g, Mul, &[c, v], &[])
        }
        17 if views => {
            // A view of a permuted value: it fails unless the layout allows it, so identities
            // that swap a fresh value for a strided one must leave its argument alone.
            let p = perm_of(src, s.rank());
            let a = node(g, Permute, &[v], &[("perm", AttrValue::Ints(p))])?;
            let b = match src.below(3) {
                0 => {
                    let sh = g.ty(a).shape.clone();
                    node(g, Reshape, &[a], &[("shape", dims(&sh))])?
                }
                1 => node(g, ConvertElementType, &[a], &[("dtype", AttrValue::DType(t))])?,
                _ => {
                    let n = node(g, Neg, &[a], &[])?;
                    node(g, Neg, &[n], &[])?
                }
            };
            node(g, View, &[b], &[("shape", AttrValue::Ints(vec![-1]))])
        }
        _ => {
            let e = node(g, Exp, &[v], &[]);
            e.or_else(|| node(g, Abs, &[v], &[]))
        }
    }
}

/// `g` with random patterns appended (on its values and on earlier patterns' results), each
/// pattern's result an extra output.
fn with_patterns(g: &Graph, src: &mut Source, count: usize, views: bool) -> Graph {
    let mut g = g.clone();
    let mut blobs = 0;
    let mut made: Vec<Value> = Vec::new();
    for k in 0..count {
        let v = if !made.is_empty() && src.bool() {
            made[src.below(made.len())]
        } else {
            Value::from_u32(src.below(g.len()) as u32)
        };
        if let Some(p) = pattern(&mut g, src, v, views, &mut blobs) {
            made.push(p);
            let _ = g.add_output(&format!("p{k}"), p);
        }
    }
    g
}

/// `g` with every input replaced by a `const` of `inputs`' data (an input-free graph).
fn constantized(g: &Graph, inputs: &[Tensor]) -> Option<Graph> {
    let mut c = Graph::new(&g.name);
    for (_, b) in g.blobs() {
        c.add_blob(&b.name, Arc::clone(&b.tensor)).ok()?;
    }
    let mut map = Vec::new();
    for (v, n) in g.nodes() {
        let nv = match n.op {
            OpKind::Input => {
                let i = g.inputs().iter().position(|&x| x == v)?;
                let b = c.add_blob(&format!("in{i}"), Arc::new(inputs[i].clone())).ok()?;
                c.add_const(b)
            }
            OpKind::Const => c.add_const(c.blob_by_name(n.attrs.str("blob"))?),
            op => {
                let args: Vec<Value> = n.args.iter().map(|a| map[a.as_u32() as usize]).collect();
                c.add_node(op, &args, n.attrs.clone()).ok()?
            }
        };
        map.push(nv);
    }
    for o in g.outputs() {
        c.add_output(&o.name, map[o.value.as_u32() as usize]).ok()?;
    }
    Some(c)
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

#[test]
fn passes_preserve_results_on_random_prim_graphs() {
    let mut tally = Tally::default();
    for seed in 0..600 {
        let bytes = seeded_bytes(seed, 1600);
        let g = random_graph(&mut Source::new(&bytes), &prim_config());
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[800..]));
        check_all(&format!("seed {seed}"), &g, &inputs, &mut tally);
    }
    eprintln!("random prim graphs: {tally:?}");
    assert!(tally.compared > 400, "too few graphs ran: {tally:?}");
    // Every pass has something to do on some of these graphs.
    assert!(tally.changed.iter().all(|&c| c > 10), "{tally:?}");
}

#[test]
fn passes_preserve_results_on_random_graphs_with_identity_patterns() {
    let mut tally = Tally::default();
    for seed in 0..600 {
        let bytes = seeded_bytes(seed + 10_000, 2400);
        let g = random_graph(&mut Source::new(&bytes), &prim_config());
        let g = with_patterns(&g, &mut Source::new(&bytes[1600..]), 12, false);
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[800..]));
        check_all(&format!("seed {seed}"), &g, &inputs, &mut tally);
    }
    eprintln!("random prim graphs with patterns: {tally:?}");
    assert!(tally.compared > 400, "too few graphs ran: {tally:?}");
    assert!(tally.changed[3] > 300, "identities rewrote too few graphs: {tally:?}");
}

#[test]
fn passes_preserve_results_on_all_constant_graphs() {
    let mut tally = Tally::default();
    let mut fully_folded = 0;
    for seed in 0..400 {
        let bytes = seeded_bytes(seed + 20_000, 2400);
        let cfg = GenConfig { symbolic: false, ..prim_config() };
        let g = random_graph(&mut Source::new(&bytes), &cfg);
        let g = with_patterns(&g, &mut Source::new(&bytes[1600..]), 6, false);
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[800..]));
        let Some(c) = constantized(&g, &inputs) else { continue };
        let compared = tally.compared;
        check_all(&format!("seed {seed}"), &c, &[], &mut tally);
        let s = simplify(&c, &SimplifyOptions::default()).unwrap();
        if tally.compared > compared
            && s.graph.nodes().all(|(_, n)| matches!(n.op, OpKind::Const | OpKind::Full | OpKind::Iota))
        {
            fully_folded += 1;
        }
    }
    eprintln!("all-constant graphs: {tally:?}, {fully_folded} folded completely");
    assert!(tally.compared > 250, "too few graphs ran: {tally:?}");
    assert!(tally.changed[2] > 200 && fully_folded > 100, "folding did too little: {tally:?}, {fully_folded}");
}

#[test]
fn passes_preserve_results_on_functional_graphs_with_views() {
    let mut tally = Tally::default();
    for seed in 0..500 {
        let bytes = seeded_bytes(seed + 30_000, 2400);
        let cfg = GenConfig { attempts: 40, ..GenConfig::default() };
        let g = random_graph(&mut Source::new(&bytes), &cfg);
        let Ok(f) = functionalize(&g) else { continue };
        let g = with_patterns(&f.graph, &mut Source::new(&bytes[1600..]), 10, true);
        let inputs = crate::common::generated_inputs(&g, &mut Source::new(&bytes[800..]));
        check_all(&format!("seed {seed}"), &g, &inputs, &mut tally);
    }
    eprintln!("functional graphs with views: {tally:?}");
    assert!(tally.compared > 250, "too few graphs ran: {tally:?}");
}

#[test]
fn passes_preserve_results_on_decomposed_random_graphs() {
    let mut tally = Tally::default();
    let mut high_level = 0;
    for seed in 0..600 {
        let bytes = seeded_bytes(seed + 40_000, 2400);
        // Odd seeds: prims in high-level form (broadcasting, promotion); even seeds: any op,
        // which compare once every op in the graph has a decomposition.
        let cfg = if seed % 2 == 1 { prim_config() } else { GenConfig { attempts: 40, ..GenConfig::default() } };
        let g = random_graph(&mut Source::new(&bytes), &cfg);
        if g.nodes().any(|(_, n)| n.op.rung() == Rung::High) && ladder::passes::decompose(&g).is_ok() {
            high_level += 1;
        }
        let Ok(f) = functionalize(&g) else { continue };
        let Ok(p) = ladder::passes::decompose(&f.graph) else { continue };
        let p = with_patterns(&p, &mut Source::new(&bytes[1600..]), 6, false);
        // Patterns are in high-level form; re-lower them so the graph is explicit again.
        let Ok(p) = ladder::passes::decompose(&p) else { continue };
        let inputs = crate::common::generated_inputs(&p, &mut Source::new(&bytes[800..]));
        verify(&p, Stage::Prims).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        check_all(&format!("seed {seed}"), &p, &inputs, &mut tally);
    }
    eprintln!("decomposed graphs: {tally:?}, {high_level} with high-level ops");
    assert!(tally.compared > 200, "too few graphs ran: {tally:?}");
}

#[test]
fn simplify_reaches_a_fixpoint() {
    let mut converged = 0;
    for seed in 0..300 {
        let bytes = seeded_bytes(seed + 50_000, 2400);
        let g = random_graph(&mut Source::new(&bytes), &prim_config());
        let g = with_patterns(&g, &mut Source::new(&bytes[1600..]), 12, false);
        let once = simplify(&g, &SimplifyOptions::default()).unwrap();
        assert_eq!(once.stopped, Stopped::Converged, "seed {seed}:\n{}", print(&g));
        let twice = simplify(&once.graph, &SimplifyOptions::default()).unwrap();
        assert_eq!(print(&twice.graph), print(&once.graph), "seed {seed}: not a fixpoint\n{}", print(&g));
        assert_eq!((twice.iterations, twice.stopped), (1, Stopped::Converged), "seed {seed}");
        // Each pass alone is a fixpoint of the simplified graph too.
        for (name, pass) in PASSES {
            let again = pass(&once.graph).unwrap();
            assert_eq!(print(&again), print(&once.graph), "seed {seed}: {name} still changes the simplified graph");
        }
        converged += 1;
    }
    assert_eq!(converged, 300);
}

// ---------------------------------------------------------------------------------------------
// Targeted tests
// ---------------------------------------------------------------------------------------------

fn parse(src: &str) -> Graph {
    common::parse(src)
}

fn simplified_text(src: &str) -> String {
    print(&simplify(&parse(src), &SimplifyOptions::default()).unwrap().graph)
}

/// Simplifies `src` and checks the result computes the same as the original on `inputs`.
fn simplify_and_compare(src: &str, inputs: &[Tensor]) -> String {
    let g = parse(src);
    let s = simplify(&g, &SimplifyOptions::default()).unwrap();
    assert_eq!(s.stopped, Stopped::Converged);
    let want = run(&g, inputs, &Options::default()).unwrap();
    let got = run(&s.graph, inputs, &Options::default()).unwrap();
    for (w, o) in want.outputs.iter().zip(&got.outputs) {
        assert!(same(w, o), "{w} vs {o}\n{}", print(&s.graph));
    }
    print(&s.graph)
}

fn specials() -> Tensor {
    common::f32t(&[8], &[-0.0, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40, -3.5, 1e30])
}

#[test]
fn inexact_look_alikes_are_not_rewritten() {
    // Each would be wrong for some of `specials()`: x*0 (NaN, inf, -0), x-x (NaN, inf),
    // x+0.0 (-0), x-(-0.0) (-0), 0-x (+0), x/x (0, inf, NaN).
    for (op, text) in [
        ("mul", "%c = full() {shape=[8], value=0.0}\n  %r = mul(%x, %c)"),
        ("mul", "%c = full() {shape=[8], value=-0.0}\n  %r = mul(%c, %x)"),
        ("sub", "%r = sub(%x, %x)"),
        ("add", "%c = full() {shape=[8], value=0.0}\n  %r = add(%x, %c)"),
        ("add", "%c = full() {shape=[8], value=0.0}\n  %r = add(%c, %x)"),
        ("sub", "%c = full() {shape=[8], value=-0.0}\n  %r = sub(%x, %c)"),
        ("sub", "%c = full() {shape=[8], value=0.0}\n  %r = sub(%c, %x)"),
        ("div", "%r = div(%x, %x)"),
        ("div", "%c = full() {shape=[8], value=1.0}\n  %r = div(%c, %x)"),
        ("mul", "%c = full() {shape=[8], value=1.0000001}\n  %r = mul(%x, %c)"),
    ] {
        let src = format!("graph g(%x: f32[8]) {{\n  {text}\n  return %r\n}}");
        let out = simplify_and_compare(&src, &[specials()]);
        assert!(out.contains(&format!("%r = {op}(")), "{op} was rewritten:\n{out}");
    }
}

#[test]
fn integer_zero_is_not_negative_zero_for_floats() {
    // At the high rung `x + 0` with an integer 0 computes x + (+0.0): -0 becomes +0, so it stays.
    let src =
        "graph g(%x: f32[8]) {\n  %c = full() {shape=[], value=0.0, dtype=i64}\n  %r = add(%x, %c)\n  return %r\n}";
    let out = simplify_and_compare(src, &[specials()]);
    assert!(out.contains("%r = add("), "{out}");
    // For integers any 0 is neutral.
    let src = "graph g(%x: i64[3]) {\n  %c = full() {shape=[3], value=-0.0, dtype=i64}\n  %r = add(%x, %c)\n  %s = sub(%r, %c)\n  return %s\n}";
    let out = simplify_and_compare(src, &[common::i64t(&[3], &[i64::MIN, -1, 7])]);
    assert!(!out.contains("add(") && !out.contains("sub("), "{out}");
}

#[test]
fn exact_identities_are_rewritten() {
    let src = "graph g(%x: f32[8]) {
  %one = full() {shape=[], value=1.0}
  %b = broadcast_in_dim(%one) {shape=[8], broadcast_dims=[]}
  %a = mul(%x, %b)
  %nz = full() {shape=[8], value=-0.0}
  %c = add(%nz, %a)
  %z = full() {shape=[8], value=0.0}
  %d = sub(%c, %z)
  %e = div(%d, %b)
  %n1 = neg(%e)
  %r = neg(%n1)
  return %r
}";
    let out = simplify_and_compare(src, &[specials()]);
    assert!(out.contains("return %x as r"), "{out}");
}

#[test]
fn squares_are_products_in_f32_and_the_halves() {
    // pow(x, 2) is x * x bit for bit in f32 (and in f16 and bf16, which compute in f32):
    // specials, subnormals, overflow, and 200k random bit patterns, in op-dtype and precise mode.
    let mut bits: Vec<f32> = vec![-0.0, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40, -1e-45, 1e20, -2e19];
    bits.extend([f32::MAX, f32::MIN_POSITIVE, -1.084_202_2e-19, 3.402_823_4e38, 1.0000001, -0.999_999_94]);
    let mut state = 0x853c_49e6_748f_ea9bu64;
    for _ in 0..200_000 {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        bits.push(f32::from_bits((state >> 32) as u32));
    }
    let n = bits.len();
    let src =
        format!("graph g(%x: f32[{n}]) {{\n  %c = full() {{shape=[], value=2.0}}\n  %r = pow(%x, %c)\n  return %r\n}}");
    let out = simplify_and_compare(&src, &[common::f32t(&[n], &bits)]);
    assert!(out.contains("mul(%x, %x)") && !out.contains("pow("), "{out}");
    let g = parse(&src);
    let s = simplify(&g, &SimplifyOptions::default()).unwrap().graph;
    let x = common::f32t(&[n], &bits);
    let precise = Options { precise: true, ..Options::default() };
    let (want, got) = (run(&g, std::slice::from_ref(&x), &precise).unwrap(), run(&s, &[x], &precise).unwrap());
    assert!(same(&want.outputs[0], &got.outputs[0]), "precise mode");
    for ty in ["f16", "bf16"] {
        let src = format!("graph g(%x: f32[16]) {{\n  %h = convert_element_type(%x) {{dtype={ty}}}\n  %c = full() {{shape=[16], value=2.0, dtype={ty}}}\n  %r = pow(%h, %c)\n  return %r\n}}");
        let out = simplify_and_compare(&src, &[common::f32t(&[16], &bits[..16])]);
        assert!(!out.contains("pow("), "{ty}: {out}");
    }
    // Not f64, and not another exponent.
    for (ty, c) in [("f64", "2.0"), ("f32", "2.0000002"), ("f32", "3.0")] {
        let src = format!("graph g(%x: {ty}[2]) {{\n  %c = full() {{shape=[], value={c}, dtype={ty}}}\n  %r = pow(%x, %c)\n  return %r\n}}");
        let g = parse(&src);
        let out = print(&simplify(&g, &SimplifyOptions::default()).unwrap().graph);
        assert!(out.contains("pow("), "{ty} {c}: {out}");
    }
}

#[test]
fn a_type_changing_identity_is_not_applied() {
    // x * 1.0 where 1.0 is f64 promotes the result to f64: replacing it by x would change the type.
    let src =
        "graph g(%x: f32[2]) {\n  %c = full() {shape=[], value=1.0, dtype=f64}\n  %r = mul(%x, %c)\n  return %r\n}";
    let out = simplify_and_compare(src, &[common::f32t(&[2], &[1.5, -0.0])]);
    assert!(out.contains("%r = mul("), "{out}");
    // A broadcasting operand: x: f32[1] times ones of [3] is [3], not x.
    let src = "graph g(%x: f32[1]) {\n  %c = full() {shape=[3], value=1.0}\n  %r = mul(%x, %c)\n  return %r\n}";
    let out = simplify_and_compare(src, &[common::f32t(&[1], &[2.0])]);
    assert!(out.contains("%r = mul("), "{out}");
}

#[test]
fn layout_observed_by_view_is_preserved() {
    // reshape(permute(x)) to the same shape is a contiguous copy; view needs it. Replacing the
    // reshape by the permuted (strided) value would make the view fail.
    let src = "graph g(%x: f32[2, 3]) {
  %p = permute(%x) {perm=[1, 0]}
  %r = reshape(%p) {shape=[3, 2]}
  %c = convert_element_type(%p) {dtype=f32}
  %v = view(%r) {shape=[-1]}
  %w = view(%c) {shape=[-1]}
  return %v, %w
}";
    let x = common::f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = simplify_and_compare(src, &[x]);
    assert!(out.contains("reshape(") && out.contains("convert_element_type("), "{out}");
}

#[test]
fn cse_merges_equal_nodes_and_consts_and_keeps_output_names() {
    let src = "blob @a: f32[2] = [1.0, nan]
blob @b: f32[2] = [1.0, nan]
blob @c: f32[2] = [1.0, 2.0]
graph g(%x: f32[2], %y: f32[2]) {
  %ca = const @a
  %cb = const @b
  %cc = const @c
  %s1 = add(%x, %ca)
  %s2 = add(%x, %cb)
  %s3 = add(%x, %cc)
  %t1 = exp(%s1)
  %t2 = exp(%s2)
  %u = add(%y, %y)
  return %t1 as first, %t2 as second, %s3, %u
}";
    let g = parse(src);
    let c = eliminate_common_subexpressions(&g).unwrap();
    let text = print(&c);
    assert_eq!(text.matches("= exp(").count(), 1, "{text}");
    assert_eq!(text.matches("= const").count(), 2, "{text}");
    assert!(text.contains("return %t1 as first, %t1 as second, %s3, %u"), "{text}");
    // Inputs never merge, even when of one type and unused.
    let src = "graph g(%x: f32[2], %y: f32[2]) {\n  %a = exp(%x)\n  %b = exp(%y)\n  return %a, %b\n}";
    assert_eq!(print(&eliminate_common_subexpressions(&parse(src)).unwrap()), print(&parse(src)));
}

#[test]
fn dce_keeps_inputs_and_drops_dead_nodes_and_blobs() {
    let src = "blob @w: f32[2] = [1.0, 2.0]
blob @unused: f32[1] = [3.0]
graph g(%x: f32[2], %y: f32[2]) {
  %c = const @w
  %dead = add(%x, %c)
  %dead2 = exp(%dead)
  %r = neg(%x)
  return %r
}";
    let text = print(&eliminate_dead_code(&parse(src)).unwrap());
    assert_eq!(text, "graph g(%x: f32[2], %y: f32[2]) {\n  %r = neg(%x) : f32[2]\n  return %r\n}\n");
    // Blobs are found by name after some are dropped (the name index is rebuilt with them).
    let src = "blob @a: f32[1] = [1.0]\nblob @b: f32[1] = [2.0]\nblob @c: f32[1] = [3.0]
graph g(%x: f32[1]) {\n  %c = const @c\n  %r = add(%x, %c)\n  return %r\n}";
    let g = eliminate_dead_code(&parse(src)).unwrap();
    assert!(g.blob_by_name("a").is_none() && g.blob_by_name("b").is_none());
    let c = g.blob_by_name("c").expect("the used blob stays");
    assert_eq!(g.blob(c).name, "c");
    assert_eq!(g.blobs().count(), 1);
}

#[test]
fn folding_respects_size_symbolic_shapes_and_fuel() {
    // 4097 elements is over the default bound; 4096 is not.
    for (n, folded) in [(4096, true), (4097, false)] {
        let src = format!(
            "graph g(%x: f32[]) {{\n  %i = iota() {{shape=[{n}], axis=0, dtype=f32}}\n  %r = exp(%i)\n  return %r, %x\n}}"
        );
        let text = simplified_text(&src);
        assert_eq!(text.contains("exp("), !folded, "{n}: {text}");
    }
    // Symbolic shapes are never folded.
    let src = "graph g(%x: f32[n]) {\n  %f = full() {shape=[n], value=2.0}\n  %r = exp(%f)\n  %s = add(%x, %r)\n  return %s\n}";
    assert!(simplified_text(src).contains("exp("));
    // Full and iota alone are left alone.
    let src =
        "graph g() {\n  %f = full() {shape=[3], value=2.0}\n  %i = iota() {shape=[3], axis=0}\n  return %f, %i\n}";
    assert_eq!(simplified_text(src), print(&parse(src)));
    // A long chain of constant matmuls: folding stops when the fuel is spent (each 64x64
    // matmul costs about 64^3), and the result still computes the same.
    let mut src = String::from("graph g() {\n  %m0 = iota() {shape=[64, 64], axis=1, dtype=f32}\n");
    for i in 1..=200 {
        src += &format!("  %m{i} = matmul(%m{}, %m0)\n", i - 1);
    }
    src += "  %r = reduce_sum(%m200) {axes=[0, 1]}\n  return %r\n}";
    let g = parse(&src);
    let options = FoldOptions { fuel: 3_000_000, ..FoldOptions::default() };
    let folded = fold_constants(&g, &options).unwrap();
    let left = folded.nodes().filter(|(_, n)| n.op == OpKind::Matmul).count();
    assert!((180..200).contains(&left), "{left} matmuls left");
    let want = run(&g, &[], &Options::default()).unwrap();
    let got = run(&folded, &[], &Options::default()).unwrap();
    assert!(same(&want.outputs[0], &got.outputs[0]));
    // No fuel: nothing is folded.
    let none = fold_constants(&g, &FoldOptions { fuel: 0, ..FoldOptions::default() }).unwrap();
    assert_eq!(print(&none), print(&g));
}

/// Past the size bound, a slice, reshape, permute, reversal or concatenation of weights
/// still folds (an LSTM export's per-direction slice of its weight: the matmul then packs
/// it), within a budget of the graph's own blob elements; a generator (`full`) moved that
/// far stays a generator, and a zero budget folds nothing past the bound.
#[test]
fn moved_weights_fold_past_the_size_bound_within_a_budget() {
    let values: Vec<String> = (0..9600).map(|i| format!("{}", (i % 97) as f32 * 0.25 - 3.0)).collect();
    let src = format!(
        "blob @w: f32[2, 80, 60] = [{}]
graph g(%x: f32[80, 60]) {{
  %w = const @w
  %a = slice(%w) {{axis=0, end=1}}
  %b = slice(%w) {{axis=0, start=1, end=2}}
  %ra = reshape(%a) {{shape=[80, 60]}}
  %rb = reshape(%b) {{shape=[80, 60]}}
  %p = permute(%w) {{perm=[2, 1, 0]}}
  %f = full() {{shape=[2, 80, 60], value=1.5}}
  %fs = slice(%f) {{axis=0, end=1}}
  %fr = reshape(%fs) {{shape=[80, 60]}}
  %s = add(%ra, %rb)
  %t = add(%s, %x)
  %u = add(%t, %fr)
  return %u, %p
}}",
        values.join(", ")
    );
    let g = parse(&src);
    let count = |g: &Graph, op: OpKind| g.nodes().filter(|(_, n)| n.op == op).count();
    // The nodes, without the blobs' data.
    let nodes = |g: &Graph| print(g).lines().filter(|l| !l.starts_with("blob")).collect::<Vec<_>>().join("\n");
    let folded = fold_constants(&g, &FoldOptions::default()).unwrap();
    // The two slices and their reshapes (4,800 elements each: the budget of 9,600 is spent)
    // fold; the permute of all 9,600 does not fit what is left; the `full`'s slice stays.
    assert_eq!(count(&folded, OpKind::Permute), 1, "{}", nodes(&folded));
    assert_eq!(count(&folded, OpKind::Slice), 1, "{}", nodes(&folded));
    assert!(nodes(&folded).contains("%fs = slice(%f)"), "{}", nodes(&folded));
    let x = Tensor::from_f32(&[80, 60], (0..4800).map(|i| i as f32 * 1e-3).collect()).unwrap();
    let (want, got) = (
        run(&g, std::slice::from_ref(&x), &Options::default()).unwrap(),
        run(&folded, &[x], &Options::default()).unwrap(),
    );
    for (a, b) in want.outputs.iter().zip(&got.outputs) {
        assert!(a.bit_eq(b));
    }
    // No budget: nothing past the bound folds.
    let none = fold_constants(&g, &FoldOptions { max_moved_elements: 0, ..FoldOptions::default() }).unwrap();
    assert_eq!(count(&none, OpKind::Slice), 3);
    assert_eq!(count(&none, OpKind::Reshape), count(&g, OpKind::Reshape));
}

#[test]
fn folding_is_in_the_op_dtype_and_failures_stay() {
    // 0.1 + 0.2 in f32 is 0.3 rounded to f32 (0.30000001192...), not the f64 sum.
    let src = "graph g() {\n  %a = full() {shape=[2], value=0.1}\n  %b = full() {shape=[2], value=0.2}\n  %r = add(%a, %b)\n  return %r\n}";
    let text = simplified_text(src);
    assert!(text.contains("%r = full() {shape=[2], value=0.30000001192092896} : f32[2]"), "{text}");
    // A reduction accumulates in f32, in order: 1e8 + 1 rounds back to 1e8, so the sum is 0
    // (in f64 it would be 1).
    let src = "blob @w: f32[3] = [1e8, 1.0, -1e8]\ngraph g() {\n  %w = const @w\n  %r = reduce_sum(%w) {axes=[0]}\n  return %r\n}";
    let text = simplified_text(src);
    assert!(text.contains("%r = full() {shape=[], value=0.0} : f32[]"), "{text}");
    // Integer division by zero is a run-time error; folding leaves it there.
    let src = "graph g() {\n  %a = full() {shape=[2], value=1, dtype=i64}\n  %b = full() {shape=[2], value=0, dtype=i64}\n  %r = div(%a, %b)\n  return %r\n}";
    assert!(simplified_text(src).contains("div("));
    // A non-uniform result becomes a blob.
    let src = "graph g() {\n  %i = iota() {shape=[3], axis=0}\n  %r = mul(%i, %i)\n  return %r\n}";
    let text = simplified_text(src);
    assert!(text.starts_with("blob @r: i64[3] = [0, 1, 4]\n"), "{text}");
    assert!(text.contains("%r = const @r : i64[3]"), "{text}");
}

#[test]
fn convert_chains_fold_only_when_lossless() {
    let chain = |t0: &str, t1: &str, t2: &str| {
        let src = format!(
            "graph g(%x: {t0}[2]) {{\n  %a = convert_element_type(%x) {{dtype={t1}}}\n  %r = convert_element_type(%a) {{dtype={t2}}}\n  return %r\n}}"
        );
        simplified_text(&src).matches("convert_element_type(").count()
    };
    assert_eq!(chain("f32", "f64", "f32"), 0);
    assert_eq!(chain("f16", "f32", "bf16"), 1);
    assert_eq!(chain("bool", "f16", "i32"), 1);
    assert_eq!(chain("i32", "i64", "f32"), 1);
    assert_eq!(chain("f64", "f32", "f64"), 2);
    assert_eq!(chain("i64", "f64", "i64"), 2);
    assert_eq!(chain("f32", "i32", "f32"), 2);
    assert_eq!(chain("f16", "bf16", "f32"), 2);
    assert_eq!(chain("f32", "bool", "f32"), 2);
}

#[test]
fn graphs_that_mutate_are_refused() {
    let g = parse("graph g(%x: f32[2], %y: f32[2]) {\n  %2 = add_(%x, %y)\n  return %2\n}");
    for (name, pass) in PASSES {
        match pass(&g) {
            Err(SimplifyError::Mutating { value, op }) => assert_eq!((value.as_str(), op), ("%2", "add_")),
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn iteration_bound_is_reported() {
    let src = "graph g(%x: f32[2]) {\n  %a = neg(%x)\n  %b = neg(%a)\n  %c = exp(%b)\n  return %c\n}";
    let g = parse(src);
    let zero = simplify(&g, &SimplifyOptions { max_iterations: 1, ..SimplifyOptions::default() }).unwrap();
    assert_eq!((zero.iterations, zero.stopped), (1, Stopped::IterationBound));
    let full = simplify(&g, &SimplifyOptions::default()).unwrap();
    assert_eq!((full.iterations, full.stopped), (2, Stopped::Converged));
    assert_eq!(print(&full.graph), "graph g(%x: f32[2]) {\n  %c = exp(%x) : f32[2]\n  return %c\n}\n");
}

#[test]
fn pipeline_has_a_verified_simplified_stage() {
    let g = parse(
        "graph g(%x: f32[2, 3]) {\n  %t = permute(%x) {perm=[1, 0]}\n  %u = permute(%t) {perm=[1, 0]}\n  %e = exp(%u)\n  return %e\n}",
    );
    let l = ladder::passes::lower(&g).unwrap();
    verify(&l.simplified, Stage::Prims).unwrap();
    assert_eq!(print(&l.simplified), "graph g(%x: f32[2, 3]) {\n  %e = exp(%x) : f32[2, 3]\n  return %e\n}\n");
    assert!(ladder::pipeline::rung_names().any(|n| n == "simplified"));
    let text =
        ladder::pipeline::dump(&g, ladder::pipeline::Mode::Reference, "simplified", &Default::default()).unwrap();
    assert_eq!(text, print(&l.simplified));
}

/// Elementwise ops whose operands are all broadcasts run at the smaller shape, with one
/// broadcast after (applied to a fixed point down a chain): BERT's attention mask, computed
/// from an i64 `[b, s]` input broadcast to `[b, 1, s, s]`, ends up computed per `[b, 1, 1, s]`.
/// The results are the interpreter's, bit for bit, in op-dtype and precise mode, NaN and
/// infinities included; an op with one operand that is not a broadcast is left alone.
#[test]
fn broadcasts_sink_below_elementwise_chains() {
    let src = "graph g(%m: i64[2, 5], %x: f32[2, 5], %y: f32[2, 3, 5, 5]) {
  %r = reshape(%m) {shape=[2, 1, 1, 5]}
  %e = broadcast_in_dim(%r) {shape=[2, 1, 5, 5], broadcast_dims=[0, 1, 2, 3]}
  %c = convert_element_type(%e) {dtype=f32}
  %k = const_f32_one
  %one = full() {shape=[2, 1, 5, 5], value=1.0}
  %s = sub(%one, %c)
  %b = convert_element_type(%s) {dtype=bool}
  %big = full() {shape=[2, 1, 5, 5], value=-3.4028234663852886e38}
  %w = where(%b, %big, %s)
  %xr = reshape(%x) {shape=[2, 1, 1, 5]}
  %xb = broadcast_in_dim(%xr) {shape=[2, 1, 5, 5], broadcast_dims=[0, 1, 2, 3]}
  %t = mul(%w, %xb)
  %tb = broadcast_in_dim(%t) {shape=[2, 3, 5, 5], broadcast_dims=[0, 1, 2, 3]}
  %out = add(%y, %tb)
  return %out, %t
}"
    .replace("  %k = const_f32_one\n", "");
    let g = common::parse(&src);
    let s = simplify_default(&g).unwrap();
    for (_, n) in s.nodes() {
        if n.op.is_elementwise() && n.ty.shape.dims().len() == 4 && n.op != OpKind::Add {
            assert_eq!(
                n.ty.shape.dims()[2],
                ladder::ir::Dim::new(1),
                "{} at {}\n{}",
                n.op,
                n.ty,
                ladder::text::print(&s)
            );
        }
    }
    let m = Tensor::from_i64(&[2, 5], vec![1, 0, 1, 1, 0, 0, 0, 1, 2, -1]).unwrap();
    let x = common::f32t(&[2, 5], &[1.0, f32::NAN, -0.0, f32::INFINITY, 2.5, -1.0, 0.0, f32::NEG_INFINITY, 3.0, 1e-40]);
    let y: Vec<f32> = (0..150).map(|i| (i as f32 - 75.0) / 7.0).collect();
    let inputs = [m, x, common::f32t(&[2, 3, 5, 5], &y)];
    for precise in [false, true] {
        let o = Options { precise, ..Options::default() };
        let want = ladder::interp::run(&g, &inputs, &o).unwrap().outputs;
        let got = ladder::interp::run(&s, &inputs, &o).unwrap().outputs;
        for (w, v) in want.iter().zip(&got) {
            assert!(same(w, v), "precise={precise}: want {w}, got {v}");
        }
    }
}
