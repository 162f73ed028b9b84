//! Strided views over shared host storage: the interpreter's runtime values.
//!
//! A view is (storage, dtype, shape, strides, offset). Views made by view ops share their
//! base's storage, so a write through one is seen through every other: the true aliasing
//! semantics that functionalization must preserve. Storage is kept widened (floats as f64,
//! integers as i64, a u64 as its bit pattern) so each op is written once per dtype class;
//! every write rounds or wraps to the view's dtype, which makes the arithmetic that of the
//! op's own dtype. The few integer meanings that depend on signedness (order, division,
//! conversion to float) go through `int_cmp`, `int_to_f64` and the elementwise helpers.

use std::cell::RefCell;
use std::rc::Rc;

use super::{EvalCtx, EvalError};
use crate::ir::DType;
use crate::tensor::narrow::{bf16_from_f64, f16_from_f64};
use crate::tensor::{checked_numel, Tensor, TensorData};

/// Widened element storage.
#[derive(Clone, Debug)]
pub enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
    B(Vec<bool>),
}

/// A strided view over shared storage.
#[derive(Clone, Debug)]
pub struct View {
    storage: Rc<RefCell<Data>>,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
}

/// Rounds an f64 to what `dtype` can hold.
pub fn round_float(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16_from_f64(x).to_f64(),
        DType::BF16 => bf16_from_f64(x).to_f64(),
        _ => x,
    }
}

/// Wraps an i64 to what `dtype` can hold, two's complement style (a u64 keeps the bit
/// pattern, so it is the identity there as for i64).
pub fn wrap_int(dtype: DType, x: i64) -> i64 {
    match dtype {
        DType::I8 => x as i8 as i64,
        DType::I16 => x as i16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U8 => x as u8 as i64,
        DType::U16 => x as u16 as i64,
        DType::U32 => x as u32 as i64,
        _ => x,
    }
}

/// A stored integer of `dtype` as f64 (a u64 from its bit pattern; 64-bit values beyond 2^53
/// round to nearest).
pub fn int_to_f64(dtype: DType, x: i64) -> f64 {
    if dtype == DType::U64 {
        x as u64 as f64
    } else {
        x as f64
    }
}

/// The order of two stored integers of `dtype` (unsigned for u64's bit patterns).
pub fn int_cmp(dtype: DType, a: i64, b: i64) -> std::cmp::Ordering {
    if dtype == DType::U64 {
        (a as u64).cmp(&(b as u64))
    } else {
        a.cmp(&b)
    }
}

/// The smallest and largest stored value of an integer `dtype` (u64::MAX is stored as -1);
/// the i64 range for any other dtype.
pub fn int_limits(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::U64 => (0, -1),
        d => d.int_range().map_or((i64::MIN, i64::MAX), |(lo, hi)| (lo as i64, hi as i64)),
    }
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1) as isize);
    }
    strides
}

/// Calls `f` with the storage offset of every element of a strided view, in row-major order.
fn for_each_offset(shape: &[usize], strides: &[isize], offset: usize, mut f: impl FnMut(usize)) {
    if shape.contains(&0) {
        return;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut pos = offset as isize;
    loop {
        f(pos as usize);
        let mut axis = rank;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            idx[axis] += 1;
            // Wrapping: past the last index of an axis `pos` may leave the isize range (a
            // slice with a huge step has a huge stride over one element); it is brought back
            // just below, and every offset actually visited is in range.
            pos = pos.wrapping_add(strides[axis]);
            if idx[axis] < shape[axis] {
                break;
            }
            pos = pos.wrapping_sub(strides[axis].wrapping_mul(shape[axis] as isize));
            idx[axis] = 0;
        }
    }
}

impl View {
    fn contiguous(dtype: DType, shape: Vec<usize>, data: Data) -> View {
        let strides = contiguous_strides(&shape);
        View { storage: Rc::new(RefCell::new(data)), dtype, shape, strides, offset: 0 }
    }

    /// A new contiguous float tensor; values are rounded to `dtype` unless `ctx` is precise.
    pub fn from_floats(ctx: &EvalCtx, dtype: DType, shape: Vec<usize>, mut values: Vec<f64>) -> View {
        debug_assert_eq!(checked_numel(&shape), Some(values.len()));
        if !ctx.precise {
            for x in &mut values {
                *x = round_float(dtype, *x);
            }
        }
        View::contiguous(dtype, shape, Data::F(values))
    }

    /// A new contiguous integer tensor; values wrap to `dtype`.
    pub fn from_ints(dtype: DType, shape: Vec<usize>, mut values: Vec<i64>) -> View {
        debug_assert_eq!(checked_numel(&shape), Some(values.len()));
        for x in &mut values {
            *x = wrap_int(dtype, *x);
        }
        View::contiguous(dtype, shape, Data::I(values))
    }

    pub fn from_bools(shape: Vec<usize>, values: Vec<bool>) -> View {
        debug_assert_eq!(checked_numel(&shape), Some(values.len()));
        View::contiguous(DType::Bool, shape, Data::B(values))
    }

    /// A new tensor of `dtype` from values given as f64, converted the way
    /// `convert_element_type` converts (floats round, integers truncate and saturate, NaN → 0,
    /// bool is `x != 0`).
    pub fn from_f64_as(ctx: &EvalCtx, dtype: DType, shape: Vec<usize>, values: Vec<f64>) -> View {
        if dtype.is_float() {
            View::from_floats(ctx, dtype, shape, values)
        } else if dtype.is_int() {
            View::from_ints(dtype, shape, values.into_iter().map(|x| float_to_int_as(dtype, x)).collect())
        } else {
            View::from_bools(shape, values.into_iter().map(|x| x != 0.0).collect())
        }
    }

    /// A copy of a host tensor (floats widen exactly).
    pub fn from_tensor(t: &Tensor) -> View {
        let shape = t.shape().to_vec();
        let dtype = t.dtype();
        let data = match t.data() {
            TensorData::Bool(v) => Data::B(v.clone()),
            d => match d.ints() {
                Some(v) => Data::I(v),
                None => Data::F(t.to_f64_vec()),
            },
        };
        View::contiguous(dtype, shape, data)
    }

    /// A contiguous host tensor of the view's dtype holding its elements.
    pub fn to_tensor(&self) -> Tensor {
        let shape = self.shape.clone();
        let data = match self.dtype {
            DType::F32 => TensorData::F32(self.floats().into_iter().map(|x| x as f32).collect()),
            DType::F64 => TensorData::F64(self.floats()),
            DType::F16 => TensorData::F16(self.floats().into_iter().map(f16_from_f64).collect()),
            DType::BF16 => TensorData::BF16(self.floats().into_iter().map(bf16_from_f64).collect()),
            DType::Bool => TensorData::Bool(self.bools()),
            d => TensorData::from_ints(d, self.ints()).unwrap_or_else(|| unreachable!("{d} is an integer type")),
        };
        // The shape and the data length agree by construction.
        Tensor::new(shape, data).unwrap_or_else(|e| panic!("view to tensor: {e}"))
    }

    /// The same elements as f64 storage (precise mode's view of a float input).
    pub fn widened_to_f64(&self) -> View {
        match self.dtype {
            d if d.is_float() => View::contiguous(DType::F64, self.shape.clone(), Data::F(self.floats())),
            _ => self.clone(),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when two views share storage.
    pub fn shares_storage(&self, other: &View) -> bool {
        Rc::ptr_eq(&self.storage, &other.storage)
    }

    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for i in (0..self.rank()).rev() {
            if self.shape[i] != 1 && self.strides[i] != expected {
                return false;
            }
            expected *= self.shape[i] as isize;
        }
        true
    }

    /// A view of the same storage with another shape, strides and offset. The caller
    /// guarantees every addressed element lies inside the storage (view ops derive the new
    /// layout from the old one, which is checked in debug builds).
    pub fn restride(&self, shape: Vec<usize>, strides: Vec<isize>, offset: usize) -> View {
        debug_assert_eq!(shape.len(), strides.len());
        View { storage: Rc::clone(&self.storage), dtype: self.dtype, shape, strides, offset }
    }

    /// Same storage and layout, another dtype label. Only for dtypes of one storage class.
    pub fn relabel(&self, dtype: DType) -> View {
        View { dtype, ..self.clone() }
    }

    fn offsets(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.numel());
        for_each_offset(&self.shape, &self.strides, self.offset, |p| out.push(p));
        out
    }

    /// Elements in row-major order as f64 (integers and bools converted).
    pub fn floats(&self) -> Vec<f64> {
        let storage = self.storage.borrow();
        let offs = self.offsets();
        match &*storage {
            Data::F(v) => offs.iter().map(|&p| v[p]).collect(),
            Data::I(v) => offs.iter().map(|&p| int_to_f64(self.dtype, v[p])).collect(),
            Data::B(v) => offs.iter().map(|&p| v[p] as u8 as f64).collect(),
        }
    }

    /// Elements in row-major order as i64 (bools as 0/1; floats truncate, NaN → 0).
    pub fn ints(&self) -> Vec<i64> {
        let storage = self.storage.borrow();
        let offs = self.offsets();
        match &*storage {
            Data::F(v) => offs.iter().map(|&p| float_to_int(v[p])).collect(),
            Data::I(v) => offs.iter().map(|&p| v[p]).collect(),
            Data::B(v) => offs.iter().map(|&p| v[p] as i64).collect(),
        }
    }

    /// Elements in row-major order as bool (`x != 0`).
    pub fn bools(&self) -> Vec<bool> {
        let storage = self.storage.borrow();
        let offs = self.offsets();
        match &*storage {
            Data::F(v) => offs.iter().map(|&p| v[p] != 0.0).collect(),
            Data::I(v) => offs.iter().map(|&p| v[p] != 0).collect(),
            Data::B(v) => offs.iter().map(|&p| v[p]).collect(),
        }
    }

    /// A contiguous copy with its own storage.
    pub fn copy(&self) -> View {
        let data = match &*self.storage.borrow() {
            Data::F(_) => Data::F(self.floats()),
            Data::I(_) => Data::I(self.ints()),
            Data::B(_) => Data::B(self.bools()),
        };
        View::contiguous(self.dtype, self.shape.clone(), data)
    }

    /// True when two different indices of the view address one storage element, which makes
    /// an in-place write through it ill-defined (PyTorch refuses it too).
    pub fn has_internal_overlap(&self) -> bool {
        let mut offs = self.offsets();
        let n = offs.len();
        offs.sort_unstable();
        offs.dedup();
        offs.len() != n
    }

    /// Writes `src` (same shape, any dtype) into this view's elements, converting to this
    /// view's dtype as `convert_element_type` does. Errors if the view overlaps itself.
    pub fn write(&self, ctx: &EvalCtx, src: &View) -> Result<(), EvalError> {
        if src.shape != self.shape {
            return Err(EvalError::Invalid(format!(
                "write of shape {:?} into a view of shape {:?}",
                src.shape, self.shape
            )));
        }
        if self.has_internal_overlap() {
            return Err(EvalError::OverlappingWrite);
        }
        // Read first, so a source aliasing the destination sees the old values.
        let offs = self.offsets();
        match self.dtype {
            d if d.is_float() => {
                let vals = src.floats();
                let mut storage = self.storage.borrow_mut();
                if let Data::F(dst) = &mut *storage {
                    for (p, x) in offs.into_iter().zip(vals) {
                        dst[p] = if ctx.precise { x } else { round_float(d, x) };
                    }
                }
            }
            d if d.is_int() => {
                // Floats saturate at the destination's own range, as `convert_element_type`.
                let vals: Vec<i64> = if src.dtype.is_float() {
                    src.floats().into_iter().map(|x| float_to_int_as(d, x)).collect()
                } else {
                    src.ints()
                };
                let mut storage = self.storage.borrow_mut();
                if let Data::I(dst) = &mut *storage {
                    for (p, x) in offs.into_iter().zip(vals) {
                        dst[p] = wrap_int(d, x);
                    }
                }
            }
            _ => {
                let vals = src.bools();
                let mut storage = self.storage.borrow_mut();
                if let Data::B(dst) = &mut *storage {
                    for (p, x) in offs.into_iter().zip(vals) {
                        dst[p] = x;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Float to i64 the way `convert_element_type` defines it: truncate toward zero, saturate at
/// the i64 range, NaN → 0 (Rust's `as`).
pub fn float_to_int(x: f64) -> i64 {
    x as i64
}

/// Float to an integer dtype: truncate toward zero, saturate at that dtype's range, NaN → 0
/// (a u64 result is stored as its bit pattern).
pub fn float_to_int_as(dtype: DType, x: f64) -> i64 {
    match dtype {
        DType::I8 => x as i8 as i64,
        DType::I16 => x as i16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U8 => x as u8 as i64,
        DType::U16 => x as u16 as i64,
        DType::U32 => x as u32 as i64,
        DType::U64 => x as u64 as i64,
        _ => x as i64,
    }
}
