//! Typed element access for the executors: one element of typed data or of a buffer's
//! native-endian bytes as a [`Val`], and whole tensors to and from bytes.

use half::{bf16, f16};

use super::eval::{ExecError, Val};
use crate::ir::DType;
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use crate::tensor::{Tensor, TensorData};

/// Element `i` of typed data, widened.
pub fn get_elem(data: &TensorData, i: usize) -> Option<Val> {
    Some(match data {
        TensorData::F32(v) => Val::F(*v.get(i)? as f64),
        TensorData::F64(v) => Val::F(*v.get(i)?),
        TensorData::F16(v) => Val::F(v.get(i)?.to_f64()),
        TensorData::BF16(v) => Val::F(v.get(i)?.to_f64()),
        TensorData::I32(v) => Val::I(*v.get(i)? as i64),
        TensorData::I64(v) => Val::I(*v.get(i)?),
        TensorData::Bool(v) => Val::B(*v.get(i)?),
        TensorData::I8(v) => Val::I(*v.get(i)? as i64),
        TensorData::I16(v) => Val::I(*v.get(i)? as i64),
        TensorData::U8(v) => Val::I(*v.get(i)? as i64),
        TensorData::U16(v) => Val::I(*v.get(i)? as i64),
        TensorData::U32(v) => Val::I(*v.get(i)? as i64),
        TensorData::U64(v) => Val::I(*v.get(i)? as i64),
    })
}

/// Sets element `i` of typed data (converting `value` to the data's dtype).
pub fn set_elem(data: &mut TensorData, i: usize, value: Val) -> Option<()> {
    let value = value.convert(data.dtype());
    match (data, value) {
        (TensorData::F32(v), Val::F(x)) => *v.get_mut(i)? = x as f32,
        (TensorData::F64(v), Val::F(x)) => *v.get_mut(i)? = x,
        (TensorData::F16(v), Val::F(x)) => *v.get_mut(i)? = f16_from_f64(x),
        (TensorData::BF16(v), Val::F(x)) => *v.get_mut(i)? = bf16_from_f64(x),
        (TensorData::I32(v), Val::I(x)) => *v.get_mut(i)? = x as i32,
        (TensorData::I64(v), Val::I(x)) => *v.get_mut(i)? = x,
        (TensorData::Bool(v), Val::B(x)) => *v.get_mut(i)? = x,
        (TensorData::I8(v), Val::I(x)) => *v.get_mut(i)? = x as i8,
        (TensorData::I16(v), Val::I(x)) => *v.get_mut(i)? = x as i16,
        (TensorData::U8(v), Val::I(x)) => *v.get_mut(i)? = x as u8,
        (TensorData::U16(v), Val::I(x)) => *v.get_mut(i)? = x as u16,
        (TensorData::U32(v), Val::I(x)) => *v.get_mut(i)? = x as u32,
        (TensorData::U64(v), Val::I(x)) => *v.get_mut(i)? = x as u64,
        _ => return None,
    }
    Some(())
}

/// Bytes per element of `dtype` in a buffer (bool is one byte, 0 or 1).
pub fn elem_size(dtype: DType) -> usize {
    dtype.size_bytes()
}

/// Element `i` of a buffer of `dtype` stored as native-endian bytes.
pub fn get_bytes(dtype: DType, bytes: &[u8], i: usize) -> Option<Val> {
    let n = elem_size(dtype);
    let b = bytes.get(i.checked_mul(n)?..i.checked_mul(n)?.checked_add(n)?)?;
    Some(match dtype {
        DType::F32 => Val::F(f32::from_ne_bytes(b.try_into().ok()?) as f64),
        DType::F64 => Val::F(f64::from_ne_bytes(b.try_into().ok()?)),
        DType::F16 => Val::F(f16::from_bits(u16::from_ne_bytes(b.try_into().ok()?)).to_f64()),
        DType::BF16 => Val::F(bf16::from_bits(u16::from_ne_bytes(b.try_into().ok()?)).to_f64()),
        DType::I32 => Val::I(i32::from_ne_bytes(b.try_into().ok()?) as i64),
        DType::I64 => Val::I(i64::from_ne_bytes(b.try_into().ok()?)),
        DType::Bool => Val::B(b[0] != 0),
        DType::I8 => Val::I(b[0] as i8 as i64),
        DType::U8 => Val::I(b[0] as i64),
        DType::I16 => Val::I(i16::from_ne_bytes(b.try_into().ok()?) as i64),
        DType::U16 => Val::I(u16::from_ne_bytes(b.try_into().ok()?) as i64),
        DType::U32 => Val::I(u32::from_ne_bytes(b.try_into().ok()?) as i64),
        DType::U64 => Val::I(u64::from_ne_bytes(b.try_into().ok()?) as i64),
    })
}

/// Sets element `i` of a byte buffer of `dtype` (converting `value` to `dtype`).
pub fn set_bytes(dtype: DType, bytes: &mut [u8], i: usize, value: Val) -> Option<()> {
    let n = elem_size(dtype);
    let b = bytes.get_mut(i.checked_mul(n)?..i.checked_mul(n)?.checked_add(n)?)?;
    match (dtype, value.convert(dtype)) {
        (DType::F32, Val::F(x)) => b.copy_from_slice(&(x as f32).to_ne_bytes()),
        (DType::F64, Val::F(x)) => b.copy_from_slice(&x.to_ne_bytes()),
        (DType::F16, Val::F(x)) => b.copy_from_slice(&f16_from_f64(x).to_bits().to_ne_bytes()),
        (DType::BF16, Val::F(x)) => b.copy_from_slice(&bf16_from_f64(x).to_bits().to_ne_bytes()),
        (DType::I32, Val::I(x)) => b.copy_from_slice(&(x as i32).to_ne_bytes()),
        (DType::I64, Val::I(x)) => b.copy_from_slice(&x.to_ne_bytes()),
        (DType::Bool, Val::B(x)) => b[0] = x as u8,
        (DType::I8 | DType::U8, Val::I(x)) => b[0] = x as u8,
        (DType::I16 | DType::U16, Val::I(x)) => b.copy_from_slice(&(x as u16).to_ne_bytes()),
        (DType::U32, Val::I(x)) => b.copy_from_slice(&(x as u32).to_ne_bytes()),
        (DType::U64, Val::I(x)) => b.copy_from_slice(&x.to_ne_bytes()),
        _ => return None,
    }
    Some(())
}

/// Typed data as native-endian bytes (the layout of a buffer).
/// Copies what fits when `out` is shorter.
pub fn data_to_bytes(data: &TensorData, out: &mut [u8]) {
    let src = data.as_bytes();
    let n = src.len().min(out.len());
    out[..n].copy_from_slice(&src[..n]);
}

/// A tensor of `dtype` and `shape` read from native-endian bytes.
pub fn tensor_from_bytes(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> Result<Tensor, ExecError> {
    let n: usize = shape.iter().product();
    let short = || ExecError::Invalid("buffer shorter than its shape".into());
    let bytes = bytes.get(..n.checked_mul(dtype.size_bytes()).ok_or_else(short)?).ok_or_else(short)?;
    // The copy out of the arena for every output that does not live in its own tensor: a
    // memcpy (values are stored in native byte order, as generated code writes them). Bools
    // are checked byte by byte, as only 0 and 1 are valid.
    let data = if dtype == DType::Bool {
        TensorData::Bool(bytes.iter().map(|&b| b != 0).collect())
    } else {
        let mut data = TensorData::zeros(dtype, n);
        data.as_bytes_mut().ok_or_else(|| ExecError::Invalid(format!("{dtype} as bytes")))?.copy_from_slice(bytes);
        data
    };
    Tensor::new(shape, data).map_err(|e| ExecError::Invalid(e.to_string()))
}
