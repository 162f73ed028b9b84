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
