//! Decomposition preserves meaning on random graphs. Both sides run in precise (f64) mode,
//! which separates semantic disagreements (NaN, ±inf and -0 rules, empty tensors, edge cases)
//! from f32 rounding, which `tests/all/numerics.rs` bounds op by op against the tolerance table.

use ladder::gen::{random_graph, random_tensor, seeded_bytes, GenConfig, Source};
use ladder::interp::{run, Options};
use ladder::ir::verify::{verify, Stage};
use ladder::passes::{decompose, functionalize};
use ladder::text::print;

/// Agreement up to f64 rounding of different formulas (an absolute floor absorbs cancellation
/// residue, such as the variance of a constant row: exactly 0 one way, 6e-34 the other);
/// non-finite values match exactly.
fn close(x: f64, y: f64) -> bool {
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    (x - y).abs() <= 1e-9 + 1e-6 * x.abs().max(y.abs())
}

fn check(seed: u64) -> Option<usize> {
    let bytes = seeded_bytes(seed, 1400);
    let cfg = GenConfig { attempts: 30, ..GenConfig::default() };
    let g = random_graph(&mut Source::new(&bytes), &cfg);
    // `atan`'s decomposition is a polynomial approximation even in f64 (1 ulp), so the two
    // sides differ by rounding that later ops may amplify without bound (sin of a huge
    // power, say); `tests/all/numerics.rs` holds it to its tolerance instead.
    if g.nodes().any(|(_, n)| n.op == ladder::OpKind::Atan) {
        return None;
    }
    let Ok(f) = functionalize(&g) else { return None };
    let p = match decompose(&f.graph) {
        Ok(p) => p,
        // A decomposition may legitimately refuse a symbolic case it cannot express.
        Err(ladder::passes::DecomposeError::Node {
            error: ladder::decomp::DecompError::Unsupported { .. }, ..
        }) => return None,
        Err(e) => panic!("seed {seed}: {e}\n{}", print(&f.graph)),
    };
    verify(&p, Stage::Prims).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", print(&p)));
    let bind = |s: &str| Some(if s == "batch" { 2 } else { 3 });
    let mut data = Source::new(&bytes[700..]);
    let inputs: Vec<_> = g
        .inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.eval(&bind).unwrap_or(1) as usize).collect();
            random_tensor(&mut data, ty.dtype, &shape)
        })
        .collect();
    let opts = Options { precise: true, max_elements: 100_000, ..Options::default() };
    let want = run(&f.graph, &inputs, &opts).ok()?;
    let got = run(&p, &inputs, &opts)
        .unwrap_or_else(|e| panic!("seed {seed}: prims run failed: {e}\n{}\n{}", print(&f.graph), print(&p)));
    for (i, (w, o)) in want.outputs.iter().zip(&got.outputs).enumerate() {
        let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
        for (k, (&x, &y)) in w.iter().zip(&o).enumerate() {
            assert!(
                close(x, y),
                "seed {seed}: output {i} element {k}: op {x}, prims {y}\n{}\n{}",
                print(&f.graph),
                print(&p)
            );
        }
    }
    Some(g.len())
}

#[test]
fn random_graphs_decompose_without_changing_meaning() {
    let ran: Vec<usize> = (0..1500).filter_map(check).collect();
    eprintln!("decompose_random: {} of 1500 graphs compared ({} nodes)", ran.len(), ran.iter().sum::<usize>());
    assert!(ran.len() > 800, "only {} graphs compared", ran.len());
}
