//! Element types.

use std::fmt;

/// The element type of a tensor value.
///
/// `F16` and `BF16` are storage types: the interpreter computes them in `f32` and rounds on
/// every write, which is what a backend without native half arithmetic does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I32,
    I64,
    Bool,
}

impl DType {
    pub const ALL: [DType; 7] = [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Size of one element in bytes (bool is one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// The type two operands of a high-level op are computed in, NumPy/PyTorch style:
    /// bool < integers < floats, and within a class the wider type wins. f16 and bf16 together
    /// promote to f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (F16, BF16) | (BF16, F16) => F32,
            (x, y) if x.is_float() && y.is_float() => {
                if x.size_bytes() >= y.size_bytes() {
                    x
                } else {
                    y
                }
            }
            (x, y) if x.is_float() && !y.is_float() => x,
            (x, y) if !x.is_float() && y.is_float() => y,
            // Two distinct integer types: the wider one.
            _ => I64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
