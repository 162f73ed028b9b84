//! Random graphs for property tests and fuzzing.
//!
//! The generator draws every choice from a [`Source`] of bytes, so the same code serves a
//! seeded property test (bytes from a PRNG) and a coverage-guided fuzzer (bytes from the
//! fuzzer, where a mutation of the input is a small change of the graph). It knows nothing
//! about individual ops: it picks an op, arguments and attribute values from the op's spec
//! and keeps the node only when the op's own `infer` accepts it. New ops are covered as soon
//! as their spec row exists.

use std::sync::Arc;

use crate::ir::{AttrKind, AttrValue, Attrs, DType, Dim, Graph, Shape, TensorType, Value};
use crate::ops::{all_specs, OpKind, Rung};
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use crate::tensor::{Tensor, TensorData};

/// A stream of choices. Past the end of its bytes it yields zeros, so any byte string is a
/// valid (if short) recipe.
pub struct Source<'a> {
    data: &'a [u8],
    pos: usize,
    /// State of the splitmix64 stream that continues past the end of `data`, if any.
    tail: Option<u64>,
}

impl<'a> Source<'a> {
    pub fn new(data: &'a [u8]) -> Source<'a> {
        Source { data, pos: 0, tail: None }
    }

    /// Like [`Source::new`], but past the end of `data` the choices continue from a splitmix64
    /// stream seeded with `seed` instead of zeros: a short input still makes every later
    /// choice (retries, tensor data) varied, and the leading bytes keep steering the first ones.
    pub fn with_tail(data: &'a [u8], seed: u64) -> Source<'a> {
        Source { data, pos: 0, tail: Some(seed) }
    }

    pub fn byte(&mut self) -> u8 {
        let b = match (self.data.get(self.pos), &mut self.tail) {
            (Some(&b), _) => b,
            (None, Some(state)) => {
                *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            }
            (None, None) => 0,
        };
        self.pos += 1;
        b
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 256 {
            self.byte() as usize % n
        } else {
            self.u32() as usize % n
        }
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    pub fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    pub fn exhausted(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// Bytes from a seeded splitmix64 stream, for property tests.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// What kind of graph to make.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Attempts at adding a node (many are rejected by the op's rule).
    pub attempts: usize,
    pub max_inputs: usize,
    /// Only ops of these rungs.
    pub rungs: Vec<Rung>,
    /// Allow symbolic dims in input shapes.
    pub symbolic: bool,
    /// Give some values odd names that the text form must quote.
    pub odd_names: bool,
    /// Largest static dim.
    pub max_dim: u64,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            attempts: 40,
            max_inputs: 3,
            rungs: vec![Rung::High, Rung::Prim, Rung::Opaque],
            symbolic: true,
            odd_names: true,
            max_dim: 4,
        }
    }
}

const SYMBOLS: [&str; 3] = ["batch", "seq", "n"];
const STRINGS: [&str; 5] = ["none", "tanh", "mean", "sum", "x"];

/// A random dtype, weighted toward f32.
pub fn random_dtype(src: &mut Source) -> DType {
    // Weighted toward f32, the type most ops accept.
    match src.below(12) {
        0..=4 => DType::F32,
        5 => DType::I64,
        6 => DType::Bool,
        7 => DType::F64,
        8 => DType::I32,
        9 => src.choose(&[DType::F16, DType::BF16]),
        10 => src.choose(&[DType::I8, DType::U8, DType::I16, DType::U16]),
        _ => src.choose(&[DType::U32, DType::U64]),
    }
}

/// A random dim: a symbol (when `cfg.symbolic`, one time in four) or `0..=cfg.max_dim`.
pub fn random_dim(src: &mut Source, cfg: &GenConfig) -> Dim {
    if cfg.symbolic && src.below(4) == 0 {
        Dim::sym(src.choose(&SYMBOLS))
    } else {
        Dim::new(src.below(cfg.max_dim as usize + 1) as u64)
    }
}

fn random_shape(src: &mut Source, cfg: &GenConfig) -> Shape {
    let rank = src.below(4);
    (0..rank).map(|_| random_dim(src, cfg)).collect()
}

fn random_float(src: &mut Source) -> f64 {
    match src.below(12) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -0.0,
        4 => 1e30,
        5 => 1e-40,
        _ => (src.below(41) as f64 - 20.0) / 4.0,
    }
}

/// A random attribute value of `kind` (small ints, adversarial floats, short lists).
pub fn random_attr(src: &mut Source, kind: AttrKind) -> AttrValue {
    let small_int = |src: &mut Source| src.below(9) as i64 - 4;
    match kind {
        AttrKind::Int => AttrValue::Int(small_int(src)),
        AttrKind::Float => AttrValue::Float(random_float(src)),
        AttrKind::Bool => AttrValue::Bool(src.bool()),
        AttrKind::Ints => {
            let n = src.below(5);
            AttrValue::Ints((0..n).map(|_| small_int(src)).collect())
        }
        AttrKind::Dims => {
            let n = src.below(5);
            AttrValue::Dims(
                (0..n)
                    .map(|_| match src.below(6) {
                        0 => None,
                        1 => Some(Dim::sym(src.choose(&SYMBOLS))),
                        _ => Some(Dim::new(src.below(5) as u64)),
                    })
                    .collect(),
            )
        }
        // Random graphs bind no symbols of their own: their slice bounds are constants.
        AttrKind::Size => AttrValue::Int(small_int(src)),
        AttrKind::DType => AttrValue::DType(random_dtype(src)),
        AttrKind::Str => AttrValue::Str(src.choose(&STRINGS).to_string()),
    }
}

/// Random tensor data of a static shape (adversarial values included).
pub fn random_tensor(src: &mut Source, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let floats: Vec<f64> = (0..n).map(|_| random_float(src)).collect();
    let data = match dtype {
        DType::F32 => TensorData::F32(floats.iter().map(|&x| x as f32).collect()),
        DType::F64 => TensorData::F64(floats),
        DType::F16 => TensorData::F16(floats.iter().map(|&x| f16_from_f64(x)).collect()),
        DType::BF16 => TensorData::BF16(floats.iter().map(|&x| bf16_from_f64(x)).collect()),
        DType::Bool => TensorData::Bool((0..n).map(|_| src.bool()).collect()),
        // -3..=3, wrapped: an unsigned type gets its three largest values (above 2^63 for u64).
        d => TensorData::from_ints(d, (0..n).map(|_| src.below(7) as i64 - 3).collect::<Vec<_>>())
            .unwrap_or_else(|| unreachable!("{d} is an integer type")),
    };
    Tensor::new(shape.to_vec(), data).unwrap_or_else(|e| panic!("generator made a bad tensor: {e}"))
}

/// A random, valid graph. Every node is accepted by its op's rule; the graph verifies.
pub fn random_graph(src: &mut Source, cfg: &GenConfig) -> Graph {
    let mut g = Graph::new("random");
    let n_inputs = 1 + src.below(cfg.max_inputs.max(1));
    for i in 0..n_inputs {
        let ty = TensorType::new(random_dtype(src), random_shape(src, cfg));
        let name = if cfg.odd_names && src.below(4) == 0 { format!("in put/{i}") } else { format!("x{i}") };
        // Names are unique by construction.
        let _ = g.add_input(&name, ty);
    }
    if src.bool() {
        let dtype = random_dtype(src);
        let shape: Vec<usize> = (0..src.below(3)).map(|_| src.below(4)).collect();
        let t = random_tensor(src, dtype, &shape);
        if let Ok(b) = g.add_blob("w", Arc::new(t)) {
            g.add_const(b);
        }
    }
    // Custom kernels need a registration, which generated graphs do not make.
    let ops: Vec<OpKind> =
        all_specs().filter(|s| cfg.rungs.contains(&s.rung) && s.kind != OpKind::Custom).map(|s| s.kind).collect();
    if ops.is_empty() {
        return g;
    }
    for attempt in 0..cfg.attempts {
        if src.exhausted() {
            break;
        }
        let op = src.choose(&ops);
        let spec = op.spec();
        let n_args = match spec.arity {
            crate::ops::Arity::Exactly(k) => k,
            crate::ops::Arity::Between(lo, hi) => lo + src.below(hi - lo + 1),
            crate::ops::Arity::AtLeast(k) => k + src.below(3),
        };
        // Prefer recent values so chains form.
        let args: Vec<Value> = (0..n_args)
            .map(|_| {
                let n = g.len();
                let back = src.below(n.min(4));
                Value::from_u32((n - 1 - back) as u32)
            })
            .collect();
        let mut given = Vec::new();
        for a in spec.attrs {
            if src.below(3) != 0 {
                given.push((a.name.to_string(), random_attr(src, a.kind)));
            }
        }
        let Ok(attrs) = Attrs::resolve(spec.attrs, given) else { continue };
        if let Ok(v) = g.add_node(op, &args, attrs) {
            if cfg.odd_names && src.below(6) == 0 {
                let _ = g.set_name(v, &format!("v{attempt}::odd \"name\""));
            }
        }
    }
    let n = g.len() as u32;
    let n_outputs = 1 + src.below(2);
    for k in 0..n_outputs {
        let v = Value::from_u32(n - 1 - src.below(n as usize) as u32);
        let name = if k == 0 { g.default_output_name(v) } else { format!("out.{k}") };
        let _ = g.add_output(&name, v);
    }
    g
}
