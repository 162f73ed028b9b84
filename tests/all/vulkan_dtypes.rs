//! Every integer dtype and the 16-bit floats on the Vulkan device against the reference.
//! Integers bit for bit: i8, i16, u8 and u16 (held in 32-bit registers, packed two or four
//! to a word in their buffers, so neighbouring elements are written by different
//! invocations), u32 and u64 (unsigned order, division and conversion), next to i32 and i64:
//! arithmetic that wraps, division by -1 and by zero, comparisons, `max`/`min`, bitwise
//! `and`/`or`, powers, reductions, conversions from f32 that saturate (NaN, infinities,
//! values past the range) and between integer dtypes that wrap. f16 and bf16 (f32 registers
//! rounded to their grid after each operation, 16-bit elements packed two to a word):
//! rounding to nearest even, overflow to infinity, f16's subnormals, NaN and signed zeros,
//! conversions each way. Skipped where there is no device, as in `vulkan.rs`.

#![cfg(feature = "vulkan")]

use ladder::models::Rng;
use ladder::{compile, CompileOptions, DType, Tensor};

use crate::vulkan::{agree, clean, device, parse, run_both, validate_shaders};

const DTYPES: [DType; 8] =
    [DType::I8, DType::U8, DType::I16, DType::U16, DType::U32, DType::U64, DType::I32, DType::I64];

/// `n` values of `dt` (as the i64 its tensors store: a u64 by its bit pattern): the range's
/// ends and their neighbours, 0, ±1, then random bit patterns wrapped to `dt`.
fn values(dt: DType, n: usize, rng: &mut Rng) -> Vec<i64> {
    let (lo, hi) = ladder::interp::int_limits(dt);
    let mut v = vec![lo, hi, lo.wrapping_add(1), hi.wrapping_sub(1), 0, 1, -1, 2, -2, 7];
    while v.len() < n {
        let bits = rng.next_u64() as i64;
        // Small values too, where products and sums stay in range.
        let x = if v.len() % 3 == 0 { bits % 100 } else { bits };
        v.push(x);
    }
    v.truncate(n);
    v.into_iter().map(|x| ladder::interp::wrap_int(dt, x)).collect()
}

fn ints(dt: DType, shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_ints(dt, shape, v).unwrap()
}

/// Same outputs, bit for bit, naming the output that differs.
fn bit_equal(got: &[Tensor], want: &[Tensor], names: &[&str], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for ((g, w), name) in got.iter().zip(want).zip(names) {
        if !g.bit_eq(w) {
            // The first element that differs, for the message.
            let (gv, wv) = (g.to_f64_vec(), w.to_f64_vec());
            let at = gv.iter().zip(&wv).position(|(a, b)| a.to_bits() != b.to_bits());
            let first = at.map(|i| format!("element {i}: got {}, want {}", gv[i], wv[i]));
            panic!("{what}, {name}: got {g}, want {w} ({})", first.unwrap_or_default());
        }
    }
}

#[test]
fn integer_dtypes_wrap_compare_and_divide_as_the_reference() {
    if !device("integer_dtypes_wrap_compare_and_divide_as_the_reference") {
        return;
    }
    let mut rng = Rng::new(0x1d7);
    // 37 elements: a partial last word for the packed dtypes.
    let n = 37;
    let names = [
        "add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "lt", "le", "gt", "ge", "eq", "ne", "neg", "abs",
        "sign", "sum", "max_row", "argmax", "f32", "i64", "to_i8", "to_u16", "pow",
    ];
    for dt in DTYPES {
        let src = format!(
            "graph g(%a: {dt}[{n}], %b: {dt}[{n}], %m: {dt}[4, 9], %e: {dt}[{n}]) {{
  %add = add(%a, %b)
  %sub = sub(%a, %b)
  %mul = mul(%a, %b)
  %div = div(%a, %b)
  %rem = rem(%a, %b)
  %max = max(%a, %b)
  %min = min(%a, %b)
  %and = and(%a, %b)
  %or = or(%a, %b)
  %lt = lt(%a, %b)
  %le = le(%a, %b)
  %gt = gt(%a, %b)
  %ge = ge(%a, %b)
  %eq = eq(%a, %b)
  %ne = ne(%a, %b)
  %neg = neg(%a)
  %abs = abs(%a)
  %sign = sign(%a)
  %sum = reduce_sum(%m) {{axes=[1]}}
  %max_row = reduce_max(%m) {{axes=[1]}}
  %argmax = argmax(%m) {{axis=1, keepdim=false}}
  %f32 = convert_element_type(%a) {{dtype=f32}}
  %i64 = convert_element_type(%a) {{dtype=i64}}
  %to_i8 = convert_element_type(%a) {{dtype=i8}}
  %to_u16 = convert_element_type(%a) {{dtype=u16}}
  %pow = pow(%a, %e)
  return {}
}}",
            names.iter().map(|s| format!("%{s}")).collect::<Vec<_>>().join(", ")
        );
        let g = parse(&src);
        let what = format!("{dt}");
        let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(validate_shaders(plan.program().unwrap(), &what) > 0 || !crate::vulkan::required());
        let a = values(dt, n, &mut rng);
        // No zero divisor here (that is an error, checked below); -1 is there.
        let b: Vec<i64> = values(dt, n, &mut rng).into_iter().rev().map(|x| if x == 0 { 3 } else { x }).collect();
        let m = values(dt, 36, &mut rng);
        // Exponents of -2 to 40 (negative ones only for signed dtypes and a non-zero base:
        // `0 ^ -k` is an error), and 63 and 64 where the dtype has them.
        let e: Vec<i64> = (0..n)
            .map(|i| {
                let k = (i as i64 * 7) % 43 - 2;
                let k = if k < 0 && (a[i] == 0 || ladder::interp::int_limits(dt).0 == 0) { -k } else { k };
                let signed = ladder::interp::int_limits(dt).0 < 0;
                match i {
                    3 if dt.size_bytes() == 8 => 63,
                    // Bases 1 and -1 (a[5], a[6]) to a negative power.
                    5 | 6 if signed => -3,
                    _ => k,
                }
            })
            .collect();
        let e = e.into_iter().map(|k| ladder::interp::wrap_int(dt, k)).collect();
        let inputs = [ints(dt, &[n], a.clone()), ints(dt, &[n], b), ints(dt, &[4, 9], m), ints(dt, &[n], e)];
        let (want, got) = run_both(&g, &inputs);
        bit_equal(&got, &want, &names, &what);
        // Division by zero is the reference's error on the device too.
        let zero = ints(dt, &[n], (0..n as i64).map(|i| i64::from(i != 5)).collect());
        let err = plan.run(&[inputs[0].clone(), zero, inputs[2].clone(), inputs[3].clone()]).unwrap_err().to_string();
        clean("division by zero");
        assert!(err.contains("division by zero"), "{what}: {err}");
        if ladder::interp::int_limits(dt).0 < 0 {
            // 0 to a negative power, likewise.
            let mut e = inputs[3].data().ints().unwrap();
            e[4] = -1;
            let e = ints(dt, &[n], e);
            let err = plan.run(&[inputs[0].clone(), inputs[1].clone(), inputs[2].clone(), e]).unwrap_err().to_string();
            clean("zero to a negative power");
            assert!(err.contains("division by zero"), "{what}: {err}");
        }
    }
}

#[test]
fn floats_convert_to_every_integer_dtype_saturating() {
    if !device("floats_convert_to_every_integer_dtype_saturating") {
        return;
    }
    let x: Vec<f32> = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        0.99,
        -0.99,
        -1.5,
        127.5,
        128.0,
        -128.5,
        -129.0,
        255.9,
        256.0,
        32767.5,
        32768.0,
        -32769.0,
        65535.9,
        65536.0,
        2147483520.0,
        2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        9.2233715e18,
        9.223372e18,
        -9.223372e18,
        -1e19,
        1.8446743e19,
        1.8446744e19,
        1e30,
        -1e30,
        3.7,
        -3.7,
        1e-40,
    ];
    let n = x.len();
    let outs: Vec<String> = DTYPES.iter().map(|dt| format!("%{dt}")).collect();
    let mut src = format!("graph g(%x: f32[{n}]) {{\n");
    for dt in DTYPES {
        src += &format!("  %{dt} = convert_element_type(%x) {{dtype={dt}}}\n");
    }
    src += &format!("  return {}\n}}", outs.join(", "));
    let g = parse(&src);
    let (want, got) = run_both(&g, &[Tensor::from_f32(&[n], x).unwrap()]);
    let names: Vec<&str> = outs.iter().map(|s| s.as_str()).collect();
    bit_equal(&got, &want, &names, "f32 to integers");
}

/// f16 and bf16 values that probe the grid: ties either way, the largest finite values and
/// just past them, subnormals (f16's and below), specials, and ordinary values.
fn half_probes() -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        1.000_488_3, // f16: 1 + 2^-11, a tie that rounds down to even
        1.001_464_8, // f16: 1 + 3·2^-11, a tie that rounds up to even
        65504.0,     // f16's largest
        65519.0,     // rounds down to it
        65520.0,     // rounds up to infinity
        -65520.0,
        6.0e-8,         // about f16's smallest subnormal (2^-24)
        2.9e-8,         // below half of it: to zero
        3.0e-8,         // above half of it: to 2^-24
        6.1e-5,         // just below f16's smallest normal
        1.0e-40,        // f32 subnormal
        3.389_531_4e38, // bf16's largest finite neighbourhood
        f32::MAX,
        0.1,
        -2.5,
        1234.567,
        -0.000_123_4,
    ];
    let mut state = 0x5eed_u32;
    while v.len() < 40 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        v.push(f32::from_bits(state >> 4 | 0x3000_0000) * if state & 1 == 0 { 1.0 } else { -300.0 });
    }
    v
}

#[test]
fn f16_and_bf16_round_to_their_grids_as_the_reference() {
    if !device("f16_and_bf16_round_to_their_grids_as_the_reference") {
        return;
    }
    let x = half_probes();
    let n = x.len();
    let exact = ["h", "add", "mul", "div", "sqrt", "max", "lt", "back", "other", "i32", "from_i32", "neg_abs"];
    for (dt, other) in [("f16", "bf16"), ("bf16", "f16")] {
        let src = format!(
            "graph g(%x: f32[{n}], %y: f32[{n}], %k: i32[{n}]) {{
  %h = convert_element_type(%x) {{dtype={dt}}}
  %hy = convert_element_type(%y) {{dtype={dt}}}
  %add = add(%h, %hy)
  %mul = mul(%h, %hy)
  %div = div(%h, %hy)
  %sqrt = sqrt(%h)
  %max = max(%h, %hy)
  %lt = lt(%h, %hy)
  %back = convert_element_type(%add) {{dtype=f32}}
  %other = convert_element_type(%mul) {{dtype={other}}}
  %i32 = convert_element_type(%h) {{dtype=i32}}
  %from_i32 = convert_element_type(%k) {{dtype={dt}}}
  %na = neg(%h)
  %neg_abs = abs(%na)
  %exp = exp(%h)
  %sum = reduce_sum(%hy) {{axes=[0]}}
  return %h, %add, %mul, %div, %sqrt, %max, %lt, %back, %other, %i32, %from_i32, %neg_abs, %exp, %sum
}}"
        );
        let g = parse(&src);
        let plan = compile(&g, &CompileOptions::vulkan()).unwrap_or_else(|e| panic!("{dt}: {e}"));
        assert!(validate_shaders(plan.program().unwrap(), dt) > 0 || !crate::vulkan::required());
        let y: Vec<f32> = x.iter().rev().map(|v| v * 0.75 + 0.001).collect();
        let k: Vec<i64> = (0..n as i64).map(|i| (i - 20) * 4099 + i * i * 997).collect();
        let inputs =
            [Tensor::from_f32(&[n], x.clone()).unwrap(), Tensor::from_f32(&[n], y).unwrap(), ints(DType::I32, &[n], k)];
        let (want, got) = run_both(&g, &inputs);
        // Correctly rounded in f32, then rounded once to the grid: the reference's bits.
        bit_equal(&got[..exact.len()], &want[..exact.len()], &exact, dt);
        // exp (the f32 approximation, rounded) and a sum rounded at each step: within the
        // conformance tolerance.
        agree(&got[exact.len()..], &want[exact.len()..], dt);
    }
}
