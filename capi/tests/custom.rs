//! `ladder_register_op`: a custom kernel registered through the C API, as C would (the
//! callbacks are `extern "C"` functions written in Rust), used by a model in the text form
//! on every backend; and the registration's and the callbacks' errors.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use ladder::*;

fn last_error() -> String {
    // SAFETY: ladder_last_error never returns NULL and its string lives until the next call.
    unsafe { CStr::from_ptr(ladder_last_error()) }.to_string_lossy().into_owned()
}

/// The result type is the first operand's (one f32 operand), the attributes must be "".
unsafe extern "C" fn like_first(
    _user_data: *mut c_void,
    attrs: *const c_char,
    n_inputs: usize,
    input_dtypes: *const LadderDType,
    input_ranks: *const usize,
    input_dims: *const *const i64,
    out_dtype: *mut LadderDType,
    out_rank: *mut usize,
    out_dims: *mut i64,
) -> LadderStatus {
    // SAFETY: the library passes `n_inputs` entries per array, a NUL-terminated `attrs`, and
    // out-parameters with room for MAX_RANK dims.
    unsafe {
        if n_inputs != 1 || *input_dtypes != LADDER_DTYPE_F32 || !CStr::from_ptr(attrs).is_empty() {
            return LADDER_ERR_INVALID_ARGUMENT;
        }
        let rank = *input_ranks;
        *out_dtype = *input_dtypes;
        *out_rank = rank;
        for axis in 0..rank {
            *out_dims.add(axis) = *(*input_dims).add(axis);
        }
    }
    LADDER_OK
}

/// `min(max(x, 0), 6)`, counting its calls in the `AtomicUsize` at `user_data`.
unsafe extern "C" fn relu6(
    user_data: *mut c_void,
    _attrs: *const c_char,
    inputs: *const *const LadderTensor,
    n_inputs: usize,
    output: *mut *mut LadderTensor,
) -> LadderStatus {
    // SAFETY: `user_data` is the test's static counter; `inputs` holds `n_inputs` live
    // handles; `output` is writable.
    unsafe {
        (*(user_data as *const AtomicUsize)).fetch_add(1, Ordering::SeqCst);
        if n_inputs != 1 {
            return LADDER_ERR_INVALID_ARGUMENT;
        }
        let x = *inputs;
        let n = ladder_tensor_byte_size(x) / 4;
        let data = std::slice::from_raw_parts(ladder_tensor_data(x) as *const f32, n);
        let y: Vec<f32> = data.iter().map(|v| v.clamp(0.0, 6.0)).collect();
        ladder_tensor_new(
            ladder_tensor_dtype(x),
            ladder_tensor_shape(x),
            ladder_tensor_rank(x),
            y.as_ptr() as *const c_void,
            n * 4,
            output,
        )
    }
}

/// Fails without an output.
unsafe extern "C" fn fails(
    _: *mut c_void,
    _: *const c_char,
    _: *const *const LadderTensor,
    _: usize,
    _: *mut *mut LadderTensor,
) -> LadderStatus {
    LADDER_ERR_RUN
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn register(name: &str, compute: LadderComputeFn) -> LadderStatus {
    let name = CString::new(name).unwrap();
    let user = &CALLS as *const AtomicUsize as *mut c_void;
    // SAFETY: a NUL-terminated name; the callbacks and the static counter live forever.
    unsafe { ladder_register_op(null(), name.as_ptr(), Some(like_first), compute, user) }
}

/// A model `y = exp(custom(x * 2))` using `name`, written to a file; its path.
fn model_file(name: &str) -> String {
    let text = format!(
        "graph g(%x: f32[batch, 3]) {{\n  %t = full() {{shape=[], value=2.0}}\n  %a = mul(%x, %t)\n  \
         %c = custom(%a) {{name=\"{name}\"}}\n  %y = exp(%c)\n  return %y\n}}\n"
    );
    let path = std::env::temp_dir().join(format!("ladder-capi-{name}-{}.lad", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Opens `path` on `backend` and runs it on `x` (`[2, 3]`): the status and the output's values.
fn run(path: &str, backend: LadderBackend, x: &[f32]) -> (LadderStatus, Vec<f32>) {
    let c = CString::new(path).unwrap();
    let options = LadderOptions { threads: 1, backend: backend.0, untrusted: 0 };
    let mut session = null_mut();
    // SAFETY: live pointers throughout; every handle made here is freed here.
    unsafe {
        let status = ladder_session_open(c.as_ptr(), &options, &mut session);
        if status != LADDER_OK {
            return (status, Vec::new());
        }
        let mut input = null_mut();
        let shape = [2i64, 3];
        assert_eq!(
            ladder_tensor_new(LADDER_DTYPE_F32, shape.as_ptr(), 2, x.as_ptr().cast(), 24, &mut input),
            LADDER_OK
        );
        let mut out = [null_mut()];
        let inputs = [input as *const LadderTensor];
        let status = ladder_session_run(session, inputs.as_ptr(), 1, out.as_mut_ptr(), 1);
        let values = if status == LADDER_OK {
            std::slice::from_raw_parts(ladder_tensor_data(out[0]) as *const f32, 6).to_vec()
        } else {
            Vec::new()
        };
        ladder_tensor_free(out[0]);
        ladder_tensor_free(input);
        ladder_session_free(session);
        (status, values)
    }
}

#[test]
fn a_registered_c_function_runs_in_a_model_on_every_backend() {
    assert_eq!(register("capi_relu6", Some(relu6)), LADDER_OK, "{}", last_error());
    let path = model_file("capi_relu6");
    let x = [-1.0f32, 0.5, 2.0, 3.5, -0.0, 100.0];
    let want: Vec<f32> = x.iter().map(|v| (v * 2.0).clamp(0.0, 6.0).exp()).collect();
    for backend in [LADDER_BACKEND_NATIVE, LADDER_BACKEND_REFERENCE, LADDER_BACKEND_INTERP] {
        let before = CALLS.load(Ordering::SeqCst);
        let (status, got) = run(&path, backend, &x);
        assert_eq!(status, LADDER_OK, "backend {}: {}", backend.0, last_error());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "backend {}: {got:?} vs {want:?}", backend.0);
        }
        assert!(CALLS.load(Ordering::SeqCst) > before, "backend {}: the callback was not called", backend.0);
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn registration_errors_are_invalid_arguments() {
    assert_eq!(register("capi_twice", Some(relu6)), LADDER_OK);
    assert_eq!(register("capi_twice", Some(relu6)), LADDER_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("registered already"), "{}", last_error());
    assert_eq!(register("capi_no_compute", None), LADDER_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("callback is NULL"), "{}", last_error());
    assert_eq!(register("bad name", Some(relu6)), LADDER_ERR_INVALID_ARGUMENT);
    // SAFETY: NULL name, checked.
    let status = unsafe { ladder_register_op(null(), null(), Some(like_first), Some(relu6), null_mut()) };
    assert_eq!(status, LADDER_ERR_INVALID_ARGUMENT);
}

#[test]
fn a_failing_callback_fails_the_run_naming_the_op() {
    assert_eq!(register("capi_fails", Some(fails)), LADDER_OK);
    let path = model_file("capi_fails");
    for backend in [LADDER_BACKEND_NATIVE, LADDER_BACKEND_INTERP] {
        let (status, _) = run(&path, backend, &[0.0; 6]);
        assert_eq!(status, LADDER_ERR_RUN, "{}", last_error());
        assert!(
            last_error().contains("custom op `capi_fails`: the compute callback returned status 4"),
            "{}",
            last_error()
        );
    }
    // An unregistered name fails to load, naming it.
    let missing = model_file("capi_never_registered");
    assert_eq!(run(&missing, LADDER_BACKEND_NATIVE, &[0.0; 6]).0, LADDER_ERR_LOAD);
    assert!(last_error().contains("capi_never_registered"), "{}", last_error());
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(missing);
}
