//! Printer for the text form.

use std::fmt::Write;

use super::quote_name;
use crate::ir::{write_float, Graph};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// How to print.
#[derive(Clone, Debug, Default)]
pub struct PrintOptions {
    /// Print `= elided` instead of the data of blobs with more elements than this. Text with
    /// elided blobs is for reading only; it does not parse.
    pub elide_blobs_over: Option<usize>,
}

/// The full text of a graph, blob data included; `parse(&print(g)) == g`.
pub fn print(g: &Graph) -> String {
    print_with(g, &PrintOptions::default())
}

/// `g` in the text form, as `options` say (see [`PrintOptions`]).
pub fn print_with(g: &Graph, options: &PrintOptions) -> String {
    let mut out = String::new();
    for (_, blob) in g.blobs() {
        let t = &blob.tensor;
        let shape = t.shape().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let _ = write!(out, "blob @{}: {}[{}] = ", quote_name(&blob.name), t.dtype(), shape);
        match options.elide_blobs_over {
            Some(limit) if t.numel() > limit => out.push_str("elided"),
            _ => write_blob_data(&mut out, t),
        }
        out.push('\n');
    }
    let inputs: Vec<String> = g.inputs().iter().map(|&v| format!("{}: {}", g.display_value(v), g.ty(v))).collect();
    let graph_name = if super::is_ident(&g.name) { g.name.clone() } else { format!("{:?}", g.name) };
    let _ = writeln!(out, "graph {}({}) {{", graph_name, inputs.join(", "));
    for (v, node) in g.nodes() {
        match node.op {
            OpKind::Input => continue,
            OpKind::Const => {
                let _ = write!(out, "  {} = const @{}", g.display_value(v), quote_name(node.attrs.str("blob")));
            }
            op => {
                let args: Vec<String> = node.args.iter().map(|&a| g.display_value(a)).collect();
                let _ = write!(out, "  {} = {}({})", g.display_value(v), op.name(), args.join(", "));
                let spec = op.spec();
                let shown: Vec<String> = node
                    .attrs
                    .iter()
                    .zip(spec.attrs)
                    .filter(|((_, value), s)| s.default_value().as_ref() != Some(*value))
                    .map(|((name, value), _)| format!("{name}={value}"))
                    .collect();
                if !shown.is_empty() {
                    let _ = write!(out, " {{{}}}", shown.join(", "));
                }
            }
        }
        let _ = writeln!(out, " : {}", node.ty);
    }
    let rets: Vec<String> = g
        .outputs()
        .iter()
        .map(|o| {
            if o.name == g.default_output_name(o.value) {
                g.display_value(o.value)
            } else if super::is_ident(&o.name) {
                format!("{} as {}", g.display_value(o.value), o.name)
            } else {
                format!("{} as {:?}", g.display_value(o.value), o.name)
            }
        })
        .collect();
    if rets.is_empty() {
        out.push_str("  return\n}\n");
    } else {
        let _ = writeln!(out, "  return {}\n}}", rets.join(", "));
    }
    out
}

fn write_blob_data(out: &mut String, t: &Tensor) {
    out.push('[');
    let n = t.numel();
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        match t.data() {
            TensorData::F32(v) => write_f32(out, v[i]),
            TensorData::F16(v) => write_f32(out, v[i].to_f32()),
            TensorData::BF16(v) => write_f32(out, v[i].to_f32()),
            TensorData::F64(v) => {
                let _ = write_float(out, v[i]);
            }
            TensorData::I32(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::I64(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::Bool(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::I8(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::I16(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::U8(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::U16(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::U32(v) => {
                let _ = write!(out, "{}", v[i]);
            }
            TensorData::U64(v) => {
                let _ = write!(out, "{}", v[i]);
            }
        }
    }
    out.push(']');
}

/// An f32 as the shortest text that parses back to it; NaN keeps its payload.
fn write_f32(out: &mut String, x: f32) {
    if x.is_nan() {
        if x.to_bits() == f32::NAN.to_bits() {
            out.push_str("nan");
        } else {
            let _ = write!(out, "nan:0x{:08x}", x.to_bits());
        }
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "inf" } else { "-inf" });
    } else {
        let _ = write!(out, "{x:?}");
    }
}
