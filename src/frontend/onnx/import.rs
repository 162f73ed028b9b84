//! The import driver: opsets, graph inputs and initializers, the node loop with its
//! unsupported-op census, and the helpers op conversions use (inputs, attributes, emitting
//! ladder ops with import-time folding, symbolic shape lists).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use super::proto::{self, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};
use super::tensor::{check_dims, dtype_name, dtype_of, tensor_from_proto, Budget};
use super::{ImportError, ImportOptions, NodeError, NodeRef, UnsupportedOp};
use crate::interp::{EvalCtx, View};
use crate::ir::{AttrValue, Attrs, DType, Dim, Graph, Shape, TensorType, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// Lowest and highest default-domain opset the importer accepts.
pub const MIN_OPSET: i64 = 7;
pub const MAX_OPSET: i64 = 27;

/// One element of a shape list: a number, or a symbolic dim.
#[derive(Clone, Debug, PartialEq)]
pub enum SymInt {
    I(i64),
    D(Dim),
}

impl SymInt {
    pub fn from_dim(d: &Dim) -> SymInt {
        match d.as_const() {
            Some(n) if n <= i64::MAX as u64 => SymInt::I(n as i64),
            _ => SymInt::D(d.clone()),
        }
    }

    /// As a dim (for shapes); negative numbers have none.
    pub fn to_dim(&self) -> Option<Dim> {
        match self {
            SymInt::I(n) if *n >= 0 => Some(Dim::new(*n as u64)),
            SymInt::I(_) => None,
            SymInt::D(d) => Some(d.clone()),
        }
    }
}

/// A 0-d or 1-d integer tensor known at import time, possibly holding symbolic dims: what
/// `Shape` gives for a symbolic shape, and what shape arithmetic makes of it.
#[derive(Clone, Debug)]
pub struct SymList {
    pub elems: Vec<SymInt>,
    pub scalar: bool,
    pub dtype: DType,
}

impl SymList {
    pub fn is_static(&self) -> bool {
        self.elems.iter().all(|e| matches!(e, SymInt::I(_)))
    }
}

/// What an ONNX value name stands for.
#[derive(Clone, Debug)]
pub enum Slot {
    Val(Value),
    Syms(SymList),
}

/// Per-model import state.
pub struct Importer<'m> {
    pub opts: &'m ImportOptions,
    pub g: Graph,
    pub opset: i64,
    env: HashMap<String, Slot>,
    inits: HashMap<&'m str, &'m TensorProto>,
    /// Data of values known at import time (constants and folded results).
    pub consts: HashMap<Value, Arc<Tensor>>,
    budget: Budget,
    dir: Option<&'m Path>,
    blob_names: HashSet<String>,
    /// The size symbol of each `dim_param` of the graph's inputs (`reserve_symbols`): one
    /// symbol per distinct name, distinct names never sharing one.
    symbols: HashMap<String, String>,
    /// Every symbol given out, so a fresh one (`unk1` ...) is new.
    taken: HashSet<String>,
    n_syms: usize,
    fold_fuel: u64,
}

pub type NResult<T> = Result<T, NodeError>;

fn tensor_err(e: ImportError) -> NodeError {
    NodeError::Tensor(Box::new(e))
}

/// The default-domain opset of a model.
pub fn default_opset(model: &ModelProto) -> Option<i64> {
    model.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version)
}

fn is_default_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

/// Whether the importer converts `op_type` of `domain`: the default domain's table, and the
/// few ops of other domains that `recur.rs` imports (`ai.onnx.preview::FlexAttention`), and
/// the custom kernels registered now for their domains (`crate::ops::custom`).
fn op_supported(domain: &str, op_type: &str, opset: i64) -> bool {
    if is_default_domain(domain) {
        super::ops::is_supported(op_type, opset)
    } else {
        super::recur::is_supported_in(domain, op_type) || crate::ops::custom::lookup_onnx(domain, op_type).is_some()
    }
}

/// A symbol name from a `dim_param`: letters, digits and `_` (others become `_`), not
/// starting with a digit.
fn symbol_name(param: &str) -> String {
    let mut s: String = param.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "s_");
    }
    s
}

/// Every op type the model uses that ladder cannot import, with counts.
fn census(model: &ModelProto, graph: &GraphProto, opset: i64) -> Vec<UnsupportedOp> {
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut stack: Vec<&GraphProto> = vec![graph];
    while let Some(g) = stack.pop() {
        for n in &g.node {
            for a in &n.attribute {
                stack.extend(a.g.iter());
                stack.extend(a.graphs.iter());
            }
            if n.op_type.is_empty() {
                continue;
            }
            if !op_supported(&n.domain, &n.op_type, opset) {
                *counts.entry((n.domain.clone(), n.op_type.clone())).or_default() += 1;
            }
        }
    }
    counts
        .into_iter()
        .map(|((domain, op_type), count)| {
            let opset = if is_default_domain(&domain) {
                opset
            } else {
                model.opset_import.iter().find(|o| o.domain == domain).map_or(-1, |o| o.version)
            };
            UnsupportedOp { domain, op_type, opset, count }
        })
        .collect()
}

/// Ops whose meaning is the same at every opset from 1 on: a model below [`MIN_OPSET`] that
/// uses only these imports.
const STABLE_SINCE_OPSET_1: &[&str] = &["Identity", "Not"];

fn only_stable_ops(graph: &GraphProto) -> bool {
    graph.node.iter().all(|n| {
        is_default_domain(&n.domain) && STABLE_SINCE_OPSET_1.contains(&n.op_type.as_str()) && n.attribute.is_empty()
    })
}

/// Converts a decoded model.
pub fn import_model(model: &ModelProto, opts: &ImportOptions, dir: Option<&Path>) -> Result<Graph, ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::Missing("the model's graph".into()))?;
    let mut stack: Vec<&GraphProto> = vec![graph];
    while let Some(g) = stack.pop() {
        for (index, n) in g.node.iter().enumerate() {
            if n.op_type.is_empty() {
                return Err(ImportError::Missing(format!(
                    "the op_type of node {index}{}",
                    if n.name.is_empty() { String::new() } else { format!(" `{}`", n.name) }
                )));
            }
            for a in &n.attribute {
                stack.extend(a.g.iter());
                stack.extend(a.graphs.iter());
            }
        }
    }
    let unsupported = census(model, graph, default_opset(model).unwrap_or(-1));
    if !unsupported.is_empty() {
        return Err(ImportError::Unsupported(unsupported));
    }
    let opset =
        default_opset(model).ok_or_else(|| ImportError::Missing("an opset_import for the default domain".into()))?;
    let stable_legacy = (1..MIN_OPSET).contains(&opset) && only_stable_ops(graph);
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) && !stable_legacy {
        return Err(ImportError::Opset(opset));
    }
    let name = if graph.name.is_empty() { "onnx" } else { graph.name.as_str() };
    let mut imp = Importer::new(opts, name, opset, dir);
    for t in &graph.initializer {
        if t.name.is_empty() {
            return Err(ImportError::Missing("the name of an initializer".into()));
        }
        imp.inits.insert(t.name.as_str(), t);
    }
    if !graph.sparse_initializer.is_empty() {
        return Err(ImportError::Graph("sparse initializers are not supported".into()));
    }
    imp.reserve_symbols(graph);
    for input in &graph.input {
        if input.name.is_empty() {
            return Err(ImportError::Missing("the name of a graph input".into()));
        }
        if imp.inits.contains_key(input.name.as_str()) {
            // An input with an initializer is a constant with a default (IR < 4): the
            // initializer is used.
            continue;
        }
        let ty = imp.value_type(input)?;
        if imp.g.value_by_name(&input.name).is_some() {
            return Err(ImportError::Graph(format!("graph input `{}` is declared twice", input.name)));
        }
        let v = imp.g.add_input(&input.name, ty).map_err(|e| ImportError::Graph(e.to_string()))?;
        imp.env.insert(input.name.clone(), Slot::Val(v));
    }
    imp.run_nodes(&graph.node, 0)?;
    if graph.output.is_empty() {
        return Err(ImportError::Missing("graph outputs".into()));
    }
    if let Some(name) = &opts.probe {
        // The probed value is the only output.
        let slot = imp.binding(name).ok_or_else(|| {
            ImportError::Graph(format!("`{name}` is not computed by the main graph, so its value cannot be probed"))
        })?;
        let v = imp.materialize(&slot, name).map_err(|e| ImportError::Graph(format!("probe `{name}`: {e}")))?;
        imp.g.add_output(name, v).map_err(|e| ImportError::Graph(e.to_string()))?;
        return Ok(imp.g);
    }
    for out in &graph.output {
        let slot = imp.lookup(&out.name).map_err(|e| match e {
            NodeError::Undefined(name) => ImportError::Graph(format!("graph output `{name}` is never computed")),
            e => ImportError::Graph(format!("graph output `{}`: {e}", out.name)),
        })?;
        let v = imp.materialize(&slot, &out.name).map_err(|e| ImportError::Graph(format!("graph output: {e}")))?;
        imp.g.add_output(&out.name, v).map_err(|e| ImportError::Graph(e.to_string()))?;
    }
    Ok(imp.g)
}

/// The graph's declared inputs (those without an initializer), with the types the importer
/// gives them: a `dim_param` is a symbol, an unknown or negative dim a fresh one, and
/// `options.input_shapes` makes them concrete.
pub fn input_types(model: &ModelProto, opts: &ImportOptions) -> Result<Vec<(String, TensorType)>, ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::Missing("the model's graph".into()))?;
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut imp = Importer::new(opts, "inputs", default_opset(model).unwrap_or(0), None);
    imp.reserve_symbols(graph);
    let mut out = Vec::new();
    for input in graph.input.iter().filter(|i| !inits.contains(i.name.as_str())) {
        out.push((input.name.clone(), imp.value_type(input)?));
    }
    Ok(out)
}

impl<'m> Importer<'m> {
    fn new(opts: &'m ImportOptions, name: &str, opset: i64, dir: Option<&'m Path>) -> Importer<'m> {
        Importer {
            opts,
            g: Graph::new(name),
            opset,
            env: HashMap::new(),
            inits: HashMap::new(),
            consts: HashMap::new(),
            budget: Budget::default(),
            dir,
            blob_names: HashSet::new(),
            symbols: HashMap::new(),
            taken: HashSet::new(),
            n_syms: 0,
            fold_fuel: 1 << 26,
        }
    }

    /// Gives every `dim_param` of `graph`'s inputs its symbol before any input is typed, so
    /// that neither two names that read alike once sanitized (`a-b`, `a.b`) nor a fresh
    /// symbol for an unnamed dim (`unk1`) and a name that happens to be `unk1` share one:
    /// symbols that are one would force sizes to be equal that the model leaves free.
    fn reserve_symbols(&mut self, graph: &GraphProto) {
        use proto::tensor_shape_proto::dimension::Value as V;
        let mut next: HashMap<String, usize> = HashMap::new();
        let params = graph
            .input
            .iter()
            .filter_map(|i| match i.r#type.as_ref()?.value.as_ref()? {
                proto::type_proto::Value::TensorType(t) => t.shape.as_ref(),
                _ => None,
            })
            .flat_map(|s| s.dim.iter())
            .filter_map(|d| match &d.value {
                Some(V::DimParam(p)) if !p.is_empty() => Some(p),
                _ => None,
            });
        for p in params {
            if self.symbols.contains_key(p) {
                continue;
            }
            let base = symbol_name(p);
            let mut name = base.clone();
            while self.taken.contains(&name) {
                let k = next.entry(base.clone()).or_insert(1);
                *k += 1;
                name = format!("{base}_{k}");
            }
            self.taken.insert(name.clone());
            self.symbols.insert(p.clone(), name);
        }
    }

    /// A size symbol no `dim_param` and no earlier fresh symbol has.
    fn fresh_symbol(&mut self) -> String {
        loop {
            self.n_syms += 1;
            let name = format!("unk{}", self.n_syms);
            if self.taken.insert(name.clone()) {
                return name;
            }
        }
    }

    /// The ladder type of a graph input.
    fn value_type(&mut self, vi: &proto::ValueInfoProto) -> Result<TensorType, ImportError> {
        let what = format!("graph input `{}`", vi.name);
        let ty = vi.r#type.as_ref().ok_or_else(|| ImportError::Missing(format!("the type of {what}")))?;
        let tt = match &ty.value {
            Some(proto::type_proto::Value::TensorType(t)) => t,
            Some(_) => {
                return Err(ImportError::Graph(format!(
                    "{what} is not a tensor (sequences, maps, optionals and sparse tensors are not supported)"
                )))
            }
            None => return Err(ImportError::Missing(format!("the type of {what}"))),
        };
        if tt.elem_type == 0 {
            return Err(ImportError::Missing(format!("the element type of {what}")));
        }
        let dtype = dtype_of(tt.elem_type)
            .ok_or_else(|| ImportError::DType { what: what.clone(), elem_type: dtype_name(tt.elem_type) })?;
        let shape = tt
            .shape
            .as_ref()
            .ok_or_else(|| ImportError::Graph(format!("{what} has no shape (ladder needs every input's rank)")))?;
        let mut dims = Vec::with_capacity(shape.dim.len());
        let mut statics = Vec::new();
        for d in &shape.dim {
            use proto::tensor_shape_proto::dimension::Value as V;
            match &d.value {
                Some(V::DimValue(n)) if *n >= 0 => {
                    statics.push(*n);
                    check_dims(&what, &[*n])?;
                    dims.push(Dim::new(*n as u64));
                }
                Some(V::DimParam(p)) if !p.is_empty() => {
                    let name = self.symbols.get(p).cloned().unwrap_or_else(|| symbol_name(p));
                    dims.push(Dim::sym(&name));
                }
                // No size, an empty name, or a negative value (`-1`, as Paddle's exporter
                // writes a dynamic dim): a fresh symbol.
                _ => {
                    let name = self.fresh_symbol();
                    dims.push(Dim::sym(&name));
                }
            }
        }
        check_dims(&what, &statics)?;
        if let Some(sizes) = self.opts.input_shapes.get(&vi.name) {
            // A specialized import: the given sizes, where they fit the declared ones.
            let fits =
                sizes.len() == dims.len() && dims.iter().zip(sizes).all(|(d, &n)| d.as_const().is_none_or(|c| c == n));
            if !fits {
                return Err(ImportError::Graph(format!(
                    "{what} is declared {}, so it cannot have the shape {sizes:?}",
                    Shape(dims.into())
                )));
            }
            return Ok(TensorType::new(dtype, Shape::from_static(sizes)));
        }
        Ok(TensorType::new(dtype, Shape(dims.into())))
    }

    /// Converts nodes in order. `depth` counts inlined subgraphs.
    pub fn run_nodes(&mut self, nodes: &'m [NodeProto], depth: u32) -> Result<(), ImportError> {
        for (index, node) in nodes.iter().enumerate() {
            // A probe for a graph input or an initializer needs no node at all.
            if depth == 0
                && self
                    .opts
                    .probe
                    .as_ref()
                    .is_some_and(|p| self.env.contains_key(p) || self.inits.contains_key(p.as_str()))
            {
                return Ok(());
            }
            let node_ref = || NodeRef { index, name: node.name.clone(), op_type: node.op_type.clone() };
            if node.op_type.is_empty() {
                return Err(ImportError::Missing(format!("the op_type of node {index}")));
            }
            let outs = match super::ops::convert(self, node, depth) {
                Ok(outs) => outs,
                Err(NodeError::Undefined(name)) => return Err(ImportError::UndefinedValue { node: node_ref(), name }),
                Err(NodeError::Subgraph(e) | NodeError::Tensor(e)) => return Err(*e),
                Err(NodeError::NeedsValue { input, what }) => {
                    let name = node.input.get(input).cloned().unwrap_or_default();
                    return Err(ImportError::NeedsValue { node: node_ref(), name, what });
                }
                Err(error) => return Err(ImportError::Node { node: node_ref(), error }),
            };
            for (i, name) in node.output.iter().enumerate() {
                if name.is_empty() {
                    continue;
                }
                let Some(slot) = outs.get(i).cloned().flatten() else {
                    return Err(ImportError::Node {
                        node: node_ref(),
                        error: NodeError::Unsupported(format!("output {i} (`{name}`)")),
                    });
                };
                if let Slot::Val(v) = &slot {
                    // Shape attributes hold i64: a larger static dim (a `Tile` of an empty
                    // tensor by 2^62, say) could not be written back as a graph.
                    let too_big =
                        self.g.ty(*v).shape.dims().iter().find_map(|d| d.as_const().filter(|&n| n > i64::MAX as u64));
                    if let Some(n) = too_big {
                        return Err(ImportError::Node {
                            node: node_ref(),
                            error: NodeError::Invalid(format!(
                                "output {i} (`{name}`) has a dim of {n}, above 2^63 - 1"
                            )),
                        });
                    }
                    self.name_value(*v, name);
                }
                self.env.insert(name.clone(), slot);
            }
            if depth == 0 && self.opts.probe.as_ref().is_some_and(|p| node.output.contains(p)) {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Names a value after its ONNX name when it has no name yet and the name is free.
    fn name_value(&mut self, v: Value, name: &str) {
        if self.g.name_of(v).is_some() || name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
            return;
        }
        // A name another value has already is left alone (`set_name` refuses it).
        let _ = self.g.set_name(v, name);
    }

    /// What `name` is bound to now (not converting an initializer).
    pub fn binding(&self, name: &str) -> Option<Slot> {
        self.env.get(name).cloned()
    }

    /// Binds `name` (an inlined subgraph's input) to `slot`, or removes its binding.
    pub fn set_binding(&mut self, name: &str, slot: Option<Slot>) {
        match slot {
            Some(slot) => {
                if let Slot::Val(v) = &slot {
                    self.name_value(*v, name);
                }
                self.env.insert(name.to_string(), slot);
            }
            None => {
                self.env.remove(name);
            }
        }
    }

    /// Makes an inlined subgraph's initializers visible.
    pub fn add_initializers(&mut self, g: &'m GraphProto) {
        for t in &g.initializer {
            self.inits.insert(t.name.as_str(), t);
        }
    }

    /// What `name` stands for: an earlier node's output, an input, or an initializer
    /// (converted the first time it is used).
    pub fn lookup(&mut self, name: &str) -> NResult<Slot> {
        if let Some(s) = self.env.get(name) {
            if let (Slot::Val(v), Some(t)) = (s, self.opts.known_values.get(name)) {
                if self.consts.contains_key(v) {
                    return Ok(s.clone());
                }
                // A value computed at run time that this specialized import knows.
                let v = self.constant(name, (**t).clone());
                self.env.insert(name.to_string(), Slot::Val(v));
                return Ok(Slot::Val(v));
            }
            return Ok(s.clone());
        }
        let Some(&t) = self.inits.get(name) else {
            return Err(NodeError::Undefined(name.to_string()));
        };
        let tensor = tensor_from_proto(t, self.opts, self.dir, &mut self.budget).map_err(tensor_err)?;
        let v = self.constant(name, tensor);
        self.name_value(v, name);
        self.env.insert(name.to_string(), Slot::Val(v));
        Ok(Slot::Val(v))
    }

    /// Converts a tensor attribute or other embedded tensor, charging the budget.
    pub fn tensor(&mut self, t: &TensorProto) -> NResult<Tensor> {
        tensor_from_proto(t, self.opts, self.dir, &mut self.budget).map_err(tensor_err)
    }

    /// A `const` node for `tensor`, its blob named after `hint` (made unique).
    pub fn constant(&mut self, hint: &str, tensor: Tensor) -> Value {
        let tensor = Arc::new(tensor);
        let base = if hint.is_empty() { "c" } else { hint };
        let (mut name, mut k) = (base.to_string(), 0);
        // A name neither this importer nor the graph has used (the graph refuses a duplicate).
        let id = loop {
            if !self.blob_names.contains(&name) {
                if let Ok(id) = self.g.add_blob(&name, tensor.clone()) {
                    break id;
                }
            }
            k += 1;
            name = format!("{base}_{k}");
        };
        self.blob_names.insert(name);
        let v = self.g.add_const(id);
        self.consts.insert(v, tensor);
        v
    }

    /// A scalar of `dtype` (a `full` node, so it is not a blob).
    pub fn scalar(&mut self, dtype: DType, value: f64) -> NResult<Value> {
        self.emit(
            OpKind::Full,
            &[],
            &[
                ("shape", AttrValue::Dims(vec![])),
                ("value", AttrValue::Float(value)),
                ("dtype", AttrValue::DType(dtype)),
            ],
        )
    }

    /// Turns a slot into a ladder value: a shape list becomes a constant when it is all
    /// numbers, and a `dim_values` node (sizes evaluated when the plan runs) otherwise.
    pub fn materialize(&mut self, slot: &Slot, name: &str) -> NResult<Value> {
        let s = match slot {
            Slot::Val(v) => return Ok(*v),
            Slot::Syms(s) => s,
        };
        let shape: Vec<usize> = if s.scalar { vec![] } else { vec![s.elems.len()] };
        if s.is_static() {
            let ints: Vec<i64> = s.elems.iter().map(|e| if let SymInt::I(n) = e { *n } else { 0 }).collect();
            let t = if s.dtype.is_int() {
                Tensor::from_ints(s.dtype, &shape, ints)
            } else {
                Tensor::from_f64_as(s.dtype, &shape, &ints.iter().map(|&x| x as f64).collect::<Vec<_>>())
            };
            let t = t.map_err(|e| NodeError::Invalid(e.to_string()))?;
            return Ok(self.constant(name, t));
        }
        // Runs of sizes become `dim_values` nodes, negative numbers constants, joined by `cat`.
        let mut parts: Vec<Value> = Vec::new();
        let mut run: Vec<Dim> = Vec::new();
        let dtype = s.dtype;
        let flush = |imp: &mut Importer, run: &mut Vec<Dim>, parts: &mut Vec<Value>| -> NResult<()> {
            if !run.is_empty() {
                let dims = AttrValue::Dims(run.drain(..).map(Some).collect());
                parts.push(imp.emit(OpKind::DimValues, &[], &[("dims", dims), ("dtype", AttrValue::DType(dtype))])?);
            }
            Ok(())
        };
        for e in &s.elems {
            match e.to_dim() {
                Some(d) => run.push(d),
                None => {
                    flush(self, &mut run, &mut parts)?;
                    let SymInt::I(n) = e else { continue };
                    let t = Tensor::from_f64_as(dtype, &[1], &[*n as f64])
                        .map_err(|e| NodeError::Invalid(e.to_string()))?;
                    parts.push(self.constant(name, t));
                }
            }
        }
        flush(self, &mut run, &mut parts)?;
        let mut v = match parts.as_slice() {
            [one] => *one,
            _ => self.emit(OpKind::Cat, &parts, &[("axis", AttrValue::Int(0))])?,
        };
        if s.scalar {
            v = self.emit(OpKind::Reshape, &[v], &[("shape", AttrValue::Dims(vec![]))])?;
        }
        Ok(v)
    }

    pub fn ty(&self, v: Value) -> &TensorType {
        self.g.ty(v)
    }

    pub fn const_of(&self, v: Value) -> Option<Arc<Tensor>> {
        self.consts.get(&v).cloned()
    }

    /// Adds a ladder op. When every argument is known and the result is a small static
    /// integer or bool tensor, it is computed now (with the interpreter's `eval`) and becomes
    /// a constant instead.
    pub fn emit(&mut self, op: OpKind, args: &[Value], attrs: &[(&str, AttrValue)]) -> NResult<Value> {
        let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let attrs =
            Attrs::resolve(op.spec().attrs, given).map_err(|e| NodeError::Invalid(format!("{}: {e}", op.name())))?;
        if let Some(v) = self.try_fold(op, args, &attrs) {
            return Ok(v);
        }
        Ok(self.g.add_node(op, args, attrs)?)
    }

    fn try_fold(&mut self, op: OpKind, args: &[Value], attrs: &Attrs) -> Option<Value> {
        // Never a custom kernel: its implementation is the one registered when it runs.
        if op == OpKind::Custom {
            return None;
        }
        let known: Option<Vec<Arc<Tensor>>> = args.iter().map(|a| self.consts.get(a).cloned()).collect();
        let known = known?;
        let types: Vec<&TensorType> = args.iter().map(|&a| self.g.ty(a)).collect();
        let ty = crate::ops::infer(op, attrs, &types).ok()?;
        if ty.dtype.is_float() {
            return None;
        }
        let dims = ty.shape.as_static()?;
        let numel = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        if numel > self.opts.limits.max_fold_elements {
            return None;
        }
        let work: u64 = known.iter().map(|t| t.numel() as u64).sum::<u64>() + numel;
        if work > self.fold_fuel {
            return None;
        }
        self.fold_fuel -= work;
        let mut ctx = EvalCtx::new(false, work.saturating_mul(64).max(1 << 16));
        let out_shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        ctx.out_shape = Some(out_shape.clone());
        let views: Vec<View> = known.iter().map(|t| View::from_tensor(t)).collect();
        let result = (op.spec().eval)(op, &mut ctx, attrs, &views, &ty).ok()?;
        if result.shape() != out_shape.as_slice() || result.dtype() != ty.dtype {
            return None;
        }
        Some(self.constant("fold", result.to_tensor()))
    }
}

/// Input and attribute access for one node.
impl<'m> Importer<'m> {
    /// Input `i`, or `None` when absent (past the end or an empty name).
    pub fn slot(&mut self, node: &NodeProto, i: usize) -> NResult<Option<Slot>> {
        match node.input.get(i) {
            Some(name) if !name.is_empty() => self.lookup(name).map(Some),
            _ => Ok(None),
        }
    }

    pub fn opt_input(&mut self, node: &NodeProto, i: usize) -> NResult<Option<Value>> {
        match self.slot(node, i)? {
            Some(s) => {
                let name = node.input[i].clone();
                self.materialize(&s, &name).map(Some)
            }
            None => Ok(None),
        }
    }

    pub fn input(&mut self, node: &NodeProto, i: usize) -> NResult<Value> {
        self.opt_input(node, i)?.ok_or_else(|| NodeError::Invalid(format!("input {i} is required")))
    }

    /// Input `i` as a list of (possibly symbolic) integers, when it is known at import.
    pub fn sym_input(&mut self, node: &NodeProto, i: usize) -> NResult<Option<SymList>> {
        match self.slot(node, i)? {
            None => Ok(None),
            Some(Slot::Syms(s)) => Ok(Some(s)),
            Some(Slot::Val(v)) => Ok(self.const_of(v).and_then(|t| sym_list_of(&t))),
        }
    }

    /// Input `i` as a shape list for arithmetic on sizes: [`Importer::sym_input`], and also a
    /// small constant list of whole floats (sizes cast to floats, as exporters compute them).
    pub fn size_input(&mut self, node: &NodeProto, i: usize) -> NResult<Option<SymList>> {
        if let Some(s) = self.sym_input(node, i)? {
            return Ok(Some(s));
        }
        let Some(Slot::Val(v)) = self.slot(node, i)? else { return Ok(None) };
        let Some(t) = self.const_of(v) else { return Ok(None) };
        if t.shape().len() > 1 || !t.dtype().is_float() || t.numel() > 64 {
            return Ok(None);
        }
        let vals = t.to_f64_vec();
        if !vals.iter().all(|x| x.fract() == 0.0 && x.abs() < 9.0e15) {
            return Ok(None);
        }
        let elems = vals.iter().map(|&x| SymInt::I(x as i64)).collect();
        Ok(Some(SymList { elems, scalar: t.shape().is_empty(), dtype: t.dtype() }))
    }

    /// Input `i` as constant integers: `None` when absent, an error when not constant.
    pub fn ints_input(&mut self, node: &NodeProto, i: usize, what: &str) -> NResult<Option<Vec<i64>>> {
        match self.sym_input(node, i)? {
            None if self.slot(node, i)?.is_none() => Ok(None),
            None => Err(NodeError::NeedsValue { input: i, what: what.to_string() }),
            Some(s) => {
                let mut out = Vec::with_capacity(s.elems.len());
                for e in s.elems {
                    match e {
                        SymInt::I(n) => out.push(n),
                        SymInt::D(d) => {
                            return Err(NodeError::NeedsStatic(format!(
                                "{what} (input {i}) depends on the symbolic size `{d}`"
                            )))
                        }
                    }
                }
                Ok(Some(out))
            }
        }
    }

    /// Input `i` as a constant float scalar (`None` when absent).
    pub fn float_input(&mut self, node: &NodeProto, i: usize) -> NResult<Option<Result<f64, Value>>> {
        match self.opt_input(node, i)? {
            None => Ok(None),
            Some(v) => match self.const_of(v) {
                Some(t) if t.numel() == 1 => Ok(Some(Ok(t.to_f64_vec()[0]))),
                _ => Ok(Some(Err(v))),
            },
        }
    }
}

/// A known 0-d or 1-d integer tensor as a shape list.
pub fn sym_list_of(t: &Tensor) -> Option<SymList> {
    if t.shape().len() > 1 || !t.dtype().is_int() {
        return None;
    }
    let elems = match t.data() {
        TensorData::I64(v) => v.iter().map(|&x| SymInt::I(x)).collect(),
        TensorData::I32(v) => v.iter().map(|&x| SymInt::I(i64::from(x))).collect(),
        _ => return None,
    };
    Some(SymList { elems, scalar: t.shape().is_empty(), dtype: t.dtype() })
}

pub fn attr<'n>(node: &'n NodeProto, name: &str) -> Option<&'n AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

pub fn a_int(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).map_or(default, |a| a.i)
}

pub fn a_float(node: &NodeProto, name: &str, default: f64) -> f64 {
    attr(node, name).map_or(default, |a| f64::from(a.f))
}

pub fn a_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

pub fn a_floats(node: &NodeProto, name: &str) -> Option<Vec<f32>> {
    attr(node, name).map(|a| a.floats.clone())
}

pub fn a_str(node: &NodeProto, name: &str, default: &str) -> String {
    attr(node, name).map_or_else(|| default.to_string(), |a| String::from_utf8_lossy(&a.s).into_owned())
}

/// One op type and how often a model uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpCount {
    pub domain: String,
    pub op_type: String,
    pub count: usize,
    pub supported: bool,
}

/// What `ladder info` shows about a model, read without converting it.
#[derive(Clone, Debug)]
pub struct ModelSummary {
    pub ir_version: i64,
    pub producer: String,
    pub opsets: Vec<(String, i64)>,
    pub inputs: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    pub initializers: usize,
    pub initializer_bytes: u64,
    pub ops: Vec<OpCount>,
    /// `Ok` when the whole model imports; otherwise why not.
    pub import: Result<(), ImportError>,
}

fn type_string(ty: Option<&proto::TypeProto>) -> String {
    use proto::tensor_shape_proto::dimension::Value as V;
    let Some(ty) = ty else { return "?".into() };
    match &ty.value {
        Some(proto::type_proto::Value::TensorType(t)) => {
            let dt = dtype_of(t.elem_type).map_or_else(|| dtype_name(t.elem_type).to_lowercase(), |d| d.to_string());
            match &t.shape {
                None => format!("{dt}[?]"),
                Some(s) => {
                    let dims: Vec<String> = s
                        .dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(V::DimValue(n)) => n.to_string(),
                            Some(V::DimParam(p)) => p.clone(),
                            None => "?".into(),
                        })
                        .collect();
                    format!("{dt}[{}]", dims.join(", "))
                }
            }
        }
        Some(proto::type_proto::Value::SequenceType(_)) => "sequence".into(),
        Some(proto::type_proto::Value::MapType(_)) => "map".into(),
        Some(proto::type_proto::Value::OptionalType(_)) => "optional".into(),
        Some(proto::type_proto::Value::SparseTensorType(_)) => "sparse tensor".into(),
        None => "?".into(),
    }
}

/// Summarises a decoded model and tries to import it.
pub fn summarize(model: &ModelProto, opts: &ImportOptions, dir: Option<&Path>) -> ModelSummary {
    let opset = default_opset(model).unwrap_or(0);
    let empty = GraphProto::default();
    let graph = model.graph.as_ref().unwrap_or(&empty);
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut stack: Vec<&GraphProto> = vec![graph];
    while let Some(g) = stack.pop() {
        for n in &g.node {
            for a in &n.attribute {
                stack.extend(a.g.iter());
                stack.extend(a.graphs.iter());
            }
            *counts.entry((n.domain.clone(), n.op_type.clone())).or_default() += 1;
        }
    }
    let ops = counts
        .into_iter()
        .map(|((domain, op_type), count)| {
            let supported = op_supported(&domain, &op_type, opset);
            OpCount { domain, op_type, count, supported }
        })
        .collect();
    let initializer_bytes = graph
        .initializer
        .iter()
        .map(|t| {
            let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(u64::try_from(d).ok()?)).unwrap_or(0);
            n.saturating_mul(dtype_of(t.data_type).map_or(1, |d| d.size_bytes() as u64))
        })
        .fold(0u64, u64::saturating_add);
    ModelSummary {
        ir_version: model.ir_version,
        producer: format!("{} {}", model.producer_name, model.producer_version).trim().to_string(),
        opsets: model.opset_import.iter().map(|o| (o.domain.clone(), o.version)).collect(),
        inputs: graph
            .input
            .iter()
            .filter(|i| !inits.contains(i.name.as_str()))
            .map(|i| (i.name.clone(), type_string(i.r#type.as_ref())))
            .collect(),
        outputs: graph.output.iter().map(|o| (o.name.clone(), type_string(o.r#type.as_ref()))).collect(),
        initializers: graph.initializer.len(),
        initializer_bytes,
        ops,
        import: import_model(model, opts, dir).map(|_| ()),
    }
}
