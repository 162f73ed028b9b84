//! Graphviz DOT drawings of a graph (any rung) and of a scheduled kernel program, for
//! `ladder dump --format dot|svg`.
//!
//! A graph is drawn with one node per value: inputs as `invhouse` shapes, constants as small
//! `note`s naming their blob, every other node as a box labelled with its op, its type and
//! its name (if it has one); an edge runs from each argument to its user, and each output is a
//! `house` node fed by its value. With [`DotOptions::mark_recovered`], the ops recovery puts
//! back ([`crate::ops::library::recoverable`]) are filled with [`RECOVERED_FILL`].
//!
//! A program is drawn as buffers (inputs, constants, temporaries) and steps, with edges
//! buffer → step → buffer. Each kernel is a `subgraph cluster_kK` (`K` its position in
//! [`Program::kernels`]) holding one node per stage (its inner loops, the ops of its body and
//! its accumulators), the stages chained by dotted edges in execution order; a matmul with an
//! epilogue kernel or a fused activation is a `subgraph cluster_gemmS` (`S` its step index)
//! holding the GEMM box, the epilogue kernel's cluster and the activation. Library calls are
//! boxes filled with [`LIBRARY_FILL`], recovered ops with [`RECOVERED_FILL`].
//!
//! The output is deterministic: node ids come from value, buffer, step, kernel and stage
//! indices (`v3`, `b7`, `s4`, `k2_s1`, `out0`), every label is a quoted string made by
//! [`quote`], and the edges come after every node and cluster (an edge inside a cluster would
//! pull its endpoints into it).

use std::fmt::Write;

use crate::ir::{DType, Graph, Shape, Value};
use crate::kernel::{Buffer, BufferKind, Instr, Kernel, LibraryCall, Program, Stage, Step};
use crate::ops::library::recoverable;
use crate::ops::{OpKind, Rung};

/// The fill colour of recovered library ops (graph nodes and program steps).
pub const RECOVERED_FILL: &str = "#f9cb9c";
/// The fill colour of library calls that are not recovered ops (matmul, conv, data movement).
pub const LIBRARY_FILL: &str = "#cfe2f3";

const HEADER_ATTRS: &str = "  node [fontname=\"Helvetica\", fontsize=10, shape=box, style=rounded];\n  \
     edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n";
const INPUT_STYLE: &str = "shape=invhouse, style=filled, fillcolor=\"#d9ead3\"";
const CONST_STYLE: &str = "shape=note, fontsize=8, style=filled, fillcolor=\"#eeeeee\", color=\"#999999\"";
const OUTPUT_STYLE: &str = "shape=house, style=filled, fillcolor=\"#d9ead3\", penwidth=2";
const TEMP_STYLE: &str = "shape=ellipse, style=solid";
const HIGH_STYLE: &str = "style=\"rounded,filled\", fillcolor=\"#fff2cc\"";
const PRIM_STYLE: &str = "style=rounded";
const STAGE_STYLE: &str = "shape=box, style=filled, fillcolor=\"#ffffff\"";
const INTERP_STYLE: &str = "style=\"filled,dashed\", fillcolor=\"#f4cccc\"";
const KERNEL_CLUSTER_STYLE: &str = "fontsize=11; style=\"rounded,filled\"; fillcolor=\"#f3f3f3\"; color=\"#666666\";";
const GEMM_CLUSTER_STYLE: &str = "fontsize=11; style=\"rounded,filled\"; fillcolor=\"#e8f0fa\"; color=\"#3d85c6\";";

/// What [`graph_to_dot_with`] draws besides the graph.
#[derive(Clone, Debug, Default)]
pub struct DotOptions {
    /// The drawing's title (the graph's name when `None`).
    pub title: Option<String>,
    /// Fill the ops in [`crate::ops::library::recoverable`] with [`RECOVERED_FILL`] and note
    /// `(recovered)` in their labels: for the `recovered` rung, where each such op is one
    /// recovery put back.
    pub mark_recovered: bool,
}

/// `text` as a DOT quoted string whose label renders as `text`: `"` and `\` are escaped, a
/// newline becomes `\n` (a line break), other control characters their Rust escape (as
/// visible text), and `&`, `<`, `>` HTML entities (Graphviz decodes entities in labels).
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if c.is_control() => {
                for e in c.escape_default() {
                    if e == '\\' {
                        out.push_str("\\\\");
                    } else {
                        out.push(e);
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A label of several lines, quoted.
fn label(lines: &[String]) -> String {
    quote(&lines.join("\n"))
}

/// A type as `f32[1,seq,32]`.
fn type_text(dtype: DType, shape: &Shape) -> String {
    let dims: Vec<String> = shape.dims().iter().map(|d| d.to_string()).collect();
    format!("{dtype}[{}]", dims.join(","))
}

/// `g` as a DOT digraph, with default [`DotOptions`].
pub fn graph_to_dot(g: &Graph) -> String {
    graph_to_dot_with(g, &DotOptions::default())
}

/// `g` as a DOT digraph: one node per value, edges from arguments to users, outputs marked.
pub fn graph_to_dot_with(g: &Graph, options: &DotOptions) -> String {
    let mut out = String::new();
    let title = options.title.clone().unwrap_or_else(|| g.name.clone());
    let _ = writeln!(out, "digraph {} {{", quote(&g.name));
    let _ = writeln!(out, "  graph [fontname=\"Helvetica\", label={}, labelloc=t];", quote(&title));
    out.push_str(HEADER_ATTRS);
    let mut edges = Vec::new();
    for (v, node) in g.nodes() {
        let ty = type_text(node.ty.dtype, &node.ty.shape);
        let id = value_id(v);
        match node.op {
            OpKind::Input => {
                let name = g.name_of(v).map_or_else(|| v.to_string(), str::to_string);
                let _ = writeln!(out, "  {id} [label={}, {INPUT_STYLE}];", label(&[name, ty]));
            }
            OpKind::Const => {
                let blob = format!("@{}", node.attrs.str("blob"));
                let _ = writeln!(out, "  {id} [label={}, {CONST_STYLE}];", label(&[blob, ty]));
            }
            op => {
                let mut lines = vec![op.name().to_string(), ty];
                if let Some(name) = g.name_of(v) {
                    lines.push(format!("%{name}"));
                }
                let recovered = options.mark_recovered && recoverable().contains(&op);
                if recovered {
                    lines.push("(recovered)".to_string());
                }
                let style = if recovered {
                    recovered_style()
                } else {
                    match op.rung() {
                        Rung::High => HIGH_STYLE.to_string(),
                        Rung::Opaque => library_style(),
                        Rung::Source | Rung::Prim => PRIM_STYLE.to_string(),
                    }
                };
                let _ = writeln!(out, "  {id} [label={}, {style}];", label(&lines));
                for &a in &node.args {
                    edges.push(format!("{} -> {id}", value_id(a)));
                }
            }
        }
    }
    for (i, o) in g.outputs().iter().enumerate() {
        let _ = writeln!(out, "  out{i} [label={}, {OUTPUT_STYLE}];", label(&[format!("output {}", o.name)]));
        edges.push(format!("{} -> out{i}", value_id(o.value)));
    }
    for e in edges {
        let _ = writeln!(out, "  {e};");
    }
    out.push_str("}\n");
    out
}

fn value_id(v: Value) -> String {
    format!("v{}", v.as_u32())
}

fn recovered_style() -> String {
    format!("style=\"filled,bold\", fillcolor=\"{RECOVERED_FILL}\", color=\"#b45f06\", penwidth=2")
}

fn library_style() -> String {
    format!("style=filled, fillcolor=\"{LIBRARY_FILL}\", color=\"#3d85c6\"")
}

/// The style of a library call of `op`.
fn call_style(op: OpKind) -> String {
    if recoverable().contains(&op) {
        recovered_style()
    } else {
        library_style()
    }
}

/// `p` as a DOT digraph, titled `kernel program`.
pub fn program_to_dot(p: &Program) -> String {
    program_to_dot_with(p, &DotOptions::default())
}

/// `p` as a DOT digraph: buffers and steps with edges buffer → step → buffer, each kernel a
/// cluster of its stages, each matmul with an epilogue or activation a cluster holding them.
/// Only [`DotOptions::title`] applies: library calls of recovered ops are always marked.
pub fn program_to_dot_with(p: &Program, options: &DotOptions) -> String {
    let mut w = ProgramWriter { out: String::new(), edges: Vec::new(), kernels: 0 };
    let n_kernels = p.kernels().count();
    let title = options.title.clone().unwrap_or_else(|| "kernel program".to_string());
    let title = format!("{title}: {}, {}", count(p.steps.len(), "step"), count(n_kernels, "kernel"));
    let _ = writeln!(w.out, "digraph \"program\" {{");
    let _ = writeln!(w.out, "  graph [fontname=\"Helvetica\", label={}, labelloc=t, compound=true];", quote(&title));
    w.out.push_str(HEADER_ATTRS);
    for (id, b) in p.buffers.iter() {
        let n = id.as_u32();
        let ty = type_text(b.dtype, &b.shape);
        let _ = writeln!(w.out, "  b{n} [label={}, {}];", label(&[buffer_name(id, b), ty]), buffer_style(b));
    }
    for (s, step) in p.steps.iter().enumerate() {
        match step {
            Step::Kernel(k) => w.kernel(k, "kernel", "  "),
            Step::Matmul(m) => {
                let t = |t: bool| if t { "^T" } else { "" };
                let lines = vec![
                    "matmul".to_string(),
                    format!("{} = {}{} @ {}{}", m.out, m.a, t(m.transpose_a), m.b, t(m.transpose_b)),
                ];
                let node = format!("s{s} [label={}, {}];", label(&lines), library_style());
                let fused = m.epilogue.is_some() || m.activation.is_some();
                let indent = if fused { "    " } else { "  " };
                if fused {
                    let what = match (&m.epilogue, &m.activation) {
                        (Some(_), Some(_)) => "GEMM + epilogue + activation",
                        (Some(_), None) => "GEMM + epilogue",
                        _ => "GEMM + activation",
                    };
                    let _ = writeln!(w.out, "  subgraph cluster_gemm{s} {{");
                    let _ = writeln!(w.out, "    label={}; {GEMM_CLUSTER_STYLE}", quote(&format!("step {s}: {what}")));
                }
                let _ = writeln!(w.out, "{indent}{node}");
                w.edges.push(format!("b{} -> s{s}", m.a.as_u32()));
                w.edges.push(format!("b{} -> s{s}", m.b.as_u32()));
                w.edges.push(format!("s{s} -> b{}", m.out.as_u32()));
                if let Some(k) = &m.epilogue {
                    w.kernel(k, "epilogue kernel", indent);
                }
                if let Some(l) = &m.activation {
                    w.call(&format!("s{s}_act"), l, "fused activation per row tile", indent);
                }
                if fused {
                    let _ = writeln!(w.out, "  }}");
                }
            }
            Step::Conv(c) => {
                let mut lines = vec![
                    "conv".to_string(),
                    format!("stride={:?} padding={:?}", c.stride, c.padding),
                    format!("dilation={:?} groups={}", c.dilation, c.groups),
                ];
                if let Some(pool) = &c.pool {
                    lines.push(format!("then {pool}"));
                }
                if let Some(post) = &c.post {
                    lines.push(format!("then {post}"));
                }
                let _ = writeln!(w.out, "  s{s} [label={}, {}];", label(&lines), library_style());
                w.edges.push(format!("b{} -> s{s}", c.x.as_u32()));
                w.edges.push(format!("b{} -> s{s}", c.w.as_u32()));
                if let Some(crate::kernel::Addend::Channel(b)) = c.post.as_ref().and_then(|p| p.addend.as_ref()) {
                    w.edges.push(format!("b{} -> s{s}", b.as_u32()));
                }
                w.edges.push(format!("s{s} -> b{}", c.out.as_u32()));
            }
            Step::Library(l) => w.call(&format!("s{s}"), l, "library", "  "),
            Step::Interp(c) => {
                let lines =
                    vec!["graph break (interpreter)".to_string(), format!("{} nodes", c.graph.len()), c.reason.clone()];
                let _ = writeln!(w.out, "  s{s} [label={}, {INTERP_STYLE}];", label(&lines));
                for b in dedup(c.args.iter().copied()) {
                    w.edges.push(format!("b{} -> s{s}", b.as_u32()));
                }
                for b in dedup(c.results.iter().copied()) {
                    w.edges.push(format!("s{s} -> b{}", b.as_u32()));
                }
            }
        }
    }
    for (i, (name, b)) in p.outputs.iter().enumerate() {
        let _ = writeln!(w.out, "  out{i} [label={}, {OUTPUT_STYLE}];", label(&[format!("output {name}")]));
        w.edges.push(format!("b{} -> out{i}", b.as_u32()));
    }
    let ProgramWriter { mut out, edges, .. } = w;
    for e in edges {
        let _ = writeln!(out, "  {e};");
    }
    out.push_str("}\n");
    out
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

fn buffer_name(id: crate::kernel::BufferId, b: &Buffer) -> String {
    let value = b.value.map(|v| format!(" = {v}")).unwrap_or_default();
    match &b.kind {
        BufferKind::Input(n) => format!("input {n} ({id})"),
        BufferKind::Const(name) => format!("@{name}"),
        BufferKind::Temp => format!("{id}{value}"),
    }
}

fn buffer_style(b: &Buffer) -> &'static str {
    match b.kind {
        BufferKind::Input(_) => INPUT_STYLE,
        BufferKind::Const(_) => CONST_STYLE,
        BufferKind::Temp => TEMP_STYLE,
    }
}

/// The distinct items of `items`, in first-occurrence order.
fn dedup<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

struct ProgramWriter {
    out: String,
    edges: Vec<String>,
    /// Kernels drawn so far (the next kernel's cluster number).
    kernels: usize,
}

impl ProgramWriter {
    /// A library call as node `id` (inside the current cluster), with its edges.
    fn call(&mut self, id: &str, l: &LibraryCall, note: &str, indent: &str) {
        let mut lines = vec![l.op.name().to_string()];
        lines.extend(l.attrs.iter().map(|(k, v)| format!("{k}={v}")));
        if let Some(post) = &l.post {
            lines.push(format!("then {post}"));
        }
        lines.push(format!("({note})"));
        let _ = writeln!(self.out, "{indent}{id} [label={}, {}];", label(&lines), call_style(l.op));
        let bias = match l.post.as_ref().and_then(|p| p.addend.as_ref()) {
            Some(crate::kernel::Addend::Channel(b)) => Some(*b),
            _ => None,
        };
        for b in dedup(l.args.iter().copied().chain(bias)) {
            self.edges.push(format!("b{} -> {id}", b.as_u32()));
        }
        self.edges.push(format!("{id} -> b{}", l.out.as_u32()));
    }

    /// A kernel as a cluster of its stages (and its activation), with their edges.
    fn kernel(&mut self, k: &Kernel, what: &str, indent: &str) {
        let n = self.kernels;
        self.kernels += 1;
        let outer: Vec<String> = k.outer.iter().map(|d| d.to_string()).collect();
        let lines = vec![
            format!("{what} {}", k.name),
            format!("outer [{}]", outer.join(", ")),
            format!("covers {}", count(k.covers.len(), "node")),
        ];
        let _ = writeln!(self.out, "{indent}subgraph cluster_k{n} {{");
        let _ = writeln!(self.out, "{indent}  label={}; {KERNEL_CLUSTER_STYLE}", label(&lines));
        if k.stages.is_empty() {
            let _ = writeln!(self.out, "{indent}  k{n}_s0 [label={}, {STAGE_STYLE}];", quote("no stages"));
        }
        for (j, stage) in k.stages.iter().enumerate() {
            let id = format!("k{n}_s{j}");
            let _ = writeln!(self.out, "{indent}  {id} [label={}, {STAGE_STYLE}];", label(&stage_lines(j, stage)));
            if j > 0 {
                self.edges.push(format!("k{n}_s{} -> {id} [style=dotted, arrowsize=0.5]", j - 1));
            }
            let loads = stage.body.iter().filter_map(|i| match i {
                Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } => Some(*buf),
                _ => None,
            });
            for b in dedup(loads) {
                self.edges.push(format!("b{} -> {id}", b.as_u32()));
            }
            let stores = stage.body.iter().filter_map(|i| match i {
                Instr::Store { buf, .. } => Some(*buf),
                _ => None,
            });
            for b in dedup(stores) {
                self.edges.push(format!("{id} -> b{}", b.as_u32()));
            }
        }
        if let Some(l) = &k.activation {
            self.call(&format!("k{n}_act"), l, "fused activation per range of rows", &format!("{indent}  "));
        }
        let _ = writeln!(self.out, "{indent}}}");
    }
}

/// At most this many op names in a stage's label.
const MAX_STAGE_OPS: usize = 9;

/// A stage's label: its number and inner loops, the ops of its body, its accumulators.
fn stage_lines(j: usize, stage: &Stage) -> Vec<String> {
    let inner: Vec<String> = stage.inner.iter().map(|d| d.to_string()).collect();
    let mut lines = vec![format!("stage {j}  inner [{}]", inner.join(", "))];
    let ops = dedup(stage.body.iter().filter_map(|i| match i {
        Instr::Unary { op, .. } | Instr::Binary { op, .. } => Some(op.name()),
        Instr::Select { .. } => Some("where"),
        Instr::Convert { .. } => Some("convert"),
        Instr::LoadAt { .. } => Some("load_at"),
        Instr::LoopVar { .. } => Some("loop_var"),
        Instr::Load { .. } | Instr::Const { .. } | Instr::Accumulate { .. } | Instr::Store { .. } => None,
    }));
    let shown = ops.len().min(MAX_STAGE_OPS);
    for chunk in ops[..shown].chunks(3) {
        lines.push(chunk.join(", "));
    }
    if ops.len() > shown {
        lines.push(format!("+{} more ops", ops.len() - shown));
    }
    let stores = stage.body.iter().any(|i| matches!(i, Instr::Store { .. }));
    if ops.is_empty() && stores {
        lines.push("store".to_string());
    }
    if !stage.accumulators.is_empty() {
        let accs: Vec<&str> = stage.accumulators.iter().map(|a| a.op.name()).collect();
        lines.push(format!("acc: {}", accs.join(", ")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quote_escapes_what_dot_and_graphviz_labels_interpret() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(quote("<&>"), "\"&lt;&amp;&gt;\"");
        assert_eq!(quote("t\tx"), "\"t\\\\tx\"");
    }
}
