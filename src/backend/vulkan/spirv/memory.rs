//! Loads and stores of buffer elements: whole words (f32, i32, u32 widened, 64-bit), and
//! elements packed into 32-bit words (bool, 8- and 16-bit integers, f16 and bf16), whose
//! stores go through atomics. f16 and bf16 registers are f32 values on the half type's grid:
//! [`Cx::round_half`] rounds a result there (to nearest, ties to even, f16's subnormals
//! kept), and the loads and stores convert exactly between the grid and the 16-bit patterns.

use rspirv::spirv::{self, Word};

use super::{failed, packed_bits, Base, Cx};
use crate::backend::Declined;
use crate::ir::DType;
use crate::kernel::BufferId;

impl Cx<'_> {
    /// Element `at` (i64) of `buf`, as a register of the buffer's dtype.
    pub(super) fn load_elem(&mut self, buf: BufferId, at: Word) -> Result<Word, Declined> {
        let dt = self.bound(buf)?.dtype;
        let Some(bits) = packed_bits(dt) else {
            let (p, _) = self.element_ptr(buf, at)?;
            if dt == DType::U32 {
                // A word, zero-extended into the i64 register.
                let w = self.b.load(self.t_u32, None, p, None, []).map_err(failed)?;
                let wide = self.b.u_convert(self.t_u64, None, w).map_err(failed)?;
                return self.b.bitcast(self.t_i64, None, wide).map_err(failed);
            }
            let ty = self.ty(dt);
            return self.b.load(ty, None, p, None, []).map_err(failed);
        };
        let (p, shift) = self.sub_word(buf, at, bits)?;
        let w = self.b.load(self.t_u32, None, p, None, []).map_err(failed)?;
        let low = self.b.shift_right_logical(self.t_u32, None, w, shift).map_err(failed)?;
        let mask = self.u32c((1u32 << bits) - 1);
        let low = self.b.bitwise_and(self.t_u32, None, low, mask).map_err(failed)?;
        if dt == DType::Bool {
            let zero = self.u32c(0);
            return self.b.i_not_equal(self.t_bool, None, low, zero).map_err(failed);
        }
        if is_half(dt) {
            return self.half_to_f32(low, dt);
        }
        let v = self.b.bitcast(self.t_i32, None, low).map_err(failed)?;
        self.wrap(v, dt)
    }

    /// Stores register `v` at element `at` of `buf`. An element packed with others into a
    /// word (bool, 8- and 16-bit integers) is written into its bits of the word with two
    /// atomic operations (clear, then set), so invocations writing the other elements of the
    /// word at the same time keep theirs.
    pub(super) fn store_elem(&mut self, buf: BufferId, at: Word, v: Word) -> Result<(), Declined> {
        let dt = self.bound(buf)?.dtype;
        let Some(bits) = packed_bits(dt) else {
            let (p, _) = self.element_ptr(buf, at)?;
            let v = if dt == DType::U32 {
                let bits = self.b.bitcast(self.t_u64, None, v).map_err(failed)?;
                self.b.u_convert(self.t_u32, None, bits).map_err(failed)?
            } else {
                v
            };
            return self.b.store(p, v, None, []).map_err(failed);
        };
        let (p, shift) = self.sub_word(buf, at, bits)?;
        let t = self.t_u32;
        let ones = self.u32c((1u32 << bits) - 1);
        let mask = self.b.shift_left_logical(t, None, ones, shift).map_err(failed)?;
        let keep = self.b.not(t, None, mask).map_err(failed)?;
        let low = if dt == DType::Bool {
            let (one, zero) = (self.u32c(1), self.u32c(0));
            self.b.select(t, None, v, one, zero).map_err(failed)?
        } else if is_half(dt) {
            self.f32_to_half(v, dt)?
        } else {
            let w = self.b.bitcast(t, None, v).map_err(failed)?;
            self.b.bitwise_and(t, None, w, ones).map_err(failed)?
        };
        let set = self.b.shift_left_logical(t, None, low, shift).map_err(failed)?;
        let scope = self.u32c(spirv::Scope::Device as u32);
        let relaxed = self.u32c(0);
        self.b.atomic_and(t, None, p, scope, relaxed, keep).map_err(failed)?;
        self.b.atomic_or(t, None, p, scope, relaxed, set).map_err(failed)?;
        Ok(())
    }

    /// The word holding element `at` of `buf`, whose elements are `bits` wide (8 or 16), and
    /// the element's bit offset in it.
    fn sub_word(&mut self, buf: BufferId, at: Word, bits: u32) -> Result<(Word, Word), Declined> {
        let per_word = 32 / bits;
        let log = self.i64c(i64::from(per_word.trailing_zeros()));
        let word = self.b.shift_right_arithmetic(self.t_i64, None, at, log).map_err(failed)?;
        let last = self.i64c(i64::from(per_word - 1));
        let index = self.b.bitwise_and(self.t_i64, None, at, last).map_err(failed)?;
        let index = self.b.s_convert(self.t_i32, None, index).map_err(failed)?;
        let index = self.b.bitcast(self.t_u32, None, index).map_err(failed)?;
        let width = self.u32c(bits);
        let shift = self.b.i_mul(self.t_u32, None, index, width).map_err(failed)?;
        let (p, _) = self.element_ptr(buf, word)?;
        Ok((p, shift))
    }

    fn element_ptr(&mut self, buf: BufferId, at: Word) -> Result<(Word, DType), Declined> {
        let (var, elem_ptr, dtype, base, base_word) = {
            let b = self.bound(buf)?;
            (b.var, b.elem_ptr, b.dtype, b.base, b.base_word)
        };
        // In a pool of constants: past the members before it; in the arena: where the size
        // table says.
        let base = match (base, base_word) {
            (Base::Fixed(0), _) => None,
            (Base::Fixed(k), _) => Some(self.constant(DType::I64, k)),
            (Base::Table, Some(w)) => Some(w),
            (Base::Table, None) => return Err(Declined::Defect(format!("{buf}'s arena offset is not loaded"))),
        };
        let at = match base {
            None => at,
            Some(base) => self.b.i_add(self.t_i64, None, at, base).map_err(failed)?,
        };
        let zero = self.u32c(0);
        Ok((self.b.access_chain(elem_ptr, None, var, [zero, at]).map_err(failed)?, dtype))
    }

    /// An f64 register converted to f32 rounded to odd (toward zero, the last bit set where
    /// that was inexact), whichever way the device's conversion rounds: rounding that to f16
    /// or bf16 (`round_half`) is then the one correct rounding of the f64 value, where going
    /// through the nearest f32 could round twice. Past f32's range the result is its largest
    /// value (odd), which both half types round to infinity; NaN stays NaN.
    pub(super) fn f64_to_f32_odd(&mut self, x: Word) -> Result<Word, Declined> {
        let (t, u, f) = (self.t_bool, self.t_u32, self.t_f32);
        let y = self.b.f_convert(f, None, x).map_err(failed)?;
        let back = self.b.f_convert(self.t_f64, None, y).map_err(failed)?;
        let inexact = self.b.f_ord_not_equal(t, None, back, x).map_err(failed)?;
        let ax = self.glsl(self.t_f64, spirv::GLOp::FAbs, &[x])?;
        let aback = self.glsl(self.t_f64, spirv::GLOp::FAbs, &[back])?;
        let away = self.b.f_ord_greater_than(t, None, aback, ax).map_err(failed)?;
        // Toward zero: one step down in magnitude where the conversion went away from zero.
        let bits = self.b.bitcast(u, None, y).map_err(failed)?;
        let one = self.u32c(1);
        let down = self.b.i_sub(u, None, bits, one).map_err(failed)?;
        let bits = self.b.select(u, None, away, down, bits).map_err(failed)?;
        let odd = self.b.bitwise_or(u, None, bits, one).map_err(failed)?;
        let bits = self.b.select(u, None, inexact, odd, bits).map_err(failed)?;
        self.b.bitcast(f, None, bits).map_err(failed)
    }

    /// An f32 register rounded to `dt`'s grid (f16 or bf16; others as they are): to nearest,
    /// ties to even, past the largest finite value to infinity, NaN kept; for f16 below
    /// `2^-14` onto its subnormals (`|x| + 1/2 - 1/2` rounds to a multiple of `2^-24`).
    pub(super) fn round_half(&mut self, v: Word, dt: DType) -> Result<Word, Declined> {
        if !is_half(dt) {
            return Ok(v);
        }
        let (t, u, f) = (self.t_bool, self.t_u32, self.t_f32);
        let bits = self.b.bitcast(u, None, v).map_err(failed)?;
        let abs_mask = self.u32c(0x7fff_ffff);
        let abs = self.b.bitwise_and(u, None, bits, abs_mask).map_err(failed)?;
        let sign = self.b.bitwise_xor(u, None, bits, abs).map_err(failed)?;
        let (drop, grid) = if dt == DType::F16 { (13, 0xffff_e000u32) } else { (16, 0xffff_0000) };
        // The nearest grid point above or below: the dropped bits rounded, ties to even.
        let k = self.u32c(drop);
        let lsb = self.b.shift_right_logical(u, None, bits, k).map_err(failed)?;
        let one = self.u32c(1);
        let lsb = self.b.bitwise_and(u, None, lsb, one).map_err(failed)?;
        let half_ulp = self.u32c((1 << (drop - 1)) - 1);
        let bias = self.b.i_add(u, None, half_ulp, lsb).map_err(failed)?;
        let r = self.b.i_add(u, None, bits, bias).map_err(failed)?;
        let grid = self.u32c(grid);
        let mut r = self.b.bitwise_and(u, None, r, grid).map_err(failed)?;
        if dt == DType::F16 {
            // Past 65504 (rounded up to 2^16) is infinity; below 2^-14, the subnormals.
            let r_abs = self.b.bitwise_and(u, None, r, abs_mask).map_err(failed)?;
            let big = self.u32c(0x4780_0000);
            let over = self.b.u_greater_than_equal(t, None, r_abs, big).map_err(failed)?;
            let inf = self.u32c(0x7f80_0000);
            let inf = self.b.bitwise_or(u, None, sign, inf).map_err(failed)?;
            r = self.b.select(u, None, over, inf, r).map_err(failed)?;
            let small = self.u32c(0x3880_0000);
            let sub = self.b.u_less_than(t, None, abs, small).map_err(failed)?;
            let a = self.b.bitcast(f, None, abs).map_err(failed)?;
            let h = self.f32c(0.5);
            let a = self.b.f_add(f, None, a, h).map_err(failed)?;
            let a = self.b.f_sub(f, None, a, h).map_err(failed)?;
            let a = self.b.bitcast(u, None, a).map_err(failed)?;
            let a = self.b.bitwise_or(u, None, a, sign).map_err(failed)?;
            r = self.b.select(u, None, sub, a, r).map_err(failed)?;
        }
        let r = self.b.bitcast(f, None, r).map_err(failed)?;
        let nan = self.b.is_nan(t, None, v).map_err(failed)?;
        self.b.select(f, None, nan, v, r).map_err(failed)
    }

    /// The f32 value of the 16-bit pattern `h` (a u32) of `dt` (f16 or bf16): exact.
    fn half_to_f32(&mut self, h: Word, dt: DType) -> Result<Word, Declined> {
        let (t, u, f) = (self.t_bool, self.t_u32, self.t_f32);
        if dt == DType::BF16 {
            let k = self.u32c(16);
            let bits = self.b.shift_left_logical(u, None, h, k).map_err(failed)?;
            return self.b.bitcast(f, None, bits).map_err(failed);
        }
        let sign_mask = self.u32c(0x8000);
        let sign = self.b.bitwise_and(u, None, h, sign_mask).map_err(failed)?;
        let k16 = self.u32c(16);
        let sign = self.b.shift_left_logical(u, None, sign, k16).map_err(failed)?;
        let abs_mask = self.u32c(0x7fff);
        let abs = self.b.bitwise_and(u, None, h, abs_mask).map_err(failed)?;
        let k13 = self.u32c(13);
        let moved = self.b.shift_left_logical(u, None, abs, k13).map_err(failed)?;
        // Normal: the exponent rebiased (127 - 15 = 112).
        let rebias = self.u32c(112 << 23);
        let normal = self.b.i_add(u, None, moved, rebias).map_err(failed)?;
        // Infinity and NaN: the f32 exponent all ones, the mantissa moved up.
        let ones = self.u32c(0x7f80_0000);
        let special = self.b.bitwise_or(u, None, moved, ones).map_err(failed)?;
        let exp_ones = self.u32c(0x7c00);
        let is_special = self.b.u_greater_than_equal(t, None, abs, exp_ones).map_err(failed)?;
        let r = self.b.select(u, None, is_special, special, normal).map_err(failed)?;
        // Zero and subnormal: the mantissa times 2^-24.
        let min_normal = self.u32c(0x0400);
        let is_sub = self.b.u_less_than(t, None, abs, min_normal).map_err(failed)?;
        let m = self.b.convert_u_to_f(f, None, abs).map_err(failed)?;
        let scale = self.f32c(1.0 / 16_777_216.0);
        let m = self.b.f_mul(f, None, m, scale).map_err(failed)?;
        let m = self.b.bitcast(u, None, m).map_err(failed)?;
        let r = self.b.select(u, None, is_sub, m, r).map_err(failed)?;
        let r = self.b.bitwise_or(u, None, r, sign).map_err(failed)?;
        self.b.bitcast(f, None, r).map_err(failed)
    }

    /// The 16-bit pattern (a u32) of `v`, an f32 register on `dt`'s grid (f16 or bf16): exact;
    /// NaN is the quiet NaN of its sign.
    fn f32_to_half(&mut self, v: Word, dt: DType) -> Result<Word, Declined> {
        let (t, u, f) = (self.t_bool, self.t_u32, self.t_f32);
        let bits = self.b.bitcast(u, None, v).map_err(failed)?;
        let k16 = self.u32c(16);
        if dt == DType::BF16 {
            let nan = self.b.is_nan(t, None, v).map_err(failed)?;
            let h = self.b.shift_right_logical(u, None, bits, k16).map_err(failed)?;
            let sign_mask = self.u32c(0x8000);
            let sign = self.b.bitwise_and(u, None, h, sign_mask).map_err(failed)?;
            let quiet = self.u32c(0x7fc0);
            let quiet = self.b.bitwise_or(u, None, sign, quiet).map_err(failed)?;
            return self.b.select(u, None, nan, quiet, h).map_err(failed);
        }
        let abs_mask = self.u32c(0x7fff_ffff);
        let abs = self.b.bitwise_and(u, None, bits, abs_mask).map_err(failed)?;
        let sign = self.b.bitwise_xor(u, None, bits, abs).map_err(failed)?;
        let sign = self.b.shift_right_logical(u, None, sign, k16).map_err(failed)?;
        let k13 = self.u32c(13);
        let moved = self.b.shift_right_logical(u, None, abs, k13).map_err(failed)?;
        let rebias = self.u32c(112 << 10);
        let normal = self.b.i_sub(u, None, moved, rebias).map_err(failed)?;
        let small = self.u32c(0x3880_0000);
        let is_sub = self.b.u_less_than(t, None, abs, small).map_err(failed)?;
        let a = self.b.bitcast(f, None, abs).map_err(failed)?;
        let scale = self.f32c(16_777_216.0);
        let a = self.b.f_mul(f, None, a, scale).map_err(failed)?;
        let sub = self.b.convert_f_to_u(u, None, a).map_err(failed)?;
        let r = self.b.select(u, None, is_sub, sub, normal).map_err(failed)?;
        let inf = self.u32c(0x7f80_0000);
        let is_inf = self.b.i_equal(t, None, abs, inf).map_err(failed)?;
        let h_inf = self.u32c(0x7c00);
        let r = self.b.select(u, None, is_inf, h_inf, r).map_err(failed)?;
        let is_nan = self.b.u_greater_than(t, None, abs, inf).map_err(failed)?;
        let h_nan = self.u32c(0x7e00);
        let r = self.b.select(u, None, is_nan, h_nan, r).map_err(failed)?;
        self.b.bitwise_or(u, None, r, sign).map_err(failed)
    }
}

/// f16 or bf16: f32 registers on the type's grid, 16-bit elements in buffers.
pub(super) fn is_half(dt: DType) -> bool {
    matches!(dt, DType::F16 | DType::BF16)
}
