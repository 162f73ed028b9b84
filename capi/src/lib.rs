//! ladder's C API: load a model, describe it, run it on tensors, from C or anything that calls C.
//!
//! The contract is the hand-written header `include/ladder.h`: what each function does, who
//! owns what, which calls are thread-safe, how errors are reported. This crate implements it
//! over [`engine::Session`] (ladder's library, built without its command line). The header
//! is written by hand so that it reads as documentation; `tests/header.rs` parses it and
//! this crate's sources and fails when a prototype, a struct field or an enum value drifts
//! apart from the Rust side.
//!
//! Every function is `extern "C"` and `#[no_mangle]`, and every body runs inside
//! [`status::call`], which turns errors into a [`LadderStatus`] plus a per-thread message
//! and catches panics, so that nothing unwinds into C. Pointers from C are checked for NULL
//! and sizes from C are checked before use; what a pointer must point to is each function's
//! `# Safety` section, the same contract the header states in C terms.
//!
//! The build gives `libladder.so` (and `libladder.a`) for C, and an rlib for the tests here.
//! `capi/examples/run_model.c` is the example, `capi/run_example.sh` builds and checks it.
//!
//! Files: `status.rs` (codes, last error, the boundary), `tensor.rs` (`LadderTensor`),
//! `session.rs` (`LadderSession`, options, runs), `custom.rs` (custom kernels from C
//! callbacks: `ladder_register_op`).

use std::ffi::c_char;

mod custom;
mod session;
mod status;
mod tensor;

pub use custom::{ladder_register_op, LadderComputeFn, LadderShapeFn, MAX_RANK};
pub use session::{
    ladder_session_free, ladder_session_input_count, ladder_session_input_name, ladder_session_input_type,
    ladder_session_open, ladder_session_output_count, ladder_session_output_name, ladder_session_run,
    ladder_session_run_into, LadderBackend, LadderOptions, LadderSession, LADDER_BACKEND_INTERP, LADDER_BACKEND_NATIVE,
    LADDER_BACKEND_REFERENCE, MAX_THREADS,
};
pub use status::{
    LadderStatus, LADDER_ERR_BUFFER_TOO_SMALL, LADDER_ERR_COMPILE, LADDER_ERR_INTERNAL, LADDER_ERR_INVALID_ARGUMENT,
    LADDER_ERR_LIMIT, LADDER_ERR_LOAD, LADDER_ERR_RUN, LADDER_OK,
};
pub use tensor::{
    ladder_tensor_byte_size, ladder_tensor_data, ladder_tensor_dtype, ladder_tensor_free, ladder_tensor_new,
    ladder_tensor_rank, ladder_tensor_shape, LadderDType, LadderTensor, LADDER_DTYPE_BF16, LADDER_DTYPE_BOOL,
    LADDER_DTYPE_F16, LADDER_DTYPE_F32, LADDER_DTYPE_F64, LADDER_DTYPE_I16, LADDER_DTYPE_I32, LADDER_DTYPE_I64,
    LADDER_DTYPE_I8, LADDER_DTYPE_INVALID, LADDER_DTYPE_U16, LADDER_DTYPE_U32, LADDER_DTYPE_U64, LADDER_DTYPE_U8,
};

/// The message of this thread's last failure; see `ladder.h`.
#[no_mangle]
pub extern "C" fn ladder_last_error() -> *const c_char {
    status::last_error_ptr()
}

/// The library's version: this crate's, which follows ladder's.
#[no_mangle]
pub extern "C" fn ladder_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast::<c_char>()
}
