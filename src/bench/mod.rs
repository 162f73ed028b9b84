//! Benchmarks: the W0–W9 workloads, their floors, and the timing loop behind `ladder bench`;
//! the compile-time workloads C1–C4 of `ladder bench --compile` are in `compile.rs`, the
//! training steps T1–T2 of `ladder bench --train` in `train.rs`.
//!
//! The workloads are the ones `../shared/peers` runs on onnxruntime, XLA and tract (same
//! names, shapes, scales and structure; activations are graph inputs, parameters are
//! constants), so numbers compare side by side. Values come from ladder's own generator
//! (normal via Box–Muller), not NumPy's, so only timings compare, not outputs.
//!
//! Each measurement reports the median latency and `floor_ratio = floor / median`, where the
//! floor is measured in the same run: for memory-bound workloads a plain copy moving the same
//! bytes (every input and constant read once, the output written once; with `threads = 2`
//! the faster of one and two copying threads), for matmul-heavy ones (W0, W4, W5, W6, and the
//! W7 convolutions) the FLOPs at the `gemm` crate's own throughput on a 1024³ sgemm at that
//! thread count. A model given by file gets the larger of the two floors (FLOPs counted over
//! its statically shaped matmul, linear, conv and attention nodes, causal attention at half).
//! On the Vulkan backend the floors are the device's own, measured once in the same run
//! (`floors.rs`, [`DeviceFloors`]): the io bytes at its `vkCmdCopyBuffer` rate in the memory
//! plans use, or the FLOPs at its f32 FMA rate.
//!
//! Backends: [`prepare`] turns a graph into something runnable and is what `compile_ms`
//! times: the interpreter (single-threaded), a plan compiled for the CPU backend in native
//! mode (`CompileOptions::native_cpu`: Cranelift kernels, GEMM for f32 matmuls, `threads`
//! threads), or one for the Vulkan backend (a workload with a step it lacks, or a buffer
//! larger than the device binds, is [`BenchError::Unsupported`]). Timed calls hand back the
//! previous call's outputs (`Plan::run_into`), so a warm CPU run writes into them and
//! allocates nothing, as an embedder calling a plan in a loop would; the copy floor likewise
//! writes into a buffer it allocated once.
//!
//! `peak_bytes`: the working memory of one warm run beyond its inputs and outputs: the
//! plan's arena (allocated by the first run and kept), the attention kernel's scratch (kept
//! per thread between runs, over every thread that holds one), plus the heap's high-water
//! mark during the run above what was live when it began (other library-kernel scratch, the
//! interpreter's tensors), counted by [`CountingAlloc`] when the program installed it as its global
//! allocator (the `ladder` binary does), else not reported. For attention workloads
//! `scores_bytes` is what the materialised f32 score matrix `[batch..., L, S]` would take,
//! the O(S²) a flash-style kernel avoids.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use crate::builder::{BuildError, GraphBuilder};
use crate::interp::{self, Options};
use crate::ir::{AttrValue, DType, Dim, Graph, Shape, Value};
use crate::models::Rng;
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

mod compile;
mod floors;
mod memory;
mod train;

pub use compile::{
    compile_workload, compile_workload_names, scaling_bases, select_compile, time_compile, CompileMeasurement,
    CompileWorkload, Family, COMPILE_WORKLOADS,
};
pub use floors::{copy_floor_us, fma_peak_gflops, gemm_peak_gflops, DeviceFloors, Floors, DEVICE_COPY_BYTES};
pub use memory::CountingAlloc;
pub use train::{profile_train, select_train, time_train, TrainMeasurement, TRAIN_WORKLOADS};

/// Every built-in workload, in order.
pub const WORKLOADS: &[&str] = &[
    "W0_sgemm_1024",
    "W1_gelu_4M",
    "W1_gelu_16K",
    "W2_softmax_4096x1024",
    "W2_softmax_64x128",
    "W3_layernorm_4096x1024",
    "W4_mlp_256x1024x4096",
    "W5_attn_8x512x64",
    "W5_attn_causal",
    "W5_attn_S4096",
    "W6_encoder_s128_d256",
    "W7_conv_resnet_56x56x64",
    "W7_conv_depthwise_56x56x128",
    "W7_conv_stem_224",
    "W9_call_overhead_add16",
];

/// Layer-norm epsilon of the workloads.
pub const EPS: f64 = 1e-5;

/// Which floor a workload is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorKind {
    /// A copy of the bytes the workload must move (on the Vulkan backend: the bytes at the
    /// device's copy rate).
    Copy,
    /// Its FLOPs at the GEMM crate's measured throughput (on the Vulkan backend: at the
    /// device's f32 FMA rate).
    Gemm,
    /// The larger of the two (models given by file).
    Max,
}

/// A graph with its inputs and what its floor is made of.
pub struct Workload {
    pub name: String,
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub floor: FloorKind,
    /// Multiply-add FLOPs (2 per multiply-add), 0 when not counted.
    pub flops: f64,
    /// Bytes a perfect implementation moves: inputs and constants read once, outputs written once.
    pub io_bytes: usize,
    /// The outputs' part of `io_bytes` (what the copy floor writes; the rest it reads).
    pub out_bytes: usize,
    /// Where `graph` is a compiled artifact's stored rung: the artifact, which native plans
    /// compile from (only scheduling and kernel compilation, as loading it does).
    pub lowered: Option<Arc<crate::artifact::Artifact>>,
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("building workload {name}: {error}")]
    Build { name: String, error: BuildError },
    #[error("no workload matches `{0}` (workloads: {list})", list = WORKLOADS.join(", "))]
    NoMatch(String),
    #[error("no compile workload matches `{0}` (compile workloads: {list})", list = compile_workload_names())]
    NoCompileMatch(String),
    #[error("{0}")]
    Backend(String),
    /// The backend does not run this workload: a step it lacks when the plan is built, or a
    /// value or size it lacks at run time (`ExecError::Unsupported`).
    #[error("the backend cannot run it: {0}")]
    Unsupported(String),
    #[error("the run failed: {0}")]
    Run(String),
}

/// Where a benchmark runs: the runtime's backends.
pub use crate::runtime::BackendKind;

/// A graph made runnable by a backend.
pub trait Runnable: Send + Sync {
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, BenchError> {
        let mut out = Vec::new();
        self.run_into(inputs, &mut out)?;
        Ok(out)
    }

    /// Runs with `out` holding the previous call's outputs, which a backend may reuse (the
    /// CPU plan writes into them: what an embedder calling it in a loop gets). A value or size
    /// the backend has no implementation for (`ExecError::Unsupported`: a Vulkan `pow`
    /// exponent, a buffer larger than the device binds) is [`BenchError::Unsupported`].
    fn run_into(&self, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<(), BenchError>;

    /// Bytes of scratch memory kept between runs (the CPU plan's arena), 0 when none.
    fn arena_bytes(&self, _inputs: &[Tensor]) -> usize {
        0
    }
}

struct InterpRunnable(Arc<Graph>);

impl Runnable for InterpRunnable {
    fn run_into(&self, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<(), BenchError> {
        *out = interp::run(&self.0, inputs, &Options::default())
            .map(|o| o.outputs)
            .map_err(|e| BenchError::Run(e.to_string()))?;
        Ok(())
    }
}

impl Runnable for crate::runtime::Plan {
    fn run_into(&self, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<(), BenchError> {
        use crate::kernel::eval::ExecError;
        let mut o = crate::runtime::Outputs { outputs: std::mem::take(out), mutated_inputs: Vec::new() };
        let r = crate::runtime::Plan::run_into(self, inputs, &mut o).map_err(|e| match e {
            crate::RunError::Step { error: ExecError::Unsupported { .. }, .. } => {
                BenchError::Unsupported(e.to_string())
            }
            e => BenchError::Run(e.to_string()),
        });
        *out = o.outputs;
        r
    }

    fn arena_bytes(&self, inputs: &[Tensor]) -> usize {
        self.memory_report(inputs).map(|r| r.arena_bytes).unwrap_or(0)
    }
}

/// The bytes of the largest f32 score matrix `[batch..., L, S]` a statically shaped
/// attention node of `graph` would materialise (0 without one).
pub fn attention_scores_bytes(graph: &Graph) -> usize {
    graph
        .nodes()
        .filter(|(_, n)| n.op == OpKind::ScaledDotProductAttention)
        .filter_map(|(v, n)| {
            let out = graph.ty(v).shape.dims().iter().map(|d| d.as_const()).collect::<Option<Vec<u64>>>()?;
            let k = &graph.ty(*n.args.get(1)?).shape;
            let s = k.dims().get(k.rank().checked_sub(2)?)?.as_const()?;
            let rows: u64 = out[..out.len().checked_sub(1)?].iter().product();
            usize::try_from(rows.checked_mul(s)?.checked_mul(4)?).ok()
        })
        .max()
        .unwrap_or(0)
}

/// Makes `graph` runnable on `backend` with `threads` threads (what `compile_ms` times): the
/// interpreter, a plan compiled for the CPU backend in native mode, or one for the Vulkan
/// backend (a step it lacks: [`BenchError::Unsupported`]).
pub fn prepare(
    graph: &Graph,
    backend: BackendKind,
    threads: usize,
    native: Native,
) -> Result<Box<dyn Runnable>, BenchError> {
    match backend {
        BackendKind::Interp => Ok(Box::new(InterpRunnable(Arc::new(graph.clone())))),
        BackendKind::Cpu => Ok(Box::new(native.compile(graph, threads)?)),
        BackendKind::Vulkan => Ok(Box::new(
            crate::runtime::compile(graph, &crate::runtime::CompileOptions::vulkan()).map_err(|e| match e {
                crate::runtime::CompileError::Unsupported { reason, .. } => BenchError::Unsupported(reason),
                e => BenchError::Backend(format!("cannot compile for the vulkan backend: {e}")),
            })?,
        )),
    }
}

/// [`prepare`] for `w`: a workload from an artifact compiles from its stored rung.
fn prepare_workload(
    w: &Workload,
    backend: BackendKind,
    threads: usize,
    native: Native,
) -> Result<Box<dyn Runnable>, BenchError> {
    match (&w.lowered, backend) {
        (Some(a), BackendKind::Cpu) => Ok(Box::new(native.compile_artifact(a, threads)?)),
        _ => prepare(&w.graph, backend, threads, native),
    }
}

/// The switches of the CPU backend's native mode that `ladder bench` compares (both on by
/// default, as `CompileOptions::native_cpu` sets them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Native {
    /// Recover softmax, the norms, gelu and attention into library kernels.
    pub recover: bool,
    /// Pack constant matmul weights for ladder's GEMM kernel when the plan is built.
    pub pack_weights: bool,
}

impl Default for Native {
    fn default() -> Native {
        Native { recover: true, pack_weights: true }
    }
}

impl Native {
    fn options(self, threads: usize) -> Result<crate::runtime::CompileOptions, BenchError> {
        let mut options = crate::runtime::CompileOptions::native_cpu(threads)
            .map_err(|e| BenchError::Backend(format!("cpu backend: {e}")))?;
        options.recover = self.recover;
        options.pack_weights = self.pack_weights;
        Ok(options)
    }

    fn compile(self, graph: &Graph, threads: usize) -> Result<crate::Plan, BenchError> {
        crate::runtime::compile(graph, &self.options(threads)?)
            .map_err(|e| BenchError::Backend(format!("cannot compile for the cpu backend: {e}")))
    }

    /// A plan from `a`'s stored rung (its lowering mode wins over `recover`).
    fn compile_artifact(self, a: &crate::artifact::Artifact, threads: usize) -> Result<crate::Plan, BenchError> {
        a.compile(&self.options(threads)?)
            .map_err(|e| BenchError::Backend(format!("cannot compile the artifact for the cpu backend: {e}")))
    }
}

/// A rayon pool of `threads` workers, for one measurement.
fn pool(threads: usize) -> Result<rayon::ThreadPool, BenchError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| BenchError::Backend(format!("cannot start {threads} threads: {e}")))
}

/// Per-step median times of `w` compiled for the CPU backend with `threads` threads (in a
/// rayon pool of that size): [`crate::Plan::profile`] over `runs` runs.
pub fn profile(
    w: &Workload,
    threads: usize,
    runs: usize,
    native: Native,
) -> Result<Vec<crate::runtime::StepTime>, BenchError> {
    let threads = threads.max(1);
    let pool = pool(threads)?;
    pool.install(|| {
        let plan = match &w.lowered {
            Some(a) => native.compile_artifact(a, threads)?,
            None => native.compile(&w.graph, threads)?,
        };
        plan.profile(&w.inputs, runs).map_err(|e| BenchError::Run(e.to_string()))
    })
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// Normal(0, scale²) values (Box–Muller over ladder's generator), as f32.
fn normal(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let u1 = (rng.uniform() + 1.0) * 0.5; // (0, 1]
        let u1 = if u1 <= 0.0 { f64::MIN_POSITIVE } else { u1 };
        let u2 = (rng.uniform() + 1.0) * 0.5;
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        out.push((r * t.cos() * scale) as f32);
        out.push((r * t.sin() * scale) as f32);
    }
    out.truncate(n);
    out
}

fn tensor(rng: &mut Rng, shape: &[usize], scale: f64) -> Tensor {
    let n = shape.iter().product();
    // The length is the shape's product by construction.
    Tensor::from_f32(shape, normal(rng, n, scale)).expect("data matches its shape")
}

fn shape(dims: &[usize]) -> Shape {
    dims.iter().map(|&d| Dim::new(d as u64)).collect()
}

struct Builder {
    b: GraphBuilder,
    rng: Rng,
    inputs: Vec<Tensor>,
    io_bytes: usize,
}

impl Builder {
    fn new(name: &str) -> Builder {
        Builder { b: GraphBuilder::new(name), rng: Rng::new(0), inputs: Vec::new(), io_bytes: 0 }
    }

    fn input(&mut self, name: &str, dims: &[usize], scale: f64) -> Result<Value, BuildError> {
        let t = tensor(&mut self.rng, dims, scale);
        self.io_bytes += t.numel() * 4;
        self.inputs.push(t);
        self.b.input(name, DType::F32, shape(dims))
    }

    fn param(&mut self, name: &str, dims: &[usize], scale: f64, offset: f32) -> Result<Value, BuildError> {
        let mut t = tensor(&mut self.rng, dims, scale);
        if offset != 0.0 {
            let v: Vec<f32> = t.as_f32().unwrap_or(&[]).iter().map(|x| x + offset).collect();
            t = Tensor::from_f32(dims, v).expect("same shape");
        }
        self.io_bytes += t.numel() * 4;
        self.b.named_constant(name, t)
    }

    fn finish(mut self, name: &str, y: Value, floor: FloorKind, flops: f64) -> Result<Workload, BuildError> {
        let out_elems: usize = self.b.ty(y).shape.dims().iter().filter_map(|d| d.as_const()).product::<u64>() as usize;
        self.io_bytes += out_elems * 4;
        self.b.output("y", y)?;
        let graph = self.b.finish()?;
        let (inputs, io_bytes, out_bytes) = (self.inputs, self.io_bytes, out_elems * 4);
        Ok(Workload { name: name.to_string(), graph, inputs, floor, flops, io_bytes, out_bytes, lowered: None })
    }
}

fn gelu(b: &mut GraphBuilder, x: Value) -> Result<Value, BuildError> {
    b.gelu(x, "none")
}

fn attention(b: &mut GraphBuilder, q: Value, k: Value, v: Value, causal: bool, d: usize) -> Result<Value, BuildError> {
    b.op(
        OpKind::ScaledDotProductAttention,
        &[q, k, v],
        &[("causal", AttrValue::Bool(causal)), ("scale", AttrValue::Float(1.0 / (d as f64).sqrt()))],
    )
}

/// Builds one workload by name (the full name, as in [`WORKLOADS`]).
pub fn workload(name: &str) -> Result<Workload, BenchError> {
    build(name)
        .map_err(|error| BenchError::Build { name: name.to_string(), error })?
        .ok_or_else(|| BenchError::NoMatch(name.to_string()))
}

fn build(name: &str) -> Result<Option<Workload>, BuildError> {
    let mut w = Builder::new(name);
    match name {
        "W0_sgemm_1024" => {
            let x = w.input("x", &[1024, 1024], 1.0)?;
            let m = w.param("w", &[1024, 1024], 1.0, 0.0)?;
            let y = w.b.matmul(x, m)?;
            w.finish(name, y, FloorKind::Gemm, 2.0 * 1024f64.powi(3))
        }
        "W1_gelu_4M" | "W1_gelu_16K" => {
            let rows = if name.ends_with("4M") { 4096 } else { 16 };
            let x = w.input("x", &[rows, 1024], 1.0)?;
            let a = w.param("a", &[1024], 1.0, 0.0)?;
            let bias = w.param("b", &[1024], 1.0, 0.0)?;
            let u = w.b.mul(x, a)?;
            let u = w.b.add(u, bias)?;
            let y = gelu(&mut w.b, u)?;
            w.finish(name, y, FloorKind::Copy, 0.0)
        }
        "W2_softmax_4096x1024" | "W2_softmax_64x128" => {
            let dims: &[usize] = if name.contains("4096") { &[4096, 1024] } else { &[64, 128] };
            let x = w.input("x", dims, 3.0)?;
            let y = w.b.softmax(x, -1)?;
            w.finish(name, y, FloorKind::Copy, 0.0)
        }
        "W3_layernorm_4096x1024" => {
            let x = w.input("x", &[4096, 1024], 1.0)?;
            let g = w.param("w", &[1024], 1.0, 0.0)?;
            let bias = w.param("b", &[1024], 1.0, 0.0)?;
            let y = w.b.layer_norm(x, g, bias, EPS)?;
            w.finish(name, y, FloorKind::Copy, 0.0)
        }
        "W4_mlp_256x1024x4096" => {
            let x = w.input("x", &[256, 1024], 1.0)?;
            let w1 = w.param("w1", &[1024, 4096], 1.0 / 32.0, 0.0)?;
            let w2 = w.param("w2", &[4096, 1024], 1.0 / 64.0, 0.0)?;
            let h = w.b.matmul(x, w1)?;
            let h = gelu(&mut w.b, h)?;
            let o = w.b.matmul(h, w2)?;
            let y = w.b.add(o, x)?;
            w.finish(name, y, FloorKind::Gemm, 2.0 * 256.0 * 1024.0 * 4096.0 * 2.0)
        }
        "W5_attn_8x512x64" | "W5_attn_causal" | "W5_attn_S4096" => {
            // W5_attn_S4096 is ladder's own (no peer runs it): long context, for the
            // attention kernel's memory (`peak_bytes` against `scores_bytes`).
            let causal = name == "W5_attn_causal";
            let s = if name == "W5_attn_S4096" { 4096 } else { 512 };
            let q = w.input("q", &[1, 8, s, 64], 1.0)?;
            let k = w.input("k", &[1, 8, s, 64], 1.0)?;
            let v = w.input("v", &[1, 8, s, 64], 1.0)?;
            let y = attention(&mut w.b, q, k, v, causal, 64)?;
            let sf = s as f64;
            let f = 2.0 * 2.0 * 8.0 * sf * sf * 64.0;
            w.finish(name, y, FloorKind::Gemm, if causal { f / 2.0 } else { f })
        }
        "W6_encoder_s128_d256" => {
            let (s, d, ff, h) = (128usize, 256usize, 1024usize, 4usize);
            let x = w.input("x", &[1, s, d], 1.0)?;
            let ln1_w = w.param("ln1_w", &[d], 0.1, 1.0)?;
            let ln1_b = w.param("ln1_b", &[d], 0.1, 0.0)?;
            let wqkv = w.param("wqkv", &[d, 3 * d], 1.0 / 16.0, 0.0)?;
            let bqkv = w.param("bqkv", &[3 * d], 0.1, 0.0)?;
            let wo = w.param("wo", &[d, d], 1.0 / 16.0, 0.0)?;
            let bo = w.param("bo", &[d], 0.1, 0.0)?;
            let ln2_w = w.param("ln2_w", &[d], 0.1, 1.0)?;
            let ln2_b = w.param("ln2_b", &[d], 0.1, 0.0)?;
            let w1 = w.param("w1", &[d, ff], 1.0 / 16.0, 0.0)?;
            let b1 = w.param("b1", &[ff], 0.1, 0.0)?;
            let w2 = w.param("w2", &[ff, d], 1.0 / 32.0, 0.0)?;
            let b2 = w.param("b2", &[d], 0.1, 0.0)?;
            let b = &mut w.b;
            let hn = b.layer_norm(x, ln1_w, ln1_b, EPS)?;
            let qkv = b.matmul(hn, wqkv)?;
            let qkv = b.add(qkv, bqkv)?;
            let mut heads = Vec::new();
            for i in 0..3i64 {
                let part = b.op(
                    OpKind::Slice,
                    &[qkv],
                    &[
                        ("axis", AttrValue::Int(2)),
                        ("start", AttrValue::Int(i * d as i64)),
                        ("end", AttrValue::Int((i + 1) * d as i64)),
                    ],
                )?;
                let split = b.reshape(part, &[1, s as i64, h as i64, (d / h) as i64])?;
                heads.push(b.transpose(split, 1, 2)?);
            }
            let a = attention(b, heads[0], heads[1], heads[2], false, d / h)?;
            let a = b.transpose(a, 1, 2)?;
            let a = b.reshape(a, &[1, s as i64, d as i64])?;
            let a = b.matmul(a, wo)?;
            let a = b.add(a, bo)?;
            let x2 = b.add(x, a)?;
            let h2 = b.layer_norm(x2, ln2_w, ln2_b, EPS)?;
            let f = b.matmul(h2, w1)?;
            let f = b.add(f, b1)?;
            let f = gelu(b, f)?;
            let f = b.matmul(f, w2)?;
            let f = b.add(f, b2)?;
            let y = b.add(x2, f)?;
            let (sf, df, fff) = (s as f64, d as f64, ff as f64);
            let flops =
                2.0 * sf * df * 3.0 * df + 2.0 * 2.0 * sf * sf * df + 2.0 * sf * df * df + 2.0 * 2.0 * sf * df * fff;
            w.finish(name, y, FloorKind::Gemm, flops)
        }
        // Convolutions (ladder's own: no peer script runs them; tools/bench_conv.py times
        // onnxruntime on the same graphs). A ResNet basic block at 56x56x64, a MobileNet-style
        // depthwise 3x3 + pointwise block at 56x56x128, and a ResNet stem (7x7, stride 2, 3
        // input channels) at 224x224.
        "W7_conv_resnet_56x56x64" => {
            let x = w.input("x", &[1, 64, 56, 56], 1.0)?;
            let w1 = w.param("w1", &[64, 64, 3, 3], 1.0 / 24.0, 0.0)?;
            let b1 = w.param("b1", &[64], 0.1, 0.0)?;
            let w2 = w.param("w2", &[64, 64, 3, 3], 1.0 / 24.0, 0.0)?;
            let b2 = w.param("b2", &[64], 0.1, 0.0)?;
            let pad = ("padding", AttrValue::Ints(vec![1, 1]));
            let h = w.b.op(OpKind::Conv2d, &[x, w1, b1], std::slice::from_ref(&pad))?;
            let h = w.b.relu(h)?;
            let y = w.b.op(OpKind::Conv2d, &[h, w2, b2], &[pad])?;
            let y = w.b.add(y, x)?;
            let y = w.b.relu(y)?;
            w.finish(name, y, FloorKind::Gemm, 2.0 * 2.0 * 64.0 * 576.0 * 3136.0)
        }
        "W7_conv_depthwise_56x56x128" => {
            let x = w.input("x", &[1, 128, 56, 56], 1.0)?;
            let dw = w.param("dw", &[128, 1, 3, 3], 1.0 / 3.0, 0.0)?;
            let db = w.param("db", &[128], 0.1, 0.0)?;
            let pw = w.param("pw", &[128, 128, 1, 1], 1.0 / 11.0, 0.0)?;
            let pb = w.param("pb", &[128], 0.1, 0.0)?;
            let h = w.b.op(
                OpKind::Conv2d,
                &[x, dw, db],
                &[("padding", AttrValue::Ints(vec![1, 1])), ("groups", AttrValue::Int(128))],
            )?;
            let h = w.b.relu(h)?;
            let y = w.b.op(OpKind::Conv2d, &[h, pw, pb], &[])?;
            let y = w.b.relu(y)?;
            w.finish(name, y, FloorKind::Gemm, 2.0 * 128.0 * 9.0 * 3136.0 + 2.0 * 128.0 * 128.0 * 3136.0)
        }
        "W7_conv_stem_224" => {
            let x = w.input("x", &[1, 3, 224, 224], 1.0)?;
            let k = w.param("w", &[64, 3, 7, 7], 1.0 / 12.0, 0.0)?;
            let bias = w.param("b", &[64], 0.1, 0.0)?;
            let y = w.b.op(
                OpKind::Conv2d,
                &[x, k, bias],
                &[("stride", AttrValue::Ints(vec![2, 2])), ("padding", AttrValue::Ints(vec![3, 3]))],
            )?;
            let y = w.b.relu(y)?;
            w.finish(name, y, FloorKind::Gemm, 2.0 * 64.0 * 147.0 * 12544.0)
        }
        "W9_call_overhead_add16" => {
            let x = w.input("x", &[16], 1.0)?;
            let one = w.b.constant(Tensor::scalar_f32(1.0))?;
            w.io_bytes += 4;
            let y = w.b.add(x, one)?;
            w.finish(name, y, FloorKind::Copy, 0.0)
        }
        _ => return Ok(None),
    }
    .map(Some)
}

/// The workloads whose names start with any of `prefixes` (all when empty), in order.
pub fn select(prefixes: &[String]) -> Result<Vec<&'static str>, BenchError> {
    let mut out = Vec::new();
    for &w in WORKLOADS {
        if prefixes.is_empty() || prefixes.iter().any(|p| w.starts_with(p.as_str())) {
            out.push(w);
        }
    }
    for p in prefixes {
        if !WORKLOADS.iter().any(|w| w.starts_with(p.as_str())) {
            return Err(BenchError::NoMatch(p.clone()));
        }
    }
    Ok(out)
}

/// A model from a file as a workload: `inputs` as given; io bytes are the inputs, the
/// graph's constants and the outputs; FLOPs are counted over statically shaped matmul-family,
/// conv and attention nodes.
pub fn model_workload(name: &str, graph: Graph, inputs: Vec<Tensor>) -> Result<Workload, BenchError> {
    let outputs = prepare(&graph, BackendKind::Interp, 1, Native::default())?.run(&inputs)?;
    let bytes = |t: &Tensor| t.numel() * t.dtype().size_bytes();
    // The outputs' sizes as this run has them (symbolic dims included).
    let out_bytes: usize = outputs.iter().map(bytes).sum();
    let mut io_bytes: usize = inputs.iter().map(bytes).sum::<usize>() + out_bytes;
    io_bytes += graph.blobs().map(|(_, b)| bytes(&b.tensor)).sum::<usize>();
    // Bind size symbols from the inputs' shapes, to count FLOPs of symbolic nodes too.
    let mut bound: Vec<(String, u64)> = Vec::new();
    for (&v, t) in graph.inputs().iter().zip(&inputs) {
        for (d, &n) in graph.ty(v).shape.dims().iter().zip(t.shape()) {
            if let Some(sym) = d.as_symbol() {
                bound.push((sym.to_string(), n as u64));
            }
        }
    }
    let lookup = |s: &str| bound.iter().find(|(name, _)| name == s).map(|&(_, n)| n);
    let flops = graph_flops_with(&graph, &lookup);
    Ok(Workload {
        name: name.to_string(),
        graph,
        inputs,
        floor: FloorKind::Max,
        flops,
        io_bytes,
        out_bytes,
        lowered: None,
    })
}

/// 2 × multiply-adds of the statically shaped matmul, linear, conv and attention nodes.
pub fn graph_flops(graph: &Graph) -> f64 {
    graph_flops_with(graph, &|_| None)
}

/// [`graph_flops`] with size symbols bound by `lookup` (nodes whose shapes stay unknown
/// count 0).
pub fn graph_flops_with(graph: &Graph, lookup: &dyn Fn(&str) -> Option<u64>) -> f64 {
    let size = |d: &Dim| d.eval(lookup).ok();
    let numel = |s: &Shape| -> Option<f64> { s.dims().iter().map(|d| size(d).map(|n| n as f64)).product() };
    let mut total = 0.0;
    for (v, node) in graph.nodes() {
        let out = &graph.ty(v).shape;
        let arg = |i: usize| node.args.get(i).map(|&a| &graph.ty(a).shape);
        let last = |s: &Shape, back: usize| s.dims().get(s.rank().wrapping_sub(back)).and_then(size);
        let f = match node.op {
            OpKind::Matmul => arg(0).and_then(|a| {
                let k = if node.attrs.bool("transpose_a") { last(a, 2) } else { last(a, 1) };
                Some(numel(out)? * k? as f64)
            }),
            OpKind::Bmm | OpKind::Addmm => {
                arg(if node.op == OpKind::Addmm { 1 } else { 0 }).and_then(|a| Some(numel(out)? * last(a, 1)? as f64))
            }
            OpKind::Linear => arg(0).and_then(|a| Some(numel(out)? * last(a, 1)? as f64)),
            OpKind::Conv | OpKind::Conv2d => arg(1).and_then(|w| {
                let per_out = numel(w)? / size(w.dims().first()?)? as f64;
                Some(numel(out)? * per_out)
            }),
            OpKind::ScaledDotProductAttention => arg(1).and_then(|k| {
                // q k^T and p v: 2 * (out elements) * key length; causal does half the work
                // (as the peers count it).
                let half = if node.attrs.bool("causal") { 0.5 } else { 1.0 };
                Some(2.0 * numel(out)? * last(k, 2)? as f64 * half)
            }),
            _ => None,
        };
        total += 2.0 * f.unwrap_or(0.0);
    }
    total
}

// ---------------------------------------------------------------------------------------------
// Floors and timing
// ---------------------------------------------------------------------------------------------

/// Median and minimum of a timing, in microseconds, and how many runs it took.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub median_us: f64,
    pub min_us: f64,
    pub runs: usize,
}

/// Times `f`: `runs` calls after one warm-up when given; otherwise as the peers' scripts do
/// (warm-up of at least 3 calls and 0.15 s, then calls until 0.5 s and at least 10 have
/// passed, at most 20000; a workload slower than 0.1 s a call gets 1 warm-up and 5 calls,
/// slower than 1 s gets 3). The first error `f` returns ends it.
pub fn time<E>(runs: Option<usize>, mut f: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    let t0 = Instant::now();
    f()?;
    let first = t0.elapsed().as_secs_f64();
    let (min_runs, min_time, max_runs) = match runs {
        Some(n) => (n.max(1), 0.0, n.max(1)),
        None if first > 1.0 => (3, 0.0, 3),
        None if first > 0.1 => (5, 0.0, 5),
        None => {
            let w = Instant::now();
            let mut k = 0;
            while k < 3 || w.elapsed().as_secs_f64() < 0.15 {
                f()?;
                k += 1;
            }
            (10, 0.5, 20_000)
        }
    };
    let mut times = Vec::with_capacity(min_runs);
    let start = Instant::now();
    while times.len() < max_runs && (times.len() < min_runs || start.elapsed().as_secs_f64() < min_time) {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(Timing { median_us: times[times.len() / 2], min_us: times[0], runs: times.len() })
}

/// One benchmark result.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub workload: String,
    pub backend: BackendKind,
    pub threads: usize,
    pub timing: Timing,
    pub compile_ms: f64,
    pub floor: FloorKind,
    pub floor_us: f64,
    pub floor_ratio: f64,
    pub io_bytes: usize,
    pub flops: f64,
    /// Working memory of one warm run (see the module docs); `None` without
    /// [`CountingAlloc`] installed.
    pub peak_bytes: Option<usize>,
    /// Bytes of the materialised attention scores, 0 for workloads without attention.
    pub scores_bytes: usize,
}

impl Measurement {
    /// Achieved bandwidth over the workload's io bytes (GB/s).
    pub fn gbps(&self) -> f64 {
        self.io_bytes as f64 / (self.timing.median_us * 1e3)
    }

    /// Achieved GFLOP/s (0 when FLOPs are not counted).
    pub fn gflops(&self) -> f64 {
        self.flops / (self.timing.median_us * 1e3)
    }

    #[cfg(feature = "cli")]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "workload": self.workload,
            "backend": self.backend.name(),
            "threads": self.threads,
            "median_us": self.timing.median_us,
            "min_us": self.timing.min_us,
            "runs": self.timing.runs,
            "floor_us": self.floor_us,
            "floor_kind": match self.floor { FloorKind::Copy => "copy", FloorKind::Gemm => "gemm", FloorKind::Max => "max" },
            "floor_ratio": self.floor_ratio,
            "compile_ms": self.compile_ms,
            "io_bytes": self.io_bytes,
            "gb_per_s": self.gbps(),
            "flops": self.flops,
            "gflop_per_s": self.gflops(),
            "peak_bytes": self.peak_bytes,
            "scores_bytes": self.scores_bytes,
            "isa": crate::backend::cpu::isa::active().name(),
            "isa_cap": crate::backend::cpu::isa::max_isa().name(),
            "cpu_isa": crate::backend::cpu::isa::detected().name(),
            "gemm_crate_isa": crate::backend::cpu::isa::gemm_crate_isa().name(),
        })
    }
}

/// Prepares and times `w` on `backend` with `threads` threads (in a rayon pool of that
/// size), and measures its floor in the same pool.
pub fn run(
    w: &Workload,
    backend: BackendKind,
    threads: usize,
    runs: Option<usize>,
    floors: &mut Floors,
    native: Native,
) -> Result<Measurement, BenchError> {
    let threads = threads.max(1);
    let pool = pool(threads)?;
    pool.install(|| {
        let t = Instant::now();
        let runnable = prepare_workload(w, backend, threads, native)?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut out = Vec::new();
        let timing = time(runs, || runnable.run_into(&w.inputs, black_box(&mut out)))?;
        // One more warm run, for the heap's high-water mark above what is live before it.
        let peak_bytes = if CountingAlloc::installed() {
            let arena = runnable.arena_bytes(&w.inputs);
            let base = CountingAlloc::reset_peak();
            runnable.run_into(&w.inputs, black_box(&mut out))?;
            let scratch = crate::backend::cpu::attention::scratch_bytes();
            Some(arena + scratch + CountingAlloc::peak().saturating_sub(base))
        } else {
            None
        };
        let floor_us = match backend {
            BackendKind::Vulkan => floors.device_floor_us(w)?,
            _ => floors.floor_us(w, threads),
        };
        Ok(Measurement {
            workload: w.name.clone(),
            backend,
            threads,
            timing,
            compile_ms,
            floor: w.floor,
            floor_us,
            floor_ratio: floor_us / timing.median_us,
            io_bytes: w.io_bytes,
            flops: w.flops,
            peak_bytes,
            scores_bytes: attention_scores_bytes(&w.graph),
        })
    })
}

/// Makes tensors with the given shapes and data, for callers that build inputs by hand.
pub fn f32_tensor(shape: &[usize], data: Vec<f32>) -> Option<Tensor> {
    Tensor::new(shape.to_vec(), TensorData::F32(data)).ok()
}
