//! Kernel IR → Cranelift IR: building a checked kernel's function ([`build`]).
//!
//! Shape of the generated function: load the dim table and the buffer base pointers once;
//! then the outer loops (the first over `begin..end`, clamped to its extent), and in their
//! body the stages in order. A stage resets its accumulators, runs its inner loops and
//! leaves the accumulator results (and, for a stage without inner loops, every register it
//! defines) as SSA values that dominate the later stages. Per innermost loop, each load and
//! store gets a row pointer computed before the loop (and pinned there, `Gen::pin`), so the
//! body adds only `iv · stride`.
//!
//! Vectorization: an f32 stage whose innermost loop reads and writes at any stride (symbolic
//! too; contiguous ones as vectors, others a lane at a time; no write at a constant 0), and whose
//! ops all have vector forms, runs that loop as an F32X4 loop unrolled ×4 (×2 for bodies with
//! transcendentals), then a one-vector loop, then a scalar tail (over a static extent, only
//! those that run: `analyze::innermost_loops`). Booleans are lane masks there. Reductions keep
//! one vector accumulator per unrolled copy plus the scalar tail's, combined at the end of the
//! stage (sums and products reassociate, as the IR allows; max/min are exact in any order).
//!
//! A `sumexp` accumulator keeps, per vector slot and for the scalar tail, a running maximum and
//! a running sum of `exp(x - max)` ([`math::sum_exp_step`]: one exponential per value); the
//! maximum is the stage's `max` accumulator's own when that one is fed the same register
//! first (as the scheduler emits it). At the end of the stage each partial sum is rescaled to
//! the row's maximum (one vector exponential per slot) and added, and
//! [`math::sum_exp_finish`] gives the special values. Its stages run one vector per
//! iteration: the running states and the exponential's constants then fit the registers, and
//! the end-of-stage rescaling costs one vector exponential.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_entity::EntityRef;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};

use super::analyze::{self, is_comparison, Analysis};
use super::emit::{call, call_unary, Clif};
use super::math::{self, Arith};
use super::{CodegenError, ERR_DIV_ZERO, ERR_OUT_OF_BOUNDS};
use crate::ir::{DType, Dim};
use crate::kernel::{Instr, Kernel, Program, ReduceOp, Reg, Scalar, Var};
use crate::ops::OpKind;

pub(crate) struct Target {
    pub fma: bool,
    pub call_conv: CallConv,
    pub frontend: TargetFrontendConfig,
}

fn clif_type(d: DType) -> Type {
    match d {
        DType::F32 => types::F32,
        DType::F64 => types::F64,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
        // f16/bf16 and the 8-, 16-bit and unsigned integers are refused by `analyze`.
        DType::Bool | DType::F16 | DType::BF16 | DType::I8 | DType::U8 => types::I8,
        DType::I16 | DType::U16 => types::I16,
        DType::U32 => types::I32,
        DType::U64 => types::I64,
    }
}

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Where one load or store of the innermost loop points: `row + iv · stride` bytes.
#[derive(Clone, Copy)]
struct Row {
    ptr: Value,
    /// Byte stride of the innermost variable (`None` when it is 0).
    stride: Option<Value>,
    /// The same stride in elements, when it is a constant.
    elems: Option<u64>,
}

/// The accumulator state of a stage.
struct AccVars {
    val: Variable,
    idx: Option<Variable>,
    seen: Option<Variable>,
    vecs: Vec<Variable>,
    /// For `sumexp`: where its running maxima are (`val` and `vecs` hold the sums).
    max: Option<SumExpMax>,
}

/// The running maxima of a `sumexp` accumulator: scalar and per vector slot, its own, or those
/// of the stage's `max` accumulator `shared` when that one is fed the same register earlier in
/// the body (so the maximum is computed once, and the step reads its value before the update).
struct SumExpMax {
    val: Variable,
    vecs: Vec<Variable>,
    shared: Option<usize>,
}

/// How a body is emitted.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Scalar,
    /// F32X4 lanes starting at the innermost iv; `slot` picks the vector accumulators.
    Vector {
        slot: usize,
    },
}

struct Gen<'a, 'f> {
    b: FunctionBuilder<'f>,
    kernel: &'a Kernel,
    program: &'a Program,
    an: &'a Analysis,
    target: Target,
    dims: Vec<Value>,
    bases: Vec<Option<Value>>,
    begin: Value,
    end: Value,
    outer_iv: Vec<Value>,
    /// The ivs of the current stage's inner loops around the innermost one.
    inner_iv: Vec<Value>,
    globals: Vec<Option<Value>>,
    err: Option<Variable>,
}

/// Builds `kernel`'s function into `func` (whose signature is the `KernelFn` one).
pub(crate) fn build(
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    kernel: &Kernel,
    program: &Program,
    an: &Analysis,
    target: Target,
) -> Result<(), CodegenError> {
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    let (bufs, dims_ptr, begin, end) = (params[0], params[1], params[2], params[3]);
    let dims: Vec<Value> = (0..an.dim_table.len())
        .map(|j| b.ins().load(types::I64, MemFlagsData::trusted(), dims_ptr, (8 * j) as i32))
        .collect();
    let mut used = vec![false; program.buffers.len()];
    for stage in &kernel.stages {
        for instr in &stage.body {
            if let Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } | Instr::Store { buf, .. } = instr {
                used[buf.index()] = true;
            }
        }
    }
    let bases = used
        .iter()
        .enumerate()
        .map(|(i, &u)| u.then(|| b.ins().load(types::I64, MemFlagsData::trusted(), bufs, (8 * i) as i32)))
        .collect();
    let err = an.may_fail.then(|| {
        let v = b.declare_var(types::I64);
        let zero = b.ins().iconst(types::I64, 0);
        b.def_var(v, zero);
        v
    });
    let mut g = Gen {
        b,
        kernel,
        program,
        an,
        target,
        dims,
        bases,
        begin,
        end,
        outer_iv: Vec::new(),
        inner_iv: Vec::new(),
        globals: vec![None; kernel.n_regs as usize],
        err,
    };
    if kernel.outer.is_empty() {
        let body = g.b.create_block();
        let exit = g.b.create_block();
        let run = g.b.ins().icmp(IntCC::SignedLessThan, begin, end);
        g.b.ins().brif(run, body, &[], exit, &[]);
        g.b.seal_block(body);
        g.b.switch_to_block(body);
        g.stages()?;
        g.b.ins().jump(exit, &[]);
        g.b.seal_block(exit);
        g.b.switch_to_block(exit);
    } else {
        g.outer(0)?;
    }
    if let Some(err) = g.err {
        let code = g.b.use_var(err);
        let report = g.b.create_block();
        let done = g.b.create_block();
        g.b.set_cold_block(report);
        g.b.ins().brif(code, report, &[], done, &[]);
        g.b.seal_block(report);
        g.b.switch_to_block(report);
        let f = super::record_kernel_error as *const () as usize;
        let mut sig = cranelift_codegen::ir::Signature::new(g.target.call_conv);
        sig.params.push(cranelift_codegen::ir::AbiParam::new(types::I64));
        let sig = g.b.import_signature(sig);
        let callee = g.b.ins().iconst(types::I64, f as i64);
        g.b.ins().call_indirect(sig, callee, &[code]);
        g.b.ins().jump(done, &[]);
        g.b.seal_block(done);
        g.b.switch_to_block(done);
    }
    g.b.ins().return_(&[]);
    g.b.finalize(g.target.frontend);
    Ok(())
}

impl Gen<'_, '_> {
    fn dim(&mut self, d: &Dim) -> Value {
        match d.as_const() {
            Some(c) => self.b.ins().iconst(types::I64, c as i64),
            None => {
                // `analyze` built the table from the same kernel, so every symbolic dim is in it.
                let j = self.an.dim_table.iter().position(|t| t == d).unwrap_or(0);
                self.dims[j]
            }
        }
    }

    fn ty(&self, r: Reg) -> DType {
        self.an.types[r.index()].unwrap_or(DType::I64)
    }

    /// `while iv + need <= end` header; returns the iv in the body block.
    fn loop_begin(
        &mut self,
        var: Variable,
        end: Value,
        need: i64,
    ) -> (cranelift_codegen::ir::Block, cranelift_codegen::ir::Block, Value) {
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let iv = self.b.use_var(var);
        let cond = if need == 1 {
            self.b.ins().icmp(IntCC::SignedLessThan, iv, end)
        } else {
            let last = self.b.ins().iadd_imm_s(iv, need);
            self.b.ins().icmp(IntCC::SignedLessThanOrEqual, last, end)
        };
        self.b.ins().brif(cond, body, &[], exit, &[]);
        self.b.seal_block(body);
        self.b.switch_to_block(body);
        let iv = self.b.use_var(var);
        (header, exit, iv)
    }

    fn loop_end(
        &mut self,
        var: Variable,
        header: cranelift_codegen::ir::Block,
        exit: cranelift_codegen::ir::Block,
        step: i64,
    ) {
        let iv = self.b.use_var(var);
        let next = self.b.ins().iadd_imm_s(iv, step);
        self.b.def_var(var, next);
        self.b.ins().jump(header, &[]);
        self.b.seal_block(header);
        self.b.seal_block(exit);
        self.b.switch_to_block(exit);
    }

    fn outer(&mut self, k: usize) -> Result<(), CodegenError> {
        let kernel = self.kernel;
        let extent = self.dim(&kernel.outer[k]);
        let (start, stop) = if k == 0 {
            let zero = self.b.ins().iconst(types::I64, 0);
            let start = self.b.ins().smax(self.begin, zero);
            let stop = self.b.ins().smin(self.end, extent);
            (start, stop)
        } else {
            (self.b.ins().iconst(types::I64, 0), extent)
        };
        let var = self.b.declare_var(types::I64);
        self.b.def_var(var, start);
        let (header, exit, iv) = self.loop_begin(var, stop, 1);
        self.outer_iv.push(iv);
        if k + 1 < self.kernel.outer.len() {
            self.outer(k + 1)?;
        } else {
            self.stages()?;
        }
        self.outer_iv.pop();
        self.loop_end(var, header, exit, 1);
        Ok(())
    }

    fn stages(&mut self) -> Result<(), CodegenError> {
        for si in 0..self.kernel.stages.len() {
            self.stage(si)?;
        }
        Ok(())
    }

    fn stage(&mut self, si: usize) -> Result<(), CodegenError> {
        let kernel = self.kernel;
        let stage = &kernel.stages[si];
        let plan = self.an.vector[si];
        let mut accs = Vec::with_capacity(stage.accumulators.len());
        for acc in &stage.accumulators {
            let ty = clif_type(acc.dtype);
            let val = self.b.declare_var(ty);
            let init = self.identity(acc.op, acc.dtype);
            self.b.def_var(val, init);
            let (idx, seen) = if acc.op == ReduceOp::Argmax {
                let idx = self.b.declare_var(types::I64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.def_var(idx, zero);
                let seen = self.b.declare_var(types::I8);
                let no = self.b.ins().iconst(types::I8, 0);
                self.b.def_var(seen, no);
                (Some(idx), Some(seen))
            } else {
                (None, None)
            };
            let mut vecs = Vec::new();
            if let Some(unroll) = plan {
                for _ in 0..unroll {
                    let v = self.b.declare_var(types::F32X4);
                    let s = self.identity(acc.op, DType::F32);
                    let splat = self.b.ins().splat(types::F32X4, s);
                    self.b.def_var(v, splat);
                    vecs.push(v);
                }
            }
            let max = if !acc.op.is_sum_exp() {
                None
            } else if let Some(j) = analyze::shared_max(stage, accs.len()) {
                let other: &AccVars = &accs[j];
                Some(SumExpMax { val: other.val, vecs: other.vecs.clone(), shared: Some(j) })
            } else {
                let m = self.b.declare_var(ty);
                let init = self.identity(ReduceOp::Max, acc.dtype);
                self.b.def_var(m, init);
                let mvecs = vecs
                    .iter()
                    .map(|_| {
                        let v = self.b.declare_var(types::F32X4);
                        let init = self.identity(ReduceOp::Max, DType::F32);
                        let splat = self.b.ins().splat(types::F32X4, init);
                        self.b.def_var(v, splat);
                        v
                    })
                    .collect();
                Some(SumExpMax { val: m, vecs: mvecs, shared: None })
            };
            accs.push(AccVars { val, idx, seen, vecs, max });
        }
        // Values later stages read are pinned where they are computed (see `pin`) when a later
        // stage has loops they could otherwise be sunk into.
        let loops_follow = kernel.stages[si + 1..].iter().any(|s| !s.inner.is_empty());
        if stage.inner.is_empty() {
            let rows = self.rows(si, None);
            let locals = self.body(si, Mode::Scalar, None, &rows, &accs)?;
            let consts: Vec<Reg> = stage
                .body
                .iter()
                .filter_map(|i| match i {
                    Instr::Const { dst, .. } => Some(*dst),
                    _ => None,
                })
                .collect();
            for (r, l) in locals.into_iter().enumerate() {
                let Some(mut v) = l else { continue };
                if loops_follow && !consts.iter().any(|c| c.index() == r) {
                    v = self.pin(v);
                }
                self.globals[r] = Some(v);
            }
        } else {
            self.inner(si, 0, &accs, plan)?;
        }
        // Final accumulator values.
        for (acc, vars) in stage.accumulators.iter().zip(&accs) {
            let mut v = self.b.use_var(vars.val);
            if let Some(mx) = &vars.max {
                v = self.sum_exp_final(si, acc.op, acc.dtype, mx, vars);
            } else if let Some(idx) = vars.idx {
                v = self.b.use_var(idx);
            } else if !vars.vecs.is_empty() {
                let mut total = self.b.use_var(vars.vecs[0]);
                for &other in &vars.vecs[1..] {
                    let o = self.b.use_var(other);
                    total = self.combine(acc.op, DType::F32, types::F32X4, total, o);
                }
                let mut h = self.b.ins().extractlane(total, 0);
                for lane in 1..4u8 {
                    let l = self.b.ins().extractlane(total, lane);
                    h = self.combine(acc.op, DType::F32, types::F32, h, l);
                }
                v = self.combine(acc.op, DType::F32, types::F32, h, v);
            }
            if acc.op == ReduceOp::Sum && acc.dtype.is_float() && !stage.inner.is_empty() {
                // The identity -0 keeps a sum of -0s at -0; an empty sum is +0, as in the
                // reference.
                let mut count = self.b.ins().iconst(types::I64, 1);
                for extent in &stage.inner {
                    let e = self.dim(extent);
                    count = self.b.ins().imul(count, e);
                }
                let empty = self.b.ins().icmp_imm_s(IntCC::Equal, count, 0);
                let zero =
                    if acc.dtype == DType::F32 { self.b.ins().f32const(0.0) } else { self.b.ins().f64const(0.0) };
                v = self.b.ins().select(empty, zero, v);
            }
            if loops_follow {
                v = self.pin(v);
            }
            self.globals[acc.result.index()] = Some(v);
        }
        Ok(())
    }

    /// `v` through a stack slot: a store and a load, which Cranelift never moves. Without it,
    /// its mid-end may place a pure computation (a reduction's final horizontal combine, a
    /// row's `1 / sqrt(var + eps)`) inside the next loop that uses it, once per element
    /// instead of once per row.
    fn pin(&mut self, v: Value) -> Value {
        use cranelift_codegen::ir::{StackSlotData, StackSlotKind};
        let ty = self.b.func.dfg.value_type(v);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, ty.bytes(), 4));
        self.b.ins().stack_store(types::I64, v, slot, 0);
        self.b.ins().stack_load(types::I64, ty, slot, 0)
    }

    fn inner(&mut self, si: usize, d: usize, accs: &[AccVars], plan: Option<u32>) -> Result<(), CodegenError> {
        let kernel = self.kernel;
        let stage = &kernel.stages[si];
        let extent = self.dim(&stage.inner[d]);
        let var = self.b.declare_var(types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.def_var(var, zero);
        if d + 1 < stage.inner.len() {
            let (header, exit, iv) = self.loop_begin(var, extent, 1);
            self.inner_iv.push(iv);
            self.inner(si, d + 1, accs, plan)?;
            self.inner_iv.pop();
            self.loop_end(var, header, exit, 1);
            return Ok(());
        }
        let innermost = Var::Inner(d as u32);
        let rows = self.rows(si, Some(innermost));
        // Only the versions of the loop that can run (over a static extent, see `analyze`).
        let [unrolled, one_vector, tail] = analyze::innermost_loops(&stage.inner[d], plan);
        let unroll = plan.unwrap_or(1);
        if unrolled {
            let width = 4 * unroll as i64;
            let (header, exit, iv) = self.loop_begin(var, extent, width);
            for slot in 0..unroll as usize {
                let lane_iv = self.b.ins().iadd_imm_s(iv, 4 * slot as i64);
                self.body(si, Mode::Vector { slot }, Some(lane_iv), &rows, accs)?;
            }
            self.loop_end(var, header, exit, width);
        }
        if one_vector {
            let (header, exit, iv) = self.loop_begin(var, extent, 4);
            self.body(si, Mode::Vector { slot: 0 }, Some(iv), &rows, accs)?;
            self.loop_end(var, header, exit, 4);
        }
        if tail {
            let (header, exit, iv) = self.loop_begin(var, extent, 1);
            self.body(si, Mode::Scalar, Some(iv), &rows, accs)?;
            self.loop_end(var, header, exit, 1);
        }
        Ok(())
    }

    fn var_value(&self, v: Var) -> Option<Value> {
        match v {
            Var::Outer(k) => self.outer_iv.get(k as usize).copied(),
            Var::Inner(k) => self.inner_iv.get(k as usize).copied(),
        }
    }

    /// Row pointers of the stage's loads and stores, for the current outer and non-innermost
    /// inner ivs (computed before the innermost loop).
    fn rows(&mut self, si: usize, innermost: Option<Var>) -> Vec<Option<Row>> {
        let kernel = self.kernel;
        let stage = &kernel.stages[si];
        let mut rows = Vec::with_capacity(stage.body.len());
        for instr in &stage.body {
            let (buf, index) = match instr {
                Instr::Load { buf, index, .. } | Instr::Store { buf, index, .. } => (*buf, index),
                _ => {
                    rows.push(None);
                    continue;
                }
            };
            let size = self.program.buffers[buf].dtype.size_bytes() as i64;
            let mut elem = self.dim(&index.offset);
            let mut inner_stride: Option<Value> = None;
            for (v, s) in &index.terms {
                if s.as_const() == Some(0) {
                    continue;
                }
                let s_val = self.dim(s);
                if Some(*v) == innermost {
                    inner_stride = Some(match inner_stride {
                        Some(prev) => self.b.ins().iadd(prev, s_val),
                        None => s_val,
                    });
                } else if let Some(iv) = self.var_value(*v) {
                    let t = self.b.ins().imul(s_val, iv);
                    elem = self.b.ins().iadd(elem, t);
                }
            }
            let base = self.bases[buf.index()].unwrap_or(elem);
            let off = self.b.ins().imul_imm_s(elem, size);
            let mut ptr = self.b.ins().iadd(base, off);
            if innermost.is_some() {
                // Opaque to instruction selection: x64 folds a pure address computation into
                // each load's addressing mode, recomputing the row offset (shifts and adds of
                // the outer ivs) in every iteration of the innermost loop. Pinned, the loop
                // body adds only `iv · stride` (a pooling kernel's vector body: 76 -> 50
                // instructions).
                ptr = self.pin(ptr);
            }
            let stride = inner_stride.map(|s| self.b.ins().imul_imm_s(s, size));
            let elems = innermost.and_then(|v| {
                index.terms.iter().filter(|(w, _)| *w == v).try_fold(0u64, |acc, (_, s)| acc.checked_add(s.as_const()?))
            });
            rows.push(Some(Row { ptr, stride, elems }));
        }
        rows
    }

    fn identity(&mut self, op: ReduceOp, d: DType) -> Value {
        let ins = self.b.ins();
        match (d, op) {
            (DType::F32, ReduceOp::Sum) => ins.f32const(-0.0f32),
            (DType::F32, ReduceOp::Prod) => ins.f32const(1.0f32),
            (DType::F32, ReduceOp::Max | ReduceOp::Argmax) => ins.f32const(f32::NEG_INFINITY),
            (DType::F32, ReduceOp::Min) => ins.f32const(f32::INFINITY),
            (DType::F32, ReduceOp::SumExp | ReduceOp::SumExpFinite) => ins.f32const(0.0),
            (DType::F64, ReduceOp::SumExp | ReduceOp::SumExpFinite) => ins.f64const(0.0),
            (DType::F64, ReduceOp::Sum) => ins.f64const(-0.0),
            (DType::F64, ReduceOp::Prod) => ins.f64const(1.0),
            (DType::F64, ReduceOp::Max | ReduceOp::Argmax) => ins.f64const(f64::NEG_INFINITY),
            (DType::F64, ReduceOp::Min) => ins.f64const(f64::INFINITY),
            (DType::Bool, ReduceOp::Min) => ins.iconst(types::I8, 1),
            (DType::Bool, _) => ins.iconst(types::I8, 0),
            (d, op) => {
                let ty = clif_type(d);
                let (lo, hi) = if d == DType::I32 { (i32::MIN as i64, i32::MAX as i64) } else { (i64::MIN, i64::MAX) };
                let v = match op {
                    ReduceOp::Sum | ReduceOp::SumExp | ReduceOp::SumExpFinite => 0,
                    ReduceOp::Prod => 1,
                    ReduceOp::Max | ReduceOp::Argmax => lo,
                    ReduceOp::Min => hi,
                };
                ins.iconst(ty, v)
            }
        }
    }

    /// `op(a, b)` for accumulators (not argmax, not `sumexp`, whose states merge by
    /// [`math::sum_exp_merge`]); `ty` is the Cranelift type of the operands.
    fn combine(&mut self, op: ReduceOp, d: DType, ty: Type, a: Value, b: Value) -> Value {
        if d.is_float() {
            match op {
                ReduceOp::Sum | ReduceOp::SumExp | ReduceOp::SumExpFinite => self.b.ins().fadd(a, b),
                ReduceOp::Prod => self.b.ins().fmul(a, b),
                ReduceOp::Max | ReduceOp::Min | ReduceOp::Argmax => {
                    let mut c = Clif::new(&mut self.b, ty, self.target.fma, self.target.call_conv);
                    math::max_min(&mut c, a, b, op != ReduceOp::Min)
                }
            }
        } else if d.is_bool() {
            match op {
                ReduceOp::Min => self.b.ins().band(a, b),
                _ => self.b.ins().bor(a, b),
            }
        } else {
            match op {
                ReduceOp::Sum | ReduceOp::SumExp | ReduceOp::SumExpFinite => self.b.ins().iadd(a, b),
                ReduceOp::Prod => self.b.ins().imul(a, b),
                ReduceOp::Max | ReduceOp::Argmax => self.b.ins().smax(a, b),
                ReduceOp::Min => self.b.ins().smin(a, b),
            }
        }
    }

    /// Runs `f` on the arithmetic of lane type `ty` with that type's [`math::exp_or_zero`]:
    /// the inline approximation for f32 and F32X4, the reference's exact function for f64 (as
    /// the `exp` instruction compiles), NaN giving 0.
    fn sum_exp_lanes<R>(
        &mut self,
        ty: Type,
        f: impl FnOnce(&mut Clif<'_, '_>, &mut dyn FnMut(&mut Clif<'_, '_>, Value) -> Value) -> R,
    ) -> R {
        let mut c = Clif::new(&mut self.b, ty, self.target.fma, self.target.call_conv);
        if ty == types::F64 {
            let mut exp0 = |c: &mut Clif<'_, '_>, x: Value| {
                let e = call_unary(c.b, c.call_conv, f64_exp as *const () as usize, types::F64, x);
                let nan = c.cmp(math::Cmp::Uno, x, x);
                let zero = c.f(0.0);
                c.select(nan, zero, e)
            };
            f(&mut c, &mut exp0)
        } else {
            let mut exp0 = |c: &mut Clif<'_, '_>, x: Value| math::exp_or_zero(c, x);
            f(&mut c, &mut exp0)
        }
    }

    /// Feeds `x` to a `sumexp` accumulator: the running maximum (unless shared: the `max`
    /// accumulator's update did it, and `pre` holds its value before), then the sum. On vectors
    /// the sum takes the cheap [`math::sum_exp_add`] unless a lane's maximum grows, which
    /// branches to the full [`math::sum_exp_step`] (rare after a row's first values).
    fn sum_exp_accumulate(
        &mut self,
        dtype: DType,
        vars: &AccVars,
        mx: &SumExpMax,
        mode: Mode,
        x: Value,
        pre: &[Option<Value>],
    ) -> Result<(), CodegenError> {
        let (mv, sv, ty) = match mode {
            Mode::Vector { slot } => (mx.vecs[slot], vars.vecs[slot], types::F32X4),
            Mode::Scalar => (mx.val, vars.val, clif_type(dtype)),
        };
        let m = match mx.shared {
            Some(j) => pre
                .get(j)
                .copied()
                .flatten()
                .ok_or_else(|| CodegenError::Invalid("a shared maximum is fed after its sumexp".into()))?,
            None => {
                let m = self.b.use_var(mv);
                let next = {
                    let mut c = Clif::new(&mut self.b, ty, self.target.fma, self.target.call_conv);
                    math::max_min(&mut c, m, x, true)
                };
                self.b.def_var(mv, next);
                m
            }
        };
        let s = self.b.use_var(sv);
        let next = self.sum_exp_lanes(ty, |c, exp0| math::sum_exp_step(c, m, s, x, exp0));
        self.b.def_var(sv, next);
        Ok(())
    }

    /// A `sumexp` accumulator's result at the end of stage `si`: the maximum over the partial
    /// states (vector slots and lanes, scalar tail), each partial sum rescaled to it
    /// ([`math::sum_exp_rescale`]: one vector exponential per slot) and added, then
    /// [`math::sum_exp_finish`].
    fn sum_exp_final(&mut self, si: usize, op: ReduceOp, d: DType, mx: &SumExpMax, vars: &AccVars) -> Value {
        let ty = clif_type(d);
        let (tail_m, tail_s) = (self.b.use_var(mx.val), self.b.use_var(vars.val));
        let mut m = tail_m;
        let mut s = tail_s;
        if !vars.vecs.is_empty() {
            let ms: Vec<Value> = mx.vecs.iter().map(|&v| self.b.use_var(v)).collect();
            let ss: Vec<Value> = vars.vecs.iter().map(|&v| self.b.use_var(v)).collect();
            // The shared `max` accumulator's result is this maximum, already computed.
            let shared = mx.shared.and_then(|j| self.globals[self.kernel.stages[si].accumulators[j].result.index()]);
            if let Some(v) = shared {
                m = v;
            } else {
                let mut vm = ms[0];
                for &o in &ms[1..] {
                    vm = self.combine(ReduceOp::Max, DType::F32, types::F32X4, vm, o);
                }
                for lane in 0..4u8 {
                    let l = self.b.ins().extractlane(vm, lane);
                    m = self.combine(ReduceOp::Max, DType::F32, types::F32, m, l);
                }
            }
            let mv = self.b.ins().splat(types::F32X4, m);
            let mut total: Option<Value> = None;
            for (&mi, &si) in ms.iter().zip(&ss) {
                let r = self.sum_exp_lanes(types::F32X4, |c, exp0| math::sum_exp_rescale(c, mi, si, mv, exp0));
                total = Some(match total {
                    Some(t) => self.b.ins().fadd(t, r),
                    None => r,
                });
            }
            let total = total.unwrap_or(mv);
            // The scalar tail runs only when the innermost extent may not be a multiple of 4;
            // otherwise its state stays (-inf, 0), which adds nothing.
            let inner = &self.kernel.stages[si].inner;
            let no_tail = inner.last().and_then(|e| e.as_const()).is_some_and(|e| e % 4 == 0);
            s = if no_tail {
                self.b.ins().f32const(0.0)
            } else {
                self.sum_exp_lanes(ty, |c, exp0| math::sum_exp_rescale(c, tail_m, tail_s, m, exp0))
            };
            for lane in 0..4u8 {
                let l = self.b.ins().extractlane(total, lane);
                s = self.b.ins().fadd(s, l);
            }
        }
        let mut count = self.b.ins().iconst(types::I64, 1);
        for extent in &self.kernel.stages[si].inner {
            let e = self.dim(extent);
            count = self.b.ins().imul(count, e);
        }
        let empty = self.b.ins().icmp_imm_s(IntCC::Equal, count, 0);
        let finite = op == ReduceOp::SumExpFinite;
        self.sum_exp_lanes(ty, |c, _| math::sum_exp_finish(c, m, s, empty, finite))
    }

    fn set_error(&mut self, cond: Value, code: i64) {
        if let Some(err) = self.err {
            let cur = self.b.use_var(err);
            let c = self.b.ins().iconst(types::I64, code);
            let next = self.b.ins().select(cond, c, cur);
            self.b.def_var(err, next);
        }
    }

    /// Emits one copy of a stage body; returns the registers it defined.
    fn body(
        &mut self,
        si: usize,
        mode: Mode,
        iv: Option<Value>,
        rows: &[Option<Row>],
        accs: &[AccVars],
    ) -> Result<Vec<Option<Value>>, CodegenError> {
        let kernel = self.kernel;
        let stage = &kernel.stages[si];
        let mut local: Vec<Option<Value>> = vec![None; self.kernel.n_regs as usize];
        // Each accumulator's value before this copy's update (for a `sumexp` sharing it).
        let mut pre: Vec<Option<Value>> = vec![None; stage.accumulators.len()];
        let vector = matches!(mode, Mode::Vector { .. });
        for (pos, instr) in stage.body.iter().enumerate() {
            let get = |g: &mut Self, local: &[Option<Value>], r: Reg| -> Value {
                if let Some(v) = local[r.index()] {
                    return v;
                }
                let v = g.globals[r.index()].unwrap_or_else(|| g.b.ins().iconst(types::I64, 0));
                if vector {
                    g.splat(g.ty(r), v)
                } else {
                    v
                }
            };
            let value = match instr {
                Instr::Load { dst, buf, .. } => {
                    let row = rows[pos].unwrap_or(Row {
                        ptr: self.bases[buf.index()].unwrap_or(self.begin),
                        stride: None,
                        elems: None,
                    });
                    let d = self.ty(*dst);
                    let addr = self.address(row, iv);
                    if vector && row.stride.is_some() && row.elems == Some(2) {
                        // Every other element (a stride-2 window): lanes 0 and 2 of the four
                        // at `addr`, and lanes 1 and 3 of the four at `addr + 3` elements, so
                        // no byte past the last element used is read.
                        let lo = self.b.ins().load(types::F32X4, flags(), addr, 0);
                        let hi = self.b.ins().load(types::F32X4, flags(), addr, 12);
                        Some(self.evens(lo, hi))
                    } else if vector && row.elems == Some(1) {
                        Some(self.b.ins().load(types::F32X4, flags(), addr, 0))
                    } else if let (true, Some(stride)) = (vector, row.stride) {
                        // Any other constant stride (a transposed read): the four lanes
                        // loaded one at a time, so the arithmetic after runs on vectors.
                        let mut v = self.b.ins().load(types::F32, flags(), addr, 0);
                        v = self.b.ins().scalar_to_vector(types::F32X4, v);
                        let mut at = addr;
                        for lane in 1..4u8 {
                            at = self.b.ins().iadd(at, stride);
                            let x = self.b.ins().load(types::F32, flags(), at, 0);
                            v = self.b.ins().insertlane(v, x, lane);
                        }
                        Some(v)
                    } else {
                        let v = self.b.ins().load(clif_type(d), flags(), addr, 0);
                        let v = if d == DType::Bool { self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0) } else { v };
                        Some(if vector { self.splat(d, v) } else { v })
                    }
                }
                Instr::LoadAt { dst, buf, index } => {
                    let d = self.ty(*dst);
                    let mut off = get(self, &local, *index);
                    if self.ty(*index) == DType::I32 {
                        off = self.b.ins().sextend(types::I64, off);
                    }
                    let numel = self.program.buffers[*buf].shape.numel().ok().and_then(|n| n.as_const());
                    if let Some(numel) = numel {
                        let bad = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, off, numel as i64);
                        self.set_error(bad, ERR_OUT_OF_BOUNDS);
                        let zero = self.b.ins().iconst(types::I64, 0);
                        off = self.b.ins().select(bad, zero, off);
                    }
                    let base = self.bases[buf.index()].unwrap_or(off);
                    let bytes = self.b.ins().imul_imm_s(off, d.size_bytes() as i64);
                    let addr = self.b.ins().iadd(base, bytes);
                    let v = self.b.ins().load(clif_type(d), flags(), addr, 0);
                    Some(if d == DType::Bool { self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0) } else { v })
                }
                Instr::Const { value, dtype, .. } => {
                    let v = self.constant(*value, *dtype);
                    Some(if vector { self.splat(*dtype, v) } else { v })
                }
                Instr::LoopVar { var, dtype, .. } => {
                    let innermost = Var::Inner(stage.inner.len().saturating_sub(1) as u32);
                    let is_innermost = !stage.inner.is_empty() && *var == innermost;
                    let raw = if is_innermost { iv } else { self.var_value(*var) };
                    let raw = match raw {
                        Some(v) => v,
                        None => self.b.ins().iconst(types::I64, 0),
                    };
                    if vector && is_innermost {
                        let lanes = self.b.ins().ireduce(types::I32, raw);
                        let lanes = self.b.ins().splat(types::I32X4, lanes);
                        let iota = self.iota();
                        let lanes = self.b.ins().iadd(lanes, iota);
                        Some(self.b.ins().fcvt_from_sint(types::F32X4, lanes))
                    } else {
                        let v = self.convert(DType::I64, *dtype, raw);
                        Some(if vector { self.splat(*dtype, v) } else { v })
                    }
                }
                Instr::Unary { op, x, dtype, .. } => {
                    let xv = get(self, &local, *x);
                    let t = self.ty(*x);
                    Some(if vector { self.vunary(*op, t, xv) } else { self.unary(*op, t, *dtype, xv) })
                }
                Instr::Binary { op, a, b, .. } => {
                    let (av, bv) = (get(self, &local, *a), get(self, &local, *b));
                    let t = self.ty(*a);
                    Some(if vector { self.vbinary(*op, t, av, bv) } else { self.binary(*op, t, av, bv) })
                }
                Instr::Select { cond, a, b, dtype, .. } => {
                    let (c, av, bv) = (get(self, &local, *cond), get(self, &local, *a), get(self, &local, *b));
                    Some(if vector {
                        if *dtype == DType::F32 {
                            let m = self.b.ins().bitcast(types::F32X4, MemFlagsData::new(), c);
                            self.b.ins().bitselect(m, av, bv)
                        } else {
                            self.b.ins().bitselect(c, av, bv)
                        }
                    } else {
                        self.b.ins().select(c, av, bv)
                    })
                }
                Instr::Convert { x, dtype, .. } => {
                    let xv = get(self, &local, *x);
                    let t = self.ty(*x);
                    Some(if vector { self.vconvert(t, *dtype, xv) } else { self.convert(t, *dtype, xv) })
                }
                Instr::Accumulate { acc, x, index } => {
                    let xv = get(self, &local, *x);
                    let a = &stage.accumulators[*acc as usize];
                    let vars = &accs[*acc as usize];
                    if let Some(mx) = &vars.max {
                        self.sum_exp_accumulate(a.dtype, vars, mx, mode, xv, &pre)?;
                    } else if let Mode::Vector { slot } = mode {
                        let cur = self.b.use_var(vars.vecs[slot]);
                        pre[*acc as usize] = Some(cur);
                        let next = self.combine(a.op, DType::F32, types::F32X4, cur, xv);
                        self.b.def_var(vars.vecs[slot], next);
                    } else if a.op == ReduceOp::Argmax {
                        let pos_v = index.map(|i| get(self, &local, i)).unwrap_or(xv);
                        self.argmax(a.dtype, vars, xv, pos_v);
                    } else {
                        let cur = self.b.use_var(vars.val);
                        pre[*acc as usize] = Some(cur);
                        let next = self.combine(a.op, a.dtype, clif_type(a.dtype), cur, xv);
                        self.b.def_var(vars.val, next);
                    }
                    None
                }
                Instr::Store { buf, value, .. } => {
                    let v = get(self, &local, *value);
                    let row = rows[pos].unwrap_or(Row {
                        ptr: self.bases[buf.index()].unwrap_or(self.begin),
                        stride: None,
                        elems: None,
                    });
                    let addr = self.address(row, iv);
                    if let (true, false, Some(stride)) = (vector, row.elems == Some(1), row.stride) {
                        // Any other constant stride (a transposed write): the four lanes
                        // stored one at a time, in lane order.
                        let mut at = addr;
                        for lane in 0..4u8 {
                            if lane > 0 {
                                at = self.b.ins().iadd(at, stride);
                            }
                            let x = self.b.ins().extractlane(v, lane);
                            self.b.ins().store(flags(), x, at, 0);
                        }
                    } else {
                        self.b.ins().store(flags(), v, addr, 0);
                    }
                    None
                }
            };
            if let (Some(dst), Some(v)) = (instr.dst(), value) {
                local[dst.index()] = Some(v);
            }
        }
        Ok(local)
    }

    fn address(&mut self, row: Row, iv: Option<Value>) -> Value {
        match (row.stride, iv) {
            (Some(stride), Some(iv)) => {
                let off = self.b.ins().imul(iv, stride);
                self.b.ins().iadd(row.ptr, off)
            }
            _ => row.ptr,
        }
    }

    /// `[lo[0], lo[2], hi[1], hi[3]]` of two F32X4 vectors.
    fn evens(&mut self, lo: Value, hi: Value) -> Value {
        let mask: Vec<u8> = [0u8, 2, 5, 7].iter().flat_map(|&lane| (0..4).map(move |b| lane * 4 + b)).collect();
        let mask = self.b.func.dfg.immediates.push(mask.into());
        // A bitcast that changes the lane count names its byte order; every target ladder
        // compiles for (x86-64, aarch64) is little-endian.
        let order = MemFlagsData::new().with_endianness(Endianness::Little);
        let bytes = |g: &mut Self, v: Value| g.b.ins().bitcast(types::I8X16, order, v);
        let (lo, hi) = (bytes(self, lo), bytes(self, hi));
        let picked = self.b.ins().shuffle(lo, hi, mask);
        self.b.ins().bitcast(types::F32X4, order, picked)
    }

    fn iota(&mut self) -> Value {
        let bytes: Vec<u8> = [0i32, 1, 2, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(bytes.into());
        self.b.ins().vconst(types::I32X4, c)
    }

    /// A scalar of dtype `d` as a vector lane value: F32X4 for f32, an I32X4 mask for bool.
    fn splat(&mut self, d: DType, v: Value) -> Value {
        if d == DType::Bool {
            let m = self.b.ins().sextend(types::I32, v);
            let m = self.b.ins().ineg(m);
            self.b.ins().splat(types::I32X4, m)
        } else {
            self.b.ins().splat(types::F32X4, v)
        }
    }

    fn constant(&mut self, value: Scalar, d: DType) -> Value {
        let as_f64 = match value {
            Scalar::Float(x) => x,
            Scalar::Int(i) => i as f64,
            Scalar::Bool(b) => b as u8 as f64,
        };
        let as_i64 = match value {
            Scalar::Float(x) => crate::interp::float_to_int_as(d, x),
            Scalar::Int(i) => i,
            Scalar::Bool(b) => b as i64,
        };
        let ins = self.b.ins();
        match d {
            DType::F32 => ins.f32const(as_f64 as f32),
            DType::F64 => ins.f64const(as_f64),
            DType::I32 => ins.iconst(types::I32, as_i64 as i32 as i64),
            DType::I64 => ins.iconst(types::I64, as_i64),
            _ => ins.iconst(types::I8, (as_f64 != 0.0) as i64),
        }
    }

    fn argmax(&mut self, d: DType, vars: &AccVars, x: Value, pos: Value) {
        let (Some(idx), Some(seen)) = (vars.idx, vars.seen) else { return };
        let best = self.b.use_var(vars.val);
        let seen_v = self.b.use_var(seen);
        let better = if d.is_float() {
            let best_ok = self.b.ins().fcmp(FloatCC::Ordered, best, best);
            let x_nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
            let gt = self.b.ins().fcmp(FloatCC::GreaterThan, x, best);
            let g = self.b.ins().bor(x_nan, gt);
            self.b.ins().band(best_ok, g)
        } else {
            self.b.ins().icmp(IntCC::SignedGreaterThan, x, best)
        };
        let first = self.b.ins().icmp_imm_s(IntCC::Equal, seen_v, 0);
        let take = self.b.ins().bor(first, better);
        let nb = self.b.ins().select(take, x, best);
        self.b.def_var(vars.val, nb);
        let cur = self.b.use_var(idx);
        let ni = self.b.ins().select(take, pos, cur);
        self.b.def_var(idx, ni);
        let one = self.b.ins().iconst(types::I8, 1);
        self.b.def_var(seen, one);
    }

    fn call_f64(&mut self, f: extern "C" fn(f64) -> f64, x: Value) -> Value {
        call_unary(&mut self.b, self.target.call_conv, f as *const () as usize, types::F64, x)
    }

    /// A scalar unary op on `t` giving `out`.
    fn unary(&mut self, op: OpKind, t: DType, out: DType, x: Value) -> Value {
        use OpKind::*;
        let _ = out;
        if t == DType::Bool {
            return match op {
                LogicalNot => self.b.ins().bxor_imm_s(x, 1),
                _ => self.b.ins().iconst(types::I8, 0),
            };
        }
        if t.is_int() {
            let ty = clif_type(t);
            return match op {
                Neg => self.b.ins().ineg(x),
                Abs => {
                    let n = self.b.ins().ineg(x);
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                    self.b.ins().select(neg, n, x)
                }
                Sign => {
                    let pos = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, x, 0);
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
                    let pos = self.b.ins().uextend(ty, pos);
                    let neg = self.b.ins().uextend(ty, neg);
                    self.b.ins().isub(pos, neg)
                }
                LogicalNot => self.b.ins().icmp_imm_s(IntCC::Equal, x, 0),
                IsNan => self.b.ins().iconst(types::I8, 0),
                _ => x, // floor, ceil, round: identity on integers
            };
        }
        let ty = clif_type(t);
        match op {
            IsNan => return self.b.ins().fcmp(FloatCC::Unordered, x, x),
            LogicalNot => {
                let zero = if t == DType::F32 { self.b.ins().f32const(0.0) } else { self.b.ins().f64const(0.0) };
                return self.b.ins().fcmp(FloatCC::Equal, x, zero);
            }
            _ => {}
        }
        if t == DType::F64 {
            let f: Option<extern "C" fn(f64) -> f64> = match op {
                Exp => Some(f64_exp),
                Exp2 => Some(f64_exp2),
                Log => Some(f64_ln),
                Log1p => Some(f64_ln_1p),
                Expm1 => Some(f64_exp_m1),
                Sin => Some(f64_sin),
                Cos => Some(f64_cos),
                Tanh => Some(f64_tanh),
                Erf => Some(f64_erf),
                _ => None,
            };
            if let Some(f) = f {
                return self.call_f64(f, x);
            }
        }
        let mut c = Clif::new(&mut self.b, ty, self.target.fma, self.target.call_conv);
        float_unary(&mut c, op, x)
    }

    fn vunary(&mut self, op: OpKind, t: DType, x: Value) -> Value {
        use OpKind::*;
        match (op, t) {
            (IsNan, _) => self.b.ins().fcmp(FloatCC::Unordered, x, x),
            (LogicalNot, DType::Bool) => self.b.ins().bnot(x),
            (LogicalNot, _) => {
                let zero = self.b.ins().f32const(0.0);
                let zero = self.b.ins().splat(types::F32X4, zero);
                self.b.ins().fcmp(FloatCC::Equal, x, zero)
            }
            _ => {
                let mut c = Clif::new(&mut self.b, types::F32X4, self.target.fma, self.target.call_conv);
                float_unary(&mut c, op, x)
            }
        }
    }

    fn binary(&mut self, op: OpKind, t: DType, a: Value, b: Value) -> Value {
        use OpKind::*;
        if t.is_float() {
            let ty = clif_type(t);
            if is_comparison(op) {
                return self.b.ins().fcmp(float_compare(op), a, b);
            }
            return match op {
                Add => self.b.ins().fadd(a, b),
                Sub => self.b.ins().fsub(a, b),
                Mul => self.b.ins().fmul(a, b),
                Div => self.b.ins().fdiv(a, b),
                Max | Min => self.max_min(ty, a, b, op == Max),
                Rem if t == DType::F32 => {
                    call(&mut self.b, self.target.call_conv, f32_rem as *const () as usize, &[ty, ty], ty, &[a, b])
                }
                Rem => call(&mut self.b, self.target.call_conv, f64_rem as *const () as usize, &[ty, ty], ty, &[a, b]),
                Pow if t == DType::F32 => {
                    let a64 = self.b.ins().fpromote(types::F64, a);
                    let b64 = self.b.ins().fpromote(types::F64, b);
                    let mut c = Clif::new(&mut self.b, types::F64, self.target.fma, self.target.call_conv);
                    let r = math::pow64(&mut c, a64, b64);
                    self.b.ins().fdemote(types::F32, r)
                }
                _ => call(&mut self.b, self.target.call_conv, f64_pow as *const () as usize, &[ty, ty], ty, &[a, b]),
            };
        }
        if t.is_bool() {
            return match op {
                And => self.b.ins().band(a, b),
                Or => self.b.ins().bor(a, b),
                _ => self.b.ins().icmp(int_compare(op, false), a, b),
            };
        }
        let ty = clif_type(t);
        if is_comparison(op) {
            return self.b.ins().icmp(int_compare(op, true), a, b);
        }
        match op {
            Add => self.b.ins().iadd(a, b),
            Sub => self.b.ins().isub(a, b),
            Mul => self.b.ins().imul(a, b),
            Max => self.b.ins().smax(a, b),
            Min => self.b.ins().smin(a, b),
            Div | Rem => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                let unsafe_divisor = self.b.ins().bor(zero, minus_one);
                let one = self.b.ins().iconst(ty, 1);
                let safe = self.b.ins().select(unsafe_divisor, one, b);
                self.set_error(zero, ERR_DIV_ZERO);
                if op == Div {
                    let q = self.b.ins().sdiv(a, safe);
                    let neg = self.b.ins().ineg(a);
                    self.b.ins().select(minus_one, neg, q)
                } else {
                    let r = self.b.ins().srem(a, safe);
                    let z = self.b.ins().iconst(ty, 0);
                    self.b.ins().select(minus_one, z, r)
                }
            }
            _ => {
                // pow: the reference's wrapping integer power, by call.
                let (a64, b64) = if t == DType::I32 {
                    (self.b.ins().sextend(types::I64, a), self.b.ins().sextend(types::I64, b))
                } else {
                    (a, b)
                };
                let r = call(
                    &mut self.b,
                    self.target.call_conv,
                    i64_pow as *const () as usize,
                    &[types::I64, types::I64],
                    types::I64,
                    &[a64, b64],
                );
                if t == DType::I32 {
                    self.b.ins().ireduce(types::I32, r)
                } else {
                    r
                }
            }
        }
    }

    fn vbinary(&mut self, op: OpKind, t: DType, a: Value, b: Value) -> Value {
        use OpKind::*;
        if t == DType::Bool {
            return if op == And { self.b.ins().band(a, b) } else { self.b.ins().bor(a, b) };
        }
        if is_comparison(op) {
            return self.b.ins().fcmp(float_compare(op), a, b);
        }
        match op {
            Add => self.b.ins().fadd(a, b),
            Sub => self.b.ins().fsub(a, b),
            Mul => self.b.ins().fmul(a, b),
            Div => self.b.ins().fdiv(a, b),
            _ => self.max_min(types::F32X4, a, b, op == Max),
        }
    }

    /// `max` (or `min`) of floats of type `ty`: with a constant operand that allows it
    /// ([`math::max_min_const`]: relu, clamps) one compare-select and a NaN check, else the
    /// general sequence.
    fn max_min(&mut self, ty: Type, a: Value, b: Value, max: bool) -> Value {
        // Not NaN, and not the zero that must lose to the other sign (-0 for max, +0 for min).
        let usable = |c: f64| !(c.is_nan() || (c == 0.0 && c.is_sign_negative() == max));
        let (x, k) = match (self.known_float(a), self.known_float(b)) {
            (_, Some(c)) if usable(c) => (a, Some(b)),
            (Some(c), _) if usable(c) => (b, Some(a)),
            _ => (a, None),
        };
        let mut c = Clif::new(&mut self.b, ty, self.target.fma, self.target.call_conv);
        match k {
            Some(k) => math::max_min_const(&mut c, x, k, max),
            None => math::max_min(&mut c, a, b, max),
        }
    }

    /// The value of `v` when it is a float constant (or a splat of one) in the function.
    fn known_float(&self, v: Value) -> Option<f64> {
        use cranelift_codegen::ir::{InstructionData, Opcode, ValueDef};
        let dfg = &self.b.func.dfg;
        let ValueDef::Result(inst, _) = dfg.value_def(v) else { return None };
        match dfg.insts[inst] {
            InstructionData::UnaryIeee32 { opcode: Opcode::F32const, imm } => Some(f32::from_bits(imm.bits()) as f64),
            InstructionData::UnaryIeee64 { opcode: Opcode::F64const, imm } => Some(f64::from_bits(imm.bits())),
            InstructionData::Unary { opcode: Opcode::Splat, arg } => self.known_float(arg),
            _ => None,
        }
    }

    /// Scalar conversion with the reference's meaning (floats round to nearest; float → int
    /// truncates and saturates, NaN → 0; int → int wraps; → bool is `!= 0`).
    fn convert(&mut self, from: DType, to: DType, x: Value) -> Value {
        if from == to {
            return x;
        }
        let ins = self.b.ins();
        match (from, to) {
            (DType::F32, DType::F64) => ins.fpromote(types::F64, x),
            (DType::F64, DType::F32) => ins.fdemote(types::F32, x),
            (f, DType::Bool) if f.is_float() => {
                let zero = if f == DType::F32 { ins.f32const(0.0) } else { ins.f64const(0.0) };
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            (_, DType::Bool) => ins.icmp_imm_s(IntCC::NotEqual, x, 0),
            (f, t) if f.is_float() => ins.fcvt_to_sint_sat(clif_type(t), x),
            (DType::Bool, t) if t.is_float() => {
                let i = ins.uextend(types::I32, x);
                self.b.ins().fcvt_from_sint(clif_type(t), i)
            }
            (DType::Bool, t) => ins.uextend(clif_type(t), x),
            // i64 → f32 goes through f64, as the reference does.
            (DType::I64, DType::F32) => {
                let d = ins.fcvt_from_sint(types::F64, x);
                self.b.ins().fdemote(types::F32, d)
            }
            (_, t) if t.is_float() => ins.fcvt_from_sint(clif_type(t), x),
            (DType::I32, DType::I64) => ins.sextend(types::I64, x),
            (DType::I64, DType::I32) => ins.ireduce(types::I32, x),
            _ => x,
        }
    }

    fn vconvert(&mut self, from: DType, to: DType, x: Value) -> Value {
        match (from, to) {
            (DType::Bool, DType::F32) => {
                let one = self.b.ins().f32const(1.0);
                let one = self.b.ins().splat(types::F32X4, one);
                let m = self.b.ins().bitcast(types::F32X4, MemFlagsData::new(), x);
                self.b.ins().band(m, one)
            }
            (DType::F32, DType::Bool) => {
                let zero = self.b.ins().f32const(0.0);
                let zero = self.b.ins().splat(types::F32X4, zero);
                self.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            }
            _ => x,
        }
    }
}

fn float_compare(op: OpKind) -> FloatCC {
    match op {
        OpKind::Eq => FloatCC::Equal,
        OpKind::Ne => FloatCC::NotEqual,
        OpKind::Lt => FloatCC::LessThan,
        OpKind::Le => FloatCC::LessThanOrEqual,
        OpKind::Gt => FloatCC::GreaterThan,
        _ => FloatCC::GreaterThanOrEqual,
    }
}

fn int_compare(op: OpKind, signed: bool) -> IntCC {
    match (op, signed) {
        (OpKind::Eq, _) => IntCC::Equal,
        (OpKind::Ne, _) => IntCC::NotEqual,
        (OpKind::Lt, true) => IntCC::SignedLessThan,
        (OpKind::Le, true) => IntCC::SignedLessThanOrEqual,
        (OpKind::Gt, true) => IntCC::SignedGreaterThan,
        (OpKind::Ge, true) => IntCC::SignedGreaterThanOrEqual,
        (OpKind::Lt, false) => IntCC::UnsignedLessThan,
        (OpKind::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (OpKind::Gt, false) => IntCC::UnsignedGreaterThan,
        _ => IntCC::UnsignedGreaterThanOrEqual,
    }
}

/// A float unary op through the shared approximations (scalar f32/f64 or F32X4).
fn float_unary(c: &mut Clif<'_, '_>, op: OpKind, x: Value) -> Value {
    use OpKind::*;
    match op {
        Neg => c.neg(x),
        Abs => c.abs(x),
        Sqrt => c.b.ins().sqrt(x),
        Rsqrt => {
            let s = c.b.ins().sqrt(x);
            let one = c.f(1.0);
            c.div(one, s)
        }
        Reciprocal => {
            let one = c.f(1.0);
            c.div(one, x)
        }
        Floor => c.b.ins().floor(x),
        Ceil => c.b.ins().ceil(x),
        Round => c.round(x),
        Sign => math::sign(c, x),
        Exp => math::exp(c, x),
        Exp2 => math::exp2(c, x),
        Log => math::log(c, x),
        Log1p => math::log1p(c, x),
        Expm1 => math::expm1(c, x),
        Sin => math::sin(c, x),
        Cos => math::cos(c, x),
        Tanh => math::tanh(c, x),
        Erf => math::erf(c, x),
        // `analyze` admits no other unary float op.
        _ => x,
    }
}

// The reference's f64 functions, called per element by f64 kernels (and float `rem`, integer
// `pow`): exact by construction.
extern "C" fn f64_exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn f64_exp2(x: f64) -> f64 {
    x.exp2()
}
extern "C" fn f64_ln(x: f64) -> f64 {
    x.ln()
}
extern "C" fn f64_ln_1p(x: f64) -> f64 {
    x.ln_1p()
}
extern "C" fn f64_exp_m1(x: f64) -> f64 {
    x.exp_m1()
}
extern "C" fn f64_sin(x: f64) -> f64 {
    x.sin()
}
extern "C" fn f64_cos(x: f64) -> f64 {
    x.cos()
}
extern "C" fn f64_tanh(x: f64) -> f64 {
    x.tanh()
}
extern "C" fn f64_erf(x: f64) -> f64 {
    libm::erf(x)
}
extern "C" fn f64_pow(a: f64, b: f64) -> f64 {
    a.powf(b)
}
extern "C" fn f64_rem(a: f64, b: f64) -> f64 {
    a % b
}
extern "C" fn f32_rem(a: f32, b: f32) -> f32 {
    a % b
}
extern "C" fn i64_pow(a: i64, b: i64) -> i64 {
    match crate::ops::elementwise::binary_int(OpKind::Pow, DType::I64, a, b) {
        Ok(v) => v,
        Err(_) => {
            super::record_kernel_error(ERR_DIV_ZERO);
            0
        }
    }
}
