// Reductions over a workgroup of `WG` invocations, in workgroup memory: the including shader
// declares `const WG: u32` (a power of two) and `var<workgroup> red: array<f32, N>` (N = WG, or
// 8 * WG where it calls `reduce_sum8`), takes its invocation's place as an entry point
// parameter of type `Lane`, and calls them from control flow every invocation of the workgroup
// takes. `lib/reduce_subgroup.wgsl` has the same
// functions on subgroup operations (`build.rs` builds each shader with either).

// The invocation's place in its workgroup.
struct Lane {
    @builtin(local_invocation_index) index: u32,
}

// The sum over the workgroup of each lane's `v` (a tree: lane i adds lane i + s, s halving).
fn reduce_sum(at: Lane, v: f32) -> f32 {
    let lane = at.index;
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

// The sums over the workgroup of each lane's 8 values `lo` and `hi` (a tree, as `reduce_sum`,
// of the 8 at once): lane j < 8 gets the sum of value j, the other lanes 0.
fn reduce_sum8(at: Lane, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    let lane = at.index;
    for (var j = 0u; j < 4u; j++) {
        red[j * WG + lane] = lo[j];
        red[(j + 4u) * WG + lane] = hi[j];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            for (var j = 0u; j < 8u; j++) {
                red[j * WG + lane] = red[j * WG + lane] + red[j * WG + lane + s];
            }
        }
        workgroupBarrier();
    }
    var r = 0.0;
    if (lane < 8u) {
        r = red[lane * WG];
    }
    workgroupBarrier();
    return r;
}

// The maximum over the workgroup of each lane's `v`, NaN if any is NaN.
fn reduce_max(at: Lane, v: f32) -> f32 {
    let lane = at.index;
    red[lane] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            let o = red[lane + s];
            if (is_nan(o) || o > red[lane]) {
                red[lane] = o;
            }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
