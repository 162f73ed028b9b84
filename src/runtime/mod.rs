//! The runtime: compile a graph once into a [`Plan`], run the plan many times.
//!
//! [`compile`] lowers the graph (functionalize, decompose, simplify), schedules the prims
//! graph into a kernel program, prepares every kernel, and computes the lifetimes of the
//! program's temporary buffers. [`Plan::run`] then:
//!
//! 1. checks the inputs against the input guards (dtype, rank, static dims, one value per size
//!    symbol, compound dims like `2*n`), failing with a [`GuardError`] that names the input;
//! 2. evaluates every size with the bound symbols, so one plan serves every batch size or
//!    sequence length without recompiling;
//! 3. places the temporaries in one arena (see [`memory`]: greedy by size over exact
//!    lifetimes, buffers whose lifetimes do not overlap share memory);
//! 4. runs the steps in order — each kernel by its [`KernelExec`]; library calls and graph
//!    breaks through the interpreter's implementations;
//! 5. copies the outputs out and applies the epilogue: inputs the graph mutated in place come
//!    back as [`Outputs::mutated_inputs`] (or are written back by [`Plan::run_in_place`]).
//!
//! ## Kernel executors
//!
//! A kernel runs either on the reference executor ([`crate::kernel::eval`]) or natively: a
//! [`KernelCompiler`] given in [`CompileOptions`] turns a kernel into a [`NativeKernel`], an
//! entry point following the [`crate::kernel::KernelFn`] convention plus the kernel's
//! [`Kernel::dim_table`]. Per run the runtime evaluates that dim table, builds the table of
//! buffer base addresses (inputs and constants in place, temporaries in the arena: every
//! buffer is dense, row-major, native-endian, bool as one byte 0/1), checks that every affine
//! access of the kernel stays inside its buffer (so a compiled kernel can never touch memory
//! outside its buffers), and calls the entry for `begin..end` of the outermost loop, split
//! into at most [`CompileOptions::threads`] ranges on the current rayon pool (the caller's
//! `ThreadPool::install`, else rayon's global pool, on one of whose workers a run from any
//! other thread then runs whole) when the kernel has enough work for each
//! ([`PAR_WORK`]), taking any error the code recorded (integer division by zero) through
//! [`NativeKernel::take_error`] on each thread. A kernel the compiler refuses runs on
//! the reference executor; the choice is per kernel, and both read and write the same arena.
//! [`cranelift::CraneliftCompiler`] adapts the CPU backend's Cranelift code generator
//! ([`crate::backend::cpu`]); `CompileOptions { kernel_compiler: Some(..), .. }` turns it on.
//! `CompileOptions::default()` is that native mode over the machine's threads;
//! [`CompileOptions::reference`] is the reference executor alone.
//!
//! ## Concurrency and memory reuse
//!
//! A plan is `Send + Sync`: runs on several threads at once each take a run state (arena,
//! scratch registers, size tables) from a pool and return it afterwards, so after warm-up a run
//! allocates nothing on the reference path of kernels but the returned output tensors (and
//! the two vectors holding them). Library calls and graph breaks run the interpreter, which
//! allocates its own values. The arena of a run state is reallocated only when a run needs a
//! larger one; [`Plan::arenas_allocated`] counts arena allocations.

pub mod cranelift;
mod library;
pub mod memory;
mod native;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cranelift_entity::EntityRef;

use crate::backend::cpu::conv_blocked::PackedWeights;
use crate::backend::cpu::packed::PackedB;
use crate::interp::{self, InterpError};
use crate::ir::{Dim, DimError, Graph};
use crate::kernel::eval::{
    bind_inputs, conv_attrs, elem_size, eval_library, get_bytes, get_elem, input_guards, matmul_attrs, run_kernel,
    set_bytes, tensor_from_bytes, ExecError, GuardError, InputGuard, Memory, PreparedKernel, Scratch, Val,
};
use crate::kernel::{BufferId, BufferKind, Kernel, KernelFn, LibraryCall, MatmulCall, Program, Step};
use crate::ops::OpKind;
use crate::passes::functionalize::Epilogue;
use crate::passes::LowerError;
use crate::pipeline::{Mode, PipelineError, Rung};
use crate::sched::ScheduleError;
use crate::tensor::{Tensor, TensorView};
use memory::{Lifetime, ALIGN};
use smallvec::SmallVec;

/// Where a plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Scheduled kernels on the host: compiled by the [`KernelCompiler`] when one is given,
    /// on the reference executor otherwise.
    Cpu,
    /// The reference interpreter on the graph as given (no lowering).
    Interp,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Interp => "interp",
        }
    }

    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "cpu" => Some(Backend::Cpu),
            "interp" => Some(Backend::Interp),
            _ => None,
        }
    }
}

/// Turns kernels into native code (the CPU backend's code generator implements this).
pub trait KernelCompiler: Send + Sync {
    /// Compiles `kernel` of `program`; an error makes the kernel run on the reference executor.
    fn compile(&self, kernel: &Kernel, program: &Program) -> Result<NativeKernel, Declined>;
}

/// Why a kernel compiler left a kernel to the reference executor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Declined {
    /// The kernel uses something the compiler does not implement (a dtype, an access it cannot
    /// bounds-check): the reference executor runs it, by design.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The compiler failed on a kernel it accepts (its own verifier refused the code, or it
    /// panicked): a backend defect. The plan still runs, the kernel on the reference
    /// executor, and [`Plan::fallbacks`] reports it.
    #[error("code generation failed: {0}")]
    Defect(String),
}

/// A kernel of a plan that runs on the reference executor although a kernel compiler was set.
#[derive(Clone, Debug)]
pub struct Fallback {
    /// The kernel's name in the scheduled program.
    pub kernel: String,
    pub why: Declined,
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

/// Compilation settings.
#[derive(Clone)]
pub struct CompileOptions {
    pub backend: Backend,
    /// Threads a native kernel's outermost loop is split over (at least 1). The reference
    /// executor runs on the calling thread.
    pub threads: usize,
    /// Compiles kernels natively; `None` runs every kernel on the reference executor.
    pub kernel_compiler: Option<Arc<dyn KernelCompiler>>,
    /// Most memory one run may use, in bytes: its arena of temporaries and the outputs it
    /// allocates, checked before anything is allocated (a run over it is
    /// [`RunError::TooLarge`]; memory the system cannot provide under it is
    /// [`RunError::OutOfMemory`], never an abort). 4 GiB by default.
    pub max_run_bytes: u64,
    /// Recover the ops of `crate::ops::library::RECOVERABLE` (softmax, log_softmax, layer_norm,
    /// rms_norm, gelu, silu, sigmoid, attention) from their prims and run them through library
    /// kernels. Off in the reference mode (which runs the prims exactly as lowered), on in
    /// native mode; `--no-recover` turns it off there.
    pub recover: bool,
    /// In native mode, pack each f32 matmul's constant right operand (a weight) once, when
    /// the plan is built, for ladder's own GEMM kernel (`crate::backend::cpu::packed`), and
    /// each f32 convolution's constant weight for the blocked convolution kernel
    /// (`crate::backend::cpu::conv_blocked::PackedWeights`): faster products and no packing
    /// per call, for a second copy of those weights in memory. On by default; machines
    /// without the GEMM kernel (AVX-512F) pack no matmul weights.
    pub pack_weights: bool,
    /// How [`Backend::Interp`] plans run the interpreter (precise mode, fuel, size limit).
    pub interp: crate::interp::Options,
}

impl Default for CompileOptions {
    /// The fast path: [`CompileOptions::native_cpu`] over the machine's threads (where
    /// Cranelift cannot generate code for the host, [`CompileOptions::reference`], whose
    /// plans then report no native kernels: `Plan::native_kernels`).
    fn default() -> CompileOptions {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CompileOptions::native_cpu(threads).unwrap_or_else(|_| CompileOptions::reference())
    }
}

impl CompileOptions {
    /// The reference executor: every kernel runs as scheduled on the calling thread, the prims
    /// exactly as lowered (no recovery), no native code. The oracle the native mode is
    /// checked against, and slow: use it to check, not to serve.
    pub fn reference() -> CompileOptions {
        CompileOptions {
            backend: Backend::Cpu,
            threads: 1,
            kernel_compiler: None,
            max_run_bytes: 1 << 32,
            recover: false,
            pack_weights: true,
            interp: crate::interp::Options::default(),
        }
    }
}

impl CompileOptions {
    /// The CPU backend in native mode: kernels compiled by Cranelift (each kernel the code
    /// generator does not support runs on the reference executor) and f32 matmuls through
    /// the GEMM library, over `threads` threads.
    pub fn native_cpu(threads: usize) -> Result<CompileOptions, crate::backend::cpu::CodegenError> {
        let compiler = cranelift::CraneliftCompiler::shared(crate::backend::cpu::CpuOptions::default())?;
        Ok(CompileOptions {
            backend: Backend::Cpu,
            threads: threads.max(1),
            kernel_compiler: Some(compiler),
            recover: true,
            ..CompileOptions::reference()
        })
    }
}

impl std::fmt::Debug for CompileOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileOptions")
            .field("backend", &self.backend)
            .field("threads", &self.threads)
            .field("kernel_compiler", &self.kernel_compiler.is_some())
            .field("max_run_bytes", &self.max_run_bytes)
            .field("recover", &self.recover)
            .finish()
    }
}

/// Why a graph could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("lowering: {0}")]
    Pipeline(#[from] PipelineError),
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    #[error("the scheduled program is malformed (a scheduler bug): {0}")]
    Malformed(String),
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Guard(#[from] GuardError),
    #[error("buffer {buffer} ({shape}) has no size with these inputs: {error}")]
    Size { buffer: BufferId, shape: String, error: DimError },
    #[error("the run needs {need} bytes of memory (temporaries and outputs), more than the limit of {limit} (`CompileOptions::max_run_bytes`)")]
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

/// What a run returns.
#[derive(Clone, Debug)]
pub struct Outputs {
    /// The graph's outputs, in order.
    pub outputs: Vec<Tensor>,
    /// The new contents of every input the graph mutates in place: (input index, tensor).
    pub mutated_inputs: Vec<(usize, Tensor)>,
}

/// Arena use for one set of sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Bytes of the arena (all temporaries, overlapping where lifetimes allow).
    pub arena_bytes: usize,
    /// Bytes the temporaries would take without sharing (each aligned to [`memory::ALIGN`]).
    pub naive_bytes: usize,
    pub temporaries: usize,
}

/// Where a buffer's memory is during a run.
#[derive(Clone, Debug)]
enum Loc {
    Input(usize),
    Const(Arc<Tensor>),
    Temp,
    /// Graph output slot `k`: the kernels write straight into the tensor the run returns
    /// (no copy out of the arena).
    Output(usize),
}

struct KernelStep {
    /// Its index among the plan's kernel steps (where a run state caches its sizes).
    id: usize,
    prepared: PreparedKernel,
    exec: KernelExec,
}

/// A native kernel's sizes for one set of symbol values: its dim table, outermost count and
/// work estimate, its accesses checked against the buffers (see `Plan::prepare_native`).
struct Prepared {
    native_dims: Vec<i64>,
    count: i64,
    work: u64,
}

/// 64-byte aligned arena storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// Per-run working memory, pooled in the plan.
#[derive(Default)]
struct RunState {
    /// How long this state's last run took (0 before the first): runs after one at least
    /// [`HELP_AFTER_NS`] long get helper workers (see `Plan::on_worker`).
    last_run_ns: u64,
    symbols: Vec<Option<u64>>,
    /// Elements per buffer.
    lens: Vec<usize>,
    /// Bytes per temporary (0 for others).
    bytes: Vec<usize>,
    /// The sizes `offsets` were computed for.
    layout_for: Vec<usize>,
    offsets: Vec<usize>,
    order: Vec<usize>,
    placed: Vec<(usize, usize)>,
    arena: Vec<Line>,
    arena_bytes: usize,
    scratch: Scratch,
    dims: Vec<i64>,
    /// Per kernel step (by `KernelStep::id`), its sizes for the symbol values `prepared_for`
    /// (sizes and buffer lengths follow from the symbols alone).
    prepared: Vec<Option<Prepared>>,
    prepared_for: Option<Vec<Option<u64>>>,
    /// Every buffer's address in this run (filled once per run, before the first step).
    ptrs: Vec<usize>,
    /// One tensor per output slot during a run.
    outs: Vec<Tensor>,
    /// Operand shapes of a GEMM step (reused).
    shape_a: Vec<usize>,
    shape_b: Vec<usize>,
    /// Argument shapes of a library step (reused).
    arg_shapes: Vec<Vec<usize>>,
    /// A convolution's im2col matrix (reused, grown to the largest).
    conv_scratch: Vec<f32>,
    /// A post-op's constant addend, repeated per channel (`Plan::post_bias`).
    post_addend: Vec<f32>,
    /// With [`Plan::profile`]: nanoseconds per step of the last run.
    step_ns: Option<Vec<u64>>,
}

fn arena_bytes_mut(arena: &mut [Line]) -> &mut [u8] {
    let len = std::mem::size_of_val(arena);
    // SAFETY: `Line` is a plain byte array with no padding (`repr(C)`, size ALIGN), so the
    // slice is `len` initialised bytes; u8 has alignment 1 and no invalid values, and the
    // returned slice borrows `arena` mutably for its whole life.
    unsafe { std::slice::from_raw_parts_mut(arena.as_mut_ptr().cast::<u8>(), len) }
}

/// A compiled graph, ready to run.
pub struct Plan {
    backend: Backend,
    graph: Graph,
    epilogue: Epilogue,
    program: Option<Program>,
    explanation: String,
    guards: Vec<InputGuard>,
    kernels: Vec<Option<KernelStep>>,
    /// Per step: a matmul's constant right operand, packed for the GEMM kernel.
    packed: Vec<Option<PackedB>>,
    /// Per step: a convolution's constant weight, packed for the blocked kernel.
    conv_packed: Vec<Option<PackedWeights>>,
    locs: Vec<Loc>,
    dtypes: Vec<crate::ir::DType>,
    life: Vec<Option<Lifetime>>,
    threads: usize,
    /// Run f32 matmuls through the GEMM library (native mode: a kernel compiler is set). The
    /// reference mode keeps the interpreter's own matmul, bit for bit.
    native_library: bool,
    max_run_bytes: u64,
    pool: Mutex<Vec<RunState>>,
    arenas: AtomicUsize,
    interp: crate::interp::Options,
    /// What the scheduled graph assumes of its sizes and checks each run: a slice with a
    /// symbolic dim or bound lies inside its dim (`crate::ops::shape::slice_range`).
    assumptions: Vec<Assumption>,
    /// Kernels the kernel compiler declined, in step order.
    fallbacks: Vec<Fallback>,
}

/// A slice of `len` elements from `first` to `stop` (one past its last) lies inside a dim of
/// size `dim` for the run's sizes, or the run fails naming `what`.
#[derive(Clone, Debug)]
struct Assumption {
    first: Dim,
    len: Dim,
    stop: Dim,
    dim: Dim,
    what: String,
}

/// The assumptions of `g`'s slices on symbolic dims or with symbolic bounds: the last element
/// taken lies inside the dim.
fn slice_assumptions(g: &Graph) -> Vec<Assumption> {
    let mut out = Vec::new();
    for (v, node) in g.nodes() {
        if node.op != OpKind::Slice {
            continue;
        }
        let (start, end, step) = (node.attrs.size("start"), node.attrs.size("end"), node.attrs.int("step"));
        let Some(&arg) = node.args.first() else { continue };
        let axis = crate::ops::util::normalize_axis(node.attrs.int("axis"), g.ty(arg).rank());
        let Ok(axis) = axis else { continue };
        let n = g.ty(arg).shape.dims()[axis].clone();
        if n.is_static() && start.as_const().is_some() && end.as_const().is_some() {
            continue;
        }
        let Ok(r) = crate::ops::shape::slice_range(&n, &start, &end, step) else { continue };
        if r.len.as_const() == Some(0) {
            continue;
        }
        // first + (len - 1) * step + 1 <= n, when len >= 1; len 0 takes nothing.
        let last = r.len.mul(&Dim::new(step.max(1) as u64)).and_then(|x| x.add(&r.first));
        let stop = last.and_then(|x| x.sub(&Dim::new(step.max(1) as u64 - 1)));
        if let Ok(stop) = stop {
            let what = format!("{} = slice {start}:{end}:{step} of a dim of size {n}", g.display_value(v));
            out.push(Assumption { first: r.first, len: r.len, stop, dim: n, what });
        }
    }
    out
}

/// Compiles `g` for `options.backend`.
pub fn compile(g: &Graph, options: &CompileOptions) -> Result<Plan, CompileError> {
    let names = |n: usize| g.input_name(n);
    let mut plan = Plan {
        native_library: options.kernel_compiler.is_some(),
        backend: options.backend,
        graph: g.clone(),
        epilogue: Epilogue::default(),
        program: None,
        explanation: String::new(),
        guards: Vec::new(),
        kernels: Vec::new(),
        packed: Vec::new(),
        conv_packed: Vec::new(),
        locs: Vec::new(),
        dtypes: Vec::new(),
        life: Vec::new(),
        threads: options.threads.max(1),
        max_run_bytes: options.max_run_bytes,
        pool: Mutex::new(Vec::new()),
        arenas: AtomicUsize::new(0),
        interp: options.interp.clone(),
        assumptions: Vec::new(),
        fallbacks: Vec::new(),
    };
    if options.backend == Backend::Interp {
        // Only the epilogue is needed: which inputs the graph mutates.
        let functional = crate::passes::functionalize(g).map_err(|e| PipelineError::from(LowerError::from(e)))?;
        plan.epilogue = functional.epilogue;
        plan.guards = g
            .inputs()
            .iter()
            .enumerate()
            .map(|(n, &v)| InputGuard { name: names(n), dtype: g.ty(v).dtype, dims: g.ty(v).shape.dims().to_vec() })
            .collect();
        return Ok(plan);
    }
    let mode = if options.recover { Mode::Native } else { Mode::Reference };
    let mut lowering = crate::pipeline::lower(g, mode, Rung::Kernels).map_err(|e| match e {
        PipelineError::Schedule(e) => CompileError::Schedule(e),
        e => CompileError::Pipeline(e),
    })?;
    let scheduled = lowering
        .scheduled
        .take()
        .ok_or_else(|| CompileError::Malformed("the pipeline stopped before the kernels rung".into()))?;
    plan.epilogue = lowering.functional.as_ref().map(|f| f.epilogue.clone()).unwrap_or_default();
    let simplified = lowering.graph();
    plan.assumptions = slice_assumptions(simplified);
    let p = scheduled.program;
    plan.guards = input_guards(&p, &names);
    for (id, b) in p.buffers.iter() {
        plan.dtypes.push(b.dtype);
        plan.locs.push(match &b.kind {
            BufferKind::Input(n) => Loc::Input(*n),
            BufferKind::Const(name) => {
                let blob = simplified
                    .blob_by_name(name)
                    .ok_or_else(|| CompileError::Malformed(format!("{id} reads missing blob `{name}`")))?;
                Loc::Const(Arc::clone(&simplified.blob(blob).tensor))
            }
            BufferKind::Temp => Loc::Temp,
        });
    }
    let step_kernels: Vec<Option<&Kernel>> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Kernel(k) => Some(k),
            Step::Matmul(m) => m.epilogue.as_deref(),
            _ => None,
        })
        .collect();
    // Native code for every kernel, compiled on the plan's threads at once (code generation
    // is most of a long graph's compile time).
    let compiled: Vec<Option<Result<NativeKernel, Declined>>> = match &options.kernel_compiler {
        Some(c) => {
            let one = |k: &Option<&Kernel>| k.map(|k| c.compile(k, &p));
            if plan.threads > 1 {
                use rayon::prelude::*;
                step_kernels.par_iter().with_max_len(1).map(one).collect()
            } else {
                step_kernels.iter().map(one).collect()
            }
        }
        None => vec![None; step_kernels.len()],
    };
    for (kernel, native) in step_kernels.iter().zip(compiled) {
        plan.kernels.push(match kernel {
            Some(k) => {
                let prepared = PreparedKernel::new(k, &p).map_err(CompileError::Malformed)?;
                let exec = match native {
                    Some(Ok(native)) => KernelExec::Native(native),
                    Some(Err(why)) => {
                        plan.fallbacks.push(Fallback { kernel: k.name.clone(), why });
                        KernelExec::Reference
                    }
                    None => KernelExec::Reference,
                };
                Some(KernelStep { id: plan.kernels.len(), prepared, exec })
            }
            None => None,
        });
    }
    // Constant weights packed once, per step: a matmul's for the GEMM, a conv's for the
    // blocked convolution (one pass over the steps).
    let pack = plan.native_library && options.pack_weights;
    let (packed, conv_packed) = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Matmul(m) if pack => (plan.pack_weight(&p, m), None),
            Step::Conv(c) if pack => (None, plan.pack_conv_weight(&p, c)),
            _ => (None, None),
        })
        .unzip();
    (plan.packed, plan.conv_packed) = (packed, conv_packed);
    let packed_lines: String = p
        .steps
        .iter()
        .zip(plan.packed.iter().zip(&plan.conv_packed))
        .filter_map(|(s, packed)| match (s, packed) {
            (Step::Matmul(m), (Some(pb), _)) => Some(format!(
                "matmul {}: weight {} ({} x {}) packed once for the GEMM kernel ({} KiB)\n",
                m.out,
                m.b,
                pb.k(),
                pb.n(),
                pb.bytes().div_ceil(1024)
            )),
            (Step::Conv(c), (_, Some(pw))) => Some(format!(
                "conv {}: weight {} packed once for the blocked convolution kernel ({} KiB)\n",
                c.out,
                c.w,
                pw.bytes().div_ceil(1024)
            )),
            _ => None,
        })
        .collect();
    plan.life = memory::lifetimes(&p);
    // A temporary that is a graph output lives in the returned tensor, outside the arena
    // (once, for its first output slot; bools keep the copy, see `TensorData::as_bytes_mut`).
    for (k, (_, b)) in p.outputs.iter().enumerate() {
        let i = b.index();
        if matches!(plan.locs[i], Loc::Temp) && p.buffers[*b].dtype != crate::ir::DType::Bool {
            plan.locs[i] = Loc::Output(k);
            plan.life[i] = None;
        }
    }
    // A kernel step that runs its activation fused writes its rows straight into the
    // activation's result (`run_kernel_activation`): the temporary it stores is never
    // touched, so it gets no arena bytes.
    for (step, s) in p.steps.iter().enumerate() {
        if let (Step::Kernel(k), Some(ks)) = (s, &plan.kernels[step]) {
            if let Some(l) = k.activation.as_ref().filter(|l| plan.fuses_activation(&p, ks, l)) {
                plan.life[l.args[0].index()] = None;
            }
        }
    }
    plan.explanation = match (&lowering.recovered, &lowering.simplified) {
        (Some(r), Some(simplified)) if !r.matches.is_empty() => {
            format!("{}{}", r.explain(simplified), scheduled.explanation)
        }
        _ => scheduled.explanation,
    };
    plan.explanation.push_str(&packed_lines);
    plan.program = Some(p);
    Ok(plan)
}

/// Loads and stores of the reference executor over a run's memory.
struct RunMemory<'a> {
    locs: &'a [Loc],
    dtypes: &'a [crate::ir::DType],
    lens: &'a [usize],
    offsets: &'a [usize],
    inputs: &'a [TensorView<'a>],
    arena: &'a mut [u8],
    outs: &'a mut [Tensor],
    kernel: &'a str,
}

impl RunMemory<'_> {
    fn oob(&self, buf: BufferId, index: i64) -> ExecError {
        ExecError::OutOfBounds { kernel: self.kernel.to_string(), buffer: buf, index, len: self.lens[buf.index()] }
    }

    fn temp_range(&self, b: usize) -> std::ops::Range<usize> {
        let start = self.offsets[b];
        start..start + self.lens[b] * elem_size(self.dtypes[b])
    }
}

impl Memory for RunMemory<'_> {
    fn load(&self, buf: BufferId, index: i64) -> Result<Val, ExecError> {
        let b = buf.index();
        let i = usize::try_from(index).map_err(|_| self.oob(buf, index))?;
        let v = match &self.locs[b] {
            Loc::Input(n) => get_bytes(self.inputs[*n].dtype(), self.inputs[*n].bytes(), i),
            Loc::Const(t) => get_elem(t.data(), i),
            Loc::Temp => get_bytes(self.dtypes[b], &self.arena[self.temp_range(b)], i),
            Loc::Output(k) => get_elem(self.outs[*k].data(), i),
        };
        v.ok_or_else(|| self.oob(buf, index))
    }

    fn store(&mut self, buf: BufferId, index: i64, value: Val) -> Result<(), ExecError> {
        let b = buf.index();
        let i = usize::try_from(index).map_err(|_| self.oob(buf, index))?;
        match self.locs[b] {
            Loc::Temp => {
                let r = self.temp_range(b);
                let dt = self.dtypes[b];
                set_bytes(dt, &mut self.arena[r], i, value).ok_or_else(|| self.oob(buf, index))
            }
            Loc::Output(k) => {
                let dt = self.dtypes[b];
                let bytes = self.outs[k].data_mut().as_bytes_mut();
                bytes.and_then(|bytes| set_bytes(dt, bytes, i, value)).ok_or_else(|| self.oob(buf, index))
            }
            _ => Err(ExecError::Invalid(format!("{buf} is read-only"))),
        }
    }
}

/// Raw pointers handed to native kernels on other threads.
#[derive(Clone, Copy)]
struct NativeArgs {
    bufs: *const *mut u8,
    dims: *const i64,
}

// SAFETY: the pointers are only dereferenced by the kernel during `run_native`, which joins
// every thread before the tables and buffers they point to can change; kernels write disjoint
// elements for disjoint ranges of the outermost loop (the kernel IR's contract).
unsafe impl Send for NativeArgs {}
unsafe impl Sync for NativeArgs {}

impl Plan {
    /// The graph the plan was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Bytes of the weights packed for the GEMM kernel (held by the plan, beside the
    /// constants themselves).
    pub fn packed_bytes(&self) -> usize {
        self.packed.iter().flatten().map(PackedB::bytes).sum::<usize>()
            + self.conv_packed.iter().flatten().map(PackedWeights::bytes).sum::<usize>()
    }

    /// The scheduled program (`None` for the interpreter backend).
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }

    /// The scheduler's explanation of the program.
    pub fn explanation(&self) -> &str {
        &self.explanation
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How many kernels run natively.
    pub fn native_kernels(&self) -> usize {
        self.kernels.iter().flatten().filter(|k| matches!(k.exec, KernelExec::Native(_))).count()
    }

    /// The kernels that run on the reference executor although the plan was compiled with a
    /// kernel compiler, and why (empty for reference plans).
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// How many arenas runs have allocated (or grown) so far.
    pub fn arenas_allocated(&self) -> usize {
        self.arenas.load(Ordering::Relaxed)
    }

    /// The graph's input guards (name, dtype, dims), in input order.
    pub fn inputs(&self) -> &[InputGuard] {
        &self.guards
    }

    /// Arena size against the sum of temporary sizes for inputs of these shapes.
    pub fn memory_report(&self, inputs: &[Tensor]) -> Result<MemoryReport, RunError> {
        let mut st = RunState::default();
        self.bind(&mut st, &views(inputs))?;
        self.layout(&mut st)?;
        // Only the temporaries (the buffers with a lifetime in the arena): inputs, constants
        // and outputs have memory of their own.
        let naive = st
            .bytes
            .iter()
            .zip(&self.life)
            .filter(|(_, life)| life.is_some())
            .map(|(&b, _)| memory::align_up(b).unwrap_or(usize::MAX))
            .fold(0usize, usize::saturating_add);
        Ok(MemoryReport {
            arena_bytes: st.arena_bytes,
            naive_bytes: naive,
            temporaries: self.life.iter().filter(|l| l.is_some()).count(),
        })
    }

    /// Runs the plan on `inputs` (one per graph input, in order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Outputs, RunError> {
        let mut out = Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
        self.run_into(inputs, &mut out)?;
        Ok(out)
    }

    /// Runs the plan on borrowed inputs (one per graph input, in order): the caller's buffers
    /// are read where they lie, without a copy, by the native and reference executors (the
    /// interpreter backend copies them into tensors first).
    pub fn run_views(&self, inputs: &[TensorView]) -> Result<Outputs, RunError> {
        let mut out = Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
        self.run_views_into(inputs, &mut out)?;
        Ok(out)
    }

    /// Runs the plan on `inputs` and leaves the results in `out`, reusing the tensors already
    /// there: one whose dtype and shape match its result is overwritten in place (the kernels
    /// write straight into it), others are replaced. Passing the previous call's `Outputs`
    /// back makes a warm run allocate nothing at all. On an error `out` is left empty.
    pub fn run_into(&self, inputs: &[Tensor], out: &mut Outputs) -> Result<(), RunError> {
        if self.backend == Backend::Interp {
            *out = self.run_interp(inputs)?;
            return Ok(());
        }
        self.run_views_into(&views(inputs), out)
    }

    /// [`Plan::run_into`] on borrowed inputs, as [`Plan::run_views`] takes them: a warm run
    /// on the native backend neither copies the inputs nor allocates.
    pub fn run_views_into(&self, inputs: &[TensorView], out: &mut Outputs) -> Result<(), RunError> {
        if self.backend == Backend::Interp {
            let owned: Vec<Tensor> = inputs.iter().map(TensorView::to_tensor).collect();
            *out = self.run_interp(&owned)?;
            return Ok(());
        }
        let mut st = self.pool.lock().map(|mut p| p.pop()).unwrap_or_default().unwrap_or_default();
        // The caller's tensors in output-slot order (mutated inputs' slots from
        // `mutated_inputs`, the rest from `outputs`).
        let n_slots = self.program.as_ref().map_or(0, |p| p.outputs.len());
        st.outs.clear();
        {
            let mut plain = out.outputs.drain(..);
            let mut mutated = out.mutated_inputs.drain(..).map(|(_, t)| t);
            for k in 0..n_slots {
                let t =
                    if self.epilogue.mutations.iter().any(|m| m.output == k) { mutated.next() } else { plain.next() };
                st.outs.push(t.unwrap_or_else(Tensor::placeholder));
            }
        }
        let (helpers, started) = (st.last_run_ns >= HELP_AFTER_NS, std::time::Instant::now());
        let result = self.on_worker(helpers, || self.run_with(&mut st, inputs));
        st.last_run_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if result.is_err() {
            st.outs.clear();
        }
        for (k, t) in st.outs.drain(..).enumerate() {
            match self.epilogue.mutations.iter().find(|m| m.output == k) {
                Some(m) => out.mutated_inputs.push((m.input, t)),
                None => out.outputs.push(t),
            }
        }
        if let Ok(mut pool) = self.pool.lock() {
            pool.push(st);
        }
        result
    }

    /// Times each step: runs the plan `runs` times (after one warm-up run) and returns, per
    /// step of [`Plan::program`] in order, its label and median time in microseconds (empty
    /// for the interpreter backend). The runs are otherwise ordinary runs.
    pub fn profile(&self, inputs: &[Tensor], runs: usize) -> Result<Vec<StepTime>, RunError> {
        let Some(p) = &self.program else { return Ok(Vec::new()) };
        let mut st = RunState { step_ns: Some(Vec::new()), ..RunState::default() };
        st.outs = (0..p.outputs.len()).map(|_| Tensor::placeholder()).collect();
        let mut samples: Vec<Vec<u64>> = vec![Vec::new(); p.steps.len()];
        let inputs = views(inputs);
        for run in 0..=runs.max(1) {
            let (helpers, started) = (st.last_run_ns >= HELP_AFTER_NS, std::time::Instant::now());
            self.on_worker(helpers, || self.run_with(&mut st, &inputs))?;
            st.last_run_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if run > 0 {
                for (k, &t) in st.step_ns.iter().flatten().enumerate() {
                    samples[k].push(t);
                }
            }
        }
        Ok(p.steps
            .iter()
            .zip(samples)
            .map(|(s, mut t)| {
                t.sort_unstable();
                StepTime { label: step_label(s), median_us: t.get(t.len() / 2).copied().unwrap_or(0) as f64 / 1e3 }
            })
            .collect())
    }

    /// Runs the plan and writes the new contents of mutated inputs back into `inputs`.
    pub fn run_in_place(&self, inputs: &mut [Tensor]) -> Result<Vec<Tensor>, RunError> {
        let out = self.run(inputs)?;
        for (i, t) in out.mutated_inputs {
            inputs[i] = t;
        }
        Ok(out.outputs)
    }

    fn run_interp(&self, inputs: &[Tensor]) -> Result<Outputs, RunError> {
        let mut values = Vec::new();
        bind_inputs(&self.guards, &interp_symbols(&self.graph), &views(inputs), &mut values)?;
        let outcome = interp::run(&self.graph, inputs, &self.interp)?;
        let mutated_inputs =
            self.epilogue.mutations.iter().map(|m| (m.input, outcome.inputs_after[m.input].clone())).collect();
        Ok(Outputs { outputs: outcome.outputs, mutated_inputs })
    }

    fn bind(&self, st: &mut RunState, inputs: &[TensorView]) -> Result<(), RunError> {
        let Some(p) = &self.program else { return Ok(()) };
        bind_inputs(&self.guards, &p.symbols, inputs, &mut st.symbols)?;
        let symbols = &st.symbols;
        let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
        for a in &self.assumptions {
            if a.len.eval(&lookup) == Ok(0) {
                continue;
            }
            let (first, stop, dim) = (a.first.eval(&lookup), a.stop.eval(&lookup), a.dim.eval(&lookup));
            if !matches!((&first, &stop, &dim), (Ok(_), Ok(stop), Ok(dim)) if stop <= dim) {
                // Signed values, so a start before the first element shows as negative.
                let signed = |d: &Dim| {
                    crate::ir::SizeExpr::from_dim(d)
                        .and_then(|e| e.eval(&lookup))
                        .map_or_else(|e| e.to_string(), |n| n.to_string())
                };
                return Err(RunError::Assumption(format!(
                    "{}: these inputs make it take elements {}..{} of {}, out of range (the graph assumed the symbolic sizes fit)",
                    a.what,
                    signed(&a.first),
                    signed(&a.stop),
                    signed(&a.dim)
                )));
            }
        }
        st.lens.clear();
        st.bytes.clear();
        for (id, b) in p.buffers.iter() {
            let mut n: u64 = 1;
            for d in b.shape.dims() {
                let v = d.eval(&lookup).map_err(|error| RunError::Size {
                    buffer: id,
                    shape: b.shape.to_string(),
                    error,
                })?;
                n = n.checked_mul(v).ok_or_else(|| RunError::Size {
                    buffer: id,
                    shape: b.shape.to_string(),
                    error: DimError::Overflow,
                })?;
            }
            let bytes =
                n.checked_mul(elem_size(b.dtype) as u64).filter(|&x| x <= self.max_run_bytes).ok_or_else(|| {
                    RunError::TooLarge { need: n.saturating_mul(elem_size(b.dtype) as u64), limit: self.max_run_bytes }
                })?;
            st.lens.push(n as usize);
            st.bytes.push(if matches!(b.kind, BufferKind::Temp) { bytes as usize } else { 0 });
        }
        Ok(())
    }

    fn layout(&self, st: &mut RunState) -> Result<(), RunError> {
        if st.layout_for == st.bytes && st.offsets.len() == st.bytes.len() {
            return Ok(());
        }
        let arena = memory::assign(&self.life, &st.bytes, &mut st.offsets, &mut st.order, &mut st.placed)
            .ok_or(RunError::TooLarge { need: u64::MAX, limit: self.max_run_bytes })?;
        if arena as u64 > self.max_run_bytes {
            return Err(RunError::TooLarge { need: arena as u64, limit: self.max_run_bytes });
        }
        st.layout_for.clone_from(&st.bytes);
        st.arena_bytes = arena;
        Ok(())
    }

    /// Runs the program with `st.outs` holding one tensor per output slot (reused when its
    /// dtype and shape fit); on success they hold the outputs.
    /// Runs `f` (a run of the plan) where its parallel steps find their workers. A caller on
    /// no rayon worker hands the whole run to one worker of the global pool, so that it
    /// crosses threads once per run rather than once per parallel step (each of which would
    /// otherwise queue its work on the pool and block). A caller inside a pool's `install`
    /// runs it in place, on that pool. W6 at two threads, called back to back from the main
    /// thread: 0.87 ms a run before, 0.62–0.67 after (0.59 inside an `install`).
    ///
    ///
    /// With `helpers`, for the run's duration the pool's other workers (up to the plan's
    /// threads) each run a helper that takes the pool's pending work as soon as it is queued,
    /// spinning in between, instead of going to sleep between parallel steps and being woken
    /// for the next one: on a VM a wake-up costs tens of microseconds, more than many steps
    /// take. The helpers stop when the run ends. The caller asks for them when the previous
    /// run was long enough for steps to split ([`HELP_AFTER_NS`]): spawning them costs about a
    /// microsecond, as much as a whole run of a small model. Median µs at two threads on a
    /// 2-core AVX-512 EPYC VM, without helpers / with: the corpus detector (`yolo_ts`,
    /// 160×224) 251–480 / 221–233, the CRNN (`crnn_ts`, 2×256) 333–515 / 317–334.
    fn on_worker<R: Send>(&self, helpers: bool, f: impl FnOnce() -> R + Send) -> R {
        if self.threads <= 1 {
            return f();
        }
        if !helpers {
            return if rayon::current_thread_index().is_none() { rayon::scope(|_| f()) } else { f() };
        }
        let with_helpers = || {
            let done = std::sync::atomic::AtomicBool::new(false);
            let helpers = self.threads.min(rayon::current_num_threads()).saturating_sub(1);
            rayon::scope(|s| {
                for _ in 0..helpers {
                    s.spawn(|_| help_until(&done));
                }
                let r = f();
                done.store(true, std::sync::atomic::Ordering::Release);
                r
            })
        };
        if rayon::current_thread_index().is_none() {
            rayon::scope(|_| with_helpers())
        } else {
            with_helpers()
        }
    }

    fn run_with(&self, st: &mut RunState, inputs: &[TensorView]) -> Result<(), RunError> {
        let Some(p) = &self.program else {
            let owned: Vec<Tensor> = inputs.iter().map(TensorView::to_tensor).collect();
            let out = self.run_interp(&owned)?;
            st.outs = out.outputs;
            return Ok(());
        };
        self.bind(st, inputs)?;
        self.layout(st)?;
        let at_end = |error| RunError::Step { step: p.steps.len(), error };
        // The outputs this run allocates, and the arena, within the limit before any of it is.
        let own = |k: usize, b: BufferId| matches!(self.locs[b.index()], Loc::Output(s) if s == k);
        let mut need = st.arena_bytes as u64;
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            if own(k, *b) {
                let bytes = (st.lens[b.index()] as u64).saturating_mul(elem_size(p.buffers[*b].dtype) as u64);
                need = need.saturating_add(bytes);
            }
        }
        if need > self.max_run_bytes {
            return Err(RunError::TooLarge { need, limit: self.max_run_bytes });
        }
        for (k, (name, b)) in p.outputs.iter().enumerate() {
            if own(k, *b) && !self.fits(p, st, *b, &st.outs[k]).map_err(at_end)? {
                let shape = self.shape(p, st, *b).map_err(at_end)?;
                let (dtype, len) = (p.buffers[*b].dtype, st.lens[b.index()]);
                let data = crate::tensor::TensorData::try_zeros(dtype, len).ok_or_else(|| RunError::OutOfMemory {
                    what: format!("output `{name}`"),
                    bytes: (len as u64).saturating_mul(elem_size(dtype) as u64),
                })?;
                st.outs[k] = Tensor::new(shape, data).map_err(|e| at_end(ExecError::Invalid(e.to_string())))?;
            }
        }
        let lines = st.arena_bytes.div_ceil(ALIGN);
        if st.arena.len() < lines {
            let mut arena = Vec::new();
            arena.try_reserve_exact(lines).map_err(|_| RunError::OutOfMemory {
                what: "the arena of temporaries".into(),
                bytes: st.arena_bytes as u64,
            })?;
            arena.resize(lines, Line([0; ALIGN]));
            st.arena = arena;
            self.arenas.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(t) = &mut st.step_ns {
            t.clear();
        }
        if st.prepared_for.as_ref() != Some(&st.symbols) {
            st.prepared.clear();
            st.prepared.resize_with(self.kernels.len(), || None);
            st.prepared_for = Some(st.symbols.clone());
        }
        // The buffer table native kernels read: the arena and the outputs are in place now
        // and stay for the whole run.
        st.ptrs.clear();
        for b in 0..self.locs.len() {
            let a = self.address(st, inputs, BufferId::new(b));
            st.ptrs.push(a);
        }
        for (step, s) in p.steps.iter().enumerate() {
            let at = |error| RunError::Step { step, error };
            let started = st.step_ns.is_some().then(std::time::Instant::now);
            match s {
                Step::Kernel(kernel) => {
                    self.run_kernel_and_activation(p, st, inputs, kernel, self.kernels[step].as_ref()).map_err(at)?
                }
                Step::Matmul(m) if self.native_library && self.all_f32(p, &[m.a, m.b, m.out]) => {
                    let epilogue = self.kernels[step].as_ref();
                    let packed = self.packed.get(step).and_then(Option::as_ref);
                    let (kernel_done, activation_done) =
                        self.run_gemm(p, st, inputs, m, epilogue, packed).map_err(at)?;
                    if let (Some(k), false) = (epilogue, kernel_done) {
                        self.run_kernel_step(p, st, k, inputs).map_err(at)?;
                    }
                    if let (Some(l), false) = (&m.activation, activation_done) {
                        self.run_library(p, st, inputs, l).map_err(at)?;
                    }
                }
                Step::Matmul(m) => {
                    let a = self.tensor(p, st, inputs, m.a).map_err(at)?;
                    let b = self.tensor(p, st, inputs, m.b).map_err(at)?;
                    let out = &p.buffers[m.out];
                    let shape = self.shape(p, st, m.out).map_err(at)?;
                    let t = eval_library(OpKind::Matmul, &matmul_attrs(m), &[&a, &b], out.dtype, &shape)
                        .map_err(|error| at(ExecError::Library { what: "matmul", error }))?;
                    self.write(p, st, m.out, &t).map_err(at)?;
                    if let Some(k) = &self.kernels[step] {
                        self.run_kernel_step(p, st, k, inputs).map_err(at)?;
                    }
                    if let Some(l) = &m.activation {
                        self.run_library(p, st, inputs, l).map_err(at)?;
                    }
                }
                Step::Conv(c) if self.native_library && self.all_f32(p, &[c.x, c.w, c.out]) => {
                    let packed = self.conv_packed.get(step).and_then(Option::as_ref);
                    self.run_conv(p, st, inputs, c, packed).map_err(at)?;
                }
                Step::Conv(c) => {
                    let x = self.tensor(p, st, inputs, c.x).map_err(at)?;
                    let w = self.tensor(p, st, inputs, c.w).map_err(at)?;
                    let out = &p.buffers[c.out];
                    let shape = self.shape(p, st, c.out).map_err(at)?;
                    let t = eval_library(OpKind::Conv, &conv_attrs(c), &[&x, &w], out.dtype, &shape)
                        .map_err(|error| at(ExecError::Library { what: "conv", error }))?;
                    self.write(p, st, c.out, &t).map_err(at)?;
                    if let Some(post) = &c.post {
                        self.run_post(p, st, inputs, post, c.out).map_err(at)?;
                    }
                }
                Step::Library(l) => self.run_library(p, st, inputs, l).map_err(at)?,
                Step::Interp(call) => {
                    let args: Vec<Tensor> = call
                        .args
                        .iter()
                        .map(|&b| self.tensor(p, st, inputs, b))
                        .collect::<Result<_, _>>()
                        .map_err(at)?;
                    let outcome = interp::run(&call.graph, &args, &interp::Options::default())
                        .map_err(|e| at(ExecError::Interp(e)))?;
                    for (&b, t) in call.results.iter().zip(&outcome.outputs) {
                        self.write(p, st, b, t).map_err(at)?;
                    }
                }
            }
            if let (Some(t0), Some(times)) = (started, &mut st.step_ns) {
                times.push(t0.elapsed().as_nanos().min(u64::MAX as u128) as u64);
            }
        }
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            if matches!(self.locs[b.index()], Loc::Output(s) if s == k) {
                continue;
            }
            // An input, a constant, a bool, or a buffer another slot already returns: copied
            // (into the slot's tensor when it fits).
            if self.fits(p, st, *b, &st.outs[k]).map_err(at_end)? {
                let mut t = std::mem::replace(&mut st.outs[k], Tensor::placeholder());
                let copied = self.copy_into(st, inputs, *b, &mut t);
                st.outs[k] = t;
                if copied {
                    continue;
                }
            }
            st.outs[k] = self.tensor(p, st, inputs, *b).map_err(at_end)?;
        }
        Ok(())
    }

    /// Whether `t` has buffer `b`'s dtype and shape in this run (without allocating).
    fn fits(&self, p: &Program, st: &RunState, b: BufferId, t: &Tensor) -> Result<bool, ExecError> {
        let buf = &p.buffers[b];
        if t.dtype() != buf.dtype || t.shape().len() != buf.shape.rank() {
            return Ok(false);
        }
        let symbols = &st.symbols;
        let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
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

    /// Copies buffer `b` into `t` (same dtype and length); false where `t` cannot be
    /// written as bytes (bool).
    fn copy_into(&self, st: &mut RunState, inputs: &[TensorView], b: BufferId, t: &mut Tensor) -> bool {
        let Some(dst) = t.data_mut().as_bytes_mut() else { return false };
        match &self.locs[b.index()] {
            Loc::Input(n) => {
                let src = inputs[*n].bytes();
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
            }
            Loc::Const(c) => crate::kernel::eval::data_to_bytes(c.data(), dst),
            Loc::Output(k) => crate::kernel::eval::data_to_bytes(st.outs[*k].data(), dst),
            Loc::Temp => {
                let off = st.offsets[b.index()];
                let arena = arena_bytes_mut(&mut st.arena);
                let n = dst.len();
                dst.copy_from_slice(&arena[off..off + n]);
            }
        }
        true
    }

    /// [`Plan::shape`] into a reused vector.
    fn shape_into(&self, p: &Program, st: &RunState, b: BufferId, out: &mut Vec<usize>) -> Result<(), ExecError> {
        let symbols = &st.symbols;
        let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
        out.clear();
        for d in p.buffers[b].shape.dims() {
            out.push(d.eval(&lookup)? as usize);
        }
        Ok(())
    }

    fn shape(&self, p: &Program, st: &RunState, b: BufferId) -> Result<Vec<usize>, ExecError> {
        let symbols = &st.symbols;
        let lookup = |s: &str| p.symbols.iter().position(|x| &**x == s).and_then(|i| symbols[i]);
        p.buffers[b].shape.dims().iter().map(|d| Ok(d.eval(&lookup)? as usize)).collect()
    }

    /// A buffer's contents as a tensor (allocates).
    fn tensor(&self, p: &Program, st: &mut RunState, inputs: &[TensorView], b: BufferId) -> Result<Tensor, ExecError> {
        match &self.locs[b.index()] {
            Loc::Input(n) => Ok(inputs[*n].to_tensor()),
            Loc::Const(t) => Ok(Tensor::clone(t)),
            Loc::Output(k) => Ok(st.outs[*k].clone()),
            Loc::Temp => {
                let shape = self.shape(p, st, b)?;
                let off = st.offsets[b.index()];
                let arena = arena_bytes_mut(&mut st.arena);
                tensor_from_bytes(p.buffers[b].dtype, shape, &arena[off..off + st.bytes[b.index()]])
            }
        }
    }

    /// Writes a tensor into a temporary buffer.
    fn write(&self, p: &Program, st: &mut RunState, b: BufferId, t: &Tensor) -> Result<(), ExecError> {
        let buf = &p.buffers[b];
        if t.dtype() != buf.dtype || t.numel() != st.lens[b.index()] {
            return Err(ExecError::Invalid(format!("a result {t} does not fit {b}")));
        }
        match self.locs[b.index()] {
            Loc::Temp => {}
            Loc::Output(k) => {
                let dst = st.outs[k].data_mut().as_bytes_mut();
                let dst = dst.ok_or_else(|| ExecError::Invalid(format!("{b} cannot be written as bytes")))?;
                crate::kernel::eval::data_to_bytes(t.data(), dst);
                return Ok(());
            }
            Loc::Input(_) | Loc::Const(_) => return Err(ExecError::Invalid(format!("{b} is read-only"))),
        }
        let off = st.offsets[b.index()];
        let len = st.bytes[b.index()];
        let arena = arena_bytes_mut(&mut st.arena);
        crate::kernel::eval::data_to_bytes(t.data(), &mut arena[off..off + len]);
        Ok(())
    }

    fn all_f32(&self, p: &Program, bufs: &[BufferId]) -> bool {
        bufs.iter().all(|&b| p.buffers[b].dtype == crate::ir::DType::F32)
    }

    /// Whether library call `l` runs through the native kernels (`backend::cpu::rows`): an
    /// f32 result and f32 operands, except that attention's mask (its fourth operand) may be
    /// bool.
    fn native_operands(&self, p: &Program, l: &LibraryCall) -> bool {
        let bool_mask = |i: usize| i == 3 && l.op == OpKind::ScaledDotProductAttention;
        self.all_f32(p, &[l.out])
            && l.args.iter().enumerate().all(|(i, &b)| {
                let dtype = p.buffers[b].dtype;
                dtype == crate::ir::DType::F32 || (dtype == crate::ir::DType::Bool && bool_mask(i))
            })
    }

    /// The address of a buffer's first element in this run.
    fn address(&self, st: &mut RunState, inputs: &[TensorView], b: BufferId) -> usize {
        match &self.locs[b.index()] {
            Loc::Input(n) => inputs[*n].bytes().as_ptr() as usize,
            Loc::Const(t) => t.data().as_bytes().as_ptr() as usize,
            Loc::Temp => arena_bytes_mut(&mut st.arena).as_mut_ptr() as usize + st.offsets[b.index()],
            Loc::Output(k) => out_ptr(&mut st.outs[*k]),
        }
    }
}

/// A run at least this long (the previous run of the same state) gets helper workers: below
/// it, no step splits across threads anyway (`PAR_WORK` of kernel work alone is about this
/// long on one core).
pub const HELP_AFTER_NS: u64 = 20_000;

/// Runs the current pool's pending jobs until `done`, spinning while there are none (a helper
/// of [`Plan::on_worker`]). Off a pool, or once `done`, it returns.
fn help_until(done: &std::sync::atomic::AtomicBool) {
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {}
            Some(rayon::Yield::Idle) => std::hint::spin_loop(),
            None => return,
        }
    }
}

/// Views of `inputs` (on the stack for up to eight).
pub(crate) fn views(inputs: &[Tensor]) -> SmallVec<[TensorView<'_>; 8]> {
    inputs.iter().map(TensorView::from).collect()
}

/// `len` bytes at `addr` (an empty slice when `len` is 0, whatever the address).
///
/// # Safety
/// When `len > 0`, `addr` must point to `len` initialised bytes that nothing writes while the
/// slice lives.
unsafe fn bytes_at<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// `len` writable bytes at `addr` (an empty slice when `len` is 0, whatever the address).
///
/// # Safety
/// When `len > 0`, `addr` must point to `len` initialised bytes that nothing else reads or
/// writes while the slice lives.
unsafe fn bytes_mut_at<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// The address of an output slot's data, for writing (bool slots are never `Loc::Output`).
fn out_ptr(t: &mut Tensor) -> usize {
    t.data_mut().as_bytes_mut().map_or(0, |b| b.as_mut_ptr() as usize)
}

/// One step's time from [`Plan::profile`].
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    /// What the step is, as `ladder dump --stage kernels` names it (`kernel k3`,
    /// `matmul b5 + epilogue k4`, `layer_norm b3`, `interp b9`).
    pub label: String,
    pub median_us: f64,
}

/// The static length of buffer `b`'s last dim (its rows' length), 0 when symbolic or a scalar.
fn row_len(p: &Program, b: BufferId) -> usize {
    p.buffers[b].shape.dims().last().and_then(|d| d.as_const()).unwrap_or(0) as usize
}

fn step_label(s: &Step) -> String {
    match s {
        Step::Kernel(k) => match &k.activation {
            Some(l) => format!("kernel {} + {} {}", k.name, l.op, l.out),
            None => format!("kernel {}", k.name),
        },
        Step::Matmul(m) => {
            let mut label = format!("matmul {}", m.out);
            if let Some(k) = &m.epilogue {
                label.push_str(&format!(" + epilogue {}", k.name));
            }
            if let Some(l) = &m.activation {
                label.push_str(&format!(" + {} {}", l.op, l.out));
            }
            label
        }
        Step::Conv(c) => match &c.post {
            Some(post) => format!("conv {} ({post})", c.out),
            None => format!("conv {}", c.out),
        },
        Step::Library(l) => format!("{} {}", l.op, l.out),
        Step::Interp(i) => format!("interp {}", i.results.first().map_or_else(String::new, |b| b.to_string())),
    }
}

/// Bytes of a fused kernel-and-activation step's result written per range of rows before the
/// activation runs over them in place (well inside L1).
pub const FUSED_ROWS_BYTES: usize = 16 * 1024;

/// Instructions of kernel work (scalar count; kernels run them four lanes at a time) below
/// which a kernel step stays on the calling thread, and the least each range gets. A hand-off
/// to a parked worker costs several microseconds: at `1 << 15`, GPT-2's causal-mask kernel
/// (32k scores, 3 µs on one thread) took 13 µs on two, and the whole model 214 µs at two
/// threads against 143 at this bound (2-core AVX-512 EPYC).
pub const PAR_WORK: u64 = 1 << 17;

/// The symbols of a graph's inputs, in first-use order (for the interpreter backend's guards).
fn interp_symbols(g: &Graph) -> Vec<crate::ir::Symbol> {
    let mut out = Vec::new();
    for &v in g.inputs() {
        for s in g.ty(v).shape.symbols() {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}
