//! The device's own floors, for `ladder bench --backend vulkan`: how fast it copies memory of
//! the kind plans use, and its f32 multiply-add rate, each measured on the device the plans
//! run on.
//!
//! - [`copy_rate`]: `vkCmdCopyBuffer` from one buffer to another of the same size, in the
//!   memory plan buffers live in (device-local where plans on the device stage their inputs
//!   and outputs, [`VulkanDevice::stages`], else host-visible and coherent), the rate
//!   counting the bytes read and the bytes written.
//! - [`fma_rate`]: a compute shader (written here with rspirv) whose invocations each run 12
//!   independent chains of `fma(c, a, b)` (GLSL.std.450 `Fma`, `a` and `b` loaded from the
//!   buffer so nothing folds), over 262,144 invocations (4,096 workgroups of 64); the number
//!   of rounds is data, raised until one dispatch takes at least 20 ms.
//!
//! Each is timed with the queue's timestamp queries where its family has them
//! (`timestampValidBits > 0` and a non-zero `timestampPeriod`: [`Clock::Timestamps`]), else
//! by the host around submit and wait ([`Clock::Host`]); one untimed submission, then the
//! median of `runs`.

use std::sync::Arc;

use ash::vk;
use rspirv::binary::Assemble;
use rspirv::dr::{Builder, Operand};
use rspirv::spirv;

use super::device::{call, validation_result, Buffer, Context};
use super::{Pipe, VulkanDevice, VulkanError};

/// How a floor was timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The queue's timestamp queries around the recorded work.
    Timestamps,
    /// The host's clock around submit and fence wait (the family has no timestamps).
    Host,
}

impl Clock {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Clock::Timestamps => "timestamp queries",
            Clock::Host => "host time around submit and wait",
        }
    }
}

/// A rate measured on the device.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    /// Bytes per second moved (copy) or FLOPs per second (FMA), over the median time.
    pub per_second: f64,
    /// The median time of one submission, in microseconds.
    pub median_us: f64,
    /// Bytes copied (read once and written once) or FLOPs one submission does.
    pub work: f64,
    /// How it was timed.
    pub clock: Clock,
    /// Timed submissions.
    pub runs: usize,
}

/// One command buffer, its fence and, where the family has them, two timestamp queries.
struct Timed {
    ctx: Arc<Context>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    queries: vk::QueryPool,
}

impl Drop for Timed {
    fn drop(&mut self) {
        let d = &self.ctx.device;
        // SAFETY: every submission was waited for; destroying null handles is allowed.
        unsafe {
            d.destroy_query_pool(self.queries, None);
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
        }
    }
}

impl Timed {
    /// Records `work` between two timestamps (where there are timestamps).
    fn new(ctx: &Arc<Context>, work: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<Timed, VulkanError> {
        let d = &ctx.device;
        let mut t = Timed {
            ctx: Arc::clone(ctx),
            pool: vk::CommandPool::null(),
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            queries: vk::QueryPool::null(),
        };
        let timestamps = ctx.timestamp_bits > 0 && ctx.limits.timestamp_period > 0.0;
        // SAFETY: create infos outlive their calls; `Drop` destroys what was made.
        unsafe {
            t.pool = d
                .create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(ctx.family), None)
                .map_err(call("vkCreateCommandPool"))?;
            t.cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(t.pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .map_err(call("vkAllocateCommandBuffers"))?[0];
            t.fence = d.create_fence(&vk::FenceCreateInfo::default(), None).map_err(call("vkCreateFence"))?;
            if timestamps {
                let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(2);
                t.queries = d.create_query_pool(&info, None).map_err(call("vkCreateQueryPool"))?;
            }
            d.begin_command_buffer(t.cmd, &vk::CommandBufferBeginInfo::default())
                .map_err(call("vkBeginCommandBuffer"))?;
            if timestamps {
                d.cmd_reset_query_pool(t.cmd, t.queries, 0, 2);
                d.cmd_write_timestamp(t.cmd, vk::PipelineStageFlags::TOP_OF_PIPE, t.queries, 0);
            }
            work(d, t.cmd);
            if timestamps {
                d.cmd_write_timestamp(t.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, t.queries, 1);
            }
            d.end_command_buffer(t.cmd).map_err(call("vkEndCommandBuffer"))?;
        }
        Ok(t)
    }

    /// Submits once and waits: the time it took, in seconds.
    fn once(&self) -> Result<(f64, Clock), VulkanError> {
        let d = &self.ctx.device;
        let cmds = [self.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let start = std::time::Instant::now();
        {
            let queue = self.ctx.queue.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the command buffer is complete and idle (the last submission was waited
            // for); the queue is synchronised by its lock.
            unsafe { d.queue_submit(*queue, &submit, self.fence) }.map_err(call("vkQueueSubmit"))?;
        }
        // SAFETY: the fence was submitted above.
        unsafe {
            d.wait_for_fences(&[self.fence], true, u64::MAX).map_err(call("vkWaitForFences"))?;
            d.reset_fences(&[self.fence]).map_err(call("vkResetFences"))?;
        }
        let host = start.elapsed().as_secs_f64();
        if self.queries == vk::QueryPool::null() {
            return Ok((host, Clock::Host));
        }
        let mut ticks = [0u64; 2];
        // SAFETY: both queries were written by the finished submission.
        unsafe {
            d.get_query_pool_results(
                self.queries,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(call("vkGetQueryPoolResults"))?;
        let bits = self.ctx.timestamp_bits;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let elapsed = ticks[1].wrapping_sub(ticks[0]) & mask;
        Ok((elapsed as f64 * f64::from(self.ctx.limits.timestamp_period) * 1e-9, Clock::Timestamps))
    }

    /// One untimed submission, then the median of `runs` (at least 1).
    fn median(&self, runs: usize) -> Result<(f64, Clock), VulkanError> {
        self.once()?;
        let mut times = Vec::with_capacity(runs.max(1));
        let mut clock = Clock::Host;
        for _ in 0..runs.max(1) {
            let (t, c) = self.once()?;
            times.push(t);
            clock = c;
        }
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], clock))
    }
}

/// The device's copy rate: `vkCmdCopyBuffer` of `bytes` between two buffers of the memory
/// plans use; [`Rate::per_second`] counts the bytes read plus the bytes written.
pub fn copy_rate(device: &VulkanDevice, bytes: usize, runs: usize) -> Result<Rate, VulkanError> {
    let ctx = &device.ctx;
    let host = !device.stages();
    let src = Buffer::with_memory(ctx, bytes, host)?;
    let dst = Buffer::with_memory(ctx, bytes, host)?;
    // SAFETY: new buffers no submission uses (device-local ones have no mapped bytes: their
    // contents do not change a copy's speed).
    unsafe { src.bytes_mut().fill(1) };
    let size = src.size;
    let timed = Timed::new(ctx, |d, cmd| {
        let region = [vk::BufferCopy::default().size(size)];
        // SAFETY: both buffers hold `size` bytes and were made for transfers.
        unsafe { d.cmd_copy_buffer(cmd, src.buffer, dst.buffer, &region) };
    })?;
    let (t, clock) = timed.median(runs)?;
    drop(timed);
    validation_result(ctx).map_err(|m| VulkanError::Call { call: "copy floor", result: m })?;
    let work = 2.0 * size as f64;
    Ok(Rate { per_second: work / t, median_us: t * 1e6, work, clock, runs: runs.max(1) })
}

/// Workgroups of the FMA floor's dispatch, of [`super::spirv::LOCAL_SIZE`] invocations each.
pub const FMA_GROUPS: u32 = 4096;
/// Invocations of the FMA floor's dispatch.
pub const FMA_INVOCATIONS: u64 = FMA_GROUPS as u64 * super::LOCAL_SIZE as u64;
/// Independent FMA chains per invocation.
pub const FMA_CHAINS: usize = 12;

/// The device's f32 multiply-add rate (FLOPs per second, 2 per FMA): see the module docs.
pub fn fma_rate(device: &VulkanDevice, runs: usize) -> Result<Rate, VulkanError> {
    let ctx = &device.ctx;
    let words = fma_shader().map_err(|e| VulkanError::Call { call: "the FMA floor's shader", result: e })?;
    let pipe = Pipe::from_words(ctx, &words, 1)?;
    let invocations = FMA_INVOCATIONS;
    // Word 0: a, 1: b, 2: rounds (as f32), then one result per invocation.
    let buf = Buffer::new(ctx, (3 + invocations as usize) * 4)?;
    let d = &ctx.device;
    // SAFETY: plain object creation; destroyed below.
    let pool = unsafe {
        let sizes = [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(1)];
        d.create_descriptor_pool(&vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes), None)
    }
    .map_err(call("vkCreateDescriptorPool"))?;
    let result = (|| {
        let layouts = [pipe.set_layout];
        // SAFETY: a pool with room for the one set; the buffer outlives every submission.
        let set = unsafe {
            d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts),
            )
        }
        .map_err(call("vkAllocateDescriptorSets"))?[0];
        let info = [vk::DescriptorBufferInfo::default().buffer(buf.buffer).offset(0).range(vk::WHOLE_SIZE)];
        let write = [vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&info)];
        // SAFETY: the set is unused by any submission; `info` outlives the call.
        unsafe { d.update_descriptor_sets(&write, &[]) };
        // SAFETY: recording into a command buffer being begun; the pipeline and set outlive it.
        let timed = Timed::new(ctx, |d, cmd| unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipe.pipeline);
            d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipe.layout, 0, &[set], &[]);
            d.cmd_dispatch(cmd, FMA_GROUPS, 1, 1);
        })?;
        let set_rounds = |rounds: u32| {
            // SAFETY: no submission is in flight (each was waited for).
            let words = unsafe { buf.bytes_mut() };
            for (i, v) in [0.999_999f32, 1e-7, rounds as f32].iter().enumerate() {
                words[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
            }
        };
        // Rounds raised until one dispatch takes 20 ms (at most 2^20 rounds).
        let mut rounds = 16u32;
        loop {
            set_rounds(rounds);
            let (t, _) = timed.once()?;
            if t >= 0.02 || rounds >= 1 << 20 {
                break;
            }
            let scale = if t > 0.0 { (0.025 / t).ceil().clamp(2.0, 64.0) } else { 64.0 };
            rounds = (f64::from(rounds) * scale).min(f64::from(1u32 << 20)) as u32;
        }
        let (t, clock) = timed.median(runs)?;
        let work = invocations as f64 * FMA_CHAINS as f64 * 2.0 * f64::from(rounds);
        Ok(Rate { per_second: work / t, median_us: t * 1e6, work, clock, runs: runs.max(1) })
    })();
    // SAFETY: every submission was waited for.
    unsafe { d.destroy_descriptor_pool(pool, None) };
    let rate = result?;
    validation_result(ctx).map_err(|m| VulkanError::Call { call: "FMA floor", result: m })?;
    Ok(rate)
}

/// The FMA floor's compute shader (see the module docs): binding 0 holds `a`, `b` and the
/// rounds, then one result word per invocation.
pub fn fma_shader() -> Result<Vec<u32>, String> {
    let failed = |e: rspirv::dr::Error| e.to_string();
    let mut b = Builder::new();
    b.set_version(1, 3);
    b.capability(spirv::Capability::Shader);
    let glsl = b.ext_inst_import("GLSL.std.450");
    b.memory_model(spirv::AddressingModel::Logical, spirv::MemoryModel::GLSL450);
    let t_void = b.type_void();
    let t_bool = b.type_bool();
    let t_f32 = b.type_float(32);
    let t_u32 = b.type_int(32, 0);
    let uvec3 = b.type_vector(t_u32, 3);
    let in_ptr = b.type_pointer(None, spirv::StorageClass::Input, uvec3);
    let gid_var = b.variable(in_ptr, None, spirv::StorageClass::Input, None);
    b.decorate(gid_var, spirv::Decoration::BuiltIn, [Operand::BuiltIn(spirv::BuiltIn::GlobalInvocationId)]);
    let arr = b.type_runtime_array(t_f32);
    b.decorate(arr, spirv::Decoration::ArrayStride, [Operand::LiteralBit32(4)]);
    let st = b.type_struct([arr]);
    b.decorate(st, spirv::Decoration::Block, []);
    b.member_decorate(st, 0, spirv::Decoration::Offset, [Operand::LiteralBit32(0)]);
    let st_ptr = b.type_pointer(None, spirv::StorageClass::StorageBuffer, st);
    let buf = b.variable(st_ptr, None, spirv::StorageClass::StorageBuffer, None);
    b.decorate(buf, spirv::Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
    b.decorate(buf, spirv::Decoration::Binding, [Operand::LiteralBit32(0)]);
    let elem_ptr = b.type_pointer(None, spirv::StorageClass::StorageBuffer, t_f32);
    let f_ptr = b.type_pointer(None, spirv::StorageClass::Function, t_f32);
    let u_ptr = b.type_pointer(None, spirv::StorageClass::Function, t_u32);
    let c = |b: &mut Builder, v: u32| b.constant_bit32(t_u32, v);
    let fn_ty = b.type_function(t_void, []);
    let main = b.begin_function(t_void, None, spirv::FunctionControl::NONE, fn_ty).map_err(failed)?;
    b.begin_block(None).map_err(failed)?;
    let counter = b.variable(u_ptr, None, spirv::StorageClass::Function, None);
    let accs: Vec<_> = (0..FMA_CHAINS).map(|_| b.variable(f_ptr, None, spirv::StorageClass::Function, None)).collect();
    let zero = c(&mut b, 0);
    let load_word = |b: &mut Builder, i: u32| -> Result<u32, String> {
        let at = c(b, i);
        let p = b.access_chain(elem_ptr, None, buf, [zero, at]).map_err(failed)?;
        b.load(t_f32, None, p, None, []).map_err(failed)
    };
    let a = load_word(&mut b, 0)?;
    let bb = load_word(&mut b, 1)?;
    let rounds = load_word(&mut b, 2)?;
    let rounds = b.convert_f_to_u(t_u32, None, rounds).map_err(failed)?;
    let gid = b.load(uvec3, None, gid_var, None, []).map_err(failed)?;
    let id = b.composite_extract(t_u32, None, gid, [0]).map_err(failed)?;
    let idf = b.convert_u_to_f(t_f32, None, id).map_err(failed)?;
    for (k, &acc) in accs.iter().enumerate() {
        let kf = b.constant_bit32(t_f32, (1.0 + k as f32 * 1e-3).to_bits());
        let v = b.f_add(t_f32, None, idf, kf).map_err(failed)?;
        b.store(acc, v, None, []).map_err(failed)?;
    }
    b.store(counter, zero, None, []).map_err(failed)?;
    let (header, check, body, cont, merge) = (b.id(), b.id(), b.id(), b.id(), b.id());
    b.branch(header).map_err(failed)?;
    b.begin_block(Some(header)).map_err(failed)?;
    b.loop_merge(merge, cont, spirv::LoopControl::NONE, []).map_err(failed)?;
    b.branch(check).map_err(failed)?;
    b.begin_block(Some(check)).map_err(failed)?;
    let i = b.load(t_u32, None, counter, None, []).map_err(failed)?;
    let more = b.u_less_than(t_bool, None, i, rounds).map_err(failed)?;
    b.branch_conditional(more, body, merge, []).map_err(failed)?;
    b.begin_block(Some(body)).map_err(failed)?;
    for &acc in &accs {
        let x = b.load(t_f32, None, acc, None, []).map_err(failed)?;
        let fma = rspirv::spirv::GLOp::Fma as u32;
        let y = b
            .ext_inst(t_f32, None, glsl, fma, [Operand::IdRef(x), Operand::IdRef(a), Operand::IdRef(bb)])
            .map_err(failed)?;
        b.store(acc, y, None, []).map_err(failed)?;
    }
    b.branch(cont).map_err(failed)?;
    b.begin_block(Some(cont)).map_err(failed)?;
    let one = c(&mut b, 1);
    let next = b.i_add(t_u32, None, i, one).map_err(failed)?;
    b.store(counter, next, None, []).map_err(failed)?;
    b.branch(header).map_err(failed)?;
    b.begin_block(Some(merge)).map_err(failed)?;
    let mut sum = b.load(t_f32, None, accs[0], None, []).map_err(failed)?;
    for &acc in &accs[1..] {
        let x = b.load(t_f32, None, acc, None, []).map_err(failed)?;
        sum = b.f_add(t_f32, None, sum, x).map_err(failed)?;
    }
    let three = c(&mut b, 3);
    let at = b.i_add(t_u32, None, id, three).map_err(failed)?;
    let p = b.access_chain(elem_ptr, None, buf, [zero, at]).map_err(failed)?;
    b.store(p, sum, None, []).map_err(failed)?;
    b.ret().map_err(failed)?;
    b.end_function().map_err(failed)?;
    b.entry_point(spirv::ExecutionModel::GLCompute, main, "main", [gid_var]);
    b.execution_mode(main, spirv::ExecutionMode::LocalSize, [super::LOCAL_SIZE, 1, 1]);
    Ok(b.module().assemble())
}
