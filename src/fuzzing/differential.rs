//! The fast differential check of a backend (the CPU's native plans, or the Vulkan device's):
//! one compiled plan per case structure, many data sets per plan, each checked against the
//! interpreter under the tolerance table.
//!
//! Compiling a plan (lowering, scheduling, Cranelift) costs far more than running a
//! single-op graph, so [`check_native`] splits the fuzz bytes into a case's *structure* and
//! its *data*:
//!
//! ```text
//! [op] [structure: STRUCTURE_BYTES] [data set 1: DATA_SET_BYTES] [data set 2] ...
//! ```
//!
//! - the first byte picks the high-level op, and at most [`STRUCTURE_BYTES`] after it are
//!   [`generate_case`]'s bytes: they fix the argument types, attributes and graph, and the
//!   case's own inputs, which are the first data set. An input no longer than
//!   `1 + STRUCTURE_BYTES` is therefore exactly the numerics case that
//!   `check_op_on(op, bytes, &run_on_cpu)` checks.
//! - every further [`DATA_SET_BYTES`] (the last chunk may be shorter; at most
//!   [`MAX_DATA_SETS`] sets in all) draw another data set for the same graph: new values for
//!   its size symbols, then every input with [`random_data`]. A mutation there reuses the
//!   compiled plan.
//!
//! Plans live in a [`PlanCache`] keyed by the graph's text, bounded by entry count and
//! evicted least recently used, each cache for one [`Target`]; [`PlanCache::global`] is the
//! process-wide one the `interp_cpu` fuzz target uses, [`PlanCache::global_vulkan`] the
//! `interp_vulkan` target's. A cached plan is exactly what compiling the same text again would
//! give, so the cache changes speed only, never an outcome.
//!
//! On [`Target::Vulkan`] a program the device has no step for (a library call it lacks) is
//! refused when it compiles, with a typed error; such an input counts as
//! [`DiffOutcome::refused`], never as a finding. Every other compile or run error is one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::gen::Source;
use crate::ir::{Graph, Value};
use crate::numerics::{
    check_case, generate_case, high_level_ops, lower_to_prims, random_data, CaseResult, Failure, LowerError, Lowering,
    MAX_DIM,
};
use crate::runtime::{compile, CompileError, CompileOptions, Plan};
use crate::tensor::{checked_numel, Tensor};

/// Bytes after the op byte that fix a case's structure (its graph and first data set).
pub const STRUCTURE_BYTES: usize = 16;
/// Bytes that draw one further data set.
pub const DATA_SET_BYTES: usize = 64;
/// Most data sets one input is checked on (the case's own included).
pub const MAX_DATA_SETS: usize = 8;
/// Entries of [`PlanCache::global`]: about a campaign's corpus, whose inputs libFuzzer picks
/// and mutates in turn (a plan of a single-op graph is some tens of kilobytes).
pub const GLOBAL_CACHE_ENTRIES: usize = 1024;
/// Largest size a size symbol takes in a further data set (as [`generate_case`] draws them).
const MAX_SYMBOL_VALUE: usize = MAX_DIM as usize;
/// Most elements of all inputs of one further data set; a larger one is skipped.
const MAX_DATA_ELEMENTS: usize = 1 << 16;

/// The backend a [`PlanCache`] compiles for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// `CompileOptions::native_cpu(1)`: Cranelift kernels, GEMM, the reference executor for
    /// graph breaks.
    #[default]
    Cpu,
    /// `CompileOptions::vulkan()`: compute shaders on the process's Vulkan device.
    Vulkan,
    /// The process's Vulkan device with its library shaders on (`VulkanDevice::
    /// with_library_shaders`, which a CPU device leaves off): f32 matmuls and convolutions
    /// through the GEMM shader, the recovered row ops and attention through theirs.
    VulkanLibrary,
}

/// A graph lowered and compiled once: what every data set of its structure runs.
pub struct Compiled {
    /// `lower_to_prims` of the graph (the numerics harness's lowering).
    pub lowering: Result<Lowering, LowerError>,
    /// The lowered graph compiled for the target, or why not.
    pub plan: Result<Plan, String>,
    /// The target declined the program (`CompileError::Unsupported`: a step the Vulkan device
    /// lacks, or no device); `plan` holds the reason.
    pub refused: bool,
}

impl Compiled {
    /// Lowers `g` and compiles the result natively, as [`crate::numerics::run_on_cpu`] does.
    pub fn new(g: &Graph) -> Compiled {
        Compiled::for_target(g, Target::Cpu)
    }

    /// Lowers `g` and compiles the result for `target`.
    pub fn for_target(g: &Graph, target: Target) -> Compiled {
        let lowering = lower_to_prims(g);
        let options = match target {
            Target::Cpu => CompileOptions::native_cpu(1).map_err(|e| format!("cpu backend: {e}")),
            Target::Vulkan => Ok(CompileOptions::vulkan()),
            #[cfg(feature = "vulkan")]
            Target::VulkanLibrary => crate::backend::vulkan::VulkanDevice::process()
                .map(|d| CompileOptions::vulkan_on(d.with_library_shaders(true)))
                .map_err(|e| format!("vulkan: {e}")),
            #[cfg(not(feature = "vulkan"))]
            Target::VulkanLibrary => Ok(CompileOptions::vulkan()),
        };
        let mut refused = false;
        let plan = match &lowering {
            Ok(l) => options.and_then(|options| {
                compile(&l.graph, &options).map_err(|e| {
                    refused = matches!(e, CompileError::Unsupported { .. });
                    format!("compile: {e}")
                })
            }),
            Err(_) => Err("not lowered".to_string()),
        };
        Compiled { lowering, plan, refused }
    }
}

/// Counters of a [`PlanCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found their plan.
    pub hits: u64,
    /// Lookups that compiled one.
    pub compiles: u64,
    /// Plans dropped to make room.
    pub evictions: u64,
    /// Plans held now.
    pub entries: usize,
}

/// Compiled plans by graph text for one [`Target`], at most `capacity` of them: inserting into
/// a full cache drops the least recently used. Several threads may share one; two that miss
/// on the same text at once both compile it (compiling holds no lock) and the later insert
/// wins.
pub struct PlanCache {
    capacity: usize,
    target: Target,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<String, (Arc<Compiled>, u64)>,
    /// Advances on every lookup; an entry's stamp is its last use.
    clock: u64,
    stats: CacheStats,
}

impl PlanCache {
    /// An empty cache of CPU plans holding at most `capacity` (at least 1).
    pub fn new(capacity: usize) -> PlanCache {
        PlanCache::for_target(capacity, Target::Cpu)
    }

    /// An empty cache of plans for `target` holding at most `capacity` (at least 1).
    pub fn for_target(capacity: usize, target: Target) -> PlanCache {
        PlanCache { capacity: capacity.max(1), target, state: Mutex::new(CacheState::default()) }
    }

    /// The process-wide cache of [`GLOBAL_CACHE_ENTRIES`] CPU plans that [`check_native`] uses.
    pub fn global() -> &'static PlanCache {
        static GLOBAL: OnceLock<PlanCache> = OnceLock::new();
        GLOBAL.get_or_init(|| PlanCache::new(GLOBAL_CACHE_ENTRIES))
    }

    /// The process-wide cache of [`GLOBAL_CACHE_ENTRIES`] Vulkan plans that [`check_vulkan`]
    /// uses (and [`PlanCache::global_vulkan_library`], with library shaders).
    pub fn global_vulkan() -> &'static PlanCache {
        static GLOBAL: OnceLock<PlanCache> = OnceLock::new();
        GLOBAL.get_or_init(|| PlanCache::for_target(GLOBAL_CACHE_ENTRIES, Target::Vulkan))
    }

    /// The process-wide cache of [`GLOBAL_CACHE_ENTRIES`] plans for [`Target::VulkanLibrary`]
    /// that [`check_vulkan`] uses.
    pub fn global_vulkan_library() -> &'static PlanCache {
        static GLOBAL: OnceLock<PlanCache> = OnceLock::new();
        GLOBAL.get_or_init(|| PlanCache::for_target(GLOBAL_CACHE_ENTRIES, Target::VulkanLibrary))
    }

    /// The backend its plans are compiled for.
    pub fn target(&self) -> Target {
        self.target
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        CacheStats { entries: state.entries.len(), ..state.stats }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic elsewhere (a finding) leaves the map consistent: every update is one call.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plan of `g`, whose text is `key`: the cached one, or a new one compiled (and cached)
    /// now. The second value says whether this call compiled.
    pub fn get_or_compile(&self, key: &str, g: &Graph) -> (Arc<Compiled>, bool) {
        {
            let mut state = self.lock();
            state.clock += 1;
            let now = state.clock;
            if let Some((compiled, stamp)) = state.entries.get_mut(key) {
                *stamp = now;
                let compiled = Arc::clone(compiled);
                state.stats.hits += 1;
                return (compiled, false);
            }
        }
        let compiled = Arc::new(Compiled::for_target(g, self.target));
        let mut state = self.lock();
        state.stats.compiles += 1;
        if !state.entries.contains_key(key) && state.entries.len() >= self.capacity {
            let oldest = state.entries.iter().min_by_key(|(_, (_, stamp))| *stamp).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                state.entries.remove(&k);
                state.stats.evictions += 1;
            }
        }
        let now = state.clock;
        state.entries.insert(key.to_string(), (Arc::clone(&compiled), now));
        (compiled, true)
    }
}

/// What [`check_native_with`] did with one input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffOutcome {
    /// No case could be built from the structure bytes (see `Skip::NoValidCase`).
    pub no_case: bool,
    /// Data sets checked and within the table.
    pub passed: usize,
    /// Data sets not checked: the reference failed on them (an index out of range, say), or
    /// their sizes do not evaluate or are too large.
    pub skipped: usize,
    /// Whether this input compiled its plan (else the cache had it).
    pub compiled: bool,
    /// The target declined the program ([`Compiled::refused`]): no data set was run.
    pub refused: bool,
    /// The plan runs a Vulkan library shader (its explanation names one).
    pub library: bool,
}

/// The fuzz target's check: [`check_native_with`] on the process-wide cache, panicking with
/// the failure (and its ready-to-paste file test) when a data set breaks the table.
pub fn check_native(data: &[u8]) {
    if let Err(f) = check_native_with(data, PlanCache::global()) {
        panic!("{f}");
    }
}

/// The `interp_vulkan` target's check: [`check_native_with`] on the process-wide Vulkan cache.
/// Without a Vulkan device (or a ladder built without the `vulkan` feature) every input would
/// be refused and the campaign would test nothing, so that panics at once, saying why.
pub fn check_vulkan(data: &[u8]) {
    static DEVICE: OnceLock<Result<(), String>> = OnceLock::new();
    let device = DEVICE.get_or_init(|| {
        #[cfg(feature = "vulkan")]
        {
            crate::backend::vulkan::context().map(|_| ()).map_err(|e| e.to_string())
        }
        #[cfg(not(feature = "vulkan"))]
        {
            Err("ladder was built without the `vulkan` feature".to_string())
        }
    });
    if let Err(e) = device {
        panic!("the interp_vulkan target needs a Vulkan device: {e}");
    }
    // With the device's library shaders off (a CPU device's default) and on.
    for cache in [PlanCache::global_vulkan(), PlanCache::global_vulkan_library()] {
        if let Err(f) = check_native_with(data, cache) {
            panic!("{:?}: {f}", cache.target());
        }
    }
}

/// Builds the case of `data` (see the module docs for the layout), takes its plan from `cache`
/// (compiling it for the cache's [`Target`] on a miss), and checks every data set: the plan's
/// outputs against the op in precise mode under the tolerance table, as
/// [`crate::numerics::check_op_on`] with [`crate::numerics::run_on_cpu`] does for one. A
/// program the target declines is [`DiffOutcome::refused`] and checks nothing. The first
/// failure is returned: its `file_test` reproduces it on its own (the graph and the failing
/// data set), and its `case_bytes` are the whole of `data`.
pub fn check_native_with(data: &[u8], cache: &PlanCache) -> Result<DiffOutcome, Box<Failure>> {
    let mut outcome = DiffOutcome::default();
    let Some((&first, rest)) = data.split_first() else { return Ok(outcome) };
    let ops = high_level_ops();
    let op = ops[first as usize % ops.len()];
    let (structure, data_bytes) = rest.split_at(rest.len().min(STRUCTURE_BYTES));
    let Some(mut case) = generate_case(op, structure) else {
        outcome.no_case = true;
        return Ok(outcome);
    };
    let key = crate::text::print(&case.graph);
    let (compiled, fresh) = cache.get_or_compile(&key, &case.graph);
    outcome.compiled = fresh;
    outcome.library = compiled.plan.as_ref().is_ok_and(|p| {
        let e = p.explanation();
        ["the library GEMM", "the row shader", "the attention shader"].iter().any(|s| e.contains(s))
    });
    if compiled.refused {
        outcome.refused = true;
        return Ok(outcome);
    }
    let lower = |_: &Graph| compiled.lowering.clone();
    let exec = |_: &Graph, inputs: &[Tensor]| match &compiled.plan {
        Ok(plan) => plan.run(inputs).map(|o| o.outputs).map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    let chunks = data_bytes.chunks(DATA_SET_BYTES).take(MAX_DATA_SETS - 1);
    for chunk in std::iter::once(None).chain(chunks.map(Some)) {
        if let Some(chunk) = chunk {
            match data_set(&case.graph, chunk) {
                Some(inputs) => case.inputs = inputs,
                None => {
                    outcome.skipped += 1;
                    continue;
                }
            }
        }
        match check_case(&case, data, &lower, &exec) {
            CaseResult::Passed(_) => outcome.passed += 1,
            CaseResult::Skipped(_) => outcome.skipped += 1,
            CaseResult::Failed(f) => return Err(f),
        }
    }
    Ok(outcome)
}

/// Inputs for `g` drawn from `bytes`: a value in `0..=MAX_DIM` for each size symbol (in the
/// order the inputs name them), then each input's data. `None` when a dim does not evaluate
/// or the inputs would exceed [`MAX_DATA_ELEMENTS`].
fn data_set(g: &Graph, bytes: &[u8]) -> Option<Vec<Tensor>> {
    let mut src = Source::with_tail(bytes, fnv(bytes));
    let mut symbols: Vec<(String, u64)> = Vec::new();
    for &v in g.inputs() {
        for s in g.ty(v).shape.symbols() {
            if !symbols.iter().any(|(n, _)| n.as_str() == s.as_ref()) {
                symbols.push((s.to_string(), src.below(MAX_SYMBOL_VALUE + 1) as u64));
            }
        }
    }
    let lookup = |s: &str| symbols.iter().find(|(n, _)| n == s).map(|&(_, v)| v);
    let shapes: Vec<Vec<usize>> = g.inputs().iter().map(|&v| dims_of(g, v, &lookup)).collect::<Option<_>>()?;
    let total = shapes.iter().try_fold(0usize, |acc, dims| acc.checked_add(checked_numel(dims)?))?;
    if total > MAX_DATA_ELEMENTS {
        return None;
    }
    Some(g.inputs().iter().zip(&shapes).map(|(&v, dims)| random_data(&mut src, g.ty(v).dtype, dims)).collect())
}

fn dims_of(g: &Graph, v: Value, lookup: &dyn Fn(&str) -> Option<u64>) -> Option<Vec<usize>> {
    g.ty(v).shape.dims().iter().map(|d| d.eval(lookup).ok().and_then(|n| usize::try_from(n).ok())).collect()
}

/// FNV-1a of a data set's bytes: the seed of the choices past their end.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}
