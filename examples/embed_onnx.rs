//! Embedding an ONNX model: load it once, compile it for the CPU, and call it with inputs by
//! name at whatever batch and sequence length each call brings.
//!
//! `cargo run --release --example embed_onnx [MODEL.onnx]` (default: the BERT-style sentence
//! encoder in `tests/corpus/bert_ts`).

use ladder::{CompileOptions, Session, Tensor};

const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/bert_ts/model.onnx");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| DEFAULT_MODEL.to_string());
    let compilations = run(&path)?;
    println!("compilations: {compilations}");
    Ok(())
}

/// Runs the encoder at `path` at two batch and sequence sizes; returns how many plans that
/// compiled.
fn run(path: &str) -> Result<usize, Box<dyn std::error::Error>> {
    let model = ladder::load(path)?;
    // The native CPU backend over the machine's threads.
    let session = Session::new(model, CompileOptions::default())?;
    for (name, ty) in session.inputs() {
        println!("input {name}: {ty}");
    }
    for (batch, seq) in [(1usize, 5usize), (3, 12)] {
        // Token ids below the tiny corpus model's vocabulary of 120.
        let ids = Tensor::from_i64(&[batch, seq], (0..(batch * seq) as i64).map(|i| 1 + i % 100).collect())?;
        let mask = Tensor::from_i64(&[batch, seq], vec![1; batch * seq])?;
        let outputs = session.run_named(vec![("input_ids", ids), ("attention_mask", mask)])?;
        for (name, t) in &outputs {
            let v = t.as_f32().ok_or("the encoder's output is f32")?;
            println!("batch {batch}, seq {seq}: {name} {:?}, first values {:?}", t.shape(), &v[..v.len().min(3)]);
        }
    }
    // One plan serves both calls where the model's batch and sequence dims stay symbolic.
    Ok(session.compilations())
}

#[test]
fn runs() {
    assert_eq!(run(DEFAULT_MODEL).unwrap(), 1);
}
