//! `Rewriter`: builds a new graph from an old one, node by node, keeping a map from old
//! values to new ones. Every graph-to-graph pass uses it, so they share how inputs, blobs,
//! names and outputs carry over.

use cranelift_entity::EntityRef;

use crate::ir::{AttrValue, Attrs, Graph, GraphError, TensorType, Value};
use crate::ops::OpKind;

/// A graph being rebuilt from `old`.
pub struct Rewriter<'a> {
    pub old: &'a Graph,
    pub new: Graph,
    map: Vec<Option<Value>>,
}

impl<'a> Rewriter<'a> {
    /// Starts a new graph with `old`'s name, blobs and inputs (same names and types). Inputs
    /// are mapped; nothing else is.
    pub fn new(old: &'a Graph) -> Rewriter<'a> {
        let mut new = Graph::new(&old.name);
        for (_, blob) in old.blobs() {
            // Names are unique in `old`, so they are unique here.
            let _ = new.add_blob(&blob.name, blob.tensor.clone());
        }
        let mut map = vec![None; old.len()];
        for (i, &v) in old.inputs().iter().enumerate() {
            let name = old.input_name(i);
            // Input names are unique in a verified graph.
            if let Ok(nv) = new.add_input(&name, old.ty(v).clone()) {
                map[v.index()] = Some(nv);
            }
        }
        Rewriter { old, new, map }
    }

    /// Starts a new graph with `old`'s name and blobs and no inputs: add them with
    /// [`Rewriter::add_input`].
    pub fn without_inputs(old: &'a Graph) -> Rewriter<'a> {
        let mut new = Graph::new(&old.name);
        for (_, blob) in old.blobs() {
            let _ = new.add_blob(&blob.name, blob.tensor.clone());
        }
        Rewriter { old, new, map: vec![None; old.len()] }
    }

    /// Adds an input named `name` of old value `old`'s type, and maps `old` to it.
    pub fn add_input(&mut self, old: Value, name: &str) -> Result<Value, GraphError> {
        let new = self.new.add_input(name, self.old.ty(old).clone())?;
        self.set(old, new);
        Ok(new)
    }

    /// The new value an old one maps to. Passes map every value before its uses, so a miss
    /// is a bug in the pass.
    pub fn get(&self, old: Value) -> Value {
        self.map[old.index()].unwrap_or_else(|| panic!("{old} used before the pass mapped it"))
    }

    pub fn try_get(&self, old: Value) -> Option<Value> {
        self.map.get(old.index()).copied().flatten()
    }

    /// Maps `old` to `new`, and gives `new` the old value's name if it has none yet.
    pub fn set(&mut self, old: Value, new: Value) {
        self.map[old.index()] = Some(new);
        if let Some(name) = self.old.name_of(old) {
            if self.new.name_of(new).is_none() && self.new.value_by_name(name).is_none() {
                let _ = self.new.set_name(new, name);
            }
        }
    }

    pub fn ty(&self, new: Value) -> &TensorType {
        self.new.ty(new)
    }

    /// Adds a node to the new graph.
    pub fn emit(&mut self, op: OpKind, args: &[Value], attrs: Attrs) -> Result<Value, GraphError> {
        self.new.add_node(op, args, attrs)
    }

    /// Adds a node given attributes by name (defaults filled in).
    pub fn emit_with(&mut self, op: OpKind, args: &[Value], attrs: &[(&str, AttrValue)]) -> Result<Value, GraphError> {
        let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        let attrs = Attrs::resolve(op.spec().attrs, given).map_err(|error| GraphError::Op {
            op: op.name(),
            value: Value::new(self.new.len()),
            error: crate::ops::OpError::Attr(error),
        })?;
        self.new.add_node(op, args, attrs)
    }

    /// Copies an old node (a const, or an op on mapped arguments) and maps it.
    pub fn copy(&mut self, old: Value) -> Result<Value, GraphError> {
        let node = self.old.node(old);
        let new = match node.op {
            OpKind::Input => self.get(old),
            OpKind::Const => match self.old.const_blob(old).and_then(|b| self.new.blob_by_name(&self.old.blob(b).name))
            {
                Some(b) => self.new.add_const(b),
                None => return Err(GraphError::NoSuchValue(old)),
            },
            op => {
                let args: Vec<Value> = node.args.iter().map(|&a| self.get(a)).collect();
                self.new.add_node(op, &args, node.attrs.clone())?
            }
        };
        self.set(old, new);
        Ok(new)
    }

    /// Adds the old graph's outputs (mapped, same names) and returns the new graph.
    pub fn finish(mut self) -> Result<Graph, GraphError> {
        for o in self.old.outputs() {
            let v = self.get(o.value);
            self.new.add_output(&o.name, v)?;
        }
        Ok(self.new)
    }
}
