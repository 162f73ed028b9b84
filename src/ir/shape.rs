//! Shapes whose dims are static or symbolic.
//!
//! A symbolic dim is an integer expression over named size symbols (`batch`, `seq`): a
//! polynomial with integer coefficients whose factors ("atoms") are symbols or one of the
//! operations a polynomial cannot express: floor division by a positive constant (`n / 2`),
//! `min(a, b)` and `max(a, b)`. Ceil division and the remainder are written with them
//! (`ceil(p / d) = (p + d - 1) / d`, `p mod d = p - d*(p / d)`). Convolution and pooling
//! output sizes, `(n + 1) / 2` splits and clamped slice bounds are all of this form.
//!
//! Expressions are kept in a canonical form, so two dims are equal exactly when their forms
//! are: `batch*seq` equals `seq*batch`, `(2*n + 2) / 2` is `n + 1`, `min(n, n + 1)` is `n`.
//! The rules, applied while an expression is built:
//! - a polynomial keeps its terms sorted and drops zero coefficients (each within
//!   `±i64::MAX`, so that it prints as a literal the parser reads);
//! - `p / d` splits off every multiple of `d` (`(2*n + 3) / 2 = n + 1 + 1 / 2 = n + 1`): the
//!   numerator left has coefficients in `[0, d)`, and is `0` when it is a constant; a common
//!   factor of that numerator and `d` is cancelled, and `(p / a + q) / b` is
//!   `(p + a*q) / (a*b)`;
//! - `min` and `max` flatten nested calls of their own kind and drop repeated and dominated
//!   arguments (an argument provably at least another for `min`).
//!
//! **Assumption:** every symbol is at least 1. Comparisons ([`Dim::prove_le`]) use it: they
//! substitute `s = 1 + t` for each symbol (and each atom's lower bound likewise) and call an
//! expression non-negative when every coefficient of the result is; sound, not complete.
//!
//! Evaluation is exact in 128-bit arithmetic; a dim whose value is negative or past
//! `i64::MAX`, or whose evaluation passes 128 bits, is an error. Expressions are bounded ([`MAX_TERMS`], [`MAX_DEGREE`],
//! [`MAX_NODES`], [`MAX_DEPTH`]): building a larger one is [`DimError::TooComplex`], so hostile
//! input cannot make the algebra expand without limit, and every dim's text parses back.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

/// A named size symbol.
pub type Symbol = Arc<str>;

/// Most terms one expression (or one argument inside it) may have.
pub const MAX_TERMS: usize = 64;
/// Most factors one term may have.
pub const MAX_DEGREE: usize = 8;
/// Most atoms and terms one expression may hold, nested ones included.
pub const MAX_NODES: usize = 512;
/// Deepest nesting of quotients and `min`/`max` calls one expression may have. Each level
/// prints as at most two levels of parentheses or calls, so a dim's text stays within the
/// parser's nesting limit (`text::MAX_DIM_NESTING`, 64 levels) and parses back.
pub const MAX_DEPTH: usize = 32;

/// One dimension: a non-negative constant or a symbolic expression.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dim(DimRepr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum DimRepr {
    Const(u64),
    /// Canonical expression with at least one non-constant term.
    Expr(Arc<Poly>),
}

/// Monomial (sorted atoms, with repetition for powers) → coefficient. The empty monomial is
/// the constant term. No zero coefficients are stored.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
struct Poly {
    terms: BTreeMap<Vec<Atom>, i64>,
}

/// A factor of a term.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
enum Atom {
    Sym(Symbol),
    /// `floor(p / d)` with `d >= 2` and `p` canonical for it (coefficients in `[0, d)`,
    /// at least one non-constant term, no common factor with `d`).
    FloorDiv(Arc<Poly>, u64),
    /// At least two arguments, sorted, none dominated by another.
    Min(Arc<[Poly]>),
    Max(Arc<[Poly]>),
}

/// Why two dims could not be combined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimError {
    Overflow,
    Negative,
    NotDivisible,
    UnboundSymbol(String),
    /// The expression would exceed the size bounds of the algebra.
    TooComplex,
}

impl std::error::Error for DimError {}

impl fmt::Display for DimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimError::Overflow => write!(f, "dimension arithmetic overflowed"),
            DimError::Negative => write!(f, "dimension would be negative"),
            DimError::NotDivisible => write!(f, "dimension is not exactly divisible"),
            DimError::UnboundSymbol(s) => write!(f, "symbol `{s}` has no value"),
            DimError::TooComplex => write!(
                f,
                "size expression too complex (more than {MAX_TERMS} terms, {MAX_DEGREE} factors in a term, {MAX_NODES} parts or {MAX_DEPTH} levels of nesting)"
            ),
        }
    }
}

fn ovf<T>(x: Option<T>) -> Result<T, DimError> {
    x.ok_or(DimError::Overflow)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Poly {
    fn constant(c: i64) -> Poly {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(Vec::new(), c);
        }
        Poly { terms }
    }

    fn atom(a: Atom) -> Poly {
        Poly { terms: BTreeMap::from([(vec![a], 1)]) }
    }

    fn as_const(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// The one atom of a polynomial that is exactly that atom.
    fn single_atom(&self) -> Option<&Atom> {
        match self.terms.iter().next() {
            Some((m, 1)) if self.terms.len() == 1 && m.len() == 1 => Some(&m[0]),
            _ => None,
        }
    }

    /// The one term that is a quotient atom alone with coefficient 1, when there is exactly
    /// one such term: (its monomial, the quotient's numerator, its divisor).
    fn lone_quotient(&self) -> Option<(Vec<Atom>, Arc<Poly>, u64)> {
        let mut found = None;
        for (m, &c) in &self.terms {
            if let ([Atom::FloorDiv(inner, a)], 1) = (m.as_slice(), c) {
                if found.is_some() {
                    return None;
                }
                found = Some((m.clone(), inner.clone(), *a));
            }
        }
        found
    }

    /// Adds `c` times the monomial `m`. A coefficient of `i64::MIN` is an overflow: the text
    /// form writes `- 9223372036854775808*n`, and no literal past `i64::MAX` parses.
    fn add_term(&mut self, m: Vec<Atom>, c: i64) -> Result<(), DimError> {
        if c == 0 {
            return Ok(());
        }
        let e = self.terms.entry(m).or_insert(0);
        *e = ovf(e.checked_add(c).filter(|&sum| sum != i64::MIN))?;
        if *e == 0 {
            self.terms.retain(|_, c| *c != 0);
        }
        Ok(())
    }

    fn add(&self, other: &Poly) -> Result<Poly, DimError> {
        let mut out = self.clone();
        for (m, &c) in &other.terms {
            out.add_term(m.clone(), c)?;
        }
        out.check()
    }

    fn scale(&self, k: i64) -> Result<Poly, DimError> {
        let mut out = Poly::default();
        for (m, &c) in &self.terms {
            out.add_term(m.clone(), ovf(c.checked_mul(k))?)?;
        }
        Ok(out)
    }

    fn sub(&self, other: &Poly) -> Result<Poly, DimError> {
        self.add(&other.scale(-1)?)
    }

    fn mul(&self, other: &Poly) -> Result<Poly, DimError> {
        if self.terms.len().saturating_mul(other.terms.len()) > MAX_TERMS * MAX_TERMS {
            return Err(DimError::TooComplex);
        }
        let mut out = Poly::default();
        for (ma, &ca) in &self.terms {
            for (mb, &cb) in &other.terms {
                if ma.len() + mb.len() > MAX_DEGREE {
                    return Err(DimError::TooComplex);
                }
                let mut m: Vec<Atom> = ma.iter().chain(mb.iter()).cloned().collect();
                m.sort();
                out.add_term(m, ovf(ca.checked_mul(cb))?)?;
            }
        }
        out.check()
    }

    /// The size bounds of the module doc.
    fn check(self) -> Result<Poly, DimError> {
        if self.terms.len() > MAX_TERMS || self.nodes() > MAX_NODES || self.depth() > MAX_DEPTH {
            return Err(DimError::TooComplex);
        }
        Ok(self)
    }

    fn nodes(&self) -> usize {
        self.terms.keys().map(|m| 1 + m.iter().map(Atom::nodes).sum::<usize>()).sum()
    }

    /// Levels of quotients and `min`/`max` calls nested in the polynomial (0 when its
    /// factors are symbols only).
    fn depth(&self) -> usize {
        self.terms.keys().flatten().map(Atom::depth).max().unwrap_or(0)
    }

    /// `floor(self / d)` in canonical form.
    fn floor_div(&self, d: u64) -> Result<Poly, DimError> {
        if d == 0 {
            return Err(DimError::NotDivisible);
        }
        if d == 1 {
            return Ok(self.clone());
        }
        let di = i64::try_from(d).map_err(|_| DimError::Overflow)?;
        let (mut q, mut r) = (Poly::default(), Poly::default());
        for (m, &c) in &self.terms {
            q.add_term(m.clone(), c.div_euclid(di))?;
            r.add_term(m.clone(), c.rem_euclid(di))?;
        }
        // A constant remainder lies in [0, d): its quotient is 0.
        if r.as_const().is_some() {
            return Ok(q);
        }
        let g = r.terms.values().fold(d, |g, &c| gcd(g, c.unsigned_abs()));
        let (r, d) = if g > 1 { (r.div_coefficients(g as i64), d / g) } else { (r, d) };
        if d == 1 {
            return q.add(&r);
        }
        // floor((floor(x / a) + p) / d) = floor((x + a*p) / (a*d)) for integer-valued p.
        if let Some((m, inner, a)) = r.lone_quotient() {
            let mut p = r.clone();
            p.terms.remove(&m);
            let ad = ovf(a.checked_mul(d))?;
            let a = i64::try_from(a).map_err(|_| DimError::Overflow)?;
            return q.add(&inner.add(&p.scale(a)?)?.floor_div(ad)?);
        }
        q.add(&Poly::atom(Atom::FloorDiv(Arc::new(r), d)))
    }

    fn div_coefficients(&self, g: i64) -> Poly {
        Poly { terms: self.terms.iter().map(|(m, &c)| (m.clone(), c / g)).collect() }
    }

    /// `min` (`is_min`) or `max` of `args`, in canonical form.
    fn extremum(args: Vec<Poly>, is_min: bool) -> Result<Poly, DimError> {
        // Each argument with the call it was flattened from: the arguments of one canonical
        // call dominate none of each other, so only pairs across calls need comparing (which
        // keeps adding one argument at a time to a call of k linear in k, not quadratic).
        let mut flat: Vec<(Poly, Option<usize>)> = Vec::new();
        for (call, a) in args.into_iter().enumerate() {
            match a.single_atom() {
                Some(Atom::Min(inner)) if is_min => flat.extend(inner.iter().map(|p| (p.clone(), Some(call)))),
                Some(Atom::Max(inner)) if !is_min => flat.extend(inner.iter().map(|p| (p.clone(), Some(call)))),
                _ => flat.push((a, None)),
            }
        }
        flat.sort_by(|a, b| a.0.cmp(&b.0));
        flat.dedup_by(|a, b| a.0 == b.0);
        // Drop every argument another one provably bounds (the first of equal ones stays).
        let mut keep = vec![true; flat.len()];
        for i in 0..flat.len() {
            for j in 0..flat.len() {
                let same_call = flat[i].1.is_some() && flat[i].1 == flat[j].1;
                if i == j || same_call || !keep[j] || !keep[i] {
                    continue;
                }
                // For min, i goes when j <= i; for max, when j >= i.
                let diff = if is_min { flat[i].0.sub(&flat[j].0)? } else { flat[j].0.sub(&flat[i].0)? };
                if diff.lower_bound().is_some_and(|lb| lb >= 0) {
                    keep[i] = false;
                }
            }
        }
        let mut args: Vec<Poly> = flat.into_iter().zip(keep).filter_map(|((a, _), k)| k.then_some(a)).collect();
        if args.len() == 1 {
            return Ok(args.remove(0));
        }
        let args: Arc<[Poly]> = args.into();
        Poly::atom(if is_min { Atom::Min(args) } else { Atom::Max(args) }).check()
    }

    /// A lower bound of the value over every assignment with each symbol at least 1, when
    /// the substitution argument of the module doc finds one.
    fn lower_bound(&self) -> Option<i128> {
        // Each term c * Π x_i, with x_i = l_i + t_i (t_i >= 0), expands into a sum over the
        // subsets S of its factors of c * Π_{i∉S} l_i * Π_{i∈S} t_i. The constant of the
        // expansion is the bound when every other coefficient is non-negative.
        let mut constant: i128 = 0;
        let mut others: BTreeMap<Vec<&Atom>, i128> = BTreeMap::new();
        let mut budget: usize = 1 << 12;
        for (m, &c) in &self.terms {
            let lbs: Vec<i128> = m.iter().map(Atom::lower_bound).collect::<Option<_>>()?;
            let n = m.len();
            budget = budget.checked_sub(1usize << n)?;
            for subset in 0u32..(1u32 << n) {
                let mut coef = c as i128;
                let mut t: Vec<&Atom> = Vec::new();
                for (i, a) in m.iter().enumerate() {
                    if subset & (1 << i) != 0 {
                        t.push(a);
                    } else {
                        coef = coef.checked_mul(lbs[i])?;
                    }
                }
                if t.is_empty() {
                    constant = constant.checked_add(coef)?;
                } else {
                    let e = others.entry(t).or_insert(0);
                    *e = e.checked_add(coef)?;
                }
            }
        }
        others.values().all(|&c| c >= 0).then_some(constant)
    }

    /// The value, a size: at most `i64::MAX` in magnitude.
    fn eval(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<i128, DimError> {
        let total = self.eval_wide(lookup)?;
        if total.unsigned_abs() > i64::MAX as u128 {
            return Err(DimError::Overflow);
        }
        Ok(total)
    }

    /// The value in `i128`. Parts of an expression may pass `i64::MAX` where the whole does
    /// not: folding `(n / a + b) / d` into `(n + a*b) / (a*d)` multiplies `b` by `a`.
    fn eval_wide(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<i128, DimError> {
        let mut total: i128 = 0;
        for (m, &c) in &self.terms {
            let mut v = c as i128;
            for a in m {
                v = ovf(v.checked_mul(a.eval(lookup)?))?;
            }
            total = ovf(total.checked_add(v))?;
        }
        Ok(total)
    }

    fn symbols_into(&self, out: &mut Vec<Symbol>) {
        for m in self.terms.keys() {
            for a in m {
                a.symbols_into(out);
            }
        }
    }

    /// Writes the polynomial in the text form's syntax.
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Highest-degree terms first, constant last: `2*batch*seq + seq - 1`. The text form
        // has no unary minus, so the first positive term leads (`65537 - 320*n`), and `0`
        // leads when there is none (`0 - n`).
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        let mut terms: Vec<(&Vec<Atom>, &i64)> = self.terms.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        match terms.iter().position(|(_, c)| **c > 0) {
            Some(lead) => {
                let t = terms.remove(lead);
                terms.insert(0, t);
            }
            None => f.write_str("0")?,
        }
        let zero_led = terms.first().is_some_and(|t| *t.1 < 0);
        for (i, (m, c)) in terms.into_iter().enumerate() {
            let neg = *c < 0;
            let mag = c.unsigned_abs();
            if i > 0 || zero_led {
                f.write_str(if neg { " - " } else { " + " })?;
            }
            if m.is_empty() {
                write!(f, "{mag}")?;
                continue;
            }
            if mag != 1 {
                write!(f, "{mag}*")?;
            }
            // A quotient is parenthesised unless it is the whole term: `3*(n / 2)`.
            let alone = mag == 1 && m.len() == 1;
            for (j, a) in m.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                a.write(f, alone)?;
            }
        }
        Ok(())
    }
}

impl Atom {
    fn depth(&self) -> usize {
        match self {
            Atom::Sym(_) => 0,
            Atom::FloorDiv(p, _) => 1 + p.depth(),
            Atom::Min(args) | Atom::Max(args) => 1 + args.iter().map(Poly::depth).max().unwrap_or(0),
        }
    }

    fn nodes(&self) -> usize {
        match self {
            Atom::Sym(_) => 1,
            Atom::FloorDiv(p, _) => 1 + p.nodes(),
            Atom::Min(args) | Atom::Max(args) => 1 + args.iter().map(Poly::nodes).sum::<usize>(),
        }
    }

    fn lower_bound(&self) -> Option<i128> {
        match self {
            Atom::Sym(_) => Some(1),
            Atom::FloorDiv(p, d) => p.lower_bound().map(|l| l.div_euclid(*d as i128)),
            Atom::Min(args) => args.iter().map(Poly::lower_bound).collect::<Option<Vec<_>>>()?.into_iter().min(),
            Atom::Max(args) => args.iter().filter_map(Poly::lower_bound).max(),
        }
    }

    fn eval(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<i128, DimError> {
        match self {
            Atom::Sym(s) => {
                let v = lookup(s).ok_or_else(|| DimError::UnboundSymbol(s.to_string()))?;
                Ok(v as i128)
            }
            Atom::FloorDiv(p, d) => Ok(p.eval_wide(lookup)?.div_euclid(*d as i128)),
            Atom::Min(args) | Atom::Max(args) => {
                let vals = args.iter().map(|a| a.eval_wide(lookup)).collect::<Result<Vec<_>, _>>()?;
                let pick = if matches!(self, Atom::Min(_)) { vals.iter().min() } else { vals.iter().max() };
                pick.copied().ok_or(DimError::Overflow)
            }
        }
    }

    fn symbols_into(&self, out: &mut Vec<Symbol>) {
        match self {
            Atom::Sym(s) => out.push(s.clone()),
            Atom::FloorDiv(p, _) => p.symbols_into(out),
            Atom::Min(args) | Atom::Max(args) => args.iter().for_each(|a| a.symbols_into(out)),
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, alone: bool) -> fmt::Result {
        match self {
            Atom::Sym(s) => f.write_str(s),
            Atom::FloorDiv(p, d) => {
                if !alone {
                    f.write_str("(")?;
                }
                let wrap = p.terms.len() > 1;
                if wrap {
                    f.write_str("(")?;
                }
                p.write(f)?;
                if wrap {
                    f.write_str(")")?;
                }
                write!(f, " / {d}")?;
                if !alone {
                    f.write_str(")")?;
                }
                Ok(())
            }
            Atom::Min(args) | Atom::Max(args) => {
                f.write_str(if matches!(self, Atom::Min(_)) { "min(" } else { "max(" })?;
                // Constants last: `min(n, 512)`.
                let (consts, exprs): (Vec<&Poly>, Vec<&Poly>) = args.iter().partition(|a| a.as_const().is_some());
                for (i, a) in exprs.into_iter().chain(consts).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    a.write(f)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A signed size expression: the algebra of [`Dim`] without the requirement that the value
/// be non-negative, for arithmetic whose intermediate results may be negative constants
/// (`max(5 - a, 0 - 2)` parses through it). [`SizeExpr::to_dim`] makes it a dim.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SizeExpr(Poly);

impl SizeExpr {
    pub fn constant(c: i64) -> SizeExpr {
        SizeExpr(Poly::constant(c))
    }

    pub fn from_dim(d: &Dim) -> Result<SizeExpr, DimError> {
        d.poly().map(SizeExpr)
    }

    /// The dim; an error for a negative constant.
    pub fn to_dim(&self) -> Result<Dim, DimError> {
        Dim::from_poly(self.0.clone())
    }

    pub fn as_const(&self) -> Option<i64> {
        self.0.as_const()
    }

    /// The constant term (`-3` for `seq - 3`).
    pub fn constant_term(&self) -> i64 {
        self.0.terms.get(&Vec::new()).copied().unwrap_or(0)
    }

    pub fn add(&self, other: &SizeExpr) -> Result<SizeExpr, DimError> {
        self.0.add(&other.0).map(SizeExpr)
    }

    pub fn sub(&self, other: &SizeExpr) -> Result<SizeExpr, DimError> {
        self.0.sub(&other.0).map(SizeExpr)
    }

    pub fn mul(&self, other: &SizeExpr) -> Result<SizeExpr, DimError> {
        self.0.mul(&other.0).map(SizeExpr)
    }

    /// `floor(self / d)` for a positive constant `d`.
    pub fn floor_div(&self, d: u64) -> Result<SizeExpr, DimError> {
        self.0.floor_div(d).map(SizeExpr)
    }

    pub fn min(&self, other: &SizeExpr) -> Result<SizeExpr, DimError> {
        Poly::extremum(vec![self.0.clone(), other.0.clone()], true).map(SizeExpr)
    }

    pub fn max(&self, other: &SizeExpr) -> Result<SizeExpr, DimError> {
        Poly::extremum(vec![self.0.clone(), other.0.clone()], false).map(SizeExpr)
    }

    /// Evaluates the expression given values for its symbols.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<i64, DimError> {
        Ok(self.0.eval(lookup)? as i64)
    }
}

impl fmt::Display for SizeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write(f)
    }
}

impl Dim {
    pub const fn new(n: u64) -> Dim {
        Dim(DimRepr::Const(n))
    }

    pub fn sym(name: &str) -> Dim {
        Dim(DimRepr::Expr(Arc::new(Poly::atom(Atom::Sym(Symbol::from(name))))))
    }

    /// The constant value, if the dim is static.
    pub fn as_const(&self) -> Option<u64> {
        match &self.0 {
            DimRepr::Const(n) => Some(*n),
            DimRepr::Expr(_) => None,
        }
    }

    pub fn is_static(&self) -> bool {
        self.as_const().is_some()
    }

    fn poly(&self) -> Result<Poly, DimError> {
        match &self.0 {
            DimRepr::Const(n) => Ok(Poly::constant(i64::try_from(*n).map_err(|_| DimError::Overflow)?)),
            DimRepr::Expr(p) => Ok((**p).clone()),
        }
    }

    /// A dim from a canonical polynomial: an error for a negative constant.
    fn from_poly(p: Poly) -> Result<Dim, DimError> {
        match p.as_const() {
            Some(c) => u64::try_from(c).map(Dim::new).map_err(|_| DimError::Negative),
            None => Ok(Dim(DimRepr::Expr(Arc::new(p.check()?)))),
        }
    }

    pub fn add(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_add(b).map(Dim::new).ok_or(DimError::Overflow);
        }
        Dim::from_poly(self.poly()?.add(&other.poly()?)?)
    }

    /// `self - other`; an error when the result is a negative constant. A symbolic result
    /// may still be negative for some symbol values (`seq - 1` at `seq = 0`): evaluating it
    /// there is the error.
    pub fn sub(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_sub(b).map(Dim::new).ok_or(DimError::Negative);
        }
        Dim::from_poly(self.poly()?.sub(&other.poly()?)?)
    }

    pub fn mul(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_mul(b).map(Dim::new).ok_or(DimError::Overflow);
        }
        Dim::from_poly(self.poly()?.mul(&other.poly()?)?)
    }

    /// Exact division by a dim that is a single monomial (a constant, a symbol or another
    /// atom, or a product of them times a constant): every term of `self` must be divisible
    /// by it.
    pub fn div_exact(&self, divisor: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), divisor.as_const()) {
            if b == 0 || a % b != 0 {
                return Err(DimError::NotDivisible);
            }
            return Ok(Dim::new(a / b));
        }
        let div = divisor.poly()?;
        if div.terms.len() != 1 {
            return Err(DimError::NotDivisible);
        }
        let (dm, &dc) = div.terms.iter().next().ok_or(DimError::NotDivisible)?;
        let mut out = Poly::default();
        for (m, &c) in &self.poly()?.terms {
            if c % dc != 0 {
                return Err(DimError::NotDivisible);
            }
            let mut rest = m.clone();
            for a in dm {
                let pos = rest.iter().position(|r| r == a).ok_or(DimError::NotDivisible)?;
                rest.remove(pos);
            }
            out.add_term(rest, c / dc)?;
        }
        Dim::from_poly(out)
    }

    /// `floor(self / divisor)`. The divisor must be a positive constant, or divide `self`
    /// exactly ([`Dim::div_exact`]).
    pub fn floor_div(&self, divisor: &Dim) -> Result<Dim, DimError> {
        match divisor.as_const() {
            Some(0) => Err(DimError::NotDivisible),
            Some(d) => match self.as_const() {
                Some(a) => Ok(Dim::new(a / d)),
                None => Dim::from_poly(self.poly()?.floor_div(d)?),
            },
            None => self.div_exact(divisor),
        }
    }

    /// `ceil(self / divisor)`, under the same conditions as [`Dim::floor_div`].
    pub fn ceil_div(&self, divisor: &Dim) -> Result<Dim, DimError> {
        match divisor.as_const() {
            Some(0) => Err(DimError::NotDivisible),
            Some(d) => self.add(&Dim::new(d - 1))?.floor_div(divisor),
            None => self.div_exact(divisor),
        }
    }

    /// `self mod divisor` (the remainder of [`Dim::floor_div`]).
    pub fn rem(&self, divisor: &Dim) -> Result<Dim, DimError> {
        self.sub(&self.floor_div(divisor)?.mul(divisor)?)
    }

    pub fn min(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return Ok(Dim::new(a.min(b)));
        }
        Dim::from_poly(Poly::extremum(vec![self.poly()?, other.poly()?], true)?)
    }

    pub fn max(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return Ok(Dim::new(a.max(b)));
        }
        Dim::from_poly(Poly::extremum(vec![self.poly()?, other.poly()?], false)?)
    }

    /// Whether `self <= other` for every value of the symbols (each at least 1):
    /// `Some(true)` when provably so, `Some(false)` when provably not, `None` when the
    /// algebra cannot tell.
    pub fn prove_le(&self, other: &Dim) -> Option<bool> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return Some(a <= b);
        }
        let (a, b) = (self.poly().ok()?, other.poly().ok()?);
        if b.sub(&a).ok()?.lower_bound().is_some_and(|l| l >= 0) {
            return Some(true);
        }
        if a.sub(&b).ok()?.lower_bound().is_some_and(|l| l >= 1) {
            return Some(false);
        }
        None
    }

    /// A lower bound of the dim over every value of its symbols (each at least 1), when the
    /// algebra finds one: `n` for `n`, `1` for `(n + 1) / 2`, `None` for `n - 3`.
    pub fn lower_bound(&self) -> Option<i128> {
        match &self.0 {
            DimRepr::Const(n) => Some(*n as i128),
            DimRepr::Expr(p) => p.lower_bound(),
        }
    }

    /// The symbols this dim mentions.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out = Vec::new();
        if let DimRepr::Expr(p) = &self.0 {
            p.symbols_into(&mut out);
        }
        out.sort();
        out.dedup();
        out
    }

    /// If the dim is exactly one symbol, its name.
    pub fn as_symbol(&self) -> Option<&Symbol> {
        match &self.0 {
            DimRepr::Expr(p) => match p.single_atom() {
                Some(Atom::Sym(s)) => Some(s),
                _ => None,
            },
            DimRepr::Const(_) => None,
        }
    }

    /// Evaluates the dim given values for its symbols.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<u64, DimError> {
        match &self.0 {
            DimRepr::Const(n) => Ok(*n),
            DimRepr::Expr(p) => {
                let v = p.eval(lookup)?;
                if v < 0 {
                    return Err(DimError::Negative);
                }
                u64::try_from(v).map_err(|_| DimError::Overflow)
            }
        }
    }
}

impl Default for Dim {
    fn default() -> Dim {
        Dim::new(0)
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::new(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            DimRepr::Const(n) => write!(f, "{n}"),
            DimRepr::Expr(p) => p.write(f),
        }
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A tensor shape: one `Dim` per axis; rank 0 is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub SmallVec<[Dim; 4]>);

impl Shape {
    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    pub fn from_static(dims: &[u64]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::new(d)).collect())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// Static sizes, if every dim is static.
    pub fn as_static(&self) -> Option<Vec<u64>> {
        self.0.iter().map(Dim::as_const).collect()
    }

    /// The number of elements as a dim.
    pub fn numel(&self) -> Result<Dim, DimError> {
        let mut n = Dim::new(1);
        for d in &self.0 {
            n = n.mul(d)?;
        }
        Ok(n)
    }

    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = self.0.iter().flat_map(Dim::symbols).collect();
        out.sort();
        out.dedup();
        out
    }
}

impl FromIterator<Dim> for Shape {
    fn from_iter<I: IntoIterator<Item = Dim>>(iter: I) -> Shape {
        Shape(iter.into_iter().collect())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_products_and_sums() {
        let b = Dim::sym("batch");
        let s = Dim::sym("seq");
        assert_eq!(b.mul(&s).unwrap(), s.mul(&b).unwrap());
        let e = b.mul(&s).unwrap().mul(&Dim::new(2)).unwrap().add(&s).unwrap();
        assert_eq!(e.to_string(), "2*batch*seq + seq");
        let back = e.sub(&s).unwrap().div_exact(&Dim::new(2)).unwrap();
        assert_eq!(back, b.mul(&s).unwrap());
        assert_eq!(back.div_exact(&b).unwrap(), s);
        assert_eq!(s.sub(&Dim::new(1)).unwrap().to_string(), "seq - 1");
        assert_eq!(b.sub(&b).unwrap(), Dim::new(0));
        assert_eq!(Dim::new(3).sub(&Dim::new(4)), Err(DimError::Negative));
        assert_eq!(b.add(&Dim::new(1)).unwrap().div_exact(&b), Err(DimError::NotDivisible));
    }

    /// The deepest dim the algebra builds prints as text the parser reads back: each level a
    /// quotient with a coefficient and a sum inside, `2*((2*(...) + b) / 3)`, the most
    /// parentheses a level prints. One level more is too complex.
    #[test]
    fn the_deepest_dim_round_trips_through_text() {
        let b = Dim::sym("b");
        let level = |x: &Dim| x.add(&b)?.floor_div(&Dim::new(3))?.mul(&Dim::new(2));
        let mut x = Dim::sym("n");
        for _ in 0..MAX_DEPTH {
            x = level(&x).unwrap();
        }
        let text = x.to_string();
        let deepest = text
            .chars()
            .scan(0i32, |d, c| {
                *d += i32::from(c == '(') - i32::from(c == ')');
                Some(*d)
            })
            .max();
        assert_eq!(deepest, Some(2 * MAX_DEPTH as i32), "{text}");
        let g = crate::text::parse(&format!("graph g(%x: f32[{text}]) {{\n  return %x\n}}\n")).unwrap();
        assert_eq!(g.ty(g.inputs()[0]).shape.dims()[0], x);
        assert_eq!(level(&x), Err(DimError::TooComplex));
    }

    #[test]
    fn evaluation() {
        let e = Dim::sym("n").mul(&Dim::new(3)).unwrap().add(&Dim::new(1)).unwrap();
        let v = e.eval(&|s| (s == "n").then_some(5)).unwrap();
        assert_eq!(v, 16);
        assert_eq!(e.eval(&|_| None), Err(DimError::UnboundSymbol("n".into())));
    }
}
