//! Sessions across the boundary: open a model file, describe its inputs, run it.
//!
//! A `LadderSession` owns an [`engine::Session`] and the C forms of what the introspection
//! functions return (NUL-terminated names, dims as `int64_t` with -1 for a symbolic dim), made
//! once when the session opens so that each accessor returns a pointer into the handle.
//!
//! Runs borrow the caller's tensors as [`engine::TensorView`]s (no copy) and go through
//! [`engine::Session::run_views`], which takes `&self`: a session is `Send + Sync` (asserted
//! below), so C threads may run one session at once, each run with its own working memory.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;

use engine::{BackendKind, CompileOptions, ImportOptions, Limits, Model, Session, TensorView};

use crate::status::{call, call_value, Error, LadderStatus, LADDER_ERR_BUFFER_TOO_SMALL, LADDER_ERR_COMPILE};
use crate::tensor::{data_bytes, tensor_ref, LadderDType, LadderTensor};

/// How a session is built (`LadderOptions` in C); all zeros is the default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LadderOptions {
    /// Threads a run's work is split over; 0 for the machine's available threads.
    pub threads: usize,
    /// A `LadderBackend` value.
    pub backend: i32,
    /// Nonzero: [`Limits::untrusted`] for the import and every run.
    pub untrusted: i32,
}

/// `LadderBackend` in C: where a session's plans run.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LadderBackend(pub i32);

pub const LADDER_BACKEND_NATIVE: LadderBackend = LadderBackend(0);
pub const LADDER_BACKEND_REFERENCE: LadderBackend = LadderBackend(1);
pub const LADDER_BACKEND_INTERP: LadderBackend = LadderBackend(2);

/// Most threads a session may be asked to split over.
pub const MAX_THREADS: usize = 4096;

/// One declared input, as C reads it.
#[derive(Debug)]
struct InputInfo {
    name: CString,
    dtype: LadderDType,
    dims: Vec<i64>,
}

/// A loaded and compiled model (`LadderSession` in C, opaque there).
pub struct LadderSession {
    session: Session,
    inputs: Vec<InputInfo>,
    outputs: Vec<CString>,
}

// The C API lets several threads use one session at once; this holds only while the session
// and everything it owns stay `Send + Sync`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LadderSession>();
    send_sync::<LadderTensor>();
};

impl LadderSession {
    /// The session inside.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

/// A name as C reads it; a NUL inside is an error naming `what`.
fn c_name(name: &str, what: &str) -> Result<CString, Error> {
    CString::new(name).map_err(|_| {
        Error::new(crate::status::LADDER_ERR_LOAD, format!("{what} `{}` holds a NUL byte", name.escape_debug()))
    })
}

/// The compile options and import options `options` asks for.
fn resolve_options(options: &LadderOptions) -> Result<(CompileOptions, ImportOptions), Error> {
    if options.threads > MAX_THREADS {
        return Err(Error::invalid(format!("options.threads is {}, above the most, {MAX_THREADS}", options.threads)));
    }
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut compile = match LadderBackend(options.backend) {
        LADDER_BACKEND_NATIVE => CompileOptions::native_cpu(threads).map_err(|e| {
            Error::new(LADDER_ERR_COMPILE, format!("the native backend cannot run on this machine: {e}"))
        })?,
        LADDER_BACKEND_REFERENCE => CompileOptions::reference(),
        LADDER_BACKEND_INTERP => CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() },
        LadderBackend(other) => return Err(Error::invalid(format!("options.backend is {other}, not a LadderBackend"))),
    };
    let limits = if options.untrusted != 0 { Limits::untrusted() } else { Limits::default() };
    compile.limits = limits.clone();
    Ok((compile, ImportOptions { limits, ..ImportOptions::default() }))
}

/// The path in a C string.
fn path_of(path: &CStr) -> Result<PathBuf, Error> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())))
    }
    #[cfg(not(unix))]
    {
        path.to_str().map(PathBuf::from).map_err(|_| Error::invalid("ladder_session_open: `path` is not UTF-8"))
    }
}

/// Loads and compiles a model; see `ladder.h`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `options` is NULL or points to a
/// `LadderOptions`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_open(
    path: *const c_char,
    options: *const LadderOptions,
    out: *mut *mut LadderSession,
) -> LadderStatus {
    call(|| {
        if out.is_null() {
            return Err(Error::invalid("ladder_session_open: `out` is NULL"));
        }
        // SAFETY: `out` is not null and writable (the caller's contract).
        unsafe { *out = std::ptr::null_mut() };
        if path.is_null() {
            return Err(Error::invalid("ladder_session_open: `path` is NULL"));
        }
        // SAFETY: `path` is not null and NUL-terminated (the caller's contract).
        let path = path_of(unsafe { CStr::from_ptr(path) })?;
        // SAFETY: `options` is NULL or points to a LadderOptions (the caller's contract);
        // every bit pattern of its integer fields is a value.
        let options = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let (compile, import) = resolve_options(&options)?;
        let model = Model::load_with(&path, &import)?;
        let session = Session::new(model, compile)?;
        let inputs = session
            .inputs()
            .iter()
            .map(|(name, ty)| {
                let dims = ty
                    .shape
                    .dims()
                    .iter()
                    .map(|d| d.as_const().and_then(|n| i64::try_from(n).ok()).unwrap_or(-1))
                    .collect();
                Ok(InputInfo { name: c_name(name, "input name")?, dtype: LadderDType::from_dtype(ty.dtype), dims })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let outputs = session
            .model()
            .output_names()
            .iter()
            .map(|n| c_name(n, "output name"))
            .collect::<Result<Vec<_>, Error>>()?;
        let handle = Box::new(LadderSession { session, inputs, outputs });
        // SAFETY: as above, `out` is writable.
        unsafe { *out = Box::into_raw(handle) };
        Ok(())
    })
}

/// Frees a session; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a handle from this library not freed before, not in use elsewhere.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_free(session: *mut LadderSession) {
    call(|| {
        if !session.is_null() {
            // SAFETY: a live handle made by `Box::into_raw` here, given back once (the contract).
            drop(unsafe { Box::from_raw(session) });
        }
        Ok(())
    });
}

/// Borrows a session handle, or names the NULL.
///
/// # Safety
/// `session` is NULL or a live handle, not freed while the borrow lasts.
unsafe fn session_ref<'a>(session: *const LadderSession, what: &str) -> Result<&'a LadderSession, Error> {
    // SAFETY: not null here, and live by the caller's contract.
    unsafe { session.as_ref() }.ok_or_else(|| Error::invalid(format!("{what}: the session is NULL")))
}

/// The number of declared inputs; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_input_count(session: *const LadderSession) -> usize {
    // SAFETY: the caller's contract, passed on.
    call_value(0, || Ok(unsafe { session_ref(session, "ladder_session_input_count") }?.inputs.len()))
}

/// The number of outputs; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_output_count(session: *const LadderSession) -> usize {
    // SAFETY: the caller's contract, passed on.
    call_value(0, || Ok(unsafe { session_ref(session, "ladder_session_output_count") }?.outputs.len()))
}

/// An error for an index past `count` things named `what`.
fn out_of_range(function: &str, index: usize, count: usize, what: &str) -> Error {
    Error::invalid(format!("{function}: index {index} is out of range (the model has {count} {what})"))
}

/// The name of an input; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_input_name(session: *const LadderSession, index: usize) -> *const c_char {
    call_value(std::ptr::null(), || {
        const F: &str = "ladder_session_input_name";
        // SAFETY: the caller's contract, passed on.
        let s = unsafe { session_ref(session, F) }?;
        let info = s.inputs.get(index).ok_or_else(|| out_of_range(F, index, s.inputs.len(), "inputs"))?;
        Ok(info.name.as_ptr())
    })
}

/// The name of an output; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_output_name(session: *const LadderSession, index: usize) -> *const c_char {
    call_value(std::ptr::null(), || {
        const F: &str = "ladder_session_output_name";
        // SAFETY: the caller's contract, passed on.
        let s = unsafe { session_ref(session, F) }?;
        let name = s.outputs.get(index).ok_or_else(|| out_of_range(F, index, s.outputs.len(), "outputs"))?;
        Ok(name.as_ptr())
    })
}

/// The declared type of an input; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or a live handle; each of `dtype`, `rank`, `dims` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_input_type(
    session: *const LadderSession,
    index: usize,
    dtype: *mut LadderDType,
    rank: *mut usize,
    dims: *mut *const i64,
) -> LadderStatus {
    call(|| {
        const F: &str = "ladder_session_input_type";
        // SAFETY: the caller's contract, passed on.
        let s = unsafe { session_ref(session, F) }?;
        let info = s.inputs.get(index).ok_or_else(|| out_of_range(F, index, s.inputs.len(), "inputs"))?;
        // SAFETY: each pointer is NULL (skipped) or writable (the caller's contract).
        unsafe {
            if !dtype.is_null() {
                *dtype = info.dtype;
            }
            if !rank.is_null() {
                *rank = info.dims.len();
            }
            if !dims.is_null() {
                *dims = info.dims.as_ptr();
            }
        }
        Ok(())
    })
}

/// Checks a run's arguments and runs the session on the caller's tensors.
///
/// # Safety
/// `session` is NULL or live; `inputs` is NULL or points to `n_inputs` handles, each NULL or
/// live, none freed during the call.
unsafe fn run_checked(
    function: &str,
    session: *const LadderSession,
    inputs: *const *const LadderTensor,
    n_inputs: usize,
    n_outputs: usize,
) -> Result<Vec<engine::Tensor>, Error> {
    // SAFETY: the caller's contract, passed on.
    let s = unsafe { session_ref(session, function) }?;
    if n_inputs != s.inputs.len() {
        return Err(Error::invalid(format!(
            "{function}: n_inputs is {n_inputs} but the model has {} inputs",
            s.inputs.len()
        )));
    }
    if n_outputs != s.outputs.len() {
        return Err(Error::invalid(format!(
            "{function}: n_outputs is {n_outputs} but the model has {} outputs",
            s.outputs.len()
        )));
    }
    if inputs.is_null() && n_inputs != 0 {
        return Err(Error::invalid(format!("{function}: `inputs` is NULL")));
    }
    let handles: &[*const LadderTensor] = if n_inputs == 0 {
        &[]
    } else {
        // SAFETY: not null, and `n_inputs` handles long (the caller's contract).
        unsafe { std::slice::from_raw_parts(inputs, n_inputs) }
    };
    let mut views: Vec<TensorView> = Vec::with_capacity(n_inputs);
    for (k, &handle) in handles.iter().enumerate() {
        let what = format!("{function}: input {k} (`{}`)", s.inputs[k].name.to_string_lossy());
        // SAFETY: each handle is NULL or live for the call (the caller's contract).
        views.push(TensorView::from(&unsafe { tensor_ref(handle, &what) }?.tensor));
    }
    let outputs = s.session.run_views(&views)?.outputs;
    if outputs.len() != n_outputs {
        return Err(Error::new(
            crate::status::LADDER_ERR_INTERNAL,
            format!("{function}: the run returned {} outputs but the model declares {n_outputs}", outputs.len()),
        ));
    }
    Ok(outputs)
}

/// Runs the model into new tensors; see `ladder.h`.
///
/// # Safety
/// `session` is NULL or live; `inputs` is NULL or points to `n_inputs` handles, each NULL or
/// live; `outputs` is NULL or points to `n_outputs` writable handle slots.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_run(
    session: *const LadderSession,
    inputs: *const *const LadderTensor,
    n_inputs: usize,
    outputs: *mut *mut LadderTensor,
    n_outputs: usize,
) -> LadderStatus {
    call(|| {
        const F: &str = "ladder_session_run";
        if outputs.is_null() && n_outputs != 0 {
            return Err(Error::invalid(format!("{F}: `outputs` is NULL")));
        }
        let slots: &mut [*mut LadderTensor] = if n_outputs == 0 {
            &mut []
        } else {
            // SAFETY: not null, and `n_outputs` writable slots (the caller's contract).
            unsafe { std::slice::from_raw_parts_mut(outputs, n_outputs) }
        };
        slots.fill(std::ptr::null_mut());
        // SAFETY: the caller's contract, passed on.
        let tensors = unsafe { run_checked(F, session, inputs, n_inputs, n_outputs) }?;
        let handles = tensors.into_iter().map(LadderTensor::new).collect::<Result<Vec<_>, Error>>()?;
        for (slot, handle) in slots.iter_mut().zip(handles) {
            *slot = Box::into_raw(Box::new(handle));
        }
        Ok(())
    })
}

/// Runs the model into the caller's buffers; see `ladder.h`.
///
/// # Safety
/// As [`ladder_session_run`] for `session` and `inputs`; `out_data` and `out_bytes` are NULL
/// or point to `n_outputs` entries, each `out_data[k]` NULL or `out_bytes[k]` writable bytes
/// not read or written elsewhere during the call; `out_written` is NULL or `n_outputs`
/// writable sizes.
#[no_mangle]
pub unsafe extern "C" fn ladder_session_run_into(
    session: *const LadderSession,
    inputs: *const *const LadderTensor,
    n_inputs: usize,
    out_data: *const *mut c_void,
    out_bytes: *const usize,
    out_written: *mut usize,
    n_outputs: usize,
) -> LadderStatus {
    call(|| {
        const F: &str = "ladder_session_run_into";
        if n_outputs != 0 && (out_data.is_null() || out_bytes.is_null()) {
            let which = if out_data.is_null() { "out_data" } else { "out_bytes" };
            return Err(Error::invalid(format!("{F}: `{which}` is NULL")));
        }
        let (buffers, capacities): (&[*mut c_void], &[usize]) = if n_outputs == 0 {
            (&[], &[])
        } else {
            // SAFETY: not null, and `n_outputs` entries each (the caller's contract).
            unsafe {
                (std::slice::from_raw_parts(out_data, n_outputs), std::slice::from_raw_parts(out_bytes, n_outputs))
            }
        };
        for (k, (buffer, &capacity)) in buffers.iter().zip(capacities).enumerate() {
            if buffer.is_null() && capacity != 0 {
                return Err(Error::invalid(format!("{F}: out_data[{k}] is NULL but out_bytes[{k}] is {capacity}")));
            }
        }
        // SAFETY: the caller's contract, passed on.
        let tensors = unsafe { run_checked(F, session, inputs, n_inputs, n_outputs) }?;
        let sizes: Vec<usize> = tensors.iter().map(|t| data_bytes(t.data()).1).collect();
        if !out_written.is_null() {
            // SAFETY: not null, and `n_outputs` writable sizes (the caller's contract).
            unsafe { std::slice::from_raw_parts_mut(out_written, n_outputs) }.copy_from_slice(&sizes);
        }
        if let Some(k) = (0..n_outputs).find(|&k| sizes[k] > capacities[k]) {
            // SAFETY: `session` was checked live by `run_checked`.
            let name = unsafe { session_ref(session, F) }?.outputs[k].to_string_lossy().into_owned();
            let t = &tensors[k];
            return Err(Error::new(
                LADDER_ERR_BUFFER_TOO_SMALL,
                format!(
                    "{F}: output {k} (`{name}`, {}{:?}) needs {} bytes but out_bytes[{k}] is {}",
                    t.dtype(),
                    t.shape(),
                    sizes[k],
                    capacities[k]
                ),
            ));
        }
        for ((t, &buffer), &size) in tensors.iter().zip(buffers).zip(&sizes) {
            if size != 0 {
                let (src, _) = data_bytes(t.data());
                // SAFETY: `buffer` is not null (checked: its capacity is at least `size` > 0)
                // and holds `size` writable bytes that nothing else touches during the call;
                // `src` is the output's own `size` bytes, a fresh allocation, so they do not
                // overlap.
                unsafe { std::ptr::copy_nonoverlapping(src, buffer.cast::<u8>(), size) };
            }
        }
        Ok(())
    })
}
