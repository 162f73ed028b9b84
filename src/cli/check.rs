//! `ladder check`: run a model on a backend and on the reference interpreter and compare.
//!
//! The reference is the interpreter in precise mode (every op in f64: the ideal answer the
//! backend approximates). Per output it prints the largest absolute error and the largest
//! relative error, where an element's relative error is `|got - ref| / (|ref| + mean|ref|)`
//! (the mean magnitude of the output keeps elements near zero from dominating). An output
//! passes when its largest relative error is at most the tolerance (`--rtol`, by default
//! `max(1e-5, 16 eps)` of the output dtype), every non-finite reference value is matched
//! exactly (NaN by NaN, ±inf by the same infinity), and integer and bool outputs are equal.
//! The command fails (non-zero exit) when any output does not pass.

use std::io::Write;
use std::path::PathBuf;

use ladder::{BackendKind, Session, Tensor};

use super::run::{compile_options, prepare_inputs, run_session, session, RunArgs};
use super::{model, BackendArg, Error};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Model: the text form (.lad) or ONNX (.onnx); the built-in example encoder when omitted.
    pub model: Option<PathBuf>,
    /// The backend to check (`interp`: the interpreter in each op's own dtype, not in precise mode).
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// Threads for the CPU backend [default: the machine's].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
    /// Read input NAME from a .npy file (repeatable). Inputs not given are generated from --seed.
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = super::run::parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Seed for generated inputs.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Size of a symbolic input dim (repeatable); unbound symbols default to 2.
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = super::run::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Relative tolerance (default: max(1e-5, 16 eps of each output's dtype)).
    #[arg(long, value_name = "X")]
    pub rtol: Option<f64>,
    /// With `--backend cpu`: run softmax, log_softmax, layer_norm, rms_norm, gelu, silu, sigmoid
    /// and attention as generated kernels instead of recovering them into library kernels (to compare the two).
    #[arg(long)]
    pub no_recover: bool,
}

/// How far one output is from its reference.
struct Report {
    max_abs: f64,
    max_rel: f64,
    /// Elements that fail exactly (non-finite or integer mismatches).
    exact_mismatches: usize,
}

fn compare(got: &Tensor, want: &Tensor) -> Report {
    let mut r = Report { max_abs: 0.0, max_rel: 0.0, exact_mismatches: 0 };
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    if got.shape() != want.shape() {
        r.exact_mismatches = w.len().max(1);
        return r;
    }
    if !got.dtype().is_float() {
        r.exact_mismatches = g.iter().zip(&w).filter(|(a, b)| a != b).count();
        return r;
    }
    let finite: Vec<f64> = w.iter().copied().filter(|x| x.is_finite()).collect();
    let scale = if finite.is_empty() { 0.0 } else { finite.iter().map(|x| x.abs()).sum::<f64>() / finite.len() as f64 };
    for (&x, &y) in g.iter().zip(&w) {
        if !y.is_finite() || !x.is_finite() {
            let same = (x.is_nan() && y.is_nan()) || x == y;
            if !same {
                r.exact_mismatches += 1;
            }
            continue;
        }
        let d = (x - y).abs();
        r.max_abs = r.max_abs.max(d);
        let denom = y.abs() + scale;
        if denom > 0.0 {
            r.max_rel = r.max_rel.max(d / denom);
        } else if d > 0.0 {
            r.max_rel = f64::INFINITY;
        }
    }
    r
}

pub fn check(args: &CheckArgs, out: &mut dyn Write) -> Result<(), Error> {
    let which = args.backend.backend();
    let model = model::load(args.model.as_deref())?;
    let declared = model
        .inputs()
        .map_err(|error| Error::Onnx { path: args.model.clone().unwrap_or_default(), error: Box::new(error) })?;
    let run_args = RunArgs {
        model: args.model.clone(),
        inputs: args.inputs.clone(),
        backend: Some(BackendArg::Interp),
        threads: args.threads,
        out: None,
        seed: args.seed,
        dims: args.dims.clone(),
        precise: false,
        no_recover: args.no_recover,
    };
    // Imported before inputs are generated, so an import error comes before their notes.
    let reference = Session::new(model.clone(), compile_options(BackendKind::Interp, false, true, 1)?)
        .map_err(|e| super::run::session_error(e, args.model.as_deref()))?;
    let inputs = prepare_inputs(&declared, &run_args)?;
    let reference =
        super::progress::spin("running on the interpreter (precise)", || reference.run(&inputs).map_err(Error::from))?
            .outputs;
    let checked =
        session(model, args.model.as_deref(), compile_options(which, !args.no_recover, false, run_args.threads())?)?;
    let got = run_session(&checked, &inputs)?.outputs;
    let names = checked.model().output_names();
    let mut failed = Vec::new();
    for ((name, g_t), w_t) in names.iter().zip(&got).zip(&reference) {
        let r = compare(g_t, w_t);
        let dtype = g_t.dtype();
        let rtol = args.rtol.unwrap_or_else(|| 1e-5f64.max(16.0 * ladder::numerics::eps(dtype)));
        let ok = r.exact_mismatches == 0 && r.max_rel <= rtol;
        let shape: Vec<String> = g_t.shape().iter().map(|d| d.to_string()).collect();
        let mut line = format!("{name}: {}[{}]", g_t.dtype(), shape.join(", "));
        if dtype.is_float() {
            line += &format!("  max abs {:.3e}  max rel {:.3e}  (tolerance {rtol:.1e})", r.max_abs, r.max_rel);
        }
        if r.exact_mismatches > 0 {
            line += &format!("  {} elements differ exactly", r.exact_mismatches);
        }
        line += if ok { "  ok" } else { "  FAILED" };
        writeln!(out, "{line}").map_err(Error::Stdout)?;
        if !ok {
            failed.push(name.clone());
        }
    }
    if !failed.is_empty() {
        return Err(Error::Usage(format!(
            "backend `{}` disagrees with the interpreter on {}",
            args.backend.name(),
            failed.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}
