//! `ladder info`: what an ONNX model holds and whether ladder can import it; what a compiled
//! artifact holds.

use std::io::Write;
use std::path::PathBuf;

use ladder::frontend::onnx::{self, ImportError};

use super::Error;

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// An ONNX model file, or a compiled artifact (`ladder compile`).
    pub model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn info(args: &InfoArgs, out: &mut dyn Write) -> Result<(), Error> {
    let options = super::model::import_options();
    let path = &args.model;
    if path.extension().is_some_and(|e| e == "lad") {
        return Err(Error::Arguments(format!(
            "`{}` is ladder's text form; `info` describes ONNX files (`ladder dump --stats` counts a text-form model's ops)",
            path.display()
        )));
    }
    let onnx_err = |error| Error::Onnx { path: path.clone(), error: Box::new(error) };
    let is_artifact =
        ladder::artifact::file_is_artifact(path).map_err(|source| Error::Read { path: path.clone(), source })?;
    if is_artifact {
        return artifact_info(args, out);
    }
    let bytes = onnx::read_bounded(path, &options.limits).map_err(onnx_err)?;
    let model = onnx::decode(&bytes, &options).map_err(onnx_err)?;
    let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let s = onnx::summarize(&model, &options, Some(&dir));
    let w = |out: &mut dyn Write, line: String| writeln!(out, "{line}").map_err(Error::Stdout);
    if args.json {
        let ops: Vec<serde_json::Value> = s
            .ops
            .iter()
            .map(|o| {
                serde_json::json!({"domain": o.domain, "op_type": o.op_type, "count": o.count, "supported": o.supported})
            })
            .collect();
        let io = |v: &[(String, String)]| -> Vec<serde_json::Value> {
            v.iter().map(|(n, t)| serde_json::json!({"name": n, "type": t})).collect()
        };
        let j = serde_json::json!({
            "ir_version": s.ir_version,
            "producer": s.producer,
            "opsets": s.opsets.iter().map(|(d, v)| serde_json::json!({"domain": d, "version": v})).collect::<Vec<_>>(),
            "inputs": io(&s.inputs),
            "outputs": io(&s.outputs),
            "initializers": s.initializers,
            "initializer_bytes": s.initializer_bytes,
            "ops": ops,
            "imports": s.import.is_ok(),
            "error": s.import.as_ref().err().map(ToString::to_string),
        });
        return w(out, serde_json::to_string_pretty(&j).unwrap_or_default());
    }
    w(out, format!("model: {}", path.display()))?;
    w(
        out,
        format!("ir_version: {}   producer: {}", s.ir_version, if s.producer.is_empty() { "-" } else { &s.producer }),
    )?;
    let opsets: Vec<String> =
        s.opsets.iter().map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d })).collect();
    w(out, format!("opsets: {}", opsets.join(", ")))?;
    w(out, "inputs:".into())?;
    for (n, t) in &s.inputs {
        w(out, format!("  {n}: {t}"))?;
    }
    w(out, "outputs:".into())?;
    for (n, t) in &s.outputs {
        w(out, format!("  {n}: {t}"))?;
    }
    w(out, format!("initializers: {} ({} bytes)", s.initializers, s.initializer_bytes))?;
    let total: usize = s.ops.iter().map(|o| o.count).sum();
    w(out, format!("ops: {total} nodes, {} op types", s.ops.len()))?;
    let mut ops = s.ops.clone();
    ops.sort_by(|a, b| b.count.cmp(&a.count).then(a.op_type.cmp(&b.op_type)));
    for o in &ops {
        let name = if o.domain.is_empty() { o.op_type.clone() } else { format!("{}::{}", o.domain, o.op_type) };
        w(out, format!("  {:>6}  {:<32} {}", o.count, name, if o.supported { "supported" } else { "NOT SUPPORTED" }))?;
    }
    match &s.import {
        Ok(()) => w(out, "import: ok".into()),
        Err(ImportError::Unsupported(list)) => w(out, format!("import: fails: {} unsupported op type(s)", list.len())),
        Err(e) => w(out, format!("import: fails: {e}")),
    }
}

/// `info` of a compiled artifact: its format, who wrote it and how it was lowered, its inputs,
/// outputs, weights and ops.
fn artifact_info(args: &InfoArgs, out: &mut dyn Write) -> Result<(), Error> {
    let path = &args.model;
    let a = ladder::artifact::Artifact::load(path, &super::model::limits())
        .map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
    let g = &a.graph;
    let inputs: Vec<(String, String)> =
        g.inputs().iter().enumerate().map(|(i, &v)| (g.input_name(i), g.ty(v).to_string())).collect();
    let outputs: Vec<(String, String)> =
        g.outputs().iter().map(|o| (o.name.clone(), g.ty(o.value).to_string())).collect();
    let weights: usize = g.blobs().map(|(_, b)| b.tensor.numel() * b.tensor.dtype().size_bytes()).sum();
    let mut ops: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, node) in g.nodes() {
        *ops.entry(node.op.name()).or_default() += 1;
    }
    let mode = match a.mode {
        ladder::pipeline::Mode::Native => "native (recovered rung)",
        ladder::pipeline::Mode::Reference => "reference (simplified rung)",
        ladder::pipeline::Mode::Shaders => {
            "shaders (recovered rung: the row ops and attention a device's library shaders run)"
        }
    };
    let w = |out: &mut dyn Write, line: String| writeln!(out, "{line}").map_err(Error::Stdout);
    if args.json {
        let pairs = |v: &[(String, String)]| -> Vec<serde_json::Value> {
            v.iter().map(|(n, t)| serde_json::json!({"name": n, "type": t})).collect()
        };
        let j = serde_json::json!({
            "artifact": true,
            "format_version": a.format_version,
            "writer": a.writer,
            "mode": mode,
            "source": a.source,
            "inputs": pairs(&inputs),
            "outputs": pairs(&outputs),
            "blobs": g.blobs().count(),
            "weight_bytes": weights,
            "ops": ops,
            "writes_inputs": a.epilogue.mutations.iter().map(|m| m.input).collect::<Vec<_>>(),
        });
        return w(out, serde_json::to_string_pretty(&j).unwrap_or_default());
    }
    w(out, format!("artifact: {} (format version {}, written by {})", path.display(), a.format_version, a.writer))?;
    w(out, format!("compiled from: {}, {mode} lowering", a.source))?;
    for (n, t) in &inputs {
        w(out, format!("input  {n}: {t}"))?;
    }
    for (n, t) in &outputs {
        w(out, format!("output {n}: {t}"))?;
    }
    w(out, format!("weights: {} blobs, {weights} bytes", g.blobs().count()))?;
    let hist: Vec<String> = ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
    w(out, format!("ops ({} nodes): {}", g.len(), hist.join(", ")))
}
