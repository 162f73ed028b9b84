//! The backend interface, and the backends: each takes a scheduled kernel program
//! ([`crate::kernel::Program`]) to one kind of device and runs it there.
//!
//! The runtime ([`crate::runtime`]) is the same for every backend: it lowers the graph down
//! the pipeline to a program, checks a run's inputs against the guards, evaluates every
//! buffer's size for the run's symbol values ([`Sizes`]), keeps a pool of run states for runs
//! on several threads, and applies the epilogue (inputs mutated in place). Everything that
//! touches the device is the backend's, behind two traits:
//!
//! - [`Backend`] prepares a program: compiles its generated kernels (or leaves a kernel to the
//!   host's reference executor, [`crate::kernel::eval`], reporting why as a [`Fallback`]),
//!   readies its library steps (GEMM, convolution, row ops, copies), and decides where each
//!   buffer lives. The result is an [`Executable`].
//! - [`Executable`] runs the program for one set of sizes: it owns its memory plan (the
//!   lifetimes of the buffers it places in one arena per run; [`crate::kernel::memory`] places
//!   them), allocates that arena in the device's memory, moves inputs in and results out, and
//!   runs the steps in order. Its per-run working memory lives in [`RunState::device`], which
//!   the runtime pools with the rest of the run state, so a warm run allocates nothing.
//!
//! [`cpu`] is the first implementation: Cranelift-compiled kernels and library kernels on the
//! host, over rayon threads, with the arena in host memory and the outputs written in place in
//! the tensors a run returns.
//!
//! [`vulkan`] (feature `vulkan`, on by default) is the second: generated kernels as SPIR-V
//! compute shaders on a Vulkan device, with the library steps it has (matmul, convolution,
//! the data-movement prims) written as generated kernels too; it refuses a program with any
//! other step when the plan is built ([`BackendError::Unsupported`]).
//!
//! ## The device backend against this interface (Vulkan: the plan; see `vulkan` for what is built)
//!
//! - `Backend::prepare` lowers each generated kernel to a SPIR-V compute shader and builds its
//!   pipeline (workgroup size from the device's limits); GEMM, row ops, attention and
//!   convolution map to library shaders; a step with no shader is a [`Fallback`] and runs on
//!   the host, with the buffers it touches copied across (the interface reports it like a CPU
//!   kernel the code generator declined). Constants are uploaded once into device-local
//!   buffers owned by the executable (what [`Executable::resident_bytes`] reports).
//! - [`Executable::lifetimes`] is the same lifetime analysis; the arena is one device buffer
//!   per run state (in [`RunState::device`]), grown when a run needs more, with each temporary
//!   at its offset. Outputs are device buffers read back into [`RunState::outs`] at the end.
//! - [`Executable::run`] records one command buffer per run state and size set (dispatches in
//!   step order, a barrier only where a step reads what an earlier one wrote, dispatches split
//!   past 65,535 workgroups), replays it on later runs with the same sizes, uploads the inputs
//!   through a staging buffer (or maps them where memory is unified), submits with a fence and
//!   waits for it before reading back. An embedder that owns the `VkDevice` and queue hands
//!   them over as a `vulkan::VulkanDevice`, which the backend carries instead of making its own
//!   (built).

pub mod cpu;
#[cfg(feature = "vulkan")]
pub mod vulkan;

use std::any::Any;
use std::sync::Arc;

use crate::interp::InterpError;
use crate::ir::DimError;
use crate::kernel::eval::{ExecError, GuardError};
use crate::kernel::memory::Lifetime;
use crate::kernel::{BufferId, Program};
use crate::tensor::{Tensor, TensorView};

/// A kind of device that runs scheduled programs.
pub trait Backend: Send + Sync {
    /// Its name, as `--backend` spells it.
    fn name(&self) -> &'static str;

    /// The lowering its programs take (`recover`: whether the options allow recovery): the
    /// native one, whose recovered and kept ops its library kernels run, by default.
    fn mode(&self, recover: bool) -> crate::recover::Mode {
        match recover {
            true => crate::recover::Mode::Native,
            false => crate::recover::Mode::Reference,
        }
    }

    /// Prepares `program` to run: compiles its kernels, readies its library steps and places
    /// its buffers. `consts` holds, per buffer of the program, the data of a constant buffer
    /// (`None` for every other buffer).
    fn prepare(&self, program: &Program, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Executable>, BackendError>;
}

/// Why a backend could not prepare a program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The program is inconsistent: a scheduler bug, not the graph's.
    #[error("{0}")]
    Malformed(String),
    /// The backend cannot run this program here (no device, or a step it does not have).
    #[error("{0}")]
    Unsupported(String),
}

/// A program prepared by a [`Backend`], ready to run for any sizes its symbols take.
pub trait Executable: Send + Sync {
    /// The lifetimes of the buffers it places in its per-run arena, by buffer index (`None`
    /// for inputs, constants, buffers it keeps elsewhere and buffers it never stores).
    fn lifetimes(&self) -> &[Option<Lifetime>];

    /// Runs every step of `program` (the one it was prepared from) on `inputs` for the sizes
    /// in `run.sizes`, leaving the results in `run.outs` (one tensor per output slot of the
    /// program, reused when its dtype and shape fit, replaced otherwise). Uses and keeps its
    /// own working memory in `run.device`. Nothing it allocates for the run (arena, outputs)
    /// may exceed `max_run_bytes` together: that is [`RunError::TooLarge`] before anything is
    /// allocated.
    fn run(
        &self,
        program: &Program,
        inputs: &[TensorView],
        run: &mut RunState,
        max_run_bytes: u64,
    ) -> Result<(), RunError>;

    /// How many generated kernels run natively (not on the reference executor).
    fn native_kernels(&self) -> usize;

    /// The kernels left to the reference executor, and why.
    fn fallbacks(&self) -> &[Fallback];

    /// Bytes it holds besides the program's constants (weights packed for its kernels,
    /// constants copied to the device).
    fn resident_bytes(&self) -> usize;

    /// What it did with the program, a line per decision, for `--explain` (weights packed,
    /// steps fused).
    fn explanation(&self) -> &str;

    /// How many arenas its runs have allocated (or grown) so far.
    fn arenas_allocated(&self) -> usize;
}

/// One run's sizes: every symbol's value and every buffer's length, evaluated by the runtime
/// from the inputs before the backend runs.
#[derive(Clone, Debug, Default)]
pub struct Sizes {
    /// Per symbol of the program, in [`Program::symbols`] order.
    pub symbols: Vec<Option<u64>>,
    /// Elements per buffer.
    pub lens: Vec<usize>,
    /// Bytes per temporary buffer (0 for every other buffer).
    pub bytes: Vec<usize>,
}

impl Sizes {
    /// The value of symbol `s` in this run.
    pub fn symbol(&self, p: &Program, s: &str) -> Option<u64> {
        p.symbols.iter().position(|x| &**x == s).and_then(|i| self.symbols.get(i).copied().flatten())
    }

    /// Buffer `b`'s shape in this run, into a reused vector.
    pub fn shape_into(&self, p: &Program, b: BufferId, out: &mut Vec<usize>) -> Result<(), ExecError> {
        let lookup = |s: &str| self.symbol(p, s);
        out.clear();
        for d in p.buffers[b].shape.dims() {
            out.push(d.eval(&lookup)? as usize);
        }
        Ok(())
    }

    /// Buffer `b`'s shape in this run.
    pub fn shape(&self, p: &Program, b: BufferId) -> Result<Vec<usize>, ExecError> {
        let mut out = Vec::new();
        self.shape_into(p, b, &mut out)?;
        Ok(out)
    }

    /// Whether `t` has buffer `b`'s dtype and shape in this run (without allocating).
    pub fn fits(&self, p: &Program, b: BufferId, t: &Tensor) -> Result<bool, ExecError> {
        let buf = &p.buffers[b];
        if t.dtype() != buf.dtype || t.shape().len() != buf.shape.rank() {
            return Ok(false);
        }
        let lookup = |s: &str| self.symbol(p, s);
        let mut numel = 1usize;
        for (d, &n) in buf.shape.dims().iter().zip(t.shape()) {
            if d.eval(&lookup)? != n as u64 {
                return Ok(false);
            }
            numel = numel.saturating_mul(n);
        }
        // (A placeholder has a scalar's shape and no data.)
        Ok(t.data().len() == numel)
    }
}

/// Per-run state: what the runtime computes for a run and what the backend keeps between
/// runs. A plan pools these, one per concurrent run.
#[derive(Default)]
pub struct RunState {
    pub sizes: Sizes,
    /// One tensor per output slot during a run.
    pub outs: Vec<Tensor>,
    /// When set, the backend records the nanoseconds each step took (cleared per run).
    pub step_ns: Option<Vec<u64>>,
    /// The backend's own working memory (arena, scratch, cached sizes), made by its first run
    /// on this state and kept for the next.
    pub device: Option<Box<dyn Any + Send>>,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Guard(#[from] GuardError),
    #[error("buffer {buffer} ({shape}) has no size with these inputs: {error}")]
    Size { buffer: BufferId, shape: String, error: DimError },
    #[error("the run needs {need} bytes of memory (temporaries and outputs), more than the limit of {limit} (`Limits::max_run_bytes`)")]
    TooLarge { need: u64, limit: u64 },
    #[error("the system could not provide {bytes} bytes for {what}")]
    OutOfMemory { what: String, bytes: u64 },
    #[error("step {step}: {error}")]
    Step { step: usize, error: ExecError },
    #[error("{0}")]
    Interp(#[from] InterpError),
    /// A size the compiled graph assumed (a slice inside its dim) does not hold for these
    /// inputs.
    #[error("{0}")]
    Assumption(String),
}

/// Why a backend left a kernel to the reference executor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Declined {
    /// The kernel uses something the backend does not implement (a dtype, an access it cannot
    /// bounds-check): the reference executor runs it, by design.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The backend failed on a kernel it accepts (its own verifier refused the code, or it
    /// panicked): a backend defect. The plan still runs, the kernel on the reference
    /// executor, and [`Executable::fallbacks`] reports it.
    #[error("code generation failed: {0}")]
    Defect(String),
}

/// A kernel of a prepared program that runs on the reference executor, and why.
#[derive(Clone, Debug)]
pub struct Fallback {
    /// The kernel's name in the scheduled program.
    pub kernel: String,
    pub why: Declined,
}
