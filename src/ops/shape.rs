//! (family placeholder; filled in by its spec rows)

use super::OpSpec;

pub static SPECS: &[OpSpec] = &[];
