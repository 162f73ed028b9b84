//! ONNX control flow, inlined at import: `If` with a condition known at import inlines the
//! taken branch; `Loop` inlines its body once per iteration (the trip count known at import, or
//! conditions that fold to constants), within `recur.rs`'s unroll budget;
//! `OptionalHasElement`/`OptionalGetElement` act on plain tensors.

use super::build::{invalid, unsupported, Outs};
use super::import::{attr, Importer, NResult, Slot};
use super::proto::NodeProto;
use super::recur::*;
use super::{ImportError, NodeError};
use crate::ir::Value;
use crate::tensor::Tensor;

// ---------------------------------------------------------------------------------------------
// If

pub(super) fn if_node<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    let c = imp.input(node, 0)?;
    let cond = match imp.const_of(c) {
        Some(t) if t.numel() == 1 => t.to_f64_vec()[0] != 0.0,
        _ => return Err(NodeError::NeedsValue { input: 0, what: "the condition".into() }),
    };
    let branch = if cond { "then_branch" } else { "else_branch" };
    let g = attr(node, branch)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| NodeError::Invalid(format!("`{branch}` is missing")))?;
    if depth + 2 > imp.opts.limits.max_depth {
        return Err(NodeError::Subgraph(Box::new(ImportError::TooDeep {
            what: "subgraphs",
            depth: depth + 2,
            bound: "`Limits::max_depth`",
            limit: imp.opts.limits.max_depth,
        })));
    }
    imp.add_initializers(g);
    imp.run_nodes(&g.node, depth + 1).map_err(|e| NodeError::Subgraph(Box::new(e)))?;
    let mut outs = Vec::with_capacity(g.output.len());
    for o in &g.output {
        outs.push(Some(imp.lookup(&o.name)?));
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// Loop

fn const_bool(imp: &Importer, v: Value) -> Option<bool> {
    match imp.const_of(v) {
        Some(t) if t.numel() == 1 => Some(t.to_f64_vec()[0] != 0.0),
        _ => None,
    }
}

pub fn loop_node<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, depth: u32) -> NResult<Outs> {
    let body = graph_attr(node, "body").ok_or_else(|| NodeError::Invalid("`body` is missing".into()))?;
    let trip = match imp.ints_input(node, 0, "the trip count M")? {
        None => None,
        Some(v) if v.len() == 1 => Some(v[0]),
        Some(v) => return invalid(format!("the trip count has {} elements", v.len())),
    };
    let mut cond = match imp.opt_input(node, 1)? {
        None => true,
        Some(c) => {
            const_bool(imp, c).ok_or_else(|| NodeError::NeedsValue { input: 1, what: "the loop condition".into() })?
        }
    };
    let n_carried = node.input.len().saturating_sub(2);
    let mut carried = Vec::with_capacity(n_carried);
    for i in 0..n_carried {
        carried.push(imp.slot(node, 2 + i)?.ok_or_else(|| NodeError::Invalid(format!("input {} is required", 2 + i)))?);
    }
    if body.input.len() != 2 + n_carried {
        return invalid(format!("the body has {} inputs, expected {}", body.input.len(), 2 + n_carried));
    }
    let n_scan = body.output.len().checked_sub(1 + n_carried).ok_or_else(|| {
        NodeError::Invalid(format!("the body has {} outputs for {n_carried} loop-carried values", body.output.len()))
    })?;
    let limit = match trip {
        Some(m) if m < 0 => 0,
        Some(m) => m as u64,
        None => u64::MAX,
    };
    let mut scans: Vec<Vec<Value>> = vec![Vec::new(); n_scan];
    let mut i: u64 = 0;
    while i < limit && cond {
        check_unroll(imp, i + 1, body, "Loop")?;
        let iter = imp.constant(
            "loop_iter",
            Tensor::from_i64(&[], vec![i as i64]).map_err(|e| NodeError::Invalid(e.to_string()))?,
        );
        let c = imp
            .constant("loop_cond", Tensor::from_bool(&[], vec![cond]).map_err(|e| NodeError::Invalid(e.to_string()))?);
        let mut inputs = vec![Slot::Val(iter), Slot::Val(c)];
        inputs.extend(carried.iter().cloned());
        let outs = run_body(imp, body, &inputs, depth)?;
        let c = value_of(imp, &outs[0], "the loop condition")?;
        cond = const_bool(imp, c).ok_or_else(|| {
            NodeError::Unsupported("the loop condition is computed at run time inside the body".into())
        })?;
        carried = outs[1..1 + n_carried].to_vec();
        for (j, s) in outs[1 + n_carried..].iter().enumerate() {
            let v = value_of(imp, s, "a scan output")?;
            scans[j].push(v);
        }
        i += 1;
    }
    let mut result: Outs = carried.into_iter().map(Some).collect();
    for vs in scans {
        if vs.is_empty() {
            return unsupported("a Loop that runs no iteration and has scan outputs");
        }
        result.push(Some(Slot::Val(stack(imp, &vs, 0)?)));
    }
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Optional

pub fn optional(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let input = imp.slot(node, 0)?;
    match node.op_type.as_str() {
        "OptionalHasElement" => {
            let t = Tensor::from_bool(&[], vec![input.is_some()]).map_err(|e| NodeError::Invalid(e.to_string()))?;
            Ok(vec![Some(Slot::Val(imp.constant("has_element", t)))])
        }
        _ => match input {
            Some(s) => Ok(vec![Some(s)]),
            None => invalid("OptionalGetElement of an empty optional"),
        },
    }
}
