//! Library kernels for the data-movement prims `cat`, `pad`, `rev`, `gather` and
//! `scatter_add`, on dense row-major buffers of any dtype, given as native-endian bytes (the
//! plan's layout: bool is one byte, 0 or 1).
//!
//! Each kernel means exactly what its prim means (`crate::ops::shape`, `crate::ops::index`):
//! the four copies move element bytes unchanged (so a result is bit for bit the interpreter's,
//! NaN payloads included, except that the interpreter's f64 storage quiets a signalling NaN),
//! and `scatter_add` accumulates as the interpreter does, in row-major order, each sum rounded
//! to the dtype (integers wrap). Errors are the interpreter's own [`EvalError`]s, found in the
//! interpreter's order: a `gather` or `scatter_add` index outside `-size..size` is
//! [`EvalError::IndexOutOfRange`] for the first such index in row-major order, and nothing is
//! ever read outside a buffer (indices come from user data).
//!
//! - `cat`: for every index of the dims before the axis, one contiguous block per argument
//!   (the argument's dims from the axis on); the output is written in byte ranges, each range
//!   walking the (outer index, argument) blocks it covers.
//! - `pad`: per output row (the last axis), the input row it reads if any (an axis position
//!   `p` reads input `(p - low) / (interior + 1)` when that divides and is in range), then the
//!   row as fill, one contiguous copy and fill (no interior padding on the last axis), or fill
//!   and strided element copies. Negative `low`/`high` crop.
//! - `rev`: blocks of the dims after the last reversed axis are copied whole from their
//!   mirrored place; when the last axis is reversed, rows are copied back to front.
//! - `gather`: per output row, the base offset of `x` without the axis, then one index read,
//!   check and element copy per element.
//! - `scatter_add`: `x` copied, then the sums in row-major order of the index (on one thread:
//!   the order of the additions is the result's).
//!
//! The output is split over rayon workers in chunks of whole units (rows, blocks, or bytes for
//! `cat`) when it has at least [`PAR_BYTES`] bytes and more than one thread is allowed.

use rayon::prelude::*;
use smallvec::SmallVec;

use crate::interp::EvalError;
use crate::ir::{Attrs, DType};
use crate::kernel::eval::{get_bytes, set_bytes, Val};
use crate::ops::index::normalize_index;
use crate::ops::util::normalize_axis;
use crate::ops::OpKind;

/// Below this many output bytes a copy stays on the calling thread.
pub const PAR_BYTES: usize = 1 << 18;

/// The smallest chunk of output one worker gets, in bytes.
const MIN_CHUNK_BYTES: usize = 1 << 16;

type Dims = SmallVec<[usize; 8]>;

/// One argument: its bytes, shape and dtype.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub bytes: &'a [u8],
    pub shape: &'a [usize],
    pub dtype: DType,
}

/// Whether `op` is one of the data-movement prims this file runs.
pub fn is_copy_op(op: OpKind) -> bool {
    matches!(op, OpKind::Cat | OpKind::Pad | OpKind::Rev | OpKind::Gather | OpKind::ScatterAdd)
}

/// Whether [`run`] handles `op` with arguments of these dtypes and a result of `out`: every
/// argument is the result's dtype (cat, pad, rev; x and src of scatter_add, which is numeric;
/// x of gather), indices are i32 or i64. Explicit prims graphs always qualify.
pub fn supports(op: OpKind, args: impl IntoIterator<Item = DType>, out: DType) -> bool {
    let mut args = args.into_iter();
    let index = |d: Option<DType>| matches!(d, Some(DType::I32 | DType::I64));
    match op {
        OpKind::Cat => {
            let mut any = false;
            args.all(|d| {
                any = true;
                d == out
            }) && any
        }
        OpKind::Pad | OpKind::Rev => args.next() == Some(out) && args.next().is_none(),
        OpKind::Gather => args.next() == Some(out) && index(args.next()) && args.next().is_none(),
        OpKind::ScatterAdd => {
            out != DType::Bool
                && args.next() == Some(out)
                && index(args.next())
                && args.next() == Some(out)
                && args.next().is_none()
        }
        _ => false,
    }
}

fn invalid(message: String) -> EvalError {
    EvalError::Invalid(message)
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Checks that `bytes` holds a dense `shape` of `es`-byte elements (`what` names it).
fn check_len(what: impl Fn() -> String, bytes: usize, shape: &[usize], es: usize) -> Result<(), EvalError> {
    match numel(shape).and_then(|n| n.checked_mul(es)) {
        Some(n) if n == bytes => Ok(()),
        _ => Err(invalid(format!("{} has {bytes} bytes, not a dense {shape:?} of {es}-byte elements", what()))),
    }
}

/// Row-major strides of `shape`, in elements.
fn strides(shape: &[usize]) -> Dims {
    let mut s: Dims = SmallVec::from_elem(1, shape.len());
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Runs `op` (see [`supports`]) on `args`, writing `out` (the result, of `out_shape` and
/// `out_dtype`), on up to `threads` rayon workers.
pub fn run(
    op: OpKind,
    attrs: &Attrs,
    args: &[Operand<'_>],
    out: &mut [u8],
    out_shape: &[usize],
    out_dtype: DType,
    threads: usize,
) -> Result<(), EvalError> {
    if !supports(op, args.iter().map(|a| a.dtype), out_dtype) {
        return Err(invalid(format!("no copy kernel for {op} with these dtypes")));
    }
    let es = out_dtype.size_bytes();
    for (k, a) in args.iter().enumerate() {
        check_len(|| format!("argument {k} of {op}"), a.bytes.len(), a.shape, a.dtype.size_bytes())?;
    }
    check_len(|| format!("the result of {op}"), out.len(), out_shape, es)?;
    let threads = threads.max(1);
    match op {
        OpKind::Cat => cat(attrs, args, out, out_shape, threads),
        OpKind::Pad => pad(attrs, &args[0], out, out_shape, out_dtype, threads),
        OpKind::Rev => rev(attrs, &args[0], out, out_shape, es, threads),
        OpKind::Gather => gather(attrs, &args[0], &args[1], out, out_shape, es, threads),
        OpKind::ScatterAdd => scatter_add(attrs, &args[0], &args[1], &args[2], out, out_dtype),
        _ => Err(invalid(format!("no copy kernel for {op}"))),
    }
}

/// Calls `f(first_unit, chunk)` for `out` cut into chunks of whole `unit`-byte units, over
/// rayon workers when `out` is large enough; the error of the earliest failing chunk wins
/// (a chunk stops at its first error, so this is the first in output order).
fn split<F>(out: &mut [u8], unit: usize, threads: usize, f: F) -> Result<(), EvalError>
where
    F: Fn(usize, &mut [u8]) -> Result<(), EvalError> + Sync,
{
    if out.is_empty() {
        return Ok(());
    }
    if unit == 0 || !out.len().is_multiple_of(unit) {
        return Err(invalid(format!("{} bytes are not whole units of {unit}", out.len())));
    }
    let units = out.len() / unit;
    if threads <= 1 || out.len() < PAR_BYTES || units < 2 {
        return f(0, out);
    }
    let per = units.div_ceil(4 * threads).max(MIN_CHUNK_BYTES.div_ceil(unit));
    out.par_chunks_mut(per * unit)
        .enumerate()
        .map(|(i, c)| f(i * per, c).err().map(|e| (i, e)))
        .reduce(
            || None,
            |a, b| match (a, b) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            },
        )
        .map_or(Ok(()), |(_, e)| Err(e))
}

/// A row-major multi-index over `dims`, advanced one position at a time.
struct Odometer<'a> {
    dims: &'a [usize],
    idx: Dims,
}

impl<'a> Odometer<'a> {
    /// Positioned at flat index `flat` of `dims`.
    fn at(dims: &'a [usize], mut flat: usize) -> Odometer<'a> {
        let mut idx: Dims = SmallVec::from_elem(0, dims.len());
        for d in (0..dims.len()).rev() {
            if dims[d] > 0 {
                idx[d] = flat % dims[d];
                flat /= dims[d];
            }
        }
        Odometer { dims, idx }
    }

    fn advance(&mut self) {
        for d in (0..self.dims.len()).rev() {
            self.idx[d] += 1;
            if self.idx[d] < self.dims[d] {
                return;
            }
            self.idx[d] = 0;
        }
    }
}

/// Fills `dst` with copies of the element `pat`.
fn fill(dst: &mut [u8], pat: &[u8]) {
    if pat.iter().all(|&b| b == pat[0]) {
        dst.fill(pat[0]);
        return;
    }
    fn n<const N: usize>(dst: &mut [u8], pat: &[u8]) {
        if let Ok(p) = <[u8; N]>::try_from(pat) {
            dst.as_chunks_mut::<N>().0.fill(p);
        }
    }
    match pat.len() {
        2 => n::<2>(dst, pat),
        4 => n::<4>(dst, pat),
        8 => n::<8>(dst, pat),
        _ => dst.chunks_exact_mut(pat.len()).for_each(|c| c.copy_from_slice(pat)),
    }
}

/// Calls `$body` with `$n` bound to the element size `$es` as a constant (1, 2, 4 or 8).
macro_rules! by_size {
    ($es:expr, $n:ident => $body:expr) => {
        match $es {
            1 => {
                const $n: usize = 1;
                $body
            }
            2 => {
                const $n: usize = 2;
                $body
            }
            4 => {
                const $n: usize = 4;
                $body
            }
            8 => {
                const $n: usize = 8;
                $body
            }
            other => Err(invalid(format!("no copy kernel for {other}-byte elements"))),
        }
    };
}

// ---------------------------------------------------------------------------------------------
// cat
// ---------------------------------------------------------------------------------------------

fn cat(
    attrs: &Attrs,
    args: &[Operand<'_>],
    out: &mut [u8],
    out_shape: &[usize],
    threads: usize,
) -> Result<(), EvalError> {
    let rank = out_shape.len();
    let axis = normalize_axis(attrs.int("axis"), rank).map_err(|e| invalid(e.to_string()))?;
    let mut total = 0usize;
    for (k, a) in args.iter().enumerate() {
        let fits =
            a.shape.len() == rank && a.shape.iter().zip(out_shape).enumerate().all(|(d, (x, o))| d == axis || x == o);
        if !fits {
            return Err(invalid(format!("cat argument {k} of shape {:?} does not fit {out_shape:?}", a.shape)));
        }
        total += a.shape[axis];
    }
    if total != out_shape[axis] {
        return Err(invalid(format!("cat of {total} along axis {axis} does not fit {out_shape:?}")));
    }
    let outer: usize = out_shape[..axis].iter().product();
    // Bytes per outer index, per argument.
    let blocks: SmallVec<[usize; 8]> = args.iter().map(|a| a.bytes.len().checked_div(outer).unwrap_or(0)).collect();
    let row: usize = blocks.iter().sum();
    if row == 0 {
        return Ok(());
    }
    split(out, 1, threads, |start, dst| {
        // The (outer index, argument, byte in the block) of the chunk's first byte.
        let (mut o, mut r) = (start / row, start % row);
        let mut k = 0;
        while r >= blocks[k] {
            r -= blocks[k];
            k += 1;
        }
        let mut at = 0;
        while at < dst.len() {
            let n = (blocks[k] - r).min(dst.len() - at);
            let from = o * blocks[k] + r;
            dst[at..at + n].copy_from_slice(&args[k].bytes[from..from + n]);
            at += n;
            r += n;
            // On to the next non-empty block.
            while r == blocks[k] && at < dst.len() {
                r = 0;
                k += 1;
                if k == blocks.len() {
                    k = 0;
                    o += 1;
                }
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// pad
// ---------------------------------------------------------------------------------------------

/// One axis of a pad: `low`, `high` and the step `interior + 1` between argument elements.
#[derive(Clone, Copy)]
struct PadAxis {
    low: i64,
    step: i64,
    n: usize,
}

impl PadAxis {
    /// The argument position that output position `p` reads, if any.
    fn source(self, p: usize) -> Option<usize> {
        let t = p as i128 - i128::from(self.low);
        if self.step == 1 {
            return (t >= 0 && t < self.n as i128).then_some(t as usize);
        }
        let step = i128::from(self.step);
        (t >= 0 && t % step == 0 && t / step < self.n as i128).then(|| (t / step) as usize)
    }

    /// The argument positions `lo..hi` that land inside an output axis of `size`.
    fn visible(self, size: usize) -> (usize, usize) {
        let (low, step, n) = (i128::from(self.low), i128::from(self.step), self.n as i128);
        // low + i * step >= 0 and low + i * step < size.
        let lo = if low >= 0 { 0 } else { (-low + step - 1) / step };
        let hi = if size as i128 > low { (size as i128 - low + step - 1) / step } else { 0 };
        let (lo, hi) = (lo.min(n), hi.min(n));
        (lo as usize, hi.max(lo) as usize)
    }
}

fn pad(
    attrs: &Attrs,
    x: &Operand<'_>,
    out: &mut [u8],
    out_shape: &[usize],
    dtype: DType,
    threads: usize,
) -> Result<(), EvalError> {
    let rank = x.shape.len();
    let (low, high, interior) = (attrs.ints("low"), attrs.ints("high"), attrs.ints("interior"));
    if out_shape.len() != rank
        || low.len() != rank
        || high.len() != rank
        || !(interior.is_empty() || interior.len() == rank)
    {
        return Err(invalid(format!("pad attributes do not fit an argument of rank {rank}")));
    }
    let mut axes: SmallVec<[PadAxis; 8]> = SmallVec::new();
    for d in 0..rank {
        let i = interior.get(d).copied().unwrap_or(0);
        if i < 0 {
            return Err(invalid(format!("pad interior entries must be >= 0, got {i}")));
        }
        let n = i128::from(x.shape[d] as u64);
        let size = n + (n - 1).max(0) * i128::from(i) + i128::from(low[d]) + i128::from(high[d]);
        if size != out_shape.get(d).map_or(-1, |&s| s as i128) {
            return Err(invalid(format!("padding {:?} leaves a negative size or not {out_shape:?}", x.shape)));
        }
        axes.push(PadAxis { low: low[d], step: i + 1, n: x.shape[d] });
    }
    let es = dtype.size_bytes();
    let mut pat = [0u8; 8];
    set_bytes(dtype, &mut pat[..es], 0, Val::F(attrs.float("value")))
        .ok_or_else(|| invalid(format!("pad value for {dtype}")))?;
    let pat = &pat[..es];
    let Some((&last, lead)) = axes.split_last() else {
        out.copy_from_slice(x.bytes);
        return Ok(());
    };
    let (row_len, lead_dims) = (out_shape[rank - 1], &out_shape[..rank - 1]);
    let xs = strides(x.shape);
    let (lo, hi) = last.visible(row_len);
    split(out, row_len * es, threads, |first, dst| {
        let mut pos = Odometer::at(lead_dims, first);
        for row in dst.chunks_exact_mut(row_len * es) {
            let mut from = Some(0usize);
            for (d, (&p, a)) in pos.idx.iter().zip(lead).enumerate() {
                from = from.and_then(|f| a.source(p).map(|i| f + i * xs[d]));
            }
            pos.advance();
            let Some(from) = from else {
                fill(row, pat);
                continue;
            };
            let src = &x.bytes[from * es..(from + last.n) * es];
            if lo >= hi {
                fill(row, pat);
            } else if last.step == 1 {
                // Argument element i lands at low + i.
                let (a, b) = ((last.low + lo as i64) as usize, (last.low + hi as i64) as usize);
                fill(&mut row[..a * es], pat);
                row[a * es..b * es].copy_from_slice(&src[lo * es..hi * es]);
                fill(&mut row[b * es..], pat);
            } else {
                fill(row, pat);
                for i in lo..hi {
                    let p = (i128::from(last.low) + i as i128 * i128::from(last.step)) as usize;
                    row[p * es..(p + 1) * es].copy_from_slice(&src[i * es..(i + 1) * es]);
                }
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// rev
// ---------------------------------------------------------------------------------------------

fn rev(
    attrs: &Attrs,
    x: &Operand<'_>,
    out: &mut [u8],
    out_shape: &[usize],
    es: usize,
    threads: usize,
) -> Result<(), EvalError> {
    let rank = x.shape.len();
    if out_shape != x.shape {
        return Err(invalid(format!("rev of {:?} does not fit {out_shape:?}", x.shape)));
    }
    let mut reversed: SmallVec<[bool; 8]> = SmallVec::from_elem(false, rank);
    for &a in attrs.ints("axes") {
        let d = normalize_axis(a, rank).map_err(|e| invalid(e.to_string()))?;
        if reversed[d] {
            return Err(invalid(format!("attribute `axes`: axis {a} is listed twice")));
        }
        reversed[d] = true;
    }
    let Some(last_rev) = reversed.iter().rposition(|&r| r) else {
        out.copy_from_slice(x.bytes);
        return Ok(());
    };
    let shape = x.shape;
    let xs = strides(shape);
    // Units: the positions of the dims before `inner`; each a contiguous run of `len`
    // elements, copied back to front when the last axis is reversed.
    let backwards = last_rev == rank - 1;
    let inner = if backwards { rank - 1 } else { last_rev + 1 };
    let len: usize = shape[inner..].iter().product();
    let lead = &shape[..inner];
    let source = |pos: &Odometer<'_>| -> usize {
        pos.idx.iter().enumerate().map(|(d, &i)| (if reversed[d] { shape[d] - 1 - i } else { i }) * xs[d]).sum()
    };
    if !backwards {
        return split(out, len * es, threads, |first, dst| {
            let mut pos = Odometer::at(lead, first);
            for unit in dst.chunks_exact_mut(len * es) {
                let from = source(&pos) * es;
                unit.copy_from_slice(&x.bytes[from..from + len * es]);
                pos.advance();
            }
            Ok(())
        });
    }
    by_size!(es, N => {
        let src = x.bytes.as_chunks::<N>().0;
        split(out, len * es, threads, |first, dst| {
            let mut pos = Odometer::at(lead, first);
            for unit in dst.chunks_exact_mut(len * es) {
                let from = source(&pos);
                for (d, s) in unit.as_chunks_mut::<N>().0.iter_mut().zip(src[from..from + len].iter().rev()) {
                    *d = *s;
                }
                pos.advance();
            }
            Ok(())
        })
    })
}

// ---------------------------------------------------------------------------------------------
// gather and scatter_add
// ---------------------------------------------------------------------------------------------

/// An index element as bytes (i32 or i64).
trait IndexBytes: Copy + Send + Sync {
    fn get(self) -> i64;
}

impl IndexBytes for [u8; 4] {
    fn get(self) -> i64 {
        i64::from(i32::from_ne_bytes(self))
    }
}

impl IndexBytes for [u8; 8] {
    fn get(self) -> i64 {
        i64::from_ne_bytes(self)
    }
}

/// The checks gather and scatter_add share (the interpreter's `scatter_positions`): returns
/// the normalised axis.
fn check_index(attrs: &Attrs, x_shape: &[usize], ishape: &[usize]) -> Result<usize, EvalError> {
    let axis = normalize_axis(attrs.int("axis"), x_shape.len()).map_err(|e| invalid(e.to_string()))?;
    if ishape.len() != x_shape.len() {
        return Err(invalid(format!("index of shape {ishape:?} does not fit x of shape {x_shape:?}")));
    }
    for (d, (&i, &n)) in ishape.iter().zip(x_shape).enumerate() {
        if d != axis && i > n {
            return Err(invalid(format!(
                "index has size {i} on dim {d} but x has only {n} (index {ishape:?} vs x {x_shape:?})"
            )));
        }
    }
    Ok(axis)
}

fn gather(
    attrs: &Attrs,
    x: &Operand<'_>,
    index: &Operand<'_>,
    out: &mut [u8],
    out_shape: &[usize],
    es: usize,
    threads: usize,
) -> Result<(), EvalError> {
    let axis = check_index(attrs, x.shape, index.shape)?;
    if out_shape != index.shape {
        return Err(invalid(format!("gather by {:?} does not fit {out_shape:?}", index.shape)));
    }
    if index.dtype == DType::I32 {
        by_size!(es, N => gather_n::<N, [u8; 4]>(x, index.bytes.as_chunks::<4>().0, index.shape, axis, out, threads))
    } else {
        by_size!(es, N => gather_n::<N, [u8; 8]>(x, index.bytes.as_chunks::<8>().0, index.shape, axis, out, threads))
    }
}

fn gather_n<const N: usize, I: IndexBytes>(
    x: &Operand<'_>,
    index: &[I],
    ishape: &[usize],
    axis: usize,
    out: &mut [u8],
    threads: usize,
) -> Result<(), EvalError> {
    let rank = ishape.len();
    let src = x.bytes.as_chunks::<N>().0;
    let xs = strides(x.shape);
    let (size, stride) = (x.shape[axis], xs[axis]);
    let row_len = ishape[rank - 1];
    let along_last = axis == rank - 1;
    let lead = &ishape[..rank - 1];
    split(out, row_len * N, threads, |first, dst| {
        let mut pos = Odometer::at(lead, first);
        let mut q = first * row_len;
        for row in dst.chunks_exact_mut(row_len * N) {
            let base: usize = pos.idx.iter().enumerate().filter(|&(d, _)| d != axis).map(|(d, &i)| i * xs[d]).sum();
            pos.advance();
            for (j, (d, &raw)) in row.as_chunks_mut::<N>().0.iter_mut().zip(&index[q..q + row_len]).enumerate() {
                let raw = raw.get();
                let a = normalize_index(raw, size, true)?;
                *d = src[base + if along_last { 0 } else { j } + a * stride];
            }
            q += row_len;
        }
        Ok(())
    })
}

fn scatter_add(
    attrs: &Attrs,
    x: &Operand<'_>,
    index: &Operand<'_>,
    src: &Operand<'_>,
    out: &mut [u8],
    dtype: DType,
) -> Result<(), EvalError> {
    if src.shape != index.shape {
        return Err(invalid(format!("src has shape {:?} but index has shape {:?}", src.shape, index.shape)));
    }
    let axis = check_index(attrs, x.shape, index.shape)?;
    if out.len() != x.bytes.len() {
        return Err(invalid(format!("scatter_add into {:?} does not fit its result", x.shape)));
    }
    out.copy_from_slice(x.bytes);
    let ishape = index.shape;
    let rank = ishape.len();
    let xs = strides(x.shape);
    let size = x.shape[axis];
    let count = src.bytes.len() / dtype.size_bytes().max(1);
    let es = dtype.size_bytes();
    let mut pos = Odometer::at(ishape, 0);
    for p in 0..count {
        let raw = match index.dtype {
            DType::I32 => index.bytes.as_chunks::<4>().0[p].get(),
            _ => index.bytes.as_chunks::<8>().0[p].get(),
        };
        let a = normalize_index(raw, size, true)?;
        let q: usize = (0..rank).map(|d| (if d == axis { a } else { pos.idx[d] }) * xs[d]).sum();
        pos.advance();
        let (o, s) = (&mut out[q * es..(q + 1) * es], &src.bytes[p * es..(p + 1) * es]);
        match dtype {
            // The interpreter's sum: in f64, rounded to the dtype (exact for f64).
            DType::F32 => {
                let (a, b) =
                    (f32::from_ne_bytes([o[0], o[1], o[2], o[3]]), f32::from_ne_bytes([s[0], s[1], s[2], s[3]]));
                o.copy_from_slice(&((f64::from(a) + f64::from(b)) as f32).to_ne_bytes());
            }
            _ => {
                let sum = match (get_bytes(dtype, o, 0), get_bytes(dtype, s, 0)) {
                    (Some(Val::F(a)), Some(Val::F(b))) => Val::F(a + b),
                    (Some(Val::I(a)), Some(Val::I(b))) => Val::I(a.wrapping_add(b)),
                    _ => return Err(invalid(format!("scatter_add over {dtype}"))),
                };
                set_bytes(dtype, o, 0, sum).ok_or_else(|| invalid(format!("scatter_add over {dtype}")))?;
            }
        }
    }
    Ok(())
}
