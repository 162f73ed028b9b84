//! The graph IR: a guide.
//!
//! A [`Graph`] is an arena of [`Node`]s. Each node defines exactly one SSA [`Value`], a `u32`
//! id that prints as `%N` (or `%name` when the value is named). A node holds its operator
//! ([`OpKind`](crate::ops::OpKind)), its attributes ([`Attrs`], checked against the op's spec
//! and stored with defaults filled in), its arguments (earlier values) and its inferred
//! [`TensorType`]: a [`DType`] and a [`Shape`] whose dims are constants or polynomials over
//! named symbols such as `batch` and `seq`.
//!
//! **Architecture invariant:** nodes are appended in topological order, so every argument
//! refers to an earlier node. There are no forward references and no cycles; the interpreter,
//! the verifier and every pass are one forward loop. In graphs that contain in-place ops the
//! node order is also the program order, which is what gives mutation its meaning; after
//! functionalization order matters only through dataflow.
//!
//! Sources are `input` nodes (the graph's parameters, in order) and `const` nodes, which
//! name a [`Blob`] in the graph's blob store. Weights live in the blob store, so the text of a
//! graph stays readable however large its constants are.
//!
//! Graphs are built with [`Graph::add_node`] (or the typed [`GraphBuilder`](crate::GraphBuilder)),
//! which infers each node's type from the op's rule and rejects bad arguments with a typed
//! error, so a graph that was built is well-typed. The verifier re-checks everything from
//! scratch, for graphs that passes have rewritten or that came from elsewhere.

mod attrs;
mod dtype;
mod graph;
mod shape;
pub mod verify;

pub use attrs::{write_float, AttrDefault, AttrError, AttrKind, AttrSpec, AttrValue, Attrs};
pub use dtype::DType;
pub use graph::{Blob, BlobId, Graph, GraphError, Node, Output, TensorType, Value};
pub use shape::{Dim, DimError, Shape, SizeExpr, Symbol};
