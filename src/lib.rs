//! ladder: a tensor-graph compiler and runtime.
//!
//! A model (built with [`GraphBuilder`], written in the text form, [`text`], or imported from
//! ONNX by [`load`]) is a [`Graph`] of operators. [`compile`] takes it down the one compile
//! path ([`pipeline`]) to a [`Plan`] for the backend [`CompileOptions`] selects, and
//! [`Plan::run`] runs it on [`Tensor`]s; [`runtime`] holds the options, reports and errors.
//!
//! These names are the API. The rest of the crate (the op table and its reference
//! interpreter, the IR's internals, the passes, the scheduler, the backends, the ONNX importer's
//! parts, test and benchmark support) is public for ladder's own CLI, tests and fuzz targets,
//! hidden from these docs, and may change between versions. ARCHITECTURE.md is the code map.
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

#![warn(missing_docs)]

/// The README's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod artifact;
#[doc(hidden)]
pub mod autodiff;
#[doc(hidden)]
pub mod backend;
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod builder;
#[doc(hidden)]
pub mod decomp;
#[doc(hidden)]
pub mod dot;
#[doc(hidden)]
pub mod frontend;
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod gen;
#[doc(hidden)]
pub mod interp;
#[doc(hidden)]
pub mod ir;
#[doc(hidden)]
pub mod kernel;
#[cfg(test)]
mod layering;
#[doc(hidden)]
pub mod limits;
#[doc(hidden)]
pub mod models;
#[doc(hidden)]
pub mod numerics;
#[doc(hidden)]
pub mod ops;
#[doc(hidden)]
pub mod passes;
pub mod pipeline;
#[doc(hidden)]
pub mod recover;
pub mod runtime;
#[doc(hidden)]
pub mod sched;
#[doc(hidden)]
pub mod session;
#[doc(hidden)]
pub mod tensor;
pub mod text;
#[doc(hidden)]
pub mod train;

pub use builder::GraphBuilder;
pub use frontend::onnx::ImportOptions;
pub use ir::{DType, Dim, Graph, Shape, TensorType, Value};
pub use limits::Limits;
pub use ops::OpKind;
pub use runtime::{compile, BackendKind, CompileError, CompileOptions, Outputs, Plan, RunError};
pub use session::{LoadError, Model, Session};
pub use tensor::{Tensor, TensorData, TensorView};

/// Loads a model file: ladder's text form (`.lad`) or ONNX (by extension, else by content),
/// with the default import limits and no external data; [`Model::load_with`] takes
/// [`frontend::onnx::ImportOptions`].
pub fn load(path: impl AsRef<std::path::Path>) -> Result<Model, session::LoadError> {
    Model::load(path.as_ref())
}
