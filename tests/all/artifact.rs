//! Compiled artifacts (`ladder::artifact`): every corpus model runs from its artifact with the
//! outputs of the model it was compiled from; the files of every format version kept in
//! `tests/artifacts/` load and run; bytes round-trip; and damaged, hostile or newer files are
//! typed errors naming what is wrong, never a panic or an allocation sized by the file.

use std::path::{Path, PathBuf};

use ladder::artifact::{Artifact, ArtifactError, FORMAT_VERSION};
use ladder::frontend::onnx::conformance::{cases, compare};
use ladder::frontend::onnx::{decode, decode_tensor, tensor_from_proto, Budget, ImportOptions};
use ladder::models::{random_tensor, Rng};
use ladder::pipeline::Mode;
use ladder::{compile, BackendKind, CompileOptions, Limits, Model, Session, Tensor};

use crate::common::parse;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn native(threads: usize) -> CompileOptions {
    CompileOptions::native_cpu(threads).unwrap()
}

fn interp() -> CompileOptions {
    CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() }
}

fn round_trip(a: &Artifact) -> Artifact {
    Artifact::from_bytes(&a.to_bytes(), &Limits::default()).unwrap()
}

fn read_pb(path: &Path) -> (String, Tensor) {
    let t = decode_tensor(&std::fs::read(path).unwrap(), &ImportOptions::default()).unwrap();
    (t.name.clone(), tensor_from_proto(&t, &ImportOptions::default(), None, &mut Budget::default()).unwrap())
}

/// Each data set's inputs, in the session's input order.
fn data_sets(case: &Path, session: &Session) -> Vec<Vec<Tensor>> {
    let mut sets: Vec<PathBuf> =
        std::fs::read_dir(case).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    sets.sort();
    sets.iter()
        .map(|set| {
            let given: Vec<_> = (0..)
                .map(|i| set.join(format!("input_{i}.pb")))
                .take_while(|p| p.is_file())
                .map(|p| read_pb(&p))
                .collect();
            session.inputs().iter().map(|(name, _)| given.iter().find(|(n, _)| n == name).unwrap().1.clone()).collect()
        })
        .collect()
}

fn same_bits(got: &[Tensor], want: &[Tensor]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g.bit_eq(w))
}

/// Every model of the real-model corpus, for each of its data sets: the graph its session
/// compiles for those inputs (the general one, or one specialized on their shapes and the
/// values the model branches on) saved as an artifact, loaded from the file and compiled,
/// gives the session's outputs bit for bit, and onnxruntime's within the conformance
/// tolerance; every weight is still read in place from the file's mapping after the run.
#[test]
fn every_corpus_model_runs_from_its_artifact_as_from_the_model() {
    let dir = std::env::temp_dir().join(format!("ladder-artifact-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for case in cases(&root().join("tests/corpus")).unwrap() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(case.join("model.onnx")).unwrap();
        let model = decode(&bytes, &ImportOptions::default()).unwrap();
        let s = Session::new(Model::from_onnx(model, Some(case.clone()), ImportOptions::default()), native(2)).unwrap();
        for (k, inputs) in data_sets(&case, &s).iter().enumerate() {
            let want = s.run(inputs).unwrap().outputs;
            let g = s.plan_for(inputs).unwrap().graph().clone();
            let path = dir.join(format!("{name}.{k}.ladder"));
            Artifact::lower(&g, Mode::Native, &name).unwrap().save(&path).unwrap();
            let from_artifact = Session::new(Model::load(&path).unwrap(), native(2)).unwrap();
            assert!(
                from_artifact.general_plan().is_some(),
                "{name} set {k}: {:?}",
                from_artifact.specialized_because()
            );
            let got = from_artifact.run(inputs).unwrap().outputs;
            assert!(same_bits(&got, &want), "{name} set {k}: the artifact's outputs differ from the model's");
            for (_, blob) in from_artifact.model().artifact().unwrap().graph.blobs() {
                assert!(blob.tensor.is_mapped(), "{name} set {k}: blob {} was copied", blob.name);
            }
            let expected: Vec<Tensor> = (0..)
                .map(|i| case.join(format!("test_data_set_{k}/output_{i}.pb")))
                .take_while(|p| p.is_file())
                .map(|p| read_pb(&p).1)
                .collect();
            assert_eq!(got.len(), expected.len(), "{name}");
            for (g, w) in got.iter().zip(&expected) {
                assert_eq!(compare(g, w), None, "{name} set {k}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked} data sets");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writing is deterministic and reading keeps everything: the same bytes again, the same
/// graph text, mode, epilogue and source.
#[test]
fn an_artifact_round_trips_byte_for_byte() {
    let g = ladder::models::example_encoder().unwrap();
    for mode in [Mode::Native, Mode::Reference, Mode::Shaders] {
        let a = Artifact::lower(&g, mode, "encoder").unwrap();
        let bytes = a.to_bytes();
        let b = Artifact::from_bytes(&bytes, &Limits::default()).unwrap();
        assert_eq!(b.to_bytes(), bytes);
        assert_eq!(ladder::text::print(&b.graph), ladder::text::print(&a.graph));
        assert_eq!((b.mode, b.source.as_str(), b.format_version), (mode, "encoder", FORMAT_VERSION));
        assert_eq!(b.epilogue, a.epilogue);
        assert!(b.writer.starts_with("ladder "), "{}", b.writer);
    }
}

/// A model that writes its input in place: the artifact keeps the epilogue, and a plan from
/// it (native, or the interpreter running the stored graph) returns the input's new contents
/// as the model's plan does.
#[test]
fn an_artifact_keeps_the_inputs_its_model_writes() {
    let g = parse(&std::fs::read_to_string(root().join("tests/artifacts/v1/inplace.lad")).unwrap());
    let x = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap();
    let y = Tensor::from_f32(&[3], vec![10.0, 20.0, 30.0]).unwrap();
    for mode in [Mode::Native, Mode::Reference, Mode::Shaders] {
        let a = round_trip(&Artifact::lower(&g, mode, "inplace").unwrap());
        assert_eq!(a.epilogue.mutations.len(), 1);
        for options in [native(1), interp()] {
            let want = compile(&g, &options).unwrap().run(&[x.clone(), y.clone()]).unwrap();
            let got = a.compile(&options).unwrap().run(&[x.clone(), y.clone()]).unwrap();
            assert_eq!(got.outputs.len(), 1, "{mode:?} {:?}", options.backend);
            assert_eq!(got.mutated_inputs.len(), 1);
            assert_eq!(got.mutated_inputs[0].0, 0);
            assert_eq!(got.mutated_inputs[0].1.as_f32(), Some(&[11.0f32, 22.0, 33.0][..]));
            let close = |g: &Tensor, w: &Tensor| compare(g, w).is_none();
            assert!(close(&got.outputs[0], &want.outputs[0]), "{mode:?} {:?}", options.backend);
        }
        // Through a session, only the model's own output is an output.
        let s = Session::new(Model::from_artifact(a), native(1)).unwrap();
        assert_eq!(s.model().output_names(), vec!["c".to_string()]);
    }
}

/// The files of every format version this ladder has written (`tests/artifacts/vN/`, each
/// beside the text of the graph it was compiled from) load and give that graph's outputs:
/// the promise that a file written once keeps loading.
#[test]
fn the_files_of_every_format_version_load_and_run() {
    let mut files = 0;
    for version in 1..=FORMAT_VERSION {
        let dir = root().join(format!("tests/artifacts/v{version}"));
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (each format version keeps its files)", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "ladder"))
            .collect();
        entries.sort();
        assert!(!entries.is_empty(), "no files of version {version}");
        for path in entries {
            let a = Artifact::load(&path, &Limits::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(a.format_version, version, "{}", path.display());
            let source = parse(&std::fs::read_to_string(path.with_extension("lad")).unwrap());
            // Inputs of every symbolic size set to 3.
            let inputs: Vec<Tensor> = source
                .inputs()
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let ty = source.ty(v);
                    let dims: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_const().unwrap_or(3) as usize).collect();
                    random_tensor(&mut Rng::new(7 + i as u64), ty.dtype, &dims).unwrap()
                })
                .collect();
            let want = compile(&source, &interp()).unwrap().run(&inputs).unwrap();
            for options in [native(1), interp()] {
                let got = a.compile(&options).unwrap().run(&inputs).unwrap();
                assert_eq!(got.outputs.len(), want.outputs.len(), "{}", path.display());
                for (g, w) in got.outputs.iter().zip(&want.outputs) {
                    assert_eq!(compare(g, w), None, "{} on {:?}", path.display(), options.backend);
                }
                assert_eq!(got.mutated_inputs.len(), want.mutated_inputs.len());
            }
            files += 1;
        }
    }
    assert!(files >= 2);
}

fn example_bytes() -> Vec<u8> {
    Artifact::lower(&ladder::models::example_encoder().unwrap(), Mode::Native, "encoder").unwrap().to_bytes()
}

/// Recomputes the checksum after an edit, so the edit reaches the checks behind it.
fn reseal(bytes: &mut [u8]) {
    let crc = crc32fast::hash(&bytes[16..]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
}

fn read(bytes: &[u8]) -> Result<Artifact, ArtifactError> {
    Artifact::from_bytes(bytes, &Limits::untrusted())
}

fn error(bytes: &[u8]) -> String {
    match read(bytes) {
        Ok(_) => panic!("damaged bytes read as an artifact"),
        Err(e) => e.to_string(),
    }
}

/// The offset and length fields of section `tag` in the table.
fn entry(bytes: &[u8], tag: &[u8; 4]) -> usize {
    let n = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    (0..n).map(|k| 24 + 24 * k).find(|&at| &bytes[at..at + 4] == tag).unwrap()
}

fn section(bytes: &[u8], tag: &[u8; 4]) -> std::ops::Range<usize> {
    let at = entry(bytes, tag);
    let offset = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) as usize;
    let len = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap()) as usize;
    offset..offset + len
}

#[test]
fn a_newer_format_version_is_refused_naming_both_versions() {
    let mut bytes = example_bytes();
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    match read(&bytes) {
        Err(ArtifactError::Newer { file, supported }) => {
            assert_eq!((file, supported), (FORMAT_VERSION + 1, FORMAT_VERSION))
        }
        other => panic!("{other:?}"),
    }
    let message = error(&bytes);
    assert!(message.contains(&format!("format version {}", FORMAT_VERSION + 1)), "{message}");
    assert!(message.contains(&format!("1 to {FORMAT_VERSION}")), "{message}");
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(read(&bytes), Err(ArtifactError::VersionZero)));
    assert!(matches!(read(b"graph g() {}"), Err(ArtifactError::NotAnArtifact)));
}

/// Every prefix of a file and every single flipped byte is an error (the checksum or a check
/// before it), never a panic.
#[test]
fn every_truncation_and_every_flipped_byte_is_an_error() {
    let bytes = std::fs::read(root().join("tests/artifacts/v1/inplace.ladder")).unwrap();
    assert!(read(&bytes).is_ok());
    for len in 0..bytes.len() {
        assert!(read(&bytes[..len]).is_err(), "prefix of {len} bytes");
    }
    for at in 0..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        assert!(read(&b).is_err(), "byte {at} flipped");
    }
    let mut b = bytes.clone();
    b[20] ^= 1;
    assert!(error(&b).contains("checksum mismatch"), "{}", error(&b));
}

/// Structural damage behind a valid checksum: each is the error that names it.
#[test]
fn damage_behind_a_valid_checksum_is_named() {
    let good = example_bytes();
    let damaged = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        edit(&mut b);
        reseal(&mut b);
        error(&b)
    };
    let has = |m: String, want: &str| assert!(m.contains(want), "`{m}` does not say `{want}`");
    has(damaged(&|b| b[16..20].copy_from_slice(&1000u32.to_le_bytes())), "1000 sections, above 64");
    has(damaged(&|b| b[16..20].copy_from_slice(&5u32.to_le_bytes())), "claims bytes");
    let at = entry(&good, b"DATA");
    has(damaged(&|b| b[at + 16..at + 24].copy_from_slice(&u64::MAX.to_le_bytes())), "section `DATA` claims bytes");
    has(damaged(&|b| b[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes())), "beyond the file");
    has(damaged(&|b| b[at..at + 4].copy_from_slice(b"GRPH")), "section `GRPH` appears twice");
    let meta = entry(&good, b"META");
    has(damaged(&|b| b[meta..meta + 4].copy_from_slice(b"XXXX")), "no `META` section");
    // The blob table: a count far beyond its bytes; an unknown dtype; a length that is not
    // the shape's.
    let table = section(&good, b"BLOB");
    has(damaged(&|b| b[table.start..table.start + 4].copy_from_slice(&u32::MAX.to_le_bytes())), "truncated");
    let name_len = u32::from_le_bytes(good[table.start + 4..table.start + 8].try_into().unwrap()) as usize;
    let dtype_at = table.start + 8 + name_len + 4;
    has(damaged(&|b| b[dtype_at..dtype_at + 3].copy_from_slice(b"q99")), "unknown dtype `q99`");
    let rank_at = dtype_at + 3;
    let rank = u32::from_le_bytes(good[rank_at..rank_at + 4].try_into().unwrap()) as usize;
    let dim_at = rank_at + 4;
    has(damaged(&|b| b[dim_at..dim_at + 8].copy_from_slice(&u64::MAX.to_le_bytes())), "too large");
    has(damaged(&|b| b[dim_at..dim_at + 8].copy_from_slice(&7u64.to_le_bytes())), "the table says");
    let len_at = dim_at + 8 * rank + 8;
    has(
        damaged(&|b| {
            // A blob claiming bytes past DATA (its shape grown to match).
            let big: u64 = 1 << 20;
            b[dim_at..dim_at + 8].copy_from_slice(&(big / 4).to_le_bytes());
            for r in 1..rank {
                b[dim_at + 8 * r..dim_at + 8 * r + 8].copy_from_slice(&1u64.to_le_bytes());
            }
            b[len_at..len_at + 8].copy_from_slice(&big.to_le_bytes());
        }),
        "beyond DATA",
    );
    // META lines and the graph text.
    let m = section(&good, b"META");
    let meta_text = std::str::from_utf8(&good[m.clone()]).unwrap().to_string();
    let with_meta = |text: &str| {
        damaged(&|b| {
            let mut t = text.as_bytes().to_vec();
            t.resize(m.len(), b'\n');
            b[m.clone()].copy_from_slice(&t);
        })
    };
    has(with_meta(&meta_text.replace("mode = native", "mode = turbo")), "unknown mode `turbo`");
    has(
        with_meta(&meta_text.replace("rung = recovered", "rung = prims    ")),
        "rung `prims    ` does not go with mode",
    );
    has(with_meta(&meta_text.replace("source = encoder", "mutation = 09 09")), "the graph has 1 inputs and 1 outputs");
    has(with_meta(&meta_text.replace("mode = native\n", "")), "no `mode` line");
    let gr = section(&good, b"GRPH");
    has(damaged(&|b| b[gr.start + 6] = b'('), "the graph text, line 1");
    let text = std::str::from_utf8(&good[gr.clone()]).unwrap();
    let declared = text.find("f32[32]").unwrap();
    has(damaged(&|b| b[gr.start + declared + 5] = b'1'), "is declared f32[31] but its data is f32[32]");
    let blob_name = text.find("blob @").unwrap() + 6;
    has(damaged(&|b| b[gr.start + blob_name] = b'Z'), "has no data beside the text");
}

/// A file above `max_file_bytes`, and a blob above `max_tensor_bytes`, are refused by size
/// before their bytes are used.
#[test]
fn limits_bound_the_file_and_each_blob() {
    let bytes = example_bytes();
    let small = Limits { max_file_bytes: 1000, ..Limits::default() };
    let e = Artifact::from_bytes(&bytes, &small).unwrap_err().to_string();
    assert!(e.contains("max_file_bytes"), "{e}");
    let small = Limits { max_tensor_bytes: 64, ..Limits::default() };
    let e = Artifact::from_bytes(&bytes, &small).unwrap_err().to_string();
    assert!(e.contains("max_tensor_bytes"), "{e}");
}

/// `ladder compile` writes an artifact that `ladder run` loads, with the model's outputs.
#[test]
fn ladder_compile_then_run() {
    let dir = std::env::temp_dir().join(format!("ladder-artifact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("encoder.ladder");
    let ladder = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_ladder")).args(args).output().unwrap();
    let c = ladder(&["compile", "-o", out.to_str().unwrap()]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let said = String::from_utf8_lossy(&c.stdout);
    assert!(said.contains("format version 1") && said.contains("from the artifact"), "{said}");
    let from_artifact = ladder(&["run", out.to_str().unwrap(), "--dim", "seq=5"]);
    let from_model = ladder(&["run", "--dim", "seq=5"]);
    assert!(from_artifact.status.success(), "{}", String::from_utf8_lossy(&from_artifact.stderr));
    assert_eq!(from_artifact.stdout, from_model.stdout);
    let again = ladder(&["compile", out.to_str().unwrap(), "-o", dir.join("x.ladder").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a compiled artifact"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `artifact` fuzz target's checks over its seed corpus and a few thousand deterministic
/// mutations of it (bytes flipped, set, cut and repeated; the target recomputes the checksum
/// itself), so every test run covers what the fuzzer would find first.
#[test]
fn the_fuzz_checks_pass_on_the_seeds_and_their_mutations() {
    let dir = root().join("fuzz/corpus/artifact");
    let mut seeds: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    seeds.sort();
    assert!(seeds.len() >= 2);
    let mut rng = Rng::new(11);
    let mut pick = |n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    for seed in &seeds {
        ladder::fuzzing::check_artifact(seed);
        for _ in 0..1500 {
            let mut b = seed.clone();
            for _ in 0..1 + pick(4) {
                let at = pick(b.len());
                match pick(4) {
                    0 => b[at] ^= 1 << pick(8),
                    1 => b[at] = [0, 0xff, 0x7f, 0x80, b'\n', b' '][pick(6)],
                    2 => b.truncate(at),
                    _ => {
                        let end = (at + 1 + pick(64)).min(b.len());
                        let piece = b[at..end].to_vec();
                        b.splice(at..at, piece);
                    }
                }
                if b.is_empty() {
                    break;
                }
            }
            ladder::fuzzing::check_artifact(&b);
        }
    }
}
