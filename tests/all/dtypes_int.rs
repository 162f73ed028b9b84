//! The narrow and unsigned integer dtypes (i8, i16, u8, u16, u32, u64): their facts and
//! promotion, the interpreter's semantics at their edges (wrapping, saturating conversion,
//! u64 values above 2^63, unsigned order and division, division by zero), the text form,
//! and compiled plans (reference executor and native mode, which declines these dtypes and
//! falls back) agreeing with the interpreter bit for bit.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::tensor::TensorData;
use ladder::{compile, CompileOptions, DType, Graph, Tensor};

use crate::common::parse;

const NEW: [DType; 6] = [DType::I8, DType::I16, DType::U8, DType::U16, DType::U32, DType::U64];

fn t(d: DType, shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_ints(d, shape, v.to_vec()).unwrap()
}

fn u64t(v: &[u64]) -> Tensor {
    Tensor::new(vec![v.len()], TensorData::U64(v.to_vec())).unwrap()
}

fn run(src: &str, inputs: &[Tensor]) -> Vec<Tensor> {
    interp::run(&parse(src), inputs, &Options::default()).unwrap_or_else(|e| panic!("run: {e}")).outputs
}

fn run_err(src: &str, inputs: &[Tensor]) -> EvalError {
    match interp::run(&parse(src), inputs, &Options::default()) {
        Err(InterpError::Eval { error, .. }) => error,
        other => panic!("expected an eval error, got {other:?}"),
    }
}

/// The elements as i128 values (u64 read as unsigned).
fn vals(t: &Tensor) -> Vec<i128> {
    match t.data() {
        TensorData::U64(v) => v.iter().map(|&x| x as i128).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| x as i128).collect(),
        d => d.ints().expect("integer data").into_iter().map(i128::from).collect(),
    }
}

fn unary_graph(d: DType, op: &str) -> String {
    format!("graph g(%x: {d}[3]) {{\n  %1 = {op}(%x)\n  return %1\n}}")
}

fn binary_graph(d: DType, op: &str) -> String {
    format!("graph g(%a: {d}[3], %b: {d}[3]) {{\n  %2 = {op}(%a, %b)\n  return %2\n}}")
}

#[test]
fn dtype_facts_and_promotion() {
    for (d, name, bytes, bits) in [
        (DType::I8, "i8", 1, 8),
        (DType::I16, "i16", 2, 16),
        (DType::U8, "u8", 1, 8),
        (DType::U16, "u16", 2, 16),
        (DType::U32, "u32", 4, 32),
        (DType::U64, "u64", 8, 64),
    ] {
        assert_eq!(d.name(), name);
        assert_eq!(DType::from_name(name), Some(d));
        assert_eq!(d.size_bytes(), bytes);
        assert_eq!(d.int_bits(), Some(bits));
        assert!(d.is_int() && !d.is_float() && !d.is_bool());
        assert_eq!(d.is_unsigned(), name.starts_with('u'));
    }
    assert_eq!(DType::U64.int_range(), Some((0, u64::MAX as i128)));
    assert_eq!(DType::I8.int_range(), Some((-128, 127)));
    use DType::*;
    for (a, b, want) in [
        (U8, U16, U16),
        (I8, I16, I16),
        (U8, I8, I16),
        (U8, I16, I16),
        (U8, I32, I32),
        (U16, I16, I32),
        (U32, I8, I64),
        (U32, I32, I64),
        (U64, I8, I64),
        (U64, U8, U64),
        (Bool, U8, U8),
        (U64, F16, F16),
        (I8, F32, F32),
    ] {
        assert_eq!(DType::promote(a, b), want, "{a} + {b}");
        assert_eq!(DType::promote(b, a), want, "{b} + {a}");
    }
}

#[test]
fn arithmetic_wraps_in_each_dtype() {
    type Row = [i64; 3];
    let cases: [(DType, Row, Row, Row, Row, Row); 5] = [
        // (dtype, a, b, a + b, a - b, a * b)
        (DType::I8, [127, -128, 100], [1, -1, 2], [-128, 127, 102], [126, -127, 98], [127, -128, -56]),
        (
            DType::I16,
            [32767, -32768, 300],
            [1, -1, 300],
            [-32768, 32767, 600],
            [32766, -32767, 0],
            [32767, -32768, 24464],
        ),
        (DType::U8, [255, 0, 16], [1, 1, 16], [0, 1, 32], [254, 255, 0], [255, 0, 0]),
        (DType::U16, [65535, 0, 256], [1, 1, 256], [0, 1, 512], [65534, 65535, 0], [65535, 0, 0]),
        (
            DType::U32,
            [4294967295, 0, 65536],
            [1, 1, 65536],
            [0, 1, 131072],
            [4294967294, 4294967295, 0],
            [4294967295, 0, 0],
        ),
    ];
    for (d, a, b, sum, diff, prod) in cases {
        let (ta, tb) = (t(d, &[3], &a), t(d, &[3], &b));
        for (op, want) in [("add", sum), ("sub", diff), ("mul", prod)] {
            let out = &run(&binary_graph(d, op), &[ta.clone(), tb.clone()])[0];
            assert_eq!(out.dtype(), d);
            assert_eq!(vals(out), want.map(i128::from), "{op} in {d}");
        }
    }
    // neg wraps; abs of an unsigned is itself; sign of an unsigned is 0 or 1.
    let out = &run(&unary_graph(DType::U8, "neg"), &[t(DType::U8, &[3], &[0, 1, 255])])[0];
    assert_eq!(vals(out), vec![0, 255, 1]);
    let out = &run(&unary_graph(DType::I8, "abs"), &[t(DType::I8, &[3], &[-128, -5, 7])])[0];
    assert_eq!(vals(out), vec![-128, 5, 7]);
    let out = &run(&unary_graph(DType::U16, "sign"), &[t(DType::U16, &[3], &[0, 9, 65535])])[0];
    assert_eq!(vals(out), vec![0, 1, 1]);
    let out =
        &run(&binary_graph(DType::U8, "pow"), &[t(DType::U8, &[3], &[2, 3, 2]), t(DType::U8, &[3], &[7, 5, 8])])[0];
    assert_eq!(vals(out), vec![128, 243, 0]);
}

#[test]
fn u64_above_two_to_the_63_is_exact() {
    let big = 1u64 << 63;
    let a = u64t(&[u64::MAX, big, 5]);
    let b = u64t(&[1, 1, big + 1]);
    let v = |op: &str| vals(&run(&binary_graph(DType::U64, op), &[a.clone(), b.clone()])[0]);
    assert_eq!(v("add"), vec![0, big as i128 + 1, big as i128 + 6]);
    assert_eq!(v("sub"), vec![u64::MAX as i128 - 1, big as i128 - 1, (5u64.wrapping_sub(big + 1)) as i128]);
    assert_eq!(v("div"), vec![u64::MAX as i128, big as i128, 0]);
    assert_eq!(v("rem"), vec![0, 0, 5]);
    assert_eq!(v("max"), vec![u64::MAX as i128, big as i128, big as i128 + 1]);
    assert_eq!(v("min"), vec![1, 1, 5]);
    assert_eq!(v("lt"), vec![0, 0, 1]);
    assert_eq!(v("ge"), vec![1, 1, 0]);
    assert_eq!(v("eq"), vec![0, 0, 0]);
    let halves = run(&binary_graph(DType::U64, "div"), &[u64t(&[u64::MAX, big, 10]), u64t(&[2, big, 3])]);
    assert_eq!(vals(&halves[0]), vec![(u64::MAX / 2) as i128, 1, 3]);
    // Conversions read it as unsigned.
    let to = |d: &str| {
        run(
            &format!("graph g(%x: u64[3]) {{\n  %1 = convert_element_type(%x) {{dtype={d}}}\n  return %1\n}}"),
            std::slice::from_ref(&a),
        )
    };
    assert_eq!(to("f64")[0].to_f64_vec(), vec![u64::MAX as f64, big as f64, 5.0]);
    assert_eq!(to("f32")[0].to_f64_vec(), vec![u64::MAX as f32 as f64, big as f32 as f64, 5.0]);
    assert_eq!(vals(&to("i64")[0]), vec![-1, i64::MIN as i128, 5]);
    assert_eq!(vals(&to("u8")[0]), vec![255, 0, 5]);
    assert_eq!(vals(&to("bool")[0]), vec![1, 1, 1]);
    // Reductions order unsigned: the maximum and argmax find u64::MAX, the minimum 5.
    let red = |op: &str, attrs: &str| {
        run(&format!("graph g(%x: u64[3]) {{\n  %1 = {op}(%x) {{{attrs}}}\n  return %1\n}}"), std::slice::from_ref(&a))
    };
    assert_eq!(vals(&red("reduce_max", "axes=[0]")[0]), vec![u64::MAX as i128]);
    assert_eq!(vals(&red("reduce_min", "axes=[0]")[0]), vec![5]);
    assert_eq!(vals(&red("reduce_argmax", "axis=0")[0]), vec![0]);
    assert_eq!(vals(&red("argmin", "axis=0")[0]), vec![2]);
    assert_eq!(vals(&red("reduce_sum", "axes=[0]")[0]), vec![big as i128 + 4]);
    // relu and clamp keep unsigned values.
    let out = run(
        "graph g(%x: u64[3]) {\n  %1 = clamp(%x) {min=1.0, max=inf}\n  %2 = relu(%x)\n  return %1, %2\n}",
        &[u64t(&[0, big, 7])],
    );
    assert_eq!(vals(&out[0]), vec![1, big as i128, 7]);
    assert_eq!(vals(&out[1]), vec![0, big as i128, 7]);
    // The empty reductions give the dtype's identities.
    let e = run(
        "graph g(%x: u64[0]) {\n  %1 = reduce_max(%x) {axes=[0]}\n  %2 = reduce_min(%x) {axes=[0]}\n  return %1, %2\n}",
        &[u64t(&[])],
    );
    assert_eq!((vals(&e[0]), vals(&e[1])), (vec![0], vec![u64::MAX as i128]));
}

#[test]
fn unsigned_order_and_division_in_narrow_types() {
    let a = t(DType::U32, &[3], &[4294967295, 7, 0]);
    let b = t(DType::U32, &[3], &[2, 4294967295, 1]);
    assert_eq!(vals(&run(&binary_graph(DType::U32, "div"), &[a.clone(), b.clone()])[0]), vec![2147483647, 0, 0]);
    assert_eq!(vals(&run(&binary_graph(DType::U32, "gt"), &[a.clone(), b.clone()])[0]), vec![1, 0, 0]);
    assert_eq!(vals(&run(&binary_graph(DType::U32, "max"), &[a, b])[0]), vec![4294967295, 4294967295, 1]);
    // i8 division truncates toward zero and wraps MIN / -1.
    let a = t(DType::I8, &[3], &[-128, -7, 7]);
    let b = t(DType::I8, &[3], &[-1, 2, -2]);
    assert_eq!(vals(&run(&binary_graph(DType::I8, "div"), &[a.clone(), b.clone()])[0]), vec![-128, -3, -3]);
    assert_eq!(vals(&run(&binary_graph(DType::I8, "rem"), &[a, b])[0]), vec![0, -1, 1]);
}

#[test]
fn integer_division_by_zero_is_the_typed_error_in_every_dtype() {
    for d in NEW {
        let a = t(d, &[3], &[1, 2, 3]);
        let z = t(d, &[3], &[1, 0, 1]);
        for op in ["div", "rem"] {
            assert_eq!(run_err(&binary_graph(d, op), &[a.clone(), z.clone()]), EvalError::DivisionByZero, "{op} {d}");
        }
    }
}

#[test]
fn float_to_integer_conversion_truncates_and_saturates() {
    let x = Tensor::from_f32(&[7], vec![-1e10, 1e10, f32::NAN, -1.5, 300.7, 2.9, f32::NEG_INFINITY]).unwrap();
    for (d, want) in [
        (DType::I8, vec![-128i64, 127, 0, -1, 127, 2, -128]),
        (DType::U8, vec![0, 255, 0, 0, 255, 2, 0]),
        (DType::I16, vec![-32768, 32767, 0, -1, 300, 2, -32768]),
        (DType::U16, vec![0, 65535, 0, 0, 300, 2, 0]),
        (DType::U32, vec![0, 4294967295, 0, 0, 300, 2, 0]),
        (DType::U64, vec![0, 10_000_000_000, 0, 0, 300, 2, 0]),
    ] {
        let src = format!("graph g(%x: f32[7]) {{\n  %1 = convert_element_type(%x) {{dtype={d}}}\n  return %1\n}}");
        let out = &run(&src, std::slice::from_ref(&x))[0];
        assert_eq!(out.dtype(), d);
        assert_eq!(vals(out), want.into_iter().map(i128::from).collect::<Vec<_>>(), "{d}");
    }
    // Integer to integer keeps the low bits.
    let src = "graph g(%x: i16[3]) {\n  %1 = convert_element_type(%x) {dtype=u8}\n  %2 = convert_element_type(%x) {dtype=u64}\n  return %1, %2\n}";
    let out = run(src, &[t(DType::I16, &[3], &[-1, 256, 300])]);
    assert_eq!(vals(&out[0]), vec![255, 0, 44]);
    assert_eq!(vals(&out[1]), vec![u64::MAX as i128, 256, 300]);
}

#[test]
fn and_or_are_bitwise_on_integers_and_logical_on_bools() {
    for d in NEW {
        let a = t(d, &[3], &[0b1100, 0b1010, -1]);
        let b = t(d, &[3], &[0b1010, 0b0110, 0b0101]);
        let and = &run(&binary_graph(d, "and"), &[a.clone(), b.clone()])[0];
        let or = &run(&binary_graph(d, "or"), &[a.clone(), b.clone()])[0];
        let all = d.int_range().unwrap().1;
        let all = if d.is_unsigned() { all } else { -1 };
        assert_eq!(and.dtype(), d);
        assert_eq!(vals(and), vec![0b1000, 0b0010, 0b0101], "{d}");
        assert_eq!(vals(or), vec![0b1110, 0b1110, all], "{d}");
    }
    let p = Tensor::from_bool(&[3], vec![true, false, true]).unwrap();
    let q = Tensor::from_bool(&[3], vec![true, true, false]).unwrap();
    let out = &run(&binary_graph(DType::Bool, "and"), &[p, q])[0];
    assert_eq!(out.dtype(), DType::Bool);
    assert_eq!(vals(out), vec![1, 0, 0]);
    // Floats are refused.
    let g = ladder::text::parse("graph g(%a: f32[3], %b: f32[3]) {\n  %2 = and(%a, %b)\n  return %2\n}");
    assert!(g.is_err());
}

#[test]
fn text_form_round_trips_every_new_dtype_with_edge_constants() {
    let src = "blob @ci8: i8[2] = [-128, 127]
blob @cu64: u64[2] = [18446744073709551615, 9223372036854775808]
graph g(%a: i8[2], %b: i16[2], %c: u8[2], %d: u16[2], %e: u32[2], %f: u64[2]) {
  %6 = const @ci8
  %7 = const @cu64
  %8 = add(%a, %6)
  %9 = add(%f, %7)
  return %8, %9, %b, %c, %d, %e
}
";
    let g = parse(src);
    let text = ladder::text::print(&g);
    let back = parse(&text);
    assert_eq!(ladder::text::print(&back), text);
    assert!(text.contains("18446744073709551615") && text.contains("u64[2]") && text.contains("i8[2]"), "{text}");
    let out = run(
        &text,
        &[
            t(DType::I8, &[2], &[0, 1]),
            t(DType::I16, &[2], &[0, 0]),
            t(DType::U8, &[2], &[0, 0]),
            t(DType::U16, &[2], &[0, 0]),
            t(DType::U32, &[2], &[0, 0]),
            u64t(&[1, 1]),
        ],
    );
    assert_eq!(vals(&out[0]), vec![-128, -128]);
    assert_eq!(vals(&out[1]), vec![0, (1u64 << 63) as i128 + 1]);
    // A literal outside the dtype's range is a parse error.
    for bad in
        ["blob @x: u8[1] = [256]", "blob @x: i8[1] = [-129]", "blob @x: u64[1] = [-1]", "blob @x: u16[1] = [1.5]"]
    {
        let src = format!("{bad}\n\ngraph g() {{\n  %0 = const @x\n  return %0\n}}\n");
        assert!(ladder::text::parse(&src).is_err(), "{bad}");
    }
}

/// A graph of many prims over one dtype: arithmetic, comparison and select, bitwise ops,
/// reductions, conversions and a broadcast.
fn mixed_graph(d: DType) -> Graph {
    parse(&format!(
        "graph g(%a: {d}[2, 3], %b: {d}[2, 3]) {{
  %2 = add(%a, %b)
  %3 = mul(%2, %a)
  %4 = lt(%a, %b)
  %5 = where(%4, %3, %b)
  %6 = reduce_max(%5) {{axes=[1]}}
  %7 = reduce_sum(%3) {{axes=[0]}}
  %8 = convert_element_type(%a) {{dtype=f32}}
  %9 = and(%a, %b)
  %10 = or(%9, %2)
  %11 = reduce_argmax(%b) {{axis=1}}
  %12 = sub(%a, %b)
  %13 = max(%12, %a)
  %14 = neg(%13)
  return %6, %7, %8, %10, %11, %14
}}"
    ))
}

fn inputs_for(d: DType) -> Vec<Tensor> {
    // -1 wraps to the maximum of an unsigned type (above 2^63 for u64).
    vec![t(d, &[2, 3], &[-1, 2, 100, 0, -128, 7]), t(d, &[2, 3], &[3, -1, 200, 0, 5, -2])]
}

#[test]
fn compiled_plans_carry_every_new_dtype_bit_for_bit() {
    let native = CompileOptions::native_cpu(1).ok();
    for d in NEW {
        let g = mixed_graph(d);
        let inputs = inputs_for(d);
        let want = interp::run(&g, &inputs, &Options::default()).unwrap().outputs;
        let mut options = vec![CompileOptions::reference()];
        options.extend(native.clone());
        for opts in options {
            let plan = compile(&g, &opts).unwrap_or_else(|e| panic!("compile {d}: {e}"));
            let got = plan.run(&inputs).unwrap_or_else(|e| panic!("run {d}: {e}")).outputs;
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(a.bit_eq(b) && a.dtype() == b.dtype(), "{d} output {i}: plan {a}, interpreter {b}");
            }
        }
    }
}

#[test]
fn compiled_plans_report_division_by_zero_and_check_input_dtypes() {
    for d in NEW {
        let g = parse(&binary_graph(d, "div"));
        let plan = compile(&g, &CompileOptions::reference()).unwrap();
        let err = plan.run(&[t(d, &[3], &[1, 2, 3]), t(d, &[3], &[1, 0, 1])]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{d}: {err}");
        let wrong = if d == DType::U8 { DType::I8 } else { DType::U8 };
        assert!(plan.run(&[t(wrong, &[3], &[1, 2, 3]), t(d, &[3], &[1, 1, 1])]).is_err());
    }
}

#[test]
fn integer_matmul_wraps_in_narrow_types() {
    let src = "graph g(%a: u8[2, 2], %b: u8[2, 2]) {\n  %2 = matmul(%a, %b)\n  return %2\n}";
    let a = t(DType::U8, &[2, 2], &[16, 1, 2, 3]);
    let b = t(DType::U8, &[2, 2], &[16, 0, 1, 1]);
    let out = &run(src, &[a.clone(), b.clone()])[0];
    // [16*16 + 1, 1], [32 + 3, 3] with 257 wrapped to 1.
    assert_eq!(vals(out), vec![1, 1, 35, 3]);
    let plan = compile(&parse(src), &CompileOptions::reference()).unwrap();
    assert!(plan.run(&[a, b]).unwrap().outputs[0].bit_eq(out));
}
