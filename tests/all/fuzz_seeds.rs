//! Replays the `parse_text` fuzz target's checks (`ladder::fuzzing::check_text`) over its seed
//! corpus and over a few thousand deterministic mutations of it, so that every test run
//! exercises what the fuzzer checks, without cargo-fuzz or a nightly toolchain.

use std::path::PathBuf;

use ladder::fuzzing::check_text;
use ladder::models::Rng;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse_text");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "lad"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() >= 10, "the seed corpus has {} files", out.len());
    out
}

#[test]
fn seeds_pass_the_checks() {
    for (name, data) in seeds() {
        eprintln!("{name}");
        check_text(&data);
    }
}

#[test]
fn every_seed_parses() {
    // A seed that does not parse only exercises the parser's error paths.
    // (The seeds that use the shape, linalg, norm and in-place families need them merged.)
    for (name, data) in seeds() {
        if let Err(e) = ladder::text::parse(&String::from_utf8_lossy(&data)) {
            panic!("seed {name} does not parse: {e}");
        }
    }
}

/// Replacement tokens by class, so that a swap often keeps the text well-formed: numbers at
/// the edges, dtypes, dims, op names; plus raw punctuation and fragments for the rest.
struct Dictionary {
    numbers: Vec<&'static str>,
    dtypes: Vec<&'static str>,
    symbols: Vec<&'static str>,
    ops: Vec<&'static str>,
    raw: Vec<&'static str>,
}

fn dictionary() -> Dictionary {
    Dictionary {
        numbers: vec![
            "0",
            "1",
            "2",
            "3",
            "5",
            "7",
            "65536",
            "4294967296",
            "9223372036854775807",
            "18446744073709551615",
            "99999999999999999999",
            "0x10",
            "0.5",
            "1e308",
            "1e-320",
            "nan",
            "inf",
        ],
        dtypes: ladder::DType::ALL.iter().map(|d| d.name()).collect(),
        symbols: vec!["n", "m", "batch", "seq", "n*n", "n - 5", "2*n + 1", "n*m", "0"],
        ops: ladder::ops::all_specs().map(|s| s.name).collect(),
        raw: vec![
            "-",
            "-1",
            "[",
            "]",
            "(",
            ")",
            "{",
            "}",
            ",",
            ":",
            "=",
            "%",
            "@",
            "%0",
            "%1",
            "%2",
            "\"",
            ";",
            "\n",
            "true",
            "false",
            "as",
            "return",
            "const",
            "blob @z: f32[1] = [1.0]\n",
            "axis=-1",
            "dtype=i64",
            "elided",
            "nan:0x7ff0000000000001",
        ],
    }
}

/// Removes the optional `: type` annotations of node lines, so that mutations that change a
/// type do not all die on a stale annotation.
fn strip_annotations(data: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(data);
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let is_node = line.trim_start().starts_with('%') && line.contains(" = ");
        match line.rfind(" : ") {
            Some(i) if is_node => {
                out.push_str(&line[..i]);
                if line.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(line),
        }
    }
    out.into_bytes()
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[(String, Vec<u8>)], dict: &Dictionary) {
    let pos = |rng: &mut Rng, len: usize| rng.below(len as u64 + 1) as usize;
    let pick = |rng: &mut Rng, words: &[&'static str]| words[rng.below(words.len() as u64) as usize];
    let kind = rng.below(10);
    if super::common::shared_mutation(rng, data, seeds, kind, 16, 64) {
        return;
    }
    match kind {
        // Insert a raw token.
        4 => {
            let at = pos(rng, data.len());
            data.splice(at..at, pick(rng, &dict.raw).bytes());
        }
        // Duplicate a line.
        5 => {
            let lines: Vec<&[u8]> = data.split_inclusive(|&c| c == b'\n').collect();
            if lines.is_empty() {
                return;
            }
            let l = lines[rng.below(lines.len() as u64) as usize].to_vec();
            let at = pos(rng, data.len());
            data.splice(at..at, l);
        }
        // Replace a number, dtype, op name or dim symbol with another of its class.
        _ => {
            let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
            let class_of = |w: &str| -> Option<&Vec<&'static str>> {
                if w.starts_with(|c: char| c.is_ascii_digit()) {
                    Some(&dict.numbers)
                } else if dict.dtypes.contains(&w) {
                    Some(&dict.dtypes)
                } else if dict.ops.contains(&w) {
                    Some(&dict.ops)
                } else if dict.symbols.contains(&w) {
                    Some(&dict.symbols)
                } else {
                    None
                }
            };
            let words: Vec<(usize, usize)> = (0..data.len())
                .filter(|&i| is_word(data[i]) && (i == 0 || !is_word(data[i - 1]) && !b"%@".contains(&data[i - 1])))
                .map(|i| (i, data[i..].iter().position(|&c| !is_word(c)).map_or(data.len(), |k| i + k)))
                .filter(|&(a, b)| class_of(&String::from_utf8_lossy(&data[a..b])).is_some())
                .collect();
            if words.is_empty() {
                return;
            }
            let (at, end) = words[rng.below(words.len() as u64) as usize];
            let Some(class) = class_of(&String::from_utf8_lossy(&data[at..end])) else { return };
            data.splice(at..end, pick(rng, class).bytes());
        }
    }
}

#[test]
fn mutated_seeds_pass_the_checks() {
    let seeds = seeds();
    let dict = dictionary();
    // LADDER_FUZZ_CASES / LADDER_FUZZ_SEED run a longer or different campaign locally.
    let env = |k: &str, default: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let cases = env("LADDER_FUZZ_CASES", 2000) as usize;
    let mut rng = Rng::new(env("LADDER_FUZZ_SEED", 0x5eed));
    let mut parsed = 0;
    for case in 0..cases {
        let mut data = seeds[case % seeds.len()].1.clone();
        if rng.below(2) == 0 {
            data = strip_annotations(&data);
        }
        let rounds = if rng.below(5) < 3 { 1 } else { 2 + rng.below(2) };
        for _ in 0..rounds {
            mutate(&mut rng, &mut data, &seeds, &dict);
        }
        if ladder::text::parse(&String::from_utf8_lossy(&data)).is_ok() {
            parsed += 1;
        }
        // A panic here is a finding; the message holds the offending text.
        check_text(&data);
    }
    // The mutations must keep a share of cases valid, or the run checks nothing past the parser
    // (about 10% parse when only the elementwise family is present; more with every family).
    assert!(parsed * 20 >= cases, "only {parsed} of {cases} mutated cases parsed");
}

#[test]
fn regressions_found_by_fuzzing() {
    use ladder::text::{parse, print};
    // A dim whose highest-degree term is negative printed as `-320*n + 65537`, which the
    // parser (no unary minus) rejected; a dim with no positive term printed as `-n`.
    let src = "graph g(%x: f32[65537 - 320*n], %y: f32[0 - n + m]) {\n  return %x, %y\n}";
    let g = parse(src).unwrap();
    assert_eq!(g.ty(g.inputs()[0]).to_string(), "f32[65537 - 320*n]");
    assert_eq!(g.ty(g.inputs()[1]).to_string(), "f32[m - n]");
    let g = parse("graph g(%x: f32[0 - n]) {\n  return %x\n}").unwrap();
    assert_eq!(g.ty(g.inputs()[0]).to_string(), "f32[0 - n]");
    assert_eq!(parse(&print(&g)).unwrap(), g);
    // Empty names parsed but did not verify.
    let e = parse("graph g(%x: f32[2]) {\n  return %x as \"\"\n}").unwrap_err();
    assert_eq!((e.line, e.message.contains("must not be empty")), (2, true), "{e}");
    let e = parse("graph g(%\"\": f32[2]) {\n  return\n}").unwrap_err();
    assert_eq!((e.line, e.col, e.message.contains("must not be empty")), (1, 9, true), "{e}");
}
