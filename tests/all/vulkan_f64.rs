//! f64 on the Vulkan device (where it has `shaderFloat64`), against the reference: the exact
//! operations bit for bit (arithmetic, `rem`, `max`/`min` with NaN and signed zeros, `sign`,
//! rounding, conversions to and from every float and integer dtype, f64 to f16 and bf16
//! rounded once, not twice through f32), `exp` and `log` within 1 ULP, reductions and
//! `logsumexp` within the conformance tolerance; f32 `pow` with any exponent (computed in f64
//! there, as the CPU's); and matmul and convolution in f16, f64 and integer dtypes. Skipped
//! where there is no device, as in `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::backend::vulkan::VulkanDevice;
use ladder::{compile, CompileOptions, DType, Tensor};

use crate::vulkan::{agree, device, parse, run_both, validate_shaders};

/// Whether the device computes in f64; where it does not, that kernels in f64 are declined
/// with the reason (and the test stops there).
fn float64(test: &str) -> bool {
    if !device(test) {
        return false;
    }
    let has = VulkanDevice::process().unwrap().computes_f64();
    if !has {
        let g = parse("graph g(%x: f64[3]) {\n  %y = add(%x, %x)\n  return %y\n}\n");
        let Err(err) = compile(&g, &CompileOptions::vulkan()) else { panic!("{test}: an f64 kernel compiled") };
        let err = err.to_string();
        assert!(err.contains("shaderFloat64"), "{test}: {err}");
        eprintln!("{test}: the device has no f64: checked that f64 kernels are declined");
    }
    has
}

fn f64s(v: Vec<f64>) -> Tensor {
    Tensor::from_f64_as(DType::F64, &[v.len()], &v).unwrap()
}

/// Bit-for-bit equality of each output, naming the first element that differs.
fn bit_equal(got: &[Tensor], want: &[Tensor], names: &[&str], what: &str) {
    for ((g, w), name) in got.iter().zip(want).zip(names) {
        let (gv, wv) = (g.to_f64_vec(), w.to_f64_vec());
        let bad = gv.iter().zip(&wv).position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()));
        assert!(g.dtype() == w.dtype() && bad.is_none(), "{what}, {name}: element {bad:?}: got {g}, want {w}");
    }
}

/// Distance in f64 ULP (NaN against NaN is 0).
fn ulp(a: f64, b: f64) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() { 0 } else { u64::MAX };
    }
    let ord = |x: f64| {
        let b = x.to_bits() as i64 as i128;
        if b < 0 {
            i64::MIN as i128 - b
        } else {
            b
        }
    };
    (ord(a) - ord(b)).unsigned_abs() as u64
}

/// f64 values that probe the operations and conversions: specials, subnormals, the ends of
/// f32's and f16's ranges, values a hair past a half type's tie (rounded twice through f32
/// they would go the wrong way), integers' ranges, ordinary values.
fn probes() -> Vec<f64> {
    let mut v = vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        5e-324,
        -2.2250738585072014e-308,
        f64::MAX,
        3.4028235677973366e38,                 // past f32's largest, rounds down to it
        3.4028235677973367e38,                 // rounds to infinity in f32
        1.0 + 2f64.powi(-11) + 2f64.powi(-40), // f16: just past a tie, rounds up
        -(1.0 + 2f64.powi(-11) + 2f64.powi(-40)),
        1.0 + 2f64.powi(-8) + 2f64.powi(-40), // bf16: likewise
        65519.99999,
        65520.0,
        2.9802322387695312e-8, // f16: exactly half its smallest subnormal (to 0, even)
        2.9802322387695313e-8, // a hair above: to 2^-24
        2147483647.5,
        -2147483648.5,
        9.223372036854775e18,
        9_223_372_036_854_775_808.0, // 2^63
        1.8446744073709552e19,
        0.1,
        -2.5,
        3.5,
        1e300,
        -7.25e-5,
        123456.789,
    ];
    let mut state = 0x6a09_e667_f3bc_c908_u64;
    while v.len() < 45 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let x = f64::from_bits((state >> 2) & 0x3fff_ffff_ffff_ffff | 0x3e00_0000_0000_0000);
        v.push(if state & 1 == 0 { x } else { -x * 1e3 });
    }
    v
}

#[test]
fn f64_computes_and_converts_as_the_reference() {
    if !float64("f64_computes_and_converts_as_the_reference") {
        return;
    }
    let x = probes();
    let n = x.len();
    let y: Vec<f64> = x.iter().rev().map(|v| v * 0.75 - 0.5).collect();
    let exact = [
        "add", "sub", "mul", "div", "rem", "max", "min", "lt", "eq", "neg", "abs", "sign", "floor", "ceil", "round",
        "sqrt", "f32", "f16", "bf16", "i32", "i64", "u64", "u8", "from_f32", "from_i64", "from_f16", "argmax",
        "max_row",
    ];
    let src = format!(
        "graph g(%x: f64[{n}], %y: f64[{n}], %z: f32[{n}], %k: i64[{n}]) {{
  %add = add(%x, %y)
  %sub = sub(%x, %y)
  %mul = mul(%x, %y)
  %div = div(%x, %y)
  %rem = rem(%x, %y)
  %max = max(%x, %y)
  %min = min(%x, %y)
  %lt = lt(%x, %y)
  %eq = eq(%x, %y)
  %neg = neg(%x)
  %abs = abs(%x)
  %sign = sign(%x)
  %floor = floor(%x)
  %ceil = ceil(%x)
  %round = round(%x)
  %sqrt = sqrt(%x)
  %f32 = convert_element_type(%x) {{dtype=f32}}
  %f16 = convert_element_type(%x) {{dtype=f16}}
  %bf16 = convert_element_type(%x) {{dtype=bf16}}
  %i32 = convert_element_type(%x) {{dtype=i32}}
  %i64 = convert_element_type(%x) {{dtype=i64}}
  %u64 = convert_element_type(%x) {{dtype=u64}}
  %u8 = convert_element_type(%x) {{dtype=u8}}
  %from_f32 = convert_element_type(%z) {{dtype=f64}}
  %from_i64 = convert_element_type(%k) {{dtype=f64}}
  %h = convert_element_type(%z) {{dtype=f16}}
  %from_f16 = convert_element_type(%h) {{dtype=f64}}
  %m = reshape(%y) {{shape=[5, 9]}}
  %argmax = argmax(%m) {{axis=1, keepdim=false}}
  %max_row = reduce_max(%m) {{axes=[1]}}
  %exp = exp(%x)
  %log = log(%x)
  %sum = reduce_sum(%m) {{axes=[1]}}
  %lse = logsumexp(%m) {{axes=[1]}}
  return {}, %exp, %log, %sum, %lse
}}",
        exact.iter().map(|s| format!("%{s}")).collect::<Vec<_>>().join(", ")
    );
    let g = parse(&src);
    let plan = compile(&g, &CompileOptions::vulkan()).unwrap();
    assert!(validate_shaders(plan.program().unwrap(), "f64") > 0 || !crate::vulkan::required());
    let z: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let k: Vec<i64> = (0..n as i64).map(|i| (i - 20) * 0x1234_5678_9abc + i * i * 997).collect();
    let inputs =
        [f64s(x.clone()), f64s(y), Tensor::from_f32(&[n], z).unwrap(), Tensor::from_ints(DType::I64, &[n], k).unwrap()];
    let (want, got) = run_both(&g, &inputs);
    bit_equal(&got[..exact.len()], &want[..exact.len()], &exact, "f64");
    // exp and log: math64's, within 1 ULP of the reference's (the host's).
    for (i, name) in [(exact.len(), "exp"), (exact.len() + 1, "log")] {
        let (g, w) = (got[i].to_f64_vec(), want[i].to_f64_vec());
        for (j, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(ulp(*a, *b) <= 1, "{name}({}): got {a:e}, want {b:e}", x[j]);
        }
    }
    agree(&got[exact.len() + 2..], &want[exact.len() + 2..], "f64 reductions");
}

#[test]
fn f32_pow_takes_any_exponent_where_the_device_has_f64() {
    if !float64("f32_pow_takes_any_exponent_where_the_device_has_f64") {
        return;
    }
    let base = [2.0f32, 0.5, 10.0, -8.0, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0, -1.0, 1e-30, 3.7];
    let exps =
        [0.5f32, -0.5, 1.0 / 3.0, 2.5, -3.0, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 100.0, -100.0, 7.0];
    let (nb, ne) = (base.len(), exps.len());
    let g = parse(&format!("graph g(%x: f32[{nb}, 1], %y: f32[1, {ne}]) {{\n  %p = pow(%x, %y)\n  return %p\n}}\n"));
    let inputs =
        [Tensor::from_f32(&[nb, 1], base.to_vec()).unwrap(), Tensor::from_f32(&[1, ne], exps.to_vec()).unwrap()];
    let (want, got) = run_both(&g, &inputs);
    let (g, w) = (got[0].to_f64_vec(), want[0].to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let (a, b) = (*a as f32, *b as f32);
        let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        // Within 1 f32 ULP (the CPU's bound for its pow).
        let close = a.is_finite() && b.is_finite() && (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1;
        assert!(same || close, "pow({}, {}): got {a:e}, want {b:e}", base[i / ne], exps[i % ne]);
    }
}

#[test]
fn matmul_and_conv_run_in_half_f64_and_integer_dtypes() {
    if !float64("matmul_and_conv_run_in_half_f64_and_integer_dtypes") {
        return;
    }
    for dt in [DType::F16, DType::BF16, DType::F64, DType::I32, DType::I8, DType::U8, DType::I64] {
        // conv is a float op; integer convolutions reach the device as matmuls or as convs
        // of converted operands.
        let conv = if dt.is_float() {
            "%c = conv(%x, %w) {stride=[1, 2], padding=[1, 0, 1, 1], dilation=[1, 1], groups=1}"
        } else {
            "%c = mul(%x, %x)"
        };
        let g = parse(&format!(
            "graph g(%a: {dt}[2, 3, 7], %b: {dt}[7, 5], %x: {dt}[1, 2, 6, 5], %w: {dt}[3, 2, 3, 3]) {{
  %m = matmul(%a, %b)
  %t = matmul(%b, %a) {{transpose_a=true, transpose_b=true}}
  {conv}
  return %m, %t, %c
}}"
        ));
        let what = format!("{dt}");
        let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(validate_shaders(plan.program().unwrap(), &what) > 0 || !crate::vulkan::required());
        let make = |shape: &[usize], seed: i64| {
            let n: usize = shape.iter().product();
            let v: Vec<i64> = (0..n as i64).map(|i| (i * 37 + seed) % 23 - 11).collect();
            if dt.is_float() {
                Tensor::from_f64_as(dt, shape, &v.iter().map(|&k| k as f64 * 0.37).collect::<Vec<_>>()).unwrap()
            } else {
                Tensor::from_ints(dt, shape, v.iter().map(|&k| ladder::interp::wrap_int(dt, k * 13)).collect()).unwrap()
            }
        };
        let inputs = [make(&[2, 3, 7], 1), make(&[7, 5], 2), make(&[1, 2, 6, 5], 3), make(&[3, 2, 3, 3], 4)];
        let (want, got) = run_both(&g, &inputs);
        if dt.is_float() {
            // Each product rounded to the dtype before it is added (the reference adds the
            // exact product): within the conformance tolerance.
            agree(&got, &want, &what);
        } else {
            bit_equal(&got, &want, &["m", "t", "c"], &what);
        }
    }
}
