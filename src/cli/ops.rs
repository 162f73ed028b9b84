//! `ladder ops`: the operator registry as a table or as JSON.

use std::io::Write;

use serde_json::{json, Value as Json};

use super::coverage::coverage;
use ladder::ir::{write_float, AttrDefault, AttrSpec, AttrValue};
use ladder::ops::{all_specs, Arity, OpSpec, Rung};

use super::Error;

#[derive(clap::Args, Debug)]
pub struct OpsArgs {
    /// Print a JSON array (one object per op) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Every op a model can use (sources are not listed: they are not written as ops).
fn listed() -> impl Iterator<Item = &'static OpSpec> {
    all_specs().filter(|s| s.rung != Rung::Source)
}

pub fn ops(args: &OpsArgs, out: &mut dyn Write) -> Result<(), Error> {
    let text = if args.json { json_text() } else { table() };
    out.write_all(text.as_bytes()).map_err(Error::Stdout)
}

fn json_text() -> String {
    let rows: Vec<Json> = listed()
        .map(|s| {
            let c = coverage(s.kind);
            let (min, max) = match s.arity {
                Arity::Exactly(k) => (k, Some(k)),
                Arity::Between(lo, hi) => (lo, Some(hi)),
                Arity::AtLeast(k) => (k, None),
            };
            let attrs: Vec<Json> = s
                .attrs
                .iter()
                .map(|a| {
                    json!({
                        "name": a.name,
                        "kind": a.kind.name(),
                        "required": matches!(a.default, AttrDefault::Required),
                        "default": default_json(a),
                    })
                })
                .collect();
            json!({
                "name": s.name,
                "rung": s.rung.name(),
                "arity": {"min": min, "max": max},
                "attrs": attrs,
                "interp": c.interp,
                "decomp": c.decomp,
                "vjp": c.vjp,
                "cpu": c.cpu,
                "cpu_native": c.cpu_native,
                "vulkan": c.vulkan,
                "mutates": s.mutates,
                "aliases": s.aliases,
                "doc": s.doc,
            })
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&Json::Array(rows)).unwrap_or_default();
    text.push('\n');
    text
}

/// An attribute's default as JSON: `null` when required; non-finite floats as their text
/// (`"nan"`, `"inf"`), which JSON numbers cannot hold; symbolic dims as their text (`"batch"`).
fn default_json(a: &AttrSpec) -> Json {
    let Some(v) = a.default_value() else { return Json::Null };
    match v {
        AttrValue::Int(v) => json!(v),
        AttrValue::Float(v) => serde_json::Number::from_f64(v).map(Json::Number).unwrap_or_else(|| {
            let mut s = String::new();
            let _ = write_float(&mut s, v);
            Json::String(s)
        }),
        AttrValue::Bool(v) => json!(v),
        AttrValue::Ints(v) => json!(v),
        AttrValue::Dims(v) => {
            let dim = |d: &Option<ladder::Dim>| match d {
                None => json!(-1),
                Some(d) => d.as_const().map_or_else(|| json!(d.to_string()), |n| json!(n)),
            };
            Json::Array(v.iter().map(dim).collect())
        }
        AttrValue::Size(e) => json!(e.to_string()),
        AttrValue::DType(d) => json!(d.name()),
        AttrValue::Str(s) => json!(s),
    }
}

fn arity_text(a: Arity) -> String {
    match a {
        Arity::Exactly(k) => k.to_string(),
        Arity::Between(lo, hi) => format!("{lo}-{hi}"),
        Arity::AtLeast(k) => format!("{k}+"),
    }
}

/// `name=default` per attribute, `name=?` when required.
fn attrs_text(s: &OpSpec) -> String {
    let parts: Vec<String> = s
        .attrs
        .iter()
        .map(|a| match a.default_value() {
            Some(v) => format!("{}={v}", a.name),
            None => format!("{}=?", a.name),
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn table() -> String {
    let yes = |b: bool| if b { "yes" } else { "-" }.to_string();
    let header = ["name", "rung", "arity", "attrs", "interp", "decomp", "vjp", "cpu", "vulkan", "doc"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let (mut high, mut prim, mut opaque) = (0, 0, 0);
    for s in listed() {
        match s.rung {
            Rung::High => high += 1,
            Rung::Prim => prim += 1,
            Rung::Opaque => opaque += 1,
            Rung::Source => {}
        }
        let c = coverage(s.kind);
        rows.push(vec![
            s.name.to_string(),
            s.rung.name().to_string(),
            arity_text(s.arity),
            attrs_text(s),
            yes(c.interp),
            yes(c.decomp),
            yes(c.vjp),
            match (c.cpu, c.cpu_native) {
                (_, true) => "native".to_string(),
                (true, false) if s.rung != Rung::High => "ref".to_string(),
                (cpu, false) => yes(cpu),
            },
            yes(c.vulkan),
            s.doc.to_string(),
        ]);
    }
    let columns = header.len();
    let widths: Vec<usize> =
        (0..columns).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text.push_str(&format!(
        "\n{} ops: {high} high-level, {prim} prims, {opaque} opaque. `attr=?` marks a required attribute.\n",
        high + prim + opaque
    ));
    text
}
