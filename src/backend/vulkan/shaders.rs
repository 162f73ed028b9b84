//! Library shaders: compute shaders written by hand in WGSL (`shaders/*.wgsl` at the crate's
//! root), built into SPIR-V at build time by `build.rs` (naga; no system tool), for steps whose
//! generated kernels leave most of the device idle.
//!
//! - [`Gemm`] (`shaders/gemm_f32.wgsl`): an f32 `matmul` step (any transposes, broadcast
//!   batch dims, up to [`BATCH_DIMS`] of them, symbolic sizes) as a tiled product staging its
//!   operands' tiles in workgroup memory. Each result is summed over `k` in order with `fma`
//!   from +0: the reference's rounding where the device fuses it (the generated kernels round
//!   each product before adding it). A step's epilogue kernel runs after it as a generated
//!   kernel, as before. The same shader runs an f32 1-D or 2-D `conv` (any groups, strides,
//!   dilations, zero padding, symbolic sizes) as the product of its weights and its input's
//!   patches, gathered by the tile loads (implicit GEMM), in the reference's order (input
//!   channel, then taps row-major); its bias-and-ReLU post-op runs after it as a generated
//!   kernel. A matmul of fewer than [`MIN_ROWS`] rows with `b` transposed takes its split
//!   mode instead: a workgroup per row and 8 columns, `k` split across its invocations and the
//!   partial sums reduced across the workgroup.
//! - [`Rows`] (`shaders/rows_f32.wgsl`): a recovered f32 `softmax`, `log_softmax`,
//!   `layer_norm` or `rms_norm` over the last axis (plans for a device with library shaders
//!   recover those four: [`crate::recover::Mode::Shaders`]), one workgroup per row reducing
//!   in workgroup memory, each op computed as its prims decomposition computes it, with
//!   ladder's own `exp` and `ln` (`src/backend/cpu/math.rs`); a post-op runs after it as a
//!   generated kernel.
//! - [`Attention`] (`shaders/attention_f32.wgsl`): a recovered f32
//!   `scaled_dot_product_attention` (causal or not, safe softmax or not, an optional f32 or bool
//!   mask broadcast to the scores through strides, any D and Dv) as an online softmax over
//!   tiles of keys, the op's edge cases as its decomposition gives them: by row below
//!   [`BLOCK_ROWS`] query rows (a workgroup per row, its invocations splitting each tile of
//!   keys), by block from there (a workgroup per 64 rows of a head, one per invocation, each
//!   tile of keys and values staged in workgroup memory once for all 64), chosen per run.
//!
//! The shaders that reduce across a workgroup (rows, attention by row, the GEMM's split mode)
//! have a second module, built from the same WGSL with `shaders/lib/reduce_subgroup.wgsl` in
//! place of `shaders/lib/reduce.wgsl`, which reduces on subgroup operations (basic and
//! arithmetic): a plan loads it where the device has them and subgroups are on
//! ([`super::VulkanDevice::subgroups`]).
//!
//! Every library shader's module is given the `SignedZeroInfNanPreserve` mode for f32 when a
//! plan first loads it (naga does not write it), as the generated kernels have: without it a
//! driver may assume that no value is NaN or infinite.
//!
//! A library shader binds the step's buffers, then its parameters (u32 words the host
//! computes from the run's sizes when it records the run's commands) and the status word,
//! in the generated kernels' layout; an operand living in the run's arena is bound as the
//! arena, at its element offset there.

use std::sync::OnceLock;

use crate::backend::Sizes;
use crate::ir::DType;
use crate::kernel::{BufferId, ConvCall, Kernel, LibraryCall, MatmulCall, Program, Step};
use crate::ops::OpKind;

mod words {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

/// Every library shader's SPIR-V by name, as plans load it (NaN-preserving): what tests
/// validate with `spirv-val`. A shader's module on subgroup operations is named with
/// `_subgroup` after the shader's name.
pub fn library_shaders() -> Vec<(String, &'static [u32])> {
    let mut all = Vec::new();
    for (i, &(name, _, subgroup)) in SHADERS.iter().enumerate() {
        all.push((name.to_string(), loaded(i, false)));
        if subgroup.is_some() {
            all.push((format!("{name}_subgroup"), loaded(i, true)));
        }
    }
    all
}

/// A library shader's name, the module `build.rs` wrote for it, and where it reduces across its
/// workgroup, the module doing so on subgroup operations (basic and arithmetic ones).
type Modules = (&'static str, &'static [u32], Option<&'static [u32]>);

/// Every library shader's modules.
const SHADERS: [Modules; 3] = [
    ("attention_f32", words::ATTENTION_F32, Some(words::ATTENTION_F32_SUBGROUP)),
    ("gemm_f32", words::GEMM_F32, Some(words::GEMM_F32_SUBGROUP)),
    ("rows_f32", words::ROWS_F32, Some(words::ROWS_F32_SUBGROUP)),
];

/// Library shader `i`'s module as plans load it ([`preserving`], made once): the one on
/// subgroup operations where `subgroup` and the shader has one.
fn loaded(i: usize, subgroup: bool) -> &'static [u32] {
    static LOADED: [[OnceLock<Vec<u32>>; 2]; SHADERS.len()] = [const { [const { OnceLock::new() }; 2] }; SHADERS.len()];
    let (_, plain, grouped) = SHADERS[i];
    match grouped.filter(|_| subgroup) {
        Some(words) => LOADED[i][1].get_or_init(|| preserving(words)),
        None => LOADED[i][0].get_or_init(|| preserving(plain)),
    }
}

/// `words` (a module naga wrote at build time, which `build.rs` validated) with the
/// `SignedZeroInfNanPreserve` execution mode for 32-bit floats on every entry point (the
/// capability and `SPV_KHR_float_controls` declared).
fn preserving(words: &[u32]) -> Vec<u32> {
    use rspirv::binary::Assemble;
    use rspirv::dr::{Instruction, Operand};
    use rspirv::spirv::{Capability, ExecutionMode, Op};
    let mut module = rspirv::dr::load_words(words).expect("build.rs wrote a valid module");
    module.capabilities.push(Instruction::new(
        Op::Capability,
        None,
        None,
        vec![Operand::Capability(Capability::SignedZeroInfNanPreserve)],
    ));
    module.extensions.push(Instruction::new(
        Op::Extension,
        None,
        None,
        vec![Operand::LiteralString("SPV_KHR_float_controls".into())],
    ));
    let entries: Vec<u32> = module.entry_points.iter().filter_map(|e| e.operands.get(1)?.id_ref_any()).collect();
    for entry in entries {
        module.execution_modes.push(Instruction::new(
            Op::ExecutionMode,
            None,
            None,
            vec![
                Operand::IdRef(entry),
                Operand::ExecutionMode(ExecutionMode::SignedZeroInfNanPreserve),
                Operand::LiteralBit32(32),
            ],
        ));
    }
    module.assemble()
}

/// A step as a library shader.
#[derive(Clone, Debug)]
pub(super) enum Library {
    Gemm(Gemm),
    Rows(Rows),
    Attention(Attention),
}

impl Library {
    /// The step's name in reports.
    pub fn name(&self) -> &str {
        match self {
            Library::Gemm(g) => &g.name,
            Library::Rows(r) => &r.name,
            Library::Attention(a) => &a.name,
        }
    }

    /// The shader's name (one pipeline per shader per plan).
    pub fn shader(&self) -> &'static str {
        match self {
            Library::Gemm(_) => "gemm_f32",
            Library::Rows(_) => "rows_f32",
            Library::Attention(_) => "attention_f32",
        }
    }

    /// The SPIR-V module: the one reducing on subgroup operations where `subgroup` and the
    /// shader has one.
    pub fn words(&self, subgroup: bool) -> &'static [u32] {
        let i = SHADERS.iter().position(|&(n, ..)| n == self.shader()).expect("a library shader's name");
        loaded(i, subgroup)
    }

    /// Whether the step reduces across its workgroup (the row ops, attention, a split product):
    /// the shader's module on subgroup operations does so there.
    pub fn reduces(&self) -> bool {
        match self {
            Library::Gemm(g) => g.split,
            Library::Rows(_) | Library::Attention(_) => true,
        }
    }

    /// The buffers bound at bindings `0..`, before the parameters and the status word.
    pub fn buffers(&self) -> Vec<BufferId> {
        match self {
            Library::Gemm(g) => g.buffers().to_vec(),
            Library::Rows(r) => r.buffers().to_vec(),
            Library::Attention(a) => a.buffers().to_vec(),
        }
    }

    /// The parameters for a run with `sizes`, each bound buffer's first element at `first`
    /// (0, or its element offset in the run's arena), or why not.
    pub fn params(&self, p: &Program, sizes: &Sizes, first: &[u64]) -> Result<Vec<u32>, String> {
        match self {
            Library::Gemm(g) => g.params(p, sizes, [first[0], first[1], first[2]]),
            Library::Rows(r) => r.params(p, sizes, [first[0], first[1], first[2], first[3]]),
            Library::Attention(a) => a.params(p, sizes, [first[0], first[1], first[2], first[3], first[4]]),
        }
    }

    /// The workgroups to dispatch for `params` (at most `most` per dimension), or `None`
    /// where there is nothing to compute.
    pub fn groups(&self, params: &[u32], most: [u32; 3]) -> Option<[u32; 3]> {
        match self {
            Library::Gemm(_) => Gemm::groups(params, most),
            Library::Rows(_) => Rows::groups(params, most),
            Library::Attention(_) => Attention::groups(params, most),
        }
    }
}

/// Batch dims the GEMM shader's parameters hold.
pub const BATCH_DIMS: usize = 4;
/// The GEMM shader's tile of results per workgroup (rows, columns).
const TILE: (u64, u64) = (64, 64);
/// The values of `k` per tile.
const TILE_K: u64 = 16;
/// Below this many rows (a matmul's, a convolution's output channels per group) where it is
/// static, a 64-row tile would be mostly idle: a matmul with `b` transposed takes the shader's
/// split mode instead (a workgroup per row and 8 columns, `k` split across its invocations),
/// and other products stay generated kernels (a depthwise convolution, one channel per group,
/// ran 20 times slower on lavapipe through the tiles).
const MIN_ROWS: u64 = 16;
/// Split mode's columns per workgroup.
const SPLIT_COLS: u64 = 8;
/// Split mode's invocations per workgroup, which split `k`.
const SPLIT_LANES: u64 = 128;

/// Whether `rows` (a dim) may be small enough to leave most of a tile's rows idle.
fn few(rows: &crate::ir::Dim) -> bool {
    rows.as_const().is_some_and(|r| r < MIN_ROWS)
}

/// The library GEMM for step `i` of `p`, where it is an f32 matmul or convolution the shader
/// computes, and the generated kernel that runs after it: the matmul's epilogue, or the
/// convolution's post-op (where the device has no kernel for the post-op, the generated
/// kernels run the whole step).
pub(super) fn for_step(step: &Step, p: &Program, i: usize) -> Option<(Library, Option<Kernel>)> {
    let post = |post: &Option<crate::kernel::ChannelPost>, out: BufferId, name: &str| match post {
        Some(post) => super::library::post_kernel(post, out, p, format!("{name}_post")).ok().map(Some),
        None => Some(None),
    };
    match step {
        Step::Matmul(m) => {
            Some((Library::Gemm(Gemm::new(m, p, format!("matmul{i}"))?), m.epilogue.as_deref().cloned()))
        }
        Step::Conv(c) => {
            let name = format!("conv{i}");
            let after = post(&c.post, c.out, &name)?;
            Some((Library::Gemm(Gemm::conv(c, p, name)?), after))
        }
        Step::Library(l) => {
            let name = format!("{}{i}", l.op.name());
            let after = post(&l.post, l.out, &name)?;
            let library = match l.op {
                OpKind::ScaledDotProductAttention => Library::Attention(Attention::new(l, p, name)?),
                _ => Library::Rows(Rows::new(l, p, name)?),
            };
            Some((library, after))
        }
        _ => None,
    }
}

/// Parameter words the row shader reads (`shaders/rows_f32.wgsl`).
const ROW_PARAMS: usize = 9;

/// A recovered f32 row op over the last axis as the row shader.
#[derive(Clone, Debug)]
pub(super) struct Rows {
    pub call: LibraryCall,
    pub name: String,
}

impl Rows {
    /// The row shader for library call `l` of `p` (named `name`), where it computes it: one
    /// of [`crate::recover::Mode::SHADER_OPS`] over the last axis, f32 operands, a weight
    /// and bias (where given) of the row's length.
    pub fn new(l: &LibraryCall, p: &Program, name: String) -> Option<Rows> {
        let most = match l.op {
            OpKind::Softmax | OpKind::LogSoftmax => 1,
            OpKind::RmsNorm => 2,
            OpKind::LayerNorm => 3,
            _ => return None,
        };
        let f32s = l.args.iter().chain([&l.out]).all(|&b| p.buffers[b].dtype == DType::F32);
        let x = p.buffers[l.args.first().copied()?].shape.dims();
        let rank = x.len() as i64;
        let last = matches!(l.attrs.get("axis"), Some(crate::ir::AttrValue::Int(a)) if *a == -1 || *a == rank - 1);
        let params = l.args[1..].iter().all(|&b| {
            let s = p.buffers[b].shape.dims();
            s.len() == 1 && x.last() == s.first()
        });
        (f32s && rank >= 1 && last && l.args.len() <= most && params && p.buffers[l.out].shape.dims() == x)
            .then(|| Rows { call: l.clone(), name })
    }

    /// The buffers bound at bindings 0 to 3: x, the weight, the bias and y (x where there
    /// is no weight or bias: bound, not read).
    pub fn buffers(&self) -> [BufferId; 4] {
        let a = &self.call.args;
        [a[0], a.get(1).copied().unwrap_or(a[0]), a.get(2).copied().unwrap_or(a[0]), self.call.out]
    }

    /// The shader's parameters for a run with `sizes` (layout: `shaders/rows_f32.wgsl`), each
    /// buffer's first element at `first`; why not, where an index does not fit 32 bits.
    pub fn params(&self, p: &Program, sizes: &Sizes, first: [u64; 4]) -> Result<Vec<u32>, String> {
        let x = sizes.shape(p, self.call.args[0]).map_err(|e| e.to_string())?;
        let n = x.last().copied().unwrap_or(1) as u64;
        let numel: u64 = x.iter().map(|&d| d as u64).product();
        let rows = numel.checked_div(n).unwrap_or(0);
        let op = match self.call.op {
            OpKind::Softmax => 0,
            OpKind::LogSoftmax => 1,
            OpKind::LayerNorm => 2,
            _ => 3,
        };
        let flags = (self.call.args.len() > 1) as u64 | ((self.call.args.len() > 2) as u64) << 1;
        let eps = match self.call.op {
            OpKind::LayerNorm | OpKind::RmsNorm => (self.call.attrs.float("eps") as f32).to_bits(),
            _ => 0,
        };
        let params = vec![op, rows, n, flags, u64::from(eps), first[0], first[1], first[2], first[3]];
        // A row's index runs to the start of the row after the last, and the loop's counters
        // past the row by up to a workgroup.
        let reach = [first[0] + numel, first[1] + n, first[2] + n, first[3] + numel, n + 64, rows + 65_536];
        narrow(params, &reach, ROW_PARAMS)
    }

    /// One workgroup per row, up to `most` (and 65,535) of them, looping past that.
    pub fn groups(params: &[u32], most: [u32; 3]) -> Option<[u32; 3]> {
        let (rows, n) = (params[1], params[2]);
        (rows > 0 && n > 0).then(|| [rows.min(most[0].min(65_535)), 1, 1])
    }
}

/// Parameter words the attention shader reads (`shaders/attention_f32.wgsl`).
const ATTENTION_PARAMS: usize = 15 + 2 * MASK_DIMS;
/// The mask's batch dims the attention shader's parameters hold (after merging).
const MASK_DIMS: usize = 8;
/// Query rows and keys per tile of the attention shader, and its most output columns per pass.
const ATTENTION_TILE: u64 = 64;
const ATTENTION_COLUMNS: u64 = 256;
/// From this many query rows on, the attention shader runs by block (64 rows per workgroup
/// sharing each tile of keys and values in workgroup memory), below it by row (a workgroup per
/// row, its invocations splitting the keys: decoding's one query row keeps them all busy).
const BLOCK_ROWS: u64 = 32;

/// A recovered f32 `scaled_dot_product_attention` as the attention shader.
#[derive(Clone, Debug)]
pub(super) struct Attention {
    pub call: LibraryCall,
    pub name: String,
}

impl Attention {
    /// The attention shader for library call `l` of `p` (named `name`), where it computes it:
    /// f32 q, k, v and result of one rank (at least 2), an f32 or bool mask of at most
    /// [`MASK_DIMS`] + 1 dims (its batch dims and the leading ones it broadcasts over take at
    /// most [`MASK_DIMS`] after merging). Recovery writes no other call but one with a mask of
    /// more dims (`recover/attention.rs`), so a plan for a device with library shaders refuses
    /// no recovered attention but that.
    pub fn new(l: &LibraryCall, p: &Program, name: String) -> Option<Attention> {
        let [q, k, v, ref mask @ ..] = l.args[..] else { return None };
        let f32s = [q, k, v, l.out].iter().all(|&b| p.buffers[b].dtype == DType::F32);
        let rank = p.buffers[q].shape.rank();
        let ranks = [k, v, l.out].iter().all(|&b| p.buffers[b].shape.rank() == rank);
        let mask = match mask {
            [] => true,
            &[m] => {
                let (dtype, r) = (p.buffers[m].dtype, p.buffers[m].shape.rank());
                matches!(dtype, DType::F32 | DType::Bool) && r <= rank && r <= MASK_DIMS + 1
            }
            _ => false,
        };
        (f32s && rank >= 2 && ranks && mask).then(|| Attention { call: l.clone(), name })
    }

    /// The buffers bound at bindings 0 to 4: q, k, v, the mask (q where there is none: bound,
    /// not read) and y.
    pub fn buffers(&self) -> [BufferId; 5] {
        let a = &self.call.args;
        [a[0], a[1], a[2], a.get(3).copied().unwrap_or(a[0]), self.call.out]
    }

    /// The shader's parameters for a run with `sizes` (layout: `shaders/attention_f32.wgsl`),
    /// each buffer's first element (a bool mask's first word) at `first`; why not, where the
    /// operands' shapes do not agree, the mask does not broadcast to the scores, or an index
    /// does not fit 32 bits.
    pub fn params(&self, p: &Program, sizes: &Sizes, first: [u64; 5]) -> Result<Vec<u32>, String> {
        let shape = |b: BufferId| -> Result<Vec<u64>, String> {
            Ok(sizes.shape(p, b).map_err(|e| e.to_string())?.into_iter().map(|d| d as u64).collect())
        };
        let a = &self.call.args;
        let (q, k, v) = (shape(a[0])?, shape(a[1])?, shape(a[2])?);
        let r = q.len();
        let batch = &q[..r - 2];
        let (l, d, s, dv) = (q[r - 2], q[r - 1], k[r - 2], v[r - 1]);
        if k[..r - 2] != *batch || v[..r - 2] != *batch || k[r - 1] != d || v[r - 2] != s {
            return Err(format!("attention operands {q:?}, {k:?}, {v:?}"));
        }
        let nb: u64 = batch.iter().product();
        let attrs = &self.call.attrs;
        let scale = match attrs.float("scale") {
            x if x.is_nan() => 1.0 / (d as f64).sqrt(),
            x => x,
        } as f32;
        let (causal, safe) = (attrs.bool("causal"), attrs.bool("safe_softmax"));
        let mut flags = (causal as u64) << 2 | (safe as u64) << 3 | ((l >= BLOCK_ROWS) as u64) << 4;
        // The mask's strides along L and S, its batch dims (size, stride) innermost first, and
        // the last element it reaches.
        let (mut row, mut col, mut dims, mut mask_reach) = (0, 0, Vec::new(), 0);
        if let Some(&m) = a.get(3) {
            let bool_mask = p.buffers[m].dtype == DType::Bool;
            flags |= 1 | (bool_mask as u64) << 1;
            let shape = shape(m)?;
            let target: Vec<usize> = batch.iter().chain([&l, &s]).map(|&d| d as usize).collect();
            let mask: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let strides: Vec<u64> = crate::ops::util::broadcast_strides(&mask, &target)
                .ok_or_else(|| format!("a mask of shape {shape:?} does not broadcast to the scores {target:?}"))?
                .iter()
                .map(|&st| st as u64)
                .collect();
            (row, col) = (strides[r - 2], strides[r - 1]);
            dims = merged(batch, &strides[..r - 2]);
            if dims.len() > MASK_DIMS {
                return Err(format!("a mask of shape {shape:?} over {} batch dims", dims.len()));
            }
            let last: u64 = dims.iter().map(|&(n, st)| n.saturating_sub(1) * st).sum::<u64>()
                + l.saturating_sub(1) * row
                + s.saturating_sub(1) * col;
            mask_reach = if bool_mask { last.max(first[3] + last / 4) } else { first[3] + last };
        }
        let mut params = vec![nb, l, s, d, dv, flags, u64::from(scale.to_bits())];
        params.extend(first[..3].iter().chain([&first[3], &first[4]]).copied());
        params.extend([row, col, dims.len() as u64]);
        params.extend(dims.iter().flat_map(|&(n, st)| [n, st]));
        // Rows run to the last one past a dispatch's workgroups, keys and columns past their
        // extents by a tile and a pass.
        let reach = [
            first[0] + nb * l * d,
            first[1] + nb * s * d,
            first[2] + nb * s * dv,
            first[4] + nb * l * dv,
            mask_reach,
            nb * l + 65_536,
            s + ATTENTION_TILE,
            dv + ATTENTION_COLUMNS,
        ];
        narrow(params, &reach, ATTENTION_PARAMS)
    }

    /// One workgroup per query row, or per block of 64 of a batch element's, up to `most`
    /// (and 65,535) of them, looping past that.
    pub fn groups(params: &[u32], most: [u32; 3]) -> Option<[u32; 3]> {
        let (nb, l) = (u64::from(params[0]), u64::from(params[1]));
        let groups = if params[5] & 16 != 0 { nb * l.div_ceil(ATTENTION_TILE) } else { nb * l };
        (groups > 0 && params[4] > 0).then(|| [groups.min(u64::from(most[0].min(65_535))) as u32, 1, 1])
    }
}

/// The batch dims `sizes` with their `strides`, innermost first, size-1 dims dropped and
/// neighbours merged where one stride walks both (both 0, or the outer's stride the inner's
/// extent), so that a mask broadcast over leading dims takes one dim for them.
fn merged(sizes: &[u64], strides: &[u64]) -> Vec<(u64, u64)> {
    let mut dims: Vec<(u64, u64)> = Vec::new();
    for (&n, &st) in sizes.iter().zip(strides).rev().filter(|&(&n, _)| n != 1) {
        match dims.last_mut() {
            Some((inner, inner_st)) if st == *inner_st * *inner || (st == 0 && *inner_st == 0) => *inner *= n,
            _ => dims.push((n, st)),
        }
    }
    dims
}

/// Parameter words the GEMM shader reads (`shaders/gemm_f32.wgsl`).
const PARAMS: usize = 37;
/// The word saying split mode.
const SPLIT: usize = 36;
/// Where image mode's parameters start.
const IMAGE: usize = 24;

/// An f32 matmul or convolution step as the library GEMM.
#[derive(Clone, Debug)]
pub(super) struct Gemm {
    pub product: Product,
    pub name: String,
    /// Split mode: a matmul of fewer than [`MIN_ROWS`] rows, `b` transposed.
    pub split: bool,
}

/// The step a [`Gemm`] computes.
#[derive(Clone, Debug)]
pub(super) enum Product {
    Matmul(MatmulCall),
    /// A 1-D or 2-D convolution, with its (begin) padding, strides and dilations per spatial
    /// dim, 1-D ones as 2-D of height 1.
    Conv {
        call: ConvCall,
        pad: [u64; 2],
        stride: [u64; 2],
        dilation: [u64; 2],
    },
}

impl Gemm {
    /// The library GEMM for matmul `m` of `p` (named `name`), where the shader computes it:
    /// f32 operands and result, at most [`BATCH_DIMS`] batch dims, no fused activation. With
    /// fewer than [`MIN_ROWS`] rows it takes split mode where `b` is transposed (contiguous
    /// along `k`, which the generated kernels, an invocation per result summing along `k`,
    /// read a row per invocation), and stays generated kernels otherwise (neighbouring
    /// invocations read neighbouring columns of `b` there).
    pub fn new(m: &MatmulCall, p: &Program, name: String) -> Option<Gemm> {
        let f32s = [m.a, m.b, m.out].iter().all(|&b| p.buffers[b].dtype == DType::F32);
        let ranks = [m.a, m.b, m.out].map(|b| p.buffers[b].shape.rank());
        let shaped = ranks.iter().all(|&r| r >= 2) && ranks[2] - 2 <= BATCH_DIMS;
        let split = shaped && few(&p.buffers[m.out].shape.dims()[ranks[2] - 2]);
        let taken = f32s && shaped && m.activation.is_none() && (!split || m.transpose_b);
        taken.then(|| Gemm { product: Product::Matmul(m.clone()), name, split })
    }

    /// The library GEMM for convolution `c` of `p`, where the shader computes it: f32, 1-D
    /// or 2-D, no folded pooling, attributes as the `conv` op takes them, not fewer than
    /// [`MIN_ROWS`] output channels per group.
    pub fn conv(c: &ConvCall, p: &Program, name: String) -> Option<Gemm> {
        let f32s = [c.x, c.w, c.out].iter().all(|&b| p.buffers[b].dtype == DType::F32);
        let rank = p.buffers[c.x].shape.rank();
        let ranks = [c.w, c.out].iter().all(|&b| p.buffers[b].shape.rank() == rank);
        if !f32s || !ranks || !(3..=4).contains(&rank) || c.pool.is_some() || c.groups < 1 {
            return None;
        }
        let per_group = p.buffers[c.out].shape.dims()[1].as_const().map(|o| o / c.groups as u64);
        if per_group.is_some_and(|o| o < MIN_ROWS) {
            return None;
        }
        let n = rank - 2;
        // Per spatial dim (`empty`: each where the list is empty), each at least `min`, as
        // [height, width] (height 1 and its defaults for 1-D).
        let dims = |v: &[i64], len: usize, min: i64, empty: u64| -> Option<[u64; 2]> {
            let v: Vec<u64> = match v.len() {
                0 => vec![empty; len],
                l if l == len && v.iter().all(|&x| x >= min) => v.iter().map(|&x| x as u64).collect(),
                _ => return None,
            };
            Some(if n == 1 { [empty, v[0]] } else { [v[0], v[1]] })
        };
        let pad = dims(&c.padding, 2 * n, 0, 0)?;
        let (stride, dilation) = (dims(&c.stride, n, 1, 1)?, dims(&c.dilation, n, 1, 1)?);
        let product = Product::Conv { call: c.clone(), pad, stride, dilation };
        Some(Gemm { product, name, split: false })
    }

    /// The buffers bound at bindings 0, 1, 2: `a`, `b` and the result (a convolution's
    /// weights, input and result).
    pub fn buffers(&self) -> [BufferId; 3] {
        match &self.product {
            Product::Matmul(m) => [m.a, m.b, m.out],
            Product::Conv { call, .. } => [call.w, call.x, call.out],
        }
    }

    /// The shader's parameters for a run with `sizes` (layout: `shaders/gemm_f32.wgsl`), each
    /// operand's first element at `first` (0, or its element offset in the run's arena); why
    /// not, where an index the shader would form does not fit 32 bits.
    pub fn params(&self, p: &Program, sizes: &Sizes, first: [u64; 3]) -> Result<Vec<u32>, String> {
        let m = match &self.product {
            Product::Matmul(m) => m,
            Product::Conv { call, pad, stride, dilation } => {
                return conv_params(call, (pad, stride, dilation), p, sizes, first);
            }
        };
        let shape = |b: BufferId| sizes.shape(p, b).map_err(|e| e.to_string());
        let (a, b, out) = (shape(m.a)?, shape(m.b)?, shape(m.out)?);
        let u = |v: &[usize], i: usize| v[i] as u64;
        let nb = out.len() - 2;
        let (rows, cols) = (u(&out, nb), u(&out, nb + 1));
        let ra = a.len();
        let depth = if m.transpose_a { u(&a, ra - 2) } else { u(&a, ra - 1) };
        // Strides in elements: a's along rows and k, b's along k and columns.
        let (a_row, a_k) = if m.transpose_a { (1, rows) } else { (depth, 1) };
        let (b_k, b_col) = if m.transpose_b { (1, depth) } else { (cols, 1) };
        // Each operand's batch stride per output batch dim (0 where it broadcasts).
        let batch_strides = |dims: &[usize]| -> Vec<u64> {
            let lead = dims.len() - 2;
            let mut strides = vec![0u64; nb];
            let mut step = u(dims, lead) * u(dims, lead + 1);
            for d in (0..lead).rev() {
                let o = nb - lead + d;
                strides[o] = if dims[d] == 1 { 0 } else { step };
                step *= u(dims, d);
            }
            strides
        };
        let (sa, sb) = (batch_strides(&a), batch_strides(&b));
        let batch: u64 = out[..nb].iter().map(|&e| e as u64).product();
        let mut params =
            vec![rows, cols, depth, batch, a_row, a_k, b_k, b_col, first[0], first[1], first[2], nb as u64];
        for d in 0..nb {
            params.extend([u(&out, d), sa[d], sb[d]]);
        }
        params.resize(SPLIT, 0);
        params.push(u64::from(self.split));
        // The last element each operand's indices reach (every index the shader forms is at
        // most that), checked to fit the shader's 32-bit arithmetic.
        let last = |first: u64, strides: &[u64], matrix: u64| -> u64 {
            let spread: u64 = out[..nb].iter().zip(strides).map(|(&e, &s)| (e as u64).saturating_sub(1) * s).sum();
            first + spread + matrix
        };
        let reach = [
            last(first[0], &sa, rows.saturating_sub(1) * a_row + depth.saturating_sub(1) * a_k),
            last(first[1], &sb, depth.saturating_sub(1) * b_k + cols.saturating_sub(1) * b_col),
            first[2] + batch * rows * cols,
            // The tiles' rows, columns and steps of k run past the result's sides by up to
            // a tile (loads and stores there are skipped, but the counters are formed).
            rows + TILE.0,
            cols + TILE.1,
            depth + TILE_K.max(SPLIT_LANES),
        ];
        narrow(params, &reach, PARAMS)
    }

    /// The workgroups to dispatch for `params` (workgroups loop over what one dispatch of at
    /// most `most` per dimension does not cover), or `None` where the result is empty.
    pub fn groups(params: &[u32], most: [u32; 3]) -> Option<[u32; 3]> {
        let (rows, cols, batch) = (u64::from(params[0]), u64::from(params[1]), u64::from(params[3]));
        let want = match params[SPLIT] {
            1 => [cols.div_ceil(SPLIT_COLS), rows, batch],
            _ => [cols.div_ceil(TILE.1), rows.div_ceil(TILE.0), batch],
        };
        if want.contains(&0) {
            return None;
        }
        Some([0, 1, 2].map(|i| want[i].min(u64::from(most[i].min(65_535))) as u32))
    }
}

/// `params` padded to `words` words, or why not: a value, or an index the shader forms
/// (at most the largest of `reach`), past 32 bits.
fn narrow(mut params: Vec<u64>, reach: &[u64], words: usize) -> Result<Vec<u32>, String> {
    if let Some(big) = reach.iter().chain(&params).find(|&&v| v > u64::from(u32::MAX)) {
        return Err(format!("an index of {big} (library shaders index with 32 bits)"));
    }
    params.resize(words, 0);
    Ok(params.into_iter().map(|v| v as u32).collect())
}

/// The GEMM shader's parameters in image mode for convolution `c` (its padding, strides and
/// dilations as [`Product::Conv`] holds them): weights `[out channels, channels × taps]` times
/// the input's patches `[channels × taps, output positions]`, one batch index per batch
/// element and group.
fn conv_params(
    c: &ConvCall,
    (pad, stride, dilation): (&[u64; 2], &[u64; 2], &[u64; 2]),
    p: &Program,
    sizes: &Sizes,
    first: [u64; 3],
) -> Result<Vec<u32>, String> {
    let shape = |b: BufferId| -> Result<Vec<u64>, String> {
        let s = sizes.shape(p, b).map_err(|e| e.to_string())?;
        // 1-D as 2-D of height 1.
        let mut s: Vec<u64> = s.into_iter().map(|d| d as u64).collect();
        if s.len() == 3 {
            s.insert(2, 1);
        }
        Ok(s)
    };
    let (x, w, out) = (shape(c.x)?, shape(c.w)?, shape(c.out)?);
    let groups = c.groups as u64;
    let per_group = out[1] / groups;
    let taps = w[2] * w[3];
    let depth = w[1] * taps;
    let positions = out[2] * out[3];
    let image = x[2] * x[3];
    // m, n, k, batch; a's strides (rows, k); b's (unused: image mode); first elements; two
    // batch dims: the batch element (weights shared) and the group.
    let mut params =
        vec![per_group, positions, depth, out[0] * groups, depth, 1, 0, 1, first[0], first[1], first[2], 2];
    params.extend([out[0], 0, x[1] * image, groups, per_group * depth, w[1] * image]);
    params.resize(IMAGE, 0);
    let kernel = [taps, w[3], out[3], x[2], x[3]];
    params.extend([1].into_iter().chain(kernel).chain([
        stride[0],
        stride[1],
        pad[0],
        pad[1],
        dilation[0],
        dilation[1],
    ]));
    let less = |v: u64| v.saturating_sub(1);
    let reach = [
        first[0] + out[1] * depth,
        first[1] + x[0] * x[1] * image,
        first[2] + out[0] * out[1] * positions,
        // An output position's input coordinates before the padding is taken off.
        less(out[2]).saturating_mul(stride[0]).saturating_add(less(w[2]).saturating_mul(dilation[0])),
        less(out[3]).saturating_mul(stride[1]).saturating_add(less(w[3]).saturating_mul(dilation[1])),
        per_group + TILE.0,
        positions + TILE.1,
        depth + TILE_K,
    ];
    narrow(params, &reach, PARAMS)
}
