//! The CPU backend: one generated [`Kernel`] → one native function, through Cranelift; and
//! the library kernels for the opaque ops: [`gemm`] (matmul), [`conv`], and the
//! [`activation`]s their epilogues apply.
//!
//! [`CpuCompiler`] owns a `JITModule` and compiles many kernels into it. Each
//! [`CompiledKernel`] holds the entry point (the [`KernelFn`] convention of
//! [`crate::kernel`]), the kernel's dim table, and an `Arc` of the module, so the code lives
//! as long as any kernel compiled into it; when the last one goes, the module's memory is
//! freed.
//!
//! **W^X.** cranelift-jit's `SystemMemoryProvider` writes code into fresh anonymous `mmap`
//! pages that are read-write, and `finalize_definitions` (called after every kernel) turns
//! them read+execute with `mprotect` and starts a new mapping for the next function, so a
//! page is never writable and executable at once and is never written again once executable.
//!
//! **Run-time errors.** Generated code never traps: integer `div`/`rem` by zero (and
//! `MIN / -1`, which wraps like the reference) is computed on a safe divisor, and
//! `LoadAt` offsets into buffers of static size are bounds-checked (an out-of-range offset
//! reads element 0). Either records a [`KernelError`] in a thread-local flag, once per call,
//! outside the loops; [`CompiledKernel::run`] clears and checks it around the call (a runtime
//! that calls the raw [`KernelFn`] itself calls [`take_kernel_error`] afterwards on the same
//! thread). The outputs of a failed call are unspecified.
//!
//! What is compiled (see [`CpuCompiler::supports`]): dtypes f32, f64, i32, i64 and bool
//! (stored as one byte, 0 or 1); every unary and binary elementwise prim, `where`, converts,
//! loads/stores with affine indices, `LoadAt`, loop variables, and sum/prod/max/min/argmax
//! and (f32/f64) `sumexp` accumulators. f16/bf16 are not supported yet. f32 transcendentals are inline polynomial
//! approximations ([`math`]); f64 transcendentals, float `rem` and integer `pow` call the Rust
//! function of the reference per element (exact, scalar, slow).

pub mod activation;
mod analyze;
pub mod attention;
mod codegen;
pub mod conv;
pub mod conv_blocked;
pub mod copy;
mod emit;
pub mod exec;
pub mod gemm;
pub mod isa;
pub mod jit;
pub mod math;
pub mod math64;
pub mod packed;
pub mod pool;
pub mod recur;
pub mod rows;

/// Whether the AVX-512 variants of the library kernels run: the CPU has everything they are
/// compiled for (AVX-512F, DQ and VL with AVX2, FMA and POPCNT; calling one without all of
/// them would be undefined) and the cap ([`isa`]) allows them.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx512() -> bool {
    isa::active() >= isa::Isa::Avx512
}

/// The size in bytes of the CPU's largest cache (the last level, shared by its cores), from
/// CPUID's deterministic cache parameters (AMD's leaf `0x8000_001D`, else leaf 4); 8 MiB
/// where the CPU reports neither. The row kernels stream their output past the caches when a
/// call's input and output together exceed it.
pub fn last_level_cache_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| cpuid_cache_bytes().unwrap_or(8 << 20))
}

#[cfg(target_arch = "x86_64")]
fn cpuid_cache_bytes() -> Option<usize> {
    use std::arch::x86_64::__cpuid_count;
    // SAFETY (for toolchains where it is `unsafe`): CPUID exists on every x86_64 CPU, and a
    // leaf above the reported maximum returns zeros or another leaf's data, never a fault.
    #[allow(unused_unsafe)]
    let cpuid = |leaf: u32, sub: u32| unsafe { __cpuid_count(leaf, sub) };
    let largest = |leaf: u32| {
        // Each subleaf describes one cache until a type of 0 (at most a handful exist).
        (0..16)
            .map(|i| cpuid(leaf, i))
            .take_while(|r| r.eax & 0x1f != 0)
            .map(|r| {
                let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
                let partitions = ((r.ebx >> 12) & 0x3ff) as usize + 1;
                let line = (r.ebx & 0xfff) as usize + 1;
                let sets = r.ecx as usize + 1;
                ways * partitions * line * sets
            })
            .max()
    };
    let amd = cpuid(0x8000_0000, 0).eax >= 0x8000_001d;
    let found = if amd { largest(0x8000_001d) } else { None };
    found.or_else(|| if cpuid(0, 0).eax >= 4 { largest(4) } else { None }).filter(|&b| b > 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_cache_bytes() -> Option<usize> {
    None
}

/// Whether the AVX2 variants (compiled for AVX2 and FMA) run: the CPU has them and the cap
/// allows them.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2() -> bool {
    isa::active() >= isa::Isa::Avx2
}

/// The low `n` bits set (all 32 from `n = 32` on): the lane masks of the x86 kernels' partial
/// vectors.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
pub(crate) fn low_bits(n: usize) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use cranelift_codegen::ir::{types, AbiParam};
use cranelift_codegen::settings::Configurable;
use cranelift_codegen::{settings, Context};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::Module;

use crate::ir::Dim;
use crate::kernel::{Kernel, KernelFn, Program};

/// Why a kernel could not be compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// The kernel uses something this backend does not implement (a dtype, an op); the
    /// runtime should run it with the reference executor.
    #[error("unsupported by the CPU backend: {0}")]
    Unsupported(String),
    /// The kernel breaks the kernel IR's rules (a register used before its definition, a
    /// dtype mismatch, a loop variable out of range): a scheduler bug.
    #[error("invalid kernel: {0}")]
    Invalid(String),
    /// Cranelift refused the generated function or the JIT could not map it.
    #[error("cranelift: {0}")]
    Cranelift(String),
}

/// An error a compiled kernel recorded while running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("gather offset out of bounds")]
    IndexOutOfBounds,
    #[error("argmax of an empty range")]
    EmptyArgmax,
    #[error("kernel called with {got} {what}, expected {expected}")]
    BadArguments { what: &'static str, got: usize, expected: usize },
}

pub(crate) const ERR_DIV_ZERO: i64 = 1;
pub(crate) const ERR_OUT_OF_BOUNDS: i64 = 2;

thread_local! {
    static KERNEL_ERROR: Cell<i64> = const { Cell::new(0) };
}

/// Called by generated code (once per call, at its end) when it hit an error.
pub(crate) extern "C" fn record_kernel_error(code: i64) {
    KERNEL_ERROR.with(|e| {
        if e.get() == 0 {
            e.set(code);
        }
    });
}

/// Takes (and clears) the error the last kernel call on this thread recorded.
pub fn take_kernel_error() -> Option<KernelError> {
    match KERNEL_ERROR.with(|e| e.replace(0)) {
        0 => None,
        ERR_DIV_ZERO => Some(KernelError::DivisionByZero),
        _ => Some(KernelError::IndexOutOfBounds),
    }
}

/// Code generation choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Never contract `a * b + c` into a fused multiply-add (bit-reproducible across
    /// machines with and without FMA).
    pub strict_fp: bool,
    /// Vectorize innermost loops with F32X4 where possible.
    pub vectorize: bool,
}

impl Default for CpuOptions {
    /// Vectorized unless the ISA cap is `portable`.
    fn default() -> Self {
        CpuOptions { strict_fp: false, vectorize: isa::active() > isa::Isa::Portable }
    }
}

/// The JIT module, shared by every kernel compiled into it.
struct JitShared {
    module: Mutex<Option<JITModule>>,
}

// SAFETY: the module is only touched under the mutex; the raw pointers it holds are to its
// own mappings, which no other owner frees.
unsafe impl Send for JitShared {}
unsafe impl Sync for JitShared {}

impl Drop for JitShared {
    fn drop(&mut self) {
        let module = match self.module.get_mut() {
            Ok(m) => m.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(module) = module {
            // SAFETY: every `CompiledKernel` holds an `Arc` of this value, so when it drops no
            // function pointer into the module's memory is left.
            unsafe { module.free_memory() };
        }
    }
}

/// A compiled kernel: its entry point and the dims it reads.
#[derive(Clone)]
pub struct CompiledKernel {
    entry: KernelFn,
    dims: Vec<Dim>,
    /// Extents of stages with an argmax: the argmax of nothing is an error, checked before
    /// the call (the generated code has no index to give). Each is a constant or a position
    /// in the dim table.
    argmax_extents: Vec<Result<u64, usize>>,
    name: String,
    n_buffers: usize,
    _module: Arc<JitShared>,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel").field("name", &self.name).field("dims", &self.dims).finish()
    }
}

impl CompiledKernel {
    /// The native entry point (`KernelFn` convention).
    pub fn entry(&self) -> KernelFn {
        self.entry
    }

    /// The kernel's dim table: `dims[j]` passed at run time is the value of entry `j`.
    pub fn dim_table(&self) -> &[Dim] {
        &self.dims
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the kernel for outer iterations `begin..end` and reports any error it recorded.
    ///
    /// # Safety
    /// `bufs` must hold, for every buffer the kernel touches (by `BufferId` index), a
    /// pointer to memory of that buffer's dtype and shape evaluated with the symbol values
    /// `dims` was computed from, valid for the reads and writes the kernel does, and not
    /// written by anyone else during the call.
    pub unsafe fn run(&self, bufs: &[*mut u8], dims: &[i64], begin: i64, end: i64) -> Result<(), KernelError> {
        if dims.len() != self.dims.len() {
            return Err(KernelError::BadArguments { what: "dims", got: dims.len(), expected: self.dims.len() });
        }
        if bufs.len() < self.n_buffers {
            return Err(KernelError::BadArguments { what: "buffers", got: bufs.len(), expected: self.n_buffers });
        }
        let empty = self.argmax_extents.iter().any(|e| match *e {
            Ok(n) => n == 0,
            Err(j) => dims[j] <= 0,
        });
        if empty && begin < end {
            return Err(KernelError::EmptyArgmax);
        }
        take_kernel_error();
        // SAFETY: the argument arrays have the lengths the code reads (checked above), and
        // the buffers are valid per this function's contract.
        unsafe { (self.entry)(bufs.as_ptr(), dims.as_ptr(), begin, end) };
        match take_kernel_error() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// Compiles kernels into one JIT module.
pub struct CpuCompiler {
    shared: Arc<JitShared>,
    /// The module's target: kernels are compiled for it outside the module's lock (so
    /// several threads compile at once) and only their bytes are put in the module under it.
    isa: cranelift_codegen::isa::OwnedTargetIsa,
    options: CpuOptions,
    has_fma: bool,
}

impl CpuCompiler {
    pub fn new() -> Result<CpuCompiler, CodegenError> {
        CpuCompiler::with_options(CpuOptions::default())
    }

    pub fn with_options(options: CpuOptions) -> Result<CpuCompiler, CodegenError> {
        let isa = native_isa()?;
        let has_fma = has_fma(&*isa);
        let builder = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
        let module = JITModule::new(builder);
        Ok(CpuCompiler { shared: Arc::new(JitShared { module: Mutex::new(Some(module)) }), isa, options, has_fma })
    }

    pub fn options(&self) -> CpuOptions {
        self.options
    }

    /// Whether generated code fuses multiply-adds (FMA present and not `strict_fp`).
    pub fn uses_fma(&self) -> bool {
        self.has_fma && !self.options.strict_fp
    }

    /// Why `kernel` cannot be compiled, if it cannot (without compiling it).
    pub fn supports(&self, kernel: &Kernel, program: &Program) -> Result<(), String> {
        analyze::analyze(kernel, program, &self.options).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Compiles `kernel` (whose buffers are `program`'s) to native code. Threads may compile
    /// kernels at once: code generation runs unlocked, and only placing the finished code in
    /// the shared module takes its lock.
    pub fn compile(&self, kernel: &Kernel, program: &Program) -> Result<CompiledKernel, CodegenError> {
        let analysis = analyze::analyze(kernel, program, &self.options)?;
        let cl = |e: &dyn std::fmt::Display| CodegenError::Cranelift(e.to_string());
        let call_conv = self.isa.default_call_conv();
        let mut sig = cranelift_codegen::ir::Signature::new(call_conv);
        for _ in 0..4 {
            sig.params.push(AbiParam::new(types::I64));
        }
        let mut ctx = Context::new();
        ctx.func.signature = sig.clone();
        let fma = self.has_fma && !self.options.strict_fp;
        codegen::build(
            &mut ctx.func,
            &mut FunctionBuilderContext::new(),
            kernel,
            program,
            &analysis,
            codegen::Target { fma, call_conv, frontend: self.isa.frontend_config() },
        )?;
        let compiled = ctx.compile(&*self.isa, &mut Default::default()).map_err(|e| {
            let msg = match &e.inner {
                cranelift_codegen::CodegenError::Verifier(v) => format!(
                    "{}: {}",
                    e.inner,
                    cranelift_codegen::print_errors::pretty_verifier_error(e.func, None, v.clone())
                ),
                other => other.to_string(),
            };
            CodegenError::Cranelift(msg)
        })?;
        let alignment = u64::from(compiled.buffer.alignment);
        let bytes = compiled.code_buffer().to_vec();
        let mach_relocs: Vec<_> = compiled.buffer.relocs().to_vec();
        let mut guard = self.shared.module.lock().map_err(|_| cl(&"JIT module lock poisoned"))?;
        let module = guard.as_mut().ok_or_else(|| cl(&"JIT module is gone"))?;
        let id = module.declare_anonymous_function(&sig).map_err(|e| cl(&e))?;
        let relocs: Vec<_> =
            mach_relocs.iter().map(|r| cranelift_module::ModuleReloc::from_mach_reloc(r, &ctx.func, id)).collect();
        module.define_function_bytes(id, alignment, &bytes, &relocs).map_err(|e| cl(&e))?;
        module.finalize_definitions().map_err(|e| cl(&e))?;
        let ptr = module.get_finalized_function(id);
        // SAFETY: the function was built with the `KernelFn` signature (four i64 parameters,
        // no results, the platform's default C calling convention) and is now finalized
        // (mapped read+execute).
        let entry: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
        drop(guard);
        let dims = kernel.dim_table();
        let argmax_extents = kernel
            .stages
            .iter()
            .filter(|st| st.accumulators.iter().any(|a| a.op == crate::kernel::ReduceOp::Argmax))
            .flat_map(|st| st.inner.iter())
            .map(|d| match d.as_const() {
                Some(n) => Ok(n),
                None => Err(dims
                    .iter()
                    .position(|t| t == d)
                    .unwrap_or_else(|| unreachable!("dim_table holds every extent"))),
            })
            .collect();
        Ok(CompiledKernel {
            entry,
            dims,
            argmax_extents,
            name: kernel.name.clone(),
            n_buffers: analysis.n_buffers,
            _module: self.shared.clone(),
        })
    }
}

fn native_isa() -> Result<cranelift_codegen::isa::OwnedTargetIsa, CodegenError> {
    let cl = |e: &dyn std::fmt::Display| CodegenError::Cranelift(e.to_string());
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| cl(&e))?;
    flags.set("enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" }).map_err(|e| cl(&e))?;
    flags.set("use_colocated_libcalls", "false").map_err(|e| cl(&e))?;
    flags.set("is_pic", "false").map_err(|e| cl(&e))?;
    let mut isa_builder = cranelift_native::builder().map_err(|e| cl(&e))?;
    // The cap: switch off what the CPU has above it (names Cranelift's x64 backend knows;
    // other targets have none of them).
    let active = isa::active();
    let mut off: Vec<&str> = Vec::new();
    if active < isa::Isa::Avx512 {
        off.extend(["has_avx512f", "has_avx512vl", "has_avx512dq", "has_avx512bitalg", "has_avx512vbmi"]);
    }
    if active < isa::Isa::Avx2 {
        off.extend(["has_avx2", "has_fma", "has_avx", "has_bmi1", "has_bmi2", "has_lzcnt", "has_f16c"]);
    }
    for name in off {
        // A setting this target does not have is nothing to switch off.
        let _ = isa_builder.set(name, "false");
    }
    isa_builder.finish(settings::Flags::new(flags)).map_err(|e| cl(&e))
}

/// Whether code generated for `isa` may use fused multiply-adds. On x86-64 FMA is a target
/// feature, present when the CPU has it and the cap is AVX2 or above. On aarch64 it is part of
/// the base instruction set (Cranelift's backend has no setting for it); the cap's `portable`
/// level leaves it unused there too, so portable kernels round alike on both.
fn has_fma(isa: &dyn cranelift_codegen::isa::TargetIsa) -> bool {
    if cfg!(target_arch = "aarch64") {
        isa::active() > isa::Isa::Portable
    } else {
        isa.isa_flags().iter().any(|f| f.name == "has_fma" && f.as_bool() == Some(true))
    }
}

/// The Cranelift IR text of `kernel`'s function before optimisation (for debugging and
/// snapshot tests).
pub fn clif_text(kernel: &Kernel, program: &Program, options: CpuOptions) -> Result<String, CodegenError> {
    Ok(standalone_function(kernel, program, options)?.0.display().to_string())
}

/// The machine code Cranelift generates for `kernel`, as its virtual-code listing (registers
/// allocated, one line per instruction), for reading what a kernel's loops became.
pub fn asm_text(kernel: &Kernel, program: &Program, options: CpuOptions) -> Result<String, CodegenError> {
    let (func, isa) = standalone_function(kernel, program, options)?;
    let mut ctx = Context::for_function(func);
    ctx.set_disasm(true);
    let mut ctrl = cranelift_codegen::control::ControlPlane::default();
    let code = ctx.compile(&*isa, &mut ctrl).map_err(|e| CodegenError::Cranelift(format!("{:?}", e.inner)))?;
    Ok(code.vcode.clone().unwrap_or_default())
}

/// `kernel`'s function built outside any JIT module, for the host ISA with the same FMA choice
/// [`CpuCompiler`] makes.
fn standalone_function(
    kernel: &Kernel,
    program: &Program,
    options: CpuOptions,
) -> Result<(cranelift_codegen::ir::Function, cranelift_codegen::isa::OwnedTargetIsa), CodegenError> {
    let analysis = analyze::analyze(kernel, program, &options)?;
    let isa = native_isa()?;
    let has_fma = has_fma(&*isa);
    let mut func = cranelift_codegen::ir::Function::new();
    for _ in 0..4 {
        func.signature.params.push(AbiParam::new(types::I64));
    }
    let call_conv = isa.default_call_conv();
    func.signature.call_conv = call_conv;
    let frontend = isa.frontend_config();
    let mut fctx = FunctionBuilderContext::new();
    let fma = has_fma && !options.strict_fp;
    codegen::build(&mut func, &mut fctx, kernel, program, &analysis, codegen::Target { fma, call_conv, frontend })?;
    Ok((func, isa))
}
