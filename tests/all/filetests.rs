//! File tests: every `tests/filetests/**/*.lad` file is a graph in the text form with test
//! directives in full-line `;` comments. `cargo test --test all -- filetests::` runs them all,
//! prints each failure as `path:line: message` and a summary `filetests: N passed, M failed,
//! K skipped`, and fails once at the end. `LADDER_BLESS=1 cargo test --test all -- filetests::`
//! rewrites the failing expectations from what the code does now instead of failing (review the
//! diff!): a failing `run` line gets the first executor's outputs (or `error: <message>`),
//! failing `check` lines are replaced by the whole stage output, a wrong `error`/`error-at` by
//! the actual message and position. Passing lines are left as written.
//!
//! Directives (a comment line `; word: ...` whose word is not one of these is an error, so a
//! typo cannot silently disable a test; write other comments without a leading `word:`):
//!
//! - `; run: x=[[1, 2], [3, 4]] y=2.5 => [[3.5, 4.5], [5.5, 6.5]]`: run the graph on the
//!   given inputs (by graph input name, `%` optional; the dtype is the input's declared dtype,
//!   symbolic dims bind from the given shapes) and compare every output, in order, with the
//!   comma-separated tensors after `=>`. Several `run` lines are run independently.
//!   `; run: x=[1] => error: <substring>` expects the run to fail with that in its message.
//! - Tensor literals: a bare scalar is rank 0 (`2.5`, `-3`, `nan`, `inf`, `-inf`, `true`,
//!   `false`); nested brackets give the shape (`[]` is shape [0], `[[], []]` is [2, 0]).
//!   A shape that nesting cannot express (a 0 dim before the last) is written like a blob:
//!   the type, then the flat row-major values: `f32[0, 3] []`, `i64[2, 2] [1, 2, 3, 4]`.
//!   The type's dtype must be the value's declared dtype. Integer dtypes take integers; bool
//!   takes `true`/`false` (or 0/1); floats take any number and are parsed straight to the
//!   dtype.
//! - `; tolerance: 1e-6`: compare floats with |got - want| <= tol + tol * |want|. Without
//!   it the comparison is exact: bit-equal in the output dtype (so -0.0 != 0.0), except that
//!   any NaN equals any NaN. Infinities must match exactly either way.
//! - `; executors: interp, cpu`: run only on these executors (default: all of `EXECUTORS`:
//!   `interp`, the reference interpreter; `reference`, the reference plan (prims scheduled into
//!   kernels, run by the kernel IR's reference executor); `cpu`, the native plan `ladder run`
//!   makes (Cranelift kernels, GEMM, library kernels, two threads)). So a file found by a fuzz
//!   target reproduces a native failure as it is.
//! - `; check: <text>`: FileCheck-style. The output of the stage (below) must contain each
//!   check's text as a substring of a line, the checks matching in order on successive lines
//!   (each check on a line after the previous check's line).
//! - `; stage: parsed`: which output `check` lines look at; `parsed` (the default) is the
//!   canonical text `ladder::text::print(&parse(file))`; the others are the rungs of
//!   `ladder::pipeline::RUNGS` (`functional`, `prims`, `joint`, `simplified`, `recovered`,
//!   `kernels`), as `ladder dump --stage` prints them (`joint`: the first output
//!   differentiated with respect to every float input).
//! - `; mode: reference`: lower as the reference plan does (every op to prims, nothing
//!   recovered) for the `stage` output; `native` (the default) lowers as the native plan.
//! - `; error: <substring>`: the file must fail to parse with that in the message;
//!   `; error-at: LINE:COL` also pins the position.
//! - `; requires: view, sum`: the file uses ops another family provides; while any of them
//!   has no spec row yet, the file is skipped (and listed as skipped) instead of failing.
//!
//! Every file that parses is also verified (`Stage::HighLevel`) and must round-trip through
//! the printer (`parse(print(g)) == g`).

use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use ladder::ir::verify::{verify, Stage};
use ladder::pipeline::Mode;
use ladder::{DType, Graph, OpKind, Tensor, TensorData};

/// Something that can run a graph.
struct Executor {
    name: &'static str,
    run: fn(&Graph, &[Tensor]) -> Result<Vec<Tensor>, String>,
}

const EXECUTORS: &[Executor] = &[
    Executor { name: "interp", run: run_interp },
    Executor { name: "reference", run: run_reference },
    Executor { name: "cpu", run: run_cpu },
];

fn run_interp(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    ladder::interp::run(g, inputs, &ladder::interp::Options::default()).map(|o| o.outputs).map_err(|e| e.to_string())
}

/// The reference plan: lowered to prims, scheduled into kernels, every kernel run by the
/// kernel IR's reference executor.
fn run_reference(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let plan = ladder::compile(g, &ladder::CompileOptions::reference()).map_err(|e| e.to_string())?;
    plan.run(inputs).map(|o| o.outputs).map_err(|e| e.to_string())
}

/// The native plan `ladder run` makes: Cranelift kernels, the GEMM and the library kernels,
/// on two threads (so the parallel splits run too).
fn run_cpu(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let options = ladder::CompileOptions::native_cpu(2).map_err(|e| e.to_string())?;
    let plan = ladder::compile(g, &options).map_err(|e| e.to_string())?;
    plan.run(inputs).map(|o| o.outputs).map_err(|e| e.to_string())
}

/// The outputs `; check:` lines can look at, by `; stage:` name: every rung the pipeline
/// can print (`ladder::pipeline::RUNGS`), the first being the parsed graph itself, lowered
/// in `mode`.
fn stage_text(stage: &str, mode: Mode, g: &Graph) -> Result<String, String> {
    ladder::pipeline::dump(g, mode, stage, &ladder::text::PrintOptions::default()).map_err(|e| e.to_string())
}

const DIRECTIVES: &[&str] =
    &["run", "tolerance", "executors", "stage", "mode", "check", "error", "error-at", "requires"];

// ---------------------------------------------------------------------------------------
// Directives
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Directive {
    /// 1-based line in the file.
    line: usize,
    word: String,
    value: String,
}

/// The `; word: value` directives of a file, and failures for unknown words.
fn directives(text: &str) -> (Vec<Directive>, Vec<Failure>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let Some(rest) = raw.trim_start().strip_prefix(';') else { continue };
        let rest = rest.trim_start();
        let Some(colon) = rest.find(':') else { continue };
        let word = &rest[..colon];
        if word.is_empty() || !word.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            continue;
        }
        if !DIRECTIVES.contains(&word) {
            bad.push(Failure::new(i + 1, format!("unknown directive `{word}:` (known: {})", DIRECTIVES.join(", "))));
            continue;
        }
        out.push(Directive { line: i + 1, word: word.to_string(), value: rest[colon + 1..].trim().to_string() });
    }
    (out, bad)
}

#[derive(Clone, Debug, PartialEq)]
struct Failure {
    line: usize,
    message: String,
}

impl Failure {
    fn new(line: usize, message: impl Into<String>) -> Failure {
        Failure { line, message: message.into() }
    }
}

// ---------------------------------------------------------------------------------------
// Tensor literals
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    LBr,
    RBr,
    Comma,
    Eq,
    Minus,
    Word(String),
    Num(String),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::LBr => "`[`".into(),
            Tok::RBr => "`]`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Eq => "`=`".into(),
            Tok::Minus => "`-`".into(),
            Tok::Word(w) => format!("`{w}`"),
            Tok::Num(n) => format!("`{n}`"),
        }
    }
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '[' | ']' | ',' | '=' | '-' => {
                out.push(match c {
                    '[' => Tok::LBr,
                    ']' => Tok::RBr,
                    ',' => Tok::Comma,
                    '=' => Tok::Eq,
                    _ => Tok::Minus,
                });
                i += 1;
            }
            '"' => {
                let end = chars[i + 1..].iter().position(|&d| d == '"').ok_or("unterminated quoted name")?;
                out.push(Tok::Word(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                    i += 1;
                    if i < chars.len() && (chars[i] == '-' || chars[i] == '+') {
                        i += 1;
                    }
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                out.push(Tok::Num(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == '%' => {
                let start = if c == '%' { i + 1 } else { i };
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                    i += 1;
                }
                out.push(Tok::Word(chars[start..i].iter().collect()));
            }
            _ => return Err(format!("unexpected character {c:?}")),
        }
    }
    Ok(out)
}

/// One scalar of a literal, kept as written until its dtype is known.
#[derive(Clone, Debug, PartialEq)]
enum Lit {
    Int(i128),
    /// Decimal text, `inf` or `nan`, with its sign.
    Float(String),
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Scalar(Lit),
    List(Vec<Literal>),
    /// `dtype[dims] [flat values]`
    Typed {
        dtype: DType,
        dims: Vec<usize>,
        flat: Vec<Lit>,
    },
}

struct LitParser {
    toks: Vec<Tok>,
    pos: usize,
}

impl LitParser {
    fn new(s: &str) -> Result<LitParser, String> {
        Ok(LitParser { toks: lex(s)?, pos: 0 })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn found(&self) -> String {
        self.peek().map_or_else(|| "the end of the line".to_string(), Tok::describe)
    }

    fn expect(&mut self, t: Tok) -> Result<(), String> {
        if self.peek() == Some(&t) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected {}, found {}", t.describe(), self.found()))
        }
    }

    fn scalar(&mut self) -> Result<Lit, String> {
        let neg = self.peek() == Some(&Tok::Minus);
        if neg {
            self.pos += 1;
        }
        let sign = if neg { "-" } else { "" };
        match self.next() {
            Some(Tok::Num(n)) if !n.contains(['.', 'e', 'E']) => {
                let v: i128 = n.parse().map_err(|_| format!("integer {n} is too large"))?;
                Ok(Lit::Int(if neg { -v } else { v }))
            }
            Some(Tok::Num(n)) => Ok(Lit::Float(format!("{sign}{n}"))),
            Some(Tok::Word(w)) if w == "nan" || w == "inf" => Ok(Lit::Float(format!("{sign}{w}"))),
            Some(Tok::Word(w)) if !neg && (w == "true" || w == "false") => Ok(Lit::Bool(w == "true")),
            _ => {
                self.pos -= 1;
                Err(format!("expected a number, `nan`, `inf`, `true` or `false`, found {}", self.found()))
            }
        }
    }

    fn literal(&mut self) -> Result<Literal, String> {
        match self.peek() {
            Some(Tok::LBr) => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.peek() == Some(&Tok::RBr) {
                    self.pos += 1;
                    return Ok(Literal::List(items));
                }
                loop {
                    items.push(self.literal()?);
                    match self.next() {
                        Some(Tok::RBr) => return Ok(Literal::List(items)),
                        Some(Tok::Comma) => {}
                        _ => {
                            self.pos -= 1;
                            return Err(format!("expected `,` or `]`, found {}", self.found()));
                        }
                    }
                }
            }
            Some(Tok::Word(w)) if DType::from_name(w).is_some() => {
                let dtype = DType::from_name(w).unwrap_or(DType::F32);
                self.pos += 1;
                self.expect(Tok::LBr)?;
                let mut dims = Vec::new();
                while self.peek() != Some(&Tok::RBr) {
                    match self.next() {
                        Some(Tok::Num(n)) => dims.push(n.parse::<usize>().map_err(|_| format!("bad dim `{n}`"))?),
                        _ => {
                            self.pos -= 1;
                            return Err(format!("expected a dim, found {}", self.found()));
                        }
                    }
                    if self.peek() == Some(&Tok::Comma) {
                        self.pos += 1;
                    }
                }
                self.pos += 1;
                self.expect(Tok::LBr)?;
                let mut flat = Vec::new();
                while self.peek() != Some(&Tok::RBr) {
                    flat.push(self.scalar()?);
                    if self.peek() == Some(&Tok::Comma) {
                        self.pos += 1;
                    } else if self.peek() != Some(&Tok::RBr) {
                        return Err(format!("expected `,` or `]`, found {}", self.found()));
                    }
                }
                self.pos += 1;
                Ok(Literal::Typed { dtype, dims, flat })
            }
            _ => Ok(Literal::Scalar(self.scalar()?)),
        }
    }
}

/// The shape and row-major scalars of a literal, for a value declared `dtype`.
fn flatten(lit: &Literal, dtype: DType) -> Result<(Vec<usize>, Vec<Lit>), String> {
    match lit {
        Literal::Scalar(l) => Ok((Vec::new(), vec![l.clone()])),
        Literal::Typed { dtype: d, dims, flat } => {
            if *d != dtype {
                return Err(format!("the literal is {d} but the value is declared {dtype}"));
            }
            let n: usize = dims.iter().product();
            if n != flat.len() {
                return Err(format!("shape {dims:?} needs {n} values, found {}", flat.len()));
            }
            Ok((dims.clone(), flat.clone()))
        }
        Literal::List(items) => {
            let mut shape = None;
            let mut flat = Vec::new();
            for item in items {
                if matches!(item, Literal::Typed { .. }) {
                    return Err("a typed literal cannot be nested in brackets".into());
                }
                let (s, f) = flatten(item, dtype)?;
                match &shape {
                    None => shape = Some(s),
                    Some(prev) if *prev != s => {
                        return Err(format!("ragged nesting: an element of shape {s:?} next to one of shape {prev:?}"))
                    }
                    Some(_) => {}
                }
                flat.extend(f);
            }
            let mut dims = vec![items.len()];
            dims.extend(shape.unwrap_or_default());
            Ok((dims, flat))
        }
    }
}

fn lit_f64(l: &Lit, dtype: DType) -> Result<f64, String> {
    match l {
        Lit::Int(n) => Ok(*n as f64),
        Lit::Float(s) => s.parse::<f64>().map_err(|_| format!("bad number `{s}`")),
        Lit::Bool(b) => Err(format!("`{b}` is not a {dtype} value")),
    }
}

fn lit_f32(l: &Lit, dtype: DType) -> Result<f32, String> {
    match l {
        Lit::Int(n) => Ok(*n as f32),
        Lit::Float(s) => s.parse::<f32>().map_err(|_| format!("bad number `{s}`")),
        Lit::Bool(b) => Err(format!("`{b}` is not a {dtype} value")),
    }
}

fn lit_int(l: &Lit, dtype: DType) -> Result<i128, String> {
    match l {
        Lit::Int(n) => Ok(*n),
        Lit::Float(s) => Err(format!("`{s}` is not a {dtype} value (write an integer)")),
        Lit::Bool(b) => Err(format!("`{b}` is not a {dtype} value")),
    }
}

fn lit_bool(l: &Lit) -> Result<bool, String> {
    match l {
        Lit::Bool(b) => Ok(*b),
        Lit::Int(0) => Ok(false),
        Lit::Int(1) => Ok(true),
        _ => Err(format!("{l:?} is not a bool value (write true or false)")),
    }
}

/// A tensor of `dtype` from a literal.
fn make_tensor(lit: &Literal, dtype: DType) -> Result<Tensor, String> {
    let (shape, flat) = flatten(lit, dtype)?;
    let collect_f32 = || flat.iter().map(|l| lit_f32(l, dtype)).collect::<Result<Vec<f32>, String>>();
    let collect_int = |lo: i128, hi: i128| {
        flat.iter()
            .map(|l| {
                let v = lit_int(l, dtype)?;
                if v < lo || v > hi {
                    return Err(format!("{v} does not fit in {dtype}"));
                }
                Ok(v as i64)
            })
            .collect::<Result<Vec<i64>, String>>()
    };
    let data = match dtype {
        DType::F32 => TensorData::F32(collect_f32()?),
        DType::F16 => TensorData::F16(collect_f32()?.into_iter().map(f16::from_f32).collect()),
        DType::BF16 => TensorData::BF16(collect_f32()?.into_iter().map(bf16::from_f32).collect()),
        DType::F64 => TensorData::F64(flat.iter().map(|l| lit_f64(l, dtype)).collect::<Result<_, _>>()?),
        DType::I32 => {
            TensorData::I32(collect_int(i32::MIN as i128, i32::MAX as i128)?.into_iter().map(|v| v as i32).collect())
        }
        DType::I64 => TensorData::I64(collect_int(i64::MIN as i128, i64::MAX as i128)?),
        DType::Bool => TensorData::Bool(flat.iter().map(lit_bool).collect::<Result<_, _>>()?),
        d => {
            let (lo, hi) = d.int_range().ok_or_else(|| format!("{d} has no literal form"))?;
            // A u64 above i64::MAX is kept as its bit pattern, which `from_ints` reads back.
            let vals = flat.iter().map(|l| {
                let v = lit_int(l, dtype)?;
                if v < lo || v > hi {
                    return Err(format!("{v} does not fit in {dtype}"));
                }
                Ok(v as i64)
            });
            TensorData::from_ints(d, vals.collect::<Result<Vec<i64>, String>>()?).ok_or("not an integer type")?
        }
    };
    Tensor::new(shape, data).map_err(|e| e.to_string())
}

/// Parses `a, b, c` (each a literal) to the end of the text.
fn parse_expected(s: &str) -> Result<Vec<Literal>, String> {
    let mut p = LitParser::new(s)?;
    let mut out = Vec::new();
    if p.at_end() {
        return Ok(out);
    }
    loop {
        out.push(p.literal()?);
        if p.at_end() {
            return Ok(out);
        }
        p.expect(Tok::Comma)?;
    }
}

/// Parses `name=literal name=literal ...`.
fn parse_inputs(s: &str) -> Result<Vec<(String, Literal)>, String> {
    let mut p = LitParser::new(s)?;
    let mut out = Vec::new();
    while !p.at_end() {
        let name = match p.next() {
            Some(Tok::Word(w)) => w,
            Some(Tok::Num(n)) if n.chars().all(|c| c.is_ascii_digit()) => n,
            _ => {
                p.pos -= 1;
                return Err(format!("expected an input name like `x=`, found {}", p.found()));
            }
        };
        p.expect(Tok::Eq)?;
        let lit = p.literal().map_err(|e| format!("input `{name}`: {e}"))?;
        out.push((name, lit));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Formatting and comparing tensors
// ---------------------------------------------------------------------------------------

fn fmt_f32(x: f32) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:?}")
    }
}

fn fmt_f64(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:?}")
    }
}

fn element_strings(t: &Tensor) -> Vec<String> {
    match t.data() {
        TensorData::F32(v) => v.iter().map(|&x| fmt_f32(x)).collect(),
        TensorData::F16(v) => v.iter().map(|x| fmt_f32(x.to_f32())).collect(),
        TensorData::BF16(v) => v.iter().map(|x| fmt_f32(x.to_f32())).collect(),
        TensorData::F64(v) => v.iter().map(|&x| fmt_f64(x)).collect(),
        TensorData::I32(v) => v.iter().map(|x| x.to_string()).collect(),
        TensorData::I64(v) => v.iter().map(|x| x.to_string()).collect(),
        TensorData::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
        TensorData::U64(v) => v.iter().map(|x| x.to_string()).collect(),
        d => d.ints().unwrap_or_default().iter().map(|x| x.to_string()).collect(),
    }
}

/// A tensor as a literal that parses back to it: nested brackets where they can express the
/// shape, otherwise `dtype[dims] [values]`.
fn format_tensor(t: &Tensor) -> String {
    let elems = element_strings(t);
    let shape = t.shape();
    let nestable = shape.is_empty() || shape[..shape.len() - 1].iter().all(|&d| d > 0);
    if !nestable {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        return format!("{}[{}] [{}]", t.dtype(), dims.join(", "), elems.join(", "));
    }
    fn nest(shape: &[usize], elems: &[String]) -> String {
        match shape.split_first() {
            None => elems[0].clone(),
            Some((&n, rest)) => {
                let size: usize = rest.iter().product();
                let parts: Vec<String> = (0..n).map(|i| nest(rest, &elems[i * size..(i + 1) * size])).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    nest(shape, &elems)
}

#[derive(Clone, Copy, Debug)]
enum Elem {
    F(f64),
    I(i64),
    B(bool),
}

fn elems(t: &Tensor) -> Vec<Elem> {
    match t.data() {
        TensorData::I32(v) => v.iter().map(|&x| Elem::I(x as i64)).collect(),
        TensorData::I64(v) => v.iter().map(|&x| Elem::I(x)).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| Elem::B(x)).collect(),
        _ => t.to_f64_vec().into_iter().map(Elem::F).collect(),
    }
}

fn elem_eq(got: Elem, want: Elem, tol: Option<f64>) -> bool {
    match (got, want) {
        (Elem::F(g), Elem::F(w)) => {
            if g.is_nan() || w.is_nan() {
                return g.is_nan() && w.is_nan();
            }
            match tol {
                Some(t) if g.is_finite() && w.is_finite() => (g - w).abs() <= t + t * w.abs(),
                _ => g.to_bits() == w.to_bits(),
            }
        }
        (Elem::I(g), Elem::I(w)) => g == w,
        (Elem::B(g), Elem::B(w)) => g == w,
        _ => false,
    }
}

/// `Ok` when `got` matches `want`; otherwise why not.
fn compare(got: &Tensor, want: &Tensor, tol: Option<f64>) -> Result<(), String> {
    let shown = || format!("got {}, want {}", format_tensor(got), format_tensor(want));
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {} but expected {}: {}", got.dtype(), want.dtype(), shown()));
    }
    if got.shape() != want.shape() {
        return Err(format!("shape {:?} but expected {:?}: {}", got.shape(), want.shape(), shown()));
    }
    let (g, w) = (elems(got), elems(want));
    if let Some(i) = (0..g.len()).find(|&i| !elem_eq(g[i], w[i], tol)) {
        let gs = element_strings(got);
        let ws = element_strings(want);
        return Err(format!("element {i} is {} but expected {}: {}", gs[i], ws[i], shown()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Running one file
// ---------------------------------------------------------------------------------------

/// What running one file produced.
#[derive(Debug, Default)]
struct Report {
    failures: Vec<Failure>,
    /// Set when the file was skipped, with the reason.
    skipped: Option<String>,
    /// In bless mode, the file's new text when it differs from the old.
    blessed: Option<String>,
}

/// What a `run` line expects.
enum Expect {
    Outputs(Vec<Tensor>),
    /// A failure whose message contains this.
    Error(String),
}

/// `None` when an executor's result meets the expectation; otherwise what is wrong.
fn check_run(result: &Result<Vec<Tensor>, String>, want: &Expect, g: &Graph, tol: Option<f64>) -> Option<String> {
    match (result, want) {
        (Err(e), Expect::Error(w)) if e.contains(w.as_str()) => None,
        (Err(e), Expect::Error(w)) => Some(format!("the run failed with `{e}`, which does not contain `{w}`")),
        (Ok(outs), Expect::Error(w)) => {
            let shown: Vec<String> = outs.iter().map(format_tensor).collect();
            Some(format!("expected an error containing `{w}`, but the run gave {}", shown.join(", ")))
        }
        (Err(e), Expect::Outputs(_)) => Some(format!("the run failed: {e}")),
        (Ok(outs), Expect::Outputs(want)) => {
            if outs.len() != want.len() {
                return Some(format!("{} outputs, expected {}", outs.len(), want.len()));
            }
            let problems: Vec<String> = outs
                .iter()
                .zip(want)
                .enumerate()
                .filter_map(|(i, (o, w))| {
                    let name = g.outputs().get(i).map_or("?", |o| o.name.as_str());
                    compare(o, w, tol).err().map(|e| format!("output {i} (`{name}`): {e}"))
                })
                .collect();
            (!problems.is_empty()).then(|| problems.join("; "))
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Builds the inputs of a `run` line for graph `g`.
fn make_inputs(g: &Graph, text: &str) -> Result<Vec<Tensor>, String> {
    let given = parse_inputs(text)?;
    let n = g.inputs().len();
    let mut slots: Vec<Option<Tensor>> = vec![None; n];
    for (name, lit) in given {
        let i = (0..n).find(|&i| g.input_name(i) == name).ok_or_else(|| {
            let names: Vec<String> = (0..n).map(|i| g.input_name(i)).collect();
            format!("the graph has no input `{name}` (its inputs: {})", names.join(", "))
        })?;
        if slots[i].is_some() {
            return Err(format!("input `{name}` is given twice"));
        }
        let dtype = g.ty(g.inputs()[i]).dtype;
        slots[i] = Some(make_tensor(&lit, dtype).map_err(|e| format!("input `{name}`: {e}"))?);
    }
    let missing: Vec<String> = (0..n).filter(|&i| slots[i].is_none()).map(|i| g.input_name(i)).collect();
    if !missing.is_empty() {
        return Err(format!("no value given for input(s) {}", missing.join(", ")));
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Runs the file's text; `bless` rewrites expectations instead of failing on them.
fn run_file(text: &str, bless: bool) -> Report {
    let mut report = Report::default();
    let (dirs, bad) = directives(text);
    report.failures.extend(bad);
    let fail = |r: &mut Report, line: usize, m: String| r.failures.push(Failure::new(line, m));

    let of = |w: &str| dirs.iter().filter(|d| d.word == w).cloned().collect::<Vec<_>>();
    let (runs, checks, errors, error_ats) = (of("run"), of("check"), of("error"), of("error-at"));

    for d in of("requires") {
        let missing: Vec<&str> =
            d.value.split(',').map(str::trim).filter(|n| !n.is_empty() && OpKind::from_name(n).is_none()).collect();
        if !missing.is_empty() {
            report.skipped = Some(format!("needs ops not available yet: {}", missing.join(", ")));
            return report;
        }
    }
    if dirs.is_empty() {
        fail(&mut report, 1, "no directives: a file test needs `; run:`, `; check:` or `; error:` lines".into());
        return report;
    }
    let single = |r: &mut Report, w: &str| -> Option<Directive> {
        let all = of(w);
        if let Some(extra) = all.get(1) {
            r.failures.push(Failure::new(extra.line, format!("`{w}:` is given more than once")));
        }
        all.into_iter().next()
    };
    let tolerance = match single(&mut report, "tolerance") {
        None => None,
        Some(d) => match d.value.parse::<f64>() {
            Ok(t) if t >= 0.0 => Some(t),
            _ => {
                fail(&mut report, d.line, format!("bad tolerance `{}` (write a number like 1e-6)", d.value));
                None
            }
        },
    };
    let executors: Vec<&Executor> = match single(&mut report, "executors") {
        None => EXECUTORS.iter().collect(),
        Some(d) => {
            let mut chosen = Vec::new();
            for name in d.value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match EXECUTORS.iter().find(|e| e.name == name) {
                    Some(e) => chosen.push(e),
                    None => {
                        let known: Vec<&str> = EXECUTORS.iter().map(|e| e.name).collect();
                        fail(&mut report, d.line, format!("unknown executor `{name}` (known: {})", known.join(", ")));
                    }
                }
            }
            chosen
        }
    };
    let stage = single(&mut report, "stage");
    let names: Vec<&'static str> = ladder::pipeline::rung_names().collect();
    let stage_name: Option<&'static str> = match &stage {
        None => Some(names[0]),
        Some(d) => match names.iter().find(|n| **n == d.value) {
            Some(n) => Some(*n),
            None => {
                fail(&mut report, d.line, format!("unknown stage `{}` (known: {})", d.value, names.join(", ")));
                None
            }
        },
    };
    let mode = match single(&mut report, "mode") {
        None => Mode::Native,
        Some(d) => match d.value.as_str() {
            "native" => Mode::Native,
            "reference" => Mode::Reference,
            other => {
                fail(&mut report, d.line, format!("unknown mode `{other}` (known: native, reference)"));
                Mode::Native
            }
        },
    };

    // Lines to rewrite in bless mode: line index (0-based) -> new lines.
    let mut rewrites: Vec<(usize, Vec<String>)> = Vec::new();

    let graph = match ladder::text::parse(text) {
        Err(e) => {
            if errors.is_empty() && error_ats.is_empty() {
                fail(&mut report, e.line, format!("parse error at {}:{}: {}", e.line, e.col, e.message));
                return report;
            }
            for d in &errors {
                if !e.message.contains(&d.value) {
                    if bless {
                        rewrites.push((d.line - 1, vec![format!("; error: {}", e.message)]));
                    } else {
                        fail(
                            &mut report,
                            d.line,
                            format!("the parse error is `{}`, which does not contain `{}`", e, d.value),
                        );
                    }
                }
            }
            for d in &error_ats {
                let want =
                    d.value.split_once(':').and_then(|(l, c)| Some((l.trim().parse().ok()?, c.trim().parse().ok()?)));
                match want {
                    None => fail(&mut report, d.line, format!("bad position `{}` (write LINE:COL)", d.value)),
                    Some(pos) if pos == (e.line, e.col) => {}
                    Some(_) if bless => rewrites.push((d.line - 1, vec![format!("; error-at: {}:{}", e.line, e.col)])),
                    Some((l, c)) => fail(
                        &mut report,
                        d.line,
                        format!("the parse error is at {}:{}, expected {l}:{c} ({})", e.line, e.col, e.message),
                    ),
                }
            }
            for d in runs.iter().chain(&checks) {
                fail(&mut report, d.line, format!("`{}:` in a file that is expected not to parse", d.word));
            }
            None
        }
        Ok(g) => {
            if let Some(d) = errors.first().or(error_ats.first()) {
                fail(&mut report, d.line, "expected a parse error, but the file parsed".into());
            }
            if let Err(e) = verify(&g, Stage::HighLevel) {
                fail(&mut report, 1, format!("the parsed graph does not verify: {e}"));
            }
            let printed = ladder::text::print(&g);
            match ladder::text::parse(&printed) {
                Ok(back) if back == g => {}
                Ok(_) => fail(&mut report, 1, format!("print/parse does not round-trip; printed:\n{printed}")),
                Err(e) => fail(&mut report, 1, format!("the printed graph does not parse ({e}); printed:\n{printed}")),
            }
            Some(g)
        }
    };

    if let Some(g) = &graph {
        // Checks.
        if let (Some(stage), false) = (stage_name, checks.is_empty()) {
            match stage_text(stage, mode, g) {
                Err(e) => fail(&mut report, checks[0].line, format!("stage failed: {e}")),
                Ok(out) => {
                    let problems = match_checks(&out, &checks);
                    if !bless {
                        report.failures.extend(problems);
                    } else if !problems.is_empty() {
                        // Replace every check line with the whole output, at the first one's place.
                        let new = out.lines().map(str::trim).filter(|l| !l.is_empty());
                        rewrites.push((checks[0].line - 1, new.map(|l| format!("; check: {l}")).collect()));
                        for d in &checks[1..] {
                            rewrites.push((d.line - 1, Vec::new()));
                        }
                    }
                }
            }
        }
        // Runs.
        for d in &runs {
            let Some((lhs, rhs)) = d.value.split_once("=>") else {
                fail(&mut report, d.line, "a `run:` line needs `=>` and the expected outputs (or `error: ...`)".into());
                continue;
            };
            let rhs = rhs.trim();
            let inputs = match make_inputs(g, lhs) {
                Ok(i) => i,
                Err(e) => {
                    fail(&mut report, d.line, e);
                    continue;
                }
            };
            let expected_err = rhs.strip_prefix("error:").map(str::trim);
            let expected = match expected_err {
                Some(want) => Ok(Expect::Error(want.to_string())),
                None => parse_expected(rhs)
                    .and_then(|lits| {
                        if lits.len() != g.outputs().len() {
                            return Err(format!(
                                "{} expected tensors for a graph with {} outputs",
                                lits.len(),
                                g.outputs().len()
                            ));
                        }
                        lits.iter()
                            .zip(g.outputs())
                            .map(|(l, o)| {
                                make_tensor(l, g.ty(o.value).dtype).map_err(|e| format!("output `{}`: {e}", o.name))
                            })
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .map(Expect::Outputs)
                    .map_err(|e| format!("bad expectation: {e}")),
            };
            if let (Err(e), false) = (&expected, bless) {
                fail(&mut report, d.line, e.clone());
                continue;
            }
            // Bless mode runs the first executor only and rewrites the line where it fails.
            let chosen = if bless { &executors[..executors.len().min(1)] } else { &executors[..] };
            for ex in chosen {
                let result = match catch_unwind(AssertUnwindSafe(|| (ex.run)(g, &inputs))) {
                    Ok(r) => r,
                    Err(p) => {
                        fail(&mut report, d.line, format!("[{}] panicked: {}", ex.name, panic_message(&*p)));
                        continue;
                    }
                };
                let problem = match &expected {
                    Ok(want) => check_run(&result, want, g, tolerance),
                    Err(e) => Some(e.clone()),
                };
                let Some(problem) = problem else { continue };
                if !bless {
                    fail(&mut report, d.line, format!("[{}] {problem}", ex.name));
                    continue;
                }
                let new_rhs = match &result {
                    Ok(outs) => outs.iter().map(format_tensor).collect::<Vec<_>>().join(", "),
                    Err(e) => format!("error: {e}"),
                };
                let raw = text.lines().nth(d.line - 1).unwrap_or_default();
                let head = raw.find("=>").map_or(raw, |p| &raw[..p]).trim_end();
                rewrites.push((d.line - 1, vec![format!("{head} => {new_rhs}")]));
            }
        }
    }

    if bless && !rewrites.is_empty() {
        let mut lines: Vec<Option<Vec<String>>> = text.lines().map(|l| Some(vec![l.to_string()])).collect();
        for (i, new) in rewrites {
            if let Some(slot) = lines.get_mut(i) {
                *slot = if new.is_empty() { None } else { Some(new) };
            }
        }
        let mut out: String = lines.into_iter().flatten().flatten().map(|l| l + "\n").collect();
        if !text.ends_with('\n') {
            out.pop();
        }
        if out != text {
            report.blessed = Some(out);
        }
    }
    report
}

/// FileCheck-style matching: each check's text on a line after the previous match.
fn match_checks(output: &str, checks: &[Directive]) -> Vec<Failure> {
    let lines: Vec<&str> = output.lines().collect();
    let mut next = 0;
    for d in checks {
        match lines[next.min(lines.len())..].iter().position(|l| l.contains(d.value.as_str())) {
            Some(p) => next += p + 1,
            None => {
                let mut m = String::new();
                let where_ = if next == 0 {
                    "anywhere in the output".to_string()
                } else {
                    format!("after output line {next} (`{}`)", lines[next - 1].trim())
                };
                let _ = write!(m, "check `{}` not found {where_}; the output is:", d.value);
                for (i, l) in lines.iter().enumerate() {
                    let _ = write!(m, "\n    {:>3} | {l}", i + 1);
                }
                return vec![Failure::new(d.line, m)];
            }
        }
    }
    Vec::new()
}

// ---------------------------------------------------------------------------------------
// The directory walk
// ---------------------------------------------------------------------------------------

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "lad") {
            out.push(path);
        }
    }
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect_files(&root.join("tests/filetests"), &mut files);
    files.sort();
    assert!(!files.is_empty(), "no .lad files under tests/filetests");
    let bless = std::env::var("LADDER_BLESS").is_ok_and(|v| v == "1");

    let (mut passed, mut failed, mut skipped) = (0, 0, Vec::new());
    let mut messages = Vec::new();
    for path in &files {
        let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                messages.push(format!("{shown}:1: cannot read: {e}"));
                failed += 1;
                continue;
            }
        };
        let report = match catch_unwind(AssertUnwindSafe(|| run_file(&text, bless))) {
            Ok(r) => r,
            Err(p) => Report {
                failures: vec![Failure::new(1, format!("panicked: {}", panic_message(&*p)))],
                ..Default::default()
            },
        };
        if let Some(new) = &report.blessed {
            match std::fs::write(path, new) {
                Ok(()) => println!("blessed {shown}"),
                Err(e) => messages.push(format!("{shown}:1: cannot write the blessed file: {e}")),
            }
        }
        if let Some(why) = report.skipped {
            skipped.push(format!("{shown}: skipped: {why}"));
        } else if report.failures.is_empty() {
            passed += 1;
        } else {
            failed += 1;
            for f in report.failures {
                messages.push(format!("{shown}:{}: {}", f.line, f.message));
            }
        }
    }
    for s in &skipped {
        println!("{s}");
    }
    for m in &messages {
        eprintln!("{m}");
    }
    let summary = format!("filetests: {passed} passed, {failed} failed, {} skipped", skipped.len());
    println!("{summary}");
    if !messages.is_empty() {
        panic!("{} file test(s) failed:\n{}\n{summary}", failed, messages.join("\n"));
    }
}

// ---------------------------------------------------------------------------------------
// Tests of the runner itself, on in-memory files
// ---------------------------------------------------------------------------------------

const ADD: &str = "graph g(%x: f32[2, 2], %y: f32[]) {\n  %2 = add(%x, %y)\n  return %2\n}\n";

fn failures(text: &str) -> Vec<Failure> {
    let r = run_file(text, false);
    assert!(r.skipped.is_none());
    r.failures
}

#[test]
fn runner_passes_a_correct_file_and_reports_a_wrong_output_at_its_line() {
    let good = format!("; run: x=[[1, 2], [3, 4]] y=2.5 => [[3.5, 4.5], [5.5, 6.5]]\n{ADD}");
    assert_eq!(failures(&good), vec![]);
    let bad = format!("; a comment line\n; run: x=[[1, 2], [3, 4]] y=2.5 => [[3.5, 4.5], [5.5, 7]]\n{ADD}");
    let f = failures(&bad);
    assert_eq!(f.len(), EXECUTORS.len(), "one failure per executor: {f:?}");
    assert_eq!(f[0].line, 2);
    assert!(f[0].message.contains("element 3 is 6.5 but expected 7.0"), "{}", f[0].message);
    assert!(f[0].message.contains("[interp]"), "{}", f[0].message);
}

#[test]
fn runner_reports_bad_run_lines() {
    let cases = [
        ("; run: x=[[1, 2], [3, 4]] => [[1, 2], [3, 4]]", "no value given for input(s) y"),
        ("; run: x=[[1, 2], [3, 4]] y=1 z=1 => [[1, 2], [3, 4]]", "no input `z`"),
        ("; run: x=[[1, 2], [3]] y=1 => [[1, 2], [3, 4]]", "ragged"),
        ("; run: x=[[1, 2], [3, 4]] y=1 => [[1, 2], [3, 4]], [1]", "2 expected tensors for a graph with 1 outputs"),
        ("; run: x=[[1, 2], [3, 4]] y=true => [[1, 2], [3, 4]]", "`true` is not a f32 value"),
        ("; run: x=i64[2, 2] [1, 2, 3, 4] y=1 => [[1, 2], [3, 4]]", "the literal is i64 but the value is declared f32"),
        ("; run: x=[[1, 2], [3, 4]] y=1 [[1, 2], [3, 4]]", "needs `=>`"),
        ("; run: x=[1, 2, 3, 4] y=1 => [1]", "must have shape [2, 2]"),
        ("; run: x=[[1, 2], [3, 4]] y=1 => error: division", "expected an error containing `division`"),
        ("; tolerance: x\n; run: x=[[1, 2], [3, 4]] y=0 => [[1, 2], [3, 4]]", "bad tolerance"),
        ("; executors: gpu\n; run: x=[[1, 2], [3, 4]] y=0 => [[1, 2], [3, 4]]", "unknown executor `gpu`"),
        ("; chekc: add\n; run: x=[[1, 2], [3, 4]] y=0 => [[1, 2], [3, 4]]", "unknown directive `chekc:`"),
        ("; stage: lowered\n; check: add", "unknown stage `lowered`"),
    ];
    for (dirs, needle) in cases {
        let f = failures(&format!("{dirs}\n{ADD}"));
        assert!(f.iter().any(|f| f.message.contains(needle)), "expected `{needle}` for {dirs:?}, got {f:?}");
    }
    assert!(failures(ADD)[0].message.contains("no directives"));
}

#[test]
fn runner_literals_cover_scalars_specials_and_explicit_shapes() {
    let lit = |s: &str, d: DType| make_tensor(&parse_expected(s).unwrap()[0], d).unwrap();
    assert_eq!(lit("2.5", DType::F32).shape(), &[] as &[usize]);
    assert_eq!(lit("[]", DType::F32).shape(), &[0]);
    assert_eq!(lit("[[], []]", DType::I64).shape(), &[2, 0]);
    let t = lit("f32[0, 3] []", DType::F32);
    assert_eq!(t.shape(), &[0, 3]);
    assert_eq!(format_tensor(&t), "f32[0, 3] []");
    let t = lit("[nan, inf, -inf, -0.0, 1e-8]", DType::F32);
    assert_eq!(format_tensor(&t), "[nan, inf, -inf, -0.0, 1e-8]");
    let t = lit("i64[2, 2] [1, -2, 3, 4]", DType::I64);
    assert_eq!(format_tensor(&t), "[[1, -2], [3, 4]]");
    assert_eq!(format_tensor(&lit("[true, 0, 1]", DType::Bool)), "[true, false, true]");
    assert_eq!(format_tensor(&lit("-7", DType::I32)), "-7");
    assert!(make_tensor(&parse_expected("2.5").unwrap()[0], DType::I64).is_err());
    assert!(make_tensor(&parse_expected("3000000000").unwrap()[0], DType::I32).is_err());
    assert!(parse_expected("[1, 2").is_err());
    // 0.1 is parsed straight to f32, so it equals the f32 the interpreter computes.
    assert_eq!(lit("0.1", DType::F32).as_f32(), Some(&[0.1f32][..]));
}

#[test]
fn runner_compares_exactly_or_within_tolerance() {
    let t = |v: &[f32]| Tensor::from_f32(&[v.len()], v.to_vec()).unwrap();
    assert!(compare(&t(&[f32::NAN, 1.0]), &t(&[f32::NAN, 1.0]), None).is_ok());
    assert!(compare(&t(&[-0.0]), &t(&[0.0]), None).is_err());
    assert!(compare(&t(&[1.0]), &t(&[1.0 + 1e-7]), None).is_err());
    assert!(compare(&t(&[1.0]), &t(&[1.0 + 1e-7]), Some(1e-6)).is_ok());
    assert!(compare(&t(&[1.0]), &t(&[1.1]), Some(1e-6)).is_err());
    assert!(compare(&t(&[f32::INFINITY]), &t(&[f32::MAX]), Some(1.0)).is_err());
    assert!(compare(&t(&[1.0]), &t(&[1.0, 2.0]), None).is_err());
}

#[test]
fn runner_checks_match_in_order_on_later_lines() {
    let file = |checks: &str| format!("{checks}\n{ADD}");
    assert_eq!(failures(&file("; check: graph g(\n; check: %2 = add(%x, %y) : f32[2, 2]\n; check: return %2")), vec![]);
    // Out of order.
    let f = failures(&file("; check: return %2\n; check: add("));
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].line, 2);
    assert!(f[0].message.contains("after output line 3"), "{}", f[0].message);
    // Two checks cannot match the same line.
    let f = failures(&file("; check: add(\n; check: f32[2, 2]"));
    assert_eq!(f.len(), 1, "{f:?}");
}

#[test]
fn runner_expects_parse_errors_with_positions() {
    let bad = "; error: unknown operator `frobnicate`\n; error-at: 4:8\ngraph g(%x: f32[2]) {\n  %1 = frobnicate(%x)\n  return %1\n}\n";
    assert_eq!(failures(bad), vec![]);
    let f = failures(&bad.replace("4:8", "4:9"));
    assert!(f[0].message.contains("is at 4:8, expected 4:9"), "{f:?}");
    let f = failures(&bad.replace("`frobnicate`", "`zap`"));
    assert!(f[0].message.contains("does not contain"), "{f:?}");
    let f = failures(&format!("; error: nope\n{ADD}"));
    assert!(f[0].message.contains("but the file parsed"), "{f:?}");
    // An unexpected parse error is reported at its own line.
    let f = failures("; run: => 1\ngraph g() {\n  %0 = nope()\n  return %0\n}\n");
    assert_eq!(f[0].line, 3);
}

#[test]
fn runner_expects_runtime_errors() {
    let g = "graph g(%a: i64[2], %b: i64[2]) {\n  %2 = div(%a, %b)\n  return %2\n}\n";
    assert_eq!(failures(&format!("; run: a=[1, 2] b=[1, 0] => error: division by zero\n{g}")), vec![]);
    let f = failures(&format!("; run: a=[1, 2] b=[1, 0] => error: overflow\n{g}"));
    assert!(f[0].message.contains("does not contain `overflow`"), "{f:?}");
    let f = failures(&format!("; run: a=[1, 2] b=[1, 0] => [1, 0]\n{g}"));
    assert!(f[0].message.contains("the run failed"), "{f:?}");
}

#[test]
fn runner_skips_files_that_need_missing_ops() {
    let r = run_file(&format!("; requires: add, no_such_op\n; run: x=[[1, 2], [3, 4]] y=1 => [[9]]\n{ADD}"), false);
    assert_eq!(r.skipped.as_deref(), Some("needs ops not available yet: no_such_op"));
    let r = run_file(&format!("; requires: add\n; run: x=[[1, 2], [3, 4]] y=1 => [[9]]\n{ADD}"), false);
    assert!(r.skipped.is_none() && r.failures.len() == EXECUTORS.len());
}

#[test]
fn runner_bless_rewrites_expectations_and_checks() {
    let old = format!(
        "; run: x=[[1, 2], [3, 4]] y=1 => [[0]]\n; run: x=f32[2, 2] [1, 2, 3, 4] y=nan => wrong\n; check: nothing\n; check: else\n{ADD}"
    );
    let r = run_file(&old, true);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let new = r.blessed.expect("the file changes");
    assert!(new.starts_with(
        "; run: x=[[1, 2], [3, 4]] y=1 => [[2.0, 3.0], [4.0, 5.0]]\n; run: x=f32[2, 2] [1, 2, 3, 4] y=nan => [[nan, nan], [nan, nan]]\n; check: graph g(%x: f32[2, 2], %y: f32[]) {\n; check: %2 = add(%x, %y) : f32[2, 2]\n; check: return %2\n; check: }\ngraph g("
    ), "{new}");
    // Passing expectations are left as written, whatever their spelling.
    let passing = format!("; run: x=[[1, 2], [3, 4]] y=1 => [[2, 3.0], [4e0, 5]]\n; check: add(\n{ADD}");
    assert!(run_file(&passing, true).blessed.is_none());
    // The blessed file passes, and blessing it again changes nothing.
    assert_eq!(failures(&new), vec![]);
    assert!(run_file(&new, true).blessed.is_none());
    // Runtime and parse errors bless too.
    let g = "graph g(%a: i64[1], %b: i64[1]) {\n  %2 = div(%a, %b)\n  return %2\n}\n";
    let r = run_file(&format!("; run: a=[1] b=[0] => [5]\n{g}"), true);
    assert!(r.blessed.unwrap().starts_with("; run: a=[1] b=[0] => error: %2 = div: integer division by zero\n"));
    let r = run_file("; error: xyz\n; error-at: 1:1\ngraph g() {\n  %0 = nope()\n  return %0\n}\n", true);
    let blessed = r.blessed.unwrap();
    assert!(blessed.starts_with("; error: unknown operator `nope`"), "{blessed}");
    assert!(blessed.contains("; error-at: 4:8\n"), "{blessed}");
}
