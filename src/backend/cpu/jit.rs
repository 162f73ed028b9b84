//! How the CPU backend turns a generated kernel into native code: the [`KernelCompiler`]
//! interface, and [`CraneliftCompiler`], its implementation by the code generator of
//! [`crate::backend::cpu`]. Kernels a compiler declines run on the reference executor.

use std::any::Any;
use std::sync::Arc;

use crate::backend::cpu::{take_kernel_error, CodegenError, CpuCompiler, CpuOptions};
use crate::backend::Declined;
use crate::ir::Dim;
use crate::kernel::{Kernel, KernelFn, Program};

/// Turns kernels into native code (the CPU backend's code generator implements this).
pub trait KernelCompiler: Send + Sync {
    /// Compiles `kernel` of `program`; an error makes the kernel run on the reference executor.
    fn compile(&self, kernel: &Kernel, program: &Program) -> Result<NativeKernel, Declined>;
}

/// A compiled kernel.
#[derive(Clone)]
pub struct NativeKernel {
    /// The entry point ([`KernelFn`] convention).
    pub entry: KernelFn,
    /// The sizes the entry reads from `dims`, in order: the kernel's [`Kernel::dim_table`].
    pub dims: Vec<Dim>,
    /// Whatever owns the code `entry` points into; kept alive as long as the plan.
    pub owner: Arc<dyn Any + Send + Sync>,
    /// Takes (and clears) an error the entry recorded on the calling thread (compiled code
    /// does not unwind: it flags integer division by zero and similar in thread-local state).
    /// Called on each thread before and after its call.
    pub take_error: Option<fn() -> Option<String>>,
}

impl std::fmt::Debug for NativeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeKernel").field("dims", &self.dims).finish_non_exhaustive()
    }
}

/// How one kernel runs.
#[derive(Clone, Debug)]
pub enum KernelExec {
    Reference,
    Native(NativeKernel),
}

/// Compiles kernels with Cranelift into one JIT module (shared by every kernel it compiles,
/// freed when the last plan using them goes); several threads may compile at once.
pub struct CraneliftCompiler {
    inner: CpuCompiler,
}

impl CraneliftCompiler {
    pub fn new(options: CpuOptions) -> Result<CraneliftCompiler, CodegenError> {
        Ok(CraneliftCompiler { inner: CpuCompiler::with_options(options)? })
    }

    /// A compiler for `CompileOptions::kernel_compiler`.
    pub fn shared(options: CpuOptions) -> Result<Arc<dyn KernelCompiler>, CodegenError> {
        Ok(Arc::new(CraneliftCompiler::new(options)?))
    }
}

fn take_error() -> Option<String> {
    take_kernel_error().map(|e| e.to_string())
}

impl KernelCompiler for CraneliftCompiler {
    fn compile(&self, kernel: &Kernel, program: &Program) -> Result<NativeKernel, Declined> {
        let c = &self.inner;
        // A panic in code generation is a backend bug; the kernel then runs on the reference
        // executor instead of taking the whole compilation down.
        let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.compile(kernel, program)))
            .map_err(|_| Declined::Defect(format!("code generation panicked on kernel {}", kernel.name)))?
            .map_err(|e| match e {
                CodegenError::Unsupported(_) => Declined::Unsupported(e.to_string()),
                CodegenError::Invalid(_) | CodegenError::Cranelift(_) => Declined::Defect(e.to_string()),
            })?;
        Ok(NativeKernel {
            entry: compiled.entry(),
            dims: compiled.dim_table().to_vec(),
            owner: Arc::new(compiled),
            take_error: Some(take_error),
        })
    }
}
