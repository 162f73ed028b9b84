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
    /// The prims rung after recovery: prims and opaque ops in explicit form, plus the
    /// high-level ops recovery puts back where a library kernel runs them
    /// (`crate::ops::library::recoverable`).
    Recovered,
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
            Stage::Recovered if crate::ops::library::is_library_op(node.op) => {}
            Stage::Prims | Stage::Recovered => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, DType, Shape, TensorType};
    use crate::text::parse;

    fn sample() -> Graph {
        parse(
            "blob @w: f32[2] = [1.0, 2.0]\n\
             graph g(%x: f32[2], %m: bool[2]) {\n  %c = const @w\n  %3 = add(%x, %c)\n  %4 = exp(%3)\n  return %4\n}",
        )
        .unwrap()
    }

    fn messages(g: &Graph, stage: Stage) -> Vec<String> {
        match verify(g, stage) {
            Ok(()) => Vec::new(),
            Err(e) => e.0.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_built_graph_verifies() {
        assert!(messages(&sample(), Stage::HighLevel).is_empty());
        assert!(messages(&sample(), Stage::Prims).is_empty());
    }

    #[test]
    fn forward_reference_and_wrong_type_are_both_reported() {
        let mut g = sample();
        let v3 = Value::from_u32(4);
        g.nodes[Value::from_u32(3)].args[0] = v3;
        g.nodes[v3].ty = TensorType::new(DType::F64, Shape::from_static(&[2]));
        let m = messages(&g, Stage::HighLevel);
        assert!(m.iter().any(|e| e.contains("not defined before this node")), "{m:?}");
        assert!(m.iter().any(|e| e.contains("recorded as f64[2] but infers f32[2]")), "{m:?}");
        assert!(m.len() >= 2, "errors are collected, not stopped at the first: {m:?}");
    }

    #[test]
    fn arity_attrs_and_const_blob_checked() {
        let mut g = sample();
        g.nodes[Value::from_u32(4)].args.push(Value::from_u32(0));
        g.nodes[Value::from_u32(2)].ty = TensorType::new(DType::F32, Shape::from_static(&[3]));
        let m = messages(&g, Stage::HighLevel);
        assert!(m.iter().any(|e| e.contains("exp takes 1 arguments, has 2")), "{m:?}");
        assert!(m.iter().any(|e| e.contains("its blob is f32[2]")), "{m:?}");

        let mut g = sample();
        g.nodes[Value::from_u32(4)].attrs = Attrs::resolve(
            OpKind::ConvertElementType.spec().attrs,
            vec![("dtype".into(), AttrValue::DType(DType::F32))],
        )
        .unwrap();
        let m = messages(&g, Stage::HighLevel);
        assert!(m.iter().any(|e| e.contains("not in spec order") || e.contains("unknown attribute")), "{m:?}");
    }

    #[test]
    fn names_inputs_and_outputs_checked() {
        let mut g = sample();
        g.names[Value::from_u32(3)] = Some("x".into());
        g.outputs.push(crate::ir::Output { name: "3".into(), value: Value::from_u32(2) });
        g.outputs.push(crate::ir::Output { name: "3".into(), value: Value::from_u32(99) });
        g.inputs.swap(0, 1);
        let m = messages(&g, Stage::HighLevel);
        for needle in ["value name `x` is used twice", "output name `3` is used twice", "not in the graph", "in order"]
        {
            assert!(m.iter().any(|e| e.contains(needle)), "missing {needle:?} in {m:?}");
        }
    }

    #[test]
    fn prims_rung_requires_explicit_elementwise_operands() {
        let g = parse("graph g(%x: f32[2, 3], %y: f32[3]) {\n  %2 = add(%x, %y)\n  return %2\n}").unwrap();
        assert!(messages(&g, Stage::HighLevel).is_empty());
        let m = messages(&g, Stage::Prims);
        assert!(m.iter().any(|e| e.contains("not in explicit prim form")), "{m:?}");
        let g = parse("graph g(%x: f32[2], %y: i64[2]) {\n  %2 = mul(%x, %y)\n  return %2\n}").unwrap();
        assert!(messages(&g, Stage::Prims).iter().any(|e| e.contains("argument 1 is i64")));
    }
}
