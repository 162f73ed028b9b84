//! The `ladder` binary end to end: `ops --json`, `run` (outputs read back from .npy and
//! compared with the interpreter), `dump` (round-trips through the parser), and every error
//! path (non-zero exit, one clear message on stderr, never a panic).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ladder::interp::{self, Options};
use ladder::{DType, Tensor, TensorData};
use npyz::WriterBuilder;

fn ladder(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ladder")).args(args).output().expect("the ladder binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a successful run and returns its stdout.
fn ok(args: &[&str]) -> String {
    let o = ladder(args);
    assert!(o.status.success(), "ladder {args:?} failed:\n{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    stdout(&o)
}

/// Asserts a failed run with one `error:` message containing every `needle`; returns stderr.
fn fails(args: &[&str], needles: &[&str]) -> String {
    let o = ladder(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "ladder {args:?} should fail; stdout:\n{}", stdout(&o));
    assert!(!err.contains("panicked"), "ladder {args:?} panicked:\n{err}");
    assert!(err.contains("error"), "ladder {args:?}: no error message:\n{err}");
    for n in needles {
        assert!(err.contains(n), "ladder {args:?}: stderr lacks {n:?}:\n{err}");
    }
    err
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ladder-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn write_npy<T: npyz::AutoSerialize>(path: &Path, shape: &[u64], values: &[T]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(f).begin_nd().unwrap();
    w.extend(values.iter()).unwrap();
    w.finish().unwrap();
}

/// Reads an .npy file written by `ladder run --out` into a Tensor.
fn read_npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap();
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape: Vec<usize> = f.shape().iter().map(|&d| d as usize).collect();
    let descr = f.dtype().descr().trim_matches('\'').to_string();
    let data = match &descr[1..] {
        "f4" => TensorData::F32(f.into_vec().unwrap()),
        "f8" => TensorData::F64(f.into_vec().unwrap()),
        "i4" => TensorData::I32(f.into_vec().unwrap()),
        "i8" => TensorData::I64(f.into_vec().unwrap()),
        "b1" => TensorData::Bool(f.into_vec().unwrap()),
        other => panic!("unexpected dtype {other}"),
    };
    Tensor::new(shape, data).unwrap()
}

// Elementwise ops only, so this model runs on every build.
const SMALL: &str = "\
; a small model with float, int and bool outputs
blob @w: f32[3] = [0.5, -1.0, 2.0]
graph small(%x: f32[n, 3], %k: i64[n, 3], %m: bool[3]) {
  %w = const @w
  %y = mul(%x, %w)
  %e = exp(%y)
  %k2 = add(%k, %k)
  %big = gt(%x, %w)
  %sel = where(%m, %e, %x)
  return %e as expo, %k2 as twice, %big, %sel as \"sel/out\"
}
";

fn small_model(dir: &Path) -> PathBuf {
    let p = dir.join("small.lad");
    std::fs::write(&p, SMALL).unwrap();
    p
}

#[test]
fn ops_json_lists_every_op_with_its_coverage() {
    let text = ok(&["ops", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("ops --json is JSON");
    let ops = v.as_array().expect("a JSON array");
    let mut counts = std::collections::HashMap::new();
    for op in ops {
        let name = op["name"].as_str().expect("name is a string");
        let rung = op["rung"].as_str().expect("rung is a string");
        assert!(["high", "prim", "opaque"].contains(&rung), "{name}: rung {rung}");
        *counts.entry(rung.to_string()).or_insert(0) += 1;
        for key in ["interp", "decomp", "vjp", "cpu", "cpu_native", "vulkan"] {
            assert!(op[key].is_boolean(), "{name}: `{key}` is not a bool");
        }
        assert_eq!(op["interp"], true, "{name}: every op has an interpreter implementation");
        if rung != "high" {
            assert_eq!(op["decomp"], true, "{name}: prims and opaque ops are on the prims rung already");
            assert_eq!(op["cpu"], true, "{name}: compiled CPU plans run every prim");
        } else if name == "lstm" || name == "max_pool2d" {
            assert_eq!(op["cpu_native"], true, "{name}: native mode keeps it whole for its library kernel");
        } else {
            assert_eq!(op["cpu_native"], false, "{name}: other high-level ops never reach the scheduler");
        }
        // Every op has a derivative: prims and opaque ops a rule, high-level ops through
        // their decompositions; all but `custom`, a registered kernel, which has none.
        assert_eq!(op["vjp"], name != "custom", "{name}: a derivative, or none");
        assert!(op["arity"]["min"].is_u64(), "{name}: arity");
        assert!(op["attrs"].is_array(), "{name}: attrs");
        assert!(op["doc"].as_str().is_some_and(|d| !d.is_empty()), "{name}: doc");
    }
    let rung_of = |n: &str| ops.iter().find(|o| o["name"] == n).map(|o| o["rung"].clone());
    let native = |n: &str| ops.iter().find(|o| o["name"] == n).map(|o| o["cpu_native"].clone());
    assert_eq!(native("exp"), Some(true.into()));
    assert_eq!(native("matmul"), Some(true.into()));
    assert_eq!(native("reduce_sum"), Some(true.into()));
    assert_eq!(native("pad"), Some(true.into()), "pad is a library call");
    assert_eq!(native("gather"), Some(true.into()), "gather is a library call");
    assert_eq!(rung_of("add"), Some("prim".into()));
    let attrs = &ops.iter().find(|o| o["name"] == "convert_element_type").unwrap()["attrs"];
    assert_eq!(attrs[0]["name"], "dtype");
    assert_eq!(attrs[0]["required"], true);
    // The full registry (after all op families are in).
    assert!(counts.get("high").copied().unwrap_or(0) >= 60, "high-level ops: {counts:?}");
    assert!(counts.get("prim").copied().unwrap_or(0) >= 38, "prims: {counts:?}");
    assert_eq!(rung_of("matmul"), Some("opaque".into()));
    assert_eq!(rung_of("conv"), Some("opaque".into()));
}

#[test]
fn ops_table_has_a_row_per_op() {
    let text = ok(&["ops"]);
    let header = text.lines().next().unwrap();
    for col in ["name", "rung", "arity", "attrs", "interp", "decomp", "vjp", "cpu", "vulkan", "doc"] {
        assert!(header.contains(col), "header lacks {col}: {header}");
    }
    assert!(text.lines().any(|l| l.starts_with("add ") && l.contains("prim")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("convert_element_type ") && l.contains("dtype=?")), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("input ") || l.starts_with("const ")), "sources are not listed");
}

#[test]
fn run_writes_outputs_equal_to_the_interpreter() {
    let dir = scratch("run");
    let model = small_model(&dir);
    let (x, k, m) = (dir.join("x.npy"), dir.join("k.npy"), dir.join("m.npy"));
    let xv = [0.0f32, 1.0, -2.0, 3.5, -0.25, 1.0, 0.1, 0.2, 0.3, -1.0, 0.0, 4.0];
    let kv: Vec<i64> = (0..12).map(|i| i * 7 - 20).collect();
    write_npy(&x, &[4, 3], &xv);
    write_npy(&k, &[4, 3], &kv);
    write_npy(&m, &[3], &[true, false, true]);
    let out_dir = dir.join("out");
    let inputs = [format!("x={}", s(&x)), format!("k={}", s(&k)), format!("m={}", s(&m))];
    let mut args = vec!["run", s(&model), "--backend", "interp", "--out", s(&out_dir)];
    for i in &inputs {
        args.extend(["--input", i]);
    }
    let printed = ok(&args);
    for name in ["expo", "twice", "big", "sel/out"] {
        assert!(printed.contains(&format!("{name}: ")), "summary lacks {name}:\n{printed}");
    }
    assert!(printed.contains("min "), "{printed}");

    let g = ladder::text::parse(SMALL).unwrap();
    let want = interp::run(
        &g,
        &[
            Tensor::from_f32(&[4, 3], xv.to_vec()).unwrap(),
            Tensor::from_i64(&[4, 3], kv).unwrap(),
            Tensor::from_bool(&[3], vec![true, false, true]).unwrap(),
        ],
        &Options::default(),
    )
    .unwrap();
    for (file, t) in ["expo", "twice", "big", "sel_out"].iter().zip(&want.outputs) {
        let got = read_npy(&out_dir.join(format!("{file}.npy")));
        assert!(got.bit_eq(t) && got.dtype() == t.dtype(), "{file}: wrote {got}, interpreter says {t}");
    }

    // The default backend is the compiled CPU plan: the same values up to the rounding of its
    // vectorized transcendentals (exact for the integer and bool outputs).
    let cpu_dir = dir.join("cpu");
    let mut args = vec!["run", s(&model), "--out", s(&cpu_dir)];
    for i in &inputs {
        args.extend(["--input", i]);
    }
    let o = ladder(&args);
    assert!(o.status.success() && stderr(&o).contains("cpu: "), "the default is the cpu backend:\n{}", stderr(&o));
    for (file, t) in ["expo", "twice", "big", "sel_out"].iter().zip(&want.outputs) {
        let got = read_npy(&cpu_dir.join(format!("{file}.npy")));
        assert_eq!(got.dtype(), t.dtype(), "{file}");
        for (a, b) in got.to_f64_vec().iter().zip(t.to_f64_vec()) {
            assert!(a == &b || (a - b).abs() <= 1e-6 * b.abs(), "{file}: cpu wrote {got}, interpreter says {t}");
        }
    }

    // Precise mode: float outputs are f64.
    let precise_dir = dir.join("precise");
    let mut args = vec!["run", s(&model), "--precise", "--out", s(&precise_dir)];
    for i in &inputs {
        args.extend(["--input", i]);
    }
    ok(&args);
    assert_eq!(read_npy(&precise_dir.join("expo.npy")).dtype(), DType::F64);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_inputs_follow_the_seed_and_dims() {
    let dir = scratch("seed");
    let model = small_model(&dir);
    let run = |seed: &str, out: &str, dim: &str| {
        let o = ladder(&["run", s(&model), "--seed", seed, "--dim", dim, "--out", s(&dir.join(out))]);
        assert!(o.status.success(), "{}", stderr(&o));
        read_npy(&dir.join(out).join("expo.npy"))
    };
    let a = run("7", "a", "n=5");
    let b = run("7", "b", "n=5");
    let c = run("8", "c", "n=5");
    assert_eq!(a.shape(), &[5, 3]);
    assert!(a.bit_eq(&b), "same seed, same values");
    assert!(!a.bit_eq(&c), "another seed, other values");
    // exp of (uniform in [-1, 1)) * w, with |w| <= 2: inside (e^-2, e^2).
    assert!(a.to_f64_vec().iter().all(|&v| v > (-2f64).exp() && v < 2f64.exp()), "{a}");
    // Without --dim the symbol defaults to 2, and stderr says so.
    let o = ladder(&["run", s(&model)]);
    assert!(o.status.success());
    assert!(stderr(&o).contains("`n`") && stderr(&o).contains("using 2"), "{}", stderr(&o));
    assert!(stdout(&o).contains("expo: f32[2, 3]"), "{}", stdout(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dump_round_trips_through_the_parser() {
    let dir = scratch("dump");
    let model = small_model(&dir);
    let text = ok(&["dump", s(&model)]);
    assert_eq!(ladder::text::parse(&text).unwrap(), ladder::text::parse(SMALL).unwrap());

    // Blobs over the limit are elided; such text is for reading and does not parse.
    let elided = ok(&["dump", s(&model), "--elide", "2"]);
    assert!(elided.contains("blob @w: f32[3] = elided"), "{elided}");
    let e = ladder::text::parse(&elided).unwrap_err();
    assert!(e.message.contains("elided"), "{e}");

    // Lower rungs print as graphs too: the prims rung verifies as prims and computes the same.
    let functional = ok(&["dump", s(&model), "--stage", "functional"]);
    ladder::text::parse(&functional).unwrap_or_else(|e| panic!("{e}\n{functional}"));
    let prims_text = ok(&["dump", s(&model), "--stage", "prims"]);
    let prims = ladder::text::parse(&prims_text).unwrap_or_else(|e| panic!("{e}\n{prims_text}"));
    ladder::ir::verify::verify(&prims, ladder::ir::verify::Stage::Prims).unwrap();
    let inputs = [
        Tensor::from_f32(&[2, 3], vec![0.5, -1.0, 2.0, 0.0, 3.0, -0.25]).unwrap(),
        Tensor::from_i64(&[2, 3], vec![1, -2, 3, 4, 5, 6]).unwrap(),
        Tensor::from_bool(&[3], vec![false, true, true]).unwrap(),
    ];
    let want = interp::run(&ladder::text::parse(SMALL).unwrap(), &inputs, &Options::default()).unwrap();
    let got = interp::run(&prims, &inputs, &Options::default()).unwrap();
    for (w, g) in want.outputs.iter().zip(&got.outputs) {
        assert!(w.bit_eq(g), "prims rung computes {g}, the model {w}");
    }
    fails(&["dump", s(&model), "--stage", "bogus"], &["unknown stage `bogus`", "parsed, functional, prims"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn built_in_model_runs_and_dumps() {
    // Needs the layer_norm, linear, view, transpose, attention and gelu families.
    let out = ok(&["run", "--dim", "seq=3"]);
    assert!(out.contains("y: f32[1, 3, 32]"), "{out}");
    let text = ok(&["dump", "--elide", "100000"]);
    let g = ladder::text::parse(&text).unwrap();
    assert_eq!(g, ladder::models::example_encoder().unwrap());
    assert!(ok(&["dump"]).contains("elided"));
}

#[test]
fn built_in_model_lowers_to_prims() {
    // Needs the decompositions of layer_norm, linear, view, transpose, attention and gelu.
    let prims = ladder::text::parse(&ok(&["dump", "--stage", "prims", "--elide", "100000"])).unwrap();
    ladder::ir::verify::verify(&prims, ladder::ir::verify::Stage::Prims).unwrap();
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let dir = scratch("errors");
    let model = small_model(&dir);
    let m = s(&model);

    // Missing files.
    fails(&["run", s(&dir.join("nope.lad"))], &["cannot read", "nope.lad"]);
    fails(&["dump", s(&dir.join("nope.lad"))], &["cannot read", "nope.lad"]);
    fails(&["run", m, "--input", &format!("x={}", s(&dir.join("nope.npy")))], &["cannot read", "nope.npy"]);
    // Not regular files: a device that never ends, a FIFO that waits for a writer.
    fails(&["run", m, "--input", "x=/dev/zero"], &["/dev/zero", "not a regular file"]);
    let fifo = dir.join("fifo.npy");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs").success());
    fails(&["run", m, "--input", &format!("x={}", s(&fifo))], &["fifo.npy", "not a regular file"]);
    fails(&["run", s(&fifo)], &["fifo.npy", "not a regular file"]);

    // Bad text: the message carries file:line:col.
    let bad = dir.join("bad.lad");
    std::fs::write(&bad, "graph g(%x: f32[2]) {\n  %1 = bogus(%x)\n  return %1\n}\n").unwrap();
    fails(&["run", s(&bad)], &["bad.lad:2:8:", "unknown operator `bogus`"]);
    fails(&["dump", s(&bad)], &["bad.lad:2:8:"]);
    std::fs::write(&bad, [0xff, 0xfe, 0x00]).unwrap();
    fails(&["dump", s(&bad)], &["cannot read", "UTF-8"]);

    // Unknown input name, duplicate input.
    let x = dir.join("x.npy");
    write_npy(&x, &[2, 3], &[0f32; 6]);
    fails(&["run", m, "--input", &format!("nope={}", s(&x))], &["no input named `nope`", "x, k, m"]);
    let xi = format!("x={}", s(&x));
    fails(&["run", m, "--input", &xi, "--input", &xi], &["given twice"]);

    // Wrong shape, rank, dtype; conflicting symbol sizes.
    let wrong = dir.join("wrong.npy");
    write_npy(&wrong, &[2, 4], &[0f32; 8]);
    fails(&["run", m, "--input", &format!("x={}", s(&wrong))], &["input `x`", "wrong.npy", "dim 1 is 4, expected 3"]);
    write_npy(&wrong, &[6], &[0f32; 6]);
    fails(&["run", m, "--input", &format!("x={}", s(&wrong))], &["input `x`", "wrong.npy", "rank 1"]);
    write_npy(&wrong, &[2, 3], &[0i32; 6]);
    fails(&["run", m, "--input", &format!("x={}", s(&wrong))], &["input `x`", "wrong.npy", "i32", "f32[n, 3]"]);
    fails(&["run", m, "--input", &xi, "--dim", "n=5"], &["input `x`", "`n` is 5", "--dim n=5"]);
    let k = dir.join("k.npy");
    write_npy(&k, &[3, 3], &[0i64; 9]);
    fails(&["run", m, "--input", &xi, "--input", &format!("k={}", s(&k))], &["input `k`", "`n` is 2", "input `x`"]);

    // Files that are not (usable) .npy.
    std::fs::write(&wrong, b"not an npy file").unwrap();
    fails(&["run", m, "--input", &format!("x={}", s(&wrong))], &["wrong.npy", "magic"]);
    let mut bytes = std::fs::read(&x).unwrap();
    bytes.truncate(bytes.len() - 4);
    std::fs::write(&wrong, &bytes).unwrap();
    fails(&["run", m, "--input", &format!("x={}", s(&wrong))], &["wrong.npy", "bytes follow"]);

    // Backends, dims.
    for args in [&["run", m, "--backend", "metal"][..], &["check", m, "--backend", "gpu"], &["bench", "--backend", "x"]]
    {
        let o = ladder(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: an unknown backend is a usage error");
        assert!(stderr(&o).contains("possible values: cpu, interp"), "{}", stderr(&o));
    }
    for args in [&["run", m, "--threads", "0"][..], &["check", m, "--threads", "0"], &["bench", "--threads", "0"]] {
        assert_eq!(ladder(args).status.code(), Some(2), "{args:?}");
    }
    let o = ladder(&["run", m, "--precise", "--backend", "cpu"]);
    assert_eq!(o.status.code(), Some(2), "--precise is the interpreter's");
    assert!(stderr(&o).contains("--backend interp"), "{}", stderr(&o));
    fails(&["run", m, "--dim", "seq=3"], &["no input of the model has a dim `seq`", "n"]);
    fails(&["run", m, "--dim", "n=3", "--dim", "n=4"], &["given twice"]);
    let o = ladder(&["run", m, "--dim", "n=lots"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    assert!(stderr(&o).contains("not a size"), "{}", stderr(&o));
    fails(&["run", m, "--dim", "n=100000000000"], &["too large"]);
    // `dump --dim` names its errors as `run` does, and they are argument errors too.
    for (args, needle) in [
        (&["dump", m, "--dim", "n=3", "--dim", "seq=5"][..], "no input of the model has a dim `seq`"),
        (&["dump", m, "--dim", "seq=5"], "no input of the model has a dim `seq`"),
        (&["dump", m, "--dim", "n=3", "--dim", "n=4"], "given twice"),
    ] {
        let o = ladder(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }

    // A run-time error in the model itself.
    let div = dir.join("div.lad");
    std::fs::write(&div, "graph g(%a: i64[2], %b: i64[2]) {\n  %2 = div(%a, %b)\n  return %2\n}\n").unwrap();
    let zeros = dir.join("zeros.npy");
    write_npy(&zeros, &[2], &[0i64, 0]);
    fails(&["run", s(&div), "--input", &format!("b={}", s(&zeros))], &["the run failed", "division by zero"]);

    // Unwritable output directory (a file is in the way).
    fails(&["run", m, "--out", s(&x)], &["cannot write"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bf16_inputs_read_f32_files_and_outputs_are_written_as_f32() {
    let dir = scratch("bf16");
    let model = dir.join("b.lad");
    std::fs::write(&model, "graph g(%x: bf16[3]) {\n  %1 = neg(%x)\n  return %1 as y\n}\n").unwrap();
    let x = dir.join("x.npy");
    write_npy(&x, &[3], &[1.0f32, 1.0 + 1.0 / 256.0, -2.5]);
    let o = ladder(&["run", s(&model), "--input", &format!("x={}", s(&x)), "--out", s(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("bf16"), "{}", stderr(&o));
    let y = read_npy(&dir.join("y.npy"));
    assert_eq!(y.dtype(), DType::F32);
    // 1 + 2^-8 is halfway between two bf16 values and rounds to even (1.0).
    assert_eq!(y.to_f64_vec(), vec![-1.0, -1.0, 2.5]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The code blocks of README.md that claim to be graph text must parse.
#[test]
fn readme_text_form_examples_parse() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut found = 0;
    for block in readme.split("```text\n").skip(1) {
        let block = &block[..block.find("```").unwrap()];
        let graph_text = match block.find("$ cat model.lad\n") {
            Some(i) => {
                let rest = &block[i + "$ cat model.lad\n".len()..];
                &rest[..rest.find("\n$ ").unwrap()]
            }
            None if block.starts_with("; comments") => block,
            None => continue,
        };
        ladder::text::parse(graph_text).unwrap_or_else(|e| panic!("README example does not parse: {e}\n{graph_text}"));
        found += 1;
    }
    assert_eq!(found, 3, "README has three graph examples");
}

#[test]
fn dump_stats_counts_nodes_per_op_and_rung() {
    let dir = scratch("dump_stats");
    let model = dir.join("m.lad");
    std::fs::write(
        &model,
        "graph g(%x: f32[n, 4], %m: bool[n, 4]) {\n  %v = view(%x) {shape=[-1]}\n  %a = masked_fill_(%x, %m) {value=0.0}\n  %t = transpose(%x) {axis0=0, axis1=1}\n  return %v, %t\n}\n",
    )
    .unwrap();
    let out = ok(&["dump", s(&model), "--stats"]);
    let row = |op: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(op))
            .unwrap_or_else(|| panic!("no {op} row:\n{out}"))
            .to_string()
    };
    // In-place masked_fill_ becomes masked_fill; the view is regenerated after the write.
    assert_eq!(row("masked_fill_").split_whitespace().collect::<Vec<_>>()[1..3], ["1", "0"], "{out}");
    assert_eq!(row("masked_fill").split_whitespace().collect::<Vec<_>>()[1..3], ["0", "1"], "{out}");
    assert!(out.lines().next().unwrap().contains("parsed") && out.contains("functional"), "{out}");
    assert!(row("total").split_whitespace().count() >= 3, "{out}");
}

#[test]
fn dump_joint_differentiates_a_loss() {
    let dir = scratch("dump_joint");
    let model = dir.join("m.lad");
    std::fs::write(
        &model,
        "graph g(%x: f32[2, 3], %w: f32[3], %k: i64[2]) {\n  %h = mul(%x, %w)\n  %y = tanh(%h)\n  \
         %l = sum(%y)\n  %z = neg(%x)\n  return %l, %z\n}\n",
    )
    .unwrap();
    let m = s(&model);
    // The first output, every float input.
    let out = ok(&["dump", m, "--stage", "joint"]);
    let ret = out.lines().find(|l| l.trim_start().starts_with("return")).unwrap();
    assert!(ret.contains("as grad_x") && ret.contains("as grad_w") && !ret.contains("grad_k"), "{out}");
    ladder::text::parse(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    // Chosen inputs; the stages below the joint rung lower the joint graph.
    let out = ok(&["dump", m, "--stage", "simplified", "--loss", "l", "--wrt", "w"]);
    assert!(out.contains("as grad_w") && !out.contains("grad_x"), "{out}");
    let kernels = ok(&["dump", m, "--stage", "kernels", "--wrt", "w"]);
    assert!(kernels.contains("kernel k0"), "{kernels}");
    let dot = ok(&["dump", m, "--stage", "joint", "--format", "dot"]);
    assert!(dot.starts_with("digraph") && dot.contains("grad_w"), "{dot}");
    fails(&["dump", m, "--stage", "joint", "--loss", "z"], &["the loss `z`", "float scalar"]);
    fails(&["dump", m, "--stage", "joint", "--wrt", "k"], &["input `k`", "only float inputs"]);
    fails(&["dump", m, "--stage", "joint", "--loss", "nope"], &["no output named `nope`"]);
    fails(&["dump", m, "--stage", "prims", "--wrt", "x"], &["--loss and --wrt go with --stage joint"]);
}

#[test]
fn dump_forward_and_backward_split_the_joint_graph() {
    let dir = scratch("dump_split");
    let model = dir.join("m.lad");
    std::fs::write(
        &model,
        "graph g(%x: f32[4, 8], %w: f32[16, 8], %v: f32[2, 16]) {\n  %h = linear(%x, %w)\n  %a = gelu(%h)\n  \
         %y = linear(%a, %v)\n  %l = mean(%y)\n  return %l\n}\n",
    )
    .unwrap();
    let m = s(&model);
    let forward = ok(&["dump", m, "--stage", "forward"]);
    let ret = forward.lines().find(|l| l.trim_start().starts_with("return")).unwrap();
    assert!(ret.contains("%l") && ret.contains("as saved_"), "{forward}");
    ladder::text::parse(&forward).unwrap_or_else(|e| panic!("{e}\n{forward}"));
    let backward = ok(&["dump", m, "--stage", "backward", "--wrt", "w,v"]);
    let b = ladder::text::parse(&backward).unwrap_or_else(|e| panic!("{e}\n{backward}"));
    let outputs: Vec<&str> = b.outputs().iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outputs, ["grad_w", "grad_v"], "{backward}");
    // The minimum cut keeps gelu's input and recomputes the gelu; save-all keeps both.
    let explain = ok(&["dump", m, "--stage", "backward", "--explain"]);
    assert!(explain.contains("; partition (min-cut)") && explain.contains("; saved saved_h"), "{explain}");
    assert!(explain.contains("; recomputed:"), "{explain}");
    let all = ok(&["dump", m, "--stage", "forward", "--partition", "save-all", "--explain"]);
    assert!(all.contains("; partition (save-all)") && !all.contains("; recomputed:"), "{all}");
    let dot = ok(&["dump", m, "--stage", "backward", "--format", "dot"]);
    assert!(dot.starts_with("digraph") && dot.contains("grad_w"), "{dot}");
    fails(&["dump", m, "--stage", "forward", "--save", "nope"], &["no value named `nope`"]);
    fails(
        &["dump", m, "--stage", "joint", "--partition", "save-all"],
        &["--partition, --save and --recompute go with"],
    );
    fails(&["dump", m, "--stage", "forward", "--partition", "most"], &["most"]);
    fails(&["dump", m, "--stage", "backward", "--clif"], &["--clif does not go with --stage backward"]);
}

#[test]
fn train_prints_an_epoch_line_and_the_loss_falls() {
    let out = ok(&["train", "--epochs", "3", "--steps", "15"]);
    let epochs: Vec<&str> = out.lines().filter(|l| l.starts_with("epoch ")).collect();
    assert_eq!(epochs.len(), 3, "{out}");
    assert!(out.contains("saved between forward and backward (min-cut)"), "{out}");
    let last = out.lines().last().unwrap();
    let losses: Vec<f64> =
        last.split_whitespace().filter_map(|w| w.trim_end_matches(',').parse::<f64>().ok()).collect();
    assert!(losses.len() == 2 && losses[1] < losses[0], "{out}");
    let out = ok(&["train", "--optimizer", "sgd", "--partition", "save-all", "--epochs", "1", "--steps", "2"]);
    assert!(out.contains("sgd on") && out.contains("(save-all)"), "{out}");
    fails(&["train", "--task", "nope"], &["nope"]);
}

/// The README's autodiff example is what the binary prints.
#[test]
fn readme_joint_example_is_current() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let command = "$ ladder dump --stage joint --wrt w,b tests/filetests/autodiff/joint_linear_tanh_mse.lad\n";
    let start = readme.find(command).expect("the README shows the joint example") + command.len();
    let shown = &readme[start..start + readme[start..].find("```").unwrap()];
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/filetests/autodiff/joint_linear_tanh_mse.lad");
    assert_eq!(ok(&["dump", "--stage", "joint", "--wrt", "w,b", model]), shown);
}

#[test]
fn dump_clif_and_asm_show_each_kernel() {
    let dir = scratch("clif");
    let model = small_model(&dir);
    let m = model.to_str().unwrap();
    let clif = ok(&["dump", m, "--stage", "kernels", "--clif"]);
    assert!(clif.contains("; kernel k0") && clif.contains("function"), "{clif}");
    let asm = ok(&["dump", m, "--stage", "kernels", "--asm"]);
    assert!(asm.contains("; kernel k0") && asm.contains("ret"), "{asm}");
    fails(&["dump", m, "--clif"], &["--clif and --asm go with --stage kernels"]);
}

#[test]
fn dump_kernels_recovered_shows_what_the_cpu_backend_runs() {
    // The built-in encoder recovers layer norms, attention and gelu into library calls in the
    // native plan, which `dump` shows by default; the reference plan keeps them as prims.
    let native = ok(&["dump", "--stage", "kernels", "--explain"]);
    let reference = ok(&["dump", "--stage", "kernels", "--no-recover"]);
    assert!(!reference.contains("library"), "{reference}");
    assert!(native.contains("library") && native.contains("layer_norm"), "{native}");
    assert!(native.contains("; schedule:") && native.contains("; recovery:"), "{native}");
    // The native prims keep max_pool2d whole (a library kernel runs it); the reference
    // prims decompose it.
    let dir = std::env::temp_dir().join(format!("ladder-cli-dump-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = dir.join("pool.lad");
    let graph =
        "graph pool(%x: f32[1, 1, 4, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2], stride=[2, 2]}\n  return %y\n}\n";
    std::fs::write(&m, graph).unwrap();
    let m = m.to_str().unwrap();
    assert!(ok(&["dump", m, "--stage", "prims"]).contains("max_pool2d("));
    assert!(!ok(&["dump", m, "--stage", "prims", "--no-recover"]).contains("max_pool2d("));
    fails(&["dump", "--stage", "recovered", "--no-recover"], &["--no-recover has no `recovered` stage"]);
    fails(&["dump", "--stage", "kernels", "--recover"], &["--recover"]);
}

/// External tensor data: refused by default with a message naming the flag that allows it,
/// read with `--allow-external-data` (a global flag: before or after the subcommand), and
/// still confined to the model's folder when allowed.
#[test]
fn external_data_needs_the_flag_and_stays_in_the_models_folder() {
    let ok_model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/onnx_hostile/external_ok.onnx");
    let err =
        fails(&["run", ok_model, "--backend", "interp"], &["external_ok.onnx", "disabled", "--allow-external-data"]);
    assert!(
        !err.contains("random"),
        "inputs were generated before the import failed:
{err}"
    );
    // `info` describes the model either way; its import line says what the flag changes.
    let without = ok(&["info", ok_model]);
    assert!(without.contains("import: fails") && without.contains("--allow-external-data"), "{without}");
    let after = ok(&["run", ok_model, "--backend", "interp", "--allow-external-data"]);
    let before = ok(&["--allow-external-data", "run", ok_model, "--backend", "cpu"]);
    assert!(!after.is_empty() && after == before, "interp:\n{after}\ncpu:\n{before}");
    assert!(ok(&["info", ok_model, "--allow-external-data"]).contains("import: ok"));
    let escape = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/onnx_hostile/external_dotdot.onnx");
    fails(&["run", escape, "--allow-external-data"], &["external_dotdot.onnx"]);
}

/// Progress is drawn only on a terminal: piped stderr carries notes and nothing else (no
/// carriage returns, no escape sequences); `--quiet` (anywhere on the line) drops the notes
/// too, and leaves stdout as it was.
#[test]
fn piped_output_has_no_progress_and_quiet_has_no_notes() {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
    for args in
        [vec!["run"], vec!["conformance", corpus, "--filter", "vad"], vec!["bench", "--workload", "W9", "--runs", "3"]]
    {
        let o = ladder(&args);
        assert!(o.status.success(), "ladder {args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains('\r') && !err.contains('\u{1b}'), "ladder {args:?} drew progress into a pipe:\n{err:?}");
        let quiet = ladder(&[&["-q"][..], &args[..]].concat());
        assert!(quiet.status.success());
        assert_eq!(stderr(&quiet), "", "ladder -q {args:?} wrote to stderr");
        if args[0] != "bench" {
            assert_eq!(stdout(&quiet), stdout(&o), "ladder -q {args:?} changed stdout");
        }
    }
    assert!(stderr(&ladder(&["run"])).contains("note: "), "notes are on by default");
}

#[test]
fn limits_come_from_the_command_line_and_errors_name_them() {
    let dir = scratch("limits");
    let model = small_model(&dir);
    let m = s(&model);
    ok(&["run", m, "--untrusted"]);
    fails(&["run", m, "--limit", "max_nodes=1"], &["`Limits::max_nodes` = 1"]);
    fails(&["dump", m, "--untrusted", "--limit", "max_file_bytes=10"], &["`Limits::max_file_bytes` = 10"]);
    // An unknown name or a bad value is a usage error that lists the names.
    fails(&["run", m, "--limit", "max_bytes=1"], &["no limit is called `max_bytes`", "max_run_bytes"]);
    fails(&["run", m, "--limit", "fuel=lots"], &["`lots` for fuel"]);
    // The interpreter under --untrusted refuses a 2048³ product at once.
    let mm = dir.join("mm.lad");
    std::fs::write(
        &mm,
        "graph mm(%a: f32[2048, 2048], %b: f32[2048, 2048]) {\n  %c = matmul(%a, %b)\n  return %c\n}\n",
    )
    .unwrap();
    fails(&["run", s(&mm), "--backend", "interp", "--untrusted"], &["matmul", "Limits::fuel"]);
    // A .npy input above max_tensor_bytes (and its header) is refused before it is read.
    let x = dir.join("x.npy");
    write_npy(&x, &[2, 3], &[0f32; 6]);
    let big = dir.join("big.npy");
    write_npy(&big, &[40000], &[0f32; 40000]);
    ok(&["run", m, "--input", &format!("x={}", s(&x)), "--limit", "max_tensor_bytes=100"]);
    fails(
        &["run", m, "--input", &format!("x={}", s(&big)), "--limit", "max_tensor_bytes=100"],
        &["Limits::max_tensor_bytes"],
    );
    // The CPU runtime's memory bound.
    fails(&["run", s(&mm), "--limit", "max_run_bytes=1000"], &["Limits::max_run_bytes"]);
}
