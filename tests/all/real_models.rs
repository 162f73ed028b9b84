//! The real-model corpus (`tests/corpus/`, made by `tools/corpus/export.py`): BERT and GPT-2
//! from transformers, a CRNN text recogniser with an LSTM, a YOLO-style detector, an LSTM
//! classifier and a voice-activity model that branches on its sample rate, each exported by
//! both of torch's ONNX exporters, with onnxruntime's outputs for several batch and sequence
//! (or image) sizes. Every model must match onnxruntime on the interpreter and on the CPU
//! backend; the transformers must serve every size from one compiled plan; the others compile
//! once per input shape (and run-time value) and reuse what they compiled.

use std::path::{Path, PathBuf};

use ladder::frontend::onnx::conformance::{cases, compare, run_case, Verdict};
use ladder::frontend::onnx::{decode, decode_tensor, tensor_from_proto, Budget, ImportOptions};
use ladder::{BackendKind, CompileOptions, Model, Session, Tensor};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn interp() -> CompileOptions {
    CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() }
}

fn native(threads: usize) -> CompileOptions {
    CompileOptions::native_cpu(threads).unwrap()
}

fn session(case: &Path, options: CompileOptions) -> Session {
    let bytes = std::fs::read(case.join("model.onnx")).unwrap();
    let model = decode(&bytes, &ImportOptions::default()).unwrap();
    Session::new(Model::from_onnx(model, Some(case.to_path_buf()), ImportOptions::default()), options).unwrap()
}

fn read_pb(path: &Path) -> (String, Tensor) {
    let t = decode_tensor(&std::fs::read(path).unwrap(), &ImportOptions::default()).unwrap();
    let tensor = tensor_from_proto(&t, &ImportOptions::default(), None, &mut Budget::default()).unwrap();
    (t.name.clone(), tensor)
}

/// Every data set of a case: inputs in the model's order, expected outputs.
fn data_sets(case: &Path, session: &Session) -> Vec<(Vec<Tensor>, Vec<Tensor>)> {
    let mut sets: Vec<PathBuf> =
        std::fs::read_dir(case).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    sets.sort();
    sets.iter()
        .map(|set| {
            let files = |prefix: &str| {
                let mut v: Vec<PathBuf> =
                    (0..).map(|i| set.join(format!("{prefix}_{i}.pb"))).take_while(|p| p.is_file()).collect();
                v.sort();
                v.iter().map(|p| read_pb(p)).collect::<Vec<_>>()
            };
            let given = files("input");
            let inputs = session
                .inputs()
                .iter()
                .map(|(name, _)| given.iter().find(|(n, _)| n == name).unwrap().1.clone())
                .collect();
            (inputs, files("output").into_iter().map(|(_, t)| t).collect())
        })
        .collect()
}

#[test]
fn corpus_is_complete() {
    let names: Vec<String> =
        cases(&corpus()).unwrap().iter().map(|c| c.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for family in ["bert", "gpt2", "crnn", "yolo", "lstm", "vad"] {
        assert!(names.iter().any(|n| n.starts_with(family)), "no {family} model in {names:?}");
    }
    assert!(names.len() >= 12, "{names:?}");
}

#[test]
fn every_model_matches_onnxruntime_on_the_interpreter() {
    for case in cases(&corpus()).unwrap() {
        let r = run_case(&case, &ImportOptions::default(), &interp());
        assert_eq!(r.verdict, Verdict::Passed, "{}: {}", r.name, r.reason);
    }
}

/// Every model on the CPU backend (two threads), through one session per model: outputs
/// match onnxruntime for every data set; BERT and GPT-2 (symbolic batch and sequence) serve
/// sequences of 1, 3, 64 and 128 and batches of 1 to 3 from one plan, and so do the CRNNs
/// and the LSTM (an `lstm` op over a length that depends on the image width or the input);
/// the others, which need concrete shapes (a resize between two symbolic sizes) or a run-time
/// value (the sample rate the voice model branches on), compile once per distinct call and
/// take every plan from the cache when called again.
#[test]
fn every_model_matches_onnxruntime_on_the_cpu_backend() {
    for case in cases(&corpus()).unwrap() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let s = session(&case, native(2));
        let sets = data_sets(&case, &s);
        assert!(sets.len() >= 3, "{name}");
        for (inputs, want) in &sets {
            let got = s.run(inputs).unwrap().outputs;
            assert_eq!(got.len(), want.len(), "{name}");
            for (g, w) in got.iter().zip(want) {
                assert_eq!(compare(g, w), None, "{name} {:?}", inputs[0].shape());
            }
        }
        let one_plan = ["bert", "gpt2", "crnn", "lstm"].iter().any(|f| name.starts_with(f));
        assert_eq!(s.general_plan().is_some(), one_plan, "{name}: {:?}", s.specialized_because());
        let first = s.compilations();
        if one_plan {
            assert_eq!(first, 1, "{name}");
        } else {
            assert!(first >= sets.len(), "{name}: {first} compilations for {} calls", sets.len());
        }
        for (inputs, _) in &sets {
            s.run(inputs).unwrap();
        }
        assert_eq!(s.compilations(), first, "{name} recompiled");
    }
}

/// The voice model's two sample rates, alternating: two plans (one per branch), each
/// compiled once, and a one-plan cache that must recompile each time.
#[test]
fn a_run_time_branch_switches_between_cached_plans() {
    let case = corpus().join("vad_ts");
    let mut s = session(&case, native(1));
    let audio = Tensor::from_f32(&[1, 64], (0..64).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap();
    let sr = |v: i64| Tensor::from_i64(&[], vec![v]).unwrap();
    let frames = |t: &Tensor| t.shape()[1];
    let a = s.run(&[audio.clone(), sr(16000)]).unwrap().outputs;
    let b = s.run(&[audio.clone(), sr(8000)]).unwrap().outputs;
    // Stride 2 at 16 kHz, stride 1 otherwise: different frame counts.
    assert!(frames(&a[0]) < frames(&b[0]), "{:?} {:?}", a[0].shape(), b[0].shape());
    let compiled = s.compilations();
    for _ in 0..3 {
        assert!(s.run(&[audio.clone(), sr(16000)]).unwrap().outputs[0].bit_eq(&a[0]));
        assert!(s.run(&[audio.clone(), sr(8000)]).unwrap().outputs[0].bit_eq(&b[0]));
    }
    assert_eq!(s.compilations(), compiled);
    s.set_cache_capacity(1);
    s.run(&[audio.clone(), sr(16000)]).unwrap();
    s.run(&[audio.clone(), sr(8000)]).unwrap();
    assert!(s.compilations() > compiled, "a one-entry cache cannot hold both branches");
}

/// Borrowed inputs through a session: the voice model run on the engine's own audio buffer
/// and sample rate (the probe that picks the branch reads the borrowed rate), the same bits
/// as tensors, with no compilation the tensors' calls did not need.
#[test]
fn a_session_runs_on_borrowed_buffers() {
    let case = corpus().join("vad_ts");
    let s = session(&case, native(1));
    let samples: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
    for rate in [16000i64, 8000, 16000] {
        let rate_buf = [rate];
        let views =
            [ladder::TensorView::new(&samples, &[1, 64]).unwrap(), ladder::TensorView::new(&rate_buf, &[]).unwrap()];
        let got = s.run_views(&views).unwrap().outputs;
        let compiled = s.compilations();
        let owned = [Tensor::from_f32(&[1, 64], samples.clone()).unwrap(), Tensor::from_i64(&[], vec![rate]).unwrap()];
        let want = s.run(&owned).unwrap().outputs;
        assert_eq!(s.compilations(), compiled, "the tensors' call found the views' plan");
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(g.bit_eq(w), "rate {rate}: views {g}, tensors {w}");
        }
    }
    // A view of the wrong dtype is the same typed error as a tensor of it.
    let rate_f = [16000f32];
    let views = [ladder::TensorView::new(&samples, &[1, 64]).unwrap(), ladder::TensorView::new(&rate_f, &[]).unwrap()];
    assert!(s.run_views(&views).unwrap_err().to_string().contains("must be"));
}

/// A call whose inputs do not fit the model is a typed error before anything compiles: on a
/// model that compiles per call (the YOLO, for its resize) and on one with a general plan
/// (the CRNN), whose guards refuse it.
#[test]
fn bad_calls_are_typed_errors() {
    for (case, channels) in [("yolo_ts", 3), ("crnn_ts", 1)] {
        let s = session(&corpus().join(case), interp());
        let before = s.compilations();
        let wrong_rank = Tensor::from_f32(&[1, 32, 8], vec![0.0; 256]).unwrap();
        let e = s.run(&[wrong_rank]).unwrap_err().to_string();
        assert!(e.contains("image") && e.contains("must"), "{case}: {e}");
        let wrong_channels = Tensor::from_f32(&[1, channels + 1, 32, 8], vec![0.0; (channels + 1) * 256]).unwrap();
        assert!(s.run(&[wrong_channels]).is_err(), "{case}");
        assert!(s.run(&[]).unwrap_err().to_string().contains("inputs"), "{case}");
        assert_eq!(s.compilations(), before, "{case}");
    }
}

/// Inputs by name, in any order, and outputs with their names: the same numbers as the
/// positional call; unknown, repeated and missing names are typed errors naming them.
#[test]
fn inputs_and_outputs_by_name() {
    let case = corpus().join("bert_ts");
    let s = session(&case, native(1));
    let (inputs, _) = data_sets(&case, &s).swap_remove(0);
    let names: Vec<String> = s.inputs().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, ["input_ids", "attention_mask"]);
    let positional = s.run(&inputs).unwrap().outputs;
    let named = s.run_named(vec![("attention_mask", inputs[1].clone()), ("input_ids", inputs[0].clone())]).unwrap();
    assert_eq!(named.len(), positional.len());
    for ((name, got), want) in named.iter().zip(&positional) {
        assert_eq!(name, "embedding");
        assert!(got.bit_eq(want), "{name}");
    }
    let e = s.run_named(vec![("input_ids", inputs[0].clone()), ("mask", inputs[1].clone())]).unwrap_err();
    assert!(e.to_string().contains("no input `mask`") && e.to_string().contains("attention_mask"), "{e}");
    let e = s.run_named(vec![("input_ids", inputs[0].clone()), ("input_ids", inputs[0].clone())]).unwrap_err();
    assert!(e.to_string().contains("`input_ids` is given twice"), "{e}");
    let e = s.run_named(vec![("input_ids", inputs[0].clone())]).unwrap_err();
    assert!(e.to_string().contains("not given: attention_mask"), "{e}");
}
