//! Replays the `onnx_import` fuzz target's checks (`ladder::fuzzing::check_onnx`) over its seeds
//! (fuzz/corpus/onnx_import, the hostile corpus and the fixtures) and over a few thousand
//! deterministic mutations of them, so every test run exercises what the fuzzer checks.

use std::path::PathBuf;

use ladder::fuzzing::check_onnx;
use ladder::models::Rng;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["fuzz/corpus/onnx_import", "tests/onnx_hostile"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "onnx") {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "only {} seeds", out.len());
    out
}

#[test]
fn seeds_pass_the_checks() {
    for (name, data) in seeds() {
        eprintln!("{name}");
        check_onnx(&data);
    }
}

/// Protobuf-aware mutations: flip bits, truncate, splice, and overwrite varints with edge
/// values so that lengths, dims and counts take extreme values.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[(String, Vec<u8>)]) {
    let pos = |rng: &mut Rng, len: usize| rng.below(len as u64 + 1) as usize;
    let kind = rng.below(7);
    if super::common::shared_mutation(rng, data, seeds, kind, 8, 64) {
        return;
    }
    match kind {
        4 if !data.is_empty() => {
            // Overwrite a byte with a varint edge value.
            let edges: [&[u8]; 6] = [
                &[0x00],
                &[0x7f],
                &[0xff, 0xff, 0xff, 0xff, 0x0f],
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                &[0x80, 0x80, 0x80, 0x80, 0x10],
                &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ];
            let i = pos(rng, data.len() - 1);
            let e = edges[rng.below(edges.len() as u64) as usize];
            data.splice(i..i + 1, e.iter().copied());
        }
        5 if !data.is_empty() => {
            let i = pos(rng, data.len() - 1);
            data[i] = rng.below(256) as u8;
        }
        _ => {
            let at = pos(rng, data.len());
            let b = rng.below(256) as u8;
            data.insert(at, b);
        }
    }
}

#[test]
fn mutated_seeds_pass_the_checks() {
    let seeds = seeds();
    let mut rng = Rng::new(0x0bad_5eed);
    for round in 0..10_000 {
        let mut data = seeds[round % seeds.len()].1.clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut data, &seeds);
        }
        check_onnx(&data);
    }
}
