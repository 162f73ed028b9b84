//! GEMM epilogues: a kernel that consumes a matrix product row by row runs as the product's
//! epilogue, per finished row tile, while the tile is still in cache.
//!
//! After assembly, a `matmul` step immediately followed by a kernel step is fused when:
//!
//! - the kernel reads the product only through affine loads (never a computed `LoadAt`) and
//!   never writes it;
//! - the kernel's outermost loop runs over the product's rows (the output viewed as
//!   `[rows, n]` with `n` its static last dim; `rows` the product of the other dims), and
//!   every load of the product in iteration `r` of that loop stays inside row `r`: the index
//!   is `n·o0 + Σ strideᵢ·varᵢ` with static non-negative strides and extents whose span is
//!   below `n`.
//!
//! An elementwise library op (a recovered `gelu`) right after such a matmul whose argument is
//! the product, or a buffer the epilogue kernel stores row by row (the same index test), runs
//! per row tile too, after the kernel: an MLP's `matmul → bias → gelu` is one GEMM call.
//!
//! The same op right after a plain kernel step runs on that kernel's rows when its argument
//! is an f32 temporary the kernel stores row by row (the same index test), never loads, and
//! nothing else reads (`Kernel::activation`): `x·a + b → gelu` is one pass, the kernel writing
//! straight into gelu's result and gelu applied there per range of rows while they are in L1.
//!
//! Then iteration `r` of the kernel needs only row `r` of the product, so a backend can run
//! the kernel for rows `r0..r1` as soon as the GEMM has written them (bias adds, activations,
//! residual adds, a following layer norm's row statistics: whatever the scheduler fused into
//! the consumer). A backend that does not fuse runs the kernel after the whole product, which
//! means the same. The fused kernel keeps its name, so `ladder dump --stage kernels` shows it
//! under its matmul.

use std::fmt::Write;

use crate::ir::{DType, Dim};
use crate::kernel::{BufferId, BufferKind, Instr, Kernel, Program, Step, Var};

/// Fuses every eligible (matmul, consumer kernel) pair of `p`, then a recovered `gelu` right
/// after; returns one line per fusion, and per refusal of an adjacent pair, for `--explain`.
pub fn fuse(p: &mut Program) -> String {
    let mut notes = String::new();
    let mut i = 0;
    while i + 1 < p.steps.len() {
        let verdict = match (&p.steps[i], &p.steps[i + 1]) {
            (Step::Matmul(m), Step::Kernel(k)) if m.epilogue.is_none() => eligible(p, m.out, k),
            (Step::Matmul(m), Step::Library(l)) if m.activation.is_none() && crate::recover::is_activation(l.op) => {
                activation_eligible(p, m, l)
            }
            (Step::Kernel(k), Step::Library(l)) if k.activation.is_none() && crate::recover::is_activation(l.op) => {
                kernel_activation_eligible(p, i, k, l)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let (fused, refused) = match (&p.steps[i], &p.steps[i + 1]) {
            (Step::Matmul(m), Step::Kernel(k)) => (
                format!("{} runs as the epilogue of matmul {}", k.name, m.out),
                format!("{} is not the epilogue of matmul {}", k.name, m.out),
            ),
            (Step::Matmul(m), Step::Library(l)) => (
                format!("{} {} runs in matmul {} after its epilogue", l.op, l.out, m.out),
                format!("{} {} does not run in matmul {}", l.op, l.out, m.out),
            ),
            (Step::Kernel(k), Step::Library(l)) => (
                format!("{} {} runs on the rows kernel {} stores", l.op, l.out, k.name),
                format!("{} {} does not run in kernel {}", l.op, l.out, k.name),
            ),
            _ => unreachable!("matched above"),
        };
        let Err(why) = verdict else {
            let next = p.steps.remove(i + 1);
            match (&mut p.steps[i], next) {
                (Step::Matmul(m), Step::Kernel(k)) => m.epilogue = Some(Box::new(k)),
                (Step::Matmul(m), Step::Library(l)) => m.activation = Some(l),
                (Step::Kernel(k), Step::Library(l)) => {
                    let _ = writeln!(notes, "; {fused} (per range of rows)");
                    k.activation = Some(l);
                    i += 1;
                    continue;
                }
                _ => unreachable!("matched above"),
            }
            let _ = writeln!(notes, "; {fused} (per finished row tile)");
            // The same matmul may take the step after too (a gelu after its kernel).
            continue;
        };
        let _ = writeln!(notes, "; {refused}: {why}");
        i += 1;
    }
    notes
}

/// The rows and static row length (> 0) of buffer `b` viewed as `[rows, n]`.
fn rows_of(p: &Program, b: BufferId) -> Result<(Dim, u64), String> {
    let Some((last, lead)) = p.buffers[b].shape.dims().split_last() else { return Err(format!("{b} is a scalar")) };
    let n = last.as_const().filter(|&n| n > 0).ok_or_else(|| format!("{b}'s last dim is not a static size > 0"))?;
    let mut rows = Dim::from(1u64);
    for d in lead {
        rows = rows.mul(d).map_err(|e| format!("{b}'s row count: {e}"))?;
    }
    Ok((rows, n))
}

/// Whether the elementwise library op `l` (the step after matmul `m`) can run per row tile:
/// its argument is `m`'s output, or a buffer `m`'s epilogue kernel stores at `n·o0 + (a span
/// below n)`, `n` its static last dim, with the product's rows as its leading dims.
fn activation_eligible(
    p: &Program,
    m: &crate::kernel::MatmulCall,
    l: &crate::kernel::LibraryCall,
) -> Result<(), String> {
    let [x] = l.args[..] else { return Err("it does not take one argument".into()) };
    if x == m.out {
        return if m.epilogue.is_none() { Ok(()) } else { Err(format!("it reads {x} before the epilogue kernel")) };
    }
    let Some(k) = &m.epilogue else { return Err(format!("its argument {x} is not the product")) };
    let ((rows, _), (x_rows, n)) = (rows_of(p, m.out)?, rows_of(p, x)?);
    if rows != x_rows {
        return Err(format!("{x} does not have the product's rows"));
    }
    let mut stored = false;
    for stage in &k.stages {
        for instr in &stage.body {
            if let Instr::Store { buf, index, .. } = instr {
                if *buf != x {
                    continue;
                }
                row_local(index, n, k, stage).map_err(|e| format!("the epilogue kernel stores {x} {e}"))?;
                stored = true;
            }
        }
    }
    if stored {
        Ok(())
    } else {
        Err(format!("the epilogue kernel does not store {x}"))
    }
}

/// Whether `index` is `n·o0 + Σ strideᵢ·varᵢ` with static strides and extents spanning less
/// than `n`: iteration `o0` of the outermost loop touches only row `o0`.
fn row_local(index: &crate::kernel::Index, n: u64, k: &Kernel, stage: &crate::kernel::Stage) -> Result<(), String> {
    if index.offset.as_const() != Some(0) {
        return Err("at an offset".into());
    }
    let (mut row_term, mut span) = (false, 0u64);
    for (var, stride) in &index.terms {
        let stride = stride.as_const().ok_or("with a symbolic stride")?;
        if *var == Var::Outer(0) {
            if stride != n || row_term {
                return Err("not one row per outer iteration".into());
            }
            row_term = true;
            continue;
        }
        let extent = match var {
            Var::Outer(j) => k.outer.get(*j as usize),
            Var::Inner(j) => stage.inner.get(*j as usize),
        };
        let extent = extent.and_then(Dim::as_const).ok_or("over a symbolic extent")?;
        span = span.saturating_add(stride.saturating_mul(extent.saturating_sub(1)));
    }
    if row_term && span < n {
        Ok(())
    } else {
        Err("outside its row".into())
    }
}

/// Whether the elementwise library op `l` (step `i + 1`) can run on the rows kernel `k` (step
/// `i`) stores: its one argument is an f32 temporary of `l`'s result shape that `k` stores
/// block by block over its outermost loop (`B·o0 + a span below B`, `B` a row or, for a
/// static shape, the buffer's size over the loop's count) and never loads, and that no other
/// step and no output reads. Then a backend may run `l` per range of rows, or have `k` store
/// straight into `l`'s result and apply `l` there in place.
fn kernel_activation_eligible(p: &Program, i: usize, k: &Kernel, l: &crate::kernel::LibraryCall) -> Result<(), String> {
    let [x] = l.args[..] else { return Err("it does not take one argument".into()) };
    let (bx, bo) = (&p.buffers[x], &p.buffers[l.out]);
    if bx.kind != BufferKind::Temp || p.outputs.iter().any(|(_, b)| *b == x) {
        return Err(format!("its argument {x} is not a temporary only it reads"));
    }
    if bx.dtype != DType::F32 || bo.dtype != DType::F32 || bx.shape != bo.shape {
        return Err(format!("{x} and {} are not f32 buffers of one shape", l.out));
    }
    // The activation is elementwise: it runs on the block each outermost iteration stores,
    // a row of `x` or (a static shape) `len / outer[0]` elements, several rows at once.
    let (rows, n) = rows_of(p, x)?;
    let block = if k.outer.first() == Some(&rows) {
        n
    } else {
        let len = p.buffers[x].shape.numel().ok().and_then(|d| d.as_const());
        let outer = k.outer.first().and_then(Dim::as_const);
        match (len, outer) {
            (Some(len), Some(o)) if o > 0 && len % o == 0 => len / o,
            _ => {
                return Err(format!(
                    "the kernel's outermost loop does not run over {x}'s {rows} rows or static blocks of them"
                ))
            }
        }
    };
    let mut stored = false;
    for stage in &k.stages {
        for instr in &stage.body {
            match instr {
                Instr::Store { buf, index, .. } if *buf == x => {
                    row_local(index, block, k, stage).map_err(|e| format!("the kernel stores {x} {e}"))?;
                    stored = true;
                }
                Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } if *buf == x => {
                    return Err(format!("the kernel reads {x}"));
                }
                _ => {}
            }
        }
    }
    if !stored {
        return Err(format!("the kernel does not store {x}"));
    }
    match p.steps.iter().enumerate().find(|&(j, s)| j != i && j != i + 1 && step_uses(s, x)) {
        Some((j, _)) => Err(format!("step {j} uses {x} too")),
        None => Ok(()),
    }
}

/// Whether step `s` reads or writes buffer `b`.
fn step_uses(s: &Step, b: BufferId) -> bool {
    let mut used = false;
    s.for_each_buffer(|x| used |= x == b);
    used
}

/// Whether kernel `k` (the step after a matmul writing `out`) can run per row tile. Later
/// steps may read `out` too: the product is whole when the matmul step ends.
fn eligible(p: &Program, out: BufferId, k: &Kernel) -> Result<(), String> {
    let (rows, n) = rows_of(p, out)?;
    if k.outer.first() != Some(&rows) {
        return Err(format!("its outermost loop does not run over {out}'s {rows} rows"));
    }
    for stage in &k.stages {
        for instr in &stage.body {
            match instr {
                Instr::Store { buf, .. } if *buf == out => return Err(format!("it writes {out}")),
                Instr::LoadAt { buf, .. } if *buf == out => {
                    return Err(format!("it reads {out} at computed offsets"));
                }
                Instr::Load { buf, index, .. } if *buf == out => {
                    row_local(index, n, k, stage).map_err(|e| format!("it loads {out} {e}"))?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}
