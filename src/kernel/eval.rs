//! The reference executor of kernel programs: the kernel IR's definition, in code.
//!
//! [`run_program`] runs a whole [`Program`] on host tensors; [`run_kernel`] runs one
//! [`Kernel`] (after [`PreparedKernel::new`] has checked it and turned its size expressions
//! into a table) over any [`Memory`], which is how the runtime runs kernels over its arena.
//!
//! Registers hold widened scalars ([`Val`]: floats as f64, integers as i64 with a u64 as its
//! bit pattern, bools), exactly like the interpreter's storage, and every instruction rounds its result to its dtype
//! (`round_float` / `wrap_int`), so each instruction computes what the prim of the same name
//! computes in the interpreter's f32 (op-dtype) mode, bit for bit. Buffers are typed (an f32
//! buffer holds f32s); a value loaded from a buffer of its dtype widens exactly.
//!
//! Accumulators follow the reduction prims: sum and prod fold from the first element in
//! row-major order of the stage's inner loops, rounding every step to the accumulator dtype
//! (an empty sum is +0, an empty product 1); max and min fold with the NaN-propagating
//! elementwise `max`/`min` (empty: -inf / +inf for floats, the dtype's MIN / MAX for integers,
//! false / true for bool); argmax keeps the first maximum, NaN counting as the maximum, and an
//! empty argmax is an error. Integer sums and products wrap. A `sumexp` accumulator keeps the
//! values fed (in scratch memory reused across runs) and, at the end of the stage, computes
//! their maximum `m` like `max`, the shift `c` (`m`, or for `sumexp_finite` 0 where `|m|` is
//! inf, as `where(eq(abs(m), inf), 0, m)`), and folds `exp(x - c)` like `sum`, each `sub`
//! and `exp` rounded to the dtype: the two stages it fuses, bit for bit (compiled code
//! computes it online instead; see the kernel IR's docs).
//!
//! Library calls (`matmul`, `conv`, recovered ops, data-movement prims) run the interpreter's
//! own op implementation on the operand buffers, and graph breaks run the interpreter on their
//! graph, so a program agrees with the interpreter on the prims graph it was scheduled from,
//! bit for bit.

use std::sync::Arc;

use super::{Accumulator, BufferId, BufferKind, Instr, Kernel, Program, ReduceOp, Reg, Scalar, Step, Var};
use crate::interp::{
    self, float_to_int_as, int_cmp, int_limits, int_to_f64, round_float, wrap_int, EvalError, InterpError,
};
use crate::ir::{DType, Dim, DimError, Graph};
use crate::ops::elementwise::{binary_float, binary_int, unary_float, unary_int};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData, TensorView};

pub use super::elems::{data_to_bytes, elem_size, get_bytes, get_elem, set_bytes, set_elem, tensor_from_bytes};

/// A register's value, widened like the interpreter's storage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    F(f64),
    I(i64),
    B(bool),
}

impl Val {
    fn as_f64(self) -> f64 {
        match self {
            Val::F(x) => x,
            Val::I(x) => x as f64,
            Val::B(b) => b as u8 as f64,
        }
    }

    fn as_i64(self) -> i64 {
        match self {
            Val::F(x) => x as i64,
            Val::I(x) => x,
            Val::B(b) => b as i64,
        }
    }

    fn truthy(self) -> bool {
        match self {
            Val::F(x) => x != 0.0,
            Val::I(x) => x != 0,
            Val::B(b) => b,
        }
    }

    /// This value, held as `from`, converted to `dtype` the way `convert_element_type`
    /// converts (only a u64 source differs from [`Val::convert`]: it converts as unsigned).
    pub fn convert_from(self, from: DType, dtype: DType) -> Val {
        match self {
            Val::I(x) if from == DType::U64 && dtype.is_float() => Val::F(round_float(dtype, int_to_f64(from, x))),
            v => v.convert(dtype),
        }
    }

    /// This value converted to `dtype` the way `convert_element_type` converts.
    pub fn convert(self, dtype: DType) -> Val {
        if dtype.is_float() {
            Val::F(round_float(dtype, self.as_f64()))
        } else if dtype.is_int() {
            match self {
                Val::F(x) => Val::I(float_to_int_as(dtype, x)),
                v => Val::I(wrap_int(dtype, v.as_i64())),
            }
        } else {
            Val::B(self.truthy())
        }
    }
}

/// Why a kernel or a step failed at run time.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("kernel {kernel}: {error}")]
    Eval { kernel: String, error: EvalError },
    #[error("kernel {kernel}: {buffer} is accessed at element {index}, outside its {len} elements")]
    OutOfBounds { kernel: String, buffer: BufferId, index: i64, len: usize },
    #[error("kernel {kernel}: argmax over an empty axis has no result")]
    EmptyArgmax { kernel: String },
    #[error("a size expression cannot be evaluated: {0}")]
    Dim(#[from] DimError),
    #[error("kernel {kernel}: the size `{dim}` cannot be evaluated with these inputs ({error}); an input may be smaller than the graph assumes")]
    Size { kernel: String, dim: String, error: DimError },
    #[error("size arithmetic overflowed")]
    Overflow,
    #[error("{what}: {error}")]
    Library { what: &'static str, error: EvalError },
    #[error("kernel {kernel} (native): {message}")]
    Native { kernel: String, message: String },
    #[error("graph break: {0}")]
    Interp(#[from] InterpError),
    #[error("{0}")]
    Invalid(String),
    /// The backend found at run time a value it has no implementation for yet (a Vulkan
    /// `pow` exponent): not a wrong result, a limit of that backend.
    #[error("kernel {kernel}: {what} is not on the {backend} device yet")]
    Unsupported { backend: &'static str, kernel: String, what: String },
}

/// Where a kernel's loads and stores go. Indices are element offsets into a buffer; values are
/// already in the buffer's dtype when stored.
pub trait Memory {
    fn load(&self, buf: BufferId, index: i64) -> Result<Val, ExecError>;
    fn store(&mut self, buf: BufferId, index: i64, value: Val) -> Result<(), ExecError>;
}

// ---------------------------------------------------------------------------------------------
// Prepared kernels
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum VarRef {
    Outer(usize),
    Inner(usize),
}

/// An affine index with its sizes replaced by slots of the dim table.
#[derive(Clone, Debug, PartialEq)]
struct PIndex {
    offset: usize,
    terms: Vec<(VarRef, usize)>,
}

#[derive(Clone, Debug, PartialEq)]
enum PInstr {
    Load { dst: usize, buf: BufferId, index: PIndex },
    LoadAt { dst: usize, buf: BufferId, index: usize },
    Const { dst: usize, value: Val },
    LoopVar { dst: usize, var: VarRef, dtype: DType },
    Unary { dst: usize, op: OpKind, x: usize, xdt: DType, dtype: DType },
    Binary { dst: usize, op: OpKind, a: usize, b: usize, cdt: DType, dtype: DType },
    Select { dst: usize, cond: usize, a: usize, b: usize, dtype: DType },
    Convert { dst: usize, x: usize, xdt: DType, dtype: DType },
    Accumulate { acc: usize, x: usize, index: Option<usize> },
    Store { buf: BufferId, index: PIndex, value: usize },
}

#[derive(Clone, Debug, PartialEq)]
struct PStage {
    inner: Vec<usize>,
    accs: Vec<Accumulator>,
    body: Vec<PInstr>,
}

/// A kernel checked against the program's buffers and ready to run: every size expression it
/// uses is a slot of [`PreparedKernel::dims`], evaluated once per run.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedKernel {
    pub name: String,
    /// Every distinct size expression of the kernel (constants included), by slot.
    pub dims: Vec<Dim>,
    outer: Vec<usize>,
    stages: Vec<PStage>,
    n_regs: usize,
    /// The buffers loaded and stored, for bounds checks.
    loads: Vec<(BufferId, PIndexRange)>,
}

/// The loop extents an affine access spans (for bounds checks): the index plus, per term, the
/// slot of the loop extent its variable runs over.
#[derive(Clone, Debug, PartialEq)]
struct PIndexRange {
    index: PIndex,
    extents: Vec<usize>,
    /// Whether the enclosing loops can all be non-empty only together with these (the access
    /// happens only when every outer and inner extent of its stage is non-zero).
    stage_extents: Vec<usize>,
}

struct Preparer<'a> {
    kernel: &'a Kernel,
    buffers: &'a cranelift_entity::PrimaryMap<BufferId, super::Buffer>,
    dims: Vec<Dim>,
    reg_dtype: Vec<Option<DType>>,
    /// Registers visible to later stages.
    global: Vec<bool>,
}

impl Preparer<'_> {
    fn slot(&mut self, d: &Dim) -> usize {
        if let Some(i) = self.dims.iter().position(|x| x == d) {
            return i;
        }
        self.dims.push(d.clone());
        self.dims.len() - 1
    }

    fn err(&self, msg: impl Into<String>) -> String {
        format!("kernel {}: {}", self.kernel.name, msg.into())
    }

    fn var(&self, v: Var, n_inner: usize) -> Result<VarRef, String> {
        match v {
            Var::Outer(k) if (k as usize) < self.kernel.outer.len() => Ok(VarRef::Outer(k as usize)),
            Var::Inner(k) if (k as usize) < n_inner => Ok(VarRef::Inner(k as usize)),
            _ => Err(self.err(format!("loop variable {v} does not exist here"))),
        }
    }

    fn index(&mut self, index: &super::Index, n_inner: usize) -> Result<PIndex, String> {
        let offset = self.slot(&index.offset);
        let mut terms = Vec::with_capacity(index.terms.len());
        for (v, stride) in &index.terms {
            let var = self.var(*v, n_inner)?;
            terms.push((var, self.slot(stride)));
        }
        Ok(PIndex { offset, terms })
    }

    fn buffer(&self, buf: BufferId) -> Result<DType, String> {
        self.buffers.get(buf).map(|b| b.dtype).ok_or_else(|| self.err(format!("{buf} is not a buffer of the program")))
    }

    fn use_reg(&self, r: Reg, local: &[bool]) -> Result<(usize, DType), String> {
        let i = r.index();
        match self.reg_dtype.get(i).copied().flatten() {
            Some(dt) if local[i] || self.global[i] => Ok((i, dt)),
            _ => Err(self.err(format!("{r} is used where it is not defined"))),
        }
    }

    fn def_reg(&mut self, r: Reg, dtype: DType, local: &mut [bool]) -> Result<usize, String> {
        let i = r.index();
        if i >= self.reg_dtype.len() {
            return Err(self.err(format!("{r} is not below n_regs = {}", self.kernel.n_regs)));
        }
        if self.reg_dtype[i].is_some() {
            return Err(self.err(format!("{r} is defined twice")));
        }
        self.reg_dtype[i] = Some(dtype);
        local[i] = true;
        Ok(i)
    }
}

use cranelift_entity::EntityRef;

impl PreparedKernel {
    /// Checks `kernel` against `program`'s buffers (registers defined once and before use,
    /// with the visibility rules of the kernel IR; operand dtypes; loop variables in range;
    /// accumulators fed with their dtype) and builds its runnable form.
    pub fn new(kernel: &Kernel, program: &Program) -> Result<PreparedKernel, String> {
        let n_regs = kernel.n_regs as usize;
        let mut p = Preparer {
            kernel,
            buffers: &program.buffers,
            dims: Vec::new(),
            reg_dtype: vec![None; n_regs],
            global: vec![false; n_regs],
        };
        let outer: Vec<usize> = kernel.outer.iter().map(|d| p.slot(d)).collect();
        let mut stages = Vec::with_capacity(kernel.stages.len());
        let mut loads = Vec::new();
        for stage in &kernel.stages {
            let n_inner = stage.inner.len();
            let inner: Vec<usize> = stage.inner.iter().map(|d| p.slot(d)).collect();
            let mut local = vec![false; n_regs];
            let mut body = Vec::with_capacity(stage.body.len());
            let extent_of = |v: VarRef| match v {
                VarRef::Outer(k) => outer[k],
                VarRef::Inner(k) => inner[k],
            };
            let stage_extents: Vec<usize> = outer.iter().chain(&inner).copied().collect();
            for instr in &stage.body {
                let pi = match instr {
                    Instr::Load { dst, buf, index } => {
                        let dt = p.buffer(*buf)?;
                        let index = p.index(index, n_inner)?;
                        let extents = index.terms.iter().map(|(v, _)| extent_of(*v)).collect();
                        loads.push((
                            *buf,
                            PIndexRange { index: index.clone(), extents, stage_extents: stage_extents.clone() },
                        ));
                        PInstr::Load { dst: p.def_reg(*dst, dt, &mut local)?, buf: *buf, index }
                    }
                    Instr::LoadAt { dst, buf, index } => {
                        let dt = p.buffer(*buf)?;
                        let (ix, idt) = p.use_reg(*index, &local)?;
                        if idt != DType::I64 {
                            return Err(p.err(format!("load index {index} is {idt}, not i64")));
                        }
                        PInstr::LoadAt { dst: p.def_reg(*dst, dt, &mut local)?, buf: *buf, index: ix }
                    }
                    Instr::Const { dst, value, dtype } => {
                        let v = match value {
                            Scalar::Float(x) => Val::F(*x),
                            Scalar::Int(x) => Val::I(*x),
                            Scalar::Bool(x) => Val::B(*x),
                        };
                        PInstr::Const { dst: p.def_reg(*dst, *dtype, &mut local)?, value: v.convert(*dtype) }
                    }
                    Instr::LoopVar { dst, var, dtype } => {
                        let var = p.var(*var, n_inner)?;
                        PInstr::LoopVar { dst: p.def_reg(*dst, *dtype, &mut local)?, var, dtype: *dtype }
                    }
                    Instr::Unary { dst, op, x, dtype } => {
                        if !op.is_elementwise() || op.spec().arity != crate::ops::Arity::Exactly(1) {
                            return Err(p.err(format!("{op} is not a unary elementwise prim")));
                        }
                        let (x, xdt) = p.use_reg(*x, &local)?;
                        PInstr::Unary { dst: p.def_reg(*dst, *dtype, &mut local)?, op: *op, x, xdt, dtype: *dtype }
                    }
                    Instr::Binary { dst, op, a, b, dtype } => {
                        if !op.is_elementwise()
                            || op.spec().arity != crate::ops::Arity::Exactly(2)
                            || matches!(op, OpKind::Where | OpKind::ConvertElementType)
                        {
                            return Err(p.err(format!("{op} is not a binary elementwise prim")));
                        }
                        let (a, adt) = p.use_reg(*a, &local)?;
                        let (b, bdt) = p.use_reg(*b, &local)?;
                        if adt != bdt {
                            return Err(p.err(format!("{op} operands are {adt} and {bdt}")));
                        }
                        PInstr::Binary {
                            dst: p.def_reg(*dst, *dtype, &mut local)?,
                            op: *op,
                            a,
                            b,
                            cdt: adt,
                            dtype: *dtype,
                        }
                    }
                    Instr::Select { dst, cond, a, b, dtype } => {
                        let (c, cdt) = p.use_reg(*cond, &local)?;
                        if cdt != DType::Bool {
                            return Err(p.err(format!("select condition {cond} is {cdt}, not bool")));
                        }
                        let (a, _) = p.use_reg(*a, &local)?;
                        let (b, _) = p.use_reg(*b, &local)?;
                        PInstr::Select { dst: p.def_reg(*dst, *dtype, &mut local)?, cond: c, a, b, dtype: *dtype }
                    }
                    Instr::Convert { dst, x, dtype } => {
                        let (x, xdt) = p.use_reg(*x, &local)?;
                        PInstr::Convert { dst: p.def_reg(*dst, *dtype, &mut local)?, x, xdt, dtype: *dtype }
                    }
                    Instr::Accumulate { acc, x, index } => {
                        let a = stage
                            .accumulators
                            .get(*acc as usize)
                            .ok_or_else(|| p.err(format!("acc{acc} is not an accumulator of its stage")))?;
                        let (x, xdt) = p.use_reg(*x, &local)?;
                        if !a.takes(xdt) {
                            return Err(p.err(format!("acc{acc} is {} but is fed {xdt}", a.dtype)));
                        }
                        if a.op.is_sum_exp() && !xdt.is_float() {
                            return Err(p.err(format!("acc{acc} sums exponentials of {xdt}")));
                        }
                        let index = match (a.op, index) {
                            (ReduceOp::Argmax, Some(i)) => {
                                let (i, idt) = p.use_reg(*i, &local)?;
                                if idt != DType::I64 {
                                    return Err(p.err("an argmax position must be i64"));
                                }
                                Some(i)
                            }
                            (ReduceOp::Argmax, None) => return Err(p.err("argmax needs a position")),
                            (_, Some(_)) => return Err(p.err("only argmax takes a position")),
                            (_, None) => None,
                        };
                        PInstr::Accumulate { acc: *acc as usize, x, index }
                    }
                    Instr::Store { buf, index, value } => {
                        let dt = p.buffer(*buf)?;
                        let (v, vdt) = p.use_reg(*value, &local)?;
                        if vdt != dt {
                            return Err(p.err(format!("{value} is {vdt} but {buf} holds {dt}")));
                        }
                        if matches!(p.buffers[*buf].kind, BufferKind::Input(_) | BufferKind::Const(_)) {
                            return Err(p.err(format!("{buf} is read-only")));
                        }
                        let index = p.index(index, n_inner)?;
                        let extents = index.terms.iter().map(|(v, _)| extent_of(*v)).collect();
                        loads.push((
                            *buf,
                            PIndexRange { index: index.clone(), extents, stage_extents: stage_extents.clone() },
                        ));
                        PInstr::Store { buf: *buf, index, value: v }
                    }
                };
                body.push(pi);
            }
            // Accumulator results become visible; so does everything a loop-free stage defines.
            for a in &stage.accumulators {
                let dt = if a.op == ReduceOp::Argmax { DType::I64 } else { a.dtype };
                if a.op == ReduceOp::Argmax && a.dtype.is_bool() {
                    return Err(p.err("argmax over bool"));
                }
                if matches!(a.op, ReduceOp::Sum | ReduceOp::Prod) && a.dtype.is_bool() {
                    return Err(p.err("sum or product over bool"));
                }
                let i = p.def_reg(a.result, dt, &mut local)?;
                p.global[i] = true;
            }
            if n_inner == 0 {
                for (i, l) in local.iter().enumerate() {
                    if *l {
                        p.global[i] = true;
                    }
                }
            }
            stages.push(PStage { inner, accs: stage.accumulators.clone(), body });
        }
        Ok(PreparedKernel { name: kernel.name.clone(), dims: p.dims, outer, stages, n_regs, loads })
    }

    /// Evaluates the dim table with the run's symbol values.
    pub fn eval_dims(&self, lookup: &dyn Fn(&str) -> Option<u64>, out: &mut Vec<i64>) -> Result<(), ExecError> {
        out.clear();
        for d in &self.dims {
            let v = d.eval(lookup).map_err(|error| ExecError::Size {
                kernel: self.name.clone(),
                dim: d.to_string(),
                error,
            })?;
            out.push(i64::try_from(v).map_err(|_| ExecError::Overflow)?);
        }
        Ok(())
    }

    /// Checks, before a run, what a compiled kernel cannot check itself: that every affine
    /// load and store stays inside its buffer (given the evaluated dim table and each buffer's
    /// element count), and that no argmax runs over an empty axis. Run before a compiled
    /// kernel, this makes its memory accesses safe; the reference executor checks every access
    /// anyway.
    pub fn check(&self, dims: &[i64], len_of: &dyn Fn(BufferId) -> usize) -> Result<(), ExecError> {
        if self.outer.iter().all(|&s| dims[s] > 0) {
            for stage in &self.stages {
                if stage.accs.iter().any(|a| a.op == ReduceOp::Argmax) && stage.inner.iter().any(|&s| dims[s] <= 0) {
                    return Err(ExecError::EmptyArgmax { kernel: self.name.clone() });
                }
            }
        }
        for (buf, r) in &self.loads {
            if r.stage_extents.iter().any(|&s| dims[s] == 0) {
                continue;
            }
            let mut hi = dims[r.index.offset];
            for ((_, stride), &ext) in r.index.terms.iter().zip(&r.extents) {
                let step = dims[*stride].checked_mul(dims[ext] - 1).ok_or(ExecError::Overflow)?;
                hi = hi.checked_add(step).ok_or(ExecError::Overflow)?;
            }
            let len = len_of(*buf);
            if hi < 0 || hi as u64 >= len as u64 {
                return Err(ExecError::OutOfBounds { kernel: self.name.clone(), buffer: *buf, index: hi, len });
            }
        }
        Ok(())
    }

    /// The number of points of the outermost outer loop (1 without outer loops), which a
    /// runtime splits across threads.
    pub fn outer_count(&self, dims: &[i64]) -> i64 {
        self.outer.first().map_or(1, |&s| dims[s])
    }

    /// Instructions one run executes, roughly: per point of the outer loops, each stage's
    /// body once per point of its inner loops (saturating). A runtime splits a kernel across
    /// threads only when this pays for the hand-off.
    pub fn work(&self, dims: &[i64]) -> u64 {
        let extent = |s: &usize| dims[*s].max(0) as u64;
        let outer = self.outer.iter().map(extent).fold(1u64, u64::saturating_mul);
        let per_point = self
            .stages
            .iter()
            .map(|st| st.inner.iter().map(extent).fold(st.body.len().max(1) as u64, u64::saturating_mul))
            .fold(0u64, u64::saturating_add);
        outer.saturating_mul(per_point)
    }
}

// ---------------------------------------------------------------------------------------------
// Running a kernel
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct AccState {
    count: u64,
    value: Val,
    best: i64,
}

/// Reusable working memory of [`run_kernel`]: after the first run of a kernel of a given size,
/// running it again allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    regs: Vec<Val>,
    outer: Vec<i64>,
    inner: Vec<i64>,
    accs: Vec<AccState>,
    /// The values fed to each `sumexp` accumulator of the current stage (by position).
    feeds: Vec<Vec<f64>>,
}

fn eval_index(ix: &PIndex, dims: &[i64], outer: &[i64], inner: &[i64]) -> Result<i64, ExecError> {
    let mut at = dims[ix.offset];
    for (v, s) in &ix.terms {
        let x = match v {
            VarRef::Outer(k) => outer[*k],
            VarRef::Inner(k) => inner[*k],
        };
        at = dims[*s].checked_mul(x).and_then(|t| at.checked_add(t)).ok_or(ExecError::Overflow)?;
    }
    Ok(at)
}

fn unary(op: OpKind, x: Val, xdt: DType, dtype: DType) -> Val {
    match op {
        OpKind::LogicalNot => Val::B(!x.truthy()),
        OpKind::IsNan => Val::B(matches!(x, Val::F(v) if v.is_nan())),
        _ if xdt.is_int() => {
            let v = x.as_i64();
            Val::I(wrap_int(dtype, unary_int(op, xdt, v).unwrap_or(v)))
        }
        _ => Val::F(round_float(dtype, unary_float(op, x.as_f64()))),
    }
}

fn binary(op: OpKind, a: Val, b: Val, cdt: DType, dtype: DType) -> Result<Val, EvalError> {
    if matches!(op, OpKind::And | OpKind::Or) && cdt.is_bool() {
        let (x, y) = (a.truthy(), b.truthy());
        return Ok(Val::B(if op == OpKind::And { x && y } else { x || y }));
    }
    if cdt.is_float() {
        let r = binary_float(op, a.as_f64(), b.as_f64());
        return Ok(if dtype == DType::Bool { Val::B(r != 0.0) } else { Val::F(round_float(dtype, r)) });
    }
    let r = binary_int(op, cdt, a.as_i64(), b.as_i64())?;
    Ok(if dtype == DType::Bool { Val::B(r != 0) } else { Val::I(wrap_int(dtype, r)) })
}

fn acc_feed(acc: &Accumulator, st: &mut AccState, x: Val, pos: i64) {
    let first = st.count == 0;
    st.count += 1;
    let dt = acc.dtype;
    st.value = match (acc.op, x) {
        (ReduceOp::Argmax, x) => {
            if first {
                st.best = pos;
                x
            } else {
                let better = match (st.value, x) {
                    (Val::F(b), _) if b.is_nan() => false,
                    (Val::F(b), Val::F(v)) => v.is_nan() || v > b,
                    (b, v) => int_cmp(dt, v.as_i64(), b.as_i64()).is_gt(),
                };
                if better {
                    st.best = pos;
                    x
                } else {
                    st.value
                }
            }
        }
        (op, Val::F(v)) if dt.is_float() => {
            if first {
                Val::F(round_float(dt, v))
            } else {
                let a = st.value.as_f64();
                Val::F(match op {
                    ReduceOp::Sum => round_float(dt, a + v),
                    ReduceOp::Prod => round_float(dt, a * v),
                    ReduceOp::Max => binary_float(OpKind::Max, a, v),
                    _ => binary_float(OpKind::Min, a, v),
                })
            }
        }
        (op, Val::B(v)) if dt.is_bool() => {
            let a = st.value.truthy();
            Val::B(match op {
                ReduceOp::Max => a || v,
                _ => a && v,
            })
        }
        (op, x) => {
            let (a, v) = (st.value.as_i64(), x.as_i64());
            Val::I(match op {
                ReduceOp::Sum => a.wrapping_add(v),
                ReduceOp::Prod => a.wrapping_mul(v),
                ReduceOp::Max if int_cmp(dt, v, a).is_gt() => v,
                ReduceOp::Min if int_cmp(dt, v, a).is_lt() => v,
                _ => a,
            })
        }
    };
}

fn acc_reset(acc: &Accumulator) -> AccState {
    let dt = acc.dtype;
    let (lo, hi) = int_limits(dt);
    let value = match acc.op {
        ReduceOp::Sum if dt.is_float() => Val::F(0.0),
        ReduceOp::Prod if dt.is_float() => Val::F(1.0),
        ReduceOp::Max if dt.is_float() => Val::F(f64::NEG_INFINITY),
        ReduceOp::Min if dt.is_float() => Val::F(f64::INFINITY),
        ReduceOp::Max if dt.is_bool() => Val::B(false),
        ReduceOp::Min if dt.is_bool() => Val::B(true),
        ReduceOp::Sum => Val::I(0),
        ReduceOp::Prod => Val::I(1),
        ReduceOp::Max => Val::I(lo),
        ReduceOp::Min => Val::I(hi),
        ReduceOp::Argmax => Val::I(0),
        ReduceOp::SumExp | ReduceOp::SumExpFinite => Val::F(0.0),
    };
    AccState { count: 0, value, best: 0 }
}

/// A `sumexp` accumulator's result over the values fed to it: the max stage and the
/// `sum(exp(x - c))` stage it stands for, instruction by instruction.
fn sum_exp_result(acc: &Accumulator, feeds: &[f64]) -> Val {
    let dt = acc.dtype;
    let m = feeds.iter().fold(f64::NEG_INFINITY, |m, &x| binary_float(OpKind::Max, m, x));
    let c = if acc.op == ReduceOp::SumExpFinite && m.abs() == f64::INFINITY { 0.0 } else { m };
    let mut sum = AccState { count: 0, value: Val::F(0.0), best: 0 };
    let plain = Accumulator { op: ReduceOp::Sum, dtype: dt, result: acc.result };
    for &x in feeds {
        let d = round_float(dt, binary_float(OpKind::Sub, x, c));
        let e = unary(OpKind::Exp, Val::F(d), dt, dt);
        acc_feed(&plain, &mut sum, e, 0);
    }
    sum.value
}

fn acc_result(acc: &Accumulator, st: &AccState) -> Option<Val> {
    match acc.op {
        ReduceOp::Argmax => (st.count > 0).then_some(Val::I(st.best)),
        _ if acc.dtype.is_int() => Some(Val::I(wrap_int(acc.dtype, st.value.as_i64()))),
        _ => Some(st.value),
    }
}

/// Runs a prepared kernel: `dims` is its evaluated dim table ([`PreparedKernel::eval_dims`]).
pub fn run_kernel(k: &PreparedKernel, dims: &[i64], mem: &mut dyn Memory, s: &mut Scratch) -> Result<(), ExecError> {
    s.regs.clear();
    s.regs.resize(k.n_regs, Val::I(0));
    let n_outer = k.outer.len();
    s.outer.clear();
    s.outer.resize(n_outer, 0);
    if k.outer.iter().any(|&d| dims[d] <= 0) {
        return Ok(());
    }
    let eval_err = |error| ExecError::Eval { kernel: k.name.clone(), error };
    loop {
        for stage in &k.stages {
            s.accs.clear();
            s.accs.extend(stage.accs.iter().map(acc_reset));
            if s.feeds.len() < stage.accs.len() {
                s.feeds.resize_with(stage.accs.len(), Vec::new);
            }
            s.feeds.iter_mut().for_each(Vec::clear);
            s.inner.clear();
            s.inner.resize(stage.inner.len(), 0);
            let empty = stage.inner.iter().any(|&d| dims[d] <= 0);
            if !empty {
                loop {
                    for instr in &stage.body {
                        match instr {
                            PInstr::Load { dst, buf, index } => {
                                let at = eval_index(index, dims, &s.outer, &s.inner)?;
                                s.regs[*dst] = mem.load(*buf, at)?;
                            }
                            PInstr::LoadAt { dst, buf, index } => {
                                let at = s.regs[*index].as_i64();
                                s.regs[*dst] = mem.load(*buf, at)?;
                            }
                            PInstr::Const { dst, value } => s.regs[*dst] = *value,
                            PInstr::LoopVar { dst, var, dtype } => {
                                let i = match var {
                                    VarRef::Outer(j) => s.outer[*j],
                                    VarRef::Inner(j) => s.inner[*j],
                                };
                                s.regs[*dst] = Val::I(i).convert(*dtype);
                            }
                            PInstr::Unary { dst, op, x, xdt, dtype } => {
                                s.regs[*dst] = unary(*op, s.regs[*x], *xdt, *dtype);
                            }
                            PInstr::Binary { dst, op, a, b, cdt, dtype } => {
                                s.regs[*dst] = binary(*op, s.regs[*a], s.regs[*b], *cdt, *dtype).map_err(eval_err)?;
                            }
                            PInstr::Select { dst, cond, a, b, dtype } => {
                                let v = if s.regs[*cond].truthy() { s.regs[*a] } else { s.regs[*b] };
                                s.regs[*dst] = v.convert(*dtype);
                            }
                            PInstr::Convert { dst, x, xdt, dtype } => {
                                s.regs[*dst] = s.regs[*x].convert_from(*xdt, *dtype)
                            }
                            PInstr::Accumulate { acc, x, index } => {
                                let a = &stage.accs[*acc];
                                if a.op.is_sum_exp() {
                                    s.feeds[*acc].push(s.regs[*x].as_f64());
                                } else {
                                    let pos = index.map_or(0, |i| s.regs[i].as_i64());
                                    acc_feed(a, &mut s.accs[*acc], s.regs[*x], pos);
                                }
                            }
                            PInstr::Store { buf, index, value } => {
                                let at = eval_index(index, dims, &s.outer, &s.inner)?;
                                mem.store(*buf, at, s.regs[*value])?;
                            }
                        }
                    }
                    let ext = &stage.inner;
                    let mut more = false;
                    for j in (0..ext.len()).rev() {
                        s.inner[j] += 1;
                        if s.inner[j] < dims[ext[j]] {
                            more = true;
                            break;
                        }
                        s.inner[j] = 0;
                    }
                    if !more {
                        break;
                    }
                }
            }
            for ((a, st), feeds) in stage.accs.iter().zip(&s.accs).zip(&s.feeds) {
                if a.op.is_sum_exp() {
                    s.regs[a.result.index()] = sum_exp_result(a, feeds);
                    continue;
                }
                s.regs[a.result.index()] = match acc_result(a, st) {
                    Some(v) => v,
                    None => return Err(ExecError::EmptyArgmax { kernel: k.name.clone() }),
                };
            }
        }
        let mut more = false;
        for j in (0..n_outer).rev() {
            s.outer[j] += 1;
            if s.outer[j] < dims[k.outer[j]] {
                more = true;
                break;
            }
            s.outer[j] = 0;
        }
        if !more {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Library calls (their meanings: `super::calls`)
// ---------------------------------------------------------------------------------------------

pub use super::calls::{channel_post, conv_attrs, eval_conv, eval_library, eval_library_with, matmul_attrs};

// ---------------------------------------------------------------------------------------------
// Input guards
// ---------------------------------------------------------------------------------------------

/// Why the inputs given to a program do not fit it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GuardError {
    #[error("the program has {expected} inputs but {got} were given")]
    InputCount { expected: usize, got: usize },
    #[error("input `{name}` must be {expected}, got {got}")]
    DType { name: String, expected: DType, got: DType },
    #[error("input `{name}` must have shape {expected}, got {got:?} (rank {}, expected {})", got.len(), rank)]
    Rank { name: String, expected: String, rank: usize, got: Vec<usize> },
    #[error("input `{name}` must have shape {expected}, got {got:?} (dim {axis} is {}, expected {dim})", got[*axis])]
    Dim { name: String, expected: String, got: Vec<usize>, axis: usize, dim: String },
    #[error("input `{name}`: dim {axis} is {got} but `{symbol}` is already {bound} (from another dim)")]
    SymbolConflict { name: String, axis: usize, symbol: String, bound: u64, got: u64 },
    #[error("size symbol `{0}` is not bound by any input dim")]
    Unbound(String),
}

/// One input's declared type, for guards.
#[derive(Clone, Debug, PartialEq)]
pub struct InputGuard {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<Dim>,
}

/// The input guards of a program, named from `names` (by input index; missing names print as
/// the index).
pub fn input_guards(p: &Program, names: &dyn Fn(usize) -> String) -> Vec<InputGuard> {
    let mut guards: Vec<(usize, InputGuard)> = p
        .buffers
        .values()
        .filter_map(|b| match b.kind {
            BufferKind::Input(n) => {
                Some((n, InputGuard { name: names(n), dtype: b.dtype, dims: b.shape.dims().to_vec() }))
            }
            _ => None,
        })
        .collect();
    guards.sort_by_key(|(n, _)| *n);
    guards.into_iter().map(|(_, g)| g).collect()
}

/// Checks `inputs` against the guards and binds the program's symbols (`values[i]` is the value
/// of `symbols[i]`). Allocates nothing when `values` has room.
pub fn bind_inputs(
    guards: &[InputGuard],
    symbols: &[crate::ir::Symbol],
    inputs: &[TensorView],
    values: &mut Vec<Option<u64>>,
) -> Result<(), GuardError> {
    if inputs.len() != guards.len() {
        return Err(GuardError::InputCount { expected: guards.len(), got: inputs.len() });
    }
    values.clear();
    values.resize(symbols.len(), None);
    let pos = |s: &str| symbols.iter().position(|x| &**x == s);
    for (g, t) in guards.iter().zip(inputs) {
        if t.dtype() != g.dtype {
            return Err(GuardError::DType { name: g.name.clone(), expected: g.dtype, got: t.dtype() });
        }
        let shape_of = |g: &InputGuard| crate::ir::Shape(g.dims.iter().cloned().collect()).to_string();
        if t.shape().len() != g.dims.len() {
            return Err(GuardError::Rank {
                name: g.name.clone(),
                expected: shape_of(g),
                rank: g.dims.len(),
                got: t.shape().to_vec(),
            });
        }
        let dim_err = |axis: usize, d: &Dim| GuardError::Dim {
            name: g.name.clone(),
            expected: shape_of(g),
            got: t.shape().to_vec(),
            axis,
            dim: d.to_string(),
        };
        for (axis, (d, &got)) in g.dims.iter().zip(t.shape()).enumerate() {
            let got = got as u64;
            if let Some(n) = d.as_const() {
                if n != got {
                    return Err(dim_err(axis, d));
                }
            } else if let Some(sym) = d.as_symbol() {
                let Some(i) = pos(sym) else { return Err(GuardError::Unbound(sym.to_string())) };
                match values[i] {
                    Some(bound) if bound != got => {
                        return Err(GuardError::SymbolConflict {
                            name: g.name.clone(),
                            axis,
                            symbol: sym.to_string(),
                            bound,
                            got,
                        })
                    }
                    _ => values[i] = Some(got),
                }
            }
        }
    }
    // Compound dims (`2*n`) are checked once every plain symbol is bound.
    for (g, t) in guards.iter().zip(inputs) {
        for (axis, (d, &got)) in g.dims.iter().zip(t.shape()).enumerate() {
            if d.is_static() || d.as_symbol().is_some() {
                continue;
            }
            let lookup = |s: &str| pos(s).and_then(|i| values[i]);
            match d.eval(&lookup) {
                Ok(n) if n == got as u64 => {}
                Ok(_)
                | Err(DimError::Negative | DimError::Overflow | DimError::NotDivisible | DimError::TooComplex) => {
                    return Err(GuardError::Dim {
                        name: g.name.clone(),
                        expected: crate::ir::Shape(g.dims.iter().cloned().collect()).to_string(),
                        got: t.shape().to_vec(),
                        axis,
                        dim: d.to_string(),
                    })
                }
                Err(DimError::UnboundSymbol(s)) => return Err(GuardError::Unbound(s)),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        if v.is_none() {
            return Err(GuardError::Unbound(symbols[i].to_string()));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running a program on host tensors
// ---------------------------------------------------------------------------------------------

/// Why [`run_program`] failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProgramError {
    #[error("{0}")]
    Guard(#[from] GuardError),
    #[error("the program is malformed: {0}")]
    Malformed(String),
    #[error("const buffer {buffer} reads blob `{name}`, which the graph does not have")]
    MissingBlob { buffer: BufferId, name: String },
    #[error("buffer {buffer}: {shape} has no size with these inputs: {error}")]
    Size { buffer: BufferId, shape: String, error: DimError },
    #[error("step {step}: {error}")]
    Step { step: usize, error: ExecError },
}

enum Store<'a> {
    Borrowed(&'a TensorData),
    Owned(TensorData),
}

impl Store<'_> {
    fn data(&self) -> &TensorData {
        match self {
            Store::Borrowed(d) => d,
            Store::Owned(d) => d,
        }
    }
}

struct HostMemory<'a> {
    bufs: Vec<Store<'a>>,
    kernel: String,
}

impl Memory for HostMemory<'_> {
    fn load(&self, buf: BufferId, index: i64) -> Result<Val, ExecError> {
        let data = self.bufs[buf.index()].data();
        usize::try_from(index).ok().and_then(|i| get_elem(data, i)).ok_or_else(|| ExecError::OutOfBounds {
            kernel: self.kernel.clone(),
            buffer: buf,
            index,
            len: data.len(),
        })
    }

    fn store(&mut self, buf: BufferId, index: i64, value: Val) -> Result<(), ExecError> {
        let kernel = &self.kernel;
        match &mut self.bufs[buf.index()] {
            Store::Owned(data) => {
                let len = data.len();
                usize::try_from(index)
                    .ok()
                    .and_then(|i| set_elem(data, i, value))
                    .ok_or_else(|| ExecError::OutOfBounds { kernel: kernel.clone(), buffer: buf, index, len })
            }
            Store::Borrowed(_) => Err(ExecError::Invalid(format!("{buf} is read-only"))),
        }
    }
}

/// Runs `p` on `inputs` (one per graph input, in order), reading `const` buffers from the
/// blobs of `graph_blobs` (the graph the program was scheduled from). Returns one tensor per
/// program output.
pub fn run_program(p: &Program, graph_blobs: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, ProgramError> {
    let names = |n: usize| if n < graph_blobs.inputs().len() { graph_blobs.input_name(n) } else { n.to_string() };
    let guards = input_guards(p, &names);
    let mut values = Vec::new();
    let views: Vec<TensorView<'_>> = inputs.iter().map(TensorView::from).collect();
    bind_inputs(&guards, &p.symbols, &views, &mut values)?;
    let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| values[i]);

    let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(p.buffers.len());
    for (id, b) in p.buffers.iter() {
        let mut dims = Vec::with_capacity(b.shape.rank());
        for d in b.shape.dims() {
            let n = d.eval(&lookup).map_err(|error| ProgramError::Size {
                buffer: id,
                shape: b.shape.to_string(),
                error,
            })?;
            dims.push(usize::try_from(n).map_err(|_| ProgramError::Size {
                buffer: id,
                shape: b.shape.to_string(),
                error: DimError::Overflow,
            })?);
        }
        shapes.push(dims);
    }
    let blobs: Vec<Arc<Tensor>> = graph_blobs.blobs().map(|(_, b)| Arc::clone(&b.tensor)).collect();
    let blob_names: Vec<&str> = graph_blobs.blobs().map(|(_, b)| b.name.as_str()).collect();
    let mut bufs: Vec<Store> = Vec::with_capacity(p.buffers.len());
    for (id, b) in p.buffers.iter() {
        let shape = &shapes[id.index()];
        bufs.push(match &b.kind {
            BufferKind::Input(n) => {
                let t = inputs.get(*n).ok_or_else(|| ProgramError::Malformed(format!("{id} reads input {n}")))?;
                Store::Borrowed(t.data())
            }
            BufferKind::Const(name) => {
                let k = blob_names
                    .iter()
                    .position(|x| x == name)
                    .ok_or_else(|| ProgramError::MissingBlob { buffer: id, name: name.clone() })?;
                let t = &blobs[k];
                if t.dtype() != b.dtype || t.shape() != &shape[..] {
                    return Err(ProgramError::Malformed(format!(
                        "{id}: blob `{name}` is {t}, not {}{}",
                        b.dtype, b.shape
                    )));
                }
                Store::Borrowed(t.data())
            }
            BufferKind::Temp => {
                let n = crate::tensor::checked_numel(shape)
                    .ok_or_else(|| ProgramError::Malformed(format!("{id} is too large")))?;
                Store::Owned(TensorData::zeros(b.dtype, n))
            }
        });
    }
    // Const tensors must outlive the borrows; `blobs` holds them.
    let mut mem = HostMemory { bufs, kernel: String::new() };
    let mut scratch = Scratch::default();
    let mut dimvals = Vec::new();
    let tensor_of = |mem: &HostMemory, b: BufferId| -> Result<Tensor, ExecError> {
        Tensor::new(shapes[b.index()].clone(), mem.bufs[b.index()].data().clone())
            .map_err(|e| ExecError::Invalid(e.to_string()))
    };
    // A library step's result `t` after its post-op, if it has one.
    let with_post = |mem: &HostMemory, post: Option<&super::ChannelPost>, t: Tensor, what: &'static str| {
        let Some(post) = post else { return Ok(t) };
        let bias = match &post.addend {
            Some(super::Addend::Channel(b)) => Some(tensor_of(mem, *b)?),
            _ => None,
        };
        channel_post(post, t, bias.as_ref()).map_err(|error| ExecError::Library { what, error })
    };
    let symbol_values: std::collections::HashMap<String, u64> =
        p.symbols.iter().zip(&values).filter_map(|(s, v)| v.map(|v| (s.to_string(), v))).collect();
    // A library call (a step, or a matmul's or kernel's activation) on the buffers so far.
    let library = |mem: &mut HostMemory, l: &super::LibraryCall| -> Result<(), ExecError> {
        let args: Vec<Tensor> = l.args.iter().map(|&b| tensor_of(mem, b)).collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = args.iter().collect();
        let out = (p.buffers[l.out].dtype, &shapes[l.out.index()]);
        let t = eval_library_with(l.op, &l.attrs, &refs, out.0, out.1, symbol_values.clone())
            .map_err(|error| ExecError::Library { what: l.op.name(), error })?;
        let t = with_post(mem, l.post.as_ref(), t, l.op.name())?;
        mem.bufs[l.out.index()] = Store::Owned(t.into_data());
        Ok(())
    };
    for (step, s) in p.steps.iter().enumerate() {
        let at = |error| ProgramError::Step { step, error };
        match s {
            Step::Kernel(k) => {
                let prepared = PreparedKernel::new(k, p).map_err(ProgramError::Malformed)?;
                prepared.eval_dims(&lookup, &mut dimvals).map_err(at)?;
                mem.kernel = k.name.clone();
                run_kernel(&prepared, &dimvals, &mut mem, &mut scratch).map_err(at)?;
                if let Some(l) = &k.activation {
                    library(&mut mem, l).map_err(at)?;
                }
            }
            Step::Matmul(m) => {
                let (a, b) = (tensor_of(&mem, m.a).map_err(at)?, tensor_of(&mem, m.b).map_err(at)?);
                let out = &p.buffers[m.out];
                let t = eval_library(OpKind::Matmul, &matmul_attrs(m), &[&a, &b], out.dtype, &shapes[m.out.index()])
                    .map_err(|error| at(ExecError::Library { what: "matmul", error }))?;
                mem.bufs[m.out.index()] = Store::Owned(t.into_data());
                if let Some(k) = &m.epilogue {
                    let prepared = PreparedKernel::new(k, p).map_err(ProgramError::Malformed)?;
                    prepared.eval_dims(&lookup, &mut dimvals).map_err(at)?;
                    mem.kernel = k.name.clone();
                    run_kernel(&prepared, &dimvals, &mut mem, &mut scratch).map_err(at)?;
                }
                if let Some(l) = &m.activation {
                    library(&mut mem, l).map_err(at)?;
                }
            }
            Step::Conv(c) => {
                let (x, w) = (tensor_of(&mem, c.x).map_err(at)?, tensor_of(&mem, c.w).map_err(at)?);
                let out = &p.buffers[c.out];
                let conv_shape = &shapes[c.pool.as_ref().map_or(c.out, |pool| pool.unpooled).index()];
                let t = eval_conv(c, &x, &w, out.dtype, conv_shape, &shapes[c.out.index()])
                    .map_err(|error| at(ExecError::Library { what: "conv", error }))?;
                let t = with_post(&mem, c.post.as_ref(), t, "conv").map_err(at)?;
                mem.bufs[c.out.index()] = Store::Owned(t.into_data());
            }
            Step::Library(l) => library(&mut mem, l).map_err(at)?,
            Step::Interp(call) => {
                let args: Vec<Tensor> =
                    call.args.iter().map(|&b| tensor_of(&mem, b)).collect::<Result<_, _>>().map_err(at)?;
                let outcome = interp::run(&call.graph, &args, &interp::Options::default())
                    .map_err(|e| at(ExecError::Interp(e)))?;
                for (&b, t) in call.results.iter().zip(outcome.outputs) {
                    if t.dtype() != p.buffers[b].dtype || t.shape() != &shapes[b.index()][..] {
                        return Err(at(ExecError::Invalid(format!("graph break result {t} does not fit {b}"))));
                    }
                    mem.bufs[b.index()] = Store::Owned(t.into_data());
                }
            }
        }
    }
    p.outputs.iter().map(|(_, b)| tensor_of(&mem, *b).map_err(|e| ProgramError::Malformed(e.to_string()))).collect()
}
