// Recovered f32 `scaled_dot_product_attention(q, k, v, mask?) {causal, scale, safe_softmax}`:
// q `[nb, L, D]`, k `[nb, S, D]`, v `[nb, S, Dv]`, y `[nb, L, Dv]` (leading dims flattened into
// `nb`), the mask (f32, or bool bytes packed four to a word) read through strides over the
// scores `[batch..., L, S]`, 0 along its broadcast dims, never copied.
//
// Two ways to run, chosen by the host per run (flag 16): by row for a few query rows (L below
// 32: decoding), by block for many.
//
// By row: one workgroup of 64 invocations per query row, looping over the rows past the
// dispatch (`num_workgroups`). The keys are visited in tiles of 64, one per invocation: its score
// `dot(q_i, k_j)` (summed in order over D with `fma`, from +0), times `scale` (not where D = 0,
// whose scores are 0 whatever the scale), plus the mask (a bool mask adds 0 or -inf), plus -inf
// above the diagonal (`causal`: `j > i`). Then an online softmax over the tiles: the tile's
// maximum raises the row's running maximum `m`, the row's sum `l` and its outputs so far are
// rescaled by `exp(m_old - m)`, the tile's weights are `exp(s - m)` (staged in workgroup
// memory), and every invocation adds `weight * v[j, c]` over the tile's keys into the output
// columns it owns (`c = lane + 64t`, `t < 4`: 256 columns per pass over the keys; a wider Dv
// takes more passes, each computing the scores again). At the end each output is its sum
// divided by `l`. The tile's maximum and sum are reductions over the workgroup
// (`lib/reduce.wgsl`, in workgroup memory; or `lib/reduce_subgroup.wgsl`, on subgroup
// operations, in the module for devices that have them).
//
// The op's edge cases, as its decomposition gives them: a NaN or +inf score anywhere in the row
// (masked or not) makes the row NaN; a row whose scores are all -inf gives zeros with
// `safe_softmax` and NaN without; no keys (S = 0) gives zeros; a masked key's weight is an exact
// 0 that still multiplies its value row (0 * inf is NaN), so every tile is visited, also those
// above a causal diagonal. While every score so far is -inf the weights are `exp(s - 0)`, all 0,
// and the first finite maximum rescales by an exact 0 (no `exp(-inf - -inf)`).
//
// Each invocation reads its own key row and all of them the query row: K and V are read once
// per query row.
//
// By block: one workgroup per 64 query rows of one batch element, one row per invocation, which
// keeps its row's running maximum, sum and 64 output columns per pass (a wider Dv takes more
// passes) and needs no reductions across invocations. Tiles of 32 keys are staged in workgroup
// memory (the keys 32 values of D at a time, then the values' 64 columns), so K and V are read
// from device memory once per 64 query rows. Each invocation computes the tile's 32 scores of its
// row (the same `fma` chain in order over D from +0), then the same online softmax.
//
// Parameters (u32, binding 5; the host checks every index they produce lies in its buffer):
//  0 nb, 1 L, 2 S, 3 D, 4 Dv, 5 flags (1: a mask, 2: the mask is bool, 4: causal,
//  8: safe_softmax, 16: by block), 6 scale (f32 bits), 7-11 the first elements of q, k, v,
//  the mask (a word for a bool mask) and y, 12 and 13 the mask's strides along L and S, 14 the
//  count of the mask's batch dims (at most 8), then per batch dim, innermost first, its size
//  and the mask's stride along it. Without a mask, binding 3 holds some other buffer and is not
//  read.

const WG: u32 = 64u;
// Output columns per invocation per pass over the keys.
const CH: u32 = 4u;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> p: array<u32>;

var<workgroup> red: array<f32, 64>;
// By row: the tile's weights.
var<workgroup> wts: array<f32, 64>;
// By block: the tile's keys (32 keys by 32 values of D) and values (32 keys by 64 columns).
const TK: u32 = 32u;
const DC: u32 = 32u;
const VC: u32 = 64u;
var<workgroup> kt: array<f32, 1024>;
var<workgroup> vt: array<f32, 2048>;

// include: lib/math.wgsl

// include: lib/reduce.wgsl

const NEG_INF: u32 = 0xff800000u;
const NAN: u32 = 0x7fc00000u;

// The mask's element offset of batch element `b`'s `[L, S]` scores.
fn mask_base(b: u32) -> u32 {
    var at = 0u;
    var rest = b;
    for (var d = 0u; d < p[14]; d++) {
        let n = p[15u + 2u * d];
        at += (rest % n) * p[16u + 2u * d];
        rest = rest / n;
    }
    return at;
}

// What the mask adds to a score at its element `e`.
fn mask_bias(e: u32) -> f32 {
    if ((p[5] & 2u) != 0u) {
        let word = mask[p[10] + e / 4u];
        let on = ((word >> (8u * (e % 4u))) & 0xffu) != 0u;
        return select(bitcast<f32>(NEG_INF), 0.0, on);
    }
    return bitcast<f32>(mask[p[10] + e]);
}

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    at: Lane,
) {
    if ((p[5] & 16u) != 0u) {
        by_block(group.x, groups.x, at.index);
    } else {
        by_row(group.x, groups.x, at);
    }
}

// The score of a query row `i` against key `j` once its dot product is summed: scaled (not
// where D = 0), the mask's bias at its element `at` added, and -inf above a causal diagonal.
fn finish_score(dot: f32, i: u32, j: u32, at: u32) -> f32 {
    var s = dot;
    if (p[3] > 0u) {
        s = s * bitcast<f32>(p[6]);
    }
    if ((p[5] & 1u) != 0u) {
        s = s + mask_bias(at);
    }
    if ((p[5] & 4u) != 0u && j > i) {
        s = s + bitcast<f32>(NEG_INF);
    }
    return s;
}

// An output element: its weighted sum `acc` over the row's sum of weights `l`; NaN where a score
// was NaN; where every score was -inf (`m`), zeros under the safe softmax or without keys, NaN
// otherwise.
fn output(acc: f32, m: f32, l: f32, bad: bool) -> f32 {
    var o = acc / l;
    if (m == bitcast<f32>(NEG_INF)) {
        o = select(bitcast<f32>(NAN), 0.0, (p[5] & 8u) != 0u || p[2] == 0u);
    }
    return select(o, bitcast<f32>(NAN), bad);
}

fn by_row(first: u32, step: u32, at: Lane) {
    let lane = at.index;
    let L = p[1];
    let S = p[2];
    let D = p[3];
    let Dv = p[4];
    let masked = (p[5] & 1u) != 0u;
    let neg_inf = bitcast<f32>(NEG_INF);
    let rows = p[0] * L;
    for (var r = first; r < rows; r += step) {
        let b = r / L;
        let i = r - b * L;
        let q0 = p[7] + r * D;
        let k0 = p[8] + b * S * D;
        let v0 = p[9] + b * S * Dv;
        let y0 = p[11] + r * Dv;
        var m0 = 0u;
        if (masked) {
            m0 = mask_base(b) + i * p[12];
        }
        for (var c0 = 0u; c0 < Dv; c0 += WG * CH) {
            var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
            var m = neg_inf;
            var l = 0.0;
            var bad = false;
            for (var j0 = 0u; j0 < S; j0 += WG) {
                let j = j0 + lane;
                let live = j < S;
                var s = neg_inf;
                if (live) {
                    var dot = 0.0;
                    let kj = k0 + j * D;
                    for (var d = 0u; d < D; d++) {
                        dot = fma(q[q0 + d], k[kj + d], dot);
                    }
                    s = finish_score(dot, i, j, m0 + j * p[13]);
                }
                let top = reduce_max(at, s);
                // A NaN score makes the row NaN (whatever `max` makes of it); a +inf one does
                // through its own weight, `exp(inf - inf)`.
                bad = bad || is_nan(top);
                let mn = max(m, top);
                let base = select(mn, 0.0, mn == neg_inf);
                let alpha = select(exp_f32(m - mn), 0.0, m == neg_inf);
                var e = 0.0;
                if (live) {
                    e = exp_f32(s - base);
                }
                wts[lane] = e;
                // The sum's first barrier also makes every lane's weight visible.
                l = l * alpha + reduce_sum(at, e);
                m = mn;
                let n = min(WG, S - j0);
                for (var t = 0u; t < CH; t++) {
                    let c = c0 + t * WG + lane;
                    if (c < Dv) {
                        var a = acc[t] * alpha;
                        for (var u = 0u; u < n; u++) {
                            a = fma(wts[u], v[v0 + (j0 + u) * Dv + c], a);
                        }
                        acc[t] = a;
                    }
                }
                // The next tile's reductions begin with a barrier every lane reaches only
                // after reading this tile's weights, so it may write them.
            }
            for (var t = 0u; t < CH; t++) {
                let c = c0 + t * WG + lane;
                if (c < Dv) {
                    y[y0 + c] = output(acc[t], m, l, bad);
                }
            }
        }
    }
}

fn by_block(first: u32, step: u32, lane: u32) {
    let L = p[1];
    let S = p[2];
    let D = p[3];
    let Dv = p[4];
    let masked = (p[5] & 1u) != 0u;
    let neg_inf = bitcast<f32>(NEG_INF);
    let per = (L + 63u) / 64u;
    let blocks = p[0] * per;
    for (var blk = first; blk < blocks; blk += step) {
        let b = blk / per;
        let i = (blk - b * per) * 64u + lane;
        let live = i < L;
        let r = b * L + i;
        let q0 = p[7] + r * D;
        let k0 = p[8] + b * S * D;
        let v0 = p[9] + b * S * Dv;
        let y0 = p[11] + r * Dv;
        var m0 = 0u;
        if (masked && live) {
            m0 = mask_base(b) + i * p[12];
        }
        for (var c0 = 0u; c0 < Dv; c0 += VC) {
            let nc = min(VC, Dv - c0);
            var acc: array<f32, 64>;
            for (var c = 0u; c < VC; c++) {
                acc[c] = 0.0;
            }
            var m = neg_inf;
            var l = 0.0;
            var bad = false;
            for (var j0 = 0u; j0 < S; j0 += TK) {
                let nk = min(TK, S - j0);
                var s: array<f32, 32>;
                for (var jj = 0u; jj < TK; jj++) {
                    s[jj] = 0.0;
                }
                for (var d0 = 0u; d0 < D; d0 += DC) {
                    let nd = min(DC, D - d0);
                    for (var e = lane; e < TK * DC; e += 64u) {
                        let jj = e / DC;
                        let dd = e - jj * DC;
                        var x = 0.0;
                        if (jj < nk && dd < nd) {
                            x = k[k0 + (j0 + jj) * D + d0 + dd];
                        }
                        kt[e] = x;
                    }
                    workgroupBarrier();
                    if (live) {
                        for (var dd = 0u; dd < nd; dd++) {
                            let qd = q[q0 + d0 + dd];
                            for (var jj = 0u; jj < TK; jj++) {
                                s[jj] = fma(qd, kt[jj * DC + dd], s[jj]);
                            }
                        }
                    }
                    // Every row has read the tile before the next one is staged.
                    workgroupBarrier();
                }
                var alpha = 1.0;
                if (live) {
                    var top = neg_inf;
                    for (var jj = 0u; jj < nk; jj++) {
                        let j = j0 + jj;
                        let v = finish_score(s[jj], i, j, m0 + j * p[13]);
                        s[jj] = v;
                        bad = bad || is_nan(v);
                        top = max(top, v);
                    }
                    let mn = max(m, top);
                    let base = select(mn, 0.0, mn == neg_inf);
                    alpha = select(exp_f32(m - mn), 0.0, m == neg_inf);
                    var sum = 0.0;
                    for (var jj = 0u; jj < nk; jj++) {
                        let e = exp_f32(s[jj] - base);
                        s[jj] = e;
                        sum = sum + e;
                    }
                    l = l * alpha + sum;
                    m = mn;
                }
                for (var e = lane; e < TK * VC; e += 64u) {
                    let jj = e / VC;
                    let cc = e - jj * VC;
                    var x = 0.0;
                    if (jj < nk && cc < nc) {
                        x = v[v0 + (j0 + jj) * Dv + c0 + cc];
                    }
                    vt[e] = x;
                }
                workgroupBarrier();
                if (live) {
                    for (var c = 0u; c < VC; c++) {
                        acc[c] = acc[c] * alpha;
                    }
                    for (var jj = 0u; jj < nk; jj++) {
                        let w = s[jj];
                        for (var c = 0u; c < VC; c++) {
                            acc[c] = fma(w, vt[jj * VC + c], acc[c]);
                        }
                    }
                }
                // Every row has read the values before the next tile stages its own: the next
                // tile's key staging orders that where D > 0; without keys to stage, this does.
                if (D == 0u) {
                    workgroupBarrier();
                }
            }
            if (live) {
                for (var c = 0u; c < nc; c++) {
                    y[y0 + c0 + c] = output(acc[c], m, l, bad);
                }
            }
        }
    }
}
