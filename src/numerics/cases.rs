//! Generating a case for the numerics harness: a single high-level op with random
//! attributes, argument types (static and symbolic shapes, empty and size-1 dims) and data
//! (typical values mixed with ±0, ±inf, NaN, huge and tiny magnitudes), from bytes.

use super::*;
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};

/// One generated single-op case: a graph of inputs, one node and its output, and the inputs.
#[derive(Clone, Debug)]
pub struct Case {
    pub op: OpKind,
    pub graph: Graph,
    /// The op node.
    pub node: Value,
    pub inputs: Vec<Tensor>,
}

/// Attempts at drawing argument types and attributes that the op's rule accepts.
pub const MAX_ATTEMPTS: usize = 256;
/// Largest rank and dim of a generated argument.
pub const MAX_RANK: usize = 4;
pub const MAX_DIM: u64 = 5;

/// FNV-1a of the case bytes: the seed of the choices that follow them.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Builds a single-op case for `op` from `bytes` (see the module docs of `gen` for how bytes
/// become choices; past their end the choices continue from a stream seeded by them).
/// `None` when no argument types and attributes the op accepts were found in
/// [`MAX_ATTEMPTS`] tries.
pub fn generate_case(op: OpKind, bytes: &[u8]) -> Option<Case> {
    let mut src = Source::with_tail(bytes, fnv(bytes));
    let spec = op.spec();
    for _ in 0..MAX_ATTEMPTS {
        let symbolic = src.below(4) == 0;
        let cfg = GenConfig { symbolic, max_dim: MAX_DIM, ..GenConfig::default() };
        let n_args = match spec.arity {
            Arity::Exactly(k) => k,
            Arity::Between(lo, hi) => lo + src.below(hi - lo + 1),
            Arity::AtLeast(k) => k + src.below(3),
        };
        let mut types: Vec<TensorType> = Vec::with_capacity(n_args);
        // `reuse[i] = Some(j)`: argument i is argument j itself (the same graph input).
        let mut reuse: Vec<Option<usize>> = Vec::with_capacity(n_args);
        for i in 0..n_args {
            if i > 0 && src.below(12) == 0 {
                let j = src.below(i);
                let j = reuse[j].unwrap_or(j);
                types.push(types[j].clone());
                reuse.push(Some(j));
                continue;
            }
            let ty = if i == 0 { random_type(&mut src, &cfg) } else { derived_type(&mut src, &cfg, &types) };
            types.push(ty);
            reuse.push(None);
        }
        if op == OpKind::Lstm {
            // Four coupled shapes the generic draw almost never meets.
            types = lstm_types(&mut src, &cfg);
            reuse = vec![None; types.len()];
        }
        let mut given = Vec::new();
        for a in spec.attrs {
            if a.default_value().is_none() || src.below(2) == 0 {
                given.push((a.name.to_string(), random_attr(&mut src, a.kind)));
            }
        }
        let Ok(attrs) = Attrs::resolve(spec.attrs, given) else { continue };
        let refs: Vec<&TensorType> = types.iter().collect();
        let Ok(out) = crate::ops::infer(op, &attrs, &refs) else { continue };
        // Float attributes are drawn from the values the output dtype can hold, so that the
        // decomposition's constants (of that dtype) are the reference's.
        let attrs = if out.dtype.is_float() {
            let rounded: Vec<(String, AttrValue)> = attrs
                .iter()
                .map(|(n, v)| match v {
                    AttrValue::Float(x) => (n.to_string(), AttrValue::Float(round_float(out.dtype, *x))),
                    other => (n.to_string(), other.clone()),
                })
                .collect();
            let Ok(a) = Attrs::resolve(spec.attrs, rounded) else { continue };
            if crate::ops::infer(op, &a, &refs).is_err() {
                continue;
            }
            a
        } else {
            attrs
        };
        if let Some(case) = build_case(&mut src, op, &types, &reuse, attrs) {
            return Some(case);
        }
    }
    None
}

/// `lstm`'s operands: a float dtype, a static sequence length (the decomposition unrolls it),
/// a batch that may be symbolic, and a hidden size of 0 to 4; sometimes a wrong shape, which
/// the shape rule must refuse.
fn lstm_types(src: &mut Source, cfg: &GenConfig) -> Vec<TensorType> {
    let dtype = src.choose(&[DType::F32, DType::F32, DType::F64, DType::F16, DType::BF16]);
    let steps = Dim::new(src.below(cfg.max_dim as usize + 1) as u64);
    let batch = random_dim(src, cfg);
    let h = src.below(5) as u64;
    let g = if src.below(16) == 0 { 4 * h + 1 } else { 4 * h };
    let ty = |dims: Vec<Dim>| TensorType::new(dtype, dims.into_iter().collect());
    vec![
        ty(vec![steps, batch.clone(), Dim::new(g)]),
        ty(vec![Dim::new(4 * h), Dim::new(h)]),
        ty(vec![batch.clone(), Dim::new(h)]),
        ty(vec![batch, Dim::new(h)]),
    ]
}

fn random_shape(src: &mut Source, cfg: &GenConfig) -> Shape {
    let rank = src.below(MAX_RANK + 1);
    (0..rank).map(|_| random_dim(src, cfg)).collect()
}

fn random_type(src: &mut Source, cfg: &GenConfig) -> TensorType {
    TensorType::new(random_dtype(src), random_shape(src, cfg))
}

/// A type for a later argument, usually related to an earlier one: equal, a suffix, one dim,
/// a dim removed or inserted, dims replaced or set to 1, or fresh. This is what lets ops with
/// coupled argument shapes (norm weights, attention, losses, convolutions) find accepted cases.
fn derived_type(src: &mut Source, cfg: &GenConfig, prev: &[TensorType]) -> TensorType {
    let base = if src.below(3) == 0 { &prev[src.below(prev.len())] } else { &prev[prev.len() - 1] };
    let dims: Vec<Dim> = base.shape.dims().to_vec();
    let rank = dims.len();
    let shape: Shape = match src.below(12) {
        0..=2 => dims.iter().cloned().collect(),
        3 => dims[src.below(rank + 1)..].iter().cloned().collect(),
        4 if rank > 0 => std::iter::once(dims[src.below(rank)].clone()).collect(),
        5 if rank > 0 => {
            let k = src.below(rank);
            dims.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, d)| d.clone()).collect()
        }
        6 | 7 => dims.iter().map(|d| if src.below(3) == 0 { random_dim(src, cfg) } else { d.clone() }).collect(),
        8 => dims.iter().map(|d| if src.below(3) == 0 { Dim::new(1) } else { d.clone() }).collect(),
        9 if rank < MAX_RANK => {
            let mut v = dims.clone();
            v.insert(src.below(rank + 1), random_dim(src, cfg));
            v.into_iter().collect()
        }
        _ => random_shape(src, cfg),
    };
    let dtype = match src.below(6) {
        0..=2 => base.dtype,
        3 => random_dtype(src),
        4 => src.choose(&[DType::I64, DType::I32]),
        _ => DType::Bool,
    };
    TensorType::new(dtype, shape)
}

/// Binds the symbols, draws data and builds the graph; `None` if the graph rejects the node.
fn build_case(
    src: &mut Source,
    op: OpKind,
    types: &[TensorType],
    reuse: &[Option<usize>],
    attrs: Attrs,
) -> Option<Case> {
    let mut symbols: Vec<(String, u64)> = Vec::new();
    for t in types {
        for d in t.shape.dims() {
            for s in d.symbols() {
                if !symbols.iter().any(|(n, _)| n.as_str() == s.as_ref()) {
                    symbols.push((s.to_string(), src.below(MAX_DIM as usize + 1) as u64));
                }
            }
        }
    }
    let lookup = |s: &str| symbols.iter().find(|(n, _)| n == s).map(|&(_, v)| v);
    let mut g = Graph::new(&format!("numerics_{}", op.name()));
    let mut inputs = Vec::new();
    let mut args = Vec::new();
    let mut input_of: Vec<Value> = Vec::new();
    for (i, t) in types.iter().enumerate() {
        if let Some(j) = reuse[i] {
            args.push(input_of[j]);
            input_of.push(input_of[j]);
            continue;
        }
        let dims: Vec<usize> =
            t.shape.dims().iter().map(|d| d.eval(&lookup).map(|n| n as usize)).collect::<Result<_, _>>().ok()?;
        let v = g.add_input(&format!("x{}", inputs.len()), t.clone()).ok()?;
        inputs.push(random_data(src, t.dtype, &dims));
        args.push(v);
        input_of.push(v);
    }
    let node = g.add_node(op, &args, attrs).ok()?;
    g.add_output("out", node).ok()?;
    Some(Case { op, graph: g, node, inputs })
}

/// One value of an adversarial class: NaN, ±inf, ±0, ±1e30, ±1e-40 (an f32 denormal).
fn special(src: &mut Source) -> f64 {
    src.choose(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e30, -1e30, 1e-40, -1e-40])
}

/// A typical value: a multiple of 1/4 in [-5, 5].
fn typical(src: &mut Source) -> f64 {
    (src.below(41) as f64 - 20.0) / 4.0
}

/// Random tensor data. Floats follow one profile per tensor: typical values; typical with
/// sparse or dense specials; logits around ±1e4 (exp overflows without max-subtraction);
/// magnitudes across the whole f32 range (denormals included); or small integers and signed
/// zeros (ties, exact cancellation). Integers are mostly small valid indices (`0..k`), else
/// small signed values, sometimes -100 (cross_entropy's default ignore_index). Bool masks are
/// all false, all true or mixed.
pub fn random_data(src: &mut Source, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let data = if dtype.is_float() {
        let profile = src.below(20);
        let logit_base = src.choose(&[1e4, -1e4, 9999.5, 1.25e4, -3e4]);
        let vals: Vec<f64> = (0..n)
            .map(|_| match profile {
                0..=5 => typical(src),
                6..=10 => {
                    if src.below(8) == 0 {
                        special(src)
                    } else {
                        typical(src)
                    }
                }
                11..=13 => match src.below(8) {
                    0 => typical(src),
                    1 => src.choose(&[1e4, -1e4]) + typical(src),
                    _ => logit_base + typical(src),
                },
                14 | 15 => {
                    if src.bool() {
                        special(src)
                    } else {
                        typical(src)
                    }
                }
                16 | 17 => {
                    let sign = if src.bool() { -1.0 } else { 1.0 };
                    let e = src.below(268) as i32 - 140;
                    sign * 2f64.powi(e) * (1.0 + src.below(8) as f64 / 8.0)
                }
                _ => src.choose(&[-2.0, -1.0, -0.0, 0.0, 1.0, 2.0]),
            })
            .collect();
        match dtype {
            DType::F32 => TensorData::F32(vals.iter().map(|&x| x as f32).collect()),
            DType::F16 => TensorData::F16(vals.iter().map(|&x| f16_from_f64(x)).collect()),
            DType::BF16 => TensorData::BF16(vals.iter().map(|&x| bf16_from_f64(x)).collect()),
            _ => TensorData::F64(vals),
        }
    } else if dtype.is_int() {
        let mode = src.below(10);
        let k = 1 + src.below(5) as i64;
        let vals: Vec<i64> = (0..n)
            .map(|_| match mode {
                0..=5 => src.below(k as usize) as i64,
                6..=8 => src.below(9) as i64 - 4,
                _ => {
                    if src.below(4) == 0 {
                        -100
                    } else {
                        src.below(4) as i64
                    }
                }
            })
            .collect();
        // Unsigned types get the magnitudes: small values, as for the signed types (their
        // wrapping edges are integer semantics, not numerics, and tested elsewhere).
        let vals = vals.into_iter().map(|x| if dtype.is_unsigned() { x.abs() } else { x });
        TensorData::from_ints(dtype, vals).unwrap_or_else(|| unreachable!("{dtype} is an integer type"))
    } else {
        let p_true = src.choose(&[0u8, 100, 50, 50, 80]);
        TensorData::Bool((0..n).map(|_| (src.below(100) as u8) < p_true).collect())
    };
    Tensor::new(shape.to_vec(), data).unwrap_or_else(|e| panic!("numerics generator made a bad tensor: {e}"))
}
