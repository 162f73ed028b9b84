//! Finishing an assembled module: what is known only once the whole shader is emitted (the
//! f64 type where it is used, float constants the driver cannot fold, function variables at
//! the start, `NoContraction` on float arithmetic).

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{self, Word};

use crate::backend::Declined;

/// A float constant the driver cannot see through: `bitcast(bits ^ zero)`, with `zero` a
/// run-time 0 (`NumWorkgroups.z - 1`: every dispatch is one group deep). Lavapipe (Mesa 22)
/// folds `0 · x` and `0 / x` to 0 and `0 + x` to `x` where an operand is a known zero,
/// despite the `SignedZeroInfNanPreserve` mode (`NoContraction` does not stop it), which is
/// wrong for an infinite or NaN `x` and for `-0`: no float value is a known constant to it.
pub(super) struct Opaque {
    /// The constant's id (defined at the start of the function).
    pub(super) id: Word,
    pub(super) ty: Word,
    /// The integer type of its width, the integer constant with its bits, the run-time 0 of
    /// that type, and the id of the xor.
    pub(super) int_ty: Word,
    pub(super) bits: Word,
    pub(super) zero: Word,
    pub(super) xor: Word,
}

/// Defines the [`Opaque`] constants in the function's first block, after the run-time zeros
/// they read (which the first block defines before any float is used).
pub(super) fn define_opaque(module: &mut Module, opaque: &[Opaque]) -> Result<(), Declined> {
    use Instruction;
    let Some(first) = opaque.first() else { return Ok(()) };
    let block = module
        .functions
        .first_mut()
        .and_then(|f| f.blocks.first_mut())
        .ok_or_else(|| Declined::Defect("a shader without a function".into()))?;
    let zeros: Vec<Word> = opaque.iter().map(|o| o.zero).collect();
    let at = block
        .instructions
        .iter()
        .rposition(|i| i.result_id.is_some_and(|r| zeros.contains(&r)))
        .ok_or_else(|| Declined::Defect(format!("the run-time zero {} is not in the first block", first.zero)))?;
    let defs = opaque.iter().flat_map(|o| {
        [
            Instruction::new(
                spirv::Op::BitwiseXor,
                Some(o.int_ty),
                Some(o.xor),
                vec![Operand::IdRef(o.bits), Operand::IdRef(o.zero)],
            ),
            Instruction::new(spirv::Op::Bitcast, Some(o.ty), Some(o.id), vec![Operand::IdRef(o.xor)]),
        ]
    });
    let tail = block.instructions.split_off(at + 1);
    block.instructions.extend(defs);
    block.instructions.extend(tail);
    Ok(())
}

/// Declares the f64 type `t_f64` (its id reserved when the lowering began), the `Float64`
/// capability and f64's NaN-preserving mode for entry point `main`, where the module uses it:
/// a module that declares them must only go to a device with `shaderFloat64`.
pub(super) fn declare_f64(module: &mut Module, t_f64: Word, main: Word) {
    let uses = |i: &Instruction| i.result_type == Some(t_f64) || i.operands.contains(&Operand::IdRef(t_f64));
    if !module.all_inst_iter().any(uses) {
        return;
    }
    let cap = |c| Instruction::new(spirv::Op::Capability, None, None, vec![Operand::Capability(c)]);
    module.capabilities.push(cap(spirv::Capability::Float64));
    let ty = Instruction::new(spirv::Op::TypeFloat, None, Some(t_f64), vec![Operand::LiteralBit32(64)]);
    module.types_global_values.insert(0, ty);
    module.execution_modes.push(Instruction::new(
        spirv::Op::ExecutionMode,
        None,
        None,
        vec![
            Operand::IdRef(main),
            Operand::ExecutionMode(spirv::ExecutionMode::SignedZeroInfNanPreserve),
            Operand::LiteralBit32(64),
        ],
    ));
}

/// Decorates every float add, subtract, multiply, divide and remainder `NoContraction`: the
/// prims round each operation, and a driver may otherwise fuse a multiply and an add.
pub(super) fn no_contraction(module: &mut Module) {
    use spirv::Op;
    let ids: Vec<Word> = module
        .all_inst_iter()
        .filter(|i| matches!(i.class.opcode, Op::FAdd | Op::FSub | Op::FMul | Op::FDiv | Op::FRem | Op::FMod))
        .filter_map(|i| i.result_id)
        .collect();
    for id in ids {
        module.annotations.push(Instruction::new(
            Op::Decorate,
            None,
            None,
            vec![Operand::IdRef(id), Operand::Decoration(spirv::Decoration::NoContraction)],
        ));
    }
}

/// Moves every function-local `OpVariable` to the start of the function's first block, where
/// SPIR-V requires them (they are made where first needed).
pub(super) fn hoist_variables(module: &mut Module) {
    for f in &mut module.functions {
        let mut vars = Vec::new();
        for block in &mut f.blocks {
            let (v, rest): (Vec<_>, Vec<_>) =
                block.instructions.drain(..).partition(|i| i.class.opcode == spirv::Op::Variable);
            vars.extend(v);
            block.instructions = rest;
        }
        if let Some(first) = f.blocks.first_mut() {
            vars.append(&mut first.instructions);
            first.instructions = vars;
        }
    }
}
