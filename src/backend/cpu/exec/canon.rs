//! Kernels compiled once per structure. A long graph repeats the same kernels over other
//! buffers (a transformer's layers, a chain of row reductions), and code generation is most
//! of its compile time. Each kernel is put in a canonical form: its buffers renumbered
//! `0, 1, …` in the order it first touches them (the same buffer twice keeps one number),
//! its name, covered nodes and activation dropped (code generation reads none of them),
//! with a program holding only those buffers' types, shapes and whether they are read-only
//! (all code generation reads of a buffer). Kernels whose canonical forms are equal share
//! one compiled entry; each step calls it with a table of its own buffers' addresses in that
//! order ([`Canonical::slots`]).

use std::collections::HashMap;

use cranelift_entity::{EntityRef, PrimaryMap};

use crate::kernel::{Buffer, BufferId, BufferKind, Instr, Kernel, Program};

/// A kernel in canonical form, the program it is compiled against, and where its buffers
/// came from.
pub(super) struct Canonical {
    pub kernel: Kernel,
    pub program: Program,
    /// `slots[j]` is the original buffer the canonical buffer `j` stands for.
    pub slots: Vec<BufferId>,
}

impl Canonical {
    /// The canonical form of `k`, a kernel of `p`.
    pub fn of(k: &Kernel, p: &Program) -> Canonical {
        let mut slots: Vec<BufferId> = Vec::new();
        let mut kernel = Kernel {
            name: "canonical".into(),
            outer: k.outer.clone(),
            stages: k.stages.clone(),
            n_regs: k.n_regs,
            covers: Vec::new(),
            activation: None,
        };
        for instr in kernel.stages.iter_mut().flat_map(|s| s.body.iter_mut()) {
            if let Instr::Load { buf, .. } | Instr::LoadAt { buf, .. } | Instr::Store { buf, .. } = instr {
                let j = match slots.iter().position(|b| b == buf) {
                    Some(j) => j,
                    None => {
                        slots.push(*buf);
                        slots.len() - 1
                    }
                };
                *buf = BufferId::new(j);
            }
        }
        let mut buffers = PrimaryMap::new();
        for &b in &slots {
            let src = &p.buffers[b];
            let kind = match src.kind {
                BufferKind::Input(_) | BufferKind::Const(_) => BufferKind::Input(0),
                BufferKind::Temp => BufferKind::Temp,
            };
            buffers.push(Buffer { dtype: src.dtype, shape: src.shape.clone(), kind, value: None });
        }
        let program = Program { buffers, steps: Vec::new(), outputs: Vec::new(), symbols: Vec::new() };
        Canonical { kernel, program, slots }
    }

    /// What decides the compiled code: equal keys, equal code.
    pub fn key(&self) -> String {
        format!("{:?}\n{:?}", self.kernel, self.program.buffers)
    }
}

/// A kernel's place among the canonical forms: the first kernel with its form (whose
/// canonical form is compiled), and its own buffers in canonical order.
pub(super) struct Member {
    pub leader: usize,
    pub slots: Vec<BufferId>,
}

/// The canonical form of each of `kernels` (`None` stays `None`): its group, and per group
/// leader (the first kernel of its form) the form to compile.
pub(super) fn group(kernels: &[Option<&Kernel>], p: &Program) -> (Vec<Option<Member>>, HashMap<usize, Canonical>) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut leaders = HashMap::new();
    let members = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut c = Canonical::of((*k)?, p);
            let leader = *seen.entry(c.key()).or_insert(i);
            let slots = if leader == i { c.slots.clone() } else { std::mem::take(&mut c.slots) };
            if leader == i {
                leaders.insert(i, c);
            }
            Some(Member { leader, slots })
        })
        .collect();
    (members, leaders)
}
