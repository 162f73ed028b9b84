//! Affine index vectors and how layout prims transform them.
//!
//! While a kernel is built, the value a node is needed at is an index vector: one affine
//! expression per axis of the node, over the kernel's loop variables. Pointwise prims pass
//! their index vector to their arguments unchanged; layout prims map it (broadcast drops or
//! zeroes axes, permute permutes, slice scales and offsets, reshape splits or merges) — or
//! say that they cannot, which is where a value has to be materialised.

use crate::ir::{Dim, DimError, Graph, Node};
use crate::ops::util::normalize_axis;
use crate::ops::OpKind;

/// A loop variable while a kernel is being built: a root's own axis (before the kernel's
/// outer loops are chosen), an outer loop, or inner loop `j` of stage `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum IV {
    Root(u32),
    Outer(u32),
    Inner(u32, u32),
}

/// `c + Σ coeff × var`, terms sorted by variable, no zero coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Aff {
    pub c: Dim,
    pub terms: Vec<(IV, Dim)>,
}

pub(crate) type Ix = Vec<Aff>;

impl Aff {
    pub fn zero() -> Aff {
        Aff { c: Dim::new(0), terms: Vec::new() }
    }

    pub fn constant(c: Dim) -> Aff {
        Aff { c, terms: Vec::new() }
    }

    pub fn var(v: IV) -> Aff {
        Aff { c: Dim::new(0), terms: vec![(v, Dim::new(1))] }
    }

    pub fn add(&self, other: &Aff) -> Result<Aff, DimError> {
        let mut terms = self.terms.clone();
        for (v, k) in &other.terms {
            match terms.iter_mut().find(|(w, _)| w == v) {
                Some((_, c)) => *c = c.add(k)?,
                None => terms.push((*v, k.clone())),
            }
        }
        terms.retain(|(_, k)| *k != Dim::new(0));
        terms.sort_by_key(|a| a.0);
        Ok(Aff { c: self.c.add(&other.c)?, terms })
    }

    pub fn scale(&self, k: &Dim) -> Result<Aff, DimError> {
        if *k == Dim::new(0) {
            return Ok(Aff::zero());
        }
        let terms = self.terms.iter().map(|(v, c)| Ok((*v, c.mul(k)?))).collect::<Result<Vec<_>, DimError>>()?;
        Ok(Aff { c: self.c.mul(k)?, terms })
    }

    pub fn vars(&self) -> impl Iterator<Item = IV> + '_ {
        self.terms.iter().map(|(v, _)| *v)
    }

    pub fn has_inner(&self) -> bool {
        self.vars().any(|v| matches!(v, IV::Inner(..)))
    }

    /// The variable, when this is exactly one variable (coefficient 1, no offset).
    pub fn single_var(&self) -> Option<IV> {
        match &self.terms[..] {
            [(v, k)] if *k == Dim::new(1) && self.c == Dim::new(0) => Some(*v),
            _ => None,
        }
    }
}

/// Row-major strides of a dense buffer of `shape`.
pub(crate) fn contiguous_strides(shape: &[Dim]) -> Result<Vec<Dim>, DimError> {
    let mut strides = vec![Dim::new(1); shape.len()];
    let mut acc = Dim::new(1);
    for k in (0..shape.len()).rev() {
        strides[k] = acc.clone();
        acc = acc.mul(&shape[k])?;
    }
    Ok(strides)
}

/// The flat element offset of index `ix` in a dense row-major buffer of `shape`.
pub(crate) fn ravel(ix: &[Aff], shape: &[Dim]) -> Result<Aff, DimError> {
    let strides = contiguous_strides(shape)?;
    let mut out = Aff::zero();
    for (a, s) in ix.iter().zip(&strides) {
        out = out.add(&a.scale(s)?)?;
    }
    Ok(out)
}

fn is_one(d: &Dim) -> bool {
    d.as_const() == Some(1)
}

/// Why a layout op's index could not be mapped to its argument's.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MapFail {
    /// The reshape merges several dims of its argument into one: the argument's index would
    /// be a division and a remainder, not affine.
    NotAffine,
    Dim(DimError),
}

impl From<DimError> for MapFail {
    fn from(e: DimError) -> MapFail {
        MapFail::Dim(e)
    }
}

/// The index of `node`'s (single) argument, given the index `ix` of its result.
pub(crate) fn arg_index(g: &Graph, node: &Node, ix: &[Aff]) -> Result<Ix, MapFail> {
    let arg_shape = g.ty(node.args[0]).shape.dims().to_vec();
    let out_shape = node.ty.shape.dims();
    match node.op {
        OpKind::BroadcastInDim => {
            let bdims = node.attrs.ints("broadcast_dims");
            let mut out = Vec::with_capacity(arg_shape.len());
            for (i, d) in arg_shape.iter().enumerate() {
                let o = normalize_axis(bdims[i], out_shape.len()).map_err(|_| MapFail::NotAffine)?;
                out.push(if is_one(d) { Aff::zero() } else { ix[o].clone() });
            }
            Ok(out)
        }
        OpKind::Permute => {
            let perm = node.attrs.ints("perm");
            let mut out = vec![Aff::zero(); arg_shape.len()];
            for (i, &p) in perm.iter().enumerate() {
                let p = normalize_axis(p, arg_shape.len()).map_err(|_| MapFail::NotAffine)?;
                out[p] = ix[i].clone();
            }
            Ok(out)
        }
        OpKind::Slice => {
            let axis = normalize_axis(node.attrs.int("axis"), arg_shape.len()).map_err(|_| MapFail::NotAffine)?;
            let step = node.attrs.int("step");
            let range = crate::ops::shape::slice_range(
                &arg_shape[axis],
                &node.attrs.size("start"),
                &node.attrs.size("end"),
                step,
            )
            .map_err(|_| MapFail::NotAffine)?;
            let s = range.first;
            let mut out = ix.to_vec();
            out[axis] = ix[axis].scale(&Dim::new(step.max(1) as u64))?.add(&Aff::constant(s))?;
            Ok(out)
        }
        OpKind::Reshape => reshape_index(&arg_shape, out_shape, ix),
        _ => Err(MapFail::NotAffine),
    }
}

/// Reshape `from` → `to`: the index in `from` of the element at `ix` in `to`, when every group
/// of dims with equal products has a single `from` dim (a split, or a unit dim added or
/// removed). Merging several `from` dims needs division: not affine.
pub(crate) fn reshape_index(from: &[Dim], to: &[Dim], ix: &[Aff]) -> Result<Ix, MapFail> {
    let mut out = vec![Aff::zero(); from.len()];
    if let Some(k) = from.iter().position(|d| d.as_const() == Some(0)) {
        // No element, so no index is ever used; the empty axis keeps every variable of `ix`
        // so that whatever reads it stays inside the (empty) loops.
        for a in ix {
            out[k] = out[k].add(a)?;
        }
        return Ok(out);
    }
    let p: Vec<usize> = (0..from.len()).filter(|&i| !is_one(&from[i])).collect();
    let c: Vec<usize> = (0..to.len()).filter(|&j| !is_one(&to[j])).collect();
    let (mut i, mut j) = (0, 0);
    while i < p.len() || j < c.len() {
        if i >= p.len() || j >= c.len() {
            return Err(MapFail::NotAffine);
        }
        let mut gi = vec![p[i]];
        let mut gj = vec![c[j]];
        let mut pp = from[p[i]].clone();
        let mut cp = to[c[j]].clone();
        while pp != cp {
            if cp.div_exact(&pp).is_ok() && i + 1 < p.len() {
                i += 1;
                gi.push(p[i]);
                pp = pp.mul(&from[p[i]])?;
            } else if pp.div_exact(&cp).is_ok() && j + 1 < c.len() {
                j += 1;
                gj.push(c[j]);
                cp = cp.mul(&to[c[j]])?;
            } else {
                return Err(MapFail::NotAffine);
            }
        }
        if gi.len() != 1 {
            return Err(MapFail::NotAffine);
        }
        let dims: Vec<Dim> = gj.iter().map(|&k| to[k].clone()).collect();
        let parts: Vec<Aff> = gj.iter().map(|&k| ix[k].clone()).collect();
        out[gi[0]] = ravel(&parts, &dims)?;
        i += 1;
        j += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u64) -> Dim {
        Dim::new(n)
    }

    #[test]
    fn reshapes_split_and_drop_unit_dims_affinely_but_do_not_merge() {
        let (a, b) = (Aff::var(IV::Outer(0)), Aff::var(IV::Outer(1)));
        // [6] -> [2, 3]: the [6] index is 3*a + b.
        let ix = reshape_index(&[d(6)], &[d(2), d(3)], &[a.clone(), b.clone()]).unwrap();
        assert_eq!(ix, vec![a.scale(&d(3)).unwrap().add(&b).unwrap()]);
        // [n] -> [n, 1]: the unit dim is dropped.
        let n = Dim::sym("n");
        let ix = reshape_index(std::slice::from_ref(&n), &[n.clone(), d(1)], &[a.clone(), Aff::zero()]).unwrap();
        assert_eq!(ix, vec![a.clone()]);
        // [2, 3] -> [6] merges two dims of the argument: not affine.
        assert_eq!(reshape_index(&[d(2), d(3)], &[d(6)], std::slice::from_ref(&a)), Err(MapFail::NotAffine));
        // [2, 3] -> [3, 2] neither splits nor merges.
        assert_eq!(reshape_index(&[d(2), d(3)], &[d(3), d(2)], &[a.clone(), b.clone()]), Err(MapFail::NotAffine));
        // Symbolic: [4*n] -> [4, n] splits.
        let four_n = d(4).mul(&n).unwrap();
        let ix = reshape_index(&[four_n], &[d(4), n.clone()], &[a.clone(), b.clone()]).unwrap();
        assert_eq!(ix, vec![a.scale(&n).unwrap().add(&b).unwrap()]);
    }

    #[test]
    fn ravel_uses_row_major_strides() {
        let (a, b) = (Aff::var(IV::Outer(0)), Aff::var(IV::Inner(1, 0)));
        let flat = ravel(&[a.clone(), b.clone()], &[Dim::sym("n"), d(8)]).unwrap();
        assert_eq!(flat, a.scale(&d(8)).unwrap().add(&b).unwrap());
    }
}
