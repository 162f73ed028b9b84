//! The verifier: checks a graph's invariants from scratch and reports every violation.
//!
//! Invariants checked:
//! 1. **SSA and order**: every argument refers to a node earlier in the graph.
//! 2. **Sources**: `input` nodes are exactly the graph's inputs, in order, each with a unique,
//!    non-empty name and an `index` attribute equal to its position; `const` nodes name a
//!    blob that exists, and their type is the blob's.
//! 3. **Arity and attributes**: each node's argument count fits its op, and its attributes
//!    are exactly its op's spec (names, kinds, order, defaults filled).
//! 4. **Types**: each node's stored type equals the type its op infers from its arguments.
//! 5. **Names**: value names are unique; output names are unique and non-empty; every output
//!    refers to a value of the graph.
//! 6. **Blobs**: blob names are unique, and each blob's data length matches its shape.
//! 7. **Rung** (when a stage is given): after functionalization no node mutates an argument
//!    (views may remain: without mutation their aliasing cannot be observed); at the prims rung every node is a source, a prim or an opaque op, in
//!    explicit form (operands of equal shape and dtype where the prim requires it).

use std::collections::HashSet;
use std::fmt;

use super::{Attrs, Graph, Value};
use crate::ops::{check_explicit, infer, OpKind, Rung};

/// Which rung's constraints to check on top of the basic invariants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Any high-level graph: views and in-place ops allowed.
    HighLevel,
    /// Pure SSA: no node mutates.
    Functional,
    /// Only prims and opaque ops, in explicit form.
    Prims,
}

/// One violated invariant, at a value where there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    pub value: Option<String>,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{v}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// All violations found (never empty).
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyErrors(pub Vec<VerifyError>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the graph is invalid ({} problems):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyErrors {}

/// Checks `g` against every invariant listed in this module's docs.
pub fn verify(g: &Graph, stage: Stage) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    let mut err = |v: Option<Value>, message: String| {
        errors.push(VerifyError { value: v.map(|v| g.display_value(v)), message });
    };

    // Blobs.
    let mut blob_names = HashSet::new();
    for (_, blob) in g.blobs() {
        if !blob_names.insert(blob.name.as_str()) {
            err(None, format!("blob name `{}` is used twice", blob.name));
        }
    }

    // Names.
    let mut names = HashSet::new();
    for v in g.values() {
        if let Some(n) = g.name_of(v) {
            if !names.insert(n) {
                err(Some(v), format!("value name `{n}` is used twice"));
            }
        }
    }

    // Inputs.
    let mut input_pos = 0usize;
    for (v, node) in g.nodes() {
        for (i, &a) in node.args.iter().enumerate() {
            if a >= v {
                err(Some(v), format!("argument {i} refers to {a}, which is not defined before this node"));
            }
        }
        let spec = node.op.spec();
        match node.op {
            OpKind::Input => {
                if g.inputs().get(input_pos) != Some(&v) {
                    err(Some(v), "input node is not listed, in order, among the graph's inputs".into());
                }
                if node.attrs.get("index") != Some(&super::AttrValue::Int(input_pos as i64)) {
                    err(Some(v), format!("input's index attribute should be {input_pos}"));
                }
                if g.name_of(v).is_none_or(str::is_empty) {
                    err(Some(v), "graph inputs must be named".into());
                }
                input_pos += 1;
                continue;
            }
            OpKind::Const => {
                match g.const_blob(v) {
                    None => err(Some(v), "const refers to a blob that does not exist".into()),
                    Some(b) => {
                        let t = &g.blob(b).tensor;
                        let dims: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
                        if node.ty.dtype != t.dtype() || node.ty.shape.as_static() != Some(dims) {
                            err(
                                Some(v),
                                format!("const has type {} but its blob is {}{:?}", node.ty, t.dtype(), t.shape()),
                            );
                        }
                    }
                }
                continue;
            }
            _ => {}
        }
        if !spec.arity.accepts(node.args.len()) {
            err(Some(v), format!("{} takes {} arguments, has {}", spec.name, spec.arity, node.args.len()));
            continue;
        }
        let given: Vec<(String, super::AttrValue)> =
            node.attrs.iter().map(|(n, x)| (n.to_string(), x.clone())).collect();
        match Attrs::resolve(spec.attrs, given) {
            Ok(resolved) if resolved == node.attrs => {}
            Ok(_) => err(Some(v), format!("{}'s attributes are not in spec order with defaults filled", spec.name)),
            Err(e) => err(Some(v), format!("{}: {e}", spec.name)),
        }
        if node.args.iter().any(|&a| a >= v) {
            continue;
        }
        let arg_types: Vec<_> = node.args.iter().map(|&a| g.ty(a)).collect();
        match infer(node.op, &node.attrs, &arg_types) {
            Ok(ty) if ty == node.ty => {}
            Ok(ty) => err(Some(v), format!("{} is recorded as {} but infers {ty}", spec.name, node.ty)),
            Err(e) => err(Some(v), format!("{}: {e}", spec.name)),
        }
        match stage {
            Stage::HighLevel => {}
            Stage::Functional => {
                if spec.mutates {
                    err(Some(v), format!("{} mutates its argument, which a functional graph may not", spec.name));
                }
            }
            Stage::Prims => {
                if !matches!(spec.rung, Rung::Prim | Rung::Opaque) {
                    err(
                        Some(v),
                        format!(
                            "{} is a {} op; the prims rung allows prims and opaque ops only",
                            spec.name,
                            spec.rung.name()
                        ),
                    );
                } else if let Err(e) = check_explicit(node.op, &node.attrs, &arg_types) {
                    err(Some(v), format!("{}: {e}", spec.name));
                }
            }
        }
    }
    if input_pos != g.inputs().len() {
        err(None, format!("the graph lists {} inputs but has {input_pos} input nodes", g.inputs().len()));
    }

    // Outputs.
    let mut out_names = HashSet::new();
    for o in g.outputs() {
        if g.get(o.value).is_none() {
            err(None, format!("output `{}` refers to {}, which is not in the graph", o.name, o.value));
        }
        if o.name.is_empty() {
            err(None, "an output has an empty name".into());
        }
        if !out_names.insert(o.name.as_str()) {
            err(None, format!("output name `{}` is used twice", o.name));
        }
    }

    if errors.is_empty() {
        Ok(())
    } else {
        Err(VerifyErrors(errors))
    }
}
