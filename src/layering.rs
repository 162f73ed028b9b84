//! The crate's layering rule, checked: every top-level module belongs to one layer of
//! [`LAYERS`], and its code (tests included) names only modules of its own layer or of layers
//! below it (`crate::x` paths). The modules of one layer may use each other; the core layer is
//! one because the op table holds each op's reference meaning (`ops` and `interp` need each
//! other) and the IR prints and parses through `text`.

/// Bottom to top. A new top-level module must be placed here (the test fails otherwise).
pub const LAYERS: &[&[&str]] = &[
    // The IR, the op contract with each op's reference meaning, tensors, the text form.
    &["ir", "limits", "ops", "interp", "tensor", "text"],
    // What is built on the IR alone: the kernel IR, decompositions, graph construction.
    &["kernel", "decomp", "builder", "gen", "models"],
    // The graph passes (functionalize, decompose, simplify), and reverse-mode autodiff, which
    // emits through decomposition's emitter and cleans up with dead-code elimination.
    &["passes", "autodiff"],
    // Recovery, scheduling into kernel programs, the backends' code generators and kernels.
    &["recover", "sched", "backend"],
    // The one compile path, and drawings of its rungs.
    &["pipeline", "dot"],
    // Plans and running them, and compiled artifacts (a lowered graph a plan compiles from).
    &["runtime", "artifact"],
    // Importers, sessions and training over plans.
    &["frontend", "session", "train"],
    // Test and benchmark support.
    &["numerics", "fuzzing", "bench"],
];

#[cfg(test)]
mod tests {
    use super::LAYERS;
    use std::path::{Path, PathBuf};

    fn layer_of(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The top-level modules `crate::NAME` paths in `text` name (comments skipped).
    fn named_modules(text: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(at) = rest.find("crate::") {
                let tail = &rest[at + "crate::".len()..];
                let name: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.push((n + 1, name));
                }
                rest = tail;
            }
        }
        out
    }

    #[test]
    fn no_module_names_one_above_its_layer() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut violations = Vec::new();
        let mut unplaced = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            // The binary's modules (`cli`, `main.rs`) sit above the library; `lib.rs` and this
            // file are the crate's frame.
            if matches!(stem.as_str(), "cli" | "main" | "lib" | "layering") {
                continue;
            }
            let Some(own) = layer_of(&stem) else {
                unplaced.push(stem);
                continue;
            };
            let mut files = Vec::new();
            if path.is_dir() {
                rust_files(&path, &mut files);
            } else {
                files.push(path.clone());
            }
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for (line, name) in named_modules(&text) {
                    match layer_of(&name) {
                        Some(l) if l > own => violations.push(format!(
                            "{}:{line}: `{stem}` (layer {own}) names `crate::{name}` (layer {l})",
                            file.strip_prefix(&src).unwrap_or(&file).display()
                        )),
                        _ => {}
                    }
                }
            }
        }
        assert!(unplaced.is_empty(), "top-level modules missing from LAYERS: {unplaced:?}");
        assert!(violations.is_empty(), "imports from a layer above:\n{}", violations.join("\n"));
    }

    /// The device-neutral modules reach a device only through `crate::backend`'s interface:
    /// the kernel IR, the scheduler and the pipeline name no backend (nor Cranelift or
    /// rayon), and the runtime names the CPU backend on one line, the `use` through which its options select and configure
    /// it.
    #[test]
    fn only_the_runtime_options_name_a_backend() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let allowed = "use crate::backend::cpu::{exec::CpuBackend, jit::CraneliftCompiler, jit::KernelCompiler, CodegenError, CpuOptions};";
        let mut found = Vec::new();
        for dir in ["kernel", "sched", "pipeline", "runtime"] {
            let mut files = Vec::new();
            rust_files(&src.join(dir), &mut files);
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("").trim();
                    // (`cranelift_entity` is a plain container crate the IRs use.)
                    let cranelift = code.replace("cranelift_entity", "").contains("cranelift");
                    let names_device = code.contains("backend::cpu") || code.contains("rayon") || cranelift;
                    if names_device && !(dir == "runtime" && code == allowed) {
                        found.push(format!("{}:{}: {code}", file.strip_prefix(&src).unwrap_or(&file).display(), n + 1));
                    }
                }
            }
        }
        assert!(found.is_empty(), "device code outside the backends:\n{}", found.join("\n"));
    }

    #[test]
    fn the_scanner_sees_paths_and_skips_comments() {
        let found = named_modules("use crate::ir::Graph; // crate::runtime\nlet x = crate::ops::library::kept;");
        assert_eq!(found, vec![(1, "ir".to_string()), (2, "ops".to_string())]);
        assert_eq!(layer_of("pipeline"), Some(4));
        assert_eq!(layer_of("nowhere"), None);
    }
}
