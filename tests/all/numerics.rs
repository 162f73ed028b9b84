//! The numerics harness (`ladder::numerics`) run bounded: every high-level op's decomposition
//! must pass at least `CASES` generated cases that run against the tolerance table, and the
//! table must catch a naive softmax (no max subtraction) that a careful one passes.
//!
//! The same generator runs unbounded under the fuzz target `fuzz/fuzz_targets/decomp.rs`.
//! A failure prints a ready-to-paste file test (see `Failure::file_test`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use ladder::decomp::Emitter;
use ladder::ir::verify::{verify, Stage};
use ladder::numerics::{
    check_op, check_op_with, compare, generate_case, high_level_ops, tolerance, ulp_distance, Agreement, Case,
    CaseResult, CompareCtx, Failure, FailureKind, LowerError, Lowering, MismatchDetail, Skip, Tolerance,
};
use ladder::ops::util::normalize_axis;
use ladder::{DType, Graph, OpKind, Tensor};

/// Cases that must run (not be skipped) and pass, per op.
const CASES: usize = 1000;
/// Generated cases per op before giving up on reaching `CASES` runnable ones.
const MAX_TRIES: usize = 12 * CASES;

/// The bytes of case `k` of `op`: 16 pseudo-random bytes steer the first choices (the
/// generator continues from their hash), as a fuzzer's input would.
fn case_bytes(op: OpKind, k: usize) -> Vec<u8> {
    ladder::gen::seeded_bytes((op as u64) << 32 | k as u64, 16)
}

#[derive(Default)]
struct OpReport {
    passed: usize,
    no_case: usize,
    reference_errors: usize,
    agreement: Agreement,
    failure: Option<Box<Failure>>,
    seconds: f64,
}

/// A lowering under test.
type Lower = dyn Fn(&Graph) -> Result<Lowering, LowerError> + Sync;

fn run_op(op: OpKind, lower: Option<&Lower>) -> OpReport {
    let mut r = OpReport::default();
    let start = Instant::now();
    for k in 0..MAX_TRIES {
        let bytes = case_bytes(op, k);
        let result = match lower {
            Some(l) => check_op_with(op, &bytes, l),
            None => check_op(op, &bytes),
        };
        match result {
            CaseResult::Passed(a) => {
                r.passed += 1;
                r.agreement.merge(&a);
            }
            // A declined symbolic case counts as no case: the generator's draw was not one
            // the decomposition takes.
            CaseResult::Skipped(Skip::NoValidCase | Skip::Declined(_)) => r.no_case += 1,
            CaseResult::Skipped(Skip::ReferenceError(_)) => r.reference_errors += 1,
            CaseResult::Failed(f) => {
                r.failure = Some(f);
                break;
            }
        }
        if r.passed >= CASES {
            break;
        }
    }
    r.seconds = start.elapsed().as_secs_f64();
    r
}

/// ULP distances near zero are huge and meaningless next to a bound-based check: shown capped.
fn ulps(n: u64) -> String {
    if n > 1_000_000 {
        ">1e6".into()
    } else {
        n.to_string()
    }
}

fn tolerance_name(op: OpKind) -> String {
    match tolerance(op) {
        Tolerance::Exact => "exact".into(),
        Tolerance::Ulp { ulps, floor_eps } => format!("{ulps}ulp/{floor_eps}eps"),
        Tolerance::Bound(k) => format!("{k:?}"),
    }
}

#[test]
fn every_high_level_op_meets_the_tolerance_table() {
    let start = Instant::now();
    let ops = high_level_ops();
    let next = AtomicUsize::new(0);
    let reports: Mutex<Vec<Option<OpReport>>> = Mutex::new((0..ops.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&op) = ops.get(i) else { break };
                let r = run_op(op, None);
                reports.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    let reports: Vec<OpReport> =
        reports.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().map(Option::unwrap_or_default).collect();

    println!(
        "{:<30} {:>14} {:>6} {:>8} {:>8} {:>9} {:>8} {:>9} {:>10} {:>6}",
        "op", "tolerance", "passed", "no case", "ref err", "elements", "excused", "max ulp", "max bound", "secs"
    );
    let mut missing = Vec::new();
    let mut failures = Vec::new();
    let mut short = Vec::new();
    for (op, r) in ops.iter().zip(&reports) {
        let status = match &r.failure {
            Some(f) if matches!(f.kind, FailureKind::NoDecomposition(_)) => {
                missing.push(op.name());
                "  NO DECOMPOSITION"
            }
            Some(f) => {
                failures.push((format!("  {}: {}", op, f.kind), f.to_string()));
                "  FAILED"
            }
            None if r.passed < CASES => {
                short.push(format!("{op} ({} passed)", r.passed));
                "  TOO FEW CASES"
            }
            None => "",
        };
        println!(
            "{:<30} {:>14} {:>6} {:>8} {:>8} {:>9} {:>8} {:>9} {:>10.3} {:>6.2}{}",
            op.name(),
            tolerance_name(*op),
            r.passed,
            r.no_case,
            r.reference_errors,
            r.agreement.elements,
            r.agreement.excused,
            ulps(r.agreement.max_ulps),
            r.agreement.max_ratio,
            r.seconds,
            status
        );
    }
    println!("numerics: {} ops in {:.1?}", ops.len(), start.elapsed());
    for (_, text) in &failures {
        println!("\n{text}");
    }
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("{} ops have no decomposition: {}", missing.len(), missing.join(", ")));
    }
    if !failures.is_empty() {
        let lines: Vec<&str> = failures.iter().map(|(line, _)| line.as_str()).collect();
        problems.push(format!("{} ops failed (file tests printed above):\n{}", failures.len(), lines.join("\n")));
    }
    if !short.is_empty() {
        problems.push(format!("too few runnable cases: {}", short.join(", ")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Controls: a softmax decomposition written here by hand with the Emitter, naive and careful.
// ---------------------------------------------------------------------------------------------

/// Lowers a single-`softmax` graph to prims by hand: `exp(x) / sum(exp(x))` when `naive`,
/// else the max-subtracted `exp(x - max) / sum(exp(x - max))`.
fn lower_softmax(g: &Graph, naive: bool) -> Result<Lowering, LowerError> {
    let fail = |e: String| LowerError::Failed(e);
    let (v, node) = g.nodes().find(|(_, n)| n.op == OpKind::Softmax).ok_or_else(|| fail("no softmax".into()))?;
    let mut p = Graph::new(&g.name);
    let mut map = Vec::new();
    for (i, &x) in g.inputs().iter().enumerate() {
        map.push((x, p.add_input(&g.input_name(i), g.ty(x).clone()).map_err(|e| fail(e.to_string()))?));
    }
    let x = map.iter().find(|(old, _)| *old == node.args[0]).map(|&(_, new)| new).ok_or_else(|| fail("arg".into()))?;
    let axis = normalize_axis(node.attrs.int("axis"), g.ty(v).rank()).map_err(|e| fail(e.to_string()))?;
    let mut e = Emitter { g: &mut p, keep: &[] };
    let y = (|| {
        let shifted = if naive {
            x
        } else {
            let m = e.reduce(OpKind::ReduceMax, x, &[axis], true)?;
            e.sub(x, m)?
        };
        let ex = e.unary(OpKind::Exp, shifted)?;
        let s = e.reduce(OpKind::ReduceSum, ex, &[axis], true)?;
        e.div(ex, s)
    })()
    .map_err(|err| fail(err.to_string()))?;
    p.add_output("out", y).map_err(|e| fail(e.to_string()))?;
    verify(&p, Stage::Prims).map_err(|e| fail(e.to_string()))?;
    Ok(Lowering { graph: p, mutations: Vec::new() })
}

#[test]
fn naive_softmax_is_caught() {
    let naive = |g: &Graph| lower_softmax(g, true);
    let mut first = None;
    let mut failures = 0;
    let mut ran = 0;
    for k in 0..CASES {
        match check_op_with(OpKind::Softmax, &case_bytes(OpKind::Softmax, k), &naive) {
            CaseResult::Failed(f) => {
                failures += 1;
                ran += 1;
                first.get_or_insert(f);
            }
            CaseResult::Passed(_) => ran += 1,
            CaseResult::Skipped(_) => {}
        }
    }
    let f = first.expect("the naive softmax (no max subtraction) passed every case: the table is too loose");
    println!("naive softmax: {failures} of {ran} runnable cases failed; the first:\n{f}");
    let FailureKind::Mismatch(m) = &f.kind else { panic!("expected a mismatch, got {}", f.kind) };
    let MismatchDetail::Element { reference, got, .. } = m.detail else { panic!("expected an element mismatch: {m}") };
    // exp(1e4) overflows: inf/inf is NaN (or a finite value is lost) where the reference is finite.
    assert!(reference.is_finite(), "{m}");
    assert!(!got.is_finite() || (got - reference).abs() > 1e-3, "{m}");
    // The file test parses and its graph is the case's.
    let g =
        ladder::text::parse(&f.file_test).unwrap_or_else(|e| panic!("file test does not parse: {e}\n{}", f.file_test));
    assert_eq!(g.nodes().filter(|(_, n)| n.op == OpKind::Softmax).count(), 1);
    assert!(f.file_test.contains("; run: x0="), "{}", f.file_test);
    // The overflow is common on the logit profile, not a fluke.
    assert!(failures * 20 >= ran, "only {failures} of {ran} cases caught");
}

#[test]
fn max_subtracted_softmax_passes() {
    let careful = |g: &Graph| lower_softmax(g, false);
    let r = run_op(OpKind::Softmax, Some(&careful));
    if let Some(f) = &r.failure {
        panic!("the careful softmax failed:\n{f}");
    }
    println!(
        "careful softmax: {} passed, {} skipped, max {} ulp, max bound use {:.3}",
        r.passed,
        r.no_case + r.reference_errors,
        r.agreement.max_ulps,
        r.agreement.max_ratio
    );
    assert!(r.passed >= CASES, "only {} runnable cases", r.passed);
}

// ---------------------------------------------------------------------------------------------
// compare itself
// ---------------------------------------------------------------------------------------------

fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::new(shape.to_vec(), ladder::TensorData::F64(v.to_vec())).unwrap()
}

#[test]
fn ulp_distance_counts_representable_values() {
    let one = 1.0f32;
    let next = f32::from_bits(one.to_bits() + 3) as f64;
    assert_eq!(ulp_distance(DType::F32, 1.0, next), 3);
    assert_eq!(ulp_distance(DType::F32, -0.0, 0.0), 0);
    assert_eq!(ulp_distance(DType::F32, -1e-45, 1e-45), 2);
    assert_eq!(ulp_distance(DType::F32, f64::NAN, 1.0), u64::MAX);
    assert_eq!(ulp_distance(DType::F32, f32::MAX as f64, f64::INFINITY), 1);
}

#[test]
fn compare_names_the_element_and_the_bound() {
    let g = ladder::text::parse("graph t(%x0: f32[2, 2]) {\n  %1 = gelu(%x0)\n  return %1 as out\n}\n").unwrap();
    let inputs = [f32t(&[2, 2], &[0.0, 1.0, 2.0, 3.0])];
    let node = g.outputs()[0].value;
    let ctx = CompareCtx { graph: &g, node, inputs: &inputs, output: "out" };
    let reference = f64t(&[2, 2], &[0.0, 0.8413447460685429, 1.9544997361036416, f64::NAN]);
    // Within 16 ulp everywhere, NaN matched: passes.
    let ok = f32t(&[2, 2], &[0.0, 0.841_344_8, 1.954_499_8, f32::NAN]);
    let a = compare(OpKind::Gelu, &reference, &ok, &ctx).unwrap();
    assert_eq!(a.elements, 4);
    assert!(a.max_ulps <= 1, "{a:?}");
    // Element [1, 0] off by far more than 16 ulp.
    let bad = f32t(&[2, 2], &[0.0, 0.841_344_8, 1.96, f32::NAN]);
    let m = compare(OpKind::Gelu, &reference, &bad, &ctx).unwrap_err();
    let MismatchDetail::Element { index, got, allowed, .. } = &m.detail else { panic!("{m}") };
    assert_eq!(index, &vec![1, 0]);
    assert!((got - 1.96).abs() < 1e-6);
    assert!(allowed.contains("16 ulp"), "{allowed}");
    // A NaN reference must be matched by NaN.
    let not_nan = f32t(&[2, 2], &[0.0, 0.841_344_8, 1.954_499_8, 3.0]);
    let m = compare(OpKind::Gelu, &reference, &not_nan, &ctx).unwrap_err();
    assert!(m.to_string().contains("[1, 1]"), "{m}");
    // Shapes must agree.
    let m = compare(OpKind::Gelu, &reference, &f32t(&[4], &[0.0; 4]), &ctx).unwrap_err();
    assert!(matches!(m.detail, MismatchDetail::Type { .. }), "{m}");
}

#[test]
fn compare_exact_ops_see_signed_zero_and_sums_get_a_scaled_bound() {
    let g = ladder::text::parse("graph t(%x0: f32[3]) {\n  %1 = relu(%x0)\n  return %1 as out\n}\n").unwrap();
    let inputs = [f32t(&[3], &[-0.0, 1.0, -2.0])];
    let ctx = CompareCtx { graph: &g, node: g.outputs()[0].value, inputs: &inputs, output: "out" };
    let reference = f64t(&[3], &[0.0, 1.0, 0.0]);
    assert!(compare(OpKind::Relu, &reference, &f32t(&[3], &[0.0, 1.0, 0.0]), &ctx).is_ok());
    assert!(compare(OpKind::Relu, &reference, &f32t(&[3], &[-0.0, 1.0, 0.0]), &ctx).is_err());

    // sum of [1e8, 1, -1e8]: exact 1, but f32 accumulation may lose the 1 (n eps Σ|x| ≈ 36).
    let g = ladder::text::parse("graph t(%x0: f32[3]) {\n  %1 = sum(%x0)\n  return %1 as out\n}\n").unwrap();
    let inputs = [f32t(&[3], &[1e8, 1.0, -1e8])];
    let ctx = CompareCtx { graph: &g, node: g.outputs()[0].value, inputs: &inputs, output: "out" };
    let reference = f64t(&[], &[1.0]);
    assert!(compare(OpKind::Sum, &reference, &f32t(&[], &[0.0]), &ctx).is_ok());
    assert!(compare(OpKind::Sum, &reference, &f32t(&[], &[100.0]), &ctx).is_err());
}

#[test]
fn the_generator_covers_every_high_level_op() {
    // Every op finds an accepted case within a few tries (otherwise it could never be tested).
    for op in high_level_ops() {
        let found = (0..200).any(|k| generate_case(op, &case_bytes(op, k)).is_some());
        assert!(found, "{op}: no valid case in 200 tries");
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzz corpus
// ---------------------------------------------------------------------------------------------

fn float_values(case: &Case) -> Vec<f64> {
    case.inputs.iter().filter(|t| t.dtype().is_float()).flat_map(Tensor::to_f64_vec).collect()
}

fn any_float(case: &Case, f: impl Fn(f64) -> bool) -> bool {
    float_values(case).into_iter().any(f)
}

fn node_attr(case: &Case, name: &str) -> Option<ladder::ir::AttrValue> {
    case.graph.node(case.node).attrs.get(name).cloned()
}

fn symbolic(case: &Case) -> bool {
    case.graph.inputs().iter().any(|&v| case.graph.ty(v).shape.as_static().is_none())
}

/// One seed per adversarial class: `(file name, op, what the case must show)`.
type SeedClass = (&'static str, OpKind, fn(&Case) -> bool);

const SEED_CLASSES: &[SeedClass] = &[
    ("softmax_logits_1e4", OpKind::Softmax, |c| {
        any_float(c, |x| x.abs() > 9000.0 && x.abs() < 4e4) && c.inputs[0].numel() > 2
    }),
    ("log_softmax_neg_inf", OpKind::LogSoftmax, |c| any_float(c, |x| x == f64::NEG_INFINITY)),
    ("logsumexp_pos_inf", OpKind::Logsumexp, |c| any_float(c, |x| x == f64::INFINITY)),
    ("layer_norm_nan_with_affine", OpKind::LayerNorm, |c| c.inputs.len() == 3 && any_float(c, f64::is_nan)),
    ("var_size_one_axis", OpKind::Var, |c| c.inputs[0].shape().contains(&1) && c.inputs[0].numel() > 1),
    ("sum_empty_axis", OpKind::Sum, |c| c.inputs[0].numel() == 0 && !c.inputs[0].shape().is_empty()),
    ("prod_1e30", OpKind::Prod, |c| any_float(c, |x| x.abs() == 1e30_f32 as f64)),
    ("attention_all_masked", OpKind::ScaledDotProductAttention, |c| {
        c.inputs.len() == 4 && c.inputs[3].dtype() == DType::Bool && c.inputs[3].to_f64_vec().iter().all(|&b| b == 0.0)
    }),
    ("attention_causal", OpKind::ScaledDotProductAttention, |c| {
        matches!(node_attr(c, "causal"), Some(ladder::ir::AttrValue::Bool(true))) && c.inputs[0].numel() > 4
    }),
    ("cross_entropy_ignore_index", OpKind::CrossEntropy, |c| {
        let ignore = match node_attr(c, "ignore_index") {
            Some(ladder::ir::AttrValue::Int(i)) => i,
            _ => return false,
        };
        c.inputs.len() > 1 && c.inputs[1].to_f64_vec().contains(&(ignore as f64))
    }),
    ("gelu_denormal", OpKind::Gelu, |c| any_float(c, |x| x != 0.0 && x.abs() < 1e-38)),
    ("sigmoid_wide", OpKind::Sigmoid, |c| any_float(c, |x| x.is_finite() && x.abs() > 90.0)),
    ("softplus_beta_threshold", OpKind::Softplus, |c| {
        matches!(node_attr(c, "beta"), Some(ladder::ir::AttrValue::Float(b)) if b != 1.0)
            && matches!(node_attr(c, "threshold"), Some(ladder::ir::AttrValue::Float(t)) if t != 20.0)
    }),
    ("mean_f16", OpKind::Mean, |c| c.inputs[0].dtype() == DType::F16 && c.inputs[0].numel() > 3),
    ("amax_nan", OpKind::Amax, |c| any_float(c, f64::is_nan)),
    ("argmax_signed_zeros", OpKind::Argmax, |c| {
        let v = float_values(c);
        v.iter().any(|x| *x == 0.0 && x.is_sign_negative()) && v.iter().any(|x| *x == 0.0 && x.is_sign_positive())
    }),
    ("embedding_symbolic", OpKind::Embedding, symbolic),
    ("cumsum_symbolic", OpKind::Cumsum, |c| symbolic(c) && c.inputs[0].numel() > 2),
    ("cumsum_inf", OpKind::Cumsum, |c| any_float(c, f64::is_infinite) && c.inputs[0].numel() > 2),
    ("masked_fill_i32_inf", OpKind::MaskedFillInplace, |c| {
        c.inputs[0].dtype() == DType::I32
            && matches!(node_attr(c, "value"), Some(ladder::ir::AttrValue::Float(v)) if v.is_infinite())
    }),
    (
        "slice_assign_negative_start",
        OpKind::SliceAssignInplace,
        |c| matches!(node_attr(c, "start"), Some(ladder::ir::AttrValue::Int(s)) if s < 0),
    ),
    ("bmm_overflow", OpKind::Bmm, |c| any_float(c, |x| x.abs() == 1e30_f32 as f64)),
    ("group_norm_bf16", OpKind::GroupNorm, |c| c.inputs[0].dtype() == DType::BF16 && c.inputs[0].numel() > 3),
    ("clamp_nan_bound", OpKind::Clamp, |c| {
        matches!(node_attr(c, "min"), Some(ladder::ir::AttrValue::Float(v)) if v.is_nan())
            || matches!(node_attr(c, "max"), Some(ladder::ir::AttrValue::Float(v)) if v.is_nan())
    }),
    ("expand_zero_dim", OpKind::Expand, |c| c.inputs[0].shape().contains(&0)),
    ("rms_norm_tiny", OpKind::RmsNorm, |c| any_float(c, |x| x != 0.0 && x.abs() < 1e-30)),
    ("lstm_nan_state", OpKind::Lstm, |c| c.inputs.get(3).is_some_and(|t| t.to_f64_vec().iter().any(|x| x.is_nan()))),
    ("lstm_reverse_saturated", OpKind::Lstm, |c| {
        matches!(node_attr(c, "reverse"), Some(ladder::ir::AttrValue::Bool(true))) && any_float(c, |x| x.abs() >= 1e4)
    }),
];

/// Regenerates `fuzz/corpus/decomp/`: for each class in `SEED_CLASSES`, the first seed whose
/// case shows it, as `[op index] + 16 case bytes` (the fuzz target's input format). Run with
/// `cargo test --test all -- --ignored --exact numerics::write_fuzz_corpus`.
#[test]
#[ignore]
fn write_fuzz_corpus() {
    let ops = high_level_ops();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decomp");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, &(name, op, shows)) in SEED_CLASSES.iter().enumerate() {
        let index = ops.iter().position(|&o| o == op).unwrap() as u8;
        let found = (0..50_000u64).find_map(|k| {
            let bytes = ladder::gen::seeded_bytes((i as u64) << 40 | k, 16);
            generate_case(op, &bytes).filter(shows).map(|_| bytes)
        });
        let bytes = found.unwrap_or_else(|| panic!("no seed shows {name}"));
        let mut data = vec![index];
        data.extend(bytes);
        std::fs::write(dir.join(name), data).unwrap();
    }
}

/// The `decomp` fuzz target's check over its whole corpus: the seeds above and the cases
/// campaigns found (`regress-*`), each passing.
#[test]
fn the_decomp_corpus_passes() {
    let ops = high_level_ops();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decomp");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    assert!(paths.len() > SEED_CLASSES.len(), "{} corpus files", paths.len());
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        let Some((&first, rest)) = data.split_first() else { continue };
        let op = ops[first as usize % ops.len()];
        if let ladder::numerics::CaseResult::Failed(f) = ladder::numerics::check_op(op, rest) {
            assert!(matches!(f.kind, ladder::numerics::FailureKind::NoDecomposition(_)), "{}: {f}", path.display());
        }
    }
}

/// Every corpus file still decodes to the op its name says and a case that shows its class
/// (the op list order or the generator changed otherwise: rerun `write_fuzz_corpus`).
#[test]
fn fuzz_corpus_seeds_show_their_class() {
    let ops = high_level_ops();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decomp");
    for &(name, op, shows) in SEED_CLASSES {
        let data = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ops[data[0] as usize % ops.len()], op, "{name}");
        let case = generate_case(op, &data[1..]).unwrap_or_else(|| panic!("{name}: no case"));
        assert!(shows(&case), "{name}: the case no longer shows its class");
    }
}

/// Found by the `decomp` fuzz target: `max_pool2d {kernel=[1, 3], dilation=[1, 3],
/// ceil_mode=true}` over a symbolic length has `min((seq + 1) / 3 - 1, (seq + 2) / 3)` windows,
/// negative for `seq < 2`; the strided slice of each tap cannot take that length, and the
/// decomposition declines the case with a typed error instead of failing to build a slice.
#[test]
fn a_pool_over_a_length_it_cannot_slice_is_declined() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decomp/regress-pool-symbolic-window-count");
    let bytes = std::fs::read(path).unwrap();
    let ops = high_level_ops();
    let op = ops[bytes[0] as usize % ops.len()];
    assert_eq!(op, OpKind::MaxPool2d);
    match check_op(op, &bytes[1..]) {
        CaseResult::Skipped(Skip::Declined(m)) => assert!(m.contains("windows over a symbolic length"), "{m}"),
        CaseResult::Failed(f) => panic!("{f}"),
        _ => panic!("the case was not declined"),
    }
}
