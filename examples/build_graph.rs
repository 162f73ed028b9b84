//! Building a graph in Rust and running it frame after frame on the engine's own buffer
//! (borrowed, not copied) without allocating: a small MLP head (`softmax(relu(x·W1 + b1)·W2)`)
//! over a batch of any size.
//!
//! `cargo run --release --example build_graph`

use ladder::{CompileOptions, DType, Dim, GraphBuilder, Outputs, Shape, Tensor, TensorView};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut b = GraphBuilder::new("head");
    let x = b.input("x", DType::F32, Shape(vec![Dim::sym("batch"), Dim::new(16)].into()))?;
    let w1 = b.named_constant(
        "w1",
        Tensor::from_f32(&[32, 16], (0..512).map(|i| ((i % 7) as f32 - 3.0) * 0.05).collect())?,
    )?;
    let b1 = b.named_constant("b1", Tensor::from_f32(&[32], vec![0.01; 32])?)?;
    let w2 =
        b.named_constant("w2", Tensor::from_f32(&[4, 32], (0..128).map(|i| ((i % 5) as f32 - 2.0) * 0.1).collect())?)?;
    let h = b.linear(x, w1, Some(b1))?;
    let h = b.relu(h)?;
    let logits = b.linear(h, w2, None)?;
    let y = b.softmax(logits, -1)?;
    b.output("probabilities", y)?;
    let graph = b.finish()?;
    // The reference interpreter is the oracle; the compiled plan is what an engine runs.
    let plan = ladder::compile(&graph, &CompileOptions::default())?;
    let mut out = Outputs { outputs: Vec::new(), mutated_inputs: Vec::new() };
    // The engine's frame buffer, refilled in place each frame and lent to the plan as a view.
    let mut frame_buf = vec![0f32; 4 * 16];
    for frame in 0..3 {
        let batch = 2 + frame;
        let shape = [batch, 16];
        let rows = &mut frame_buf[..batch * 16];
        for (i, x) in rows.iter_mut().enumerate() {
            *x = (i as f32 * 0.37 + frame as f32).sin();
        }
        let x = TensorView::new(&frame_buf[..batch * 16], &shape)?;
        // After the first call, `run_views_into` writes into the tensors of the previous one.
        plan.run_views_into(&[x], &mut out)?;
        let want = ladder::interp::run(&graph, &[x.to_tensor()], &Default::default())?.outputs;
        let (got, want) = (out.outputs[0].as_f32().ok_or("f32")?, want[0].as_f32().ok_or("f32")?);
        let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("frame {frame}: batch {batch}, row 0 {:?}, max |plan - interpreter| {worst:.1e}", &got[..4]);
        assert!(worst < 1e-5, "the plan disagrees with the interpreter by {worst}");
    }
    Ok(())
}

#[test]
fn runs() {
    main().unwrap();
}
