//! Element types.
//!
//! Thirteen dtypes: four floats (f32, f64, f16, bf16), eight integers (signed i8, i16, i32,
//! i64 and unsigned u8, u16, u32, u64) and bool. Integer arithmetic wraps in the dtype's own
//! width; the interpreter stores every integer widened to an i64 (a u64 as its bit pattern),
//! so ops whose meaning depends on signedness (compare, div, rem, max/min, conversion to
//! float) ask the dtype.

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
    I8,
    I16,
    U8,
    U16,
    U32,
    U64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Any integer type, signed or unsigned.
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned()
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The width in bits of an integer type.
    pub fn int_bits(self) -> Option<u32> {
        Some(match self {
            DType::I8 | DType::U8 => 8,
            DType::I16 | DType::U16 => 16,
            DType::I32 | DType::U32 => 32,
            DType::I64 | DType::U64 => 64,
            _ => return None,
        })
    }

    /// The smallest and largest value of an integer type.
    pub fn int_range(self) -> Option<(i128, i128)> {
        let bits = self.int_bits()?;
        Some(if self.is_unsigned() {
            (0, (1i128 << bits) - 1)
        } else {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        })
    }

    /// The signed integer type of `bits` bits.
    fn signed_of(bits: u32) -> DType {
        match bits {
            8 => DType::I8,
            16 => DType::I16,
            32 => DType::I32,
            _ => DType::I64,
        }
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Size of one element in bytes (bool is one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::Bool | DType::I8 | DType::U8 => 1,
        }
    }

    /// The type two operands of a high-level op are computed in, NumPy/PyTorch style:
    /// bool < integers < floats, and within a class the wider type wins. f16 and bf16 together
    /// promote to f32. Two integers of one signedness promote to the wider; a signed and an
    /// unsigned one promote to the narrowest signed type holding both ranges (u8+i8 → i16,
    /// u16+i16 → i32, u32+i32 → i64), except that u64 with any signed type is i64 (NumPy
    /// gives f64 there; ladder keeps integer arithmetic, so u64 values above i64::MAX wrap).
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
            (x, y) => {
                let (bx, by) = (x.int_bits().unwrap_or(64), y.int_bits().unwrap_or(64));
                if x.is_unsigned() == y.is_unsigned() {
                    if bx >= by {
                        x
                    } else {
                        y
                    }
                } else {
                    let (s, u) = if x.is_unsigned() { (by, bx) } else { (bx, by) };
                    if s > u {
                        DType::signed_of(s)
                    } else {
                        DType::signed_of((2 * u).min(64))
                    }
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
