// The row ops over the last axis of f32 rows: softmax (op 0), log_softmax (1), layer_norm (2)
// and rms_norm (3), `y[row] = op(x[row])`, each row of `n` elements computed by one
// workgroup of 64 invocations (each reading elements `lane + 64i`) whose partial results are
// reduced in workgroup memory by a tree, or where the device has subgroup operations by each
// subgroup and then across the subgroups' results (`lib/reduce*.wgsl`). Workgroups loop over the rows past the dispatch
// (`num_workgroups`), so any number of rows fits one dispatch.
//
// Each op computes what its prims decomposition does, operation for operation, in f32; only
// the order of its sums differs (a tree over the lanes of sums in order), which the op's
// tolerance allows for:
// - softmax: `m` the row's maximum (NaN ignored: a NaN reaches the sum, which makes the row
//   NaN), `e = exp(x - m)`, `y = e / sum(e)`;
// - log_softmax: `y = (x - m) - ln(sum(exp(x - m)))`;
// - layer_norm: `mean = sum(x) / n`, `var = sum((x - mean)^2) / n`, then
//   `y = (x - mean) * (1 / sqrt(var + eps)) [* w] [+ b]`;
// - rms_norm: `y = x * (1 / sqrt(sum(x^2) / n + eps)) [* w]`.
// `exp` and `ln` are ladder's f32 approximations (`src/backend/cpu/math.rs`, which the
// generated kernels use too), not the device's built-ins, whose precision Vulkan leaves loose.
//
// Parameters (u32, binding 4; the host checks every index they produce lies in its buffer):
//  0 op, 1 rows, 2 n (the row length), 3 flags (1: a weight, 2: a bias), 4 eps (f32 bits),
//  5, 6, 7, 8 the first elements of x, the weight, the bias and y. Bindings without an
//  operand (no weight, no bias) hold some other buffer and are not read.

const WG: u32 = 64u;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> p: array<u32>;

var<workgroup> red: array<f32, 64>;

// include: lib/reduce.wgsl

// include: lib/math.wgsl

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    at: Lane,
) {
    let lane = at.index;
    let op = p[0];
    let rows = p[1];
    let n = p[2];
    let weighted = (p[3] & 1u) != 0u;
    let biased = (p[3] & 2u) != 0u;
    let eps = bitcast<f32>(p[4]);
    let nf = f32(n);
    for (var row = group.x; row < rows; row += groups.x) {
        let x0 = p[5] + row * n;
        let y0 = p[8] + row * n;
        if (op <= 1u) {
            var m = bitcast<f32>(0xff800000u);
            for (var i = lane; i < n; i += WG) {
                let v = x[x0 + i];
                if (v > m) {
                    m = v;
                }
            }
            m = reduce_max(at, m);
            var s = 0.0;
            for (var i = lane; i < n; i += WG) {
                let e = exp_f32(x[x0 + i] - m);
                s = s + e;
                if (op == 0u) {
                    y[y0 + i] = e;
                }
            }
            s = reduce_sum(at, s);
            if (op == 0u) {
                // Each lane rescales the terms it wrote.
                for (var i = lane; i < n; i += WG) {
                    y[y0 + i] = y[y0 + i] / s;
                }
            } else {
                let l = ln_f32(s);
                for (var i = lane; i < n; i += WG) {
                    y[y0 + i] = (x[x0 + i] - m) - l;
                }
            }
        } else {
            var mean = 0.0;
            if (op == 2u) {
                var s = 0.0;
                for (var i = lane; i < n; i += WG) {
                    s = s + x[x0 + i];
                }
                mean = reduce_sum(at, s) / nf;
            }
            // layer_norm: the squared deviations from the mean; rms_norm: the squares.
            var ss = 0.0;
            for (var i = lane; i < n; i += WG) {
                let d = x[x0 + i] - mean;
                ss = ss + d * d;
            }
            let r = 1.0 / sqrt(reduce_sum(at, ss) / nf + eps);
            for (var i = lane; i < n; i += WG) {
                var v = x[x0 + i];
                if (op == 2u) {
                    v = v - mean;
                }
                v = v * r;
                if (weighted) {
                    v = v * w[p[6] + i];
                }
                if (biased) {
                    v = v + bias[p[7] + i];
                }
                y[y0 + i] = v;
            }
        }
    }
}
