//! The hand-written header against the Rust it declares.
//!
//! `include/ladder.h` is written by hand (it is the API's documentation), so nothing makes it
//! agree with `src/*.rs` but this test: it parses the header's prototypes, structs and enums
//! and the sources' `extern "C"` functions, `#[repr(C)]` structs and code constants, maps each
//! Rust type to its C spelling, and fails on any difference: a function on one side only, a
//! parameter added, renamed or retyped, a return type, a struct field, an enumerator's value.
//! The parsers understand the subset of C and Rust these files use, and fail on anything else
//! rather than skip it.

use std::collections::BTreeMap;
use std::path::Path;

/// A function's parameters (name, C type) and return type, C types as token lists.
#[derive(Debug, PartialEq, Eq)]
struct Signature {
    params: Vec<(String, Vec<String>)>,
    ret: Vec<String>,
}

/// What a file declares: functions, structs (fields), enumerators (type, value).
#[derive(Debug, Default)]
struct Api {
    functions: BTreeMap<String, Signature>,
    structs: BTreeMap<String, Vec<(String, Vec<String>)>>,
    enumerators: BTreeMap<String, (String, i64)>,
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A C type as tokens: identifiers and `*`, one token each.
fn c_tokens(text: &str) -> Vec<String> {
    text.replace('*', " * ").split_whitespace().map(str::to_string).collect()
}

/// Splits `TYPE NAME` (a parameter or a field) into the name and the type's tokens.
fn split_declaration(decl: &str) -> (String, Vec<String>) {
    let mut tokens = c_tokens(decl);
    let name = tokens.pop().unwrap_or_else(|| panic!("empty declaration in ladder.h"));
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !tokens.is_empty(),
        "ladder.h: cannot read `{decl}` as TYPE NAME"
    );
    (name, tokens)
}

/// The header's text without comments, `#` lines, or the C++ guard blocks.
fn header_code(text: &str) -> String {
    let mut no_comments = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        no_comments.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("ladder.h: unterminated comment");
        rest = &rest[start + end + 2..];
    }
    no_comments.push_str(rest);
    let mut code = String::new();
    let mut in_cplusplus = false;
    for line in no_comments.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        if line == "#ifdef __cplusplus" {
            in_cplusplus = true;
        } else if in_cplusplus && line == "#endif" {
            in_cplusplus = false;
        } else if !in_cplusplus && !line.starts_with('#') {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// Parses the header's declarations.
fn parse_header(text: &str) -> Api {
    let code = header_code(text);
    let mut api = Api::default();
    // Top-level statements end with `;` outside braces.
    let mut statements = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ';' if depth == 0 => {
                statements.push(code[start..i].split_whitespace().collect::<Vec<_>>().join(" "));
                start = i + 1;
            }
            _ => {}
        }
    }
    assert!(code[start..].trim().is_empty(), "ladder.h: text after the last `;`: {}", code[start..].trim());
    for s in statements {
        if let Some(rest) = s.strip_prefix("typedef enum ") {
            let (name, body) = rest.split_once('{').expect("ladder.h: an enum without a body");
            let (body, alias) = body.rsplit_once('}').expect("ladder.h: an enum without `}`");
            let name = name.trim().to_string();
            assert_eq!(alias.trim(), name, "ladder.h: typedef enum {name} is named {alias}");
            for entry in body.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let (enumerator, value) = entry
                    .split_once('=')
                    .unwrap_or_else(|| panic!("ladder.h: enumerator `{entry}` of {name} has no explicit value"));
                let value: i64 = value.trim().parse().unwrap_or_else(|_| panic!("ladder.h: `{entry}`: value"));
                let old = api.enumerators.insert(enumerator.trim().to_string(), (name.clone(), value));
                assert!(old.is_none(), "ladder.h: enumerator {enumerator} declared twice");
            }
        } else if let Some(rest) = s.strip_prefix("typedef ").filter(|r| r.contains("(*")) {
            // A callback type, `typedef RET (*NAME)(PARAMS)`: kept with the functions, by the
            // typedef's name, and compared with its `pub type NAME = Option<unsafe extern "C"
            // fn(...)>` twin.
            let (ret, rest) = rest.split_once("(*").expect("`(*`");
            let (name, params) = rest.split_once(")(").unwrap_or_else(|| panic!("ladder.h: callback `{s}`"));
            let params = params.strip_suffix(')').unwrap_or_else(|| panic!("ladder.h: `{s}` does not end with `)`"));
            let params = params.split(',').map(split_declaration).collect();
            let old = api.functions.insert(name.trim().to_string(), Signature { params, ret: c_tokens(ret) });
            assert!(old.is_none(), "ladder.h: {name} declared twice");
        } else if let Some(rest) = s.strip_prefix("typedef struct ") {
            if let Some((name, body)) = rest.split_once('{') {
                let (body, alias) = body.rsplit_once('}').expect("ladder.h: a struct without `}`");
                let name = name.trim().to_string();
                assert_eq!(alias.trim(), name, "ladder.h: typedef struct {name} is named {alias}");
                let fields = body.split(';').map(str::trim).filter(|f| !f.is_empty()).map(split_declaration).collect();
                api.structs.insert(name, fields);
            }
            // else an opaque handle: `typedef struct X X`.
        } else {
            let (head, params) = s.split_once('(').unwrap_or_else(|| panic!("ladder.h: not a prototype: `{s}`"));
            let params = params.strip_suffix(')').unwrap_or_else(|| panic!("ladder.h: `{s}` does not end with `)`"));
            let (name, ret) = split_declaration(head);
            let params = match params.trim() {
                "void" => Vec::new(),
                list => list.split(',').map(split_declaration).collect(),
            };
            let old = api.functions.insert(name.clone(), Signature { params, ret });
            assert!(old.is_none(), "ladder.h: {name} declared twice");
        }
    }
    api
}

/// A Rust type's C spelling, as tokens; `None` for a type without one in the map.
fn rust_to_c(ty: &str) -> Option<Vec<String>> {
    let ty = ty.trim();
    let pointer = |inner: &str, constant: bool| {
        let mut tokens = rust_to_c(inner)?;
        if constant {
            // `*const T` is a pointer to const T: the qualifier goes before a plain type and
            // after the `*` of a pointer type (`const T* const*`).
            if tokens.last().is_some_and(|t| t == "*") {
                tokens.push("const".into());
            } else {
                tokens.insert(0, "const".into());
            }
        }
        tokens.push("*".into());
        Some(tokens)
    };
    if let Some(inner) = ty.strip_prefix("*const ") {
        return pointer(inner, true);
    }
    if let Some(inner) = ty.strip_prefix("*mut ") {
        return pointer(inner, false);
    }
    let c = match ty {
        "" | "()" => "void",
        "c_void" => "void",
        "c_char" => "char",
        "usize" => "size_t",
        "i64" => "int64_t",
        "i32" => "int32_t",
        "u32" => "uint32_t",
        "u8" => "uint8_t",
        "LadderStatus" | "LadderDType" | "LadderOptions" | "LadderSession" | "LadderTensor" | "LadderShapeFn"
        | "LadderComputeFn" => ty,
        _ => return None,
    };
    Some(vec![c.to_string()])
}

/// Parses the crate's sources: `#[no_mangle]` `extern "C"` functions, `#[repr(C)]` structs and
/// the code constants (`pub const NAME: Type = Type(value);`).
fn parse_rust(files: &[(String, String)]) -> Api {
    let mut api = Api::default();
    let c_type = |file: &str, what: &str, ty: &str| {
        rust_to_c(ty).unwrap_or_else(|| panic!("{file}: {what}: the Rust type `{ty}` has no C equivalent in this test"))
    };
    for (file, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            if !line.contains("extern \"C\" fn ") || line.starts_with("//") {
                continue;
            }
            assert!(line.starts_with("pub "), "{file}:{}: an extern \"C\" fn that is not pub", i + 1);
            let attributes: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .collect();
            assert!(attributes.contains(&"#[no_mangle]"), "{file}:{}: extern \"C\" fn without #[no_mangle]", i + 1);
            // The signature runs from the name to the body's `{`.
            let from: String = lines[i..].join("\n");
            let at = from.find("extern \"C\" fn ").expect("the line's match");
            let sig = &from[at + "extern \"C\" fn ".len()..];
            let sig = &sig[..sig.find('{').expect("a body")];
            let (name, rest) = sig.split_once('(').expect("a parameter list");
            let (params, ret) = rest.rsplit_once(')').expect("`)`");
            let name = name.trim().to_string();
            let params = params
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (pname, ty) = p.split_once(':').unwrap_or_else(|| panic!("{file}: {name}: parameter `{p}`"));
                    (pname.trim().to_string(), c_type(file, &name, ty))
                })
                .collect();
            let ret = c_type(file, &name, ret.trim().trim_start_matches("->"));
            let old = api.functions.insert(name.clone(), Signature { params, ret });
            assert!(old.is_none(), "{file}: {name} defined twice");
        }
        // Callback types: `pub type NAME = Option<unsafe extern "C" fn(PARAMS) -> RET>;`.
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim().strip_prefix("pub type ") else { continue };
            let from: String = lines[i..].join("\n");
            let sig = &from[from.find("extern \"C\" fn(").unwrap_or_else(|| panic!("{file}: `{rest}`"))..];
            let sig = &sig["extern \"C\" fn(".len()..sig.find(">;").expect("`>;`")];
            let (params, ret) = sig.rsplit_once(')').expect("`)`");
            let name = rest.split_once('=').expect("`=`").0.trim().to_string();
            let params = params
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (pname, ty) = p.split_once(':').unwrap_or_else(|| panic!("{file}: {name}: parameter `{p}`"));
                    (pname.trim().to_string(), c_type(file, &name, ty))
                })
                .collect();
            let ret = c_type(file, &name, ret.trim().trim_start_matches("->").trim_end_matches(','));
            let old = api.functions.insert(name.clone(), Signature { params, ret });
            assert!(old.is_none(), "{file}: {name} defined twice");
        }
        // `#[repr(C)]` structs: the fields of the struct that follows the attribute.
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[repr(C)]" {
                continue;
            }
            let decl = lines[i + 1..].iter().find(|l| l.trim().starts_with("pub struct ")).expect("a struct");
            let name = decl.trim()["pub struct ".len()..].trim_end_matches('{').trim().to_string();
            let start = lines.iter().position(|l| l == decl).expect("the struct line") + 1;
            let mut fields = Vec::new();
            for l in &lines[start..] {
                let l = l.trim();
                if l == "}" {
                    break;
                }
                if let Some(field) = l.strip_prefix("pub ") {
                    let (fname, ty) = field.trim_end_matches(',').split_once(':').expect("a field");
                    fields.push((fname.trim().to_string(), c_type(file, &name, ty)));
                } else {
                    assert!(l.starts_with("///") || l.is_empty(), "{file}: {name}: cannot read field `{l}`");
                }
            }
            api.structs.insert(name, fields);
        }
        // Code constants: `pub const LADDER_X: Type = Type(value);`.
        for line in &lines {
            let Some(rest) = line.trim().strip_prefix("pub const LADDER_") else {
                continue;
            };
            let (name, rest) = rest.split_once(':').expect("a const type");
            let (ty, value) = rest.split_once('=').expect("a const value");
            let ty = ty.trim().to_string();
            let value = value.trim().trim_end_matches(';');
            let inner = value.strip_prefix(&format!("{ty}(")).and_then(|v| v.strip_suffix(')'));
            let value: i64 = inner
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{file}: LADDER_{name}: `{value}` is not `{ty}(N)`"));
            api.enumerators.insert(format!("LADDER_{}", name.trim()), (ty, value));
        }
    }
    api
}

fn sources() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(crate_dir().join("src"))
        .expect("src/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| (p.display().to_string(), std::fs::read_to_string(&p).expect("a source file")))
        .collect();
    files.sort();
    files
}

/// Every difference between the two sides, as sentences.
fn differences(header: &Api, rust: &Api) -> Vec<String> {
    let mut errors = Vec::new();
    let show = |tokens: &[String]| tokens.join(" ").replace(" *", "*");
    for (name, c) in &header.functions {
        let Some(r) = rust.functions.get(name) else {
            errors.push(format!("{name} is declared in ladder.h but not defined in src/"));
            continue;
        };
        if c.ret != r.ret {
            errors.push(format!("{name} returns {} in ladder.h, {} in src/", show(&c.ret), show(&r.ret)));
        }
        if c.params.len() != r.params.len() {
            errors.push(format!("{name} takes {} parameters in ladder.h, {} in src/", c.params.len(), r.params.len()));
            continue;
        }
        for (k, ((cn, ct), (rn, rt))) in c.params.iter().zip(&r.params).enumerate() {
            if cn != rn || ct != rt {
                errors.push(format!(
                    "{name} parameter {k}: `{} {cn}` in ladder.h, `{} {rn}` in src/",
                    show(ct),
                    show(rt)
                ));
            }
        }
    }
    for name in rust.functions.keys().filter(|n| !header.functions.contains_key(*n)) {
        errors.push(format!("{name} is defined in src/ but not declared in ladder.h"));
    }
    for (name, fields) in &header.structs {
        match rust.structs.get(name) {
            None => errors.push(format!("struct {name} is in ladder.h but has no #[repr(C)] twin in src/")),
            Some(r) if r != fields => {
                errors.push(format!("struct {name}: fields {fields:?} in ladder.h, {r:?} in src/"))
            }
            Some(_) => {}
        }
    }
    for name in rust.structs.keys().filter(|n| !header.structs.contains_key(*n)) {
        errors.push(format!("#[repr(C)] struct {name} in src/ is not in ladder.h"));
    }
    for (name, c) in &header.enumerators {
        match rust.enumerators.get(name) {
            None => errors.push(format!("{name} is in ladder.h but has no constant in src/")),
            Some(r) if r != c => {
                errors.push(format!("{name} is {} = {} in ladder.h, {} = {} in src/", c.0, c.1, r.0, r.1))
            }
            Some(_) => {}
        }
    }
    for name in rust.enumerators.keys().filter(|n| !header.enumerators.contains_key(*n)) {
        errors.push(format!("{name} is a constant in src/ but not in ladder.h"));
    }
    errors
}

#[test]
fn the_header_declares_exactly_what_the_library_defines() {
    let header = parse_header(&std::fs::read_to_string(crate_dir().join("include/ladder.h")).expect("ladder.h"));
    let rust = parse_rust(&sources());
    // The parsers found the API, not an empty file.
    assert!(header.functions.len() >= 18, "ladder.h: only {} prototypes read", header.functions.len());
    assert!(header.enumerators.contains_key("LADDER_OK") && header.structs.contains_key("LadderOptions"));
    let errors = differences(&header, &rust);
    assert!(errors.is_empty(), "ladder.h and src/ disagree:\n  {}", errors.join("\n  "));
}

#[test]
fn the_header_test_sees_a_changed_prototype() {
    // The comparison itself: each kind of drift is reported.
    let header_text = std::fs::read_to_string(crate_dir().join("include/ladder.h")).expect("ladder.h");
    let rust = parse_rust(&sources());
    let drifted = [
        ("size_t rank, const void* data", "size_t rank, void* data", "ladder_tensor_new parameter 3"),
        ("LadderTensor** outputs, size_t n_outputs);", "LadderTensor** outputs);", "ladder_session_run takes 4"),
        ("LADDER_ERR_LIMIT = 5", "LADDER_ERR_LIMIT = 9", "LADDER_ERR_LIMIT is LadderStatus = 9"),
        ("    int32_t untrusted;", "    uint32_t untrusted;", "struct LadderOptions"),
        ("void ladder_tensor_free(LadderTensor* tensor);", "", "ladder_tensor_free is defined in src/"),
        ("const char* ladder_version(void);", "char* ladder_version(void);", "ladder_version returns char*"),
        (
            "size_t n_inputs, LadderTensor** output);",
            "size_t n_inputs, LadderTensor* output);",
            "LadderComputeFn parameter 4",
        ),
    ];
    for (from, to, expected) in drifted {
        assert!(header_text.contains(from), "ladder.h no longer contains `{from}`: update this test");
        let errors = differences(&parse_header(&header_text.replacen(from, to, 1)), &rust);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "changing `{from}` to `{to}` was not reported as `{expected}`: {errors:?}"
        );
    }
}
