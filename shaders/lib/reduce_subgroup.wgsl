// Reductions over a workgroup of `WG` invocations on subgroup operations (basic and arithmetic):
// the same functions as `lib/reduce.wgsl`, under the same contract. Each subgroup reduces its
// invocations' values with one operation, its first invocation writes the result to the
// subgroup's slot of `red`, and after one barrier every invocation combines the slots in
// order: two barriers per reduction where the tree takes log2(WG) + 2. The order of a sum
// within a subgroup is the device's.

// The invocation's place in its workgroup and its subgroup.
struct Lane {
    @builtin(local_invocation_index) index: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
    @builtin(subgroup_invocation_id) in_subgroup: u32,
}

// The sum over the workgroup of each lane's `v`.
fn reduce_sum(at: Lane, v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (at.in_subgroup == 0u) {
        red[at.subgroup] = s;
    }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < at.subgroups; i++) {
        r = r + red[i];
    }
    // Every lane has read the slots before the next reduction writes.
    workgroupBarrier();
    return r;
}

// The sums over the workgroup of each lane's 8 values `lo` and `hi`: lane j < 8 gets the sum
// of value j, the other lanes 0.
fn reduce_sum8(at: Lane, lo: vec4<f32>, hi: vec4<f32>) -> f32 {
    let sl = subgroupAdd(lo);
    let sh = subgroupAdd(hi);
    if (at.in_subgroup == 0u) {
        for (var j = 0u; j < 4u; j++) {
            red[at.subgroup * 8u + j] = sl[j];
            red[at.subgroup * 8u + 4u + j] = sh[j];
        }
    }
    workgroupBarrier();
    var r = 0.0;
    if (at.index < 8u) {
        r = red[at.index];
        for (var i = 1u; i < at.subgroups; i++) {
            r = r + red[i * 8u + at.index];
        }
    }
    workgroupBarrier();
    return r;
}

// The maximum over the workgroup of each lane's `v`, NaN if any is NaN (a subgroup's maximum
// skips NaN, so whether there was one is reduced beside it).
fn reduce_max(at: Lane, v: f32) -> f32 {
    let top = subgroupMax(v);
    let nan = subgroupMax(select(0u, 1u, is_nan(v)));
    if (at.in_subgroup == 0u) {
        red[at.subgroup] = select(top, bitcast<f32>(0x7fc00000u), nan != 0u);
    }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < at.subgroups; i++) {
        let o = red[i];
        if (is_nan(o) || o > r) {
            r = o;
        }
    }
    workgroupBarrier();
    return r;
}
