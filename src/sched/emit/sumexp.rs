//! The fused sum of exponentials: a stage summing `exp(x - c)` joins the stage of the maximum
//! `c` comes from.
//!
//! Before the stages are ordered, a stage summing `exp(x - c)` is fused into the stage of the
//! maximum `c` comes from ([`fuse_sum_exp`]), as a `sumexp` accumulator beside the `max` (the
//! kernel IR's docs give its meaning: exactly the two stages', which compiled code computes
//! online), so softmax and log_softmax read each row twice (the fused reduction, the output)
//! and logsumexp once. The conditions, all on the emitted stages of one kernel:
//! - the max stage `A` has a float `max` accumulator (f32 or f64) as its first, fed `xa`;
//! - the sum stage `B` has one accumulator, a `sum` of the same dtype, the same inner extents
//!   as `A`, and a body that is only `xb`'s computation, `sub xb, c`, `exp` of that and the
//!   feed (so it stores nothing and computes nothing else);
//! - `xb` is `xa` up to register names: the same loads at the same indices through the same
//!   instructions, and the very same registers from outside the stage, so `B` sums over
//!   exactly the values `A` takes the maximum of, in the same order (the same axes of the same
//!   value, whatever layout prims led there);
//! - `c` is `A`'s result (softmax, log_softmax: a `sumexp`) or `where(eq(abs(m), inf), 0, m)`
//!   of it computed once per outer point (logsumexp's shift: a `sumexp_finite`).
//!
//! Nothing about other readers of the maximum matters: `A` still produces it at the same
//! point, and `B`'s registers were local. f16/bf16 sums (which the CPU backend does not
//! compile) and statically empty reductions (fed a constant) are left as they are.

use std::collections::BTreeSet;

use super::{operands, Em};
use crate::ir::DType;
use crate::kernel::{Accumulator, Instr, ReduceOp, Reg, Scalar};
use crate::ops::OpKind;

/// The instruction defining `r` in `body`, if `r` is local to it.
fn def_in(body: &[Instr], r: Reg) -> Option<&Instr> {
    body.iter().find(|i| i.dst() == Some(r))
}

/// `i` with its destination and operands cleared, for comparing instructions up to their
/// registers.
fn shape_of(i: &Instr) -> Instr {
    let z = Reg::from_u32(0);
    let mut i = i.clone();
    match &mut i {
        Instr::Load { dst, .. } | Instr::Const { dst, .. } | Instr::LoopVar { dst, .. } => *dst = z,
        Instr::LoadAt { dst, index, .. } => (*dst, *index) = (z, z),
        Instr::Unary { dst, x, .. } | Instr::Convert { dst, x, .. } => (*dst, *x) = (z, z),
        Instr::Binary { dst, a, b, .. } => (*dst, *a, *b) = (z, z, z),
        Instr::Select { dst, cond, a, b, .. } => (*dst, *cond, *a, *b) = (z, z, z, z),
        Instr::Accumulate { x, index, .. } => {
            *x = z;
            *index = index.map(|_| z);
        }
        Instr::Store { value, .. } => *value = z,
    }
    i
}

/// Whether register `a` of stage body `ba` and register `b` of stage body `bb` compute the same
/// value at every point of the same inner loops: both defined outside their stages and equal,
/// or defined by the same instruction (same loads at the same indices) on operands that are
/// the same in this sense. `budget` bounds the walk.
fn same_value(ba: &[Instr], a: Reg, bb: &[Instr], b: Reg, budget: &mut usize) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    match (def_in(ba, a), def_in(bb, b)) {
        (None, None) => a == b,
        (Some(ia), Some(ib)) => {
            shape_of(ia) == shape_of(ib)
                && operands(ia).iter().zip(operands(ib)).all(|(&x, y)| same_value(ba, x, bb, y, budget))
        }
        _ => false,
    }
}

/// The registers of `body` that `r` is computed from (`r` included), within `body`.
fn cone(body: &[Instr], r: Reg, out: &mut BTreeSet<Reg>) {
    if let Some(i) = def_in(body, r) {
        if out.insert(r) {
            for o in operands(i) {
                cone(body, o, out);
            }
        }
    }
}

/// Fuses each stage summing `exp(x - c)` into the stage of the maximum `c` derives from, as a
/// `sumexp` accumulator of that stage (see the kernel IR's docs), so that softmax, log_softmax
/// and logsumexp read their input once less. A stage `B` is fused into a stage `A` when:
/// - `A` has a `max` accumulator (its first; any others are `sumexp`s fused before) of dtype
///   f32 or f64, fed `acc0 <- xa`;
/// - `B` has exactly one accumulator, a `sum` of the same dtype, over the same inner extents;
///   its body is nothing but `xb`'s computation, `d = sub xb, c`, `e = exp d` and `acc0 <- e`
///   (so `B` stores nothing and computes nothing else);
/// - `xb` computes the same value as `xa` at every inner point ([`same_value`]: the same loads
///   at the same indices through the same instructions, or the very same outer registers), so
///   `B` sums over exactly the values `A` takes the maximum of, in the same order;
/// - `c` is `A`'s maximum (a `sumexp`), or `where(eq(abs(max), inf), 0, max)` computed once
///   per outer point (a `sumexp_finite`: logsumexp's shift).
///
/// `A` then also feeds `xa` to the new accumulator, whose result is `B`'s, and `B` is dropped.
/// Nothing else changes: `A` still produces the maximum for every other reader, registers that
/// read the sum keep their levels (now later than they need be, which is only conservative),
/// and `B`'s registers were local to it.
pub(super) fn fuse_sum_exp(em: &mut Em) {
    let scalar = |r: Reg| em.scalars.iter().map(|(i, _)| i).find(|i| i.dst() == Some(r));
    let is_const = |r: Reg, want: f64| {
        matches!(scalar(r), Some(Instr::Const { value: Scalar::Float(x), .. })
            if *x == want && x.is_sign_negative() == want.is_sign_negative())
    };
    let mut plans = Vec::new();
    for (b, sb) in em.stages.iter().enumerate() {
        let [acc] = sb.accs.as_slice() else { continue };
        let dt = acc.dtype;
        if acc.op != ReduceOp::Sum || !matches!(dt, DType::F32 | DType::F64) {
            continue;
        }
        let Some(&Instr::Accumulate { acc: 0, x: e, index: None }) = sb.body.last() else { continue };
        let Some(&Instr::Unary { op: OpKind::Exp, x: d, dtype, .. }) = def_in(&sb.body, e) else { continue };
        let Some(&Instr::Binary { op: OpKind::Sub, a: xb, b: c, .. }) = def_in(&sb.body, d) else { continue };
        if dtype != dt || def_in(&sb.body, c).is_some() {
            continue;
        }
        // `c` is the maximum itself, or logsumexp's shift of it.
        let (m, op) = match scalar(c) {
            Some(&Instr::Select { cond, a: zero, b: m, dtype, .. }) if dtype == dt && is_const(zero, 0.0) => {
                let Some(&Instr::Binary { op: OpKind::Eq, a: abs, b: inf, .. }) = scalar(cond) else { continue };
                let Some(&Instr::Unary { op: OpKind::Abs, x, .. }) = scalar(abs) else { continue };
                if x != m || !is_const(inf, f64::INFINITY) {
                    continue;
                }
                (m, ReduceOp::SumExpFinite)
            }
            _ => (c, ReduceOp::SumExp),
        };
        let found = em.stages.iter().position(|sa| {
            !sa.fused
                && sa.accs.first().is_some_and(|a| a.op == ReduceOp::Max && a.dtype == dt && a.result == m)
                && sa.accs[1..].iter().all(|a| a.op.is_sum_exp())
        });
        let Some(a) = found else { continue };
        let sa = &em.stages[a];
        let xa = sa.body.iter().find_map(|i| match i {
            Instr::Accumulate { acc: 0, x, index: None } => Some(*x),
            _ => None,
        });
        let Some(xa) = xa else { continue };
        if a == b || sa.inner != sb.inner || !same_value(&sa.body, xa, &sb.body, xb, &mut 10_000) {
            continue;
        }
        let mut reach = BTreeSet::new();
        cone(&sb.body, xb, &mut reach);
        if sb.body.len() != reach.len() + 3 {
            continue;
        }
        plans.push((a, b, xa, Accumulator { op, dtype: dt, result: acc.result }));
    }
    for (a, b, xa, acc) in plans {
        let sa = &mut em.stages[a];
        let k = sa.accs.len() as u32;
        sa.accs.push(acc);
        sa.body.push(Instr::Accumulate { acc: k, x: xa, index: None });
        em.stages[b].fused = true;
    }
}
