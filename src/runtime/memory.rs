//! Memory planning: every temporary buffer of a program gets a byte offset in one arena per
//! run, by exact lifetimes.
//!
//! A temporary lives from the step that writes it to the last step that reads it (outputs to
//! the end of the run, when they are copied out). Lifetimes are fixed when the plan is made;
//! sizes depend on the run's symbol values, so offsets are assigned per distinct set of
//! sizes: greedy by size, largest first, each buffer at the lowest offset that does not
//! overlap a placed buffer whose lifetime intersects its own (first fit). Offsets are
//! multiples of [`ALIGN`].

use crate::kernel::{BufferKind, Program, Step};

/// Alignment of every buffer in the arena, in bytes.
pub const ALIGN: usize = 64;

/// The steps during which a temporary must keep its contents: `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub first: usize,
    pub last: usize,
}

/// Lifetimes of the program's temporaries, by buffer index (`None` for inputs and constants).
pub fn lifetimes(p: &Program) -> Vec<Option<Lifetime>> {
    let n = p.buffers.len();
    let mut first: Vec<Option<usize>> = vec![None; n];
    let mut last: Vec<Option<usize>> = vec![None; n];
    let mut touch = |b: usize, step: usize| {
        first[b] = Some(first[b].map_or(step, |f: usize| f.min(step)));
        last[b] = Some(last[b].map_or(step, |l: usize| l.max(step)));
    };
    for (i, s) in p.steps.iter().enumerate() {
        match s {
            Step::Kernel(k) => {
                for stage in &k.stages {
                    for instr in &stage.body {
                        if let crate::kernel::Instr::Load { buf, .. }
                        | crate::kernel::Instr::LoadAt { buf, .. }
                        | crate::kernel::Instr::Store { buf, .. } = instr
                        {
                            touch(buf.index(), i);
                        }
                    }
                }
            }
            Step::Matmul(m) => [m.a, m.b, m.out].iter().for_each(|b| touch(b.index(), i)),
            Step::Conv(c) => [c.x, c.w, c.out].iter().for_each(|b| touch(b.index(), i)),
            Step::Interp(c) => c.args.iter().chain(&c.results).for_each(|b| touch(b.index(), i)),
        }
    }
    let end = p.steps.len();
    for (_, b) in &p.outputs {
        touch(b.index(), end);
    }
    p.buffers
        .iter()
        .map(|(id, b)| match (&b.kind, first[id.index()], last[id.index()]) {
            (BufferKind::Temp, Some(f), Some(l)) => Some(Lifetime { first: f, last: l }),
            (BufferKind::Temp, _, _) => Some(Lifetime { first: end, last: end }),
            _ => None,
        })
        .collect()
}

use cranelift_entity::EntityRef;

/// Rounds `n` up to a multiple of [`ALIGN`].
pub fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|x| x / ALIGN * ALIGN)
}

/// Assigns arena offsets to temporaries of the given sizes (bytes, by buffer index; ignored
/// where `life` is `None`). Returns the arena size. `order` and `placed` are working memory.
pub fn assign(
    life: &[Option<Lifetime>],
    sizes: &[usize],
    offsets: &mut Vec<usize>,
    order: &mut Vec<usize>,
    placed: &mut Vec<(usize, usize)>,
) -> Option<usize> {
    offsets.clear();
    offsets.resize(life.len(), 0);
    order.clear();
    order.extend((0..life.len()).filter(|&i| life[i].is_some()));
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(a.cmp(&b)));
    let mut arena = 0usize;
    for k in 0..order.len() {
        let b = order[k];
        let size = align_up(sizes[b])?;
        let lb = life[b]?;
        // Placed buffers alive at the same time, by offset.
        placed.clear();
        for &o in &order[..k] {
            let lo = life[o]?;
            if lo.first <= lb.last && lb.first <= lo.last && sizes[o] > 0 {
                placed.push((offsets[o], align_up(sizes[o])?));
            }
        }
        placed.sort_unstable();
        let mut at = 0usize;
        for &(off, len) in placed.iter() {
            if off >= at.checked_add(size)? {
                break;
            }
            at = at.max(off.checked_add(len)?);
        }
        offsets[b] = at;
        arena = arena.max(at.checked_add(size)?);
    }
    Some(arena)
}
