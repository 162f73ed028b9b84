//! Loop interchange for kernels whose innermost loop is too short to run well.
//!
//! A kernel's innermost loop is the one backends vectorize, and each iteration of the outer
//! loops around it costs address set-up. Layout changes such as a nearest-neighbour upsampling
//! (`[.., w] -> [.., w, 2]`, read once and written twice) or a detector head's move of a short
//! channel dim last (`[.., 8, h, w] -> [.., h, w, 8]`) leave an innermost loop of 2 to 8
//! iterations under an outer loop of tens: most of the time goes to the outer loops.
//!
//! [`interchange`] swaps the innermost loop with the last outer loop when:
//!
//! - the kernel is a pure map: one stage, no accumulators, one inner loop, at least two
//!   outer loops (the first outer loop, which backends split over threads and epilogues read
//!   row by row, is never moved);
//! - both extents are static, the inner one at most [`MAX_INNER`] and below the outer one;
//! - no store's element is written twice across the two loops (each store's strides for the
//!   two variables nest without overlap), and no buffer is both stored and loaded other than
//!   at the same index (an in-place update): then iterations are independent and any order
//!   computes the same values;
//! - the swap pays: the inner loop had fewer than 4 iterations (less than one f32x4 vector),
//!   or the accesses that are contiguous or invariant along the innermost loop do not become
//!   fewer.

use crate::ir::Dim;
use crate::kernel::{Index, Instr, Kernel, Program, Step, Var};

/// Longest innermost loop that is swapped outward.
pub const MAX_INNER: u64 = 8;

/// Applies the interchange to every kernel of `p` that qualifies; returns one line per kernel
/// changed, for `--explain`.
pub fn interchange(p: &mut Program) -> String {
    let mut notes = String::new();
    for s in &mut p.steps {
        if let Step::Kernel(k) = s {
            if let Some(note) = swap_if_better(k) {
                notes.push_str(&note);
            }
        }
    }
    notes
}

/// Swaps `k`'s innermost loop with its last outer loop if that qualifies (module docs).
fn swap_if_better(k: &mut Kernel) -> Option<String> {
    let [stage] = &k.stages[..] else { return None };
    if !stage.accumulators.is_empty() || stage.inner.len() != 1 || k.outer.len() < 2 {
        return None;
    }
    let last = k.outer.len() - 1;
    let (m, e) = (k.outer[last].as_const()?, stage.inner[0].as_const()?);
    if e > MAX_INNER || e >= m {
        return None;
    }
    let (outer, inner) = (Var::Outer(last as u32), Var::Inner(0));
    let stride = |index: &Index, var: Var| -> Option<u64> {
        index.terms.iter().filter(|(v, _)| *v == var).try_fold(0u64, |a, (_, s)| a.checked_add(s.as_const()?))
    };
    let (mut cheap_before, mut cheap_after) = (0, 0);
    for instr in &stage.body {
        match instr {
            Instr::Store { buf, index, .. } => {
                let (so, si) = (stride(index, outer)?, stride(index, inner)?);
                // Iteration (o, i) writes `so·o + si·i`: distinct for distinct (o, i) when one
                // variable's whole range fits inside one step of the other.
                let nested = (si > 0 && so >= si.checked_mul(e)?) || (so > 0 && si >= so.checked_mul(m)?);
                if !nested {
                    return None;
                }
                let conflict = stage.body.iter().any(|other| match other {
                    Instr::Load { buf: b, index: i, .. } | Instr::Store { buf: b, index: i, .. } => {
                        b == buf && i != index
                    }
                    Instr::LoadAt { buf: b, .. } => b == buf,
                    _ => false,
                });
                if conflict {
                    return None;
                }
                cheap_before += usize::from(si == 1);
                cheap_after += usize::from(so == 1);
            }
            Instr::Load { index, .. } => {
                let (so, si) = (stride(index, outer)?, stride(index, inner)?);
                cheap_before += usize::from(si <= 1);
                cheap_after += usize::from(so <= 1);
            }
            _ => {}
        }
    }
    if e >= 4 && cheap_after < cheap_before {
        return None;
    }
    let swap = |v: &mut Var| {
        if *v == outer {
            *v = inner;
        } else if *v == inner {
            *v = outer;
        }
    };
    let stage = &mut k.stages[0];
    for instr in &mut stage.body {
        match instr {
            Instr::Load { index, .. } | Instr::Store { index, .. } => {
                index.terms.iter_mut().for_each(|(v, _)| swap(v));
            }
            Instr::LoopVar { var, .. } => swap(var),
            _ => {}
        }
    }
    std::mem::swap(&mut k.outer[last], &mut stage.inner[0]);
    Some(format!(
        "; {}: inner loop of {e} swapped with the outer loop of {m} (outer {}, inner {})\n",
        k.name,
        dims(&k.outer),
        dims(&stage.inner)
    ))
}

fn dims(d: &[Dim]) -> String {
    format!("[{}]", d.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}
