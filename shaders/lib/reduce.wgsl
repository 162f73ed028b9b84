// Reductions over a workgroup of `WG` invocations, in workgroup memory: the including shader
// declares `const WG: u32` (a power of two) and `var<workgroup> red: array<f32, WG>`, takes its
// invocation's place as an entry point parameter of type `Lane`, and calls them from control
// flow every invocation of the workgroup takes. `lib/reduce_subgroup.wgsl` has the same
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
