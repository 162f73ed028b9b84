//! Convolution as a generated kernel of the kernel IR (see `library.rs`). A device running
//! library shaders takes the library GEMM for f32 1-D and 2-D convolutions instead
//! (`shaders.rs`).
//!
//! One invocation per block of [`CHANNELS`] output channels at one output position `[batch,
//! channel, spatial...]` (each input element it loads, with its padding checks, feeds a
//! product for every channel of the block), then a kernel of one invocation per element for
//! the channels of each group past its last whole block: the output channels run as two outer
//! loops, the group and the (block of) channels within it, so the input channels a group reads
//! are an affine function of the loop variables. One stage sums `x · w` over the group's input
//! channels and the kernel's taps, in the reference's order (channel, then taps row-major),
//! each product as `library::product_term` forms it (an f32 product rounded before it is
//! added, where the reference adds the exact product: results differ by a rounding, as between
//! any two f32 convolutions; every float and integer dtype); the sum plus `+0` (the
//! reference's sum starts at `+0`, so a sum of `-0` products is `+0`), then the step's
//! [`crate::kernel::ChannelPost`] (f32 results only), is stored.
//!
//! Without padding every load is affine, so any size may be symbolic. With padding, a tap
//! outside the input reads `0` (times its weight, so a NaN or infinite weight there gives
//! NaN, as in the reference): the input position is computed in registers, checked against
//! the input's dims and read through a computed load, which needs the input's dims after the
//! batch to be static. A folded max pooling ([`crate::kernel::ConvPool`]) or a fused
//! activation op is refused: plans for this backend recover neither.

use super::library::{channel_index, finish_sum, outer_index, post_ops, product_term, strides, Body};
use crate::ir::{DType, Dim};
use crate::kernel::{Accumulator, ConvCall, Index, Instr, Kernel, Program, ReduceOp, Var};
use crate::ops::OpKind;

/// A per-axis attribute list of `n` entries (all `empty` when none is given), each at least
/// `min`: the `conv` op's conventions.
fn list(name: &str, v: &[i64], n: usize, min: i64, empty: i64) -> Result<Vec<i64>, String> {
    if v.is_empty() {
        return Ok(vec![empty; n]);
    }
    if v.len() != n || v.iter().any(|&x| x < min) {
        return Err(format!("a convolution with {name} {v:?}"));
    }
    Ok(v.to_vec())
}

/// Output channels one invocation of the blocked convolution kernel computes.
pub const CHANNELS: u64 = 8;

/// `c` as kernels (see the module docs): the blocked one, then the remainder channels'.
pub fn conv_kernels(c: &ConvCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let ws = p.buffers[c.w].shape.dims();
    let bad = |e: crate::ir::DimError| e.to_string();
    let groups = Dim::new(c.groups.max(1) as u64);
    let per_group = ws.first().ok_or("a convolution weight of rank 0")?.div_exact(&groups).map_err(bad)?;
    let block = Dim::new(CHANNELS);
    let whole = per_group.floor_div(&block).map_err(bad)?;
    let blocked = whole.mul(&block).map_err(bad)?;
    let rest = per_group.rem(&block).map_err(bad)?;
    let zero = Dim::from(0u64);
    Ok(vec![
        conv_kernel(c, p, name.to_string(), (&whole, &block, &zero), CHANNELS)?,
        conv_kernel(c, p, format!("{name}_rest"), (&rest, &Dim::from(1u64), &blocked), 1)?,
    ])
}

/// The kernel of `c` whose invocations each compute `block` output channels: within each
/// group, loop variable `v` over `within.0` points, channel `within.1 · v + within.2 + b`
/// for `b < block`.
fn conv_kernel(
    c: &ConvCall,
    p: &Program,
    name: String,
    within: (&Dim, &Dim, &Dim),
    block: u64,
) -> Result<Kernel, String> {
    let dims = |b| p.buffers[b].shape.dims().to_vec();
    let dtype = p.buffers[c.out].dtype;
    if [c.x, c.w].iter().any(|&b| p.buffers[b].dtype != dtype) {
        return Err("a convolution of mixed dtypes".into());
    }
    if c.post.is_some() && dtype != DType::F32 {
        return Err("a per-channel post-op on a convolution that is not f32".into());
    }
    if c.pool.is_some() {
        return Err("a convolution with a folded max pooling".into());
    }
    let (xs, ws, os) = (dims(c.x), dims(c.w), dims(c.out));
    let rank = xs.len();
    if rank < 3 || ws.len() != rank || os.len() != rank {
        return Err(format!("a convolution of {} with {}", p.buffers[c.x].shape, p.buffers[c.w].shape));
    }
    let n = rank - 2;
    let stride = list("stride", &c.stride, n, 1, 1)?;
    let dilation = list("dilation", &c.dilation, n, 1, 1)?;
    let pads = list("padding", &c.padding, 2 * n, 0, 0)?;
    if c.groups < 1 {
        return Err(format!("a convolution with {} groups", c.groups));
    }
    let bad = |e: crate::ir::DimError| e.to_string();
    let groups = Dim::new(c.groups as u64);
    let per_group = ws[0].div_exact(&groups).map_err(bad)?;
    let taps: Vec<u64> =
        ws[2..].iter().map(Dim::as_const).collect::<Option<_>>().ok_or("a convolution kernel of symbolic size")?;
    let (x_st, w_st, o_st) = (strides(&xs)?, strides(&ws)?, strides(&os)?);
    let scaled = |s: &Dim, k: i64| s.mul(&Dim::new(k as u64)).map_err(bad);
    let (batch, group, channel) = (Var::Outer(0), Var::Outer(1), Var::Outer(2));
    let out_at = |d: usize| Var::Outer(3 + d as u32);
    let tap = |d: usize| Var::Inner(1 + d as u32);
    let mut outer = vec![os[0].clone(), groups, within.0.clone()];
    outer.extend(os[2..].iter().cloned());
    let mut inner = vec![ws[1].clone()];
    inner.extend(taps.iter().map(|&k| Dim::new(k)));
    let mut body = Body::default();
    // Channel `b` of the block: `within.2 + b` past the block's first.
    let first = |b: u64| within.2.add(&Dim::new(b)).map_err(bad);
    // w[group · per_group + channel, ci, taps...]
    let mut w_terms =
        vec![(group, per_group.mul(&w_st[0]).map_err(bad)?), (channel, within.1.mul(&w_st[0]).map_err(bad)?)];
    w_terms.push((Var::Inner(0), w_st[1].clone()));
    w_terms.extend((0..n).map(|d| (tap(d), w_st[2 + d].clone())));
    let mut weights = Vec::with_capacity(block as usize);
    for b in 0..block {
        let offset = first(b)?.mul(&w_st[0]).map_err(bad)?;
        weights.push(body.load(c.w, Index { offset, terms: w_terms.clone() }));
    }
    // x[batch, group · cg + ci, out · stride + tap · dilation - pad_begin...]
    let input = if pads.iter().all(|&q| q == 0) {
        let mut terms = vec![(batch, x_st[0].clone()), (group, ws[1].mul(&x_st[1]).map_err(bad)?)];
        terms.push((Var::Inner(0), x_st[1].clone()));
        for d in 0..n {
            terms.push((out_at(d), scaled(&x_st[2 + d], stride[d])?));
            terms.push((tap(d), scaled(&x_st[2 + d], dilation[d])?));
        }
        body.load(c.x, Index { offset: Dim::from(0u64), terms })
    } else {
        let x_dims: Vec<u64> =
            xs[1..].iter().map(Dim::as_const).collect::<Option<_>>().ok_or_else(|| {
                format!("a padded convolution of an input of symbolic size ({})", p.buffers[c.x].shape)
            })?;
        if x_dims.iter().product::<u64>() == 0 {
            // Every tap is padding (or there is no input channel).
            body.zero(dtype)
        } else {
            padded_input(&mut body, c.x, &x_dims, c.groups as u64, &stride, &dilation, &pads[..n], dtype)
        }
    };
    let mut accumulators = Vec::with_capacity(block as usize);
    for (b, &weight) in weights.iter().enumerate() {
        let product = product_term(&mut body, input, weight, dtype)?;
        body.instrs.push(Instr::Accumulate { acc: b as u32, x: product, index: None });
        accumulators.push(Accumulator { op: ReduceOp::Sum, dtype, result: body.reg() });
    }
    let dot = body.stage(inner, accumulators.clone());
    let mut out_strides =
        vec![o_st[0].clone(), per_group.mul(&o_st[1]).map_err(bad)?, within.1.mul(&o_st[1]).map_err(bad)?];
    out_strides.extend(o_st[2..].iter().cloned());
    for (b, acc) in accumulators.iter().enumerate() {
        let mut value = finish_sum(&mut body, acc.result, dtype);
        if let Some(post) = &c.post {
            let mut at = channel_index(rank, &[per_group.clone(), within.1.clone()]);
            at.offset = first(b as u64)?;
            value = post_ops(&mut body, post, p, at, value)?;
        }
        let offset = first(b as u64)?.mul(&o_st[1]).map_err(bad)?;
        body.store(c.out, outer_index(offset, &out_strides), value);
    }
    let write = body.stage(vec![], vec![]);
    Ok(body.kernel(name, outer, vec![dot, write]))
}

/// The input value a tap reads in a padded convolution: `x` at the computed position where
/// it lies inside the input (`x_dims`: its static dims after the batch, none empty), `0`
/// elsewhere (of `dtype`, the input's).
#[allow(clippy::too_many_arguments)]
fn padded_input(
    body: &mut Body,
    x: crate::kernel::BufferId,
    x_dims: &[u64],
    groups: u64,
    stride: &[i64],
    dilation: &[i64],
    pad_begin: &[i64],
    dtype: DType,
) -> crate::kernel::Reg {
    let mut st: Vec<i64> = vec![x_dims.iter().product::<u64>() as i64];
    st.extend((0..x_dims.len()).map(|d| x_dims[d + 1..].iter().product::<u64>() as i64));
    let (g, ci) = (body.var(Var::Outer(1)), body.var(Var::Inner(0)));
    let per_group = body.int((x_dims[0] / groups) as i64);
    let first = body.bin(OpKind::Mul, g, per_group, DType::I64);
    let channel = body.bin(OpKind::Add, first, ci, DType::I64);
    let mut coords = vec![body.var(Var::Outer(0)), channel];
    let zero = body.int(0);
    let mut inside = body.def(|dst| Instr::Const { dst, value: crate::kernel::Scalar::Bool(true), dtype: DType::Bool });
    for (d, &size) in x_dims[1..].iter().enumerate() {
        let (o, k) = (body.var(Var::Outer(3 + d as u32)), body.var(Var::Inner(1 + d as u32)));
        let (s, dil, pad) = (body.int(stride[d]), body.int(dilation[d]), body.int(pad_begin[d]));
        let a = body.bin(OpKind::Mul, o, s, DType::I64);
        let b = body.bin(OpKind::Mul, k, dil, DType::I64);
        let sum = body.bin(OpKind::Add, a, b, DType::I64);
        let at = body.bin(OpKind::Sub, sum, pad, DType::I64);
        let size = body.int(size as i64);
        let lo = body.cmp(OpKind::Ge, at, zero);
        let hi = body.cmp(OpKind::Lt, at, size);
        let both = body.bin(OpKind::And, lo, hi, DType::Bool);
        inside = body.bin(OpKind::And, inside, both, DType::Bool);
        coords.push(at);
    }
    let flat = body.flat(&coords, &st);
    let at = body.select(inside, flat, zero, DType::I64);
    let value = body.load_at(x, at);
    let zero = body.zero(dtype);
    body.select(inside, value, zero, dtype)
}
