//! Which lowering a graph takes: the library ops decomposition keeps whole and the ones
//! recovery puts back ([`Mode`]; `crate::pipeline` lowers by it). Here, below the backends,
//! so that a backend can say which lowering its programs take.

/// Which lowering a graph takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The native plan's: decomposition keeps the ops a library kernel runs whole
    /// ([`crate::ops::library::kept`]), recovery puts back the library ops it recognizes.
    #[default]
    Native,
    /// The reference plan's: every high-level op decomposed to prims, nothing recovered.
    Reference,
    /// A device's library shaders' (the Vulkan backend's, where it runs them): every
    /// high-level op decomposed to prims, as in the reference plan, then recovery puts back
    /// only [`Mode::SHADER_OPS`], the ops the device has a library shader for; every other
    /// op stays prims, which its generated kernels run.
    Shaders,
}

impl Mode {
    /// The high-level ops decomposition keeps whole in this mode.
    pub fn keep(self) -> &'static [crate::ops::OpKind] {
        match self {
            Mode::Native => crate::ops::library::kept(),
            Mode::Reference | Mode::Shaders => &[],
        }
    }

    /// The ops a device's library shaders run whole: the row ops (`shaders/rows_f32.wgsl`)
    /// and attention (`shaders/attention_f32.wgsl`). Recovery writes them as the shaders take
    /// them (f32; the row ops over the last axis), and must go on doing so: a plan with a step
    /// the device has no kernel for is refused.
    pub const SHADER_OPS: &'static [crate::ops::OpKind] = &[
        crate::ops::OpKind::Softmax,
        crate::ops::OpKind::LogSoftmax,
        crate::ops::OpKind::LayerNorm,
        crate::ops::OpKind::RmsNorm,
        crate::ops::OpKind::ScaledDotProductAttention,
    ];

    /// The ops recovery puts back in this mode (none in the reference mode).
    pub fn recovers(self) -> &'static [crate::ops::OpKind] {
        match self {
            Mode::Native => super::recoverable(),
            Mode::Reference => &[],
            Mode::Shaders => Mode::SHADER_OPS,
        }
    }

    /// Its name (what an artifact's `mode` line holds).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Reference => "reference",
            Mode::Shaders => "shaders",
        }
    }
}
