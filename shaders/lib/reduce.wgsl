// The sum over a workgroup of `WG` invocations, in workgroup memory: the including shader
// declares `const WG: u32` (a power of two) and `var<workgroup> red: array<f32, WG>`, and calls
// it from control flow every invocation of the workgroup takes.

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
