//! Common-subexpression elimination: one node per distinct computation.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use smallvec::SmallVec;

use super::rewrite::Rewriter;
use super::simplify::{require_pure, SimplifyError};
use crate::ir::{DType, Graph, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// Merges nodes with the same op, the same attributes (floats compared bitwise, so `-0.0`
/// and `0.0` differ and a NaN equals only itself) and the same arguments after merging;
/// later duplicates are replaced by the first. `const` nodes merge when their blobs hold the
/// same dtype, shape and bits (the same blob, or a copy of it). Every op of a pure graph is a
/// function of its arguments and attributes, so merging is exact. Outputs keep their names;
/// a merged node keeps the first node's value name, or takes a duplicate's when it has none
/// (value names stay unique). Deliberately not done: merging `input` nodes (distinct
/// parameters), commuted arguments (`add(a, b)` vs `add(b, a)`), or anything in a graph that
/// mutates (refused).
pub fn eliminate_common_subexpressions(g: &Graph) -> Result<Graph, SimplifyError> {
    require_pure(g)?;
    let mut rw = Rewriter::new(g);
    let mut ops: HashMap<(OpKind, SmallVec<[Value; 4]>), Vec<Value>> = HashMap::new();
    let mut consts: HashMap<(DType, Vec<usize>, u64), Vec<Value>> = HashMap::new();
    for (v, node) in g.nodes() {
        match node.op {
            OpKind::Input => {}
            OpKind::Const => {
                let Some(blob) = g.const_blob(v) else {
                    // A dangling const: copying reports it.
                    rw.copy(v)?;
                    continue;
                };
                let t = &g.blob(blob).tensor;
                let bucket = consts.entry((t.dtype(), t.shape().to_vec(), content_hash(t))).or_default();
                let same = bucket.iter().copied().find(|&c| {
                    rw.new.const_blob(c).is_some_and(|b| rw.new.blob(b).tensor.bit_eq(t) && rw.ty(c) == &node.ty)
                });
                match same {
                    Some(c) => rw.set(v, c),
                    None => bucket.push(rw.copy(v)?),
                }
            }
            op => {
                let args: SmallVec<[Value; 4]> = node.args.iter().map(|&a| rw.get(a)).collect();
                let bucket = ops.entry((op, args)).or_default();
                match bucket.iter().copied().find(|&c| rw.new.node(c).attrs == node.attrs) {
                    Some(c) => rw.set(v, c),
                    None => bucket.push(rw.copy(v)?),
                }
            }
        }
    }
    Ok(rw.finish()?)
}

/// A hash of a tensor's element bits (equal for bit-equal tensors).
fn content_hash(t: &Tensor) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match t.data() {
        TensorData::F32(v) => v.iter().for_each(|x| x.to_bits().hash(&mut h)),
        TensorData::F64(v) => v.iter().for_each(|x| x.to_bits().hash(&mut h)),
        TensorData::F16(v) => v.iter().for_each(|x| x.to_bits().hash(&mut h)),
        TensorData::BF16(v) => v.iter().for_each(|x| x.to_bits().hash(&mut h)),
        TensorData::I32(v) => v.hash(&mut h),
        TensorData::I64(v) => v.hash(&mut h),
        TensorData::Bool(v) => v.hash(&mut h),
        d => d.ints().unwrap_or_default().hash(&mut h),
    }
    h.finish()
}
