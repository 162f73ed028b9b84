//! Decomposition: a functional graph → a graph of prims and opaque ops in explicit form.
//!
//! High-level nodes are replaced by their decomposition (`crate::decomp::rule`); prims that
//! a frontend wrote in high-level form (broadcasting operands, mixed dtypes, a `-1` in a
//! reshape) get their broadcasts and conversions spelled out. Every replacement must have
//! exactly the original node's type. Deliberately not done here: any simplification of
//! what the decompositions emit (that is `simplify`'s job), and in-place ops, which
//! `functionalize` removes first.

use super::rewrite::Rewriter;
use crate::decomp::{rule, DecompError, Emitter};
use crate::ir::{AttrValue, Graph, GraphError, Value};
use crate::ops::{OpKind, Rung};

/// Why a graph could not be decomposed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DecomposeError {
    #[error("{value} = {op}: {error}")]
    Node { value: String, op: &'static str, error: DecompError },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Lowers every node of `g` to prims; see the module docs.
pub fn decompose(g: &Graph) -> Result<Graph, DecomposeError> {
    decompose_keeping(g, &[])
}

/// [`decompose`], but the high-level ops in `keep` stay whole (native mode keeps the ops a
/// library kernel runs whole: `crate::ops::library::kept`). Their operands are already in
/// explicit form (their shape rules take no broadcasting or promotion), so the result is a
/// graph of the `Recovered` rung.
pub fn decompose_keeping(g: &Graph, keep: &[OpKind]) -> Result<Graph, DecomposeError> {
    let mut rw = Rewriter::new(g);
    for (v, node) in g.nodes() {
        if matches!(node.op, OpKind::Input | OpKind::Const) {
            rw.copy(v)?;
            continue;
        }
        let fail = |error| DecomposeError::Node { value: g.display_value(v), op: node.op.name(), error };
        if node.op.mutates() {
            return Err(fail(DecompError::Unsupported {
                op: node.op.name(),
                reason: "in-place ops must be functionalized before decomposition".into(),
            }));
        }
        let args: Vec<Value> = node.args.iter().map(|&a| rw.get(a)).collect();
        let mut e = Emitter { g: &mut rw.new, keep };
        let new = match node.op.rung() {
            Rung::High if keep.contains(&node.op) => rw.new.add_node(node.op, &args, node.attrs.clone())?,
            Rung::High => {
                let f = rule(node.op).ok_or(DecompError::NoRule { op: node.op.name() }).map_err(fail)?;
                f(&mut e, node, &args).map_err(fail)?
            }
            _ => explicit(&mut e, node, &args).map_err(fail)?,
        };
        let got = rw.ty(new);
        if *got != node.ty {
            return Err(fail(DecompError::TypeMismatch {
                op: node.op.name(),
                expected: Box::new(node.ty.clone()),
                got: Box::new(got.clone()),
            }));
        }
        rw.set(v, new);
    }
    Ok(rw.finish()?)
}

/// A prim or opaque node re-emitted in explicit form.
fn explicit(e: &mut Emitter, node: &crate::ir::Node, args: &[Value]) -> Result<Value, DecompError> {
    use OpKind::*;
    let op = node.op;
    let attrs: Vec<(&str, AttrValue)> = node.attrs.iter().map(|(n, v)| (n, v.clone())).collect();
    match op {
        Where => e.select(args[0], args[1], args[2]),
        Cat => {
            let axis = crate::ops::util::normalize_axis(node.attrs.int("axis"), node.ty.rank())
                .map_err(|error| DecompError::NotExplicit { op: op.name(), error })?;
            e.cat(args, axis)
        }
        Reshape => e.reshape(args[0], &node.ty.shape),
        Matmul => e.matmul(args[0], args[1], node.attrs.bool("transpose_a"), node.attrs.bool("transpose_b")),
        _ if op.is_elementwise() && args.len() == 2 => e.binary(op, args[0], args[1]),
        _ => e.prim(op, args, &attrs),
    }
}
