//! Shapes whose dims are static or symbolic.
//!
//! A symbolic dim is a polynomial with integer coefficients over named symbols (`batch`,
//! `seq`), kept in a canonical form (monomials sorted, zero terms dropped) so that two dims are
//! equal exactly when their polynomials are: `batch*seq` equals `seq*batch`, and `2*n + 1`
//! prints the same way whichever order it was built in. Products and sums are what reshape,
//! flatten and concatenation need; exact division by a monomial recovers a dim from a product.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

/// A named size symbol.
pub type Symbol = Arc<str>;

/// One dimension: a non-negative constant or a polynomial over symbols.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dim(DimRepr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum DimRepr {
    Const(u64),
    /// Canonical polynomial with at least one non-constant term.
    Poly(Arc<Poly>),
}

/// Monomial (sorted symbols, with repetition for powers) → coefficient. The empty monomial is
/// the constant term. No zero coefficients are stored.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Poly {
    terms: BTreeMap<Vec<Symbol>, i64>,
}

/// Why two dims could not be combined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimError {
    Overflow,
    Negative,
    NotDivisible,
    UnboundSymbol(String),
}

impl std::error::Error for DimError {}

impl fmt::Display for DimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimError::Overflow => write!(f, "dimension arithmetic overflowed"),
            DimError::Negative => write!(f, "dimension would be negative"),
            DimError::NotDivisible => write!(f, "dimension is not exactly divisible"),
            DimError::UnboundSymbol(s) => write!(f, "symbol `{s}` has no value"),
        }
    }
}

impl Dim {
    pub const fn new(n: u64) -> Dim {
        Dim(DimRepr::Const(n))
    }

    pub fn sym(name: &str) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(vec![Symbol::from(name)], 1);
        Dim(DimRepr::Poly(Arc::new(Poly { terms })))
    }

    /// The constant value, if the dim is static.
    pub fn as_const(&self) -> Option<u64> {
        match &self.0 {
            DimRepr::Const(n) => Some(*n),
            DimRepr::Poly(_) => None,
        }
    }

    pub fn is_static(&self) -> bool {
        self.as_const().is_some()
    }

    fn to_terms(&self) -> Result<BTreeMap<Vec<Symbol>, i64>, DimError> {
        Ok(match &self.0 {
            DimRepr::Const(0) => BTreeMap::new(),
            DimRepr::Const(n) => {
                let n = i64::try_from(*n).map_err(|_| DimError::Overflow)?;
                BTreeMap::from([(Vec::new(), n)])
            }
            DimRepr::Poly(p) => p.terms.clone(),
        })
    }

    fn from_terms(mut terms: BTreeMap<Vec<Symbol>, i64>) -> Result<Dim, DimError> {
        terms.retain(|_, c| *c != 0);
        if terms.keys().all(|m| m.is_empty()) {
            let c = terms.get(&Vec::new()).copied().unwrap_or(0);
            return u64::try_from(c).map(Dim::new).map_err(|_| DimError::Negative);
        }
        // A polynomial is allowed negative coefficients (`seq - 1`), but a leading
        // term must be positive for the dim to be non-negative for large symbol values.
        Ok(Dim(DimRepr::Poly(Arc::new(Poly { terms }))))
    }

    pub fn add(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_add(b).map(Dim::new).ok_or(DimError::Overflow);
        }
        let mut terms = self.to_terms()?;
        for (m, c) in other.to_terms()? {
            let e = terms.entry(m).or_insert(0);
            *e = e.checked_add(c).ok_or(DimError::Overflow)?;
        }
        Dim::from_terms(terms)
    }

    /// `self - other`; an error when the result is a negative constant.
    pub fn sub(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_sub(b).map(Dim::new).ok_or(DimError::Negative);
        }
        let mut terms = self.to_terms()?;
        for (m, c) in other.to_terms()? {
            let e = terms.entry(m).or_insert(0);
            *e = e.checked_sub(c).ok_or(DimError::Overflow)?;
        }
        Dim::from_terms(terms)
    }

    pub fn mul(&self, other: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return a.checked_mul(b).map(Dim::new).ok_or(DimError::Overflow);
        }
        let mut terms: BTreeMap<Vec<Symbol>, i64> = BTreeMap::new();
        for (ma, ca) in self.to_terms()? {
            for (mb, cb) in other.to_terms()? {
                let mut m: Vec<Symbol> = ma.iter().chain(mb.iter()).cloned().collect();
                m.sort();
                let c = ca.checked_mul(cb).ok_or(DimError::Overflow)?;
                let e = terms.entry(m).or_insert(0);
                *e = e.checked_add(c).ok_or(DimError::Overflow)?;
            }
        }
        Dim::from_terms(terms)
    }

    /// Exact division by a dim that is a single monomial (a constant, a symbol, or a product
    /// of them times a constant): every term of `self` must be divisible by it.
    pub fn div_exact(&self, divisor: &Dim) -> Result<Dim, DimError> {
        if let (Some(a), Some(b)) = (self.as_const(), divisor.as_const()) {
            if b == 0 || a % b != 0 {
                return Err(DimError::NotDivisible);
            }
            return Ok(Dim::new(a / b));
        }
        let div_terms = divisor.to_terms()?;
        if div_terms.len() != 1 {
            return Err(DimError::NotDivisible);
        }
        let (dm, dc) = div_terms.into_iter().next().ok_or(DimError::NotDivisible)?;
        let mut out = BTreeMap::new();
        for (m, c) in self.to_terms()? {
            if c % dc != 0 {
                return Err(DimError::NotDivisible);
            }
            let mut rest = m.clone();
            for s in &dm {
                let pos = rest.iter().position(|r| r == s).ok_or(DimError::NotDivisible)?;
                rest.remove(pos);
            }
            out.insert(rest, c / dc);
        }
        Dim::from_terms(out)
    }

    /// The symbols this dim mentions.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = match &self.0 {
            DimRepr::Const(_) => Vec::new(),
            DimRepr::Poly(p) => p.terms.keys().flatten().cloned().collect(),
        };
        out.sort();
        out.dedup();
        out
    }

    /// If the dim is exactly one symbol, its name.
    pub fn as_symbol(&self) -> Option<&Symbol> {
        match &self.0 {
            DimRepr::Poly(p) if p.terms.len() == 1 => {
                let (m, c) = p.terms.iter().next()?;
                (m.len() == 1 && *c == 1).then(|| &m[0])
            }
            _ => None,
        }
    }

    /// Evaluates the dim given values for its symbols.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<u64>) -> Result<u64, DimError> {
        match &self.0 {
            DimRepr::Const(n) => Ok(*n),
            DimRepr::Poly(p) => {
                let mut total: i128 = 0;
                for (m, c) in &p.terms {
                    let mut v: i128 = *c as i128;
                    for s in m {
                        let x = lookup(s).ok_or_else(|| DimError::UnboundSymbol(s.to_string()))?;
                        v = v.checked_mul(x as i128).ok_or(DimError::Overflow)?;
                    }
                    total = total.checked_add(v).ok_or(DimError::Overflow)?;
                }
                if total < 0 {
                    return Err(DimError::Negative);
                }
                u64::try_from(total).map_err(|_| DimError::Overflow)
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
            DimRepr::Poly(p) => {
                // Highest-degree terms first, constant last: `2*batch*seq + seq - 1`. The text
                // form has no unary minus, so the first positive term leads (`65537 - 320*n`),
                // and `0` leads when there is none (`0 - n`).
                let mut terms: Vec<(&Vec<Symbol>, &i64)> = p.terms.iter().collect();
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
                    for (j, s) in m.iter().enumerate() {
                        if j > 0 {
                            f.write_str("*")?;
                        }
                        f.write_str(s)?;
                    }
                }
                Ok(())
            }
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

    #[test]
    fn evaluation() {
        let e = Dim::sym("n").mul(&Dim::new(3)).unwrap().add(&Dim::new(1)).unwrap();
        let v = e.eval(&|s| (s == "n").then_some(5)).unwrap();
        assert_eq!(v, 16);
        assert_eq!(e.eval(&|_| None), Err(DimError::UnboundSymbol("n".into())));
    }
}
