//! Operator attributes: typed values checked against each operator's attribute spec.
//!
//! A node's attributes are stored in the order of its op's spec with every default filled in,
//! so two nodes with the same meaning compare equal however their text was written. The text
//! form prints only the attributes that differ from their default.

use std::fmt;

use smallvec::SmallVec;

use super::{DType, Dim, SizeExpr};

/// The kind an attribute must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    Ints,
    /// A shape-like list whose entries are dims (possibly symbolic) or `-1` ("infer").
    Dims,
    /// A signed integer that may be a size expression (`seq`, `seq - 1`): a slice bound.
    Size,
    DType,
    Str,
}

impl AttrKind {
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Int => "int",
            AttrKind::Float => "float",
            AttrKind::Bool => "bool",
            AttrKind::Ints => "int list",
            AttrKind::Dims => "dim list",
            AttrKind::Size => "size",
            AttrKind::DType => "dtype",
            AttrKind::Str => "string",
        }
    }
}

/// An attribute value.
#[derive(Clone, Debug)]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    /// `None` is `-1`: a dim the op infers (reshape/view).
    Dims(Vec<Option<Dim>>),
    /// Always symbolic: a constant size is an `Int`.
    Size(SizeExpr),
    DType(DType),
    Str(String),
}

impl PartialEq for AttrValue {
    fn eq(&self, other: &AttrValue) -> bool {
        use AttrValue::*;
        match (self, other) {
            (Int(a), Int(b)) => a == b,
            // Bitwise, so that NaN attributes round-trip and compare equal to themselves.
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Bool(a), Bool(b)) => a == b,
            (Ints(a), Ints(b)) => a == b,
            (Dims(a), Dims(b)) => a == b,
            (Size(a), Size(b)) => a == b,
            (DType(a), DType(b)) => a == b,
            (Str(a), Str(b)) => a == b,
            _ => false,
        }
    }
}

impl AttrValue {
    pub fn kind(&self) -> AttrKind {
        match self {
            AttrValue::Int(_) => AttrKind::Int,
            AttrValue::Float(_) => AttrKind::Float,
            AttrValue::Bool(_) => AttrKind::Bool,
            AttrValue::Ints(_) => AttrKind::Ints,
            AttrValue::Dims(_) => AttrKind::Dims,
            AttrValue::Size(_) => AttrKind::Size,
            AttrValue::DType(_) => AttrKind::DType,
            AttrValue::Str(_) => AttrKind::Str,
        }
    }
}

/// Writes a float so that parsing it back gives the same bits (NaN payloads included).
pub fn write_float(f: &mut dyn fmt::Write, x: f64) -> fmt::Result {
    if x.is_nan() {
        let canonical = f64::NAN.to_bits();
        if x.to_bits() == canonical {
            f.write_str("nan")
        } else {
            write!(f, "nan:0x{:016x}", x.to_bits())
        }
    } else if x.is_infinite() {
        f.write_str(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        // `{:?}` is the shortest text that parses back to the same value, with an exponent
        // for very large or small magnitudes.
        write!(f, "{x:?}")
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write_float(f, *v),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            AttrValue::Dims(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match x {
                        Some(d) => write!(f, "{d}")?,
                        None => f.write_str("-1")?,
                    }
                }
                f.write_str("]")
            }
            AttrValue::Size(e) => write!(f, "{e}"),
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The default of an attribute, as a constant that can live in a static spec table.
#[derive(Clone, Copy, Debug)]
pub enum AttrDefault {
    /// The attribute must be given.
    Required,
    Int(i64),
    Float(f64),
    Bool(bool),
    /// An empty int or dim list.
    Empty,
    /// A non-empty int list (`stride = [1, 1]`).
    Ints(&'static [i64]),
    DType(DType),
    Str(&'static str),
}

/// One attribute an op accepts.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    pub default: AttrDefault,
}

impl AttrSpec {
    pub const fn required(name: &'static str, kind: AttrKind) -> AttrSpec {
        AttrSpec { name, kind, default: AttrDefault::Required }
    }

    pub const fn optional(name: &'static str, kind: AttrKind, default: AttrDefault) -> AttrSpec {
        AttrSpec { name, kind, default }
    }

    /// The default value, or `None` when the attribute is required.
    pub fn default_value(&self) -> Option<AttrValue> {
        Some(match self.default {
            AttrDefault::Required => return None,
            AttrDefault::Int(v) => AttrValue::Int(v),
            AttrDefault::Float(v) => AttrValue::Float(v),
            AttrDefault::Bool(v) => AttrValue::Bool(v),
            AttrDefault::Empty => match self.kind {
                AttrKind::Dims => AttrValue::Dims(Vec::new()),
                _ => AttrValue::Ints(Vec::new()),
            },
            AttrDefault::Ints(v) => AttrValue::Ints(v.to_vec()),
            AttrDefault::DType(d) => AttrValue::DType(d),
            AttrDefault::Str(s) => AttrValue::Str(s.to_string()),
        })
    }
}

/// Why a set of attributes does not fit an op's spec.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AttrError {
    #[error("unknown attribute `{name}` (this op accepts: {accepted})")]
    Unknown { name: String, accepted: String },
    #[error("attribute `{name}` is required")]
    Missing { name: &'static str },
    #[error("attribute `{name}` must be a {expected}, found a {found}")]
    WrongKind { name: &'static str, expected: &'static str, found: &'static str },
    #[error("attribute `{name}` is given twice")]
    Duplicate { name: String },
}

/// A node's attributes, in spec order, defaults filled in.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Attrs(SmallVec<[(&'static str, AttrValue); 2]>);

impl Attrs {
    pub fn empty() -> Attrs {
        Attrs(SmallVec::new())
    }

    /// Checks `given` against `spec`, fills defaults, and orders the result like the spec.
    pub fn resolve(spec: &[AttrSpec], given: Vec<(String, AttrValue)>) -> Result<Attrs, AttrError> {
        let mut slots: Vec<Option<AttrValue>> = vec![None; spec.len()];
        for (name, value) in given {
            let Some(i) = spec.iter().position(|s| s.name == name) else {
                let accepted = if spec.is_empty() {
                    "none".to_string()
                } else {
                    spec.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                };
                return Err(AttrError::Unknown { name, accepted });
            };
            if slots[i].is_some() {
                return Err(AttrError::Duplicate { name });
            }
            let value = coerce(spec[i], value)?;
            slots[i] = Some(value);
        }
        let mut out = SmallVec::new();
        for (s, slot) in spec.iter().zip(slots) {
            let v = match slot {
                Some(v) => v,
                None => s.default_value().ok_or(AttrError::Missing { name: s.name })?,
            };
            out.push((s.name, v));
        }
        Ok(Attrs(out))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &AttrValue)> {
        self.0.iter().map(|(n, v)| (*n, v))
    }

    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    // Typed accessors. Attributes were checked against the op's spec when the node was made,
    // so a missing or mistyped attribute here is a bug in the op's own code, not bad input.

    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Some(AttrValue::Int(v)) => *v,
            other => bug(name, "int", other),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            Some(AttrValue::Float(v)) => *v,
            other => bug(name, "float", other),
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.get(name) {
            Some(AttrValue::Bool(v)) => *v,
            other => bug(name, "bool", other),
        }
    }

    pub fn ints(&self, name: &str) -> &[i64] {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => v,
            other => bug(name, "ints", other),
        }
    }

    pub fn dims(&self, name: &str) -> &[Option<Dim>] {
        match self.get(name) {
            Some(AttrValue::Dims(v)) => v,
            other => bug(name, "dims", other),
        }
    }

    /// A `Size` attribute (its constants are stored as ints).
    pub fn size(&self, name: &str) -> SizeExpr {
        match self.get(name) {
            Some(AttrValue::Int(v)) => SizeExpr::constant(*v),
            Some(AttrValue::Size(e)) => e.clone(),
            other => bug(name, "size", other),
        }
    }

    pub fn dtype(&self, name: &str) -> DType {
        match self.get(name) {
            Some(AttrValue::DType(v)) => *v,
            other => bug(name, "dtype", other),
        }
    }

    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Some(AttrValue::Str(v)) => v,
            other => bug(name, "str", other),
        }
    }
}

fn bug(name: &str, kind: &str, found: Option<&AttrValue>) -> ! {
    panic!("op code read attribute `{name}` as {kind}, but the node holds {found:?}")
}

/// Widens a value to the kind the spec wants where that is lossless and unambiguous:
/// an int where a float is wanted, an int list where a dim list is wanted.
fn coerce(spec: AttrSpec, value: AttrValue) -> Result<AttrValue, AttrError> {
    let value = match (spec.kind, value) {
        (AttrKind::Float, AttrValue::Int(v)) => AttrValue::Float(v as f64),
        (AttrKind::Dims, AttrValue::Ints(v)) => {
            let mut dims = Vec::with_capacity(v.len());
            for x in v {
                dims.push(match x {
                    -1 => None,
                    x if x >= 0 => Some(Dim::new(x as u64)),
                    _ => {
                        return Err(AttrError::WrongKind {
                            name: spec.name,
                            expected: "dim list (entries >= 0 or -1)",
                            found: "negative int",
                        })
                    }
                });
            }
            AttrValue::Dims(dims)
        }
        (AttrKind::Ints, AttrValue::Dims(v)) if v.is_empty() => AttrValue::Ints(Vec::new()),
        (AttrKind::Dims, AttrValue::Dims(v)) => AttrValue::Dims(v),
        // A size is stored as an int when it is constant, so a node compares equal however
        // its bound was written.
        (AttrKind::Size, AttrValue::Size(e)) => match e.as_const() {
            Some(c) => AttrValue::Int(c),
            None => AttrValue::Size(e),
        },
        (AttrKind::Size, AttrValue::Int(v)) => return Ok(AttrValue::Int(v)),
        (_, v) => v,
    };
    if value.kind() != spec.kind {
        return Err(AttrError::WrongKind { name: spec.name, expected: spec.kind.name(), found: value.kind().name() });
    }
    Ok(value)
}
