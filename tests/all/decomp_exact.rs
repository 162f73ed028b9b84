//! Exactness checks for decompositions that only move data (shared by `decomp_shape.rs` and
//! `decomp_index.rs`).
#![allow(dead_code)]

use half::{bf16, f16};
use ladder::interp::{self, Options};
use ladder::{Tensor, TensorData};

use crate::common::{check_decomposition, parse};

/// True when two outputs are equal element by element in the same dtype and shape: floats
/// bit for bit (so -0 differs from +0), except that any NaN equals any NaN.
pub fn same(a: &Tensor, b: &Tensor) -> bool {
    fn floats<T: Copy>(x: &[T], y: &[T], bits: fn(T) -> u64, nan: fn(T) -> bool) -> bool {
        x.iter().zip(y).all(|(&p, &q)| (nan(p) && nan(q)) || bits(p) == bits(q))
    }
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return false;
    }
    match (a.data(), b.data()) {
        (TensorData::F32(x), TensorData::F32(y)) => floats(x, y, |v| v.to_bits() as u64, f32::is_nan),
        (TensorData::F64(x), TensorData::F64(y)) => floats(x, y, f64::to_bits, f64::is_nan),
        (TensorData::F16(x), TensorData::F16(y)) => floats(x, y, |v: f16| v.to_bits() as u64, |v: f16| v.is_nan()),
        (TensorData::BF16(x), TensorData::BF16(y)) => floats(x, y, |v: bf16| v.to_bits() as u64, |v: bf16| v.is_nan()),
        (TensorData::I32(x), TensorData::I32(y)) => x == y,
        (TensorData::I64(x), TensorData::I64(y)) => x == y,
        (TensorData::Bool(x), TensorData::Bool(y)) => x == y,
        _ => false,
    }
}

/// Lowers `src` to prims and checks the prims graph computes exactly what the original does:
/// `check_decomposition` with atol = rtol = 0, then both graphs run in f32 mode and in precise
/// mode, every output compared with [`same`] (dtype, shape, bits; -0 is not +0; NaN payloads
/// are ignored). Returns the prims text.
pub fn exact(src: &str, inputs: &[Tensor]) -> String {
    check_decomposition(src, inputs, 0.0, 0.0);
    exact_same_mode(src, inputs)
}

/// [`exact`] without `check_decomposition`, which compares the original in precise mode with
/// the prims in f32 mode: for graphs that convert to a narrower float (a rounding the precise
/// reference skips by design), compare f32 mode with f32 mode and precise with precise.
pub fn exact_same_mode(src: &str, inputs: &[Tensor]) -> String {
    let g = parse(src);
    let lowered = ladder::passes::lower(&g).unwrap_or_else(|e| panic!("lower: {e}\n{src}"));
    let text = ladder::text::print(&lowered.prims);
    for precise in [false, true] {
        let options = Options { precise, ..Options::default() };
        let want = interp::run(&g, inputs, &options).unwrap_or_else(|e| panic!("original run failed: {e}\n{src}"));
        let got =
            interp::run(&lowered.prims, inputs, &options).unwrap_or_else(|e| panic!("prims run failed: {e}\n{text}"));
        assert!(got.outputs.len() >= want.outputs.len());
        for (i, (w, o)) in want.outputs.iter().zip(&got.outputs).enumerate() {
            assert!(
                same(w, o),
                "output {i} (precise: {precise}) differs\noriginal: {w:?}\nprims:    {o:?}\n{src}\n{text}"
            );
        }
        // A mutated input's final contents come back as an extra functional output.
        for m in &lowered.functional.epilogue.mutations {
            let (w, o) = (&want.inputs_after[m.input], &got.outputs[m.output]);
            assert!(same(w, o), "mutated input {} differs\noriginal: {w:?}\nprims:    {o:?}\n{text}", m.input);
        }
    }
    text
}

/// Lowers `src` and runs both graphs (f32 mode): (original's error, prims' error), `None`
/// for a run that succeeded.
pub fn errors(src: &str, inputs: &[Tensor]) -> (Option<String>, Option<String>) {
    let g = parse(src);
    let lowered = ladder::passes::lower(&g).unwrap_or_else(|e| panic!("lower: {e}\n{src}"));
    let o = Options::default();
    (
        interp::run(&g, inputs, &o).err().map(|e| e.to_string()),
        interp::run(&lowered.prims, inputs, &o).err().map(|e| e.to_string()),
    )
}

/// The error lowering `src` fails with.
pub fn lower_error(src: &str) -> String {
    match ladder::passes::lower(&parse(src)) {
        Ok(l) => panic!("lowering succeeded:\n{}", ladder::text::print(&l.prims)),
        Err(e) => e.to_string(),
    }
}

/// A graph with the given signature whose one node `%r = node` is the output.
pub fn one(sig: &str, node: &str) -> String {
    format!("graph g({sig}) {{\n  %r = {node}\n  return %r\n}}")
}

pub fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F64(v.to_vec())).unwrap()
}

pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect())).unwrap()
}

pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

/// 0, 1, 2, ... as f32 of `shape`.
pub fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|i| i as f32).collect()).unwrap()
}

/// Awkward f32 values (NaN, ±inf, -0, ±1e30, a denormal, a payload NaN) cycled over `shape`.
pub fn specials(shape: &[usize]) -> Tensor {
    let pool = [
        f32::NAN,
        -0.0,
        f32::INFINITY,
        1.5,
        f32::NEG_INFINITY,
        -1e30,
        1e-40,
        f32::from_bits(0x7fc0_1234),
        0.0,
        1e30,
        -2.25,
        7.0,
    ];
    let n: usize = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|i| pool[i % pool.len()]).collect()).unwrap()
}
