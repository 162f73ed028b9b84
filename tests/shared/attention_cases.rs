//! Attention cases shared by the tests of the CPU's attention kernel (`tests/alloc/
//! attention_kernel.rs`) and of the Vulkan attention shader (`tests/all/vulkan_attention.rs`):
//! the op's shapes, masks and attributes as a graph, inputs of several profiles (plain, spiky
//! with NaN and infinities, huge scores, the generator's), the mask shapes that broadcast, and
//! the interpreter's NaN and infinity pattern. Each test binary includes it (`#[path]`).

use ladder::gen::Source;
use ladder::models::Rng;
use ladder::numerics::{compare, random_data, CompareCtx};
use ladder::tensor::TensorData;
use ladder::{DType, Graph, OpKind, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MaskKind {
    Float,
    Bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub batch: Vec<usize>,
    pub l: usize,
    pub s: usize,
    pub d: usize,
    pub dv: usize,
    pub causal: bool,
    pub safe: bool,
    pub scale: &'static str,
    pub mask: Option<(MaskKind, Vec<usize>)>,
}

impl Case {
    /// `(L, S, D, Dv)` heads over `batch`, no mask, not causal, the safe softmax, the default
    /// scale.
    pub(crate) fn new(batch: &[usize], (l, s, d, dv): (usize, usize, usize, usize)) -> Case {
        Case { batch: batch.to_vec(), l, s, d, dv, causal: false, safe: true, scale: "nan", mask: None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Profile {
    /// Uniform in [-1, 1); float masks with some -inf.
    Plain,
    /// Plain with NaN, +inf and -inf sprinkled over q, k, v and float masks.
    Spiky,
    /// q and k near 2^50, so scores reach 1e30 (float masks too).
    Huge,
    /// The generator's profiles (huge, tiny, denormal, NaN, ±inf, logits), from its bytes.
    Generator,
}

pub(crate) fn dims(prefix: &[usize], x: usize, y: usize) -> Vec<usize> {
    prefix.iter().copied().chain([x, y]).collect()
}

pub(crate) fn list(d: &[usize]) -> String {
    d.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

pub(crate) fn graph(c: &Case) -> Graph {
    let mut sig = format!(
        "%q: f32[{}], %k: f32[{}], %v: f32[{}]",
        list(&dims(&c.batch, c.l, c.d)),
        list(&dims(&c.batch, c.s, c.d)),
        list(&dims(&c.batch, c.s, c.dv))
    );
    let mut args = "%q, %k, %v".to_string();
    if let Some((kind, shape)) = &c.mask {
        let dt = if *kind == MaskKind::Bool { "bool" } else { "f32" };
        sig.push_str(&format!(", %m: {dt}[{}]", list(shape)));
        args.push_str(", %m");
    }
    let text = format!(
        "graph att({sig}) {{\n  %y = scaled_dot_product_attention({args}) {{causal={}, scale={}, safe_softmax={}}}\n  return %y\n}}",
        c.causal, c.scale, c.safe
    );
    ladder::text::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub(crate) fn f32_tensor(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F32(data)).unwrap()
}

pub(crate) fn special(rng: &mut Rng) -> f32 {
    [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3) as usize]
}

pub(crate) fn floats(rng: &mut Rng, profile: Profile, shape: &[usize], magnitude: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            let x = rng.uniform_bits(24) as f32;
            match profile {
                Profile::Spiky if rng.below(40) == 0 => special(rng),
                Profile::Huge => x * magnitude,
                _ => x,
            }
        })
        .collect();
    f32_tensor(shape, data)
}

pub(crate) fn inputs(c: &Case, profile: Profile, seed: u64) -> Vec<Tensor> {
    let shapes = [dims(&c.batch, c.l, c.d), dims(&c.batch, c.s, c.d), dims(&c.batch, c.s, c.dv)];
    let mut rng = Rng::new(seed);
    let mut out: Vec<Tensor> = if profile == Profile::Generator {
        let bytes = ladder::gen::seeded_bytes(seed, 64);
        let mut src = Source::new(&bytes);
        shapes.iter().map(|sh| random_data(&mut src, DType::F32, sh)).collect()
    } else {
        let qk = if profile == Profile::Huge { 2f32.powi(50) } else { 1.0 };
        vec![
            floats(&mut rng, profile, &shapes[0], qk),
            floats(&mut rng, profile, &shapes[1], qk),
            floats(&mut rng, if profile == Profile::Huge { Profile::Plain } else { profile }, &shapes[2], 1.0),
        ]
    };
    if let Some((kind, shape)) = &c.mask {
        let n: usize = shape.iter().product();
        let last = shape.last().copied().unwrap_or(1).max(1);
        // Every seventh mask row attends to nothing.
        let dead = |i: usize| (i / last) % 7 == 3;
        out.push(match kind {
            MaskKind::Bool => {
                Tensor::new(shape.clone(), TensorData::Bool((0..n).map(|i| !dead(i) && rng.below(5) != 0).collect()))
                    .unwrap()
            }
            MaskKind::Float if profile == Profile::Generator => {
                let bytes = ladder::gen::seeded_bytes(seed ^ 0x5eed, 64);
                random_data(&mut Source::new(&bytes), DType::F32, shape)
            }
            MaskKind::Float => {
                let m = floats(&mut rng, profile, shape, 1e30);
                let TensorData::F32(mut v) = m.data().clone() else { unreachable!() };
                for (i, x) in v.iter_mut().enumerate() {
                    if dead(i) || rng.below(6) == 0 {
                        *x = f32::NEG_INFINITY;
                    } else if profile != Profile::Huge {
                        *x *= 3.0;
                    }
                }
                f32_tensor(shape, v)
            }
        });
    }
    out
}

/// The interpreter's NaN and infinity pattern: NaN exactly where it is NaN; where it is ±inf
/// the same infinity or NaN (a 0 weight in f32 meeting an infinite value, where f64 kept a
/// tiny one); finite where it is finite.
pub(crate) fn same_nonfinite(want: &Tensor, got: &Tensor) -> Result<(), String> {
    for (i, (w, g)) in want.to_f64_vec().into_iter().zip(got.to_f64_vec()).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w || g.is_nan()
        } else {
            g.is_finite()
        };
        if !ok {
            return Err(format!("element {i}: reference {w}, kernel {g}"));
        }
    }
    Ok(())
}

/// The mask shapes that broadcast to the scores `[batch..., l, s]`: `[l, s]`, `[s]`, the full
/// shape, ones for the batch dims, and `[b, 1, ..., 1, s]` and `[b, 1, ..., l, 1]`.
pub(crate) fn mask_shapes(batch: &[usize], l: usize, s: usize) -> Vec<Vec<usize>> {
    let mut shapes = vec![vec![l, s], vec![s], dims(batch, l, s)];
    let ones = vec![1; batch.len()];
    shapes.push(dims(&ones, l, s));
    if let Some((&first, rest)) = batch.split_first() {
        // [B, 1, ..., 1, S] and [B, 1, ..., L, 1].
        let mut b: Vec<usize> = vec![first];
        b.extend(rest.iter().map(|_| 1));
        shapes.push(dims(&b, 1, s));
        shapes.push(dims(&b, l, 1));
    }
    shapes
}

/// The op on `ins` through the precise interpreter (the oracle).
pub(crate) fn reference(g: &Graph, ins: &[Tensor]) -> Tensor {
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    ladder::interp::run(g, ins, &precise).unwrap().outputs.remove(0)
}

/// `got` (an implementation's result for `g` on `ins`) against `want` (the [`reference`]): the
/// tolerance table; outside the generator's profile the exact non-finite pattern; for huge
/// scores, which the table excuses, closeness too (the softmax is one-hot there).
pub(crate) fn judge(g: &Graph, ins: &[Tensor], profile: Profile, want: &Tensor, got: &Tensor) -> Result<(), String> {
    let ctx = CompareCtx { graph: g, node: g.outputs()[0].value, inputs: ins, output: "y" };
    compare(OpKind::ScaledDotProductAttention, want, got, &ctx).map_err(|m| m.to_string())?;
    if profile != Profile::Generator {
        same_nonfinite(want, got)?;
    }
    if profile == Profile::Huge {
        for (i, (w, g)) in want.to_f64_vec().into_iter().zip(got.to_f64_vec()).enumerate() {
            if w.is_finite() && (w - g).abs() > 1e-3 {
                return Err(format!("element {i}: reference {w}, got {g}"));
            }
        }
    }
    Ok(())
}
