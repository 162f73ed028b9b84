//! Memory planning: every temporary buffer of a program gets a byte offset in one arena per
//! run, by exact lifetimes.
//!
//! A temporary lives from the step that writes it to the last step that reads it (outputs to
//! the end of the run, when they are copied out). Lifetimes are fixed when the plan is made;
//! sizes depend on the run's symbol values, so offsets are assigned per distinct set of
//! sizes: greedy by size, largest first, each buffer at the lowest offset that does not
//! overlap a placed buffer whose lifetime intersects its own (first fit). Offsets are
//! multiples of [`ALIGN`].

use crate::kernel::{BufferKind, Program};

/// Alignment of every buffer in the arena, in bytes.
pub const ALIGN: usize = 64;

/// The steps during which a temporary must keep its contents: `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub first: usize,
    pub last: usize,
}

/// Lifetimes of the program's temporaries, by buffer index (`None` for inputs, constants and
/// temporaries no step or output touches).
pub fn lifetimes(p: &Program) -> Vec<Option<Lifetime>> {
    let n = p.buffers.len();
    let mut first: Vec<Option<usize>> = vec![None; n];
    let mut last: Vec<Option<usize>> = vec![None; n];
    let mut touch = |b: usize, step: usize| {
        first[b] = Some(first[b].map_or(step, |f: usize| f.min(step)));
        last[b] = Some(last[b].map_or(step, |l: usize| l.max(step)));
    };
    // Everything a step touches lives for the whole step: a matmul's epilogue and a kernel's
    // activation may run while the product or the kernel's rows are still being written.
    for (i, s) in p.steps.iter().enumerate() {
        s.for_each_buffer(|b| touch(b.index(), i));
    }
    let end = p.steps.len();
    for (_, b) in &p.outputs {
        touch(b.index(), end);
    }
    p.buffers
        .iter()
        .map(|(id, b)| match (&b.kind, first[id.index()], last[id.index()]) {
            (BufferKind::Temp, Some(f), Some(l)) => Some(Lifetime { first: f, last: l }),
            // A temporary no step touches (a convolution's result that its folded epilogue
            // writes elsewhere) needs no bytes.
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
    assign_aligned(life, sizes, ALIGN, offsets, order, placed)
}

/// [`assign`] with every offset and size rounded to `align` (a power of two; at least
/// [`ALIGN`] is used), for a device whose buffers need more.
pub fn assign_aligned(
    life: &[Option<Lifetime>],
    sizes: &[usize],
    align: usize,
    offsets: &mut Vec<usize>,
    order: &mut Vec<usize>,
    placed: &mut Vec<(usize, usize)>,
) -> Option<usize> {
    let align = align.max(ALIGN).checked_next_power_of_two()?;
    let align_up = |n: usize| n.checked_add(align - 1).map(|x| x / align * align);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_buffers_never_overlap_and_dead_ones_share() {
        // A pseudo-random family of lifetimes and sizes (splitmix64).
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        };
        for _ in 0..200 {
            let n = 1 + next(30) as usize;
            let life: Vec<Option<Lifetime>> = (0..n)
                .map(|_| {
                    (next(5) != 0).then(|| {
                        let first = next(20) as usize;
                        Lifetime { first, last: first + next(6) as usize }
                    })
                })
                .collect();
            let sizes: Vec<usize> = (0..n).map(|_| next(1000) as usize).collect();
            // ladder's alignment, and a device's coarser one (`assign_aligned`).
            let align = [ALIGN, 256][next(2) as usize];
            let (mut offsets, mut order, mut placed) = (Vec::new(), Vec::new(), Vec::new());
            let arena = assign_aligned(&life, &sizes, align, &mut offsets, &mut order, &mut placed).unwrap();
            let naive: usize = (0..n).filter(|&i| life[i].is_some()).map(|i| sizes[i].next_multiple_of(align)).sum();
            assert!(arena <= naive);
            for a in 0..n {
                let Some(la) = life[a] else { continue };
                assert_eq!(offsets[a] % align, 0);
                assert!(offsets[a] + sizes[a] <= arena);
                for b in a + 1..n {
                    let Some(lb) = life[b] else { continue };
                    let live_together = la.first <= lb.last && lb.first <= la.last;
                    let disjoint = offsets[a] + sizes[a] <= offsets[b] || offsets[b] + sizes[b] <= offsets[a];
                    assert!(!live_together || disjoint || sizes[a] == 0 || sizes[b] == 0);
                }
            }
        }
        // Two buffers that are never live together share one place.
        let life = [Some(Lifetime { first: 0, last: 1 }), Some(Lifetime { first: 2, last: 3 })];
        let (mut offsets, mut order, mut placed) = (Vec::new(), Vec::new(), Vec::new());
        assert_eq!(assign(&life, &[100, 64], &mut offsets, &mut order, &mut placed), Some(128));
        assert_eq!(offsets, vec![0, 0]);
    }
}
