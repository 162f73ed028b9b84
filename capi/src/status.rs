//! Status codes, the thread's last error message, and the boundary every call goes through.
//!
//! C has no exceptions and no `Result`: each fallible function returns a [`LadderStatus`] and
//! leaves a message for [`crate::ladder_last_error`]. [`call`] is the one place that turns a
//! Rust `Result` into that pair, and it also catches panics, since unwinding into C is
//! undefined behaviour: a panic is a defect in ladder, reported as [`LADDER_ERR_INTERNAL`]
//! with its message, and the caller's process carries on.
//!
//! Codes are `#[repr(transparent)]` integers with one constant per C enumerator, named as
//! `include/ladder.h` names them, rather than Rust enums: a C caller can pass any integer
//! where an enum is declared, and a Rust enum holding an undeclared value is undefined
//! behaviour. The header test (`tests/header.rs`) holds the two lists together.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use engine::session::SessionError;
use engine::{LoadError, RunError};

/// What a call returned (`LadderStatus` in C).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LadderStatus(pub i32);

pub const LADDER_OK: LadderStatus = LadderStatus(0);
pub const LADDER_ERR_INVALID_ARGUMENT: LadderStatus = LadderStatus(1);
pub const LADDER_ERR_LOAD: LadderStatus = LadderStatus(2);
pub const LADDER_ERR_COMPILE: LadderStatus = LadderStatus(3);
pub const LADDER_ERR_RUN: LadderStatus = LadderStatus(4);
pub const LADDER_ERR_LIMIT: LadderStatus = LadderStatus(5);
pub const LADDER_ERR_BUFFER_TOO_SMALL: LadderStatus = LadderStatus(6);
pub const LADDER_ERR_INTERNAL: LadderStatus = LadderStatus(7);

/// A failure on its way to C: the code and the message.
#[derive(Debug)]
pub(crate) struct Error {
    pub status: LadderStatus,
    pub message: String,
}

impl Error {
    pub fn new(status: LadderStatus, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// A bad argument: a null pointer, a count or index out of range, a bad enum value.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(LADDER_ERR_INVALID_ARGUMENT, message)
    }

    /// Memory the allocator could not provide for `what`.
    pub fn out_of_memory(what: &str, bytes: usize) -> Error {
        Error::new(LADDER_ERR_LIMIT, format!("out of memory: {bytes} bytes for {what}"))
    }
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Error {
        let status = match &e {
            LoadError::Onnx { error, .. } if matches!(**error, engine::frontend::onnx::ImportError::Limit { .. }) => {
                LADDER_ERR_LIMIT
            }
            _ => LADDER_ERR_LOAD,
        };
        Error::new(status, e.to_string())
    }
}

impl From<SessionError> for Error {
    fn from(e: SessionError) -> Error {
        let status = match &e {
            SessionError::Import(error) if matches!(**error, engine::frontend::onnx::ImportError::Limit { .. }) => {
                LADDER_ERR_LIMIT
            }
            SessionError::Import(_) => LADDER_ERR_LOAD,
            SessionError::Compile(_) => LADDER_ERR_COMPILE,
            SessionError::Run(RunError::TooLarge { .. } | RunError::OutOfMemory { .. }) => LADDER_ERR_LIMIT,
            SessionError::Run(_) | SessionError::Inputs(_) | SessionError::Probe(_) => LADDER_ERR_RUN,
        };
        Error::new(status, e.to_string())
    }
}

thread_local! {
    /// This thread's last failure message, NUL-terminated for C.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error. An interior NUL (a model's name can hold
/// one) is written as `\0` so the whole message reaches C.
pub(crate) fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during the thread's own teardown there is nowhere left to keep it.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// The last error's text; valid until this thread records another.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|last| last.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// Runs one API call's body: `Ok` is [`LADDER_OK`]; an error, or a panic caught here, becomes
/// its code and this thread's last error.
pub(crate) fn call(body: impl FnOnce() -> Result<(), Error>) -> LadderStatus {
    // Unwind safety: a panicking body leaves nothing of the caller's half-written that the
    // caller is told is valid (out-parameters are set only on success), and the session's
    // shared state recovers from a poisoned lock (`Session::lock`).
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => LADDER_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(&format!("internal error (a defect in ladder, please report it): {what}"));
            LADDER_ERR_INTERNAL
        }
    }
}

/// [`call`] for the accessors that return a value rather than a status: `fallback` on an
/// error or a panic (whose message becomes the thread's last error).
pub(crate) fn call_value<T: Copy>(fallback: T, body: impl FnOnce() -> Result<T, Error>) -> T {
    let mut value = fallback;
    let status = call(|| {
        value = body()?;
        Ok(())
    });
    if status == LADDER_OK {
        value
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: the pointer is this thread's NUL-terminated message, alive until the next failure.
        unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_caught_and_reported_as_internal() {
        let status = call(|| panic!("an invariant broke at step {}", 3));
        assert_eq!(status, LADDER_ERR_INTERNAL);
        assert!(last_error().contains("an invariant broke at step 3"), "{}", last_error());
        assert_eq!(call_value(7usize, || panic!("static message")), 7);
        assert!(last_error().contains("static message"), "{}", last_error());
    }

    #[test]
    fn a_nul_in_a_message_is_kept_visible() {
        assert_eq!(call(|| Err(Error::invalid("name `a\0b`"))), LADDER_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error(), "name `a\\0b`");
    }
}
