//! Algebraic identities that hold bit for bit (`x*1 → x`, `neg(neg(x)) → x`, `pow(x, 2) → x*x`
//! in f32, shape and convert chains).

use super::rewrite::Rewriter;
use super::simplify::{require_pure, SimplifyError};
use crate::interp::{float_to_int_as, round_float};
use crate::ir::{AttrValue, DType, Graph, Node, TensorType, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// Rewrites nodes by identities that give the same bits for every input, in op-dtype and in
/// precise mode: NaN stays NaN, ±inf stays, and the sign of zero is kept. The rules, each
/// with the fact it relies on, are below this function. A rewrite is kept only when the
/// replacement has exactly the node's type (so a rule never changes a dtype by promotion or a
/// shape by broadcasting). In a functional graph a `view` node can observe strides (it fails
/// when its argument's layout does not allow it), so a rule that replaces a freshly computed
/// value by an existing one, whose layout may differ, is skipped for values that reach a
/// `view` through view ops. The nodes a rewrite bypasses are left for DCE. Deliberately never
/// done, because each is wrong for some input: `x*0 → 0` (NaN, inf, -0), `x-x → 0` (NaN,
/// inf), `x/x → 1` (0, inf, NaN), `x+0.0 → x` (-0 + 0 = +0), `x-(-0.0) → x` (the same),
/// `0-x → neg(x)` (0 - 0 = +0), `(x+c)-c → x` (rounding). Refuses graphs that mutate.
pub fn apply_identities(g: &Graph) -> Result<Graph, SimplifyError> {
    require_pure(g)?;
    let observed = strides_observed(g);
    let uses = use_counts(g);
    let mut rw = Rewriter::new(g);
    for (v, node) in g.nodes() {
        match node.op {
            OpKind::Input => continue,
            OpKind::Const => {
                rw.copy(v)?;
                continue;
            }
            _ => {}
        }
        let args: Vec<Value> = node.args.iter().map(|&a| rw.get(a)).collect();
        let may_alias = !observed[cranelift_entity::EntityRef::index(v)];
        // Whether the node is its first argument's only use (a rule that moves the argument's
        // op past the node then computes it once, not twice).
        let sole = node.args.first().is_some_and(|&a| uses[cranelift_entity::EntityRef::index(a)] == 1);
        match rewrite(&mut rw, node, &args, may_alias, sole) {
            Some(nv) if *rw.ty(nv) == node.ty => rw.set(v, nv),
            _ => {
                rw.copy(v)?;
            }
        }
    }
    Ok(rw.finish()?)
}

/// The value `node` (with new arguments `args`) can be replaced by, if a rule applies.
/// `may_alias`: the node's value may be replaced by an existing value of another layout.
/// `sole`: the node is the only use of its first argument.
fn rewrite(rw: &mut Rewriter, node: &Node, args: &[Value], may_alias: bool, sole: bool) -> Option<Value> {
    use OpKind::*;
    let alias = |v: Option<Value>| v.filter(|_| may_alias);
    let found = match node.op {
        Mul => alias(times_one(rw, node, args)),
        Div => alias(over_one(rw, node, args)),
        Add => alias(plus_negative_zero(rw, node, args)),
        Sub => alias(minus_positive_zero(rw, node, args)),
        Neg => alias(double_negation(rw, node, args)),
        Pow => square(rw, node, args),
        Reshape => reshape(rw, node, args[0], may_alias),
        Permute => permute(rw, node, args[0]),
        BroadcastInDim => broadcast_in_dim(rw, node, args[0]),
        ConvertElementType => convert(rw, node, args[0], may_alias),
        Slice => whole_slice(rw, node, args[0]),
        MaxPool2d if sole => pool_first(rw, node, args[0]),
        _ => None,
    };
    // The result is a broadcast (a stride-0 view), so only where no `view` observes strides.
    found.or_else(|| if node.op.is_elementwise() { alias(sink_broadcasts(rw, node, args)) } else { None })
}

// ---------------------------------------------------------------------------------------------
// Arithmetic with a constant operand. Each rule requires the kept operand to have exactly the
// node's type, so the node's compute dtype is that operand's dtype and the constant operand
// only broadcasts to it. The constant is recognised through `uniform`: a `full`, or a `const`
// whose elements all have the same bits, possibly seen through data-movement ops.
// ---------------------------------------------------------------------------------------------

// Rule `x * 1 → x`, `1 * x → x`.
// Assumes: IEEE 754 multiplication by 1 is exact for every x (±0 keeps its sign, ±inf stays,
// NaN stays NaN, subnormals are unchanged), and commutes; integer multiplication wraps, and
// wrapping_mul(x, 1) = x.
fn times_one(rw: &Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    keep_operand(rw, node, args, 0, Elem::is_one).or_else(|| keep_operand(rw, node, args, 1, Elem::is_one))
}

// Rule `x / 1 → x` (not `1 / x`).
// Assumes: IEEE 754 division by 1 is exact for every x, as for multiplication; integer
// division truncates, and x / 1 = x (wrapping_div(i64::MIN, 1) = i64::MIN).
fn over_one(rw: &Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    keep_operand(rw, node, args, 0, Elem::is_one)
}

// Rule `x + (-0.0) → x`, `(-0.0) + x → x`; for integers `x + 0 → x`.
// Assumes: in IEEE 754 round-to-nearest, x + (-0) = x for every x, including x = -0
// (-0 + -0 = -0) and x = +0 (+0 + -0 = +0); NaN and ±inf are unchanged. Not `x + (+0.0)`:
// -0 + +0 = +0. An integer zero operand of a float add converts to +0.0, so only a float -0.0
// counts for floats; for integers any 0 does (wrapping add of 0 is the identity).
fn plus_negative_zero(rw: &Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    let dtype = node.ty.dtype;
    keep_operand(rw, node, args, 0, |e| e.is_zero_with_sign(dtype, true))
        .or_else(|| keep_operand(rw, node, args, 1, |e| e.is_zero_with_sign(dtype, true)))
}

// Rule `x - (+0.0) → x`; for integers `x - 0 → x`.
// Assumes: x - (+0) = x + (-0) = x for every x (see the rule above). Not `x - (-0.0)`, which
// is x + (+0) and turns -0 into +0, and not `0 - x`, which is not neg(x) at x = +0.
fn minus_positive_zero(rw: &Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    let dtype = node.ty.dtype;
    keep_operand(rw, node, args, 0, |e| e.is_zero_with_sign(dtype, false))
}

// Rule `neg(neg(x)) → x`.
// Assumes: float negation flips only the sign bit, so twice is the identity on every bit
// pattern (NaN included); integer negation wraps, and wrapping_neg is an involution
// (i64::MIN ↦ i64::MIN, and likewise within i32).
fn double_negation(rw: &Rewriter, _node: &Node, args: &[Value]) -> Option<Value> {
    let inner = rw.new.node(args[0]);
    (inner.op == OpKind::Neg).then(|| inner.args[0])
}

// Rule `pow(x, 2) → x * x` for f32, f16 and bf16.
// Assumes: the op computes `pow` in f64 and rounds once to the dtype (not at all in precise
// mode), and f16 and bf16 multiply in f32 and round once. An x of at most 24 significant bits
// has an exact square in f64 (48 bits), which `powf` returns exactly (a representable result);
// the f32 product is that square rounded once, as is the op's. ±0 square to +0, ±inf to +inf,
// NaN stays NaN, in both. Not for f64 (the product rounds; `powf` is not promised to round
// the same way).
fn square(rw: &mut Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    let (x, c) = (args[0], args[1]);
    if !matches!(node.ty.dtype, DType::F32 | DType::F16 | DType::BF16) || *rw.ty(x) != node.ty {
        return None;
    }
    let two = uniform(&rw.new, c)?.in_compute(node.ty.dtype)?;
    if two != Elem::float(2.0) {
        return None;
    }
    rw.emit_with(OpKind::Mul, &[x, x], &[]).ok()
}

/// `args[keep]` when it has the node's type and the other operand is a constant whose
/// value, as the node computes with it, satisfies `is_neutral`.
fn keep_operand(
    rw: &Rewriter,
    node: &Node,
    args: &[Value],
    keep: usize,
    is_neutral: impl Fn(Elem) -> bool,
) -> Option<Value> {
    let (x, c) = (args[keep], args[1 - keep]);
    if *rw.ty(x) != node.ty {
        return None;
    }
    let e = uniform(&rw.new, c)?.in_compute(node.ty.dtype)?;
    is_neutral(e).then_some(x)
}

// ---------------------------------------------------------------------------------------------
// Data movement. These ops only rearrange or repeat elements, so composing them is exact by
// construction; the rules below state when the composition is what the interpreter computes.
// ---------------------------------------------------------------------------------------------

// Rules `reshape(x) to x's own shape → x` and `reshape(reshape(x, s1), s2) → reshape(x, s2)`.
// Assumes: reshape keeps the row-major order of elements, so reshaping twice is reshaping
// once, and reshaping to the same shape is the identity. Reshape always makes a fresh
// contiguous value, so replacing it by x itself is an aliasing rewrite; the composed reshape
// is still a fresh value. The shape is written out in full (no -1), as the prims rung wants.
fn reshape(rw: &mut Rewriter, node: &Node, x: Value, may_alias: bool) -> Option<Value> {
    if rw.ty(x).shape == node.ty.shape {
        return may_alias.then_some(x);
    }
    let inner = rw.new.node(x);
    if inner.op != OpKind::Reshape {
        return None;
    }
    let x0 = inner.args[0];
    if rw.ty(x0).shape == node.ty.shape {
        return may_alias.then_some(x0);
    }
    rw.emit_with(OpKind::Reshape, &[x0], &[("shape", dims_attr(&node.ty))]).ok()
}

// Rules `permute(x, identity) → x` and `permute(permute(x, q), p) → permute(x, r)` with
// r[i] = q[p[i]] (or x when r is the identity).
// Assumes: result dim i of permute(y, p) is y's dim p[i], and y = permute(x, q) has dim j =
// x's dim q[j]; permute is a view, and the composed view has exactly the strides of the
// chain, so no layout changes.
fn permute(rw: &mut Rewriter, node: &Node, x: Value) -> Option<Value> {
    let rank = node.ty.rank();
    let p = normalize_list(node.attrs.ints("perm"), rank)?;
    if is_identity(&p) {
        return Some(x);
    }
    let inner = rw.new.node(x);
    if inner.op != OpKind::Permute {
        return None;
    }
    let q = normalize_list(inner.attrs.ints("perm"), rank)?;
    let x0 = inner.args[0];
    let r: Vec<usize> = p.iter().map(|&i| q[i]).collect();
    if is_identity(&r) {
        return Some(x0);
    }
    rw.emit_with(OpKind::Permute, &[x0], &[("perm", ints_attr(&r))]).ok()
}

// Rules `broadcast_in_dim(x)` to x's own shape with dims 0..rank → x, and
// `broadcast_in_dim(broadcast_in_dim(x, s1, d1), s2, d2) → broadcast_in_dim(x, s2, d2∘d1)`.
// Assumes: operand dim i lands on result dim d[i], stretched only when it is 1, so x's dim i
// lands on d2[d1[i]], which is strictly increasing and valid (x's dim is 1 or equals s1's,
// which is 1 or equals s2's). A broadcast is a stride-0 view, and the composed view has the
// chain's strides, so no layout changes.
fn broadcast_in_dim(rw: &mut Rewriter, node: &Node, x: Value) -> Option<Value> {
    let rank = node.ty.rank();
    let d2 = normalize_list(node.attrs.ints("broadcast_dims"), rank)?;
    if rw.ty(x).shape == node.ty.shape && is_identity(&d2) {
        return Some(x);
    }
    let inner = rw.new.node(x);
    if inner.op != OpKind::BroadcastInDim {
        return None;
    }
    let d1 = normalize_list(inner.attrs.ints("broadcast_dims"), inner.ty.rank())?;
    let x0 = inner.args[0];
    let d: Vec<usize> = d1.iter().map(|&j| d2.get(j).copied()).collect::<Option<_>>()?;
    if rw.ty(x0).shape == node.ty.shape && is_identity(&d) {
        return Some(x0);
    }
    rw.emit_with(OpKind::BroadcastInDim, &[x0], &[("shape", dims_attr(&node.ty)), ("broadcast_dims", ints_attr(&d))])
        .ok()
}

// Rule `op(broadcast(x1), ..., broadcast(xn)) → broadcast(op(broadcast'(x1), ...))` for an
// elementwise `op` whose every operand is a broadcast (a `full` counts as a broadcast of its
// value), when some result dim is repeated by all of them: `op` then runs at the smaller
// shape `t` (the result's dims where some operand varies, 1 elsewhere), and one broadcast
// repeats its result. Applied to a fixed point this sinks broadcasts below chains of
// elementwise ops, so a mask computed from `[batch, seq]` and broadcast over heads and query
// rows is computed once per `[batch, seq]`, not per score.
// Assumes: an elementwise op's element depends only on its operands' elements at the same
// index, and a broadcast only repeats elements; so the value at every index is the same, in
// op-dtype and precise mode, NaN, ±inf and -0 included. Broadcasts are fresh stride-0 views
// (no layout is observed through the new value that was not already there), and `t`'s dims
// are the result's or 1, so every intermediate broadcast is valid.
fn sink_broadcasts(rw: &mut Rewriter, node: &Node, args: &[Value]) -> Option<Value> {
    let rank = node.ty.rank();
    let out = node.ty.shape.dims();
    // Per operand: its source and, per result dim, whether the operand varies along it.
    let mut varies = vec![false; rank];
    let mut sources = Vec::with_capacity(args.len());
    for &a in args {
        let n = rw.new.node(a);
        match n.op {
            OpKind::BroadcastInDim => {
                let dims = normalize_list(n.attrs.ints("broadcast_dims"), n.ty.rank())?;
                if n.ty.rank() != rank {
                    return None;
                }
                let from = rw.ty(n.args[0]).shape.dims().to_vec();
                for (k, &j) in dims.iter().enumerate() {
                    if from[k].as_const() != Some(1) {
                        varies[j] = true;
                    }
                }
                sources.push(Some((n.args[0], dims)));
            }
            OpKind::Full if n.ty.rank() == rank => sources.push(None),
            _ => return None,
        }
    }
    // Only when some repeated dim is not already 1 (else the rule would rewrite its own result).
    let shrinks = out.iter().zip(&varies).any(|(d, &v)| !v && d.as_const() != Some(1));
    if !shrinks || sources.iter().all(Option::is_none) {
        return None;
    }
    let t: Vec<crate::ir::Dim> =
        out.iter().zip(&varies).map(|(d, &v)| if v { d.clone() } else { crate::ir::Dim::new(1) }).collect();
    let t_ty = TensorType::new(node.ty.dtype, t.iter().cloned().collect());
    let mut new_args = Vec::with_capacity(args.len());
    for (&a, src) in args.iter().zip(&sources) {
        let an = rw.new.node(a).clone();
        let ty = TensorType::new(an.ty.dtype, t.iter().cloned().collect());
        let v = match src {
            Some((x, dims)) => rw
                .emit_with(
                    OpKind::BroadcastInDim,
                    &[*x],
                    &[("shape", dims_attr(&ty)), ("broadcast_dims", ints_attr(dims))],
                )
                .ok()?,
            None => {
                let attrs: Vec<(&str, AttrValue)> = an
                    .attrs
                    .iter()
                    .map(|(k, v)| if k == "shape" { (k, dims_attr(&ty)) } else { (k, v.clone()) })
                    .collect();
                rw.emit_with(OpKind::Full, &[], &attrs).ok()?
            }
        };
        new_args.push(v);
    }
    let attrs: Vec<(&str, AttrValue)> = node.attrs.iter().map(|(k, v)| (k, v.clone())).collect();
    let small = rw.emit_with(node.op, &new_args, &attrs).ok()?;
    if *rw.ty(small) != t_ty {
        return None;
    }
    let all: Vec<usize> = (0..rank).collect();
    rw.emit_with(
        OpKind::BroadcastInDim,
        &[small],
        &[("shape", dims_attr(&node.ty)), ("broadcast_dims", ints_attr(&all))],
    )
    .ok()
}

// Rule `slice(x)` along an axis with step 1 whose result has x's shape → x.
// Assumes: with step 1, a result as long as the axis means start 0 and every element (Python
// bounds clamp to the dim; on a symbolic dim only `start=0, end` omitted has that size), and
// the slice view then has x's strides and offset.
fn whole_slice(rw: &Rewriter, node: &Node, x: Value) -> Option<Value> {
    (node.attrs.int("step") == 1 && rw.ty(x).shape == node.ty.shape).then_some(x)
}

// Rule `max_pool2d(f(x, c)) → f(max_pool2d(x), c')` for `f` one of `max(x, c)`, `max(c, x)`,
// `min` likewise, `x + c`, `c + x` and `x - c`, where `c` is the same at every position of each
// pooled plane (a `full`, or a broadcast whose operand does not vary along the last two dims),
// for `+` and `-` finite (a `full` or a broadcast `const`), and `c'` is `c` built at the pooled
// shape; only where the pooling is `f`'s only use. `f` then runs on the pooled tensor: a
// convolution's bias and ReLU after its pooling rather than before, on a quarter of the
// elements for a 2×2 pooling.
// Assumes: every window holds an input element (no padding, so windows lie inside the input;
// or dilation 1 and static spatial dims of at least 1, with the op's padding of at most half
// the kernel). A window's max is the join of the total order with -0 < +0 and NaN absorbing,
// and a fixed `c` gives the same `f` across the window. Then `max(·, c)` and `min(·, c)`
// distribute over the join (a total order is a distributive lattice; NaN absorbs on both
// sides), and `t ↦ round(t ± c)` with `c` finite is non-decreasing in that order (rounding is
// monotone; a zero sum is -0 only from -0 ± c = -0, below every other result) and makes a NaN
// only from a NaN, so it commutes with the join. So every element is the same, in op-dtype
// and precise mode. The result's type is the node's (checked by the caller).
fn pool_first(rw: &mut Rewriter, node: &Node, x: Value) -> Option<Value> {
    let inner = rw.new.node(x).clone();
    let rank = inner.ty.rank();
    if inner.args.len() != 2 || rank < 3 {
        return None;
    }
    let (a, b) = (inner.args[0], inner.args[1]);
    // The operand that varies, and whether `c` is the second operand.
    let (v, c_second) = match inner.op {
        OpKind::Max | OpKind::Min | OpKind::Add if plane_uniform(rw, b, rank) => (a, true),
        OpKind::Max | OpKind::Min | OpKind::Add if plane_uniform(rw, a, rank) => (b, false),
        OpKind::Sub if plane_uniform(rw, b, rank) => (a, true),
        _ => return None,
    };
    let c = if c_second { b } else { a };
    if matches!(inner.op, OpKind::Add | OpKind::Sub) && !finite_constant(&rw.new, c) {
        return None;
    }
    if *rw.ty(v) != inner.ty || rw.ty(c).dtype != inner.ty.dtype || !windows_hold_input(node, &inner.ty) {
        return None;
    }
    let attrs: Vec<(&str, AttrValue)> = node.attrs.iter().map(|(k, val)| (k, val.clone())).collect();
    let pooled = rw.emit_with(OpKind::MaxPool2d, &[v], &attrs).ok()?;
    let c2 = rebuild_at(rw, c, &node.ty)?;
    let args = if c_second { [pooled, c2] } else { [c2, pooled] };
    rw.emit_with(inner.op, &args, &[]).ok()
}

/// Whether `c` (of rank `rank`) is the same along its last two dims: a `full`, or a
/// `broadcast_in_dim` whose operand's dims landing there are 1.
fn plane_uniform(rw: &Rewriter, c: Value, rank: usize) -> bool {
    let n = rw.new.node(c);
    match n.op {
        OpKind::Full => n.ty.rank() == rank,
        OpKind::BroadcastInDim if n.ty.rank() == rank => {
            let Some(dims) = normalize_list(n.attrs.ints("broadcast_dims"), rank) else { return false };
            let from = rw.ty(n.args[0]).shape.dims();
            dims.iter().zip(from).all(|(&j, d)| j + 2 < rank || d.as_const() == Some(1))
        }
        // A folded broadcast: every plane of the constant holds one value.
        OpKind::Const if n.ty.rank() == rank => {
            let Some(blob) = rw.new.const_blob(c) else { return false };
            let t = &rw.new.blob(blob).tensor;
            let plane = t.shape()[rank - 2..].iter().product::<usize>();
            if t.numel() > MAX_SCANNED || plane == 0 {
                return false;
            }
            let v = t.to_f64_vec();
            v.chunks(plane).all(|p| p.iter().all(|x| x.to_bits() == p[0].to_bits()))
        }
        _ => false,
    }
}

/// The most elements of a constant [`plane_uniform`] or [`finite_constant`] reads.
const MAX_SCANNED: usize = 1 << 16;

/// Whether every element of `c` is a finite float known at compile time: a `full`, or a
/// `const` seen through broadcasts and reshapes.
fn finite_constant(g: &Graph, mut c: Value) -> bool {
    loop {
        let n = g.node(c);
        match n.op {
            OpKind::BroadcastInDim | OpKind::Reshape => c = n.args[0],
            OpKind::Full => return n.attrs.float("value").is_finite(),
            OpKind::Const => {
                let Some(blob) = g.const_blob(c) else { return false };
                let t = &g.blob(blob).tensor;
                return t.dtype().is_float()
                    && t.numel() <= MAX_SCANNED
                    && t.to_f64_vec().iter().all(|x| x.is_finite());
            }
            _ => return false,
        }
    }
}

/// Whether every window of the pooling `node` over an input of type `ty` holds an input
/// element (see [`pool_first`]).
fn windows_hold_input(node: &Node, ty: &TensorType) -> bool {
    let ints = |k: &str| node.attrs.ints(k).to_vec();
    if ints("padding").iter().all(|&p| p == 0) {
        return true;
    }
    let dims = ty.shape.dims();
    ints("dilation").iter().all(|&d| d == 1)
        && dims[dims.len() - 2..].iter().all(|d| d.as_const().is_some_and(|n| n >= 1))
}

/// The plane-uniform `c` (see [`plane_uniform`]) rebuilt with `ty`'s shape (a constant: its
/// leading rows and columns, where the pooled plane is no larger).
fn rebuild_at(rw: &mut Rewriter, c: Value, ty: &TensorType) -> Option<Value> {
    let n = rw.new.node(c).clone();
    if n.op == OpKind::Const {
        let rank = n.ty.rank();
        let mut v = c;
        for axis in rank - 2..rank {
            let end = ty.shape.dims()[axis].as_const()?;
            if end > n.ty.shape.dims()[axis].as_const()? {
                return None;
            }
            let attrs = [
                ("axis", AttrValue::Int(axis as i64)),
                ("start", AttrValue::Int(0)),
                ("end", AttrValue::Int(i64::try_from(end).ok()?)),
                ("step", AttrValue::Int(1)),
            ];
            v = rw.emit_with(OpKind::Slice, &[v], &attrs).ok()?;
        }
        return Some(v);
    }
    let shaped = TensorType::new(n.ty.dtype, ty.shape.clone());
    let attrs: Vec<(&str, AttrValue)> =
        n.attrs.iter().map(|(k, v)| if k == "shape" { (k, dims_attr(&shaped)) } else { (k, v.clone()) }).collect();
    let args = n.args.clone();
    rw.emit_with(n.op, &args, &attrs).ok()
}

// ---------------------------------------------------------------------------------------------
// Conversions.
// ---------------------------------------------------------------------------------------------

// Rules `convert(x, dtype of x) → x` and `convert(convert(x, T1), T2) → convert(x, T2)` (or x
// when T2 is x's dtype T0) when T0 → T1 is lossless.
// Assumes: converting to the same dtype is the identity (floats are already rounded to it,
// integers already wrapped). `convert_element_type`'s result depends only on the value it
// reads (a float as f64 with its sign of zero and NaN-ness, an integer, a bool), so when
// T0 → T1 maps every T0 value to the same value in T1, converting on to T2 reads what
// converting x directly reads. Lossless T0 → T1 (see `lossless`): bool → anything (0 and 1
// are exact everywhere); i32 → i64 or f64 (every i32 is exact in both); f16 or bf16 → f32 or
// f64, and f32 → f64 (each float format embeds exactly in the wider ones, ±0, ±inf and NaN
// included). Not lossless: i64 → f64 (2^53 + 1), i32 → f32, f16 ↔ bf16, any float → integer
// (truncation, NaN → 0), anything → bool. So f32 → f64 → f32 is x, while f64 → f32 → f64 is
// kept. In precise mode no float conversion rounds, so these chains are exact there too.
// One exception: an integer converts to an integer type by wrapping, a float by truncating
// and saturating, so the same value can convert differently by the type it is read as
// (-1 → u16 is 65535, -1.0 → u16 is 0): an integer taken through a float to an integer type
// keeps its middle step.
fn convert(rw: &mut Rewriter, node: &Node, x: Value, may_alias: bool) -> Option<Value> {
    let t2 = node.ty.dtype;
    if rw.ty(x).dtype == t2 {
        return may_alias.then_some(x);
    }
    let inner = rw.new.node(x);
    if inner.op != OpKind::ConvertElementType {
        return None;
    }
    let x0 = inner.args[0];
    let (t0, t1) = (rw.ty(x0).dtype, inner.ty.dtype);
    if !lossless(t0, t1) || (t0.is_int() && t1.is_float() && t2.is_int()) {
        return None;
    }
    if t0 == t2 {
        return may_alias.then_some(x0);
    }
    rw.emit_with(OpKind::ConvertElementType, &[x0], &[("dtype", AttrValue::DType(t2))]).ok()
}

/// True when converting any value of `from` to `to` gives the same value (see `convert`).
fn lossless(from: DType, to: DType) -> bool {
    use DType::*;
    match (from, to) {
        (a, b) if a == b => true,
        (Bool, _) => true,
        (I32, I64 | F64) => true,
        (F16 | BF16, F32 | F64) => true,
        (F32, F64) => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// One element value, exactly: floats by their f64 bits.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Elem {
    F(u64),
    I(i64),
    B(bool),
}

impl Elem {
    fn float(x: f64) -> Elem {
        Elem::F(x.to_bits())
    }

    /// The value an elementwise op computing in `compute` reads for this operand element:
    /// integers and bools become floats exactly (0 → +0.0), bools become integers 0/1.
    /// Promotion only widens, so a float operand of a float computation is already exact in it.
    fn in_compute(self, compute: DType) -> Option<Elem> {
        Some(match (self, compute) {
            (Elem::F(_), c) if c.is_float() => self,
            (Elem::I(i), c) if c.is_float() => Elem::float(i as f64),
            (Elem::B(b), c) if c.is_float() => Elem::float(if b { 1.0 } else { 0.0 }),
            (Elem::I(i), c) if c.is_int() => Elem::I(i),
            (Elem::B(b), c) if c.is_int() => Elem::I(b as i64),
            _ => return None,
        })
    }

    fn is_one(self) -> bool {
        self == Elem::float(1.0) || self == Elem::I(1)
    }

    /// A zero that is neutral: for floats, the zero with the given sign; for integers, 0.
    fn is_zero_with_sign(self, compute: DType, negative: bool) -> bool {
        if compute.is_float() {
            self == Elem::float(if negative { -0.0 } else { 0.0 })
        } else {
            self == Elem::I(0)
        }
    }
}

/// The one value every element of `v` holds, when that is known from the graph: `v` is a
/// `full`, or a `const` whose elements all have the same bits, seen through ops that only
/// move, repeat or select elements. A float `full` counts only when its value is exactly
/// representable in its dtype, so that op-dtype and precise mode agree on it.
fn uniform(g: &Graph, mut v: Value) -> Option<Elem> {
    use OpKind::*;
    loop {
        let node = g.node(v);
        match node.op {
            BroadcastInDim | Reshape | Permute | Slice | Rev | Expand | View | Flatten | Squeeze | Unsqueeze
            | Transpose | Select | Contiguous | Split | Chunk => v = node.args[0],
            Full => return full_value(&node.ty, node.attrs.float("value")),
            Const => return tensor_value(&g.blob(g.const_blob(v)?).tensor),
            _ => return None,
        }
    }
}

fn full_value(ty: &TensorType, value: f64) -> Option<Elem> {
    let d = ty.dtype;
    if d.is_float() {
        (round_float(d, value).to_bits() == value.to_bits()).then(|| Elem::float(value))
    } else if d.is_int() {
        Some(Elem::I(float_to_int_as(d, value)))
    } else {
        Some(Elem::B(value != 0.0))
    }
}

fn tensor_value(t: &Tensor) -> Option<Elem> {
    fn same<T: Copy>(v: &[T], f: impl Fn(T) -> Elem) -> Option<Elem> {
        let first = f(*v.first()?);
        v.iter().all(|&x| f(x) == first).then_some(first)
    }
    match t.data() {
        TensorData::F32(v) => same(v, |x| Elem::float(x as f64)),
        TensorData::F64(v) => same(v, Elem::float),
        TensorData::F16(v) => same(v, |x| Elem::float(x.to_f64())),
        TensorData::BF16(v) => same(v, |x| Elem::float(x.to_f64())),
        TensorData::I32(v) => same(v, |x| Elem::I(x as i64)),
        TensorData::I64(v) => same(v, Elem::I),
        TensorData::Bool(v) => same(v, Elem::B),
        d => same(&d.ints()?, Elem::I),
    }
}

/// For every value: whether a `view` node reads it, directly or through view ops. `view`
/// fails when its argument's strides do not allow it, so those values' layouts are
/// observable and a rewrite may not swap them for a value of another layout.
fn strides_observed(g: &Graph) -> Vec<bool> {
    use cranelift_entity::EntityRef;
    let mut observed = vec![false; g.len()];
    let values: Vec<Value> = g.values().collect();
    for &v in values.iter().rev() {
        let node = g.node(v);
        if node.op == OpKind::View || (node.op.is_view() && observed[v.index()]) {
            for &a in &node.args {
                observed[a.index()] = true;
            }
        }
    }
    observed
}

/// For every value: how many node arguments and graph outputs read it.
fn use_counts(g: &Graph) -> Vec<u32> {
    use cranelift_entity::EntityRef;
    let mut uses = vec![0u32; g.len()];
    for (_, node) in g.nodes() {
        for &a in &node.args {
            uses[a.index()] += 1;
        }
    }
    for o in g.outputs() {
        uses[o.value.index()] += 1;
    }
    uses
}

/// An axis list normalised to `0..rank` (negative entries count from the end).
fn normalize_list(list: &[i64], rank: usize) -> Option<Vec<usize>> {
    list.iter().map(|&a| crate::ops::util::normalize_axis(a, rank).ok()).collect()
}

fn is_identity(list: &[usize]) -> bool {
    list.iter().enumerate().all(|(i, &p)| i == p)
}

fn ints_attr(list: &[usize]) -> AttrValue {
    AttrValue::Ints(list.iter().map(|&x| x as i64).collect())
}

fn dims_attr(ty: &TensorType) -> AttrValue {
    AttrValue::Dims(ty.shape.dims().iter().cloned().map(Some).collect())
}
