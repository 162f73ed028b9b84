//! One policy for what input may make ladder read, build, allocate and compute.
//!
//! [`Limits`] is shared by everything that takes input from outside: the text parser
//! (`text::parse_with`), the ONNX importer (`ImportOptions::limits`), the interpreter
//! (`interp::Options::from_limits`) and the runtimes (`CompileOptions::limits`). Each limit
//! reached is a typed error that names the field (`Limits::max_nodes` ...), so a caller knows
//! which one to raise; the CLI takes `--untrusted` and `--limit NAME=VALUE` for the same fields.
//!
//! Two presets: [`Limits::default`] admits real models (a 2 GiB protobuf with external data,
//! a 4 GiB run) and nothing unbounded; [`Limits::untrusted`] is for models from people the
//! caller does not control, and keeps every refusal within about a second and a few hundred
//! MiB on a small machine.
//!
//! Some bounds are structural rather than resources, and fixed: a size expression's terms,
//! degree and nodes (`ir::shape::MAX_TERMS` ..., [`crate::ir::DimError::TooComplex`]), a
//! parenthesised size nested at most `text::MAX_DIM_NESTING` deep, protobuf messages at most 80
//! deep. They exist so that no input can drive recursion or expression growth without bound;
//! no real model comes near them.

use std::fmt;

/// Bounds on what one input may make ladder read, build, allocate and compute.
///
/// Every field is an upper bound, checked before the work or the allocation it bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest model file, and for ONNX the total of the file, its decoded form and all tensor
    /// data it reads (external data included), in bytes.
    pub max_file_bytes: u64,
    /// Largest single tensor read from input (an ONNX initializer, constant or attribute
    /// tensor, a text blob, a `.npy` input), in bytes of data.
    pub max_tensor_bytes: u64,
    /// Most nodes a model may build: ONNX nodes over the main graph, subgraphs and functions,
    /// and the nodes built when loops unroll; text nodes.
    pub max_nodes: u64,
    /// Deepest nesting of ONNX subgraphs (the main graph is depth 1).
    pub max_depth: u32,
    /// Largest value computed at import time (shape arithmetic folded into constants), in
    /// elements.
    pub max_fold_elements: u64,
    /// Largest value the interpreter computes, in elements.
    pub max_elements: u64,
    /// Most memory one run may hold at once, in bytes: the CPU runtime's arena of temporaries
    /// and the outputs it allocates (checked before anything is allocated), the interpreter's
    /// live values.
    pub max_run_bytes: u64,
    /// The interpreter's budget of work for one run: one unit per element an op touches, one
    /// per multiply-add of a matmul or convolution (about 10⁸ units a second).
    pub fuel: u64,
}

impl Default for Limits {
    /// Generous bounds that admit real models: 16 GiB of file and tensor data, 4 GiB per
    /// tensor, 2²⁰ nodes, subgraphs 8 deep, 4 GiB per run, 2²⁸ elements per interpreted value,
    /// 2⁴⁰ units of interpreter fuel.
    fn default() -> Limits {
        Limits {
            max_file_bytes: 16 << 30,
            max_tensor_bytes: 4 << 30,
            max_nodes: 1 << 20,
            max_depth: 8,
            max_fold_elements: 1 << 16,
            max_elements: 1 << 28,
            max_run_bytes: 4 << 30,
            fuel: 1 << 40,
        }
    }
}

impl Limits {
    /// For input from people the caller does not control: 256 MiB of file and tensor data,
    /// 64 MiB per tensor, 2¹⁶ nodes, subgraphs 4 deep, 1 GiB per run, 2²⁴ elements per
    /// interpreted value, 2²⁷ units of interpreter fuel (about a second).
    pub fn untrusted() -> Limits {
        Limits {
            max_file_bytes: 256 << 20,
            max_tensor_bytes: 64 << 20,
            max_nodes: 1 << 16,
            max_depth: 4,
            max_fold_elements: 1 << 14,
            max_elements: 1 << 24,
            max_run_bytes: 1 << 30,
            fuel: 1 << 27,
        }
    }

    /// The fields by name, as `--limit NAME=VALUE` spells them.
    pub const NAMES: &'static [&'static str] = &[
        "max_file_bytes",
        "max_tensor_bytes",
        "max_nodes",
        "max_depth",
        "max_fold_elements",
        "max_elements",
        "max_run_bytes",
        "fuel",
    ];

    /// Sets the field `name` (one of [`Limits::NAMES`]) to `value`.
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), UnknownLimit> {
        match name {
            "max_file_bytes" => self.max_file_bytes = value,
            "max_tensor_bytes" => self.max_tensor_bytes = value,
            "max_nodes" => self.max_nodes = value,
            "max_depth" => self.max_depth = u32::try_from(value).unwrap_or(u32::MAX),
            "max_fold_elements" => self.max_fold_elements = value,
            "max_elements" => self.max_elements = value,
            "max_run_bytes" => self.max_run_bytes = value,
            "fuel" => self.fuel = value,
            _ => return Err(UnknownLimit(name.to_string())),
        }
        Ok(())
    }

    /// The value of the field `name` (one of [`Limits::NAMES`]).
    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "max_file_bytes" => self.max_file_bytes,
            "max_tensor_bytes" => self.max_tensor_bytes,
            "max_nodes" => self.max_nodes,
            "max_depth" => u64::from(self.max_depth),
            "max_fold_elements" => self.max_fold_elements,
            "max_elements" => self.max_elements,
            "max_run_bytes" => self.max_run_bytes,
            "fuel" => self.fuel,
            _ => return None,
        })
    }
}

/// A name that is not a field of [`Limits`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownLimit(pub String);

impl fmt::Display for UnknownLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no limit is called `{}` (the limits: {})", self.0, Limits::NAMES.join(", "))
    }
}

impl std::error::Error for UnknownLimit {}

/// How an error names a limit reached: "`Limits::NAME` = VALUE".
pub(crate) fn named(name: &str, value: u64) -> String {
    format!("`Limits::{name}` = {value}")
}

#[cfg(test)]
mod tests {
    use super::Limits;

    #[test]
    fn every_name_sets_and_gets_its_own_field() {
        for (i, name) in Limits::NAMES.iter().enumerate() {
            let mut l = Limits::default();
            l.set(name, 1000 + i as u64).unwrap();
            assert_eq!(l.get(name), Some(1000 + i as u64), "{name}");
            for other in Limits::NAMES.iter().filter(|o| *o != name) {
                assert_eq!(l.get(other), Limits::default().get(other), "setting {name} changed {other}");
            }
        }
        assert!(Limits::default().set("max_bytes", 1).is_err());
        assert_eq!(Limits::default().get("nope"), None);
    }

    #[test]
    fn untrusted_is_tighter_everywhere() {
        let (d, u) = (Limits::default(), Limits::untrusted());
        for name in Limits::NAMES {
            assert!(u.get(name) < d.get(name), "{name}");
        }
    }
}
