//! The ONNX backend node tests as external conformance: each case is a folder with
//! `model.onnx` and `test_data_set_*/{input,output}_*.pb`. A case is imported, run on each of
//! its data sets by a backend, and compared with the expected outputs with ONNX's own
//! tolerance (`|got - want| <= atol + rtol * |want|`, rtol 1e-3, atol 1e-7; NaN matches NaN;
//! integers and bools exactly; dtypes and shapes must match).
//!
//! Each case runs through a [`Session`], as a user's model would: compiled once for symbolic
//! shapes where it can be, else per data set for its input shapes and for the values its
//! graph depends on (a trip count, a branch condition, an axis given as an input), which the
//! session probes. A case that needed that is marked `specialized`.
//!
//! Verdicts: `Passed`; `Unsupported` when the importer reports something ladder cannot
//! express (an op type, element type or mode), or the backend refuses the program or a value
//! at run time (the Vulkan backend, for what it does not run yet); `Failed` for anything else (a wrong number,
//! an import or run error, or a panic, which is also flagged); `Denied` when the deny list
//! names the case.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{decode_tensor, tensor_from_proto, Budget, ImportError, ImportOptions, NodeError};
use crate::runtime::CompileOptions;
use crate::runtime::Declined;
use crate::session::{Model, Session, SessionError};
use crate::tensor::Tensor;

pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-7;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Passed,
    Failed,
    Unsupported,
    Denied,
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Unsupported => "unsupported",
            Verdict::Denied => "denied",
        }
    }
}

#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub verdict: Verdict,
    /// Why it did not pass.
    pub reason: String,
    pub panicked: bool,
    /// The model was compiled per data set (its input shapes, or values computed from its
    /// inputs), not once for symbolic shapes.
    pub specialized: bool,
}

/// Reads a deny list: one case per line, `name  reason` (the reason is required); `#`
/// starts a comment.
pub fn read_deny_list(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (name, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if reason.trim().is_empty() {
            return Err(format!("line {}: `{name}` has no reason", i + 1));
        }
        out.insert(name.to_string(), reason.trim().to_string());
    }
    Ok(out)
}

/// Every case folder under `dir` (folders holding `model.onnx`), sorted.
pub fn cases(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    out.sort();
    Ok(out)
}

fn is_unsupported(e: &ImportError) -> bool {
    match e {
        ImportError::Unsupported(_) | ImportError::DType { .. } | ImportError::Opset(_) => true,
        ImportError::Node { error, .. } => match error {
            NodeError::Unsupported(_) => true,
            NodeError::Tensor(e) => is_unsupported(e),
            _ => false,
        },
        ImportError::Graph(m) => {
            m.contains("not a tensor") || m.contains("not supported") || m.contains("cannot be probed")
        }
        _ => false,
    }
}

fn session_unsupported(e: &SessionError) -> bool {
    match e {
        SessionError::Import(e) => is_unsupported(e),
        SessionError::Probe(_) => true,
        // The backend refuses the program (no device, or a step it does not run yet).
        SessionError::Compile(crate::runtime::CompileError::Unsupported { .. }) => true,
        _ => false,
    }
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?.to_string();
                    let n = name.strip_prefix(prefix)?.strip_suffix(".pb")?.parse().ok()?;
                    Some((n, p))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

fn read_pb(path: &Path, options: &ImportOptions) -> Result<(String, Tensor), ImportError> {
    let bytes = super::read_bounded(path, &options.limits)?;
    let t = decode_tensor(&bytes, options)?;
    let tensor = tensor_from_proto(&t, options, None, &mut Budget::default())?;
    Ok((t.name.clone(), tensor))
}

/// Compares one output; `None` when it matches.
pub fn compare(got: &Tensor, want: &Tensor) -> Option<String> {
    if got.dtype() != want.dtype() {
        return Some(format!("dtype {} but expected {}", got.dtype(), want.dtype()));
    }
    if got.shape() != want.shape() {
        return Some(format!("shape {:?} but expected {:?}", got.shape(), want.shape()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if want.dtype().is_float() {
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL + RTOL * b.abs()
        } else {
            a == b
        };
        if !ok {
            return Some(format!("element {i}: got {a}, expected {b}"));
        }
    }
    None
}

/// Runs the session on one data set; `Err` with the verdict when it does not pass.
fn run_set(
    session: &Session,
    inputs: Vec<(String, Tensor)>,
    outputs: &[(String, Tensor)],
) -> Result<(), (Verdict, String)> {
    let names: Vec<&str> = session.inputs().iter().map(|(n, _)| n.as_str()).collect();
    let mut ordered: Vec<Option<Tensor>> = vec![None; names.len()];
    let named = inputs.iter().all(|(n, _)| names.contains(&n.as_str()));
    for (pos, (n, t)) in inputs.into_iter().enumerate() {
        let i = if named { names.iter().position(|x| *x == n).unwrap_or(pos) } else { pos };
        if i < ordered.len() {
            ordered[i] = Some(t);
        }
    }
    let Some(ordered) = ordered.into_iter().collect::<Option<Vec<_>>>() else {
        return Err((Verdict::Failed, format!("the data set does not give every input ({})", names.join(", "))));
    };
    let plan = match session.plan_for(&ordered) {
        Ok(p) => p,
        Err(e) if session_unsupported(&e) => return Err((Verdict::Unsupported, e.to_string())),
        Err(e) => return Err((Verdict::Failed, format!("run: {e}"))),
    };
    // A kernel the code generator failed on still runs (on the reference executor), but the
    // failure is a backend defect, and a conformance run is where it should show.
    if let Some(f) = plan.fallbacks().iter().find(|f| matches!(f.why, Declined::Defect(_))) {
        return Err((Verdict::Failed, format!("kernel {}: {}", f.kernel, f.why)));
    }
    let got = match plan.run(&ordered) {
        Ok(o) => o.outputs,
        // A value the backend has no implementation for yet: its limit, not a wrong result.
        Err(e @ crate::runtime::RunError::Step { error: crate::kernel::eval::ExecError::Unsupported { .. }, .. }) => {
            return Err((Verdict::Unsupported, format!("run: {e}")))
        }
        Err(e) => return Err((Verdict::Failed, format!("run: {e}"))),
    };
    if got.len() != outputs.len() {
        return Err((Verdict::Failed, format!("{} outputs, expected {}", got.len(), outputs.len())));
    }
    let out_names = session.model().output_names();
    for (i, (a, (_, b))) in got.iter().zip(outputs).enumerate() {
        if let Some(why) = compare(a, b) {
            let name = out_names.get(i).map(String::as_str).unwrap_or("?");
            return Err((Verdict::Failed, format!("output {i} (`{name}`): {why}")));
        }
    }
    Ok(())
}

type DataSet = (Vec<(String, Tensor)>, Vec<(String, Tensor)>);

fn read_set(set: &Path, options: &ImportOptions) -> Result<DataSet, (Verdict, String)> {
    let mut io = (Vec::new(), Vec::new());
    for (prefix, out) in [("input_", &mut io.0), ("output_", &mut io.1)] {
        for p in numbered(set, prefix) {
            match read_pb(&p, options) {
                Ok(t) => out.push(t),
                Err(e) if is_unsupported(&e) => return Err((Verdict::Unsupported, format!("{prefix}: {e}"))),
                Err(e) => return Err((Verdict::Failed, format!("reading {}: {e}", p.display()))),
            }
        }
    }
    Ok(io)
}

/// Runs one case: a session for its model (with `compile`'s backend), run on each data set.
pub fn run_case(case: &Path, options: &ImportOptions, compile: &CompileOptions) -> CaseResult {
    let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let result = |verdict, reason: String, specialized| CaseResult {
        name: name.clone(),
        verdict,
        reason,
        panicked: false,
        specialized,
    };
    let path = case.join("model.onnx");
    let model = match super::read_bounded(&path, &options.limits).and_then(|b| super::decode(&b, options)) {
        Ok(m) => m,
        Err(e) => return result(Verdict::Failed, format!("import: {e}"), false),
    };
    let session =
        match Session::new(Model::from_onnx(model, Some(case.to_path_buf()), options.clone()), compile.clone()) {
            Ok(s) => s,
            Err(e) if session_unsupported(&e) => return result(Verdict::Unsupported, e.to_string(), false),
            Err(e) => return result(Verdict::Failed, format!("{e}"), false),
        };
    let specialized = session.general_plan().is_none();
    let mut sets: Vec<PathBuf> = std::fs::read_dir(case)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
                })
                .collect()
        })
        .unwrap_or_default();
    sets.sort();
    if sets.is_empty() {
        return result(Verdict::Failed, "no test_data_set_* folder".into(), specialized);
    }
    for set in &sets {
        let (inputs, outputs) = match read_set(set, options) {
            Ok(io) => io,
            Err((v, why)) => return result(v, why, specialized),
        };
        if let Err((v, why)) = run_set(&session, inputs, &outputs) {
            return result(v, why, specialized);
        }
    }
    result(Verdict::Passed, String::new(), specialized)
}

/// Runs a case, turning a panic into a failed verdict.
pub fn run_case_guarded(case: &Path, options: &ImportOptions, compile: &CompileOptions) -> CaseResult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(case, options, compile))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            CaseResult {
                name: case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                verdict: Verdict::Failed,
                reason: format!("PANIC: {msg}"),
                panicked: true,
                specialized: false,
            }
        }
    }
}
