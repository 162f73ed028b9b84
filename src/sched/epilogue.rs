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
//! Then iteration `r` of the kernel needs only row `r` of the product, so a backend can run
//! the kernel for rows `r0..r1` as soon as the GEMM has written them (bias adds, activations,
//! residual adds, a following layer norm's row statistics: whatever the scheduler fused into
//! the consumer). A backend that does not fuse runs the kernel after the whole product, which
//! means the same. The fused kernel keeps its name, so `ladder dump --stage kernels` shows it
//! under its matmul.

use std::fmt::Write;

use crate::ir::Dim;
use crate::kernel::{BufferId, Instr, Kernel, Program, Step, Var};

/// Fuses every eligible (matmul, consumer kernel) pair of `p`; returns one line per fusion,
/// and per refusal of an adjacent pair, for `--explain`.
pub fn fuse(p: &mut Program) -> String {
    let mut notes = String::new();
    let mut i = 0;
    while i + 1 < p.steps.len() {
        let verdict = match (&p.steps[i], &p.steps[i + 1]) {
            (Step::Matmul(m), Step::Kernel(k)) if m.epilogue.is_none() => Some(eligible(p, m.out, k)),
            _ => None,
        };
        match verdict {
            Some(Ok(())) => {
                let Step::Kernel(k) = p.steps.remove(i + 1) else { unreachable!("checked above") };
                if let Step::Matmul(m) = &mut p.steps[i] {
                    let _ = writeln!(
                        notes,
                        "; {} runs as the epilogue of matmul {} (per finished row tile)",
                        k.name, m.out
                    );
                    m.epilogue = Some(Box::new(k));
                }
            }
            Some(Err(why)) => {
                if let (Step::Matmul(m), Step::Kernel(k)) = (&p.steps[i], &p.steps[i + 1]) {
                    let _ = writeln!(notes, "; {} is not the epilogue of matmul {}: {why}", k.name, m.out);
                }
            }
            None => {}
        }
        i += 1;
    }
    notes
}

/// Whether kernel `k` (the step after a matmul writing `out`) can run per row tile. Later
/// steps may read `out` too: the product is whole when the matmul step ends.
fn eligible(p: &Program, out: BufferId, k: &Kernel) -> Result<(), String> {
    let shape = p.buffers[out].shape.dims();
    let Some((last, lead)) = shape.split_last() else { return Err(format!("{out} is a scalar")) };
    let n = last.as_const().filter(|&n| n > 0).ok_or_else(|| format!("{out}'s last dim is not a static size > 0"))?;
    let mut rows = Dim::from(1u64);
    for d in lead {
        rows = rows.mul(d).map_err(|e| format!("{out}'s row count: {e}"))?;
    }
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
                    if index.offset.as_const() != Some(0) {
                        return Err(format!("a load of {out} has an offset"));
                    }
                    let mut row_term = false;
                    let mut span: u64 = 0;
                    for (var, stride) in &index.terms {
                        let stride =
                            stride.as_const().ok_or_else(|| format!("a load of {out} has a symbolic stride"))?;
                        if *var == Var::Outer(0) {
                            if stride != n || row_term {
                                return Err(format!("a load of {out} does not step one row per outer iteration"));
                            }
                            row_term = true;
                            continue;
                        }
                        let extent = match var {
                            Var::Outer(j) => k.outer.get(*j as usize),
                            Var::Inner(j) => stage.inner.get(*j as usize),
                        };
                        let extent = extent
                            .and_then(Dim::as_const)
                            .ok_or_else(|| format!("a load of {out} runs over a symbolic extent"))?;
                        span = span.saturating_add(stride.saturating_mul(extent.saturating_sub(1)));
                    }
                    if !row_term || span >= n {
                        return Err(format!("a load of {out} reaches outside its row"));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}
