//! Kernel IR to SPIR-V: one compute shader per generated kernel.
//!
//! A shader invocation computes one point of the kernel's outer loops: the invocation's flat
//! index (`x + y * groups_x * LOCAL_SIZE`, so a dispatch can pass the 65,535-group limit in
//! `x`) is split row-major into the outer loop variables, and an invocation past the last
//! point returns. The stages follow in order, each a nest of structured loops around its
//! body, exactly as the reference executor (`crate::kernel::eval`) runs them: accumulation
//! is sequential in row-major order of the inner loops, so sums round as there.
//!
//! Bindings, all in descriptor set 0: the program buffers the kernel loads or stores, in the
//! order of [`Shader::buffers`] (a runtime array of the buffer's element type each), then
//! the kernel's evaluated size table (i64, in [`PreparedKernel`]'s slot order, followed by
//! the element count of each bound buffer, for the computed loads' checks), then a status
//! word that the shader sets to a [`Status`] code on a run-time error it finds (a computed
//! load outside its buffer, an integer division by zero); the host reads it after the run.
//! Affine loads and stores are checked on the host before the dispatch
//! ([`PreparedKernel::check`]), as for the CPU's compiled kernels.
//!
//! Meanings follow the prims: `max`/`min` propagate NaN and order `-0 < +0`, float to
//! integer conversion saturates (NaN to 0), integer arithmetic wraps, `x / -1` and `x % -1`
//! do not trap, float `rem` is C's `fmod`, exactly (a loop of exact subtractions: the
//! device's `OpFRem` is not). The transcendentals (`exp`, `exp2`, `log`, `log1p`, `expm1`,
//! `tanh`, `erf`, `sin`, `cos`) are the CPU backend's approximations, emitted through their
//! `Arith` (`arith.rs`); `sqrt`, division and the f64 to f32 conversion are the device's.
//! Float constants reach the driver only as `bitcast(bits ^ zero)` with a run-time zero
//! (`finish.rs`): lavapipe folds arithmetic on known zeros without regard to NaN, infinities
//! and signed zeros.
//!
//! Integers of every width: i8, i16, u8 and u16 registers are i32 holding the value (sign- or
//! zero-extended, wrapped to the dtype after each operation that can leave its range), u32
//! registers are i64 holding the value, u64 registers i64 holding the bits (compared, divided,
//! converted as unsigned). Bool, 8- and 16-bit buffers are packed into 32-bit words, four or
//! two to a word, with loads extracting their bits and stores going through two atomics, so
//! invocations writing the other elements of a word keep theirs. `and` and `or` on integers
//! are bitwise. f16 and bf16 registers are f32 values on the type's grid, each result
//! rounded back to it (`memory.rs`); from f64 they round once (through f32 rounded to odd).
//!
//! f64 where the device has `shaderFloat64` (optional in Vulkan; `Context::float64`): the
//! exact operations, reductions, conversions, and `exp` and `log` by `math64`'s
//! approximations (within 1 ULP); the other f64 transcendentals, and f64 anywhere on a device
//! without it, are declined with the reason, as is any dtype or op this lowering does not
//! have. f32 `pow` with an integer exponent of -4 to 4 is repeated products (GPT-2's `x³`);
//! another exponent is `pow64` in f64, as on the CPU, where the device has f64, and without it
//! a run-time error. Integer `pow` is exact (wrapping, as the reference's).

use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use std::collections::HashMap;

use rspirv::binary::Assemble;
use rspirv::dr::{Builder, Operand};
use rspirv::spirv::{self, Word};

use crate::backend::Declined;
use crate::ir::DType;
use crate::kernel::eval::PreparedKernel;
use cranelift_entity::EntityRef;

use crate::kernel::{BufferId, Index, Instr, Kernel, Program, ReduceOp, Reg, Scalar, Stage, Var};
use crate::ops::OpKind;

mod bindings;
mod finish;
mod flow;
mod memory;
mod scalar;

use bindings::Base;
pub use bindings::{Binding, Placement, Pool};
use finish::{declare_f64, define_opaque, hoist_variables, no_contraction, Opaque};

/// Invocations per workgroup.
pub const LOCAL_SIZE: u32 = 64;

/// What the status word holds after a run (0: no error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    /// A computed load (`LoadAt`) fell outside its buffer.
    OutOfBounds = 1,
    /// An integer division or remainder by zero.
    DivisionByZero = 2,
    /// An f32 `pow` whose exponent is not an integer of -4 to 4, on a device without f64.
    Exponent = 3,
}

/// A kernel lowered to a compute shader.
pub struct Shader {
    /// The SPIR-V module (version 1.3), entry point `main`.
    pub words: Vec<u32>,
    /// The program buffers the kernel reads and writes; the size table holds each one's
    /// element count, in this order, after the kernel's sizes, and then each one's first
    /// element in the run's arena (read for arena members only: [`Placement::arena`]).
    pub buffers: Vec<BufferId>,
    /// What is bound at bindings `0..bindings.len()`; the size table is at `bindings.len()`,
    /// the status word at `bindings.len() + 1`.
    pub bindings: Vec<Binding>,
    /// The pools of constants that [`Binding::Pool`] names (`bindings.rs`).
    pub pools: Vec<Pool>,
    /// The kernel checked against the program: its size table and the host-side checks.
    pub prepared: PreparedKernel,
    /// The size table slots of the outer loops' extents.
    pub outer: Vec<usize>,
}

impl Shader {
    /// The invocations a run with the evaluated size table `dims` needs: the points of the
    /// outer loops (saturating).
    pub fn points(&self, dims: &[i64]) -> i64 {
        self.outer.iter().fold(1i64, |n, &s| n.saturating_mul(dims[s].max(0)))
    }
}

/// Lowers `kernel` of `program`, or says why it cannot.
/// `float64`: whether the device computes in f64 (kernels in f64 are declined without it; with
/// it, f32 `pow` with a general exponent is computed in f64 as the CPU's is). `place`: which
/// constants share pooled bindings and which buffers live in the run's arena (`bindings.rs`).
pub fn lower(kernel: &Kernel, program: &Program, float64: bool, place: &Placement) -> Result<Shader, Declined> {
    if kernel.activation.is_some() {
        return Err(Declined::Unsupported("a library activation after the kernel".into()));
    }
    let prepared = PreparedKernel::new(kernel, program).map_err(Declined::Defect)?;
    let mut cx = Cx::new(kernel, program, &prepared, float64, place)?;
    cx.emit()?;
    if let Some(e) = cx.err.take() {
        return Err(e);
    }
    let buffers = cx.buffers.iter().map(|b| b.id).collect();
    let (bindings, pools) = (std::mem::take(&mut cx.bindings), std::mem::take(&mut cx.pools));
    let outer = kernel.outer.iter().map(|d| cx.slot(d)).collect::<Result<_, _>>()?;
    let (t_f64, main) = (cx.t_f64, cx.main);
    let opaque = std::mem::take(&mut cx.opaque);
    let mut module = cx.b.module();
    define_opaque(&mut module, &opaque)?;
    declare_f64(&mut module, t_f64, main);
    hoist_variables(&mut module);
    no_contraction(&mut module);
    Ok(Shader { words: module.assemble(), buffers, bindings, pools, prepared, outer })
}

fn unsupported(what: impl Into<String>) -> Declined {
    Declined::Unsupported(what.into())
}

/// The bits of one element of `dt` where its buffer packs several into a 32-bit word.
fn packed_bits(dt: DType) -> Option<u32> {
    match dt {
        DType::Bool | DType::I8 | DType::U8 => Some(8),
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => Some(16),
        _ => None,
    }
}

/// The bytes of one storage element of a `dt` buffer: a 32-bit word where several elements
/// share one (and for u32), else the element itself; offsets in a binding count these.
pub fn storage_stride(dt: DType) -> u32 {
    if packed_bits(dt).is_some() || dt == DType::U32 {
        4
    } else {
        dt.size_bytes() as u32
    }
}

/// Whether `dt`'s registers are 64-bit (`i64`; otherwise `i32`, or f32 and bool).
fn wide(dt: DType) -> bool {
    matches!(dt, DType::I64 | DType::U32 | DType::U64)
}

struct Bound {
    id: BufferId,
    dtype: DType,
    var: Word,
    elem_ptr: Word,
    /// Its first element in the binding (non-zero in a pool of constants; in the arena, read
    /// from the size table into `base_word` at the start).
    base: Base,
    base_word: Option<Word>,
}

/// State of one accumulator while its stage runs.
#[derive(Clone, Copy)]
struct AccVars {
    /// The running value (for sum-exp: the sum of the second pass).
    value: Word,
    /// Argmax: the best position. Sum-exp: the running maximum of the first pass.
    aux: Word,
    /// Argmax: whether a value was fed.
    seen: Word,
    /// Sum-exp: the shift `c` of the second pass, once known.
    shift: Option<Word>,
}

/// Which of a sum-exp stage's two passes is being emitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// A stage without sum-exp accumulators: everything at once.
    Only,
    /// The first pass: every accumulator but the sum-exp ones, which take their maximum.
    Max,
    /// The second pass: only the sum-exp accumulators, which sum `exp(x - c)`.
    Sum,
}

/// The lowering of one kernel (also the [`crate::backend::cpu::math::Arith`] the shared
/// approximations are emitted through: `arith.rs`).
pub(super) struct Cx<'a> {
    kernel: &'a Kernel,
    program: &'a Program,
    prepared: &'a PreparedKernel,
    pub(super) b: Builder,
    glsl: Word,
    t_void: Word,
    pub(super) t_bool: Word,
    pub(super) t_f32: Word,
    pub(super) t_i32: Word,
    t_i64: Word,
    /// The f64 type's id, declared (with its capability) only where used: `declare_f64`.
    pub(super) t_f64: Word,
    /// Whether the device computes in f64.
    float64: bool,
    /// The `Arith` methods compute in f64 and i64 (not f32 and i32) while set.
    pub(super) arith64: bool,
    main: Word,
    /// Run-time zeros (u32 and u64) and the float constants made from them.
    zero32: Word,
    zero64: Word,
    opaque: Vec<Opaque>,
    t_u32: Word,
    t_u64: Word,
    consts: HashMap<(u8, u64), Word>,
    buffers: Vec<Bound>,
    bindings: Vec<Binding>,
    pools: Vec<Pool>,
    dims_var: Word,
    dims_elem_ptr: Word,
    status_var: Word,
    status_elem_ptr: Word,
    /// Every register's dtype.
    reg_dtype: Vec<Option<DType>>,
    /// The SSA value of each register where it is defined.
    regs: Vec<Option<Word>>,
    /// Size table slots loaded at the start (i64), by slot.
    dims: Vec<Word>,
    outer: Vec<Word>,
    inner: Vec<Word>,
    /// The first builder error met inside an `Arith` method (which cannot return one).
    pub(super) err: Option<Declined>,
}

impl<'a> Cx<'a> {
    fn new(
        kernel: &'a Kernel,
        program: &'a Program,
        prepared: &'a PreparedKernel,
        float64: bool,
        place: &Placement,
    ) -> Result<Cx<'a>, Declined> {
        let mut b = Builder::new();
        b.set_version(1, 3);
        b.capability(spirv::Capability::Shader);
        b.capability(spirv::Capability::Int64);
        // NaN, infinities and signed zeros are values the prims define: without this mode a
        // driver may assume they never occur (and fold `x - x` to 0).
        b.capability(spirv::Capability::SignedZeroInfNanPreserve);
        b.extension("SPV_KHR_float_controls");
        let glsl = b.ext_inst_import("GLSL.std.450");
        b.memory_model(spirv::AddressingModel::Logical, spirv::MemoryModel::GLSL450);
        let t_void = b.type_void();
        let t_bool = b.type_bool();
        let t_f32 = b.type_float(32);
        let t_i32 = b.type_int(32, 1);
        let t_i64 = b.type_int(64, 1);
        let t_u32 = b.type_int(32, 0);
        let t_u64 = b.type_int(64, 0);
        let t_f64 = b.id();
        let mut cx = Cx {
            kernel,
            program,
            prepared,
            b,
            glsl,
            t_void,
            t_bool,
            t_f32,
            t_i32,
            t_i64,
            t_f64,
            float64,
            arith64: false,
            main: 0,
            zero32: 0,
            zero64: 0,
            opaque: Vec::new(),
            t_u32,
            t_u64,
            consts: HashMap::new(),
            buffers: Vec::new(),
            bindings: Vec::new(),
            pools: Vec::new(),
            dims_var: 0,
            dims_elem_ptr: 0,
            status_var: 0,
            status_elem_ptr: 0,
            reg_dtype: vec![None; kernel.n_regs as usize],
            regs: vec![None; kernel.n_regs as usize],
            dims: Vec::new(),
            outer: Vec::new(),
            inner: Vec::new(),
            err: None,
        };
        cx.type_registers()?;
        // Buffers in first-use order, then the size table and the status word.
        let mut used: Vec<BufferId> = Vec::new();
        kernel.for_each_buffer(&mut |b| {
            if !used.contains(&b) {
                used.push(b);
            }
        });
        for &id in &used {
            let dtype = program.buffers[id].dtype;
            if cx.check_dtype(dtype).is_err() {
                return Err(unsupported(format!("a {dtype} buffer on the device ({id})")));
            }
        }
        // Bools (bytes, 0 or 1) and 8- and 16-bit integers are packed into 32-bit words, u32 is
        // a word of its own (`load_elem`, `store_elem`): the storage element and its stride.
        let storage = |cx: &Cx, dtype: DType| {
            let elem = if packed_bits(dtype).is_some() || dtype == DType::U32 { t_u32 } else { cx.ty(dtype) };
            (elem, storage_stride(dtype))
        };
        let bindings::Planned { bindings, pools, at } = bindings::plan(&used, program, place, |dt| storage(&cx, dt));
        let mut vars = Vec::with_capacity(bindings.len());
        for (binding, &(_, dtype)) in bindings.iter().enumerate() {
            let (elem, stride) = storage(&cx, dtype);
            vars.push(cx.storage_array(elem, stride, binding as u32));
        }
        for (&id, &(binding, base)) in used.iter().zip(&at) {
            let (var, elem_ptr) = vars[binding];
            let dtype = program.buffers[id].dtype;
            cx.buffers.push(Bound { id, dtype, var, elem_ptr, base, base_word: None });
        }
        let n = bindings.len() as u32;
        (cx.bindings, cx.pools) = (bindings.into_iter().map(|(b, _)| b).collect(), pools);
        (cx.dims_var, cx.dims_elem_ptr) = cx.storage_array(t_i64, 8, n);
        (cx.status_var, cx.status_elem_ptr) = cx.storage_array(t_u32, 4, n + 1);
        Ok(cx)
    }

    /// A storage buffer `struct { T data[]; }` at `binding`: its variable and the pointer type
    /// of one element.
    fn storage_array(&mut self, elem: Word, stride: u32, binding: u32) -> (Word, Word) {
        let arr = self.b.type_runtime_array(elem);
        // Distinct array and struct types per binding: decorations attach to a type once.
        let arr = if self.b.module_ref().annotations.iter().any(|a| decorates(a, arr)) {
            let fresh = self.b.id();
            self.b.module_mut().types_global_values.push(rspirv::dr::Instruction::new(
                spirv::Op::TypeRuntimeArray,
                None,
                Some(fresh),
                vec![Operand::IdRef(elem)],
            ));
            fresh
        } else {
            arr
        };
        self.b.decorate(arr, spirv::Decoration::ArrayStride, [Operand::LiteralBit32(stride)]);
        let st = self.b.id();
        self.b.module_mut().types_global_values.push(rspirv::dr::Instruction::new(
            spirv::Op::TypeStruct,
            None,
            Some(st),
            vec![Operand::IdRef(arr)],
        ));
        self.b.decorate(st, spirv::Decoration::Block, []);
        self.b.member_decorate(st, 0, spirv::Decoration::Offset, [Operand::LiteralBit32(0)]);
        let ptr = self.b.type_pointer(None, spirv::StorageClass::StorageBuffer, st);
        let var = self.b.variable(ptr, None, spirv::StorageClass::StorageBuffer, None);
        self.b.decorate(var, spirv::Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        self.b.decorate(var, spirv::Decoration::Binding, [Operand::LiteralBit32(binding)]);
        let elem_ptr = self.b.type_pointer(None, spirv::StorageClass::StorageBuffer, elem);
        (var, elem_ptr)
    }

    /// Element types a shader can hold in a register.
    fn check_dtype(&self, dt: DType) -> Result<(), Declined> {
        let held = dt == DType::F32 || dt == DType::Bool || dt.is_int() || memory::is_half(dt);
        if held || (dt == DType::F64 && self.float64) {
            Ok(())
        } else if dt == DType::F64 {
            Err(unsupported("dtype f64 on the device (it has no shaderFloat64)"))
        } else {
            Err(unsupported(format!("dtype {dt} on the device")))
        }
    }

    /// Every register's dtype, from its definition; declines dtypes the device lacks.
    fn type_registers(&mut self) -> Result<(), Declined> {
        for stage in &self.kernel.stages {
            for acc in &stage.accumulators {
                let dt = if acc.op == ReduceOp::Argmax { DType::I64 } else { acc.dtype };
                self.check_dtype(acc.dtype)?;
                if acc.op.is_sum_exp() && acc.dtype != DType::F32 && acc.dtype != DType::F64 {
                    return Err(unsupported(format!("sum-exp in {}", acc.dtype)));
                }
                self.reg_dtype[acc.result.index()] = Some(dt);
            }
            for instr in &stage.body {
                let (dst, dt) = match instr {
                    Instr::Load { dst, buf, .. } | Instr::LoadAt { dst, buf, .. } => {
                        (*dst, self.program.buffers[*buf].dtype)
                    }
                    Instr::Const { dst, dtype, .. }
                    | Instr::LoopVar { dst, dtype, .. }
                    | Instr::Unary { dst, dtype, .. }
                    | Instr::Binary { dst, dtype, .. }
                    | Instr::Select { dst, dtype, .. }
                    | Instr::Convert { dst, dtype, .. } => (*dst, *dtype),
                    Instr::Accumulate { .. } | Instr::Store { .. } => continue,
                };
                self.check_dtype(dt)?;
                self.reg_dtype[dst.index()] = Some(dt);
            }
        }
        Ok(())
    }

    fn ty(&self, dt: DType) -> Word {
        match dt {
            DType::F32 | DType::F16 | DType::BF16 => self.t_f32,
            DType::F64 => self.t_f64,
            DType::Bool => self.t_bool,
            dt if wide(dt) => self.t_i64,
            _ => self.t_i32,
        }
    }

    fn dtype_of(&self, r: Reg) -> DType {
        self.reg_dtype[r.index()].unwrap_or(DType::F32)
    }

    fn reg(&self, r: Reg) -> Result<Word, Declined> {
        self.regs[r.index()].ok_or_else(|| Declined::Defect(format!("{r} is used before it is defined")))
    }

    pub(super) fn constant(&mut self, dt: DType, bits: u64) -> Word {
        let tag = match dt {
            DType::F32 => 0,
            DType::I32 => 1,
            DType::I64 => 2,
            DType::Bool => 3,
            DType::F64 => 5,
            _ => 4,
        };
        if let Some(&c) = self.consts.get(&(tag, bits)) {
            return c;
        }
        let c = match dt {
            DType::F32 | DType::F64 => {
                let (ty, int_ty, zero) = if dt == DType::F32 {
                    (self.t_f32, self.t_u32, self.zero32)
                } else {
                    (self.t_f64, self.t_u64, self.zero64)
                };
                let bits = if dt == DType::F32 {
                    self.b.constant_bit32(int_ty, bits as u32)
                } else {
                    self.b.constant_bit64(int_ty, bits)
                };
                let (id, xor) = (self.b.id(), self.b.id());
                self.opaque.push(Opaque { id, ty, int_ty, bits, zero, xor });
                id
            }
            DType::I32 => self.b.constant_bit32(self.t_i32, bits as u32),
            DType::I64 => self.b.constant_bit64(self.t_i64, bits),
            DType::Bool if bits != 0 => self.b.constant_true(self.t_bool),
            DType::Bool => self.b.constant_false(self.t_bool),
            _ => self.b.constant_bit32(self.t_u32, bits as u32),
        };
        self.consts.insert((tag, bits), c);
        c
    }

    pub(super) fn f32c(&mut self, x: f32) -> Word {
        self.constant(DType::F32, u64::from(x.to_bits()))
    }

    fn i64c(&mut self, x: i64) -> Word {
        self.constant(DType::I64, x as u64)
    }

    fn u32c(&mut self, x: u32) -> Word {
        self.constant(DType::U32, u64::from(x))
    }

    /// A constant of `dt` with the value `x` (ints wrapped to `dt`, floats converted as
    /// `convert_element_type` does, rounded to f32).
    fn scalar(&mut self, dt: DType, value: Scalar) -> Word {
        let (f, i) = match value {
            Scalar::Float(f) => (f, crate::interp::float_to_int_as(dt, f)),
            Scalar::Int(i) => (i as f64, crate::interp::wrap_int(dt, i)),
            Scalar::Bool(b) => (f64::from(u8::from(b)), i64::from(b)),
        };
        match dt {
            DType::F32 => self.f32c(f as f32),
            DType::F64 => self.constant(DType::F64, f.to_bits()),
            DType::F16 => self.f32c(f16_from_f64(f).to_f32()),
            DType::BF16 => self.f32c(bf16_from_f64(f).to_f32()),
            DType::Bool => self.constant(DType::Bool, u64::from(i != 0 || f != 0.0)),
            dt if wide(dt) => self.i64c(i),
            _ => self.constant(DType::I32, u64::from(i as i32 as u32)),
        }
    }

    /// A size table slot's value (i64): a constant where the size is one.
    fn dim(&mut self, slot: usize) -> Word {
        match self.prepared.dims[slot].as_const() {
            Some(c) => self.i64c(c as i64),
            None => self.dims[slot],
        }
    }

    fn slot(&self, d: &crate::ir::Dim) -> Result<usize, Declined> {
        self.prepared
            .dims
            .iter()
            .position(|x| x == d)
            .ok_or_else(|| Declined::Defect(format!("size {d} is not in the kernel's table")))
    }

    /// `r`'s id, or 0 with the error kept in `err` (for the `Arith` methods).
    pub(super) fn ok(&mut self, r: Result<Word, rspirv::dr::Error>) -> Word {
        r.unwrap_or_else(|e| {
            self.err.get_or_insert(failed(e));
            0
        })
    }

    /// The `Arith` methods' float and integer types (f32 and i32, or with `arith64` f64 and
    /// i64).
    pub(super) fn af(&self) -> Word {
        if self.arith64 {
            self.t_f64
        } else {
            self.t_f32
        }
    }

    pub(super) fn ai(&self) -> Word {
        if self.arith64 {
            self.t_i64
        } else {
            self.t_i32
        }
    }

    /// A `GLSL.std.450` float instruction, for the `Arith` methods.
    pub(super) fn glsl_ok(&mut self, op: spirv::GLOp, args: &[Word]) -> Word {
        let r = self.glsl(self.af(), op, args);
        r.unwrap_or_else(|e| {
            self.err.get_or_insert(e);
            0
        })
    }

    fn glsl(&mut self, ty: Word, op: spirv::GLOp, args: &[Word]) -> Result<Word, Declined> {
        let glsl = self.glsl;
        self.b.ext_inst(ty, None, glsl, op as u32, args.iter().map(|&a| Operand::IdRef(a))).map_err(failed)
    }

    // ----------------------------------------------------------------------------------
    // The function
    // ----------------------------------------------------------------------------------

    fn emit(&mut self) -> Result<(), Declined> {
        let uvec3 = self.b.type_vector(self.t_u32, 3);
        let in_ptr = self.b.type_pointer(None, spirv::StorageClass::Input, uvec3);
        let gid_var = self.b.variable(in_ptr, None, spirv::StorageClass::Input, None);
        self.b.decorate(gid_var, spirv::Decoration::BuiltIn, [Operand::BuiltIn(spirv::BuiltIn::GlobalInvocationId)]);
        let groups_var = self.b.variable(in_ptr, None, spirv::StorageClass::Input, None);
        self.b.decorate(groups_var, spirv::Decoration::BuiltIn, [Operand::BuiltIn(spirv::BuiltIn::NumWorkgroups)]);
        let fn_ty = self.b.type_function(self.t_void, []);
        let main = self.b.begin_function(self.t_void, None, spirv::FunctionControl::NONE, fn_ty).map_err(failed)?;
        self.main = main;
        self.b.begin_block(None).map_err(failed)?;

        // The size table, loaded once.
        for slot in 0..self.prepared.dims.len() {
            let v = if self.prepared.dims[slot].is_static() {
                0
            } else {
                let zero = self.u32c(0);
                let at = self.u32c(slot as u32);
                let p = self.b.access_chain(self.dims_elem_ptr, None, self.dims_var, [zero, at]).map_err(failed)?;
                self.b.load(self.t_i64, None, p, None, []).map_err(failed)?
            };
            self.dims.push(v);
        }
        // Arena members' first elements, after the buffers' lengths.
        let n = self.buffers.len();
        for i in 0..n {
            if self.buffers[i].base == Base::Table {
                let zero = self.u32c(0);
                let at = self.u32c((self.prepared.dims.len() + n + i) as u32);
                let p = self.b.access_chain(self.dims_elem_ptr, None, self.dims_var, [zero, at]).map_err(failed)?;
                self.buffers[i].base_word = Some(self.b.load(self.t_i64, None, p, None, []).map_err(failed)?);
            }
        }

        // The flat point index, and the number of points.
        let gid = self.b.load(uvec3, None, gid_var, None, []).map_err(failed)?;
        let groups = self.b.load(uvec3, None, groups_var, None, []).map_err(failed)?;
        // The run-time zeros float constants are made from (`Opaque`).
        let nz = self.b.composite_extract(self.t_u32, None, groups, [2]).map_err(failed)?;
        let one = self.u32c(1);
        self.zero32 = self.b.i_sub(self.t_u32, None, nz, one).map_err(failed)?;
        self.zero64 = self.b.u_convert(self.t_u64, None, self.zero32).map_err(failed)?;
        let gx = self.b.composite_extract(self.t_u32, None, gid, [0]).map_err(failed)?;
        let gy = self.b.composite_extract(self.t_u32, None, gid, [1]).map_err(failed)?;
        let nx = self.b.composite_extract(self.t_u32, None, groups, [0]).map_err(failed)?;
        let to_i64 = |cx: &mut Self, x: Word| -> Result<Word, Declined> {
            let w = cx.b.u_convert(cx.t_u64, None, x).map_err(failed)?;
            cx.b.bitcast(cx.t_i64, None, w).map_err(failed)
        };
        let (gx, gy, nx) = (to_i64(self, gx)?, to_i64(self, gy)?, to_i64(self, nx)?);
        let local = self.i64c(i64::from(LOCAL_SIZE));
        let row = self.b.i_mul(self.t_i64, None, nx, local).map_err(failed)?;
        let off = self.b.i_mul(self.t_i64, None, gy, row).map_err(failed)?;
        let flat = self.b.i_add(self.t_i64, None, gx, off).map_err(failed)?;
        let mut total = self.i64c(1);
        let outer_slots: Vec<usize> = self.kernel.outer.iter().map(|d| self.slot(d)).collect::<Result<_, _>>()?;
        for &s in &outer_slots {
            let e = self.dim(s);
            total = self.b.i_mul(self.t_i64, None, total, e).map_err(failed)?;
        }
        let inside = self.b.s_less_than(self.t_bool, None, flat, total).map_err(failed)?;
        let body = self.b.id();
        let end = self.b.id();
        self.b.selection_merge(end, spirv::SelectionControl::NONE).map_err(failed)?;
        self.b.branch_conditional(inside, body, end, []).map_err(failed)?;
        self.b.begin_block(Some(body)).map_err(failed)?;

        // Outer variables, the last fastest.
        let mut rest = flat;
        let mut outer = vec![0; outer_slots.len()];
        for (k, &s) in outer_slots.iter().enumerate().rev() {
            let e = self.dim(s);
            outer[k] = self.b.s_rem(self.t_i64, None, rest, e).map_err(failed)?;
            rest = self.b.s_div(self.t_i64, None, rest, e).map_err(failed)?;
        }
        self.outer = outer;

        for stage in &self.kernel.stages {
            self.stage(stage)?;
        }
        self.b.branch(end).map_err(failed)?;
        self.b.begin_block(Some(end)).map_err(failed)?;
        self.b.ret().map_err(failed)?;
        self.b.end_function().map_err(failed)?;
        self.b.entry_point(spirv::ExecutionModel::GLCompute, main, "main", [gid_var, groups_var]);
        self.b.execution_mode(main, spirv::ExecutionMode::LocalSize, [LOCAL_SIZE, 1, 1]);
        self.b.execution_mode(main, spirv::ExecutionMode::SignedZeroInfNanPreserve, [32]);
        Ok(())
    }

    fn function_var(&mut self, ty: Word) -> Word {
        let p = self.b.type_pointer(None, spirv::StorageClass::Function, ty);
        self.b.variable(p, None, spirv::StorageClass::Function, None)
    }

    fn stage(&mut self, stage: &Stage) -> Result<(), Declined> {
        let sum_exp = stage.accumulators.iter().any(|a| a.op.is_sum_exp());
        if sum_exp && stage.body.iter().any(|i| matches!(i, Instr::Store { .. })) {
            // The two passes would store twice.
            return Err(unsupported("a sum-exp stage that also stores"));
        }
        let inner: Vec<usize> = stage.inner.iter().map(|d| self.slot(d)).collect::<Result<_, _>>()?;
        // Accumulator state, reset.
        let mut accs = Vec::with_capacity(stage.accumulators.len());
        for acc in &stage.accumulators {
            let ty = self.ty(acc.dtype);
            let value = self.function_var(ty);
            let t_i64 = self.t_i64;
            let aux = if acc.op == ReduceOp::Argmax {
                self.function_var(t_i64)
            } else if acc.op.is_sum_exp() {
                self.function_var(ty)
            } else {
                0
            };
            let t_bool = self.t_bool;
            let seen = if acc.op == ReduceOp::Argmax { self.function_var(t_bool) } else { 0 };
            let init = self.acc_init(acc.op, acc.dtype);
            self.b.store(value, init, None, []).map_err(failed)?;
            if acc.op == ReduceOp::Argmax {
                let (z, f) = (self.i64c(0), self.constant(DType::Bool, 0));
                self.b.store(aux, z, None, []).map_err(failed)?;
                self.b.store(seen, f, None, []).map_err(failed)?;
            }
            if acc.op.is_sum_exp() {
                let ninf = self.scalar(acc.dtype, Scalar::Float(f64::NEG_INFINITY));
                self.b.store(aux, ninf, None, []).map_err(failed)?;
            }
            accs.push(AccVars { value, aux, seen, shift: None });
        }
        if sum_exp {
            self.loops(stage, &inner, &accs, Pass::Max, 0)?;
            for (acc, vars) in stage.accumulators.iter().zip(accs.iter_mut()) {
                if acc.op.is_sum_exp() {
                    let (dt, ty) = (acc.dtype, self.ty(acc.dtype));
                    let m = self.b.load(ty, None, vars.aux, None, []).map_err(failed)?;
                    vars.shift = Some(if acc.op == ReduceOp::SumExpFinite {
                        let a = self.glsl(ty, spirv::GLOp::FAbs, &[m])?;
                        let inf = self.scalar(dt, Scalar::Float(f64::INFINITY));
                        let is_inf = self.b.f_ord_equal(self.t_bool, None, a, inf).map_err(failed)?;
                        let zero = self.scalar(dt, Scalar::Float(0.0));
                        self.b.select(ty, None, is_inf, zero, m).map_err(failed)?
                    } else {
                        m
                    });
                }
            }
            self.loops(stage, &inner, &accs, Pass::Sum, 0)?;
        } else {
            self.loops(stage, &inner, &accs, Pass::Only, 0)?;
        }
        // Results: an empty float sum is +0 (the running value starts at -0, see `acc_init`).
        let mut empty = None;
        for (acc, vars) in stage.accumulators.iter().zip(&accs) {
            let result = match acc.op {
                ReduceOp::Argmax => self.b.load(self.t_i64, None, vars.aux, None, []).map_err(failed)?,
                ReduceOp::Sum | ReduceOp::SumExp | ReduceOp::SumExpFinite if acc.dtype.is_float() => {
                    let (dt, ty) = (calc(acc.dtype), self.ty(calc(acc.dtype)));
                    let v = self.b.load(ty, None, vars.value, None, []).map_err(failed)?;
                    let e = match empty {
                        Some(e) => e,
                        None => {
                            let e = self.any_empty(&inner)?;
                            empty = Some(e);
                            e
                        }
                    };
                    let zero = self.scalar(dt, Scalar::Float(0.0));
                    self.b.select(ty, None, e, zero, v).map_err(failed)?
                }
                _ => {
                    let ty = self.ty(acc.dtype);
                    self.b.load(ty, None, vars.value, None, []).map_err(failed)?
                }
            };
            self.regs[acc.result.index()] = Some(result);
        }
        Ok(())
    }

    /// Whether some inner loop of the stage runs no iteration.
    fn any_empty(&mut self, inner: &[usize]) -> Result<Word, Declined> {
        let mut any = self.constant(DType::Bool, 0);
        for &s in inner {
            let e = self.dim(s);
            let zero = self.i64c(0);
            let is = self.b.s_less_than_equal(self.t_bool, None, e, zero).map_err(failed)?;
            any = self.b.logical_or(self.t_bool, None, any, is).map_err(failed)?;
        }
        Ok(any)
    }

    /// The value an accumulator starts from.
    fn acc_init(&mut self, op: ReduceOp, dt: DType) -> Word {
        // f16 and bf16 start from the same f32 values (all on their grids).
        let dt = calc(dt);
        let float = |cx: &mut Self, x: f64| cx.scalar(dt, Scalar::Float(x));
        match (op, dt) {
            // `-0 + x` is `x` for every `x`, so the first element is taken as it is.
            (ReduceOp::Sum | ReduceOp::SumExp | ReduceOp::SumExpFinite, dt) if dt.is_float() => float(self, -0.0),
            (ReduceOp::Prod, dt) if dt.is_float() => float(self, 1.0),
            (ReduceOp::Max | ReduceOp::Argmax, dt) if dt.is_float() => float(self, f64::NEG_INFINITY),
            (ReduceOp::Min, dt) if dt.is_float() => float(self, f64::INFINITY),
            (ReduceOp::Max | ReduceOp::Argmax, DType::Bool) => self.constant(DType::Bool, 0),
            (ReduceOp::Min, DType::Bool) => self.constant(DType::Bool, 1),
            (ReduceOp::Prod, _) => self.scalar(dt, Scalar::Int(1)),
            (ReduceOp::Max | ReduceOp::Argmax, _) => self.scalar(dt, Scalar::Int(crate::interp::int_limits(dt).0)),
            (ReduceOp::Min, _) => self.scalar(dt, Scalar::Int(crate::interp::int_limits(dt).1)),
            _ => self.scalar(dt, Scalar::Int(0)),
        }
    }

    /// The loop nest of `stage` from depth `depth`, around its body.
    fn loops(
        &mut self,
        stage: &Stage,
        inner: &[usize],
        accs: &[AccVars],
        pass: Pass,
        depth: usize,
    ) -> Result<(), Declined> {
        if depth == inner.len() {
            return self.body(stage, accs, pass);
        }
        let t_i64 = self.t_i64;
        let counter = self.function_var(t_i64);
        let zero = self.i64c(0);
        self.b.store(counter, zero, None, []).map_err(failed)?;
        let l = self.open_loop()?;
        let i = self.b.load(t_i64, None, counter, None, []).map_err(failed)?;
        let e = self.dim(inner[depth]);
        let more = self.b.s_less_than(self.t_bool, None, i, e).map_err(failed)?;
        self.loop_body(l, more)?;
        if self.inner.len() <= depth {
            self.inner.resize(depth + 1, 0);
        }
        self.inner[depth] = i;
        self.loops(stage, inner, accs, pass, depth + 1)?;
        self.loop_continue(l)?;
        let one = self.i64c(1);
        let next = self.b.i_add(t_i64, None, i, one).map_err(failed)?;
        self.b.store(counter, next, None, []).map_err(failed)?;
        self.close_loop(l)
    }

    fn index(&mut self, ix: &Index) -> Result<Word, Declined> {
        let s = self.slot(&ix.offset)?;
        let mut at = self.dim(s);
        for (var, stride) in &ix.terms {
            let x = self.var(*var)?;
            let s = self.slot(stride)?;
            let st = self.dim(s);
            let t = self.b.i_mul(self.t_i64, None, x, st).map_err(failed)?;
            at = self.b.i_add(self.t_i64, None, at, t).map_err(failed)?;
        }
        Ok(at)
    }

    fn var(&self, v: Var) -> Result<Word, Declined> {
        let got = match v {
            Var::Outer(k) => self.outer.get(k as usize),
            Var::Inner(k) => self.inner.get(k as usize),
        };
        got.copied().ok_or_else(|| Declined::Defect(format!("loop variable {v} out of range")))
    }

    fn bound(&self, buf: BufferId) -> Result<&Bound, Declined> {
        self.buffers.iter().find(|b| b.id == buf).ok_or_else(|| Declined::Defect(format!("{buf} is not bound")))
    }

    fn body(&mut self, stage: &Stage, accs: &[AccVars], pass: Pass) -> Result<(), Declined> {
        for instr in &stage.body {
            match instr {
                Instr::Load { dst, buf, index } => {
                    let at = self.index(index)?;
                    self.regs[dst.index()] = Some(self.load_elem(*buf, at)?);
                }
                Instr::LoadAt { dst, buf, index } => {
                    let at = self.reg(*index)?;
                    let at = self.convert(at, self.dtype_of(*index), DType::I64)?;
                    // The buffer's element count, after the size table's slots.
                    let binding = self
                        .buffers
                        .iter()
                        .position(|b| b.id == *buf)
                        .ok_or_else(|| Declined::Defect(format!("{buf} is not bound")))?;
                    let zero = self.u32c(0);
                    let slot = self.u32c((self.prepared.dims.len() + binding) as u32);
                    let p =
                        self.b.access_chain(self.dims_elem_ptr, None, self.dims_var, [zero, slot]).map_err(failed)?;
                    let len = self.b.load(self.t_i64, None, p, None, []).map_err(failed)?;
                    let zero = self.i64c(0);
                    let lo = self.b.s_greater_than_equal(self.t_bool, None, at, zero).map_err(failed)?;
                    let hi = self.b.s_less_than(self.t_bool, None, at, len).map_err(failed)?;
                    let ok = self.b.logical_and(self.t_bool, None, lo, hi).map_err(failed)?;
                    let bad = self.b.logical_not(self.t_bool, None, ok).map_err(failed)?;
                    self.flag(bad, Status::OutOfBounds)?;
                    let safe = self.b.select(self.t_i64, None, ok, at, zero).map_err(failed)?;
                    self.regs[dst.index()] = Some(self.load_elem(*buf, safe)?);
                }
                Instr::Const { dst, value, dtype } => {
                    self.regs[dst.index()] = Some(self.scalar(*dtype, *value));
                }
                Instr::LoopVar { dst, var, dtype } => {
                    let v = self.var(*var)?;
                    let r = self.convert(v, DType::I64, calc(*dtype))?;
                    self.regs[dst.index()] = Some(self.round_half(r, *dtype)?);
                }
                // f16 and bf16 compute in f32 (their registers are f32 values on their grid;
                // `calc`), each result rounded back to the grid (`round_half`).
                Instr::Unary { dst, op, x, dtype } => {
                    let xv = self.reg(*x)?;
                    let xdt = calc(self.dtype_of(*x));
                    let r = self.unary(*op, xv, xdt, calc(*dtype))?;
                    self.regs[dst.index()] = Some(self.round_half(r, *dtype)?);
                }
                Instr::Binary { dst, op: OpKind::Pow, a, b, dtype: DType::F32 } if self.dtype_of(*a) == DType::F32 => {
                    let av = self.reg(*a)?;
                    let r = match self.small_int_const(stage, *b) {
                        Some(n) => self.powi(av, n)?,
                        None if self.float64 => {
                            let bv = self.reg(*b)?;
                            self.pow_in_f64(av, bv)?
                        }
                        None => {
                            let bv = self.reg(*b)?;
                            self.powi_at_run_time(av, bv)?
                        }
                    };
                    self.regs[dst.index()] = Some(r);
                }
                Instr::Binary { dst, op, a, b, dtype } => {
                    let (av, bv) = (self.reg(*a)?, self.reg(*b)?);
                    let cdt = calc(self.dtype_of(*a));
                    let r = self.binary(*op, av, bv, cdt, calc(*dtype))?;
                    self.regs[dst.index()] = Some(self.round_half(r, *dtype)?);
                }
                Instr::Select { dst, cond, a, b, dtype } => {
                    let c = self.reg(*cond)?;
                    let c = self.truthy(c, self.dtype_of(*cond))?;
                    let (av, bv) = (self.reg(*a)?, self.reg(*b)?);
                    let ty = self.ty(*dtype);
                    self.regs[dst.index()] = Some(self.b.select(ty, None, c, av, bv).map_err(failed)?);
                }
                Instr::Convert { dst, x, dtype } => {
                    let xv = self.reg(*x)?;
                    let from = self.dtype_of(*x);
                    let r = if from == DType::F64 && memory::is_half(*dtype) {
                        // Through f32 rounded to odd: one rounding to the half type, as the
                        // reference's.
                        self.f64_to_f32_odd(xv)?
                    } else {
                        self.convert(xv, calc(from), calc(*dtype))?
                    };
                    self.regs[dst.index()] = Some(self.round_half(r, *dtype)?);
                }
                Instr::Accumulate { acc, x, index } => {
                    let k = *acc as usize;
                    let a = stage.accumulators.get(k).ok_or_else(|| Declined::Defect(format!("no accumulator {k}")))?;
                    let vars = accs[k];
                    let xv = self.reg(*x)?;
                    match (pass, a.op.is_sum_exp()) {
                        (Pass::Only, _) | (Pass::Max, false) => {
                            let pos = match index {
                                Some(r) => Some(self.reg(*r)?),
                                None => None,
                            };
                            self.feed(a.op, a.dtype, vars, xv, pos)?;
                        }
                        (Pass::Max, true) => {
                            let ty = self.ty(a.dtype);
                            let m = self.b.load(ty, None, vars.aux, None, []).map_err(failed)?;
                            let m = self.max_min(true, m, xv, a.dtype)?;
                            self.b.store(vars.aux, m, None, []).map_err(failed)?;
                        }
                        (Pass::Sum, true) => {
                            let c = vars.shift.ok_or_else(|| Declined::Defect("sum-exp without a shift".into()))?;
                            let ty = self.ty(a.dtype);
                            let d = self.b.f_sub(ty, None, xv, c).map_err(failed)?;
                            let e = self.exp_of(d, a.dtype);
                            let s = self.b.load(ty, None, vars.value, None, []).map_err(failed)?;
                            let s = self.b.f_add(ty, None, s, e).map_err(failed)?;
                            self.b.store(vars.value, s, None, []).map_err(failed)?;
                        }
                        (Pass::Sum, false) => {}
                    }
                }
                Instr::Store { buf, index, value } => {
                    if pass == Pass::Sum {
                        continue;
                    }
                    let at = self.index(index)?;
                    let v = self.reg(*value)?;
                    self.store_elem(*buf, at, v)?;
                }
            }
        }
        Ok(())
    }
}

/// The dtype a register of `dt` computes in: f32 for f16 and bf16, else `dt`.
fn calc(dt: DType) -> DType {
    if memory::is_half(dt) {
        DType::F32
    } else {
        dt
    }
}

fn decorates(a: &rspirv::dr::Instruction, id: Word) -> bool {
    a.class.opcode == spirv::Op::Decorate && a.operands.first() == Some(&Operand::IdRef(id))
}

fn failed(e: rspirv::dr::Error) -> Declined {
    Declined::Defect(format!("SPIR-V builder: {e}"))
}
