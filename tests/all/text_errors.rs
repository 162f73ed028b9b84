//! Bad graph text gets a typed error that names the line, the column and what was expected.

use ladder::text::parse;

fn err(src: &str) -> ladder::text::ParseError {
    match parse(src) {
        Ok(g) => panic!("parsed but should not:\n{}", ladder::text::print(&g)),
        Err(e) => e,
    }
}

#[track_caller]
fn expect(src: &str, line: usize, col: usize, needle: &str) {
    let e = err(src);
    assert!(e.message.contains(needle), "{e} (wanted {needle:?})");
    assert_eq!((e.line, e.col), (line, col), "{e}");
}

#[test]
fn syntax_errors_say_what_was_expected_and_where() {
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%x\n  return %1\n}", 3, 3, "expected `,`");
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%x)\n}", 3, 1, "expected a node");
    expect("graph g(%x: f32[2] {\n}", 1, 20, "expected `,`");
    expect("graf g() {}", 1, 1, "expected `graph`");
    expect("graph g(%x: f33[2]) {\n return %x\n}", 1, 13, "unknown dtype `f33`");
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%x) $\n}", 2, 16, "unexpected character");
    expect("graph g(%x: f32[2]) {\n  return %x\n} trailing", 3, 3, "end of input");
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%x) {axis=}\n}", 2, 22, "expected an attribute value");
    expect("graph g(%x: f32[2]) {\n  return %x as \"a\n}", 2, 16, "unterminated");
}

#[test]
fn name_errors() {
    expect("graph g(%x: f32[2]) {\n  %5 = exp(%x)\n  return %5\n}", 2, 3, "expected %1 here");
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%y)\n  return %1\n}", 2, 12, "`%y` is not defined");
    expect("graph g(%x: f32[2]) {\n  %a = exp(%x)\n  %a = exp(%x)\n  return %a\n}", 3, 3, "defined twice");
    expect("graph g(%x: f32[2], %x: f32[2]) {\n  return %x\n}", 1, 21, "used twice");
    expect("graph g(%x: f32[2]) {\n  return %x, %x\n}", 2, 14, "output name `x` is used twice");
    expect("graph g(%x: f32[2]) {\n  %1 = frobnicate(%x)\n  return %1\n}", 2, 8, "unknown operator `frobnicate`");
    expect("graph g(%x: f32[2]) {\n  %1 = input()\n  return %1\n}", 2, 8, "unknown operator `input`");
}

#[test]
fn type_and_attribute_errors_point_at_the_node() {
    expect(
        "graph g(%x: f32[2]) {\n  %1 = exp(%x) : f32[3]\n  return %1\n}",
        2,
        18,
        "annotated type f32[3] but `exp` infers f32[2]",
    );
    expect(
        "graph g(%x: f32[2]) {\n  %1 = convert_element_type(%x)\n  return %1\n}",
        2,
        8,
        "attribute `dtype` is required",
    );
    expect(
        "graph g(%x: f32[2]) {\n  %1 = convert_element_type(%x) {dtype=f32, dtype=i64}\n  return %1\n}",
        2,
        8,
        "given twice",
    );
    expect("graph g(%x: f32[2]) {\n  %1 = exp(%x) {axis=1}\n  return %1\n}", 2, 8, "unknown attribute `axis`");
    expect(
        "graph g(%x: f32[2]) {\n  %1 = convert_element_type(%x) {dtype=1}\n  return %1\n}",
        2,
        8,
        "must be a dtype, found a int",
    );
}

#[test]
fn blob_errors() {
    expect("blob @w: f32[3] = [1.0, 2.0]\ngraph g() {\n  return\n}", 1, 19, "needs 3 values, found 2");
    expect("blob @w: f32[1] = [1.0, 2.0]\ngraph g() {\n  return\n}", 1, 25, "expected `]` after 1 values");
    expect("blob @w: i32[1] = [3000000000]\ngraph g() {\n  return\n}", 1, 20, "does not fit in i32");
    expect("blob @w: f32[n] = []\ngraph g() {\n  return\n}", 1, 10, "blob shapes must be static");
    expect("blob @w: f32[1] = elided\ngraph g() {\n  return\n}", 1, 19, "was elided");
    expect("graph g() {\n  %0 = const @nope\n  return %0\n}", 2, 14, "is not declared");
    // A declared size is never trusted for allocation: a huge blob is rejected up front.
    expect(
        "blob @w: f32[100000, 100000, 100000] = []\ngraph g() {\n  return\n}",
        1,
        10,
        "above `Limits::max_tensor_bytes`",
    );
    expect("blob @w: f32[1] = [1.0]\nblob @w: f32[1] = [1.0]\ngraph g() {\n  return\n}", 2, 1, "declared twice");
}

#[test]
fn hostile_text_never_panics() {
    // Truncations of a valid file at every byte must return errors, not panic.
    let src = "blob @w: f32[2] = [1.0, nan]\ngraph g(%x: f32[batch, 2]) {\n  %c = const @w\n  %2 = add(%x, %c) : f32[batch, 2]\n  %3 = convert_element_type(%2) {dtype=i64}\n  return %3 as y\n}\n";
    for end in 0..src.len() {
        let _ = parse(&src[..end]);
    }
    assert!(parse(src).is_ok());
    for s in ["%", "@", "\"", "graph g(%\"", "[[[[[[", "graph g() { return %\"\\u{110000}\" }", "0x", "1e", "-"] {
        let _ = parse(s);
    }
}

/// Names are looked up through the graph's name index: a text form of 20,000 named values
/// (quadratic to parse with a scan per lookup) parses, a name defined twice at its end is
/// still found, and renaming or clearing a name keeps the index right.
#[test]
fn many_named_values_parse_and_names_stay_unique() {
    let mut src = String::from("graph g(%x: f32[2]) {\n");
    let mut prev = "x".to_string();
    for i in 0..20_000 {
        src.push_str(&format!("  %v{i} = neg(%{prev})\n"));
        prev = format!("v{i}");
    }
    let ok = format!("{src}  return %{prev}\n}}\n");
    let g = parse(&ok).unwrap();
    assert_eq!(g.len(), 20_001);
    let last = g.value_by_name("v19999").unwrap();
    assert_eq!(g.outputs()[0].value, last);
    let twice = format!("{src}  %v5 = neg(%x)\n  return %v5\n}}\n");
    expect(&twice, 20_002, 3, "`%v5` is defined twice");

    let mut g = parse("graph g(%x: f32[2]) {\n  %a = exp(%x)\n  %b = neg(%a)\n  return %b\n}").unwrap();
    let a = g.value_by_name("a").unwrap();
    g.set_name(a, "renamed").unwrap();
    assert_eq!((g.value_by_name("a"), g.value_by_name("renamed")), (None, Some(a)));
    let b = g.value_by_name("b").unwrap();
    assert!(g.set_name(b, "renamed").is_err(), "a name used twice");
    g.set_name(b, "a").unwrap();
    assert_eq!(g.value_by_name("a"), Some(b));
    assert!(g.add_input("a", g.ty(b).clone()).is_err(), "an input may not take a used name");
    assert!(ladder::text::parse(&ladder::text::print(&g)).is_ok());
}
