//! Built-in training tasks on synthetic data: a model in the text form, its initial
//! parameters, and batches of a task it can learn (a fixed random *teacher* maps inputs to
//! targets, so the loss has somewhere to go).
//!
//! - `mlp`: two linear layers with a gelu, mean squared error against `tanh(x Tᵀ)`;
//! - `transformer`: pre-norm blocks (layer norm, causal multi-head attention, gelu MLP,
//!   residuals) over `[batch, seq, d]` inputs, mean squared error against `x A` for a fixed
//!   random `A`: 2 layers, d = 128, 4 heads, seq 64, batch 8 by default.

use crate::ir::Graph;
use crate::models::Rng;
use crate::tensor::Tensor;

/// A model to train, and its data.
pub struct Task {
    pub graph: Graph,
    /// The loss output.
    pub loss: String,
    /// Initial values of the parameters (inputs of `graph`).
    pub params: Vec<(String, Tensor)>,
    data: Data,
    rng: Rng,
}

enum Data {
    /// `x: [batch, inputs]` uniform, `t = tanh(x Tᵀ)`.
    Mlp { batch: usize, inputs: usize, outputs: usize, teacher: Vec<f32> },
    /// `x: [batch, seq, d]` uniform, `t = x A`.
    Sequence { batch: usize, seq: usize, d: usize, mix: Vec<f32> },
}

/// The task names [`task`] knows.
pub const TASKS: [&str; 2] = ["mlp", "transformer"];

/// Sizes of the transformer task.
#[derive(Clone, Copy, Debug)]
pub struct TransformerSize {
    pub layers: usize,
    pub d: usize,
    pub heads: usize,
    pub seq: usize,
    pub batch: usize,
}

impl Default for TransformerSize {
    fn default() -> TransformerSize {
        TransformerSize { layers: 2, d: 128, heads: 4, seq: 64, batch: 8 }
    }
}

/// The task named `name` (see [`TASKS`]) with the default sizes; `None` for another name.
pub fn task(name: &str, seed: u64) -> Option<Task> {
    match name {
        "mlp" => Some(mlp(32, 64, 128, 10, seed)),
        "transformer" => Some(transformer(TransformerSize::default(), seed)),
        _ => None,
    }
}

/// Uniform in `[-scale, scale)`, f32.
fn uniform(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
    (0..n).map(|_| (rng.uniform() * scale) as f32).collect()
}

fn tensor(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::from_f32(shape, data).expect("the shape matches the data")
}

/// Weights `[out, in]` uniform in `±1/√in` (PyTorch's default for linear layers).
fn weights(rng: &mut Rng, out: usize, inputs: usize) -> Tensor {
    tensor(&[out, inputs], uniform(rng, out * inputs, 1.0 / (inputs as f64).sqrt()))
}

/// `x [batch, inputs] -> linear -> gelu -> linear -> [batch, outputs]`, MSE loss.
pub fn mlp(batch: usize, inputs: usize, hidden: usize, outputs: usize, seed: u64) -> Task {
    let src = format!(
        "graph mlp(%x: f32[{batch}, {inputs}], %t: f32[{batch}, {outputs}], %w1: f32[{hidden}, {inputs}], \
         %b1: f32[{hidden}], %w2: f32[{outputs}, {hidden}], %b2: f32[{outputs}]) {{\n  \
         %h = linear(%x, %w1, %b1)\n  %a = gelu(%h)\n  %y = linear(%a, %w2, %b2)\n  \
         %loss = mse_loss(%y, %t)\n  return %loss\n}}\n"
    );
    let graph = crate::text::parse(&src).expect("the built-in model parses");
    let mut rng = Rng::new(seed);
    let params = vec![
        ("w1".to_string(), weights(&mut rng, hidden, inputs)),
        ("b1".to_string(), tensor(&[hidden], vec![0.0; hidden])),
        ("w2".to_string(), weights(&mut rng, outputs, hidden)),
        ("b2".to_string(), tensor(&[outputs], vec![0.0; outputs])),
    ];
    let teacher = uniform(&mut rng, outputs * inputs, 2.0 / (inputs as f64).sqrt());
    Task { graph, loss: "loss".into(), params, data: Data::Mlp { batch, inputs, outputs, teacher }, rng }
}

/// Pre-norm transformer blocks with causal attention, MSE against a fixed linear map.
pub fn transformer(s: TransformerSize, seed: u64) -> Task {
    let TransformerSize { layers, d, heads, seq, batch } = s;
    let hd = d / heads.max(1);
    let f = 4 * d;
    let mut inputs = format!("%x: f32[{batch}, {seq}, {d}], %t: f32[{batch}, {seq}, {d}]");
    let mut body = String::new();
    let mut rng = Rng::new(seed);
    let mut params = Vec::new();
    let mut x = "x".to_string();
    for l in 0..layers {
        for (name, shape) in [
            ("g1", vec![d]),
            ("c1", vec![d]),
            ("wq", vec![d, d]),
            ("wk", vec![d, d]),
            ("wv", vec![d, d]),
            ("wo", vec![d, d]),
            ("g2", vec![d]),
            ("c2", vec![d]),
            ("w1", vec![f, d]),
            ("w2", vec![d, f]),
        ] {
            let dims: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
            inputs.push_str(&format!(", %{name}_{l}: f32[{}]", dims.join(", ")));
            let value = match name {
                "g1" | "g2" => tensor(&shape, vec![1.0; shape[0]]),
                "c1" | "c2" => tensor(&shape, vec![0.0; shape[0]]),
                _ => weights(&mut rng, shape[0], shape[1]),
            };
            params.push((format!("{name}_{l}"), value));
        }
        let heads4 = format!("[{batch}, {seq}, {heads}, {hd}]");
        body.push_str(&format!(
            "  %n_{l} = layer_norm(%{x}, %g1_{l}, %c1_{l}) {{axis=-1}}\n\
             \x20 %q_{l} = linear(%n_{l}, %wq_{l})\n  %k_{l} = linear(%n_{l}, %wk_{l})\n  %v_{l} = linear(%n_{l}, %wv_{l})\n\
             \x20 %q4_{l} = reshape(%q_{l}) {{shape={heads4}}}\n  %k4_{l} = reshape(%k_{l}) {{shape={heads4}}}\n\
             \x20 %v4_{l} = reshape(%v_{l}) {{shape={heads4}}}\n\
             \x20 %qh_{l} = permute(%q4_{l}) {{perm=[0, 2, 1, 3]}}\n  %kh_{l} = permute(%k4_{l}) {{perm=[0, 2, 1, 3]}}\n\
             \x20 %vh_{l} = permute(%v4_{l}) {{perm=[0, 2, 1, 3]}}\n\
             \x20 %o_{l} = scaled_dot_product_attention(%qh_{l}, %kh_{l}, %vh_{l}) {{causal=true}}\n\
             \x20 %ot_{l} = permute(%o_{l}) {{perm=[0, 2, 1, 3]}}\n  %o3_{l} = reshape(%ot_{l}) {{shape=[{batch}, {seq}, {d}]}}\n\
             \x20 %p_{l} = linear(%o3_{l}, %wo_{l})\n  %r_{l} = add(%{x}, %p_{l})\n\
             \x20 %m_{l} = layer_norm(%r_{l}, %g2_{l}, %c2_{l}) {{axis=-1}}\n  %f_{l} = linear(%m_{l}, %w1_{l})\n\
             \x20 %e_{l} = gelu(%f_{l})\n  %d_{l} = linear(%e_{l}, %w2_{l})\n  %z_{l} = add(%r_{l}, %d_{l})\n"
        ));
        x = format!("z_{l}");
    }
    let src = format!("graph transformer({inputs}) {{\n{body}  %loss = mse_loss(%{x}, %t)\n  return %loss\n}}\n");
    let graph = crate::text::parse(&src).expect("the built-in model parses");
    let mix = uniform(&mut rng, d * d, 1.0 / (d as f64).sqrt());
    Task { graph, loss: "loss".into(), params, data: Data::Sequence { batch, seq, d, mix }, rng }
}

impl Task {
    /// The next batch: every data input of the graph, by name.
    pub fn batch(&mut self) -> Vec<(&'static str, Tensor)> {
        match &self.data {
            Data::Mlp { batch, inputs, outputs, teacher } => {
                let (b, n, m) = (*batch, *inputs, *outputs);
                let x = uniform(&mut self.rng, b * n, 1.0);
                let t: Vec<f32> = (0..b * m)
                    .map(|k| {
                        let (i, o) = (k / m, k % m);
                        (0..n).map(|j| x[i * n + j] * teacher[o * n + j]).sum::<f32>().tanh()
                    })
                    .collect();
                vec![("x", tensor(&[b, n], x)), ("t", tensor(&[b, m], t))]
            }
            Data::Sequence { batch, seq, d, mix } => {
                let (rows, d) = (batch * seq, *d);
                let x = uniform(&mut self.rng, rows * d, 1.0);
                // `t = x · mix`, row by row: each row of `mix` scaled into the row of `t`.
                let mut t = vec![0.0f32; rows * d];
                for (tr, xr) in t.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
                    for (&xj, mr) in xr.iter().zip(mix.chunks_exact(d)) {
                        tr.iter_mut().zip(mr).for_each(|(o, &m)| *o += xj * m);
                    }
                }
                vec![("x", tensor(&[*batch, *seq, d], x)), ("t", tensor(&[*batch, *seq, d], t))]
            }
        }
    }
}
