//! Tensors across the boundary: `LadderTensor`, made from a caller's bytes and read back.
//!
//! A `LadderTensor` owns a [`engine::Tensor`] and its dims as `int64_t`, the type the header
//! gives shapes, so that `ladder_tensor_shape` can return a pointer into the handle instead
//! of asking the caller for a buffer. A tensor is made by copying the caller's data: the
//! caller's memory may be unaligned and is theirs to reuse the moment the call returns.
//! Every size the caller gives is checked (dims not negative, their product and the byte count
//! without overflow, the bytes exactly the shape's) before anything is allocated, and the copy
//! is allocated fallibly, so that a bad size is an error code and not an abort.

use std::ffi::c_void;

use engine::{DType, Tensor, TensorData};
use half::{bf16, f16};

use crate::status::{call, call_value, Error, LadderStatus};

/// An element type (`LadderDType` in C); the constants below are its values.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LadderDType(pub i32);

pub const LADDER_DTYPE_INVALID: LadderDType = LadderDType(0);
pub const LADDER_DTYPE_F32: LadderDType = LadderDType(1);
pub const LADDER_DTYPE_F64: LadderDType = LadderDType(2);
pub const LADDER_DTYPE_F16: LadderDType = LadderDType(3);
pub const LADDER_DTYPE_BF16: LadderDType = LadderDType(4);
pub const LADDER_DTYPE_I8: LadderDType = LadderDType(5);
pub const LADDER_DTYPE_I16: LadderDType = LadderDType(6);
pub const LADDER_DTYPE_I32: LadderDType = LadderDType(7);
pub const LADDER_DTYPE_I64: LadderDType = LadderDType(8);
pub const LADDER_DTYPE_U8: LadderDType = LadderDType(9);
pub const LADDER_DTYPE_U16: LadderDType = LadderDType(10);
pub const LADDER_DTYPE_U32: LadderDType = LadderDType(11);
pub const LADDER_DTYPE_U64: LadderDType = LadderDType(12);
pub const LADDER_DTYPE_BOOL: LadderDType = LadderDType(13);

/// Each C dtype with ladder's.
const DTYPES: [(LadderDType, DType); 13] = [
    (LADDER_DTYPE_F32, DType::F32),
    (LADDER_DTYPE_F64, DType::F64),
    (LADDER_DTYPE_F16, DType::F16),
    (LADDER_DTYPE_BF16, DType::BF16),
    (LADDER_DTYPE_I8, DType::I8),
    (LADDER_DTYPE_I16, DType::I16),
    (LADDER_DTYPE_I32, DType::I32),
    (LADDER_DTYPE_I64, DType::I64),
    (LADDER_DTYPE_U8, DType::U8),
    (LADDER_DTYPE_U16, DType::U16),
    (LADDER_DTYPE_U32, DType::U32),
    (LADDER_DTYPE_U64, DType::U64),
    (LADDER_DTYPE_BOOL, DType::Bool),
];

impl LadderDType {
    /// The C code of a ladder dtype.
    pub fn from_dtype(dtype: DType) -> LadderDType {
        DTYPES.iter().find(|(_, d)| *d == dtype).map_or(LADDER_DTYPE_INVALID, |(c, _)| *c)
    }

    /// The ladder dtype of a C code; `None` for a value the header does not declare.
    pub fn to_dtype(self) -> Option<DType> {
        DTYPES.iter().find(|(c, _)| *c == self).map(|(_, d)| *d)
    }
}

/// A tensor handed to C (`LadderTensor` in C, opaque there).
#[derive(Debug)]
pub struct LadderTensor {
    pub(crate) tensor: Tensor,
    /// The shape as the header gives it.
    dims: Vec<i64>,
}

impl LadderTensor {
    /// Wraps a tensor, its dims converted for C.
    pub(crate) fn new(tensor: Tensor) -> Result<LadderTensor, Error> {
        let dims = tensor
            .shape()
            .iter()
            .map(|&d| i64::try_from(d).map_err(|_| Error::invalid(format!("dim {d} does not fit an int64_t"))))
            .collect::<Result<Vec<i64>, Error>>()?;
        Ok(LadderTensor { tensor, dims })
    }

    /// The tensor inside.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
}

/// The data's bytes (any dtype) and where they start.
pub(crate) fn data_bytes(data: &TensorData) -> (*const u8, usize) {
    fn raw<T>(v: &[T]) -> (*const u8, usize) {
        (v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
    }
    match data {
        TensorData::F32(v) => raw(v),
        TensorData::F64(v) => raw(v),
        TensorData::F16(v) => raw(v),
        TensorData::BF16(v) => raw(v),
        TensorData::I32(v) => raw(v),
        TensorData::I64(v) => raw(v),
        TensorData::Bool(v) => raw(v),
        TensorData::I8(v) => raw(v),
        TensorData::I16(v) => raw(v),
        TensorData::U8(v) => raw(v),
        TensorData::U16(v) => raw(v),
        TensorData::U32(v) => raw(v),
        TensorData::U64(v) => raw(v),
    }
}

/// A vector of `bytes.len() / size_of::<T>()` elements copied from `bytes` (any alignment),
/// allocated fallibly. `T` must be a type every bit pattern of which is a value (checked by
/// the caller for `bool`).
fn copy_elements<T: Copy>(bytes: &[u8]) -> Result<Vec<T>, Error> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::out_of_memory("the tensor's data", bytes.len()))?;
    // SAFETY: `v` has capacity for `n` elements, `n * size_of::<T>()` bytes, which `bytes`
    // holds (the caller passes a whole number of elements); the two do not overlap (`v` is
    // new); the copy is bytewise, so `bytes` need not be aligned; every bit pattern written is
    // a valid `T` (plain numbers here, bools checked to be 0 or 1 before); so the first `n`
    // elements are initialised when the length is set.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * std::mem::size_of::<T>());
        v.set_len(n);
    }
    Ok(v)
}

/// A tensor of `dtype` and `shape` from the caller's bytes, every size checked.
fn tensor_from_bytes(dtype: LadderDType, shape: &[i64], bytes: &[u8]) -> Result<Tensor, Error> {
    let Some(dt) = dtype.to_dtype() else {
        return Err(Error::invalid(format!("dtype {} is not a LadderDType", dtype.0)));
    };
    let mut dims = Vec::new();
    dims.try_reserve_exact(shape.len()).map_err(|_| Error::out_of_memory("the tensor's shape", shape.len() * 8))?;
    for (axis, &d) in shape.iter().enumerate() {
        let d = usize::try_from(d).map_err(|_| Error::invalid(format!("shape {shape:?}: dim {axis} is {d}")))?;
        dims.push(d);
    }
    let elements = engine::tensor::checked_numel(&dims)
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} has more elements than memory can index")))?;
    let need = elements
        .checked_mul(dt.size_bytes())
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} of {dt} is more bytes than memory can index")))?;
    if need != bytes.len() {
        return Err(Error::invalid(format!(
            "data_bytes is {} but shape {shape:?} of {dt} ({elements} elements of {} bytes) needs {need}",
            bytes.len(),
            dt.size_bytes()
        )));
    }
    let data = match dt {
        DType::F32 => TensorData::F32(copy_elements::<f32>(bytes)?),
        DType::F64 => TensorData::F64(copy_elements::<f64>(bytes)?),
        DType::F16 => TensorData::F16(copy_elements::<f16>(bytes)?),
        DType::BF16 => TensorData::BF16(copy_elements::<bf16>(bytes)?),
        DType::I8 => TensorData::I8(copy_elements::<i8>(bytes)?),
        DType::I16 => TensorData::I16(copy_elements::<i16>(bytes)?),
        DType::I32 => TensorData::I32(copy_elements::<i32>(bytes)?),
        DType::I64 => TensorData::I64(copy_elements::<i64>(bytes)?),
        DType::U8 => TensorData::U8(copy_elements::<u8>(bytes)?),
        DType::U16 => TensorData::U16(copy_elements::<u16>(bytes)?),
        DType::U32 => TensorData::U32(copy_elements::<u32>(bytes)?),
        DType::U64 => TensorData::U64(copy_elements::<u64>(bytes)?),
        DType::Bool => {
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(Error::invalid(format!("bool element {i} is {}, not 0 or 1", bytes[i])));
            }
            TensorData::Bool(copy_elements::<bool>(bytes)?)
        }
    };
    Tensor::new(dims, data).map_err(|e| Error::invalid(e.to_string()))
}

/// A new tensor holding a copy of the caller's data; see `ladder.h`.
///
/// # Safety
/// `shape` points to `rank` readable `int64_t`s (or is NULL with `rank` 0), `data` to
/// `data_bytes` readable bytes (or is NULL with `data_bytes` 0), `out` is writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_new(
    dtype: LadderDType,
    shape: *const i64,
    rank: usize,
    data: *const c_void,
    data_bytes: usize,
    out: *mut *mut LadderTensor,
) -> LadderStatus {
    call(|| {
        if out.is_null() {
            return Err(Error::invalid("ladder_tensor_new: `out` is NULL"));
        }
        // SAFETY: `out` is not null and the caller gives a writable pointer (see # Safety).
        unsafe { *out = std::ptr::null_mut() };
        if shape.is_null() && rank != 0 {
            return Err(Error::invalid(format!("ladder_tensor_new: `shape` is NULL but `rank` is {rank}")));
        }
        if data.is_null() && data_bytes != 0 {
            return Err(Error::invalid(format!("ladder_tensor_new: `data` is NULL but `data_bytes` is {data_bytes}")));
        }
        let shape: &[i64] = if rank == 0 {
            &[]
        } else {
            // SAFETY: `shape` is not null and points to `rank` int64_t (the caller's contract).
            unsafe { std::slice::from_raw_parts(shape, rank) }
        };
        let bytes: &[u8] = if data_bytes == 0 {
            &[]
        } else {
            // SAFETY: `data` is not null and points to `data_bytes` readable bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), data_bytes) }
        };
        let tensor = tensor_from_bytes(dtype, shape, bytes)
            .map_err(|e| Error { message: format!("ladder_tensor_new: {}", e.message), ..e })?;
        let handle = Box::new(LadderTensor::new(tensor)?);
        // SAFETY: as above, `out` is writable.
        unsafe { *out = Box::into_raw(handle) };
        Ok(())
    })
}

/// Frees a tensor; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a handle from this library not freed before, not in use elsewhere.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_free(tensor: *mut LadderTensor) {
    call(|| {
        if !tensor.is_null() {
            // SAFETY: a live handle made by `Box::into_raw` here, given back once (the contract).
            drop(unsafe { Box::from_raw(tensor) });
        }
        Ok(())
    });
}

/// Borrows a tensor handle, or names the NULL.
///
/// # Safety
/// `tensor` is NULL or a live handle, not freed while the borrow lasts.
pub(crate) unsafe fn tensor_ref<'a>(tensor: *const LadderTensor, what: &str) -> Result<&'a LadderTensor, Error> {
    // SAFETY: not null here, and live by the caller's contract.
    unsafe { tensor.as_ref() }.ok_or_else(|| Error::invalid(format!("{what}: the tensor is NULL")))
}

/// The tensor's dtype; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_dtype(tensor: *const LadderTensor) -> LadderDType {
    // SAFETY: the caller's contract, passed on.
    call_value(LADDER_DTYPE_INVALID, || {
        Ok(LadderDType::from_dtype(unsafe { tensor_ref(tensor, "ladder_tensor_dtype") }?.tensor.dtype()))
    })
}

/// The tensor's rank; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_rank(tensor: *const LadderTensor) -> usize {
    // SAFETY: the caller's contract, passed on.
    call_value(0, || Ok(unsafe { tensor_ref(tensor, "ladder_tensor_rank") }?.dims.len()))
}

/// The tensor's dims; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_shape(tensor: *const LadderTensor) -> *const i64 {
    // SAFETY: the caller's contract, passed on.
    call_value(std::ptr::null(), || Ok(unsafe { tensor_ref(tensor, "ladder_tensor_shape") }?.dims.as_ptr()))
}

/// The tensor's data; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_data(tensor: *const LadderTensor) -> *const c_void {
    call_value(std::ptr::null(), || {
        // SAFETY: the caller's contract, passed on.
        let t = unsafe { tensor_ref(tensor, "ladder_tensor_data") }?;
        Ok(data_bytes(t.tensor.data()).0.cast::<c_void>())
    })
}

/// The size of the tensor's data in bytes; see `ladder.h`.
///
/// # Safety
/// `tensor` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ladder_tensor_byte_size(tensor: *const LadderTensor) -> usize {
    // SAFETY: the caller's contract, passed on.
    call_value(0, || Ok(data_bytes(unsafe { tensor_ref(tensor, "ladder_tensor_byte_size") }?.tensor.data()).1))
}
