//! Compile-time benchmarks (`ladder bench --compile`): graphs of a thousand to a hundred
//! thousand nodes, timed through [`crate::compile`] for the CPU backend in native mode (the
//! same call [`super::prepare`] makes, so what `compile_ms` reports for the W workloads).
//!
//! Four families, each at several sizes, so that a cost growing faster than the graph shows
//! as a scaling exponent above 1 (time ratio against node ratio, both taken from the family's
//! smallest size measured):
//!
//! - C1 `chain`: one long elementwise chain, `h ← exp(-½·h²) + x` (four nodes a link, each
//!   link reading the input again): fusion cuts it at the emitter's depth bound, so it
//!   stresses scheduling, merging and code generation of many long kernels.
//! - C2 `rows`: the chain with a row reduction and its broadcast twice a link, a softmax-like
//!   `e = exp(½(h - mean(h))); h ← 128·e / sum(e) + x` (eight nodes a link; centred by the
//!   mean, not the maximum, so recovery finds no softmax and fusion decides every kernel).
//! - C3 `encoder`: a stack of pre-norm transformer encoder blocks (37 nodes each, weights
//!   included), the W6 block at sequence 128 and width 64: what an exported BERT-sized model
//!   gives the compiler (layer norms, matmuls with bias epilogues, attention, gelu).
//! - C4 `resnet`: a stack of ResNet basic blocks (two 3×3 convolutions with biases and ReLUs
//!   and a residual add, 9 nodes each) on 16 channels of 32×32.
//!
//! Activations have more than 4096 elements (constant folding's `max_elements`), as in real
//! models: smaller ones would have every bias broadcast folded into a blob of its own, work
//! that constant folding's fuel spreads over more simplifier rounds the more blocks there are.
//!
//! A workload's size is its node count (inputs and constants included), blocks being added
//! until it is reached. Values stay bounded however long the graph (each chain link is
//! contractive, every encoder block normalises), so a small instance can be checked against
//! the interpreter, which the tests do.
//!
//! Timing: the first compilation is timed and, when it takes over
//! [`SINGLE_RUN_MS`], it is the measurement; otherwise it only warms up, and as many more as
//! fit in about [`BUDGET_MS`] (at least 3, at most 10) give the median. `--runs N` times N
//! compilations instead, with no warm-up. `heap_peak_bytes`, when the binary counts its heap
//! ([`super::CountingAlloc`]), is the heap's high-water mark during the first compilation
//! above what was live before it: the pipeline's rungs, the schedule, the plan and its packed
//! weights, on every thread. Cranelift's code memory is mapped by the JIT module and not
//! counted.

use std::time::Instant;

use crate::builder::BuildError;
use crate::ir::{AttrValue, Graph, Value};
use crate::ops::OpKind;
use crate::tensor::Tensor;

use super::{pool, BenchError, Builder, CountingAlloc, FloorKind, Native, Timing, EPS};

/// A first compilation slower than this (in milliseconds) is the only one timed.
pub const SINGLE_RUN_MS: f64 = 2000.0;

/// Roughly how long the repeated compilations of one measurement take, in milliseconds.
pub const BUDGET_MS: f64 = 3000.0;

/// The families of compile workloads (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Chain,
    Rows,
    Encoder,
    Resnet,
}

impl Family {
    /// Every family, in order.
    pub const ALL: [Family; 4] = [Family::Chain, Family::Rows, Family::Encoder, Family::Resnet];

    /// The workload name's prefix: `C1_chain`, ...
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Chain => "C1_chain",
            Family::Rows => "C2_rows",
            Family::Encoder => "C3_encoder",
            Family::Resnet => "C4_resnet",
        }
    }

    /// The smallest graph of the family: its inputs and one block.
    pub fn min_nodes(self) -> usize {
        match self {
            Family::Chain => 6,
            Family::Rows => 12,
            Family::Encoder => 38,
            Family::Resnet => 10,
        }
    }

    /// The family's graph with at least `nodes` nodes (and at least one block), named `name`.
    pub fn build(self, name: &str, nodes: usize) -> Result<CompileWorkload, BenchError> {
        let graph_and_inputs = match self {
            Family::Chain => chain(name, nodes, false),
            Family::Rows => chain(name, nodes, true),
            Family::Encoder => encoder(name, nodes),
            Family::Resnet => resnet(name, nodes),
        };
        let (graph, inputs) = graph_and_inputs.map_err(|error| BenchError::Build { name: name.to_string(), error })?;
        Ok(CompileWorkload { name: name.to_string(), family: self, graph, inputs })
    }
}

/// Every built-in compile workload: name, family and target node count, in order.
pub const COMPILE_WORKLOADS: &[(&str, Family, usize)] = &[
    ("C1_chain_1k", Family::Chain, 1_000),
    ("C1_chain_4k", Family::Chain, 4_000),
    ("C1_chain_16k", Family::Chain, 16_000),
    ("C1_chain_100k", Family::Chain, 100_000),
    ("C2_rows_1k", Family::Rows, 1_000),
    ("C2_rows_4k", Family::Rows, 4_000),
    ("C2_rows_16k", Family::Rows, 16_000),
    ("C2_rows_100k", Family::Rows, 100_000),
    ("C3_encoder_1k", Family::Encoder, 1_000),
    ("C3_encoder_4k", Family::Encoder, 4_000),
    ("C3_encoder_16k", Family::Encoder, 16_000),
    ("C4_resnet_1k", Family::Resnet, 1_000),
    ("C4_resnet_4k", Family::Resnet, 4_000),
    ("C4_resnet_16k", Family::Resnet, 16_000),
];

/// A graph to compile, with inputs that run it.
pub struct CompileWorkload {
    pub name: String,
    pub family: Family,
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
}

impl CompileWorkload {
    /// Nodes of the graph as built (inputs and constants included).
    pub fn nodes(&self) -> usize {
        self.graph.len()
    }
}

/// Builds one compile workload by its full name (as in [`COMPILE_WORKLOADS`]).
pub fn compile_workload(name: &str) -> Result<CompileWorkload, BenchError> {
    let &(_, family, nodes) = COMPILE_WORKLOADS
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| BenchError::NoCompileMatch(name.to_string()))?;
    family.build(name, nodes)
}

/// The compile workloads whose names start with any of `prefixes` (all when empty), in order.
pub fn select_compile(prefixes: &[String]) -> Result<Vec<&'static str>, BenchError> {
    if let Some(p) = prefixes.iter().find(|p| !COMPILE_WORKLOADS.iter().any(|(w, _, _)| w.starts_with(p.as_str()))) {
        return Err(BenchError::NoCompileMatch(p.clone()));
    }
    Ok(COMPILE_WORKLOADS
        .iter()
        .map(|&(w, _, _)| w)
        .filter(|w| prefixes.is_empty() || prefixes.iter().any(|p| w.starts_with(p.as_str())))
        .collect())
}

/// The names of every compile workload, for messages.
pub fn compile_workload_names() -> String {
    COMPILE_WORKLOADS.iter().map(|(w, _, _)| *w).collect::<Vec<_>>().join(", ")
}

// ---------------------------------------------------------------------------------------------
// The graphs
// ---------------------------------------------------------------------------------------------

fn scalar(w: &mut Builder, value: f32) -> Result<Value, BuildError> {
    w.b.constant(Tensor::scalar_f32(value))
}

/// C1 (`rows == false`) and C2 (`rows == true`) on `x: f32[16, 128]`.
fn chain(name: &str, nodes: usize, rows: bool) -> Result<(Graph, Vec<Tensor>), BuildError> {
    let mut w = Builder::new(name);
    let x = w.input("x", &[16, 128], 1.0)?;
    let mut h = x;
    if rows {
        let (half, width) = (scalar(&mut w, 0.5)?, scalar(&mut w, 128.0)?);
        loop {
            let b = &mut w.b;
            let m = b.mean(h, &[-1], true)?;
            let u = b.sub(h, m)?;
            let u = b.mul(u, half)?;
            let e = b.exp(u)?;
            let z = b.sum(e, &[-1], true)?;
            let p = b.div(e, z)?;
            let p = b.mul(p, width)?;
            h = b.add(p, x)?;
            if b.graph().len() >= nodes {
                break;
            }
        }
    } else {
        let minus_half = scalar(&mut w, -0.5)?;
        loop {
            let b = &mut w.b;
            let sq = b.mul(h, h)?;
            let sq = b.mul(sq, minus_half)?;
            let e = b.exp(sq)?;
            h = b.add(e, x)?;
            if b.graph().len() >= nodes {
                break;
            }
        }
    }
    finish(w, name, h)
}

/// C3: pre-norm encoder blocks (W6's, at sequence 128, width 64, 4 heads, feed-forward 128).
fn encoder(name: &str, nodes: usize) -> Result<(Graph, Vec<Tensor>), BuildError> {
    let (s, d, ff, heads) = (128usize, 64usize, 128usize, 4usize);
    let mut w = Builder::new(name);
    let mut x = w.input("x", &[1, s, d], 1.0)?;
    for i in 0.. {
        let ln1_w = w.param(&format!("b{i}.ln1_w"), &[d], 0.1, 1.0)?;
        let ln1_b = w.param(&format!("b{i}.ln1_b"), &[d], 0.1, 0.0)?;
        let wqkv = w.param(&format!("b{i}.wqkv"), &[d, 3 * d], 1.0 / 8.0, 0.0)?;
        let bqkv = w.param(&format!("b{i}.bqkv"), &[3 * d], 0.1, 0.0)?;
        let wo = w.param(&format!("b{i}.wo"), &[d, d], 1.0 / 8.0, 0.0)?;
        let bo = w.param(&format!("b{i}.bo"), &[d], 0.1, 0.0)?;
        let ln2_w = w.param(&format!("b{i}.ln2_w"), &[d], 0.1, 1.0)?;
        let ln2_b = w.param(&format!("b{i}.ln2_b"), &[d], 0.1, 0.0)?;
        let w1 = w.param(&format!("b{i}.w1"), &[d, ff], 1.0 / 8.0, 0.0)?;
        let b1 = w.param(&format!("b{i}.b1"), &[ff], 0.1, 0.0)?;
        let w2 = w.param(&format!("b{i}.w2"), &[ff, d], 1.0 / 16.0, 0.0)?;
        let b2 = w.param(&format!("b{i}.b2"), &[d], 0.1, 0.0)?;
        let b = &mut w.b;
        let hn = b.layer_norm(x, ln1_w, ln1_b, EPS)?;
        let qkv = b.matmul(hn, wqkv)?;
        let qkv = b.add(qkv, bqkv)?;
        let mut qkv_heads = Vec::new();
        for part in 0..3i64 {
            let slice = b.op(
                OpKind::Slice,
                &[qkv],
                &[
                    ("axis", AttrValue::Int(2)),
                    ("start", AttrValue::Int(part * d as i64)),
                    ("end", AttrValue::Int((part + 1) * d as i64)),
                ],
            )?;
            let split = b.reshape(slice, &[1, s as i64, heads as i64, (d / heads) as i64])?;
            qkv_heads.push(b.transpose(split, 1, 2)?);
        }
        let a = super::attention(b, qkv_heads[0], qkv_heads[1], qkv_heads[2], false, d / heads)?;
        let a = b.transpose(a, 1, 2)?;
        let a = b.reshape(a, &[1, s as i64, d as i64])?;
        let a = b.matmul(a, wo)?;
        let a = b.add(a, bo)?;
        let x2 = b.add(x, a)?;
        let h2 = b.layer_norm(x2, ln2_w, ln2_b, EPS)?;
        let f = b.matmul(h2, w1)?;
        let f = b.add(f, b1)?;
        let f = super::gelu(b, f)?;
        let f = b.matmul(f, w2)?;
        let f = b.add(f, b2)?;
        x = b.add(x2, f)?;
        if b.graph().len() >= nodes {
            break;
        }
    }
    finish(w, name, x)
}

/// C4: ResNet basic blocks on `x: f32[1, 16, 32, 32]`.
fn resnet(name: &str, nodes: usize) -> Result<(Graph, Vec<Tensor>), BuildError> {
    let c = 16usize;
    let mut w = Builder::new(name);
    let mut x = w.input("x", &[1, c, 32, 32], 1.0)?;
    // Each convolution's gain is about 1/2, so a block grows its input by at most about 1.25.
    let scale = 0.5 / ((9 * c) as f64).sqrt();
    for i in 0.. {
        let w1 = w.param(&format!("b{i}.w1"), &[c, c, 3, 3], scale, 0.0)?;
        let b1 = w.param(&format!("b{i}.b1"), &[c], 0.1, 0.0)?;
        let w2 = w.param(&format!("b{i}.w2"), &[c, c, 3, 3], scale, 0.0)?;
        let b2 = w.param(&format!("b{i}.b2"), &[c], 0.1, 0.0)?;
        let b = &mut w.b;
        let pad = ("padding", AttrValue::Ints(vec![1, 1]));
        let h = b.op(OpKind::Conv2d, &[x, w1, b1], std::slice::from_ref(&pad))?;
        let h = b.relu(h)?;
        let h = b.op(OpKind::Conv2d, &[h, w2, b2], &[pad])?;
        let h = b.add(h, x)?;
        x = b.relu(h)?;
        if b.graph().len() >= nodes {
            break;
        }
    }
    finish(w, name, x)
}

fn finish(w: Builder, name: &str, y: Value) -> Result<(Graph, Vec<Tensor>), BuildError> {
    let work = w.finish(name, y, FloorKind::Copy, 0.0)?;
    Ok((work.graph, work.inputs))
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

/// One compile-time measurement.
#[derive(Clone, Debug)]
pub struct CompileMeasurement {
    pub workload: String,
    pub family: Family,
    pub threads: usize,
    /// Nodes of the graph compiled.
    pub nodes: usize,
    /// Steps of the compiled program (kernels, library calls, GEMMs).
    pub steps: usize,
    /// Of the program's kernels, those compiled to native code.
    pub native_kernels: usize,
    /// Compile times, in microseconds.
    pub timing: Timing,
    /// The heap's high-water mark during the first compilation above what was live before,
    /// when the program counts its heap ([`CountingAlloc`]).
    pub heap_peak_bytes: Option<usize>,
}

impl CompileMeasurement {
    /// The median compile time in milliseconds.
    pub fn median_ms(&self) -> f64 {
        self.timing.median_us / 1e3
    }

    /// Median microseconds per node.
    pub fn us_per_node(&self) -> f64 {
        self.timing.median_us / self.nodes.max(1) as f64
    }

    /// `(time ratio, exponent)` against `base` (the same family's smallest measurement):
    /// the exponent `e` with `time ratio = node ratio ^ e`, 1 for linear scaling; `None` when
    /// `base` is this size.
    pub fn scaling(&self, base: &CompileMeasurement) -> Option<(f64, f64)> {
        let (ratio, nodes) = (self.timing.median_us / base.timing.median_us, self.nodes as f64 / base.nodes as f64);
        (nodes > 1.0).then(|| (ratio, ratio.ln() / nodes.ln()))
    }

    #[cfg(feature = "cli")]
    pub fn to_json(&self, base: Option<&CompileMeasurement>) -> serde_json::Value {
        let scaling = base.and_then(|b| self.scaling(b));
        serde_json::json!({
            "workload": self.workload,
            "family": self.family.prefix(),
            "threads": self.threads,
            "nodes": self.nodes,
            "steps": self.steps,
            "native_kernels": self.native_kernels,
            "median_ms": self.median_ms(),
            "min_ms": self.timing.min_us / 1e3,
            "runs": self.timing.runs,
            "us_per_node": self.us_per_node(),
            "base_workload": base.map(|b| b.workload.clone()),
            "time_ratio": scaling.map(|s| s.0),
            "scaling_exponent": scaling.map(|s| s.1),
            "heap_peak_bytes": self.heap_peak_bytes,
        })
    }
}

/// For each measurement, the index of its base: the measurement of the same family at the
/// same thread count with the fewest nodes.
pub fn scaling_bases(results: &[CompileMeasurement]) -> Vec<usize> {
    (0..results.len())
        .map(|i| {
            let m = &results[i];
            (0..results.len())
                .filter(|&j| results[j].family == m.family && results[j].threads == m.threads)
                .min_by_key(|&j| (results[j].nodes, j))
                .unwrap_or(i)
        })
        .collect()
}

/// Times compiling `w` for the CPU backend in native mode with `threads` threads (in a rayon
/// pool of that size), as the module docs describe.
pub fn time_compile(
    w: &CompileWorkload,
    threads: usize,
    runs: Option<usize>,
    native: Native,
) -> Result<CompileMeasurement, BenchError> {
    let threads = threads.max(1);
    pool(threads)?.install(|| {
        let compile_us = || -> Result<(crate::Plan, f64), BenchError> {
            let t = Instant::now();
            let plan = native.compile(&w.graph, threads)?;
            Ok((plan, t.elapsed().as_secs_f64() * 1e6))
        };
        let counting = CountingAlloc::installed();
        let base = CountingAlloc::reset_peak();
        let (plan, first_us) = compile_us()?;
        let heap_peak_bytes = counting.then(|| CountingAlloc::peak().saturating_sub(base));
        let steps = plan.program().map_or(0, |p| p.steps.len());
        let native_kernels = plan.native_kernels();
        drop(plan);
        let mut times = Vec::new();
        match runs {
            Some(n) => {
                times.push(first_us);
                for _ in 1..n.max(1) {
                    times.push(compile_us()?.1);
                }
            }
            None if first_us / 1e3 > SINGLE_RUN_MS => times.push(first_us),
            None => {
                let n = (BUDGET_MS * 1e3 / first_us.max(1.0)).round().clamp(3.0, 10.0) as usize;
                for _ in 0..n {
                    times.push(compile_us()?.1);
                }
            }
        }
        times.sort_by(f64::total_cmp);
        let timing = Timing { median_us: times[times.len() / 2], min_us: times[0], runs: times.len() };
        Ok(CompileMeasurement {
            workload: w.name.clone(),
            family: w.family,
            threads,
            nodes: w.nodes(),
            steps,
            native_kernels,
            timing,
            heap_peak_bytes,
        })
    })
}
