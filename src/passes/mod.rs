//! The passes that move a graph down the ladder. Each is one file with one public function
//! from one value to the next.

pub mod cse;
pub mod dce;
pub mod decompose;
pub mod fold;
pub mod functionalize;
pub mod identities;
pub mod rewrite;
pub mod simplify;

pub use cse::eliminate_common_subexpressions;
pub use dce::eliminate_dead_code;
pub use decompose::{decompose, decompose_keeping, DecomposeError};
pub use fold::{fold_constants, FoldOptions};
pub use functionalize::{functionalize, Epilogue, Functional, FunctionalizeError};
pub use identities::apply_identities;
pub use simplify::{simplify, Simplified, SimplifyError, SimplifyOptions, Stopped};

pub mod lower;

pub use lower::{functional, lower, lower_keeping, LowerError, Lowered};
