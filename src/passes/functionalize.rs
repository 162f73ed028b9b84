//! Functionalization: views and in-place ops → pure SSA.
//!
//! With mutation, a graph's meaning depends on node order in ways its dataflow edges do not
//! show (`y = view(x); add_(x, 1); sum(y)` reads `x` after the add). This pass makes every
//! such dependency an edge, after which reordering, fusion, DCE and buffer reuse are local
//! decisions.
//!
//! How: each value belongs to a *storage* (its base: the input, const or op result that
//! owns the memory) and reaches it through a chain of view ops (`view`, `permute`,
//! `transpose`, `slice`, `select`, `squeeze`, `unsqueeze`, `split`, `chunk`, `expand`,
//! `broadcast_in_dim`). The pass keeps, per storage, its current functional value. An in-place
//! op on `x` becomes its functional form (`add_` → `add` + `convert_element_type`, `fill_` →
//! `full`, `slice_assign_` → `slice_scatter`, …) computing `x`'s new contents; the new contents
//! are then written back up the view chain with each view's inverse (`view` → `reshape` back,
//! `permute` → the inverse permutation, `slice`/`select`/`split`/`chunk` → `slice_scatter`),
//! giving the storage's new value. A later read of any alias of that storage is regenerated
//! from the new value by replaying its view chain.
//!
//! Mutated graph inputs become extra outputs named `<input>.mutated`; the returned
//! [`Epilogue`] says which output is copied back into which caller buffer. Per output it also
//! records whether the caller's view of it aliases an input or an intermediate, in the
//! spirit of AOTAutograd's view-and-mutation metadata.
//!
//! Deliberately not done: writing through a broadcast view (several elements share one
//! location; the interpreter refuses it too) is a typed error; one to no elements writes
//! nothing and leaves the base as it is. A run of the original graph
//! that fails (a `view` whose strides forbid it, say) may succeed after functionalization:
//! the pass preserves the results of runs that succeed. Dead nodes are left for `simplify`.

use std::collections::HashMap;

use cranelift_entity::EntityRef;

use super::rewrite::Rewriter;
use crate::ir::{AttrValue, Attrs, Graph, GraphError, Value};
use crate::ops::OpKind;

/// Why a graph could not be functionalized.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FunctionalizeError {
    #[error("{value} = {op}: writes through a broadcast view of {base}, where several elements share one location")]
    WriteThroughBroadcast { value: String, op: &'static str, base: String },
    /// A write through a strided slice (`step > 1`) of a symbolic length: writing every
    /// step-th element back needs interior padding of a symbolic size, which `pad` does not
    /// have (`slice_scatter`'s shape rule refuses it).
    #[error("{value} = {op}: writes through {view}, a slice with step {step} of the symbolic length {len}: a strided write-back needs a static length")]
    SymbolicStridedWrite { value: String, op: &'static str, view: String, step: i64, len: String },
    #[error("rebuilding the graph failed: {0}")]
    Graph(#[from] GraphError),
}

/// How a caller's buffers relate to the functional graph's outputs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Epilogue {
    /// Inputs whose data the original graph mutated, with the functional output holding
    /// their final contents (to be copied back into the caller's buffer).
    pub mutations: Vec<InputMutation>,
    /// Per original output: what the value aliased in the original graph.
    pub output_aliases: Vec<OutputAlias>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputMutation {
    pub input: usize,
    pub output: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputAlias {
    /// A fresh value.
    None,
    /// The input itself or a view of it.
    Input(usize),
    /// A view of (or the same storage as) another intermediate value.
    Intermediate,
}

/// A functional graph and its epilogue.
#[derive(Clone, Debug, PartialEq)]
pub struct Functional {
    pub graph: Graph,
    pub epilogue: Epilogue,
}

/// Where a value's memory comes from: its storage's base and the view nodes from it.
#[derive(Clone, Debug)]
struct Alias {
    base: Value,
    chain: Vec<Value>,
}

struct State<'a> {
    rw: Rewriter<'a>,
    alias: Vec<Option<Alias>>,
    /// Current functional value of each storage, by base.
    current: HashMap<Value, Value>,
    version: HashMap<Value, u32>,
    /// Last regenerated functional value of a value, with the storage version it reflects.
    cache: HashMap<Value, (u32, Value)>,
}

fn is_view(op: OpKind) -> bool {
    op.is_view() && op.spec().arity == crate::ops::Arity::Exactly(1)
}

/// Rewrites `g` into pure SSA; see the module docs.
pub fn functionalize(g: &Graph) -> Result<Functional, FunctionalizeError> {
    let mut st = State {
        rw: Rewriter::new(g),
        alias: vec![None; g.len()],
        current: HashMap::new(),
        version: HashMap::new(),
        cache: HashMap::new(),
    };
    for (v, node) in g.nodes() {
        let op = node.op;
        if op.mutates() {
            st.mutate(v)?;
        } else if is_view(op) {
            let arg = node.args[0];
            let parent = st.read(arg)?;
            let new = st.rw.emit(op, &[parent], node.attrs.clone())?;
            st.rw.set(v, new);
            let mut alias = st.alias_of(arg).clone();
            alias.chain.push(v);
            let ver = st.version[&alias.base];
            st.alias[v.index()] = Some(alias);
            st.cache.insert(v, (ver, new));
        } else {
            let new = match op {
                OpKind::Input | OpKind::Const => st.rw.copy(v)?,
                _ => {
                    let args = node.args.iter().map(|&a| st.read(a)).collect::<Result<Vec<_>, _>>()?;
                    let new = st.rw.emit(op, &args, node.attrs.clone())?;
                    st.rw.set(v, new);
                    new
                }
            };
            st.alias[v.index()] = Some(Alias { base: v, chain: Vec::new() });
            st.current.insert(v, new);
            st.version.insert(v, 0);
            st.cache.insert(v, (0, new));
        }
    }

    let mut epilogue = Epilogue::default();
    let mut outputs = Vec::new();
    for o in g.outputs() {
        outputs.push((o.name.clone(), st.read(o.value)?));
        let alias = st.alias_of(o.value);
        let aliasing = if let Some(i) = g.inputs().iter().position(|&x| x == alias.base) {
            OutputAlias::Input(i)
        } else if alias.base != o.value {
            OutputAlias::Intermediate
        } else {
            OutputAlias::None
        };
        epilogue.output_aliases.push(aliasing);
    }
    for (i, &x) in g.inputs().iter().enumerate() {
        if st.version.get(&x).copied().unwrap_or(0) > 0 {
            let mut name = format!("{}.mutated", g.input_name(i));
            while outputs.iter().any(|(n, _)| *n == name) {
                name.push('_');
            }
            epilogue.mutations.push(InputMutation { input: i, output: outputs.len() });
            outputs.push((name, st.current[&x]));
        }
    }
    let mut graph = st.rw.new;
    for (name, v) in outputs {
        graph.add_output(&name, v)?;
    }
    Ok(Functional { graph, epilogue })
}

impl State<'_> {
    fn alias_of(&self, v: Value) -> &Alias {
        self.alias[v.index()].as_ref().unwrap_or_else(|| panic!("{v} has no alias record"))
    }

    /// The functional value of old value `v` as of now: regenerated from its storage's
    /// current value when the storage was written since `v` was last read.
    fn read(&mut self, v: Value) -> Result<Value, FunctionalizeError> {
        let alias = self.alias_of(v).clone();
        let ver = self.version[&alias.base];
        if let Some(&(cached_ver, value)) = self.cache.get(&v) {
            if cached_ver == ver {
                return Ok(value);
            }
        }
        let mut x = self.current[&alias.base];
        for &view in &alias.chain {
            let node = self.rw.old.node(view);
            x = self.rw.emit(node.op, &[x], node.attrs.clone())?;
        }
        self.cache.insert(v, (ver, x));
        Ok(x)
    }

    /// Handles an in-place node `m`: computes the target's new contents, writes them back
    /// through the target's view chain, and advances the storage's version.
    fn mutate(&mut self, m: Value) -> Result<(), FunctionalizeError> {
        let node = self.rw.old.node(m).clone();
        let target = node.args[0];
        let args = node.args.iter().map(|&a| self.read(a)).collect::<Result<Vec<_>, _>>()?;
        let new_contents = self.functional_form(&node, &args)?;
        let alias = self.alias_of(target).clone();

        // Parents along the chain: parents[i] is the input of chain[i].
        let mut parents = vec![self.current[&alias.base]];
        for &view in &alias.chain[..alias.chain.len().saturating_sub(1)] {
            let vnode = self.rw.old.node(view);
            let p = *parents.last().unwrap_or_else(|| unreachable!());
            parents.push(self.rw.emit(vnode.op, &[p], vnode.attrs.clone())?);
        }
        let mut acc = new_contents;
        for (i, &view) in alias.chain.iter().enumerate().rev() {
            acc = self.inverse(view, parents[i], acc, m)?;
        }
        let ver = self.version[&alias.base] + 1;
        self.version.insert(alias.base, ver);
        self.current.insert(alias.base, acc);
        self.cache.insert(target, (ver, new_contents));
        self.cache.insert(m, (ver, new_contents));
        self.alias[m.index()] = Some(alias);
        self.rw.set(m, new_contents);
        Ok(())
    }

    /// The value an in-place op leaves in its target, computed without mutation.
    fn functional_form(&mut self, node: &crate::ir::Node, args: &[Value]) -> Result<Value, FunctionalizeError> {
        use OpKind::*;
        let x = args[0];
        let xty = self.rw.ty(x).clone();
        let convert_to_x = |st: &mut Self, v: Value| -> Result<Value, GraphError> {
            if st.rw.ty(v).dtype == xty.dtype {
                Ok(v)
            } else {
                st.rw.emit_with(ConvertElementType, &[v], &[("dtype", AttrValue::DType(xty.dtype))])
            }
        };
        let dims = AttrValue::Dims(xty.shape.dims().iter().cloned().map(Some).collect());
        let value = |name: &str| node.attrs.get(name).cloned().unwrap_or(AttrValue::Float(0.0));
        Ok(match node.op {
            AddInplace | SubInplace | MulInplace | DivInplace => {
                let op = match node.op {
                    AddInplace => Add,
                    SubInplace => Sub,
                    MulInplace => Mul,
                    _ => Div,
                };
                let r = self.rw.emit(op, &[x, args[1]], Attrs::empty())?;
                convert_to_x(self, r)?
            }
            ReluInplace => self.rw.emit(Relu, &[x], Attrs::empty())?,
            CopyInplace => {
                let c = convert_to_x(self, args[1])?;
                if self.rw.ty(c).shape == xty.shape {
                    c
                } else {
                    self.rw.emit_with(Expand, &[c], &[("shape", dims)])?
                }
            }
            FillInplace => self.rw.emit_with(
                Full,
                &[],
                &[("shape", dims), ("value", value("value")), ("dtype", AttrValue::DType(xty.dtype))],
            )?,
            MaskedFillInplace => self.rw.emit_with(MaskedFill, &[x, args[1]], &[("value", value("value"))])?,
            SliceAssignInplace => self.rw.emit(SliceScatter, &[x, args[1]], node.attrs.clone())?,
            other => unreachable!("{other:?} is not an in-place op"),
        })
    }

    /// Writes `child` (the new contents of view node `view`) back into `parent`, the view's
    /// input, returning the parent's new value.
    fn inverse(&mut self, view: Value, parent: Value, child: Value, at: Value) -> Result<Value, FunctionalizeError> {
        use OpKind::*;
        let node = self.rw.old.node(view).clone();
        let pty = self.rw.ty(parent).clone();
        let parent_dims = AttrValue::Dims(pty.shape.dims().iter().cloned().map(Some).collect());
        let int = |n: i64| AttrValue::Int(n);
        let scatter = |st: &mut Self, src: Value, axis: i64, start: i64, end: i64, step: i64| {
            st.rw.emit_with(
                SliceScatter,
                &[parent, src],
                &[("axis", int(axis)), ("start", int(start)), ("end", int(end)), ("step", int(step))],
            )
        };
        Ok(match node.op {
            View | Squeeze | Unsqueeze => self.rw.emit_with(Reshape, &[child], &[("shape", parent_dims)])?,
            Permute | Transpose => {
                let rank = pty.rank();
                let perm: Vec<usize> = if node.op == Permute {
                    node.attrs
                        .ints("perm")
                        .iter()
                        .map(|&p| if p < 0 { (p + rank as i64) as usize } else { p as usize })
                        .collect()
                } else {
                    let norm = |a: i64| if a < 0 { (a + rank as i64) as usize } else { a as usize };
                    let (a, b) = (norm(node.attrs.int("axis0")), norm(node.attrs.int("axis1")));
                    let mut p: Vec<usize> = (0..rank).collect();
                    p.swap(a, b);
                    p
                };
                let mut inverse = vec![0i64; rank];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i as i64;
                }
                self.rw.emit_with(Permute, &[child], &[("perm", AttrValue::Ints(inverse))])?
            }
            Slice => {
                let old = self.rw.old;
                let step = node.attrs.int("step");
                let axis = crate::ops::util::normalize_axis(node.attrs.int("axis"), pty.rank())
                    .map_err(|e| GraphError::Op { op: node.op.name(), value: view, error: e })?;
                let len = &old.ty(view).shape.dims()[axis];
                if step > 1 && !len.is_static() {
                    return Err(FunctionalizeError::SymbolicStridedWrite {
                        value: old.display_value(at),
                        op: old.node(at).op.name(),
                        view: old.display_value(view),
                        step,
                        len: len.to_string(),
                    });
                }
                self.rw.emit_with(SliceScatter, &[parent, child], &attrs_list(&node.attrs))?
            }
            Select => {
                let axis = node.attrs.int("axis");
                let index = node.attrs.int("index");
                let un = self.rw.emit_with(Unsqueeze, &[child], &[("axis", int(axis))])?;
                let end = if index == -1 { i64::MAX } else { index + 1 };
                scatter(self, un, axis, index, end, 1)?
            }
            Split | Chunk => {
                let rank = pty.rank();
                let axis = crate::ops::util::normalize_axis(node.attrs.int("axis"), rank)
                    .map_err(|e| GraphError::Op { op: node.op.name(), value: view, error: e })?;
                let (start, size) = crate::ops::shape::piece(node.op, &node.attrs, &pty.shape.dims()[axis], axis)
                    .map_err(|e| GraphError::Op { op: node.op.name(), value: view, error: e })?;
                scatter(self, child, axis as i64, start as i64, (start + size) as i64, 1)?
            }
            Expand | BroadcastInDim => {
                let old = self.rw.old;
                if self.rw.ty(child).shape == pty.shape {
                    // An expansion to the same shape (`expand {shape=[-1]}` of `[seq]`) is the
                    // identity: the write lands as it is.
                    child
                } else if self.rw.ty(child).shape.numel().ok() == pty.shape.numel().ok()
                    && pty.shape.as_static().is_some()
                {
                    self.rw.emit_with(Reshape, &[child], &[("shape", parent_dims)])?
                } else if self.rw.ty(child).shape.numel().ok().and_then(|n| n.as_const()) == Some(0) {
                    // An expansion to no elements: nothing is written, the base stays.
                    parent
                } else {
                    return Err(FunctionalizeError::WriteThroughBroadcast {
                        value: old.display_value(at),
                        op: old.node(at).op.name(),
                        base: old.display_value(view),
                    });
                }
            }
            other => unreachable!("{other:?} is not a view op"),
        })
    }
}

/// The ops `functionalize` rewrites an in-place op into (`add_` → `add` and, when the dtypes
/// differ, `convert_element_type`; …). Empty for ops that do not mutate.
pub fn functional_forms(op: OpKind) -> &'static [OpKind] {
    use OpKind::*;
    match op {
        AddInplace => &[Add, ConvertElementType],
        SubInplace => &[Sub, ConvertElementType],
        MulInplace => &[Mul, ConvertElementType],
        DivInplace => &[Div, ConvertElementType],
        ReluInplace => &[Relu],
        CopyInplace => &[ConvertElementType, Expand],
        FillInplace => &[Full],
        MaskedFillInplace => &[MaskedFill],
        SliceAssignInplace => &[SliceScatter],
        _ => &[],
    }
}

fn attrs_list(attrs: &Attrs) -> Vec<(&'static str, AttrValue)> {
    attrs.iter().map(|(n, v)| (n, v.clone())).collect()
}
