//! Node counts per rung and per op (`ladder dump --stats`).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::decompose::decompose;
use super::functionalize::functionalize;
use super::simplify::{simplify, SimplifyOptions};
use crate::ir::Graph;

/// Each rung that could be reached, with its graph, and why the next one could not.
pub fn rungs(g: &Graph) -> (Vec<(&'static str, Graph)>, Option<String>) {
    let mut out = vec![("parsed", g.clone())];
    let functional = match functionalize(g) {
        Ok(f) => f.graph,
        Err(e) => return (out, Some(format!("functionalize: {e}"))),
    };
    out.push(("functional", functional.clone()));
    let prims = match decompose(&functional) {
        Ok(p) => p,
        Err(e) => return (out, Some(format!("decompose: {e}"))),
    };
    out.push(("prims", prims.clone()));
    match simplify(&prims, &SimplifyOptions::default()) {
        Ok(s) => out.push(("simplified", s.graph)),
        Err(e) => return (out, Some(format!("simplify: {e}"))),
    }
    (out, None)
}

/// A table of node counts: one row per op, one column per rung, and a total row. Source
/// nodes (inputs and constants) are counted too.
pub fn stats_table(g: &Graph) -> String {
    let (rungs, stopped) = rungs(g);
    let mut counts: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for (i, (_, graph)) in rungs.iter().enumerate() {
        for (_, node) in graph.nodes() {
            counts.entry(node.op.name()).or_insert_with(|| vec![0; rungs.len()])[i] += 1;
        }
    }
    let width = counts.keys().map(|k| k.len()).max().unwrap_or(2).max(5);
    let mut out = String::new();
    let _ = write!(out, "{:width$}", "op");
    for (name, _) in &rungs {
        let _ = write!(out, "  {name:>10}");
    }
    out.push('\n');
    for (op, row) in &counts {
        let _ = write!(out, "{op:width$}");
        for n in row {
            let _ = write!(out, "  {n:>10}");
        }
        out.push('\n');
    }
    let _ = write!(out, "{:width$}", "total");
    for (_, graph) in &rungs {
        let _ = write!(out, "  {:>10}", graph.len());
    }
    out.push('\n');
    if let Some(why) = stopped {
        let _ = writeln!(out, "; lowering stopped: {why}");
    }
    out
}
