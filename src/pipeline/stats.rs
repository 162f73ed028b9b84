//! Node counts per rung and per op (`ladder dump --stats`).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{lower_partial, Mode, Rung, RUNGS};
use crate::ir::Graph;

/// Each graph rung `g` reaches in `mode` (down to `recovered`), with its graph, and why the
/// next one could not be reached.
pub fn rungs(g: &Graph, mode: Mode) -> (Vec<(&'static str, Graph)>, Option<String>) {
    let (l, stopped) = lower_partial(g, mode, Rung::Recovered);
    let out = RUNGS
        .iter()
        .filter(|r| r.rung <= l.reached && !(r.rung == Rung::Recovered && mode == Mode::Reference))
        .filter_map(|r| l.graph_at(r.rung).map(|g| (r.name, g.clone())))
        .collect();
    (out, stopped.map(|e| e.to_string()))
}

/// A table of node counts: one row per op, one column per rung, and a total row. Source
/// nodes (inputs and constants) are counted too.
pub fn stats_table(g: &Graph, mode: Mode) -> String {
    let (rungs, stopped) = rungs(g, mode);
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
