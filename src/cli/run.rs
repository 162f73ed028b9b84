//! `ladder run`: run a model on a backend (the reference interpreter, or the CPU backend's
//! compiled plan) with inputs from `.npy` files or a seeded generator, then summarise and
//! optionally save the outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use ladder::interp::Options;
use ladder::models::{random_tensor, Rng};
use ladder::tensor::checked_numel;
use ladder::{BackendKind, CompileOptions, DType, Dim, Model, Session, Tensor, TensorType};

use super::{machine_threads, model, note, npy, BackendArg, Error};

/// Size given to a symbolic input dim that neither `--dim` nor an input file fixes.
const DEFAULT_SYMBOL_VALUE: u64 = 2;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// Read input NAME from a .npy file (repeatable). Inputs not given are generated from --seed.
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Where to run [default: cpu; interp with --precise].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Threads for the CPU backend [default: the machine's available threads; the interpreter
    /// runs on one].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
    /// Write each output to DIR/<output-name>.npy (the directory is created).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed for generated inputs: floats uniform in [-1, 1), ints in [0, 10), bools fair.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Size of a symbolic input dim (repeatable); unbound symbols default to 2.
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Evaluate float ops in f64 without rounding to each op's dtype (outputs come back f64):
    /// a mode of the interpreter, so it selects `--backend interp` (with `--backend cpu` it is
    /// an error).
    #[arg(long)]
    pub precise: bool,
    /// With `--backend cpu`: run softmax, log_softmax, layer_norm, rms_norm, gelu, silu, sigmoid
    /// and attention as generated kernels instead of recovering them into library kernels (to
    /// compare the two); with `--backend vulkan`, softmax, log_softmax, layer_norm and rms_norm
    /// instead of the row shader, where the device runs library shaders.
    #[arg(long)]
    pub no_recover: bool,
}

fn split_pair<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k, v)),
        _ => Err(format!("expected {what}")),
    }
}

pub fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    let (name, file) = split_pair(s, "NAME=FILE.npy")?;
    Ok((name.to_string(), PathBuf::from(file)))
}

pub fn parse_dim(s: &str) -> Result<(String, u64), String> {
    let (sym, n) = split_pair(s, "SYMBOL=N")?;
    let n = n.parse::<u64>().map_err(|_| format!("`{n}` is not a size (a non-negative integer)"))?;
    Ok((sym.to_string(), n))
}

impl RunArgs {
    /// The backend: as given, else the interpreter for `--precise` and the CPU otherwise.
    pub fn backend(&self) -> BackendArg {
        self.backend.unwrap_or(if self.precise { BackendArg::Interp } else { BackendArg::Cpu })
    }

    /// The threads: as given, else the machine's.
    pub fn threads(&self) -> usize {
        self.threads.map_or_else(machine_threads, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

/// The compile options of a backend: the CPU backend in native mode over `threads` threads
/// (`recover` as given), or the interpreter (`precise` as given).
pub fn compile_options(
    backend: BackendKind,
    recover: bool,
    precise: bool,
    threads: usize,
) -> Result<CompileOptions, Error> {
    Ok(match backend {
        BackendKind::Cpu => {
            let mut options =
                CompileOptions::native_cpu(threads).map_err(|e| Error::Usage(format!("cpu backend: {e}")))?;
            options.recover = recover;
            options.limits = super::model::limits();
            options
        }
        BackendKind::Interp => CompileOptions {
            backend: BackendKind::Interp,
            precise,
            limits: super::model::limits(),
            ..CompileOptions::reference()
        },
        BackendKind::Vulkan => CompileOptions { limits: super::model::limits(), recover, ..CompileOptions::vulkan() },
    })
}

/// A session error as the CLI reports it: an import error names the model file `path`.
pub fn session_error(e: ladder::session::SessionError, path: Option<&std::path::Path>) -> Error {
    match (e, path) {
        (ladder::session::SessionError::Import(error), Some(path)) => Error::Onnx { path: path.to_path_buf(), error },
        (e, _) => Error::from(e),
    }
}

/// A session for `model` (read from `path`, which import errors then name), with a note when
/// its plans are specialized per call.
pub fn session(model: Model, path: Option<&std::path::Path>, options: CompileOptions) -> Result<Session, Error> {
    let backend = options.backend;
    let session =
        super::progress::spin("compiling", || Session::new(model, options).map_err(|e| session_error(e, path)))?;
    if let Some(why) = session.specialized_because() {
        note(&format!(
            "{}: the model is compiled for each call's input shapes and the values its graph depends on ({why})",
            backend.name()
        ));
    }
    Ok(session)
}

/// Runs `session` on `inputs`, with a note on the plan's schedule and memory, and on
/// every compilation beyond the first.
pub fn run_session(session: &Session, inputs: &[Tensor]) -> Result<ladder::Outputs, Error> {
    let before = session.compilations();
    let plan = super::progress::spin("compiling for these inputs", || session.plan_for(inputs).map_err(Error::from))?;
    let compiled = session.compilations() - before;
    if session.general_plan().is_none() && compiled > 0 {
        let shapes: Vec<String> = inputs.iter().map(|t| format!("{:?}", t.shape())).collect();
        note(&format!("compiled {compiled} plan(s) for input shapes {}", shapes.join(", ")));
    }
    if let (Some(p), Ok(m)) = (plan.program(), plan.memory_report(inputs)) {
        use ladder::kernel::Step;
        let fused = p.steps.iter().filter(|s| matches!(s, Step::Matmul(m) if m.epilogue.is_some())).count();
        let kernels = p.kernels().count();
        note(&format!(
            "{}: {} steps ({kernels} kernels, {fused} of them GEMM epilogues, {} native); arena {} bytes for {} temporaries of {} bytes",
            plan.backend().name(),
            p.steps.len(),
            plan.native_kernels(),
            m.arena_bytes,
            m.temporaries,
            m.naive_bytes
        ));
    }
    for f in plan.fallbacks() {
        note(&format!("kernel {} runs on the reference executor: {}", f.kernel, f.why));
    }
    super::progress::spin("running", || plan.run(inputs)).map_err(|e| Error::Usage(format!("the run failed: {e}")))
}

pub fn run(args: &RunArgs, out: &mut dyn Write) -> Result<(), Error> {
    let backend = args.backend().backend();
    if backend != BackendKind::Interp && args.precise {
        return Err(Error::Arguments("--precise is a mode of the interpreter; use it with --backend interp".into()));
    }
    let model = model::load(args.model.as_deref())?;
    let declared = model
        .inputs()
        .map_err(|error| Error::Onnx { path: args.model.clone().unwrap_or_default(), error: Box::new(error) })?;
    // The model is imported (and compiled where it can be) before inputs are generated, so an
    // import error comes before the notes about generated inputs.
    let session = session(
        model,
        args.model.as_deref(),
        compile_options(backend, !args.no_recover, args.precise, args.threads())?,
    )?;
    let inputs = prepare_inputs(&declared, args)?;
    let outs = run_session(&session, &inputs)?;
    for (i, _) in &outs.mutated_inputs {
        note(&format!("input `{}` is mutated in place by the model", declared[*i].0));
    }
    let names = session.model().output_names();
    if names.is_empty() {
        note("the model has no outputs");
    }
    for (name, t) in names.iter().zip(&outs.outputs) {
        writeln!(out, "{name}: {t}").map_err(Error::Stdout)?;
        writeln!(out, "  {}", stats(t)).map_err(Error::Stdout)?;
    }
    if let Some(dir) = &args.out {
        write_outputs(&names, &outs.outputs, dir)?;
    }
    Ok(())
}

/// `min … max … mean …` over the non-NaN elements, with the NaN count when there are any.
pub fn stats(t: &Tensor) -> String {
    let v = t.to_f64_vec();
    let finite_or_inf: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    let nans = v.len() - finite_or_inf.len();
    if finite_or_inf.is_empty() {
        return if v.is_empty() { "(empty)".into() } else { format!("all {nans} elements are NaN") };
    }
    let min = finite_or_inf.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite_or_inf.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = finite_or_inf.iter().sum::<f64>() / finite_or_inf.len() as f64;
    let mut s = if t.dtype().is_float() {
        format!("min {min:.6}  max {max:.6}  mean {mean:.6}")
    } else {
        format!("min {min}  max {max}  mean {mean:.6}")
    };
    if nans > 0 {
        s.push_str(&format!("  NaN {nans}"));
    }
    s
}

/// A file name for an output: its name with anything but ASCII letters, digits, `-`, `_`
/// and inner `.` replaced by `_`, so that no output name can point outside the directory.
fn file_name(output: &str) -> String {
    let mut s: String = output
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.insert(0, '_');
    }
    s + ".npy"
}

fn write_outputs(names: &[String], outputs: &[Tensor], dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Write { path: dir.into(), source })?;
    let mut used: BTreeMap<String, &str> = BTreeMap::new();
    for name in names {
        let f = file_name(name);
        if let Some(other) = used.insert(f.clone(), name) {
            return Err(Error::Usage(format!("outputs `{other}` and `{name}` would both be written to {f}")));
        }
    }
    for (name, t) in names.iter().zip(outputs) {
        let path = dir.join(file_name(name));
        if let Some(n) = npy::write(&path, t)? {
            note(&n);
        }
        note(&format!("wrote {}", path.display()));
    }
    Ok(())
}

/// Where a symbol's size came from, for error messages.
struct Binding {
    value: u64,
    from: String,
}

/// Checks that every `--dim` names a symbol of the declared inputs, once (argument errors,
/// exit status 2): `run`, `check`, `bench` and `dump` report them alike. Returns the symbols.
pub fn check_dims(declared: &[(String, TensorType)], dims: &[(String, u64)]) -> Result<BTreeSet<String>, Error> {
    let symbols: BTreeSet<String> =
        declared.iter().flat_map(|(_, ty)| ty.shape.symbols()).map(|s| s.to_string()).collect();
    for (i, (sym, n)) in dims.iter().enumerate() {
        if !symbols.contains(sym) {
            let known = if symbols.is_empty() {
                "it has no symbolic dims".to_string()
            } else {
                format!("its symbols: {}", symbols.iter().cloned().collect::<Vec<_>>().join(", "))
            };
            return Err(Error::Arguments(format!(
                "--dim {sym}={n}: no input of the model has a dim `{sym}` ({known})"
            )));
        }
        if dims[..i].iter().any(|(s, _)| s == sym) {
            return Err(Error::Arguments(format!("--dim {sym} is given twice")));
        }
    }
    Ok(symbols)
}

/// One tensor per graph input: read from its `--input` file, or generated. Checks each file
/// against the input's declared type (naming the input and the file when it does not fit)
/// and binds size symbols from `--dim`, from the files, and otherwise to the default.
pub fn prepare_inputs(declared: &[(String, TensorType)], args: &RunArgs) -> Result<Vec<Tensor>, Error> {
    let names: Vec<String> = declared.iter().map(|(n, _)| n.clone()).collect();
    let listing =
        || if names.is_empty() { "it has none".to_string() } else { format!("its inputs: {}", names.join(", ")) };

    let mut files: Vec<Option<&Path>> = vec![None; names.len()];
    for (name, path) in &args.inputs {
        let i = names.iter().position(|n| n == name).ok_or_else(|| {
            Error::Arguments(format!("--input {name}=…: the model has no input named `{name}` ({})", listing()))
        })?;
        if files[i].is_some() {
            return Err(Error::Arguments(format!("input `{name}` is given twice")));
        }
        files[i] = Some(path);
    }

    let symbols = check_dims(declared, &args.dims)?;
    let mut bound: BTreeMap<String, Binding> = BTreeMap::new();
    for (sym, n) in &args.dims {
        bound.insert(sym.clone(), Binding { value: *n, from: format!("--dim {sym}={n}") });
    }

    // Inputs from files; compound dims (`2*n`) are checked once every symbol is bound.
    let mut tensors: Vec<Option<Tensor>> = vec![None; names.len()];
    let mut deferred: Vec<(usize, usize, Dim, u64)> = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let Some(path) = path else { continue };
        let name = &names[i];
        let ty = &declared[i].1;
        let bad = |message: String| Error::Input { name: name.clone(), path: path.to_path_buf(), message };
        let t = npy::read(path)?;
        let t = if t.dtype() == ty.dtype {
            t
        } else if ty.dtype == DType::BF16 && t.dtype() == DType::F32 {
            note(&format!("input `{name}`: bf16 read from f32 data (.npy has no bf16), rounded to nearest"));
            npy::to_bf16(&t).ok_or_else(|| bad("cannot convert the f32 data to bf16".into()))?
        } else {
            return Err(bad(format!("the file holds {} data but the input is declared {ty}", t.dtype())));
        };
        if t.shape().len() != ty.rank() {
            return Err(bad(format!(
                "the file's shape {:?} has rank {} but the input is declared {ty} (rank {})",
                t.shape(),
                t.shape().len(),
                ty.rank()
            )));
        }
        for (axis, (dim, &got)) in ty.shape.dims().iter().zip(t.shape()).enumerate() {
            let got = got as u64;
            if let Some(want) = dim.as_const() {
                if want != got {
                    return Err(bad(format!(
                        "the file's shape {:?} does not match the declared {ty}: dim {axis} is {got}, expected {want}",
                        t.shape()
                    )));
                }
            } else if let Some(sym) = dim.as_symbol() {
                match bound.get(sym.as_ref()) {
                    Some(b) if b.value != got => {
                        return Err(bad(format!(
                            "the file's shape {:?}: dim {axis} is {got}, but `{sym}` is {} (from {})",
                            t.shape(),
                            b.value,
                            b.from
                        )))
                    }
                    Some(_) => {}
                    None => {
                        bound.insert(sym.to_string(), Binding { value: got, from: format!("input `{name}`") });
                    }
                }
            } else {
                deferred.push((i, axis, dim.clone(), got));
            }
        }
        tensors[i] = Some(t);
    }

    for sym in &symbols {
        if !bound.contains_key(sym) {
            note(&format!("no size for symbol `{sym}` (use --dim {sym}=N); using {DEFAULT_SYMBOL_VALUE}"));
            bound.insert(sym.clone(), Binding { value: DEFAULT_SYMBOL_VALUE, from: "the default".into() });
        }
    }
    let lookup = |s: &str| bound.get(s).map(|b| b.value);

    for (i, axis, dim, got) in deferred {
        let want = dim.eval(&lookup);
        if want != Ok(got) {
            let shown = want.map_or_else(|e| e.to_string(), |n| n.to_string());
            return Err(Error::Input {
                name: names[i].clone(),
                path: files[i].map(Path::to_path_buf).unwrap_or_default(),
                message: format!(
                    "dim {axis} is {got} but the declared `{dim}` is {shown} with the symbols bound so far"
                ),
            });
        }
    }

    let limit = Options::default().max_elements;
    let mut out = Vec::with_capacity(names.len());
    for (i, t) in tensors.into_iter().enumerate() {
        if let Some(t) = t {
            out.push(t);
            continue;
        }
        let name = &names[i];
        let ty = &declared[i].1;
        let dims = ty
            .shape
            .dims()
            .iter()
            .map(|d| d.eval(&lookup).ok().and_then(|n| usize::try_from(n).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| {
                Error::Usage(format!("input `{name}`: its shape {} has no size with these symbol values", ty.shape))
            })?;
        let too_large = || Error::Usage(format!("input `{name}`: {}{dims:?} is too large to generate", ty.dtype));
        let n = checked_numel(&dims).ok_or_else(too_large)?;
        if n as u64 > limit {
            return Err(too_large());
        }
        // Each input has its own stream, so giving one input from a file does not change
        // the values generated for the others.
        let mut rng = Rng::new(Rng::new(args.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64());
        let t = random_tensor(&mut rng, ty.dtype, &dims).map_err(|_| too_large())?;
        note(&format!("input `{name}`: random {}{dims:?} (seed {})", ty.dtype, args.seed));
        out.push(t);
    }
    Ok(out)
}
