//! Maximum flow and a minimum cut (Dinic's algorithm) on a small directed network with
//! integer capacities: what the partitioner cuts to decide which activations to save.
//!
//! Written here rather than taken from a graph crate: it is under two hundred lines, the
//! partitioner needs one particular cut (the one nearest the sink, see [`Network::min_cut`]),
//! and its networks are a few thousand nodes.

use std::collections::VecDeque;

/// A capacity no cut pays: larger than the sum of every finite capacity the partitioner
/// builds, and small enough that adding a few of them does not overflow.
pub const INF: u64 = u64::MAX / 8;

#[derive(Clone, Copy, Debug)]
struct Edge {
    to: usize,
    /// Residual capacity.
    cap: u64,
}

/// A flow network: nodes `0..n`, edges with capacities; edge `2k` is the `k`th added edge
/// and `2k + 1` its reverse.
#[derive(Clone, Debug, Default)]
pub struct Network {
    edges: Vec<Edge>,
    adj: Vec<Vec<usize>>,
}

/// The result of a max-flow: its value, and which nodes lie on the source side of the cut.
#[derive(Clone, Debug)]
pub struct Cut {
    pub flow: u64,
    pub source_side: Vec<bool>,
}

impl Network {
    pub fn new(nodes: usize) -> Network {
        Network { edges: Vec::new(), adj: vec![Vec::new(); nodes] }
    }

    pub fn nodes(&self) -> usize {
        self.adj.len()
    }

    /// Adds an edge `from -> to` of capacity `cap` (capped at [`INF`]).
    pub fn add_edge(&mut self, from: usize, to: usize, cap: u64) {
        let k = self.edges.len();
        self.edges.push(Edge { to, cap: cap.min(INF) });
        self.edges.push(Edge { to: from, cap: 0 });
        self.adj[from].push(k);
        self.adj[to].push(k + 1);
    }

    /// Levels from `s` over edges with residual capacity; `None` when `t` is unreachable.
    fn levels(&self, s: usize, t: usize) -> Option<Vec<u32>> {
        let mut level = vec![u32::MAX; self.nodes()];
        level[s] = 0;
        let mut queue = VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for &k in &self.adj[u] {
                let e = self.edges[k];
                if e.cap > 0 && level[e.to] == u32::MAX {
                    level[e.to] = level[u] + 1;
                    queue.push_back(e.to);
                }
            }
        }
        (level[t] != u32::MAX).then_some(level)
    }

    /// One blocking flow along the level graph, iteratively (no recursion: networks are as
    /// deep as the graphs they come from).
    fn blocking_flow(&mut self, s: usize, t: usize, level: &[u32]) -> u64 {
        let mut next = vec![0usize; self.nodes()];
        let mut total = 0u64;
        loop {
            // Find an augmenting path by depth-first search with the `next` pointers.
            let mut path: Vec<usize> = Vec::new();
            let mut u = s;
            loop {
                if u == t {
                    break;
                }
                let mut advanced = false;
                while next[u] < self.adj[u].len() {
                    let k = self.adj[u][next[u]];
                    let e = self.edges[k];
                    if e.cap > 0 && level[e.to] == level[u] + 1 {
                        path.push(k);
                        u = e.to;
                        advanced = true;
                        break;
                    }
                    next[u] += 1;
                }
                if !advanced {
                    // Dead end: retreat one edge, and never try this node's edge again.
                    match path.pop() {
                        Some(k) => {
                            u = self.edges[k ^ 1].to;
                            next[u] += 1;
                        }
                        None => return total,
                    }
                }
            }
            let push = path.iter().map(|&k| self.edges[k].cap).min().unwrap_or(0);
            for &k in &path {
                self.edges[k].cap -= push;
                self.edges[k ^ 1].cap = self.edges[k ^ 1].cap.saturating_add(push);
            }
            total = total.saturating_add(push);
        }
    }

    /// A maximum flow from `s` to `t` and the minimum cut nearest the sink: the source side
    /// is every node that cannot reach `t` in the residual network, so among the cuts of
    /// least capacity this one keeps the most nodes on the source side (for the partitioner:
    /// the least recomputation).
    pub fn min_cut(mut self, s: usize, t: usize) -> Cut {
        let mut flow = 0u64;
        while let Some(level) = self.levels(s, t) {
            let pushed = self.blocking_flow(s, t, &level);
            if pushed == 0 {
                break;
            }
            flow = flow.saturating_add(pushed);
        }
        // Nodes that reach `t` in the residual network: search backward from `t` along
        // edges `u -> v` with residual capacity.
        let mut reaches = vec![false; self.nodes()];
        reaches[t] = true;
        let mut queue = VecDeque::from([t]);
        while let Some(v) = queue.pop_front() {
            for &k in &self.adj[v] {
                // `k` leaves `v`; its reverse `k ^ 1` enters `v` from `self.edges[k].to`.
                let u = self.edges[k].to;
                if self.edges[k ^ 1].cap > 0 && !reaches[u] {
                    reaches[u] = true;
                    queue.push_back(u);
                }
            }
        }
        Cut { flow, source_side: reaches.into_iter().map(|r| !r).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `s-t` cut of a small network by brute force: the least capacity.
    fn brute_min_cut(n: usize, edges: &[(usize, usize, u64)], s: usize, t: usize) -> u64 {
        let mut best = u64::MAX;
        for mask in 0u32..(1 << n) {
            if mask & (1 << s) == 0 || mask & (1 << t) != 0 {
                continue;
            }
            let cost = edges
                .iter()
                .filter(|&&(a, b, _)| mask & (1 << a) != 0 && mask & (1 << b) == 0)
                .map(|&(_, _, c)| c)
                .sum();
            best = best.min(cost);
        }
        best
    }

    #[test]
    fn matches_brute_force_on_random_networks() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        for _ in 0..300 {
            let n = 2 + next(7) as usize;
            let m = next(20) as usize;
            let edges: Vec<(usize, usize, u64)> =
                (0..m).map(|_| (next(n as u64) as usize, next(n as u64) as usize, next(10))).collect();
            let mut net = Network::new(n);
            for &(a, b, c) in &edges {
                net.add_edge(a, b, c);
            }
            let cut = net.min_cut(0, n - 1);
            let want = brute_min_cut(n, &edges, 0, n - 1);
            assert_eq!(cut.flow, want, "{edges:?}");
            // The cut's capacity equals the flow.
            let side = &cut.source_side;
            assert!(side[0] && !side[n - 1]);
            let cap: u64 = edges.iter().filter(|&&(a, b, _)| side[a] && !side[b]).map(|&(_, _, c)| c).sum();
            assert_eq!(cap, want, "{edges:?}");
        }
    }

    #[test]
    fn the_cut_nearest_the_sink_is_chosen() {
        // s -> a -> b -> t with equal capacities: both a->b and b->t are minimum cuts; the
        // one nearest the sink keeps a and b on the source side.
        let mut net = Network::new(4);
        net.add_edge(0, 1, INF);
        net.add_edge(1, 2, 5);
        net.add_edge(2, 3, 5);
        let cut = net.min_cut(0, 3);
        assert_eq!(cut.flow, 5);
        assert_eq!(cut.source_side, vec![true, true, true, false]);
    }
}
