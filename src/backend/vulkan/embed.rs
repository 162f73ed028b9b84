//! A program that owns its Vulkan device (a game engine, an editor) hands it to ladder.
//!
//! [`VulkanDevice::from_external`] takes the embedder's [`ExternalDevice`]: the loader
//! (`ash::Entry`), instance, physical device, logical device, the features it was created with,
//! and one queue with its family. It checks what ladder's shaders need (Vulkan 1.2, `shaderInt64`
//! supported and enabled, `shaderSignedZeroInfNanPreserveFloat32`, compute on that queue's
//! family) and returns [`VulkanError::Unsuitable`] naming each thing missing. Kernels in f64 run
//! where `shaderFloat64` was enabled too (and `shaderSignedZeroInfNanPreserveFloat64` holds),
//! and are declined with the reason otherwise. A plan compiled
//! with `CompileOptions::vulkan_on(device)` then makes its pipelines, buffers, descriptor and
//! command pools and fences on that device and submits to that queue.
//!
//! Ownership: ladder destroys only the objects it created (pipelines, buffers, memory, pools,
//! fences), when the plan that made them is dropped; never the instance, the device or the
//! queue. The embedder keeps those alive until every plan (and every `Session`) compiled on
//! them has been dropped, then destroys them itself.
//!
//! Queue synchronisation: `vkQueueSubmit` needs the queue externally synchronised. Ladder
//! submits from `Plan::run` (one submission per run, then a wait on its own fence) while
//! holding the lock that [`VulkanDevice::lock_queue`] returns; an embedder that submits to the
//! same queue from other threads while plans run takes that lock around its own submissions
//! (or presents), or otherwise guarantees that none of them overlaps a `Plan::run`.
//!
//! Validation: the embedder chooses whether its instance has the validation layer, and its
//! messages go to the embedder's own messenger; ladder installs none on a device it did not
//! create, so `LADDER_VULKAN_VALIDATION` applies to ladder's own device only.

use std::sync::{Arc, MutexGuard};

use ash::vk;

use super::device::{self, context, Context, VulkanError};

/// An embedder's Vulkan objects, for [`VulkanDevice::from_external`]. The ash wrappers are
/// clones of the embedder's (they hold function tables and the handle; cloning one creates
/// nothing), so the embedder keeps its own.
#[derive(Clone)]
pub struct ExternalDevice {
    /// The Vulkan loader the instance came from.
    pub entry: ash::Entry,
    /// The instance, created with an API version of at least 1.2.
    pub instance: ash::Instance,
    /// The physical device `device` was created on.
    pub physical_device: vk::PhysicalDevice,
    /// The logical device.
    pub device: ash::Device,
    /// The features the device was created with (its `VkDeviceCreateInfo::pEnabledFeatures`):
    /// Vulkan cannot be asked which were enabled, and ladder's shaders need `shaderInt64`
    /// (and use `shaderFloat64` where it is enabled).
    pub enabled_features: vk::PhysicalDeviceFeatures,
    /// The family of `queue`, which must support compute.
    pub queue_family_index: u32,
    /// The queue ladder submits to (see the module docs on sharing it).
    pub queue: vk::Queue,
}

impl std::fmt::Debug for ExternalDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalDevice")
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("queue_family_index", &self.queue_family_index)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// A Vulkan device plans run on: ladder's own ([`VulkanDevice::process`]) or an embedder's
/// ([`VulkanDevice::from_external`]). Cheap to clone; every plan compiled on it shares it.
#[derive(Clone)]
pub struct VulkanDevice {
    pub(super) ctx: Arc<Context>,
    /// Whether plans keep device-local memory and stage inputs and outputs (`None`: the
    /// device's default, [`VulkanDevice::stages`]).
    staging: Option<bool>,
    /// Whether plans run the library shaders (`None`: the device's default,
    /// [`VulkanDevice::library_shaders`]).
    library: Option<bool>,
    /// Whether the library shaders reduce on subgroup operations where the device has them
    /// (`None`: the default, [`VulkanDevice::subgroups`]).
    subgroups: Option<bool>,
}

impl VulkanDevice {
    /// The embedder's device, checked against what ladder needs (see the module docs);
    /// [`VulkanError::Unsuitable`] names every requirement it fails.
    ///
    /// # Safety
    /// The handles are valid and belong together: `physical_device` is a device of `instance`,
    /// `device` was created on it from `enabled_features` with a queue of
    /// `queue_family_index`, and `queue` is that queue. They outlive every plan compiled on
    /// the returned device, and submissions to `queue` by the embedder are synchronised with
    /// ladder's as the module docs say.
    pub unsafe fn from_external(ext: ExternalDevice) -> Result<VulkanDevice, VulkanError> {
        let p = ext.physical_device;
        let mut missing = device::missing(&ext.instance, p, Some(&ext.enabled_features), Some(ext.queue_family_index));
        if ext.queue == vk::Queue::null() {
            missing.push("a queue (the handle given is null)".into());
        }
        if !missing.is_empty() {
            // SAFETY: a plain query on a live physical device (the caller's promise).
            let props = unsafe { ext.instance.get_physical_device_properties(p) };
            let device = props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            return Err(VulkanError::Unsuitable { device, missing });
        }
        // SAFETY: the caller's promise; `owned: false`, so nothing of theirs is destroyed.
        let ctx = unsafe {
            Context::from_parts(
                ext.entry,
                ext.instance,
                None,
                p,
                ext.device,
                ext.queue_family_index,
                ext.queue,
                false,
                Some(&ext.enabled_features),
            )
        };
        Ok(VulkanDevice { ctx: Arc::new(ctx), staging: None, library: None, subgroups: None })
    }

    /// Ladder's own device for this process (made on first use, as
    /// `CompileOptions::vulkan()` plans use it).
    pub fn process() -> Result<VulkanDevice, VulkanError> {
        context().map(|ctx| VulkanDevice { ctx, staging: None, library: None, subgroups: None })
    }

    /// The device's name, as its driver reports it.
    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// Whether shaders on it compute in f64 (`shaderFloat64` enabled, and NaN, infinities and
    /// signed zeros kept in f64): kernels in f64 run there and are declined elsewhere, and f32
    /// `pow` with an exponent other than a small integer needs it.
    pub fn computes_f64(&self) -> bool {
        self.ctx.float64
    }

    /// The same device, its plans keeping their buffers in device-local memory and copying
    /// inputs in and outputs out through host-visible staging buffers (`true`), or keeping
    /// every buffer host-visible, read and written in place (`false`).
    pub fn with_staging(mut self, on: bool) -> VulkanDevice {
        self.staging = Some(on);
        self
    }

    /// Whether plans compiled on it stage their inputs and outputs: as
    /// [`VulkanDevice::with_staging`] set, else `LADDER_VULKAN_STAGING=1` or `0` where set, else
    /// on a discrete GPU only (an integrated GPU or a CPU device shares the host's memory).
    pub fn stages(&self) -> bool {
        self.staging.unwrap_or_else(|| self.ctx.stages_by_default())
    }

    /// The same device, its plans running a step through a library shader where one computes
    /// it (`true`: the tiled f32 GEMM for matmuls and convolutions, the row shader for the row
    /// ops, which its plans then recover), or every step as generated kernels (`false`).
    pub fn with_library_shaders(mut self, on: bool) -> VulkanDevice {
        self.library = Some(on);
        self
    }

    /// Whether plans compiled on it run the library shaders: as
    /// [`VulkanDevice::with_library_shaders`] set, else `LADDER_VULKAN_LIBRARY=1` or `0` where
    /// set, else on a GPU only. The library shaders stage tiles and reductions in workgroup
    /// memory, which a GPU keeps on chip; a CPU device (lavapipe) runs the generated kernels
    /// faster.
    pub fn library_shaders(&self) -> bool {
        self.library.unwrap_or_else(|| self.ctx.library_by_default())
    }

    /// The same device, its plans' library shaders reducing across a workgroup on subgroup
    /// operations where the device has them (`true`), or in workgroup memory by a tree
    /// (`false`).
    pub fn with_subgroups(mut self, on: bool) -> VulkanDevice {
        self.subgroups = Some(on);
        self
    }

    /// Whether the library shaders of plans compiled on it reduce on subgroup operations: where
    /// the device's compute shaders have the basic and arithmetic ones
    /// ([`VulkanDevice::subgroup_size`]), unless [`VulkanDevice::with_subgroups`] turned them
    /// off or, without it, `LADDER_VULKAN_SUBGROUPS=0` is set.
    pub fn subgroups(&self) -> bool {
        self.ctx.subgroup.is_some() && self.subgroups.unwrap_or_else(|| self.ctx.subgroups_by_default())
    }

    /// The device's subgroup size, where its compute shaders have the basic and arithmetic
    /// subgroup operations.
    pub fn subgroup_size(&self) -> Option<u32> {
        self.ctx.subgroup
    }

    /// Whether an embedder made it ([`VulkanDevice::from_external`]).
    pub fn is_external(&self) -> bool {
        !self.ctx.owned()
    }

    /// The queue's lock: ladder holds it while it submits from `Plan::run`; an embedder that
    /// submits to the same queue on other threads while plans run holds it around those
    /// submissions. Keep it only for the submission: a run on another thread waits for it.
    pub fn lock_queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.ctx.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanDevice")
            .field("name", &self.ctx.name)
            .field("external", &self.is_external())
            .finish_non_exhaustive()
    }
}
