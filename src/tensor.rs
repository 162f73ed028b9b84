//! Host tensors: what callers pass in and get back, and what constants (blobs) hold.
//!
//! A `Tensor` is dense and row-major. Its data is typed storage, so a caller's `Vec<f32>`
//! moves in without conversion. A constant loaded from a compiled artifact instead reads its
//! elements in place from the file's read-only mapping ([`Mapping`]): the native backend takes
//! its bytes and `f32` slices from there, and only a caller of [`Tensor::data`] (which returns
//! typed vectors) gets a heap copy, made once and kept.

pub mod narrow;

use narrow::{bf16_from_f64, f16_from_f64};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use half::{bf16, f16};

use crate::ir::DType;

/// Typed, contiguous element storage.
#[derive(Clone, Debug)]
pub enum TensorData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl TensorData {
    /// Elements of `dtype` from their little-endian bytes (ONNX's `raw_data`, an artifact's
    /// blobs): `raw.len() / dtype.size_bytes()` of them (a trailing partial element is
    /// ignored; callers check the length); a bool is any nonzero byte.
    pub fn from_le_bytes(dtype: DType, raw: &[u8]) -> TensorData {
        fn chunks<const N: usize>(raw: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
            raw.chunks_exact(N).map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                a
            })
        }
        match dtype {
            DType::F32 => TensorData::F32(chunks::<4>(raw).map(f32::from_le_bytes).collect()),
            DType::F64 => TensorData::F64(chunks::<8>(raw).map(f64::from_le_bytes).collect()),
            DType::I32 => TensorData::I32(chunks::<4>(raw).map(i32::from_le_bytes).collect()),
            DType::I64 => TensorData::I64(chunks::<8>(raw).map(i64::from_le_bytes).collect()),
            DType::F16 => TensorData::F16(chunks::<2>(raw).map(|b| f16::from_bits(u16::from_le_bytes(b))).collect()),
            DType::BF16 => TensorData::BF16(chunks::<2>(raw).map(|b| bf16::from_bits(u16::from_le_bytes(b))).collect()),
            DType::Bool => TensorData::Bool(raw.iter().map(|&b| b != 0).collect()),
            DType::I8 => TensorData::I8(raw.iter().map(|&b| b as i8).collect()),
            DType::U8 => TensorData::U8(raw.to_vec()),
            DType::I16 => TensorData::I16(chunks::<2>(raw).map(i16::from_le_bytes).collect()),
            DType::U16 => TensorData::U16(chunks::<2>(raw).map(u16::from_le_bytes).collect()),
            DType::U32 => TensorData::U32(chunks::<4>(raw).map(u32::from_le_bytes).collect()),
            DType::U64 => TensorData::U64(chunks::<8>(raw).map(u64::from_le_bytes).collect()),
        }
    }

    /// Appends the elements' little-endian bytes to `out` (a bool as one byte, 0 or 1): the
    /// inverse of [`TensorData::from_le_bytes`].
    pub fn write_le_bytes(&self, out: &mut Vec<u8>) {
        match self {
            TensorData::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            TensorData::BF16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            TensorData::I32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::I64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
            TensorData::I8(v) => out.extend(v.iter().map(|&b| b as u8)),
            TensorData::I16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::U8(v) => out.extend_from_slice(v),
            TensorData::U16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::U32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            TensorData::U64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        }
    }
}

/// Applies `$f` to the vector inside any `TensorData` variant.
macro_rules! each_data {
    ($d:expr, $v:ident => $f:expr) => {
        match $d {
            TensorData::F32($v) => $f,
            TensorData::F64($v) => $f,
            TensorData::F16($v) => $f,
            TensorData::BF16($v) => $f,
            TensorData::I32($v) => $f,
            TensorData::I64($v) => $f,
            TensorData::Bool($v) => $f,
            TensorData::I8($v) => $f,
            TensorData::I16($v) => $f,
            TensorData::U8($v) => $f,
            TensorData::U16($v) => $f,
            TensorData::U32($v) => $f,
            TensorData::U64($v) => $f,
        }
    };
}

impl TensorData {
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::Bool(_) => DType::Bool,
            TensorData::I8(_) => DType::I8,
            TensorData::I16(_) => DType::I16,
            TensorData::U8(_) => DType::U8,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
        }
    }

    pub fn len(&self) -> usize {
        each_data!(self, v => v.len())
    }

    /// Integer data of `dtype` from i64 values, each wrapped to the dtype's width (a u64 is
    /// taken as the value's bit pattern); `None` unless `dtype` is an integer type.
    pub fn from_ints(dtype: DType, values: impl IntoIterator<Item = i64>) -> Option<TensorData> {
        let it = values.into_iter();
        Some(match dtype {
            DType::I8 => TensorData::I8(it.map(|x| x as i8).collect()),
            DType::I16 => TensorData::I16(it.map(|x| x as i16).collect()),
            DType::I32 => TensorData::I32(it.map(|x| x as i32).collect()),
            DType::I64 => TensorData::I64(it.collect()),
            DType::U8 => TensorData::U8(it.map(|x| x as u8).collect()),
            DType::U16 => TensorData::U16(it.map(|x| x as u16).collect()),
            DType::U32 => TensorData::U32(it.map(|x| x as u32).collect()),
            DType::U64 => TensorData::U64(it.map(|x| x as u64).collect()),
            _ => return None,
        })
    }

    /// Integer data as i64 values (a u64 as its bit pattern, so values above i64::MAX come
    /// back negative); `None` unless this is integer data.
    pub fn ints(&self) -> Option<Vec<i64>> {
        Some(match self {
            TensorData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I16(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I64(v) => v.clone(),
            TensorData::U8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U16(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U64(v) => v.iter().map(|&x| x as i64).collect(),
            _ => return None,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Zeros (false for bool) of the given type.
    /// [`TensorData::zeros`], or `None` where the allocator cannot provide the memory (instead
    /// of ending the process).
    pub(crate) fn try_zeros(dtype: DType, len: usize) -> Option<TensorData> {
        fn v<T: Clone>(zero: T, len: usize) -> Option<Vec<T>> {
            let mut x = Vec::new();
            x.try_reserve_exact(len).ok()?;
            x.resize(len, zero);
            Some(x)
        }
        Some(match dtype {
            DType::F32 => TensorData::F32(v(0.0, len)?),
            DType::F64 => TensorData::F64(v(0.0, len)?),
            DType::F16 => TensorData::F16(v(f16::ZERO, len)?),
            DType::BF16 => TensorData::BF16(v(bf16::ZERO, len)?),
            DType::I32 => TensorData::I32(v(0, len)?),
            DType::I64 => TensorData::I64(v(0, len)?),
            DType::Bool => TensorData::Bool(v(false, len)?),
            DType::I8 => TensorData::I8(v(0, len)?),
            DType::I16 => TensorData::I16(v(0, len)?),
            DType::U8 => TensorData::U8(v(0, len)?),
            DType::U16 => TensorData::U16(v(0, len)?),
            DType::U32 => TensorData::U32(v(0, len)?),
            DType::U64 => TensorData::U64(v(0, len)?),
        })
    }

    pub fn zeros(dtype: DType, len: usize) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(vec![0.0; len]),
            DType::F64 => TensorData::F64(vec![0.0; len]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; len]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; len]),
            DType::I32 => TensorData::I32(vec![0; len]),
            DType::I64 => TensorData::I64(vec![0; len]),
            DType::Bool => TensorData::Bool(vec![false; len]),
            d => TensorData::from_ints(d, std::iter::repeat_n(0, len)).unwrap_or(TensorData::I64(vec![0; len])),
        }
    }
}

impl TensorData {
    /// The elements as native-endian bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        fn b<T>(v: &[T]) -> &[u8] {
            // SAFETY: every element type here is plain data without padding (floats,
            // integers, `f16`/`bf16` as u16, bool as one byte), so its memory is
            // `size_of_val(v)` initialised bytes, borrowed as long as `v`.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            TensorData::F32(v) => b(v),
            TensorData::F64(v) => b(v),
            TensorData::F16(v) => b(v),
            TensorData::BF16(v) => b(v),
            TensorData::I32(v) => b(v),
            TensorData::I64(v) => b(v),
            TensorData::Bool(v) => b(v),
            TensorData::I8(v) => b(v),
            TensorData::I16(v) => b(v),
            TensorData::U8(v) => b(v),
            TensorData::U16(v) => b(v),
            TensorData::U32(v) => b(v),
            TensorData::U64(v) => b(v),
        }
    }

    /// The elements as writable native-endian bytes, for every dtype whose every bit pattern
    /// is a valid value (`None` for bool, where only 0 and 1 are).
    pub(crate) fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        fn b<T>(v: &mut [T]) -> &mut [u8] {
            // SAFETY: as in `as_bytes`; in addition, every bit pattern is a valid `T` for the
            // types passed here, so any bytes written leave valid elements.
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        Some(match self {
            TensorData::F32(v) => b(v),
            TensorData::F64(v) => b(v),
            TensorData::F16(v) => b(v),
            TensorData::BF16(v) => b(v),
            TensorData::I32(v) => b(v),
            TensorData::I64(v) => b(v),
            TensorData::I8(v) => b(v),
            TensorData::I16(v) => b(v),
            TensorData::U8(v) => b(v),
            TensorData::U16(v) => b(v),
            TensorData::U32(v) => b(v),
            TensorData::U64(v) => b(v),
            TensorData::Bool(_) => return None,
        })
    }
}

/// Why a tensor could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("shape {shape:?} holds {expected} elements but {got} were given")]
    LengthMismatch { shape: Vec<usize>, expected: usize, got: usize },
    #[error("shape {shape:?} has too many elements")]
    TooLarge { shape: Vec<usize> },
    #[error("{0} is not an integer type")]
    NotInteger(DType),
}

/// A read-only mapping of a file, which tensors read their elements from in place
/// ([`Tensor::from_mapping`]). The file must not be modified or truncated while a tensor reads
/// from it: it is loaded once and checked (an artifact's checksum), then taken to be constant.
pub(crate) struct Mapping {
    map: memmap2::Mmap,
}

impl Mapping {
    /// Maps all of `file` read-only.
    pub(crate) fn map(file: &std::fs::File) -> std::io::Result<Arc<Mapping>> {
        // SAFETY: the mapping is read-only and private to this process; its contents are
        // sound to read as bytes as long as no one modifies or truncates the file meanwhile,
        // which is the documented condition of loading an artifact (`Artifact::load`).
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Arc::new(Mapping { map }))
    }

    /// The file's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// A tensor's elements in a [`Mapping`]: little-endian, aligned for the dtype, and valid (bools
/// are 0 or 1), as [`Tensor::from_mapping`] checks.
struct Mapped {
    dtype: DType,
    map: Arc<Mapping>,
    range: Range<usize>,
    /// The typed heap copy [`Tensor::data`] made, if it was asked for.
    copy: OnceLock<TensorData>,
}

impl Mapped {
    fn bytes(&self) -> &[u8] {
        &self.map.bytes()[self.range.clone()]
    }
}

/// Where a tensor's elements are.
#[derive(Clone)]
enum Storage {
    Owned(TensorData),
    Mapped(Arc<Mapped>),
}

/// A dense row-major host tensor.
#[derive(Clone)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Storage,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor").field("shape", &self.shape).field("data", self.data()).finish()
    }
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor, TensorError> {
        let expected = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge { shape: shape.clone() })?;
        if expected != data.len() {
            return Err(TensorError::LengthMismatch { shape, expected, got: data.len() });
        }
        Ok(Tensor { shape, data: Storage::Owned(data) })
    }

    /// A tensor of `dtype` and `shape` whose elements are the little-endian bytes
    /// `map.bytes()[range]`, read in place where this machine can (little-endian, the bytes
    /// aligned for the dtype, bools all 0 or 1), else copied.
    pub(crate) fn from_mapping(
        shape: Vec<usize>,
        dtype: DType,
        map: &Arc<Mapping>,
        range: Range<usize>,
    ) -> Result<Tensor, TensorError> {
        let expected = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge { shape: shape.clone() })?;
        let size = dtype.size_bytes();
        let bytes = map.bytes().get(range.clone()).unwrap_or_default();
        if bytes.len() != range.len() || expected.checked_mul(size) != Some(bytes.len()) {
            return Err(TensorError::LengthMismatch { shape, expected, got: bytes.len() / size });
        }
        let in_place = cfg!(target_endian = "little")
            && (bytes.as_ptr() as usize).is_multiple_of(size)
            && (dtype != DType::Bool || bytes.iter().all(|&b| b <= 1));
        if !in_place {
            return Tensor::new(shape, TensorData::from_le_bytes(dtype, bytes));
        }
        let mapped = Mapped { dtype, map: Arc::clone(map), range, copy: OnceLock::new() };
        Ok(Tensor { shape, data: Storage::Mapped(Arc::new(mapped)) })
    }

    /// Whether the elements are read in place from a mapped file (a constant of a loaded
    /// artifact), no heap copy of them having been made.
    pub fn is_mapped(&self) -> bool {
        matches!(&self.data, Storage::Mapped(m) if m.copy.get().is_none())
    }

    pub fn from_f32(shape: &[usize], values: Vec<f32>) -> Result<Tensor, TensorError> {
        Tensor::new(shape.to_vec(), TensorData::F32(values))
    }

    pub fn from_i64(shape: &[usize], values: Vec<i64>) -> Result<Tensor, TensorError> {
        Tensor::new(shape.to_vec(), TensorData::I64(values))
    }

    /// An integer tensor of `dtype` from i64 values (wrapped; a u64 from its bit pattern).
    pub fn from_ints(dtype: DType, shape: &[usize], values: Vec<i64>) -> Result<Tensor, TensorError> {
        let data = TensorData::from_ints(dtype, values).ok_or(TensorError::NotInteger(dtype))?;
        Tensor::new(shape.to_vec(), data)
    }

    /// A tensor of `dtype` from f64 values: floats rounded to nearest, integers truncated
    /// (and wrapped to the width), bools `x != 0`.
    pub fn from_f64_as(dtype: DType, shape: &[usize], values: &[f64]) -> Result<Tensor, TensorError> {
        let data = match dtype {
            DType::F64 => TensorData::F64(values.to_vec()),
            DType::F32 => TensorData::F32(values.iter().map(|&x| x as f32).collect()),
            DType::F16 => TensorData::F16(values.iter().map(|&x| crate::tensor::f16_from_f64(x)).collect()),
            DType::BF16 => TensorData::BF16(values.iter().map(|&x| crate::tensor::bf16_from_f64(x)).collect()),
            DType::Bool => TensorData::Bool(values.iter().map(|&x| x != 0.0).collect()),
            int => TensorData::from_ints(int, values.iter().map(|&x| x as i64)).ok_or(TensorError::NotInteger(int))?,
        };
        Tensor::new(shape.to_vec(), data)
    }

    pub fn from_bool(shape: &[usize], values: Vec<bool>) -> Result<Tensor, TensorError> {
        Tensor::new(shape.to_vec(), TensorData::Bool(values))
    }

    /// A value that only holds a place in a vector while its real tensor is computed (made
    /// without a heap allocation; its shape and data disagree, so it never leaves the crate).
    pub(crate) fn placeholder() -> Tensor {
        Tensor { shape: Vec::new(), data: Storage::Owned(TensorData::F32(Vec::new())) }
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor { shape: Vec::new(), data: Storage::Owned(TensorData::F32(vec![v])) }
    }

    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor, TensorError> {
        let n = checked_numel(shape).ok_or_else(|| TensorError::TooLarge { shape: shape.to_vec() })?;
        Ok(Tensor { shape: shape.to_vec(), data: Storage::Owned(TensorData::zeros(dtype, n)) })
    }

    pub fn dtype(&self) -> DType {
        match &self.data {
            Storage::Owned(d) => d.dtype(),
            Storage::Mapped(m) => m.dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        match &self.data {
            Storage::Owned(d) => d.len(),
            Storage::Mapped(m) => m.range.len() / m.dtype.size_bytes(),
        }
    }

    /// The data, writable in place (its length must not change: the shape describes it). A
    /// mapped tensor becomes an owned copy first.
    pub(crate) fn data_mut(&mut self) -> &mut TensorData {
        if let Storage::Mapped(_) = &self.data {
            self.data = Storage::Owned(self.data().clone());
        }
        match &mut self.data {
            Storage::Owned(d) => d,
            Storage::Mapped(_) => unreachable!("made owned above"),
        }
    }

    /// The elements as typed storage. A tensor read from a mapped file makes its heap copy
    /// here, once (see the module docs).
    pub fn data(&self) -> &TensorData {
        match &self.data {
            Storage::Owned(d) => d,
            Storage::Mapped(m) => m.copy.get_or_init(|| TensorData::from_le_bytes(m.dtype, m.bytes())),
        }
    }

    pub fn into_data(self) -> TensorData {
        match self.data {
            Storage::Owned(d) => d,
            Storage::Mapped(m) => match Arc::try_unwrap(m) {
                Ok(mut m) => m.copy.take().unwrap_or_else(|| TensorData::from_le_bytes(m.dtype, m.bytes())),
                Err(m) => m.copy.get_or_init(|| TensorData::from_le_bytes(m.dtype, m.bytes())).clone(),
            },
        }
    }

    /// The elements' memory in native byte order (aligned for the dtype), wherever they are.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.data {
            Storage::Owned(d) => d.as_bytes(),
            Storage::Mapped(m) => m.bytes(),
        }
    }

    /// Every element widened to f64 (bool as 0/1, integers converted; 64-bit integers beyond
    /// 2^53 round).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data().to_f64_vec()
    }
}

impl TensorData {
    /// Every element widened to f64 (see [`Tensor::to_f64_vec`]).
    fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            TensorData::I8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::F64(v) => v.clone(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }
}

impl Tensor {
    /// The f32 elements, if this is an f32 tensor (read in place, mapped or not).
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Storage::Owned(TensorData::F32(v)) => Some(v),
            Storage::Mapped(m) if m.dtype == DType::F32 => {
                let b = m.bytes();
                // SAFETY: `from_mapping` kept these bytes in place only where they are aligned
                // for f32 and little-endian on a little-endian machine; any 4 bytes are an f32.
                Some(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<f32>(), b.len() / 4) })
            }
            _ => None,
        }
    }

    /// Element-by-element bitwise equality of shape, dtype and data (NaN equals the same NaN).
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        if self.shape != other.shape {
            return false;
        }
        // Same dtype and the same bytes (a memcmp; bools are stored as 0 and 1).
        self.dtype() == other.dtype() && self.bytes() == other.bytes()
    }
}

/// An element type a caller's buffer can have: `f32`, `f64`, `f16`, `bf16`, the signed and
/// unsigned integers of 8 to 64 bits, and `bool`. Sealed: the runtime reads these buffers as
/// plain bytes, which is sound only for types without padding whose every stored value is
/// valid.
pub trait Element: sealed::Sealed + Copy + 'static {
    /// The tensor element type of a buffer of `Self`.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            impl Element for $t {
                const DTYPE: DType = DType::$d;
            }
        )*
    };
}

elements!(
    f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, i16 => I16, i32 => I32,
    i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Bool,
);

/// A borrowed, read-only tensor: a caller's buffer and its shape, dense and row-major.
///
/// Runs take their inputs as views ([`crate::Plan::run_views`], [`crate::Session::run_views`])
/// so that an engine can run a model on buffers it owns (a frame, an audio block) without
/// copying them into a [`Tensor`]: the native plan reads a view's elements where they lie.
/// (The reference executor copies them: it is the oracle, not the fast path.) A `&Tensor`
/// converts into a view without a copy too.
///
/// ```
/// use ladder::TensorView;
/// let frame = vec![0.5f32; 2 * 3];
/// let view = TensorView::new(&frame, &[2, 3]).unwrap();
/// assert_eq!(view.shape(), &[2, 3]);
/// assert!(TensorView::new(&frame, &[4, 2]).is_err()); // 6 elements are not [4, 2]
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    dtype: DType,
    shape: &'a [usize],
    /// The elements' memory, aligned for `dtype` (a view is only made from a typed slice).
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// A view of `data` as a tensor of `shape`; an error when the shape's element count is not
    /// `data.len()`.
    pub fn new<T: Element>(data: &'a [T], shape: &'a [usize]) -> Result<TensorView<'a>, TensorError> {
        let expected = checked_numel(shape).ok_or_else(|| TensorError::TooLarge { shape: shape.to_vec() })?;
        if expected != data.len() {
            return Err(TensorError::LengthMismatch { shape: shape.to_vec(), expected, got: data.len() });
        }
        // SAFETY: `Element` is sealed to plain-data types without padding (floats, integers,
        // `f16`/`bf16` as u16, bool as one byte), so `data` is `size_of_val(data)` initialised
        // bytes, borrowed for `'a` as `data` is.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        Ok(TensorView { dtype: T::DTYPE, shape, bytes })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    pub fn numel(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes()
    }

    /// The elements' memory in native byte order (aligned for the dtype).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The f32 elements, if this is a view of f32s.
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        if self.dtype != DType::F32 {
            return None;
        }
        // SAFETY: an F32 view was made from a `&'a [f32]` (`new`, or a tensor's F32 data), so
        // the bytes are aligned f32s of that length.
        Some(unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<f32>(), self.bytes.len() / 4) })
    }

    /// An owned copy.
    pub fn to_tensor(&self) -> Tensor {
        fn typed<T: Copy>(b: &[u8]) -> Vec<T> {
            // SAFETY: the view's bytes are aligned `T`s (see `bytes`), every one a valid `T`.
            unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), b.len() / std::mem::size_of::<T>()) }.to_vec()
        }
        let b = self.bytes;
        let data = match self.dtype {
            DType::F32 => TensorData::F32(typed(b)),
            DType::F64 => TensorData::F64(typed(b)),
            DType::F16 => TensorData::F16(typed(b)),
            DType::BF16 => TensorData::BF16(typed(b)),
            DType::I32 => TensorData::I32(typed(b)),
            DType::I64 => TensorData::I64(typed(b)),
            DType::Bool => TensorData::Bool(typed(b)),
            DType::I8 => TensorData::I8(typed(b)),
            DType::I16 => TensorData::I16(typed(b)),
            DType::U8 => TensorData::U8(typed(b)),
            DType::U16 => TensorData::U16(typed(b)),
            DType::U32 => TensorData::U32(typed(b)),
            DType::U64 => TensorData::U64(typed(b)),
        };
        Tensor { shape: self.shape.to_vec(), data: Storage::Owned(data) }
    }
}

impl<'a> From<&'a Tensor> for TensorView<'a> {
    fn from(t: &'a Tensor) -> TensorView<'a> {
        TensorView { dtype: t.dtype(), shape: &t.shape, bytes: t.bytes() }
    }
}

/// The product of `shape`, or `None` on overflow.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl fmt::Display for Tensor {
    /// A short summary: dtype, shape and up to eight leading values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype(), self.shape)?;
        let shown = self.numel().min(8);
        f.write_str(" [")?;
        // The leading elements only: a mapped tensor is not copied whole to be shown.
        let head = match &self.data {
            Storage::Owned(d) => std::borrow::Cow::Borrowed(d),
            Storage::Mapped(m) => {
                std::borrow::Cow::Owned(TensorData::from_le_bytes(m.dtype, &m.bytes()[..shown * m.dtype.size_bytes()]))
            }
        };
        match head.as_ref() {
            TensorData::Bool(v) => {
                for (i, x) in v.iter().take(shown).enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
            }
            TensorData::U64(v) => {
                for (i, x) in v.iter().take(shown).enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
            }
            d if d.dtype().is_int() => {
                for (i, x) in d.ints().unwrap_or_default().iter().take(shown).enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
            }
            _ => {
                for (i, x) in head.to_f64_vec().iter().take(shown).enumerate() {
                    write!(f, "{}{x:.6}", if i > 0 { ", " } else { "" })?;
                }
            }
        }
        if self.numel() > shown {
            f.write_str(", ...")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping of a scratch file holding `bytes`.
    fn mapping_of(bytes: &[u8], name: &str) -> Arc<Mapping> {
        let path = std::env::temp_dir().join(format!("ladder-tensor-{name}-{}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let map = Mapping::map(&std::fs::File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        map
    }

    #[test]
    fn mapped_tensors_read_in_place_or_fall_back_to_a_copy() {
        let values = [1.5f32, -0.0, f32::NAN, f32::INFINITY, 3.0, -7.25];
        let mut bytes = vec![0u8; 4];
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend([1, 0, 1, 2]);
        let map = mapping_of(&bytes, "fallback");
        let want = Tensor::from_f32(&[2, 3], values.to_vec()).unwrap();

        // Aligned f32s: in place, the same bits as the owned tensor, through every accessor.
        let t = Tensor::from_mapping(vec![2, 3], DType::F32, &map, 4..28).unwrap();
        assert!(t.is_mapped() == cfg!(target_endian = "little"));
        assert!(t.bit_eq(&want) && want.bit_eq(&t));
        assert_eq!(t.as_f32().map(<[f32]>::len), Some(6));
        assert_eq!(t.to_string(), want.to_string());
        assert_eq!(t.numel(), 6);
        assert!(t.clone().is_mapped() == t.is_mapped());
        assert!(Tensor::new(vec![2, 3], t.clone().into_data()).unwrap().bit_eq(&want));
        assert!(TensorView::from(&t).to_tensor().bit_eq(&want));

        // Writing makes an owned copy first; the mapped file is never written.
        let mut w = t.clone();
        w.data_mut().as_bytes_mut().unwrap()[..4].copy_from_slice(&9.0f32.to_ne_bytes());
        assert!(!w.is_mapped() && w.as_f32().unwrap()[0] == 9.0);
        assert!(t.bit_eq(&want));

        // Misaligned f32s and a bool byte other than 0 or 1 are copied (a bool is any nonzero byte).
        let odd = Tensor::from_mapping(vec![1], DType::F32, &map, 5..9).unwrap();
        assert!(!odd.is_mapped());
        let bools = Tensor::from_mapping(vec![4], DType::Bool, &map, 28..32).unwrap();
        assert!(!bools.is_mapped());
        assert!(bools.bit_eq(&Tensor::from_bool(&[4], vec![true, false, true, true]).unwrap()));
        let valid = Tensor::from_mapping(vec![3], DType::Bool, &map, 28..31).unwrap();
        assert!(valid.is_mapped() == cfg!(target_endian = "little"));

        // A length that disagrees with the shape, or a range beyond the file, is an error.
        assert!(Tensor::from_mapping(vec![2, 3], DType::F32, &map, 4..24).is_err());
        assert!(Tensor::from_mapping(vec![2], DType::F32, &map, 28..36).is_err());
        assert!(Tensor::from_mapping(vec![usize::MAX, 2], DType::F32, &map, 4..28).is_err());
    }
}
