//! Checking a kernel against the kernel IR's rules and this backend's support, and planning
//! how each stage compiles (scalar, or F32X4 with an unroll factor).

use super::CodegenError;
use super::CpuOptions;
use crate::ir::{DType, Dim};
use crate::kernel::{BufferKind, Index, Instr, Kernel, Program, ReduceOp, Reg, Stage, Var};
use crate::ops::OpKind;
use cranelift_entity::EntityRef;

/// What [`analyze`] learned about a kernel.
pub(crate) struct Analysis {
    pub types: Vec<Option<DType>>,
    pub dim_table: Vec<Dim>,
    /// Per stage: the unroll factor of its vectorized innermost loop, or `None` (scalar).
    pub vector: Vec<Option<u32>>,
    /// Whether the code may record a run-time error.
    pub may_fail: bool,
    /// One more than the highest buffer index the kernel touches.
    pub n_buffers: usize,
}

/// The most registers a kernel may declare (bounds the per-kernel tables).
const MAX_REGS: usize = 1 << 20;

fn unsupported(msg: impl Into<String>) -> CodegenError {
    CodegenError::Unsupported(msg.into())
}

fn invalid(msg: impl Into<String>) -> CodegenError {
    CodegenError::Invalid(msg.into())
}

fn check_dtype(d: DType) -> Result<(), CodegenError> {
    match d {
        DType::F16 | DType::BF16 => Err(unsupported(format!("dtype {d}"))),
        d if d.is_int() && !matches!(d, DType::I32 | DType::I64) => Err(unsupported(format!("dtype {d}"))),
        _ => Ok(()),
    }
}

pub(crate) fn is_transcendental(op: OpKind) -> bool {
    use OpKind::*;
    matches!(op, Exp | Exp2 | Log | Log1p | Expm1 | Sin | Cos | Tanh | Erf | Pow)
}

fn float_only_unary(op: OpKind) -> bool {
    use OpKind::*;
    matches!(op, Exp | Exp2 | Log | Log1p | Expm1 | Sqrt | Rsqrt | Reciprocal | Sin | Cos | Tanh | Erf)
}

fn is_unary(op: OpKind) -> bool {
    use OpKind::*;
    float_only_unary(op) || matches!(op, Neg | Abs | Floor | Ceil | Round | Sign | LogicalNot | IsNan)
}

pub(crate) fn is_comparison(op: OpKind) -> bool {
    use OpKind::*;
    matches!(op, Eq | Ne | Lt | Le | Gt | Ge)
}

fn is_arith_binary(op: OpKind) -> bool {
    use OpKind::*;
    matches!(op, Add | Sub | Mul | Div | Pow | Max | Min | Rem)
}

/// Checks a kernel against the IR's rules and this backend's support, and decides how to
/// compile each stage.
pub(crate) fn analyze(kernel: &Kernel, program: &Program, options: &CpuOptions) -> Result<Analysis, CodegenError> {
    let n = kernel.n_regs as usize;
    if n > MAX_REGS {
        return Err(unsupported(format!("{n} registers (at most {MAX_REGS})")));
    }
    let mut types: Vec<Option<DType>> = vec![None; n];
    let mut global = vec![false; n];
    let mut may_fail = false;
    let dim_ok = |d: &Dim| match d.as_const() {
        Some(c) if c > i64::MAX as u64 => Err(unsupported(format!("dimension {c} does not fit in i64"))),
        _ => Ok(()),
    };
    kernel.outer.iter().try_for_each(dim_ok)?;
    let mut vector = Vec::with_capacity(kernel.stages.len());
    for (si, stage) in kernel.stages.iter().enumerate() {
        stage.inner.iter().try_for_each(dim_ok)?;
        let mut local = vec![false; n];
        let reg = |r: Reg, local: &[bool], types: &[Option<DType>]| -> Result<DType, CodegenError> {
            let i = r.index();
            if i >= n {
                return Err(invalid(format!("stage {si}: {r} is not below n_regs = {n}")));
            }
            match types[i] {
                Some(t) if local[i] || global[i] => Ok(t),
                Some(_) => Err(invalid(format!("stage {si}: {r} is local to an earlier stage"))),
                None => Err(invalid(format!("stage {si}: {r} is used before it is defined"))),
            }
        };
        let check_var = |v: Var| -> Result<(), CodegenError> {
            match v {
                Var::Outer(k) if (k as usize) < kernel.outer.len() => Ok(()),
                Var::Inner(k) if (k as usize) < stage.inner.len() => Ok(()),
                _ => Err(invalid(format!("stage {si}: loop variable {v} out of range"))),
            }
        };
        let buffer = |b: crate::kernel::BufferId| -> Result<DType, CodegenError> {
            let buf = program.buffers.get(b).ok_or_else(|| invalid(format!("stage {si}: no buffer {b}")))?;
            check_dtype(buf.dtype)?;
            Ok(buf.dtype)
        };
        for instr in &stage.body {
            let ty = match instr {
                Instr::Load { buf, index, .. } => {
                    index.offset_ok(dim_ok)?;
                    index.terms.iter().try_for_each(|(v, _)| check_var(*v))?;
                    buffer(*buf)?
                }
                Instr::LoadAt { buf, index, .. } => {
                    let t = reg(*index, &local, &types)?;
                    if !t.is_int() {
                        return Err(invalid(format!("stage {si}: gather offset {index} is {t}, not an integer")));
                    }
                    let bt = buffer(*buf)?;
                    // Generated code checks a gather's offset against the buffer's size, which it
                    // must know: a symbolically sized buffer is left to the reference executor,
                    // which checks every access.
                    if program.buffers[*buf].shape.numel().ok().and_then(|d| d.as_const()).is_none() {
                        return Err(unsupported(format!(
                            "stage {si}: gather from {buf}, whose size is symbolic, cannot be bounds-checked"
                        )));
                    }
                    may_fail = true;
                    bt
                }
                Instr::Const { dtype, .. } => *dtype,
                Instr::LoopVar { var, dtype, .. } => {
                    check_var(*var)?;
                    *dtype
                }
                Instr::Unary { op, x, dtype, .. } => {
                    let t = reg(*x, &local, &types)?;
                    if !is_unary(*op) {
                        return Err(unsupported(format!("unary op {}", op.name())));
                    }
                    check_dtype(t)?;
                    match op {
                        OpKind::LogicalNot | OpKind::IsNan => {
                            if *dtype != DType::Bool {
                                return Err(invalid(format!("stage {si}: {} returns bool, not {dtype}", op.name())));
                            }
                        }
                        _ => {
                            if t != *dtype {
                                return Err(invalid(format!("stage {si}: {} of {t} declared {dtype}", op.name())));
                            }
                            if t.is_bool() || (float_only_unary(*op) && !t.is_float()) {
                                return Err(invalid(format!("stage {si}: {} does not take {t}", op.name())));
                            }
                        }
                    }
                    *dtype
                }
                Instr::Binary { op, a, b, dtype, .. } => {
                    let (ta, tb) = (reg(*a, &local, &types)?, reg(*b, &local, &types)?);
                    if ta != tb {
                        return Err(invalid(format!("stage {si}: {} of {ta} and {tb}", op.name())));
                    }
                    check_dtype(ta)?;
                    if matches!(op, OpKind::And | OpKind::Or) && !ta.is_bool() {
                        return Err(unsupported(format!("stage {si}: bitwise {} of {ta}", op.name())));
                    }
                    if is_comparison(*op) || matches!(op, OpKind::And | OpKind::Or) {
                        if *dtype != DType::Bool {
                            return Err(invalid(format!("stage {si}: {} returns bool, not {dtype}", op.name())));
                        }
                    } else if is_arith_binary(*op) {
                        if ta != *dtype || ta.is_bool() {
                            return Err(invalid(format!("stage {si}: {} of {ta} declared {dtype}", op.name())));
                        }
                        if ta.is_int() && matches!(op, OpKind::Div | OpKind::Rem | OpKind::Pow) {
                            may_fail = true;
                        }
                    } else {
                        return Err(unsupported(format!("binary op {}", op.name())));
                    }
                    *dtype
                }
                Instr::Select { cond, a, b, dtype, .. } => {
                    let tc = reg(*cond, &local, &types)?;
                    let (ta, tb) = (reg(*a, &local, &types)?, reg(*b, &local, &types)?);
                    if tc != DType::Bool || ta != *dtype || tb != *dtype {
                        return Err(invalid(format!("stage {si}: where({tc}, {ta}, {tb}) declared {dtype}")));
                    }
                    *dtype
                }
                Instr::Convert { x, dtype, .. } => {
                    check_dtype(reg(*x, &local, &types)?)?;
                    *dtype
                }
                Instr::Accumulate { acc, x, index } => {
                    let a = stage
                        .accumulators
                        .get(*acc as usize)
                        .ok_or_else(|| invalid(format!("stage {si}: no accumulator acc{acc}")))?;
                    let t = reg(*x, &local, &types)?;
                    if t != a.dtype {
                        return Err(invalid(format!("stage {si}: acc{acc} of {} fed {t}", a.dtype)));
                    }
                    match (a.op, index) {
                        (ReduceOp::Argmax, Some(i)) => {
                            if reg(*i, &local, &types)? != DType::I64 {
                                return Err(invalid(format!("stage {si}: argmax position {i} is not i64")));
                            }
                            if t.is_bool() {
                                return Err(invalid(format!("stage {si}: argmax of bool")));
                            }
                        }
                        (ReduceOp::Argmax, None) => {
                            return Err(invalid(format!("stage {si}: argmax without position")))
                        }
                        (ReduceOp::Sum | ReduceOp::Prod, _) if t.is_bool() => {
                            return Err(invalid(format!("stage {si}: {:?} of bool", a.op)))
                        }
                        (ReduceOp::SumExp | ReduceOp::SumExpFinite, _) if !t.is_float() => {
                            return Err(invalid(format!("stage {si}: {:?} of {t}", a.op)))
                        }
                        _ => {}
                    }
                    continue;
                }
                Instr::Store { buf, index, value } => {
                    index.offset_ok(dim_ok)?;
                    index.terms.iter().try_for_each(|(v, _)| check_var(*v))?;
                    let bt = buffer(*buf)?;
                    let vt = reg(*value, &local, &types)?;
                    if bt != vt {
                        return Err(invalid(format!("stage {si}: store of {vt} into {bt} buffer {buf}")));
                    }
                    if matches!(program.buffers[*buf].kind, BufferKind::Input(_) | BufferKind::Const(_)) {
                        return Err(invalid(format!("stage {si}: store into read-only buffer {buf}")));
                    }
                    continue;
                }
            };
            check_dtype(ty)?;
            let Some(dst) = instr.dst() else { continue };
            let i = dst.index();
            if i >= n {
                return Err(invalid(format!("stage {si}: {dst} is not below n_regs = {n}")));
            }
            if types[i].is_some() {
                return Err(invalid(format!("stage {si}: {dst} is defined twice")));
            }
            types[i] = Some(ty);
            local[i] = true;
        }
        for acc in &stage.accumulators {
            check_dtype(acc.dtype)?;

            let i = acc.result.index();
            if i >= n || types[i].is_some() {
                return Err(invalid(format!(
                    "stage {si}: accumulator result {} is out of range or defined twice",
                    acc.result
                )));
            }
            types[i] = Some(if acc.op == ReduceOp::Argmax { DType::I64 } else { acc.dtype });
        }
        vector.push(if options.vectorize { vector_plan(stage, &types, &local) } else { None });
        if stage.inner.is_empty() {
            for (g, l) in global.iter_mut().zip(&local) {
                *g |= *l;
            }
        }
        for acc in &stage.accumulators {
            global[acc.result.index()] = true;
        }
    }
    let n_buffers = kernel
        .stages
        .iter()
        .flat_map(|s| &s.body)
        .filter_map(|i| match i {
            Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } | Instr::Store { buf, .. } => Some(buf.index() + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    Ok(Analysis { types, dim_table: kernel.dim_table(), vector, may_fail, n_buffers })
}

trait OffsetOk {
    fn offset_ok(&self, f: impl Fn(&Dim) -> Result<(), CodegenError>) -> Result<(), CodegenError>;
}

impl OffsetOk for Index {
    fn offset_ok(&self, f: impl Fn(&Dim) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        f(&self.offset)?;
        self.terms.iter().try_for_each(|(_, s)| f(s))
    }
}

/// The stride of `var` in `index` if it is a constant (sum of its terms).
fn const_stride(index: &Index, var: Var) -> Option<u64> {
    let mut total = 0u64;
    for (v, s) in &index.terms {
        if *v == var {
            total = total.checked_add(s.as_const()?)?;
        }
    }
    Some(total)
}

/// Instructions of a stage body above which its vector loop is not unrolled.
pub const LONG_BODY: usize = 96;

/// The unroll factor if the stage's innermost loop can run on F32X4 vectors.
fn vector_plan(stage: &Stage, types: &[Option<DType>], local: &[bool]) -> Option<u32> {
    let inner = Var::Inner(stage.inner.len().checked_sub(1)? as u32);
    let ty = |r: &Reg| types[r.index()];
    let vec_ty = |r: &Reg| matches!(ty(r), Some(DType::F32 | DType::Bool));
    // A load from a buffer the stage also stores to must read the element it writes (an
    // in-place update); anything else could be a loop-carried dependence through memory.
    let stores: Vec<(crate::kernel::BufferId, &Index)> = stage
        .body
        .iter()
        .filter_map(|i| match i {
            Instr::Store { buf, index, .. } => Some((*buf, index)),
            _ => None,
        })
        .collect();
    let carried = stage.body.iter().any(|i| match i {
        Instr::Load { buf, index, .. } => stores.iter().any(|(sb, si)| sb == buf && *si != index),
        Instr::Store { buf, index, .. } => stores.iter().any(|(sb, si)| sb == buf && *si != index),
        _ => false,
    });
    if carried {
        return None;
    }
    let mut heavy = false;
    for instr in &stage.body {
        // Registers from earlier stages are splatted: they must be f32 or bool too.
        let ok = match instr {
            // Contiguous, broadcast, every other element (pooling windows), or any other
            // stride, constant or symbolic (a transposed read: the lanes loaded one at a
            // time, `stride` apart, whatever its value at run time).
            Instr::Load { dst, .. } => ty(dst) == Some(DType::F32),
            // Contiguous, or any other stride but a constant 0 (a transposed write: the
            // lanes stored one at a time in lane order, so a symbolic stride that is 0 at
            // run time leaves the last lane's value, as the scalar loop does).
            Instr::Store { value, index, .. } => {
                ty(value) == Some(DType::F32) && const_stride(index, inner).is_none_or(|s| s > 0)
            }
            Instr::LoadAt { .. } => false,
            Instr::Const { dtype, .. } => matches!(dtype, DType::F32 | DType::Bool),
            Instr::LoopVar { dtype, .. } => *dtype == DType::F32,
            Instr::Unary { op, x, dtype, .. } => {
                heavy |= is_transcendental(*op);
                match op {
                    OpKind::IsNan => ty(x) == Some(DType::F32),
                    OpKind::LogicalNot => vec_ty(x),
                    _ => *dtype == DType::F32,
                }
            }
            Instr::Binary { op, a, .. } => match ty(a) {
                Some(DType::F32) => {
                    matches!(op, OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max | OpKind::Min)
                        || is_comparison(*op)
                }
                Some(DType::Bool) => matches!(op, OpKind::And | OpKind::Or),
                _ => false,
            },
            Instr::Select { dtype, .. } => matches!(dtype, DType::F32 | DType::Bool),
            Instr::Convert { x, dtype, .. } => vec_ty(x) && matches!(dtype, DType::F32 | DType::Bool),
            Instr::Accumulate { acc, .. } => {
                let a = &stage.accumulators[*acc as usize];
                // A `sumexp` takes an exponential per value.
                heavy |= a.op.is_sum_exp();
                a.dtype == DType::F32 && a.op != ReduceOp::Argmax
            }
        };
        if !ok {
            return None;
        }
        let uses_ok = instr_uses(instr).iter().all(|r| local[r.index()] || vec_ty(r));
        if !uses_ok {
            return None;
        }
    }
    // A `sumexp` runs one vector per iteration (see `codegen`), and so does a long body: it
    // has parallel work of its own, and each unrolled copy is more code for the register
    // allocator (a chain of 128 exponentials per kernel compiled in half the time).
    let sum_exp = stage.accumulators.iter().any(|a| a.op.is_sum_exp());
    Some(if sum_exp || stage.body.len() > LONG_BODY {
        1
    } else if heavy || stage.body.len() > 24 {
        2
    } else {
        4
    })
}

fn instr_uses(instr: &Instr) -> Vec<Reg> {
    match instr {
        Instr::Load { .. } | Instr::Const { .. } | Instr::LoopVar { .. } => vec![],
        Instr::LoadAt { index, .. } => vec![*index],
        Instr::Unary { x, .. } | Instr::Convert { x, .. } => vec![*x],
        Instr::Binary { a, b, .. } => vec![*a, *b],
        Instr::Select { cond, a, b, .. } => vec![*cond, *a, *b],
        Instr::Accumulate { x, index, .. } => std::iter::once(*x).chain(*index).collect(),
        Instr::Store { value, .. } => vec![*value],
    }
}

/// The `max` accumulator a `sumexp` accumulator `k` of `stage` can share its running maximum
/// with: one of a lower index and the same dtype, fed exactly once, the same register as `k`
/// (also fed once), and before it.
pub(crate) fn shared_max(stage: &Stage, k: usize) -> Option<usize> {
    let feeds = |acc: usize| {
        let mut it = stage.body.iter().enumerate().filter_map(move |(pos, i)| match i {
            Instr::Accumulate { acc: a, x, .. } if *a as usize == acc => Some((pos, *x)),
            _ => None,
        });
        let first = it.next();
        if it.next().is_some() {
            None
        } else {
            first
        }
    };
    let (pk, xk) = feeds(k)?;
    (0..k).find(|&j| {
        let a = &stage.accumulators[j];
        a.op == ReduceOp::Max
            && a.dtype == stage.accumulators[k].dtype
            && feeds(j).is_some_and(|(pj, xj)| xj == xk && pj < pk)
    })
}

/// Which versions of a stage's innermost loop can run: the vector loop (unrolled), the
/// one-vector loop after it (when unrolled), the scalar tail. Over a static extent a version
/// that would run zero times is left out (128 elements by 8 lanes need only the first), which
/// makes less code to compile and changes nothing that runs; over a symbolic one, all are kept.
pub(crate) fn innermost_loops(extent: &Dim, plan: Option<u32>) -> [bool; 3] {
    let Some(unroll) = plan else { return [false, false, true] };
    let width = 4 * u64::from(unroll);
    match extent.as_const() {
        Some(e) => [e >= width, unroll > 1 && e % width >= 4, e % 4 != 0],
        None => [true, unroll > 1, true],
    }
}
