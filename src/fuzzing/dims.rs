//! The shape algebra's check ([`check_dims`], the `shape_algebra` fuzz target): bytes decode
//! into a small stack program over four size symbols, each step builds its expression three
//! ways, and every result is held against plain integer arithmetic.
//!
//! ```text
//! [n] [points: (n % 4) * 4 bytes, one a symbol] [program: an instruction a byte (+ operands)]
//! ```
//!
//! The points are symbol values (every symbol at least 1, as the algebra assumes); the point
//! with every symbol at 1 is always checked too. Each stack entry carries:
//! - the [`Dim`] built through `Dim`'s own API (`u64` constants, so a negative constant on the
//!   way is an error there);
//! - the [`SizeExpr`] built through the signed API (negative intermediates allowed);
//! - the expression's text, written with only the parentheses it needs, which the `text`
//!   instruction parses through the text form (the parser builds with `SizeExpr`, so the two
//!   must agree);
//! - its value at each point in `i128` (or overflow, or a division by zero), and a bound on
//!   the magnitudes that evaluating its canonical form may meet.
//!
//! The checks, after every step: nothing panics; a build is a typed error or a value; a dim
//! (or size expression) evaluates to the reference value at every point, or to the error the
//! module doc of `ir::shape` promises there (negative, or overflow where the value is past
//! `i64::MAX` or the magnitude bound past `i128`); a build error is one the operation can give
//! (overflow only where the bound with every symbol at 1, which bounds the coefficients, is
//! past `i64::MAX`; a negative constant only where the value is negative everywhere; a
//! division error only for a zero or symbolic divisor); the dim's text parses back
//! to an equal dim; the `Dim` and `SizeExpr` builds agree, and so does the parsed text; every
//! comparison the algebra proves (`prove_le`, `lower_bound`, equality of canonical forms)
//! between a new expression, its operands and the two entries beneath it holds at every point. Input is capped at [`MAX_DIMS_INPUT`] bytes and the stack at
//! [`MAX_STACK`] entries, so every input is checked in bounded time.

use std::cell::Cell;
use std::fmt::Write as _;

use crate::ir::{Dim, DimError, SizeExpr};

/// Bytes of input [`check_dims`] reads; the rest is ignored.
pub const MAX_DIMS_INPUT: usize = 256;
/// Most expressions on the stack; a push onto a full stack drops the oldest.
pub const MAX_STACK: usize = 12;
/// Entries beneath the top that a new one is compared with (besides its operands).
const NEIGHBOURS: usize = 2;
/// The size symbols of the programs.
pub const SYMBOLS: [&str; 4] = ["a", "b", "n", "seq"];
/// Longest text kept for an expression; a longer one is not written (the `text` instruction
/// then leaves the entry as it is).
const MAX_TEXT: usize = 2048;
/// Most points chosen by the input (the all-ones point comes on top).
const MAX_CHOSEN_POINTS: usize = 3;
/// Symbol values an input byte with its top bit set picks (a clear top bit gives 1 to 128).
const BIG_SYMBOL_VALUES: [u64; 16] = [
    1,
    2,
    255,
    256,
    1023,
    65_536,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    (1 << 32) + 1,
    1 << 53,
    1 << 62,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];
/// Constants the `const_table` instruction picks.
const CONSTANTS: [u64; 16] = [
    0,
    1,
    2,
    3,
    7,
    255,
    256,
    1 << 31,
    1 << 32,
    1 << 53,
    1 << 62,
    i64::MAX as u64 - 1,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

/// One instruction of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimOp {
    /// Push a symbol of [`SYMBOLS`].
    Sym(usize),
    /// Push a constant.
    Const(u64),
    /// Pop `y`, pop `x`, push `x + y` (and so on for the other binary operations).
    Add,
    Sub,
    Mul,
    /// `floor(x / y)`.
    FloorDiv,
    /// `ceil(x / y)`.
    CeilDiv,
    /// `x mod y`.
    Rem,
    Min,
    Max,
    /// Parse the top expression's text into its dim.
    Text,
    Dup,
    Swap,
    Drop,
    /// Push `a + b + n + seq`.
    Sum,
    /// Replace the top `x` by `x * x * ... * x` (`k` factors; 1 for `k = 0`).
    Pow(u8),
}

/// The opcodes, in the order their byte values (modulo the count) select them.
const OPCODES: usize = 21;

impl DimOp {
    /// The bytes that decode to this instruction.
    pub fn encode(self) -> Vec<u8> {
        match self {
            DimOp::Sym(i) => vec![i as u8],
            DimOp::Const(c) if c < 32 => vec![4, c as u8],
            DimOp::Const(c) => match CONSTANTS.iter().position(|&k| k == c) {
                Some(i) => vec![5, i as u8],
                None => [&[6u8][..], &c.to_le_bytes()].concat(),
            },
            DimOp::Add => vec![7],
            DimOp::Sub => vec![8],
            DimOp::Mul => vec![9],
            DimOp::FloorDiv => vec![10],
            DimOp::CeilDiv => vec![11],
            DimOp::Rem => vec![12],
            DimOp::Min => vec![13],
            DimOp::Max => vec![14],
            DimOp::Text => vec![15],
            DimOp::Dup => vec![16],
            DimOp::Swap => vec![17],
            DimOp::Drop => vec![18],
            DimOp::Sum => vec![19],
            DimOp::Pow(k) => vec![20, k],
        }
    }
}

/// A program and its points as [`check_dims`] reads them from bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimProgram {
    /// Symbol values, one array per point (in [`SYMBOLS`] order), the all-ones point first.
    pub points: Vec<[u64; 4]>,
    pub ops: Vec<DimOp>,
}

/// The bytes of a program with the chosen `points` (at most three; values as
/// [`decode_dims`] reads them back, so pick from 1 to 128 or from the large values) and `ops`.
pub fn encode_dims(points: &[[u64; 4]], ops: &[DimOp]) -> Vec<u8> {
    assert!(points.len() <= MAX_CHOSEN_POINTS, "at most {MAX_CHOSEN_POINTS} points");
    let mut out = vec![points.len() as u8];
    for p in points {
        for &v in p {
            out.push(match v {
                1..=128 => (v - 1) as u8,
                _ => {
                    0x80 | BIG_SYMBOL_VALUES.iter().position(|&k| k == v).expect("a symbol value decode can give") as u8
                }
            });
        }
    }
    for op in ops {
        out.extend(op.encode());
    }
    out
}

/// Reads bytes as a program (the first [`MAX_DIMS_INPUT`] of them; missing operand bytes
/// read as zero).
pub fn decode_dims(data: &[u8]) -> DimProgram {
    let data = &data[..data.len().min(MAX_DIMS_INPUT)];
    let pos = Cell::new(0);
    let next = || {
        let b = data.get(pos.get()).copied().unwrap_or(0);
        pos.set(pos.get() + 1);
        b
    };
    let chosen = next() as usize % (MAX_CHOSEN_POINTS + 1);
    let mut points = vec![[1u64; 4]];
    for _ in 0..chosen {
        let mut p = [0u64; 4];
        for v in &mut p {
            let b = next();
            *v = if b & 0x80 == 0 { u64::from(b) + 1 } else { BIG_SYMBOL_VALUES[usize::from(b & 0x0f)] };
        }
        points.push(p);
    }
    let mut ops = Vec::new();
    while pos.get() < data.len() {
        let op = match next() as usize % OPCODES {
            i @ 0..=3 => DimOp::Sym(i),
            4 => DimOp::Const(u64::from(next() & 0x1f)),
            5 => DimOp::Const(CONSTANTS[usize::from(next() & 0x0f)]),
            6 => DimOp::Const(u64::from_le_bytes(std::array::from_fn(|_| next()))),
            7 => DimOp::Add,
            8 => DimOp::Sub,
            9 => DimOp::Mul,
            10 => DimOp::FloorDiv,
            11 => DimOp::CeilDiv,
            12 => DimOp::Rem,
            13 => DimOp::Min,
            14 => DimOp::Max,
            15 => DimOp::Text,
            16 => DimOp::Dup,
            17 => DimOp::Swap,
            18 => DimOp::Drop,
            19 => DimOp::Sum,
            _ => DimOp::Pow(next() % 9),
        };
        ops.push(op);
    }
    DimProgram { points, ops }
}

/// What one [`check_dims`] run exercised (for tests that the inputs they feed reach the
/// checks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DimStats {
    /// Dims built (through the API or parsed) and checked.
    pub dims: usize,
    /// Builds refused as [`DimError::TooComplex`].
    pub too_complex: usize,
    /// Other typed build errors (overflow, negative constant, division).
    pub errors: usize,
    /// `text` instructions whose text parsed.
    pub parsed: usize,
    /// Comparisons (`prove_le`, equality) the algebra decided and the points confirmed.
    pub proofs: usize,
}

/// The shape-algebra invariants of the module doc on arbitrary bytes; panics with the decoded
/// program and what disagreed when one breaks.
pub fn check_dims(data: &[u8]) -> DimStats {
    let program = decode_dims(data);
    let mut m = Machine {
        points: program.points.clone(),
        stack: Vec::new(),
        program: &program,
        step: 0,
        stats: Cell::new(DimStats::default()),
    };
    for (step, &op) in program.ops.iter().enumerate() {
        m.step = step;
        m.exec(op);
    }
    m.stats.get()
}

/// Why a lane has no value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Why {
    /// The operation's own typed error.
    Dim(DimError),
    /// The text form's parse error (its message).
    Parse(String),
    /// An operand had no value.
    Operand,
    /// The lane cannot express the operation (`SizeExpr` divides by constants only).
    Unsupported,
}

impl From<DimError> for Why {
    fn from(e: DimError) -> Why {
        Why::Dim(e)
    }
}

type Lane<T> = Result<T, Why>;

/// An expression's value at one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ref {
    Val(i128),
    /// Past `i128` on the way.
    Overflow,
    /// A division by zero on the way: the expression has no value there.
    DivZero,
}

/// How an expression's text binds, for deciding where it needs parentheses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Prec {
    Sum,
    Product,
    Atom,
}

#[derive(Clone, Debug)]
struct Entry {
    dim: Lane<Dim>,
    sx: Lane<SizeExpr>,
    text: Option<(String, Prec)>,
    /// The value at each point.
    refs: Vec<Ref>,
    /// At each point, a bound on the magnitude of every coefficient, term and part value that
    /// evaluating the canonical form meets (saturating; `u128::MAX` for "no bound known").
    bound: Vec<u128>,
    /// Made by a division whose divisor is zero or symbolic (the first is an error, the
    /// second allowed only when the division is exact).
    zero_or_symbolic_divisor: bool,
}

struct Machine<'p> {
    points: Vec<[u64; 4]>,
    stack: Vec<Entry>,
    program: &'p DimProgram,
    step: usize,
    stats: Cell<DimStats>,
}

/// Largest magnitude of a value, and of a coefficient, the algebra keeps.
const LIMIT: u128 = i64::MAX as u128;
/// Largest magnitude evaluation may meet on the way (parts of an expression are evaluated in
/// `i128`).
const WIDE_LIMIT: u128 = i128::MAX as u128;

fn text_of(entry: &Entry, at_least: Prec) -> Option<String> {
    let (t, p) = entry.text.as_ref()?;
    Some(if *p < at_least { format!("({t})") } else { t.clone() })
}

fn capped(t: String, p: Prec) -> Option<(String, Prec)> {
    (t.len() <= MAX_TEXT).then_some((t, p))
}

/// A constant as `SizeExpr` takes it: past `i64::MAX` is the parser's overflow too.
fn sx_const(c: u64) -> Lane<SizeExpr> {
    i64::try_from(c).map(SizeExpr::constant).map_err(|_| Why::Dim(DimError::Overflow))
}

fn dim_err<T>(r: Result<T, DimError>) -> Lane<T> {
    r.map_err(Why::Dim)
}

/// `floor(a / b)` on values (`b` non-zero).
fn floor_div(a: i128, b: i128) -> Option<i128> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

fn ref2(a: Ref, b: Ref, f: impl Fn(i128, i128) -> Option<i128>) -> Ref {
    match (a, b) {
        (Ref::DivZero, _) | (_, Ref::DivZero) => Ref::DivZero,
        (Ref::Overflow, _) | (_, Ref::Overflow) => Ref::Overflow,
        (Ref::Val(x), Ref::Val(y)) => f(x, y).map_or(Ref::Overflow, Ref::Val),
    }
}

fn ref_div(a: Ref, b: Ref, f: impl Fn(i128, i128) -> Option<i128>) -> Ref {
    match b {
        Ref::Val(0) => Ref::DivZero,
        _ => ref2(a, b, f),
    }
}

impl Machine<'_> {
    fn count(&self, f: impl FnOnce(&mut DimStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    fn lookup(&self, point: usize) -> impl Fn(&str) -> Option<u64> + '_ {
        move |name| SYMBOLS.iter().position(|s| *s == name).map(|i| self.points[point][i])
    }

    fn fail(&self, what: String) -> ! {
        let mut out = String::new();
        let _ = writeln!(out, "shape algebra check failed at step {}: {what}", self.step);
        let _ = writeln!(out, "points (a, b, n, seq): {:?}", self.points);
        let _ = writeln!(out, "program:");
        for (i, op) in self.program.ops.iter().enumerate() {
            let _ = writeln!(out, "  {i:3} {op:?}{}", if i == self.step { "   <-- here" } else { "" });
        }
        let _ = writeln!(
            out,
            "as a test (with `use DimOp::*`): check_dims(&encode_dims(&{:?}, &{:?}));",
            &self.points[1..],
            self.program.ops
        );
        let _ = writeln!(out, "stack (top last):");
        for e in &self.stack {
            let _ = writeln!(
                out,
                "  dim {:?} | sx {:?} | text {:?} | refs {:?}",
                e.dim.as_ref().map(|d| d.to_string()),
                e.sx.as_ref().map(|s| s.to_string()),
                e.text.as_ref().map(|t| &t.0),
                e.refs
            );
        }
        panic!("{out}");
    }

    /// Pushes `e` and checks it, comparing it with the entries it was made from
    /// (`operands`) and the [`NEIGHBOURS`] beneath it.
    fn push(&mut self, e: Entry, operands: &[&Entry]) {
        if self.stack.len() == MAX_STACK {
            self.stack.remove(0);
        }
        self.stack.push(e);
        self.check_top(operands);
    }

    fn leaf_sym(&self, i: usize) -> Entry {
        let name = SYMBOLS[i];
        Entry {
            dim: Ok(Dim::sym(name)),
            sx: dim_err(SizeExpr::from_dim(&Dim::sym(name))),
            text: Some((name.to_string(), Prec::Atom)),
            refs: self.points.iter().map(|p| Ref::Val(i128::from(p[i]))).collect(),
            bound: self.points.iter().map(|p| u128::from(p[i])).collect(),
            zero_or_symbolic_divisor: false,
        }
    }

    fn leaf_const(&self, c: u64) -> Entry {
        Entry {
            dim: Ok(Dim::new(c)),
            sx: sx_const(c),
            text: Some((c.to_string(), Prec::Atom)),
            refs: vec![Ref::Val(i128::from(c)); self.points.len()],
            bound: vec![u128::from(c); self.points.len()],
            zero_or_symbolic_divisor: false,
        }
    }

    fn exec(&mut self, op: DimOp) {
        let need = match op {
            DimOp::Sym(_) | DimOp::Const(_) | DimOp::Sum => 0,
            DimOp::Text | DimOp::Dup | DimOp::Drop | DimOp::Pow(_) => 1,
            _ => 2,
        };
        if self.stack.len() < need {
            // Too few operands: the instruction pushes a symbol instead.
            let e = self.leaf_sym(self.step % SYMBOLS.len());
            return self.push(e, &[]);
        }
        match op {
            DimOp::Sym(i) => {
                let e = self.leaf_sym(i);
                self.push(e, &[]);
            }
            DimOp::Const(c) => {
                let e = self.leaf_const(c);
                self.push(e, &[]);
            }
            DimOp::Sum => {
                let mut acc = self.leaf_sym(0);
                for i in 1..SYMBOLS.len() {
                    acc = self.binary(DimOp::Add, &acc, &self.leaf_sym(i));
                }
                self.push(acc, &[]);
            }
            DimOp::Dup => {
                let e = self.stack[self.stack.len() - 1].clone();
                self.push(e, &[]);
            }
            DimOp::Drop => {
                self.stack.pop();
            }
            DimOp::Swap => {
                let n = self.stack.len();
                self.stack.swap(n - 1, n - 2);
            }
            DimOp::Text => {
                let e = self.stack.pop().expect("checked above");
                let parsed = self.parse_text(e.clone());
                self.push(parsed, &[&e]);
            }
            DimOp::Pow(k) => {
                let x = self.stack.pop().expect("checked above");
                let mut acc = if k == 0 { self.leaf_const(1) } else { x.clone() };
                for _ in 1..k {
                    let mut next = self.binary(DimOp::Mul, &acc, &x);
                    // A lane that failed on the way (not before) keeps its own error, not "an
                    // operand failed".
                    if acc.dim.is_err() && x.dim.is_ok() {
                        next.dim = acc.dim;
                    }
                    if acc.sx.is_err() && x.sx.is_ok() {
                        next.sx = acc.sx;
                    }
                    acc = next;
                }
                self.push(acc, &[&x]);
            }
            _ => {
                let y = self.stack.pop().expect("checked above");
                let x = self.stack.pop().expect("checked above");
                let e = self.binary(op, &x, &y);
                self.push(e, &[&x, &y]);
            }
        }
    }

    /// The constant divisor `y` stands for, when its signed build says it is one.
    fn divisor(y: &Entry) -> Option<u64> {
        y.sx.as_ref().ok().and_then(SizeExpr::as_const).and_then(|c| u64::try_from(c).ok())
    }

    fn binary(&self, op: DimOp, x: &Entry, y: &Entry) -> Entry {
        let d = Self::divisor(y);
        let dim = match (&x.dim, &y.dim) {
            (Ok(a), Ok(b)) => dim_err(match op {
                DimOp::Add => a.add(b),
                DimOp::Sub => a.sub(b),
                DimOp::Mul => a.mul(b),
                DimOp::FloorDiv => a.floor_div(b),
                DimOp::CeilDiv => a.ceil_div(b),
                DimOp::Rem => a.rem(b),
                DimOp::Min => a.min(b),
                DimOp::Max => a.max(b),
                _ => unreachable!("not a binary operation: {op:?}"),
            }),
            _ => Err(Why::Operand),
        };
        let sx = Self::binary_sx(op, &x.sx, &y.sx, d);
        let text = self.binary_text(op, x, y, d);
        let refs = x
            .refs
            .iter()
            .zip(&y.refs)
            .map(|(&a, &b)| match op {
                DimOp::Add => ref2(a, b, i128::checked_add),
                DimOp::Sub => ref2(a, b, i128::checked_sub),
                DimOp::Mul => ref2(a, b, i128::checked_mul),
                DimOp::Min => ref2(a, b, |p, q| Some(p.min(q))),
                DimOp::Max => ref2(a, b, |p, q| Some(p.max(q))),
                DimOp::FloorDiv => ref_div(a, b, floor_div),
                DimOp::CeilDiv => ref_div(a, b, |p, q| floor_div(p.checked_neg()?, q)?.checked_neg()),
                DimOp::Rem => ref_div(a, b, |p, q| p.checked_sub(floor_div(p, q)?.checked_mul(q)?)),
                _ => unreachable!("not a binary operation: {op:?}"),
            })
            .collect();
        // The magnitude bound: sums and products of the operands' bounds; a division by `d`
        // keeps its numerator's terms and adds a remainder numerator of coefficients below `d`,
        // and folding a quotient by `a` inside it multiplies the terms beside it by `a` (at
        // most the numerator's own bound): squared.
        let bound = x
            .bound
            .iter()
            .zip(&y.bound)
            .map(|(&kx, &ky)| {
                let by = |d: u64, k: u128| {
                    let once = (u128::from(d) + 1).saturating_mul(k.saturating_add(1));
                    once.saturating_mul(once)
                };
                match (op, d) {
                    (DimOp::Add | DimOp::Sub | DimOp::Min | DimOp::Max, _) => kx.saturating_add(ky),
                    (DimOp::Mul, _) => kx.saturating_mul(ky),
                    (DimOp::FloorDiv, Some(d)) => by(d, kx),
                    (DimOp::CeilDiv, Some(d)) => by(d, kx.saturating_add(u128::from(d))),
                    (DimOp::Rem, Some(d)) => kx.saturating_add((u128::from(d) + 1).saturating_mul(by(d, kx))),
                    _ => u128::MAX,
                }
            })
            .collect();
        let division = matches!(op, DimOp::FloorDiv | DimOp::CeilDiv | DimOp::Rem);
        let positive = |c: Option<u64>| c.is_some_and(|c| c > 0);
        let zero_or_symbolic_divisor =
            division && !positive(y.dim.as_ref().ok().and_then(Dim::as_const)) && !positive(d);
        Entry { dim, sx, text, refs, bound, zero_or_symbolic_divisor }
    }

    /// The signed build of a binary operation, dividing only by constants.
    fn binary_sx(op: DimOp, x: &Lane<SizeExpr>, y: &Lane<SizeExpr>, d: Option<u64>) -> Lane<SizeExpr> {
        let (Ok(a), Ok(b)) = (x, y) else { return Err(Why::Operand) };
        let divisor = || d.ok_or(Why::Unsupported);
        match op {
            DimOp::Add => dim_err(a.add(b)),
            DimOp::Sub => dim_err(a.sub(b)),
            DimOp::Mul => dim_err(a.mul(b)),
            DimOp::Min => dim_err(a.min(b)),
            DimOp::Max => dim_err(a.max(b)),
            // As the text form writes them: `(x + (d - 1)) / d` and `x - d*(x / d)`.
            DimOp::FloorDiv => dim_err(a.floor_div(divisor()?)),
            DimOp::CeilDiv => match divisor()? {
                0 => dim_err(a.floor_div(0)),
                d => dim_err(a.add(&sx_const(d - 1)?)?.floor_div(d)),
            },
            DimOp::Rem => {
                let d = divisor()?;
                let q = dim_err(a.floor_div(d))?;
                dim_err(a.sub(&dim_err(sx_const(d)?.mul(&q))?))
            }
            _ => unreachable!("not a binary operation: {op:?}"),
        }
    }

    fn binary_text(&self, op: DimOp, x: &Entry, y: &Entry, d: Option<u64>) -> Option<(String, Prec)> {
        let (t, p) = match op {
            DimOp::Add => (format!("{} + {}", text_of(x, Prec::Sum)?, text_of(y, Prec::Product)?), Prec::Sum),
            DimOp::Sub => (format!("{} - {}", text_of(x, Prec::Sum)?, text_of(y, Prec::Product)?), Prec::Sum),
            DimOp::Mul => (format!("{}*{}", text_of(x, Prec::Product)?, text_of(y, Prec::Atom)?), Prec::Product),
            DimOp::Min | DimOp::Max => {
                let f = if op == DimOp::Min { "min" } else { "max" };
                (format!("{f}({}, {})", text_of(x, Prec::Sum)?, text_of(y, Prec::Sum)?), Prec::Atom)
            }
            DimOp::FloorDiv => (format!("{} / {}", text_of(x, Prec::Product)?, d?), Prec::Product),
            DimOp::CeilDiv => match d? {
                0 => (format!("{} / 0", text_of(x, Prec::Product)?), Prec::Product),
                d => (format!("({} + {}) / {d}", text_of(x, Prec::Sum)?, d - 1), Prec::Product),
            },
            DimOp::Rem => {
                let d = d?;
                (format!("{} - {d}*({} / {d})", text_of(x, Prec::Sum)?, text_of(x, Prec::Product)?), Prec::Sum)
            }
            _ => unreachable!("not a binary operation: {op:?}"),
        };
        capped(t, p)
    }

    /// The `text` instruction: the entry's dim becomes what its text parses to, which must
    /// agree with the signed build (the parser builds the same way).
    fn parse_text(&self, mut e: Entry) -> Entry {
        let Some((text, _)) = &e.text else { return e };
        let parsed = parse_dim(text);
        let built = e.sx.clone().and_then(|s| dim_err(s.to_dim()));
        match (&parsed, &built) {
            (Ok(p), Ok(b)) if p != b => {
                self.fail(format!("`{text}` parses to {p} but the signed build is {b}"));
            }
            (Ok(p), Err(why)) => self.fail(format!("`{text}` parses to {p} but the signed build failed: {why:?}")),
            (Err(Why::Parse(msg)), Ok(b)) if !msg.contains("nested deeper") => {
                self.fail(format!("`{text}` does not parse ({msg}) but the signed build is {b}"));
            }
            _ => {}
        }
        if let Err(Why::Parse(msg)) = &parsed {
            let expected = [
                "nested deeper",
                "too complex",
                "overflow",
                "would be negative",
                "division of a dim by zero",
                "not exactly divisible",
            ];
            if !expected.iter().any(|n| msg.contains(n)) {
                self.fail(format!("`{text}` gives an unexpected parse error: {msg}"));
            }
        }
        if parsed.is_ok() {
            self.count(|s| s.parsed += 1);
        }
        e.dim = parsed;
        e
    }

    /// Every check of the module doc on the entry just pushed.
    fn check_top(&self, operands: &[&Entry]) {
        let top = self.stack.last().expect("just pushed");
        self.check_build("Dim", top, top.dim.as_ref().err());
        self.check_build("SizeExpr", top, top.sx.as_ref().err());
        if let Ok(d) = &top.dim {
            let n = self.stack.len();
            let neighbours = self.stack[n.saturating_sub(1 + NEIGHBOURS)..n - 1].iter();
            let others: Vec<&Entry> = operands.iter().copied().chain(neighbours).collect();
            self.check_dim(top, d, &others);
        }
        if let Ok(s) = &top.sx {
            for (i, &r) in top.refs.iter().enumerate() {
                match (s.eval(&self.lookup(i)), r) {
                    (Ok(v), Ref::Val(r)) if i128::from(v) != r => {
                        self.fail(format!("size expression {s} is {v} at point {i}, not {r}"))
                    }
                    (Err(DimError::Overflow), Ref::Val(r))
                        if r.unsigned_abs() <= LIMIT && top.bound[i] <= WIDE_LIMIT =>
                    {
                        self.fail(format!("size expression {s} overflowed at point {i}, where it is {r}"))
                    }
                    (Err(e @ (DimError::Negative | DimError::NotDivisible | DimError::TooComplex)), _)
                    | (Err(e @ DimError::UnboundSymbol(_)), _) => {
                        self.fail(format!("size expression {s} evaluates to {e:?} at point {i}"))
                    }
                    _ => {}
                }
            }
            // The Dim built through its own API is the same canonical form.
            if let (Ok(d), Ok(from_sx)) = (&top.dim, s.to_dim()) {
                if *d != from_sx {
                    self.fail(format!("the Dim build gives {d}, the SizeExpr build {from_sx}"));
                }
            }
        }
    }

    /// A lane's build error must be one the operation can give.
    fn check_build(&self, lane: &str, top: &Entry, why: Option<&Why>) {
        let Some(Why::Dim(e)) = why else { return };
        self.count(|s| if *e == DimError::TooComplex { s.too_complex += 1 } else { s.errors += 1 });
        match e {
            DimError::TooComplex => {}
            // Past the magnitude bound at the all-ones point (the coefficients' bound).
            DimError::Overflow if top.bound[0] > LIMIT => {}
            DimError::Negative if top.refs.iter().all(|r| !matches!(r, Ref::Val(v) if *v >= 0)) => {}
            // A symbolic divisor's quotient may be a negative constant on the way: `a mod (0 - a)`
            // divides `a` by `0 - a` exactly, to -1.
            DimError::Negative if top.zero_or_symbolic_divisor => {}
            DimError::NotDivisible if top.zero_or_symbolic_divisor => {}
            _ => self.fail(format!("the {lane} build failed with {e:?}")),
        }
    }

    fn check_dim(&self, top: &Entry, d: &Dim, others: &[&Entry]) {
        self.count(|s| s.dims += 1);
        let lb = d.lower_bound();
        for (i, &r) in top.refs.iter().enumerate() {
            match (d.eval(&self.lookup(i)), r) {
                (Ok(v), Ref::Val(r)) if i128::from(v) != r => {
                    self.fail(format!("dim {d} is {v} at point {i}, not {r}"))
                }
                (Err(DimError::Negative), Ref::Val(r)) if r >= 0 => {
                    self.fail(format!("dim {d} evaluated as negative at point {i}, where it is {r}"))
                }
                (Err(DimError::Overflow), Ref::Val(r)) if r.unsigned_abs() <= LIMIT && top.bound[i] <= WIDE_LIMIT => {
                    self.fail(format!("dim {d} overflowed at point {i}, where it is {r}"))
                }
                (Err(e @ (DimError::NotDivisible | DimError::TooComplex | DimError::UnboundSymbol(_))), _) => {
                    self.fail(format!("dim {d} evaluates to {e:?} at point {i}"))
                }
                _ => {}
            }
            if let (Some(lb), Ref::Val(r)) = (lb, r) {
                if r < lb {
                    self.fail(format!("dim {d} has lower bound {lb} but is {r} at point {i}"));
                }
            }
        }
        // The text form round-trips (a constant past i64::MAX has no text form to parse; an
        // operand's dim was checked already).
        let seen = others.iter().any(|o| o.dim.as_ref() == Ok(d));
        if !seen && d.as_const().is_none_or(|c| c <= i64::MAX as u64) {
            let text = d.to_string();
            match parse_dim(&text) {
                Ok(back) if back == *d => {}
                Ok(back) => self.fail(format!("dim {d} prints as `{text}`, which parses to {back}")),
                Err(e) => self.fail(format!("dim {d} prints as `{text}`, which does not parse: {e:?}")),
            }
        }
        // What the algebra proves about this dim and the others holds at every point where
        // both have values.
        for other in others {
            let Ok(o) = &other.dim else { continue };
            let pairs = top.refs.iter().zip(&other.refs).enumerate();
            let vals: Vec<(usize, i128, i128)> = pairs
                .filter_map(|(i, (a, b))| match (a, b) {
                    (Ref::Val(a), Ref::Val(b)) => Some((i, *a, *b)),
                    _ => None,
                })
                .collect();
            for (x, y, flip) in [(d, o, false), (o, d, true)] {
                let Some(le) = x.prove_le(y) else { continue };
                self.count(|s| s.proofs += 1);
                for &(i, a, b) in &vals {
                    let (vx, vy) = if flip { (b, a) } else { (a, b) };
                    if (vx <= vy) != le {
                        self.fail(format!("proved ({x}) <= ({y}) is {le}, but at point {i} they are {vx} and {vy}"));
                    }
                }
            }
            if d == o {
                self.count(|s| s.proofs += 1);
                if let Some(&(i, a, b)) = vals.iter().find(|(_, a, b)| a != b) {
                    self.fail(format!("equal dims {d} have different values {a} and {b} at point {i}"));
                }
            }
        }
    }
}

/// The dim `text` parses to, through the text form (a graph with one input of that size).
fn parse_dim(text: &str) -> Lane<Dim> {
    let src = format!("graph g(%x: f32[{text}]) {{\n  return %x\n}}\n");
    match crate::text::parse(&src) {
        Ok(g) => Ok(g.ty(g.inputs()[0]).shape.dims()[0].clone()),
        Err(e) => Err(Why::Parse(e.message)),
    }
}
