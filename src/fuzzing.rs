//! Property checks shared by the fuzz targets (`fuzz/`) and the tests that replay their
//! corpora (`tests/all/fuzz_seeds.rs`).
//!
//! Each check takes arbitrary bytes and **panics when an invariant is broken**: that is how a
//! fuzzer reports a finding. Bad input itself is never a finding: a parse error or a typed
//! run error is the correct answer to it.
//!
//! [`check_native`] (in `differential`) is the `interp_cpu` target's check: the CPU backend
//! against the interpreter, one compiled plan per case structure and many data sets per plan;
//! [`check_vulkan`] is the `interp_vulkan` target's, the same on the Vulkan device.
//! [`check_dims`] (in `dims`) is the `shape_algebra` target's: size expressions built from a
//! byte program against integer arithmetic.

mod differential;
mod dims;

pub use differential::{
    check_native, check_native_with, check_vulkan, CacheStats, Compiled, DiffOutcome, PlanCache, Target,
    DATA_SET_BYTES, GLOBAL_CACHE_ENTRIES, MAX_DATA_SETS, STRUCTURE_BYTES,
};
pub use dims::{check_dims, decode_dims, encode_dims, DimOp, DimProgram, DimStats, MAX_DIMS_INPUT};

use crate::interp::{self, Options};
use crate::ir::verify::{verify, Stage};
use crate::tensor::{checked_numel, Tensor};
use crate::text::{parse, print};
use crate::Graph;

/// Value every size symbol is bound to when [`check_text`] runs a graph.
pub const SYMBOL_VALUE: u64 = 2;
/// Largest input (in elements) [`check_text`] builds; graphs with larger inputs are not run.
pub const MAX_INPUT_ELEMENTS: usize = 10_000;

/// The interpreter limits used for fuzzed graphs: small, so every case runs in milliseconds.
pub fn tight_options(precise: bool) -> Options {
    Options { precise, fuel: 100_000, max_elements: 10_000, max_bytes: 1 << 20 }
}

/// Text-form invariants on arbitrary bytes (read as UTF-8, invalid sequences replaced):
/// 1. whatever parses also verifies;
/// 2. printing and re-parsing gives an equal graph (`parse(&print(&g)) == g`);
/// 3. the interpreter, with tight fuel and size limits, on zero-filled inputs (every size
///    symbol bound to [`SYMBOL_VALUE`]), returns a result or a typed error, in both the op-dtype
///    and precise modes. It never panics.
pub fn check_text(data: &[u8]) {
    let src = String::from_utf8_lossy(data);
    let Ok(g) = parse(&src) else { return };
    if let Err(e) = verify(&g, Stage::HighLevel) {
        panic!("a parsed graph does not verify: {e}\n--- text ---\n{src}");
    }
    let printed = print(&g);
    match parse(&printed) {
        Ok(back) => assert!(back == g, "print/parse round trip changed the graph\n--- printed ---\n{printed}"),
        Err(e) => panic!("printed text does not parse: {e}\n--- printed ---\n{printed}"),
    }
    if let Some(inputs) = zero_inputs(&g) {
        for precise in [false, true] {
            // Errors are fine; only a panic (or a hang, which the fuel prevents) is a finding.
            let _ = interp::run(&g, &inputs, &tight_options(precise));
        }
    }
}

/// Zero-filled inputs for `g` with every symbol bound to [`SYMBOL_VALUE`], or `None` when a
/// dim does not evaluate (e.g. `n - 5`) or the inputs would be too large.
pub fn zero_inputs(g: &Graph) -> Option<Vec<Tensor>> {
    let lookup = |_: &str| Some(SYMBOL_VALUE);
    let mut total = 0usize;
    let mut out = Vec::with_capacity(g.inputs().len());
    for &v in g.inputs() {
        let ty = g.ty(v);
        let dims: Option<Vec<usize>> =
            ty.shape.dims().iter().map(|d| d.eval(&lookup).ok().and_then(|n| usize::try_from(n).ok())).collect();
        let dims = dims?;
        total = total.checked_add(checked_numel(&dims)?)?;
        if total > MAX_INPUT_ELEMENTS {
            return None;
        }
        out.push(Tensor::zeros(ty.dtype, &dims).ok()?);
    }
    Some(out)
}

/// Import limits for fuzzed ONNX bytes: small, so no input can make a case slow.
pub fn tight_import_options() -> crate::frontend::onnx::ImportOptions {
    let limits = crate::Limits {
        max_tensor_bytes: 1 << 20,
        max_file_bytes: 1 << 24,
        max_nodes: 1 << 12,
        max_depth: 4,
        max_fold_elements: 1 << 12,
        ..crate::Limits::untrusted()
    };
    crate::frontend::onnx::ImportOptions { limits, allow_external_data: false, ..Default::default() }
}

/// ONNX importer invariants on arbitrary bytes:
/// 1. importing returns a graph or a typed `ImportError`; it never panics (the wire check and
///    the limits bound every allocation by the input's size);
/// 2. an imported graph verifies and round-trips through the text form;
/// 3. it runs on the interpreter (tight limits, zero inputs) to a result or a typed error.
pub fn check_onnx(data: &[u8]) {
    let Ok(g) = crate::frontend::onnx::import(data, &tight_import_options()) else { return };
    if let Err(e) = verify(&g, Stage::HighLevel) {
        panic!("an imported graph does not verify: {e}");
    }
    let printed = print(&g);
    match parse(&printed) {
        Ok(back) => assert!(back == g, "print/parse round trip changed an imported graph\n--- printed ---\n{printed}"),
        Err(e) => panic!("the text of an imported graph does not parse: {e}\n--- printed ---\n{printed}"),
    }
    if let Some(inputs) = zero_inputs(&g) {
        let _ = interp::run(&g, &inputs, &tight_options(false));
    }
}

/// Limits for fuzzed artifact bytes: small, so no input can make a case slow.
pub fn tight_artifact_limits() -> crate::Limits {
    crate::Limits {
        max_tensor_bytes: 1 << 20,
        max_file_bytes: 1 << 22,
        max_nodes: 1 << 12,
        ..crate::Limits::untrusted()
    }
}

/// Artifact reader invariants on arbitrary bytes (`ladder::artifact`):
/// 1. reading returns an artifact or a typed `ArtifactError`; it never panics, and no count in
///    the bytes sizes an allocation (the reader checks each against the bytes first);
/// 2. an artifact that reads writes back to bytes that read again to the same bytes;
/// 3. its stored graph compiles (verified at its rung) and runs on the interpreter (tight
///    limits, zero inputs) to a result or a typed error.
///
/// The bytes are read twice: as given (the checksum usually rejects them) and with their
/// checksum recomputed, so that the fuzzer reaches the structure behind it.
pub fn check_artifact(data: &[u8]) {
    use crate::artifact::Artifact;
    let limits = tight_artifact_limits();
    let _ = Artifact::from_bytes(data, &limits);
    let mut sealed = data.to_vec();
    if sealed.len() >= 16 {
        let crc = crc32fast::hash(&sealed[16..]);
        sealed[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(a) = Artifact::from_bytes(&sealed, &limits) else { return };
    let bytes = a.to_bytes();
    match Artifact::from_bytes(&bytes, &limits) {
        Ok(back) => assert!(back.to_bytes() == bytes, "an artifact written again reads back different"),
        Err(e) => panic!("an artifact that read does not read again once written: {e}"),
    }
    let options = crate::CompileOptions {
        backend: crate::BackendKind::Interp,
        limits: limits.clone(),
        ..crate::CompileOptions::reference()
    };
    if a.compile(&options).is_err() {
        return;
    }
    if let Some(inputs) = zero_inputs(&a.graph) {
        let _ = interp::run(&a.graph, &inputs, &tight_options(false));
    }
}
