// The tiled f32 GEMM: `c[z] = a[z] @ b[z]` for every batch index `z`, each matrix at any
// strides (so either operand may be transposed, and batch dims may broadcast); or, in image
// mode, a 1-D or 2-D convolution as the product of its weights `[out channels, taps]` and the
// input's patches `[taps, output positions]`, which the tile loads gather from the input
// (with zeros for padding) instead of reading a matrix: each group of each batch element is
// one batch index.
//
// A workgroup of 16 x 8 invocations computes a tile of 64 x 64 results, each invocation 8 rows
// x 4 columns of it (rows `y + 8i`, columns `x + 16j`, so that neighbouring invocations read
// neighbouring columns of `b`'s tile). Tiles of 16 values of `k` of both operands are staged in
// workgroup memory, read from the device once per tile rather than once per result. Each
// result is `fma(a, b, acc)` over `k` in order from +0: matmul's reference order, and its
// rounding (one per step) on a device whose `fma` is fused. Workgroups loop over tiles and
// batch indices past the dispatch (`num_workgroups`), so any size fits a dispatch of at most
// 65,535 groups per dimension.
//
// Split mode (a product of few rows, where a 64-row tile would be mostly idle: a matrix-vector
// product in decoding): one workgroup per row of a batch index's result and 8 of its columns.
// Its 128 invocations split `k` (invocation i takes k = i, i + 128, ...), each summing its
// share of the 8 results with `fma` in order from +0, and the 8 partial sums are reduced across
// the workgroup (`lib/reduce.wgsl`, or on subgroup operations in the module for devices that
// have them). The order of the sum differs from the reference's; its error stays within the
// bound of a sum of k terms in any order.
//
// Parameters (u32, binding 3; the host checks every index they produce lies in its buffer):
//  0 m, 1 n, 2 k, 3 batch (product of the batch extents), 4 a's row stride, 5 a's stride in
//  k, 6 b's stride in k, 7 b's column stride, 8, 9, 10 a's, b's and c's first element,
//  11 batch dims (at most 4), then per batch dim, outermost first, at 12 + 3d: its extent,
//  a's stride and b's stride (0 where the operand broadcasts). c is dense: [batch, m, n].
//  24 image mode (1) or not (0); in image mode, b is an image [channels, height, width] (its
//  first element at b's batch offset) and: 25 taps per channel (kernel height x width),
//  26 kernel width, 27 output width, 28 input height, 29 input width, 30 and 31 the strides,
//  32 and 33 the padding before (rows, columns), 34 and 35 the dilations. 36 split mode (1) or
//  not (0).

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
// Invocations per workgroup (16 x 8).
const INVOCATIONS: u32 = 128u;
const WG: u32 = 128u;
// Split mode: the columns of a workgroup.
const NC: u32 = 8u;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> p: array<u32>;

// a's tile as [TK][TM] (`red`: the same memory holds split mode's reductions, 8 slots per
// invocation, which `lib/reduce*.wgsl` know by that name; one array for both keeps the
// workgroup memory of the tiles at 8 KiB), b's as [TK][TN].
var<workgroup> red: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;

// include: lib/math.wgsl

// include: lib/reduce.wgsl

// Batch index `z`'s first elements of a and b.
fn batch_start(z: u32) -> vec2<u32> {
    var rest = z;
    var a0 = p[8];
    var b0 = p[9];
    for (var d = p[11]; d > 0u; d -= 1u) {
        let at = 12u + 3u * (d - 1u);
        let i = rest % p[at];
        rest = rest / p[at];
        a0 += i * p[at + 1u];
        b0 += i * p[at + 2u];
    }
    return vec2<u32>(a0, b0);
}

// Split mode: column `j` of b's row at `at` (0 past the `nc` columns there are).
fn b_at(at: u32, j: u32, nc: u32) -> f32 {
    if (j < nc) {
        return b[at + j * p[7]];
    }
    return 0.0;
}

// Split mode (see the top).
fn split(group: vec3<u32>, groups: vec3<u32>, at: Lane) {
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let a_row = p[4];
    let a_k = p[5];
    let b_k = p[6];
    let b_col = p[7];
    let tiles_n = (n + NC - 1u) / NC;
    for (var z = group.z; z < p[3]; z += groups.z) {
        let start = batch_start(z);
        let c0 = p[10] + z * m * n;
        for (var row = group.y; row < m; row += groups.y) {
            let ar = start.x + row * a_row;
            for (var tn = group.x; tn < tiles_n; tn += groups.x) {
                let col0 = tn * NC;
                let nc = min(NC, n - col0);
                // The 8 columns' partial sums, written out (not an array indexed in a loop, which
                // a compiler may keep in memory rather than registers).
                var lo = vec4<f32>();
                var hi = vec4<f32>();
                for (var kk = at.index; kk < k; kk += WG) {
                    let av = vec4<f32>(a[ar + kk * a_k]);
                    let bk = start.y + kk * b_k + col0 * b_col;
                    let bl = vec4<f32>(b_at(bk, 0u, nc), b_at(bk, 1u, nc), b_at(bk, 2u, nc), b_at(bk, 3u, nc));
                    let bh = vec4<f32>(b_at(bk, 4u, nc), b_at(bk, 5u, nc), b_at(bk, 6u, nc), b_at(bk, 7u, nc));
                    lo = fma(av, bl, lo);
                    hi = fma(av, bh, hi);
                }
                // Lane j < 8 has column j's sum.
                let total = reduce_sum8(at, lo, hi);
                if (at.index < nc) {
                    c[c0 + row * n + col0 + at.index] = total;
                }
            }
        }
    }
}

// The input element that tap `t` (its input channel, then kernel row and column, row-major)
// reads for output position `q` (row-major) in image mode: 0 where it is padding.
fn image(b0: u32, t: u32, q: u32) -> f32 {
    let ih = p[28];
    let iw = p[29];
    let channel = t / p[25];
    let tap = t % p[25];
    let y = (q / p[27]) * p[30] + (tap / p[26]) * p[34];
    let x = (q % p[27]) * p[31] + (tap % p[26]) * p[35];
    if (y < p[32] || x < p[33] || y - p[32] >= ih || x - p[33] >= iw) {
        return 0.0;
    }
    return b[b0 + (channel * ih + y - p[32]) * iw + x - p[33]];
}

// Stores the results of `row` at columns `col + 16j` (component j) that lie in the m x n
// result starting at element `c0`.
fn put(c0: u32, m: u32, n: u32, row: u32, col: u32, v: vec4<f32>) {
    if (row >= m) {
        return;
    }
    let at = c0 + row * n + col;
    if (col < n) {
        c[at] = v.x;
    }
    if (col + 16u < n) {
        c[at + 16u] = v.y;
    }
    if (col + 32u < n) {
        c[at + 32u] = v.z;
    }
    if (col + 48u < n) {
        c[at + 48u] = v.w;
    }
}

// One-dimensional (subgroup builtins need it): invocation `lane` is (lane % 16, lane / 16) of
// the 16 x 8.
@compute @workgroup_size(128, 1, 1)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    at: Lane,
) {
    if (p[36] == 1u) {
        split(group, groups, at);
        return;
    }
    let lane = at.index;
    let local = vec2<u32>(lane % 16u, lane / 16u);
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let batch = p[3];
    let a_row = p[4];
    let a_k = p[5];
    let b_k = p[6];
    let b_col = p[7];
    let image_mode = p[24] == 1u;
    let tiles_m = (m + TM - 1u) / TM;
    let tiles_n = (n + TN - 1u) / TN;
    for (var z = group.z; z < batch; z += groups.z) {
        let start = batch_start(z);
        let a0 = start.x;
        let b0 = start.y;
        let c0 = p[10] + z * m * n;
        for (var tm = group.y; tm < tiles_m; tm += groups.y) {
            for (var tn = group.x; tn < tiles_n; tn += groups.x) {
                let row0 = tm * TM;
                let col0 = tn * TN;
                // Rows `local.y + 8i` (acc_i), columns `local.x + 16j` (component j): written
                // out, not as arrays, so that a compiler that does not unroll loops (llvmpipe's)
                // keeps them in registers.
                var acc0 = vec4<f32>();
                var acc1 = vec4<f32>();
                var acc2 = vec4<f32>();
                var acc3 = vec4<f32>();
                var acc4 = vec4<f32>();
                var acc5 = vec4<f32>();
                var acc6 = vec4<f32>();
                var acc7 = vec4<f32>();
                for (var k0 = 0u; k0 < k; k0 += TK) {
                    // Each invocation stages 8 values of each tile (0 past the matrix), reading
                    // along whichever of the tile's sides is contiguous in memory.
                    for (var t = 0u; t < 8u; t += 1u) {
                        let e = lane + INVOCATIONS * t;
                        var r = e % TM;
                        var kk = e / TM;
                        if (a_k == 1u) {
                            r = e / TK;
                            kk = e % TK;
                        }
                        var v = 0.0;
                        if (row0 + r < m && k0 + kk < k) {
                            v = a[a0 + (row0 + r) * a_row + (k0 + kk) * a_k];
                        }
                        red[kk * TM + r] = v;
                    }
                    for (var t = 0u; t < 8u; t += 1u) {
                        let e = lane + INVOCATIONS * t;
                        var col = e % TN;
                        var kk = e / TN;
                        if (b_col != 1u && b_k == 1u) {
                            col = e / TK;
                            kk = e % TK;
                        }
                        var v = 0.0;
                        if (col0 + col < n && k0 + kk < k) {
                            if (image_mode) {
                                v = image(b0, k0 + kk, col0 + col);
                            } else {
                                v = b[b0 + (k0 + kk) * b_k + (col0 + col) * b_col];
                            }
                        }
                        tb[kk * TN + col] = v;
                    }
                    workgroupBarrier();
                    // Past k, both tiles hold +0: fma(0, 0, acc) leaves acc as it is.
                    for (var kk = 0u; kk < TK; kk += 1u) {
                        let at = kk * TN + local.x;
                        let bv = vec4<f32>(tb[at], tb[at + 16u], tb[at + 32u], tb[at + 48u]);
                        let ar = kk * TM + local.y;
                        acc0 = fma(vec4<f32>(red[ar]), bv, acc0);
                        acc1 = fma(vec4<f32>(red[ar + 8u]), bv, acc1);
                        acc2 = fma(vec4<f32>(red[ar + 16u]), bv, acc2);
                        acc3 = fma(vec4<f32>(red[ar + 24u]), bv, acc3);
                        acc4 = fma(vec4<f32>(red[ar + 32u]), bv, acc4);
                        acc5 = fma(vec4<f32>(red[ar + 40u]), bv, acc5);
                        acc6 = fma(vec4<f32>(red[ar + 48u]), bv, acc6);
                        acc7 = fma(vec4<f32>(red[ar + 56u]), bv, acc7);
                    }
                    workgroupBarrier();
                }
                let row = row0 + local.y;
                let col = col0 + local.x;
                put(c0, m, n, row, col, acc0);
                put(c0, m, n, row + 8u, col, acc1);
                put(c0, m, n, row + 16u, col, acc2);
                put(c0, m, n, row + 24u, col, acc3);
                put(c0, m, n, row + 32u, col, acc4);
                put(c0, m, n, row + 40u, col, acc5);
                put(c0, m, n, row + 48u, col, acc6);
                put(c0, m, n, row + 56u, col, acc7);
            }
        }
    }
}
