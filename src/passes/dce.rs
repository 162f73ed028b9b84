//! Dead-code elimination: drops every node no graph output depends on.

use std::collections::HashSet;

use cranelift_entity::EntityRef;

use super::rewrite::Rewriter;
use super::simplify::{require_pure, SimplifyError};
use crate::ir::Graph;
use crate::ops::OpKind;

/// Keeps only the nodes some output depends on (transitively through arguments), in their
/// order, with their names; drops blobs no remaining `const` reads. Inputs always stay, even
/// unused: they are the graph's signature. Deliberately not done: keeping a dead node
/// because it could fail at run time (integer division by zero, a symbolic slice that does
/// not fit): a graph that failed may run after DCE, never the reverse. Refuses graphs that
/// mutate, where a node's effect is not only its value.
pub fn eliminate_dead_code(g: &Graph) -> Result<Graph, SimplifyError> {
    require_pure(g)?;
    let mut live = vec![false; g.len()];
    for o in g.outputs() {
        live[o.value.index()] = true;
    }
    let values: Vec<_> = g.values().collect();
    for &v in values.iter().rev() {
        if live[v.index()] {
            for &a in &g.node(v).args {
                live[a.index()] = true;
            }
        }
    }
    let mut rw = Rewriter::new(g);
    for (v, node) in g.nodes() {
        if node.op != OpKind::Input && live[v.index()] {
            rw.copy(v)?;
        }
    }
    let mut out = rw.finish()?;
    // `const` nodes name their blob, so the blob store can be rebuilt without the unused ones.
    let used: HashSet<String> =
        out.nodes().filter(|(_, n)| n.op == OpKind::Const).map(|(_, n)| n.attrs.str("blob").to_string()).collect();
    out.retain_blobs(|b| used.contains(&b.name));
    Ok(out)
}
