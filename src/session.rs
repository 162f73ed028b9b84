//! Models and sessions: a model loaded once, compiled for the inputs it is called with.
//!
//! A [`Model`] is what a user loads: a graph (text form or builder), or an ONNX file kept as
//! decoded so that it can be imported again. A [`Session`] compiles it and runs it.
//!
//! **The general plan.** A session first imports the model with its symbolic input shapes
//! and compiles that graph once: one plan for every batch size and sequence length (shape
//! arithmetic stays symbolic, see `frontend::onnx::shapes`). Most models stop here.
//!
//! **Specialized plans.** Some models cannot be compiled for every shape at once: a
//! recurrence unrolled over a symbolic length, a resize between two symbolic sizes, shapes the
//! size algebra cannot prove compatible ([`crate::frontend::onnx::Needs::Shapes`]), or a
//! value computed at run time that decides the graph itself, such as an `If` condition, a
//! `Loop` trip count or a shape taken from data ([`Needs::Value`]). Then each call is compiled
//! for what decides it: the concrete input shapes, and the value of every such tensor. A
//! value is found by a *probe*: the model imported up to the node that computes it, compiled
//! and run on the call's inputs; the specialized import then reads it as a constant (an `If`
//! inlines the branch taken). Plans are kept in a bounded cache keyed by the input shapes and
//! the probed values, least recently used first out, so a model called with a few shapes,
//! or a branch that flips between two values, compiles each once. [`Session::compilations`]
//! counts every compile (probes included), so a caller can see what recompiles.
//!
//! A model that fails for another reason (an op ladder does not have, a malformed file) fails
//! when the session is made, not on a later call.
//!
//! **Tiered start-up.** [`Session::new_tiered`] makes a session that answers before its
//! native code exists: it builds the general plan for the reference interpreter
//! ([`BackendKind::Interp`]: an import and a functionalization, no lowering, no code
//! generation) and compiles the plan its options ask for on a thread of its own. Each call
//! takes the native plan once it is ready, the reference plan until then; the switch is one
//! lock-free read of a [`OnceLock`] per call, and a call runs wholly on the plan it took, so
//! its outputs all come from one tier. A compile that fails (or panics) is kept:
//! [`Session::tier`] reports it and the session goes on serving from the reference plan.
//! [`Session::wait_native`] blocks until the native plan is ready or has failed. The compile
//! thread is detached: it owns what it compiles from and shares only the slot the plan goes
//! into, so a session dropped mid-compile returns at once and the thread ends when its
//! compile does, dropping the plan. Tiering applies to the general plan only: a model
//! compiled per call (specialized plans) compiles each plan natively on the calling thread,
//! as a session that is not tiered does. An ONNX model whose general graph imports but does
//! not compile natively for symbolic shapes stays on the reference plan
//! ([`Tier::Failed`] says why), where [`Session::new`] would compile it per call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::frontend::onnx::{self, proto::ModelProto, ImportError, ImportOptions, Needs};
use crate::ir::TensorType;
use crate::runtime::{compile, BackendKind, CompileError, CompileOptions, Outputs, Plan, RunError};
use crate::tensor::TensorView;
use crate::{Graph, Tensor};

/// Most specialized plans (and probes) a session keeps by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 16;
/// Most values one call may probe before its plan is found (nested branches, loops).
pub const MAX_PROBES: usize = 32;
/// Largest value a plan may be specialized on, in elements.
pub const MAX_PROBED_ELEMENTS: usize = 1 << 12;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}:{}:{}: {}", path.display(), error.line, error.col, error.message)]
    Parse { path: PathBuf, error: crate::text::ParseError },
    #[error("{}: {error}", path.display())]
    Onnx { path: PathBuf, error: Box<ImportError> },
    #[error("{}: {error}", path.display())]
    Artifact { path: PathBuf, error: Box<crate::artifact::ArtifactError> },
}

impl From<ImportError> for SessionError {
    fn from(e: ImportError) -> SessionError {
        SessionError::Import(Box::new(e))
    }
}

/// Why a session could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("import: {0}")]
    Import(Box<ImportError>),
    #[error("compile: {0}")]
    Compile(#[from] CompileError),
    #[error("{0}")]
    Run(#[from] RunError),
    /// The inputs do not fit the model (count, dtype or rank), before anything is compiled.
    #[error("{0}")]
    Inputs(String),
    /// A value the model branches on cannot be specialized on.
    #[error("{0}")]
    Probe(String),
}

#[derive(Clone, Debug)]
enum Source {
    Graph(Graph),
    /// A graph already lowered (an artifact's): plans only schedule and compile it.
    Lowered(Arc<crate::artifact::Artifact>),
    Onnx {
        model: Arc<ModelProto>,
        dir: Option<PathBuf>,
        options: ImportOptions,
    },
}

/// A loaded model: a graph, or an ONNX model that can be imported for given input shapes.
#[derive(Clone, Debug)]
pub struct Model {
    source: Source,
}

impl Model {
    /// A model from a graph (text form or builder).
    pub fn from_graph(g: Graph) -> Model {
        Model { source: Source::Graph(g) }
    }

    /// A decoded ONNX model; `dir` is where its external data lives (when `options` allow it).
    /// A model from a compiled artifact ([`crate::artifact`]): its plans start from the
    /// stored rung.
    pub fn from_artifact(artifact: crate::artifact::Artifact) -> Model {
        Model { source: Source::Lowered(Arc::new(artifact)) }
    }

    /// The artifact this model was loaded from, if it was.
    pub fn artifact(&self) -> Option<&Arc<crate::artifact::Artifact>> {
        match &self.source {
            Source::Lowered(a) => Some(a),
            _ => None,
        }
    }

    pub fn from_onnx(model: ModelProto, dir: Option<PathBuf>, options: ImportOptions) -> Model {
        Model { source: Source::Onnx { model: Arc::new(model), dir, options } }
    }

    /// Loads a `.lad` text file or an ONNX file (by extension, else by content) with the
    /// default import limits.
    pub fn load(path: &Path) -> Result<Model, LoadError> {
        Model::load_with(path, &ImportOptions::default())
    }

    /// [`Model::load`] with explicit import options (limits, external data).
    pub fn load_with(path: &Path, options: &ImportOptions) -> Result<Model, LoadError> {
        let read_err = |source| LoadError::Read { path: path.into(), source };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        // A FIFO would wait for a writer, a device may never end.
        if !meta.is_file() {
            return Err(read_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
        }
        let len = meta.len();
        if len > options.limits.max_file_bytes {
            let (limit, max) = ("max_file_bytes", options.limits.max_file_bytes);
            let error = ImportError::Limit { what: "the file".into(), size: len, limit, max };
            return Err(LoadError::Onnx { path: path.into(), error: Box::new(error) });
        }
        if crate::artifact::file_is_artifact(path).map_err(read_err)? {
            // Mapped, not read: its weights stay in the file's pages (`Artifact::load`).
            let artifact = crate::artifact::Artifact::load(path, &options.limits)
                .map_err(|error| LoadError::Artifact { path: path.into(), error: Box::new(error) })?;
            return Ok(Model::from_artifact(artifact));
        }
        let bytes = std::fs::read(path).map_err(read_err)?;
        if is_onnx(path, &bytes[..bytes.len().min(64)]) {
            let model = onnx::decode(&bytes, options)
                .map_err(|error| LoadError::Onnx { path: path.into(), error: Box::new(error) })?;
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            return Ok(Model::from_onnx(model, Some(dir), options.clone()));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
        })?;
        let g = crate::text::parse_with(&text, &options.limits)
            .map_err(|error| LoadError::Parse { path: path.into(), error })?;
        Ok(Model::from_graph(g))
    }

    /// The graph with symbolic input shapes: the graph itself, or the ONNX model imported.
    pub fn graph(&self) -> Result<Graph, ImportError> {
        match &self.source {
            Source::Graph(g) => Ok(g.clone()),
            Source::Lowered(a) => Ok(a.graph.clone()),
            Source::Onnx { model, dir, options } => onnx::import_model(model, options, dir.as_deref()),
        }
    }

    /// The graph for concrete input shapes (by input name) and known run-time values (by ONNX
    /// name); a graph source is returned as it is.
    pub fn specialized_graph(
        &self,
        shapes: HashMap<String, Vec<u64>>,
        values: HashMap<String, Arc<Tensor>>,
        probe: Option<String>,
    ) -> Result<Graph, ImportError> {
        match &self.source {
            Source::Graph(g) => Ok(g.clone()),
            Source::Lowered(a) => Ok(a.graph.clone()),
            Source::Onnx { model, dir, options } => {
                let options = ImportOptions { input_shapes: shapes, known_values: values, probe, ..options.clone() };
                onnx::import_model(model, &options, dir.as_deref())
            }
        }
    }

    /// The declared inputs: name and type (symbolic dims where the model has them).
    pub fn inputs(&self) -> Result<Vec<(String, TensorType)>, ImportError> {
        match &self.source {
            Source::Graph(g) => Ok(graph_inputs(g)),
            Source::Lowered(a) => Ok(graph_inputs(&a.graph)),
            Source::Onnx { model, options, .. } => onnx::input_types(model, options),
        }
    }

    /// The output names, in order.
    pub fn output_names(&self) -> Vec<String> {
        match &self.source {
            Source::Graph(g) => g.outputs().iter().map(|o| o.name.clone()).collect(),
            // The lowered graph's outputs include the new contents of inputs it writes.
            Source::Lowered(a) => a
                .graph
                .outputs()
                .iter()
                .enumerate()
                .filter(|(k, _)| !a.epilogue.mutations.iter().any(|m| m.output == *k))
                .map(|(_, o)| o.name.clone())
                .collect(),
            Source::Onnx { model, .. } => {
                model.graph.as_ref().map(|g| g.output.iter().map(|o| o.name.clone()).collect()).unwrap_or_default()
            }
        }
    }
}

fn graph_inputs(g: &Graph) -> Vec<(String, TensorType)> {
    g.inputs().iter().enumerate().map(|(i, &v)| (g.input_name(i), g.ty(v).clone())).collect()
}

/// True when `path` names an ONNX file: by its `.onnx` extension, or, for any other name, by
/// content that starts like a protobuf `ModelProto` and is not text.
pub fn is_onnx(path: &Path, head: &[u8]) -> bool {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx")) {
        return true;
    }
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("lad")) {
        return false;
    }
    onnx::looks_like_onnx(head) && std::str::from_utf8(head).is_err()
}

/// A cached plan, or what the next plan depends on: a value a probe plan computes, or the
/// values of some inputs themselves.
#[derive(Clone)]
enum Entry {
    Plan(Arc<Plan>),
    Probe { name: String, plan: Arc<Plan> },
    Inputs(Vec<usize>),
}

/// What a specialized plan was compiled for.
#[derive(Clone)]
struct Key {
    shapes: Vec<Vec<usize>>,
    values: Vec<(String, Arc<Tensor>)>,
}

impl Key {
    fn matches(&self, other: &Key) -> bool {
        self.shapes == other.shapes
            && self.values.len() == other.values.len()
            && self.values.iter().zip(&other.values).all(|((n, a), (m, b))| n == m && a.bit_eq(b))
    }
}

#[derive(Default)]
struct Cache {
    entries: Vec<(Key, Entry, u64)>,
    clock: u64,
}

impl Cache {
    fn get(&mut self, key: &Key) -> Option<Entry> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.iter_mut().find(|(k, _, _)| k.matches(key)).map(|(_, e, used)| {
            *used = clock;
            e.clone()
        })
    }

    fn insert(&mut self, key: Key, entry: Entry, capacity: usize) {
        self.clock += 1;
        self.evict_to(capacity.max(1) - 1);
        self.entries.push((key, entry, self.clock));
    }

    /// Drops the least recently used entries until at most `n` remain.
    fn evict_to(&mut self, n: usize) {
        while self.entries.len() > n {
            let oldest = self.entries.iter().enumerate().min_by_key(|(_, (_, _, used))| *used).map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    self.entries.swap_remove(i);
                }
                None => break,
            }
        }
    }
}

/// Which plan a session's calls run on (see the module docs on tiered start-up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The plans the session's options ask for: always, for a session that is not tiered;
    /// for a tiered one, since its native plan was ready.
    Native,
    /// The reference interpreter's general plan, while the native plan compiles.
    Reference,
    /// The native plan failed to compile (the reason); calls stay on the reference plan.
    Failed(String),
}

/// The native general plan of a tiered session: set once, by the thread that compiles it.
struct TierUp {
    native: OnceLock<Result<Arc<Plan>, String>>,
}

/// A model compiled for the calls made to it (see the module docs).
pub struct Session {
    model: Model,
    options: CompileOptions,
    inputs: Vec<(String, TensorType)>,
    /// The general plan; in a tiered session, the reference one.
    general: Option<Arc<Plan>>,
    /// A tiered session's native general plan, once compiled.
    tier_up: Option<Arc<TierUp>>,
    /// Why there is no general plan.
    specialized_because: Option<String>,
    cache: Mutex<Cache>,
    capacity: usize,
    compilations: AtomicUsize,
}

impl Session {
    /// Imports and compiles `model`: the general plan when the model compiles for symbolic
    /// shapes, else nothing until the first call (which compiles for its inputs). Errors that
    /// no specialization can mend are returned here.
    pub fn new(model: Model, options: CompileOptions) -> Result<Session, SessionError> {
        let inputs = model.inputs()?;
        let mut s = Session {
            model,
            options,
            inputs,
            general: None,
            tier_up: None,
            specialized_because: None,
            cache: Mutex::new(Cache::default()),
            capacity: DEFAULT_CACHE_CAPACITY,
            compilations: AtomicUsize::new(0),
        };
        let onnx = matches!(s.model.source, Source::Onnx { .. });
        match s.model.graph() {
            Ok(g) => match s.compile(&g) {
                Ok(plan) => s.general = Some(Arc::new(plan)),
                Err(e) if onnx => s.specialized_because = Some(format!("it does not compile for symbolic shapes: {e}")),
                Err(e) => return Err(e),
            },
            Err(e) if e.needs().is_some() => s.specialized_because = Some(e.to_string()),
            Err(e) => return Err(e.into()),
        }
        Ok(s)
    }

    /// Like [`Session::new`], but answers before the native code exists: the general plan is
    /// first built for the reference interpreter, and the plan `options` ask for is
    /// compiled on a background thread, taken by calls as soon as it is ready (see the
    /// module docs; [`Session::tier`], [`Session::wait_native`]). Options for
    /// [`BackendKind::Interp`], and models without a general plan (compiled per call), make
    /// a session that is not tiered. The reference plan and the native one each count in
    /// [`Session::compilations`] (the native one from when its compile starts).
    pub fn new_tiered(model: Model, options: CompileOptions) -> Result<Session, SessionError> {
        if options.backend != BackendKind::Cpu {
            return Session::new(model, options);
        }
        let reference = CompileOptions {
            backend: BackendKind::Interp,
            limits: options.limits.clone(),
            precise: false,
            ..CompileOptions::reference()
        };
        let mut s = Session::new(model, reference)?;
        // Specialized plans, and the general one below, compile with the options asked for.
        s.options = options;
        let Some(reference) = &s.general else { return Ok(s) };
        let tier_up = Arc::new(TierUp { native: OnceLock::new() });
        let job = {
            let tier_up = Arc::clone(&tier_up);
            let artifact = s.model.artifact().cloned();
            let graph = reference.graph().clone();
            let options = s.options.clone();
            move || {
                let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &artifact {
                    Some(a) => a.compile(&options),
                    None => compile(&graph, &options),
                }));
                let native = match compiled {
                    Ok(Ok(plan)) => Ok(Arc::new(plan)),
                    Ok(Err(e)) => Err(format!("compile: {e}")),
                    Err(panic) => Err(format!("the compile panicked: {}", panic_message(panic.as_ref()))),
                };
                // The only writer: `set` cannot find the slot full.
                let _ = tier_up.native.set(native);
            }
        };
        s.compilations.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = std::thread::Builder::new().name("ladder-tier-up".into()).spawn(job) {
            let _ = tier_up.native.set(Err(format!("cannot start the compile thread: {e}")));
        }
        s.tier_up = Some(tier_up);
        Ok(s)
    }

    /// Which plan calls run on now: [`Tier::Reference`] while a tiered session compiles its
    /// native plan, [`Tier::Failed`] if that failed, else [`Tier::Native`].
    pub fn tier(&self) -> Tier {
        match self.tier_up.as_ref().and_then(|t| t.native.get()) {
            None if self.tier_up.is_some() => Tier::Reference,
            Some(Err(why)) => Tier::Failed(why.clone()),
            _ => Tier::Native,
        }
    }

    /// Blocks until a tiered session's native plan is ready or has failed, and returns the
    /// tier then ([`Tier::Native`] or [`Tier::Failed`]); returns at once otherwise.
    pub fn wait_native(&self) -> Tier {
        if let Some(t) = &self.tier_up {
            t.native.wait();
        }
        self.tier()
    }

    /// A tiered session's native general plan, once it is ready.
    fn native_general(&self) -> Option<&Arc<Plan>> {
        self.tier_up.as_ref()?.native.get()?.as_ref().ok()
    }

    fn compile(&self, g: &Graph) -> Result<Plan, SessionError> {
        self.compilations.fetch_add(1, Ordering::Relaxed);
        if let Source::Lowered(a) = &self.model.source {
            return Ok(a.compile(&self.options)?);
        }
        Ok(compile(g, &self.options)?)
    }

    /// Keeps at most `n` specialized plans (and probes), dropping the least recently used
    /// beyond that now.
    pub fn set_cache_capacity(&mut self, n: usize) {
        self.capacity = n.max(1);
        let cache = self.cache.get_mut().unwrap_or_else(|p| p.into_inner());
        cache.evict_to(self.capacity);
    }

    /// Plans compiled so far: the general one (a tiered session: the reference one and the
    /// native one), each specialized one and each probe.
    pub fn compilations(&self) -> usize {
        self.compilations.load(Ordering::Relaxed)
    }

    /// The plan for every shape, when the model has one (in a tiered session, the one calls
    /// run on now: the reference plan until the native one is ready).
    pub fn general_plan(&self) -> Option<&Plan> {
        self.native_general().or(self.general.as_ref()).map(Arc::as_ref)
    }

    /// Why calls are compiled per input shape (or per run-time value), when they are.
    pub fn specialized_because(&self) -> Option<&str> {
        self.specialized_because.as_deref()
    }

    /// The model's declared inputs.
    pub fn inputs(&self) -> &[(String, TensorType)] {
        &self.inputs
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Runs the model on `inputs` (one per declared input, in order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Outputs, SessionError> {
        self.plan_for_views(&crate::runtime::views(inputs))?.run(inputs).map_err(SessionError::Run)
    }

    /// Runs the model on borrowed inputs (one per declared input, in order), read where they
    /// lie: see [`TensorView`].
    pub fn run_views(&self, inputs: &[TensorView]) -> Result<Outputs, SessionError> {
        self.plan_for_views(inputs)?.run_views(inputs).map_err(SessionError::Run)
    }

    /// Runs the model on inputs given by name (every declared input once, in any order);
    /// the outputs come back with their names, in the model's order.
    pub fn run_named(&self, inputs: Vec<(&str, Tensor)>) -> Result<Vec<(String, Tensor)>, SessionError> {
        let mut ordered: Vec<Option<Tensor>> = vec![None; self.inputs.len()];
        for (name, t) in inputs {
            let Some(i) = self.inputs.iter().position(|(n, _)| n == name) else {
                let names: Vec<&str> = self.inputs.iter().map(|(n, _)| n.as_str()).collect();
                return Err(SessionError::Inputs(format!(
                    "the model has no input `{name}` (its inputs: {})",
                    names.join(", ")
                )));
            };
            if ordered[i].replace(t).is_some() {
                return Err(SessionError::Inputs(format!("input `{name}` is given twice")));
            }
        }
        let missing: Vec<&str> =
            self.inputs.iter().zip(&ordered).filter(|(_, t)| t.is_none()).map(|((n, _), _)| n.as_str()).collect();
        if !missing.is_empty() {
            return Err(SessionError::Inputs(format!("inputs not given: {}", missing.join(", "))));
        }
        let ordered: Vec<Tensor> = ordered.into_iter().flatten().collect();
        let outputs = self.run(&ordered)?.outputs;
        Ok(self.model.output_names().into_iter().zip(outputs).collect())
    }

    /// The plan that runs `inputs`: the general one, or a specialized one from the cache
    /// (compiled on a miss, after the probes that decide it).
    pub fn plan_for(&self, inputs: &[Tensor]) -> Result<Arc<Plan>, SessionError> {
        self.plan_for_views(&crate::runtime::views(inputs))
    }

    /// [`Session::plan_for`] borrowed inputs.
    pub fn plan_for_views(&self, inputs: &[TensorView]) -> Result<Arc<Plan>, SessionError> {
        if let Some(p) = self.native_general().or(self.general.as_ref()) {
            return Ok(Arc::clone(p));
        }
        self.check_inputs(inputs)?;
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        let mut key = Key { shapes, values: Vec::new() };
        for _ in 0..=MAX_PROBES {
            let cached = self.lock().get(&key);
            let entry = match cached {
                Some(e) => e,
                None => {
                    let e = self.build(&key)?;
                    self.lock().insert(key.clone(), e.clone(), self.capacity);
                    e
                }
            };
            match entry {
                Entry::Plan(p) => return Ok(p),
                Entry::Probe { name, plan } => {
                    let mut out = plan.run_views(inputs)?.outputs;
                    let value = out
                        .pop()
                        .ok_or_else(|| SessionError::Probe(format!("the probe for `{name}` has no output")))?;
                    if value.numel() > MAX_PROBED_ELEMENTS {
                        return Err(SessionError::Probe(format!(
                            "the model's graph depends on `{name}`, computed at run time, whose {} elements are more than the {MAX_PROBED_ELEMENTS} a plan can be specialized on",
                            value.numel()
                        )));
                    }
                    key.values.push((name, Arc::new(value)));
                }
                Entry::Inputs(which) => {
                    for i in which {
                        key.values.push((self.inputs[i].0.clone(), Arc::new(inputs[i].to_tensor())));
                    }
                }
            }
        }
        Err(SessionError::Probe(format!(
            "the model's graph depends on more than {MAX_PROBES} values computed at run time"
        )))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The count, dtypes and ranks of `inputs` against the declared inputs (the plan checks
    /// the rest), so that a bad call is an error before anything is compiled for it.
    fn check_inputs(&self, inputs: &[TensorView]) -> Result<(), SessionError> {
        if inputs.len() != self.inputs.len() {
            return Err(SessionError::Inputs(format!(
                "the model has {} inputs but {} were given",
                self.inputs.len(),
                inputs.len()
            )));
        }
        for ((name, ty), t) in self.inputs.iter().zip(inputs) {
            let fits = t.dtype() == ty.dtype
                && t.shape().len() == ty.rank()
                && ty.shape.dims().iter().zip(t.shape()).all(|(d, &n)| d.as_const().is_none_or(|c| c == n as u64));
            if !fits {
                return Err(SessionError::Inputs(format!(
                    "input `{name}` must be {ty}, got {}{:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
        }
        Ok(())
    }

    /// Imports and compiles the plan (or the next probe) for `key`.
    fn build(&self, key: &Key) -> Result<Entry, SessionError> {
        let shapes: HashMap<String, Vec<u64>> = self
            .inputs
            .iter()
            .zip(&key.shapes)
            .map(|((name, _), s)| (name.clone(), s.iter().map(|&d| d as u64).collect()))
            .collect();
        let values: HashMap<String, Arc<Tensor>> = key.values.iter().cloned().collect();
        match self.model.specialized_graph(shapes.clone(), values.clone(), None) {
            Ok(g) => Ok(Entry::Plan(Arc::new(self.compile(&g)?))),
            Err(e) => match e.needs() {
                Some(Needs::Value(name)) if !values.contains_key(&name) => {
                    match self.model.specialized_graph(shapes, values.clone(), Some(name.clone())) {
                        Ok(g) => Ok(Entry::Probe { name, plan: Arc::new(self.compile(&g)?) }),
                        // The value is computed inside a subgraph (a branch, a loop body),
                        // where no probe reaches: specialize on the small integer and bool
                        // inputs instead, from which such values are computed.
                        Err(_) => {
                            let which: Vec<usize> = self
                                .inputs
                                .iter()
                                .zip(&key.shapes)
                                .enumerate()
                                .filter(|(_, ((name, ty), shape))| {
                                    (ty.dtype.is_int() || ty.dtype.is_bool())
                                        && !values.contains_key(name)
                                        && shape.iter().product::<usize>() <= MAX_PROBED_ELEMENTS
                                })
                                .map(|(i, _)| i)
                                .collect();
                            if which.is_empty() {
                                return Err(e.into());
                            }
                            Ok(Entry::Inputs(which))
                        }
                    }
                }
                _ => Err(e.into()),
            },
        }
    }
}

/// The message a panic carried, when it is text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_string(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".to_string(),
    }
}
