//! The built-in example encoder: it builds, verifies, has the documented shapes and weights,
//! and the interpreter's output matches an independent plain-Rust f64 implementation of the
//! same block (layer_norm, linear, multi-head attention, gelu, residuals).
//!
//! Needs the layer_norm, linear, view/reshape/transpose, attention and gelu op families.

use ladder::interp::{self, Options};
use ladder::models::{example_encoder, random_tensor, Rng, D_MODEL, FFN, HEADS, LN_EPS};
use ladder::{Graph, Tensor};

fn weights(g: &Graph, name: &str, shape: &[usize]) -> Vec<f64> {
    let id = g.blob_by_name(name).unwrap_or_else(|| panic!("no blob `{name}`"));
    let t = &g.blob(id).tensor;
    assert_eq!(t.shape(), shape, "{name}");
    t.to_f64_vec()
}

/// `x [rows, d_in] @ w[d_out, d_in]^T + b`.
fn linear(x: &[f64], rows: usize, w: &[f64], b: &[f64], d_in: usize, d_out: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * d_out];
    for r in 0..rows {
        for o in 0..d_out {
            let dot: f64 = (0..d_in).map(|i| x[r * d_in + i] * w[o * d_in + i]).sum();
            y[r * d_out + o] = dot + b[o];
        }
    }
    y
}

fn layer_norm(x: &[f64], rows: usize, w: &[f64], b: &[f64]) -> Vec<f64> {
    let d = w.len();
    let mut y = vec![0.0; rows * d];
    for r in 0..rows {
        let row = &x[r * d..(r + 1) * d];
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        for i in 0..d {
            y[r * d + i] = (row[i] - mean) / (var + LN_EPS).sqrt() * w[i] + b[i];
        }
    }
    y
}

/// The encoder block on `x: [seq, D_MODEL]` (batch 1), in f64.
fn reference(g: &Graph, x: &[f64], seq: usize) -> Vec<f64> {
    let d = D_MODEL;
    let hd = d / HEADS;
    let p = |name: &str, shape: &[usize]| weights(g, name, shape);
    let ln1 = layer_norm(x, seq, &p("ln1.weight", &[d]), &p("ln1.bias", &[d]));
    let proj = |n: &str| {
        linear(&ln1, seq, &p(&format!("attn.{n}.weight"), &[d, d]), &p(&format!("attn.{n}.bias"), &[d]), d, d)
    };
    let (q, k, v) = (proj("q"), proj("k"), proj("v"));
    let scale = 1.0 / (hd as f64).sqrt();
    let mut merged = vec![0.0; seq * d];
    for h in 0..HEADS {
        for i in 0..seq {
            let scores: Vec<f64> = (0..seq)
                .map(|j| (0..hd).map(|c| q[i * d + h * hd + c] * k[j * d + h * hd + c]).sum::<f64>() * scale)
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..hd {
                merged[i * d + h * hd + c] = (0..seq).map(|j| e[j] / z * v[j * d + h * hd + c]).sum();
            }
        }
    }
    let attn = linear(&merged, seq, &p("attn.out.weight", &[d, d]), &p("attn.out.bias", &[d]), d, d);
    let h: Vec<f64> = x.iter().zip(&attn).map(|(a, b)| a + b).collect();
    let ln2 = layer_norm(&h, seq, &p("ln2.weight", &[d]), &p("ln2.bias", &[d]));
    let up = linear(&ln2, seq, &p("ffn.up.weight", &[FFN, d]), &p("ffn.up.bias", &[FFN]), d, FFN);
    let act: Vec<f64> = up.iter().map(|&u| 0.5 * u * (1.0 + libm::erf(u / std::f64::consts::SQRT_2))).collect();
    let down = linear(&act, seq, &p("ffn.down.weight", &[d, FFN]), &p("ffn.down.bias", &[d]), FFN, d);
    h.iter().zip(&down).map(|(a, b)| a + b).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}

#[test]
fn example_encoder_builds_with_a_symbolic_sequence() {
    let g = example_encoder().unwrap();
    assert_eq!(g.inputs().len(), 1);
    assert_eq!(g.ty(g.inputs()[0]).to_string(), "f32[1, seq, 32]");
    assert_eq!(g.outputs().len(), 1);
    assert_eq!(g.outputs()[0].name, "y");
    assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f32[1, seq, 32]");
    ladder::ir::verify::verify(&g, ladder::ir::verify::Stage::HighLevel).unwrap();
    // Deterministic weights: two builds are the same graph, and the text round-trips.
    assert_eq!(g, example_encoder().unwrap());
    assert_eq!(ladder::text::parse(&ladder::text::print(&g)).unwrap(), g);
}

#[test]
fn example_encoder_matches_a_plain_rust_reference() {
    let g = example_encoder().unwrap();
    for seq in [1usize, 3, 5] {
        let x = random_tensor(&mut Rng::new(seq as u64), ladder::DType::F32, &[1, seq, D_MODEL]).unwrap();
        let want = reference(&g, &x.to_f64_vec(), seq);
        let precise = interp::run(&g, std::slice::from_ref(&x), &Options { precise: true, ..Options::default() })
            .unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert_eq!(precise.outputs[0].shape(), &[1, seq, D_MODEL]);
        assert_close(&precise.outputs[0].to_f64_vec(), &want, 1e-9);
        let f32_run: Tensor = interp::run(&g, &[x], &Options::default()).unwrap().outputs.remove(0);
        assert_eq!(f32_run.dtype(), ladder::DType::F32);
        assert_close(&f32_run.to_f64_vec(), &want, 1e-4);
    }
}
