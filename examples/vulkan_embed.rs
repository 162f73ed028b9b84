//! Embedding ladder in a program that owns its Vulkan device (a game engine, say): the program
//! creates the instance, device and queue with ash, hands them to ladder, runs a small model on
//! them, checks the result against the CPU backend, and destroys its device after dropping
//! ladder's plan. Ladder destroys only what it created (pipelines, buffers, pools, fences).
//!
//! `cargo run --release --example vulkan_embed` (on a machine without a Vulkan driver it says
//! so and exits; with `LADDER_REQUIRE_VULKAN=1` that is an error).

use ladder::runtime::ash::{self, vk};
use ladder::runtime::{ExternalDevice, VulkanDevice};
use ladder::{CompileOptions, DType, Dim, GraphBuilder, Shape, Tensor};

/// The program's own Vulkan objects.
struct Own {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    features: vk::PhysicalDeviceFeatures,
    family: u32,
    queue: vk::Queue,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let own = match create_device() {
        Ok(own) => own,
        Err(why) if std::env::var("LADDER_REQUIRE_VULKAN").is_ok_and(|v| v == "1") => {
            return Err(format!("LADDER_REQUIRE_VULKAN=1 but {why}").into())
        }
        Err(why) => {
            println!("skipped: {why}");
            return Ok(());
        }
    };
    let result = run(&own);
    // SAFETY: ladder's plan and device handle were dropped inside `run`, and nothing else uses
    // the device: the program destroys what it created.
    unsafe {
        own.device.destroy_device(None);
        own.instance.destroy_instance(None);
    }
    result
}

/// A small model on the program's device: `softmax(relu(x·W + b))` over a batch of 3.
fn run(own: &Own) -> Result<(), Box<dyn std::error::Error>> {
    let ext = ExternalDevice {
        entry: own.entry.clone(),
        instance: own.instance.clone(),
        physical_device: own.physical,
        device: own.device.clone(),
        enabled_features: own.features,
        queue_family_index: own.family,
        queue: own.queue,
    };
    // SAFETY: the handles are the program's own, made together in `create_device`, and live
    // until `main` destroys them after this function returns; the program submits nothing to
    // the queue itself (else it would hold `device.lock_queue()` while it does).
    let device = unsafe { VulkanDevice::from_external(ext) }?;
    println!("device: {} (the program's own)", device.name());

    let mut b = GraphBuilder::new("head");
    let x = b.input("x", DType::F32, Shape(vec![Dim::sym("batch"), Dim::new(8)].into()))?;
    let w =
        b.named_constant("w", Tensor::from_f32(&[8, 4], (0..32).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect())?)?;
    let bias = b.named_constant("b", Tensor::from_f32(&[4], vec![0.05, -0.05, 0.1, 0.0])?)?;
    let h = b.matmul(x, w)?;
    let h = b.add(h, bias)?;
    let h = b.relu(h)?;
    let y = b.softmax(h, -1)?;
    b.output("y", y)?;
    let graph = b.finish()?;

    let x = Tensor::from_f32(&[3, 8], (0..24).map(|i| (i as f32 * 0.37).sin()).collect())?;
    let plan = ladder::compile(&graph, &CompileOptions::vulkan_on(device))?;
    let got = plan.run(std::slice::from_ref(&x))?.outputs;
    let want = ladder::compile(&graph, &CompileOptions::default())?.run(&[x])?.outputs;
    // The plan holds ladder's objects on the device: drop it before the device goes.
    drop(plan);
    let (got, want) = (got[0].as_f32().ok_or("f32")?, want[0].as_f32().ok_or("f32")?);
    for (i, row) in got.chunks(4).enumerate() {
        println!("row {i}: {row:.4?}");
    }
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    println!("max |vulkan - cpu| = {worst:.1e}");
    if worst > 1e-5 {
        return Err(format!("the device's result differs from the CPU's by {worst}").into());
    }
    Ok(())
}

/// The program's instance and device: Vulkan 1.2, the first device with a compute queue and
/// 64-bit integers in shaders, which it enables. `Err` says why there is none.
fn create_device() -> Result<Own, String> {
    // SAFETY: loading the system's Vulkan loader.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
    let app = vk::ApplicationInfo::default().application_name(c"vulkan_embed").api_version(vk::API_VERSION_1_2);
    // SAFETY: the create info outlives the call.
    let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) }
        .map_err(|e| format!("no Vulkan 1.2 driver answered (vkCreateInstance: {e:?})"))?;
    // SAFETY: plain queries; the instance is destroyed on every failure below.
    let found = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default().into_iter().find_map(|p| {
        let props = unsafe { instance.get_physical_device_properties(p) };
        let features = unsafe { instance.get_physical_device_features(p) };
        let families = unsafe { instance.get_physical_device_queue_family_properties(p) };
        let family = families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))?;
        (props.api_version >= vk::API_VERSION_1_2 && features.shader_int64 == vk::TRUE).then_some((p, family as u32))
    });
    let Some((physical, family)) = found else {
        unsafe { instance.destroy_instance(None) };
        return Err("no Vulkan 1.2 device with a compute queue and shaderInt64".into());
    };
    let features = vk::PhysicalDeviceFeatures::default().shader_int64(true);
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_features(&features);
    // SAFETY: the create info outlives the call.
    let device = match unsafe { instance.create_device(physical, &info, None) } {
        Ok(d) => d,
        Err(e) => {
            unsafe { instance.destroy_instance(None) };
            return Err(format!("vkCreateDevice: {e:?}"));
        }
    };
    // SAFETY: the device was created with one queue of `family`.
    let queue = unsafe { device.get_device_queue(family, 0) };
    Ok(Own { entry, instance, physical, device, features, family, queue })
}

#[test]
fn runs() {
    main().unwrap();
}
