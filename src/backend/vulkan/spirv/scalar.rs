//! The scalar instructions of the lowering: the prims' meanings on f32, integer and bool
//! registers (`max`/`min` with NaN and signed zeros, saturating conversions, non-trapping
//! integer division, integers wrapped to their dtype, u64 ordered as unsigned), and feeding
//! accumulators.

use rspirv::spirv::{self, Word};

use super::{failed, unsupported, wide, AccVars, Cx, Status};
use crate::backend::cpu::math;
use crate::backend::Declined;
use crate::ir::DType;
use crate::kernel::{ReduceOp, Scalar};
use crate::ops::OpKind;

impl Cx<'_> {
    /// Register `v` of an integer dtype `dt` wrapped to `dt`'s range after an operation that
    /// may have left it (the register's own width wraps by itself): sign-extended from its
    /// low bits for i8 and i16, masked for u8, u16 and u32.
    pub(super) fn wrap(&mut self, v: Word, dt: DType) -> Result<Word, Declined> {
        let (ty, narrow) = match dt {
            DType::I8 => (self.t_i32, 24),
            DType::I16 => (self.t_i32, 16),
            DType::U8 => return self.mask(v, 0xff),
            DType::U16 => return self.mask(v, 0xffff),
            DType::U32 => {
                let m = self.constant(DType::I64, 0xffff_ffff);
                return self.b.bitwise_and(self.t_i64, None, v, m).map_err(failed);
            }
            _ => return Ok(v),
        };
        let k = self.constant(DType::I32, narrow);
        let high = self.b.shift_left_logical(ty, None, v, k).map_err(failed)?;
        self.b.shift_right_arithmetic(ty, None, high, k).map_err(failed)
    }

    fn mask(&mut self, v: Word, m: u64) -> Result<Word, Declined> {
        let m = self.constant(DType::I32, m);
        self.b.bitwise_and(self.t_i32, None, v, m).map_err(failed)
    }

    /// `a > b` (or `<`, ...) on integer registers of `dt`: unsigned for u64's bits, signed
    /// otherwise (every other dtype's register holds its value).
    fn int_compare(&mut self, op: OpKind, a: Word, b: Word, dt: DType) -> Result<Word, Declined> {
        use OpKind::*;
        let t = self.t_bool;
        let u = dt == DType::U64;
        match op {
            Eq => self.b.i_equal(t, None, a, b),
            Ne => self.b.i_not_equal(t, None, a, b),
            Lt if u => self.b.u_less_than(t, None, a, b),
            Le if u => self.b.u_less_than_equal(t, None, a, b),
            Gt if u => self.b.u_greater_than(t, None, a, b),
            Ge if u => self.b.u_greater_than_equal(t, None, a, b),
            Lt => self.b.s_less_than(t, None, a, b),
            Le => self.b.s_less_than_equal(t, None, a, b),
            Gt => self.b.s_greater_than(t, None, a, b),
            _ => self.b.s_greater_than_equal(t, None, a, b),
        }
        .map_err(failed)
    }

    /// `max` or `min` of integer registers of `dt`.
    fn int_max_min(&mut self, max: bool, a: Word, b: Word, dt: DType) -> Result<Word, Declined> {
        let op = match (max, dt == DType::U64) {
            (true, true) => spirv::GLOp::UMax,
            (true, false) => spirv::GLOp::SMax,
            (false, true) => spirv::GLOp::UMin,
            (false, false) => spirv::GLOp::SMin,
        };
        let ty = self.ty(dt);
        self.glsl(ty, op, &[a, b])
    }

    /// `a ^ b` on integer registers of `dt`, as the reference computes it: squaring and
    /// multiplying over the exponent's bits (unrolled, wrapping in the register, then wrapped
    /// to `dt`); for a negative exponent (signed dtypes), 1 for `a = 1`, ±1 for `a = -1`, 0
    /// for other bases, and for `a = 0` the division-by-zero error.
    fn int_pow(&mut self, a: Word, b: Word, dt: DType) -> Result<Word, Declined> {
        let (ty, t) = (self.ty(dt), self.t_bool);
        let (zero, one) = (self.scalar(dt, Scalar::Int(0)), self.scalar(dt, Scalar::Int(1)));
        // The register's own 1 (not wrapped to dt: u8's registers are i32 too).
        let unit = if wide(dt) { self.constant(DType::I64, 1) } else { self.constant(DType::I32, 1) };
        let (mut result, mut base, mut e) = (one, a, b);
        for _ in 0..if wide(dt) { 64 } else { 32 } {
            let bit = self.b.bitwise_and(ty, None, e, unit).map_err(failed)?;
            let set = self.b.i_not_equal(t, None, bit, zero).map_err(failed)?;
            let product = self.b.i_mul(ty, None, result, base).map_err(failed)?;
            result = self.b.select(ty, None, set, product, result).map_err(failed)?;
            base = self.b.i_mul(ty, None, base, base).map_err(failed)?;
            e = self.b.shift_right_logical(ty, None, e, unit).map_err(failed)?;
        }
        if dt.is_signed_int() {
            let negative = self.b.s_less_than(t, None, b, zero).map_err(failed)?;
            let base_zero = self.b.i_equal(t, None, a, zero).map_err(failed)?;
            let bad = self.b.logical_and(t, None, negative, base_zero).map_err(failed)?;
            self.flag(bad, Status::DivisionByZero)?;
            let m1 = self.scalar(dt, Scalar::Int(-1));
            let base_one = self.b.i_equal(t, None, a, one).map_err(failed)?;
            let base_m1 = self.b.i_equal(t, None, a, m1).map_err(failed)?;
            let low = self.b.bitwise_and(ty, None, b, unit).map_err(failed)?;
            let odd = self.b.i_not_equal(t, None, low, zero).map_err(failed)?;
            let signed_one = self.b.select(ty, None, odd, m1, one).map_err(failed)?;
            let r = self.b.select(ty, None, base_m1, signed_one, zero).map_err(failed)?;
            let r = self.b.select(ty, None, base_one, one, r).map_err(failed)?;
            result = self.b.select(ty, None, negative, r, result).map_err(failed)?;
        }
        self.wrap(result, dt)
    }

    pub(super) fn feed(
        &mut self,
        op: ReduceOp,
        dt: DType,
        vars: AccVars,
        x: Word,
        pos: Option<Word>,
    ) -> Result<(), Declined> {
        // f16 and bf16 accumulate in f32, each step rounded back to their grid.
        let (stored, dt) = (dt, super::calc(dt));
        let ty = self.ty(dt);
        let a = self.b.load(ty, None, vars.value, None, []).map_err(failed)?;
        if op == ReduceOp::Argmax {
            let seen = self.b.load(self.t_bool, None, vars.seen, None, []).map_err(failed)?;
            let better = if dt == DType::F32 {
                let best_nan = self.b.is_nan(self.t_bool, None, a).map_err(failed)?;
                let x_nan = self.b.is_nan(self.t_bool, None, x).map_err(failed)?;
                let gt = self.b.f_ord_greater_than(self.t_bool, None, x, a).map_err(failed)?;
                let up = self.b.logical_or(self.t_bool, None, x_nan, gt).map_err(failed)?;
                let keep = self.b.logical_not(self.t_bool, None, best_nan).map_err(failed)?;
                self.b.logical_and(self.t_bool, None, keep, up).map_err(failed)?
            } else if dt == DType::Bool {
                let na = self.b.logical_not(self.t_bool, None, a).map_err(failed)?;
                self.b.logical_and(self.t_bool, None, x, na).map_err(failed)?
            } else {
                self.int_compare(OpKind::Gt, x, a, dt)?
            };
            let first = self.b.logical_not(self.t_bool, None, seen).map_err(failed)?;
            let take = self.b.logical_or(self.t_bool, None, first, better).map_err(failed)?;
            let v = self.b.select(ty, None, take, x, a).map_err(failed)?;
            self.b.store(vars.value, v, None, []).map_err(failed)?;
            let pos = pos.ok_or_else(|| Declined::Defect("argmax fed without a position".into()))?;
            let best = self.b.load(self.t_i64, None, vars.aux, None, []).map_err(failed)?;
            let p = self.b.select(self.t_i64, None, take, pos, best).map_err(failed)?;
            self.b.store(vars.aux, p, None, []).map_err(failed)?;
            let t = self.constant(DType::Bool, 1);
            self.b.store(vars.seen, t, None, []).map_err(failed)?;
            return Ok(());
        }
        let v = match (op, dt) {
            (ReduceOp::Sum, DType::F32) => self.b.f_add(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Prod, DType::F32) => self.b.f_mul(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Max, DType::F32) => self.max_min(true, a, x)?,
            (ReduceOp::Min, DType::F32) => self.max_min(false, a, x)?,
            (ReduceOp::Max, DType::Bool) => self.b.logical_or(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Min, DType::Bool) => self.b.logical_and(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Sum, dt) if dt.is_int() => {
                let v = self.b.i_add(ty, None, a, x).map_err(failed)?;
                self.wrap(v, dt)?
            }
            (ReduceOp::Prod, dt) if dt.is_int() => {
                let v = self.b.i_mul(ty, None, a, x).map_err(failed)?;
                self.wrap(v, dt)?
            }
            (ReduceOp::Max, dt) if dt.is_int() => self.int_max_min(true, a, x, dt)?,
            (ReduceOp::Min, dt) if dt.is_int() => self.int_max_min(false, a, x, dt)?,
            _ => return Err(unsupported(format!("a {} accumulator of {dt}", op.name()))),
        };
        let v = self.round_half(v, stored)?;
        self.b.store(vars.value, v, None, []).map_err(failed)?;
        Ok(())
    }

    /// The `max` (or `min`) prim on f32: NaN if either is NaN, `-0 < +0`.
    pub(super) fn max_min(&mut self, max: bool, a: Word, b: Word) -> Result<Word, Declined> {
        let t = self.t_bool;
        let an = self.b.is_nan(t, None, a).map_err(failed)?;
        let bn = self.b.is_nan(t, None, b).map_err(failed)?;
        let nan = self.b.logical_or(t, None, an, bn).map_err(failed)?;
        let eq = self.b.f_ord_equal(t, None, a, b).map_err(failed)?;
        let bits = self.b.bitcast(self.t_i32, None, a).map_err(failed)?;
        let zero = self.constant(DType::I32, 0);
        let a_neg = self.b.s_less_than(t, None, bits, zero).map_err(failed)?;
        let (gt, on_eq) = if max {
            let gt = self.b.f_ord_greater_than(t, None, a, b).map_err(failed)?;
            (gt, self.b.select(self.t_f32, None, a_neg, b, a).map_err(failed)?)
        } else {
            let lt = self.b.f_ord_less_than(t, None, a, b).map_err(failed)?;
            (lt, self.b.select(self.t_f32, None, a_neg, a, b).map_err(failed)?)
        };
        let pick = self.b.select(self.t_f32, None, gt, a, b).map_err(failed)?;
        let r = self.b.select(self.t_f32, None, eq, on_eq, pick).map_err(failed)?;
        let qnan = self.f32c(f32::NAN);
        self.b.select(self.t_f32, None, nan, qnan, r).map_err(failed)
    }

    pub(super) fn truthy(&mut self, x: Word, dt: DType) -> Result<Word, Declined> {
        Ok(match dt {
            DType::Bool => x,
            DType::F32 | DType::F16 | DType::BF16 => {
                let z = self.f32c(0.0);
                self.b.f_unord_not_equal(self.t_bool, None, x, z).map_err(failed)?
            }
            _ => {
                let z = self.scalar(dt, Scalar::Int(0));
                self.b.i_not_equal(self.t_bool, None, x, z).map_err(failed)?
            }
        })
    }

    /// `convert_element_type` between the register dtypes.
    pub(in crate::backend::vulkan) fn convert(&mut self, x: Word, from: DType, to: DType) -> Result<Word, Declined> {
        let ty = self.ty(to);
        Ok(match (from, to) {
            (a, b) if a == b => x,
            (_, DType::Bool) => self.truthy(x, from)?,
            (DType::Bool, _) => {
                let (one, zero) = (self.scalar(to, Scalar::Int(1)), self.scalar(to, Scalar::Int(0)));
                self.b.select(ty, None, x, one, zero).map_err(failed)?
            }
            (DType::U64, DType::F32) => {
                let bits = self.b.bitcast(self.t_u64, None, x).map_err(failed)?;
                self.b.convert_u_to_f(ty, None, bits).map_err(failed)?
            }
            (from, DType::F32) if from.is_int() => self.b.convert_s_to_f(ty, None, x).map_err(failed)?,
            (from, to) if from.is_int() && to.is_int() => {
                // To the destination's register width (the low bits carry over: wrapping),
                // then wrapped to its range.
                let v = match (wide(from), wide(to)) {
                    (false, true) => {
                        // Not `OpSConvert`: Mesa 22's NIR (lavapipe) narrows `i2i64(x) < c`,
                        // for a constant `c` in i32's range, to a form that takes i32's
                        // minimum as +2^31, so the comparison is false for every `x` and
                        // `c < i2i64(x)` true (`==` is right). The zero-extended word shifted
                        // up and back down is a sign extension NIR does not narrow.
                        let word = self.b.bitcast(self.t_u32, None, x).map_err(failed)?;
                        let w = self.b.u_convert(self.t_u64, None, word).map_err(failed)?;
                        let w = self.b.bitcast(ty, None, w).map_err(failed)?;
                        let k = self.constant(DType::I64, 32);
                        let high = self.b.shift_left_logical(ty, None, w, k).map_err(failed)?;
                        self.b.shift_right_arithmetic(ty, None, high, k).map_err(failed)?
                    }
                    (true, false) => self.b.s_convert(ty, None, x).map_err(failed)?,
                    _ => x,
                };
                self.wrap(v, to)?
            }
            (DType::F32, to) if to.is_int() => {
                // Saturating at the destination's range, NaN to 0: Rust's `as`. `lo` and `hi`
                // (the range's ends, the upper one past the last value) are exact in f32.
                let (min, max) = crate::interp::int_limits(to);
                let lo = if to == DType::U64 { 0.0 } else { min as f32 };
                let hi = if to == DType::U64 { 18_446_744_073_709_551_616.0f32 } else { max as f32 + 1.0 };
                let hi = if to == DType::I64 { 9.223_372e18f32 } else { hi };
                let (lo_c, hi_c) = (self.f32c(lo), self.f32c(hi));
                let t = self.t_bool;
                let below = self.b.f_ord_less_than_equal(t, None, x, lo_c).map_err(failed)?;
                let above = self.b.f_ord_greater_than_equal(t, None, x, hi_c).map_err(failed)?;
                let nan = self.b.is_nan(t, None, x).map_err(failed)?;
                let zero_f = self.f32c(0.0);
                let safe = self.b.select(self.t_f32, None, below, zero_f, x).map_err(failed)?;
                let safe = self.b.select(self.t_f32, None, above, zero_f, safe).map_err(failed)?;
                let safe = self.b.select(self.t_f32, None, nan, zero_f, safe).map_err(failed)?;
                let r = if to == DType::U64 {
                    let u = self.b.convert_f_to_u(self.t_u64, None, safe).map_err(failed)?;
                    self.b.bitcast(ty, None, u).map_err(failed)?
                } else {
                    self.b.convert_f_to_s(ty, None, safe).map_err(failed)?
                };
                let (min_c, max_c) = (self.scalar(to, Scalar::Int(min)), self.scalar(to, Scalar::Int(max)));
                let r = self.b.select(ty, None, below, min_c, r).map_err(failed)?;
                self.b.select(ty, None, above, max_c, r).map_err(failed)?
            }
            _ => return Err(unsupported(format!("converting {from} to {to}"))),
        })
    }

    pub(super) fn unary(&mut self, op: OpKind, x: Word, xdt: DType, dt: DType) -> Result<Word, Declined> {
        use spirv::GLOp;
        let ty = self.ty(dt);
        match op {
            OpKind::LogicalNot => {
                let b = self.truthy(x, xdt)?;
                return self.b.logical_not(self.t_bool, None, b).map_err(failed);
            }
            OpKind::IsNan => {
                return match xdt {
                    DType::F32 => self.b.is_nan(self.t_bool, None, x).map_err(failed),
                    _ => Ok(self.constant(DType::Bool, 0)),
                };
            }
            _ => {}
        }
        if xdt != dt {
            return Err(unsupported(format!("{} from {xdt} to {dt}", op.name())));
        }
        if dt.is_int() {
            let unsigned = dt.is_unsigned();
            return match op {
                OpKind::Neg => {
                    let n = self.b.s_negate(ty, None, x).map_err(failed)?;
                    self.wrap(n, dt)
                }
                OpKind::Abs if unsigned => Ok(x),
                OpKind::Abs => {
                    let z = self.scalar(dt, Scalar::Int(0));
                    let neg = self.b.s_less_than(self.t_bool, None, x, z).map_err(failed)?;
                    let n = self.b.s_negate(ty, None, x).map_err(failed)?;
                    let a = self.b.select(ty, None, neg, n, x).map_err(failed)?;
                    self.wrap(a, dt)
                }
                OpKind::Sign if unsigned => {
                    let z = self.scalar(dt, Scalar::Int(0));
                    let nz = self.b.i_not_equal(self.t_bool, None, x, z).map_err(failed)?;
                    self.convert(nz, DType::Bool, dt)
                }
                OpKind::Sign => self.glsl(ty, GLOp::SSign, &[x]),
                OpKind::Floor | OpKind::Ceil | OpKind::Round => Ok(x),
                _ => Err(unsupported(format!("{} on {dt}", op.name()))),
            };
        }
        if dt != DType::F32 {
            return Err(unsupported(format!("{} on {dt}", op.name())));
        }
        let one = self.f32c(1.0);
        match op {
            OpKind::Neg => self.b.f_negate(ty, None, x).map_err(failed),
            OpKind::Abs => self.glsl(ty, GLOp::FAbs, &[x]),
            OpKind::Exp => Ok(math::exp(self, x)),
            OpKind::Exp2 => Ok(math::exp2(self, x)),
            OpKind::Log => Ok(math::log(self, x)),
            OpKind::Log1p => Ok(math::log1p(self, x)),
            OpKind::Expm1 => Ok(math::expm1(self, x)),
            OpKind::Erf => Ok(math::erf(self, x)),
            OpKind::Sqrt => self.glsl(ty, GLOp::Sqrt, &[x]),
            OpKind::Rsqrt => {
                let s = self.glsl(ty, GLOp::Sqrt, &[x])?;
                self.b.f_div(ty, None, one, s).map_err(failed)
            }
            OpKind::Reciprocal => self.b.f_div(ty, None, one, x).map_err(failed),
            OpKind::Sin => Ok(math::sin(self, x)),
            OpKind::Cos => Ok(math::cos(self, x)),
            OpKind::Tanh => Ok(math::tanh(self, x)),
            OpKind::Floor => self.glsl(ty, GLOp::Floor, &[x]),
            OpKind::Ceil => self.glsl(ty, GLOp::Ceil, &[x]),
            OpKind::Round => self.glsl(ty, GLOp::RoundEven, &[x]),
            OpKind::Sign => {
                // NaN and ±0 stay as they are; otherwise ±1.
                let t = self.t_bool;
                let zero = self.f32c(0.0);
                let keep_nan = self.b.is_nan(t, None, x).map_err(failed)?;
                let is_zero = self.b.f_ord_equal(t, None, x, zero).map_err(failed)?;
                let keep = self.b.logical_or(t, None, keep_nan, is_zero).map_err(failed)?;
                let pos = self.b.f_ord_greater_than(t, None, x, zero).map_err(failed)?;
                let m1 = self.f32c(-1.0);
                let s = self.b.select(ty, None, pos, one, m1).map_err(failed)?;
                self.b.select(ty, None, keep, x, s).map_err(failed)
            }
            _ => Err(unsupported(format!("{} on the device", op.name()))),
        }
    }

    pub(super) fn binary(&mut self, op: OpKind, a: Word, b: Word, cdt: DType, dt: DType) -> Result<Word, Declined> {
        use OpKind::*;
        let t = self.t_bool;
        if cdt == DType::Bool {
            let r = match op {
                And => self.b.logical_and(t, None, a, b),
                Or => self.b.logical_or(t, None, a, b),
                Eq => self.b.logical_equal(t, None, a, b),
                Ne => self.b.logical_not_equal(t, None, a, b),
                _ => return Err(unsupported(format!("{} on bool", op.name()))),
            }
            .map_err(failed)?;
            return self.convert(r, DType::Bool, dt);
        }
        let compare = matches!(op, Eq | Ne | Lt | Le | Gt | Ge);
        if compare {
            let r = if cdt == DType::F32 {
                match op {
                    Eq => self.b.f_ord_equal(t, None, a, b),
                    Ne => self.b.f_unord_not_equal(t, None, a, b),
                    Lt => self.b.f_ord_less_than(t, None, a, b),
                    Le => self.b.f_ord_less_than_equal(t, None, a, b),
                    Gt => self.b.f_ord_greater_than(t, None, a, b),
                    _ => self.b.f_ord_greater_than_equal(t, None, a, b),
                }
                .map_err(failed)?
            } else {
                self.int_compare(op, a, b, cdt)?
            };
            return self.convert(r, DType::Bool, dt);
        }
        if cdt != dt {
            return Err(unsupported(format!("{} from {cdt} to {dt}", op.name())));
        }
        let ty = self.ty(dt);
        if dt == DType::F32 {
            return match op {
                Add => self.b.f_add(ty, None, a, b).map_err(failed),
                Sub => self.b.f_sub(ty, None, a, b).map_err(failed),
                Mul => self.b.f_mul(ty, None, a, b).map_err(failed),
                Div => self.b.f_div(ty, None, a, b).map_err(failed),
                Rem => {
                    // C's fmod: a zero result takes the dividend's sign (SPIR-V leaves it open).
                    let r = self.b.f_rem(ty, None, a, b).map_err(failed)?;
                    let zero = self.f32c(0.0);
                    let is_zero = self.b.f_ord_equal(self.t_bool, None, r, zero).map_err(failed)?;
                    let bits = self.b.bitcast(self.t_u32, None, a).map_err(failed)?;
                    let sign = self.u32c(0x8000_0000);
                    let bits = self.b.bitwise_and(self.t_u32, None, bits, sign).map_err(failed)?;
                    let signed_zero = self.b.bitcast(ty, None, bits).map_err(failed)?;
                    self.b.select(ty, None, is_zero, signed_zero, r).map_err(failed)
                }
                Max => self.max_min(true, a, b),
                Min => self.max_min(false, a, b),
                _ => Err(unsupported(format!("{} on the device", op.name()))),
            };
        }
        if !dt.is_int() {
            return Err(unsupported(format!("{} on {dt}", op.name())));
        }
        match op {
            Add => {
                let v = self.b.i_add(ty, None, a, b).map_err(failed)?;
                self.wrap(v, dt)
            }
            Sub => {
                let v = self.b.i_sub(ty, None, a, b).map_err(failed)?;
                self.wrap(v, dt)
            }
            Mul => {
                let v = self.b.i_mul(ty, None, a, b).map_err(failed)?;
                self.wrap(v, dt)
            }
            Max => self.int_max_min(true, a, b, dt),
            Min => self.int_max_min(false, a, b, dt),
            Pow => self.int_pow(a, b, dt),
            // Bitwise: of values wrapped to the dtype, the result is too.
            And => self.b.bitwise_and(ty, None, a, b).map_err(failed),
            Or => self.b.bitwise_or(ty, None, a, b).map_err(failed),
            Div | Rem if dt == DType::U64 => {
                // Unsigned: only division by zero is special (an error, then 0).
                let zero = self.scalar(dt, Scalar::Int(0));
                let by_zero = self.b.i_equal(t, None, b, zero).map_err(failed)?;
                self.flag(by_zero, Status::DivisionByZero)?;
                let one = self.scalar(dt, Scalar::Int(1));
                let safe = self.b.select(ty, None, by_zero, one, b).map_err(failed)?;
                let (ua, ub) = (
                    self.b.bitcast(self.t_u64, None, a).map_err(failed)?,
                    self.b.bitcast(self.t_u64, None, safe).map_err(failed)?,
                );
                let r = if op == Div {
                    self.b.u_div(self.t_u64, None, ua, ub).map_err(failed)?
                } else {
                    self.b.u_mod(self.t_u64, None, ua, ub).map_err(failed)?
                };
                let r = self.b.bitcast(ty, None, r).map_err(failed)?;
                self.b.select(ty, None, by_zero, zero, r).map_err(failed)
            }
            Div | Rem => {
                // Division by zero is an error; `x / -1` wraps (`MIN / -1` is `MIN`), `x % -1` is 0.
                let zero = self.scalar(dt, Scalar::Int(0));
                let by_zero = self.b.i_equal(t, None, b, zero).map_err(failed)?;
                self.flag(by_zero, Status::DivisionByZero)?;
                // -1 only for the signed dtypes (an unsigned register's -1 wrapped is its
                // maximum, an ordinary divisor).
                let by_m1 = if dt.is_signed_int() {
                    let m1 = self.scalar(dt, Scalar::Int(-1));
                    self.b.i_equal(t, None, b, m1).map_err(failed)?
                } else {
                    self.constant(DType::Bool, 0)
                };
                let one = self.scalar(dt, Scalar::Int(1));
                let odd = self.b.logical_or(t, None, by_zero, by_m1).map_err(failed)?;
                let safe = self.b.select(ty, None, odd, one, b).map_err(failed)?;
                if op == Div {
                    // Every dtype but u64 holds its value in the register, so signed
                    // division is right; `MIN / -1` wraps back to `MIN`.
                    let q = self.b.s_div(ty, None, a, safe).map_err(failed)?;
                    let n = self.b.s_negate(ty, None, a).map_err(failed)?;
                    let n = self.wrap(n, dt)?;
                    let q = self.b.select(ty, None, by_m1, n, q).map_err(failed)?;
                    self.b.select(ty, None, by_zero, zero, q).map_err(failed)
                } else {
                    let r = self.b.s_rem(ty, None, a, safe).map_err(failed)?;
                    self.b.select(ty, None, odd, zero, r).map_err(failed)
                }
            }
            _ => Err(unsupported(format!("{} on {dt}", op.name()))),
        }
    }
}
