//! Merging kernels into the kernels that read them: a producer's roots become extra stores of
//! a consumer that loops over the same outer dims, when the merged kernel needs nothing new
//! materialised, stays under `emit::MAX_MERGED_INSTRS` instructions and makes no cycle
//! through another step.
//!
//! Candidate pairs (a producer kernel, a kernel reading one of its roots) are tried in one
//! fixed order: by the producer's place among the kernels, then by the consumer's first root.
//! A refused pair (named by the two first roots) is never tried again, and after a merge the
//! next pair tried is again the first candidate in that order. The candidates are kept in an
//! ordered set and the steps' dependencies in maps, both updated as kernels merge (the merged
//! kernel takes the consumer's place, the producer's is left empty until the end), so a merge
//! costs about the dependencies of the two kernels, not a scan of the whole program: a chain
//! of thousands of row kernels merges in time proportional to its length.

use std::collections::{BTreeMap, BTreeSet};

use super::{emit, Deps, Fail, KGroup, Sched, ScheduleError, Unit};
use crate::ir::Value;

/// The kernels (by place) among `units`.
fn kernels(units: Option<&BTreeSet<Unit>>) -> Vec<usize> {
    units.into_iter().flatten().filter_map(|u| if let Unit::Kernel(k) = u { Some(*k) } else { None }).collect()
}

impl Sched<'_> {
    /// Merges kernels into the kernels that read them, while some merge succeeds.
    pub(super) fn merge(&mut self) -> Result<(), ScheduleError> {
        let (_, mut deps, mut producer) = self.unit_graph();
        // Per unit, the units that read from it.
        let mut readers: Deps = BTreeMap::new();
        for (&u, from) in &deps {
            for &p in from {
                readers.entry(p).or_default().insert(u);
            }
        }
        let mut alive = vec![true; self.groups.len()];
        let mut queue: BTreeSet<(usize, Value, usize)> = BTreeSet::new();
        for i in 0..self.groups.len() {
            for j in kernels(readers.get(&Unit::Kernel(i))) {
                queue.insert((i, self.groups[j].roots[0], j));
            }
        }
        while let Some((i, _, j)) = queue.pop_first() {
            let key = (self.groups[i].roots[0], self.groups[j].roots[0]);
            if self.merge_notes.contains_key(&key) {
                // Tried before and refused; merges elsewhere rarely change that.
                continue;
            }
            let size = |g: &KGroup| g.em.kernel.stages.iter().map(|s| s.body.len()).sum::<usize>();
            if size(&self.groups[i]) + size(&self.groups[j]) > emit::MAX_MERGED_INSTRS {
                let why = format!("merged, the kernel would exceed {} instructions", emit::MAX_MERGED_INSTRS);
                self.merge_notes.insert(key, why);
                continue;
            }
            let (ui, uj) = (Unit::Kernel(i), Unit::Kernel(j));
            // The other direction needs no search: `j` reads `i`, and the steps' dependencies
            // have no cycle, so `i` never depends on `j`.
            if Self::reaches_indirectly(&deps, uj, ui) {
                self.merge_notes.insert(key, "merging them would make a cycle through another step".into());
                continue;
            }
            let mut all: Vec<Value> = self.groups[j].roots.iter().chain(&self.groups[i].roots).copied().collect();
            all.sort();
            let em = match self.emit(&all) {
                Ok(em) if em.needs.is_empty() => em,
                Ok(em) => {
                    let (value, reason) = &em.needs[0];
                    let why = format!("merged, {} would have to be materialised ({reason})", self.name(*value));
                    self.merge_notes.insert(key, why);
                    continue;
                }
                Err(Fail::Domains(m)) => {
                    self.merge_notes.insert(key, format!("their loops differ: {m}"));
                    continue;
                }
                Err(Fail::Materialise(list)) => {
                    let (value, reason) = &list[0];
                    let why = format!("merged, {} would have to be materialised ({reason})", self.name(*value));
                    self.merge_notes.insert(key, why);
                    continue;
                }
                Err(Fail::Error(m)) => {
                    self.merge_notes.insert(key, m);
                    continue;
                }
            };
            // The candidates of both kernels go, as producers and as consumers.
            for k in [i, j] {
                for c in kernels(readers.get(&Unit::Kernel(k))) {
                    queue.remove(&(k, self.groups[c].roots[0], c));
                }
                for p in kernels(deps.get(&Unit::Kernel(k))) {
                    queue.remove(&(p, self.groups[k].roots[0], k));
                }
            }
            for &r in &self.groups[i].roots {
                producer.insert(r, uj);
            }
            self.groups[j] = KGroup { roots: all, em };
            alive[i] = false;
            // The steps that read `i` read the merged kernel; the merged kernel reads what its
            // loads name.
            for u in readers.remove(&ui).unwrap_or_default() {
                if let Some(d) = deps.get_mut(&u) {
                    d.remove(&ui);
                    if u != uj {
                        d.insert(uj);
                        readers.entry(uj).or_default().insert(u);
                    }
                }
            }
            for u in [ui, uj] {
                for p in deps.remove(&u).unwrap_or_default() {
                    if let Some(r) = readers.get_mut(&p) {
                        r.remove(&u);
                    }
                }
            }
            let from: BTreeSet<Unit> =
                self.groups[j].em.reads.keys().filter_map(|r| producer.get(r).copied()).filter(|&p| p != uj).collect();
            for &p in &from {
                readers.entry(p).or_default().insert(uj);
            }
            deps.insert(uj, from);
            for c in kernels(readers.get(&uj)) {
                queue.insert((j, self.groups[c].roots[0], c));
            }
            for p in kernels(deps.get(&uj)) {
                queue.insert((p, self.groups[j].roots[0], j));
            }
        }
        let mut place = 0;
        self.groups.retain(|_| {
            place += 1;
            alive[place - 1]
        });
        Ok(())
    }
}
