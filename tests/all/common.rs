//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ladder::interp::{self, InterpError, Options, Outcome};
use ladder::{Graph, Tensor};

/// Parses graph text, panicking with the parse error (test input is trusted).
pub fn parse(src: &str) -> Graph {
    ladder::text::parse(src).unwrap_or_else(|e| panic!("parse error: {e}\n{src}"))
}

/// Runs graph text on the interpreter in f32 (op-dtype) mode.
pub fn run(src: &str, inputs: &[Tensor]) -> Result<Outcome, InterpError> {
    interp::run(&parse(src), inputs, &Options::default())
}

/// Runs graph text and returns its first output as f64 values.
pub fn run1(src: &str, inputs: &[Tensor]) -> Vec<f64> {
    let out = run(src, inputs).unwrap_or_else(|e| panic!("run failed: {e}\n{src}"));
    out.outputs[0].to_f64_vec()
}

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape, v.to_vec()).unwrap()
}

pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::from_bool(shape, v.to_vec()).unwrap()
}

/// Asserts two float vectors are equal elementwise, treating NaN == NaN and comparing
/// signed zeros and infinities exactly; `tol` is an absolute tolerance for finite values.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g.is_finite() && w.is_finite() && (g - w).abs() <= tol);
        assert!(ok, "element {i}: got {g}, want {w}\n got: {got:?}\nwant: {want:?}");
    }
}

/// Lowers graph text to prims (functionalize + decompose), checks the result verifies at the
/// prims rung, then runs the original in precise (f64) mode and the prims graph in f32 mode on
/// `inputs` and compares every output against the reference rounded to the output dtype:
/// non-finite values must match exactly (NaN with NaN, inf with inf of the same sign), finite
/// ones within `atol + rtol * |reference|`; with both tolerances 0 the comparison is bitwise
/// (so -0 and +0 differ), NaN payloads aside.
/// Returns the prims graph's text for golden checks.
pub fn check_decomposition(src: &str, inputs: &[Tensor], atol: f64, rtol: f64) -> String {
    use ladder::ir::verify::{verify, Stage};
    let g = parse(src);
    let f = ladder::passes::functionalize(&g).unwrap_or_else(|e| panic!("functionalize: {e}\n{src}"));
    let p = ladder::passes::decompose(&f.graph).unwrap_or_else(|e| panic!("decompose: {e}\n{src}"));
    let text = ladder::text::print(&p);
    verify(&p, Stage::Prims).unwrap_or_else(|e| panic!("prims graph invalid: {e}\n{text}"));
    let precise = Options { precise: true, ..Options::default() };
    let want = interp::run(&g, inputs, &precise).unwrap_or_else(|e| panic!("reference run failed: {e}\n{src}"));
    let got = interp::run(&p, inputs, &Options::default()).unwrap_or_else(|e| panic!("prims run failed: {e}\n{text}"));
    for (i, (w, o)) in want.outputs.iter().zip(&got.outputs).enumerate() {
        assert_eq!(w.shape(), o.shape(), "output {i} shape\n{text}");
        // The reference is the op evaluated in f64, rounded once to the output's dtype.
        let dtype = g.ty(g.outputs()[i].value).dtype;
        let w: Vec<f64> = w.to_f64_vec().into_iter().map(|x| ladder::interp::round_float(dtype, x)).collect();
        let o = o.to_f64_vec();
        let exact = atol == 0.0 && rtol == 0.0;
        for (k, (&x, &y)) in w.iter().zip(&o).enumerate() {
            let ok = if exact {
                (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
            } else if x.is_finite() {
                y.is_finite() && (x - y).abs() <= atol + rtol * x.abs()
            } else {
                x.is_nan() && y.is_nan() || x == y
            };
            assert!(
                ok,
                "output {i} element {k}: reference {x}, decomposed {y}\nreference: {w:?}\ndecomposed: {o:?}\n{text}"
            );
        }
    }
    text
}

/// Proptest's settings for the tests here: `cases` cases, and failing cases saved next to the
/// test's source (`dim_algebra.rs`, `dim_algebra.proptest-regressions`), where proptest reads
/// them back first. Its default would use `tests/proptest-regressions/`, as `tests/all` has a
/// `main.rs`.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Default::default()
    }
}

/// The byte mutations the fuzz-seed tests share, chosen by `kind`: 0 flips a bit, 1
/// truncates, 2 deletes up to `max_delete` bytes, 3 splices in up to `max_splice` bytes of
/// another seed. Returns whether it mutated (never for other kinds, nor for 0 and 2 on empty
/// data), so that a caller's own kinds follow.
pub fn shared_mutation(
    rng: &mut ladder::models::Rng,
    data: &mut Vec<u8>,
    seeds: &[(String, Vec<u8>)],
    kind: u64,
    max_delete: u64,
    max_splice: u64,
) -> bool {
    let pos = |rng: &mut ladder::models::Rng, len: usize| rng.below(len as u64 + 1) as usize;
    match kind {
        0 if !data.is_empty() => {
            let i = pos(rng, data.len() - 1);
            data[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = pos(rng, data.len());
            data.truncate(i);
        }
        2 if !data.is_empty() => {
            let a = pos(rng, data.len());
            let b = (a + 1 + rng.below(max_delete) as usize).min(data.len());
            data.drain(a..b);
        }
        3 => {
            let other = &seeds[rng.below(seeds.len() as u64) as usize].1;
            let a = pos(rng, other.len());
            let b = (a + rng.below(max_splice) as usize).min(other.len());
            let at = pos(rng, data.len());
            data.splice(at..at, other[a..b].iter().copied());
        }
        _ => return false,
    }
    true
}

/// Inputs for a generated graph (`ladder::gen::random_graph`): each input's symbolic dims
/// bound to 2 (`batch`) or 3 (any other), its values drawn from `data`.
pub fn generated_inputs(g: &Graph, data: &mut ladder::gen::Source) -> Vec<Tensor> {
    let bind = |s: &str| Some(if s == "batch" { 2 } else { 3 });
    g.inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            let shape: Vec<usize> = ty.shape.dims().iter().map(|d| d.eval(&bind).unwrap_or(1) as usize).collect();
            ladder::gen::random_tensor(data, ty.dtype, &shape)
        })
        .collect()
}

/// The files of the seed corpus `fuzz/corpus/<target>`, sorted.
pub fn seed_corpus(target: &str) -> Vec<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
}
