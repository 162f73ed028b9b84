//! The data-movement prims (`cat`, `pad`, `rev`, `gather`, `scatter_add`) as native library
//! steps (`ladder::backend::cpu::copy`): bit for bit the interpreter's results (and the
//! reference plan's, which runs the interpreter's op), over random shapes and dtypes, empty and
//! size-1 dims, symbolic dims, negative pads and interior padding, at one and two threads; the
//! same typed errors for out-of-range indices; no graph break left in a RoPE-style model.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::kernel::eval::ExecError;
use ladder::kernel::Step;
use ladder::runtime::RunError;
use ladder::tensor::narrow::f16_from_f64;
use ladder::{compile, CompileOptions, DType, Graph, OpKind, Plan, Tensor, TensorData};

use crate::common::parse;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn dim(&mut self) -> usize {
        self.pick(&[0, 1, 1, 2, 3, 3, 4, 5])
    }

    fn shape(&mut self, rank: usize) -> Vec<usize> {
        (0..rank).map(|_| self.dim()).collect()
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Random data of `dtype`, with the awkward values of each: ±0, ±inf, NaNs (one with a
/// payload), subnormals, the integer extremes.
fn tensor(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Tensor {
    let n = numel(shape);
    let data = match dtype {
        DType::F32 => TensorData::F32(
            (0..n)
                .map(|_| {
                    let special = [
                        0.0,
                        -0.0,
                        f32::INFINITY,
                        f32::NEG_INFINITY,
                        f32::NAN,
                        f32::from_bits(0x7fc1_2345),
                        1e-40,
                        f32::MAX,
                    ];
                    if rng.below(4) == 0 {
                        rng.pick(&special)
                    } else {
                        (rng.below(2001) as f32 - 1000.0) / 8.0
                    }
                })
                .collect(),
        ),
        DType::F16 => TensorData::F16((0..n).map(|_| f16_from_f64(rng.below(200) as f64 / 4.0 - 25.0)).collect()),
        DType::I64 => TensorData::I64(
            (0..n)
                .map(|_| if rng.below(5) == 0 { rng.pick(&[i64::MIN, i64::MAX, -1]) } else { rng.range(-50, 50) })
                .collect(),
        ),
        DType::I32 => TensorData::I32((0..n).map(|_| rng.range(-50, 50) as i32).collect()),
        DType::U8 => TensorData::U8((0..n).map(|_| rng.below(256) as u8).collect()),
        DType::Bool => TensorData::Bool((0..n).map(|_| rng.below(2) == 1).collect()),
        d => panic!("no generator for {d}"),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// Index data for an axis of `size`: in `-size..size`, or anything when `size` is 0 (then
/// every index is out of range, which only an empty index tensor avoids).
fn indices(rng: &mut Rng, dtype: DType, shape: &[usize], size: usize) -> Tensor {
    let s = size as i64;
    let v: Vec<i64> = (0..numel(shape)).map(|_| if s == 0 { 0 } else { rng.range(-s, s - 1) }).collect();
    Tensor::from_ints(dtype, shape, v).unwrap()
}

fn ty(dtype: DType, shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

/// A unary op that keeps `dtype` (so that an argument or result goes through a kernel and
/// lives in the arena rather than in the caller's tensors).
fn unary(dtype: DType) -> &'static str {
    if dtype == DType::Bool {
        "logical_not"
    } else {
        "neg"
    }
}

/// A graph applying `op_line` (which reads `%a0`, `%a1`, ... and defines `%r`) to inputs of
/// the given types, optionally through a kernel before the first argument and after the result.
fn graph(args: &[(DType, String)], op_line: &str, pre: bool, post: Option<DType>) -> String {
    let params: Vec<String> = args.iter().enumerate().map(|(k, (_, t))| format!("%x{k}: {t}")).collect();
    let mut src = format!("graph g({}) {{\n", params.join(", "));
    let mut line = op_line.to_string();
    for (k, (d, _)) in args.iter().enumerate() {
        if pre && k == 0 {
            src += &format!("  %a0 = {}(%x0)\n", unary(*d));
        } else {
            line = line.replace(&format!("%a{k}"), &format!("%x{k}"));
        }
    }
    src += &format!("  {line}\n");
    match post {
        Some(d) => src += &format!("  %y = {}(%r)\n  return %y\n}}", unary(d)),
        None => src += "  return %r\n}",
    }
    src
}

fn plans(g: &Graph) -> (Plan, Vec<Plan>) {
    let reference = compile(g, &CompileOptions::reference()).unwrap();
    let native = [1, 2].map(|t| compile(g, &CompileOptions::native_cpu(t).unwrap()).unwrap());
    (reference, native.into())
}

/// The `EvalError` of a failed run, with the op it names.
fn run_error(e: &RunError) -> (&'static str, EvalError) {
    match e {
        RunError::Step { error: ExecError::Library { what, error }, .. } => (what, error.clone()),
        other => panic!("not a library step error: {other:?}"),
    }
}

/// Runs `src` on the interpreter, the reference plan and native plans at 1 and 2 threads:
/// bit-identical outputs, or the same error. Returns how many steps ran `op` natively.
fn check(src: &str, inputs: &[Tensor], op: OpKind) -> usize {
    let g = parse(src);
    let want = interp::run(&g, inputs, &Options::default());
    let (reference, native) = plans(&g);
    let mut natives = 0;
    for plan in std::iter::once(&reference).chain(&native) {
        let p = plan.program().unwrap();
        assert!(!p.steps.iter().any(|s| matches!(s, Step::Interp(_))), "a graph break is left:\n{p}\n{src}");
        natives += p.steps.iter().filter(|s| matches!(s, Step::Library(l) if l.op == op)).count();
        let got = plan.run(inputs);
        match (&want, got) {
            (Ok(w), Ok(o)) => {
                for (a, b) in w.outputs.iter().zip(&o.outputs) {
                    assert!(a.bit_eq(b), "{src}\ninputs {inputs:?}\nwant {a:?}\n got {b:?}\n{p}");
                }
            }
            (Err(InterpError::Eval { error, op: o, .. }), Err(e)) => {
                let (what, got) = run_error(&e);
                assert_eq!((what, &got), (*o, error), "{src}");
            }
            (w, o) => panic!("{src}\ninterpreter {w:?}\nplan {o:?}\n{p}"),
        }
    }
    natives / 3
}

const DTYPES: &[DType] = &[DType::F32, DType::I64, DType::Bool, DType::U8, DType::F16];

fn options(rng: &mut Rng, dtype: DType) -> (bool, Option<DType>) {
    let pre = rng.below(3) == 0 && dtype != DType::F16;
    let post = (rng.below(3) == 0 && dtype != DType::F16).then_some(dtype);
    (pre, post)
}

#[test]
fn cat_matches_the_interpreter() {
    let mut rng = Rng(1);
    let mut native = 0;
    for _ in 0..120 {
        let dtype = rng.pick(DTYPES);
        let rank = 1 + rng.below(4) as usize;
        let axis = rng.range(-(rank as i64), rank as i64 - 1);
        let a = if axis < 0 { (axis + rank as i64) as usize } else { axis as usize };
        let base = rng.shape(rank);
        let n = 1 + rng.below(4) as usize;
        let mut args = Vec::new();
        let mut inputs = Vec::new();
        for _ in 0..n {
            let mut s = base.clone();
            s[a] = rng.dim();
            args.push((dtype, ty(dtype, &s)));
            inputs.push(tensor(&mut rng, dtype, &s));
        }
        let list: Vec<String> = (0..n).map(|k| format!("%a{k}")).collect();
        let (pre, post) = options(&mut rng, dtype);
        let src = graph(&args, &format!("%r = cat({}) {{axis={axis}}}", list.join(", ")), pre, post);
        native += check(&src, &inputs, OpKind::Cat);
    }
    assert!(native >= 60, "only {native} cases ran cat natively");
}

#[test]
fn pad_matches_the_interpreter_with_negative_and_interior_padding() {
    let mut rng = Rng(2);
    let mut native = 0;
    for _ in 0..150 {
        let dtype = rng.pick(DTYPES);
        let rank = rng.below(4) as usize;
        let shape = rng.shape(rank);
        let (mut low, mut high, mut interior) = (Vec::new(), Vec::new(), Vec::new());
        for &n in &shape {
            let i = if rng.below(3) == 0 { rng.range(0, 2) } else { 0 };
            let size = n as i64 + (n as i64 - 1).max(0) * i;
            // Crop at most what is there.
            let l = rng.range(-size.min(3), 3);
            let h = rng.range(-(size + l).min(3), 3);
            low.push(l);
            high.push(h);
            interior.push(i);
        }
        let value = rng.pick(&["0.0", "1.5", "-2.25", "300.0", "-1e10"]);
        let interior = if rng.below(2) == 0 && interior.iter().all(|&i| i == 0) {
            String::new()
        } else {
            format!(", interior={interior:?}")
        };
        let (pre, post) = options(&mut rng, dtype);
        let line = format!("%r = pad(%a0) {{low={low:?}, high={high:?}{interior}, value={value}}}");
        let src = graph(&[(dtype, ty(dtype, &shape))], &line, pre, post);
        native += check(&src, &[tensor(&mut rng, dtype, &shape)], OpKind::Pad);
    }
    assert!(native >= 80, "only {native} cases ran pad natively");
}

#[test]
fn rev_matches_the_interpreter() {
    let mut rng = Rng(3);
    let mut native = 0;
    for _ in 0..120 {
        let dtype = rng.pick(DTYPES);
        let rank = 1 + rng.below(4) as usize;
        let shape = rng.shape(rank);
        let mut axes: Vec<i64> = Vec::new();
        for a in 0..rank as i64 {
            match rng.below(4) {
                0 => axes.push(a),
                1 => axes.push(a - rank as i64),
                _ => {}
            }
        }
        let (pre, post) = options(&mut rng, dtype);
        let src = graph(&[(dtype, ty(dtype, &shape))], &format!("%r = rev(%a0) {{axes={axes:?}}}"), pre, post);
        native += check(&src, &[tensor(&mut rng, dtype, &shape)], OpKind::Rev);
    }
    assert!(native >= 40, "only {native} cases ran rev natively");
}

#[test]
fn gather_matches_the_interpreter() {
    let mut rng = Rng(4);
    let mut native = 0;
    for _ in 0..150 {
        let dtype = rng.pick(DTYPES);
        let index_dtype = rng.pick(&[DType::I32, DType::I64]);
        let rank = 1 + rng.below(4) as usize;
        let shape = rng.shape(rank);
        let axis = rng.below(rank as u64) as usize;
        let ishape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if d == axis { rng.dim() } else { rng.below(n as u64 + 1) as usize })
            .collect();
        let ishape = if shape[axis] == 0 { ishape.iter().map(|_| 0).collect() } else { ishape };
        let (pre, post) = options(&mut rng, dtype);
        let axis = if rng.below(2) == 0 { axis as i64 } else { axis as i64 - rank as i64 };
        let src = graph(
            &[(dtype, ty(dtype, &shape)), (index_dtype, ty(index_dtype, &ishape))],
            &format!("%r = gather(%a0, %a1) {{axis={axis}}}"),
            pre,
            post,
        );
        let x = tensor(&mut rng, dtype, &shape);
        let size = shape[axis.rem_euclid(rank as i64) as usize];
        native += check(&src, &[x, indices(&mut rng, index_dtype, &ishape, size)], OpKind::Gather);
    }
    assert!(native >= 100, "only {native} cases ran gather natively");
}

#[test]
fn scatter_add_matches_the_interpreter() {
    let mut rng = Rng(5);
    let mut native = 0;
    for _ in 0..120 {
        let dtype = rng.pick(&[DType::F32, DType::I64, DType::U8, DType::F16]);
        let index_dtype = rng.pick(&[DType::I32, DType::I64]);
        let rank = 1 + rng.below(3) as usize;
        let shape = rng.shape(rank);
        let axis = rng.below(rank as u64) as usize;
        let ishape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if d == axis { rng.dim() } else { rng.below(n as u64 + 1) as usize })
            .collect();
        let ishape = if shape[axis] == 0 { ishape.iter().map(|_| 0).collect() } else { ishape };
        let (pre, post) = options(&mut rng, dtype);
        let src = graph(
            &[(dtype, ty(dtype, &shape)), (index_dtype, ty(index_dtype, &ishape)), (dtype, ty(dtype, &ishape))],
            &format!("%r = scatter_add(%a0, %a1, %a2) {{axis={axis}}}"),
            pre,
            post,
        );
        let inputs = [
            tensor(&mut rng, dtype, &shape),
            indices(&mut rng, index_dtype, &ishape, shape[axis]),
            tensor(&mut rng, dtype, &ishape),
        ];
        native += check(&src, &inputs, OpKind::ScatterAdd);
    }
    assert!(native >= 60, "only {native} cases ran scatter_add natively");
}

#[test]
fn symbolic_dims_take_their_sizes_from_the_run() {
    let cases: &[(&str, OpKind)] = &[
        ("graph g(%x: f32[n, 3], %y: f32[m, 3]) {\n  %r = cat(%x, %y) {axis=0}\n  return %r\n}", OpKind::Cat),
        ("graph g(%x: f32[3, n], %y: f32[3, m]) {\n  %r = cat(%y, %x, %y) {axis=1}\n  return %r\n}", OpKind::Cat),
        (
            "graph g(%x: f32[n, m], %y: f32[n, 3]) {\n  %r = pad(%x) {low=[1, -1], high=[0, 2]}\n  return %r\n}",
            OpKind::Pad,
        ),
        ("graph g(%x: f32[n, m], %y: f32[n, 3]) {\n  %r = rev(%x) {axes=[0, 1]}\n  return %r\n}", OpKind::Rev),
        ("graph g(%x: f32[n, m], %y: f32[n, 3]) {\n  %r = rev(%x) {axes=[0]}\n  return %r\n}", OpKind::Rev),
    ];
    let mut rng = Rng(6);
    for &(src, op) in cases {
        for (n, m) in [(0, 2), (1, 1), (2, 0), (3, 4), (7, 1)] {
            let g = parse(src);
            let shape = |k: usize| -> Vec<usize> {
                g.ty(g.inputs()[k])
                    .shape
                    .dims()
                    .iter()
                    .map(|d| match d.to_string().as_str() {
                        "n" => n,
                        "m" => m,
                        s => s.parse().unwrap(),
                    })
                    .collect()
            };
            if op == OpKind::Pad && m == 0 {
                continue; // cropping 1 from an empty axis has no size
            }
            let inputs = [tensor(&mut rng, DType::F32, &shape(0)), tensor(&mut rng, DType::F32, &shape(1))];
            assert_eq!(check(src, &inputs, op), 1, "{src}");
        }
    }
    // Gather with an index that a symbolic dim lets outgrow `x` off the axis: the same error.
    let src = "graph g(%x: f32[n, 4], %i: i64[2, m]) {\n  %r = gather(%x, %i) {axis=0}\n  return %r\n}";
    for (n, m) in [(3, 4), (3, 2), (1, 4), (3, 5), (3, 0)] {
        let x = tensor(&mut rng, DType::F32, &[n, 4]);
        let i = indices(&mut rng, DType::I64, &[2, m], n);
        assert_eq!(check(src, &[x, i], OpKind::Gather), 1);
    }
}

#[test]
fn out_of_range_indices_are_the_same_typed_error_everywhere() {
    let src = "graph g(%x: f32[3, 4], %i: INDEX[2, 4]) {\n  %r = gather(%x, %i) {axis=0}\n  return %r\n}";
    for index_dtype in [DType::I32, DType::I64] {
        let src = src.replace("INDEX", &index_dtype.to_string());
        let x = Tensor::from_f32(&[3, 4], (0..12).map(|v| v as f32).collect()).unwrap();
        for (bad, at) in [(3, 5), (-4, 0), (7, 7), (i32::MIN as i64, 2)] {
            let mut v = vec![0i64, 1, 2, -1, -2, -3, 1, 0];
            v[at] = bad;
            v[7] = if at == 7 { bad } else { 99 }; // a later bad index is not the one reported
            let i = Tensor::from_ints(index_dtype, &[2, 4], v).unwrap();
            check(&src, &[x.clone(), i.clone()], OpKind::Gather);
            let g = parse(&src);
            let (_, native) = plans(&g);
            for plan in &native {
                let e = plan.run(&[x.clone(), i.clone()]).unwrap_err();
                assert_eq!(run_error(&e), ("gather", EvalError::IndexOutOfRange { index: bad, size: 3 }));
                assert!(e.to_string().contains(&format!("gather: index {bad} is out of range")), "{e}");
            }
        }
    }
    // scatter_add reports its first bad index the same way.
    let src = "graph g(%x: i64[4], %i: i64[3], %s: i64[3]) {\n  %r = scatter_add(%x, %i, %s) {axis=0}\n  return %r\n}";
    let x = Tensor::from_i64(&[4], vec![1, 2, 3, 4]).unwrap();
    let s = Tensor::from_i64(&[3], vec![10, 20, 30]).unwrap();
    let i = Tensor::from_i64(&[3], vec![1, -5, 9]).unwrap();
    check(src, &[x.clone(), i.clone(), s.clone()], OpKind::ScatterAdd);
    let (_, native) = plans(&parse(src));
    let e = native[1].run(&[x, i, s]).unwrap_err();
    assert_eq!(run_error(&e), ("scatter_add", EvalError::IndexOutOfRange { index: -5, size: 4 }));
}

/// Outputs of hundreds of kilobytes: the copies split over two threads, and a bad index in a
/// late chunk does not hide an earlier one.
#[test]
fn large_copies_split_over_threads_and_agree() {
    let mut rng = Rng(7);
    let x = tensor(&mut rng, DType::F32, &[96, 8, 64]);
    let y = tensor(&mut rng, DType::F32, &[64, 8, 64]);
    let cases = [
        ("graph g(%x: f32[96, 8, 64], %y: f32[64, 8, 64]) {\n  %r = cat(%x, %y) {axis=0}\n  return %r\n}", OpKind::Cat),
        ("graph g(%x: f32[96, 8, 64], %y: f32[96, 8, 64]) {\n  %r = cat(%x, %y) {axis=2}\n  return %r\n}", OpKind::Cat),
        (
            "graph g(%x: f32[96, 8, 64], %y: f32[64, 8, 64]) {\n  %r = pad(%x) {low=[0, 1, -3], high=[2, 1, 5]}\n  return %r\n}",
            OpKind::Pad,
        ),
        (
            "graph g(%x: f32[96, 8, 64], %y: f32[64, 8, 64]) {\n  %r = pad(%x) {low=[0, 0, 1], high=[0, 0, 1], interior=[0, 1, 1], value=-1.0}\n  return %r\n}",
            OpKind::Pad,
        ),
        ("graph g(%x: f32[96, 8, 64], %y: f32[64, 8, 64]) {\n  %r = rev(%x) {axes=[0, 2]}\n  return %r\n}", OpKind::Rev),
        ("graph g(%x: f32[96, 8, 64], %y: f32[64, 8, 64]) {\n  %r = rev(%x) {axes=[1]}\n  return %r\n}", OpKind::Rev),
    ];
    for (src, op) in cases {
        let y = if src.contains("%y: f32[96") { x.clone() } else { y.clone() };
        assert_eq!(check(src, &[x.clone(), y], op), 1, "{src}");
    }
    let src = "graph g(%x: f32[96, 8, 64], %i: i64[200, 8, 64]) {\n  %r = gather(%x, %i) {axis=0}\n  return %r\n}";
    let i = indices(&mut rng, DType::I64, &[200, 8, 64], 96);
    assert_eq!(check(src, &[x.clone(), i.clone()], OpKind::Gather), 1);
    let mut v: Vec<i64> = i.to_f64_vec().into_iter().map(|f| f as i64).collect();
    let n = v.len();
    v[n - 3] = -97;
    v[n / 2 + 7] = 96;
    let i = Tensor::from_i64(&[200, 8, 64], v).unwrap();
    check(src, &[x.clone(), i.clone()], OpKind::Gather);
    let e = plans(&parse(src)).1[1].run(&[x, i]).unwrap_err();
    assert_eq!(run_error(&e), ("gather", EvalError::IndexOutOfRange { index: 96, size: 96 }));
}

/// rotate_half (slice the halves, negate one, cat them back), as RoPE computes it.
const ROPE: &str = "graph rope(%x: f32[s, 4, 16], %cos: f32[s, 1, 16], %sin: f32[s, 1, 16]) {
  %x1 = slice(%x) {axis=2, start=0, end=8}
  %x2 = slice(%x) {axis=2, start=8}
  %n2 = neg(%x2)
  %r = cat(%n2, %x1) {axis=2}
  %a = mul(%x, %cos)
  %b = mul(%r, %sin)
  %y = add(%a, %b)
  return %y
}";

#[test]
fn a_rope_model_runs_without_graph_breaks() {
    let g = parse(ROPE);
    let mut rng = Rng(8);
    for threads in [1, 2] {
        let plan = compile(&g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
        let p = plan.program().unwrap();
        assert!(!p.steps.iter().any(|s| matches!(s, Step::Interp(_))), "{p}");
        assert!(p.steps.iter().any(|s| matches!(s, Step::Library(l) if l.op == OpKind::Cat)), "{p}");
        assert_eq!(plan.native_kernels(), p.kernels().count(), "every kernel is native:\n{p}");
        for s in [0, 1, 5, 33] {
            let inputs = [
                tensor(&mut rng, DType::F32, &[s, 4, 16]),
                tensor(&mut rng, DType::F32, &[s, 1, 16]),
                tensor(&mut rng, DType::F32, &[s, 1, 16]),
            ];
            let want = interp::run(&g, &inputs, &Options::default()).unwrap().outputs;
            let got = plan.run(&inputs).unwrap().outputs;
            // Bit for bit, except which NaN payload the kernels' arithmetic propagates.
            let (TensorData::F32(a), TensorData::F32(b)) = (want[0].data(), got[0].data()) else { unreachable!() };
            assert_eq!(a.len(), b.len());
            for (k, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "s = {s}, element {k}: {x} vs {y}");
            }
        }
    }
}
