//! Ordering the scheduled steps: the units (kernel groups, library calls, graph breaks), the
//! units each reads from, reachability between them (which merges would make a cycle), and
//! the topological order the program runs them in (ties: the earliest node first). Each edge
//! is visited a bounded number of times, so ordering costs about the number of steps and
//! their reads.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cranelift_entity::EntityRef;

use super::{Class, Deps, Sched, ScheduleError, Unit};
use crate::ir::Value;

impl Sched<'_> {
    /// The units (steps) and, per unit, the units it reads from.
    pub(super) fn units(&self) -> (Vec<Unit>, Deps) {
        let (units, deps, _) = self.unit_graph();
        (units, deps)
    }

    /// [`Sched::units`], and the unit that writes each value with a buffer.
    pub(super) fn unit_graph(&self) -> (Vec<Unit>, Deps, HashMap<Value, Unit>) {
        let mut units: Vec<Unit> = (0..self.groups.len()).map(Unit::Kernel).collect();
        let mut producer: HashMap<Value, Unit> = HashMap::new();
        for (i, grp) in self.groups.iter().enumerate() {
            for &r in &grp.roots {
                producer.insert(r, Unit::Kernel(i));
            }
        }
        for (v, _) in self.g.nodes() {
            if self.cls(v) == Class::Library {
                units.push(Unit::Library(v));
                producer.insert(v, Unit::Library(v));
            }
        }
        for (i, members) in self.breaks.iter().enumerate() {
            if members.is_empty() {
                continue;
            }
            units.push(Unit::Break(i));
            for &m in members {
                producer.insert(m, Unit::Break(i));
            }
        }
        let mut deps: Deps = BTreeMap::new();
        for &u in &units {
            let reads: Vec<Value> = match u {
                Unit::Kernel(i) => self.groups[i].em.reads.keys().copied().collect(),
                Unit::Library(v) => self.g.node(v).args.iter().filter_map(|&a| self.storage(a)).collect(),
                Unit::Break(i) => self.breaks[i]
                    .iter()
                    .flat_map(|&m| self.g.node(m).args.iter().copied())
                    .filter(|a| self.brk[a.index()] != Some(i))
                    .filter_map(|a| self.storage(a))
                    .collect(),
            };
            let d = deps.entry(u).or_default();
            for r in reads {
                if let Some(&p) = producer.get(&r) {
                    if p != u {
                        d.insert(p);
                    }
                }
            }
        }
        (units, deps, producer)
    }

    /// Whether `to` is reachable from `from` along dependencies, not using the direct edge
    /// `from → to`.
    pub(super) fn reaches_indirectly(deps: &Deps, from: Unit, to: Unit) -> bool {
        let mut stack: Vec<Unit> =
            deps.get(&from).map(|d| d.iter().copied().filter(|&x| x != to).collect()).unwrap_or_default();
        let mut seen = BTreeSet::new();
        while let Some(u) = stack.pop() {
            if u == to {
                return true;
            }
            if seen.insert(u) {
                if let Some(d) = deps.get(&u) {
                    stack.extend(d.iter().copied());
                }
            }
        }
        false
    }

    pub(super) fn anchor(&self, u: Unit) -> Value {
        match u {
            Unit::Kernel(i) => self.groups[i].roots[0],
            Unit::Library(v) => v,
            Unit::Break(i) => self.breaks[i][0],
        }
    }

    /// The steps in dependency order (ties: the earliest node first).
    pub(super) fn order(&self) -> Result<(Vec<Unit>, Deps), ScheduleError> {
        let (units, deps) = self.units();
        let mut indegree: BTreeMap<Unit, usize> = units.iter().map(|&u| (u, deps[&u].len())).collect();
        // Per unit, the units that read from it: each edge is visited once when its source is
        // placed (scanning every unit for readers instead costs the square of the steps).
        let mut readers: BTreeMap<Unit, Vec<Unit>> = BTreeMap::new();
        for (&w, from) in &deps {
            for &u in from {
                readers.entry(u).or_default().push(w);
            }
        }
        let mut ready: BTreeSet<(Value, Unit)> =
            units.iter().filter(|u| indegree[u] == 0).map(|&u| (self.anchor(u), u)).collect();
        let mut out = Vec::with_capacity(units.len());
        while let Some((_, u)) = ready.pop_first() {
            out.push(u);
            for &w in readers.get(&u).map_or(&[][..], Vec::as_slice) {
                let d = indegree.get_mut(&w).ok_or_else(|| ScheduleError::Failed("unit table".into()))?;
                *d -= 1;
                if *d == 0 {
                    ready.insert((self.anchor(w), w));
                }
            }
        }
        if out.len() != units.len() {
            return Err(ScheduleError::Failed("the steps depend on each other in a cycle".into()));
        }
        Ok((out, deps))
    }
}
