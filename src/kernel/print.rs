//! The text form of a kernel program, for `ladder dump --stage kernels` and golden tests.

use std::fmt::{self, Write};

use super::{Instr, Kernel, Program, Scalar, Stage, Step};
use crate::ir::write_float;

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, b) in self.buffers.iter() {
            let kind = match &b.kind {
                super::BufferKind::Input(n) => format!("input {n}"),
                super::BufferKind::Const(name) => format!("const @{}", crate::text::quote_name(name)),
                super::BufferKind::Temp => "temp".to_string(),
            };
            let value = b.value.map(|v| format!("  ; {v}")).unwrap_or_default();
            writeln!(f, "{id}: {}{} {kind}{value}", b.dtype, b.shape)?;
        }
        for step in &self.steps {
            match step {
                Step::Kernel(k) => write!(f, "{k}")?,
                Step::Matmul(m) => {
                    writeln!(
                        f,
                        "matmul {} = {}{} @ {}{}{}",
                        m.out,
                        m.a,
                        if m.transpose_a { "^T" } else { "" },
                        m.b,
                        if m.transpose_b { "^T" } else { "" },
                        m.epilogue.as_ref().map_or(String::new(), |k| format!(", epilogue {} per row tile:", k.name))
                    )?;
                    if let Some(k) = &m.epilogue {
                        write!(f, "{k}")?;
                    }
                    if let Some(l) = &m.activation {
                        write_activation(f, l, "per row tile")?;
                    }
                }
                Step::Conv(c) => {
                    write!(
                        f,
                        "conv {} = conv({}, {}) stride={:?} padding={:?} dilation={:?} groups={}",
                        c.out, c.x, c.w, c.stride, c.padding, c.dilation, c.groups
                    )?;
                    if let Some(pool) = &c.pool {
                        write!(f, ", then {pool}")?;
                    }
                    if let Some(post) = &c.post {
                        write!(f, ", then {post}")?;
                    }
                    writeln!(f)?
                }
                Step::Library(l) => {
                    let args: Vec<String> = l.args.iter().map(|b| b.to_string()).collect();
                    let attrs: Vec<String> = l.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "library {} = {}({}) {{{}}}", l.out, l.op, args.join(", "), attrs.join(", "))?;
                    if let Some(post) = &l.post {
                        write!(f, ", then {post}")?;
                    }
                    writeln!(f)?
                }
                Step::Interp(i) => {
                    let args: Vec<String> = i.args.iter().map(|b| b.to_string()).collect();
                    let results: Vec<String> = i.results.iter().map(|b| b.to_string()).collect();
                    writeln!(f, "interp {} = ({}) ; graph break: {}", results.join(", "), args.join(", "), i.reason)?;
                    for line in crate::text::print(&i.graph).lines() {
                        writeln!(f, "  | {line}")?;
                    }
                }
            }
        }
        let outs: Vec<String> = self.outputs.iter().map(|(n, b)| format!("{n}={b}")).collect();
        writeln!(f, "outputs {}", outs.join(", "))
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outer: Vec<String> = self.outer.iter().map(|d| d.to_string()).collect();
        let covers: Vec<String> = self.covers.iter().map(|v| v.to_string()).collect();
        writeln!(f, "kernel {} outer [{}] {{  ; {}", self.name, outer.join(", "), covers.join(" "))?;
        for (i, stage) in self.stages.iter().enumerate() {
            write_stage(f, i, stage)?;
        }
        writeln!(f, "}}")?;
        match &self.activation {
            Some(l) => write_activation(f, l, "per range of rows"),
            None => Ok(()),
        }
    }
}

/// The elementwise library op a matmul or kernel step runs on its rows.
fn write_activation(f: &mut fmt::Formatter<'_>, l: &super::LibraryCall, when: &str) -> fmt::Result {
    let args: Vec<String> = l.args.iter().map(|b| b.to_string()).collect();
    let attrs: Vec<String> = l.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(f, "  then library {} = {}({}) {{{}}} {when}", l.out, l.op, args.join(", "), attrs.join(", "))
}

fn write_stage(f: &mut fmt::Formatter<'_>, i: usize, stage: &Stage) -> fmt::Result {
    let inner: Vec<String> = stage.inner.iter().map(|d| d.to_string()).collect();
    write!(f, "  stage {i} inner [{}]", inner.join(", "))?;
    for (k, acc) in stage.accumulators.iter().enumerate() {
        let op = acc.op.name();
        write!(f, " acc{k}={op}:{}->{}", acc.dtype, acc.result)?;
    }
    writeln!(f)?;
    for instr in &stage.body {
        let mut line = String::new();
        let _ = match instr {
            Instr::Load { dst, buf, index } => write!(line, "{dst} = load {buf}[{index}]"),
            Instr::LoadAt { dst, buf, index } => write!(line, "{dst} = load {buf}[at {index}]"),
            Instr::Const { dst, value, dtype } => {
                let _ = write!(line, "{dst} = const {dtype} ");
                match value {
                    Scalar::Float(x) => write_float(&mut line, *x),
                    Scalar::Int(x) => write!(line, "{x}"),
                    Scalar::Bool(x) => write!(line, "{x}"),
                }
            }
            Instr::LoopVar { dst, var, dtype } => write!(line, "{dst} = {var} as {dtype}"),
            Instr::Unary { dst, op, x, dtype } => write!(line, "{dst} = {op} {x} : {dtype}"),
            Instr::Binary { dst, op, a, b, dtype } => write!(line, "{dst} = {op} {a}, {b} : {dtype}"),
            Instr::Select { dst, cond, a, b, dtype } => write!(line, "{dst} = where {cond}, {a}, {b} : {dtype}"),
            Instr::Convert { dst, x, dtype } => write!(line, "{dst} = convert {x} : {dtype}"),
            Instr::Accumulate { acc, x, index: None } => write!(line, "acc{acc} <- {x}"),
            Instr::Accumulate { acc, x, index: Some(i) } => write!(line, "acc{acc} <- {x} at {i}"),
            Instr::Store { buf, index, value } => write!(line, "store {buf}[{index}] = {value}"),
        };
        writeln!(f, "    {line}")?;
    }
    Ok(())
}

impl fmt::Display for super::ChannelPost {
    /// `v + b3[c], max(v, 0), silu {nan_at_neg_inf=true}`: the steps in order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match &self.addend {
            Some(super::Addend::Channel(b)) => parts.push(format!("v + {b}[c]")),
            Some(super::Addend::Scalar(s)) => parts.push(format!("v + {s:?}")),
            None => {}
        }
        if self.relu {
            parts.push("max(v, 0)".into());
        }
        if let Some((op, attrs)) = &self.activation {
            let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.push(format!("{op} {{{}}}", attrs.join(", ")));
        }
        write!(f, "{}", parts.join(", "))
    }
}

impl fmt::Display for super::ConvPool {
    /// `max_pool2d {kernel=[2, 2], stride=[2, 2], …}`: the pooling and its attributes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attrs: Vec<String> = self.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "max_pool2d {{{}}}", attrs.join(", "))
    }
}
