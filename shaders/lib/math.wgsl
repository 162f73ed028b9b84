// ladder's f32 `exp` and `ln` (the approximations of `src/backend/cpu/math.rs`, which the
// generated kernels use too) for the library shaders, which name it with a line
// `// include: lib/math.wgsl` (`build.rs` puts this text there). The device's built-ins are not
// used: Vulkan leaves their precision loose.

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
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
