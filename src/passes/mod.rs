//! The passes that move a graph down the ladder. Each is one file with one public function
//! from one value to the next.

pub mod decompose;
pub mod functionalize;
pub mod rewrite;
pub mod stats;

pub use decompose::{decompose, DecomposeError};
pub use functionalize::{functionalize, Epilogue, Functional, FunctionalizeError};
pub mod pipeline;

pub use pipeline::{dump, lower, Lowered, PipelineError, STAGES};
