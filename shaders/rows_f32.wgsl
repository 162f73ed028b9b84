// The row ops over the last axis of f32 rows: softmax (op 0), log_softmax (1), layer_norm (2)
// and rms_norm (3), `y[row] = op(x[row])`, each row of `n` elements computed by one
// workgroup of 64 invocations (each reading elements `lane + 64i`) whose partial results are
// reduced in workgroup memory by a tree. Workgroups loop over the rows past the dispatch
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

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// The sum over the workgroup of each lane's `v` (a tree: lane i adds lane i + s, s halving).
fn reduce_sum(lane: u32, v: f32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            red[lane] = red[lane] + red[lane + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    // Every lane has read the result before the next reduction writes.
    workgroupBarrier();
    return r;
}

// The maximum over the workgroup of each lane's `v`, NaN ignored.
fn reduce_max(lane: u32, v: f32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s && red[lane + s] > red[lane]) {
            red[lane] = red[lane + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// `v * 2^n` for an integer-valued `n` in [-150, 129], in two steps so that each factor is a
// normal power of two.
fn scale_pow2(v: f32, n: f32) -> f32 {
    let ni = i32(n);
    let n1 = ni >> 1u;
    let n2 = ni - n1;
    let s1 = bitcast<f32>(u32(n1 + 127) << 23u);
    let s2 = bitcast<f32>(u32(n2 + 127) << 23u);
    return (v * s1) * s2;
}

// `e^v`: 0 below -104, NaN for NaN, Cody-Waite reduction by ln 2 and a degree-6 polynomial.
// Without branches: the special cases are selected at the end.
fn exp_f32(v: f32) -> f32 {
    let c = max(min(v, 89.0), -104.0);
    let n = round(c * 1.4426950408889634);
    var r = fma(n, -0.693359375, c);
    r = fma(n, 2.12194440e-4, r);
    let z = r * r;
    var q = 1.9875691500e-4;
    q = fma(q, r, 1.3981999507e-3);
    q = fma(q, r, 8.3334519073e-3);
    q = fma(q, r, 4.1665795894e-2);
    q = fma(q, r, 1.6666665459e-1);
    q = fma(q, r, 5.0000001201e-1);
    let e = scale_pow2(fma(q, z, r) + 1.0, n);
    return select(select(e, 0.0, v < -104.0), v, is_nan(v));
}

// `ln v` of a sum of exponentials (at least 1, or +inf, or NaN).
fn ln_f32(v: f32) -> f32 {
    if (is_nan(v) || v > 0x1.fffffep+127f) {
        return v;
    }
    let bits = bitcast<i32>(v);
    var e = ((bits >> 23u) & 0xff) - 126;
    var m = bitcast<f32>((bits & 0x007fffff) | 0x3f000000);
    if (m < 0.70710678118654752) {
        e = e - 1;
        m = m + m;
    }
    m = m - 1.0;
    let ef = f32(e);
    let z = m * m;
    var q = 7.0376836292e-2;
    q = fma(q, m, -1.1514610310e-1);
    q = fma(q, m, 1.1676998740e-1);
    q = fma(q, m, -1.2420140846e-1);
    q = fma(q, m, 1.4249322787e-1);
    q = fma(q, m, -1.6668057665e-1);
    q = fma(q, m, 2.0000714765e-1);
    q = fma(q, m, -2.4999993993e-1);
    q = fma(q, m, 3.3333331174e-1);
    var t = (q * m) * z;
    t = fma(ef, -2.12194440e-4, t);
    t = fma(z, -0.5, t);
    let r = m + t;
    return fma(ef, 0.693359375, r);
}

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
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
            m = reduce_max(lane, m);
            var s = 0.0;
            for (var i = lane; i < n; i += WG) {
                let e = exp_f32(x[x0 + i] - m);
                s = s + e;
                if (op == 0u) {
                    y[y0 + i] = e;
                }
            }
            s = reduce_sum(lane, s);
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
                mean = reduce_sum(lane, s) / nf;
            }
            // layer_norm: the squared deviations from the mean; rms_norm: the squares.
            var ss = 0.0;
            for (var i = lane; i < n; i += WG) {
                let d = x[x0 + i] - mean;
                ss = ss + d * d;
            }
            let r = 1.0 / sqrt(reduce_sum(lane, ss) / nf + eps);
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
