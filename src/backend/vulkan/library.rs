//! Library steps as generated kernels: a step the device has no hand-written shader for yet
//! is written as kernels of the kernel IR and lowered like any other (`spirv`).
//! [`step_kernels`] is the one place that says how each step is written:
//!
//! - `matmul` (with its transposes and broadcast batch dims): one invocation per block of
//!   [`ROWS`] × [`COLS`] output elements, each dot product summed in order over `k` (a sum
//!   accumulator each: every loaded element of `a` and `b` feeds several products), then
//!   kernels of one invocation per element for the rows and columns past the last whole
//!   block, then the step's epilogue kernel as its own dispatch. Register blocking only; a
//!   device running library shaders takes the tiled GEMM shader for f32 instead
//!   (`shaders.rs`). Every float and integer dtype ([`product_term`]).
//! - `conv`: `library_nn.rs` (blocks of output channels per invocation, then the rest).
//! - `cat`: a copy kernel per operand into its slab of the result.
//! - `pad`: a kernel filling the result with the pad value (where any of it is padding),
//!   then a copy kernel storing the input elements that survive the crop at their places
//!   (both affine, so symbolic sizes are fine, except under interior padding).
//! - `rev`, `gather` and `scatter_add`: computed loads, whose element offset a register
//!   holds, so the strides it is made of must be constants: `gather` and `scatter_add` need
//!   operands of static shape (a gather's index may be symbolic), `rev` static dims from its
//!   first reversed axis on (the dims before it run as one outer loop of any extent).
//!   Out-of-range indices fail the run, as on the reference.
//! - A step's [`ChannelPost`] (bias, ReLU) as one more kernel over its result, in place; a
//!   post with an activation op is refused (plans for this backend recover no activations,
//!   so none has one).
//!
//! The kernel IR has no instruction that reads a size into a register, which is why the
//! computed offsets take constant strides. Every kernel of a step runs as its own dispatch,
//! in order, with a barrier between. The copies, the scatter's sums (in the reference's
//! order) and the post-ops agree with the reference bit for bit; a product (`matmul`,
//! `conv`) rounds each term before adding it, where the reference adds the exact term.

use crate::ir::{DType, Dim};
use crate::kernel::{
    Accumulator, Addend, BufferId, ChannelPost, Index, Instr, Kernel, LibraryCall, MatmulCall, Program, ReduceOp, Reg,
    Scalar, Stage, Step, Var,
};
use crate::ops::OpKind;

/// The kernels step `i` of `p` is written as, in the order they run; why not, where the
/// device has no kernel for it (the reason names no step: the caller adds it). Kernel steps
/// are themselves; `dim_values` steps, which the host writes, have none.
pub fn step_kernels(step: &Step, p: &Program, i: usize) -> Result<Vec<Kernel>, String> {
    let (mut kernels, post) = match step {
        Step::Kernel(k) => return Ok(vec![k.clone()]),
        Step::Matmul(m) if m.activation.is_none() => {
            let ks = matmul_kernels(m, p, &format!("matmul{i}"))?;
            return Ok(ks.into_iter().chain(m.epilogue.as_deref().cloned()).collect());
        }
        Step::Matmul(_) => return Err("a matmul with a fused activation".into()),
        Step::Conv(c) => return super::library_nn::conv_kernels(c, p, &format!("conv{i}")),
        Step::Library(l) => {
            let name = format!("{}{i}", l.op.name());
            let kernels = match l.op {
                OpKind::DimValues if l.post.is_none() => return Ok(Vec::new()),
                OpKind::Gather => vec![gather_kernel(l, p, name.clone())?],
                OpKind::Cat => cat_kernels(l, p, &name)?,
                OpKind::Pad => pad_kernels(l, p, &name)?,
                OpKind::Rev => vec![rev_kernel(l, p, name.clone())?],
                OpKind::ScatterAdd => scatter_add_kernels(l, p, &name)?,
                _ => return Err("the Vulkan backend has no kernel for it".into()),
            };
            (kernels, l.post.as_ref().map(|post| (post, l.out, name)))
        }
        Step::Interp(_) => return Err("the interpreter runs it, on the host".into()),
    };
    if let Some((post, out, name)) = post {
        kernels.push(post_kernel(post, out, p, format!("{name}_post"))?);
    }
    Ok(kernels)
}

/// The straight-line body of a kernel being written, and its register count.
#[derive(Default)]
pub(super) struct Body {
    pub instrs: Vec<Instr>,
    pub n_regs: u32,
}

impl Body {
    pub fn reg(&mut self) -> Reg {
        self.n_regs += 1;
        Reg::from_u32(self.n_regs - 1)
    }

    /// Pushes the instruction `make` builds for a fresh register; returns the register.
    pub fn def(&mut self, make: impl FnOnce(Reg) -> Instr) -> Reg {
        let dst = self.reg();
        self.instrs.push(make(dst));
        dst
    }

    pub fn int(&mut self, value: i64) -> Reg {
        self.def(|dst| Instr::Const { dst, value: Scalar::Int(value), dtype: DType::I64 })
    }

    pub fn f32(&mut self, value: f32) -> Reg {
        self.def(|dst| Instr::Const { dst, value: Scalar::Float(f64::from(value)), dtype: DType::F32 })
    }

    /// `0` of `dt` (+0 for floats).
    pub fn zero(&mut self, dtype: DType) -> Reg {
        let value = if dtype.is_float() { Scalar::Float(0.0) } else { Scalar::Int(0) };
        self.def(|dst| Instr::Const { dst, value, dtype })
    }

    /// Loop variable `var` as an i64.
    pub fn var(&mut self, var: Var) -> Reg {
        self.def(|dst| Instr::LoopVar { dst, var, dtype: DType::I64 })
    }

    pub fn bin(&mut self, op: OpKind, a: Reg, b: Reg, dtype: DType) -> Reg {
        self.def(|dst| Instr::Binary { dst, op, a, b, dtype })
    }

    /// `a op b` for a comparison (a bool).
    pub fn cmp(&mut self, op: OpKind, a: Reg, b: Reg) -> Reg {
        self.bin(op, a, b, DType::Bool)
    }

    pub fn select(&mut self, cond: Reg, a: Reg, b: Reg, dtype: DType) -> Reg {
        self.def(|dst| Instr::Select { dst, cond, a, b, dtype })
    }

    pub fn load(&mut self, buf: BufferId, index: Index) -> Reg {
        self.def(|dst| Instr::Load { dst, buf, index })
    }

    pub fn load_at(&mut self, buf: BufferId, index: Reg) -> Reg {
        self.def(|dst| Instr::LoadAt { dst, buf, index })
    }

    pub fn store(&mut self, buf: BufferId, index: Index, value: Reg) {
        self.instrs.push(Instr::Store { buf, index, value });
    }

    /// `Σ coords[d] · strides[d]` (i64 registers, constant strides).
    pub fn flat(&mut self, coords: &[Reg], strides: &[i64]) -> Reg {
        let mut at = self.int(0);
        for (&c, &s) in coords.iter().zip(strides) {
            let s = self.int(s);
            let term = self.bin(OpKind::Mul, c, s, DType::I64);
            at = self.bin(OpKind::Add, at, term, DType::I64);
        }
        at
    }

    /// The stage this body is, with its inner loops and accumulators (the body is taken).
    pub fn stage(&mut self, inner: Vec<Dim>, accumulators: Vec<Accumulator>) -> Stage {
        Stage { inner, accumulators, body: std::mem::take(&mut self.instrs) }
    }

    /// A kernel of `stages` over `outer`, with this body's register count.
    pub fn kernel(&self, name: String, outer: Vec<Dim>, stages: Vec<Stage>) -> Kernel {
        Kernel { name, outer, stages, n_regs: self.n_regs, covers: Vec::new(), activation: None }
    }
}

/// Row-major strides of `dims`.
pub(super) fn strides(dims: &[Dim]) -> Result<Vec<Dim>, String> {
    let mut out = vec![Dim::from(1u64); dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1].mul(&dims[i + 1]).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The index `offset + Σ strides[d] · Outer(d)`: every outer loop over its own dim.
pub(super) fn outer_index(offset: Dim, strides: &[Dim]) -> Index {
    Index { offset, terms: strides.iter().enumerate().map(|(d, s)| (Var::Outer(d as u32), s.clone())).collect() }
}

/// The static dims of buffer `b`, or why a computed load cannot address it.
fn static_dims(p: &Program, b: BufferId, what: &str) -> Result<Vec<u64>, String> {
    p.buffers[b]
        .shape
        .dims()
        .iter()
        .map(Dim::as_const)
        .collect::<Option<_>>()
        .ok_or_else(|| format!("a {what} of a tensor of symbolic shape ({b} is {})", p.buffers[b].shape))
}

/// Row-major strides of static `dims`, as i64.
fn const_strides(dims: &[u64]) -> Vec<i64> {
    let product = |d: &[u64]| d.iter().fold(1u64, |n, &k| n.saturating_mul(k)).min(i64::MAX as u64) as i64;
    (0..dims.len()).map(|d| product(&dims[d + 1..])).collect()
}

/// A matrix axis of a matmul operand or result as a loop variable addresses it: position
/// `scale · var + offset`.
#[derive(Clone)]
struct Axis {
    var: Var,
    scale: Dim,
    offset: Dim,
}

impl Axis {
    fn of(var: Var) -> Axis {
        Axis { var, scale: Dim::from(1u64), offset: Dim::from(0u64) }
    }
}

/// The index of matrix `[batch..., rows, cols]` with `dims` (transposed when `t`) at output
/// batch point `Outer(0..nb)` and matrix position (`row`, `col`): batch dims aligned to the
/// output's from the right, a dim of 1 against a larger one read with stride 0.
fn matrix_index(dims: &[Dim], out_batch: &[Dim], t: bool, row: &Axis, col: &Axis) -> Result<Index, String> {
    let rank = dims.len();
    let st = strides(dims)?;
    let nb = out_batch.len();
    let own_batch = rank - 2;
    let mut terms = Vec::new();
    for (i, d) in dims[..own_batch].iter().enumerate() {
        let o = nb - own_batch + i;
        if *d == out_batch[o] {
            terms.push((Var::Outer(o as u32), st[i].clone()));
        } else if d.as_const() != Some(1) {
            return Err(format!("batch dim {d} against {}", out_batch[o]));
        }
    }
    let (r, c) = if t { (rank - 1, rank - 2) } else { (rank - 2, rank - 1) };
    let e = |e: crate::ir::DimError| e.to_string();
    let offset = row.offset.mul(&st[r]).map_err(e)?.add(&col.offset.mul(&st[c]).map_err(e)?).map_err(e)?;
    terms.push((row.var, row.scale.mul(&st[r]).map_err(e)?));
    terms.push((col.var, col.scale.mul(&st[c]).map_err(e)?));
    Ok(Index { offset, terms })
}

/// The term `x · y` a dot product of `dt` operands adds: f32 and f64 products rounded to
/// `dt` (the reference adds the exact product: one rounding more per term); f16 and bf16
/// products in f32, which holds them exactly, fed to a sum of `dt` (each partial sum then
/// rounds once, as the reference's); integers wrapping, as the reference's products and sums
/// do modulo the width.
pub(super) fn product_term(body: &mut Body, x: Reg, y: Reg, dt: DType) -> Result<Reg, String> {
    match dt {
        DType::F16 | DType::BF16 => {
            let x = body.def(|dst| Instr::Convert { dst, x, dtype: DType::F32 });
            let y = body.def(|dst| Instr::Convert { dst, x: y, dtype: DType::F32 });
            Ok(body.bin(OpKind::Mul, x, y, DType::F32))
        }
        DType::Bool => Err("a product of bools".into()),
        dt => Ok(body.bin(OpKind::Mul, x, y, dt)),
    }
}

/// A dot product's sum as the reference has it: floats plus `+0` (its sum starts at `+0`,
/// so a sum of `-0` terms is `+0`).
pub(super) fn finish_sum(body: &mut Body, sum: Reg, dt: DType) -> Reg {
    if !dt.is_float() {
        return sum;
    }
    let zero = body.zero(dt);
    body.bin(OpKind::Add, sum, zero, dt)
}

/// Output rows and columns one invocation of a blocked matmul kernel computes (on lavapipe,
/// `ladder bench --backend vulkan --workload W0`: 1×1 1.3 GFLOP/s, 4×4 5.1, 8×8 10.0,
/// 16×16 16.5; 8×8 keeps 64 sums per invocation, what a GPU's registers hold).
pub const ROWS: u64 = 8;
pub const COLS: u64 = 8;

/// The kernels of matmul `m`: the blocked kernel over the whole blocks of [`ROWS`] ×
/// [`COLS`] results, then per-element kernels for the rows past the last whole block (every
/// column) and for the columns past it (the blocked rows). A kernel with no points is not
/// dispatched.
pub fn matmul_kernels(m: &MatmulCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let dtype = p.buffers[m.out].dtype;
    if p.buffers[m.a].dtype != dtype || p.buffers[m.b].dtype != dtype {
        return Err("a matmul of mixed dtypes".into());
    }
    let out = p.buffers[m.out].shape.dims().to_vec();
    let (ra, rb) = (p.buffers[m.a].shape.rank(), p.buffers[m.b].shape.rank());
    if out.len() < 2 || ra < 2 || rb < 2 {
        return Err("a matmul of vectors".into());
    }
    let nb = out.len() - 2;
    let e = |e: crate::ir::DimError| e.to_string();
    let (rows, cols) = (Dim::from(ROWS), Dim::from(COLS));
    let whole_rows = out[nb].floor_div(&rows).map_err(e)?;
    let whole_cols = out[nb + 1].floor_div(&cols).map_err(e)?;
    let (blocked_rows, blocked_cols) = (whole_rows.mul(&rows).map_err(e)?, whole_cols.mul(&cols).map_err(e)?);
    let (i, j) = (Var::Outer(nb as u32), Var::Outer(nb as u32 + 1));
    let zero = Dim::from(0u64);
    let blocked = |v: Var, scale: &Dim| Axis { var: v, scale: scale.clone(), offset: zero.clone() };
    let from = |v: Var, offset: &Dim| Axis { var: v, scale: Dim::from(1u64), offset: offset.clone() };
    let mut kernels = vec![matmul_block(
        m,
        p,
        name.to_string(),
        (&whole_rows, &whole_cols),
        [blocked(i, &rows), blocked(j, &cols)],
        (ROWS, COLS),
    )?];
    // The rows past the whole blocks, every column.
    let rest_rows = out[nb].rem(&rows).map_err(e)?;
    kernels.push(matmul_block(
        m,
        p,
        format!("{name}_rows"),
        (&rest_rows, &out[nb + 1]),
        [from(i, &blocked_rows), Axis::of(j)],
        (1, 1),
    )?);
    // The columns past the whole blocks, in the blocked rows.
    let rest_cols = out[nb + 1].rem(&cols).map_err(e)?;
    kernels.push(matmul_block(
        m,
        p,
        format!("{name}_cols"),
        (&blocked_rows, &rest_cols),
        [Axis::of(i), from(j, &blocked_cols)],
        (1, 1),
    )?);
    Ok(kernels)
}

/// A kernel of matmul `m` over the output batch dims and `extent` (rows, columns of its
/// outer loops), its invocation at (`Outer(nb)`, `Outer(nb + 1)`) computing the `block`
/// results at rows `at[0] + r` and columns `at[1] + c` (`r`, `c` below the block's sides).
fn matmul_block(
    m: &MatmulCall,
    p: &Program,
    name: String,
    extent: (&Dim, &Dim),
    at: [Axis; 2],
    block: (u64, u64),
) -> Result<Kernel, String> {
    let dtype = p.buffers[m.out].dtype;
    let out = p.buffers[m.out].shape.dims().to_vec();
    let nb = out.len() - 2;
    let (a_dims, b_dims) = (p.buffers[m.a].shape.dims(), p.buffers[m.b].shape.dims());
    let ra = a_dims.len();
    let k = if m.transpose_a { a_dims[ra - 2].clone() } else { a_dims[ra - 1].clone() };
    let e = |e: crate::ir::DimError| e.to_string();
    let shifted = |axis: &Axis, by: u64| -> Result<Axis, String> {
        let offset = axis.offset.add(&Dim::from(by)).map_err(e)?;
        Ok(Axis { offset, ..axis.clone() })
    };
    let kk = Axis::of(Var::Inner(0));
    let mut body = Body::default();
    let mut xs = Vec::with_capacity(block.0 as usize);
    for r in 0..block.0 {
        let index = matrix_index(a_dims, &out[..nb], m.transpose_a, &shifted(&at[0], r)?, &kk);
        xs.push(body.load(m.a, index.map_err(|why| format!("{}: {why}", m.a))?));
    }
    let mut ys = Vec::with_capacity(block.1 as usize);
    for c in 0..block.1 {
        let index = matrix_index(b_dims, &out[..nb], m.transpose_b, &kk, &shifted(&at[1], c)?);
        ys.push(body.load(m.b, index.map_err(|why| format!("{}: {why}", m.b))?));
    }
    let mut accumulators = Vec::with_capacity(xs.len() * ys.len());
    for &x in &xs {
        for &y in &ys {
            let product = product_term(&mut body, x, y, dtype)?;
            body.instrs.push(Instr::Accumulate { acc: accumulators.len() as u32, x: product, index: None });
            let result = body.reg();
            accumulators.push(Accumulator { op: ReduceOp::Sum, dtype, result });
        }
    }
    let dot = body.stage(vec![k], accumulators.clone());
    let out_identity: Vec<Dim> = out[..nb].to_vec();
    for (n, acc) in accumulators.iter().enumerate() {
        let (r, c) = (n as u64 / block.1, n as u64 % block.1);
        let sum = finish_sum(&mut body, acc.result, dtype);
        let index = matrix_index(&out, &out_identity, false, &shifted(&at[0], r)?, &shifted(&at[1], c)?)?;
        body.store(m.out, index, sum);
    }
    let write = body.stage(vec![], vec![]);
    let mut outer = out[..nb].to_vec();
    outer.extend([extent.0.clone(), extent.1.clone()]);
    Ok(body.kernel(name, outer, vec![dot, write]))
}

/// `cat` as one copy kernel per operand: each writes its operand into its slab of the result
/// along the axis (any dtype the device holds).
pub fn cat_kernels(l: &LibraryCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let out = p.buffers[l.out].shape.dims().to_vec();
    let axis = crate::ops::util::normalize_axis(l.attrs.int("axis"), out.len()).map_err(|e| e.to_string())?;
    let out_strides = strides(&out)?;
    let mut at = Dim::from(0u64);
    let mut kernels = Vec::with_capacity(l.args.len());
    for (n, &arg) in l.args.iter().enumerate() {
        if p.buffers[arg].dtype != p.buffers[l.out].dtype {
            return Err("a cat of mixed dtypes".into());
        }
        let dims = p.buffers[arg].shape.dims().to_vec();
        let offset = at.mul(&out_strides[axis]).map_err(|e| e.to_string())?;
        let mut body = Body::default();
        let v = body.load(arg, outer_index(Dim::from(0u64), &strides(&dims)?));
        body.store(l.out, outer_index(offset, &out_strides), v);
        at = at.add(&dims[axis]).map_err(|e| e.to_string())?;
        let copy = body.stage(vec![], vec![]);
        kernels.push(body.kernel(format!("{name}_{n}"), dims, vec![copy]));
    }
    Ok(kernels)
}

impl Body {
    /// Index register `i` (i64) into an axis of `size` elements, negative from the end: the
    /// position, and whether it lies inside the axis.
    fn axis_position(&mut self, i: Reg, size: u64) -> (Reg, Reg) {
        let (zero, size) = (self.int(0), self.int(size as i64));
        let negative = self.cmp(OpKind::Lt, i, zero);
        let wrapped = self.bin(OpKind::Add, i, size, DType::I64);
        let at = self.select(negative, wrapped, i, DType::I64);
        let lo = self.cmp(OpKind::Ge, at, zero);
        let hi = self.cmp(OpKind::Lt, at, size);
        (at, self.bin(OpKind::And, lo, hi, DType::Bool))
    }

    /// `a && b` (bools).
    fn and(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(OpKind::And, a, b, DType::Bool)
    }

    /// The value of index buffer `index` at element offset `at`, as an i64.
    fn index_value(&mut self, index: BufferId, at: Option<Reg>, whole: &[Dim]) -> Reg {
        let raw = match at {
            Some(at) => self.load_at(index, at),
            None => self.load(index, outer_index(Dim::from(0u64), whole)),
        };
        self.def(|dst| Instr::Convert { dst, x: raw, dtype: DType::I64 })
    }
}

/// The dtype of an index operand, which must be i32 or i64.
fn index_dtype(p: &Program, index: BufferId) -> Result<(), String> {
    match p.buffers[index].dtype {
        DType::I32 | DType::I64 => Ok(()),
        idt => Err(format!("{idt} indices")),
    }
}

/// `gather` (torch's: `out[p] = x[p with p[axis] = index[p]]`, negative indices from the end)
/// as a kernel over the index's positions, for an `x` of static shape (its strides are then
/// constants the kernel computes the element offset with): an index outside the axis, or a
/// position of a larger index outside `x`'s other dims, makes the offset -1, which the
/// computed load reports as a run-time error (the reference's error there).
pub fn gather_kernel(l: &LibraryCall, p: &Program, name: String) -> Result<Kernel, String> {
    let &[x, index] = &l.args[..] else { return Err("a gather without two operands".into()) };
    let dims = static_dims(p, x, "gather")?;
    let axis = crate::ops::util::normalize_axis(l.attrs.int("axis"), dims.len()).map_err(|e| e.to_string())?;
    index_dtype(p, index)?;
    let out = p.buffers[index].shape.dims().to_vec();
    let own = strides(&out)?;
    let mut body = Body::default();
    let i = body.index_value(index, None, &own);
    let (at, mut ok) = body.axis_position(i, dims[axis]);
    let mut coords = Vec::with_capacity(dims.len());
    for (d, &n) in dims.iter().enumerate() {
        if d == axis {
            coords.push(at);
            continue;
        }
        let v = body.var(Var::Outer(d as u32));
        // A position past x's dim (an index of symbolic shape may be larger) is an error.
        if out[d].as_const().is_none_or(|i| i > n) {
            let size = body.int(n as i64);
            let inside = body.cmp(OpKind::Lt, v, size);
            ok = body.and(ok, inside);
        }
        coords.push(v);
    }
    let flat = body.flat(&coords, &const_strides(&dims));
    let minus1 = body.int(-1);
    let at = body.select(ok, flat, minus1, DType::I64);
    let value = body.load_at(x, at);
    body.store(l.out, outer_index(Dim::from(0u64), &own), value);
    let stage = body.stage(vec![], vec![]);
    Ok(body.kernel(name, out, vec![stage]))
}

/// `scatter_add` (`out = x`, then `out[p with p[axis] = index[p]] += src[p]` for every
/// position `p` of the index in row-major order) for operands of static shape, as two
/// kernels. The first runs over the index's positions and fails the run (a computed load at
/// -1) where an index lies outside the axis, as the reference does. The second runs over the
/// result's positions: each sums, in the reference's order, its own `x` element and then
/// the `src` elements whose index names it (the positions that differ from it only along the
/// axis, in increasing order), feeding `-0` (integers: 0) for the others, which leaves every
/// sum as it was; so floats round exactly as the reference's additions do.
pub fn scatter_add_kernels(l: &LibraryCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let &[x, index, src] = &l.args[..] else { return Err("a scatter_add without three operands".into()) };
    let dims = static_dims(p, x, "scatter_add")?;
    let idims = static_dims(p, index, "scatter_add")?;
    static_dims(p, src, "scatter_add")?;
    let axis = crate::ops::util::normalize_axis(l.attrs.int("axis"), dims.len()).map_err(|e| e.to_string())?;
    index_dtype(p, index)?;
    let dt = p.buffers[x].dtype;
    if p.buffers[src].dtype != dt || p.buffers[l.out].dtype != dt || idims.len() != dims.len() {
        return Err("a scatter_add whose operands do not fit".into());
    }
    let out: Vec<Dim> = dims.iter().map(|&d| Dim::new(d)).collect();
    let whole = |d: &[u64]| strides(&d.iter().map(|&n| Dim::new(n)).collect::<Vec<_>>());
    let (x_strides, i_strides) = (whole(&dims)?, whole(&idims)?);
    let mut kernels = Vec::new();
    // The index check.
    let mut check = Body::default();
    let i = check.index_value(index, None, &i_strides);
    let (_, ok) = check.axis_position(i, dims[axis]);
    let (zero, minus1) = (check.int(0), check.int(-1));
    let at = check.select(ok, zero, minus1, DType::I64);
    check.load_at(index, at);
    let stage = check.stage(vec![], vec![]);
    kernels.push(check.kernel(format!("{name}_check"), idims.iter().map(|&n| Dim::new(n)).collect(), vec![stage]));
    // The sums.
    let mut body = Body::default();
    let own = body.load(x, outer_index(Dim::from(0u64), &x_strides));
    let first_stage = body.stage(vec![], vec![]);
    let value = if idims.iter().product::<u64>() == 0 {
        own
    } else {
        let j = body.var(Var::Inner(0));
        let (zero, one) = (body.int(0), body.int(1));
        let first = body.cmp(OpKind::Eq, j, zero);
        let along = body.bin(OpKind::Sub, j, one, DType::I64);
        let mut inside = body.cmp(OpKind::Ne, j, zero);
        let mut coords = Vec::with_capacity(dims.len());
        for d in 0..dims.len() {
            if d == axis {
                coords.push(along);
                continue;
            }
            let v = body.var(Var::Outer(d as u32));
            if idims[d] < dims[d] {
                let size = body.int(idims[d] as i64);
                let below = body.cmp(OpKind::Lt, v, size);
                inside = body.and(inside, below);
            }
            coords.push(v);
        }
        let flat = body.flat(&coords, &const_strides(&idims));
        let at = body.select(inside, flat, zero, DType::I64);
        let i = body.index_value(index, Some(at), &[]);
        let (target, ok) = body.axis_position(i, dims[axis]);
        let here = body.var(Var::Outer(axis as u32));
        let same = body.cmp(OpKind::Eq, target, here);
        let hit = body.and(ok, same);
        let hit = body.and(hit, inside);
        let s = body.load_at(src, at);
        let neutral = match dt {
            DType::F32 => body.f32(-0.0),
            _ => body.def(|dst| Instr::Const { dst, value: Scalar::Int(0), dtype: dt }),
        };
        let term = body.select(hit, s, neutral, dt);
        let fed = body.select(first, own, term, dt);
        body.instrs.push(Instr::Accumulate { acc: 0, x: fed, index: None });
        body.reg()
    };
    let mut stages = vec![first_stage];
    if value != own {
        let acc = Accumulator { op: ReduceOp::Sum, dtype: dt, result: value };
        stages.push(body.stage(vec![Dim::new(idims[axis] + 1)], vec![acc]));
    }
    body.store(l.out, outer_index(Dim::from(0u64), &x_strides), value);
    stages.push(body.stage(vec![], vec![]));
    kernels.push(body.kernel(name.to_string(), out, stages));
    Ok(kernels)
}

/// `rev` as a kernel over the result: a computed load from the mirrored position. The dims
/// before the first reversed axis run as one outer loop (their extent may be symbolic); the
/// others must be static.
pub fn rev_kernel(l: &LibraryCall, p: &Program, name: String) -> Result<Kernel, String> {
    let &[x] = &l.args[..] else { return Err("a rev without one operand".into()) };
    let dims = p.buffers[x].shape.dims().to_vec();
    let axes = crate::ops::util::normalize_axes(l.attrs.ints("axes"), dims.len(), false).map_err(|e| e.to_string())?;
    let first = axes.first().copied().unwrap_or(dims.len());
    let lead = dims[..first].iter().try_fold(Dim::from(1u64), |n, d| n.mul(d)).map_err(|e| e.to_string())?;
    let tail: Vec<u64> = dims[first..]
        .iter()
        .map(Dim::as_const)
        .collect::<Option<_>>()
        .ok_or_else(|| format!("a rev along axes of symbolic size ({x} is {})", p.buffers[x].shape))?;
    let span = tail.iter().product::<u64>();
    let mut outer = vec![lead];
    outer.extend(tail.iter().map(|&n| Dim::new(n)));
    let mut body = Body::default();
    let mut coords = vec![body.var(Var::Outer(0))];
    for (k, &n) in tail.iter().enumerate() {
        let v = body.var(Var::Outer(k as u32 + 1));
        coords.push(if axes.contains(&(first + k)) {
            let last = body.int(n as i64 - 1);
            body.bin(OpKind::Sub, last, v, DType::I64)
        } else {
            v
        });
    }
    let mut all_strides = vec![span as i64];
    all_strides.extend(const_strides(&tail));
    let at = body.flat(&coords, &all_strides);
    let value = body.load_at(x, at);
    body.store(l.out, outer_index(Dim::from(0u64), &strides(&outer)?), value);
    let stage = body.stage(vec![], vec![]);
    Ok(body.kernel(name, outer, vec![stage]))
}

/// `pad` (`value` at the edges and between elements, negative `low`/`high` cropping) as a
/// fill of the whole result, where any of it is padding, then a copy of the input elements
/// that land inside it, both affine: along each axis, input element `i` goes to
/// `low + i·(interior + 1)`, for the `i` where that is inside the result.
pub fn pad_kernels(l: &LibraryCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let &[x] = &l.args[..] else { return Err("a pad without one operand".into()) };
    let dims = p.buffers[x].shape.dims().to_vec();
    let out = p.buffers[l.out].shape.dims().to_vec();
    let rank = dims.len();
    let (low, high) = (l.attrs.ints("low"), l.attrs.ints("high"));
    let interior: Vec<i64> =
        if l.attrs.ints("interior").is_empty() { vec![0; rank] } else { l.attrs.ints("interior").to_vec() };
    if low.len() != rank || high.len() != rank || interior.len() != rank || out.len() != rank {
        return Err("a pad whose configuration does not fit its operand".into());
    }
    let dt = p.buffers[l.out].dtype;
    if p.buffers[x].dtype != dt {
        return Err("a pad that changes the dtype".into());
    }
    let value = l.attrs.float("value");
    let fill_value = match dt {
        DType::Bool => Scalar::Bool(value != 0.0),
        dt if dt.is_float() => Scalar::Float(value),
        dt => Scalar::Int(crate::interp::float_to_int_as(dt, value)),
    };
    let bad = |e: crate::ir::DimError| e.to_string();
    let (x_strides, out_strides) = (strides(&dims)?, strides(&out)?);
    let mut kernels = Vec::new();
    if (0..rank).any(|d| low[d] > 0 || high[d] > 0 || interior[d] > 0) {
        let mut body = Body::default();
        let v = body.def(|dst| Instr::Const { dst, value: fill_value, dtype: dt });
        body.store(l.out, outer_index(Dim::from(0u64), &out_strides), v);
        let stage = body.stage(vec![], vec![]);
        kernels.push(body.kernel(format!("{name}_fill"), out.clone(), vec![stage]));
    }
    // Per axis: the first input element kept, how many are, and the result's stride per one.
    let (mut load_at, mut store_at) = (Dim::from(0u64), Dim::from(0u64));
    let (mut extents, mut load_terms, mut store_terms) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..rank {
        let step = interior[d] + 1;
        let (start, extent) = match (dims[d].as_const(), out[d].as_const()) {
            (Some(n), Some(size)) => {
                let cut = low[d].saturating_neg().max(0);
                let start = cut.div_euclid(step) + i64::from(cut % step != 0);
                let room = (size as i64).saturating_sub(low[d]);
                let end =
                    if room > 0 { (n as i64).min(room.div_euclid(step) + i64::from(room % step != 0)) } else { 0 };
                (start, Dim::new((end - start).max(0) as u64))
            }
            _ if step == 1 => {
                let start = low[d].saturating_neg().max(0);
                let crop = start.saturating_add(high[d].saturating_neg().max(0));
                let kept = match crop {
                    0 => dims[d].clone(),
                    crop => dims[d].sub(&Dim::new(crop as u64)).and_then(|k| k.max(&Dim::new(0))).map_err(bad)?,
                };
                (start, kept)
            }
            _ => return Err("an interior pad of a symbolic dim".into()),
        };
        let var = Var::Outer(d as u32);
        load_at = load_at.add(&x_strides[d].mul(&Dim::new(start as u64)).map_err(bad)?).map_err(bad)?;
        let first = (low[d] + start * step) as u64;
        store_at = store_at.add(&out_strides[d].mul(&Dim::new(first)).map_err(bad)?).map_err(bad)?;
        load_terms.push((var, x_strides[d].clone()));
        store_terms.push((var, out_strides[d].mul(&Dim::new(step as u64)).map_err(bad)?));
        extents.push(extent);
    }
    let mut body = Body::default();
    let v = body.load(x, Index { offset: load_at, terms: load_terms });
    body.store(l.out, Index { offset: store_at, terms: store_terms }, v);
    let stage = body.stage(vec![], vec![]);
    kernels.push(body.kernel(format!("{name}_copy"), extents, vec![stage]));
    Ok(kernels)
}

/// A step's [`ChannelPost`] as a kernel over its f32 result `out`, in place: `v + addend`
/// (`bias[c]` for output channel `c`, dim 1), then `max(v, +0)` where `relu`, each the prim
/// it stands for.
pub fn post_kernel(post: &ChannelPost, out: BufferId, p: &Program, name: String) -> Result<Kernel, String> {
    if p.buffers[out].dtype != DType::F32 {
        return Err("a per-channel post-op on a result that is not f32".into());
    }
    let dims = p.buffers[out].shape.dims().to_vec();
    let whole = outer_index(Dim::from(0u64), &strides(&dims)?);
    let mut body = Body::default();
    let mut v = body.load(out, whole.clone());
    v = post_ops(&mut body, post, p, channel_index(dims.len(), &[Dim::from(1u64)]), v)?;
    body.store(out, whole, v);
    let stage = body.stage(vec![], vec![]);
    Ok(body.kernel(name, dims, vec![stage]))
}

/// `v` through a [`ChannelPost`] (one prim each: `add` of the addend, `max` against +0),
/// with `channel` the index of `v`'s output channel in a per-channel bias.
pub(super) fn post_ops(
    body: &mut Body,
    post: &ChannelPost,
    p: &Program,
    channel: Index,
    v: Reg,
) -> Result<Reg, String> {
    if let Some((op, _)) = &post.activation {
        return Err(format!("a fused {op} activation"));
    }
    let mut v = v;
    match &post.addend {
        None => {}
        Some(Addend::Scalar(s)) => {
            let c = body.f32(*s as f32);
            v = body.bin(OpKind::Add, v, c, DType::F32);
        }
        Some(Addend::Channel(b)) => {
            if p.buffers[*b].dtype != DType::F32 {
                return Err("a per-channel addend that is not f32".into());
            }
            let a = body.load(*b, channel);
            v = body.bin(OpKind::Add, v, a, DType::F32);
        }
    }
    if post.relu {
        let zero = body.f32(0.0);
        v = body.bin(OpKind::Max, v, zero, DType::F32);
    }
    Ok(v)
}

/// The index of output channel `c` in a bias of one value per channel, for a result of
/// `rank` dims whose channel (dim 1) is `Σ strides[k] · Outer(1 + k)`; channel 0 below
/// rank 2, as [`crate::kernel::eval`]'s post-op has it.
pub(super) fn channel_index(rank: usize, strides: &[Dim]) -> Index {
    let terms = if rank < 2 {
        Vec::new()
    } else {
        strides.iter().enumerate().map(|(k, s)| (Var::Outer(1 + k as u32), s.clone())).collect()
    };
    Index { offset: Dim::from(0u64), terms }
}
