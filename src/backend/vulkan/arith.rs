//! The transcendental approximations of `backend::cpu::math`, emitted as SPIR-V: the shader
//! lowering implements their [`Arith`] over f32 SSA values, so `exp`, `log`, `log1p`,
//! `expm1`, `tanh`, `erf`, `sin` and `cos` are the same polynomials the CPU's compiled kernels
//! run (within the same stated ULP bounds), not the device's `GLSL.std.450` functions, whose
//! precision Vulkan leaves loose. The one difference: `sin`/`cos` arguments beyond the fast
//! path's range take the device's `Sin`/`Cos` instead of the host's f64 functions.
//! Multiply-adds are a multiply then an add (the contraction-off setting).
//!
//! The same `Arith` runs in f64 (with i64 integers) while `Cx::arith64` is set: that is how
//! `pow64`, the f64 power the CPU computes f32 `pow` through, is emitted (on a device with
//! f64).

use rspirv::spirv::{self, Word};

use super::spirv::Cx;
use crate::backend::cpu::math::{Arith, Cmp, Slow};
use crate::backend::Declined;
use crate::ir::DType;

impl Arith for Cx<'_> {
    type F = Word;
    type I = Word;
    type M = Word;

    fn bits(&self) -> u32 {
        if self.arith64 {
            64
        } else {
            32
        }
    }

    fn f(&mut self, c: f64) -> Word {
        if self.arith64 {
            self.constant(DType::F64, c.to_bits())
        } else {
            self.f32c(c as f32)
        }
    }

    fn i(&mut self, c: i64) -> Word {
        if self.arith64 {
            self.constant(DType::I64, c as u64)
        } else {
            self.constant(DType::I32, u64::from(c as i32 as u32))
        }
    }

    fn add(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.f_add(self.af(), None, a, b);
        self.ok(r)
    }

    fn sub(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.f_sub(self.af(), None, a, b);
        self.ok(r)
    }

    fn mul(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.f_mul(self.af(), None, a, b);
        self.ok(r)
    }

    fn div(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.f_div(self.af(), None, a, b);
        self.ok(r)
    }

    fn mul_add(&mut self, a: Word, b: Word, c: Word) -> Word {
        let p = self.mul(a, b);
        self.add(p, c)
    }

    fn neg(&mut self, a: Word) -> Word {
        let r = self.b.f_negate(self.af(), None, a);
        self.ok(r)
    }

    fn abs(&mut self, a: Word) -> Word {
        self.glsl_ok(spirv::GLOp::FAbs, &[a])
    }

    fn round(&mut self, a: Word) -> Word {
        self.glsl_ok(spirv::GLOp::RoundEven, &[a])
    }

    fn trunc(&mut self, a: Word) -> Word {
        self.glsl_ok(spirv::GLOp::Trunc, &[a])
    }

    fn cmp(&mut self, cc: Cmp, a: Word, b: Word) -> Word {
        let t = self.t_bool;
        let r = match cc {
            Cmp::Eq => self.b.f_ord_equal(t, None, a, b),
            Cmp::Ne => self.b.f_unord_not_equal(t, None, a, b),
            Cmp::Lt => self.b.f_ord_less_than(t, None, a, b),
            Cmp::Le => self.b.f_ord_less_than_equal(t, None, a, b),
            Cmp::Gt => self.b.f_ord_greater_than(t, None, a, b),
            Cmp::Ge => self.b.f_ord_greater_than_equal(t, None, a, b),
            Cmp::Uno => {
                let an = self.b.is_nan(t, None, a);
                let an = self.ok(an);
                let bn = self.b.is_nan(t, None, b);
                let bn = self.ok(bn);
                self.b.logical_or(t, None, an, bn)
            }
        };
        self.ok(r)
    }

    fn select(&mut self, m: Word, a: Word, b: Word) -> Word {
        let r = self.b.select(self.af(), None, m, a, b);
        self.ok(r)
    }

    fn iselect(&mut self, m: Word, a: Word, b: Word) -> Word {
        let r = self.b.select(self.ai(), None, m, a, b);
        self.ok(r)
    }

    fn and(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.logical_and(self.t_bool, None, a, b);
        self.ok(r)
    }

    fn or(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.logical_or(self.t_bool, None, a, b);
        self.ok(r)
    }

    fn not(&mut self, a: Word) -> Word {
        let r = self.b.logical_not(self.t_bool, None, a);
        self.ok(r)
    }

    fn to_bits(&mut self, a: Word) -> Word {
        let r = self.b.bitcast(self.ai(), None, a);
        self.ok(r)
    }

    fn bits_to_float(&mut self, a: Word) -> Word {
        let r = self.b.bitcast(self.af(), None, a);
        self.ok(r)
    }

    fn iadd(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.i_add(self.ai(), None, a, b);
        self.ok(r)
    }

    fn isub(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.i_sub(self.ai(), None, a, b);
        self.ok(r)
    }

    fn iand(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.bitwise_and(self.ai(), None, a, b);
        self.ok(r)
    }

    fn ior(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.bitwise_or(self.ai(), None, a, b);
        self.ok(r)
    }

    fn ixor(&mut self, a: Word, b: Word) -> Word {
        let r = self.b.bitwise_xor(self.ai(), None, a, b);
        self.ok(r)
    }

    fn shl(&mut self, a: Word, n: u32) -> Word {
        let n = self.i(i64::from(n % self.bits()));
        let r = self.b.shift_left_logical(self.ai(), None, a, n);
        self.ok(r)
    }

    fn sra(&mut self, a: Word, n: u32) -> Word {
        let n = self.i(i64::from(n % self.bits()));
        let r = self.b.shift_right_arithmetic(self.ai(), None, a, n);
        self.ok(r)
    }

    fn icmp(&mut self, cc: Cmp, a: Word, b: Word) -> Word {
        let t = self.t_bool;
        let r = match cc {
            Cmp::Eq => self.b.i_equal(t, None, a, b),
            Cmp::Ne | Cmp::Uno => self.b.i_not_equal(t, None, a, b),
            Cmp::Lt => self.b.s_less_than(t, None, a, b),
            Cmp::Le => self.b.s_less_than_equal(t, None, a, b),
            Cmp::Gt => self.b.s_greater_than(t, None, a, b),
            Cmp::Ge => self.b.s_greater_than_equal(t, None, a, b),
        };
        self.ok(r)
    }

    fn int_to_float(&mut self, a: Word) -> Word {
        let r = self.b.convert_s_to_f(self.af(), None, a);
        self.ok(r)
    }

    fn float_to_int(&mut self, a: Word) -> Word {
        let (from, to) = if self.arith64 { (DType::F64, DType::I64) } else { (DType::F32, DType::I32) };
        match self.convert(a, from, to) {
            Ok(w) => w,
            Err(e) => {
                self.err.get_or_insert(e);
                0
            }
        }
    }

    fn fallback(&mut self, which: Slow, m: Word, x: Word, fast: Word) -> Word {
        if self.arith64 {
            // GLSL.std.450's `Sin` and `Cos` are 16- and 32-bit only (and no f64 kernel uses
            // the sine's approximation).
            self.err.get_or_insert(Declined::Unsupported("sin or cos in f64 on the device".into()));
            return fast;
        }
        let op = match which {
            Slow::Sin => spirv::GLOp::Sin,
            Slow::Cos => spirv::GLOp::Cos,
        };
        let slow = self.glsl_ok(op, &[x]);
        self.select(m, slow, fast)
    }
}
