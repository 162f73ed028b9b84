//! Decompositions of the shape family (view, flatten, transpose, expand, squeeze, unsqueeze,
//! select, contiguous, stack, split, chunk) and of slice_scatter into prims.
//!
//! Every one is data movement, so the tolerance is zero: `exact` compares the prims graph's
//! outputs with the original's bit for bit (NaN payloads aside, -0 distinct from +0), in f32
//! mode and in precise mode, after `check_decomposition(.., 0.0, 0.0)`.

use ladder::Tensor;

use crate::common::*;
use crate::decomp_exact::*;

// ---------------------------------------------------------------------------------------------
// view, flatten, squeeze, unsqueeze → reshape
// ---------------------------------------------------------------------------------------------

#[test]
fn view_is_a_reshape() {
    let text = exact(&one("%x: f32[2, 3]", "view(%x) {shape=[3, -1]}"), &[specials(&[2, 3])]);
    assert!(text.contains("reshape(%x) {shape=[3, 2]}"), "{text}");
    exact(&one("%x: f32[2, 3]", "view(%x) {shape=[6]}"), &[specials(&[2, 3])]);
    exact(&one("%x: f32[]", "view(%x) {shape=[1, 1]}"), &[Tensor::scalar_f32(-0.0)]);
    exact(&one("%x: f32[1, 1]", "view(%x) {shape=[]}"), &[f32t(&[1, 1], &[f32::NAN])]);
    exact(&one("%x: f32[0, 3]", "view(%x) {shape=[3, 0, 1]}"), &[f32t(&[0, 3], &[])]);
    // The same shape: no node at all.
    let text = exact(&one("%x: f32[2, 3]", "view(%x) {shape=[2, 3]}"), &[iota(&[2, 3])]);
    assert!(!text.contains("reshape"), "{text}");
}

#[test]
fn view_symbolic_and_non_contiguous() {
    let src = one("%x: f32[batch, 4]", "view(%x) {shape=[batch, 2, -1]}");
    for b in [0, 1, 3] {
        exact(&src, &[specials(&[b, 4])]);
    }
    let src = one("%x: f32[batch, 4]", "view(%x) {shape=[-1]}");
    exact(&src, &[specials(&[3, 4])]);
    // A view of a transposed value that strides allow (only size-1 dims added).
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = view(%t) {shape=[3, 1, 2]}\n  return %r\n}";
    exact(src, &[specials(&[2, 3])]);
}

#[test]
fn view_that_fails_in_the_original_succeeds_after_lowering() {
    // view of a transposed tensor into a flat one needs a copy: the interpreter refuses,
    // the reshape it lowers to does not (runs that succeed are preserved, not failures).
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = view(%t) {shape=[6]}\n  return %r\n}";
    let (orig, prims) = errors(src, &[iota(&[2, 3])]);
    assert!(orig.is_some_and(|e| e.contains("view")), "the original should fail");
    assert_eq!(prims, None);
}

#[test]
fn flatten_is_a_reshape() {
    exact(&one("%x: f32[2, 3, 4]", "flatten(%x)"), &[specials(&[2, 3, 4])]);
    exact(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=1}"), &[specials(&[2, 3, 4])]);
    exact(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=-3, end=-2}"), &[specials(&[2, 3, 4])]);
    exact(&one("%x: f32[2, 3, 4]", "flatten(%x) {start=1, end=1}"), &[specials(&[2, 3, 4])]);
    exact(&one("%x: f32[]", "flatten(%x)"), &[Tensor::scalar_f32(f32::NAN)]);
    exact(&one("%x: f32[2, 0, 4]", "flatten(%x) {start=1}"), &[f32t(&[2, 0, 4], &[])]);
    let src = one("%x: f32[batch, seq, 4]", "flatten(%x) {end=1}");
    exact(&src, &[specials(&[2, 3, 4])]);
    exact(&src, &[specials(&[0, 3, 4])]);
    let src = "graph g(%x: f32[2, 3, 4]) {\n  %t = transpose(%x) {axis0=-1, axis1=0}\n  %r = flatten(%t) {start=1}\n  return %r\n}";
    exact(src, &[specials(&[2, 3, 4])]);
}

#[test]
fn squeeze_and_unsqueeze_are_reshapes() {
    exact(&one("%x: f32[1, 3, 1]", "squeeze(%x)"), &[specials(&[1, 3, 1])]);
    exact(&one("%x: f32[1, 3, 1]", "squeeze(%x) {axes=[-1]}"), &[specials(&[1, 3, 1])]);
    exact(&one("%x: f32[1, 1]", "squeeze(%x)"), &[f32t(&[1, 1], &[-0.0])]);
    exact(&one("%x: f32[1, 0]", "squeeze(%x)"), &[f32t(&[1, 0], &[])]);
    // A symbolic dim is kept even when it is 1 at run time.
    let src = one("%x: f32[batch, 1, 2]", "squeeze(%x)");
    exact(&src, &[specials(&[1, 1, 2])]);
    exact(&src, &[specials(&[3, 1, 2])]);
    exact(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=0}"), &[specials(&[2, 3])]);
    exact(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=-1}"), &[specials(&[2, 3])]);
    exact(&one("%x: f32[2, 3]", "unsqueeze(%x) {axis=1}"), &[specials(&[2, 3])]);
    exact(&one("%x: f32[]", "unsqueeze(%x) {axis=0}"), &[Tensor::scalar_f32(f32::INFINITY)]);
    exact(&one("%x: f32[batch, 0]", "unsqueeze(%x) {axis=-2}"), &[f32t(&[3, 0], &[])]);
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %u = unsqueeze(%t) {axis=1}\n  %r = squeeze(%u) {axes=[1]}\n  return %r, %u\n}";
    exact(src, &[specials(&[2, 3])]);
}

// ---------------------------------------------------------------------------------------------
// transpose, expand, contiguous
// ---------------------------------------------------------------------------------------------

#[test]
fn transpose_is_a_permute() {
    let text = exact(&one("%x: f32[2, 3, 4]", "transpose(%x) {axis0=0, axis1=-1}"), &[specials(&[2, 3, 4])]);
    assert!(text.contains("permute(%x) {perm=[2, 1, 0]}"), "{text}");
    exact(&one("%x: f32[2, 3, 4]", "transpose(%x) {axis0=-2, axis1=-1}"), &[specials(&[2, 3, 4])]);
    // Swapping an axis with itself is the identity: no node.
    let text = exact(&one("%x: f32[2, 3]", "transpose(%x) {axis0=1, axis1=-1}"), &[specials(&[2, 3])]);
    assert!(!text.contains("permute"), "{text}");
    exact(&one("%x: f32[0, 3]", "transpose(%x) {axis0=0, axis1=1}"), &[f32t(&[0, 3], &[])]);
    let src = one("%x: f32[batch, 4]", "transpose(%x) {axis0=0, axis1=1}");
    exact(&src, &[specials(&[3, 4])]);
    exact(&src, &[specials(&[1, 4])]);
    // A transpose of a transpose: a non-contiguous argument.
    let src = "graph g(%x: f32[2, 3, 4]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = transpose(%t) {axis0=1, axis1=2}\n  return %r\n}";
    exact(src, &[specials(&[2, 3, 4])]);
}

#[test]
fn expand_is_a_broadcast() {
    let text = exact(&one("%x: f32[3, 1]", "expand(%x) {shape=[2, 3, 4]}"), &[specials(&[3, 1])]);
    assert!(text.contains("broadcast_in_dim(%x) {shape=[2, 3, 4], broadcast_dims=[1, 2]}"), "{text}");
    exact(&one("%x: f32[3, 1]", "expand(%x) {shape=[-1, 5]}"), &[specials(&[3, 1])]);
    exact(&one("%x: f32[]", "expand(%x) {shape=[2, 2]}"), &[Tensor::scalar_f32(-0.0)]);
    exact(&one("%x: f32[1]", "expand(%x) {shape=[0]}"), &[f32t(&[1], &[f32::NAN])]);
    exact(&one("%x: f32[0, 1]", "expand(%x) {shape=[2, 0, 3]}"), &[f32t(&[0, 1], &[])]);
    let text = exact(&one("%x: f32[2, 3]", "expand(%x) {shape=[-1, -1]}"), &[specials(&[2, 3])]);
    assert!(!text.contains("broadcast_in_dim"), "{text}");
    let src = one("%x: f32[batch, 1]", "expand(%x) {shape=[2, batch, 5]}");
    exact(&src, &[specials(&[3, 1])]);
    exact(&src, &[specials(&[0, 1])]);
    let src = "graph g(%x: f32[1, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = expand(%t) {shape=[3, 4]}\n  return %r\n}";
    exact(src, &[specials(&[1, 3])]);
}

#[test]
fn contiguous_is_its_argument() {
    let text = exact(&one("%x: f32[2, 3]", "contiguous(%x)"), &[specials(&[2, 3])]);
    assert!(text.contains("return %x"), "{text}");
    let src =
        "graph g(%x: f32[batch, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = contiguous(%t)\n  return %r\n}";
    exact(src, &[specials(&[2, 3])]);
    exact(src, &[specials(&[0, 3])]);
}

// ---------------------------------------------------------------------------------------------
// select
// ---------------------------------------------------------------------------------------------

#[test]
fn select_static() {
    for (axis, index) in [(0, 0), (0, 1), (0, -1), (0, -2), (1, 2), (1, -3), (-1, 0), (-1, -1), (2, 3)] {
        exact(&one("%x: f32[2, 3, 4]", &format!("select(%x) {{axis={axis}, index={index}}}")), &[specials(&[2, 3, 4])]);
    }
    let text = exact(&one("%x: f32[2, 3]", "select(%x) {axis=1, index=-1}"), &[specials(&[2, 3])]);
    assert!(text.contains("slice(%x) {axis=1, start=2, end=3}"), "{text}");
    exact(&one("%x: f32[1]", "select(%x) {axis=0, index=0}"), &[f32t(&[1], &[-0.0])]);
    exact(&one("%x: f32[3, 0]", "select(%x) {axis=0, index=2}"), &[f32t(&[3, 0], &[])]);
    let src = "graph g(%x: f32[3, 4]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = select(%t) {axis=1, index=-2}\n  return %r\n}";
    exact(src, &[specials(&[3, 4])]);
}

#[test]
fn select_symbolic() {
    // A negative index on a symbolic dim is a slice counted from the end.
    for index in [-1, -2] {
        let src = one("%x: f32[seq, 3]", &format!("select(%x) {{axis=0, index={index}}}"));
        let text = exact(&src, &[specials(&[4, 3])]);
        assert!(text.contains("slice("), "{text}");
        exact(&src, &[specials(&[2, 3])]);
    }
    // A non-negative one is a gather of a constant index.
    for index in [0, 2] {
        let src = one("%x: f32[seq, 3]", &format!("select(%x) {{axis=0, index={index}}}"));
        let text = exact(&src, &[specials(&[4, 3])]);
        assert!(text.contains("gather("), "{text}");
        exact(&src, &[specials(&[3, 3])]);
    }
    // Selecting along a static axis of a symbolically-shaped value.
    let src = one("%x: f32[batch, 3]", "select(%x) {axis=1, index=-1}");
    exact(&src, &[specials(&[2, 3])]);
    exact(&src, &[specials(&[0, 3])]);
    let src = "graph g(%x: f32[3, seq]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = select(%t) {axis=0, index=1}\n  return %r\n}";
    exact(src, &[specials(&[3, 5])]);
}

#[test]
fn select_out_of_range_on_a_symbolic_dim_fails_in_both() {
    for index in [2, 3, -3, -4] {
        let src = one("%x: f32[seq]", &format!("select(%x) {{axis=0, index={index}}}"));
        let (orig, prims) = errors(&src, &[f32t(&[2], &[1.0, 2.0])]);
        assert!(orig.is_some(), "index {index}: the original should fail");
        assert!(prims.is_some(), "index {index}: the lowered graph should fail too");
    }
}

// ---------------------------------------------------------------------------------------------
// stack, split, chunk
// ---------------------------------------------------------------------------------------------

#[test]
fn stack_is_reshape_and_cat() {
    let sig = "%a: f32[2, 3], %b: f32[2, 3], %c: f32[2, 3]";
    let ins = [specials(&[2, 3]), iota(&[2, 3]), f32t(&[2, 3], &[-0.0, f32::NAN, 0.0, -1.0, 1e-40, -1e-40])];
    for axis in [0, 1, 2, -1, -3] {
        exact(&one(sig, &format!("stack(%a, %b, %c) {{axis={axis}}}")), &ins);
    }
    exact(&one("%a: f32[3]", "stack(%a)"), &[specials(&[3])]);
    exact(&one("%a: f32[], %b: f32[]", "stack(%a, %b)"), &[Tensor::scalar_f32(-0.0), Tensor::scalar_f32(f32::NAN)]);
    exact(&one("%a: f32[0, 2], %b: f32[0, 2]", "stack(%a, %b) {axis=1}"), &[f32t(&[0, 2], &[]), f32t(&[0, 2], &[])]);
    // Mixed dtypes promote, as cat does: i64 and f32 give f32, bool and i32 give i32.
    // (16777217 rounds in f32: the precise-mode reference does not round, so same mode only.)
    let text = exact_same_mode(
        &one("%a: f32[2], %b: i64[2]", "stack(%a, %b) {axis=-1}"),
        &[f32t(&[2], &[-0.0, f32::NAN]), i64t(&[2], &[-7, 16777217])],
    );
    assert!(text.contains("convert_element_type"), "{text}");
    exact(&one("%a: bool[2], %b: i32[2]", "stack(%a, %b)"), &[boolt(&[2], &[true, false]), i32t(&[2], &[-5, 9])]);
    let src = one("%a: f32[batch, 2], %b: f32[batch, 2]", "stack(%a, %b) {axis=1}");
    exact(&src, &[specials(&[3, 2]), iota(&[3, 2])]);
    exact(&src, &[specials(&[0, 2]), iota(&[0, 2])]);
    let src = "graph g(%x: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = stack(%t, %t) {axis=2}\n  return %r\n}";
    exact(src, &[specials(&[2, 3])]);
}

#[test]
fn split_is_a_slice() {
    for (sizes, index) in [("[1, 2, 3]", 0), ("[1, 2, 3]", 1), ("[1, 2, 3]", -1), ("[0, 6]", 0), ("[6]", 0)] {
        let src = one("%x: f32[6, 2]", &format!("split(%x) {{axis=0, sizes={sizes}, index={index}}}"));
        exact(&src, &[specials(&[6, 2])]);
    }
    let text = exact(&one("%x: f32[2, 5]", "split(%x) {axis=-1, sizes=[2, 3], index=1}"), &[specials(&[2, 5])]);
    assert!(text.contains("slice(%x) {axis=1, start=2, end=5}"), "{text}");
    // Splitting a static axis of a symbolically-shaped value.
    let src = one("%x: f32[batch, 4]", "split(%x) {axis=1, sizes=[3, 1], index=0}");
    exact(&src, &[specials(&[3, 4])]);
    exact(&src, &[specials(&[0, 4])]);
    let src = "graph g(%x: f32[5, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = split(%t) {axis=1, sizes=[4, 1], index=0}\n  return %r\n}";
    exact(src, &[specials(&[5, 3])]);
}

#[test]
fn chunk_is_a_slice() {
    // 7 in 3 chunks: pieces of 3, 3, 1. 6 in 4: pieces of 2 (only 3 of them).
    for (n, chunks, index) in [(7, 3, 0), (7, 3, 1), (7, 3, 2), (7, 3, -1), (6, 4, 2), (6, 4, -3), (1, 5, 0), (5, 1, 0)]
    {
        let src = one(&format!("%x: f32[2, {n}]"), &format!("chunk(%x) {{axis=-1, chunks={chunks}, index={index}}}"));
        exact(&src, &[specials(&[2, n])]);
    }
    // A 0 dim gives `chunks` empty pieces.
    exact(&one("%x: f32[0, 2]", "chunk(%x) {axis=0, chunks=3, index=2}"), &[f32t(&[0, 2], &[])]);
    exact(&one("%x: f32[seq, 6]", "chunk(%x) {axis=1, chunks=4, index=1}"), &[specials(&[3, 6])]);
    let src = "graph g(%x: f32[4, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %r = chunk(%t) {axis=1, chunks=2, index=1}\n  return %r\n}";
    exact(src, &[specials(&[4, 3])]);
}

// ---------------------------------------------------------------------------------------------
// slice_scatter
// ---------------------------------------------------------------------------------------------

fn scatter(sig: &str, attrs: &str) -> String {
    one(sig, &format!("slice_scatter(%x, %s) {{{attrs}}}"))
}

#[test]
fn slice_scatter_static_bounds() {
    // x holds NaN, -0 and ±inf outside the slice too; src holds -0 and NaN.
    let x = specials(&[2, 7]);
    let cases: &[(&str, usize)] = &[
        ("axis=1, start=1, end=4", 3),
        ("axis=1, start=0, end=2", 2),
        ("axis=1, start=5", 2),
        ("axis=1, start=-3", 3),
        ("axis=1, start=-5, end=-1", 4),
        ("axis=-1, start=1, end=6, step=2", 3),
        ("axis=1, start=0, step=3", 3),
        ("axis=1, start=6, step=4", 1),
        ("axis=1, start=-100, end=2", 2),
        ("axis=1, start=2, end=100, step=2", 3),
        ("axis=1, start=2, step=100", 1),
    ];
    for &(attrs, len) in cases {
        let src = scatter(&format!("%x: f32[2, 7], %s: f32[2, {len}]"), attrs);
        let s: Vec<f32> = (0..2 * len).map(|i| if i % 2 == 0 { -0.0 } else { -(i as f32) }).collect();
        exact(&src, &[x.clone(), f32t(&[2, len], &s)]);
        exact(&src, &[x.clone(), specials(&[2, len])]);
    }
    // Along the first axis.
    let src = scatter("%x: f32[4, 3], %s: f32[2, 3]", "axis=0, start=1, end=4, step=2");
    exact(&src, &[specials(&[4, 3]), iota(&[2, 3])]);
}

#[test]
fn slice_scatter_empty_and_whole() {
    // An empty slice leaves x: no node at all.
    for attrs in ["axis=0, start=2, end=2", "axis=0, start=3, end=1", "axis=0, start=9", "axis=0, start=-1, end=-3"] {
        let text = exact(&scatter("%x: f32[4], %s: f32[0]", attrs), &[specials(&[4]), f32t(&[0], &[])]);
        assert!(text.contains("return %x"), "{text}");
    }
    // An empty x.
    exact(&scatter("%x: f32[0, 3], %s: f32[0, 2]", "axis=1, start=1"), &[f32t(&[0, 3], &[]), f32t(&[0, 2], &[])]);
    // The whole axis: just src.
    let text = exact(&scatter("%x: f32[2, 3], %s: f32[2, 3]", "axis=1"), &[specials(&[2, 3]), iota(&[2, 3])]);
    assert!(!text.contains("where"), "{text}");
    exact(&scatter("%x: f32[1], %s: f32[1]", "axis=0, step=5"), &[f32t(&[1], &[1.0]), f32t(&[1], &[-0.0])]);
    exact(&scatter("%x: f32[3, 1], %s: f32[3, 1]", "axis=1, start=-1"), &[specials(&[3, 1]), iota(&[3, 1])]);
}

#[test]
fn slice_scatter_broadcasts_src() {
    // src of lower rank, and size-1 dims, broadcast to the slice.
    let x = specials(&[3, 5]);
    exact(&scatter("%x: f32[3, 5], %s: f32[]", "axis=1, start=1, step=2"), &[x.clone(), Tensor::scalar_f32(-0.0)]);
    exact(&scatter("%x: f32[3, 5], %s: f32[2]", "axis=1, start=3"), &[x.clone(), f32t(&[2], &[f32::NAN, 8.0])]);
    exact(&scatter("%x: f32[3, 5], %s: f32[3, 1]", "axis=1, start=0, end=4"), &[x.clone(), iota(&[3, 1])]);
    exact(&scatter("%x: f32[3, 5], %s: f32[1, 5]", "axis=0, start=-2"), &[x.clone(), iota(&[1, 5])]);
    exact(&scatter("%x: f32[3, 5], %s: f32[1, 1]", "axis=0, start=0, step=2"), &[x, iota(&[1, 1])]);
}

#[test]
fn slice_scatter_converts_src_like_the_write() {
    // Conversions that round: the precise-mode reference does not round (its float outputs
    // are f64), so these compare f32 mode with f32 mode and precise with precise.
    // f64 → f32 rounds (and keeps -0, NaN, inf); 1e300 overflows to inf.
    exact_same_mode(
        &scatter("%x: f32[4], %s: f64[2]", "axis=0, start=1, end=3"),
        &[specials(&[4]), f64t(&[2], &[0.1, 1e300])],
    );
    exact_same_mode(
        &scatter("%x: f32[4], %s: f64[2]", "axis=0, start=1, end=3"),
        &[specials(&[4]), f64t(&[2], &[-0.0, f64::NAN])],
    );
    // Float → int truncates toward zero and saturates at the i32 range (NaN → 0).
    let vals = [3e9, -3e9, f32::NAN, f32::INFINITY, -2.7, 1e20];
    exact_same_mode(
        &scatter("%x: i32[8], %s: f32[6]", "axis=0, start=1, end=7"),
        &[i32t(&[8], &[1; 8]), f32t(&[6], &vals)],
    );
    exact_same_mode(&scatter("%x: i64[8], %s: f32[6]", "axis=0, start=2"), &[i64t(&[8], &[5; 8]), f32t(&[6], &vals)]);
    // Integers wrap, bools are 0/1, anything → bool is != 0.
    exact_same_mode(
        &scatter("%x: i32[3], %s: i64[2]", "axis=0, start=1"),
        &[i32t(&[3], &[7, 7, 7]), i64t(&[2], &[1 << 40, -(1 << 33) - 5])],
    );
    exact_same_mode(
        &scatter("%x: f32[3], %s: bool[2]", "axis=0, step=2"),
        &[specials(&[3]), boolt(&[2], &[true, false])],
    );
    exact_same_mode(
        &scatter("%x: bool[4], %s: f32[2]", "axis=0, start=1, step=2"),
        &[boolt(&[4], &[true, true, false, false]), f32t(&[2], &[-0.0, f32::NAN])],
    );
    exact_same_mode(
        &scatter("%x: f16[3], %s: f32[1]", "axis=0, start=1"),
        &[f16t(&[3], &[1.0, 2.0, 3.0]), f32t(&[1], &[0.1])],
    );
}

#[test]
fn slice_scatter_symbolic_dims() {
    // (signature, attrs, concrete (n, src len) pairs)
    type Case = (&'static str, &'static str, &'static [(usize, usize)]);
    let cases: &[Case] = &[
        // start >= 0, end omitted: src has the slice's symbolic length.
        ("%x: f32[seq, 2], %s: f32[seq - 1, 2]", "axis=0, start=1", &[(1, 0), (2, 1), (5, 4)]),
        // The whole dim.
        ("%x: f32[seq, 2], %s: f32[seq, 2]", "axis=0", &[(0, 0), (3, 3)]),
        // start and end both >= 0: the rest of the dim is symbolic.
        ("%x: f32[seq, 2], %s: f32[2, 2]", "axis=0, start=1, end=3", &[(3, 2), (6, 2)]),
        ("%x: f32[seq, 2], %s: f32[1, 2]", "axis=0, start=0, end=1", &[(1, 1), (4, 1)]),
        // start >= 0, end < 0.
        ("%x: f32[seq, 2], %s: f32[seq - 3, 2]", "axis=0, start=1, end=-2", &[(3, 0), (7, 4)]),
        // start < 0: the part before the slice is symbolic.
        ("%x: f32[seq, 2], %s: f32[2, 2]", "axis=0, start=-2", &[(2, 2), (5, 2)]),
        ("%x: f32[seq, 2], %s: f32[2, 2]", "axis=0, start=-3, end=-1", &[(3, 2), (5, 2)]),
        ("%x: f32[seq, 2], %s: f32[1, 2]", "axis=0, start=-1", &[(1, 1), (4, 1)]),
    ];
    for &(sig, attrs, runs) in cases {
        let src = scatter(sig, attrs);
        for &(n, k) in runs {
            exact(&src, &[specials(&[n, 2]), iota(&[k, 2])]);
        }
    }
    // src broadcast along the symbolic slice.
    let src = scatter("%x: f32[seq, 2], %s: f32[1, 2]", "axis=0, start=1");
    exact(&src, &[specials(&[4, 2]), f32t(&[1, 2], &[-0.0, f32::NAN])]);
    let src = scatter("%x: f32[seq, 2], %s: f32[2]", "axis=0, start=-3, end=-1");
    exact(&src, &[specials(&[4, 2]), f32t(&[2], &[-0.0, f32::NAN])]);
    // A static axis of a symbolically-shaped value, with a step.
    let src = scatter("%x: f32[batch, 5], %s: f32[batch, 2]", "axis=1, start=1, step=3");
    exact(&src, &[specials(&[3, 5]), iota(&[3, 2])]);
    exact(&src, &[specials(&[0, 5]), iota(&[0, 2])]);
    // Empty whatever the dim.
    let text =
        exact(&scatter("%x: f32[seq], %s: f32[0]", "axis=0, start=3, end=3"), &[specials(&[5]), f32t(&[0], &[])]);
    assert!(text.contains("return %x"), "{text}");
    exact(&scatter("%x: f32[seq], %s: f32[0]", "axis=0, start=-2, end=-4"), &[specials(&[5]), f32t(&[0], &[])]);
}

#[test]
fn slice_scatter_symbolic_dim_too_small_fails_with_a_typed_error() {
    // Like the `slice` prim, the lowering assumes the symbolic dim holds the bounds; a run
    // where it does not fails (typed, not an internal error) instead of clamping.
    let src = scatter("%x: f32[seq], %s: f32[1]", "axis=0, start=-3, end=-2");
    let (orig, prims) = errors(&src, &[f32t(&[2], &[1.0, 2.0]), f32t(&[1], &[9.0])]);
    let prims = prims.expect("the lowered graph should fail");
    assert!(!prims.contains("internal"), "{prims}");
    // The op makes the same assumption (no clamping on a symbolic axis), so it fails too.
    let orig = orig.expect("the original should fail");
    assert!(orig.contains("shorter than the graph assumes"), "{orig}");
    let src = scatter("%x: f32[seq], %s: f32[2]", "axis=0, start=1, end=3");
    let (_, prims) = errors(&src, &[f32t(&[2], &[1.0, 2.0]), f32t(&[2], &[9.0, 8.0])]);
    let prims = prims.expect("the lowered graph should fail");
    assert!(prims.contains("negative"), "{prims}");
}

#[test]
fn slice_scatter_unsupported_on_symbolic_dims() {
    // On a symbolic dim slice_scatter accepts exactly the slices `slice` accepts there, and its
    // shape rule (not the lowering) refuses the rest, with a typed error at the node.
    let refused = |attrs: &str, sig: &str| {
        ladder::text::parse(&scatter(sig, attrs)).expect_err("must be refused by infer").to_string()
    };
    // A step on a symbolic dim is a fixed window counted from the front (assumed to fit).
    exact(
        &scatter("%x: f32[seq], %s: f32[2]", "axis=0, start=0, end=4, step=2"),
        &[specials(&[5]), f32t(&[2], &[7.0, 8.0])],
    );
    let mixed = refused("axis=0, start=-3, end=2", "%x: f32[seq], %s: f32[2]");
    assert!(mixed.contains("needs a static size"), "{mixed}");
    let other = refused("axis=0, start=1", "%x: f32[seq], %s: f32[m]");
    assert!(other.contains("do not broadcast") || other.contains("enlarge"), "{other}");
}

#[test]
fn slice_assignment_through_functionalize() {
    // slice_assign_ into a transposed view of an input: functionalize makes slice_scatter
    // (and the transposes back), which then lowers to prims; the mutated input must match.
    let src = "graph g(%x: f32[3, 4], %s: f32[2, 3]) {\n  %t = transpose(%x) {axis0=0, axis1=1}\n  %a = slice_assign_(%t, %s) {axis=0, start=1, step=2}\n  %r = select(%x) {axis=1, index=-1}\n  return %r\n}";
    exact(src, &[specials(&[3, 4]), f32t(&[2, 3], &[-0.0, f32::NAN, 7.0, -1.0, 1e-40, f32::NEG_INFINITY])]);
    // Writes through select and chunk views on a symbolic batch.
    let src = "graph g(%x: f32[batch, 4], %v: f32[4], %w: f32[batch, 2]) {\n  %r = select(%x) {axis=0, index=1}\n  %c = copy_(%r, %v)\n  %k = chunk(%x) {axis=1, chunks=2, index=-1}\n  %d = copy_(%k, %w)\n  return %x\n}";
    exact(src, &[specials(&[3, 4]), f32t(&[4], &[-0.0, f32::NAN, 5.0, 6.0]), iota(&[3, 2])]);
}

// ---------------------------------------------------------------------------------------------
// Several ops chained
// ---------------------------------------------------------------------------------------------

#[test]
fn a_chain_of_shape_and_index_ops_lowers_exactly() {
    let src = "graph chain(%x: f32[batch, 3, 4], %ids: i64[batch, 2], %w: f32[5, 4], %m: bool[4]) {
  %t = transpose(%x) {axis0=1, axis1=2}
  %u = unsqueeze(%t) {axis=0}
  %sq = squeeze(%u) {axes=[0]}
  %sel = select(%sq) {axis=-1, index=-1}
  %e = embedding(%ids, %w)
  %st = stack(%sel, %sel) {axis=1}
  %fl = flatten(%e) {start=1}
  %ch = chunk(%fl) {axis=1, chunks=2, index=1}
  %cat = cat(%st, %st) {axis=1}
  %mf = masked_fill(%sel, %m) {value=-0.0}
  %tr = tril(%t) {diagonal=-1}
  %ex = expand(%mf) {shape=[2, batch, 4]}
  %us = unsqueeze(%sel) {axis=-1}
  %sc = slice_scatter(%tr, %us) {axis=2, start=-1}
  %sp = split(%sc) {axis=1, sizes=[1, 3], index=1}
  %spc = contiguous(%sp)
  %v = view(%spc) {shape=[-1]}
  %c = contiguous(%ex)
  return %ch, %cat, %c, %v
}";
    let ids = i64t(&[3, 2], &[0, 4, -0, 3, 2, 1]);
    let m = boolt(&[4], &[true, false, false, true]);
    let text = exact(src, &[specials(&[3, 3, 4]), ids, specials(&[5, 4]), m.clone()]);
    for op in ["transpose", "select", "embedding", "stack", "flatten", "chunk", "masked_fill", "tril", "slice_scatter"]
    {
        assert!(!text.contains(&format!("{op}(")), "{op} survived lowering:\n{text}");
    }
    exact(src, &[specials(&[0, 3, 4]), i64t(&[0, 2], &[]), specials(&[5, 4]), m]);
}
