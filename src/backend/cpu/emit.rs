//! [`Arith`] over Cranelift values: runs the approximations of [`super::math`] as an
//! instruction emitter, on scalars (f32 or f64) or on F32X4 vectors.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Signature, Type, Value};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;

use super::math::{self, Arith, Cmp, Slow};

/// Emits the arithmetic of one lane shape: `fty` is F32, F64 or F32X4.
pub(crate) struct Clif<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    pub fty: Type,
    pub fma: bool,
    pub call_conv: CallConv,
}

impl<'a, 'b> Clif<'a, 'b> {
    pub fn new(b: &'a mut FunctionBuilder<'b>, fty: Type, fma: bool, call_conv: CallConv) -> Self {
        Clif { b, fty, fma, call_conv }
    }

    fn ity(&self) -> Type {
        match self.fty {
            types::F32 => types::I32,
            types::F64 => types::I64,
            _ => types::I32X4,
        }
    }

    fn is_vector(&self) -> bool {
        self.fty.is_vector()
    }

    fn lane(&self) -> Type {
        self.fty.lane_type()
    }

    /// A mask as the float vector type (for `bitselect` on floats).
    fn fmask(&mut self, m: Value) -> Value {
        self.b.ins().bitcast(self.fty, MemFlagsData::new(), m)
    }
}

fn float_cc(cc: Cmp) -> FloatCC {
    match cc {
        Cmp::Eq => FloatCC::Equal,
        Cmp::Ne => FloatCC::NotEqual,
        Cmp::Lt => FloatCC::LessThan,
        Cmp::Le => FloatCC::LessThanOrEqual,
        Cmp::Gt => FloatCC::GreaterThan,
        Cmp::Ge => FloatCC::GreaterThanOrEqual,
        Cmp::Uno => FloatCC::Unordered,
    }
}

fn int_cc(cc: Cmp) -> IntCC {
    match cc {
        Cmp::Eq => IntCC::Equal,
        Cmp::Ne | Cmp::Uno => IntCC::NotEqual,
        Cmp::Lt => IntCC::SignedLessThan,
        Cmp::Le => IntCC::SignedLessThanOrEqual,
        Cmp::Gt => IntCC::SignedGreaterThan,
        Cmp::Ge => IntCC::SignedGreaterThanOrEqual,
    }
}

/// Emits a call to `f(x)` (`extern "C" fn(T) -> T` with `T` the scalar float type `ty`).
pub(crate) fn call_unary(b: &mut FunctionBuilder<'_>, call_conv: CallConv, f: usize, ty: Type, x: Value) -> Value {
    call(b, call_conv, f, &[ty], ty, &[x])
}

/// Emits an indirect call to the Rust function at address `f`.
pub(crate) fn call(
    b: &mut FunctionBuilder<'_>,
    call_conv: CallConv,
    f: usize,
    params: &[Type],
    ret: Type,
    args: &[Value],
) -> Value {
    let mut sig = Signature::new(call_conv);
    sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    sig.returns.push(AbiParam::new(ret));
    let sig = b.import_signature(sig);
    let callee = b.ins().iconst(types::I64, f as i64);
    let inst = b.ins().call_indirect(sig, callee, args);
    b.inst_results(inst)[0]
}

impl Arith for Clif<'_, '_> {
    type F = Value;
    type I = Value;
    type M = Value;
    fn bits(&self) -> u32 {
        if self.lane() == types::F64 {
            64
        } else {
            32
        }
    }

    fn f(&mut self, c: f64) -> Value {
        let s = if self.lane() == types::F64 { self.b.ins().f64const(c) } else { self.b.ins().f32const(c as f32) };
        if self.is_vector() {
            self.b.ins().splat(self.fty, s)
        } else {
            s
        }
    }
    fn i(&mut self, c: i64) -> Value {
        let ity = self.ity();
        if self.is_vector() {
            let s = self.b.ins().iconst(types::I32, c as i32 as i64);
            self.b.ins().splat(ity, s)
        } else if ity == types::I32 {
            self.b.ins().iconst(ity, c as i32 as i64)
        } else {
            self.b.ins().iconst(ity, c)
        }
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }
    fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, b, c)
        } else {
            let p = self.b.ins().fmul(a, b);
            self.b.ins().fadd(p, c)
        }
    }
    fn neg(&mut self, a: Value) -> Value {
        self.b.ins().fneg(a)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }
    fn round(&mut self, a: Value) -> Value {
        self.b.ins().nearest(a)
    }
    fn trunc(&mut self, a: Value) -> Value {
        self.b.ins().trunc(a)
    }
    fn cmp(&mut self, cc: Cmp, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(float_cc(cc), a, b)
    }
    fn select(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.is_vector() {
            let m = self.fmask(m);
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }
    fn iselect(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.is_vector() {
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }
    fn and(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn or(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn not(&mut self, a: Value) -> Value {
        if self.is_vector() {
            self.b.ins().bnot(a)
        } else {
            self.b.ins().bxor_imm_s(a, 1)
        }
    }
    fn to_bits(&mut self, a: Value) -> Value {
        let ity = self.ity();
        self.b.ins().bitcast(ity, MemFlagsData::new(), a)
    }
    fn bits_to_float(&mut self, a: Value) -> Value {
        self.b.ins().bitcast(self.fty, MemFlagsData::new(), a)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().isub(a, b)
    }
    fn iand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn ixor(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bxor(a, b)
    }
    fn shl(&mut self, a: Value, n: u32) -> Value {
        self.b.ins().ishl_imm_u(a, n as i64)
    }
    fn sra(&mut self, a: Value, n: u32) -> Value {
        self.b.ins().sshr_imm_u(a, n as i64)
    }
    fn icmp(&mut self, cc: Cmp, a: Value, b: Value) -> Value {
        self.b.ins().icmp(int_cc(cc), a, b)
    }
    fn int_to_float(&mut self, a: Value) -> Value {
        self.b.ins().fcvt_from_sint(self.fty, a)
    }
    fn float_to_int(&mut self, a: Value) -> Value {
        let ity = self.ity();
        self.b.ins().fcvt_to_sint_sat(ity, a)
    }
    fn fallback(&mut self, which: Slow, m: Value, x: Value, fast: Value) -> Value {
        let f = match which {
            Slow::Sin => math::slow_sin_f32 as *const () as usize,
            Slow::Cos => math::slow_cos_f32 as *const () as usize,
        };
        let lane = self.lane();
        let any = if self.is_vector() { self.b.ins().vany_true(m) } else { m };
        let slow = self.b.create_block();
        let merge = self.b.create_block();
        let out = self.b.append_block_param(merge, self.fty);
        self.b.set_cold_block(slow);
        self.b.ins().brif(any, slow, &[], merge, &[fast.into()]);
        self.b.seal_block(slow);
        self.b.switch_to_block(slow);
        let r = if self.is_vector() {
            let mut r = fast;
            for lane_idx in 0..4u8 {
                let xi = self.b.ins().extractlane(x, lane_idx);
                let fi = self.b.ins().extractlane(fast, lane_idx);
                let mi = self.b.ins().extractlane(m, lane_idx);
                let si = call_unary(self.b, self.call_conv, f, lane, xi);
                let pick = self.b.ins().select(mi, si, fi);
                r = self.b.ins().insertlane(r, pick, lane_idx);
            }
            r
        } else {
            call_unary(self.b, self.call_conv, f, lane, x)
        };
        self.b.ins().jump(merge, &[r.into()]);
        self.b.seal_block(merge);
        self.b.switch_to_block(merge);
        out
    }
}
