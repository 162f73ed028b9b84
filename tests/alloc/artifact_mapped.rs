//! An artifact loaded from its file keeps its weights in the file's read-only mapping: the
//! load and the compile of a native plan take far less heap than the weights, where the same
//! bytes read into memory (`Artifact::from_bytes`) hold them all.

use ladder::artifact::Artifact;
use ladder::models::{random_tensor, Rng};
use ladder::pipeline::Mode;
use ladder::{compile, CompileOptions, DType, Dim, GraphBuilder, Limits, Model, Session, Tensor};

use crate::counting::peak_bytes;

#[test]
fn a_loaded_artifact_reads_its_weights_in_place() {
    // 16 MiB of f32 weights, scaling an input elementwise: a kernel reads the constant where it lies.
    const N: usize = 1 << 22;
    const WEIGHT_BYTES: usize = N * 4;
    let mut rng = Rng::new(3);
    let mut b = GraphBuilder::new("scale");
    let x = b.input("x", DType::F32, [Dim::new(N as u64)].into_iter().collect()).unwrap();
    let w = b.constant(random_tensor(&mut rng, DType::F32, &[N]).unwrap()).unwrap();
    let y = b.mul(x, w).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();

    let dir = std::env::temp_dir().join(format!("ladder-mapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scale.ladder");
    Artifact::lower(&g, Mode::Native, "scale").unwrap().save(&path).unwrap();
    let native = CompileOptions::native_cpu(1).unwrap();

    let (session, mapped_peak) = peak_bytes(|| Session::new(Model::load(&path).unwrap(), native.clone()).unwrap());
    let (_, copied_peak) = peak_bytes(|| {
        let bytes = std::fs::read(&path).unwrap();
        let a = Artifact::from_bytes(&bytes, &Limits::default()).unwrap();
        Session::new(Model::from_artifact(a), native.clone()).unwrap()
    });
    assert!(
        mapped_peak < WEIGHT_BYTES / 8,
        "load + compile held {mapped_peak} bytes of heap for {WEIGHT_BYTES} of weights"
    );
    assert!(copied_peak >= WEIGHT_BYTES, "the copying load held only {copied_peak} bytes");

    let input = random_tensor(&mut rng, DType::F32, &[N]).unwrap();
    let got = session.run(std::slice::from_ref(&input)).unwrap().outputs;
    let want = compile(&g, &CompileOptions::reference()).unwrap().run(std::slice::from_ref(&input)).unwrap().outputs;
    assert!(got[0].bit_eq(&want[0]));
    // Still in place after the run: nothing asked for a typed copy.
    let blobs: Vec<&Tensor> = session.model().artifact().unwrap().graph.blobs().map(|(_, b)| &*b.tensor).collect();
    assert_eq!(blobs.len(), 1);
    assert!(blobs[0].is_mapped());
    // A typed view of the data is a copy, made once; the tensor reads the same either way.
    let copy = blobs[0].data().clone();
    assert!(!blobs[0].is_mapped());
    assert!(Tensor::new(vec![N], copy).unwrap().bit_eq(blobs[0]));
    std::fs::remove_dir_all(&dir).unwrap();
}
