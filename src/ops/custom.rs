//! Custom kernels: operators whose shape rule and meaning are functions registered at run
//! time, and the one op, `custom`, that calls them.
//!
//! [`register`] adds a [`CustomOp`] (a name, an ONNX domain, a shape rule and a compute
//! function) to a process-wide registry. A node `%y = custom(%x, ...) {name = "relu6"}` then
//! infers its type with the registered shape rule and means what the compute function
//! returns. The registry is read when a node is made (the parser, the builder, the ONNX
//! importer) and when it runs, so the op must be registered before a graph using it is
//! parsed, imported or run, and must stay registered while plans that use it run.
//!
//! Choices, each deliberate:
//! - **One result.** A node has one result in ladder's IR, so a custom op returns one tensor.
//! - **Names are unique process-wide.** Registering a name that is registered is an error
//!   ([`CustomError::AlreadyRegistered`]); [`unregister`] first to replace an implementation.
//!   The domain is only how the ONNX importer finds the op: a node of `domain::name` imports
//!   as `custom {name}`. An empty domain registers a ladder-only op, which the importer never
//!   matches (so a registered op can never shadow a default-domain ONNX op).
//! - **Attributes.** The node's attributes travel in one string attribute, `attrs`, in the
//!   form [`CustomAttrs::encode`] writes (`alpha:f=0.5;axes:is=1,2;mode:s=clip`): ints,
//!   floats, int lists, float lists and strings, by name. The ONNX importer passes a node's
//!   attributes of those kinds through and rejects others (tensors, graphs) as unsupported.
//!   The functions receive them decoded ([`CustomAttrs`]).
//! - **Pure, never folded.** A custom op is assumed to be a pure function of its operands
//!   and attributes (dead-code elimination may drop it, common-subexpression elimination may
//!   merge two identical nodes), but it is never constant-folded, neither by `simplify` nor
//!   by the ONNX importer: a folded result would freeze the implementation registered at
//!   compile time into the graph (and into an artifact written from it).
//! - **Rung.** `custom` is an opaque op, like `matmul` and `conv`: never decomposed, allowed
//!   at every rung, and run whole: the interpreter calls the compute function, and a compiled
//!   plan runs it as a library step that calls the same function, with the kernels around it
//!   compiled as usual. It has no derivative: differentiating through it is
//!   `AdError::NoRule`.
//! - **Checked results, caught panics.** The compute function's result must have the dtype
//!   and shape the shape rule inferred (bound to the run's sizes), else the run fails with
//!   [`EvalError::Custom`]. A panic inside the shape rule or the compute function is caught
//!   at this boundary and becomes a typed error with the panic's message.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, RwLock};

use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, TensorType};
use crate::tensor::Tensor;

/// The shape and dtype rule of a custom op: its result type for operands of these types.
/// Shapes may be symbolic (`Dim` polynomials); an `Err` message becomes an [`OpError`].
pub type ShapeFn = dyn Fn(&[TensorType], &CustomAttrs) -> Result<TensorType, String> + Send + Sync;

/// The meaning of a custom op on concrete operands (dense, row-major): its one result.
pub type ComputeFn = dyn Fn(&[Tensor], &CustomAttrs) -> Result<Tensor, String> + Send + Sync;

/// A custom operator's registration.
#[derive(Clone)]
pub struct CustomOp {
    /// The name a `custom` node refers to (`{name = "relu6"}`), and the ONNX op type the
    /// importer matches in `domain`. Letters, digits, `_`, `.` and `-`.
    pub name: String,
    /// The ONNX domain whose `name` nodes import as this op (`com.example`); empty for an op
    /// only ladder's own frontends use. Never the default domain (`ai.onnx`).
    pub domain: String,
    /// The shape and dtype rule.
    pub shape: Arc<ShapeFn>,
    /// The meaning.
    pub compute: Arc<ComputeFn>,
}

impl std::fmt::Debug for CustomOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomOp").field("name", &self.name).field("domain", &self.domain).finish_non_exhaustive()
    }
}

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CustomError {
    /// The name is registered already.
    #[error("a custom op named `{0}` is registered already")]
    AlreadyRegistered(String),
    /// The name or domain cannot be used.
    #[error("custom op `{name}`: {problem}")]
    BadName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
}

fn registry() -> &'static RwLock<HashMap<String, CustomOp>> {
    static REGISTRY: std::sync::OnceLock<RwLock<HashMap<String, CustomOp>>> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Registers `op` for the whole process; see the module docs.
pub fn register(op: CustomOp) -> Result<(), CustomError> {
    let bad = |problem: &str| CustomError::BadName { name: op.name.clone(), problem: problem.into() };
    if op.name.is_empty() || !op.name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(bad("a name is letters, digits, `_`, `.` and `-`"));
    }
    if op.domain == "ai.onnx" || op.domain.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("the domain must be a custom ONNX domain (or empty)"));
    }
    // Only this module holds the lock, never across a call out, so it is never poisoned.
    let mut ops = registry().write().unwrap_or_else(|e| e.into_inner());
    if ops.contains_key(&op.name) {
        return Err(CustomError::AlreadyRegistered(op.name));
    }
    ops.insert(op.name.clone(), op);
    Ok(())
}

/// Removes the op named `name`; whether it was registered. Graphs that use it no longer
/// parse, import or run.
pub fn unregister(name: &str) -> bool {
    registry().write().unwrap_or_else(|e| e.into_inner()).remove(name).is_some()
}

/// The op registered as `name`.
pub fn lookup(name: &str) -> Option<CustomOp> {
    registry().read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
}

/// The name of the op registered for ONNX nodes of `domain::op_type` (never for the default
/// domain).
pub fn lookup_onnx(domain: &str, op_type: &str) -> Option<String> {
    if domain.is_empty() || domain == "ai.onnx" {
        return None;
    }
    lookup(op_type).filter(|op| op.domain == domain).map(|op| op.name)
}

/// One attribute value of a custom node.
#[derive(Clone, Debug, PartialEq)]
pub enum CustomAttr {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
    /// A string.
    Str(String),
}

/// A custom node's attributes by name, decoded from its `attrs` string.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CustomAttrs(pub BTreeMap<String, CustomAttr>);

impl CustomAttrs {
    /// The attribute `name`, if the node has it.
    pub fn get(&self, name: &str) -> Option<&CustomAttr> {
        self.0.get(name)
    }

    /// The int attribute `name`.
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(CustomAttr::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// The float attribute `name` (an int attribute widens).
    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(CustomAttr::Float(v)) => Some(*v),
            Some(CustomAttr::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    /// The text form of the `attrs` attribute: `name:kind=value` entries joined by `;`, in
    /// name order; kinds `i`, `f`, `is`, `fs`, `s`; list items joined by `,`; in a string,
    /// `%` and `;` are written `%25` and `%3B`. Floats are written so they read back exactly
    /// (NaN payloads aside). A name must be letters, digits, `_`, `.` or `-`.
    pub fn encode(&self) -> Result<String, String> {
        let mut out = String::new();
        for (name, value) in &self.0 {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
                return Err(format!("attribute name `{name}` is not letters, digits, `_`, `.` and `-`"));
            }
            if !out.is_empty() {
                out.push(';');
            }
            let list = |items: Vec<String>| items.join(",");
            // Writing into a `String` cannot fail.
            let _ = match value {
                CustomAttr::Int(v) => write!(out, "{name}:i={v}"),
                CustomAttr::Float(v) => write!(out, "{name}:f={v:?}"),
                CustomAttr::Ints(v) => write!(out, "{name}:is={}", list(v.iter().map(|x| x.to_string()).collect())),
                CustomAttr::Floats(v) => {
                    write!(out, "{name}:fs={}", list(v.iter().map(|x| format!("{x:?}")).collect()))
                }
                CustomAttr::Str(s) => write!(out, "{name}:s={}", s.replace('%', "%25").replace(';', "%3B")),
            };
        }
        Ok(out)
    }

    /// Reads what [`CustomAttrs::encode`] writes.
    pub fn decode(text: &str) -> Result<CustomAttrs, String> {
        let mut map = BTreeMap::new();
        for entry in text.split(';').filter(|e| !e.is_empty()) {
            let bad = || format!("attribute entry `{entry}` is not `name:kind=value`");
            let (head, value) = entry.split_once('=').ok_or_else(bad)?;
            let (name, kind) = head.split_once(':').ok_or_else(bad)?;
            let int = |s: &str| s.trim().parse::<i64>().map_err(|_| format!("attribute `{name}`: `{s}` is not an int"));
            let float =
                |s: &str| s.trim().parse::<f64>().map_err(|_| format!("attribute `{name}`: `{s}` is not a float"));
            let items = |s: &str| if s.is_empty() { Vec::new() } else { s.split(',').map(str::to_string).collect() };
            let attr = match kind {
                "i" => CustomAttr::Int(int(value)?),
                "f" => CustomAttr::Float(float(value)?),
                "is" => CustomAttr::Ints(items(value).iter().map(|s| int(s)).collect::<Result<_, _>>()?),
                "fs" => CustomAttr::Floats(items(value).iter().map(|s| float(s)).collect::<Result<_, _>>()?),
                "s" => CustomAttr::Str(value.replace("%3B", ";").replace("%25", "%")),
                _ => return Err(format!("attribute `{name}`: unknown kind `{kind}` (i, f, is, fs, s)")),
            };
            if map.insert(name.to_string(), attr).is_some() {
                return Err(format!("attribute `{name}` is given twice"));
            }
        }
        Ok(CustomAttrs(map))
    }
}

const ATTRS: &[AttrSpec] =
    &[AttrSpec::required("name", AttrKind::Str), AttrSpec::optional("attrs", AttrKind::Str, AttrDefault::Str(""))];

pub static SPECS: &[OpSpec] = &[OpSpec::plain(
    OpKind::Custom,
    "custom",
    Rung::Opaque,
    Arity::AtLeast(0),
    ATTRS,
    infer_custom,
    eval_custom,
    "a registered custom kernel: its shape rule and compute function (ops::custom)",
)];

/// The message of a caught panic.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => format!("panicked: {s}"),
        Err(payload) => match payload.downcast::<&str>() {
            Ok(s) => format!("panicked: {s}"),
            Err(_) => "panicked".to_string(),
        },
    }
}

fn infer_custom(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let name = attrs.str("name");
    let op = lookup(name).ok_or_else(|| OpError::UnknownCustom { name: name.to_string() })?;
    let fail = |problem: String| OpError::Custom { name: name.to_string(), problem };
    let decoded = CustomAttrs::decode(attrs.str("attrs")).map_err(fail)?;
    let types: Vec<TensorType> = args.iter().map(|&t| t.clone()).collect();
    catch_unwind(AssertUnwindSafe(|| (op.shape)(&types, &decoded)))
        .map_err(|p| fail(format!("shape rule {}", panic_message(p))))?
        .map_err(fail)
}

fn eval_custom(_: OpKind, ctx: &mut EvalCtx, attrs: &Attrs, args: &[View], ty: &TensorType) -> Result<View, EvalError> {
    let name = attrs.str("name");
    let fail = |problem: String| EvalError::Custom { name: name.to_string(), problem };
    let op = lookup(name).ok_or_else(|| fail("is not registered".into()))?;
    let decoded = CustomAttrs::decode(attrs.str("attrs")).map_err(fail)?;
    let operands: Vec<Tensor> = args.iter().map(View::to_tensor).collect();
    let result = catch_unwind(AssertUnwindSafe(|| (op.compute)(&operands, &decoded)))
        .map_err(|p| fail(format!("compute function {}", panic_message(p))))?
        .map_err(fail)?;
    let expected: Option<Vec<usize>> = match &ctx.out_shape {
        Some(s) => Some(s.clone()),
        None => ty.shape.as_static().map(|d| d.iter().map(|&x| x as usize).collect()),
    };
    let shape_ok = expected.as_deref().is_none_or(|s| s == result.shape());
    if result.dtype() != ty.dtype || !shape_ok {
        return Err(fail(format!(
            "compute function returned {}{:?}, the shape rule says {}{}",
            result.dtype(),
            result.shape(),
            ty.dtype,
            expected.map_or_else(|| ty.shape.to_string(), |s| format!("{s:?}")),
        )));
    }
    Ok(View::from_tensor(&result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_through_their_text() {
        let mut map = BTreeMap::new();
        map.insert("alpha".to_string(), CustomAttr::Float(0.1));
        map.insert("axes".to_string(), CustomAttr::Ints(vec![1, -2]));
        map.insert("empty".to_string(), CustomAttr::Floats(vec![]));
        map.insert("k".to_string(), CustomAttr::Int(-7));
        map.insert("mode".to_string(), CustomAttr::Str("a;b%3B,c=d".into()));
        map.insert("scales".to_string(), CustomAttr::Floats(vec![1.0, f64::INFINITY, -0.0, 1e300]));
        let attrs = CustomAttrs(map);
        let text = attrs.encode().unwrap();
        assert_eq!(CustomAttrs::decode(&text).unwrap(), attrs, "{text}");
        assert!(CustomAttrs::decode("x:q=1").is_err());
        assert!(CustomAttrs::decode("x:i=1.5").is_err());
        assert!(CustomAttrs::decode("x:i=1;x:i=2").is_err());
        assert!(CustomAttrs::decode("novalue").is_err());
    }
}
