//! `ladder conformance`: the ONNX backend node tests (a folder of cases, each `model.onnx`
//! plus `test_data_set_*`), run on a backend and compared with ONNX's tolerance.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use ladder::frontend::onnx::conformance::{self, CaseResult, Verdict};
use ladder::runtime::{BackendKind, CompileOptions};

use super::{note, BackendArg, Error};

#[derive(clap::Args, Debug)]
pub struct ConformanceArgs {
    /// Folder of cases, e.g. onnx/backend/test/data/node inside the onnx 1.22.0 wheel.
    pub dir: PathBuf,
    /// Where to run (`cpu`: compiled plans on one thread, native kernels with the reference
    /// executor for the rest).
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// Deny list: one case per line with its reason (default: tests/onnx_conformance/deny.txt
    /// in the source tree when it exists).
    #[arg(long, value_name = "FILE")]
    pub deny: Option<PathBuf>,
    /// Only cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Print JSON (`backend`, `passed`, `failed`, `unsupported`, `denied`, `total`, `panics`,
    /// `passed_specialized`, `seconds`, and `cases`: every case's `name`, `verdict`, `reason`
    /// and `specialized`).
    #[arg(long)]
    pub json: bool,
    /// List every case that did not pass, with its reason.
    #[arg(long, short)]
    pub verbose: bool,
}

pub fn conformance(args: &ConformanceArgs, out: &mut dyn Write) -> Result<(), Error> {
    let backend_kind = args.backend.backend();
    let deny_path = args.deny.clone().or_else(|| {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_conformance/deny.txt");
        p.is_file().then_some(p)
    });
    let deny = match &deny_path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| Error::Read { path: p.clone(), source })?;
            conformance::read_deny_list(&text).map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?
        }
        None => Default::default(),
    };
    let cases = conformance::cases(&args.dir).map_err(|source| Error::Read { path: args.dir.clone(), source })?;
    if cases.is_empty() {
        return Err(Error::Usage(format!("no cases (folders with model.onnx) in `{}`", args.dir.display())));
    }
    let options = super::model::import_options();
    let compile = match backend_kind {
        BackendKind::Cpu => CompileOptions::native_cpu(1).map_err(|e| Error::Usage(format!("cpu backend: {e}")))?,
        BackendKind::Interp => CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() },
        BackendKind::Vulkan => CompileOptions::vulkan(),
    };
    let start = Instant::now();
    let quiet_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut results: Vec<CaseResult> = Vec::new();
    let bar = super::progress::bar(cases.len(), &format!("conformance ({})", args.backend.name()));
    for case in &cases {
        let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        bar.inc(1);
        if args.filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        bar.set_message(name.clone());
        if let Some(reason) = deny.get(&name) {
            results.push(CaseResult {
                name,
                verdict: Verdict::Denied,
                reason: reason.clone(),
                panicked: false,
                specialized: false,
            });
            continue;
        }
        results.push(conformance::run_case_guarded(case, &options, &compile));
    }
    std::panic::set_hook(quiet_hook);
    bar.finish_and_clear();
    let count = |v: Verdict| results.iter().filter(|r| r.verdict == v).count();
    let (passed, failed, unsupported, denied) =
        (count(Verdict::Passed), count(Verdict::Failed), count(Verdict::Unsupported), count(Verdict::Denied));
    let panics = results.iter().filter(|r| r.panicked).count();
    let specialized = results.iter().filter(|r| r.specialized && r.verdict == Verdict::Passed).count();
    let total = results.len();
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(Error::Stdout);
    if args.json {
        let cases: Vec<serde_json::Value> = results
            .iter()
            .map(|r| serde_json::json!({"name": r.name, "verdict": r.verdict.name(), "reason": r.reason, "specialized": r.specialized}))
            .collect();
        let j = serde_json::json!({
            "backend": args.backend.name(),
            "passed": passed, "failed": failed, "unsupported": unsupported, "denied": denied, "total": total,
            "panics": panics, "passed_specialized": specialized, "seconds": start.elapsed().as_secs_f64(), "cases": cases,
        });
        return w(out, serde_json::to_string_pretty(&j).unwrap_or_default());
    }
    if args.verbose {
        for r in &results {
            if r.verdict != Verdict::Passed {
                w(out, format!("{:<12} {}: {}", r.verdict.name(), r.name, r.reason))?;
            }
        }
    }
    let pct = |n: usize, d: usize| if d == 0 { 0.0 } else { 100.0 * n as f64 / d as f64 };
    w(out, format!(
        "{passed} passed, {failed} failed, {unsupported} unsupported, {denied} denied, {total} total ({:.1}% passed; {:.1}% of the cases ladder supports)",
        pct(passed, total),
        pct(passed, passed + failed)
    ))?;
    if specialized > 0 {
        note(&format!(
            "{specialized} passing case(s) were compiled per data set: for their input shapes, or for values their graph depends on (axes, pads, shapes, trip counts, branch conditions)"
        ));
    }
    if panics > 0 {
        note(&format!("{panics} case(s) panicked"));
    }
    note(&format!("{} cases in {:.1}s on {}", total, start.elapsed().as_secs_f64(), args.backend.name()));
    Ok(())
}
