//! Host tensors: what callers pass in and get back, and what constants (blobs) hold.
//!
//! A `Tensor` is dense and row-major. Its data is typed storage, so a caller's `Vec<f32>`
//! moves in without conversion.

use std::fmt;

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

/// A dense row-major host tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor, TensorError> {
        let expected = checked_numel(&shape).ok_or_else(|| TensorError::TooLarge { shape: shape.clone() })?;
        if expected != data.len() {
            return Err(TensorError::LengthMismatch { shape, expected, got: data.len() });
        }
        Ok(Tensor { shape, data })
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
            DType::F16 => TensorData::F16(values.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::BF16 => TensorData::BF16(values.iter().map(|&x| bf16::from_f64(x)).collect()),
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
        Tensor { shape: Vec::new(), data: TensorData::F32(Vec::new()) }
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor { shape: Vec::new(), data: TensorData::F32(vec![v]) }
    }

    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor, TensorError> {
        let n = checked_numel(shape).ok_or_else(|| TensorError::TooLarge { shape: shape.to_vec() })?;
        Ok(Tensor { shape: shape.to_vec(), data: TensorData::zeros(dtype, n) })
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The data, writable in place (its length must not change: the shape describes it).
    pub(crate) fn data_mut(&mut self) -> &mut TensorData {
        &mut self.data
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// Every element widened to f64 (bool as 0/1, integers converted; 64-bit integers beyond
    /// 2^53 round).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
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

    /// The f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Element-by-element bitwise equality of shape, dtype and data (NaN equals the same NaN).
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        if self.shape != other.shape {
            return false;
        }
        // Same dtype and the same bytes (a memcmp; bools are stored as 0 and 1).
        self.data.dtype() == other.data.dtype() && self.data.as_bytes() == other.data.as_bytes()
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
        Tensor { shape: self.shape.to_vec(), data }
    }
}

impl<'a> From<&'a Tensor> for TensorView<'a> {
    fn from(t: &'a Tensor) -> TensorView<'a> {
        TensorView { dtype: t.dtype(), shape: &t.shape, bytes: t.data.as_bytes() }
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
        match &self.data {
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
                for (i, x) in self.to_f64_vec().iter().take(shown).enumerate() {
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
