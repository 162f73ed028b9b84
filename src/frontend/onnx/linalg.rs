//! Products: `MatMul`, `Gemm` and `Einsum`.
//!
//! Mapping choices:
//! - `MatMul` unsqueezes 1-D operands (ladder's `matmul` needs rank >= 2) and squeezes the
//!   result; `Gemm` is `matmul {transpose_a, transpose_b}` then `alpha`, `beta * C`.
//! - `Einsum` is a broadcast product summed over the contracted labels; an ellipsis becomes
//!   fresh labels (right-aligned), a label repeated in one operand takes that diagonal first
//!   (the two axes merged and sliced with step n+1).

use super::build::{int, ints, invalid, one, unsupported, Outs};
use super::import::{a_float, a_int, a_str, Importer, NResult};
use super::ops::Row;
use super::proto::NodeProto;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;

/// The products, by ONNX name.
pub(super) const LINALG: &[Row] = &[
    ("Einsum", |imp, node, _| einsum(imp, node)),
    ("Gemm", |imp, node, _| gemm(imp, node)),
    ("MatMul", |imp, node, _| matmul(imp, node)),
];

fn matmul(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    let (ra, rb) = (imp.rank_of(a), imp.rank_of(b));
    if ra == 0 || rb == 0 {
        return invalid("MatMul operands must have rank >= 1");
    }
    let a2 = if ra == 1 { imp.unsqueeze(a, &[0])? } else { a };
    let b2 = if rb == 1 { imp.unsqueeze(b, &[1])? } else { b };
    let mut y = imp.bin(K::Matmul, a2, b2)?;
    if rb == 1 {
        y = imp.squeeze(y, &[-1])?;
    }
    if ra == 1 {
        y = imp.squeeze(y, &[-2 + i64::from(rb == 1)])?;
    }
    one(y)
}

fn gemm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    let (alpha, beta) = (a_float(node, "alpha", 1.0), a_float(node, "beta", 1.0));
    let ta = a_int(node, "transA", 0) != 0;
    let tb = a_int(node, "transB", 0) != 0;
    let mut y =
        imp.emit(K::Matmul, &[a, b], &[("transpose_a", AttrValue::Bool(ta)), ("transpose_b", AttrValue::Bool(tb))])?;
    if alpha != 1.0 {
        y = imp.bin_scalar(K::Mul, y, alpha)?;
    }
    if let Some(c) = imp.opt_input(node, 2)? {
        if beta != 0.0 {
            let c = if beta != 1.0 { imp.bin_scalar(K::Mul, c, beta)? } else { c };
            y = imp.bin(K::Add, y, c)?;
        }
    }
    one(y)
}

fn einsum(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let eq: String = a_str(node, "equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let raw: Vec<&str> = lhs.split(',').collect();
    let n_in = node.input.len();
    if raw.len() != n_in {
        return invalid(format!("equation `{eq}` has {} operands for {n_in} inputs", raw.len()));
    }
    let mut operands = Vec::with_capacity(n_in);
    for i in 0..n_in {
        operands.push(imp.input(node, i)?);
    }
    // An ellipsis stands for fresh labels (letters the equation does not use), right-aligned
    // across operands.
    let unused: Vec<char> = ('A'..='Z').chain('a'..='z').filter(|c| !eq.contains(*c)).collect();
    let mut ell_rank = 0usize;
    for (t, &v) in raw.iter().zip(&operands) {
        if t.contains("...") {
            let letters = t.replace("...", "").chars().count();
            let e = imp.rank_of(v).checked_sub(letters).ok_or_else(|| {
                NodeError::Invalid(format!("operand `{t}` has more labels than its rank {}", imp.rank_of(v)))
            })?;
            ell_rank = ell_rank.max(e);
        }
    }
    if ell_rank > unused.len() {
        return unsupported("Einsum with an ellipsis of too many dims");
    }
    let ell: Vec<char> = unused[..ell_rank].to_vec();
    let expand_ell = |t: &str, e: usize| -> Vec<char> {
        match t.split_once("...") {
            Some((a, b)) => a.chars().chain(ell[ell_rank - e..].iter().copied()).chain(b.chars()).collect(),
            None => t.chars().collect(),
        }
    };
    let mut terms: Vec<Vec<char>> = Vec::with_capacity(n_in);
    for (t, &v) in raw.iter().zip(&operands) {
        let e = imp.rank_of(v).saturating_sub(t.replace("...", "").chars().count());
        if t.matches("...").count() > 1 {
            return invalid(format!("operand `{t}` has more than one ellipsis"));
        }
        terms.push(if t.contains("...") { expand_ell(t, e) } else { t.chars().collect() });
    }
    let mut letters: Vec<char> = Vec::new();
    for t in &terms {
        for &c in t {
            if !c.is_ascii_alphabetic() {
                return invalid(format!("bad label `{c}` in `{eq}`"));
            }
            if !letters.contains(&c) {
                letters.push(c);
            }
        }
    }
    let out: Vec<char> = match rhs {
        Some(r) if r.contains("...") => expand_ell(&r, ell_rank),
        Some(r) => r.chars().collect(),
        None => {
            let mut once: Vec<char> = letters
                .iter()
                .copied()
                .filter(|c| !ell.contains(c) && terms.iter().flatten().filter(|x| *x == c).count() == 1)
                .collect();
            once.sort_unstable();
            ell.iter().copied().chain(once).collect()
        }
    };
    if out.iter().any(|c| !letters.contains(c)) {
        return invalid(format!("output label not in the inputs of `{eq}`"));
    }
    // A label repeated in one operand takes the diagonal: the two axes moved last, merged,
    // and sliced with step n+1.
    for (t, v) in terms.iter_mut().zip(operands.iter_mut()) {
        if imp.rank_of(*v) != t.len() {
            return invalid(format!(
                "operand has rank {} but `{}` labels",
                imp.rank_of(*v),
                t.iter().collect::<String>()
            ));
        }
        while let Some((p, q)) =
            (0..t.len()).find_map(|p| t[p + 1..].iter().position(|c| *c == t[p]).map(|j| (p, p + 1 + j)))
        {
            let dims = imp.shape_of(*v);
            let n = dims[p]
                .as_const()
                .ok_or_else(|| NodeError::Unsupported("Einsum diagonal over a symbolic dim".into()))?;
            if dims[q].as_const() != Some(n) {
                return invalid(format!("label `{}` has sizes {} and {}", t[p], dims[p], dims[q]));
            }
            let rest: Vec<usize> = (0..t.len()).filter(|&i| i != p && i != q).collect();
            let perm: Vec<i64> = rest.iter().chain([&p, &q]).map(|&i| i as i64).collect();
            let pv = imp.emit(K::Permute, &[*v], &[("perm", ints(&perm))])?;
            let mut merged: Vec<Dim> = rest.iter().map(|&i| dims[i].clone()).collect();
            let nn = n.checked_mul(n).ok_or_else(|| NodeError::Invalid("diagonal size overflow".into()))?;
            merged.push(Dim::new(nn));
            let r = imp.reshape(pv, &merged)?;
            *v = imp.emit(
                K::Slice,
                &[r],
                &[
                    ("axis", int(rest.len() as i64)),
                    ("start", int(0)),
                    ("end", int(nn as i64)),
                    ("step", int(n as i64 + 1)),
                ],
            )?;
            let c = t[p];
            *t = rest.iter().map(|&i| t[i]).chain([c]).collect();
        }
    }
    let mut acc: Option<Value> = None;
    let mut dtype = DType::F32;
    for (t, &v) in terms.iter().zip(&operands) {
        dtype = imp.dtype_of_v(v);
        let dims = imp.shape_of(v);
        // Permute to the global letter order, then insert size-1 dims for missing letters.
        let order: Vec<usize> = letters.iter().filter_map(|c| t.iter().position(|x| x == c)).collect();
        let perm: Vec<i64> = order.iter().map(|&p| p as i64).collect();
        let p = if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
            v
        } else {
            imp.emit(K::Permute, &[v], &[("perm", ints(&perm))])?
        };
        let mut full = Vec::with_capacity(letters.len());
        for c in &letters {
            match t.iter().position(|x| x == c) {
                Some(pos) => full.push(dims[pos].clone()),
                None => full.push(Dim::new(1)),
            }
        }
        let r = imp.reshape(p, &full)?;
        acc = Some(match acc {
            None => r,
            Some(a) => imp.bin(K::Mul, a, r)?,
        });
    }
    let mut y = acc.ok_or_else(|| NodeError::Invalid("Einsum needs an input".into()))?;
    let reduced: Vec<i64> =
        letters.iter().enumerate().filter(|(_, c)| !out.contains(c)).map(|(i, _)| i as i64).collect();
    if !reduced.is_empty() {
        y = imp.emit(K::Sum, &[y], &[("axes", ints(&reduced))])?;
        y = imp.convert_to(y, dtype)?;
    }
    let kept: Vec<char> = letters.iter().copied().filter(|c| out.contains(c)).collect();
    let perm: Vec<i64> = out.iter().map(|c| kept.iter().position(|x| x == c).unwrap_or(0) as i64).collect();
    if perm.iter().enumerate().any(|(i, &p)| p != i as i64) {
        y = imp.emit(K::Permute, &[y], &[("perm", ints(&perm))])?;
    }
    one(y)
}
