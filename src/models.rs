//! Built-in models, and the deterministic generator their weights (and the CLI's random
//! inputs) come from.
//!
//! [`example_encoder`] is a small transformer encoder block: the model `ladder run` and
//! `ladder dump` use when no model file is given, and the model the interpreter benchmark
//! times. Its weights are pseudo-random but fixed, so every build computes the same numbers.

use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{AttrValue, DType, Dim, Graph, Shape, Value};
use crate::ops::OpKind;
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use crate::tensor::{Tensor, TensorData, TensorError};

/// SplitMix64: a tiny, fast, well-mixed 64-bit generator. Deterministic for a given seed on
/// every platform, which is all ladder needs from it (weights and test inputs, not secrets).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)` on a grid of `2^(1 - bits)`: with `bits` no more than the
    /// significand width of a float type, every value is exact in that type.
    pub fn uniform_bits(&mut self, bits: u32) -> f64 {
        let bits = bits.clamp(1, 53);
        let k = self.next_u64() >> (64 - bits);
        k as f64 * (2.0f64).powi(1 - bits as i32) - 1.0
    }

    /// Uniform in `[-1, 1)`, as an f64.
    pub fn uniform(&mut self) -> f64 {
        self.uniform_bits(53)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is below 2^-60 for small `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A tensor of random values: floats uniform in `[-1, 1)` (exact in their dtype, so the
/// values never round up to 1), integers uniform in `0..10`, bools fair.
pub fn random_tensor(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Result<Tensor, TensorError> {
    let n = crate::tensor::checked_numel(shape).ok_or_else(|| TensorError::TooLarge { shape: shape.to_vec() })?;
    let data = match dtype {
        DType::F64 => TensorData::F64((0..n).map(|_| rng.uniform_bits(53)).collect()),
        DType::F32 => TensorData::F32((0..n).map(|_| rng.uniform_bits(24) as f32).collect()),
        DType::F16 => TensorData::F16((0..n).map(|_| f16_from_f64(rng.uniform_bits(11))).collect()),
        DType::BF16 => TensorData::BF16((0..n).map(|_| bf16_from_f64(rng.uniform_bits(8))).collect()),
        DType::I32 => TensorData::I32((0..n).map(|_| rng.below(10) as i32).collect()),
        DType::I64 => TensorData::I64((0..n).map(|_| rng.below(10) as i64).collect()),
        DType::Bool => TensorData::Bool((0..n).map(|_| rng.next_u64() >> 63 == 1).collect()),
        d => TensorData::from_ints(d, (0..n).map(|_| rng.below(10) as i64)).unwrap_or_else(|| unreachable!()),
    };
    Tensor::new(shape.to_vec(), data)
}

/// Width of the example encoder's residual stream.
pub const D_MODEL: usize = 32;
/// Attention heads of the example encoder.
pub const HEADS: usize = 4;
/// Hidden width of the example encoder's feed-forward block.
pub const FFN: usize = 64;
/// The example encoder's layer-norm epsilon.
pub const LN_EPS: f64 = 1e-5;

/// A pre-norm transformer encoder block on `x: f32[1, seq, 32]`, with 4 heads of width 8 and
/// a feed-forward width of 64:
///
/// ```text
/// h = x + out(attention(split_heads(q(ln1(x))), split_heads(k(ln1(x))), split_heads(v(ln1(x)))))
/// y = h + down(gelu(up(ln2(h))))
/// ```
///
/// Weights are named like PyTorch state-dict keys (`attn.q.weight`, `ffn.up.bias`, ...);
/// linear weights are `[out, in]`, uniform in `±1/sqrt(in)`.
pub fn example_encoder() -> Result<Graph, BuildError> {
    let head_dim = D_MODEL / HEADS;
    let mut rng = Rng::new(0x1add_e5ee_d5ee_d5ee);
    let mut b = GraphBuilder::new("encoder");
    let x = b.input("x", DType::F32, Shape(vec![Dim::new(1), Dim::sym("seq"), Dim::new(D_MODEL as u64)].into()))?;

    let ln1 = layer_norm(&mut b, &mut rng, "ln1", x)?;
    b.name(ln1, "ln1")?;
    let mut heads = Vec::new();
    for name in ["q", "k", "v"] {
        let p = linear(&mut b, &mut rng, &format!("attn.{name}"), ln1, D_MODEL, D_MODEL)?;
        b.name(p, name)?;
        // [1, seq, 32] -> [1, seq, 4, 8] -> [1, 4, seq, 8]
        let split = b.view(p, &[1, -1, HEADS as i64, head_dim as i64])?;
        let h = b.transpose(split, 1, 2)?;
        b.name(h, &format!("{name}_heads"))?;
        heads.push(h);
    }
    let scale = 1.0 / (head_dim as f64).sqrt();
    let attn = b.op(
        OpKind::ScaledDotProductAttention,
        &heads,
        &[("causal", AttrValue::Bool(false)), ("scale", AttrValue::Float(scale))],
    )?;
    b.name(attn, "attn")?;
    // [1, 4, seq, 8] -> [1, seq, 4, 8] -> [1, seq, 32]; the transpose is not contiguous, so
    // this is a reshape (a copy), not a view.
    let merged = b.transpose(attn, 1, 2)?;
    let merged = b.reshape(merged, &[1, -1, D_MODEL as i64])?;
    b.name(merged, "merged")?;
    let proj = linear(&mut b, &mut rng, "attn.out", merged, D_MODEL, D_MODEL)?;
    let h = b.add(x, proj)?;
    b.name(h, "resid")?;

    let ln2 = layer_norm(&mut b, &mut rng, "ln2", h)?;
    b.name(ln2, "ln2")?;
    let up = linear(&mut b, &mut rng, "ffn.up", ln2, D_MODEL, FFN)?;
    let act = b.gelu(up, "none")?;
    b.name(act, "act")?;
    let down = linear(&mut b, &mut rng, "ffn.down", act, FFN, D_MODEL)?;
    let y = b.add(h, down)?;
    b.name(y, "y")?;
    b.output("y", y)?;
    b.finish()
}

fn weight(
    b: &mut GraphBuilder,
    rng: &mut Rng,
    name: &str,
    shape: &[usize],
    f: impl Fn(f64) -> f64,
) -> Result<Value, BuildError> {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| f(rng.uniform_bits(24)) as f32).collect();
    // The length is the shape's product by construction.
    let t = Tensor::from_f32(shape, values).expect("weight data matches its shape");
    b.named_constant(name, t)
}

fn layer_norm(b: &mut GraphBuilder, rng: &mut Rng, prefix: &str, x: Value) -> Result<Value, BuildError> {
    let w = weight(b, rng, &format!("{prefix}.weight"), &[D_MODEL], |u| 1.0 + 0.1 * u)?;
    let bias = weight(b, rng, &format!("{prefix}.bias"), &[D_MODEL], |u| 0.1 * u)?;
    b.op(OpKind::LayerNorm, &[x, w, bias], &[("axis", AttrValue::Int(-1)), ("eps", AttrValue::Float(LN_EPS))])
}

fn linear(
    b: &mut GraphBuilder,
    rng: &mut Rng,
    prefix: &str,
    x: Value,
    d_in: usize,
    d_out: usize,
) -> Result<Value, BuildError> {
    let bound = 1.0 / (d_in as f64).sqrt();
    let w = weight(b, rng, &format!("{prefix}.weight"), &[d_out, d_in], |u| bound * u)?;
    let bias = weight(b, rng, &format!("{prefix}.bias"), &[d_out], |u| bound * u)?;
    b.linear(x, w, Some(bias))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng::new(1);
        for bits in [8, 11, 24, 53] {
            for _ in 0..1000 {
                let u = r.uniform_bits(bits);
                assert!((-1.0..1.0).contains(&u), "{u}");
            }
        }
        // The f16 and bf16 grids keep rounded values below 1.
        let t = random_tensor(&mut r, DType::F16, &[4096]).unwrap();
        assert!(t.to_f64_vec().iter().all(|&x| (-1.0..1.0).contains(&x)));
        let t = random_tensor(&mut r, DType::BF16, &[4096]).unwrap();
        assert!(t.to_f64_vec().iter().all(|&x| (-1.0..1.0).contains(&x)));
        let t = random_tensor(&mut r, DType::I32, &[4096]).unwrap();
        assert!(t.to_f64_vec().iter().all(|&x| (0.0..10.0).contains(&x)));
    }
}
