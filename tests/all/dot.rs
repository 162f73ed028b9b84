//! `ladder dump --format dot|svg` and `ladder::dot`: the DOT text is read back by a
//! small checker (the subset of the DOT grammar the generator writes: balanced braces,
//! well-formed statements, quoted strings with valid escapes, every edge endpoint a declared
//! node) at every stage of the built-in model and of a graph whose names need escaping; one
//! cluster per kernel at `--stage kernels`; recovered ops in their own colour; SVG through
//! Graphviz when it is installed, and the error that says it is needed when it is not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ladder::dot::{graph_to_dot, graph_to_dot_with, program_to_dot, DotOptions, RECOVERED_FILL};
use ladder::ir::verify::{verify, Stage};
use ladder::kernel::{Program, Step};
use ladder::passes::lower;
use ladder::pipeline::{Mode, Rung};
use ladder::{DType, Graph, GraphBuilder, Shape, Tensor};

// ---------------------------------------------------------------------------------------
// The checker.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// An identifier or numeral.
    Id(String),
    /// A quoted string, decoded: `\"` and `\\` unescaped, `\n` a newline, entities decoded.
    Str(String),
    Punct(&'static str),
}

fn decode_entities(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let (entity, c) = [("&amp;", '&'), ("&lt;", '<'), ("&gt;", '>')]
            .into_iter()
            .find(|(e, _)| rest.starts_with(e))
            .ok_or_else(|| format!("a bare `&` in a quoted string: {s:?}"))?;
        out.push(c);
        rest = &rest[entity.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&c) = chars.get(i) else { return Err("an unterminated quoted string".into()) };
                i += 1;
                match c {
                    '"' => break,
                    '\\' => {
                        let Some(&e) = chars.get(i) else { return Err("a `\\` at the end of the text".into()) };
                        i += 1;
                        match e {
                            '"' => s.push('"'),
                            '\\' => s.push('\\'),
                            'n' => s.push('\n'),
                            _ => return Err(format!("an escape `\\{e}` the generator never writes")),
                        }
                    }
                    '<' | '>' => return Err(format!("a bare `{c}` in a quoted string")),
                    c if c.is_control() => return Err(format!("a control character {c:?} in a quoted string")),
                    c => s.push(c),
                }
            }
            toks.push(Tok::Str(decode_entities(&s)?));
        } else if c.is_ascii_alphanumeric()
            || c == '_'
            || c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)
        {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
            let id: String = chars[start..i].iter().collect();
            let numeral = id.trim_start_matches('-').chars().all(|c| c.is_ascii_digit() || c == '.');
            let ident = id.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !numeral && !ident {
                return Err(format!("`{id}` is neither an identifier nor a numeral"));
            }
            toks.push(Tok::Id(id));
        } else if c == '-' && chars.get(i + 1) == Some(&'>') {
            toks.push(Tok::Punct("->"));
            i += 2;
        } else {
            let p = ["{", "}", "[", "]", "=", ";", ","]
                .into_iter()
                .find(|p| p.starts_with(c))
                .ok_or_else(|| format!("unexpected character {c:?}"))?;
            toks.push(Tok::Punct(p));
            i += 1;
        }
    }
    Ok(toks)
}

type Attrs = BTreeMap<String, String>;

/// What the checker read: nodes with their attributes and the clusters they sit in
/// (outermost first), edges, and clusters with their parents.
#[derive(Debug, Default)]
struct Dot {
    name: String,
    graph_attrs: Attrs,
    nodes: BTreeMap<String, (Attrs, Vec<String>)>,
    edges: Vec<(String, String)>,
    clusters: BTreeMap<String, (Attrs, Option<String>)>,
}

impl Dot {
    fn label(&self, node: &str) -> &str {
        &self.nodes[node].0["label"]
    }

    /// Nodes whose label's first line is `first`.
    fn nodes_headed(&self, first: &str) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, (a, _))| a["label"].lines().next() == Some(first))
            .map(|(id, _)| id.as_str())
            .collect()
    }

    fn fill(&self, node: &str) -> Option<&str> {
        self.nodes[node].0.get("fillcolor").map(String::as_str)
    }
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
    dot: Dot,
    /// The clusters the parser is inside, outermost first.
    path: Vec<String>,
    /// Attributes of the subgraph being read (`label=...;` statements).
    subgraph_attrs: Vec<Attrs>,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Result<Tok, String> {
        let t = self.toks.get(self.at).cloned().ok_or("unexpected end of the text")?;
        self.at += 1;
        Ok(t)
    }

    fn expect(&mut self, p: &'static str) -> Result<(), String> {
        match self.next()? {
            Tok::Punct(q) if q == p => Ok(()),
            t => Err(format!("expected `{p}`, found {t:?} (token {})", self.at - 1)),
        }
    }

    fn id(&mut self) -> Result<String, String> {
        match self.next()? {
            Tok::Id(s) | Tok::Str(s) => Ok(s),
            t => Err(format!("expected an ID, found {t:?} (token {})", self.at - 1)),
        }
    }

    /// A node or edge ID: a plain identifier (the generator never quotes them).
    fn node_id(&mut self) -> Result<String, String> {
        match self.next()? {
            Tok::Id(s) if !["graph", "node", "edge", "subgraph", "digraph", "strict"].contains(&s.as_str()) => Ok(s),
            t => Err(format!("expected a node ID, found {t:?} (token {})", self.at - 1)),
        }
    }

    fn attr_list(&mut self) -> Result<Attrs, String> {
        self.expect("[")?;
        let mut attrs = Attrs::new();
        loop {
            if self.peek() == Some(&Tok::Punct("]")) {
                self.at += 1;
                return Ok(attrs);
            }
            let k = self.id()?;
            self.expect("=")?;
            let v = self.id()?;
            if attrs.insert(k.clone(), v).is_some() {
                return Err(format!("attribute `{k}` given twice"));
            }
            if matches!(self.peek(), Some(Tok::Punct("," | ";"))) {
                self.at += 1;
            }
        }
    }

    fn stmts(&mut self) -> Result<(), String> {
        loop {
            match self.peek() {
                None => return Err("a `{` is never closed".into()),
                Some(Tok::Punct("}")) => {
                    self.at += 1;
                    return Ok(());
                }
                Some(Tok::Punct(";")) => self.at += 1,
                Some(Tok::Id(k)) if k == "subgraph" => {
                    self.at += 1;
                    let name = self.id()?;
                    if !name.starts_with("cluster") {
                        return Err(format!("subgraph `{name}` is not a cluster"));
                    }
                    self.expect("{")?;
                    let parent = self.path.last().cloned();
                    self.path.push(name.clone());
                    self.subgraph_attrs.push(Attrs::new());
                    self.stmts()?;
                    let attrs = self.subgraph_attrs.pop().unwrap();
                    self.path.pop();
                    if self.dot.clusters.insert(name.clone(), (attrs, parent)).is_some() {
                        return Err(format!("cluster `{name}` declared twice"));
                    }
                }
                Some(Tok::Id(k)) if ["graph", "node", "edge"].contains(&k.as_str()) => {
                    let k = k.clone();
                    self.at += 1;
                    let attrs = self.attr_list()?;
                    if k == "graph" {
                        self.dot.graph_attrs.extend(attrs);
                    }
                }
                Some(Tok::Id(_) | Tok::Str(_)) => {
                    let first = self.id()?;
                    match self.peek() {
                        Some(Tok::Punct("=")) => {
                            self.at += 1;
                            let v = self.id()?;
                            match self.subgraph_attrs.last_mut() {
                                Some(a) => a.insert(first.clone(), v),
                                None => self.dot.graph_attrs.insert(first.clone(), v),
                            };
                        }
                        Some(Tok::Punct("->")) => {
                            let mut ends = vec![first.clone()];
                            while self.peek() == Some(&Tok::Punct("->")) {
                                self.at += 1;
                                ends.push(self.node_id()?);
                            }
                            if self.peek() == Some(&Tok::Punct("[")) {
                                self.attr_list()?;
                            }
                            for pair in ends.windows(2) {
                                self.dot.edges.push((pair[0].clone(), pair[1].clone()));
                            }
                        }
                        Some(Tok::Punct("[")) => {
                            let attrs = self.attr_list()?;
                            if !attrs.contains_key("label") {
                                return Err(format!("node `{first}` has no label"));
                            }
                            if self.dot.nodes.insert(first.clone(), (attrs, self.path.clone())).is_some() {
                                return Err(format!("node `{first}` declared twice"));
                            }
                        }
                        t => return Err(format!("a statement starting `{first}` continues with {t:?}")),
                    }
                    match self.peek() {
                        Some(Tok::Punct(";")) => self.at += 1,
                        t => return Err(format!("a statement starting `{first}` is not ended by `;` but {t:?}")),
                    }
                }
                Some(t) => return Err(format!("a statement cannot start with {t:?}")),
            }
        }
    }
}

/// Reads DOT text, checks it, and returns what it declares.
fn check_dot(text: &str) -> Dot {
    let toks = lex(text).unwrap_or_else(|e| panic!("the DOT text does not lex: {e}\n{text}"));
    let mut p = Parser { toks, at: 0, dot: Dot::default(), path: Vec::new(), subgraph_attrs: Vec::new() };
    let result = (|| {
        match p.next()? {
            Tok::Id(k) if k == "digraph" => {}
            t => return Err(format!("the text does not start with `digraph` but {t:?}")),
        }
        p.dot.name = p.id()?;
        p.expect("{")?;
        p.stmts()?;
        match p.peek() {
            None => Ok(()),
            Some(t) => Err(format!("{t:?} after the closing `}}`")),
        }
    })();
    result.unwrap_or_else(|e| panic!("the DOT text is not well formed: {e}\n{text}"));
    let dot = p.dot;
    for (a, b) in &dot.edges {
        for end in [a, b] {
            assert!(dot.nodes.contains_key(end), "edge {a} -> {b}: `{end}` is not a declared node\n{text}");
        }
    }
    for (name, (attrs, _)) in &dot.clusters {
        assert!(attrs.contains_key("label"), "cluster `{name}` has no label");
    }
    assert!(dot.graph_attrs.contains_key("label"), "the drawing has no title");
    dot
}

// ---------------------------------------------------------------------------------------
// Graph and program facts the drawings must show.

/// A graph's drawing: one node per value and per output, an edge per argument and output.
fn check_graph_drawing(dot: &Dot, g: &Graph, recovered: bool) {
    let values = dot.nodes.keys().filter(|id| id.starts_with('v')).count();
    assert_eq!(values, g.len(), "one node per value");
    let outputs = dot.nodes.keys().filter(|id| id.starts_with("out")).count();
    assert_eq!(outputs, g.outputs().len(), "one node per output");
    let uses: usize = g.nodes().map(|(_, n)| n.args.len()).sum();
    assert_eq!(dot.edges.len(), uses + g.outputs().len(), "an edge per argument and per output");
    for (v, node) in g.nodes() {
        let id = format!("v{}", v.as_u32());
        let first = dot.label(&id).lines().next().unwrap().to_string();
        let is_recovered = recovered && ladder::recover::recoverable().contains(&node.op);
        if is_recovered {
            assert_eq!(first, node.op.name());
            assert_eq!(dot.fill(&id), Some(RECOVERED_FILL), "{id} ({}) is drawn as recovered", node.op);
            assert!(dot.label(&id).contains("(recovered)"));
        } else {
            assert_ne!(dot.fill(&id), Some(RECOVERED_FILL), "{id} ({}) is not recovered", node.op);
        }
        let ty = format!("{}[", node.ty.dtype);
        assert!(dot.label(&id).lines().nth(1).is_some_and(|l| l.starts_with(&ty)), "{id} shows its type");
    }
}

/// A program's drawing: a `cluster_kN` per kernel, a `cluster_gemmS` per fused matmul with
/// its epilogue kernel inside, each buffer a node, recovered library calls coloured.
fn check_program_drawing(dot: &Dot, p: &Program) {
    let kernels = p.kernels().count();
    let kernel_clusters: Vec<&String> = dot
        .clusters
        .keys()
        .filter(|c| c.strip_prefix("cluster_k").is_some_and(|n| n.parse::<usize>().is_ok()))
        .collect();
    assert_eq!(kernel_clusters.len(), kernels, "one cluster per kernel");
    let fused: Vec<usize> = p
        .steps
        .iter()
        .enumerate()
        .filter_map(|(s, step)| match step {
            Step::Matmul(m) if m.epilogue.is_some() || m.activation.is_some() => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(dot.clusters.len(), kernels + fused.len(), "kernel clusters and fused-GEMM clusters only");
    for (k, kernel) in p.kernels().enumerate() {
        let (attrs, _) = &dot.clusters[&format!("cluster_k{k}")];
        assert!(attrs["label"].contains(&kernel.name), "cluster_k{k} is labelled with its kernel's name");
        let stages = dot.nodes.iter().filter(|(_, (_, path))| path.last() == Some(&format!("cluster_k{k}")));
        assert_eq!(stages.filter(|(id, _)| !id.ends_with("_act")).count(), kernel.stages.len().max(1));
    }
    // Kernels are numbered in `Program::kernels` order: kernel steps and matmul epilogues.
    let mut k = 0;
    for step in &p.steps {
        match step {
            Step::Kernel(_) => k += 1,
            Step::Matmul(m) if m.epilogue.is_some() => {
                let (_, parent) = &dot.clusters[&format!("cluster_k{k}")];
                assert!(
                    parent.as_deref().is_some_and(|p| p.starts_with("cluster_gemm")),
                    "epilogue kernel {k} sits inside its GEMM's cluster"
                );
                k += 1;
            }
            _ => {}
        }
    }
    for (id, _) in p.buffers.iter() {
        assert!(dot.nodes.contains_key(&format!("b{}", id.as_u32())), "buffer {id} is a node");
    }
    assert_eq!(dot.nodes.keys().filter(|id| id.starts_with("out")).count(), p.outputs.len());
    let recovered_calls = p
        .steps
        .iter()
        .filter(|s| match s {
            Step::Library(l) => ladder::recover::recoverable().contains(&l.op),
            _ => false,
        })
        .count()
        + p.steps
            .iter()
            .filter(|s| match s {
                Step::Matmul(m) => m.activation.is_some(),
                Step::Kernel(k) => k.activation.is_some(),
                _ => false,
            })
            .count();
    let coloured = dot.nodes.keys().filter(|id| dot.fill(id) == Some(RECOVERED_FILL)).count();
    assert_eq!(coloured, recovered_calls, "every recovered library call, and only those, is coloured");
}

// ---------------------------------------------------------------------------------------
// Running the binary.

fn ladder_with(args: &[&str], path_env: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ladder"));
    c.args(args);
    if let Some(p) = path_env {
        c.env("PATH", p);
    }
    c.output().expect("the ladder binary runs")
}

fn ok(args: &[&str]) -> String {
    let o = ladder_with(args, None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "ladder {args:?} failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    String::from_utf8(o.stdout).expect("utf-8 output")
}

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ladder-dot-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether Graphviz's `dot` is an executable file in a folder of PATH.
fn graphviz_installed() -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .any(|dir| std::fs::metadata(dir.join("dot")).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Every stage but `joint`, which differentiates a scalar first output that the built-in
/// encoder and the graphs drawn here lack (`tests/all/cli.rs` draws a joint graph).
fn graph_stages() -> impl Iterator<Item = &'static str> {
    ladder::pipeline::rung_names().filter(|&s| s != "joint")
}

/// The built-in encoder's graph at `stage` (not `kernels`), lowered as the native plan is.
fn example_at(stage: &str) -> Graph {
    let g = ladder::models::example_encoder().unwrap();
    let rung = Rung::from_name(stage).unwrap();
    ladder::pipeline::lower(&g, Mode::Native, rung).unwrap().graph_at(rung).unwrap().clone()
}

/// The built-in encoder's kernel program in `mode`.
fn example_program(mode: Mode) -> ladder::kernel::Program {
    let g = ladder::models::example_encoder().unwrap();
    ladder::pipeline::lower(&g, mode, Rung::Kernels).unwrap().scheduled.unwrap().program
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn built_in_model_draws_valid_dot_at_every_stage() {
    for stage in graph_stages() {
        let text = ok(&["dump", "--stage", stage, "--format", "dot"]);
        let dot = check_dot(&text);
        assert!(dot.graph_attrs["label"].starts_with(&format!("encoder: {stage}")), "{:?}", dot.graph_attrs);
        if stage == "kernels" {
            check_program_drawing(&dot, &example_program(Mode::Native));
        } else {
            let g = example_at(stage);
            check_graph_drawing(&dot, &g, stage == "recovered");
            if stage == "parsed" {
                let input = dot.nodes.get("v0").expect("the input");
                assert_eq!(input.0["shape"], "invhouse");
                assert_eq!(dot.label("v0"), "x\nf32[1,seq,32]");
                assert_eq!(dot.label("out0"), "output y");
            }
        }
        println!(
            "stage {stage}: {} nodes, {} edges, {} clusters",
            dot.nodes.len(),
            dot.edges.len(),
            dot.clusters.len()
        );
    }
}

#[test]
fn recovered_ops_are_coloured_in_the_graph_and_the_program() {
    let dot = check_dot(&ok(&["dump", "--stage", "recovered", "--format", "dot"]));
    for op in ["layer_norm", "scaled_dot_product_attention", "gelu"] {
        let nodes = dot.nodes_headed(op);
        assert!(!nodes.is_empty(), "{op} is drawn at --stage recovered");
        for n in nodes {
            assert_eq!(dot.fill(n), Some(RECOVERED_FILL), "{op} at {n} has the recovered style");
            assert_eq!(dot.nodes[n].0["penwidth"], "2");
        }
    }
    let prims = check_dot(&ok(&["dump", "--stage", "prims", "--format", "dot"]));
    assert!(prims.nodes.keys().all(|n| prims.fill(n) != Some(RECOVERED_FILL)), "nothing is recovered in prims");

    let reference = check_dot(&ok(&["dump", "--stage", "kernels", "--no-recover", "--format", "dot"]));
    check_program_drawing(&reference, &example_program(Mode::Reference));
    assert!(reference.nodes.keys().all(|n| reference.fill(n) != Some(RECOVERED_FILL)), "nothing is recovered");
    assert!(reference.graph_attrs["label"].contains("(no recovery)"), "{:?}", reference.graph_attrs);

    let text = ok(&["dump", "--stage", "kernels", "--format", "dot"]);
    let dot = check_dot(&text);
    let p = example_program(Mode::Native);
    check_program_drawing(&dot, &p);
    for op in ["layer_norm", "scaled_dot_product_attention", "gelu"] {
        let nodes = dot.nodes_headed(op);
        assert!(!nodes.is_empty(), "{op} is a library step of the recovered program");
        assert!(nodes.iter().all(|n| dot.fill(n) == Some(RECOVERED_FILL)));
    }
    // The built-in model's feed-forward GEMM carries an epilogue kernel and gelu: both are
    // drawn inside the GEMM's cluster.
    let gelu = dot.nodes_headed("gelu")[0];
    assert!(dot.nodes[gelu].1.first().is_some_and(|c| c.starts_with("cluster_gemm")), "{text}");
    assert!(p.steps.iter().any(|s| matches!(s, Step::Matmul(m) if m.epilogue.is_some())));
}

#[test]
fn drawings_are_deterministic_and_text_stays_the_default() {
    for stage in graph_stages() {
        let a = ok(&["dump", "--stage", stage, "--format", "dot"]);
        assert_eq!(a, ok(&["dump", "--stage", stage, "--format", "dot"]), "stage {stage}");
        assert_eq!(ok(&["dump", "--stage", stage]), ok(&["dump", "--stage", stage, "--format", "text"]));
    }
    let g = example_at("recovered");
    assert_eq!(graph_to_dot(&g), graph_to_dot(&g.clone()));
    let p = ladder::sched::schedule(&g).unwrap();
    assert_eq!(program_to_dot(&p), program_to_dot(&p.clone()));
    check_program_drawing(&check_dot(&program_to_dot(&p)), &p);
    check_graph_drawing(&check_dot(&graph_to_dot(&g)), &g, false);
}

/// A graph whose every name needs escaping in DOT: quotes, backslashes, a newline, `<`, `>`
/// and `&`, with a matmul (a GEMM step), a softmax (recovered) and an add.
fn awkward_graph() -> Graph {
    let mut b = GraphBuilder::new("we\"ird\\graph");
    let x = b.input("in\"put\\x<y>&z", DType::F32, Shape::from_static(&[2, 8])).unwrap();
    let data: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 40.0).collect();
    let w = b.named_constant("w\"\\eight <&>", Tensor::from_f32(&[8, 8], data).unwrap()).unwrap();
    let m = b.matmul(x, w).unwrap();
    b.name(m, "mat\"mul\\ed").unwrap();
    let p = b.softmax(m, -1).unwrap();
    b.name(p, "p \"probs\"\\").unwrap();
    let y = b.add(p, x).unwrap();
    b.output("out\n\"line two\" \\ <end>", y).unwrap();
    b.finish().unwrap()
}

fn assert_labels_contain(dot: &Dot, needles: &[&str]) {
    for needle in needles {
        let found = dot.nodes.values().any(|(a, _)| a["label"].contains(needle));
        assert!(found, "no label shows {needle:?}: {:#?}", dot.nodes);
    }
}

#[test]
fn names_with_quotes_and_backslashes_make_valid_dot() {
    let g = awkward_graph();
    let input = "in\"put\\x<y>&z";
    let blob = "@w\"\\eight <&>";
    let output = "output out\n\"line two\" \\ <end>";

    let dot = check_dot(&graph_to_dot(&g));
    check_graph_drawing(&dot, &g, false);
    assert_eq!(dot.name, "we\"ird\\graph");
    assert_labels_contain(&dot, &[input, blob, output, "%mat\"mul\\ed", "%p \"probs\"\\"]);

    let lowered = lower(&g).unwrap();
    let recovered = ladder::recover::recover(&lowered.simplified).unwrap().graph;
    assert!(recovered.nodes().any(|(_, n)| n.op == ladder::OpKind::Softmax), "the softmax is recovered");
    for (stage, graph) in [
        ("functional", &lowered.functional.graph),
        ("prims", &lowered.prims),
        ("simplified", &lowered.simplified),
        ("recovered", &recovered),
    ] {
        let options = DotOptions { title: Some(format!("t\"itle\\ {stage}")), mark_recovered: stage == "recovered" };
        let dot = check_dot(&graph_to_dot_with(graph, &options));
        check_graph_drawing(&dot, graph, stage == "recovered");
        assert_eq!(dot.graph_attrs["label"], format!("t\"itle\\ {stage}"));
        assert_labels_contain(&dot, &[input, output]);
    }
    for graph in [&lowered.simplified, &recovered] {
        let p = ladder::sched::schedule(graph).unwrap();
        let dot = check_dot(&program_to_dot(&p));
        check_program_drawing(&dot, &p);
        assert_labels_contain(&dot, &[blob, "output out\n\"line two\" \\ <end>"]);
    }

    // The same through the binary, from the text form.
    let text = ladder::text::print(&g);
    assert_eq!(ladder::text::parse(&text).unwrap(), g, "the awkward graph round-trips through the text form");
    verify(&g, Stage::HighLevel).unwrap();
    let dir = scratch("awkward");
    let model = dir.join("awkward.lad");
    std::fs::write(&model, text).unwrap();
    for stage in graph_stages() {
        let dot = check_dot(&ok(&["dump", model.to_str().unwrap(), "--stage", stage, "--format", "dot"]));
        assert_labels_contain(&dot, &[output]);
    }
    let dot = check_dot(&ok(&["dump", model.to_str().unwrap(), "--stage", "kernels", "--format", "dot"]));
    assert_labels_contain(&dot, &[blob, output, "softmax"]);
}

#[test]
fn svg_renders_with_graphviz_or_fails_saying_it_is_needed() {
    // Without Graphviz on PATH (an empty folder as PATH), always.
    let empty = scratch("no-graphviz");
    let o = ladder_with(&["dump", "--format", "svg"], Some(&empty));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "a missing Graphviz is a usage error: {err}");
    assert!(err.contains("needs Graphviz") && err.contains("--format dot"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(o.stdout.is_empty(), "nothing on stdout when the drawing fails");

    if graphviz_installed() {
        println!("branch: Graphviz's `dot` is on PATH: rendering SVG at every stage");
        for stage in graph_stages() {
            let svg = ok(&["dump", "--stage", stage, "--format", "svg"]);
            assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"), "stage {stage}: not an SVG:\n{svg}");
        }
        let svg = ok(&["dump", "--stage", "kernels", "--format", "svg"]);
        assert!(svg.contains("class=\"cluster\""), "the kernels are clusters in the SVG");
    } else {
        println!("branch: no Graphviz `dot` on PATH: checking the error with the machine's PATH");
        let o = ladder_with(&["dump", "--stage", "kernels", "--format", "svg"], None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("needs Graphviz") && err.contains("--format dot"), "{err}");
    }
}

#[test]
fn drawing_flags_that_do_not_go_together_are_usage_errors() {
    for flags in [&["--stats"][..], &["--stage", "kernels", "--explain"], &["--stage", "kernels", "--clif"]] {
        let mut args = vec!["dump", "--format", "dot"];
        args.extend_from_slice(flags);
        let o = ladder_with(&args, None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "ladder {args:?}: {err}");
        assert!(err.contains("goes with --format text"), "{err}");
    }
    let o = ladder_with(&["dump", "--format", "png"], None);
    assert_eq!(o.status.code(), Some(2));
    let o = ladder_with(&["dump", "--stage", "recovered", "--no-recover", "--format", "dot"], None);
    assert_eq!(o.status.code(), Some(2));
}
