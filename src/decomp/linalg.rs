//! Decompositions of the linalg family's high-level ops: `bmm`, `linear`, `addmm`, `conv2d`
//! (onto the opaque `matmul` and `conv`), and the pools `max_pool2d`, `avg_pool2d`,
//! `adaptive_avg_pool2d` (onto `pad`, `slice`, elementwise prims and reductions).
//!
//! Choices worth knowing:
//! - Operands are converted to the op's result dtype before the `matmul`/`conv` (a float bias
//!   can promote the product, as in the op). `linear`'s and `conv2d`'s bias add rounds once
//!   after the product, as the op does, so in f32 mode they match the op bit for bit.
//!   `addmm` is `beta*bias + alpha*(a @ b)` with the multiplications left out when the
//!   factor is exactly 1 and the bias left out entirely when `beta == 0` (NaN/inf bias
//!   included, as the op defines); `alpha == 0` still multiplies (`0 * inf` is NaN). Integer
//!   factors are wrapped to the dtype's width, matching the op's wrapping arithmetic.
//! - Pools slide windows by static-offset `slice`s: the input is padded once (`-inf` for
//!   max, `0` for avg) with the op's padding plus, with `ceil_mode`, enough extra high padding
//!   for the last window; then for each kernel offset a strided slice along H is combined
//!   (`max` / `add`), and then the same along W. Max and sum over a rectangle are separable,
//!   so this takes `kh + kw` slices instead of `kh * kw`; max is exactly the op's (NaN
//!   propagates, `-0 < +0`), sums differ from the op's f64 sum by rounding only.
//!   A symbolic spatial dim works when the op allows it (stride 1): the slices then end at a
//!   negative offset from the end.
//! - `avg_pool2d`'s divisor is a pool of ones: a 1-D i64 `full` of ones per spatial dim,
//!   padded with 1 (count_include_pad) or 0 and then with 0 for the ceil-mode extra, summed
//!   over the same windows; the outer product of the two count vectors is the divisor map,
//!   exact. It is a scalar `full(kh*kw)` when the map is uniform (count_include_pad with no
//!   ceil-mode extra). Without count_include_pad a window holding no input element has count 0
//!   and a sum of +0; dividing by `max(count, 1)` gives the op's 0. Sums run in f32 for half
//!   inputs.
//! - `adaptive_avg_pool2d` sums each window `floor(i*in/out) .. ceil((i+1)*in/out)` with
//!   `slice` + `reduce_sum` and `cat`s them, first along H, then along W, and divides by the
//!   outer product of the window lengths (computed the same way on ones); an empty window
//!   gives `0/0 = NaN` as the op. A symbolic input dim is supported only for an output size of
//!   0 or 1 along it (the window is then nothing or everything); otherwise
//!   `DecompError::Unsupported`.

use super::norm::{unsupported, widen};
use super::{DecompError, DecompFn, Emitter};
use crate::ir::{AttrValue, DType, Dim, Node, Shape, SizeExpr, Value};
use crate::ops::OpKind;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    Some(match op {
        OpKind::Bmm => bmm,
        OpKind::Linear => linear,
        OpKind::Addmm => addmm,
        OpKind::Conv2d => conv2d,
        OpKind::MaxPool2d => max_pool2d,
        OpKind::AvgPool2d => avg_pool2d,
        OpKind::AdaptiveAvgPool2d => adaptive_avg_pool2d,
        _ => return None,
    })
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

// ---------------------------------------------------------------------------------------------
// bmm, linear, addmm, conv2d

fn bmm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let a = e.convert(args[0], node.ty.dtype)?;
    let b = e.convert(args[1], node.ty.dtype)?;
    e.matmul(a, b, false, false)
}

fn linear(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let dtype = node.ty.dtype;
    let x = e.convert(args[0], dtype)?;
    let w = e.convert(args[1], dtype)?;
    let xs = e.shape(x);
    let x2 = if xs.rank() == 1 { e.reshape(x, &[Dim::new(1), xs.dims()[0].clone()].into_iter().collect())? } else { x };
    let y = e.matmul(x2, w, false, true)?;
    let mut y = e.reshape(y, &node.ty.shape)?;
    if let Some(&bias) = args.get(2) {
        let bias = e.convert(bias, dtype)?;
        y = e.add(y, bias)?;
    }
    Ok(y)
}

/// A scalar factor of `dtype`: floats as given, integers wrapped to the dtype's width (the
/// op multiplies with wrapping arithmetic, and `infer` checked the factor is integral).
fn factor(e: &mut Emitter, v: f64, dtype: DType) -> Result<Value, DecompError> {
    let v = match dtype {
        // A negative factor of u64 is its wrapped value, above what an f64 holds exactly.
        DType::U64 if v < 0.0 => {
            let m = e.full(((v as i64) as u64).wrapping_neg() as f64, dtype, &Shape::scalar())?;
            return e.unary(OpKind::Neg, m);
        }
        d if d.is_int() => crate::interp::int_to_f64(d, crate::interp::wrap_int(d, v as i64)),
        _ => v,
    };
    e.full(v, dtype, &Shape::scalar())
}

fn addmm(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let dtype = node.ty.dtype;
    let (beta, alpha) = (node.attrs.float("beta"), node.attrs.float("alpha"));
    let a = e.convert(args[1], dtype)?;
    let b = e.convert(args[2], dtype)?;
    let mut y = e.matmul(a, b, false, false)?;
    if alpha != 1.0 {
        let f = factor(e, alpha, dtype)?;
        y = e.mul(y, f)?;
    }
    if beta != 0.0 {
        let mut bias = e.convert(args[0], dtype)?;
        if beta != 1.0 {
            let f = factor(e, beta, dtype)?;
            bias = e.mul(bias, f)?;
        }
        y = e.add(bias, y)?;
    }
    Ok(y)
}

fn conv2d(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let dtype = node.ty.dtype;
    let x = e.convert(args[0], dtype)?;
    let w = e.convert(args[1], dtype)?;
    let p = node.attrs.ints("padding");
    let padding = [p[0], p[1], p[0], p[1]];
    let y = e.prim(
        OpKind::Conv,
        &[x, w],
        &[
            ("stride", ints(node.attrs.ints("stride"))),
            ("padding", ints(&padding)),
            ("dilation", ints(node.attrs.ints("dilation"))),
            ("groups", AttrValue::Int(node.attrs.int("groups"))),
        ],
    )?;
    let Some(&bias) = args.get(2) else { return Ok(y) };
    let bias = e.convert(bias, dtype)?;
    let shape = e.shape(y);
    let bias = e.prim(
        OpKind::BroadcastInDim,
        &[bias],
        &[("shape", AttrValue::Dims(shape.dims().iter().cloned().map(Some).collect())), ("broadcast_dims", ints(&[1]))],
    )?;
    e.add(y, bias)
}

// ---------------------------------------------------------------------------------------------
// Pools

/// The window geometry of one spatial dim.
struct Win {
    kernel: u64,
    stride: u64,
    dilation: u64,
    pad: u64,
    /// Extra high padding so that the last (ceil-mode) window fits.
    extra: u64,
    /// The number of windows (the output length).
    out: Dim,
}

impl Win {
    /// `dilation * (kernel - 1) + 1`.
    fn extent(&self) -> u64 {
        self.dilation * (self.kernel - 1) + 1
    }
}

/// Most kernel offsets a pooling window may have over its two spatial dims together (the
/// sum of its kernel sizes: the decomposition emits one strided slice per offset of each dim),
/// as the ONNX importer allows.
pub const MAX_POOL_TAPS: u64 = 4096;

/// The two spatial dims' window geometry of a pool node.
fn pool_windows(node: &Node, input: &Shape) -> Result<[Win; 2], DecompError> {
    let op = node.op.name();
    let attrs = &node.attrs;
    let r = input.rank();
    let get = |name: &str, d: usize, default: i64| -> Result<u64, DecompError> {
        let v = if node.op == OpKind::AvgPool2d && name == "dilation" { &[][..] } else { attrs.ints(name) };
        let x = if v.is_empty() { default } else { v.get(d).copied().unwrap_or(-1) };
        u64::try_from(x).map_err(|_| unsupported(op, format!("bad {name} {v:?}")))
    };
    let win = |d: usize| -> Result<Win, DecompError> {
        let kernel = get("kernel", d, -1)?;
        let stride = get("stride", d, kernel as i64)?;
        let dilation = get("dilation", d, 1)?;
        let pad = get("padding", d, 0)?;
        if kernel == 0 || stride == 0 || dilation == 0 {
            return Err(unsupported(op, "kernel, stride and dilation must be positive"));
        }
        // One slice per kernel tap: a window wider than any real model's is refused rather
        // than decomposed into that many nodes.
        let extent = dilation.checked_mul(kernel - 1).and_then(|e| e.checked_add(1));
        let Some(extent) = extent.filter(|_| kernel <= MAX_POOL_TAPS) else {
            return Err(unsupported(
                op,
                format!(
                    "a kernel of {kernel} with dilation {dilation} in spatial dim {d} (at most {MAX_POOL_TAPS} taps)"
                ),
            ));
        };
        let out = node.ty.shape.dims()[r - 2 + d].clone();
        let extra = match (out.as_const(), input.dims()[r - 2 + d].as_const()) {
            (Some(o), Some(n)) if o > 0 => ((o - 1) * stride + extent).saturating_sub(n + 2 * pad),
            (Some(_), Some(_)) => 0,
            // Symbolic: in ceil mode the last window may pass the padding by up to
            // `stride - 1` (it starts inside the input or its leading padding); otherwise
            // every window fits.
            _ if attrs.bool("ceil_mode") => stride - 1,
            _ => 0,
        };
        Ok(Win { kernel, stride, dilation, pad, extra, out })
    };
    let w = [win(0)?, win(1)?];
    if w[0].kernel + w[1].kernel > MAX_POOL_TAPS {
        return Err(unsupported(
            op,
            format!(
                "a window of {} x {} (its kernel sizes may sum to at most {MAX_POOL_TAPS}: one slice per offset)",
                w[0].kernel, w[1].kernel
            ),
        ));
    }
    Ok(w)
}

/// Pads the last two dims of `x` with `value`: the windows' padding, then (with `extra_value`)
/// the ceil-mode extra. One `pad` node when both values agree.
fn pad_spatial(e: &mut Emitter, x: Value, w: &[Win; 2], value: f64, extra_value: f64) -> Result<Value, DecompError> {
    let r = e.rank(x);
    let mut low = vec![0i64; r];
    let mut high = vec![0i64; r];
    let mut extra = vec![0i64; r];
    for d in 0..2 {
        low[r - 2 + d] = w[d].pad as i64;
        high[r - 2 + d] = w[d].pad as i64;
        extra[r - 2 + d] = w[d].extra as i64;
    }
    let same = value.to_bits() == extra_value.to_bits();
    let any_extra = extra.iter().any(|&x| x != 0);
    if same {
        for (h, x) in high.iter_mut().zip(&extra) {
            *h += x;
        }
    }
    let mut y = x;
    if low.iter().chain(&high).any(|&x| x != 0) {
        y = pad(e, y, &low, &high, value)?;
    }
    if !same && any_extra {
        y = pad(e, y, &vec![0; r], &extra, extra_value)?;
    }
    Ok(y)
}

fn pad(e: &mut Emitter, x: Value, low: &[i64], high: &[i64], value: f64) -> Result<Value, DecompError> {
    e.prim(OpKind::Pad, &[x], &[("low", ints(low)), ("high", ints(high)), ("value", AttrValue::Float(value))])
}

/// Combines (`max` or `add`) the window elements of a padded `x` along `axis`: one strided
/// slice per kernel offset.
fn window_reduce(e: &mut Emitter, x: Value, axis: usize, w: &Win, op: OpKind) -> Result<Value, DecompError> {
    let mut acc: Option<Value> = None;
    for a in 0..w.kernel {
        let start = (a * w.dilation) as i64;
        // A single offset covering the whole axis needs no slice.
        let whole = w.kernel == 1 && w.stride == 1 && e.shape(x).dims()[axis] == w.out;
        let s = match w.out.as_const() {
            _ if whole => x,
            Some(0) => e.slice(x, axis, start, start, 1)?,
            Some(o) => e.slice(x, axis, start, start + ((o - 1) * w.stride) as i64 + 1, w.stride as i64)?,
            None if w.stride == 1 && w.extra == 0 => {
                let back = (w.extent() - 1 - a * w.dilation) as i64;
                e.slice(x, axis, start, if back == 0 { i64::MAX } else { -back }, 1)?
            }
            None => {
                // start + (out - 1) * stride + 1, a size expression.
                let size_err = |err: crate::ir::DimError| unsupported("pool", err.to_string());
                let c = SizeExpr::constant;
                let end = SizeExpr::from_dim(&w.out)
                    .and_then(|o| o.sub(&c(1)))
                    .and_then(|o| o.mul(&c(w.stride as i64)))
                    .and_then(|o| o.add(&c(start + 1)))
                    .map_err(size_err)?;
                // The window count may be negative for small lengths (`min((n + 1) / 3 - 1, ..)`
                // with ceil mode and dilation): a strided slice cannot take it.
                e.slice_sym(x, axis, c(start), end, w.stride as i64)
                    .map_err(|err| unsupported("pool", format!("{} windows over a symbolic length: {err}", w.out)))?
            }
        };
        acc = Some(match acc {
            None => s,
            Some(acc) => e.binary(op, acc, s)?,
        });
    }
    acc.ok_or_else(|| unsupported("pool", "empty kernel"))
}

fn max_pool2d(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let w = pool_windows(node, &e.shape(x))?;
    let r = e.rank(x);
    let p = pad_spatial(e, x, &w, f64::NEG_INFINITY, f64::NEG_INFINITY)?;
    let rows = window_reduce(e, p, r - 2, &w[0], OpKind::Max)?;
    window_reduce(e, rows, r - 1, &w[1], OpKind::Max)
}

/// The window sizes of one spatial dim as an i64 vector `[out]`: a pool of ones of length
/// `len`, padded with `pad_value` and then 0 for the ceil-mode extra.
fn window_counts(e: &mut Emitter, len: &Dim, w: &Win, pad_value: f64) -> Result<Value, DecompError> {
    let ones = e.full(1.0, DType::I64, &Shape::from_iter([len.clone()]))?;
    let mut v = ones;
    if w.pad > 0 {
        v = pad(e, v, &[w.pad as i64], &[w.pad as i64], pad_value)?;
    }
    if w.extra > 0 {
        v = pad(e, v, &[0], &[w.extra as i64], 0.0)?;
    }
    window_reduce(e, v, 0, w, OpKind::Add)
}

fn avg_pool2d(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let dtype = e.dtype(x);
    let shape = e.shape(x);
    let w = pool_windows(node, &shape)?;
    let r = e.rank(x);
    let include_pad = node.attrs.bool("count_include_pad");
    let p = pad_spatial(e, x, &w, 0.0, 0.0)?;
    let rows = window_reduce(e, p, r - 2, &w[0], OpKind::Add)?;
    let sums = window_reduce(e, rows, r - 1, &w[1], OpKind::Add)?;
    let divisor = if include_pad && w[0].extra == 0 && w[1].extra == 0 {
        e.full((w[0].kernel * w[1].kernel) as f64, dtype, &Shape::scalar())?
    } else {
        let fill = if include_pad { 1.0 } else { 0.0 };
        let ch = window_counts(e, &shape.dims()[r - 2], &w[0], fill)?;
        let cw = window_counts(e, &shape.dims()[r - 1], &w[1], fill)?;
        let col: Shape = [w[0].out.clone(), Dim::new(1)].into_iter().collect();
        let ch = e.reshape(ch, &col)?;
        let mut n = e.mul(ch, cw)?;
        if !include_pad {
            n = e.binary_scalar(OpKind::Max, n, 1.0)?;
        }
        e.convert(n, dtype)?
    };
    let y = e.div(sums, divisor)?;
    e.convert(y, node.ty.dtype)
}

/// Sums `x`'s adaptive windows along `axis` into `out` cells (kept in place of the axis).
fn adaptive_sum(e: &mut Emitter, x: Value, axis: usize, out: u64) -> Result<Value, DecompError> {
    let len = e.shape(x).dims()[axis].clone();
    match (out, len.as_const()) {
        (0, _) => {
            // No cells: an empty tensor (a `slice` to 0 would need a static dim).
            let mut shape = e.shape(x);
            shape.0[axis] = Dim::new(0);
            let dtype = e.dtype(x);
            e.full(0.0, dtype, &shape)
        }
        (1, _) => e.reduce(OpKind::ReduceSum, x, &[axis], true),
        (_, Some(n)) => {
            let mut cells = Vec::with_capacity(out as usize);
            for i in 0..out {
                let (lo, hi) = ((i * n) / out, ((i + 1) * n).div_ceil(out));
                let s = e.slice(x, axis, lo as i64, hi as i64, 1)?;
                cells.push(e.reduce(OpKind::ReduceSum, s, &[axis], true)?);
            }
            e.cat(&cells, axis)
        }
        (_, None) => Err(unsupported(
            "adaptive_avg_pool2d",
            format!("a symbolic input dim {len} needs a static size for an output size of {out}"),
        )),
    }
}

fn adaptive_avg_pool2d(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = widen(e, args[0])?;
    let dtype = e.dtype(x);
    let shape = e.shape(x);
    let r = shape.rank();
    let o = node.attrs.ints("output_size");
    let (oh, ow) = match o {
        [h, w] => (
            u64::try_from(*h).map_err(|_| unsupported("adaptive_avg_pool2d", "negative output size"))?,
            u64::try_from(*w).map_err(|_| unsupported("adaptive_avg_pool2d", "negative output size"))?,
        ),
        _ => return Err(unsupported("adaptive_avg_pool2d", "output_size needs 2 entries")),
    };
    let rows = adaptive_sum(e, x, r - 2, oh)?;
    let sums = adaptive_sum(e, rows, r - 1, ow)?;
    // Window lengths, counted exactly in i64 on a ones vector per dim.
    let (h, w) = (shape.dims()[r - 2].clone(), shape.dims()[r - 1].clone());
    let lengths = |e: &mut Emitter, len: &Dim, out: u64| -> Result<Value, DecompError> {
        let ones = e.full(1.0, DType::I64, &Shape::from_iter([len.clone()]))?;
        adaptive_sum(e, ones, 0, out)
    };
    let ch = lengths(e, &h, oh)?;
    let cw = lengths(e, &w, ow)?;
    let ch = e.reshape(ch, &Shape::from_static(&[oh, 1]))?;
    let n = e.mul(ch, cw)?;
    let n = e.convert(n, dtype)?;
    let y = e.div(sums, n)?;
    e.convert(y, node.ty.dtype)
}
