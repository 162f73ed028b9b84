//! Library steps as generated kernels: a step the device has no hand-written shader for yet
//! is written as a kernel of the kernel IR and lowered like any other (`spirv`).
//!
//! - `matmul` (f32, with its transposes and broadcast batch dims): one invocation per output
//!   element, its dot product summed in order over `k` (a sum accumulator), then the step's
//!   epilogue kernel as its own dispatch. Correct, not fast: a tiled shader with shared
//!   memory is the next step.
//! - `cat`: a copy kernel per operand into its slab of the result.
//! - `gather` from a tensor of static shape: a computed load per output element.

use crate::ir::{DType, Dim};
use crate::kernel::{
    Accumulator, BufferId, Index, Instr, Kernel, LibraryCall, MatmulCall, Program, ReduceOp, Reg, Stage, Var,
};
use crate::ops::OpKind;

/// Row-major strides of `dims`.
fn strides(dims: &[Dim]) -> Result<Vec<Dim>, String> {
    let mut out = vec![Dim::from(1u64); dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1].mul(&dims[i + 1]).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The index of operand `buf` (a matrix `[batch..., rows, cols]`, transposed when `t`) at
/// output batch point `Outer(0..nb)`, matrix row `row` and column `col` (loop variables):
/// batch dims aligned to the output's from the right, a dim of 1 against a larger one read
/// with stride 0.
fn operand_index(p: &Program, buf: BufferId, out_batch: &[Dim], t: bool, row: Var, col: Var) -> Result<Index, String> {
    let dims = p.buffers[buf].shape.dims().to_vec();
    let rank = dims.len();
    let st = strides(&dims)?;
    let nb = out_batch.len();
    let own_batch = rank - 2;
    let mut terms = Vec::new();
    for (i, d) in dims[..own_batch].iter().enumerate() {
        let o = nb - own_batch + i;
        if *d == out_batch[o] {
            terms.push((Var::Outer(o as u32), st[i].clone()));
        } else if d.as_const() != Some(1) {
            return Err(format!("{buf}: batch dim {d} against {}", out_batch[o]));
        }
    }
    let (r, c) = if t { (rank - 1, rank - 2) } else { (rank - 2, rank - 1) };
    terms.push((row, st[r].clone()));
    terms.push((col, st[c].clone()));
    Ok(Index { offset: Dim::from(0u64), terms })
}

/// `m` as a kernel: outer loops over the output's dims, one inner loop over `k`.
pub fn matmul_kernel(m: &MatmulCall, p: &Program, name: String) -> Result<Kernel, String> {
    let dt = |b: BufferId| p.buffers[b].dtype;
    if dt(m.a) != DType::F32 || dt(m.b) != DType::F32 || dt(m.out) != DType::F32 {
        return Err("a matmul that is not all f32".into());
    }
    let out = p.buffers[m.out].shape.dims().to_vec();
    let (ra, rb) = (p.buffers[m.a].shape.rank(), p.buffers[m.b].shape.rank());
    if out.len() < 2 || ra < 2 || rb < 2 {
        return Err("a matmul of vectors".into());
    }
    let nb = out.len() - 2;
    let a_dims = p.buffers[m.a].shape.dims();
    let k = if m.transpose_a { a_dims[ra - 2].clone() } else { a_dims[ra - 1].clone() };
    let (i, j, kk) = (Var::Outer(nb as u32), Var::Outer(nb as u32 + 1), Var::Inner(0));
    let a = operand_index(p, m.a, &out[..nb], m.transpose_a, i, kk)?;
    let b = operand_index(p, m.b, &out[..nb], m.transpose_b, kk, j)?;
    let out_strides = strides(&out)?;
    let store = Index {
        offset: Dim::from(0u64),
        terms: out_strides.iter().enumerate().map(|(d, s)| (Var::Outer(d as u32), s.clone())).collect(),
    };
    let r = |n: u32| Reg::from_u32(n);
    let dot = Stage {
        inner: vec![k],
        accumulators: vec![Accumulator { op: ReduceOp::Sum, dtype: DType::F32, result: r(3) }],
        body: vec![
            Instr::Load { dst: r(0), buf: m.a, index: a },
            Instr::Load { dst: r(1), buf: m.b, index: b },
            Instr::Binary { dst: r(2), op: OpKind::Mul, a: r(0), b: r(1), dtype: DType::F32 },
            Instr::Accumulate { acc: 0, x: r(2), index: None },
        ],
    };
    let write = Stage {
        inner: vec![],
        accumulators: vec![],
        body: vec![Instr::Store { buf: m.out, index: store, value: r(3) }],
    };
    Ok(Kernel { name, outer: out, stages: vec![dot, write], n_regs: 4, covers: Vec::new(), activation: None })
}

/// `cat` as one copy kernel per operand: each writes its operand into its slab of the result
/// along the axis (any dtype the device holds).
pub fn cat_kernels(l: &LibraryCall, p: &Program, name: &str) -> Result<Vec<Kernel>, String> {
    let out = p.buffers[l.out].shape.dims().to_vec();
    let axis = crate::ops::util::normalize_axis(l.attrs.int("axis"), out.len()).map_err(|e| e.to_string())?;
    let out_strides = strides(&out)?;
    let mut at = Dim::from(0u64);
    let mut kernels = Vec::with_capacity(l.args.len());
    for (n, &arg) in l.args.iter().enumerate() {
        if p.buffers[arg].dtype != p.buffers[l.out].dtype {
            return Err("a cat of mixed dtypes".into());
        }
        let dims = p.buffers[arg].shape.dims().to_vec();
        let own = strides(&dims)?;
        let var = |d: usize| Var::Outer(d as u32);
        let load = Index {
            offset: Dim::from(0u64),
            terms: own.iter().enumerate().map(|(d, s)| (var(d), s.clone())).collect(),
        };
        let offset = at.mul(&out_strides[axis]).map_err(|e| e.to_string())?;
        let store = Index { offset, terms: out_strides.iter().enumerate().map(|(d, s)| (var(d), s.clone())).collect() };
        let r0 = Reg::from_u32(0);
        let copy = Stage {
            inner: vec![],
            accumulators: vec![],
            body: vec![
                Instr::Load { dst: r0, buf: arg, index: load },
                Instr::Store { buf: l.out, index: store, value: r0 },
            ],
        };
        at = at.add(&dims[axis]).map_err(|e| e.to_string())?;
        kernels.push(Kernel {
            name: format!("{name}_{n}"),
            outer: dims,
            stages: vec![copy],
            n_regs: 1,
            covers: Vec::new(),
            activation: None,
        });
    }
    Ok(kernels)
}

/// `gather` (torch's: `out[p] = x[p with p[axis] = index[p]]`, negative indices from the end)
/// as a kernel over the index's positions, for an `x` of static shape (its strides are then
/// constants the kernel computes the element offset with): an index outside the axis makes
/// the offset -1, which the computed load reports as a run-time error.
pub fn gather_kernel(l: &LibraryCall, p: &Program, name: String) -> Result<Kernel, String> {
    let (x, index) = match l.args[..] {
        [x, index] => (x, index),
        _ => return Err("a gather without two operands".into()),
    };
    let dims: Vec<u64> = p.buffers[x]
        .shape
        .dims()
        .iter()
        .map(Dim::as_const)
        .collect::<Option<_>>()
        .ok_or("a gather from a tensor of symbolic shape")?;
    let axis = crate::ops::util::normalize_axis(l.attrs.int("axis"), dims.len()).map_err(|e| e.to_string())?;
    let idt = p.buffers[index].dtype;
    if !matches!(idt, DType::I32 | DType::I64) {
        return Err(format!("{idt} indices"));
    }
    let out = p.buffers[index].shape.dims().to_vec();
    let x_strides: Vec<i64> = (0..dims.len()).map(|d| dims[d + 1..].iter().product::<u64>() as i64).collect();
    let own = strides(&out)?;
    let var = |d: usize| Var::Outer(d as u32);
    let all = |s: &[Dim]| Index {
        offset: Dim::from(0u64),
        terms: s.iter().enumerate().map(|(d, s)| (var(d), s.clone())).collect(),
    };
    let mut body = Vec::new();
    let mut n = 0u32;
    let mut reg = || {
        n += 1;
        Reg::from_u32(n - 1)
    };
    let i64c = |dst: Reg, v: i64| Instr::Const { dst, value: crate::kernel::Scalar::Int(v), dtype: DType::I64 };
    let (raw, i, zero, size) = (reg(), reg(), reg(), reg());
    body.push(Instr::Load { dst: raw, buf: index, index: all(&own) });
    body.push(Instr::Convert { dst: i, x: raw, dtype: DType::I64 });
    body.push(i64c(zero, 0));
    body.push(i64c(size, dims[axis] as i64));
    // The index from the end when negative; whether it is then inside the axis.
    let (neg, wrapped, at, lo, hi, ok, minus1) = (reg(), reg(), reg(), reg(), reg(), reg(), reg());
    body.push(Instr::Binary { dst: neg, op: OpKind::Lt, a: i, b: zero, dtype: DType::Bool });
    body.push(Instr::Binary { dst: wrapped, op: OpKind::Add, a: i, b: size, dtype: DType::I64 });
    body.push(Instr::Select { dst: at, cond: neg, a: wrapped, b: i, dtype: DType::I64 });
    body.push(Instr::Binary { dst: lo, op: OpKind::Ge, a: at, b: zero, dtype: DType::Bool });
    body.push(Instr::Binary { dst: hi, op: OpKind::Lt, a: at, b: size, dtype: DType::Bool });
    body.push(Instr::Binary { dst: ok, op: OpKind::And, a: lo, b: hi, dtype: DType::Bool });
    body.push(i64c(minus1, -1));
    // The flat offset in x: the output position with the axis replaced.
    let mut flat = None;
    for (d, &stride) in x_strides.iter().enumerate() {
        let coord = if d == axis {
            at
        } else {
            let v = reg();
            body.push(Instr::LoopVar { dst: v, var: var(d), dtype: DType::I64 });
            v
        };
        let (s, term) = (reg(), reg());
        body.push(i64c(s, stride));
        body.push(Instr::Binary { dst: term, op: OpKind::Mul, a: coord, b: s, dtype: DType::I64 });
        flat = Some(match flat {
            None => term,
            Some(acc) => {
                let sum = reg();
                body.push(Instr::Binary { dst: sum, op: OpKind::Add, a: acc, b: term, dtype: DType::I64 });
                sum
            }
        });
    }
    let flat = flat.ok_or("a gather from a scalar")?;
    // An index outside the axis could still give an offset inside x: make it -1.
    let final_at = reg();
    body.push(Instr::Select { dst: final_at, cond: ok, a: flat, b: minus1, dtype: DType::I64 });
    let value = reg();
    body.push(Instr::LoadAt { dst: value, buf: x, index: final_at });
    body.push(Instr::Store { buf: l.out, index: all(&strides(&out)?), value });
    Ok(Kernel {
        name,
        outer: out,
        stages: vec![Stage { inner: vec![], accumulators: vec![], body }],
        n_regs: n,
        covers: Vec::new(),
        activation: None,
    })
}
