//! Custom kernels from C: `ladder_register_op` registers a pair of C callbacks (a shape rule
//! and a compute function) as ladder's custom op of that name (`engine::ops::custom`), so a
//! model using it (an ONNX node `domain::name`, or `custom {name}` in the text form) loads and
//! runs in every session.
//!
//! The callbacks see the C API's own types: a result type as a `LadderDType`, a rank and
//! `int64_t` dims (a symbolic dim, such as a batch size, is -1), operands as borrowed
//! `LadderTensor` handles, the node's attributes as their text (`ops::custom::CustomAttrs`'s
//! form). The compute callback makes its result with `ladder_tensor_new` and hands it over;
//! the library frees it. A nonzero status from a callback is an error naming the op. The
//! callbacks run on whatever thread runs the model, several at once, so `user_data` must be
//! safe to share; and they must not unwind (a Rust callback that panics aborts).

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

use engine::ops::custom::{register, CustomAttrs, CustomOp};
use engine::{Dim, Shape, Tensor, TensorType};

use crate::status::{call, Error, LadderStatus, LADDER_OK};
use crate::tensor::{LadderDType, LadderTensor};

/// The most dims a shape callback may write: the length of its `dims` array.
pub const MAX_RANK: usize = 16;

/// A custom op's shape rule (`LadderShapeFn` in C); see `ladder.h`.
pub type LadderShapeFn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        attrs: *const c_char,
        n_inputs: usize,
        input_dtypes: *const LadderDType,
        input_ranks: *const usize,
        input_dims: *const *const i64,
        out_dtype: *mut LadderDType,
        out_rank: *mut usize,
        out_dims: *mut i64,
    ) -> LadderStatus,
>;

/// A custom op's compute function (`LadderComputeFn` in C); see `ladder.h`.
pub type LadderComputeFn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        attrs: *const c_char,
        inputs: *const *const LadderTensor,
        n_inputs: usize,
        output: *mut *mut LadderTensor,
    ) -> LadderStatus,
>;

/// The caller's `user_data`, handed back to its callbacks.
#[derive(Clone, Copy)]
struct UserData(*mut c_void);

// SAFETY: the header makes sharing `user_data` across threads the caller's promise ("the
// callbacks may run on several threads at once"); the library only passes the pointer back.
unsafe impl Send for UserData {}
// SAFETY: as above.
unsafe impl Sync for UserData {}

/// The node's attributes as a C string (their text has no NUL: names are checked and
/// strings come from C strings or UTF-8 without NULs; a NUL would be an error).
fn attrs_text(attrs: &CustomAttrs) -> Result<CString, String> {
    CString::new(attrs.encode()?).map_err(|_| "an attribute holds a NUL".to_string())
}

/// The shape rule over the C callback.
fn shape_rule(
    f: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        usize,
        *const LadderDType,
        *const usize,
        *const *const i64,
        *mut LadderDType,
        *mut usize,
        *mut i64,
    ) -> LadderStatus,
    user: UserData,
    args: &[TensorType],
    attrs: &CustomAttrs,
) -> Result<TensorType, String> {
    let dtypes: Vec<LadderDType> = args.iter().map(|t| LadderDType::from_dtype(t.dtype)).collect();
    let ranks: Vec<usize> = args.iter().map(|t| t.rank()).collect();
    let dims: Vec<Vec<i64>> = args
        .iter()
        .map(|t| {
            t.shape.dims().iter().map(|d| d.as_const().and_then(|c| i64::try_from(c).ok()).unwrap_or(-1)).collect()
        })
        .collect();
    let dim_ptrs: Vec<*const i64> = dims.iter().map(|d| d.as_ptr()).collect();
    let text = attrs_text(attrs)?;
    let (mut out_dtype, mut out_rank, mut out_dims) = (LadderDType(0), 0usize, [0i64; MAX_RANK]);
    // SAFETY: every array holds `args.len()` entries (each dims array its rank), alive for the
    // call; the out-parameters are writable, `out_dims` for MAX_RANK dims as the header says.
    let status = unsafe {
        f(
            user.0,
            text.as_ptr(),
            args.len(),
            dtypes.as_ptr(),
            ranks.as_ptr(),
            dim_ptrs.as_ptr(),
            &mut out_dtype,
            &mut out_rank,
            out_dims.as_mut_ptr(),
        )
    };
    if status != LADDER_OK {
        return Err(format!("the shape callback returned status {}", status.0));
    }
    let dtype = out_dtype.to_dtype().ok_or_else(|| format!("the shape callback gave dtype {}", out_dtype.0))?;
    if out_rank > MAX_RANK {
        return Err(format!("the shape callback gave rank {out_rank}, above {MAX_RANK}"));
    }
    let mut shape = Vec::with_capacity(out_rank);
    for (axis, &d) in out_dims[..out_rank].iter().enumerate() {
        shape.push(match d {
            // The first operand's dim on this axis (symbolic or not).
            -1 => args
                .first()
                .and_then(|t| t.shape.dims().get(axis).cloned())
                .ok_or_else(|| format!("result dim {axis} is -1 but the first operand has no dim {axis}"))?,
            d if d >= 0 => Dim::from(d as u64),
            d => return Err(format!("the shape callback gave dim {d} on axis {axis}")),
        });
    }
    Ok(TensorType::new(dtype, Shape(shape.into_iter().collect())))
}

/// The compute function over the C callback.
fn compute(
    f: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        *const *const LadderTensor,
        usize,
        *mut *mut LadderTensor,
    ) -> LadderStatus,
    user: UserData,
    args: &[Tensor],
    attrs: &CustomAttrs,
) -> Result<Tensor, String> {
    let handles: Vec<LadderTensor> =
        args.iter().map(|t| LadderTensor::new(t.clone())).collect::<Result<_, _>>().map_err(|e| e.message)?;
    let ptrs: Vec<*const LadderTensor> = handles.iter().map(|h| h as *const LadderTensor).collect();
    let text = attrs_text(attrs)?;
    let mut out: *mut LadderTensor = std::ptr::null_mut();
    // SAFETY: `ptrs` holds `args.len()` live handles, borrowed for the call; `out` is writable.
    let status = unsafe { f(user.0, text.as_ptr(), ptrs.as_ptr(), ptrs.len(), &mut out) };
    let result = if out.is_null() {
        None
    } else {
        // SAFETY: a non-null `*output` is a handle from `ladder_tensor_new` whose ownership the
        // callback hands over (the header's contract), taken once here.
        Some(unsafe { Box::from_raw(out) })
    };
    match (status, result) {
        (LADDER_OK, Some(t)) => Ok(t.tensor),
        (LADDER_OK, None) => Err("the compute callback returned LADDER_OK without an output".into()),
        (status, _) => Err(format!("the compute callback returned status {}", status.0)),
    }
}

/// Registers a custom op implemented by C callbacks; see `ladder.h`.
///
/// # Safety
/// `domain` is NULL or a NUL-terminated string, `name` a NUL-terminated string; the callbacks
/// and `user_data` stay valid, and safe to call from any thread, for the rest of the process.
#[no_mangle]
pub unsafe extern "C" fn ladder_register_op(
    domain: *const c_char,
    name: *const c_char,
    shape_fn: LadderShapeFn,
    compute_fn: LadderComputeFn,
    user_data: *mut c_void,
) -> LadderStatus {
    call(|| {
        let text = |p: *const c_char, what: &str| -> Result<String, Error> {
            // SAFETY: a non-null pointer is a NUL-terminated string (the contract).
            let s = unsafe { CStr::from_ptr(p) };
            s.to_str()
                .map(str::to_string)
                .map_err(|_| Error::invalid(format!("ladder_register_op: {what} is not UTF-8")))
        };
        if name.is_null() {
            return Err(Error::invalid("ladder_register_op: `name` is NULL"));
        }
        let name = text(name, "name")?;
        let domain = if domain.is_null() { String::new() } else { text(domain, "domain")? };
        let (Some(shape_fn), Some(compute_fn)) = (shape_fn, compute_fn) else {
            return Err(Error::invalid("ladder_register_op: a callback is NULL"));
        };
        let user = UserData(user_data);
        let op = CustomOp {
            name,
            domain,
            shape: Arc::new(move |args: &[TensorType], attrs: &CustomAttrs| shape_rule(shape_fn, user, args, attrs)),
            compute: Arc::new(move |args: &[Tensor], attrs: &CustomAttrs| compute(compute_fn, user, args, attrs)),
        };
        register(op).map_err(|e| Error::invalid(format!("ladder_register_op: {e}")))
    })
}
