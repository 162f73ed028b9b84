//! Repository rules that keep the code easy to read and the build lean, checked over the files:
//!
//! - A file under `src/` has at most [`MAX_LINES`] lines. The files that were longer when the
//!   rule came in are listed in [`LONG_FILES`] with their length then as a ceiling: they may
//!   shrink, never grow past it. A long file is split into modules, not added to the list.
//! - The crate root (`src/lib.rs`) declares exactly the public modules of [`PUB_MODS`]: new code
//!   goes under one of them.
//! - The integration tests are modules of the binaries in [`TEST_BINARIES`] (`tests/all/x.rs`),
//!   not binaries of their own (`tests/x.rs`, `tests/x/main.rs` or a `[[test]]` target): each
//!   binary links the whole crate.
//! - Every file under `src/` opens with a `//!` module doc; generated files (first line
//!   `// @generated ...`) are exempt.
//!
//! Each test reports every file that breaks its rule, not only the first.

use std::path::{Path, PathBuf};

/// The most lines a file under `src/` may have.
const MAX_LINES: usize = 1000;

/// The files under `src/` that were longer than [`MAX_LINES`] when the limit came in, each with
/// its ceiling: its length when last measured (lower it when the file shrinks).
const LONG_FILES: &[(&str, usize)] = &[
    ("src/ops/shape.rs", 1100),
    ("src/kernel/eval.rs", 1118),
    ("src/backend/cpu/codegen.rs", 1366),
    ("src/numerics/mod.rs", 1164),
];

/// The public modules of the crate root.
const PUB_MODS: &[&str] = &[
    "artifact", "autodiff", "backend", "bench", "builder", "decomp", "dot", "frontend", "fuzzing", "gen", "interp",
    "ir", "kernel", "limits", "models", "numerics", "ops", "passes", "pipeline", "recover", "runtime", "sched",
    "session", "tensor", "text", "train",
];

/// The integration-test binaries, `tests/NAME/main.rs`: `all`, and `alloc` for the tests that
/// count memory with a global allocator of their own.
const TEST_BINARIES: &[&str] = &["all", "alloc"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `.rs` files under `dir`, as paths relative to the repository root, sorted.
fn rust_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&root().join(dir), &mut paths);
    let mut names: Vec<String> =
        paths.iter().map(|p| p.strip_prefix(root()).unwrap().to_string_lossy().replace('\\', "/")).collect();
    names.sort();
    names
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[track_caller]
fn fail_with(rule: &str, errors: &[String]) {
    assert!(errors.is_empty(), "{rule}:\n  {}", errors.join("\n  "));
}

#[test]
fn src_files_stay_within_their_line_limit() {
    let files = rust_files(Path::new("src"));
    let mut errors = Vec::new();
    for file in &files {
        let n_lines = read(file).lines().count();
        match LONG_FILES.iter().find(|(name, _)| name == file) {
            Some(&(_, ceiling)) if n_lines > ceiling => errors.push(format!(
                "{file} has {n_lines} lines, over its ceiling of {ceiling} in LONG_FILES (a listed file may \
                 shrink, never grow): split it into modules"
            )),
            Some(_) if n_lines <= MAX_LINES => errors.push(format!(
                "{file} has {n_lines} lines, within the limit of {MAX_LINES}: remove it from LONG_FILES"
            )),
            Some(_) => {}
            None if n_lines > MAX_LINES => errors.push(format!(
                "{file} has {n_lines} lines, over the limit of {MAX_LINES} lines per file: split it into modules"
            )),
            None => {}
        }
    }
    for (name, _) in LONG_FILES {
        if !files.iter().any(|f| f == name) {
            errors.push(format!("{name} is in LONG_FILES but no longer exists: remove it from the list"));
        }
    }
    fail_with("files under src/ longer than allowed (tests/all/tidy.rs)", &errors);
}

#[test]
fn the_crate_root_declares_only_its_public_modules() {
    let lib = read("src/lib.rs");
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("pub mod "))
        .map(|rest| rest.split(|c: char| c == ';' || c == '{' || c.is_whitespace()).next().unwrap_or(""))
        .collect();
    let mut errors = Vec::new();
    for name in &declared {
        if !PUB_MODS.contains(name) {
            errors.push(format!(
                "src/lib.rs declares `pub mod {name}`, not among the crate's {} public modules (PUB_MODS): put the \
                 code under one of them",
                PUB_MODS.len()
            ));
        }
    }
    for name in PUB_MODS {
        if !declared.contains(name) {
            errors.push(format!("src/lib.rs no longer declares `pub mod {name}`: remove it from PUB_MODS"));
        }
    }
    fail_with("public modules of the crate root (tests/all/tidy.rs)", &errors);
}

/// The names the crate root shows in its docs: its API. The other public modules are
/// `#[doc(hidden)]` (for the CLI, the tests and the fuzz targets).
const API: &[&str] = &[
    "BackendKind",
    "CompileError",
    "CompileOptions",
    "DType",
    "Dim",
    "Graph",
    "GraphBuilder",
    "ImportOptions",
    "Limits",
    "LoadError",
    "Model",
    "OpKind",
    "Outputs",
    "Plan",
    "RunError",
    "Session",
    "Shape",
    "Tensor",
    "TensorData",
    "TensorType",
    "TensorView",
    "Value",
    "artifact",
    "compile",
    "load",
    "pipeline",
    "runtime",
    "text",
];

#[test]
fn the_crate_root_shows_only_its_api() {
    let lib = read("src/lib.rs");
    let mut shown = Vec::new();
    let mut hidden = false;
    let mut lines = lib.lines().map(str::trim).peekable();
    while let Some(line) = lines.next() {
        if line == "#[doc(hidden)]" {
            hidden = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub mod ") {
            if !hidden {
                shown.push(rest.trim_end_matches(';').to_string());
            }
        } else if let Some(rest) = line.strip_prefix("pub fn ") {
            shown.push(rest.split('(').next().unwrap_or("").to_string());
        } else if let Some(rest) = line.strip_prefix("pub use ") {
            // `path::{A, B};` or `path::A;`, possibly over several lines.
            let mut text = rest.to_string();
            while !text.ends_with(';') {
                let Some(next) = lines.next() else { break };
                text.push_str(next);
            }
            let names = match (text.find('{'), text.rfind('}')) {
                (Some(a), Some(b)) => text[a + 1..b].to_string(),
                _ => text.rsplit("::").next().unwrap_or("").trim_end_matches(';').to_string(),
            };
            shown.extend(names.split(',').map(|n| n.trim().rsplit(" as ").next().unwrap_or("").to_string()));
        }
        if !line.starts_with("#[") {
            hidden = false;
        }
    }
    shown.retain(|n| !n.is_empty());
    shown.sort();
    let mut want: Vec<String> = API.iter().map(|s| s.to_string()).collect();
    want.sort();
    let errors: Vec<String> = shown
        .iter()
        .filter(|n| !want.contains(n))
        .map(|n| format!("src/lib.rs shows `{n}`, which is not in API: hide it (`#[doc(hidden)]`) or add it"))
        .chain(
            want.iter()
                .filter(|n| !shown.contains(n))
                .map(|n| format!("API lists `{n}`, which src/lib.rs no longer shows")),
        )
        .collect();
    assert!(API.len() <= 28, "the API has {} names: keep it about 25", API.len());
    fail_with("the crate root's API (tests/all/tidy.rs)", &errors);
}

#[test]
fn integration_tests_are_modules_of_the_allowed_binaries() {
    let allowed = TEST_BINARIES.iter().map(|b| format!("tests/{b}")).collect::<Vec<_>>().join(", ");
    let mut errors = Vec::new();
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(root().join("tests")).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_file() && name.ends_with(".rs") {
            errors.push(format!(
                "tests/{name} is a test binary of its own (the allowed binaries are {allowed}): make it a module \
                 of tests/all (tests/all/{name}, declared in tests/all/main.rs)"
            ));
        } else if path.join("main.rs").is_file() && !TEST_BINARIES.contains(&name.as_str()) {
            errors.push(format!(
                "tests/{name}/main.rs is a test binary of its own (the allowed binaries are {allowed}): make its \
                 files modules of tests/all"
            ));
        }
    }
    for binary in TEST_BINARIES {
        if !root().join("tests").join(binary).join("main.rs").is_file() {
            errors.push(format!("tests/{binary}/main.rs is gone: remove `{binary}` from TEST_BINARIES"));
        }
    }
    let manifest = read("Cargo.toml");
    if manifest.lines().any(|line| line.trim() == "[[test]]") {
        errors.push(format!(
            "Cargo.toml declares a [[test]] target (the allowed binaries are {allowed}): make it a module of \
             tests/all"
        ));
    }
    fail_with("integration-test binaries (tests/all/tidy.rs)", &errors);
}

#[test]
fn every_src_file_opens_with_a_module_doc() {
    let mut errors = Vec::new();
    for file in rust_files(Path::new("src")) {
        let text = read(&file);
        let first = text.lines().next().unwrap_or("");
        if !first.starts_with("//!") && !first.contains("@generated") {
            errors.push(format!(
                "{file} does not open with a `//!` module doc: its first line should say what the module is for"
            ));
        }
    }
    fail_with("module docs (tests/all/tidy.rs)", &errors);
}
