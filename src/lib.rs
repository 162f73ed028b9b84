//! ladder: a tensor-graph compiler and runtime.
//!
//! A model (built with [`GraphBuilder`], written in the text IR, or imported) is a [`Graph`] of
//! operators. The [`ops`] module is the operator contract; the [`interp`] module is the
//! reference interpreter that defines what every operator means; [`text`] prints and parses
//! graphs; [`ir::verify`] checks a graph's invariants. See ARCHITECTURE.md for the code map.
//!
//! Running a model file: [`load`] reads the text form or ONNX, a [`Session`] compiles it (for
//! the CPU, over the machine's threads, with [`CompileOptions::default`]) once for every shape
//! its symbolic dims allow, and runs it on [`Tensor`]s.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A small BERT-style sentence encoder: token ids and a mask in, one embedding per sentence out.
//! let model = ladder::load(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/bert_ts/model.onnx"))?;
//! let session = ladder::Session::new(model, ladder::CompileOptions::default())?;
//! for seq in [3, 7] {
//!     let ids = ladder::Tensor::from_i64(&[2, seq], (0..2 * seq as i64).collect())?;
//!     let mask = ladder::Tensor::from_i64(&[2, seq], vec![1; 2 * seq])?;
//!     let out = session.run(&[ids, mask])?;
//!     assert_eq!(out.outputs[0].shape()[0], 2);
//! }
//! // Both sequence lengths ran on the one plan compiled for symbolic `batch` and `seq`.
//! assert_eq!(session.compilations(), 1);
//! # Ok(())
//! # }
//! ```

/// The README's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod backend;
pub mod bench;
pub mod builder;
pub mod decomp;
pub mod dot;
pub mod frontend;
pub mod fuzzing;
pub mod gen;
pub mod interp;
pub mod ir;
pub mod kernel;
#[cfg(test)]
mod layering;
pub mod models;
pub mod numerics;
pub mod ops;
pub mod passes;
pub mod pipeline;
pub mod recover;
pub mod runtime;
pub mod sched;
pub mod session;
pub mod tensor;
pub mod text;

pub use builder::GraphBuilder;
pub use ir::{DType, Dim, Graph, Shape, TensorType, Value};
pub use ops::OpKind;
pub use runtime::{compile, BackendKind, CompileOptions, Outputs, Plan, StepTime};
pub use session::{Model, Session};
pub use tensor::{Element, Tensor, TensorData, TensorView};

/// Loads a model file: ladder's text form (`.lad`) or ONNX (by extension, else by content),
/// with the default import limits and no external data; [`Model::load_with`] takes
/// [`frontend::onnx::ImportOptions`].
pub fn load(path: impl AsRef<std::path::Path>) -> Result<Model, session::LoadError> {
    Model::load(path.as_ref())
}
