//! Replays the `shape_algebra` fuzz target's check (`ladder::fuzzing::check_dims`) over its
//! seed corpus (fuzz/corpus/shape_algebra) and over a few thousand deterministic mutations of
//! it, so every test run exercises what the fuzzer checks. The seeds named `seed_*` are the
//! programs of [`seed_programs`], written out (`LADDER_REGEN_SEEDS=1` rewrites them); a
//! campaign may add others beside them.

use std::path::PathBuf;

use ladder::fuzzing::{check_dims, decode_dims, encode_dims, DimOp, DimStats, MAX_DIMS_INPUT};
use ladder::models::Rng;

use DimOp::*;

const A: DimOp = Sym(0);
const B: DimOp = Sym(1);
const N: DimOp = Sym(2);
const SEQ: DimOp = Sym(3);

/// A few points: small values, and large ones where sizes overflow.
const SMALL: [[u64; 4]; 3] = [[2, 3, 5, 7], [16, 1, 128, 9], [3, 100, 2, 64]];
const LARGE: [[u64; 4]; 3] = [[1 << 31, 2, 1 << 32, 3], [u64::MAX, 1, 1 << 62, 1 << 63], [i64::MAX as u64, 128, 2, 1]];

/// A seed: its name, its points and its program.
type Seed = (&'static str, &'static [[u64; 4]], Vec<DimOp>);

/// The seed corpus: one small program per operation and edge, named for what it covers.
fn seed_programs() -> Vec<Seed> {
    let nested_mins: Vec<DimOp> =
        std::iter::once(A).chain((0..70).flat_map(|i| [Sym(1 + i % 3), Min])).chain([Text]).collect();
    let nested_floors: Vec<DimOp> =
        std::iter::once(A).chain((0..40).flat_map(|i| [Sym(i % 4), Add, Const(3), FloorDiv])).collect();
    // min(max(min(max(a, b), n), b), n)...: no argument dominates another, so the nodes grow
    // until the algebra refuses.
    let alternating_extrema: Vec<DimOp> = std::iter::once(A).chain((0..60).flat_map(|_| [B, Min, N, Max])).collect();
    vec![
        ("symbol", &SMALL, vec![A]),
        (
            "constants",
            &SMALL,
            vec![Const(0), Const(7), Const(123_456_789_012), Const(i64::MAX as u64), Const(1 << 63), Const(u64::MAX)],
        ),
        ("add", &SMALL, vec![A, B, Add, N, Add]),
        ("sub_symbolic_negative", &SMALL, vec![A, Const(5), Sub]),
        ("sub_negative_constant", &SMALL, vec![Const(3), Const(5), Sub, A, Add, Text]),
        ("sub_cancels", &SMALL, vec![A, B, Mul, B, A, Mul, Sub]),
        ("mul", &SMALL, vec![A, B, Mul, N, Mul, SEQ, Mul]),
        ("mul_sums", &SMALL, vec![A, B, Add, N, Const(1), Sub, Mul, Text]),
        ("floor_div", &SMALL, vec![A, Const(2), Mul, Const(2), Add, Const(2), FloorDiv, Text]),
        ("floor_div_nested", &SMALL, vec![A, Const(2), FloorDiv, Const(3), FloorDiv, N, Add, Const(5), FloorDiv, Text]),
        ("floor_div_by_zero", &SMALL, vec![A, Const(0), FloorDiv]),
        ("floor_div_symbolic_exact", &SMALL, vec![A, B, Mul, Const(6), Mul, B, FloorDiv]),
        ("floor_div_symbolic_inexact", &SMALL, vec![A, Const(1), Add, B, FloorDiv]),
        ("floor_div_negative_numerator", &SMALL, vec![N, Const(9), Sub, Const(4), FloorDiv]),
        ("floor_div_huge_divisor", &LARGE, vec![Const(0), A, Const(5), Mul, Sub, Const(1 << 62), FloorDiv]),
        ("floor_div_divisor_past_i64", &SMALL, vec![A, Const(1 << 63), FloorDiv]),
        ("ceil_div", &SMALL, vec![N, Const(4), CeilDiv, SEQ, Const(3), Mul, Const(2), CeilDiv, Text]),
        ("ceil_div_by_zero", &SMALL, vec![A, Const(0), CeilDiv]),
        ("ceil_div_symbolic", &SMALL, vec![A, B, Mul, A, CeilDiv]),
        ("rem", &SMALL, vec![SEQ, Const(3), Rem, A, Const(2), Rem, Add, Text]),
        ("rem_negative_numerator", &SMALL, vec![A, Const(7), Sub, Const(3), Rem, Text]),
        ("rem_symbolic", &SMALL, vec![A, B, Mul, B, Rem]),
        ("rem_huge_divisor", &LARGE, vec![A, Const(1 << 62), Rem]),
        ("min", &SMALL, vec![A, B, Min, N, N, Const(1), Add, Min, Const(3), Const(5), Min]),
        ("min_constant", &SMALL, vec![SEQ, Const(512), Min, Text]),
        ("max", &SMALL, vec![A, Const(1), Max, A, Const(2), Sub, Const(1), Max]),
        ("max_negative_arguments", &SMALL, vec![Const(5), A, Sub, Const(0), Const(2), Sub, Max, Text]),
        ("min_max_nested", &SMALL, vec![A, B, Min, N, Max, SEQ, Min, A, Max]),
        ("text", &SMALL, vec![A, B, Add, Const(3), Mul, N, Const(2), FloorDiv, Sub, Text]),
        ("text_nested_too_deep", &SMALL, nested_mins),
        ("nested_quotients", &SMALL, nested_floors),
        ("compare", &SMALL, vec![A, A, Const(1), Add, A, A, Mul, Const(1), A, Const(2), FloorDiv]),
        ("stack_ops", &SMALL, vec![A, B, Swap, Sub, Dup, Mul, Drop, N, Dup, Add]),
        ("sum_of_symbols", &SMALL, vec![Sum, Dup, Mul, Text]),
        ("pow", &SMALL, vec![A, Pow(3), B, Const(1), Add, Pow(2), Mul, Text, N, Pow(0)]),
        ("large_points", &LARGE, vec![A, B, Mul, N, SEQ, Add, Min, Text]),
        ("overflow", &SMALL, vec![Const(i64::MAX as u64), A, Mul, Const(i64::MAX as u64), Add]),
        ("overflow_constants", &SMALL, vec![Const(u64::MAX), Const(2), Add, Const(1 << 63), A, Mul]),
        ("too_complex_terms", &SMALL, vec![Sum, Const(1), Add, Pow(8)]),
        ("too_complex_degree", &SMALL, vec![A, Pow(8), B, Mul]),
        ("too_complex_product_of_sums", &SMALL, vec![Sum, Dup, Mul, Dup, Mul, Sum, Mul, Text, Sum, Mul, Text]),
        ("too_complex_nodes", &SMALL, alternating_extrema),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/shape_algebra")
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
        .unwrap_or_else(|e| panic!("{}: {e}", corpus_dir().display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() >= seed_programs().len(), "the seed corpus has {} files", out.len());
    out
}

#[test]
fn committed_seeds_are_current() {
    let regen = std::env::var_os("LADDER_REGEN_SEEDS").is_some();
    for (name, points, ops) in seed_programs() {
        let bytes = encode_dims(points, &ops);
        assert!(bytes.len() <= MAX_DIMS_INPUT, "{name} is {} bytes", bytes.len());
        assert_eq!(decode_dims(&bytes).ops, ops, "{name} does not decode to its program");
        let path = corpus_dir().join(format!("seed_{name}"));
        if regen {
            std::fs::create_dir_all(corpus_dir()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(committed == bytes, "{name} differs from its program (LADDER_REGEN_SEEDS=1 rewrites it)");
    }
}

fn add(total: &mut DimStats, s: DimStats) {
    total.dims += s.dims;
    total.too_complex += s.too_complex;
    total.errors += s.errors;
    total.parsed += s.parsed;
    total.proofs += s.proofs;
}

#[test]
fn seeds_pass_the_checks() {
    let mut total = DimStats::default();
    for (name, data) in seeds() {
        let stats = check_dims(&data);
        eprintln!("{name}: {stats:?}");
        add(&mut total, stats);
    }
    eprintln!("{total:?}");
    // The seeds reach every kind of check.
    assert!(total.dims >= 200 && total.parsed >= 10 && total.proofs >= 100, "{total:?}");
    assert!(total.too_complex >= 3 && total.errors >= 10, "{total:?}");
}

/// Byte mutations: flip a bit, truncate, delete or duplicate a range, splice in part of
/// another seed, insert or overwrite an instruction byte.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[(String, Vec<u8>)]) {
    let pos = |rng: &mut Rng, len: usize| rng.below(len as u64 + 1) as usize;
    let kind = rng.below(7);
    if super::common::shared_mutation(rng, data, seeds, kind, 8, 32) {
        return;
    }
    match kind {
        4 if !data.is_empty() => {
            let a = pos(rng, data.len() - 1);
            let b = (a + 1 + rng.below(16) as usize).min(data.len());
            let copy = data[a..b].to_vec();
            data.splice(b..b, copy);
        }
        5 => {
            let at = pos(rng, data.len());
            data.insert(at, rng.below(256) as u8);
        }
        _ if !data.is_empty() => {
            let i = pos(rng, data.len() - 1);
            data[i] = rng.below(256) as u8;
        }
        _ => data.push(rng.below(256) as u8),
    }
}

#[test]
fn mutated_seeds_pass_the_checks() {
    let seeds = seeds();
    // LADDER_FUZZ_CASES / LADDER_FUZZ_SEED run a longer or different campaign locally.
    let env = |k: &str, default: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let cases = env("LADDER_FUZZ_CASES", 3000) as usize;
    let mut rng = Rng::new(env("LADDER_FUZZ_SEED", 0xd1a5));
    let mut total = DimStats::default();
    for case in 0..cases {
        let mut data = seeds[case % seeds.len()].1.clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut data, &seeds);
        }
        // A panic here is a finding; its message lists the decoded program.
        add(&mut total, check_dims(&data));
    }
    eprintln!("{cases} cases: {total:?}");
    assert!(total.dims >= cases && total.parsed >= cases / 20 && total.proofs >= cases, "{total:?}");
}

/// Inputs the fuzzer found that broke the check itself.
#[test]
fn regressions_found_by_fuzzing() {
    // `a / (a*a - a*a)`, a division by the constant 0, where the divisor's reference
    // overflows at the large point: the division error is right, though the points do not
    // show the zero.
    let huge = [u64::MAX; 4];
    check_dims(&encode_dims(&[huge], &[Text, A, A, Mul, Dup, Sub, FloorDiv]));
    // `a mod (0 - a)`: dividing `a` by `0 - a` exactly gives the constant -1, which as a dim is
    // an error, though the remainder (0) is not negative.
    check_dims(&encode_dims(&SMALL, &[A, Const(0), A, Sub, Rem]));
}
