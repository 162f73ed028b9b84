//! Library steps as generated kernels: a step the device has no hand-written shader for yet
//! is written as a kernel of the kernel IR and lowered like any other (`spirv`).
//!
//! - `matmul` (f32, with its transposes and broadcast batch dims): one invocation per output
//!   element, its dot product summed in order over `k` (a sum accumulator), then the step's
//!   epilogue kernel as its own dispatch. Correct, not fast: a tiled shader with shared
//!   memory is the next step.
//! - `cat`: a copy kernel per operand into its slab of the result.

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
