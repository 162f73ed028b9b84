//! The Vulkan device: instance, physical device, one compute queue, host-visible buffers.
//!
//! One [`Context`] per process, made on first use ([`context`]) and shared by every plan:
//! ash loads `libvulkan.so.1` at run time, so a machine without Vulkan gets a typed error
//! ([`VulkanError`]) rather than a failure to start. The physical device is the first
//! discrete GPU, else integrated, virtual, then CPU (Mesa's lavapipe); `LADDER_VULKAN_DEVICE`
//! picks one by index in the driver's order instead. With `LADDER_VULKAN_VALIDATION=1` the
//! Khronos validation layer is enabled (an error where it is not installed) and every
//! message it reports at warning level or above fails the plan being built or the run
//! being made (or, outside the backend, is there for [`take_validation_messages`]).
//!
//! An embedder that owns its Vulkan device hands it over instead (`embed.rs`,
//! [`super::VulkanDevice::from_external`]): the same [`Context`], which then destroys nothing
//! it did not create and installs no validation messenger of its own.
//!
//! Buffers are host-visible and coherent, mapped for their whole life: on lavapipe and on
//! integrated GPUs that is the device's own memory, so inputs and outputs move by one copy.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use ash::vk;

/// Why there is no Vulkan device to run on, or a Vulkan call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VulkanError {
    /// The Vulkan loader (`libvulkan.so.1`) could not be loaded.
    #[error("no Vulkan loader: {0}")]
    NoLoader(String),
    /// The loader found no device that can run ladder's shaders.
    #[error("no usable Vulkan device: {0}")]
    NoDevice(String),
    /// A Vulkan call failed.
    #[error("{call}: {result}")]
    Call {
        /// The Vulkan function.
        call: &'static str,
        /// What it returned.
        result: String,
    },
    /// An embedder's device lacks what ladder's shaders need.
    #[error("the Vulkan device {device} lacks what ladder needs: {}", missing.join("; "))]
    Unsuitable {
        /// The device's name.
        device: String,
        /// Each requirement it fails, with what it has instead.
        missing: Vec<String>,
    },
}

pub(super) fn call(call: &'static str) -> impl Fn(vk::Result) -> VulkanError {
    move |r| VulkanError::Call { call, result: format!("{r:?}") }
}

/// A Vulkan device ladder runs on: the process's own, or an embedder's.
pub struct Context {
    _entry: ash::Entry,
    instance: ash::Instance,
    /// Whether ladder created the instance and device (and destroys them when dropped); an
    /// embedder's are never destroyed here.
    owned: bool,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub(super) device: ash::Device,
    /// The compute queue; submissions take the lock.
    pub(super) queue: Mutex<vk::Queue>,
    pub(super) family: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    pub(super) limits: vk::PhysicalDeviceLimits,
    /// Valid bits of the queue family's timestamps (0: no timestamp queries on it).
    pub(super) timestamp_bits: u32,
    /// The device's name and driver, for reports.
    pub name: String,
    /// Whether shaders may compute in f64: `shaderFloat64` enabled on the device, with NaN,
    /// infinities and signed zeros kept through f64 arithmetic.
    pub(super) float64: bool,
    /// Whether it is a discrete GPU (its own memory, behind a bus): plans there keep their
    /// buffers in device-local memory and copy inputs and outputs through staging buffers.
    pub(super) discrete: bool,
    /// Whether it is a CPU device (lavapipe, SwiftShader): plans there run the generated
    /// kernels, not the library shaders, by default.
    pub(super) cpu: bool,
    /// The device's subgroup size, where its compute shaders have the basic and arithmetic
    /// subgroup operations (what the library shaders' subgroup modules use).
    pub(super) subgroup: Option<u32>,
}

// SAFETY: the handles are plain identifiers; Vulkan requires external synchronization only
// for the queue (behind a mutex) and for objects this module never shares between threads
// while they are in use (command pools and buffers belong to one run state at a time).
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.owned {
            // The embedder's instance and device: theirs to destroy. Every object ladder made
            // on them holds an `Arc<Context>` and was destroyed before this.
            return;
        }
        // SAFETY: every object made from the device holds an `Arc<Context>`, so none is left.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            if let Some((d, m)) = self.debug.take() {
                d.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The validation layer's messages since the last call (always empty without
/// `LADDER_VULKAN_VALIDATION=1`).
pub fn take_validation_messages() -> Vec<String> {
    std::mem::take(&mut *MESSAGES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// `Err` with the validation layer's messages since the last call, if it reported any, where
/// `ctx` has ladder's own messenger: the backend turns them into errors of the plan or run that
/// was being made. An embedder's device has none (validation is the embedder's choice, and its
/// messages go to the embedder's messenger).
pub(super) fn validation_result(ctx: &Context) -> Result<(), String> {
    if ctx.debug.is_none() {
        return Ok(());
    }
    let messages = take_validation_messages();
    if messages.is_empty() {
        Ok(())
    } else {
        Err(format!("the Vulkan validation layer reported: {}", messages.join("; ")))
    }
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data whose message is a C string.
    let text = unsafe { data.as_ref() }
        .filter(|d| !d.p_message.is_null())
        .map(|d| unsafe { CStr::from_ptr(d.p_message) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    let level = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) { "error" } else { "warning" };
    MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{level}: {text}"));
    vk::FALSE
}

/// The process's device, made on first use; the same error on every call where there is none.
pub fn context() -> Result<Arc<Context>, VulkanError> {
    static CONTEXT: OnceLock<Result<Arc<Context>, VulkanError>> = OnceLock::new();
    CONTEXT.get_or_init(|| Context::new().map(Arc::new)).clone()
}

impl Context {
    fn new() -> Result<Context, VulkanError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisation, as any Vulkan
        // program does.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| VulkanError::NoLoader(e.to_string()))?;
        let validation = std::env::var("LADDER_VULKAN_VALIDATION").is_ok_and(|v| v == "1");
        let layer = c"VK_LAYER_KHRONOS_validation";
        let mut layers = Vec::new();
        let mut extensions = Vec::new();
        if validation {
            // SAFETY: a plain query.
            let have = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(call("vkEnumerateInstanceLayerProperties"))?;
            if !have.iter().any(|l| l.layer_name_as_c_str() == Ok(layer)) {
                return Err(VulkanError::NoDevice(
                    "LADDER_VULKAN_VALIDATION=1 but the Khronos validation layer is not installed".into(),
                ));
            }
            layers.push(layer.as_ptr());
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"ladder")
            .engine_name(c"ladder")
            .api_version(vk::make_api_version(0, 1, 2, 0));
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        // SAFETY: the create info and everything it points to outlive the call.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| VulkanError::NoDevice(format!("no Vulkan 1.2 driver answered (vkCreateInstance: {e:?})")))?;
        let debug = if validation {
            let d = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(on_message));
            // SAFETY: the callback is a plain function that lives for the program.
            let m = unsafe { d.create_debug_utils_messenger(&info, None) }
                .map_err(call("vkCreateDebugUtilsMessengerEXT"))?;
            Some((d, m))
        } else {
            None
        };
        // From here on a failure must destroy the instance: build the rest in a closure.
        let rest = || -> Result<(ash::Device, vk::Queue, u32, vk::PhysicalDevice), VulkanError> {
            // SAFETY: plain queries on a live instance.
            let physical =
                unsafe { instance.enumerate_physical_devices() }.map_err(call("vkEnumeratePhysicalDevices"))?;
            let candidates: Vec<(usize, vk::PhysicalDevice, u32)> = physical
                .iter()
                .enumerate()
                .filter_map(|(i, &p)| {
                    let family = compute_family(&instance, p)?;
                    missing(&instance, p, None, None).is_empty().then_some((i, p, family))
                })
                .collect();
            let rank = |p: vk::PhysicalDevice| match unsafe { instance.get_physical_device_properties(p) }.device_type {
                vk::PhysicalDeviceType::DISCRETE_GPU => 0,
                vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
                vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
                vk::PhysicalDeviceType::CPU => 3,
                _ => 4,
            };
            let chosen = match std::env::var("LADDER_VULKAN_DEVICE").ok().and_then(|v| v.parse::<usize>().ok()) {
                Some(want) => candidates.iter().find(|(i, _, _)| *i == want).copied().ok_or_else(|| {
                    VulkanError::NoDevice(format!(
                        "LADDER_VULKAN_DEVICE={want}: no such device with Vulkan 1.2, a compute queue, 64-bit integers and NaN-preserving f32 ({} devices)",
                        physical.len()
                    ))
                })?,
                None => candidates.iter().min_by_key(|(_, p, _)| rank(*p)).copied().ok_or_else(|| {
                    VulkanError::NoDevice(format!(
                        "none of {} devices has Vulkan 1.2, a compute queue, 64-bit integers and NaN-preserving f32 in shaders",
                        physical.len()
                    ))
                })?,
            };
            let (_, p, family) = chosen;
            let priorities = [1.0f32];
            let queues =
                [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
            // f64 where the device has it (optional in Vulkan; kernels in f64 are declined
            // without it).
            let supported = unsafe { instance.get_physical_device_features(p) };
            let features = vk::PhysicalDeviceFeatures::default()
                .shader_int64(true)
                .shader_float64(supported.shader_float64 == vk::TRUE);
            let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_features(&features);
            // SAFETY: the create info outlives the call; the device is destroyed in `Drop`.
            let device = unsafe { instance.create_device(p, &info, None) }.map_err(call("vkCreateDevice"))?;
            let queue = unsafe { device.get_device_queue(family, 0) };
            Ok((device, queue, family, p))
        };
        let (device, queue, family, physical) = match rest() {
            Ok(x) => x,
            Err(e) => {
                // SAFETY: nothing else was made from the instance.
                unsafe {
                    if let Some((d, m)) = &debug {
                        d.destroy_debug_utils_messenger(*m, None);
                    }
                    instance.destroy_instance(None);
                }
                return Err(e);
            }
        };
        // SAFETY: `physical` is a device of `instance`; `device` was made on it with `family`.
        Ok(unsafe { Context::from_parts(entry, instance, debug, physical, device, family, queue, true, None) })
    }

    /// A context over objects made elsewhere (`owned`: by ladder, which destroys them on drop).
    ///
    /// # Safety
    /// `physical` is a device of `instance`, `device` was created on it with a queue of `family`,
    /// and `queue` is that queue. `enabled`: the features the device was created with, where
    /// someone else created it (ladder's own enables `shaderFloat64` where it is supported).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn from_parts(
        entry: ash::Entry,
        instance: ash::Instance,
        debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        family: u32,
        queue: vk::Queue,
        owned: bool,
        enabled: Option<&vk::PhysicalDeviceFeatures>,
    ) -> Context {
        // SAFETY: plain queries on a live physical device (the caller's promise).
        let (props, memory, families, supported) = unsafe {
            (
                instance.get_physical_device_properties(physical),
                instance.get_physical_device_memory_properties(physical),
                instance.get_physical_device_queue_family_properties(physical),
                instance.get_physical_device_features(physical),
            )
        };
        let mut float = vk::PhysicalDeviceFloatControlsProperties::default();
        let mut groups = vk::PhysicalDeviceSubgroupProperties::default();
        if props.api_version >= vk::make_api_version(0, 1, 2, 0) {
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut float).push_next(&mut groups);
            // SAFETY: a Vulkan 1.2 device answers the 1.1 query.
            unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
        }
        let needed = vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC;
        let subgroup = (groups.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
            && groups.supported_operations.contains(needed)
            && groups.subgroup_size > 0)
            .then_some(groups.subgroup_size);
        let float64 = enabled.unwrap_or(&supported).shader_float64 == vk::TRUE
            && supported.shader_float64 == vk::TRUE
            && float.shader_signed_zero_inf_nan_preserve_float64 == vk::TRUE;
        let timestamp_bits = families.get(family as usize).map_or(0, |f| f.timestamp_valid_bits);
        let name = props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        Context {
            _entry: entry,
            instance,
            owned,
            debug,
            device,
            queue: Mutex::new(queue),
            family,
            memory,
            limits: props.limits,
            timestamp_bits,
            name,
            float64,
            discrete: props.device_type == vk::PhysicalDeviceType::DISCRETE_GPU,
            cpu: props.device_type == vk::PhysicalDeviceType::CPU,
            subgroup,
        }
    }

    /// Whether ladder created the instance and device (not an embedder).
    pub(super) fn owned(&self) -> bool {
        self.owned
    }

    /// A memory type among `bits` for a buffer: host-visible and coherent where `host`, else
    /// device-local (any type of `bits` where none is).
    fn memory_type(&self, bits: u32, host: bool) -> Option<u32> {
        let types = (0..self.memory.memory_type_count).filter(|&i| bits & (1 << i) != 0);
        let flags = |i: u32| self.memory.memory_types[i as usize].property_flags;
        if host {
            let want = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            return types.clone().find(|&i| flags(i).contains(want));
        }
        let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        types.clone().find(|&i| flags(i).contains(local)).or(types.clone().next())
    }

    /// Whether plans keep device-local memory and stage their inputs and outputs by default:
    /// `LADDER_VULKAN_STAGING=1` or `0` where set, else on a discrete GPU.
    pub(super) fn stages_by_default(&self) -> bool {
        match std::env::var("LADDER_VULKAN_STAGING").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => self.discrete,
        }
    }

    /// Whether plans run the library shaders (`shaders.rs`) where they have one for a step:
    /// `LADDER_VULKAN_LIBRARY=1` or `0` where set, else on every device but a CPU one.
    pub(super) fn library_by_default(&self) -> bool {
        match std::env::var("LADDER_VULKAN_LIBRARY").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => !self.cpu,
        }
    }

    /// Whether the library shaders reduce on subgroup operations where the device has them,
    /// unless told otherwise: not where `LADDER_VULKAN_SUBGROUPS=0` is set.
    pub(super) fn subgroups_by_default(&self) -> bool {
        std::env::var("LADDER_VULKAN_SUBGROUPS").as_deref() != Ok("0")
    }
}

/// The first queue family of `p` with compute.
pub(super) fn compute_family(instance: &ash::Instance, p: vk::PhysicalDevice) -> Option<u32> {
    // SAFETY: a plain query on a device of `instance`.
    let families = unsafe { instance.get_physical_device_queue_family_properties(p) };
    families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)).map(|f| f as u32)
}

/// What `p` lacks of ladder's needs, each with what it has instead (empty: nothing): Vulkan
/// 1.2 (float controls in the core), 64-bit integers in shaders (supported, and with
/// `enabled`, the features a device was created with, enabled), NaN, infinities and signed
/// zeros kept through f32 arithmetic, and with `family`, compute on that queue family.
pub(super) fn missing(
    instance: &ash::Instance,
    p: vk::PhysicalDevice,
    enabled: Option<&vk::PhysicalDeviceFeatures>,
    family: Option<u32>,
) -> Vec<String> {
    let mut out = Vec::new();
    // SAFETY: plain queries on a device of `instance`.
    let (props, features, families) = unsafe {
        (
            instance.get_physical_device_properties(p),
            instance.get_physical_device_features(p),
            instance.get_physical_device_queue_family_properties(p),
        )
    };
    let v = props.api_version;
    let v12 = v >= vk::make_api_version(0, 1, 2, 0);
    if !v12 {
        out.push(format!(
            "Vulkan 1.2 (it reports {}.{}.{})",
            vk::api_version_major(v),
            vk::api_version_minor(v),
            vk::api_version_patch(v)
        ));
    }
    if features.shader_int64 != vk::TRUE {
        out.push("the shaderInt64 feature (not supported)".into());
    } else if enabled.is_some_and(|f| f.shader_int64 != vk::TRUE) {
        out.push("the shaderInt64 feature (supported, but not enabled when the device was created)".into());
    }
    let mut float = vk::PhysicalDeviceFloatControlsProperties::default();
    if v12 {
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut float);
        // SAFETY: a Vulkan 1.2 device answers the 1.1 query.
        unsafe { instance.get_physical_device_properties2(p, &mut props2) };
    }
    if float.shader_signed_zero_inf_nan_preserve_float32 != vk::TRUE {
        out.push("shaderSignedZeroInfNanPreserveFloat32 (NaN, infinities and signed zeros kept in f32)".into());
    }
    if let Some(f) = family {
        match families.get(f as usize) {
            None => out.push(format!("a compute queue family (family {f} does not exist: it has {})", families.len())),
            Some(q) if !q.queue_flags.contains(vk::QueueFlags::COMPUTE) => out.push(format!(
                "a compute queue family (family {f} has no compute: flags {:#x})",
                q.queue_flags.as_raw()
            )),
            Some(_) => {}
        }
    }
    out
}

/// A copy between buffers on the device: `size` bytes from `src` at `src_offset` to `dst` at
/// `dst_offset`.
pub(super) struct Transfer<'a> {
    pub src: &'a Buffer,
    pub src_offset: u64,
    pub dst: &'a Buffer,
    pub dst_offset: u64,
    pub size: u64,
}

/// Records `copies` into `cmd` (empty ones skipped).
///
/// # Safety
/// `cmd` is recording; the buffers outlive its execution.
pub(super) unsafe fn record_copies(ctx: &Context, cmd: vk::CommandBuffer, copies: &[Transfer]) {
    for c in copies.iter().filter(|c| c.size > 0) {
        let region = [vk::BufferCopy { src_offset: c.src_offset, dst_offset: c.dst_offset, size: c.size }];
        // SAFETY: the caller's promise; the regions lie within both buffers (their makers').
        unsafe { ctx.device.cmd_copy_buffer(cmd, c.src.buffer, c.dst.buffer, &region) };
    }
}

/// A barrier in `cmd` making the writes of stage `from` (access `src`) visible to stage `to`
/// (access `dst`).
///
/// # Safety
/// `cmd` is recording.
pub(super) unsafe fn record_barrier(
    ctx: &Context,
    cmd: vk::CommandBuffer,
    (from, src): (vk::PipelineStageFlags, vk::AccessFlags),
    (to, dst): (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default().src_access_mask(src).dst_access_mask(dst)];
    // SAFETY: the caller's promise.
    unsafe { ctx.device.cmd_pipeline_barrier(cmd, from, to, vk::DependencyFlags::empty(), &barrier, &[], &[]) };
}

/// Runs `copies` on the device and waits for them, their results then visible to compute
/// shaders of later submissions: constants uploaded through staging buffers.
pub(super) fn copy_and_wait(ctx: &Context, copies: &[Transfer]) -> Result<(), VulkanError> {
    if copies.iter().all(|c| c.size == 0) {
        return Ok(());
    }
    let d = &ctx.device;
    let info = vk::CommandPoolCreateInfo::default()
        .queue_family_index(ctx.family)
        .flags(vk::CommandPoolCreateFlags::TRANSIENT);
    // SAFETY: valid create infos; the pool and fence are destroyed below whatever happens, after
    // the wait (or when nothing was submitted).
    unsafe {
        let pool = d.create_command_pool(&info, None).map_err(call("vkCreateCommandPool"))?;
        let fence = match d.create_fence(&vk::FenceCreateInfo::default(), None) {
            Ok(f) => f,
            Err(e) => {
                d.destroy_command_pool(pool, None);
                return Err(call("vkCreateFence")(e));
            }
        };
        let run = || -> Result<(), VulkanError> {
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let cmd = d.allocate_command_buffers(&alloc).map_err(call("vkAllocateCommandBuffers"))?[0];
            let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            d.begin_command_buffer(cmd, &begin).map_err(call("vkBeginCommandBuffer"))?;
            record_copies(ctx, cmd, copies);
            record_barrier(
                ctx,
                cmd,
                (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE),
                (vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::SHADER_READ),
            );
            d.end_command_buffer(cmd).map_err(call("vkEndCommandBuffer"))?;
            let cmds = [cmd];
            let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
            {
                let queue = ctx.queue.lock().unwrap_or_else(|e| e.into_inner());
                d.queue_submit(*queue, &submit, fence).map_err(call("vkQueueSubmit"))?;
            }
            d.wait_for_fences(&[fence], true, u64::MAX).map_err(call("vkWaitForFences"))
        };
        let result = run();
        d.destroy_fence(fence, None);
        d.destroy_command_pool(pool, None);
        result
    }
}

/// Host-visible, coherent device memory, mapped while it lives: one buffer's own, or a run's
/// block that several buffers are bound into at their offsets (`Buffer::in_one_block`).
struct Memory {
    ctx: Arc<Context>,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
}

// SAFETY: as `Buffer`'s: the mapping is accessed through the buffers, which the run states
// sequence; the handles are identifiers.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    /// `bytes` of memory of a type among `bits`: host-visible, coherent and mapped where
    /// `host`, else device-local and not mapped.
    fn new(ctx: &Arc<Context>, bytes: u64, bits: u32, host: bool) -> Result<Memory, VulkanError> {
        let d = &ctx.device;
        let kind = ctx.memory_type(bits, host).ok_or_else(|| {
            VulkanError::NoDevice(format!(
                "no {} memory for a storage buffer",
                ["device", "host-visible coherent"][usize::from(host)]
            ))
        })?;
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(bytes).memory_type_index(kind);
        // SAFETY: a valid allocate info; freed below on failure or in `Drop`.
        let memory = unsafe { d.allocate_memory(&alloc, None) }.map_err(call("vkAllocateMemory"))?;
        if !host {
            return Ok(Memory { ctx: Arc::clone(ctx), memory, ptr: std::ptr::null_mut() });
        }
        // SAFETY: memory just allocated, host-visible, not mapped yet.
        match unsafe { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) } {
            Ok(p) => Ok(Memory { ctx: Arc::clone(ctx), memory, ptr: p.cast::<u8>() }),
            Err(e) => {
                // SAFETY: nothing is bound to it.
                unsafe { d.free_memory(memory, None) };
                Err(call("vkMapMemory")(e))
            }
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: every buffer bound to it holds an `Arc` of it and is destroyed first; the
        // run states wait for their last submission before dropping buffers.
        unsafe {
            if !self.ptr.is_null() {
                self.ctx.device.unmap_memory(self.memory);
            }
            self.ctx.device.free_memory(self.memory, None);
        }
    }
}

/// A storage buffer in host-visible, coherent memory (its own, or a share of a run's block),
/// mapped while it lives.
pub struct Buffer {
    ctx: Arc<Context>,
    pub(super) buffer: vk::Buffer,
    /// Kept alive as long as the buffer is bound to it.
    _memory: Arc<Memory>,
    ptr: *mut u8,
    /// Its size in bytes (at least 4).
    pub(super) size: u64,
}

// SAFETY: the mapping is only written by the host between submissions and read after the
// fence of the last one, which the run states sequence; the handles are identifiers.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

/// Unbound buffers, destroyed on drop unless taken.
struct Unbound<'a> {
    ctx: &'a Context,
    buffers: Vec<(vk::Buffer, u64)>,
}

impl Unbound<'_> {
    /// One more buffer of `bytes` (rounded up to 4, at least 4), and its memory requirements.
    fn push(&mut self, bytes: usize) -> Result<vk::MemoryRequirements, VulkanError> {
        let size = (bytes.max(4).next_multiple_of(4)) as u64;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info; destroyed in `Drop` unless bound and taken.
        let buffer = unsafe { self.ctx.device.create_buffer(&info, None) }.map_err(call("vkCreateBuffer"))?;
        self.buffers.push((buffer, size));
        // SAFETY: a buffer of this device.
        Ok(unsafe { self.ctx.device.get_buffer_memory_requirements(buffer) })
    }

    /// Binds buffer `i` to `memory` at `offset`, as a [`Buffer`] (which then owns it).
    fn bind(&mut self, ctx: &Arc<Context>, i: usize, memory: &Arc<Memory>, offset: u64) -> Result<Buffer, VulkanError> {
        let (buffer, size) = self.buffers[i];
        // SAFETY: an unbound buffer; `offset` meets its alignment and leaves room for it
        // (the caller's plan).
        unsafe { ctx.device.bind_buffer_memory(buffer, memory.memory, offset) }.map_err(call("vkBindBufferMemory"))?;
        self.buffers[i].0 = vk::Buffer::null();
        // SAFETY: the mapping covers the whole allocation, `offset + size` within it (null:
        // device-local memory, not mapped).
        let ptr = if memory.ptr.is_null() { memory.ptr } else { unsafe { memory.ptr.add(offset as usize) } };
        Ok(Buffer { ctx: Arc::clone(ctx), buffer, _memory: Arc::clone(memory), ptr, size })
    }
}

impl Drop for Unbound<'_> {
    fn drop(&mut self) {
        for &(b, _) in &self.buffers {
            // SAFETY: never bound or handed out (taken ones are null, which is allowed).
            unsafe { self.ctx.device.destroy_buffer(b, None) };
        }
    }
}

impl Buffer {
    /// A buffer of `bytes` (rounded up to 4, at least 4) with host-visible memory of its own.
    pub fn new(ctx: &Arc<Context>, bytes: usize) -> Result<Buffer, VulkanError> {
        Buffer::with_memory(ctx, bytes, true)
    }

    /// A buffer of `bytes` with memory of its own: host-visible and mapped where `host`, else
    /// device-local (and its [`Buffer::bytes`] empty).
    pub fn with_memory(ctx: &Arc<Context>, bytes: usize, host: bool) -> Result<Buffer, VulkanError> {
        let mut unbound = Unbound { ctx, buffers: Vec::new() };
        let needs = unbound.push(bytes)?;
        let memory = Arc::new(Memory::new(ctx, needs.size, needs.memory_type_bits, host)?);
        unbound.bind(ctx, 0, &memory, 0)
    }

    /// Buffers of `bytes` each, bound into one allocation where `plan` puts them: given each
    /// buffer's size in memory and the alignment every offset needs, it returns each one's
    /// offset and the block's size (a memory plan: buffers whose contents are never needed
    /// at the same time may overlap), or `None` where the sizes overflow.
    pub fn in_one_block(
        ctx: &Arc<Context>,
        host: bool,
        bytes: &[usize],
        plan: impl FnOnce(&[u64], u64) -> Option<(Vec<u64>, u64)>,
    ) -> Result<Vec<Buffer>, VulkanError> {
        if bytes.is_empty() {
            return Ok(Vec::new());
        }
        let mut unbound = Unbound { ctx, buffers: Vec::with_capacity(bytes.len()) };
        let (mut sizes, mut align, mut bits) = (Vec::with_capacity(bytes.len()), 1u64, u32::MAX);
        for &n in bytes {
            let needs = unbound.push(n)?;
            sizes.push(needs.size);
            align = align.max(needs.alignment.max(1));
            bits &= needs.memory_type_bits;
        }
        let (offsets, total) = plan(&sizes, align)
            .filter(|(o, _)| o.len() == bytes.len())
            .ok_or_else(|| VulkanError::NoDevice("a run's memory plan overflows".into()))?;
        let memory = Arc::new(Memory::new(ctx, total.max(4), bits, host)?);
        (0..bytes.len()).map(|i| unbound.bind(ctx, i, &memory, offsets[i])).collect()
    }

    /// The mapped bytes (none for a device-local buffer).
    ///
    /// # Safety
    /// No submitted work may be writing the buffer.
    pub unsafe fn bytes(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: the mapping covers `size` bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.size as usize) }
    }

    /// The mapped bytes, writable.
    ///
    /// # Safety
    /// No submitted work may be reading or writing the buffer.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as `bytes`; the caller excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size as usize) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the run states wait for their last submission before dropping buffers; the
        // memory is freed when its last buffer is gone.
        unsafe { self.ctx.device.destroy_buffer(self.buffer, None) };
    }
}
