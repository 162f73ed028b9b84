//! Where a plan's buffers live on the device: which buffers a kernel binding too many reads
//! from the run's arena ([`place`]), constants filled on the host or uploaded through a
//! staging copy ([`filled`]), and a run state's memory ([`DeviceRun`]: each buffer's place,
//! the staging copies and the copies between them).

use std::sync::Arc;

use ash::vk;
use cranelift_entity::EntityRef;

use super::device::{self, Buffer, Context, VulkanError};
use super::lens_bytes;
use super::spirv::{self, Shader};
use crate::backend::BackendError;
use crate::kernel::{BufferId, BufferKind, Program};

/// The shaders of `written` (each kernel with its step), and which buffers live in the run's
/// arena (`spirv/bindings.rs`). A kernel binding more buffers than the device allows is
/// lowered again with its constants pooled; if that is still too many, every non-constant
/// buffer it touches moves to the arena, for every kernel (a buffer is where each kernel
/// touching it looks for it), and the kernels are lowered again.
pub(super) fn place(
    ctx: &Context,
    program: &Program,
    written: &[(usize, crate::kernel::Kernel)],
) -> Result<(Vec<Shader>, Vec<bool>), BackendError> {
    // Its buffers, the size table and the status word, each a storage buffer binding.
    let l = &ctx.limits;
    let most = l.max_per_stage_descriptor_storage_buffers.min(l.max_descriptor_set_storage_buffers);
    let most = most.min(l.max_per_stage_resources) as usize;
    let mut place = spirv::Placement { pool: false, arena: vec![false; program.buffers.len()] };
    'again: loop {
        let mut shaders = Vec::with_capacity(written.len());
        for (step, k) in written {
            let mut lower = |pool| {
                place.pool = pool;
                spirv::lower(k, program, ctx.float64, &place)
                    .map_err(|why| BackendError::Unsupported(format!("step {step}, kernel {}: {why}", k.name)))
            };
            let mut shader = lower(false)?;
            if shader.bindings.len() + 2 > most {
                shader = lower(true)?;
            }
            if shader.bindings.len() + 2 <= most {
                shaders.push(shader);
                continue;
            }
            let mut moved = false;
            k.for_each_buffer(&mut |b| {
                if !matches!(program.buffers[b].kind, BufferKind::Const(_)) && !place.arena[b.index()] {
                    place.arena[b.index()] = true;
                    moved = true;
                }
            });
            if moved {
                continue 'again;
            }
            return Err(BackendError::Unsupported(format!(
                "step {step}, kernel {}: it reads and writes {} buffers, and a shader on this device binds at most {most} (its size table and status word included), even with its constants pooled and its other buffers in the arena",
                k.name,
                shader.buffers.len()
            )));
        }
        return Ok((shaders, place.arena));
    }
}

/// A buffer of `len` bytes holding what `fill` writes: host-visible and filled in place, or
/// with `staging` device-local, returned with the filled host-visible copy to upload it from.
pub(super) fn filled(
    ctx: &Arc<Context>,
    len: usize,
    staging: bool,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(Buffer, Option<Buffer>), VulkanError> {
    let host = Buffer::new(ctx, len)?;
    // SAFETY: a new buffer no submission uses yet.
    fill(unsafe { host.bytes_mut() });
    if !staging {
        return Ok((host, None));
    }
    Ok((Buffer::with_memory(ctx, len, false)?, Some(host)))
}

/// A run state's device objects for one set of sizes.
pub(super) struct DeviceRun {
    pub(super) ctx: Arc<Context>,
    /// The symbols' values they were made for (every buffer length and size table follows
    /// from them).
    pub(super) symbols: Vec<Option<u64>>,
    /// Each buffer's own device buffer (not for constants or arena members).
    pub(super) bufs: Vec<Option<Buffer>>,
    /// The arena, and each member's byte offset there.
    pub(super) arena: Option<Buffer>,
    pub(super) arena_at: Vec<Option<u64>>,
    /// With staging, the host-visible copies of inputs, outputs and `dim_values` results.
    pub(super) staging: Vec<Option<Buffer>>,
    pub(super) tables: Vec<Buffer>,
    pub(super) status: Vec<Buffer>,
    pub(super) pool: vk::DescriptorPool,
    pub(super) commands: vk::CommandPool,
    pub(super) cmd: vk::CommandBuffer,
    pub(super) fence: vk::Fence,
}

// SAFETY: handles and buffers used by one run at a time (the run state is `&mut`).
unsafe impl Send for DeviceRun {}

impl Drop for DeviceRun {
    fn drop(&mut self) {
        let d = &self.ctx.device;
        // SAFETY: every submission was waited for before `run` returned.
        unsafe {
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.commands, None);
            d.destroy_descriptor_pool(self.pool, None);
        }
    }
}

impl DeviceRun {
    /// Where the host reads and writes buffer `b` (not a constant): its staging copy, or
    /// where it is.
    pub(super) fn host(&self, b: BufferId) -> Option<(&Buffer, usize)> {
        match self.staging.get(b.index()) {
            Some(Some(s)) => Some((s, 0)),
            _ => self.memory(b),
        }
    }

    /// The copies between the staging copies and the buffers: `into` the device, of the
    /// buffers the host writes (`host_written`, by buffer: inputs and `dim_values` results),
    /// before the kernels; else out of it, of the outputs (`output`, by buffer) the device
    /// computes, after them.
    pub(super) fn transfers(
        &self,
        p: &Program,
        lens: &[usize],
        into: bool,
        host_written: &[bool],
        output: &[bool],
    ) -> Vec<device::Transfer<'_>> {
        let mut out = Vec::new();
        for (b, buf) in p.buffers.iter() {
            let (Some(Some(host)), Some((dev, at))) = (self.staging.get(b.index()), self.memory(b)) else { continue };
            let (written, returned) = (host_written[b.index()], output[b.index()]);
            if into != written || !into && !returned {
                continue;
            }
            let size = lens_bytes(lens[b.index()], buf.dtype) as u64;
            let (host_end, dev_end) = ((host, 0u64), (dev, at as u64));
            let ((src, src_offset), (dst, dst_offset)) = if into { (host_end, dev_end) } else { (dev_end, host_end) };
            out.push(device::Transfer { src, src_offset, dst, dst_offset, size });
        }
        out
    }

    /// Where buffer `b` (not a constant) is: its device buffer and byte offset there.
    pub(super) fn memory(&self, b: BufferId) -> Option<(&Buffer, usize)> {
        match (self.arena_at.get(b.index()), &self.arena) {
            (Some(Some(at)), Some(arena)) => Some((arena, *at as usize)),
            _ => self.bufs.get(b.index())?.as_ref().map(|buf| (buf, 0)),
        }
    }
}
