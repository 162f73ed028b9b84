//! The scalar instructions of the lowering: the prims' meanings on f32, integer and bool
//! registers (`max`/`min` with NaN and signed zeros, saturating conversions, non-trapping
//! integer division, integers wrapped to their dtype, u64 ordered as unsigned), and feeding
//! accumulators.

use rspirv::spirv::{self, Word};

use super::{failed, unsupported, wide, AccVars, Cx, Status};
use crate::backend::cpu::math;
use crate::backend::Declined;
use crate::ir::DType;
use crate::kernel::{Instr, ReduceOp, Reg, Scalar, Stage};
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
            let better = if dt.is_float() {
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
            (ReduceOp::Sum, dt) if dt.is_float() => self.b.f_add(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Prod, dt) if dt.is_float() => self.b.f_mul(ty, None, a, x).map_err(failed)?,
            (ReduceOp::Max, dt) if dt.is_float() => self.max_min(true, a, x, dt)?,
            (ReduceOp::Min, dt) if dt.is_float() => self.max_min(false, a, x, dt)?,
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

    /// The `max` (or `min`) prim on f32 or f64 registers (`dt`): NaN if either is NaN,
    /// `-0 < +0`.
    pub(super) fn max_min(&mut self, max: bool, a: Word, b: Word, dt: DType) -> Result<Word, Declined> {
        let (t, ft) = (self.t_bool, self.ty(dt));
        let an = self.b.is_nan(t, None, a).map_err(failed)?;
        let bn = self.b.is_nan(t, None, b).map_err(failed)?;
        let nan = self.b.logical_or(t, None, an, bn).map_err(failed)?;
        let eq = self.b.f_ord_equal(t, None, a, b).map_err(failed)?;
        let a_neg = self.sign_bit(a, dt)?;
        let (gt, on_eq) = if max {
            let gt = self.b.f_ord_greater_than(t, None, a, b).map_err(failed)?;
            (gt, self.b.select(ft, None, a_neg, b, a).map_err(failed)?)
        } else {
            let lt = self.b.f_ord_less_than(t, None, a, b).map_err(failed)?;
            (lt, self.b.select(ft, None, a_neg, a, b).map_err(failed)?)
        };
        let pick = self.b.select(ft, None, gt, a, b).map_err(failed)?;
        let r = self.b.select(ft, None, eq, on_eq, pick).map_err(failed)?;
        let qnan = self.scalar(dt, Scalar::Float(f64::NAN));
        self.b.select(ft, None, nan, qnan, r).map_err(failed)
    }

    /// C's `fmod` on f32 or f64 registers (`dt`), exactly: `OpFRem` is only as precise as
    /// `x - y·trunc(x/y)` in Vulkan (lavapipe's gives 0 or infinity for large `x/y`), so `|y|`
    /// is subtracted from `|x|` scaled by powers of two, largest first, each subtraction exact
    /// (`t ≤ r < 2t`): a loop of at most one step per binade between them (about 280 for f32,
    /// 2,100 for f64; a few where `x/y` is small). The result takes `x`'s sign, zero included;
    /// NaN where `x` is infinite or NaN, `y` is zero or NaN; `x` where `y` is infinite.
    fn float_rem(&mut self, a: Word, b: Word, dt: DType) -> Result<Word, Declined> {
        use spirv::GLOp;
        let (t, ft, it) = (self.t_bool, self.ty(dt), self.t_i32);
        let an = self.b.is_nan(t, None, a).map_err(failed)?;
        let bn = self.b.is_nan(t, None, b).map_err(failed)?;
        let ai = self.b.is_inf(t, None, a).map_err(failed)?;
        let (zero, one) = (self.scalar(dt, Scalar::Float(0.0)), self.scalar(dt, Scalar::Float(1.0)));
        let bz = self.b.f_ord_equal(t, None, b, zero).map_err(failed)?;
        let bad = self.b.logical_or(t, None, an, bn).map_err(failed)?;
        let bad = self.b.logical_or(t, None, bad, ai).map_err(failed)?;
        let bad = self.b.logical_or(t, None, bad, bz).map_err(failed)?;
        let (aa, ab) = (self.glsl(ft, GLOp::FAbs, &[a])?, self.glsl(ft, GLOp::FAbs, &[b])?);
        let r0 = self.b.select(ft, None, bad, zero, aa).map_err(failed)?;
        let d = self.b.select(ft, None, bad, one, ab).map_err(failed)?;
        let frexp = self.b.type_struct([ft, it]);
        let fd = self.glsl(frexp, GLOp::FrexpStruct, &[d])?;
        let ed = self.b.composite_extract(it, None, fd, [1]).map_err(failed)?;
        let r_var = self.function_var(ft);
        self.b.store(r_var, r0, None, []).map_err(failed)?;
        let l = self.open_loop()?;
        let r = self.b.load(ft, None, r_var, None, []).map_err(failed)?;
        let more = self.b.f_ord_greater_than_equal(t, None, r, d).map_err(failed)?;
        self.loop_body(l, more)?;
        // t = d·2^k with the largest k that keeps t ≤ r (k ≥ 0: r ≥ d).
        let fr = self.glsl(frexp, GLOp::FrexpStruct, &[r])?;
        let er = self.b.composite_extract(it, None, fr, [1]).map_err(failed)?;
        let k = self.b.i_sub(it, None, er, ed).map_err(failed)?;
        let step = self.glsl(ft, GLOp::Ldexp, &[d, k])?;
        let over = self.b.f_ord_greater_than(t, None, step, r).map_err(failed)?;
        let one_i = self.constant(DType::I32, 1);
        let k1 = self.b.i_sub(it, None, k, one_i).map_err(failed)?;
        let half = self.glsl(ft, GLOp::Ldexp, &[d, k1])?;
        let step = self.b.select(ft, None, over, half, step).map_err(failed)?;
        let next = self.b.f_sub(ft, None, r, step).map_err(failed)?;
        self.b.store(r_var, next, None, []).map_err(failed)?;
        self.loop_continue(l)?;
        self.close_loop(l)?;
        let r = self.b.load(ft, None, r_var, None, []).map_err(failed)?;
        let neg = self.sign_bit(a, dt)?;
        let nr = self.b.f_negate(ft, None, r).map_err(failed)?;
        let r = self.b.select(ft, None, neg, nr, r).map_err(failed)?;
        let nan = self.scalar(dt, Scalar::Float(f64::NAN));
        self.b.select(ft, None, bad, nan, r).map_err(failed)
    }

    /// Whether the sign bit of an f32 or f64 register (`dt`) is set.
    fn sign_bit(&mut self, x: Word, dt: DType) -> Result<Word, Declined> {
        let (it, zero) = if dt == DType::F64 {
            (self.t_i64, self.constant(DType::I64, 0))
        } else {
            (self.t_i32, self.constant(DType::I32, 0))
        };
        let bits = self.b.bitcast(it, None, x).map_err(failed)?;
        self.b.s_less_than(self.t_bool, None, bits, zero).map_err(failed)
    }

    pub(super) fn truthy(&mut self, x: Word, dt: DType) -> Result<Word, Declined> {
        Ok(match dt {
            DType::Bool => x,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 => {
                let z = self.scalar(dt, Scalar::Float(0.0));
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
            // Between f32 and f64: the device's conversion (exact one way; correctly rounded
            // the other on lavapipe, while Vulkan allows either neighbour).
            (DType::F32, DType::F64) | (DType::F64, DType::F32) => self.b.f_convert(ty, None, x).map_err(failed)?,
            (DType::U64, to) if to.is_float() => {
                let bits = self.b.bitcast(self.t_u64, None, x).map_err(failed)?;
                self.b.convert_u_to_f(ty, None, bits).map_err(failed)?
            }
            (from, to) if from.is_int() && to.is_float() => self.b.convert_s_to_f(ty, None, x).map_err(failed)?,
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
            (from, to) if from.is_float() && to.is_int() => {
                // Saturating at the destination's range, NaN to 0: Rust's `as`. `lo` and `hi`
                // (the range's ends, the upper one past the last value: a power of two, or
                // -2^31 + 1 and 2^31 for i32) are exact in f32 and f64.
                let (min, max) = crate::interp::int_limits(to);
                let lo = if to == DType::U64 { 0.0 } else { min as f64 };
                let hi = match to {
                    DType::U64 => 18_446_744_073_709_551_616.0,
                    DType::I64 => 9_223_372_036_854_775_808.0,
                    _ => max as f64 + 1.0,
                };
                let (lo_c, hi_c) = (self.scalar(from, Scalar::Float(lo)), self.scalar(from, Scalar::Float(hi)));
                let (t, ft) = (self.t_bool, self.ty(from));
                let below = self.b.f_ord_less_than_equal(t, None, x, lo_c).map_err(failed)?;
                let above = self.b.f_ord_greater_than_equal(t, None, x, hi_c).map_err(failed)?;
                let nan = self.b.is_nan(t, None, x).map_err(failed)?;
                let zero_f = self.scalar(from, Scalar::Float(0.0));
                let safe = self.b.select(ft, None, below, zero_f, x).map_err(failed)?;
                let safe = self.b.select(ft, None, above, zero_f, safe).map_err(failed)?;
                let safe = self.b.select(ft, None, nan, zero_f, safe).map_err(failed)?;
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
                    DType::F32 | DType::F64 => self.b.is_nan(self.t_bool, None, x).map_err(failed),
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
        if dt != DType::F32 && dt != DType::F64 {
            return Err(unsupported(format!("{} on {dt}", op.name())));
        }
        let one = self.scalar(dt, Scalar::Float(1.0));
        let f32_only = |cx: &mut Self, f: fn(&mut Self, Word) -> Word| {
            if dt == DType::F32 {
                Ok(f(cx, x))
            } else {
                Err(unsupported(format!("{} on f64 (no f64 approximation on the device)", op.name())))
            }
        };
        match op {
            OpKind::Neg => self.b.f_negate(ty, None, x).map_err(failed),
            OpKind::Abs => self.glsl(ty, GLOp::FAbs, &[x]),
            // f64: `math64`'s approximations.
            OpKind::Exp => Ok(self.exp_of(x, dt)),
            OpKind::Log if dt == DType::F64 => Ok(self.ln64(x)),
            OpKind::Log => Ok(math::log(self, x)),
            OpKind::Exp2 => f32_only(self, math::exp2),
            OpKind::Log1p => f32_only(self, math::log1p),
            OpKind::Expm1 => f32_only(self, math::expm1),
            OpKind::Erf => f32_only(self, math::erf),
            OpKind::Sin => f32_only(self, math::sin),
            OpKind::Cos => f32_only(self, math::cos),
            OpKind::Tanh => f32_only(self, math::tanh),
            OpKind::Sqrt => self.glsl(ty, GLOp::Sqrt, &[x]),
            OpKind::Rsqrt => {
                let s = self.glsl(ty, GLOp::Sqrt, &[x])?;
                self.b.f_div(ty, None, one, s).map_err(failed)
            }
            OpKind::Reciprocal => self.b.f_div(ty, None, one, x).map_err(failed),
            OpKind::Floor => self.glsl(ty, GLOp::Floor, &[x]),
            OpKind::Ceil => self.glsl(ty, GLOp::Ceil, &[x]),
            OpKind::Round => self.glsl(ty, GLOp::RoundEven, &[x]),
            OpKind::Sign => self.float_sign(x, dt),
            _ => Err(unsupported(format!("{} on the device", op.name()))),
        }
    }

    /// The `sign` prim on an f32 or f64 register (`dt`): NaN and ±0 as they are, else ±1.
    fn float_sign(&mut self, x: Word, dt: DType) -> Result<Word, Declined> {
        let (t, ty) = (self.t_bool, self.ty(dt));
        let zero = self.scalar(dt, Scalar::Float(0.0));
        let keep_nan = self.b.is_nan(t, None, x).map_err(failed)?;
        let is_zero = self.b.f_ord_equal(t, None, x, zero).map_err(failed)?;
        let keep = self.b.logical_or(t, None, keep_nan, is_zero).map_err(failed)?;
        let pos = self.b.f_ord_greater_than(t, None, x, zero).map_err(failed)?;
        let (one, m1) = (self.scalar(dt, Scalar::Float(1.0)), self.scalar(dt, Scalar::Float(-1.0)));
        let s = self.b.select(ty, None, pos, one, m1).map_err(failed)?;
        self.b.select(ty, None, keep, x, s).map_err(failed)
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
            let r = if cdt.is_float() {
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
        if dt == DType::F32 || dt == DType::F64 {
            return match op {
                Add => self.b.f_add(ty, None, a, b).map_err(failed),
                Sub => self.b.f_sub(ty, None, a, b).map_err(failed),
                Mul => self.b.f_mul(ty, None, a, b).map_err(failed),
                Div => self.b.f_div(ty, None, a, b).map_err(failed),
                Rem => self.float_rem(a, b, dt),
                Max => self.max_min(true, a, b, dt),
                Min => self.max_min(false, a, b, dt),
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
                // Division by zero is an error; `x / -1` wraps (`MIN / -1` is `MIN`), `x % -1` is
                // 0.
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

    /// The value of `r` when a `Const` of this kernel defines it as an integer in -4..=4.
    pub(super) fn small_int_const(&self, stage: &Stage, r: Reg) -> Option<i32> {
        let defs = self.kernel.stages.iter().flat_map(|s| &s.body).chain(&stage.body);
        defs.filter_map(|i| match i {
            Instr::Const { dst, value, .. } if *dst == r => Some(*value),
            _ => None,
        })
        .next()
        .and_then(|v| match v {
            Scalar::Float(f) if f.fract() == 0.0 && f.abs() <= 4.0 => Some(f as i32),
            Scalar::Int(i) if i.abs() <= 4 => Some(i as i32),
            _ => None,
        })
    }

    /// `pow(x, n)` for a small integer `n` (f32): `x` multiplied `|n|` times (1 for `n = 0`,
    /// NaN included, as `pow` has it), the reciprocal for negative `n`. Within a few ULP of
    /// the correctly rounded power; the special values (zeros, infinities, NaN) are `pow`'s.
    pub(super) fn powi(&mut self, x: Word, n: i32) -> Result<Word, Declined> {
        let one = self.f32c(1.0);
        let mut r = if n == 0 { one } else { x };
        for _ in 1..n.unsigned_abs() {
            r = self.b.f_mul(self.t_f32, None, r, x).map_err(failed)?;
        }
        if n < 0 {
            r = self.b.f_div(self.t_f32, None, one, r).map_err(failed)?;
        }
        Ok(r)
    }

    /// `e^x` of an f32 or f64 register (`dt`): the CPU's f32 approximation, or `math64`'s.
    pub(super) fn exp_of(&mut self, x: Word, dt: DType) -> Word {
        if dt != DType::F64 {
            return math::exp(self, x);
        }
        self.arith64 = true;
        let r = crate::backend::cpu::math64::exp(self, x);
        self.arith64 = false;
        r
    }

    /// `ln x` of an f64 register (`math64`'s approximation).
    pub(super) fn ln64(&mut self, x: Word) -> Word {
        self.arith64 = true;
        let r = crate::backend::cpu::math64::ln(self, x);
        self.arith64 = false;
        r
    }

    /// `pow(x, y)` on f32 registers computed as the CPU's compiled kernels do: `pow64` in f64,
    /// rounded once to f32 (by the device's conversion).
    pub(super) fn pow_in_f64(&mut self, x: Word, y: Word) -> Result<Word, Declined> {
        let xd = self.b.f_convert(self.t_f64, None, x).map_err(failed)?;
        let yd = self.b.f_convert(self.t_f64, None, y).map_err(failed)?;
        self.arith64 = true;
        let r = math::pow64(self, xd, yd);
        self.arith64 = false;
        self.b.f_convert(self.t_f32, None, r).map_err(failed)
    }

    /// `pow(x, y)` for a `y` known only at run time: `powi` for each integer of -4..=4,
    /// chosen by `y`; any other `y` sets [`Status::Exponent`] (a run-time error: general
    /// powers are not on the device yet).
    pub(super) fn powi_at_run_time(&mut self, x: Word, y: Word) -> Result<Word, Declined> {
        let t = self.t_bool;
        let mut r = self.f32c(0.0);
        let mut matched = self.constant(DType::Bool, 0);
        for n in -4..=4 {
            let p = self.powi(x, n)?;
            let c = self.f32c(n as f32);
            let is = self.b.f_ord_equal(t, None, y, c).map_err(failed)?;
            r = self.b.select(self.t_f32, None, is, p, r).map_err(failed)?;
            matched = self.b.logical_or(t, None, matched, is).map_err(failed)?;
        }
        let other = self.b.logical_not(t, None, matched).map_err(failed)?;
        self.flag(other, Status::Exponent)?;
        Ok(r)
    }
}
