//! The CPU backend as a [`Backend`]: a scheduled program's kernels compiled by a
//! [`KernelCompiler`] (Cranelift by default) or run on the reference executor, its library
//! steps through the host's library kernels, its buffers in host memory.
//!
//! [`CpuBackend::prepare`] compiles every kernel (on the plan's threads at once: code
//! generation is most of a long graph's compile time), packs constant weights for the GEMM and
//! the blocked convolution, and places the buffers: inputs and constants are read where they
//! lie, a temporary that is an output lives in the tensor the run returns, the stored result
//! of a kernel that runs its activation fused gets no memory, and every other temporary gets
//! an offset in one arena per run ([`crate::kernel::memory`]).
//!
//! [`CpuExecutable::run`] then:
//! 1. places the temporaries for the run's sizes (cached per run state and size set) and
//!    checks the arena and the outputs it allocates against the run's memory limit before
//!    allocating any of it;
//! 2. builds the table of buffer base addresses (every buffer dense, row-major,
//!    native-endian, bool as one byte 0/1);
//! 3. runs the steps in order: a native kernel by its entry point for `begin..end` of its
//!    outermost loop, split into at most `threads` ranges on the current rayon pool (the
//!    caller's `ThreadPool::install`, else rayon's global pool, on one of whose workers a run
//!    from any other thread then runs whole) when the kernel has enough work for each
//!    ([`PAR_WORK`]), after checking that every affine access of the kernel stays inside its
//!    buffer (so a compiled kernel can never touch memory outside its buffers), and taking any
//!    error the code recorded (integer division by zero) through
//!    [`NativeKernel::take_error`] on each thread; a reference kernel by the reference
//!    executor on the calling thread; a library step through its kernel (`native.rs`,
//!    `library.rs`), or through the interpreter's implementation where no kernel applies;
//! 4. copies out the outputs that are not written in place (inputs, constants, bools).

mod canon;
mod library;
mod native;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cranelift_entity::EntityRef;
use smallvec::SmallVec;

use super::conv_blocked::PackedWeights;
use super::jit::{KernelCompiler, KernelExec, NativeKernel};
use super::packed::PackedB;
use crate::backend::{Backend, BackendError, Executable, Fallback, RunError, RunState, Sizes};
use crate::interp;
use crate::kernel::eval::{
    elem_size, eval_conv, eval_library, get_bytes, get_elem, matmul_attrs, run_kernel, set_bytes, tensor_from_bytes,
    ExecError, Memory, PreparedKernel, Scratch, Val,
};
use crate::kernel::memory::{self, Lifetime, ALIGN};
use crate::kernel::{BufferId, BufferKind, Kernel, LibraryCall, MatmulCall, Program, Step};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorView};

/// The CPU backend's settings.
#[derive(Clone)]
pub struct CpuBackend {
    /// Compiles kernels natively; `None` runs every kernel on the reference executor and
    /// every library step by the interpreter's implementation (the reference mode).
    pub compiler: Option<Arc<dyn KernelCompiler>>,
    /// Threads a native kernel's outermost loop and the library kernels split over (at least
    /// 1).
    pub threads: usize,
    /// Pack constant matmul and convolution weights once, when the program is prepared (see
    /// `CompileOptions::pack_weights`).
    pub pack_weights: bool,
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn prepare(&self, p: &Program, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(CpuExecutable::new(self, p, consts).map_err(BackendError::Malformed)?))
    }
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
    /// Its index among the program's kernel steps (where a run state caches its sizes).
    id: usize,
    prepared: PreparedKernel,
    exec: KernelExec,
    /// For native code compiled from the kernel's canonical form (`canon.rs`): the buffers
    /// its table lists, in order (`None`: the code indexes the program's buffer table).
    slots: Option<Vec<BufferId>>,
}

/// A native kernel's sizes for one set of symbol values: its dim table, outermost count and
/// work estimate, its accesses checked against the buffers (see
/// `CpuExecutable::prepare_native`).
struct Prepared {
    native_dims: Vec<i64>,
    count: i64,
    work: u64,
}

/// 64-byte aligned arena storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// The CPU backend's working memory of one run state (in [`RunState::device`]).
#[derive(Default)]
struct CpuState {
    /// How long this state's last run took (0 before the first): runs after one at least
    /// [`HELP_AFTER_NS`] long get helper workers (see `CpuExecutable::on_worker`).
    last_run_ns: u64,
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
    /// Per kernel step with canonical code, the addresses of its buffers in its order
    /// (refilled from `ptrs` before each call).
    tables: Vec<Vec<usize>>,
    /// Operand shapes of a GEMM step (reused).
    shape_a: Vec<usize>,
    shape_b: Vec<usize>,
    /// Argument shapes of a library step (reused).
    arg_shapes: Vec<Vec<usize>>,
    /// A convolution's im2col matrix (reused, grown to the largest).
    conv_scratch: Vec<f32>,
    /// A convolution's whole result, where its folded pooling runs after it.
    conv_result: Vec<f32>,
    /// A post-op's constant addend, repeated per channel (`CpuExecutable::post_bias`).
    post_addend: Vec<f32>,
}

/// One run in progress: the runtime's sizes and output slots, and the backend's state.
struct St<'r> {
    sizes: &'r Sizes,
    outs: &'r mut Vec<Tensor>,
    step_ns: &'r mut Option<Vec<u64>>,
    cpu: &'r mut CpuState,
}

fn arena_bytes_mut(arena: &mut [Line]) -> &mut [u8] {
    let len = std::mem::size_of_val(arena);
    // SAFETY: `Line` is a plain byte array with no padding (`repr(C)`, size ALIGN), so the
    // slice is `len` initialised bytes; u8 has alignment 1 and no invalid values, and the
    // returned slice borrows `arena` mutably for its whole life.
    unsafe { std::slice::from_raw_parts_mut(arena.as_mut_ptr().cast::<u8>(), len) }
}

/// A program prepared for the CPU.
pub struct CpuExecutable {
    /// Per step: its kernel (a kernel step's, a matmul's epilogue), prepared and compiled.
    kernels: Vec<Option<KernelStep>>,
    /// Per step: a matmul's constant right operand, packed for the GEMM kernel.
    packed: Vec<Option<PackedB>>,
    /// Per step: a convolution's constant weight, packed for the blocked kernel.
    conv_packed: Vec<Option<PackedWeights>>,
    locs: Vec<Loc>,
    dtypes: Vec<crate::ir::DType>,
    life: Vec<Option<Lifetime>>,
    threads: usize,
    /// Run f32 matmuls, convolutions, recovered ops and copies through the library kernels
    /// (native mode: a kernel compiler is set). The reference mode keeps the interpreter's
    /// implementations, bit for bit.
    native_library: bool,
    arenas: AtomicUsize,
    /// Kernels the kernel compiler declined, in step order.
    fallbacks: Vec<Fallback>,
    explanation: String,
}

impl CpuExecutable {
    fn new(backend: &CpuBackend, p: &Program, consts: &[Option<Arc<Tensor>>]) -> Result<CpuExecutable, String> {
        let mut exe = CpuExecutable {
            kernels: Vec::new(),
            packed: Vec::new(),
            conv_packed: Vec::new(),
            locs: Vec::new(),
            dtypes: Vec::new(),
            life: Vec::new(),
            threads: backend.threads.max(1),
            native_library: backend.compiler.is_some(),
            arenas: AtomicUsize::new(0),
            fallbacks: Vec::new(),
            explanation: String::new(),
        };
        for (id, b) in p.buffers.iter() {
            exe.dtypes.push(b.dtype);
            exe.locs.push(match &b.kind {
                BufferKind::Input(n) => Loc::Input(*n),
                BufferKind::Const(name) => match consts.get(id.index()) {
                    Some(Some(t)) => Loc::Const(Arc::clone(t)),
                    _ => return Err(format!("{id} reads missing blob `{name}`")),
                },
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
        // Native code for every kernel, compiled on the plan's threads at once (code
        // generation is most of a long graph's compile time), once per canonical form
        // (`canon.rs`): a kernel whose form an earlier one has shares its code.
        let (members, forms) = canon::group(&step_kernels, p);
        let mut compiled: Vec<Option<Result<NativeKernel, crate::backend::Declined>>> = vec![None; step_kernels.len()];
        if let Some(c) = &backend.compiler {
            let mut leaders: Vec<(&usize, &canon::Canonical)> = forms.iter().collect();
            leaders.sort_by_key(|(i, _)| **i);
            let one = |(i, form): &(&usize, &canon::Canonical)| (**i, c.compile(&form.kernel, &form.program));
            let done: Vec<(usize, Result<NativeKernel, crate::backend::Declined>)> = if exe.threads > 1 {
                use rayon::prelude::*;
                leaders.par_iter().with_max_len(1).map(one).collect()
            } else {
                leaders.iter().map(one).collect()
            };
            for (i, result) in done {
                compiled[i] = Some(result);
            }
        }
        // Distinct native codes: what the explanation reports against the native steps.
        let mut codes = 0;
        for (i, (kernel, member)) in step_kernels.iter().zip(&members).enumerate() {
            exe.kernels.push(match (kernel, member) {
                (Some(k), Some(member)) => {
                    let prepared = PreparedKernel::new(k, p)?;
                    let (exec, slots) = match (&compiled[member.leader], &backend.compiler) {
                        (Some(Ok(native)), _) => {
                            codes += usize::from(member.leader == i);
                            (KernelExec::Native(native.clone()), Some(member.slots.clone()))
                        }
                        (Some(Err(_)), Some(c)) => {
                            // Compiled on its own, so the reason names this kernel and its buffers.
                            match c.compile(k, p) {
                                Ok(native) => {
                                    codes += 1;
                                    (KernelExec::Native(native), None)
                                }
                                Err(why) => {
                                    exe.fallbacks.push(Fallback { kernel: k.name.clone(), why });
                                    (KernelExec::Reference, None)
                                }
                            }
                        }
                        _ => (KernelExec::Reference, None),
                    };
                    Some(KernelStep { id: exe.kernels.len(), prepared, exec, slots })
                }
                _ => None,
            });
        }
        // Constant weights packed once, per step: a matmul's for the GEMM, a conv's for the
        // blocked convolution (one pass over the steps).
        let pack = exe.native_library && backend.pack_weights;
        let (packed, conv_packed) = p
            .steps
            .iter()
            .map(|s| match s {
                Step::Matmul(m) if pack => (exe.pack_weight(p, m), None),
                Step::Conv(c) if pack => (None, exe.pack_conv_weight(p, c)),
                _ => (None, None),
            })
            .unzip();
        (exe.packed, exe.conv_packed) = (packed, conv_packed);
        exe.explanation = p
            .steps
            .iter()
            .zip(exe.packed.iter().zip(&exe.conv_packed))
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
        let native = exe.kernels.iter().flatten().filter(|k| matches!(k.exec, KernelExec::Native(_))).count();
        if native > 0 {
            exe.explanation.push_str(&format!(
                "native code: {native} kernel steps run {codes} compiled kernels (steps whose kernels have one \
                 canonical form share its code)\n"
            ));
        }
        exe.life = memory::lifetimes(p);
        // A temporary that is a graph output lives in the returned tensor, outside the arena
        // (once, for its first output slot; bools keep the copy, see `TensorData::as_bytes_mut`).
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            let i = b.index();
            if matches!(exe.locs[i], Loc::Temp) && p.buffers[*b].dtype != crate::ir::DType::Bool {
                exe.locs[i] = Loc::Output(k);
                exe.life[i] = None;
            }
        }
        // A kernel step that runs its activation fused writes its rows straight into the
        // activation's result (`run_kernel_activation`): the temporary it stores is never
        // touched, so it gets no arena bytes.
        for (step, s) in p.steps.iter().enumerate() {
            if let (Step::Kernel(k), Some(ks)) = (s, &exe.kernels[step]) {
                if let Some(l) = k.activation.as_ref().filter(|l| exe.fuses_activation(p, ks, l)) {
                    exe.life[l.args[0].index()] = None;
                }
            }
        }
        Ok(exe)
    }
}

impl Executable for CpuExecutable {
    fn lifetimes(&self) -> &[Option<Lifetime>] {
        &self.life
    }

    fn run(&self, p: &Program, inputs: &[TensorView], run: &mut RunState, max_run_bytes: u64) -> Result<(), RunError> {
        let mut cpu: Box<CpuState> = match run.device.take().map(|d| d.downcast::<CpuState>()) {
            Some(Ok(state)) => state,
            _ => Box::default(),
        };
        let (helpers, started) = (cpu.last_run_ns >= HELP_AFTER_NS, std::time::Instant::now());
        let mut st = St { sizes: &run.sizes, outs: &mut run.outs, step_ns: &mut run.step_ns, cpu: &mut cpu };
        let result = self.on_worker(helpers, || self.run_with(p, &mut st, inputs, max_run_bytes));
        cpu.last_run_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        run.device = Some(cpu as Box<dyn Any + Send>);
        result
    }

    fn native_kernels(&self) -> usize {
        self.kernels.iter().flatten().filter(|k| matches!(k.exec, KernelExec::Native(_))).count()
    }

    fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    fn resident_bytes(&self) -> usize {
        self.packed.iter().flatten().map(PackedB::bytes).sum::<usize>()
            + self.conv_packed.iter().flatten().map(PackedWeights::bytes).sum::<usize>()
    }

    fn explanation(&self) -> &str {
        &self.explanation
    }

    fn arenas_allocated(&self) -> usize {
        self.arenas.load(Ordering::Relaxed)
    }
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
            Loc::Const(t) => get_bytes(t.dtype(), t.bytes(), i),
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

impl CpuExecutable {
    fn layout(&self, st: &mut St, max_run_bytes: u64) -> Result<(), RunError> {
        let cpu = &mut *st.cpu;
        if cpu.layout_for == st.sizes.bytes && cpu.offsets.len() == st.sizes.bytes.len() {
            return Ok(());
        }
        let arena = memory::assign(&self.life, &st.sizes.bytes, &mut cpu.offsets, &mut cpu.order, &mut cpu.placed)
            .ok_or(RunError::TooLarge { need: u64::MAX, limit: max_run_bytes })?;
        if arena as u64 > max_run_bytes {
            return Err(RunError::TooLarge { need: arena as u64, limit: max_run_bytes });
        }
        cpu.layout_for.clone_from(&st.sizes.bytes);
        cpu.arena_bytes = arena;
        Ok(())
    }

    /// Runs `f` (a run of the plan) where its parallel steps find their workers. A caller on
    /// no rayon worker hands the whole run to one worker of the global pool, so that it
    /// crosses threads once per run rather than once per parallel step (each of which would
    /// otherwise queue its work on the pool and block). A caller inside a pool's `install`
    /// runs it in place, on that pool. W6 at two threads, called back to back from the main
    /// thread: 0.87 ms a run before, 0.62–0.67 after (0.59 inside an `install`).
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

    /// Runs the program with `st.outs` holding one tensor per output slot (reused when its
    /// dtype and shape fit); on success they hold the outputs.
    fn run_with(&self, p: &Program, st: &mut St, inputs: &[TensorView], max_run_bytes: u64) -> Result<(), RunError> {
        self.layout(st, max_run_bytes)?;
        let at_end = |error| RunError::Step { step: p.steps.len(), error };
        // The outputs this run allocates, and the arena, within the limit before any of it is.
        let own = |k: usize, b: BufferId| matches!(self.locs[b.index()], Loc::Output(s) if s == k);
        let mut need = st.cpu.arena_bytes as u64;
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            if own(k, *b) {
                let bytes = (st.sizes.lens[b.index()] as u64).saturating_mul(elem_size(p.buffers[*b].dtype) as u64);
                need = need.saturating_add(bytes);
            }
        }
        if need > max_run_bytes {
            return Err(RunError::TooLarge { need, limit: max_run_bytes });
        }
        for (k, (name, b)) in p.outputs.iter().enumerate() {
            if own(k, *b) && !st.sizes.fits(p, *b, &st.outs[k]).map_err(at_end)? {
                let shape = st.sizes.shape(p, *b).map_err(at_end)?;
                let (dtype, len) = (p.buffers[*b].dtype, st.sizes.lens[b.index()]);
                let data = crate::tensor::TensorData::try_zeros(dtype, len).ok_or_else(|| RunError::OutOfMemory {
                    what: format!("output `{name}`"),
                    bytes: (len as u64).saturating_mul(elem_size(dtype) as u64),
                })?;
                st.outs[k] = Tensor::new(shape, data).map_err(|e| at_end(ExecError::Invalid(e.to_string())))?;
            }
        }
        let lines = st.cpu.arena_bytes.div_ceil(ALIGN);
        if st.cpu.arena.len() < lines {
            let mut arena = Vec::new();
            arena.try_reserve_exact(lines).map_err(|_| RunError::OutOfMemory {
                what: "the arena of temporaries".into(),
                bytes: st.cpu.arena_bytes as u64,
            })?;
            arena.resize(lines, Line([0; ALIGN]));
            st.cpu.arena = arena;
            self.arenas.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(t) = st.step_ns.as_mut() {
            t.clear();
        }
        if st.cpu.prepared_for.as_ref() != Some(&st.sizes.symbols) {
            st.cpu.prepared.clear();
            st.cpu.prepared.resize_with(self.kernels.len(), || None);
            st.cpu.prepared_for = Some(st.sizes.symbols.clone());
        }
        // The buffer table native kernels read: the arena and the outputs are in place now
        // and stay for the whole run.
        st.cpu.ptrs.clear();
        for b in 0..self.locs.len() {
            let a = self.address(st, inputs, BufferId::new(b));
            st.cpu.ptrs.push(a);
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
                    let shape = st.sizes.shape(p, m.out).map_err(at)?;
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
                    let shape = st.sizes.shape(p, c.out).map_err(at)?;
                    let conv_shape = match &c.pool {
                        Some(pool) => st.sizes.shape(p, pool.unpooled).map_err(at)?,
                        None => shape.clone(),
                    };
                    let t = eval_conv(c, &x, &w, out.dtype, &conv_shape, &shape)
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
            if let (Some(t0), Some(times)) = (started, st.step_ns.as_mut()) {
                times.push(t0.elapsed().as_nanos().min(u64::MAX as u128) as u64);
            }
        }
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            if matches!(self.locs[b.index()], Loc::Output(s) if s == k) {
                continue;
            }
            // An input, a constant, a bool, or a buffer another slot already returns: copied
            // (into the slot's tensor when it fits).
            if st.sizes.fits(p, *b, &st.outs[k]).map_err(at_end)? {
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

    /// Copies buffer `b` into `t` (same dtype and length); false where `t` cannot be
    /// written as bytes (bool).
    fn copy_into(&self, st: &mut St, inputs: &[TensorView], b: BufferId, t: &mut Tensor) -> bool {
        let Some(dst) = t.data_mut().as_bytes_mut() else { return false };
        let copy = |src: &[u8], dst: &mut [u8]| {
            let n = src.len().min(dst.len());
            dst[..n].copy_from_slice(&src[..n]);
        };
        match &self.locs[b.index()] {
            Loc::Input(n) => copy(inputs[*n].bytes(), dst),
            Loc::Const(c) => copy(c.bytes(), dst),
            Loc::Output(k) => crate::kernel::eval::data_to_bytes(st.outs[*k].data(), dst),
            Loc::Temp => {
                let off = st.cpu.offsets[b.index()];
                let arena = arena_bytes_mut(&mut st.cpu.arena);
                let n = dst.len();
                dst.copy_from_slice(&arena[off..off + n]);
            }
        }
        true
    }

    /// A buffer's contents as a tensor (allocates).
    fn tensor(&self, p: &Program, st: &mut St, inputs: &[TensorView], b: BufferId) -> Result<Tensor, ExecError> {
        match &self.locs[b.index()] {
            Loc::Input(n) => Ok(inputs[*n].to_tensor()),
            Loc::Const(t) => Ok(Tensor::clone(t)),
            Loc::Output(k) => Ok(st.outs[*k].clone()),
            Loc::Temp => {
                let shape = st.sizes.shape(p, b)?;
                let off = st.cpu.offsets[b.index()];
                let arena = arena_bytes_mut(&mut st.cpu.arena);
                tensor_from_bytes(p.buffers[b].dtype, shape, &arena[off..off + st.sizes.bytes[b.index()]])
            }
        }
    }

    /// Writes a tensor into a temporary buffer.
    fn write(&self, p: &Program, st: &mut St, b: BufferId, t: &Tensor) -> Result<(), ExecError> {
        let buf = &p.buffers[b];
        if t.dtype() != buf.dtype || t.numel() != st.sizes.lens[b.index()] {
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
        let off = st.cpu.offsets[b.index()];
        let len = st.sizes.bytes[b.index()];
        let arena = arena_bytes_mut(&mut st.cpu.arena);
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
    fn address(&self, st: &mut St, inputs: &[TensorView], b: BufferId) -> usize {
        match &self.locs[b.index()] {
            Loc::Input(n) => inputs[*n].bytes().as_ptr() as usize,
            Loc::Const(t) => t.bytes().as_ptr() as usize,
            Loc::Temp => arena_bytes_mut(&mut st.cpu.arena).as_mut_ptr() as usize + st.cpu.offsets[b.index()],
            Loc::Output(k) => out_ptr(&mut st.outs[*k]),
        }
    }
}

/// A run at least this long (the previous run of the same state) gets helper workers: below
/// it, no step splits across threads anyway (`PAR_WORK` of kernel work alone is about this
/// long on one core).
pub const HELP_AFTER_NS: u64 = 20_000;

/// Runs the current pool's pending jobs until `done`, spinning while there are none (a helper
/// of `CpuExecutable::on_worker`). Off a pool, or once `done`, it returns.
fn help_until(done: &std::sync::atomic::AtomicBool) {
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {}
            Some(rayon::Yield::Idle) => std::hint::spin_loop(),
            None => return,
        }
    }
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

/// The static length of buffer `b`'s last dim (its rows' length), 0 when symbolic or a scalar.
fn row_len(p: &Program, b: BufferId) -> usize {
    p.buffers[b].shape.dims().last().and_then(|d| d.as_const()).unwrap_or(0) as usize
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
