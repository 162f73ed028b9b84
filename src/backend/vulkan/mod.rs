//! The Vulkan compute backend: each generated kernel of a scheduled program becomes a SPIR-V
//! compute shader (`spirv/`), dispatched through ash on the process's Vulkan device
//! (`device.rs`) or on an embedder's own ([`VulkanDevice::from_external`], `embed.rs`).
//!
//! What runs: programs whose every step is a generated kernel the lowering accepts (bool,
//! every integer dtype, f16, bf16, f32, and f64 where the device has it; pointwise,
//! broadcast, gather-style and reduction kernels with their accumulators, sum-exp included),
//! a library step the device has as generated kernels (`library.rs`: `matmul` and its
//! epilogue kernel, `conv` of any groups, strides, dilations and zero padding, with its
//! bias-and-ReLU post-op (`library_nn.rs`), both in every float and integer dtype, `cat`, `pad`,
//! `rev`, and `gather` and `scatter_add` from tensors of static shape, any library step's
//! bias-and-ReLU post-op), or a `dim_values` step (sizes as data, which the host writes). A
//! program with another step (a custom op, a gather from a tensor of symbolic shape, a padded
//! convolution of an input of symbolic size, ...), or a kernel the lowering declines (a dtype
//! or op it lacks), is refused when the plan is built, with the step and the reason
//! ([`crate::CompileError::Unsupported`]), never run partly on the host. Plans for this
//! backend are lowered without op recovery (softmax, the norms, pooling and LSTMs arrive as
//! kernels and prims), but for the row ops and attention where the device runs library
//! shaders ([`crate::recover::Mode::Shaders`]).
//!
//! Library shaders (`shaders.rs`: WGSL in `shaders/`, built by `build.rs`) replace a step's
//! generated kernels where the device runs them ([`VulkanDevice::library_shaders`]: GPUs, by
//! default): an f32 `matmul`, or 1-D or 2-D `conv`, as the tiled GEMM; a recovered f32
//! softmax, log_softmax, layer_norm or rms_norm as the row shader; a recovered f32
//! `scaled_dot_product_attention` as the attention shader.
//!
//! How it runs: constants are copied to device buffers when the plan is built. A run state
//! ([`crate::backend::RunState::device`]) keeps, per set of sizes, the memory (below), each
//! kernel's size table and status word, the descriptor sets, and one command buffer recorded
//! with every dispatch and a barrier between steps; a run with the same sizes copies the
//! inputs in, replays the command buffer, waits for its fence, checks the status words and
//! copies the outputs out. A new size recompiles nothing: sizes are in the tables.
//!
//! Memory: the temporaries are placed by the CPU backend's memory plan (`kernel::memory`:
//! lifetimes by step, first fit, largest first), each a buffer of its own bound into one
//! allocation at its offset, so temporaries never live at the same time share bytes (every
//! dispatch is followed by a barrier, which orders a later write after an earlier read).
//! Inputs, outputs and `dim_values` results (written once per set of sizes) have memory of
//! their own. A kernel binding more buffers than a shader may (lavapipe: 32) reads its
//! constants from pools and, where that is not enough, its other buffers from the run's
//! arena: one buffer, each member at an offset the size tables hold (`spirv/bindings.rs`).
//! On a discrete GPU ([`VulkanDevice::stages`]; `LADDER_VULKAN_STAGING=1` or
//! [`VulkanDevice::with_staging`] elsewhere) all of that memory is device-local: constants
//! and pools are uploaded once through staging buffers, and the recorded commands copy the
//! inputs and `dim_values` results in from their host-visible staging copies before the
//! first dispatch and the outputs out after the last. Elsewhere (integrated GPUs, lavapipe)
//! every buffer is host-visible and read and written in place. `memory.rs` holds the
//! placement and a run state's memory.
//!
//! `floors.rs` measures the device's copy bandwidth and f32 FMA rate, the floors `ladder
//! bench --backend vulkan` reports each workload against.

mod arith;
mod device;
mod embed;
pub mod floors;
mod library;
mod library_nn;
mod memory;
mod pipe;
mod shaders;
pub mod spirv;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ash::vk;
use cranelift_entity::EntityRef;

/// The ash crate (0.38) whose types [`ExternalDevice`] holds.
pub use ash;
use device::{call, Buffer};
pub use device::{context, take_validation_messages, Context, VulkanError};
pub use embed::{ExternalDevice, VulkanDevice};
use memory::{filled, place, DeviceRun};
use pipe::Pipe;
pub use shaders::library_shaders;
use shaders::Library;
use spirv::{Shader, Status, LOCAL_SIZE};

use super::{Backend, BackendError, Executable, Fallback, RunError, RunState};
use crate::kernel::eval::{eval_library_with, tensor_from_bytes, ExecError};
use crate::kernel::memory::Lifetime;
use crate::kernel::{BufferId, BufferKind, LibraryCall, Program, Step};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorView};

/// The Vulkan backend (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct VulkanBackend {
    /// The device its plans run on; `None`: the process's own ([`context`]).
    pub device: Option<VulkanDevice>,
}

impl VulkanBackend {
    /// The device its plans run on, with its settings (the process's own, with the defaults,
    /// where none was given).
    fn device(&self) -> Result<VulkanDevice, VulkanError> {
        match &self.device {
            Some(d) => Ok(d.clone()),
            None => VulkanDevice::process(),
        }
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    /// The prims, and, where the device runs library shaders, the row ops and attention it
    /// has shaders for recovered ([`crate::recover::Mode::Shaders`]).
    fn mode(&self, recover: bool) -> crate::recover::Mode {
        match recover && self.device().is_ok_and(|d| d.library_shaders()) {
            true => crate::recover::Mode::Shaders,
            false => crate::recover::Mode::Reference,
        }
    }

    fn prepare(&self, program: &Program, consts: &[Option<Arc<Tensor>>]) -> Result<Box<dyn Executable>, BackendError> {
        let device = self.device().map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let (ctx, staging, library_shaders) = (Arc::clone(&device.ctx), device.stages(), device.library_shaders());
        let subgroups = device.subgroups().then_some(ctx.subgroup).flatten();
        let failed = |e: VulkanError| BackendError::Unsupported(e.to_string());
        // The generated kernels (with their steps), and what runs, in order: the next
        // generated kernel (`None`) or a library shader.
        let mut written = Vec::with_capacity(program.steps.len());
        let mut order: Vec<Option<(usize, Library)>> = Vec::with_capacity(program.steps.len());
        let mut sizes_only = Vec::new();
        for (i, step) in program.steps.iter().enumerate() {
            // Values computed from the run's sizes alone: written by the host.
            if let Step::Library(l) = step {
                if l.op == OpKind::DimValues && l.post.is_none() {
                    sizes_only.push((i, l.clone()));
                    continue;
                }
            }
            // An f32 matmul or convolution through the library GEMM, a row op or attention
            // through its shader (`shaders.rs`), then the matmul's epilogue kernel or the step's post-op.
            if let Some((library, after)) = shaders::for_step(step, program, i).filter(|_| library_shaders) {
                order.push(Some((i, library)));
                if let Some(k) = after {
                    written.push((i, k));
                    order.push(None);
                }
                continue;
            }
            // Other library steps are written as generated kernels (`library.rs`).
            let ks = library::step_kernels(step, program, i)
                .map_err(|why| BackendError::Unsupported(format!("step {i} is a {} call: {why}", step_kind(step))))?;
            order.extend(ks.iter().map(|_| None));
            written.extend(ks.into_iter().map(|k| (i, k)));
        }
        let (shaders, arena) = place(&ctx, program, &written)?;
        let mut kernels = Vec::with_capacity(order.len());
        // With staging, the host-visible copies device-local constants are uploaded from.
        let mut uploads: Vec<(Buffer, Option<usize>, usize)> = Vec::new();
        let mut generated = written.iter().zip(shaders);
        let mut pipes = Vec::new();
        for next in order {
            let (step, code) = match next {
                Some((step, library)) => (step, Code::Library(library)),
                None => {
                    let ((step, _), shader) = generated.next().ok_or_else(|| {
                        BackendError::Malformed("vulkan: fewer shaders than generated kernels".into())
                    })?;
                    (*step, Code::Generated(shader))
                }
            };
            let (k, stagings) = KernelStep::new(&ctx, step, code, (consts, staging, subgroups.is_some()), &mut pipes)?;
            uploads.extend(stagings.into_iter().enumerate().map(|(i, h)| (h, Some(kernels.len()), i)));
            kernels.push(k);
        }
        // Constants, copied once.
        let mut const_bufs: Vec<Option<Buffer>> = (0..program.buffers.len()).map(|_| None).collect();
        let mut resident = 0;
        for (b, t) in consts.iter().enumerate() {
            let Some(t) = t else { continue };
            let bytes = t.bytes();
            let (buf, host) =
                filled(&ctx, bytes.len(), staging, |dst| dst[..bytes.len()].copy_from_slice(bytes)).map_err(failed)?;
            uploads.extend(host.map(|h| (h, None, b)));
            resident += buf.size as usize;
            const_bufs[b] = Some(buf);
        }
        let transfers: Vec<device::Transfer> = uploads
            .iter()
            .filter_map(|(src, kernel, i)| {
                let dst = match kernel {
                    Some(k) => kernels[*k].pools.get(*i)?,
                    None => const_bufs[*i].as_ref()?,
                };
                Some(device::Transfer { src, src_offset: 0, dst, dst_offset: 0, size: src.size })
            })
            .collect();
        device::copy_and_wait(&ctx, &transfers).map_err(failed)?;
        drop(transfers);
        drop(uploads);
        device::validation_result(&ctx).map_err(BackendError::Malformed)?;
        // The memory plan: temporaries not live at the same time share memory. Not the arena's
        // members, nor the results of `dim_values` steps (written once, when a run's memory
        // is made, and read by every replay).
        // By buffer: written by the host (inputs, `dim_values` results), returned.
        let n = program.buffers.len();
        let mut host_written = vec![false; n];
        for (b, buf) in program.buffers.iter() {
            host_written[b.index()] = matches!(buf.kind, BufferKind::Input(_));
        }
        for (_, l) in &sizes_only {
            host_written[l.out.index()] = true;
        }
        let mut output = vec![false; n];
        for (_, b) in &program.outputs {
            output[b.index()] = true;
        }
        let mut lifetimes = crate::kernel::memory::lifetimes(program);
        // Lifetimes are the steps': each kernel a library step is written as must fall in the
        // lifetimes of the buffers it touches (extended where one would not).
        for (step, k) in &written {
            k.for_each_buffer(&mut |b| {
                if let Some(l) = &mut lifetimes[b.index()] {
                    (l.first, l.last) = (l.first.min(*step), l.last.max(*step));
                }
            });
        }
        for (b, life) in lifetimes.iter_mut().enumerate() {
            if arena[b] || host_written[b] {
                *life = None;
            }
        }
        let in_arena = arena.iter().filter(|&&a| a).count();
        let arena_note = match in_arena {
            0 => String::new(),
            n => format!("; {n} buffers share the run's arena, read by kernels binding too many"),
        };
        let memory = match staging {
            true => "device-local memory, inputs and outputs staged",
            false => "host-visible memory",
        };
        let library = |shader: &str| {
            kernels.iter().filter(|k| matches!(&k.code, Code::Library(l) if l.shader() == shader)).count()
        };
        let notes = [
            ("gemm_f32", "the library GEMM (matmuls and convolutions)"),
            ("rows_f32", "the row shader"),
            ("attention_f32", "the attention shader"),
        ];
        let mut library_note = String::new();
        for (shader, what) in notes.into_iter().filter(|(shader, _)| library(shader) > 0) {
            let of_them = if library_note.is_empty() { " of them" } else { "" };
            library_note += &format!(", {}{of_them} {what}", library(shader));
        }
        if let Some(n) =
            subgroups.filter(|_| kernels.iter().any(|k| matches!(&k.code, Code::Library(l) if l.reduces())))
        {
            library_note += &format!(" (reducing on subgroups of {n})");
        }
        let explanation = format!(
            "vulkan: {} kernels as compute shaders{library_note} on {} ({memory}; {} bytes of constants on the device{arena_note})\n",
            kernels.len(),
            ctx.name,
            resident
        );
        // Constants the program returns, read back from the host's copy.
        let returned = consts.iter().enumerate().map(|(b, t)| t.as_ref().filter(|_| output[b]).cloned()).collect();
        Ok(Box::new(VulkanExecutable {
            ctx,
            kernels,
            arena,
            staging,
            sizes_only,
            consts: const_bufs,
            returned,
            host_written,
            output,
            lifetimes,
            explanation,
            resident,
            builds: AtomicUsize::new(0),
        }))
    }
}

fn step_kind(s: &Step) -> &'static str {
    match s {
        Step::Kernel(_) => "kernel",
        Step::Matmul(_) => "matmul",
        Step::Conv(_) => "conv",
        Step::Library(l) => l.op.name(),
        Step::Interp(_) => "graph break (interpreter)",
    }
}

/// The kernels step `step` of `program` runs as on the device, in order (a kernel step is
/// itself; a library step is the kernels `library.rs` writes for it; a `dim_values` step,
/// which the host writes, has none), or why the device does not run it: what the backend
/// lowers to shaders, for tests that validate every one.
pub fn step_kernels(program: &Program, step: usize) -> Result<Vec<crate::kernel::Kernel>, String> {
    let s = program.steps.get(step).ok_or_else(|| format!("the program has no step {step}"))?;
    library::step_kernels(s, program, step)
}

struct KernelStep {
    /// Its step in the program.
    step: usize,
    code: Code,
    /// Its pipeline (the library GEMM's is one for every step of a plan that runs it).
    pipe: Arc<Pipe>,
    /// The shader's pools of constants (`Shader::pools`), filled when the plan is made.
    pools: Vec<Buffer>,
}

/// What a dispatch runs: a generated kernel's shader, or a library shader (`shaders.rs`).
enum Code {
    Generated(Shader),
    Library(Library),
}

impl KernelStep {
    /// A pipeline for `code` (of step `step`), its pools of constants filled (`consts`: the
    /// program's); with `staging`, the pools are device-local, returned with the host-visible
    /// copies to upload them from. `pipes`: the plan's library shader pipelines by shader,
    /// each made on first use (reducing on subgroup operations where `subgroups`).
    fn new(
        ctx: &Arc<Context>,
        step: usize,
        code: Code,
        (consts, staging, subgroups): (&[Option<Arc<Tensor>>], bool, bool),
        pipes: &mut Vec<(&'static str, Arc<Pipe>)>,
    ) -> Result<(KernelStep, Vec<Buffer>), BackendError> {
        let failed = |e: VulkanError| BackendError::Unsupported(e.to_string());
        let shader = match code {
            Code::Generated(shader) => shader,
            Code::Library(l) => {
                let pipe = match pipes.iter().find(|(s, _)| *s == l.shader()) {
                    Some((_, pipe)) => Arc::clone(pipe),
                    None => {
                        // Its buffers, the parameters and the status word.
                        let bindings = l.buffers().len() as u32 + 2;
                        let pipe = Arc::new(Pipe::from_words(ctx, l.words(subgroups), bindings).map_err(failed)?);
                        pipes.push((l.shader(), Arc::clone(&pipe)));
                        pipe
                    }
                };
                return Ok((KernelStep { step, code: Code::Library(l), pipe, pools: Vec::new() }, Vec::new()));
            }
        };
        let pipe = Arc::new(Pipe::new(ctx, &shader).map_err(failed)?);
        let mut pools = Vec::with_capacity(shader.pools.len());
        let mut hosts = Vec::new();
        for pool in &shader.pools {
            let mut members = Vec::with_capacity(pool.members.len());
            for &(b, offset) in &pool.members {
                let t = consts.get(b.index()).and_then(|t| t.as_ref());
                let t = t.ok_or_else(|| BackendError::Unsupported(format!("{b}, a constant, has no value")))?;
                members.push((t.bytes(), offset as usize));
            }
            // `plan` sized the pool for every member.
            let (buf, host) = filled(ctx, pool.bytes as usize, staging, |dst| {
                for (bytes, at) in members {
                    dst[at..at + bytes.len()].copy_from_slice(bytes);
                }
            })
            .map_err(failed)?;
            pools.push(buf);
            hosts.extend(host);
        }
        Ok((KernelStep { step, code: Code::Generated(shader), pipe, pools }, hosts))
    }

    /// The kernel's name (the generated kernel's, or the library step's).
    fn name(&self) -> &str {
        match &self.code {
            Code::Generated(s) => &s.prepared.name,
            Code::Library(l) => l.name(),
        }
    }

    /// Whether it binds program buffer `b`.
    fn binds(&self, b: BufferId) -> bool {
        match &self.code {
            Code::Generated(s) => s.buffers.contains(&b),
            Code::Library(l) => l.buffers().contains(&b),
        }
    }

    /// What is bound at bindings `0..`, before the size table and status word; `arena`: by
    /// buffer, whether it lives in the run's arena.
    fn bindings(&self, arena: &[bool]) -> Vec<spirv::Binding> {
        match &self.code {
            Code::Generated(s) => s.bindings.clone(),
            Code::Library(l) => l
                .buffers()
                .iter()
                .map(|&b| match arena[b.index()] {
                    true => spirv::Binding::Arena,
                    false => spirv::Binding::Buffer(b),
                })
                .collect(),
        }
    }
}

/// A program prepared for the Vulkan device.
pub struct VulkanExecutable {
    ctx: Arc<Context>,
    kernels: Vec<KernelStep>,
    /// By buffer: whether it lives in each run's arena (`spirv/bindings.rs`).
    arena: Vec<bool>,
    /// Whether its memory is device-local, inputs and outputs copied through staging buffers.
    staging: bool,
    /// `dim_values` steps (with their step numbers): the host writes their results, which
    /// depend only on the run's sizes, when it makes a run's buffers.
    sizes_only: Vec<(usize, LibraryCall)>,
    consts: Vec<Option<Buffer>>,
    /// The constants the program returns (by buffer), read back from the host's copy.
    returned: Vec<Option<Arc<Tensor>>>,
    /// By buffer: whether the host writes it (inputs, `dim_values` results), and whether
    /// the program returns it.
    host_written: Vec<bool>,
    output: Vec<bool>,
    lifetimes: Vec<Option<Lifetime>>,
    explanation: String,
    resident: usize,
    builds: AtomicUsize,
}

fn invalid(e: impl std::fmt::Display) -> RunError {
    RunError::Step { step: 0, error: ExecError::Invalid(format!("vulkan: {e}")) }
}

impl VulkanExecutable {
    /// The device objects for a run with `sizes`, whose kernels' evaluated size tables are
    /// `tables`: buffers, tables, status words and the recorded commands.
    fn build(
        &self,
        p: &Program,
        sizes: &crate::backend::Sizes,
        tables: &[Vec<i64>],
        max_run_bytes: u64,
    ) -> Result<DeviceRun, RunError> {
        let lens = &sizes.lens[..];
        let ctx = &self.ctx;
        let d = &ctx.device;
        // Memory for every input, temporary and output: the planned temporaries (those with a
        // lifetime) in one block, where they may overlap; the others a buffer each.
        let mut bufs: Vec<Option<Buffer>> = (0..p.buffers.len()).map(|_| None).collect();
        let bytes_of = |b: usize| lens[b].saturating_mul(p.buffers[BufferId::new(b)].dtype.size_bytes());
        let planned: Vec<usize> = (0..bufs.len()).filter(|&b| self.lifetimes[b].is_some()).collect();
        let (mut offsets, mut order, mut placed) = (Vec::new(), Vec::new(), Vec::new());
        let all_sizes: Vec<usize> = (0..bufs.len()).map(bytes_of).collect();
        let block = crate::kernel::memory::assign(&self.lifetimes, &all_sizes, &mut offsets, &mut order, &mut placed);
        let mut need = block.map_or(u64::MAX, |n| n as u64);
        for b in (0..bufs.len()).filter(|&b| self.consts[b].is_none() && self.lifetimes[b].is_none()) {
            need = need.saturating_add(bytes_of(b) as u64);
        }
        // With staging: device-local memory, and a host-visible copy of every input, output
        // and `dim_values` result.
        let host = !self.staging;
        let staged = |b: usize| self.staging && self.consts[b].is_none() && (self.host_written[b] || self.output[b]);
        for b in (0..bufs.len()).filter(|&b| staged(b)) {
            need = need.saturating_add(bytes_of(b) as u64);
        }
        if need > max_run_bytes {
            return Err(RunError::TooLarge { need, limit: max_run_bytes });
        }
        let max_range = u64::from(ctx.limits.max_storage_buffer_range);
        // A buffer a kernel binds must fit one binding: a limit of the device (lavapipe's is
        // 128 MiB), not a wrong program, so the run is refused as unsupported there.
        let too_large = |b: usize, what: String| {
            let bound = self.kernels.iter().find(|k| k.binds(BufferId::new(b)));
            bound.map(|k| RunError::Step {
                step: k.step,
                error: ExecError::Unsupported {
                    backend: "Vulkan",
                    kernel: k.name().to_string(),
                    what: format!("{what} (more than the device binds at once, {max_range})"),
                },
            })
        };
        // The arena's members one after another, each at a multiple of 8 bytes.
        let mut arena_at = vec![None; bufs.len()];
        let mut arena_bytes = 0u64;
        for b in (0..bufs.len()).filter(|&b| self.arena[b] && self.consts[b].is_none()) {
            let at = arena_bytes.next_multiple_of(8);
            arena_at[b] = Some(at);
            arena_bytes = at.saturating_add(bytes_of(b) as u64);
            if arena_bytes > max_range {
                let what = format!("the arena of {arena_bytes} bytes and more, {} in it", BufferId::new(b));
                return Err(too_large(b, what).unwrap_or_else(|| invalid("the arena is too large")));
            }
        }
        let arena = match arena_at.iter().any(Option::is_some) {
            true => Some(Buffer::with_memory(ctx, arena_bytes as usize, host).map_err(invalid)?),
            false => None,
        };
        for (b, slot) in bufs.iter_mut().enumerate() {
            if self.consts[b].is_some() || arena_at[b].is_some() {
                continue;
            }
            if bytes_of(b) as u64 > max_range {
                if let Some(e) = too_large(b, format!("binding {} of {} bytes", BufferId::new(b), bytes_of(b))) {
                    return Err(e);
                }
            }
            if self.lifetimes[b].is_none() {
                *slot = Some(Buffer::with_memory(ctx, bytes_of(b), host).map_err(invalid)?);
            }
        }
        let sizes_planned: Vec<usize> = planned.iter().map(|&b| bytes_of(b)).collect();
        let shared = Buffer::in_one_block(ctx, host, &sizes_planned, |in_memory, align| {
            let mut sizes = vec![0usize; bufs.len()];
            for (&b, &n) in planned.iter().zip(in_memory) {
                sizes[b] = usize::try_from(n).ok()?;
            }
            let align = usize::try_from(align).ok()?;
            let total = crate::kernel::memory::assign_aligned(
                &self.lifetimes,
                &sizes,
                align,
                &mut offsets,
                &mut order,
                &mut placed,
            )?;
            Some((planned.iter().map(|&b| offsets[b] as u64).collect(), total as u64))
        })
        .map_err(invalid)?;
        for (&b, buf) in planned.iter().zip(shared) {
            bufs[b] = Some(buf);
        }
        let mut staging: Vec<Option<Buffer>> = (0..bufs.len()).map(|_| None).collect();
        for b in (0..bufs.len()).filter(|&b| staged(b)) {
            staging[b] = Some(Buffer::new(ctx, bytes_of(b)).map_err(invalid)?);
        }
        let mut table_bufs = Vec::with_capacity(self.kernels.len());
        let mut status = Vec::with_capacity(self.kernels.len());
        // Arena members' first elements (in storage elements of their dtype).
        let first = |b: BufferId| {
            let stride = u64::from(spirv::storage_stride(p.buffers[b].dtype));
            arena_at[b.index()].map_or(0, |at| at / stride)
        };
        let mut library_params = Vec::with_capacity(self.kernels.len());
        for (k, table) in self.kernels.iter().zip(tables) {
            let bytes: Vec<u8> = match &k.code {
                Code::Generated(shader) => {
                    let mut values = table.clone();
                    values.extend(shader.buffers.iter().map(|b| lens[b.index()] as i64));
                    values.extend(shader.buffers.iter().map(|&b| first(b) as i64));
                    library_params.push(Vec::new());
                    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
                }
                Code::Library(l) => {
                    let first: Vec<u64> = l.buffers().into_iter().map(first).collect();
                    let params = l.params(p, sizes, &first).map_err(|what| RunError::Step {
                        step: k.step,
                        error: ExecError::Unsupported { backend: "Vulkan", kernel: l.name().to_string(), what },
                    })?;
                    let bytes = params.iter().flat_map(|v| v.to_ne_bytes()).collect();
                    library_params.push(params);
                    bytes
                }
            };
            let buf = Buffer::new(ctx, bytes.len()).map_err(invalid)?;
            // SAFETY: a new buffer.
            unsafe { buf.bytes_mut()[..bytes.len()].copy_from_slice(&bytes) };
            table_bufs.push(buf);
            status.push(Buffer::new(ctx, 4).map_err(invalid)?);
        }
        // Descriptor sets.
        let total: u32 = self.kernels.iter().map(|k| k.pipe.bindings).sum();
        let pool_sizes =
            [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(total.max(1))];
        let mut run = DeviceRun {
            ctx: Arc::clone(ctx),
            symbols: sizes.symbols.clone(),
            bufs,
            arena,
            arena_at,
            staging,
            tables: table_bufs,
            status,
            pool: vk::DescriptorPool::null(),
            commands: vk::CommandPool::null(),
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
        };
        for (step, l) in &self.sizes_only {
            let at = |error| RunError::Step { step: *step, error };
            let shape = sizes.shape(p, l.out).map_err(at)?;
            let symbols =
                p.symbols.iter().zip(&sizes.symbols).filter_map(|(s, v)| v.map(|v| (s.to_string(), v))).collect();
            let t = eval_library_with(l.op, &l.attrs, &[], p.buffers[l.out].dtype, &shape, symbols)
                .map_err(|error| at(ExecError::Library { what: l.op.name(), error }))?;
            let src = t.bytes();
            let (dst, at) = run.host(l.out).ok_or_else(|| invalid(format!("{} has no memory", l.out)))?;
            // SAFETY: a new buffer no submission uses yet.
            unsafe { dst.bytes_mut()[at..at + src.len()].copy_from_slice(src) };
        }
        // SAFETY: create infos outlive their calls; `DeviceRun::drop` destroys what was made;
        // the recorded commands name only buffers the run keeps.
        unsafe {
            run.pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(self.kernels.len().max(1) as u32)
                        .pool_sizes(&pool_sizes),
                    None,
                )
                .map_err(|e| invalid(call("vkCreateDescriptorPool")(e)))?;
            run.commands = d
                .create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(ctx.family), None)
                .map_err(|e| invalid(call("vkCreateCommandPool")(e)))?;
            run.cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(run.commands)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .map_err(|e| invalid(call("vkAllocateCommandBuffers")(e)))?[0];
            run.fence =
                d.create_fence(&vk::FenceCreateInfo::default(), None).map_err(|e| invalid(call("vkCreateFence")(e)))?;
            d.begin_command_buffer(run.cmd, &vk::CommandBufferBeginInfo::default())
                .map_err(|e| invalid(call("vkBeginCommandBuffer")(e)))?;
            if self.staging {
                device::record_copies(ctx, run.cmd, &run.transfers(p, lens, true, &self.host_written, &self.output));
                device::record_barrier(
                    ctx,
                    run.cmd,
                    (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE),
                    (vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::SHADER_READ),
                );
            }
            let barrier = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            for (i, k) in self.kernels.iter().enumerate() {
                let layouts = [k.pipe.set_layout];
                let set = d
                    .allocate_descriptor_sets(
                        &vk::DescriptorSetAllocateInfo::default().descriptor_pool(run.pool).set_layouts(&layouts),
                    )
                    .map_err(|e| invalid(call("vkAllocateDescriptorSets")(e)))?[0];
                let mut infos: Vec<vk::DescriptorBufferInfo> = k
                    .bindings(&self.arena)
                    .iter()
                    .map(|binding| {
                        let buf = match binding {
                            spirv::Binding::Buffer(b) => {
                                let buf = self.consts[b.index()].as_ref().or(run.bufs[b.index()].as_ref());
                                buf.ok_or_else(|| invalid(format!("{b} has no memory")))?
                            }
                            spirv::Binding::Pool(i) => {
                                k.pools.get(*i).ok_or_else(|| invalid(format!("no pool {i}")))?
                            }
                            spirv::Binding::Arena => run.arena.as_ref().ok_or_else(|| invalid("no arena"))?,
                        };
                        Ok(vk::DescriptorBufferInfo::default().buffer(buf.buffer).offset(0).range(vk::WHOLE_SIZE))
                    })
                    .collect::<Result<_, RunError>>()?;
                for extra in [&run.tables[i], &run.status[i]] {
                    infos
                        .push(vk::DescriptorBufferInfo::default().buffer(extra.buffer).offset(0).range(vk::WHOLE_SIZE));
                }
                let writes: Vec<vk::WriteDescriptorSet> = infos
                    .iter()
                    .enumerate()
                    .map(|(b, info)| {
                        vk::WriteDescriptorSet::default()
                            .dst_set(set)
                            .dst_binding(b as u32)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(std::slice::from_ref(info))
                    })
                    .collect();
                d.update_descriptor_sets(&writes, &[]);
                let groups = match &k.code {
                    Code::Generated(shader) => {
                        let points = shader.points(&tables[i]);
                        if points <= 0 {
                            continue;
                        }
                        let groups = (points as u64).div_ceil(u64::from(LOCAL_SIZE));
                        let max_x = u64::from(ctx.limits.max_compute_work_group_count[0].min(65_535));
                        let gx = groups.min(max_x);
                        let gy = groups.div_ceil(gx);
                        if gy > u64::from(ctx.limits.max_compute_work_group_count[1]) {
                            return Err(invalid(format!(
                                "kernel {} has {points} points, more than one dispatch holds",
                                k.name()
                            )));
                        }
                        [gx as u32, gy as u32, 1]
                    }
                    Code::Library(l) => match l.groups(&library_params[i], ctx.limits.max_compute_work_group_count) {
                        Some(groups) => groups,
                        None => continue,
                    },
                };
                d.cmd_bind_pipeline(run.cmd, vk::PipelineBindPoint::COMPUTE, k.pipe.pipeline);
                d.cmd_bind_descriptor_sets(run.cmd, vk::PipelineBindPoint::COMPUTE, k.pipe.layout, 0, &[set], &[]);
                d.cmd_dispatch(run.cmd, groups[0], groups[1], groups[2]);
                d.cmd_pipeline_barrier(
                    run.cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &barrier,
                    &[],
                    &[],
                );
            }
            let shader_writes = (vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::SHADER_WRITE);
            let host_reads = (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);
            if self.staging {
                let copies = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_READ);
                device::record_barrier(ctx, run.cmd, shader_writes, copies);
                device::record_copies(ctx, run.cmd, &run.transfers(p, lens, false, &self.host_written, &self.output));
                let copied = (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE);
                device::record_barrier(ctx, run.cmd, copied, host_reads);
            } else {
                device::record_barrier(ctx, run.cmd, shader_writes, host_reads);
            }
            d.end_command_buffer(run.cmd).map_err(|e| invalid(call("vkEndCommandBuffer")(e)))?;
        }
        self.builds.fetch_add(1, Ordering::Relaxed);
        Ok(run)
    }
}

impl Executable for VulkanExecutable {
    fn lifetimes(&self) -> &[Option<Lifetime>] {
        &self.lifetimes
    }

    fn run(&self, p: &Program, inputs: &[TensorView], run: &mut RunState, max_run_bytes: u64) -> Result<(), RunError> {
        // Every size derives from the symbols: with the same values as the state's last run,
        // its objects (and the checks they passed) still hold.
        let dr = match run.device.take().map(|d| d.downcast::<DeviceRun>()) {
            Some(Ok(dr)) if dr.symbols == run.sizes.symbols => dr,
            _ => {
                // The size tables, and the checks compiled kernels cannot make.
                let lookup = |s: &str| run.sizes.symbol(p, s);
                let mut tables = Vec::with_capacity(self.kernels.len());
                for k in &self.kernels {
                    let mut dims = Vec::new();
                    let at = |error| RunError::Step { step: k.step, error };
                    // A library shader's parameters are computed when its commands are recorded.
                    if let Code::Generated(shader) = &k.code {
                        shader.prepared.eval_dims(&lookup, &mut dims).map_err(at)?;
                        shader.prepared.check(&dims, &|b| run.sizes.lens[b.index()]).map_err(at)?;
                    }
                    tables.push(dims);
                }
                Box::new(self.build(p, &run.sizes, &tables, max_run_bytes)?)
            }
        };
        let result = self.submit(p, inputs, run, &dr);
        run.device = Some(dr as Box<dyn Any + Send>);
        result?;
        device::validation_result(&self.ctx).map_err(invalid)
    }

    fn native_kernels(&self) -> usize {
        self.kernels.len()
    }

    fn fallbacks(&self) -> &[Fallback] {
        &[]
    }

    fn resident_bytes(&self) -> usize {
        self.resident
    }

    fn explanation(&self) -> &str {
        &self.explanation
    }

    fn arenas_allocated(&self) -> usize {
        self.builds.load(Ordering::Relaxed)
    }
}

impl VulkanExecutable {
    /// Copies the inputs in, replays the recorded commands, checks the status words and
    /// copies the outputs out.
    fn submit(&self, p: &Program, inputs: &[TensorView], run: &mut RunState, dr: &DeviceRun) -> Result<(), RunError> {
        let d = &self.ctx.device;
        for (b, buf) in p.buffers.iter() {
            if let (BufferKind::Input(n), Some((dst, at))) = (&buf.kind, dr.host(b)) {
                let src = inputs.get(*n).map(|v| v.bytes()).unwrap_or_default();
                // SAFETY: nothing is submitted: the previous run waited for its fence.
                match unsafe { dst.bytes_mut() }.get_mut(at..at + src.len()) {
                    Some(dst) => dst.copy_from_slice(src),
                    None => return Err(invalid(format!("input {b} has no host-visible memory of its size"))),
                }
            }
        }
        for s in &dr.status {
            // SAFETY: as above.
            unsafe { s.bytes_mut().fill(0) };
        }
        {
            let queue = self.ctx.queue.lock().unwrap_or_else(|e| e.into_inner());
            let cmds = [dr.cmd];
            let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
            // SAFETY: the command buffer and everything it names live in `dr`; the queue is
            // externally synchronized by the lock; the fence is unsignalled.
            unsafe {
                d.queue_submit(*queue, &submit, dr.fence).map_err(|e| invalid(call("vkQueueSubmit")(e)))?;
            }
        }
        // SAFETY: the fence was submitted above.
        unsafe {
            d.wait_for_fences(&[dr.fence], true, u64::MAX).map_err(|e| invalid(call("vkWaitForFences")(e)))?;
            d.reset_fences(&[dr.fence]).map_err(|e| invalid(call("vkResetFences")(e)))?;
        }
        for (s, k) in dr.status.iter().zip(&self.kernels) {
            // SAFETY: the submission finished.
            let code = u32::from_ne_bytes(unsafe { s.bytes() }[..4].try_into().unwrap_or_default());
            let step = k.step;
            if code != 0 {
                let kernel = k.name().to_string();
                let error = if code == Status::DivisionByZero as u32 {
                    ExecError::Eval { kernel, error: crate::interp::EvalError::DivisionByZero }
                } else if code == Status::Exponent as u32 {
                    ExecError::Unsupported {
                        backend: "Vulkan",
                        kernel,
                        what: "pow with an exponent other than an integer of -4 to 4".into(),
                    }
                } else {
                    ExecError::Invalid(format!("kernel {kernel}: a computed index fell outside its buffer"))
                };
                return Err(RunError::Step { step, error });
            }
        }
        run.outs.resize_with(p.outputs.len(), Tensor::placeholder);
        for (k, (_, b)) in p.outputs.iter().enumerate() {
            let shape = run.sizes.shape(p, *b).map_err(|error| RunError::Step { step: p.steps.len(), error })?;
            let dtype = p.buffers[*b].dtype;
            let bytes = lens_bytes(run.sizes.lens[b.index()], dtype);
            let t = match (&p.buffers[*b].kind, dr.host(*b), &self.returned[b.index()]) {
                (BufferKind::Input(n), ..) => {
                    let src = inputs.get(*n).map(|v| v.bytes()).unwrap_or_default();
                    tensor_from_bytes(dtype, shape, src)
                }
                (.., Some(c)) => tensor_from_bytes(dtype, shape, c.bytes()),
                // SAFETY: the submission finished.
                (_, Some((buf, at)), None) => match unsafe { buf.bytes() }.get(at..at + bytes) {
                    Some(src) => tensor_from_bytes(dtype, shape, src),
                    None => Err(ExecError::Invalid(format!("output {b} is not in host-visible memory"))),
                },
                _ => Err(ExecError::Invalid(format!("output {b} has no memory"))),
            };
            run.outs[k] = t.map_err(|error| RunError::Step { step: p.steps.len(), error })?;
        }
        Ok(())
    }
}

fn lens_bytes(len: usize, dtype: crate::ir::DType) -> usize {
    len.saturating_mul(dtype.size_bytes())
}

/// Whether this backend runs the prim or opaque op `kind` (on f32, f16, bf16, integer and
/// bool values, and f64 where the device has it; `matmul` and `conv` in each; `gather` and
/// `scatter_add` from tensors of static shape; other shapes are refused): what `ladder ops`
/// reports in its `vulkan` column, and what `tests/all/vulkan.rs` checks against the programs
/// it runs.
pub fn runs_op(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(
        kind,
        Neg | Abs
            | Exp
            | Exp2
            | Log
            | Log1p
            | Expm1
            | Sqrt
            | Rsqrt
            | Reciprocal
            | Sin
            | Cos
            | Tanh
            | Erf
            | Floor
            | Ceil
            | Round
            | Sign
            | LogicalNot
            | IsNan
            | Add
            | Sub
            | Mul
            | Div
            | Max
            | Min
            | Eq
            | Ne
            | Lt
            | Le
            | Gt
            | Ge
            | And
            | Or
            | Rem
            | Pow
            | Where
            | ConvertElementType
            | BroadcastInDim
            | Reshape
            | Permute
            | Slice
            | Iota
            | Full
            | DimValues
            | Cat
            | Pad
            | Rev
            | Gather
            | ScatterAdd
            | Matmul
            | Conv
            | ReduceSum
            | ReduceProd
            | ReduceMax
            | ReduceMin
            | ReduceArgmax
            | Input
            | Const
    )
}

/// Whether a Vulkan device can be used here (loading the driver on first call); the reason
/// where not.
pub fn available() -> Result<String, VulkanError> {
    context().map(|c| c.name.clone())
}

impl std::fmt::Debug for VulkanExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanExecutable").field("kernels", &self.kernels.len()).finish_non_exhaustive()
    }
}
