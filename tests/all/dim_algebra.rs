//! The size algebra (`ladder::Dim`) against plain integer arithmetic: random expressions over
//! three symbols, built with every operation, evaluated both ways at random symbol values;
//! their text form parses back to the same dim; comparisons the algebra proves hold at every
//! sampled point; equal values built different ways compare equal.

use ladder::ir::DimError;
use ladder::Dim;
use proptest::prelude::*;

/// An expression tree and its direct meaning.
#[derive(Clone, Debug)]
enum E {
    Const(u64),
    Sym(usize),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    Mul(Box<E>, Box<E>),
    FloorDiv(Box<E>, u64),
    CeilDiv(Box<E>, u64),
    Rem(Box<E>, u64),
    Min(Box<E>, Box<E>),
    Max(Box<E>, Box<E>),
}

const NAMES: [&str; 3] = ["a", "b", "seq"];

fn expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![(0u64..12).prop_map(E::Const), (0usize..3).prop_map(E::Sym)];
    leaf.prop_recursive(5, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Add(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Sub(a.into(), b.into())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Mul(a.into(), b.into())),
            (inner.clone(), 1u64..6).prop_map(|(a, d)| E::FloorDiv(a.into(), d)),
            (inner.clone(), 1u64..6).prop_map(|(a, d)| E::CeilDiv(a.into(), d)),
            (inner.clone(), 1u64..6).prop_map(|(a, d)| E::Rem(a.into(), d)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Min(a.into(), b.into())),
            (inner.clone(), inner).prop_map(|(a, b)| E::Max(a.into(), b.into())),
        ]
    })
}

/// The direct value (Python semantics: floor division, non-negative remainder).
fn value(e: &E, s: &[i128; 3]) -> i128 {
    match e {
        E::Const(c) => *c as i128,
        E::Sym(i) => s[*i],
        E::Add(a, b) => value(a, s) + value(b, s),
        E::Sub(a, b) => value(a, s) - value(b, s),
        E::Mul(a, b) => value(a, s) * value(b, s),
        E::FloorDiv(a, d) => value(a, s).div_euclid(*d as i128),
        E::CeilDiv(a, d) => -(-value(a, s)).div_euclid(*d as i128),
        E::Rem(a, d) => value(a, s).rem_euclid(*d as i128),
        E::Min(a, b) => value(a, s).min(value(b, s)),
        E::Max(a, b) => value(a, s).max(value(b, s)),
    }
}

/// The dim, or `None` where the algebra refuses (a constant going negative on the way, or
/// an expression over its size bounds).
fn build(e: &E) -> Option<Dim> {
    let r = match e {
        E::Const(c) => Ok(Dim::new(*c)),
        E::Sym(i) => Ok(Dim::sym(NAMES[*i])),
        E::Add(a, b) => build(a)?.add(&build(b)?),
        E::Sub(a, b) => build(a)?.sub(&build(b)?),
        E::Mul(a, b) => build(a)?.mul(&build(b)?),
        E::FloorDiv(a, d) => build(a)?.floor_div(&Dim::new(*d)),
        E::CeilDiv(a, d) => build(a)?.ceil_div(&Dim::new(*d)),
        E::Rem(a, d) => build(a)?.rem(&Dim::new(*d)),
        E::Min(a, b) => build(a)?.min(&build(b)?),
        E::Max(a, b) => build(a)?.max(&build(b)?),
    };
    match r {
        Ok(d) => Some(d),
        Err(DimError::Negative | DimError::TooComplex | DimError::Overflow) => None,
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// Whether every sub-expression is non-negative at `s` (a dim is a size: the algebra only
/// promises to agree with arithmetic where the sizes it is built from are sizes).
fn all_sizes(e: &E, s: &[i128; 3]) -> bool {
    let here = value(e, s) >= 0;
    here && match e {
        E::Const(_) | E::Sym(_) => true,
        E::Add(a, b) | E::Sub(a, b) | E::Mul(a, b) | E::Min(a, b) | E::Max(a, b) => all_sizes(a, s) && all_sizes(b, s),
        E::FloorDiv(a, _) | E::CeilDiv(a, _) | E::Rem(a, _) => all_sizes(a, s),
    }
}

fn eval(d: &Dim, s: &[i128; 3]) -> Result<u64, DimError> {
    d.eval(&|name| NAMES.iter().position(|n| *n == name).map(|i| s[i] as u64))
}

fn parse_dim(text: &str) -> Dim {
    let g = ladder::text::parse(&format!("graph g(%x: f32[{text}]) {{\n  return %x\n}}\n"))
        .unwrap_or_else(|e| panic!("`{text}` does not parse: {e}"));
    g.ty(g.inputs()[0]).shape.dims()[0].clone()
}

fn points() -> impl Strategy<Value = Vec<[i128; 3]>> {
    prop::collection::vec([1i128..40, 1i128..40, 1i128..300], 8)
}

proptest! {
    #![proptest_config(crate::common::proptest_config(1500))]

    #[test]
    fn agrees_with_integer_arithmetic(e in expr(), pts in points()) {
        let Some(d) = build(&e) else { return Ok(()) };
        for s in &pts {
            if !all_sizes(&e, s) {
                continue;
            }
            prop_assert_eq!(eval(&d, s), Ok(value(&e, s) as u64), "{:?} built as {} at {:?}", e, d, s);
        }
    }

    #[test]
    fn text_form_round_trips(e in expr()) {
        let Some(d) = build(&e) else { return Ok(()) };
        prop_assert_eq!(parse_dim(&d.to_string()), d.clone(), "{}", d);
    }

    #[test]
    fn proven_comparisons_hold(a in expr(), b in expr(), pts in points()) {
        let (Some(x), Some(y)) = (build(&a), build(&b)) else { return Ok(()) };
        let Some(le) = x.prove_le(&y) else { return Ok(()) };
        for s in &pts {
            if let (Ok(vx), Ok(vy)) = (eval(&x, s), eval(&y, s)) {
                prop_assert_eq!(vx <= vy, le, "{} <= {} claimed {} at {:?}", x, y, le, s);
            }
        }
    }

    #[test]
    fn lower_bounds_hold(e in expr(), pts in points()) {
        let Some(d) = build(&e) else { return Ok(()) };
        let Some(lb) = d.lower_bound() else { return Ok(()) };
        for s in &pts {
            if let Ok(v) = eval(&d, s) {
                prop_assert!(v as i128 >= lb, "{} has lower bound {} but is {} at {:?}", d, lb, v, s);
            }
        }
    }
}

fn n() -> Dim {
    Dim::sym("n")
}

fn c(x: u64) -> Dim {
    Dim::new(x)
}

#[test]
fn equal_sizes_compare_equal() {
    // (2n + 2) / 2 = n + 1
    assert_eq!(n().mul(&c(2)).unwrap().add(&c(2)).unwrap().floor_div(&c(2)).unwrap(), n().add(&c(1)).unwrap());
    // A stride-2 3x3 convolution with padding 1: (n + 2 - 3) / 2 + 1 = ceil(n / 2).
    let conv = n().add(&c(2)).unwrap().sub(&c(3)).unwrap().floor_div(&c(2)).unwrap().add(&c(1)).unwrap();
    assert_eq!(conv, n().ceil_div(&c(2)).unwrap());
    assert_eq!(conv.to_string(), "(n + 1) / 2");
    // Two halvings are a quartering.
    assert_eq!(n().floor_div(&c(2)).unwrap().floor_div(&c(2)).unwrap(), n().floor_div(&c(4)).unwrap());
    // A common factor cancels: (2n) / 4 = n / 2.
    assert_eq!(n().mul(&c(2)).unwrap().floor_div(&c(4)).unwrap(), n().floor_div(&c(2)).unwrap());
    // min and max with a dominated argument, nested, commuted, offset.
    assert_eq!(n().min(&n().add(&c(1)).unwrap()).unwrap(), n());
    assert_eq!(n().max(&c(1)).unwrap(), n());
    assert_eq!(n().min(&c(0)).unwrap(), c(0));
    let m = Dim::sym("m");
    assert_eq!(n().min(&m).unwrap(), m.min(&n()).unwrap());
    assert_eq!(n().min(&m.min(&c(512)).unwrap()).unwrap(), m.min(&n()).unwrap().min(&c(512)).unwrap());
    // n mod 2 + 2*(n / 2) = n
    let rem = n().rem(&c(2)).unwrap();
    assert_eq!(rem.add(&n().floor_div(&c(2)).unwrap().mul(&c(2)).unwrap()).unwrap(), n());
    // Exact division by a symbol through a quotient atom.
    let q = n().add(&c(1)).unwrap().floor_div(&c(2)).unwrap();
    assert_eq!(q.mul(&m).unwrap().div_exact(&q).unwrap(), m);
}

#[test]
fn comparisons_use_symbols_at_least_one() {
    assert_eq!(c(1).prove_le(&n()), Some(true));
    assert_eq!(c(2).prove_le(&n()), None);
    assert_eq!(n().add(&c(1)).unwrap().prove_le(&n()), Some(false));
    assert_eq!(n().prove_le(&n().mul(&n()).unwrap()), Some(true));
    assert_eq!(n().floor_div(&c(2)).unwrap().prove_le(&n()), None);
    assert_eq!(c(0).prove_le(&n().sub(&c(1)).unwrap()), Some(true));
}

#[test]
fn text_forms() {
    let q = n().add(&c(1)).unwrap().floor_div(&c(2)).unwrap();
    assert_eq!(q.mul(&c(3)).unwrap().add(&c(1)).unwrap().to_string(), "3*((n + 1) / 2) + 1");
    assert_eq!(n().min(&c(512)).unwrap().to_string(), "min(n, 512)");
    assert_eq!(parse_dim("max(seq - 1, 1)"), Dim::sym("seq").sub(&c(1)).unwrap().max(&c(1)).unwrap());
    assert_eq!(parse_dim("2*n / 3").to_string(), "2*n / 3");
    assert_eq!(parse_dim("3*(n / 2)").to_string(), "3*(n / 2)");
    assert_eq!(parse_dim("(n + 1) / 2 + 1").eval(&|_| Some(6)), Ok(4));
}

#[test]
fn hostile_sizes_are_bounded() {
    // A product of sums of 26 symbols would have thousands of terms: refused, quickly.
    let sum = (b'a'..=b'z').map(|ch| Dim::sym(&(ch as char).to_string())).reduce(|a, b| a.add(&b).unwrap()).unwrap();
    let mut acc = sum.clone();
    let mut refused = false;
    for _ in 0..8 {
        match acc.mul(&sum) {
            Ok(d) => acc = d,
            Err(DimError::TooComplex) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(refused);
    let text = format!("graph g(%x: f32[{}]) {{\n  return %x\n}}\n", ["(a+b+c+d+e+f+g+h+i+j)"; 8].join("*"));
    let err = ladder::text::parse(&text).unwrap_err();
    assert!(err.to_string().contains("too complex"), "{err}");
    let deep = format!("graph g(%x: f32[{}n{}]) {{\n  return %x\n}}\n", "(".repeat(10_000), ")".repeat(10_000));
    let err = ladder::text::parse(&deep).unwrap_err();
    assert!(err.to_string().contains("nested deeper"), "{err}");
    assert!(ladder::text::parse("graph g(%x: f32[n / 0]) {\n  return %x\n}\n").is_err());
}

/// Found by the `shape_algebra` fuzz target: folding `(n / a + b) / d` into
/// `(n + a*b) / (a*d)` made a part of the expression pass `i64::MAX` where its value did not,
/// and evaluation called that an overflow; parts evaluate in `i128` now, only the value is
/// bounded.
#[test]
fn folded_quotients_evaluate_past_64_bits_inside() {
    let a = 217_306_378_606_149_987u64;
    let q = n().floor_div(&c(a)).unwrap().add(&Dim::sym("b")).unwrap().floor_div(&c(3)).unwrap();
    assert_eq!(q.to_string(), "(217306378606149987*b + n) / 651919135818449961");
    let at = |b: u64| move |s: &str| Some(if s == "b" { b } else { 2 });
    assert_eq!(q.eval(&at(100)), Ok(33));
    // The value itself is still bounded: past i64::MAX is an overflow.
    let big = q.mul(&c(1 << 62)).unwrap();
    assert_eq!(big.eval(&at(100)), Err(DimError::Overflow));
}

/// Found by the `shape_algebra` fuzz target: `min`/`max` calls nested without bound printed as
/// text nested deeper than the parser reads (64 levels). The algebra bounds the nesting so
/// that every dim's text parses back; deeper is too complex.
#[test]
fn nested_extrema_stay_within_the_text_forms_nesting() {
    let (b, m) = (Dim::sym("b"), Dim::sym("m"));
    let mut x = n();
    let mut levels = 0;
    let err = loop {
        match x.min(&b).and_then(|y| y.max(&m)) {
            Ok(y) => x = y,
            Err(e) => break e,
        }
        levels += 2;
        assert_eq!(parse_dim(&x.to_string()), x, "{x}");
    };
    assert_eq!(err, DimError::TooComplex);
    assert!((30..=32).contains(&levels), "{levels} levels");
}

/// Found by the `shape_algebra` fuzz target: a coefficient of `i64::MIN` printed as
/// `- 9223372036854775808*a`, which the parser (no literal past `i64::MAX`) did not read
/// back. Coefficients stay within `±i64::MAX`: reaching `i64::MIN` is an overflow.
#[test]
fn coefficients_stay_printable() {
    let (a, b) = (Dim::sym("a"), Dim::sym("b"));
    let most = b.sub(&a.mul(&c(i64::MAX as u64)).unwrap()).unwrap();
    assert_eq!(most.to_string(), "b - 9223372036854775807*a");
    assert_eq!(parse_dim(&most.to_string()), most);
    assert_eq!(most.sub(&a), Err(DimError::Overflow));
    let e = ladder::text::parse(&format!("graph g(%x: f32[{most} - a]) {{\n  return %x\n}}\n")).unwrap_err();
    assert!(e.message.contains("overflowed"), "{e}");
}
