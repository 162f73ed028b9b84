//! The CPU backend's code generator ([`crate::backend::cpu`]) as a [`KernelCompiler`]: kernels
//! it supports run natively, the others on the reference executor.

use std::sync::Arc;

use super::{Declined, KernelCompiler, NativeKernel};
use crate::backend::cpu::{take_kernel_error, CodegenError, CpuCompiler, CpuOptions};
use crate::kernel::{Kernel, Program};

/// Compiles kernels with Cranelift into one JIT module (shared by every kernel it compiles,
/// freed when the last plan using them goes); several threads may compile at once.
pub struct CraneliftCompiler {
    inner: CpuCompiler,
}

impl CraneliftCompiler {
    pub fn new(options: CpuOptions) -> Result<CraneliftCompiler, CodegenError> {
        Ok(CraneliftCompiler { inner: CpuCompiler::with_options(options)? })
    }

    /// A compiler for [`super::CompileOptions::kernel_compiler`].
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
