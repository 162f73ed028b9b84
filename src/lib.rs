//! ladder: a tensor-graph compiler and runtime.
//!
//! A model (built with [`GraphBuilder`], written in the text IR, or imported) is a [`Graph`] of
//! operators. The [`ops`] module is the operator contract; the [`interp`] module is the
//! reference interpreter that defines what every operator means; [`text`] prints and parses
//! graphs; [`ir::verify`] checks a graph's invariants. See ARCHITECTURE.md for the code map.

pub mod backend;
pub mod bench;
pub mod builder;
pub mod decomp;
pub mod frontend;
pub mod fuzzing;
pub mod gen;
pub mod interp;
pub mod ir;
pub mod kernel;
pub mod models;
pub mod numerics;
pub mod ops;
pub mod passes;
pub mod recover;
pub mod runtime;
pub mod sched;
pub mod session;
pub mod tensor;
pub mod text;

pub use builder::GraphBuilder;
pub use ir::{DType, Dim, Graph, Shape, TensorType, Value};
pub use ops::OpKind;
pub use runtime::{compile, Backend, CompileOptions, Outputs, Plan, StepTime};
pub use session::{Model, Session};
pub use tensor::{Tensor, TensorData};
