//! The smallest program that embeds ladder: load a model file (`.onnx`, `.lad` or a compiled
//! artifact), compile it for the CPU, run it on zeros (symbolic sizes 4), print the
//! first output's element count.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: embed-size MODEL")?;
    let model = ladder::Model::load(std::path::Path::new(&path))?;
    let session = ladder::Session::new(model, ladder::CompileOptions::native_cpu(1)?)?;
    let inputs: Vec<ladder::Tensor> = session
        .inputs()
        .iter()
        .map(|(_, ty)| {
            let dims: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_const().unwrap_or(4) as usize).collect();
            ladder::Tensor::zeros(ty.dtype, &dims)
        })
        .collect::<Result<_, _>>()?;
    let out = session.run(&inputs)?;
    println!("{}", out.outputs[0].numel());
    Ok(())
}
