//! The runtime: compile a graph once into a [`Plan`], run the plan many times, on any backend.
//!
//! [`compile`] takes the graph down the pipeline ([`crate::pipeline`]: functionalize,
//! decompose, simplify, recover, schedule) to a kernel program and hands the program to the
//! backend ([`crate::backend::Backend`]), which compiles its kernels and places its buffers.
//! [`Plan::run`] then:
//!
//! 1. checks the inputs against the input guards (dtype, rank, static dims, one value per size
//!    symbol, compound dims like `2*n`), failing with a [`crate::kernel::eval::GuardError`] that names the input;
//! 2. evaluates every size with the bound symbols, so one plan serves every batch size or
//!    sequence length without recompiling, and checks what the graph assumed of them (a slice
//!    inside its dim) and every buffer against the run's memory limit;
//! 3. hands the run to the backend's [`Executable`], which places the temporaries in its arena
//!    ([`crate::kernel::memory`]: greedy by size over exact lifetimes, buffers whose lifetimes
//!    do not overlap share memory), runs the steps and leaves the outputs;
//! 4. applies the epilogue: inputs the graph mutated in place come back as
//!    [`Outputs::mutated_inputs`] (or are written back by [`Plan::run_in_place`]).
//!
//! Nothing here knows the device: the CPU backend ([`crate::backend::cpu::exec`]) is one
//! implementation of the interface, chosen by [`CompileOptions::backend`].
//! `CompileOptions::default()` is its native mode (Cranelift kernels and library kernels) over
//! the machine's threads; [`CompileOptions::reference`] runs every kernel on the reference
//! executor. [`BackendKind::Interp`] runs the graph as given on the interpreter (no lowering).
//!
//! ## Concurrency and memory reuse
//!
//! A plan is `Send + Sync`: runs on several threads at once each take a run state (sizes,
//! output slots and the backend's own working memory: arena, scratch) from a pool and return
//! it afterwards, so after warm-up a run allocates nothing on the native path but the returned
//! output tensors (and the two vectors holding them); passing the previous run's [`Outputs`]
//! back to [`Plan::run_into`] avoids even those.

use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

// The one place the runtime names a device: options select and configure the CPU backend.
use crate::backend::cpu::{exec::CpuBackend, jit::CraneliftCompiler, jit::KernelCompiler, CodegenError, CpuOptions};
use crate::backend::{Backend, Executable, RunState, Sizes};
use crate::interp;
use crate::ir::{Dim, DimError, Graph};
use crate::kernel::eval::{bind_inputs, elem_size, input_guards, InputGuard};
use crate::kernel::memory;
use crate::kernel::{BufferKind, Program, Step};
use crate::ops::OpKind;
use crate::passes::functionalize::Epilogue;
use crate::passes::LowerError;
use crate::pipeline::{Mode, PipelineError, Rung};
use crate::sched::ScheduleError;
use crate::tensor::{Tensor, TensorView};

/// The ash crate (0.38) the Vulkan types below come from, for an embedder to name the same ones.
#[cfg(feature = "vulkan")]
pub use crate::backend::vulkan::ash;
/// An embedder's own Vulkan device for plans ([`CompileOptions::vulkan_on`]).
#[cfg(feature = "vulkan")]
pub use crate::backend::vulkan::{ExternalDevice, VulkanDevice, VulkanError};
pub use crate::backend::{Declined, Fallback, RunError};

/// Where a plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Scheduled kernels on the host ([`crate::backend::cpu`]): compiled by the
    /// [`CompileOptions::kernel_compiler`] when one is given, on the reference executor
    /// otherwise.
    Cpu,
    /// The reference interpreter on the graph as given (no lowering).
    Interp,
    /// Generated kernels as SPIR-V compute shaders on a Vulkan device
    /// (`crate::backend::vulkan`, feature `vulkan`); see [`CompileOptions::vulkan`].
    Vulkan,
}

impl BackendKind {
    /// Its name, as `--backend` spells it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Interp => "interp",
            BackendKind::Vulkan => "vulkan",
        }
    }

    /// The backend `--backend NAME` selects.
    pub fn from_name(name: &str) -> Option<BackendKind> {
        match name {
            "cpu" => Some(BackendKind::Cpu),
            "interp" => Some(BackendKind::Interp),
            "vulkan" => Some(BackendKind::Vulkan),
            _ => None,
        }
    }
}

/// Compilation settings.
#[derive(Clone)]
pub struct CompileOptions {
    /// Where plans run.
    pub backend: BackendKind,
    /// Threads a plan's steps split over (at least 1). The reference executor runs on the
    /// calling thread.
    pub threads: usize,
    /// The CPU backend's kernel compiler; `None` runs every kernel on the reference executor
    /// and every library step by its reference meaning.
    pub kernel_compiler: Option<Arc<dyn KernelCompiler>>,
    /// Bounds on a run. `Limits::max_run_bytes` is the most memory one run may use: the
    /// arena of temporaries and the outputs it allocates, checked before anything is
    /// allocated (a run over it is [`RunError::TooLarge`]; memory the system cannot provide
    /// under it is [`RunError::OutOfMemory`], never an abort), or the interpreter's live
    /// values. [`BackendKind::Interp`] plans also take `Limits::fuel` and
    /// `Limits::max_elements`. [`crate::Limits::default`] (4 GiB a run) unless set.
    pub limits: crate::Limits,
    /// Recover the ops of `crate::ops::library::recoverable` (softmax, log_softmax, layer_norm,
    /// rms_norm, gelu, silu, sigmoid, attention) from their prims and run them through library
    /// kernels. Off in the reference mode (which runs the prims exactly as lowered), on in
    /// native mode; `--no-recover` turns it off there. On the Vulkan backend, the row ops and
    /// attention its library shaders run, where the device runs them (`Backend::mode`).
    pub recover: bool,
    /// In native mode, pack each f32 matmul's constant right operand (a weight) once, when
    /// the plan is built, for ladder's own GEMM kernel (`crate::backend::cpu::packed`), and
    /// each f32 convolution's constant weight for the blocked convolution kernel
    /// (`crate::backend::cpu::conv_blocked::PackedWeights`): faster products and no packing
    /// per call, for a second copy of those weights in memory. On by default; machines
    /// without the GEMM kernel (AVX-512F) pack no matmul weights.
    pub pack_weights: bool,
    /// [`BackendKind::Interp`] plans evaluate float ops in f64, without rounding to the op's
    /// dtype (the interpreter's precise mode; float outputs come back f64).
    pub precise: bool,
    /// [`BackendKind::Vulkan`] plans run on this device; `None` (the default): on ladder's own,
    /// made on first use. [`CompileOptions::vulkan_on`] sets it to an embedder's.
    #[cfg(feature = "vulkan")]
    pub vulkan_device: Option<VulkanDevice>,
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
            backend: BackendKind::Cpu,
            threads: 1,
            kernel_compiler: None,
            limits: crate::Limits::default(),
            recover: false,
            pack_weights: true,
            precise: false,
            #[cfg(feature = "vulkan")]
            vulkan_device: None,
        }
    }

    /// The Vulkan backend: each kernel a compute shader on the process's Vulkan device. The
    /// prims as lowered, where the device runs no library shaders (softmax and the norms stay
    /// generated kernels); where it does, the row ops and attention it has shaders for recovered
    /// ([`Mode::Shaders`]; `recover: false` keeps them prims). Compiling fails with
    /// [`CompileError::Unsupported`] where there is no device, or the program has a step the
    /// backend does not run yet.
    pub fn vulkan() -> CompileOptions {
        CompileOptions {
            backend: BackendKind::Vulkan,
            pack_weights: false,
            recover: true,
            ..CompileOptions::reference()
        }
    }

    /// [`CompileOptions::vulkan`] on `device`: an embedder's own Vulkan device
    /// ([`VulkanDevice::from_external`], whose docs say who owns what and how the queue is
    /// shared) or ladder's ([`VulkanDevice::process`]).
    ///
    /// ```no_run
    /// # fn demo(ext: ladder::runtime::ExternalDevice, g: &ladder::Graph) -> Result<(), Box<dyn std::error::Error>> {
    /// // SAFETY: `ext` holds the program's live, matching Vulkan objects, which outlive the plan.
    /// let device = unsafe { ladder::runtime::VulkanDevice::from_external(ext) }?;
    /// let plan = ladder::compile(g, &ladder::CompileOptions::vulkan_on(device))?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "vulkan")]
    pub fn vulkan_on(device: VulkanDevice) -> CompileOptions {
        CompileOptions { vulkan_device: Some(device), ..CompileOptions::vulkan() }
    }

    /// The CPU backend in native mode: kernels compiled by Cranelift (each kernel the code
    /// generator does not support runs on the reference executor) and f32 matmuls through
    /// the GEMM library, over `threads` threads.
    pub fn native_cpu(threads: usize) -> Result<CompileOptions, CodegenError> {
        let compiler = CraneliftCompiler::shared(CpuOptions::default())?;
        Ok(CompileOptions {
            backend: BackendKind::Cpu,
            threads: threads.max(1),
            kernel_compiler: Some(compiler),
            recover: true,
            ..CompileOptions::reference()
        })
    }

    /// The backend these options select, configured by them (`None` for the interpreter,
    /// which runs the graph rather than a program).
    fn program_backend(&self) -> Option<Box<dyn Backend>> {
        match self.backend {
            BackendKind::Cpu => Some(Box::new(CpuBackend {
                compiler: self.kernel_compiler.clone(),
                threads: self.threads.max(1),
                pack_weights: self.pack_weights,
            })),
            BackendKind::Interp => None,
            #[cfg(feature = "vulkan")]
            BackendKind::Vulkan => {
                Some(Box::new(crate::backend::vulkan::VulkanBackend { device: self.vulkan_device.clone() }))
            }
            #[cfg(not(feature = "vulkan"))]
            BackendKind::Vulkan => Some(Box::new(NoVulkan)),
        }
    }
}

impl std::fmt::Debug for CompileOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("CompileOptions");
        d.field("backend", &self.backend)
            .field("threads", &self.threads)
            .field("kernel_compiler", &self.kernel_compiler.is_some())
            .field("limits", &self.limits)
            .field("precise", &self.precise)
            .field("recover", &self.recover);
        #[cfg(feature = "vulkan")]
        d.field("vulkan_device", &self.vulkan_device);
        d.finish()
    }
}

/// Why a graph could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The graph could not be taken down the pipeline (a pass or the verifier refused it).
    #[error("lowering: {0}")]
    Pipeline(#[from] PipelineError),
    /// The scheduler could not turn the graph into a kernel program.
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    /// The backend found the scheduled program inconsistent: a scheduler bug, not the graph's.
    #[error("the scheduled program is malformed (a scheduler bug): {0}")]
    Malformed(String),
    /// The backend cannot run the program here: no device, or a step it does not have.
    #[error("the {backend} backend cannot run this program: {reason}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What stops it.
        reason: String,
    },
}

/// The Vulkan backend of a build without the `vulkan` feature: refuses every program.
#[cfg(not(feature = "vulkan"))]
struct NoVulkan;

#[cfg(not(feature = "vulkan"))]
impl Backend for NoVulkan {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn prepare(
        &self,
        _: &crate::kernel::Program,
        _: &[Option<Arc<Tensor>>],
    ) -> Result<Box<dyn crate::backend::Executable>, crate::backend::BackendError> {
        Err(crate::backend::BackendError::Unsupported("this ladder was built without the `vulkan` feature".into()))
    }
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
    /// How many temporaries live in the arena.
    pub temporaries: usize,
}

/// A compiled graph, ready to run.
pub struct Plan {
    backend: BackendKind,
    graph: Graph,
    epilogue: Epilogue,
    program: Option<Program>,
    /// The program as the backend prepared it (`None` for the interpreter).
    exe: Option<Box<dyn Executable>>,
    explanation: String,
    guards: Vec<InputGuard>,
    max_run_bytes: u64,
    pool: Mutex<Vec<RunState>>,
    interp: crate::interp::Options,
    /// What the scheduled graph assumes of its sizes and checks each run: a slice with a
    /// symbolic dim or bound lies inside its dim (`crate::ops::shape::slice_range`).
    assumptions: Vec<Assumption>,
    /// `graph` is already functional ([`compile_lowered`]): its outputs include the new
    /// contents of the inputs it writes, at the epilogue's output slots.
    functional_graph: bool,
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

/// An empty plan for `g`, to be filled by [`compile`] or [`compile_lowered`].
fn new_plan(g: &Graph, options: &CompileOptions) -> Plan {
    Plan {
        backend: options.backend,
        graph: g.clone(),
        epilogue: Epilogue::default(),
        program: None,
        exe: None,
        explanation: String::new(),
        guards: Vec::new(),
        max_run_bytes: options.limits.max_run_bytes,
        pool: Mutex::new(Vec::new()),
        interp: crate::interp::Options::from_limits(options.precise, &options.limits),
        assumptions: Vec::new(),
        functional_graph: false,
    }
}

/// The input guards of a plan without a program: each input's dtype and dims as declared.
fn graph_guards(g: &Graph) -> Vec<InputGuard> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(n, &v)| InputGuard { name: g.input_name(n), dtype: g.ty(v).dtype, dims: g.ty(v).shape.dims().to_vec() })
        .collect()
}

fn pipeline_error(e: PipelineError) -> CompileError {
    match e {
        PipelineError::Schedule(e) => CompileError::Schedule(e),
        e => CompileError::Pipeline(e),
    }
}

/// Compiles `g` for `options.backend`.
pub fn compile(g: &Graph, options: &CompileOptions) -> Result<Plan, CompileError> {
    let mut plan = new_plan(g, options);
    let Some(backend) = options.program_backend() else {
        // Only the epilogue is needed: which inputs the graph mutates.
        let functional = crate::passes::functionalize(g).map_err(|e| PipelineError::from(LowerError::from(e)))?;
        plan.epilogue = functional.epilogue;
        plan.guards = graph_guards(g);
        return Ok(plan);
    };
    let mode = backend.mode(options.recover);
    let lowering = crate::pipeline::lower(g, mode, Rung::Kernels).map_err(pipeline_error)?;
    finish(plan, lowering, backend)
}

/// Compiles `g`, a graph already lowered in `mode` ([`crate::pipeline::resume`]: the
/// `recovered` rung in native mode, `simplified` in reference mode, as an artifact stores it),
/// whose source graph's epilogue was `epilogue`: the passes above that rung are not run
/// again. `mode` wins over `options.recover` (the rung was lowered in it); the reference
/// backend interprets `g` itself.
pub fn compile_lowered(
    g: &Graph,
    mode: Mode,
    epilogue: Epilogue,
    options: &CompileOptions,
) -> Result<Plan, CompileError> {
    let mut plan = new_plan(g, options);
    plan.functional_graph = true;
    let Some(backend) = options.program_backend() else {
        crate::passes::lower::check("input", g, crate::ir::verify::Stage::Recovered)
            .map_err(|e| CompileError::Pipeline(e.into()))?;
        plan.epilogue = epilogue;
        plan.guards = graph_guards(g);
        return Ok(plan);
    };
    let lowering = crate::pipeline::resume(g, mode, epilogue, Rung::Kernels).map_err(pipeline_error)?;
    finish(plan, lowering, backend)
}

/// Fills `plan` from `lowering` (down to the kernels rung): the program, its guards and
/// assumptions, the epilogue, and the executable `backend` prepares.
fn finish(
    mut plan: Plan,
    mut lowering: crate::pipeline::Lowering,
    backend: Box<dyn Backend>,
) -> Result<Plan, CompileError> {
    let scheduled = lowering
        .scheduled
        .take()
        .ok_or_else(|| CompileError::Malformed("the pipeline stopped before the kernels rung".into()))?;
    plan.epilogue = lowering.functional.as_ref().map(|f| f.epilogue.clone()).unwrap_or_default();
    let simplified = lowering.graph();
    plan.assumptions = slice_assumptions(simplified);
    let p = scheduled.program;
    let names = |n: usize| plan.graph.input_name(n);
    plan.guards = input_guards(&p, &names);
    let consts: Vec<Option<Arc<Tensor>>> = p
        .buffers
        .iter()
        .map(|(_, b)| match &b.kind {
            BufferKind::Const(name) => {
                simplified.blob_by_name(name).map(|blob| Arc::clone(&simplified.blob(blob).tensor))
            }
            _ => None,
        })
        .collect();
    let exe = backend.prepare(&p, &consts).map_err(|e| match e {
        crate::backend::BackendError::Malformed(m) => CompileError::Malformed(m),
        crate::backend::BackendError::Unsupported(reason) => {
            CompileError::Unsupported { backend: backend.name(), reason }
        }
    })?;
    plan.explanation = match (&lowering.recovered, &lowering.simplified) {
        (Some(r), Some(simplified)) if !r.matches.is_empty() => {
            format!("{}{}", r.explain(simplified), scheduled.explanation)
        }
        _ => scheduled.explanation,
    };
    plan.explanation.push_str(exe.explanation());
    plan.exe = Some(exe);
    plan.program = Some(p);
    Ok(plan)
}

impl Plan {
    /// The graph the plan was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Bytes the backend holds besides the graph's constants (for the CPU: the weights packed
    /// for the GEMM and convolution kernels).
    pub fn packed_bytes(&self) -> usize {
        self.exe.as_ref().map_or(0, |e| e.resident_bytes())
    }

    /// The scheduled program (`None` for the interpreter backend).
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }

    /// The scheduler's explanation of the program, then the backend's.
    pub fn explanation(&self) -> &str {
        &self.explanation
    }

    /// Where the plan runs.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// How many kernels run natively.
    pub fn native_kernels(&self) -> usize {
        self.exe.as_ref().map_or(0, |e| e.native_kernels())
    }

    /// The kernels that run on the reference executor although the plan was compiled with a
    /// kernel compiler, and why (empty for reference plans).
    pub fn fallbacks(&self) -> &[Fallback] {
        self.exe.as_ref().map_or(&[], |e| e.fallbacks())
    }

    /// How many arenas runs have allocated (or grown) so far.
    pub fn arenas_allocated(&self) -> usize {
        self.exe.as_ref().map_or(0, |e| e.arenas_allocated())
    }

    /// The graph's input guards (name, dtype, dims), in input order.
    pub fn inputs(&self) -> &[InputGuard] {
        &self.guards
    }

    /// Arena size against the sum of temporary sizes for inputs of these shapes.
    pub fn memory_report(&self, inputs: &[Tensor]) -> Result<MemoryReport, RunError> {
        let mut sizes = Sizes::default();
        self.bind(&mut sizes, &views(inputs))?;
        let Some(exe) = &self.exe else {
            return Ok(MemoryReport { arena_bytes: 0, naive_bytes: 0, temporaries: 0 });
        };
        let life = exe.lifetimes();
        let (mut offsets, mut order, mut placed) = (Vec::new(), Vec::new(), Vec::new());
        let arena_bytes = memory::assign(life, &sizes.bytes, &mut offsets, &mut order, &mut placed)
            .filter(|&a| a as u64 <= self.max_run_bytes)
            .ok_or(RunError::TooLarge { need: u64::MAX, limit: self.max_run_bytes })?;
        // Only the temporaries (the buffers with a lifetime in the arena): inputs, constants
        // and outputs have memory of their own.
        let naive = sizes
            .bytes
            .iter()
            .zip(life)
            .filter(|(_, life)| life.is_some())
            .map(|(&b, _)| memory::align_up(b).unwrap_or(usize::MAX))
            .fold(0usize, usize::saturating_add);
        Ok(MemoryReport { arena_bytes, naive_bytes: naive, temporaries: life.iter().filter(|l| l.is_some()).count() })
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
        if self.exe.is_none() {
            *out = self.run_interp(inputs)?;
            return Ok(());
        }
        self.run_views_into(&views(inputs), out)
    }

    /// [`Plan::run_into`] on borrowed inputs, as [`Plan::run_views`] takes them: a warm run
    /// on the native backend neither copies the inputs nor allocates.
    pub fn run_views_into(&self, inputs: &[TensorView], out: &mut Outputs) -> Result<(), RunError> {
        let (Some(p), Some(exe)) = (&self.program, &self.exe) else {
            let owned: Vec<Tensor> = inputs.iter().map(TensorView::to_tensor).collect();
            *out = self.run_interp(&owned)?;
            return Ok(());
        };
        let mut st = self.pool.lock().map(|mut p| p.pop()).unwrap_or_default().unwrap_or_default();
        // The caller's tensors in output-slot order (mutated inputs' slots from
        // `mutated_inputs`, the rest from `outputs`).
        st.outs.clear();
        {
            let mut plain = out.outputs.drain(..);
            let mut mutated = out.mutated_inputs.drain(..).map(|(_, t)| t);
            for k in 0..p.outputs.len() {
                let t =
                    if self.epilogue.mutations.iter().any(|m| m.output == k) { mutated.next() } else { plain.next() };
                st.outs.push(t.unwrap_or_else(Tensor::placeholder));
            }
        }
        let result = self.bind(&mut st.sizes, inputs).and_then(|()| exe.run(p, inputs, &mut st, self.max_run_bytes));
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
        let (Some(p), Some(exe)) = (&self.program, &self.exe) else { return Ok(Vec::new()) };
        let mut st = RunState { step_ns: Some(Vec::new()), ..RunState::default() };
        st.outs = (0..p.outputs.len()).map(|_| Tensor::placeholder()).collect();
        let mut samples: Vec<Vec<u64>> = vec![Vec::new(); p.steps.len()];
        let inputs = views(inputs);
        self.bind(&mut st.sizes, &inputs)?;
        for run in 0..=runs.max(1) {
            exe.run(p, &inputs, &mut st, self.max_run_bytes)?;
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
        if self.functional_graph {
            let (mut outputs, mut mutated_inputs) = (Vec::new(), Vec::new());
            for (k, t) in outcome.outputs.into_iter().enumerate() {
                match self.epilogue.mutations.iter().find(|m| m.output == k) {
                    Some(m) => mutated_inputs.push((m.input, t)),
                    None => outputs.push(t),
                }
            }
            return Ok(Outputs { outputs, mutated_inputs });
        }
        let mutated_inputs =
            self.epilogue.mutations.iter().map(|m| (m.input, outcome.inputs_after[m.input].clone())).collect();
        Ok(Outputs { outputs: outcome.outputs, mutated_inputs })
    }

    /// Binds the inputs' sizes to the program's symbols, checks the graph's assumptions about
    /// them, and evaluates every buffer's length (and a temporary's bytes), each within the
    /// run's memory limit.
    fn bind(&self, sizes: &mut Sizes, inputs: &[TensorView]) -> Result<(), RunError> {
        let Some(p) = &self.program else { return Ok(()) };
        bind_inputs(&self.guards, &p.symbols, inputs, &mut sizes.symbols)?;
        let symbols = &sizes.symbols;
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
        sizes.lens.clear();
        sizes.bytes.clear();
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
            sizes.lens.push(n as usize);
            sizes.bytes.push(if matches!(b.kind, BufferKind::Temp) { bytes as usize } else { 0 });
        }
        Ok(())
    }
}

/// Views of `inputs` (on the stack for up to eight).
pub(crate) fn views(inputs: &[Tensor]) -> SmallVec<[TensorView<'_>; 8]> {
    inputs.iter().map(TensorView::from).collect()
}

/// One step's time from [`Plan::profile`].
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    /// What the step is, as `ladder dump --stage kernels` names it (`kernel k3`,
    /// `matmul b5 + epilogue k4`, `layer_norm b3`, `interp b9`).
    pub label: String,
    /// Its median time over the runs, in microseconds.
    pub median_us: f64,
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
        Step::Conv(c) => {
            let pool = if c.pool.is_some() { " + max_pool2d" } else { "" };
            match &c.post {
                Some(post) => format!("conv {}{pool} ({post})", c.out),
                None => format!("conv {}{pool}", c.out),
            }
        }
        Step::Library(l) => format!("{} {}", l.op, l.out),
        Step::Interp(i) => format!("interp {}", i.results.first().map_or_else(String::new, |b| b.to_string())),
    }
}

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
