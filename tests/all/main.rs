//! The integration tests, in one binary (each test binary links the whole crate): a module per
//! area, so `ops_nn::clamp_floats` is in `ops_nn.rs`. Run an area with a name filter,
//! `cargo test --test all -- ops_nn::`; libtest runs the tests that match any of its filters,
//! less those that match a `--skip`. Data stays under `tests/` (`tests/filetests`,
//! `tests/corpus`, ...), found through `CARGO_MANIFEST_DIR`.
//!
//! The tests that count heap memory are in `tests/alloc`: their counting allocator serves the
//! whole process.

// Helpers shared by the modules below.
#[cfg(feature = "vulkan")]
#[path = "../shared/attention_cases.rs"]
mod attention_cases;
mod common;
mod decomp_exact;
mod decomp_util;
mod onnx_build;

// Repository rules: file sizes, the crate's public modules, the test binaries, module docs.
mod tidy;

mod artifact;
mod autodiff;
mod bench;
mod builder;
mod canonical_kernels;
mod cli;
mod cli_kernels;
mod conv_pool;
mod conv_winograd;
mod cpu_codegen;
mod cpu_gemm;
mod cpu_numerics;
mod custom;
mod decomp_index;
mod decomp_linalg;
mod decomp_nn;
mod decomp_norm;
mod decomp_reduce;
mod decomp_shape;
mod decompose_prims;
mod decompose_random;
mod dim_algebra;
mod dot;
mod dtypes_int;
mod embedding;
mod filetests;
mod functionalize;
mod fuzz_dims;
mod fuzz_native;
mod fuzz_seeds;
mod fuzz_vulkan;
mod gemm_epilogue;
mod hostile_inputs;
mod interp_limits;
mod interp_random;
mod kernels_exact;
mod models;
mod native_copy;
mod numerics;
mod online_softmax;
mod onnx_attention;
mod onnx_fuzz_seeds;
mod onnx_hostile;
mod onnx_import;
mod onnx_index;
mod onnx_quant;
mod onnx_recur;
mod onnx_shapes;
mod onnx_spatial;
mod ops_elementwise;
mod ops_index;
mod ops_inplace;
mod ops_linalg;
mod ops_nn;
mod ops_norm;
mod ops_reduce;
mod ops_shape;
mod partition;
mod pool_kernel;
mod real_models;
mod recover;
mod recover_attention;
mod recover_norms;
mod recur_lstm;
mod runtime;
mod runtime_native;
mod sched;
mod simplify;
mod text_errors;
mod text_roundtrip;
mod tiered;
mod train;
mod vulkan;
mod vulkan_attention;
mod vulkan_dtypes;
mod vulkan_f64;
mod vulkan_gemm;
mod vulkan_library;
mod vulkan_rows;
