//! A compute pipeline: a shader module, its descriptor set layout (storage buffers only) and
//! its pipeline layout, destroyed together.

use std::sync::Arc;

use ash::vk;

use super::device::{call, Context, VulkanError};
use super::spirv::Shader;

/// A compiled shader's pipeline objects.
pub(super) struct Pipe {
    ctx: Arc<Context>,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    module: vk::ShaderModule,
    pub(super) pipeline: vk::Pipeline,
    pub(super) bindings: u32,
}

// SAFETY: handles only; used under the run states' sequencing.
unsafe impl Send for Pipe {}
unsafe impl Sync for Pipe {}

impl Pipe {
    pub(super) fn new(ctx: &Arc<Context>, shader: &Shader) -> Result<Pipe, VulkanError> {
        Pipe::from_words(ctx, &shader.words, shader.bindings.len() as u32 + 2)
    }

    /// The pipeline of a compute shader (`words`, entry point `main`) whose storage buffers
    /// are bindings `0..bindings` of set 0.
    pub(super) fn from_words(ctx: &Arc<Context>, words: &[u32], bindings: u32) -> Result<Pipe, VulkanError> {
        let d = &ctx.device;
        let slots: Vec<vk::DescriptorSetLayoutBinding> = (0..bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut pipe = Pipe {
            ctx: Arc::clone(ctx),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            module: vk::ShaderModule::null(),
            pipeline: vk::Pipeline::null(),
            bindings,
        };
        // SAFETY: each create info outlives its call; `Drop` destroys whatever was made.
        unsafe {
            pipe.set_layout = d
                .create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&slots), None)
                .map_err(call("vkCreateDescriptorSetLayout"))?;
            let layouts = [pipe.set_layout];
            pipe.layout = d
                .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts), None)
                .map_err(call("vkCreatePipelineLayout"))?;
            pipe.module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .map_err(call("vkCreateShaderModule"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(pipe.module)
                .name(c"main");
            let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(pipe.layout)];
            pipe.pipeline = d
                .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
                .map_err(|(_, e)| call("vkCreateComputePipelines")(e))?[0];
        }
        Ok(pipe)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let d = &self.ctx.device;
        // SAFETY: no run state outlives its executable's pipes (they hold the executable's
        // buffers' users only during `run`); destroying a null handle is allowed.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_shader_module(self.module, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
