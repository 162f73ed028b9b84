//! Decompositions of the index family (embedding, masked_fill, tril, triu) into prims.
//!
//! Every one selects or moves elements without arithmetic on them, so the tolerance is zero:
//! `exact` compares the prims graph's outputs with the original's bit for bit (NaN payloads
//! aside, -0 distinct from +0), in f32 mode and in precise mode, after
//! `check_decomposition(.., 0.0, 0.0)`.

use ladder::Tensor;

use crate::common::*;
use crate::decomp_exact::*;

// ---------------------------------------------------------------------------------------------
// embedding
// ---------------------------------------------------------------------------------------------

#[test]
fn embedding_is_a_gather() {
    let w = specials(&[4, 3]);
    let text = exact(
        &one("%i: i64[2, 3], %w: f32[4, 3]", "embedding(%i, %w)"),
        &[i64t(&[2, 3], &[3, 0, 1, 1, 2, 3]), w.clone()],
    );
    assert!(text.contains("gather(%w,"), "{text}");
    exact(&one("%i: i32[5], %w: f32[4, 3]", "embedding(%i, %w)"), &[i32t(&[5], &[0, 3, 3, 2, 0]), w.clone()]);
    // Rank-0 indices give one row.
    exact(&one("%i: i64[], %w: f32[4, 3]", "embedding(%i, %w)"), &[i64t(&[], &[2]), w.clone()]);
    // Empty indices, a width-1 and an empty weight.
    exact(&one("%i: i64[0, 2], %w: f32[4, 3]", "embedding(%i, %w)"), &[i64t(&[0, 2], &[]), w.clone()]);
    exact(&one("%i: i64[3], %w: f32[4, 1]", "embedding(%i, %w)"), &[i64t(&[3], &[1, 0, 3]), specials(&[4, 1])]);
    exact(&one("%i: i64[3], %w: f32[4, 0]", "embedding(%i, %w)"), &[i64t(&[3], &[1, 0, 3]), f32t(&[4, 0], &[])]);
    // Other weight dtypes move their elements untouched.
    exact(
        &one("%i: i64[2], %w: i64[3, 2]", "embedding(%i, %w)"),
        &[i64t(&[2], &[2, 0]), i64t(&[3, 2], &[1, -2, i64::MAX, 4, i64::MIN, 6])],
    );
    exact(
        &one("%i: i64[2], %w: bool[2, 2]", "embedding(%i, %w)"),
        &[i64t(&[2], &[1, 1]), boolt(&[2, 2], &[true, false, false, true])],
    );
    exact(&one("%i: i64[2], %w: f64[2, 1]", "embedding(%i, %w)"), &[i64t(&[2], &[1, 0]), f64t(&[2, 1], &[0.1, -0.0])]);
    exact(&one("%i: i64[2], %w: f16[2, 1]", "embedding(%i, %w)"), &[i64t(&[2], &[1, 0]), f16t(&[2, 1], &[0.1, -0.0])]);
}

#[test]
fn embedding_symbolic_and_non_contiguous() {
    let src = one("%i: i64[batch, seq], %w: f32[vocab, dim]", "embedding(%i, %w)");
    exact(&src, &[i64t(&[2, 3], &[0, 4, 2, 2, 1, 3]), specials(&[5, 3])]);
    exact(&src, &[i64t(&[0, 3], &[]), specials(&[5, 3])]);
    exact(&src, &[i64t(&[1, 1], &[0]), specials(&[1, 1])]);
    // Transposed indices and weight.
    let src = "graph g(%i: i64[3, 2], %w: f32[3, 5]) {\n  %it = transpose(%i) {axis0=0, axis1=1}\n  %wt = transpose(%w) {axis0=0, axis1=1}\n  %r = embedding(%it, %wt)\n  return %r\n}";
    exact(src, &[i64t(&[3, 2], &[4, 0, 1, 3, 2, 2]), specials(&[3, 5])]);
}

#[test]
fn embedding_rejects_negative_and_out_of_range_indices_after_lowering_too() {
    let src = one("%i: i64[3], %w: f32[4, 2]", "embedding(%i, %w)");
    for bad in [[0, -1, 2], [0, -4, 2], [4, 0, 0], [i64::MIN, 0, 0], [i64::MAX, 1, 1]] {
        let (orig, prims) = errors(&src, &[i64t(&[3], &bad), specials(&[4, 2])]);
        assert!(orig.as_deref().is_some_and(|e| e.contains("out of range")), "{bad:?}: {orig:?}");
        assert!(prims.as_deref().is_some_and(|e| e.contains("out of range")), "{bad:?}: {prims:?}");
    }
    let src = one("%i: i32[2], %w: f32[4, 2]", "embedding(%i, %w)");
    let (orig, prims) = errors(&src, &[i32t(&[2], &[-1, 0]), specials(&[4, 2])]);
    assert!(orig.is_some() && prims.is_some(), "{orig:?} {prims:?}");
}

#[test]
fn embedding_with_an_empty_row_width_does_not_check_indices_after_lowering() {
    // Documented difference: with D = 0 the gather reads nothing, so an index embedding
    // rejects goes unnoticed (a failing run may succeed after lowering, never the reverse).
    let src = one("%i: i64[1], %w: f32[4, 0]", "embedding(%i, %w)");
    let (orig, prims) = errors(&src, &[i64t(&[1], &[7]), f32t(&[4, 0], &[])]);
    assert!(orig.is_some());
    assert_eq!(prims, None);
}

// ---------------------------------------------------------------------------------------------
// masked_fill
// ---------------------------------------------------------------------------------------------

#[test]
fn masked_fill_is_a_where() {
    let x = specials(&[2, 3]);
    let m = boolt(&[2, 3], &[true, false, false, true, true, false]);
    for value in ["0.0", "-0.0", "nan", "inf", "-inf", "-7.5", "1.0141204801825835e31"] {
        let src = one("%x: f32[2, 3], %m: bool[2, 3]", &format!("masked_fill(%x, %m) {{value={value}}}"));
        exact(&src, &[x.clone(), m.clone()]);
    }
    // A value f32 cannot hold rounds (the precise reference does not: same mode only).
    let src = one("%x: f32[2, 3], %m: bool[2, 3]", "masked_fill(%x, %m) {value=1e30}");
    exact_same_mode(&src, &[x.clone(), m.clone()]);
    // The mask broadcasts (a row, a column, a scalar).
    exact(
        &one("%x: f32[2, 3], %m: bool[3]", "masked_fill(%x, %m) {value=-0.0}"),
        &[x.clone(), boolt(&[3], &[false, true, true])],
    );
    exact(
        &one("%x: f32[2, 3], %m: bool[2, 1]", "masked_fill(%x, %m) {value=nan}"),
        &[x.clone(), boolt(&[2, 1], &[true, false])],
    );
    exact(&one("%x: f32[2, 3], %m: bool[]", "masked_fill(%x, %m) {value=2.0}"), &[x.clone(), boolt(&[], &[true])]);
    exact(&one("%x: f32[2, 3], %m: bool[]", "masked_fill(%x, %m) {value=2.0}"), &[x, boolt(&[], &[false])]);
    exact(
        &one("%x: f32[0, 3], %m: bool[3]", "masked_fill(%x, %m) {value=1.0}"),
        &[f32t(&[0, 3], &[]), boolt(&[3], &[true; 3])],
    );
    exact(
        &one("%x: f32[], %m: bool[]", "masked_fill(%x, %m) {value=1.0}"),
        &[Tensor::scalar_f32(-0.0), boolt(&[], &[true])],
    );
}

#[test]
fn masked_fill_converts_the_value_like_the_op() {
    let m = boolt(&[4], &[true, false, true, false]);
    // Integers: truncate toward zero, saturating at the dtype's range (NaN → 0).
    for value in ["3e9", "-3e9", "1e20", "-1e20", "nan", "inf", "-inf", "-2.7", "2.7", "-0.0"] {
        let node = format!("masked_fill(%x, %m) {{value={value}}}");
        exact(&one("%x: i32[4], %m: bool[4]", &node), &[i32t(&[4], &[1, 2, 3, 4]), m.clone()]);
        exact(&one("%x: i64[4], %m: bool[4]", &node), &[i64t(&[4], &[1, 2, 3, i64::MIN]), m.clone()]);
        exact(&one("%x: bool[4], %m: bool[4]", &node), &[boolt(&[4], &[false, true, false, true]), m.clone()]);
    }
    // Floats round to the dtype (f16: 0.1 rounds; 1e5 overflows to inf). The precise
    // reference does not round, so same-mode comparison only.
    for value in ["0.1", "1e5", "1e-8", "-0.0"] {
        let node = format!("masked_fill(%x, %m) {{value={value}}}");
        exact_same_mode(&one("%x: f16[4], %m: bool[4]", &node), &[f16t(&[4], &[1.0, 2.0, 3.0, -0.0]), m.clone()]);
        exact_same_mode(&one("%x: f32[4], %m: bool[4]", &node), &[specials(&[4]), m.clone()]);
        exact(&one("%x: f64[4], %m: bool[4]", &node), &[f64t(&[4], &[0.1, f64::NAN, -0.0, 1e300]), m.clone()]);
    }
}

#[test]
fn masked_fill_symbolic_and_non_contiguous() {
    let src = one("%x: f32[batch, 3], %m: bool[batch, 1]", "masked_fill(%x, %m) {value=-inf}");
    exact(&src, &[specials(&[3, 3]), boolt(&[3, 1], &[true, false, true])]);
    exact(&src, &[specials(&[0, 3]), boolt(&[0, 1], &[])]);
    let src = "graph g(%x: f32[3, 2], %m: bool[2, 3]) {\n  %xt = transpose(%x) {axis0=0, axis1=1}\n  %mt = transpose(%m) {axis0=1, axis1=0}\n  %mm = transpose(%mt) {axis0=0, axis1=1}\n  %r = masked_fill(%xt, %mm) {value=-0.0}\n  return %r\n}";
    exact(src, &[specials(&[3, 2]), boolt(&[2, 3], &[true, false, true, false, false, true])]);
}

// ---------------------------------------------------------------------------------------------
// tril, triu
// ---------------------------------------------------------------------------------------------

#[test]
fn tril_and_triu_are_iota_compares() {
    for op in ["tril", "triu"] {
        for diagonal in [0, 1, -1, 2, -2, 5, -5, i64::MAX, i64::MIN] {
            for shape in [[3, 4], [4, 3], [1, 1], [3, 3]] {
                let sig = format!("%x: f32[{}, {}]", shape[0], shape[1]);
                let src = one(&sig, &format!("{op}(%x) {{diagonal={diagonal}}}"));
                exact(&src, &[specials(&shape)]);
            }
        }
        // Batched, empty, and other dtypes (zero is false for bool).
        let node = format!("{op}(%x) {{diagonal=-1}}");
        exact(&one("%x: f32[2, 3, 3]", &node), &[specials(&[2, 3, 3])]);
        exact(&one("%x: f32[2, 0, 3]", &node), &[f32t(&[2, 0, 3], &[])]);
        exact(&one("%x: f32[3, 0]", &node), &[f32t(&[3, 0], &[])]);
        exact(&one("%x: i32[2, 2]", &node), &[i32t(&[2, 2], &[1, -2, 3, i32::MIN])]);
        exact(&one("%x: bool[2, 2]", &node), &[boolt(&[2, 2], &[true; 4])]);
        exact(&one("%x: f64[2, 2]", &format!("{op}(%x)")), &[f64t(&[2, 2], &[0.1, -0.0, f64::NAN, -0.0])]);
    }
}

#[test]
fn tril_and_triu_symbolic_and_non_contiguous() {
    for op in ["tril", "triu"] {
        let src = one("%x: f32[batch, n, n]", &format!("{op}(%x) {{diagonal=1}}"));
        exact(&src, &[specials(&[2, 3, 3])]);
        exact(&src, &[specials(&[1, 0, 0])]);
        exact(&src, &[specials(&[0, 2, 2])]);
        let src = format!(
            "graph g(%x: f32[3, 4, 2]) {{\n  %t = transpose(%x) {{axis0=0, axis1=2}}\n  %r = {op}(%t)\n  return %r\n}}"
        );
        exact(&src, &[specials(&[3, 4, 2])]);
    }
}
