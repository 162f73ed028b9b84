//! `decompose` on graphs that are already prims but written in high-level form: broadcasts,
//! mixed dtypes and `-1` reshapes are spelled out, and the results do not change.

use crate::common::*;

#[test]
fn broadcasting_and_promotion_become_explicit() {
    let src = "graph g(%a: f32[batch, 3], %b: i64[3], %c: bool[batch, 1]) {\n  %3 = add(%a, %b)\n  %4 = where(%c, %3, %b)\n  %5 = lt(%b, %a)\n  %6 = reshape(%4) {shape=[-1]}\n  %7 = cat(%b, %6) {axis=0}\n  return %4, %5, %7\n}";
    let text = check_decomposition(
        src,
        &[
            f32t(&[2, 3], &[1., f32::NAN, -0., 4., 5., f32::INFINITY]),
            i64t(&[3], &[1, 2, 3]),
            boolt(&[2, 1], &[true, false]),
        ],
        0.0,
        0.0,
    );
    // Every broadcast and conversion is its own node.
    assert!(text.contains("broadcast_in_dim"), "{text}");
    assert!(text.contains("convert_element_type(%b) {dtype=f32}"), "{text}");
    assert!(text.contains("reshape(%4) {shape=[3*batch]}") || text.contains("shape=[3*batch]"), "{text}");
}

#[test]
fn matmul_operands_promote() {
    let src = "graph g(%a: f32[2, 3], %b: i32[3, 2]) {\n  %2 = matmul(%a, %b)\n  return %2\n}";
    let text = check_decomposition(
        src,
        &[
            f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]),
            ladder::Tensor::new(vec![3, 2], ladder::TensorData::I32(vec![1, 0, 0, 1, 1, 1])).unwrap(),
        ],
        0.0,
        0.0,
    );
    assert!(text.contains("convert_element_type(%b) {dtype=f32}"), "{text}");
}
