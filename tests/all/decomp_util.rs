//! Helpers for the norm and linalg decomposition tests: lowering graph text to prims, measuring
//! the prims graph's error against the op's ideal answer, bit-exact comparison, and a small
//! deterministic generator for inputs.
#![allow(dead_code)]

use half::f16;
use ladder::interp::{self, InterpError, Options};
use ladder::ir::verify::{verify, Stage};
use ladder::tensor::narrow::{bf16_from_f64, f16_from_f64};
use ladder::{DType, Graph, Tensor, TensorData};

/// The unit roundoff of f32, 2^-24.
pub const U: f64 = 1.0 / 16_777_216.0;

/// A one-node graph: `sig` declares the inputs, `node` is the op call.
pub fn graph(sig: &str, node: &str) -> String {
    format!("graph g({sig}) {{\n  %r = {node}\n  return %r\n}}")
}

pub fn parse(src: &str) -> Graph {
    ladder::text::parse(src).unwrap_or_else(|e| panic!("parse error: {e}\n{src}"))
}

/// Functionalizes and decomposes `src`, checks the result verifies at the prims rung, and
/// returns (original, prims graph, prims text).
pub fn lower(src: &str) -> (Graph, Graph, String) {
    let g = parse(src);
    let f = ladder::passes::functionalize(&g).unwrap_or_else(|e| panic!("functionalize: {e}\n{src}"));
    let p = ladder::passes::decompose(&f.graph).unwrap_or_else(|e| panic!("decompose: {e}\n{src}"));
    let text = ladder::text::print(&p);
    verify(&p, Stage::Prims).unwrap_or_else(|e| panic!("prims graph invalid: {e}\n{text}"));
    (g, p, text)
}

/// The decomposition error for `src`, as text.
pub fn decompose_err(src: &str) -> String {
    let g = parse(src);
    let f = ladder::passes::functionalize(&g).unwrap_or_else(|e| panic!("functionalize: {e}\n{src}"));
    match ladder::passes::decompose(&f.graph) {
        Ok(p) => panic!("expected a decomposition error, got\n{}", ladder::text::print(&p)),
        Err(e) => e.to_string(),
    }
}

/// `atol + rtol * |reference|` is the allowed error of a finite element.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol { atol: 0.0, rtol: 0.0 };
}

/// Errors of one comparison.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Largest |got - reference|.
    pub max_abs: f64,
    /// Largest |got - reference| / |reference| over nonzero references, in units of 2^-24.
    pub max_rel_u: f64,
    /// Largest error as a fraction of the allowed error (<= 1 passes).
    pub worst: f64,
    /// Finite elements compared.
    pub finite: usize,
    /// Some finite f64 reference value overflowed when rounded to the output dtype.
    pub overflow: bool,
}

impl Stats {
    pub fn merge(self, o: Stats) -> Stats {
        Stats {
            max_abs: self.max_abs.max(o.max_abs),
            max_rel_u: self.max_rel_u.max(o.max_rel_u),
            worst: self.worst.max(o.worst),
            finite: self.finite + o.finite,
            overflow: self.overflow || o.overflow,
        }
    }
}

/// `x` rounded to `dtype` (floats; other values unchanged).
pub fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16_from_f64(x).to_f64(),
        DType::BF16 => bf16_from_f64(x).to_f64(),
        _ => x,
    }
}

fn run_opts(g: &Graph, inputs: &[Tensor], precise: bool) -> Result<Vec<Tensor>, InterpError> {
    let opts = Options { precise, ..Options::default() };
    interp::run(g, inputs, &opts).map(|o| o.outputs)
}

/// Compares `got` with `want` (already the reference): non-finite values must match exactly
/// (NaN with NaN, infinities with their sign), finite ones within `tol`.
pub fn compare(label: &str, got: &[f64], want: &[f64], tol: Tol, text: &str) -> Stats {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let mut st = Stats::default();
    for (k, (&y, &x)) in got.iter().zip(want).enumerate() {
        if !x.is_finite() {
            assert!(
                x.is_nan() && y.is_nan() || x == y,
                "{label}: element {k}: reference {x}, decomposed {y}\nreference: {want:?}\ndecomposed: {got:?}\n{text}"
            );
            continue;
        }
        assert!(
            y.is_finite(),
            "{label}: element {k}: reference {x}, decomposed {y}\nreference: {want:?}\ndecomposed: {got:?}\n{text}"
        );
        let err = (x - y).abs();
        let allowed = tol.atol + tol.rtol * x.abs();
        st.finite += 1;
        st.max_abs = st.max_abs.max(err);
        if x != 0.0 {
            st.max_rel_u = st.max_rel_u.max(err / x.abs() / U);
        }
        let frac = if allowed > 0.0 {
            err / allowed
        } else if err > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        st.worst = st.worst.max(frac);
        assert!(
            err <= allowed,
            "{label}: element {k}: reference {x}, decomposed {y}, error {err:e} > allowed {allowed:e}\nreference: {want:?}\ndecomposed: {got:?}\n{text}"
        );
    }
    st
}

/// Whether `got` passes `compare` against `want` (without panicking).
pub fn within(got: &[f64], want: &[f64], tol: Tol) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&y, &x)| {
            if x.is_finite() {
                y.is_finite() && (x - y).abs() <= tol.atol + tol.rtol * x.abs()
            } else {
                x.is_nan() && y.is_nan() || x == y
            }
        })
}

/// Lowers `src`, runs the op in precise mode and rounds its outputs to their dtype (the op's
/// ideal answer in that dtype: composite ops round once from f64), runs the prims graph in
/// op-dtype mode, and compares every output with `tol`. Returns the measured errors.
pub fn measure(label: &str, src: &str, inputs: &[Tensor], tol: Tol) -> Stats {
    let (g, p, text) = lower(src);
    let want = run_opts(&g, inputs, true).unwrap_or_else(|e| panic!("{label}: reference run failed: {e}\n{src}"));
    let got = run_opts(&p, inputs, false).unwrap_or_else(|e| panic!("{label}: prims run failed: {e}\n{text}"));
    let mut st = Stats::default();
    for (i, (w, o)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.shape(), o.shape(), "{label}: shape\n{text}");
        let dtype = g.ty(g.outputs()[i].value).dtype;
        assert_eq!(o.dtype(), dtype, "{label}: dtype\n{text}");
        let raw = w.to_f64_vec();
        let want: Vec<f64> = raw.iter().map(|&x| round_to(dtype, x)).collect();
        st = st.merge(compare(label, &o.to_f64_vec(), &want, tol, &text));
        st.overflow |= raw.iter().zip(&want).any(|(r, w)| r.is_finite() && !w.is_finite());
    }
    st
}

/// `measure`, plus the project's `check_decomposition` (which compares against the unrounded
/// f64 reference, so it gets the tolerance widened by the output rounding: one unit roundoff
/// of f32 and half the smallest f32 denormal; skipped when a reference value overflows the
/// output dtype, which no f32 computation can match). Prints and returns the measured errors.
pub fn case(label: &str, src: &str, inputs: &[Tensor], tol: Tol) -> Stats {
    let st = measure(label, src, inputs, tol);
    if !st.overflow {
        crate::common::check_decomposition(src, inputs, tol.atol + 1e-45, tol.rtol + U);
    }
    println!(
        "{label}: max abs err {:.3e}, max rel err {:.2} u, worst {:.3} of tolerance ({} finite)",
        st.max_abs, st.max_rel_u, st.worst, st.finite
    );
    st
}

/// Asserts the prims graph gives exactly (bit for bit, any NaN equal to any NaN) what the op
/// gives in op-dtype mode.
pub fn bit_exact(label: &str, src: &str, inputs: &[Tensor]) {
    let (g, p, text) = lower(src);
    let want = run_opts(&g, inputs, false).unwrap_or_else(|e| panic!("{label}: op run failed: {e}\n{src}"));
    let got = run_opts(&p, inputs, false).unwrap_or_else(|e| panic!("{label}: prims run failed: {e}\n{text}"));
    for (w, o) in want.iter().zip(&got) {
        assert_eq!(w.shape(), o.shape(), "{label}: shape\n{text}");
        assert_eq!(w.dtype(), o.dtype(), "{label}: dtype\n{text}");
        let same = w.bit_eq(o)
            || w.to_f64_vec()
                .iter()
                .zip(o.to_f64_vec())
                .all(|(a, b)| (a.is_nan() && b.is_nan()) || (a.to_bits() == b.to_bits()));
        assert!(same, "{label}: op {:?}\nprims {:?}\n{text}", w.to_f64_vec(), o.to_f64_vec());
    }
}

/// Runs both graphs, expecting each to fail; returns (op error, prims error) as text.
pub fn both_fail(src: &str, inputs: &[Tensor]) -> (String, String) {
    let (g, p, text) = lower(src);
    let a = run_opts(&g, inputs, true).map(|_| ()).expect_err("the op should fail");
    let b = run_opts(&p, inputs, false).map(|_| ()).map_err(|e| e.to_string()).expect_err(&text);
    (a.to_string(), b)
}

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

pub fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F64(v.to_vec())).unwrap()
}

pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect())).unwrap()
}

pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape, v.to_vec()).unwrap()
}

pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::from_bool(shape, v.to_vec()).unwrap()
}

/// A deterministic xorshift generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` values uniform in [-scale, scale).
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
